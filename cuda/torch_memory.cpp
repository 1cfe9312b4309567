// LibTorch's CUDA caching allocator, seen from the memory checks (cuda/device.h). Compiled by the host compiler;
// the call is made only where the build found it compiles against this LibTorch (cuda/CMakeLists.txt).
#include "cuda/device.h"

#if defined(MISMATCH_TORCH_CUDA_ALLOCATOR)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace mismatch::cuda {

bool releaseCachedMemory()
{
#if defined(MISMATCH_TORCH_CUDA_ALLOCATOR)
    // Blocks of freed tensors go back to the driver (every device; waits for the work queued on them). Blocks of
    // live tensors stay: only memory nothing uses is released.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return true;
#else
    return false;
#endif
}

}  // namespace mismatch::cuda

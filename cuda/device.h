#pragma once
// Device discovery without LibTorch: works in builds against a CPU-only LibTorch too (releaseCachedMemory, the
// one call into LibTorch, then reports that it cannot).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::cuda {

struct DeviceInfo {
    int index = 0;
    std::string name;
    int computeMajor = 0;
    int computeMinor = 0;
    std::size_t totalMemoryBytes = 0;
};

// Usable CUDA devices; empty when there is no driver or no device (never throws for that case).
std::vector<DeviceInfo> devices();
// Free memory of device `index` now (cudaMemGetInfo: what no process, this one included, holds); none when
// the device cannot be queried.
std::optional<std::size_t> freeMemoryBytes(int index);
// Gives the blocks LibTorch's CUDA caching allocator keeps for freed tensors back to the driver, so that
// freeMemoryBytes counts them as free (an earlier job of the same process, such as a GUI session, leaves them
// cached); false when this build cannot (a LibTorch without CUDA, or one where the call did not compile).
bool releaseCachedMemory();
// CUDA runtime version the kernels were built with, as "major.minor".
std::string runtimeVersion();

}  // namespace mismatch::cuda

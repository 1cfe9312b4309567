#pragma once
// Every CUDA runtime call goes through MISMATCH_CUDA_CHECK, which records the call, file and line.
#include <stdexcept>
#include <string>

namespace mismatch::cuda {

class CudaError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void throwCudaError(int code, const char* call, const char* file, int line);

}  // namespace mismatch::cuda

#define MISMATCH_CUDA_CHECK(call)                                                        \
    do {                                                                                 \
        const auto mismatchCudaStatus_ = (call);                                         \
        if (static_cast<int>(mismatchCudaStatus_) != 0) {                                \
            ::mismatch::cuda::throwCudaError(static_cast<int>(mismatchCudaStatus_), #call, __FILE__, __LINE__); \
        }                                                                                \
    } while (0)

#include "cuda/check.h"
#include "cuda/device.h"

#include <cuda_runtime.h>

namespace mismatch::cuda {

void throwCudaError(int code, const char* call, const char* file, int line)
{
    throw CudaError(std::string(cudaGetErrorString(static_cast<cudaError_t>(code))) + " (CUDA error " +
                    std::to_string(code) + " in " + call + " at " + file + ":" + std::to_string(line) + ")");
}

std::vector<DeviceInfo> devices()
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // no driver or no device: clear the sticky error and report none
        return {};
    }
    std::vector<DeviceInfo> result;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp properties{};
        MISMATCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, i));
        result.push_back({i, properties.name, properties.major, properties.minor, properties.totalGlobalMem});
    }
    return result;
}

std::optional<std::size_t> freeMemoryBytes(int index)
{
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) {
        cudaGetLastError();
        return std::nullopt;
    }
    std::size_t free = 0;
    std::size_t total = 0;
    const cudaError_t status = cudaMemGetInfo(&free, &total);
    cudaSetDevice(previous);
    if (status != cudaSuccess) {
        cudaGetLastError();
        return std::nullopt;
    }
    return free;
}

std::string runtimeVersion()
{
    return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
}

}  // namespace mismatch::cuda

#pragma once
// Device discovery without LibTorch: works in builds against a CPU-only LibTorch too.
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
// CUDA runtime version the kernels were built with, as "major.minor".
std::string runtimeVersion();

}  // namespace mismatch::cuda

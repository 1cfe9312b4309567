#pragma once
// Device discovery without LibTorch: works in builds against a CPU-only LibTorch too.
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
// CUDA runtime version the kernels were built with, as "major.minor".
std::string runtimeVersion();

}  // namespace mismatch::cuda

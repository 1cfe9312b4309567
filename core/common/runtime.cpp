#include "core/common/runtime.h"

#include "core/common/version.h"

#ifdef MISMATCH_HAVE_CUDA
#include "cuda/device.h"
#endif

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <torch/version.h>

#include <cstdlib>
#include <filesystem>
#include <thread>
#include <unistd.h>

namespace mismatch {

void preferPassiveOpenMpWaiting(char** argv)
{
    if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("MISMATCH_NO_REEXEC") != nullptr || argv == nullptr) {
        return;
    }
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::execv("/proc/self/exe", argv);
    // execv returned: it failed; run on with the active policy (slower, not wrong).
}

void initializeRuntime(int threads)
{
    if (threads <= 0) {
        threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    at::set_num_threads(threads);
}

RuntimeInfo runtimeInfo()
{
    RuntimeInfo info;
    info.version = kVersion;
    info.gitRevision = kGitRevision;
    info.torchVersion = TORCH_VERSION;
#ifdef MISMATCH_HAVE_CUDA
    info.cudaBuilt = true;
    info.cudaRuntime = cuda::runtimeVersion();
    for (const cuda::DeviceInfo& device : cuda::devices()) {
        info.cudaDevices.push_back(device.name + " (sm_" + std::to_string(device.computeMajor) +
                                   std::to_string(device.computeMinor) + ")");
    }
#endif
    // LibTorch can run on a device only when it was itself built with CUDA.
    info.cudaAvailable = at::hasCUDA() && !info.cudaDevices.empty();
    info.threads = at::get_num_threads();
    return info;
}

std::string resourceDirectory()
{
    namespace fs = std::filesystem;
    if (const char* env = std::getenv("MISMATCH_RESOURCE_DIR"); env && *env) {
        return env;
    }
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path installed = exe.parent_path().parent_path() / "share" / "mismatch-lab" / "resources";
        if (fs::is_directory(installed, ec)) {
            return installed.string();
        }
    }
    return MISMATCH_RESOURCE_DIR;
}

}  // namespace mismatch

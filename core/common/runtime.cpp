#include "core/common/runtime.h"

#include "core/common/version.h"

#ifdef MISMATCH_HAVE_CUDA
#include "cuda/device.h"
#endif

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <torch/version.h>

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <dlfcn.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <set>
#include <filesystem>
#include <thread>
#include <unistd.h>

namespace mismatch {

std::string openblasCoreName()
{
    using CoreName = char* (*)();
    // dlsym on the global scope: the BLAS that LibTorch loaded, whichever it is (Debian's alternatives).
    const auto function = reinterpret_cast<CoreName>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
    const char* name = function ? function() : nullptr;
    return name ? std::string(name) : std::string();
}

std::string openblasCoreChoice(const std::string& detectedCore, bool avx512, bool avx2Fma)
{
    std::string core;
    for (const char c : detectedCore) {
        core += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    // The SSE-era cores OpenBLAS's dynamic dispatch falls back to for a CPU it does not recognise.
    static const std::set<std::string> generic {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom"};
    if (!generic.count(core)) {
        return {};
    }
    if (avx512) {
        return "SkylakeX";
    }
    return avx2Fma ? "Haswell" : std::string();
}

bool limitAllocatorRetention()
{
#ifdef __GLIBC__
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) {
        return false;
    }
    return ::mallopt(M_MMAP_THRESHOLD, kAllocatorMmapThreshold) == 1;
#else
    return false;
#endif
}

void ignoreFileSizeSignal()
{
    std::signal(SIGXFSZ, SIG_IGN);
}

void prepareProcessEnvironment(char** argv)
{
    ignoreFileSizeSignal(); // first: before anything can write (and inherited by the re-executed program)
    limitAllocatorRetention();
    if (std::getenv("MISMATCH_NO_REEXEC") != nullptr || argv == nullptr) {
        return;
    }
    bool changed = false;
    if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
        ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
        changed = true;
    }
    if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
        bool avx512 = false;
        bool avx2Fma = false;
#if defined(__x86_64__) && defined(__GNUC__)
        __builtin_cpu_init();
        avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
        avx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
        const std::string core = openblasCoreChoice(openblasCoreName(), avx512, avx2Fma);
        if (!core.empty()) {
            ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
            changed = true;
        }
    }
    if (changed) {
        ::execv("/proc/self/exe", argv);
        // execv returned: it failed; run on as loaded (slower, not wrong).
    }
}

void initializeRuntime(int threads)
{
    ignoreFileSizeSignal();
    if (threads <= 0) {
        threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    }
    at::set_num_threads(threads);
}

RuntimeInfo runtimeInfo()
{
    RuntimeInfo info;
    info.version = kVersion;
    info.gitRevision = gitRevision();
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
    info.openblasCore = openblasCoreName();
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

#pragma once
// Process-wide runtime facts and set-up shared by the GUI, the CLI and the tests.
#include <string>
#include <vector>

namespace mismatch {

struct RuntimeInfo {
    std::string version;        // Mismatch Lab version
    std::string gitRevision;
    std::string torchVersion;   // LibTorch the build links
    bool cudaBuilt = false;     // cuda/ kernels compiled in
    bool cudaAvailable = false; // LibTorch has CUDA and a device is present
    std::string cudaRuntime;    // CUDA runtime the kernels were built with
    std::vector<std::string> cudaDevices;
    int threads = 1;            // LibTorch intra-op threads
};

// Sets LibTorch's intra-op thread count (Debian's build starts with one). threads <= 0 means one per core.
void initializeRuntime(int threads = 0);
RuntimeInfo runtimeInfo();

// Directory holding the built-in resources (demo models, prompt sets, recipes): MISMATCH_RESOURCE_DIR from the
// environment, else next to the installed binary (../share/mismatch-lab/resources), else the source tree's.
std::string resourceDirectory();

}  // namespace mismatch

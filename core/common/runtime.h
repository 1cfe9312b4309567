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

// Called first thing in main(): when OMP_WAIT_POLICY is not set, sets it to PASSIVE and re-executes the program
// (/proc/self/exe with the same arguments), because libgomp reads it once, when it is loaded. LibTorch's OpenMP
// threads otherwise spin after each parallel region and fight OpenBLAS's own threads for the cores: on a 2-core
// machine the demo pair's training loop ran about 9x slower (6.1 s against 0.71 s for 12 steps, measured). Does
// nothing when the variable is set (to anything) or MISMATCH_NO_REEXEC is set; if the re-execution fails the
// program simply continues.
void preferPassiveOpenMpWaiting(char** argv);

// Sets LibTorch's intra-op thread count (Debian's build starts with one). threads <= 0 means one per core.
void initializeRuntime(int threads = 0);
RuntimeInfo runtimeInfo();

// Directory holding the built-in resources (demo models, prompt sets, recipes): MISMATCH_RESOURCE_DIR from the
// environment, else next to the installed binary (../share/mismatch-lab/resources), else the source tree's.
std::string resourceDirectory();

}  // namespace mismatch

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
    std::string openblasCore;   // the kernels OpenBLAS runs (openblasCoreName); empty with another BLAS
};

// Called first thing in main(): sets what the OpenMP and BLAS libraries read only once, when they are loaded, and
// re-executes the program (/proc/self/exe with the same arguments) when it set anything:
//   OMP_WAIT_POLICY=PASSIVE when not set: LibTorch's OpenMP threads otherwise spin after each parallel region and
//     fight OpenBLAS's own threads for the cores (on a 2-core machine the demo pair's training loop ran about 9x
//     slower: 6.1 s against 0.71 s for 12 steps, measured);
//   OPENBLAS_CORETYPE when not set and OpenBLAS took its generic fallback kernels on a CPU it did not recognise
//     (openblasCoreChoice below): OpenBLAS 0.3.21 names an unknown Intel model (a virtual machine's generic "Intel
//     Xeon Processor", Sapphire Rapids) "Prescott" and multiplies with SSE3 kernels, 4x slower than its AVX-512
//     ones there (FP32 GEMM 36 against 151 GFLOP/s at 512 x 1024 x 3072, 2 threads, measured).
// Does nothing of that when MISMATCH_NO_REEXEC is set; if the re-execution fails the program simply continues.
// It also calls limitAllocatorRetention (below), which needs no re-execution, and first of all
// ignoreFileSizeSignal (below), whatever the environment and also with argv == nullptr.
void prepareProcessEnvironment(char** argv);

// Ignores SIGXFSZ for the whole process: a write past the file size limit (RLIMIT_FSIZE, `ulimit -f`) then fails
// with EFBIG, which every writer reports as an error naming the file ("File too large"), instead of the signal
// killing the process half-way through a write (issue 46: `mismatch generate -o OUT` under `ulimit -f 0` died from
// signal 25). Both programs (the CLI and the GUI) call it through prepareProcessEnvironment, and so does
// initializeRuntime.
void ignoreFileSizeSignal();

// glibc's allocator: fixes the size from which a block is mapped on its own (mmap, unmapped when freed) instead of
// carved from a heap at kAllocatorMmapThreshold (16 MiB), unless MALLOC_MMAP_THRESHOLD_ is set, which then rules.
// glibc's default threshold starts at 128 KiB and rises to the size of the largest mapped block freed, up to 32
// MiB: after the first freed 32 MiB block (a weight-noise slice, a batch's float64 logits), every tensor below 32
// MiB comes from the heaps, and freed heap blocks the next tensor does not fit stay resident. Measured on the
// Qwen3-0.6B shape, 2-core Xeon, 2026-12-05, the admission check of 32 prompts x 64 tokens (the same decisions
// and mismatches bit for bit; glibc's choice of threshold changes where memory comes from, not what is computed):
//   threshold          bf16+noise-0.05 alone (`admit --no-unit`)   six candidates + unit (tests/bench)
//   glibc's default    3.79, 4.40, 4.40, 4.90 GiB; 79-107 s         4.09 GiB, 411.7 s
//   fixed at 4 MiB     3.32, 3.46 GiB; 82-102 s                    3.44 GiB, 508.4 s (a batch's logits, ~10 MB,
//                                                                  mapped and faulted in anew at every step)
//   fixed at 16 MiB    3.59, 3.59 GiB; 77-84 s                     3.55 GiB, 416.0 s
//   fixed at 32 MiB    4.28 GiB
//   one arena          3.78, 3.78 GiB; 86-92 s
// Returns whether the threshold was set here (false: glibc is not the allocator, or the environment rules).
inline constexpr int kAllocatorMmapThreshold = 16 << 20;
bool limitAllocatorRetention();

// The OPENBLAS_CORETYPE to ask for: empty when the BLAS is not OpenBLAS, or OpenBLAS already runs kernels of the
// CPU's vector width; "SkylakeX" when OpenBLAS chose a generic SSE core on a CPU with AVX-512 (F, BW, VL, DQ),
// "Haswell" when it has AVX2 and FMA. `detectedCore` is openblas_get_corename()'s answer (lower or upper case).
std::string openblasCoreChoice(const std::string& detectedCore, bool avx512, bool avx2Fma);
// OpenBLAS's core name in this process (openblas_get_corename, looked up at run time); empty without OpenBLAS.
std::string openblasCoreName();

// Sets LibTorch's intra-op thread count (Debian's build starts with one). threads <= 0 means one per core. Also
// ignoreFileSizeSignal().
void initializeRuntime(int threads = 0);
RuntimeInfo runtimeInfo();

// Directory holding the built-in resources (demo models, prompt sets, recipes): MISMATCH_RESOURCE_DIR from the
// environment, else next to the installed binary (../share/mismatch-lab/resources), else the source tree's.
std::string resourceDirectory();

}  // namespace mismatch

#pragma once
// Where a stored result was computed (spec "Reproducibility"): the tool's version and commit and the compute path.
// BF16 GEMMs round differently across CPUs (oneDNN takes its native BF16 kernels on AVX512-BF16 and AMX, other
// kernels elsewhere, and LibTorch versions differ), so figures are re-made bit for bit only on the same path. Every
// run records this when it begins and when it is resumed (store::RunStore, runs.provenance_json); the command that
// re-makes a job's run is its stored job (runs.job_json; jobs::storedCommand).
#include <optional>
#include <string>
#include <vector>

namespace mismatch {

struct ComputePath {
    std::string cpu; // /proc/cpuinfo "model name" ("unknown" elsewhere)
    std::string bf16Kernels; // "amx_bf16", "avx512_bf16" or "none" (no native BF16 dot products)
    std::string torch; // LibTorch version the build links
    std::string blas; // OpenBLAS's kernels (runtime.h); empty with another BLAS
    std::vector<std::string> gpus; // CUDA devices LibTorch can use (none on a CPU build)
    // What must agree for stored figures to be re-made bit for bit on the CPU: "cpu bf16=<kernels> torch=<version>".
    std::string key() const;
};

ComputePath computePath();
// One record as runs.provenance_json keeps them: {"event", "utc", "tool_version", "commit", "host", "compute_path":
// {"key", "cpu", "bf16_kernels", "torch", "blas", "gpus"}, and under Slurm "slurm": {"job_id", "array_job_id",
// "array_task_id", "node"}}, as JSON text. `event`: "started" or "resumed".
std::string provenanceRecord(const std::string& event);
// This machine's host name (gethostname); nullopt when it cannot be read. The run locks and `store merge` name hosts
// with it too.
std::optional<std::string> hostName();

} // namespace mismatch

#include "core/common/provenance.h"

#include "core/common/runtime.h"
#include "core/common/utc_time.h"
#include "core/common/version.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include <unistd.h>

#include <cstdlib>
#include <utility>

namespace mismatch {

namespace {

// A field of /proc/cpuinfo's first processor ("" when absent).
std::string cpuinfoField(const std::string& name)
{
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    while (std::getline(cpuinfo, line)) {
        if (line.rfind(name, 0) == 0) {
            const auto colon = line.find(':');
            return colon == std::string::npos ? std::string() : line.substr(line.find_first_not_of(' ', colon + 1));
        }
    }
    return {};
}

bool hasFlag(const std::string& flags, const std::string& flag)
{
    std::istringstream words(flags);
    std::string word;
    while (words >> word) {
        if (word == flag) {
            return true;
        }
    }
    return false;
}

} // namespace

std::string ComputePath::key() const
{
    return "cpu bf16=" + bf16Kernels + " torch=" + torch;
}

ComputePath computePath()
{
    ComputePath path;
    path.cpu = cpuinfoField("model name");
    if (path.cpu.empty()) {
        path.cpu = "unknown";
    }
    const std::string flags = cpuinfoField("flags");
    path.bf16Kernels = hasFlag(flags, "amx_bf16") ? "amx_bf16" : hasFlag(flags, "avx512_bf16") ? "avx512_bf16" : "none";
    const RuntimeInfo runtime = runtimeInfo();
    path.torch = runtime.torchVersion;
    path.blas = runtime.openblasCore;
    if (runtime.cudaAvailable) {
        path.gpus = runtime.cudaDevices;
    }
    return path;
}

std::optional<std::string> hostName()
{
    char name[256] = {};
    return ::gethostname(name, sizeof name - 1) == 0 ? std::optional<std::string>(name) : std::nullopt;
}

std::string provenanceRecord(const std::string& event)
{
    const ComputePath path = computePath();
    nlohmann::json record = {{"event", event}, {"utc", utcTimestamp()}, {"tool_version", kVersion},
        {"commit", gitRevision()}, {"host", hostName().value_or("unknown")},
        {"compute_path", {{"key", path.key()}, {"cpu", path.cpu}, {"bf16_kernels", path.bf16Kernels},
                             {"torch", path.torch}, {"blas", path.blas}, {"gpus", path.gpus}}}};
    // A unit run by Slurm (issue 43): its job, and its array task, which `store merge` carries into the workspace.
    if (const char* job = std::getenv("SLURM_JOB_ID"); job && *job) {
        nlohmann::json slurm = {{"job_id", job}};
        for (const auto& [key, variable] : {std::pair<const char*, const char*>("array_job_id", "SLURM_ARRAY_JOB_ID"),
                 std::pair<const char*, const char*>("array_task_id", "SLURM_ARRAY_TASK_ID"),
                 std::pair<const char*, const char*>("node", "SLURMD_NODENAME")}) {
            if (const char* value = std::getenv(variable); value && *value) {
                slurm[key] = value;
            }
        }
        record["slurm"] = slurm;
    }
    return record.dump();
}

} // namespace mismatch

#pragma once
// Will a model fit? Before model::loadWeights allocates anything it estimates the memory the loaded weights take
// (every parameter as float32, plus the largest tensor once more in its stored dtype while it is converted) and
// compares it with the memory available to this process:
//   MemAvailable of /proc/meminfo,
//   the address-space limit (RLIMIT_AS) less the address space already mapped (VmSize), when a limit is set,
//   the cgroup's memory.max less memory.current (cgroup v2; memory.limit_in_bytes less usage in v1), when set,
// whichever is smallest. The environment variable MISMATCH_MEMORY_LIMIT_BYTES (a whole number of bytes) replaces
// all of these (tests, or a user who wants to keep headroom). A model that does not fit is refused with a
// ResourceError naming the directory, the estimate, the parameter count, what is available and where that figure
// came from, before any tensor is read; nothing else changes (the workspace stays usable).
#include <cstdint>
#include <optional>
#include <string>

namespace mismatch::model {

struct AvailableMemory {
    std::uint64_t bytes = 0;
    std::string source; // "MemAvailable", "RLIMIT_AS", "cgroup memory.max", "MISMATCH_MEMORY_LIMIT_BYTES"
};
// The memory available now (see above); none when nothing could be read (then nothing is refused).
std::optional<AvailableMemory> availableMemory();

// "1.50 GiB", "3.25 MiB", "812 B".
std::string memoryText(std::uint64_t bytes);

// ResourceError when `bytesNeeded` exceeds the available memory:
//   "model DIR needs about X to load (N parameters as float32) but only Y is available (SOURCE); nothing was loaded"
void checkModelFits(const std::string& directory, std::int64_t parameters, std::uint64_t bytesNeeded);

// InputError(what, "", "asks for X but only Y is available (SOURCE)") when a buffer sized by the user (the KV
// cache's --kv-memory) exceeds the available memory: allocating it would fail late or drive the machine into swap.
void checkRequestFits(const std::string& what, std::uint64_t bytesRequested);

} // namespace mismatch::model

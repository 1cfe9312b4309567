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
// came from, before any tensor is read; nothing else changes (the workspace stays usable). Jobs check first what
// they will hold as a whole (checkJobFits: weights, engines, KV cache, trainer state, teacher), then each load
// checks itself again against what is left.
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::model {

struct AvailableMemory {
    std::uint64_t bytes = 0;
    std::string source; // "MemAvailable", "RLIMIT_AS", "cgroup memory.max", "MISMATCH_MEMORY_LIMIT_BYTES"
};
// The memory available now (see above); none when nothing could be read (then nothing is refused).
std::optional<AvailableMemory> availableMemory();


// ResourceError when `bytesNeeded` exceeds the available memory:
//   "model DIR needs about X to load (N parameters HOW) but only Y is available (SOURCE); nothing was loaded"
// where HOW says in what they are held ("as float32", "in their stored dtypes").
void checkModelFits(const std::string& directory, std::int64_t parameters, std::uint64_t bytesNeeded,
    const std::string& how = "as float32");

// One part of what a job will hold (engine/memory_plan.h estimates them).
struct MemoryItem {
    std::string what; // "weights of DIR as stored", "engine weights (largest candidate)", "KV cache", ...
    std::uint64_t bytes = 0;
    // Read into host memory before it moves to the job's device (a checkpoint's weights): on a device job the
    // host must hold the largest such item for a moment.
    bool stagedOnHost = false;
};
std::uint64_t totalBytes(const std::vector<MemoryItem>& items);
// The check a job makes before loading anything: ResourceError when the items' total exceeds the available
// memory, naming every item:
//   "JOB needs about X (what: x + what: y + ...) but only Y is available (SOURCE); nothing was loaded"
void checkJobFits(const std::string& job, const std::vector<MemoryItem>& items);
// The same for a job on `device`: on the CPU as above; on a CUDA device every item is held
// there, so the total is compared with the device's free memory (availableDeviceMemory), and the largest item
// staged on the host with the host's available memory:
//   "JOB needs about X on cuda:0 (what: x + ...) but only Y is free there (SOURCE); nothing was loaded"
void checkJobFits(const std::string& job, const std::vector<MemoryItem>& items, const at::Device& device);

// Free memory of a CUDA device now: the environment variable MISMATCH_DEVICE_MEMORY_LIMIT_BYTES (a whole
// number of bytes) when set (tests, or keeping headroom), else cudaMemGetInfo's free bytes in a build with the
// CUDA kernels, after this process's LibTorch caching allocator has given back the blocks of freed tensors
// (cuda::releaseCachedMemory, in builds against a LibTorch with CUDA; elsewhere they count as used); none
// otherwise (then nothing is refused).
std::optional<AvailableMemory> availableDeviceMemory(const at::Device& device);

// InputError(what, "", "asks for X but only Y is available (SOURCE)") when a buffer sized by the user (the KV
// cache's --kv-memory) exceeds the available memory: allocating it would fail late or drive the machine into swap.
void checkRequestFits(const std::string& what, std::uint64_t bytesRequested);

} // namespace mismatch::model

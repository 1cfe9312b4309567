#include "core/model/memory_check.h"

#include "core/common/byte_size.h"
#include "core/common/device.h"
#include "core/common/error.h"

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/device.h"
#endif

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mismatch::model {

namespace {

// "Key:   1234 kB" lines of /proc files; the value in bytes.
std::optional<std::uint64_t> procKilobytes(const char* file, const std::string& key)
{
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream values(line.substr(key.size() + 1));
            std::uint64_t kilobytes = 0;
            if (values >> kilobytes) {
                return kilobytes * 1024;
            }
        }
    }
    return std::nullopt;
}

// A file holding one number ("max" or unreadable: none).
std::optional<std::uint64_t> fileNumber(const char* path)
{
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") {
        return std::nullopt;
    }
    try {
        std::size_t used = 0;
        const unsigned long long value = std::stoull(text, &used);
        return used == text.size() ? std::optional<std::uint64_t>(value) : std::nullopt;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

void consider(std::optional<AvailableMemory>& best, std::uint64_t bytes, const char* source)
{
    if (!best || bytes < best->bytes) {
        best = AvailableMemory {bytes, source};
    }
}

// A limit set in the environment variable `name` (a whole number of bytes); none when unset.
std::optional<AvailableMemory> limitFromEnvironment(const char* name)
{
    const char* text = std::getenv(name);
    if (!text || !*text) {
        return std::nullopt;
    }
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (end && *end == '\0') {
        return AvailableMemory {value, name};
    }
    throw InputError(name, "", "expected a whole number of bytes, got '" + std::string(text) + "'");
}

// "what: x + what: y + ..." of the items that hold anything (a refusal names every part).
std::string itemsText(const std::vector<MemoryItem>& items)
{
    std::string parts;
    for (const MemoryItem& item : items) {
        if (item.bytes > 0) {
            parts += (parts.empty() ? "" : " + ") + item.what + ": " + formatByteSize(item.bytes);
        }
    }
    return parts;
}

} // namespace

std::optional<AvailableMemory> availableMemory()
{
    if (auto limit = limitFromEnvironment("MISMATCH_MEMORY_LIMIT_BYTES")) {
        return limit;
    }
    std::optional<AvailableMemory> best;
    if (const auto available = procKilobytes("/proc/meminfo", "MemAvailable")) {
        consider(best, *available, "MemAvailable");
    }
    rlimit limit {};
    if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
        const std::uint64_t mapped = procKilobytes("/proc/self/status", "VmSize").value_or(0);
        const auto cap = static_cast<std::uint64_t>(limit.rlim_cur);
        consider(best, cap > mapped ? cap - mapped : 0, "RLIMIT_AS");
    }
    if (const auto max = fileNumber("/sys/fs/cgroup/memory.max")) {
        const std::uint64_t current = fileNumber("/sys/fs/cgroup/memory.current").value_or(0);
        consider(best, *max > current ? *max - current : 0, "cgroup memory.max");
    } else if (const auto v1 = fileNumber("/sys/fs/cgroup/memory/memory.limit_in_bytes"); v1 && *v1 < (1ull << 60)) {
        const std::uint64_t usage = fileNumber("/sys/fs/cgroup/memory/memory.usage_in_bytes").value_or(0);
        consider(best, *v1 > usage ? *v1 - usage : 0, "cgroup memory.limit_in_bytes");
    }
    return best;
}

void checkModelFits(
    const std::string& directory, std::int64_t parameters, std::uint64_t bytesNeeded, const std::string& how)
{
    const auto available = availableMemory();
    if (!available || bytesNeeded <= available->bytes) {
        return;
    }
    throw ResourceError("model " + directory + " needs about " + formatByteSize(bytesNeeded) + " ("
        + std::to_string(bytesNeeded) + " bytes) to load (" + std::to_string(parameters) + " parameters " + how + ") but only "
        + formatByteSize(available->bytes) + " (" + std::to_string(available->bytes) + " bytes) is available ("
        + available->source + "); nothing was loaded");
}

std::uint64_t totalBytes(const std::vector<MemoryItem>& items)
{
    std::uint64_t total = 0;
    for (const MemoryItem& item : items) {
        total += item.bytes;
    }
    return total;
}

void checkJobFits(const std::string& job, const std::vector<MemoryItem>& items)
{
    const std::uint64_t needed = totalBytes(items);
    const auto available = availableMemory();
    if (!available || needed <= available->bytes) {
        return;
    }
    throw ResourceError(job + " needs about " + formatByteSize(needed) + " (" + itemsText(items) + ") but only "
        + formatByteSize(available->bytes) + " (" + std::to_string(available->bytes) + " bytes) is available ("
        + available->source + "); nothing was loaded");
}

std::optional<AvailableMemory> availableDeviceMemory(const at::Device& device)
{
    if (auto limit = limitFromEnvironment("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES")) {
        return limit;
    }
#if defined(MISMATCH_HAVE_CUDA)
    if (device.is_cuda()) {
        // What this process's caching allocator keeps for freed tensors is free for the job: given back first.
        const bool released = cuda::releaseCachedMemory();
        if (const auto free = cuda::freeMemoryBytes(device.has_index() ? device.index() : 0)) {
            return AvailableMemory {static_cast<std::uint64_t>(*free),
                released ? "cudaMemGetInfo, after LibTorch's cached blocks were released" : "cudaMemGetInfo"};
        }
    }
#else
    (void)device;
#endif
    return std::nullopt;
}

void checkJobFits(const std::string& job, const std::vector<MemoryItem>& items, const at::Device& device)
{
    if (device.is_cpu()) {
        checkJobFits(job, items);
        return;
    }
    const std::uint64_t needed = totalBytes(items);
    if (const auto available = availableDeviceMemory(device); available && needed > available->bytes) {
        throw ResourceError(job + " needs about " + formatByteSize(needed) + " on " + deviceName(device) + " ("
            + itemsText(items) + ") but only " + formatByteSize(available->bytes) + " ("
            + std::to_string(available->bytes) + " bytes) is free there (" + available->source
            + "); nothing was loaded");
    }
    const MemoryItem* staged = nullptr;
    for (const MemoryItem& item : items) {
        if (item.stagedOnHost && (!staged || item.bytes > staged->bytes)) {
            staged = &item;
        }
    }
    if (staged) {
        checkJobFits(job + " (loading for " + deviceName(device) + ")",
            {{staged->what + ", read on the host first", staged->bytes}});
    }
}

void checkRequestFits(const std::string& what, std::uint64_t bytesRequested)
{
    const auto available = availableMemory();
    if (!available || bytesRequested <= available->bytes) {
        return;
    }
    throw InputError(what, "",
        "asks for " + formatByteSize(bytesRequested) + " (" + std::to_string(bytesRequested) + " bytes) but only "
            + formatByteSize(available->bytes) + " is available (" + available->source + ")");
}

} // namespace mismatch::model

#include "core/common/fresh_pages.h"

#include <sys/mman.h>
#include <unistd.h>

namespace mismatch {

namespace {

#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23; // Linux 5.14's value, for older C library headers
#endif

} // namespace

void makePagesPresent(void* data, std::uint64_t bytes)
{
    const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto first = (reinterpret_cast<std::uintptr_t>(data) + page - 1) / page * page;
    const auto last = (reinterpret_cast<std::uintptr_t>(data) + bytes) / page * page;
    if (last > first) {
        ::madvise(reinterpret_cast<void*>(first), last - first, kPopulateWrite);
    }
}

} // namespace mismatch

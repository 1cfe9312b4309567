#include "core/common/spill_file.h"

#include "core/common/error.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace mismatch {

namespace {

// statfs(2) f_type values of the file systems that keep their files in memory.
constexpr long kTmpfsMagic = 0x01021994;
constexpr long kRamfsMagic = 0x858458f6;
constexpr std::uint64_t kSpillReserve = std::uint64_t {1} << 30; // left free for everything else

std::string systemReason()
{
    return std::strerror(errno);
}

} // namespace

SpillFile::SpillFile(const std::string& directory, std::string purpose)
    : directory_(directory)
    , purpose_(std::move(purpose))
{
#ifdef O_TMPFILE
    fd_ = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
    if (fd_ < 0) {
        // File systems without O_TMPFILE: a unique name, unlinked as soon as it is open.
        std::string name = directory + "/mismatch-spill-XXXXXX";
        std::vector<char> buffer(name.begin(), name.end());
        buffer.push_back('\0');
        fd_ = ::mkostemp(buffer.data(), O_CLOEXEC);
        if (fd_ < 0) {
            throw Error(purpose_ + ": cannot create a temporary file in " + directory + ": " + systemReason());
        }
        ::unlink(buffer.data());
    }
}

SpillFile::~SpillFile()
{
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

namespace {

// `bytes` at `offset` through `call` (pread or pwrite on the spill file's descriptor, with the buffer at `done`
// bytes in), retried after interruptions and short transfers; Error naming `purpose`, `verb`, the directory and the
// reason (`empty` when a call moves nothing).
template <typename Call>
void transferWhole(std::uint64_t offset, std::uint64_t bytes, const std::string& purpose, const char* verb,
    const std::string& directory, const char* empty, Call call)
{
    std::uint64_t done = 0;
    while (done < bytes) {
        const ssize_t moved = call(done, bytes - done, static_cast<off_t>(offset + done));
        if (moved < 0 && errno == EINTR) {
            continue;
        }
        if (moved <= 0) {
            throw Error(purpose + ": " + verb + " " + std::to_string(bytes - done) + " bytes at offset "
                + std::to_string(offset + done) + " of a temporary file in " + directory + " failed: "
                + (moved < 0 ? systemReason() : std::string(empty)));
        }
        done += static_cast<std::uint64_t>(moved);
    }
}

} // namespace

void SpillFile::write(std::uint64_t offset, const void* data, std::uint64_t bytes)
{
    const char* from = static_cast<const char*>(data);
    transferWhole(offset, bytes, purpose_, "writing", directory_, "nothing written",
        [&](std::uint64_t done, std::uint64_t count, off_t at) { return ::pwrite(fd_, from + done, count, at); });
}

void SpillFile::read(std::uint64_t offset, void* data, std::uint64_t bytes) const
{
    char* to = static_cast<char*>(data);
    transferWhole(offset, bytes, purpose_, "reading", directory_, "the file ends before them",
        [&](std::uint64_t done, std::uint64_t count, off_t at) { return ::pread(fd_, to + done, count, at); });
}

std::string spillDirectory()
{
    const char* tmpdir = std::getenv("TMPDIR");
    return tmpdir && *tmpdir ? std::string(tmpdir) : std::string("/var/tmp");
}

bool spillFits(const std::string& directory, std::uint64_t bytes, std::string* why)
{
    const auto refuse = [why](const std::string& reason) {
        if (why) {
            *why = reason;
        }
        return false;
    };
    struct statfs system {};
    if (::statfs(directory.c_str(), &system) != 0) {
        return refuse(directory + ": " + systemReason());
    }
    if (static_cast<long>(system.f_type) == kTmpfsMagic || static_cast<long>(system.f_type) == kRamfsMagic) {
        return refuse(directory + " keeps its files in memory (tmpfs or ramfs)");
    }
    struct statvfs space {};
    if (::statvfs(directory.c_str(), &space) != 0) {
        return refuse(directory + ": " + systemReason());
    }
    const std::uint64_t available = static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize;
    if (available < bytes + kSpillReserve) {
        return refuse(directory + " has " + std::to_string(available) + " bytes free, fewer than the "
            + std::to_string(bytes) + " to spill plus 1 GiB");
    }
    return true;
}

} // namespace mismatch

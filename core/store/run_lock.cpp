#include "core/store/run_lock.h"

#include "core/common/provenance.h"

#include "core/common/error.h"
#include "core/common/utc_time.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;

namespace mismatch::store {

namespace {

// What the holder wrote into the lock file ("process 1234 on host-a since 2026-...").
std::string holderText(int fd)
{
    char buffer[512] = {};
    const ssize_t got = ::pread(fd, buffer, sizeof buffer - 1, 0);
    std::string text = got > 0 ? std::string(buffer, static_cast<std::size_t>(got)) : std::string();
    while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) {
        text.pop_back();
    }
    return text.empty() ? std::string("another process") : text;
}

}  // namespace

std::string runLockPath(const std::string& databasePath, std::int64_t runId)
{
    const fs::path directory = fs::path(databasePath).parent_path();
    return ((directory.empty() ? fs::path(".") : directory) / "locks" / ("run-" + std::to_string(runId) + ".lock"))
        .string();
}

RunLock RunLock::acquire(const std::string& databasePath, std::int64_t runId)
{
    const std::string path = runLockPath(databasePath, runId);
    std::error_code error;
    fs::create_directories(fs::path(path).parent_path(), error);
    if (error) {
        throw StoreError(databasePath, "cannot create the lock directory " + fs::path(path).parent_path().string()
                                           + ": " + error.message());
    }
    RunLock lock;
    lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (lock.fd_ < 0) {
        throw StoreError(databasePath, "cannot open the lock file " + path + " of run " + std::to_string(runId) + ": "
                                           + std::strerror(errno));
    }
    if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
        const int code = errno;
        if (code == EWOULDBLOCK) {
            throw StoreError(databasePath, "run " + std::to_string(runId) + " is being written by "
                                               + holderText(lock.fd_)
                                               + "; wait for it to end or stop it before resuming the run");
        }
        throw StoreError(databasePath, "cannot lock " + path + ": " + std::strerror(code));
    }
    const std::string holder = "process " + std::to_string(::getpid()) + " on " + hostName().value_or("an unknown host") + " since " + utcTimestamp();
    if (::ftruncate(lock.fd_, 0) == 0) {
        // Only informative (for the message above); a failed write does not weaken the lock.
        [[maybe_unused]] const ssize_t written = ::pwrite(lock.fd_, holder.data(), holder.size(), 0);
    }
    return lock;
}

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_)
{
    other.fd_ = -1;
}

RunLock& RunLock::operator=(RunLock&& other) noexcept
{
    if (this != &other) {
        if (fd_ >= 0) {
            ::close(fd_);
        }
        fd_ = other.fd_;
        other.fd_ = -1;
    }
    return *this;
}

RunLock::~RunLock()
{
    if (fd_ >= 0) {
        ::close(fd_); // closing the only descriptor of the open file description releases the flock
    }
}

}  // namespace mismatch::store

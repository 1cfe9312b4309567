#pragma once
// One writer per run. A process that begins or resumes a run holds an exclusive lock on it (flock on the file
// DATABASE_DIRECTORY/locks/run-ID.lock) until the run ends or the process does: the kernel drops the lock of a
// killed process (SIGTERM, SIGKILL) and nothing survives a power loss, so a run left "running" by a dead writer
// can be resumed at once, while a resume of a run whose writer still lives is refused with the writer's process
// id and host (written into the lock file) instead of two processes storing the same steps.
#include <cstdint>
#include <string>

namespace mismatch::store {

class RunLock {
public:
    // Takes the lock of run `runId` of the workspace database `databasePath`, creating the lock file when needed.
    // StoreError(databasePath, "run N is being written by process PID on HOST since TIME; ...") when another
    // process (or another open store of this process) holds it, or naming the lock file when it cannot be made.
    static RunLock acquire(const std::string& databasePath, std::int64_t runId);

    RunLock() = default;
    RunLock(RunLock&& other) noexcept;
    RunLock& operator=(RunLock&& other) noexcept;
    RunLock(const RunLock&) = delete;
    RunLock& operator=(const RunLock&) = delete;
    ~RunLock(); // releases

    bool held() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

// The lock file of run `runId` of the workspace database `databasePath`.
std::string runLockPath(const std::string& databasePath, std::int64_t runId);

}  // namespace mismatch::store

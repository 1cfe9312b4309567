#pragma once
// Bytes a job puts aside on disk while it does not need them and reads back later (a weight set that is not in use
// for a while), so that they do not count against the memory the job holds.
#include <cstdint>
#include <string>

namespace mismatch {

// An unlinked temporary file: created in `directory` and removed from it at once (O_TMPFILE where the file system
// supports it, else a unique name unlinked right after it is opened), so no other process can open it by name and
// nothing is left behind when the process ends, however it ends. The space is freed when the object is destroyed.
// Error naming `purpose`, the directory and the system's reason when the file cannot be created, or when a write
// or read is short or fails (a full disk, an I/O error).
class SpillFile {
public:
    SpillFile(const std::string& directory, std::string purpose);
    ~SpillFile();
    SpillFile(const SpillFile&) = delete;
    SpillFile& operator=(const SpillFile&) = delete;

    void write(std::uint64_t offset, const void* data, std::uint64_t bytes);
    void read(std::uint64_t offset, void* data, std::uint64_t bytes) const;
    const std::string& directory() const { return directory_; }

private:
    int fd_ = -1;
    std::string directory_;
    std::string purpose_;
};

// Where jobs spill: $TMPDIR when it is set, else /var/tmp (the directory the FHS keeps for temporary files on disk;
// /tmp is a tmpfs on many systems, Debian 13's by default, where spilled bytes would stay in memory).
std::string spillDirectory();

// Whether `directory` can take `bytes` of spilled data: it exists, its file system keeps files on a disk (not tmpfs
// or ramfs, which hold them in memory: spilling there saves nothing), and it has `bytes` free plus 1 GiB left for
// everything else. When not, and `why` is given, says why in words.
bool spillFits(const std::string& directory, std::uint64_t bytes, std::string* why = nullptr);

} // namespace mismatch

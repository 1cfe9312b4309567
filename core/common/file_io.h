#pragma once
// Atomic file writes: the one write-temp-then-rename of the project. Whole-file reads of outside input are
// readInputFile (core/common/input_limits.h), which bounds the size and refuses FIFOs and devices.
#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace mismatch {

// Writes `path` through PATH.tmp, renamed over `path` by commit(): a reader sees the old file or the whole new
// one, never part of one. Every failure throws InputError(path, "", ...) with the system's reason ("No space left
// on device", "File too large", ...) and removes the temporary; so does destruction without commit() (an
// exception or a cancel between writes), leaving `path` as it was.
//
// A `path` that exists and is not a regular file or a directory is never replaced (issue 46: as root, renaming a
// temporary over /dev/full or /dev/null turned the device node into a regular file):
//   - a character device (/dev/null, /dev/full, /dev/stdout's terminal) or a FIFO is streamed to: opened for
//     writing as it is, written directly, no temporary and no rename. A write the device refuses is the same
//     InputError with the system's reason (/dev/full: "No space left on device"); a FIFO that no process reads
//     is refused at once ("no process reads from it") instead of waiting for a reader. Such a write is not atomic
//     (a reader may see part of it), as with any stream;
//   - a block device, a socket or any other kind of file is refused (InputError naming the kind): writing a recipe
//     over a disk is never what was meant.
// A symbolic link is followed for that decision (a link to /dev/null streams to it).
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::string path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, std::size_t size);
    void write(std::string_view text) { write(text.data(), text.size()); }
    // Flushes, closes and renames the temporary over the path.
    void commit();

private:
    [[noreturn]] void fail(const std::string& what, int error);
    // Opens the existing non-regular `path_` (of stat mode `mode`) to stream to it, or refuses it.
    void openStream(unsigned mode);
    // What write failures name: the temporary, or the path itself when streaming.
    const std::string& target() const { return streaming_ ? path_ : temporary_; }

    std::string path_;
    std::string temporary_;
    std::FILE* file_ = nullptr;
    bool streaming_ = false; // writing straight to a device or FIFO: no temporary, no rename
};

// `text` as the whole content of `path`, atomically (AtomicFileWriter; streamed to a device or FIFO).
void writeFileAtomically(const std::string& path, std::string_view text);

}  // namespace mismatch

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

    std::string path_;
    std::string temporary_;
    std::FILE* file_ = nullptr;
};

// `text` as the whole content of `path`, atomically (AtomicFileWriter).
void writeFileAtomically(const std::string& path, std::string_view text);

}  // namespace mismatch

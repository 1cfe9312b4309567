#include "core/common/file_io.h"

#include "core/common/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace mismatch {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), temporary_(path_ + ".tmp")
{
    struct stat status {};
    if (::stat(path_.c_str(), &status) == 0 && !S_ISREG(status.st_mode) && !S_ISDIR(status.st_mode)) {
        openStream(status.st_mode);
        return;
    }
    file_ = std::fopen(temporary_.c_str(), "wb");
    if (!file_) {
        fail("cannot open " + temporary_ + " for writing", errno);
    }
}

void AtomicFileWriter::openStream(unsigned mode)
{
    if (!S_ISCHR(mode) && !S_ISFIFO(mode)) {
        const char* kind = S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a regular file";
        throw InputError(path_, "",
            std::string("refusing to write: it is ") + kind
                + " (a character device such as /dev/null or a FIFO is written to; a regular file is replaced)");
    }
    // Non-blocking open: a FIFO without a reader fails at once (ENXIO) instead of waiting for one.
    const int descriptor = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (descriptor < 0) {
        const int error = errno;
        if (error == ENXIO && S_ISFIFO(mode)) {
            throw InputError(path_, "", "cannot write to the FIFO: no process reads from it");
        }
        fail("cannot open " + path_ + " for writing", error);
    }
    const int flags = ::fcntl(descriptor, F_GETFL);
    if (flags >= 0) {
        ::fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK); // then write as to any file
    }
    file_ = ::fdopen(descriptor, "wb");
    if (!file_) {
        const int error = errno;
        ::close(descriptor);
        fail("cannot open " + path_ + " for writing", error);
    }
    streaming_ = true;
}

AtomicFileWriter::~AtomicFileWriter()
{
    if (file_) {
        std::fclose(file_);
        if (!streaming_) {
            std::remove(temporary_.c_str());
        }
    }
}

void AtomicFileWriter::write(const void* data, std::size_t size)
{
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
        fail("cannot write " + target(), errno);
    }
}

void AtomicFileWriter::commit()
{
    if (std::fflush(file_) != 0) {
        fail("cannot write " + target(), errno);
    }
    std::FILE* file = std::exchange(file_, nullptr);
    if (std::fclose(file) != 0) {
        const int error = errno;
        if (!streaming_) {
            std::remove(temporary_.c_str());
        }
        fail("cannot write " + target(), error);
    }
    if (streaming_) {
        return; // written in place: nothing to rename
    }
    if (std::rename(temporary_.c_str(), path_.c_str()) != 0) {
        const int error = errno;
        std::remove(temporary_.c_str());
        fail("cannot rename " + temporary_ + " to it", error);
    }
}

void AtomicFileWriter::fail(const std::string& what, int error)
{
    // The destructor removes the temporary when it is still open.
    throw InputError(path_, "", what + (error != 0 ? ": " + std::string(std::strerror(error)) : std::string()));
}

void writeFileAtomically(const std::string& path, std::string_view text)
{
    AtomicFileWriter file(path);
    file.write(text);
    file.commit();
}

}  // namespace mismatch

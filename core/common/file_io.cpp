#include "core/common/file_io.h"

#include "core/common/error.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace mismatch {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), temporary_(path_ + ".tmp")
{
    file_ = std::fopen(temporary_.c_str(), "wb");
    if (!file_) {
        fail("cannot open " + temporary_ + " for writing", errno);
    }
}

AtomicFileWriter::~AtomicFileWriter()
{
    if (file_) {
        std::fclose(file_);
        std::remove(temporary_.c_str());
    }
}

void AtomicFileWriter::write(const void* data, std::size_t size)
{
    if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
        fail("cannot write " + temporary_, errno);
    }
}

void AtomicFileWriter::commit()
{
    if (std::fflush(file_) != 0) {
        fail("cannot write " + temporary_, errno);
    }
    std::FILE* file = std::exchange(file_, nullptr);
    if (std::fclose(file) != 0) {
        const int error = errno;
        std::remove(temporary_.c_str());
        fail("cannot write " + temporary_, error);
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

#include "core/common/input_limits.h"

#include "core/common/error.h"
#include "core/common/byte_size.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace mismatch {

namespace {

std::string systemReason(int error)
{
    return std::strerror(error);
}

// "a FIFO (named pipe)" etc. for a file that is not a regular file.
std::string fileTypeText(mode_t mode)
{
    if (S_ISDIR(mode)) {
        return "a directory";
    }
    if (S_ISFIFO(mode)) {
        return "a FIFO (named pipe)";
    }
    if (S_ISCHR(mode)) {
        return "a character device";
    }
    if (S_ISBLK(mode)) {
        return "a block device";
    }
    if (S_ISSOCK(mode)) {
        return "a socket";
    }
    return "not a regular file";
}

[[noreturn]] void notRegular(const std::string& path, mode_t mode, const std::string& what)
{
    throw InputError(path, "", "is " + fileTypeText(mode) + ", not a regular file; expected the " + what);
}

[[noreturn]] void tooLarge(const std::string& path, std::uint64_t size, const FileSizeLimit& limit, bool atLeast)
{
    const std::uint64_t allowed = limitBytes(limit);
    throw InputError(path, "",
        "is " + std::string(atLeast ? "more than " : "") + formatByteSize(size) + " (" + std::to_string(size)
            + " bytes), over the " + formatByteSize(allowed) + " limit for " + limit.kind + "; set "
            + limit.variable + "=BYTES to raise it");
}

// Closes the descriptor on every path out.
struct Descriptor {
    int fd = -1;
    ~Descriptor()
    {
        if (fd >= 0) {
            ::close(fd);
        }
    }
};

} // namespace

std::uint64_t limitBytes(const FileSizeLimit& limit)
{
    const char* text = std::getenv(limit.variable);
    if (!text || !*text) {
        return limit.defaultBytes;
    }
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(text, &end, 10);
    if (errno != 0 || !end || *end != '\0' || text[0] == '-' || text[0] == '+') {
        throw InputError(limit.variable, "", "expected a whole number of bytes, got '" + std::string(text) + "'");
    }
    return value;
}

std::string readInputFile(const std::string& path, const FileSizeLimit& limit, const std::string& what)
{
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes nothing for a regular
    // file, and anything else is refused below before a byte is read.
    Descriptor file;
    file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (file.fd < 0) {
        throw InputError(path, "", "cannot open the " + what + ": " + systemReason(errno));
    }
    struct stat status {};
    if (::fstat(file.fd, &status) != 0) {
        throw InputError(path, "", "cannot examine the " + what + ": " + systemReason(errno));
    }
    if (!S_ISREG(status.st_mode)) {
        notRegular(path, status.st_mode, what);
    }
    const std::uint64_t allowed = limitBytes(limit);
    const auto size = static_cast<std::uint64_t>(status.st_size);
    if (size > allowed) {
        tooLarge(path, size, limit, false);
    }
    // Read up to one byte past the limit: a file growing while it is read (or a /proc file, whose size reads as
    // 0) is still bounded.
    std::string text;
    text.reserve(static_cast<std::size_t>(size));
    char buffer[1 << 16];
    for (;;) {
        const ssize_t got = ::read(file.fd, buffer, sizeof buffer);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            throw InputError(path, "", "cannot read the " + what + ": " + systemReason(errno));
        }
        if (got == 0) {
            break;
        }
        text.append(buffer, static_cast<std::size_t>(got));
        if (text.size() > allowed) {
            tooLarge(path, text.size(), limit, true);
        }
    }
    return text;
}

void requireRegularFile(const std::string& path, const std::string& what)
{
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) {
        throw InputError(path, "", "cannot open the " + what + ": " + systemReason(errno));
    }
    if (!S_ISREG(status.st_mode)) {
        notRegular(path, status.st_mode, what);
    }
}

PathKind pathKind(const std::string& path)
{
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) {
        // A dangling symbolic link or a missing component is "nothing there"; a loop, a name too long or a
        // directory that cannot be searched is a problem the user has to see.
        if (errno == ENOENT || errno == ENOTDIR) {
            return PathKind::Missing;
        }
        throw InputError(path, "", "cannot be examined: " + systemReason(errno));
    }
    if (S_ISDIR(status.st_mode)) {
        return PathKind::Directory;
    }
    return S_ISREG(status.st_mode) ? PathKind::RegularFile : PathKind::Other;
}

std::size_t jsonNestingTooDeep(const char* begin, const char* end, int maxDepth)
{
    int depth = 0;
    bool inString = false;
    for (const char* p = begin; p < end; ++p) {
        const char c = *p;
        if (inString) {
            if (c == '\\') {
                ++p; // the escaped character cannot end the string
            } else if (c == '"') {
                inString = false;
            }
            continue;
        }
        if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            if (++depth > maxDepth) {
                return static_cast<std::size_t>(p - begin);
            }
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        } else if (c == '\n') {
            // JSONL: a line that leaves brackets open is malformed, and the next line starts at depth 0.
            depth = 0;
            inString = false;
        }
    }
    return std::string::npos;
}

std::string nestingTooDeepDetail()
{
    return "nested deeper than " + std::to_string(limits::kMaxNestingDepth)
        + " levels (the limit for JSON and YAML input)";
}

std::string lineColumnOf(const char* begin, const char* end, std::size_t offset)
{
    std::size_t line = 1;
    std::size_t lineStart = 0;
    const std::size_t size = static_cast<std::size_t>(end - begin);
    for (std::size_t i = 0; i < offset && i < size; ++i) {
        if (begin[i] == '\n') {
            ++line;
            lineStart = i + 1;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(offset - lineStart + 1);
}

} // namespace mismatch

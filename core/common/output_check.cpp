#include "core/common/output_check.h"

#include "core/common/error.h"

#include <sys/stat.h>

#include <filesystem>
#include <iterator>
#include <system_error>

namespace fs = std::filesystem;

namespace mismatch {

namespace {

// The path with its existing part's symbolic links, "." and ".." resolved (absolute).
fs::path resolved(const std::string& path)
{
    std::error_code error;
    const fs::path absolute = fs::absolute(path, error);
    if (error) {
        return fs::path(path).lexically_normal();
    }
    const fs::path canonical = fs::weakly_canonical(absolute, error);
    return error ? absolute.lexically_normal() : canonical;
}

bool sameInode(const struct stat& a, const struct stat& b)
{
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Whether `path` is `directory` or below it, component by component.
bool below(const fs::path& path, const fs::path& directory)
{
    auto p = path.begin();
    for (auto d = directory.begin(); d != directory.end(); ++d, ++p) {
        if (d->empty() && std::next(d) == directory.end()) {
            return true; // a trailing separator
        }
        if (p == path.end() || *p != *d) {
            return false;
        }
    }
    return true;
}

} // namespace

bool sameFile(const std::string& a, const std::string& b)
{
    if (a.empty() || b.empty()) {
        return false;
    }
    struct stat sa {};
    struct stat sb {};
    const bool aExists = ::stat(a.c_str(), &sa) == 0;
    const bool bExists = ::stat(b.c_str(), &sb) == 0;
    if (aExists && bExists) {
        return sameInode(sa, sb);
    }
    // Not there yet (or reached through a directory that does not exist: "new/../p.jsonl"): the resolved paths.
    return resolved(a) == resolved(b);
}

bool insideDirectory(const std::string& path, const std::string& directory)
{
    struct stat sd {};
    if (path.empty() || directory.empty() || ::stat(directory.c_str(), &sd) != 0 || !S_ISDIR(sd.st_mode)) {
        return false;
    }
    if (below(resolved(path), resolved(directory))) {
        return true;
    }
    struct stat sp {};
    if (::stat(path.c_str(), &sp) != 0) {
        return false;
    }
    if (sameInode(sp, sd)) {
        return true;
    }
    // Another name of one of its files (a hard link, a bind mount): the directory's own entries, a bounded look.
    std::error_code error;
    std::size_t looked = 0;
    for (fs::directory_iterator it(directory, error), end; !error && it != end && looked < 4096;
         it.increment(error), ++looked) {
        struct stat se {};
        if (::stat(it->path().c_str(), &se) == 0 && sameInode(sp, se)) {
            return true;
        }
    }
    return false;
}

void requireOutputNotInput(const std::string& output, const std::vector<NamedInput>& inputs,
    const std::vector<std::string>& modelDirectories, const std::string& what)
{
    if (output.empty()) {
        return;
    }
    for (const NamedInput& input : inputs) {
        if (sameFile(output, input.path)) {
            throw InputError(output, "",
                "refusing to write the " + what + " over the " + input.what + " " + input.path
                    + " that this command reads (the same file); write the " + what + " elsewhere");
        }
    }
    for (const std::string& directory : modelDirectories) {
        if (insideDirectory(output, directory)) {
            throw InputError(output, "",
                "refusing to write the " + what + " inside the model directory " + directory
                    + " that this command reads (it would replace the model's files); write the " + what
                    + " elsewhere");
        }
    }
}

} // namespace mismatch

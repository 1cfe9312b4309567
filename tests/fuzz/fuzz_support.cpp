#include "tests/fuzz/fuzz_target.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace fuzz {

namespace fs = std::filesystem;

std::map<std::string, TargetFunction>& registry();

bool registerTarget(const char* name, TargetFunction function)
{
    registry()[name] = function;
    return true;
}

std::map<std::string, TargetFunction>& registry()
{
    static std::map<std::string, TargetFunction> targets;
    return targets;
}

namespace {
std::string makeScratchDirectory()
{
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/mismatch-fuzz-XXXXXX";
    if (!mkdtemp(pattern.data())) {
        std::perror("mkdtemp");
        std::abort();
    }
    return pattern;
}

struct Scratch {
    std::string path = makeScratchDirectory();
    ~Scratch()
    {
        std::error_code ignored;
        fs::remove_all(path, ignored);
    }
};
} // namespace

const std::string& scratchDirectory()
{
    static const Scratch scratch;
    return scratch.path;
}

std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size)
{
    const std::string path = scratchDirectory() + "/" + name;
    std::FILE* file = std::fopen(path.c_str(), "wb");
    if (!file || (size > 0 && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
        std::perror(path.c_str());
        std::abort();
    }
    return path;
}

void check(bool condition, const char* what)
{
    if (!condition) {
        std::fprintf(stderr, "fuzz: property violated: %s\n", what);
        std::abort();
    }
}

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot read " + path);
    }
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

} // namespace fuzz

// test_fuzz_regressions: every input that once crashed a fuzz target (tests/fuzz/regressions/<target>/*) and the
// committed seeds (tests/fuzz/seeds/<target>/*) run through the same target functions, built without libFuzzer,
// so that every build (gcc included) checks them. A crash aborts the test after printing the input's path.
//
//     test_fuzz_regressions                     all targets, all inputs
//     test_fuzz_regressions TARGET FILE...      these inputs through one target (reproducing a finding)
#include "tests/fuzz/fuzz_target.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fuzz {
std::map<std::string, TargetFunction>& registry();
}

namespace fs = std::filesystem;

namespace {

void runOne(const std::string& target, fuzz::TargetFunction function, const std::string& path)
{
    std::fprintf(stderr, "%s: %s\n", target.c_str(), path.c_str());
    const std::string bytes = fuzz::readFile(path);
    function(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

std::vector<std::string> filesIn(const fs::path& directory)
{
    std::vector<std::string> files;
    if (fs::is_directory(directory)) {
        for (const fs::directory_entry& entry : fs::directory_iterator(directory)) {
            if (entry.is_regular_file() && entry.path().filename().string().front() != '.') {
                files.push_back(entry.path().string());
            }
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

} // namespace

int main(int argc, char** argv)
{
    const auto& targets = fuzz::registry();
    if (argc >= 2) {
        const auto found = targets.find(argv[1]);
        if (found == targets.end()) {
            std::fprintf(stderr, "unknown target %s; targets:", argv[1]);
            for (const auto& [name, function] : targets) {
                std::fprintf(stderr, " %s", name.c_str());
            }
            std::fprintf(stderr, "\n");
            return 2;
        }
        for (int i = 2; i < argc; ++i) {
            runOne(found->first, found->second, argv[i]);
        }
        return 0;
    }
    const fs::path root = fs::path(MISMATCH_SOURCE_DIR) / "tests" / "fuzz";
    std::size_t regressions = 0;
    std::size_t seeds = 0;
    for (const auto& [name, function] : targets) {
        for (const std::string& path : filesIn(root / "regressions" / name)) {
            runOne(name, function, path);
            ++regressions;
        }
        for (const std::string& path : filesIn(root / "seeds" / name)) {
            runOne(name, function, path);
            ++seeds;
        }
    }
    std::printf("%zu targets, %zu regression inputs and %zu seeds ran clean\n", targets.size(), regressions, seeds);
    // Every target of MISMATCH_FUZZ_TARGETS registered itself (a source left out of the list would not run).
    return targets.size() == MISMATCH_FUZZ_TARGET_COUNT ? 0 : 1;
}

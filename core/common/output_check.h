#pragma once
// Outputs that would destroy inputs: every command that writes a file refuses an output path that names one of the
// files it reads, or a file inside a model directory it reads, before it reads or computes anything (issue 46).
#include <string>
#include <vector>

namespace mismatch {

// InputError(output, "", "...") when `output` would overwrite what the command reads:
//   - it is the same file as one of `inputs` (same device and inode, after symlinks; hard links too), or, when it
//     does not exist yet, the same path as an input after resolving the symbolic links of its existing part;
//   - it is one of `modelDirectories` or lies inside one (its resolved path is below the directory's resolved path,
//     or it is the same file as a file directly inside the directory).
// The message names both ("... is the prompt set P this command reads; write the output elsewhere"). `what`
// names the output in the message ("output", "recipe file", ...). Empty paths in `inputs` or `modelDirectories`
// (an option not given) are skipped; an empty `output` (nothing written) passes. `inputs` may name directories
// too (an input named by a directory: the output may not be that directory).
struct NamedInput {
    std::string path;
    std::string what; // "recipe", "prompt set", "model directory" ...
};
void requireOutputNotInput(const std::string& output, const std::vector<NamedInput>& inputs,
    const std::vector<std::string>& modelDirectories = {}, const std::string& what = "output");

// Whether `a` and `b` name the same file (device and inode when both exist, the resolved paths otherwise).
bool sameFile(const std::string& a, const std::string& b);
// Whether `path` is `directory` or lies below it (resolved paths), or is the same file as an entry of it.
bool insideDirectory(const std::string& path, const std::string& directory);

} // namespace mismatch

#pragma once
// Where something was written in a file people edit (a recipe, a run file, a candidates file): for messages.
// No YAML here, so that headers holding locations (core/quant/recipe.h) need not include yaml-cpp.
#include <string>

namespace mismatch::io {

// The key path ("rules[2].weights", "rollout.sampling.top_p") and 1-based line and column (0: unknown, e.g. for
// a recipe built in code or a tree built without positions).
struct SourceLocation {
    std::string keyPath;
    int line = 0;
    int column = 0;
};

// "line L, column C".
std::string lineColumn(const SourceLocation& where);
// "line 7, column 5", or the key path when the line is unknown ("an unknown place" without either); for messages
// that mention a second place.
std::string describeLocation(const SourceLocation& where);
// "PATH.KEY", or KEY at the top level.
std::string childKeyPath(const std::string& path, const std::string& key);

} // namespace mismatch::io

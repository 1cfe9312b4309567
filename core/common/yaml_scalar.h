#pragma once
// What a YAML node holds, for typed validation of recipe and run files: YAML 1.2 core-schema resolution of
// plain scalars (null, booleans, integers, numbers), quoted scalars (and every JSON string) being strings.
#include <yaml-cpp/yaml.h>

#include <optional>
#include <string>
#include <vector>

namespace mismatch::io {

enum class ScalarKind { String, Integer, Number, Boolean, Null };

ScalarKind scalarKind(const YAML::Node& node);
// "a mapping", "a list", "a string", "an integer", "a number", "a boolean", "nothing (null)": for messages such
// as "expected an integer, got a string".
std::string kindName(const YAML::Node& node);
// Where a node starts in its file, 1-based as editors count (yaml-cpp counts from 0); 0 when unknown.
struct YamlPosition {
    int line = 0;
    int column = 0;
};
YamlPosition yamlPosition(const YAML::Node& node);
// Non-empty and only the digits 0-9.
bool isDigits(const std::string& text);
// YAML and JSON text must be UTF-8 (yaml-cpp passes other bytes through into scalars, which then cannot be
// written back as JSON or YAML): callers check it with firstInvalidUtf8 (core/common/utf8.h).
// yaml-cpp writes the escapes \_ and \N of double-quoted scalars as the single bytes 0xA0 and 0x85 rather than
// as UTF-8, so valid text can still parse to scalars that are not UTF-8: the first scalar (key or value) in the
// tree that is not, or nullopt when every one is.
std::optional<YAML::Node> firstNonUtf8Scalar(const YAML::Node& root);
// "line L, column C" (1-based; the column counts bytes) of a byte offset in text.
std::string lineColumnOf(const std::string& text, std::size_t offset);

// The value of a scalar of kind Integer or Number, including YAML's .nan, .inf and -.inf (callers that need a
// finite number say so with the text as written). std::out_of_range for a finite text beyond double's range.
double numberOf(const YAML::Node& node);

// Parses YAML text read from outside (a recipe, run file or candidates file) within the limits of
// core/common/input_limits.h: UTF-8 throughout (scalars included, see firstNonUtf8Scalar), collections nested
// at most limits::kMaxNestingDepth deep, at most limits::kMaxYamlAliases aliases, and their expansion adding at
// most limits::kMaxAliasNodes nodes. The limits are checked on the parser's events before any tree is built, so
// a "billion laughs" document is refused in time linear in its text. InputError(file, "line L, column C",
// DETAIL) for malformed YAML or a limit exceeded.
//
// A list limit refuses a top-level key's list longer than maxItems while scanning, at the first item past the
// limit, before the rest is parsed or any tree built (a recipe's 32,000 rules took seconds to build only to be
// refused): InputError(file, "line L, column C", "KEY: " + detail).
struct YamlListLimit {
    std::string key;         // a key of the document's top-level mapping whose value is a list
    std::size_t maxItems = 0;
    std::string detail;      // the explanation after "KEY: ", e.g. "more than 4096 rules, over the limit of 4096"
};
YAML::Node loadYaml(const std::string& text, const std::string& file, const std::vector<YamlListLimit>& listLimits = {});

}  // namespace mismatch::io

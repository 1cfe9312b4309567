#pragma once
// One reader of located YAML mappings, for the files people write by hand (recipes, run files, candidates
// files): a mapping's entries with where each key and value was written, keys outside the allowed set and repeated
// keys refused, required keys looked up, every message placed at "line L, column C" with its key path. How a
// place and a detail become an error (the InputError's location and prefix) stays with each file format.
#include "core/common/source_location.h"

#include <yaml-cpp/yaml.h>

#include <functional>
#include <string>
#include <vector>

namespace mismatch::io {

// Where `node` starts, with the key path given.
SourceLocation locate(const YAML::Node& node, const std::string& keyPath);

struct YamlEntry {
    std::string key;
    YAML::Node keyNode;
    YAML::Node value;
    SourceLocation keyLocation;   // keyPath: the entry's own path (the mapping's path, ".", the key)
    SourceLocation valueLocation; // the key's place when the value is empty (null)
};

class YamlMappingReader {
public:
    // Throws the caller's error for a detail at a place; a Fail that returns is a programming error
    // (std::logic_error is thrown then).
    using Fail = std::function<void(const SourceLocation& where, const std::string& detail)>;
    // The key path an unknown key's message is placed at: the key's own (a recipe: "weights.granularty: unknown
    // key 'granularty' in weights ...") or its mapping's (a run file: "rollout: unknown key 'stalenes' in
    // rollout ...").
    enum class UnknownKeyAt { Key, Mapping };

    explicit YamlMappingReader(Fail fail, UnknownKeyAt unknownKeyAt = UnknownKeyAt::Key);

    [[noreturn]] void fail(const SourceLocation& where, const std::string& detail) const;

    // The entries of the mapping `map` written at `where`, in file order. Refused: another node ("expected a
    // mapping, got a list" at `where`), a key that is not a non-null scalar ("expected a key name, got ..."),
    // a key outside `allowed` ("unknown key 'K' in PATH (expected one of: A, B)", without " in PATH" at the top
    // level) and a repeated key ("duplicate key 'K' (first given at line L, column C)" at the second one).
    std::vector<YamlEntry> entries(
        const YAML::Node& map, const SourceLocation& where, const std::vector<std::string>& allowed) const;
    // The entry with `key`, or nullptr.
    static const YamlEntry* find(const std::vector<YamlEntry>& entries, const std::string& key);
    // The entry with `key`; "missing required key 'K'" at `where` (the mapping's place) when there is none.
    const YamlEntry& require(
        const std::vector<YamlEntry>& entries, const std::string& key, const SourceLocation& where) const;
    // A string scalar (quoted, or plain and not a number, boolean or null): "expected a string, got an integer"
    // at the value otherwise.
    std::string stringValue(const YamlEntry& entry) const;

private:
    Fail fail_;
    UnknownKeyAt unknownKeyAt_;
};

} // namespace mismatch::io

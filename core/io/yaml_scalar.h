#pragma once
// What a YAML node holds, for typed validation of recipe and run files: YAML 1.2 core-schema resolution of
// plain scalars (null, booleans, integers, numbers), quoted scalars (and every JSON string) being strings.
#include <yaml-cpp/yaml.h>

#include <string>

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

}  // namespace mismatch::io

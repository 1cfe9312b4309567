#include "core/io/yaml_scalar.h"

#include <algorithm>
#include <exception>

namespace mismatch::io {

bool isDigits(const std::string& text)
{
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// YAML 1.2 core schema for plain scalars; quoted scalars (tag "!", also every JSON string) are strings.
ScalarKind scalarKind(const YAML::Node& node)
{
    if (node.IsNull()) {
        return ScalarKind::Null;
    }
    if (node.Tag() == "!") {
        return ScalarKind::String;
    }
    const std::string& text = node.Scalar();
    if (text == "~" || text == "null" || text == "Null" || text == "NULL") {
        return ScalarKind::Null;
    }
    if (text == "true" || text == "True" || text == "TRUE" || text == "false" || text == "False" || text == "FALSE") {
        return ScalarKind::Boolean;
    }
    std::string digits = text;
    if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) {
        digits.erase(0, 1);
    }
    if (isDigits(digits)) {
        return ScalarKind::Integer;
    }
    try {
        size_t used = 0;
        std::stod(text, &used);
        if (used == text.size()) {
            return ScalarKind::Number;
        }
    } catch (const std::exception&) {
    }
    return ScalarKind::String;
}

std::string kindName(const YAML::Node& node)
{
    if (node.IsMap()) {
        return "a mapping";
    }
    if (node.IsSequence()) {
        return "a list";
    }
    switch (scalarKind(node)) {
    case ScalarKind::String:
        return "a string";
    case ScalarKind::Integer:
        return "an integer";
    case ScalarKind::Number:
        return "a number";
    case ScalarKind::Boolean:
        return "a boolean";
    case ScalarKind::Null:
        return "nothing (null)";
    }
    return "something else";
}

YamlPosition yamlPosition(const YAML::Node& node)
{
    YamlPosition position;
    const YAML::Mark mark = node.Mark();
    if (!mark.is_null() && mark.line >= 0) {
        position.line = mark.line + 1;
        position.column = mark.column + 1;
    }
    return position;
}

}  // namespace mismatch::io

#include "core/io/yaml_scalar.h"

#include "core/common/utf8.h"

#include <algorithm>
#include <exception>

namespace mismatch::io {

std::optional<YAML::Node> firstNonUtf8Scalar(const YAML::Node& root)
{
    if (root.IsScalar()) {
        if (firstInvalidUtf8(root.Scalar()) != std::string::npos) {
            return root;
        }
    } else if (root.IsSequence()) {
        for (const YAML::Node& item : root) {
            if (std::optional<YAML::Node> bad = firstNonUtf8Scalar(item)) {
                return bad;
            }
        }
    } else if (root.IsMap()) {
        for (const auto& entry : root) {
            if (std::optional<YAML::Node> bad = firstNonUtf8Scalar(entry.first)) {
                return bad;
            }
            if (std::optional<YAML::Node> bad = firstNonUtf8Scalar(entry.second)) {
                return bad;
            }
        }
    }
    return std::nullopt;
}

std::string lineColumnOf(const std::string& text, std::size_t offset)
{
    std::size_t line = 1;
    std::size_t lineStart = 0;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            lineStart = i + 1;
        }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(offset - lineStart + 1);
}

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

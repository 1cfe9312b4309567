#include "core/io/yaml_scalar.h"

#include <algorithm>
#include <exception>

namespace mismatch::io {

std::size_t invalidUtf8Offset(const std::string& text)
{
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t size = text.size();
    std::size_t i = 0;
    while (i < size) {
        const unsigned char lead = bytes[i];
        if (lead < 0x80) {
            ++i;
            continue;
        }
        std::size_t length = 0;
        unsigned char low = 0x80; // allowed range of the second byte
        unsigned char high = 0xBF;
        if (lead >= 0xC2 && lead <= 0xDF) {
            length = 2;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            length = 3;
            low = lead == 0xE0 ? 0xA0 : 0x80; // no overlong forms
            high = lead == 0xED ? 0x9F : 0xBF; // no surrogates
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            length = 4;
            low = lead == 0xF0 ? 0x90 : 0x80;
            high = lead == 0xF4 ? 0x8F : 0xBF; // nothing above U+10FFFF
        } else {
            return i;
        }
        if (i + length > size || bytes[i + 1] < low || bytes[i + 1] > high) {
            return i;
        }
        for (std::size_t k = 2; k < length; ++k) {
            if (bytes[i + k] < 0x80 || bytes[i + k] > 0xBF) {
                return i;
            }
        }
        i += length;
    }
    return std::string::npos;
}

std::optional<YAML::Node> firstNonUtf8Scalar(const YAML::Node& root)
{
    if (root.IsScalar()) {
        if (invalidUtf8Offset(root.Scalar()) != std::string::npos) {
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

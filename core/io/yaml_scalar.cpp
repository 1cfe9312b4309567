#include "core/io/yaml_scalar.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/utf8.h"

#include <yaml-cpp/eventhandler.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

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
    return mismatch::lineColumnOf(text.data(), text.data() + text.size(), offset);
}

namespace {

// YAML 1.2 core schema: [-+]?(.inf|.Inf|.INF) and .nan|.NaN|.NAN are floats; 0 when the text is neither, else
// +1 / -1 for infinities and 2 for NaN.
int specialFloat(const std::string& text)
{
    if (text == ".nan" || text == ".NaN" || text == ".NAN") {
        return 2;
    }
    const bool negative = !text.empty() && text[0] == '-';
    const std::string body = !text.empty() && (text[0] == '-' || text[0] == '+') ? text.substr(1) : text;
    if (body == ".inf" || body == ".Inf" || body == ".INF") {
        return negative ? -1 : 1;
    }
    return 0;
}

// Checks the parser's events against the limits before yaml-cpp builds a tree (see loadYaml).
class LimitScanner : public YAML::EventHandler {
public:
    struct Exceeded {
        YAML::Mark mark;
        std::string detail;
    };

    void OnDocumentStart(const YAML::Mark&) override {}
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { leaf(anchor); }
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor, const std::string&) override
    {
        leaf(anchor);
    }
    void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override
    {
        if (++aliases_ > limits::kMaxYamlAliases) {
            throw Exceeded {mark,
                "more than " + std::to_string(limits::kMaxYamlAliases) + " aliases (*name): the limit for YAML input"};
        }
        if (openAnchors_.count(anchor)) {
            throw Exceeded {mark, "an alias inside the node it refers to (a cycle): YAML input must be a tree"};
        }
        const auto found = anchorNodes_.find(anchor);
        const std::uint64_t size = found == anchorNodes_.end() ? 1 : found->second;
        aliasNodes_ = std::min<std::uint64_t>(aliasNodes_ + size, std::numeric_limits<std::uint64_t>::max() / 2);
        if (aliasNodes_ > limits::kMaxAliasNodes) {
            throw Exceeded {mark,
                "expanding the aliases (*name) adds more than " + std::to_string(limits::kMaxAliasNodes)
                    + " nodes (each alias stands for a copy of its anchored node): the limit for YAML input"};
        }
        nodes_ = std::min<std::uint64_t>(nodes_ + size, std::numeric_limits<std::uint64_t>::max() / 2);
    }
    void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
        YAML::EmitterStyle::value) override
    {
        open(mark, anchor);
    }
    void OnSequenceEnd() override { close(); }
    void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
        YAML::EmitterStyle::value) override
    {
        open(mark, anchor);
    }
    void OnMapEnd() override { close(); }

private:
    void leaf(YAML::anchor_t anchor)
    {
        ++nodes_;
        if (anchor != YAML::NullAnchor) {
            anchorNodes_[anchor] = 1;
        }
    }
    void open(const YAML::Mark& mark, YAML::anchor_t anchor)
    {
        if (static_cast<int>(stack_.size()) >= limits::kMaxNestingDepth) {
            throw Exceeded {mark, nestingTooDeepDetail()};
        }
        stack_.push_back({anchor, nodes_});
        if (anchor != YAML::NullAnchor) {
            openAnchors_.insert(anchor);
        }
        ++nodes_;
    }
    void close()
    {
        const auto [anchor, start] = stack_.back();
        stack_.pop_back();
        if (anchor != YAML::NullAnchor) {
            openAnchors_.erase(anchor);
            anchorNodes_[anchor] = nodes_ - start; // the collection and everything in it, aliases expanded
        }
    }

    std::vector<std::pair<YAML::anchor_t, std::uint64_t>> stack_; // open collections: anchor, nodes_ at start
    std::unordered_set<YAML::anchor_t> openAnchors_;
    std::unordered_map<YAML::anchor_t, std::uint64_t> anchorNodes_; // expanded node count of each anchored node
    std::uint64_t nodes_ = 0;
    std::uint64_t aliases_ = 0;
    std::uint64_t aliasNodes_ = 0;
};

std::string markText(const YAML::Mark& mark)
{
    return "line " + std::to_string(mark.line + 1) + ", column " + std::to_string(mark.column + 1);
}

} // namespace

double numberOf(const YAML::Node& node)
{
    const std::string& text = node.Scalar();
    switch (specialFloat(text)) {
    case 1:
        return std::numeric_limits<double>::infinity();
    case -1:
        return -std::numeric_limits<double>::infinity();
    case 2:
        return std::numeric_limits<double>::quiet_NaN();
    default:
        return std::stod(text);
    }
}

YAML::Node loadYaml(const std::string& text, const std::string& file)
{
    if (const std::size_t bad = firstInvalidUtf8(text); bad != std::string::npos) {
        throw InputError(file, lineColumnOf(text, bad), "not valid UTF-8 (YAML and JSON files are UTF-8)");
    }
    try {
        std::istringstream stream(text);
        YAML::Parser parser(stream);
        LimitScanner scanner;
        parser.HandleNextDocument(scanner); // YAML::Load reads the first document only
    } catch (const LimitScanner::Exceeded& exceeded) {
        throw InputError(file, markText(exceeded.mark), exceeded.detail);
    } catch (const YAML::Exception& error) {
        throw InputError(file, markText(error.mark), "malformed YAML: " + error.msg);
    }
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& error) {
        throw InputError(file, markText(error.mark), "malformed YAML: " + error.msg);
    }
    if (const std::optional<YAML::Node> bad = firstNonUtf8Scalar(root)) {
        const YamlPosition where = yamlPosition(*bad);
        throw InputError(file, "line " + std::to_string(where.line) + ", column " + std::to_string(where.column),
            "a string that is not valid UTF-8 (yaml-cpp writes the escapes \\_ and \\N as single bytes)");
    }
    return root;
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
    if (specialFloat(text) != 0) {
        return ScalarKind::Number;
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

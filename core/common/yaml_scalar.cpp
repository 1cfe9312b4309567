#include "core/common/yaml_scalar.h"

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
// Notes where a document after the first one begins (loadYaml refuses it); reads nothing else.
class SecondDocument : public YAML::EventHandler {
public:
    bool found = false;
    YAML::Mark mark;

    void OnDocumentStart(const YAML::Mark& at) override
    {
        found = true;
        mark = at;
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

class LimitScanner : public YAML::EventHandler {
public:
    struct Exceeded {
        YAML::Mark mark;
        std::string detail;
    };

    explicit LimitScanner(const std::vector<YamlListLimit>& listLimits) : listLimits_(listLimits) {}

    void OnDocumentStart(const YAML::Mark&) override {}
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override
    {
        child(mark, nullptr);
        leaf(anchor);
    }
    void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override
    {
        child(mark, &value);
        leaf(anchor);
    }
    void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override
    {
        child(mark, nullptr);
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
        open(mark, anchor, false);
    }
    void OnSequenceEnd() override { close(); }
    void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
        YAML::EmitterStyle::value) override
    {
        open(mark, anchor, true);
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
    // A node starts inside the innermost open collection: counts it against that collection's list limit, and in
    // the top-level mapping remembers each key, so that a list opening as a key's value finds its limit.
    // Returns the limit that applies to a list starting here (nullptr when none).
    const YamlListLimit* child(const YAML::Mark& mark, const std::string* scalar)
    {
        if (frames_.empty()) {
            return nullptr;
        }
        Frame& parent = frames_.back();
        const bool keyPosition = parent.isMap && parent.children % 2 == 0;
        ++parent.children;
        if (parent.limit != nullptr && parent.children > parent.limit->maxItems) {
            throw Exceeded {mark, parent.limit->key + ": " + parent.limit->detail};
        }
        if (frames_.size() != 1 || !parent.isMap) {
            return nullptr;
        }
        if (keyPosition) {
            parent.key = scalar != nullptr ? *scalar : std::string();
            return nullptr;
        }
        for (const YamlListLimit& limit : listLimits_) {
            if (limit.key == parent.key) {
                return &limit;
            }
        }
        return nullptr;
    }
    void open(const YAML::Mark& mark, YAML::anchor_t anchor, bool isMap)
    {
        const YamlListLimit* limit = child(mark, nullptr);
        if (static_cast<int>(frames_.size()) >= limits::kMaxNestingDepth) {
            throw Exceeded {mark, nestingTooDeepDetail()};
        }
        frames_.push_back({anchor, nodes_, isMap, 0, {}, isMap ? nullptr : limit});
        if (anchor != YAML::NullAnchor) {
            openAnchors_.insert(anchor);
        }
        ++nodes_;
    }
    void close()
    {
        const YAML::anchor_t anchor = frames_.back().anchor;
        const std::uint64_t start = frames_.back().start;
        frames_.pop_back();
        if (anchor != YAML::NullAnchor) {
            openAnchors_.erase(anchor);
            anchorNodes_[anchor] = nodes_ - start; // the collection and everything in it, aliases expanded
        }
    }

    struct Frame {
        YAML::anchor_t anchor = YAML::NullAnchor;
        std::uint64_t start = 0;               // nodes_ when the collection opened
        bool isMap = false;
        std::size_t children = 0;              // nodes started directly inside (keys and values of a mapping)
        std::string key;                       // top-level mapping: the key whose value comes next
        const YamlListLimit* limit = nullptr;  // a list under a limit
    };
    const std::vector<YamlListLimit>& listLimits_;
    std::vector<Frame> frames_; // open collections, outermost first
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

YAML::Node loadYaml(const std::string& text, const std::string& file, const std::vector<YamlListLimit>& listLimits)
{
    if (const std::size_t bad = firstInvalidUtf8(text); bad != std::string::npos) {
        throw InputError(file, lineColumnOf(text, bad), "not valid UTF-8 (YAML and JSON files are UTF-8)");
    }
    try {
        std::istringstream stream(text);
        YAML::Parser parser(stream);
        LimitScanner scanner(listLimits);
        parser.HandleNextDocument(scanner); // YAML::Load reads the first document only
        // A second document (after a `---` line) would be ignored without a word: a recipe, run file or candidates
        // list pasted twice, or two files joined, would silently use only the first.
        SecondDocument second;
        if (parser.HandleNextDocument(second) && second.found) {
            throw InputError(file, markText(second.mark),
                "a second YAML document (after a '---' line); this file must hold one document (split it into "
                "separate files)");
        }
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

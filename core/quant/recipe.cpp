#include "core/quant/recipe.h"

#include "core/common/utf8.h"
#include "core/common/yaml_mapping.h"
#include "core/common/yaml_scalar.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace mismatch::quant {

namespace {

using io::isDigits;

// Name tables: the spelling in recipe files, in the order the error messages list them. The format spellings
// are formats.h's (one source for the recipe parser, the fake quantizer and the CLI).
template <typename Enum> using NameTable = std::vector<std::pair<Enum, std::string>>;

template <typename Enum, typename Parse>
NameTable<Enum> tableOf(const std::vector<std::string>& spellings, Parse parse)
{
    NameTable<Enum> table;
    for (const std::string& spelling : spellings) {
        table.emplace_back(*parse(spelling), spelling);
    }
    return table;
}

const NameTable<WeightFormat>& weightFormatNames()
{
    static const auto names = tableOf<WeightFormat>(weightFormatChoices(), parseWeightFormat);
    return names;
}

const NameTable<Granularity>& granularityNames()
{
    static const auto names = tableOf<Granularity>(granularityChoices(), parseGranularity);
    return names;
}

const NameTable<ActivationFormat>& activationFormatNames()
{
    static const auto names = tableOf<ActivationFormat>(activationFormatChoices(), parseActivationFormat);
    return names;
}

const NameTable<KvFormat>& kvFormatNames()
{
    static const auto names = tableOf<KvFormat>(kvFormatChoices(), parseKvFormat);
    return names;
}

const NameTable<KvScales>& kvScalesNames()
{
    static const auto names = tableOf<KvScales>(kvScalesChoices(), parseKvScales);
    return names;
}

const NameTable<KvCalibration>& kvCalibrationNames()
{
    static const NameTable<KvCalibration> names
        = {{KvCalibration::Probe, "probe"}, {KvCalibration::EverySync, "every_sync"}};
    return names;
}

template <typename Enum> std::string nameOf(const NameTable<Enum>& table, Enum value)
{
    for (const auto& [candidate, name] : table) {
        if (candidate == value) {
            return name;
        }
    }
    return "none";
}

template <typename Enum> std::optional<Enum> lookUp(const NameTable<Enum>& table, const std::string& name)
{
    for (const auto& [candidate, candidateName] : table) {
        if (name == candidateName) {
            return candidate;
        }
    }
    return std::nullopt;
}

template <typename Enum> std::string listNames(const NameTable<Enum>& table)
{
    std::string text;
    for (const auto& entry : table) {
        text += (text.empty() ? "" : ", ") + std::string(entry.second);
    }
    return text;
}

std::string joinGranularities(const std::vector<Granularity>& list)
{
    std::string text;
    for (size_t i = 0; i < list.size(); ++i) {
        text += (i == 0 ? "" : (i + 1 == list.size() ? " or " : ", ")) + toString(list[i]);
    }
    return text;
}


std::string trim(const std::string& text)
{
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos) {
        return {};
    }
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

std::int64_t parseNumber(const std::string& digits, const std::string& pattern)
{
    // 18 digits always fit an int64; layer indices never come close.
    if (digits.size() > 18) {
        throw std::invalid_argument("number " + digits + " in \"" + pattern + "\" is too large");
    }
    return std::stoll(digits);
}

} // namespace

std::string toString(KvCalibration calibration)
{
    return nameOf(kvCalibrationNames(), calibration);
}

bool operator==(const WeightPrecision& a, const WeightPrecision& b)
{
    return a.format == b.format && a.granularity == b.granularity;
}

bool operator==(const ActivationPrecision& a, const ActivationPrecision& b)
{
    return a.format == b.format;
}

bool operator==(const KvPrecision& a, const KvPrecision& b)
{
    return a.format == b.format && a.scales == b.scales && a.calibration == b.calibration;
}

std::string describe(const WeightPrecision& precision)
{
    if (precision.granularity == Granularity::None) {
        return toString(precision.format);
    }
    return toString(precision.format) + "/" + toString(precision.granularity);
}

std::string describe(const KvPrecision& precision)
{
    if (precision.scales == KvScales::None) {
        return toString(precision.format);
    }
    std::string text = toString(precision.format) + "/" + toString(precision.scales);
    if (precision.calibration == KvCalibration::EverySync) {
        text += "/every_sync";
    }
    return text;
}

bool operator==(const RecipeRule& a, const RecipeRule& b)
{
    return a.match == b.match && a.weights == b.weights && a.activations == b.activations && a.kvCache == b.kvCache;
}

bool operator==(const Recipe& a, const Recipe& b)
{
    return a.version == b.version && a.name == b.name && a.weights == b.weights && a.activations == b.activations
        && a.kvCache == b.kvCache && a.rules == b.rules;
}

// ---------------------------------------------------------------------------------------------------------
// Patterns

ModulePattern ModulePattern::compile(const std::string& text)
{
    if (text.empty()) {
        throw std::invalid_argument("empty pattern");
    }
    if (text.size() > kMaxLength) {
        throw std::invalid_argument("pattern of " + std::to_string(text.size()) + " characters, over the limit of "
            + std::to_string(kMaxLength) + " (write runs of layers as ranges: {0-27})");
    }
    ModulePattern pattern;
    pattern.text_ = text;
    auto appendLiteral = [&pattern](char c) {
        if (pattern.tokens_.empty() || pattern.tokens_.back().kind != Token::Literal) {
            pattern.tokens_.push_back(Token {});
        }
        pattern.tokens_.back().literal += c;
    };
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '*') {
            if (pattern.tokens_.empty() || pattern.tokens_.back().kind != Token::Star) {
                Token star;
                star.kind = Token::Star;
                pattern.tokens_.push_back(star);
            }
        } else if (c == '}') {
            throw std::invalid_argument(
                "'}' at character " + std::to_string(i + 1) + " of \"" + text + "\" closes no '{'");
        } else if (c == '{') {
            const size_t close = text.find_first_of("{}", i + 1);
            if (close == std::string::npos || text[close] == '{') {
                throw std::invalid_argument(
                    "'{' at character " + std::to_string(i + 1) + " of \"" + text + "\" is not closed by '}'");
            }
            const std::string body = text.substr(i + 1, close - i - 1);
            Token group;
            group.kind = Token::Group;
            std::stringstream items(body);
            std::string itemText;
            size_t count = static_cast<size_t>(std::count(body.begin(), body.end(), ',')) + 1;
            for (size_t k = 0; k < count; ++k) {
                std::getline(items, itemText, ',');
                const std::string source = trim(itemText);
                if (source.empty()) {
                    throw std::invalid_argument("empty alternative in {" + body + "} of \"" + text + "\"");
                }
                if (source.find('*') != std::string::npos) {
                    throw std::invalid_argument("'*' inside {" + body + "} of \"" + text
                        + "\": braces hold numbers, ranges and literal alternatives");
                }
                Item item;
                item.source = source;
                const size_t dash = source.find('-');
                if (isDigits(source)) {
                    item.isNumber = true;
                    item.low = item.high = parseNumber(source, text);
                } else if (dash != std::string::npos && isDigits(source.substr(0, dash))
                    && isDigits(source.substr(dash + 1))) {
                    item.isNumber = true;
                    item.low = parseNumber(source.substr(0, dash), text);
                    item.high = parseNumber(source.substr(dash + 1), text);
                    if (item.low > item.high) {
                        throw std::invalid_argument("range " + source + " in \"" + text + "\" is reversed (write "
                            + std::to_string(item.high) + "-" + std::to_string(item.low) + ")");
                    }
                } else {
                    item.literal = source;
                }
                group.items.push_back(item);
            }
            pattern.groupTokens_.push_back(pattern.tokens_.size());
            pattern.tokens_.push_back(group);
            i = close;
        } else {
            appendLiteral(c);
        }
    }
    return pattern;
}

void ModulePattern::stepItem(const Item& item, std::int64_t low, std::int64_t high, const std::string& name,
    const Positions& from, Positions& to)
{
    for (std::size_t position = 0; position < from.size(); ++position) {
        if (!from[position]) {
            continue;
        }
        if (!item.isNumber) {
            if (name.compare(position, item.literal.size(), item.literal) == 0) {
                to[position + item.literal.size()] = 1;
            }
            continue;
        }
        // A decimal number without leading zeros ("07" is not layer 7).
        std::int64_t value = 0;
        for (std::size_t end = position;
             end < name.size() && end - position < 18 && std::isdigit(static_cast<unsigned char>(name[end])); ++end) {
            if (end > position && name[position] == '0') {
                break;
            }
            value = value * 10 + (name[end] - '0');
            if (value >= low && value <= high) {
                to[end + 1] = 1;
            }
        }
    }
}

void ModulePattern::stepToken(const Token& token, const std::string& name, const Positions& from, Positions& to)
{
    switch (token.kind) {
    case Token::Literal:
        for (std::size_t position = 0; position < from.size(); ++position) {
            if (from[position] && name.compare(position, token.literal.size(), token.literal) == 0) {
                to[position + token.literal.size()] = 1;
            }
        }
        return;
    case Token::Star: {
        // Every position at or after the first reachable one.
        const auto first = std::find(from.begin(), from.end(), 1);
        std::fill(to.begin() + (first - from.begin()), to.end(), 1);
        return;
    }
    case Token::Group:
        for (const Item& item : token.items) {
            stepItem(item, item.low, item.high, name, from, to);
        }
        return;
    }
}

std::vector<ModulePattern::Positions> ModulePattern::forward(const std::string& name) const
{
    std::vector<Positions> reach(tokens_.size() + 1, Positions(name.size() + 1, 0));
    reach[0][0] = 1;
    for (std::size_t t = 0; t < tokens_.size(); ++t) {
        stepToken(tokens_[t], name, reach[t], reach[t + 1]);
        if (std::find(reach[t + 1].begin(), reach[t + 1].end(), 1) == reach[t + 1].end()) {
            break; // nothing reachable: the later sets stay empty
        }
    }
    return reach;
}

std::vector<ModulePattern::Positions> ModulePattern::backward(const std::string& name) const
{
    const std::size_t size = name.size() + 1;
    std::vector<Positions> rest(tokens_.size() + 1, Positions(size, 0));
    rest[tokens_.size()][name.size()] = 1;
    for (std::size_t t = tokens_.size(); t-- > 0;) {
        // rest[t][p]: one step of token t from p lands in rest[t + 1].
        Positions single(size, 0);
        Positions landed(size, 0);
        for (std::size_t p = 0; p < size; ++p) {
            single[p] = 1;
            std::fill(landed.begin(), landed.end(), 0);
            stepToken(tokens_[t], name, single, landed);
            single[p] = 0;
            for (std::size_t q = p; q < size; ++q) {
                if (landed[q] && rest[t + 1][q]) {
                    rest[t][p] = 1;
                    break;
                }
            }
        }
    }
    return rest;
}

bool ModulePattern::matches(const std::string& name) const
{
    return forward(name).back()[name.size()] != 0;
}

std::vector<std::vector<std::array<bool, 2>>> ModulePattern::itemsUsed(const std::vector<std::string>& names) const
{
    std::vector<std::vector<std::array<bool, 2>>> used;
    for (const std::size_t token : groupTokens_) {
        used.emplace_back(tokens_[token].items.size(), std::array<bool, 2> {false, false});
    }
    for (const std::string& name : names) {
        const std::vector<Positions> reach = forward(name);
        if (!reach.back()[name.size()]) {
            continue; // an item is used only by names the whole pattern matches
        }
        const std::vector<Positions> rest = backward(name);
        for (std::size_t group = 0; group < groupTokens_.size(); ++group) {
            const std::size_t t = groupTokens_[group];
            const Token& token = tokens_[t];
            for (std::size_t i = 0; i < token.items.size(); ++i) {
                const Item& item = token.items[i];
                const int ends = item.isNumber && item.low != item.high ? 2 : 1;
                for (int end = 0; end < ends; ++end) {
                    if (used[group][i][static_cast<std::size_t>(end)]) {
                        continue;
                    }
                    const std::int64_t value = end == 0 ? item.low : item.high;
                    Positions landed(name.size() + 1, 0);
                    stepItem(item, item.isNumber ? value : 0, item.isNumber ? value : 0, name, reach[t], landed);
                    for (std::size_t q = 0; q < landed.size(); ++q) {
                        if (landed[q] && rest[t + 1][q]) {
                            used[group][i][static_cast<std::size_t>(end)] = true;
                            break;
                        }
                    }
                }
            }
        }
    }
    return used;
}

std::size_t ModulePattern::groupCount() const
{
    return groupTokens_.size();
}

std::size_t ModulePattern::itemCount(std::size_t group) const
{
    return tokens_.at(groupTokens_.at(group)).items.size();
}

bool ModulePattern::itemIsRange(std::size_t group, std::size_t item) const
{
    const Item& entry = tokens_.at(groupTokens_.at(group)).items.at(item);
    return entry.isNumber && entry.low != entry.high;
}

std::string ModulePattern::itemText(std::size_t group, std::size_t item) const
{
    return tokens_.at(groupTokens_.at(group)).items.at(item).source;
}

std::vector<std::string> nearestNames(
    const std::string& pattern, const std::vector<std::string>& names, std::size_t count)
{
    // Levenshtein distance, one row at a time.
    const auto distance = [&pattern](const std::string& name) {
        std::vector<std::size_t> row(name.size() + 1);
        for (std::size_t j = 0; j <= name.size(); ++j) {
            row[j] = j;
        }
        for (std::size_t i = 1; i <= pattern.size(); ++i) {
            std::size_t diagonal = row[0];
            row[0] = i;
            for (std::size_t j = 1; j <= name.size(); ++j) {
                const std::size_t above = row[j];
                row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (pattern[i - 1] == name[j - 1] ? 0 : 1)});
                diagonal = above;
            }
        }
        return row[name.size()];
    };
    std::vector<std::pair<std::size_t, std::string>> scored;
    for (const std::string& name : names) {
        scored.emplace_back(distance(name), name);
    }
    std::sort(scored.begin(), scored.end());
    scored.erase(std::unique(scored.begin(), scored.end()), scored.end());
    std::vector<std::string> nearest;
    for (std::size_t i = 0; i < scored.size() && nearest.size() < count; ++i) {
        nearest.push_back(scored[i].second);
    }
    return nearest;
}

std::string nearestNamesText(const std::string& pattern, const std::vector<std::string>& names)
{
    std::string text;
    for (const std::string& name : nearestNames(pattern, names)) {
        text += (text.empty() ? "" : ", ") + name;
    }
    return text;
}

// ---------------------------------------------------------------------------------------------------------
// Errors

namespace {

using io::lineColumn;

[[noreturn]] void throwLocated(const std::string& file, bool json, const SourceLocation& where, std::string detail)
{
    std::string location;
    if (json) {
        location = where.keyPath;
        if (where.line > 0) {
            location += (location.empty() ? "" : ", ") + lineColumn(where);
        }
    } else if (where.line > 0) {
        location = lineColumn(where);
        if (!where.keyPath.empty()) {
            detail = where.keyPath + ": " + detail;
        }
    } else {
        location = where.keyPath;
    }
    throw InputError(file, location, detail);
}

} // namespace

void throwRecipeError(const Recipe& recipe, const SourceLocation& where, const std::string& detail)
{
    throwLocated(recipe.sourceFile, recipe.fromJson, where, detail);
}

// ---------------------------------------------------------------------------------------------------------
// Parsing

namespace {

using io::kindName;
using io::ScalarKind;
using io::scalarKind;

using Entry = io::YamlEntry;
using Reader = io::YamlMappingReader;

class Parser {
public:
    Parser(std::string file, bool json)
        : file_(std::move(file))
        , json_(json)
        , reader_([file = file_, json](const SourceLocation& where, const std::string& detail) {
            throwLocated(file, json, where, detail);
        })
    {
    }

    Recipe parse(const YAML::Node& root);

private:
    [[noreturn]] void fail(const SourceLocation& where, const std::string& detail) const
    {
        throwLocated(file_, json_, where, detail);
    }

    template <typename Enum>
    Enum enumValue(const Entry& entry, const NameTable<Enum>& table, const std::string& what) const
    {
        const std::string text = reader_.stringValue(entry);
        const auto value = lookUp(table, text);
        if (!value) {
            fail(entry.valueLocation, "unknown " + what + " '" + text + "' (valid: " + listNames(table) + ")");
        }
        return *value;
    }

    WeightPrecision weights(const Entry& section) const
    {
        const auto list = reader_.entries(section.value, section.valueLocation, {"format", "granularity"});
        WeightPrecision precision;
        precision.format
            = enumValue(reader_.require(list, "format", section.valueLocation), weightFormatNames(), "weight format");
        precision.granularity = defaultGranularity(precision.format);
        if (const Entry* granularity = Reader::find(list, "granularity")) {
            const std::vector<Granularity> allowed = allowedGranularities(precision.format);
            if (allowed.empty()) {
                fail(granularity->keyLocation,
                    toString(precision.format)
                        + " has no scales and takes no granularity (only fp8_e4m3, "
                          "fp8_e5m2, int8, int4, mxfp8, mxfp4 and nvfp4 do)");
            }
            const Granularity value = enumValue(*granularity, granularityNames(), "granularity");
            if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
                fail(granularity->valueLocation,
                    toString(precision.format) + " takes granularity " + joinGranularities(allowed) + " only, not "
                        + toString(value));
            }
            precision.granularity = value;
        }
        return precision;
    }

    ActivationPrecision activations(const Entry& section) const
    {
        const auto list = reader_.entries(section.value, section.valueLocation, {"format"});
        ActivationPrecision precision;
        precision.format
            = enumValue(reader_.require(list, "format", section.valueLocation), activationFormatNames(), "activation format");
        return precision;
    }

    KvPrecision kvCache(const Entry& section) const
    {
        const auto list = reader_.entries(section.value, section.valueLocation, {"format", "scales", "calibration"});
        KvPrecision precision;
        precision.format
            = enumValue(reader_.require(list, "format", section.valueLocation), kvFormatNames(), "kv_cache format");
        const bool scaled = precision.format == KvFormat::Fp8E4m3;
        if (scaled) {
            precision.scales = KvScales::PerTensor;
            precision.calibration = KvCalibration::Probe;
        }
        for (const char* key : {"scales", "calibration"}) {
            const Entry* entry = Reader::find(list, key);
            if (!entry) {
                continue;
            }
            if (!scaled) {
                fail(entry->keyLocation,
                    toString(precision.format)
                        + (isPerTokenHead(precision.format)
                                ? " computes one scale per token and KV head each time the engine writes them, so '"
                                    + std::string(key) + "' does not apply (only fp8_e4m3 takes it)"
                                : " has no scales, so '" + std::string(key)
                                    + "' does not apply (only fp8_e4m3 takes it)"));
            }
            if (entry->key == "scales") {
                precision.scales = enumValue(*entry, kvScalesNames(), "kv_cache scales");
            } else {
                precision.calibration = enumValue(*entry, kvCalibrationNames(), "kv_cache calibration");
            }
        }
        return precision;
    }

    RecipeRule rule(const YAML::Node& node, const SourceLocation& where) const
    {
        const auto list = reader_.entries(node, where, {"match", "weights", "activations", "kv_cache"});
        RecipeRule result;
        result.location = where;
        const Entry& match = reader_.require(list, "match", where);
        result.match = reader_.stringValue(match);
        result.matchLocation = match.valueLocation;
        try {
            ModulePattern::compile(result.match);
        } catch (const std::invalid_argument& problem) {
            fail(match.valueLocation, problem.what());
        }
        if (const Entry* entry = Reader::find(list, "weights")) {
            result.weights = weights(*entry);
            result.weightsLocation = entry->keyLocation;
        }
        if (const Entry* entry = Reader::find(list, "activations")) {
            result.activations = activations(*entry);
            result.activationsLocation = entry->keyLocation;
        }
        if (const Entry* entry = Reader::find(list, "kv_cache")) {
            result.kvCache = kvCache(*entry);
            result.kvCacheLocation = entry->keyLocation;
        }
        if (!result.weights && !result.activations && !result.kvCache) {
            fail(where, "the rule for \"" + result.match + "\" sets nothing (give weights, activations or kv_cache)");
        }
        return result;
    }

    std::string file_;
    bool json_;
    Reader reader_;
};

// `embed_tokens` and `model.embed_tokens` are one module.
std::string canonicalPattern(const std::string& match)
{
    return match == "embed_tokens" ? "model.embed_tokens" : match;
}

// Two rules with the same pattern that set one field to different values: the later silently overrides the
// earlier, which is almost always an editing mistake. One pass: until a contradiction is found, every rule of a
// pattern that sets a field sets it to the same value, so comparing with the first one that set it is enough.
void checkContradictions(const Recipe& recipe)
{
    struct FirstSetters {
        int weights = -1; // rule index, or -1
        int activations = -1;
        int kvCache = -1;
    };
    std::unordered_map<std::string, FirstSetters> byPattern;
    for (size_t later = 0; later < recipe.rules.size(); ++later) {
        const RecipeRule& b = recipe.rules[later];
        FirstSetters& first = byPattern[canonicalPattern(b.match)];
        // The earliest contradicted rule is reported (weights before activations before kv_cache on a tie).
        int earliest = -1;
        std::string field;
        auto consider = [&](int earlier, bool differs, const char* name) {
            if (earlier >= 0 && differs && (earliest < 0 || earlier < earliest)) {
                earliest = earlier;
                field = name;
            }
        };
        const auto rule = [&recipe](int index) -> const RecipeRule& { return recipe.rules[static_cast<size_t>(index)]; };
        if (b.weights) {
            consider(first.weights, first.weights >= 0 && *rule(first.weights).weights != *b.weights, "weights");
        }
        if (b.activations) {
            consider(first.activations,
                first.activations >= 0 && *rule(first.activations).activations != *b.activations, "activations");
        }
        if (b.kvCache) {
            consider(first.kvCache, first.kvCache >= 0 && *rule(first.kvCache).kvCache != *b.kvCache, "kv_cache");
        }
        if (earliest >= 0) {
            const RecipeRule& a = rule(earliest);
            SourceLocation firstAt;
            SourceLocation secondAt;
            std::string firstValue;
            std::string secondValue;
            if (field == "weights") {
                firstAt = a.weightsLocation;
                secondAt = b.weightsLocation;
                firstValue = describe(*a.weights);
                secondValue = describe(*b.weights);
            } else if (field == "activations") {
                firstAt = a.activationsLocation;
                secondAt = b.activationsLocation;
                firstValue = toString(a.activations->format);
                secondValue = toString(b.activations->format);
            } else {
                firstAt = a.kvCacheLocation;
                secondAt = b.kvCacheLocation;
                firstValue = describe(*a.kvCache);
                secondValue = describe(*b.kvCache);
            }
            throwRecipeError(recipe, secondAt,
                "contradicts rules[" + std::to_string(earliest) + "] at " + describeLocation(firstAt) + ": both match \""
                    + b.match + "\" but set " + field + " to " + firstValue + " and " + secondValue
                    + " (the later rule would silently win; remove one)");
        }
        const int index = static_cast<int>(later);
        if (b.weights && first.weights < 0) {
            first.weights = index;
        }
        if (b.activations && first.activations < 0) {
            first.activations = index;
        }
        if (b.kvCache && first.kvCache < 0) {
            first.kvCache = index;
        }
    }
}

Recipe Parser::parse(const YAML::Node& root)
{
    SourceLocation top = io::locate(root, "");
    if (top.line == 0) {
        top.line = 1;
        top.column = 1;
    }
    if (!root.IsDefined() || root.IsNull()) {
        fail(top,
            "empty recipe (expected a mapping with at least `version: " + std::to_string(Recipe::kCurrentVersion)
                + "`)");
    }
    const auto list = reader_.entries(root, top, {"version", "name", "weights", "activations", "kv_cache", "rules"});
    Recipe recipe;
    recipe.sourceFile = file_;
    recipe.fromJson = json_;

    const Entry& version = reader_.require(list, "version", top);
    if (!version.value.IsScalar() || scalarKind(version.value) != ScalarKind::Integer) {
        fail(version.valueLocation, "expected an integer, got " + kindName(version.value));
    }
    const std::string versionText = version.value.Scalar();
    if (versionText.size() > 9 || std::stoi(versionText) != Recipe::kCurrentVersion) {
        fail(version.valueLocation,
            "unsupported recipe version " + versionText + " (this build reads version "
                + std::to_string(Recipe::kCurrentVersion) + ")");
    }
    recipe.version = Recipe::kCurrentVersion;

    if (const Entry* name = Reader::find(list, "name")) {
        recipe.name = reader_.stringValue(*name);
    }
    if (const Entry* entry = Reader::find(list, "weights")) {
        recipe.weights = weights(*entry);
        recipe.weightsLocation = entry->keyLocation;
    }
    if (const Entry* entry = Reader::find(list, "activations")) {
        recipe.activations = activations(*entry);
        recipe.activationsLocation = entry->keyLocation;
    }
    if (const Entry* entry = Reader::find(list, "kv_cache")) {
        recipe.kvCache = kvCache(*entry);
        recipe.kvCacheLocation = entry->keyLocation;
    }
    if (const Entry* rules = Reader::find(list, "rules")) {
        if (!rules->value.IsSequence()) {
            fail(rules->valueLocation, "expected a list of rules, got " + kindName(rules->value));
        }
        if (rules->value.size() > Recipe::kMaxRules) {
            fail(rules->valueLocation,
                std::to_string(rules->value.size()) + " rules, over the limit of " + std::to_string(Recipe::kMaxRules)
                    + " (one rule can name many modules: model.layers.{0-27}.mlp.*)");
        }
        size_t index = 0;
        for (const YAML::Node& node : rules->value) {
            const std::string path = "rules[" + std::to_string(index++) + "]";
            SourceLocation where = node.IsNull() ? rules->valueLocation : io::locate(node, path);
            where.keyPath = path;
            recipe.rules.push_back(rule(node, where));
        }
    }
    checkContradictions(recipe);
    return recipe;
}

bool endsWith(const std::string& text, const std::string& suffix)
{
    if (text.size() < suffix.size()) {
        return false;
    }
    return std::equal(suffix.rbegin(), suffix.rend(), text.rbegin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
    });
}

// Where nlohmann stopped (a 1-based byte count), as 1-based line and column.
SourceLocation byteToLocation(const std::string& text, std::size_t byte)
{
    SourceLocation where;
    const std::size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
    where.line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
    const std::size_t lineStart = end == 0 ? 0 : text.rfind('\n', end - 1);
    where.column = static_cast<int>(lineStart == std::string::npos || end == 0 ? end + 1 : end - lineStart);
    return where;
}

// Builds a position-less node tree; only used when yaml-cpp rejects text that is valid JSON (it accepts
// nearly all JSON, being a YAML 1.2 parser), so errors then carry key paths without line numbers.
YAML::Node toYamlNode(const nlohmann::ordered_json& value)
{
    if (value.is_object()) {
        YAML::Node map(YAML::NodeType::Map);
        for (const auto& [key, item] : value.items()) {
            YAML::Node keyNode(key);
            keyNode.SetTag("!");
            map.force_insert(keyNode, toYamlNode(item));
        }
        return map;
    }
    if (value.is_array()) {
        YAML::Node list(YAML::NodeType::Sequence);
        for (const auto& item : value) {
            list.push_back(toYamlNode(item));
        }
        return list;
    }
    if (value.is_null()) {
        return YAML::Node(YAML::NodeType::Null);
    }
    YAML::Node scalar(value.is_string() ? value.get<std::string>() : value.dump());
    scalar.SetTag(value.is_string() ? "!" : "?");
    return scalar;
}

} // namespace

Recipe parseRecipe(const std::string& text, const std::string& fileName)
{
    bool json = false;
    if (endsWith(fileName, ".json")) {
        json = true;
    } else if (!endsWith(fileName, ".yaml") && !endsWith(fileName, ".yml")) {
        json = nlohmann::ordered_json::accept(text);
    }
    if (const std::size_t bad = firstInvalidUtf8(text); bad != std::string::npos) {
        throwLocated(fileName, json, byteToLocation(text, bad + 1), "not valid UTF-8 (YAML and JSON files are UTF-8)");
    }
    YAML::Node root;
    if (json) {
        // Bounded before parsing: toYamlNode below and the tree walks recurse once per level.
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            throwLocated(fileName, true, byteToLocation(text, deep + 1), nestingTooDeepDetail());
        }
        nlohmann::ordered_json document;
        try {
            document = nlohmann::ordered_json::parse(text);
        } catch (const nlohmann::json::parse_error& error) {
            // "parse error at line 1, column 5: DETAIL": the place is ours (byteToLocation), the detail the library's.
            std::string detail = jsonErrorDetail(error);
            const auto colon = detail.find(": ", detail.find("parse error"));
            if (colon != std::string::npos) {
                detail = detail.substr(colon + 2);
            }
            throwLocated(fileName, true, byteToLocation(text, error.byte), "malformed JSON: " + detail);
        } catch (const nlohmann::json::out_of_range& error) { // a number such as 1e400
            throwLocated(fileName, true, SourceLocation{}, "malformed JSON: " + jsonErrorDetail(error));
        }
        try {
            root = YAML::Load(text);
        } catch (const YAML::Exception&) {
            root = toYamlNode(document);
        }
    } else {
        // YAML locations read "line L, column C" as throwLocated writes them. The rule count is checked while
        // scanning, so that a file of many rules is refused before it is all parsed (the check below is for JSON).
        const std::vector<io::YamlListLimit> listLimits {{"rules", Recipe::kMaxRules,
            "more than " + std::to_string(Recipe::kMaxRules) + " rules, over the limit of "
                + std::to_string(Recipe::kMaxRules) + " (one rule can name many modules: model.layers.{0-27}.mlp.*)"}};
        root = io::loadYaml(text, fileName, listLimits);
    }
    if (const std::optional<YAML::Node> bad = io::firstNonUtf8Scalar(root)) {
        SourceLocation where;
        where.line = io::yamlPosition(*bad).line;
        where.column = io::yamlPosition(*bad).column;
        throwLocated(fileName, json, where,
            "a string that is not valid UTF-8 (yaml-cpp writes the escapes \\_ and \\N as single bytes)");
    }
    return Parser(fileName, json).parse(root);
}

Recipe loadRecipe(const std::string& path)
{
    return parseRecipe(readInputFile(path, limits::kConfigFile, "recipe file"), path);
}

// ---------------------------------------------------------------------------------------------------------
// Writing

namespace {

void emit(YAML::Emitter& out, const WeightPrecision& precision)
{
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "format" << YAML::Value << toString(precision.format);
    if (precision.granularity != Granularity::None) {
        out << YAML::Key << "granularity" << YAML::Value << toString(precision.granularity);
    }
    out << YAML::EndMap;
}

void emit(YAML::Emitter& out, const ActivationPrecision& precision)
{
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "format" << YAML::Value << toString(precision.format)
        << YAML::EndMap;
}

void emit(YAML::Emitter& out, const KvPrecision& precision)
{
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "format" << YAML::Value << toString(precision.format);
    if (precision.scales != KvScales::None) {
        out << YAML::Key << "scales" << YAML::Value << toString(precision.scales);
    }
    if (precision.calibration != KvCalibration::None) {
        out << YAML::Key << "calibration" << YAML::Value << toString(precision.calibration);
    }
    out << YAML::EndMap;
}

nlohmann::ordered_json toJson(const WeightPrecision& precision)
{
    nlohmann::ordered_json j = {{"format", toString(precision.format)}};
    if (precision.granularity != Granularity::None) {
        j["granularity"] = toString(precision.granularity);
    }
    return j;
}

nlohmann::ordered_json toJson(const ActivationPrecision& precision)
{
    return {{"format", toString(precision.format)}};
}

nlohmann::ordered_json toJson(const KvPrecision& precision)
{
    nlohmann::ordered_json j = {{"format", toString(precision.format)}};
    if (precision.scales != KvScales::None) {
        j["scales"] = toString(precision.scales);
    }
    if (precision.calibration != KvCalibration::None) {
        j["calibration"] = toString(precision.calibration);
    }
    return j;
}

} // namespace

std::string recipeToYaml(const Recipe& recipe)
{
    YAML::Emitter out;
    out << YAML::BeginMap;
    out << YAML::Key << "version" << YAML::Value << recipe.version;
    if (!recipe.name.empty()) {
        // Quoted, so that a name such as "1" or "true" stays a string.
        out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << recipe.name;
    }
    if (recipe.weights) {
        out << YAML::Key << "weights" << YAML::Value;
        emit(out, *recipe.weights);
    }
    if (recipe.activations) {
        out << YAML::Key << "activations" << YAML::Value;
        emit(out, *recipe.activations);
    }
    if (recipe.kvCache) {
        out << YAML::Key << "kv_cache" << YAML::Value;
        emit(out, *recipe.kvCache);
    }
    if (!recipe.rules.empty()) {
        out << YAML::Key << "rules" << YAML::Value << YAML::BeginSeq;
        for (const RecipeRule& rule : recipe.rules) {
            // Quoted: a pattern starting with '*' or '{' would read as a YAML alias or flow mapping.
            out << YAML::BeginMap << YAML::Key << "match" << YAML::Value << YAML::DoubleQuoted << rule.match;
            if (rule.weights) {
                out << YAML::Key << "weights" << YAML::Value;
                emit(out, *rule.weights);
            }
            if (rule.activations) {
                out << YAML::Key << "activations" << YAML::Value;
                emit(out, *rule.activations);
            }
            if (rule.kvCache) {
                out << YAML::Key << "kv_cache" << YAML::Value;
                emit(out, *rule.kvCache);
            }
            out << YAML::EndMap;
        }
        out << YAML::EndSeq;
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

std::string recipeToJson(const Recipe& recipe)
{
    nlohmann::ordered_json j;
    j["version"] = recipe.version;
    if (!recipe.name.empty()) {
        j["name"] = recipe.name;
    }
    if (recipe.weights) {
        j["weights"] = toJson(*recipe.weights);
    }
    if (recipe.activations) {
        j["activations"] = toJson(*recipe.activations);
    }
    if (recipe.kvCache) {
        j["kv_cache"] = toJson(*recipe.kvCache);
    }
    if (!recipe.rules.empty()) {
        nlohmann::ordered_json rules = nlohmann::ordered_json::array();
        for (const RecipeRule& rule : recipe.rules) {
            nlohmann::ordered_json r = {{"match", rule.match}};
            if (rule.weights) {
                r["weights"] = toJson(*rule.weights);
            }
            if (rule.activations) {
                r["activations"] = toJson(*rule.activations);
            }
            if (rule.kvCache) {
                r["kv_cache"] = toJson(*rule.kvCache);
            }
            rules.push_back(r);
        }
        j["rules"] = rules;
    }
    return j.dump(2) + "\n";
}

} // namespace mismatch::quant

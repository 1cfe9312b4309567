#include "core/io/import_aimet.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/io/import_log.h"
#include "core/model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace mismatch::io {

namespace {

// A std::map object: nlohmann's ordered_json finds each key by a linear search, so that reading n entries took
// n^2 steps (a million entries ran for over ten minutes). The file's order of layers is kept by the parser
// callback instead (parseInOrder).
using json = nlohmann::json;

// The text parsed into `object`; `order` receives the top-level keys in the file's order (each once). Throws
// InputError for more than limits::kMaxAimetEntries entries; parse errors propagate as nlohmann's exceptions.
void parseInOrder(const std::string& path, const std::string& text, json& object, std::vector<std::string>& order)
{
    std::set<std::string> named;
    std::int64_t entries = 0;
    const json::parser_callback_t keepOrder = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && parsed.is_string()) {
            if (++entries > limits::kMaxAimetEntries) {
                throw InputError(path, "",
                    "holds more than " + std::to_string(limits::kMaxAimetEntries)
                        + " entries (the limit for AIMET QuantAnalyzer files)");
            }
            const std::string& name = parsed.get_ref<const std::string&>();
            if (named.insert(name).second) {
                order.push_back(name);
            }
        }
        return true;
    };
    object = json::parse(markNonFiniteTokens(text), keepOrder);
}

// "line L, column C" of a 0-based byte offset.
std::string lineColumn(const std::string& text, size_t offset)
{
    offset = std::min(offset, text.size());
    size_t line = 1;
    size_t lineStart = 0;
    for (size_t i = 0; i < offset; ++i) {
        if (text[i] == '\n') {
            ++line;
            lineStart = i + 1;
        }
    }
    return std::to_string(line) + ":" + std::to_string(offset - lineStart + 1);
}

std::string number(double value)
{
    std::ostringstream text;
    text.precision(10);
    text << value;
    return text.str();
}

} // namespace

std::string toString(AimetAnalysis analysis)
{
    switch (analysis) {
    case AimetAnalysis::QuantEnabled: return "enabled";
    case AimetAnalysis::QuantDisabled: return "disabled";
    case AimetAnalysis::MseLoss: return "mse";
    }
    return "enabled";
}

std::optional<AimetAnalysis> parseAimetAnalysis(const std::string& text)
{
    if (text == "enabled") return AimetAnalysis::QuantEnabled;
    if (text == "disabled") return AimetAnalysis::QuantDisabled;
    if (text == "mse") return AimetAnalysis::MseLoss;
    return std::nullopt;
}

std::optional<std::pair<std::int64_t, std::string>> sensitivityCellOf(const std::string& moduleName)
{
    // Dots (PyTorch module names) or slashes (ONNX node names) separate the parts.
    static const std::regex projection(
        R"((?:^|[./])layers[./](\d+)[./](?:self_attn|mlp)[./](q|k|v|o|gate|up|down)_proj(?:$|[./]))");
    static const std::regex embedding(R"((?:^|[./])embed_tokens(?:$|[./]))");
    static const std::regex head(R"((?:^|[./])lm_head(?:$|[./]))");
    // The regular expressions cost microseconds each: names with none of their words skip them (a file of a
    // million unknown entries).
    if (moduleName.find("layers") == std::string::npos && moduleName.find("embed_tokens") == std::string::npos
        && moduleName.find("lm_head") == std::string::npos) {
        return std::nullopt;
    }
    std::smatch match;
    if (std::regex_search(moduleName, match, projection)) {
        const std::string digits = match[1].str();
        if (digits.size() > 9) {
            return std::nullopt;
        }
        return std::make_pair(static_cast<std::int64_t>(std::stoll(digits)), match[2].str());
    }
    if (std::regex_search(moduleName, embedding)) {
        return std::make_pair(std::int64_t{-1}, std::string("embed_tokens"));
    }
    if (std::regex_search(moduleName, head)) {
        return std::make_pair(std::int64_t{-1}, std::string("lm_head"));
    }
    return std::nullopt;
}

namespace {

// The top-level entries of `object`, in the file's `order`, onto result.cells and result.skipped. A layer index
// of 10,000 or more (ModelConfig::kMaxLayers) is refused, as is one cell given twice with different values (the
// same value twice is skipped as a repetition).
void readAimetCells(
    const std::string& path, const nlohmann::json& object, const std::vector<std::string>& order, AimetImport& result)
{
    std::map<std::pair<std::int64_t, std::string>, std::pair<std::string, double>> seen;
    for (const std::string& name : order) {
        const nlohmann::json& value = object.at(name);
        ++result.entriesRead;
        const auto cell = sensitivityCellOf(name);
        if (!cell) {
            result.skipped.push_back({name, "not a quantized module of the matrix (expected model.layers.N.self_attn."
                                            "{q,k,v,o}_proj, model.layers.N.mlp.{gate,up,down}_proj, embed_tokens "
                                            "or lm_head)"});
            continue;
        }
        if (cell->first >= model::ModelConfig::kMaxLayers) {
            throw InputError(path, "",
                "the entry \"" + name + "\" names layer " + std::to_string(cell->first) + ", over the limit of "
                    + std::to_string(model::ModelConfig::kMaxLayers) + " layers (num_hidden_layers' limit)");
        }
        if (value.is_string() && !value.get_ref<const std::string&>().empty()
            && value.get_ref<const std::string&>()[0] == kNonFiniteMark) {
            result.skipped.push_back({name, "the value " + value.get_ref<const std::string&>().substr(1)
                                                + " is not a finite number"});
            continue;
        }
        if (!value.is_number()) {
            result.skipped.push_back({name, std::string("the value is a JSON ") + value.type_name() + ", expected a number"});
            continue;
        }
        const double v = value.get<double>();
        if (result.analysis == AimetAnalysis::MseLoss && v < 0) {
            result.skipped.push_back({name, "the MSE " + number(v) + " is negative"});
            continue;
        }
        if (const auto previous = seen.find(*cell); previous != seen.end()) {
            if (previous->second.second != v) {
                throw InputError(path, "",
                    "\"" + previous->second.first + "\" (" + number(previous->second.second) + ") and \"" + name
                        + "\" (" + number(v) + ") name the same cell (layer " + std::to_string(cell->first) + ", "
                        + cell->second + ") with different values");
            }
            result.skipped.push_back({name, "the cell (layer " + std::to_string(cell->first) + ", " + cell->second
                                                + ") was already given, with the same value, by "
                                                + previous->second.first});
            continue;
        }
        seen.emplace(*cell, std::make_pair(name, v));
        result.cells.push_back({name, cell->first, cell->second, v, 0.0});
    }
}

} // namespace

AimetImport importAimetSensitivity(const std::string& path, const AimetImportOptions& options)
{
    AimetImport result;
    result.file = path;
    const std::string stem = std::filesystem::path(path).stem().string();
    if (options.analysis) {
        result.analysis = *options.analysis;
    } else if (stem.find("per_layer_quant_enabled") != std::string::npos) {
        result.analysis = AimetAnalysis::QuantEnabled;
    } else if (stem.find("per_layer_quant_disabled") != std::string::npos) {
        result.analysis = AimetAnalysis::QuantDisabled;
    } else if (stem.find("per_layer_mse_loss") != std::string::npos) {
        result.analysis = AimetAnalysis::MseLoss;
    } else {
        throw InputError(path, "",
            "cannot tell which QuantAnalyzer result this is from its name (expected per_layer_quant_enabled, "
            "per_layer_quant_disabled or per_layer_mse_loss in it); say so with --analysis enabled|disabled|mse");
    }
    if (result.analysis == AimetAnalysis::MseLoss && (options.referenceScore || options.lowerIsBetter)) {
        throw InputError(path, "", "a reference score or --lower-is-better applies to eval scores, not to MSE values");
    }

    const std::string text = readInputFile(path, limits::kImportFile, "AIMET QuantAnalyzer JSON file");
    if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
        deep != std::string::npos) {
        throw InputError(path, lineColumn(text, deep), nestingTooDeepDetail());
    }
    json object;
    std::vector<std::string> order;
    try {
        parseInOrder(path, text, object, order);
    } catch (const json::parse_error& error) {
        // The marked text is longer than the original only after a NaN/Infinity token; the offset before the first
        // one is exact, which is where a typical truncation or typo is reported.
        const size_t offset = error.byte > 0 ? error.byte - 1 : 0;
        // The detail after nlohmann's own location ("parse error at line 1, column 5: DETAIL"): the place is ours.
        const std::string what = jsonErrorDetail(error);
        const auto colon = what.find(": ", what.find("column"));
        throw InputError(path, lineColumn(text, offset),
            "not valid JSON (" + (colon == std::string::npos ? what : what.substr(colon + 2)) + ")");
    } catch (const json::out_of_range& error) { // a number such as 1e400
        throw InputError(path, "", "not valid JSON (" + jsonErrorDetail(error) + ")");
    }
    if (!object.is_object()) {
        throw InputError(path, "", std::string("expected one JSON object {\"layer name\": value, ...}, got a JSON ")
                + object.type_name());
    }

    readAimetCells(path, object, order, result);
    if (result.cells.empty()) {
        std::string detail = "no usable layer entry (" + std::to_string(result.entriesRead) + " entries read";
        for (size_t i = 0; i < result.skipped.size() && i < 3; ++i) {
            detail += (i ? "; " : "; first skipped: ") + result.skipped[i].name + ": " + result.skipped[i].reason;
        }
        throw InputError(path, "", detail + ")");
    }

    // The reference and the sign that make "larger = more sensitive".
    double best = result.cells.front().value;
    double worst = best;
    for (const auto& cell : result.cells) {
        const bool better = options.lowerIsBetter ? cell.value < best : cell.value > best;
        const bool worse = options.lowerIsBetter ? cell.value > worst : cell.value < worst;
        if (better) best = cell.value;
        if (worse) worst = cell.value;
    }
    // A score difference "reference - score" is a loss of quality when higher scores are better.
    const double sign = options.lowerIsBetter ? -1.0 : 1.0;
    std::string sensitivityText;
    switch (result.analysis) {
    case AimetAnalysis::QuantEnabled:
        result.reference = options.referenceScore ? *options.referenceScore : best;
        result.referenceKind = options.referenceScore ? "given (float model's score)" : "best layer in the file";
        for (auto& cell : result.cells) {
            cell.sensitivity = sign * (result.reference - cell.value);
        }
        sensitivityText = options.lowerIsBetter ? "score - reference: the score lost when only this layer is quantized"
                                                : "reference - score: the score lost when only this layer is quantized";
        break;
    case AimetAnalysis::QuantDisabled:
        result.reference = options.referenceScore ? *options.referenceScore : worst;
        result.referenceKind = options.referenceScore ? "given (fully quantized model's score)" : "worst layer in the file";
        for (auto& cell : result.cells) {
            cell.sensitivity = sign * (cell.value - result.reference);
        }
        sensitivityText = options.lowerIsBetter
            ? "reference - score: the score recovered when only this layer is left in float"
            : "score - reference: the score recovered when only this layer is left in float";
        break;
    case AimetAnalysis::MseLoss:
        result.reference = 0.0;
        result.referenceKind = "zero";
        for (auto& cell : result.cells) {
            cell.sensitivity = cell.value;
        }
        sensitivityText = "the MSE itself";
        break;
    }

    result.format = "aimet:" + (options.scheme.empty() ? std::string("unspecified scheme") : options.scheme);
    const bool mse = result.analysis == AimetAnalysis::MseLoss;
    const std::string unit = mse ? "mean squared error of the layer output (AIMET), not nats"
                                 : "AIMET eval score (the eval_callback's metric), not nats";
    json config = {{"source", "aimet"}, {"file", path}, {"analysis", toString(result.analysis)},
        {"unit", unit}, {"not_nats", true}, {"lower_is_better", options.lowerIsBetter},
        {"scheme", options.scheme.empty() ? json() : json(options.scheme)},
        {"reference", {{"value", result.reference}, {"kind", result.referenceKind}}},
        {"columns",
            {{"mismatch", mse ? "the layer's MSE as read" : "the eval score as read"},
                {"added_mismatch", "sensitivity, larger = more sensitive: " + sensitivityText}}},
        {"layer_-1", "embed_tokens and lm_head"}};
    result.configJson = config.dump();
    result.estimatorJson = json({{"sensitivity", {{"analysis", toString(result.analysis)}, {"unit", unit},
                                                     {"estimator", sensitivityText}}}})
                               .dump();
    return result;
}

} // namespace mismatch::io

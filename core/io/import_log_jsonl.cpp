// Log import: JSON-lines logs. verl's file logger ({"step": N, "data": {...}} per line) and Tinker's metrics.jsonl
// ({"step": N, "key": value, ...}); a Tinker log also reads the config.json beside it (import_log_tinker.cpp).
#include "core/io/import_log_internal.h"

#include "core/common/input_limits.h"
#include "core/common/message_text.h"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::io::importing {

namespace {

Value jsonValue(const json& value)
{
    Value v;
    if (value.is_null()) {
        v.kind = Value::Null; // verl's file logger (orjson) writes NaN and infinities as null; Python's None too
        return v;
    }
    if (value.is_number()) {
        v.kind = Value::Number;
        v.number = value.get<double>();
        return v;
    }
    if (value.is_string()) {
        const auto& s = value.get_ref<const std::string&>();
        if (!s.empty() && s[0] == kNonFiniteMark) {
            v.kind = Value::NonFinite;
            v.text = s.substr(1);
            return v;
        }
        v.kind = Value::NotNumber;
        v.text = "the string " + json(s).dump();
        return v;
    }
    v.kind = Value::NotNumber;
    v.text = value.is_boolean() ? "the boolean " + value.dump() : std::string("a JSON ") + value.type_name();
    return v;
}

} // namespace

ParsedLine parseJsonLine(LogSource source, std::int64_t lineNumber, const std::string& text)
{
    ParsedLine parsed;
    parsed.line = lineNumber;
    if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size()); deep != std::string::npos) {
        parsed.skipReason = "column " + std::to_string(deep + 1) + ": " + nestingTooDeepDetail();
        return parsed;
    }
    json object;
    try {
        object = json::parse(markNonFiniteTokens(text));
    } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
        // "parse error at line 1, column 5: ..." (the line is always 1 here: from its column on).
        const std::string what = jsonErrorDetail(error);
        const auto column = what.find("column");
        parsed.skipReason = "bad JSON (" + (column == std::string::npos ? what : what.substr(column)) + ")";
        return parsed;
    }
    if (!object.is_object()) {
        parsed.skipReason = std::string("expected a JSON object, got a JSON ") + object.type_name();
        return parsed;
    }
    const auto step = object.find("step");
    if (step == object.end()) {
        parsed.skipReason = "no \"step\" key";
        return parsed;
    }
    parsed.step = jsonValue(*step);
    if (source == LogSource::Verl) {
        // verl's file logger: {"step": N, "data": {"key": value, ...}}
        const auto data = object.find("data");
        if (data == object.end()) {
            parsed.skipReason = "no \"data\" object (verl file logger lines are {\"step\": N, \"data\": {...}})";
            return parsed;
        }
        if (!data->is_object()) {
            parsed.skipReason = std::string("\"data\" is a JSON ") + data->type_name() + ", expected an object";
            return parsed;
        }
        for (const auto& [key, value] : data->items()) {
            parsed.values.emplace_back(key, jsonValue(value));
        }
    } else {
        // Tinker's metrics.jsonl: {"step": N, "key": value, ...}
        for (const auto& [key, value] : object.items()) {
            if (key != "step") {
                parsed.values.emplace_back(key, jsonValue(value));
            }
        }
    }
    return parsed;
}

namespace {

// The logged keys that decide the key patterns of `source` (addPatternMappings): the keys a pattern may match and
// the keys of `mappings` that read a pattern's measure. Only the lines whose text holds the literal text of such a
// key (a pattern's longest text between placeholders, "/acc/mean@") are parsed, so that a line that cannot hold one
// costs a text search per pattern. A Tinker log's env/all/correct and env/all/reward/total are such keys (they fill
// the measures of its env/<tag>/... patterns), so each of its lines is parsed twice.
std::set<std::string> keysDecidingPatterns(
    LogSource source, const std::vector<Mapping>& mappings, const std::vector<std::string>& lines)
{
    std::vector<std::string> starts;
    for (const KnownKeyPattern& pattern : knownKeyPatterns(source)) {
        starts.push_back(patternLiteral(pattern));
        for (const Mapping& mapping : mappings) {
            if (mapping.measureName() == pattern.measure) {
                starts.push_back(mapping.key);
            }
        }
    }
    std::set<std::string> keys;
    for (const std::string& line : lines) {
        const bool holds = std::any_of(starts.begin(), starts.end(),
            [&](const std::string& start) { return line.find(start) != std::string::npos; });
        if (holds) {
            for (auto& value : parseJsonLine(source, 0, trim(line)).values) {
                keys.insert(std::move(value.first));
            }
        }
    }
    return keys;
}

} // namespace

void noteTinkerPolicyDrift(const std::optional<TinkerRunConfig>& tinkerConfig, MappedMetric& metric)
{
    if (!tinkerConfig || (!tinkerConfig->numSubsteps && !tinkerConfig->asyncRecorded)
        || metric.key.rfind("optim/kl_sample_train_", 0) != 0) {
        return;
    }
    const TinkerRunConfig& config = *tinkerConfig;
    std::string settings = config.numSubsteps ? "num_substeps " + std::to_string(*config.numSubsteps) : "";
    if (config.asyncRecorded) {
        settings += std::string(settings.empty() ? "" : ", ")
            + (config.maxStepsOffPolicy ? "async max_steps_off_policy " + std::to_string(*config.maxStepsOffPolicy)
                                        : std::string("synchronous"));
    }
    metric.estimator += " (this run's config.json: " + settings
        + (config.includesPolicyDrift() ? ": includes policy drift)" : ": no policy drift recorded)");
}

ImportedLog importJsonLines(LogSource source, const std::string& path, const LogImportOptions& options)
{
    LogReader reader(source, path);
    std::vector<Mapping> mappings = keyValueMappings(source, parseMapEntries(options));
    const auto lines = splitLines(readWholeFile(path));
    // A key pattern's measure (verl's val-core/<data source>/acc/mean@<N>) is read only when the whole log holds one
    // key of it, so the keys that could decide it are gathered first, from the lines that hold their text.
    addPatternMappings(source, keysDecidingPatterns(source, mappings, lines), mappings, reader.result().notes);
    reader.setMappings(std::move(mappings));
    for (size_t index = 0; index < lines.size(); ++index) {
        const std::string text = trim(lines[index]);
        if (!text.empty()) {
            reader.feed(parseJsonLine(source, static_cast<std::int64_t>(index + 1), text));
        }
    }
    ImportedLog log = reader.finish();
    if (source == LogSource::Tinker) {
        log.tinkerConfig = readTinkerConfig(path, log.tinkerConfigProblem);
    }
    for (MappedMetric& metric : log.metrics) {
        noteTinkerPolicyDrift(log.tinkerConfig, metric);
    }
    return log;
}

} // namespace mismatch::io::importing

// Log import: JSON-lines logs. verl's file logger ({"step": N, "data": {...}} per line) and Tinker's metrics.jsonl
// ({"step": N, "key": value, ...}); a Tinker log also reads the config.json beside it (import_log_tinker.cpp).
#include "core/io/import_log_internal.h"

#include "core/common/input_limits.h"

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

ImportedLog importJsonLines(LogSource source, const std::string& path, const LogImportOptions& options)
{
    LogReader reader(source, path);
    reader.setMappings(keyValueMappings(source, parseMapEntries(options)));
    const auto lines = splitLines(readWholeFile(path));
    for (size_t index = 0; index < lines.size(); ++index) {
        const auto lineNumber = static_cast<std::int64_t>(index + 1);
        const std::string text = trim(lines[index]);
        if (text.empty()) {
            continue;
        }
        ++reader.result().linesRead;
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            reader.skip(lineNumber, "column " + std::to_string(deep + 1) + ": " + nestingTooDeepDetail());
            continue;
        }
        json object;
        try {
            object = json::parse(markNonFiniteTokens(text));
        } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
            std::string what = error.what();
            // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
            const auto colon = what.find("column");
            reader.skip(lineNumber, "bad JSON (" + (colon == std::string::npos ? what : what.substr(colon)) + ")");
            continue;
        }
        if (!object.is_object()) {
            reader.skip(lineNumber, std::string("expected a JSON object, got a JSON ") + object.type_name());
            continue;
        }
        const auto step = object.find("step");
        if (step == object.end()) {
            reader.skip(lineNumber, "no \"step\" key");
            continue;
        }
        std::vector<std::pair<std::string, Value>> values;
        if (source == LogSource::Verl) {
            // verl's file logger: {"step": N, "data": {"key": value, ...}}
            const auto data = object.find("data");
            if (data == object.end()) {
                reader.skip(lineNumber, "no \"data\" object (verl file logger lines are {\"step\": N, \"data\": {...}})");
                continue;
            }
            if (!data->is_object()) {
                reader.skip(lineNumber, std::string("\"data\" is a JSON ") + data->type_name() + ", expected an object");
                continue;
            }
            for (const auto& [key, value] : data->items()) {
                values.emplace_back(key, jsonValue(value));
            }
        } else {
            // Tinker's metrics.jsonl: {"step": N, "key": value, ...}
            for (const auto& [key, value] : object.items()) {
                if (key != "step") {
                    values.emplace_back(key, jsonValue(value));
                }
            }
        }
        reader.record(lineNumber, jsonValue(*step), values);
    }
    ImportedLog log = reader.finish();
    if (source == LogSource::Tinker) {
        log.tinkerConfig = readTinkerConfig(path, log.tinkerConfigProblem);
    }
    if (log.tinkerConfig && (log.tinkerConfig->numSubsteps || log.tinkerConfig->asyncRecorded)) {
        // What this run's config.json says about the policy drift in kl_sample_train_*.
        const TinkerRunConfig& config = *log.tinkerConfig;
        std::string settings = config.numSubsteps ? "num_substeps " + std::to_string(*config.numSubsteps) : "";
        if (config.asyncRecorded) {
            settings += std::string(settings.empty() ? "" : ", ")
                + (config.maxStepsOffPolicy ? "async max_steps_off_policy " + std::to_string(*config.maxStepsOffPolicy)
                                            : std::string("synchronous"));
        }
        for (auto& metric : log.metrics) {
            if (metric.key.rfind("optim/kl_sample_train_", 0) == 0) {
                metric.estimator += " (this run's config.json: " + settings
                    + (config.includesPolicyDrift() ? ": includes policy drift)" : ": no policy drift recorded)");
            }
        }
    }
    return log;
}

} // namespace mismatch::io::importing

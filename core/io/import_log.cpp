#include "core/io/import_log.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace mismatch::io {

namespace {

using nlohmann::json;

const char* kNats = "nats/token";
const char* kProbability = "probability";

// The estimator texts of the built-in table (mu: rollout engine or sampler, pi: trainer, y: the sampled token).
const char* kK1Verl = "k1: token mean of log mu(y) - log pi(y) over response tokens (rollout minus training "
                      "log-probability of the sampled token); estimates KL(mu || pi)";
const char* kK3Verl = "k3: token mean of r - 1 - log r with r = pi(y) / mu(y); estimates KL(mu || pi)";
const char* kChi2 = "token mean of r^2 - 1 with r = pi(y) / mu(y): a chi-square divergence estimate, not a KL";
const char* kProbDiff = "probability difference |mu(y) - pi(y)| of the sampled token over response tokens: not a KL";
const char* kK1Tinker = "k1: mean over action tokens of log mu(y) - log pi(y) (sampler minus trainer "
                        "log-probability); estimates KL(mu || pi)";
const char* kK2Tinker = "k2: mean over action tokens of (log mu(y) - log pi(y))^2 / 2; estimates KL(mu || pi) to "
                        "second order";

std::vector<ImportMeasure> buildMeasures()
{
    return {
        {"step", true, true, "training step", "the step number"},
        {"mismatch_kl", true, false, kNats, "full-vocabulary KL(mu || pi), token mean"},
        {"k1", true, false, kNats, "k1: mean of log mu(y) - log pi(y) over sampled tokens"},
        {"k3", true, false, kNats, "k3: mean of r - 1 - log r, r = pi(y) / mu(y), over sampled tokens"},
        {"loss", true, false, "as logged", "training loss"},
        {"reward", true, false, "as logged", "mean reward"},
        {"accuracy", true, false, "fraction", "fraction correct"},
        {"entropy", true, false, "nats/token", "token mean entropy"},
        {"staleness", true, true, "optimizer steps", "rollout weight staleness"},
        {"rollout_tokens_per_s", true, false, "tokens/s", "rollout throughput"},
        {"train_tokens_per_s", true, false, "tokens/s", "training throughput"},
        {"wall_time_s", true, false, "seconds", "wall time since the run started"},
        {"k2", false, false, kNats, "k2: mean of (log mu(y) - log pi(y))^2 / 2 over sampled tokens"},
        {"chi2_token", false, false, "dimensionless", kChi2},
        {"prob_diff_mean", false, false, kProbability, std::string("mean ") + kProbDiff},
        {"prob_diff_max", false, false, kProbability, std::string("max ") + kProbDiff},
        {"prob_diff_std", false, false, kProbability, std::string("standard deviation of ") + kProbDiff},
        {"prob_pearson_corr", false, false, "dimensionless",
            "Pearson correlation of mu(y) and pi(y) over response tokens: not a KL"},
        {"pg_loss", false, false, "as logged", "policy-gradient loss"},
        {"teacher_kl", false, false, kNats,
            "k1 to the teacher: mean of log pi_student(y) - log teacher(y) (the OPD objective, not a mismatch)"},
        {"step_time_s", false, false, "seconds", "seconds the step took"},
    };
}

std::vector<KnownKey> buildKnownKeys()
{
    using S = LogSource;
    return {
        // verl: verl/trainer/ppo/rollout_corr_helper.py compute_offpolicy_metrics (old_log_prob is the trainer's,
        // rollout_log_prob the engine's) and the trainer's rollout_probs_diff metrics.
        {S::Verl, "rollout_corr/kl", "k1", kK1Verl},
        {S::Verl, "rollout_corr/k3_kl", "k3", kK3Verl},
        {S::Verl, "rollout_corr/chi2_token", "chi2_token", kChi2},
        {S::Verl, "training/rollout_probs_diff_mean", "prob_diff_mean", std::string("mean ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_max", "prob_diff_max", std::string("max ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_std", "prob_diff_std", std::string("standard deviation of ") + kProbDiff},
        {S::Verl, "training/rollout_actor_probs_pearson_corr", "prob_pearson_corr",
            "Pearson correlation of mu(y) and pi(y) over response tokens: not a KL"},
        {S::Verl, "actor/entropy", "entropy", "token mean entropy of the trainer's next-token distribution"},
        {S::Verl, "actor/distillation_loss", "loss",
            "verl's distillation loss (its estimator is the run's distillation loss_mode, not in the log)"},
        {S::Verl, "actor/pg_loss", "pg_loss", "verl's policy-gradient loss"},
        {S::Verl, "critic/score/mean", "reward", "mean sequence score of the reward function"},
        {S::Verl, "timing_s/step", "step_time_s", "seconds the step took"},
        // Tinker cookbook: rl/metrics.py compute_kl_sample_train, distillation/train_on_policy.py teacher_kl,
        // rl metric_util env metrics.
        {S::Tinker, "optim/kl_sample_train_v1", "k1", kK1Tinker},
        {S::Tinker, "optim/kl_sample_train_v2", "k2", kK2Tinker},
        {S::Tinker, "optim/entropy", "entropy",
            "sampled-token estimate of the sampler's entropy: mean of -log mu(y) over action tokens"},
        {S::Tinker, "teacher_kl", "teacher_kl",
            "k1 to the teacher: mean of log pi_student(y) - log teacher(y) (the OPD objective, not a mismatch)"},
        {S::Tinker, "env/all/reward/total", "reward", "mean total episode reward"},
        {S::Tinker, "env/all/correct", "accuracy", "fraction of episodes the environment judged correct"},
        {S::Tinker, "time/total", "step_time_s", "seconds the step took"},
    };
}

std::string trim(const std::string& text)
{
    const auto begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) {
        return {};
    }
    const auto end = text.find_last_not_of(" \t\r\n");
    return text.substr(begin, end - begin + 1);
}

// Where a value read from a line lands.
struct Mapping {
    std::string key;
    const ImportMeasure* measure = nullptr; // nullptr: extra:NAME
    std::string extraName; // the extrasJson key when the measure is not a column
    std::string estimator;
    bool userMapped = false;
    std::int64_t steps = 0;

    std::string measureName() const { return measure ? measure->name : "extra:" + extraName; }
};

struct MapEntry {
    std::string key;
    std::string measure;
};

std::optional<MapEntry> splitMapEntry(const std::string& entry)
{
    const auto equals = entry.rfind('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == entry.size()) {
        return std::nullopt;
    }
    return MapEntry{entry.substr(0, equals), entry.substr(equals + 1)};
}

Mapping makeMapping(const std::string& key, const std::string& measureName, const std::string& estimator, bool user)
{
    Mapping mapping;
    mapping.key = key;
    mapping.userMapped = user;
    if (measureName.rfind("extra:", 0) == 0) {
        mapping.extraName = measureName.substr(6);
        mapping.estimator = estimator.empty() ? "as logged (mapped with --map)" : estimator;
        return mapping;
    }
    mapping.measure = findImportMeasure(measureName);
    if (!mapping.measure->column) {
        mapping.extraName = mapping.measure->name;
    }
    mapping.estimator = estimator.empty() ? mapping.measure->defaultEstimator + " (mapped with --map)" : estimator;
    return mapping;
}

// The value of one key on one line.
struct Value {
    enum Kind { Missing, Number, NonFinite, NotNumber } kind = Missing;
    double number = 0.0;
    std::string text; // NonFinite: the literal; NotNumber: what it is
};

Value jsonValue(const json& value)
{
    Value v;
    if (value.is_null()) {
        return v; // Python None: no value at this step
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

std::string markNonFiniteTokens(const std::string& line)
{
    std::string out;
    out.reserve(line.size() + 16);
    bool inString = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (inString) {
            out += c;
            if (c == '\\' && i + 1 < line.size()) {
                out += line[++i];
            } else if (c == '"') {
                inString = false;
            }
            continue;
        }
        if (c == '"') {
            inString = true;
            out += c;
            continue;
        }
        bool replaced = false;
        for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
            const size_t n = std::char_traits<char>::length(token);
            if (line.compare(i, n, token) == 0) {
                out += "\"\\u0001";
                out += token;
                out += '"';
                i += n - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced) {
            out += c;
        }
    }
    return out;
}

namespace {

// The step of a line, or the reason it has none.
std::optional<std::int64_t> stepValue(const Value& value, std::string& reason)
{
    switch (value.kind) {
    case Value::Missing: reason = "the step is null"; return std::nullopt;
    case Value::NonFinite: reason = "the step is " + value.text; return std::nullopt;
    case Value::NotNumber: reason = "the step is " + value.text + ", expected a non-negative integer"; return std::nullopt;
    case Value::Number: break;
    }
    if (value.number < 0 || value.number != std::floor(value.number) || value.number > 9.0e15) {
        std::ostringstream text;
        text << "the step " << value.number << " is not a non-negative integer";
        reason = text.str();
        return std::nullopt;
    }
    return static_cast<std::int64_t>(value.number);
}

void setMeasure(store::StepMetrics& m, json& extras, const Mapping& mapping, double value)
{
    if (!mapping.extraName.empty()) {
        extras[mapping.extraName] = value;
        return;
    }
    const std::string& name = mapping.measure->name;
    if (name == "mismatch_kl") m.mismatchKl = value;
    else if (name == "k1") m.k1 = value;
    else if (name == "k3") m.k3 = value;
    else if (name == "loss") m.loss = value;
    else if (name == "reward") m.reward = value;
    else if (name == "accuracy") m.accuracy = value;
    else if (name == "entropy") m.entropy = value;
    else if (name == "staleness") m.staleness = static_cast<std::int64_t>(value);
    else if (name == "rollout_tokens_per_s") m.rolloutTokensPerSecond = value;
    else if (name == "train_tokens_per_s") m.trainTokensPerSecond = value;
    else if (name == "wall_time_s") m.wallTimeSeconds = value;
}

std::string joinKeys(const std::vector<std::string>& keys, size_t limit = 6)
{
    std::string text;
    for (size_t i = 0; i < keys.size() && i < limit; ++i) {
        text += (i ? ", " : "") + keys[i];
    }
    if (keys.size() > limit) {
        text += ", ... (" + std::to_string(keys.size()) + " keys)";
    }
    return text;
}

class LogReader {
public:
    LogReader(LogSource source, std::string path) : path_(std::move(path))
    {
        result_.file = path_;
        result_.source = source;
    }

    ImportedLog& result() { return result_; }
    const std::string& path() const { return path_; }

    // Mappings for key-value sources (verl, Tinker): the built-in table, where --map replaces the built-in source
    // of a measure and adds its own keys.
    void setMappings(std::vector<Mapping> mappings)
    {
        mappings_ = std::move(mappings);
        byKey_.clear();
        for (size_t i = 0; i < mappings_.size(); ++i) {
            byKey_[mappings_[i].key] = i;
        }
    }
    std::vector<Mapping>& mappings() { return mappings_; }

    void skip(std::int64_t line, std::string reason) { result_.skipped.push_back({line, std::move(reason)}); }

    // Reads one record (its step value and key -> value pairs) into a step, or reports why it cannot.
    void record(std::int64_t line, const Value& stepRaw, const std::vector<std::pair<std::string, Value>>& values)
    {
        std::string reason;
        const auto step = stepValue(stepRaw, reason);
        if (!step) {
            skip(line, reason);
            return;
        }
        if (const auto seen = firstLineOfStep_.find(*step); seen != firstLineOfStep_.end()) {
            skip(line, "step " + std::to_string(*step) + " was already read on line " + std::to_string(seen->second));
            return;
        }
        store::StepMetrics metrics;
        metrics.step = *step;
        json extras = json::object();
        std::vector<size_t> used;
        std::vector<std::string> unmappedHere;
        for (const auto& [key, value] : values) {
            const auto found = byKey_.find(key);
            if (found == byKey_.end()) {
                unmappedHere.push_back(key);
                continue;
            }
            const Mapping& mapping = mappings_[found->second];
            switch (value.kind) {
            case Value::Missing: continue;
            case Value::NonFinite:
                skip(line, key + " is " + value.text + ", not a finite number");
                return;
            case Value::NotNumber:
                skip(line, key + " is " + value.text + ", expected a number");
                return;
            case Value::Number: break;
            }
            if (mapping.measure && mapping.measure->integer && value.number != std::floor(value.number)) {
                std::ostringstream text;
                text << key << " is " << value.number << ", expected an integer (" << mapping.measure->name << ")";
                skip(line, text.str());
                return;
            }
            setMeasure(metrics, extras, mapping, value.number);
            used.push_back(found->second);
        }
        if (used.empty()) {
            skip(line, unmappedHere.empty() ? std::string("no metric values on this line")
                                            : "no mapped metric on this line (keys: " + joinKeys(unmappedHere)
                                                  + "; map one with --map KEY=MEASURE)");
            return;
        }
        for (const auto& key : unmappedHere) {
            unmapped_.insert(key);
        }
        for (size_t index : used) {
            ++mappings_[index].steps;
        }
        metrics.extrasJson = extras.dump();
        firstLineOfStep_.emplace(*step, line);
        result_.steps.push_back(std::move(metrics));
    }

    ImportedLog finish()
    {
        if (result_.steps.empty()) {
            std::string detail = "no usable line (" + std::to_string(result_.linesRead) + " data lines read";
            if (!result_.skipped.empty()) {
                detail += "; first skipped: ";
                for (size_t i = 0; i < result_.skipped.size() && i < 3; ++i) {
                    detail += (i ? "; " : "") + std::string("line ") + std::to_string(result_.skipped[i].line) + ": "
                        + result_.skipped[i].reason;
                }
            }
            throw InputError(path_, "", detail + ")");
        }
        for (const auto& mapping : mappings_) {
            if (mapping.steps == 0 && !mapping.userMapped) {
                continue;
            }
            MappedMetric metric;
            metric.key = mapping.key;
            metric.measure = mapping.measureName();
            metric.estimator = mapping.estimator;
            metric.unit = mapping.measure ? mapping.measure->unit : "as logged";
            metric.userMapped = mapping.userMapped;
            metric.steps = mapping.steps;
            result_.metrics.push_back(std::move(metric));
        }
        result_.unmappedKeys.assign(unmapped_.begin(), unmapped_.end());
        return std::move(result_);
    }

private:
    std::string path_;
    ImportedLog result_;
    std::vector<Mapping> mappings_;
    std::unordered_map<std::string, size_t> byKey_;
    std::map<std::int64_t, std::int64_t> firstLineOfStep_;
    std::set<std::string> unmapped_;
};

std::string readWholeFile(const std::string& path)
{
    std::string content = readInputFile(path, limits::kImportFile, "log file");
    if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) {
        content.erase(0, 3); // UTF-8 byte order mark
    }
    return content;
}

std::vector<std::string> splitLines(const std::string& content)
{
    std::vector<std::string> lines;
    size_t start = 0;
    while (start <= content.size()) {
        const auto end = content.find('\n', start);
        std::string line = content.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        lines.push_back(std::move(line));
        if (end == std::string::npos) {
            break;
        }
        start = end + 1;
    }
    return lines;
}

std::vector<MapEntry> parseMapEntries(const LogImportOptions& options)
{
    std::vector<MapEntry> entries;
    std::set<std::string> keys;
    std::map<std::string, std::string> measures;
    for (const auto& text : options.map) {
        const std::string problem = checkMapEntry(text);
        if (!problem.empty()) {
            throw InputError("--map", text, problem);
        }
        MapEntry entry = *splitMapEntry(text);
        if (!keys.insert(entry.key).second) {
            throw InputError("--map", text, "the column " + entry.key + " is mapped twice");
        }
        if (const auto previous = measures.find(entry.measure); previous != measures.end()) {
            throw InputError("--map", text, "the measure " + entry.measure + " is already mapped from "
                    + previous->second + "; a measure takes one column");
        }
        measures.emplace(entry.measure, entry.key);
        entries.push_back(std::move(entry));
    }
    return entries;
}

// Built-in mappings of a key-value source with the --map entries applied.
std::vector<Mapping> keyValueMappings(LogSource source, const std::vector<MapEntry>& entries)
{
    std::set<std::string> userMeasures;
    std::set<std::string> userKeys;
    std::vector<Mapping> mappings;
    for (const auto& entry : entries) {
        if (entry.measure == "step") {
            throw InputError("--map", entry.key + "=step",
                "only a CSV file takes a step column; " + toString(source) + " lines hold their step under \"step\"");
        }
        userMeasures.insert(entry.measure);
        userKeys.insert(entry.key);
        mappings.push_back(makeMapping(entry.key, entry.measure, "", true));
    }
    for (const auto& known : knownKeys(source)) {
        if (userMeasures.count(known.measure) || userKeys.count(known.key)) {
            continue;
        }
        mappings.push_back(makeMapping(known.key, known.measure, known.estimator, false));
    }
    return mappings;
}

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
    return reader.finish();
}

// Splits one CSV record (RFC 4180 quoting; a record does not span lines). Returns false with `problem` set on an
// unterminated or misplaced quote.
bool splitCsv(const std::string& line, std::vector<std::string>& fields, std::string& problem)
{
    fields.clear();
    std::string field;
    size_t i = 0;
    while (true) {
        field.clear();
        if (i < line.size() && line[i] == '"') {
            ++i;
            bool closed = false;
            while (i < line.size()) {
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') {
                        field += '"';
                        i += 2;
                        continue;
                    }
                    closed = true;
                    ++i;
                    break;
                }
                field += line[i++];
            }
            if (!closed) {
                problem = "unterminated quoted field (column " + std::to_string(fields.size() + 1) + ")";
                return false;
            }
            if (i < line.size() && line[i] != ',') {
                problem = "text after a closing quote in column " + std::to_string(fields.size() + 1);
                return false;
            }
        } else {
            while (i < line.size() && line[i] != ',') {
                field += line[i++];
            }
        }
        fields.push_back(field);
        if (i >= line.size()) {
            return true;
        }
        ++i; // the comma
    }
}

Value csvValue(const std::string& raw)
{
    Value v;
    const std::string text = trim(raw);
    if (text.empty()) {
        return v;
    }
    errno = 0;
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) {
        v.kind = Value::NotNumber;
        v.text = "\"" + text + "\"";
        return v;
    }
    if (!std::isfinite(number)) {
        v.kind = Value::NonFinite;
        v.text = text;
        return v;
    }
    v.kind = Value::Number;
    v.number = number;
    return v;
}

ImportedLog importCsv(const std::string& path, const LogImportOptions& options)
{
    LogReader reader(LogSource::Csv, path);
    const auto entries = parseMapEntries(options);
    const auto lines = splitLines(readWholeFile(path));
    size_t headerIndex = 0;
    while (headerIndex < lines.size() && trim(lines[headerIndex]).empty()) {
        ++headerIndex;
    }
    if (headerIndex == lines.size()) {
        throw InputError(path, "", "is empty; expected a header row naming the columns (one of them `step`)");
    }
    std::vector<std::string> header;
    std::string problem;
    if (!splitCsv(lines[headerIndex], header, problem)) {
        throw InputError(path, "line " + std::to_string(headerIndex + 1), "bad header row: " + problem);
    }
    for (auto& name : header) {
        name = trim(name);
    }
    std::map<std::string, size_t> columnOf;
    for (size_t c = 0; c < header.size(); ++c) {
        if (header[c].empty()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "column " + std::to_string(c + 1) + " of the header has no name");
        }
        if (!columnOf.emplace(header[c], c).second) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1), "the column " + header[c] + " appears twice");
        }
    }
    std::string headerList;
    for (const auto& name : header) {
        headerList += (headerList.empty() ? "" : ", ") + name;
    }

    // The step column: --map COLUMN=step, else `step`, `_step` or `Step` (Weights & Biases exports).
    std::optional<size_t> stepColumn;
    std::vector<Mapping> mappings(header.size());
    std::vector<bool> mapped(header.size(), false);
    std::set<std::string> userMeasures;
    for (const auto& entry : entries) {
        const auto found = columnOf.find(entry.key);
        if (found == columnOf.end()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "--map names the column " + entry.key + ", which the header does not have (columns: " + headerList + ")");
        }
        userMeasures.insert(entry.measure);
        if (entry.measure == "step") {
            stepColumn = found->second;
            continue;
        }
        mappings[found->second] = makeMapping(entry.key, entry.measure, "", true);
        mapped[found->second] = true;
    }
    if (!stepColumn) {
        for (const char* name : {"step", "_step", "Step"}) {
            if (const auto found = columnOf.find(name); found != columnOf.end() && !mapped[found->second]) {
                stepColumn = found->second;
                break;
            }
        }
    }
    if (!stepColumn) {
        throw InputError(path, "line " + std::to_string(headerIndex + 1),
            "no step column (expected a column named step, or --map COLUMN=step; columns: " + headerList + ")");
    }
    // Other columns: a verl or Tinker key, or a measure's own name, unless --map took that measure.
    std::map<std::string, std::string> autoMeasureColumn;
    std::vector<KnownKey> known = knownKeys(LogSource::Verl);
    const auto tinker = knownKeys(LogSource::Tinker);
    known.insert(known.end(), tinker.begin(), tinker.end());
    for (size_t c = 0; c < header.size(); ++c) {
        if (c == *stepColumn || mapped[c]) {
            continue;
        }
        std::optional<Mapping> candidate;
        for (const auto& k : known) {
            if (k.key == header[c]) {
                candidate = makeMapping(header[c], k.measure, k.estimator + " (" + toString(k.source) + " key)", false);
                break;
            }
        }
        if (!candidate) {
            const ImportMeasure* measure = findImportMeasure(header[c]);
            if (measure && measure->name != "step") {
                candidate = makeMapping(header[c], measure->name, measure->defaultEstimator + " (by column name)", false);
            }
        }
        if (!candidate || userMeasures.count(candidate->measureName())) {
            continue;
        }
        const std::string measure = candidate->measureName();
        if (const auto previous = autoMeasureColumn.find(measure); previous != autoMeasureColumn.end()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "the columns " + previous->second + " and " + header[c] + " both map to " + measure
                    + "; choose with --map (e.g. --map '" + header[c] + "=extra:" + header[c] + "')");
        }
        autoMeasureColumn.emplace(measure, header[c]);
        mappings[c] = std::move(*candidate);
        mapped[c] = true;
    }
    std::vector<Mapping> used;
    for (size_t c = 0; c < header.size(); ++c) {
        if (mapped[c]) {
            used.push_back(mappings[c]);
        }
    }
    reader.setMappings(used);

    std::vector<std::string> fields;
    for (size_t index = headerIndex + 1; index < lines.size(); ++index) {
        const auto lineNumber = static_cast<std::int64_t>(index + 1);
        if (trim(lines[index]).empty()) {
            continue;
        }
        ++reader.result().linesRead;
        if (!splitCsv(lines[index], fields, problem)) {
            reader.skip(lineNumber, problem);
            continue;
        }
        if (fields.size() != header.size()) {
            reader.skip(lineNumber, std::to_string(fields.size()) + " fields, expected " + std::to_string(header.size())
                    + " (the header's columns)");
            continue;
        }
        std::vector<std::pair<std::string, Value>> values;
        for (size_t c = 0; c < header.size(); ++c) {
            if (c != *stepColumn) {
                values.emplace_back(header[c], csvValue(fields[c]));
            }
        }
        Value step = csvValue(fields[*stepColumn]);
        if (step.kind == Value::Missing) {
            reader.skip(lineNumber, "the step column " + header[*stepColumn] + " is empty");
            continue;
        }
        reader.record(lineNumber, step, values);
    }
    return reader.finish();
}

} // namespace

std::string toString(LogSource source)
{
    switch (source) {
    case LogSource::Verl: return "verl";
    case LogSource::Tinker: return "tinker";
    case LogSource::Csv: return "csv";
    }
    return "csv";
}

const std::vector<ImportMeasure>& importMeasures()
{
    static const std::vector<ImportMeasure> measures = buildMeasures();
    return measures;
}

const ImportMeasure* findImportMeasure(const std::string& name)
{
    for (const auto& measure : importMeasures()) {
        if (measure.name == name) {
            return &measure;
        }
    }
    return nullptr;
}

std::string checkMapEntry(const std::string& entry)
{
    const auto parts = splitMapEntry(entry);
    if (!parts) {
        return "expected COLUMN=MEASURE (e.g. rollout_corr/kl=k1)";
    }
    if (parts->measure.rfind("extra:", 0) == 0) {
        const std::string name = parts->measure.substr(6);
        if (name.empty() || name.find_first_of("\"\\") != std::string::npos) {
            return "extra:NAME needs a name without quotes or backslashes";
        }
        if (findImportMeasure(name)) {
            return "extra:" + name + " would hide the measure " + name + "; map to " + name + " itself";
        }
        return {};
    }
    if (!findImportMeasure(parts->measure)) {
        std::string names;
        for (const auto& measure : importMeasures()) {
            names += (names.empty() ? "" : ", ") + measure.name;
        }
        return "unknown measure '" + parts->measure + "' (expected one of " + names + ", or extra:NAME)";
    }
    return {};
}

std::vector<KnownKey> knownKeys(LogSource source)
{
    static const std::vector<KnownKey> all = buildKnownKeys();
    std::vector<KnownKey> keys;
    for (const auto& key : all) {
        if (key.source == source) {
            keys.push_back(key);
        }
    }
    return keys;
}

std::string ImportedLog::estimatorJson() const
{
    json record = json::object();
    for (const auto& metric : metrics) {
        record[metric.measure] = {{"key", metric.key}, {"estimator", metric.estimator}, {"unit", metric.unit},
            {"user_mapped", metric.userMapped}, {"steps", metric.steps}};
    }
    return record.dump();
}

ImportedLog importLog(LogSource source, const std::string& path, const LogImportOptions& options)
{
    if (source == LogSource::Csv) {
        return importCsv(path, options);
    }
    return importJsonLines(source, path, options);
}

} // namespace mismatch::io

// Log import: the reading every source shares. A log's text and lines, and LogReader, which merges each record
// (a line, a CSV row, an event file's record) into its step, drops the values that cannot be used and makes the
// ImportedLog.
#include "core/io/import_log_internal.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"

#include <cmath>
#include <sstream>

namespace mismatch::io::importing {

std::string trim(const std::string& text)
{
    const auto begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) {
        return {};
    }
    const auto end = text.find_last_not_of(" \t\r\n");
    return text.substr(begin, end - begin + 1);
}

namespace {

// The step of a line, or the reason it has none.
std::optional<std::int64_t> stepValue(const Value& value, std::string& reason)
{
    switch (value.kind) {
    case Value::Missing: reason = "the step is empty"; return std::nullopt;
    case Value::Null: reason = "the step is null"; return std::nullopt;
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

// Why a mapped value cannot be used ("" when it can); `value` is not Missing.
std::string unusableReason(LogSource source, const Mapping& mapping, const Value& value)
{
    switch (value.kind) {
    case Value::Missing: return {};
    case Value::Null:
        return source == LogSource::Verl
            ? "is null (verl's file logger writes NaN and infinities as null), expected a finite number"
            : "is null, expected a number";
    case Value::NonFinite: return "is " + value.text + ", not a finite number";
    case Value::NotNumber: return "is " + value.text + ", expected a number";
    case Value::Number: break;
    }
    // Integer measures are stored as 64-bit integers: whole numbers within +-9e15 (exact in a double).
    if (mapping.measure && mapping.measure->integer
        && (value.number != std::floor(value.number) || std::fabs(value.number) > 9.0e15)) {
        std::ostringstream text;
        text << "is " << value.number << ", expected an integer (" << mapping.measure->name << ")";
        return text.str();
    }
    return {};
}

} // namespace

void LogReader::record(std::int64_t line, const Value& stepRaw, const std::vector<std::pair<std::string, Value>>& values)
{
    std::string reason;
    const auto step = stepValue(stepRaw, reason);
    if (!step) {
        skip(line, reason);
        return;
    }
    std::vector<std::pair<size_t, double>> usable; // mapping index, value
    std::vector<DroppedValue> dropped;
    std::vector<std::string> unmappedHere;
    for (const auto& [key, value] : values) {
        const auto found = byKey_.find(key);
        if (found == byKey_.end()) {
            unmappedHere.push_back(key);
            continue;
        }
        if (value.kind == Value::Missing) {
            continue; // an empty CSV field: no value at this step
        }
        const std::string why = unusableReason(source_, mappings_[found->second], value);
        if (!why.empty()) {
            dropped.push_back({line, key, why});
            continue;
        }
        usable.emplace_back(found->second, value.number);
    }
    if (usable.empty()) {
        if (!dropped.empty()) {
            std::string text;
            for (const auto& d : dropped) {
                text += (text.empty() ? "" : "; ") + d.key + " " + d.reason;
            }
            skip(line, text + " (no usable mapped value on this line)");
        } else {
            skip(line, unmappedHere.empty() ? std::string("no metric values on this line")
                                            : "no mapped metric on this line (keys: " + joinKeys(unmappedHere)
                                                  + "; map one with --map KEY=MEASURE)");
        }
        return;
    }
    for (auto& d : dropped) {
        result_.dropped.push_back(std::move(d));
    }
    for (const auto& key : unmappedHere) {
        unmapped_.insert(key);
    }
    auto [position, fresh] = stepIndex_.emplace(*step, steps_.size());
    if (fresh) {
        steps_.push_back({*step, {}});
    } else {
        ++result_.linesMerged;
    }
    PendingStep& pending = steps_[position->second];
    if (!pending.changed) {
        pending.changed = true;
        changed_.push_back(position->second);
    }
    for (const auto& [index, number] : usable) {
        const auto previous = pending.values.find(index);
        if (previous == pending.values.end()) {
            ++mappings_[index].steps; // the mapping's first value on this step
        } else if (previous->second.first != number) {
            result_.conflicts.push_back(
                {*step, mappings_[index].key, previous->second.second, previous->second.first, line, number});
        }
        pending.values[index] = {number, line}; // a later line wins
    }
}

void LogReader::feed(const ParsedLine& line)
{
    if (line.dataLine) {
        ++result_.linesRead;
    }
    if (line.skipReason.empty()) {
        record(line.line, line.step, line.values);
    } else {
        skip(line.line, line.skipReason);
    }
}

store::StepMetrics LogReader::stepMetrics(const PendingStep& pending) const
{
    store::StepMetrics metrics;
    metrics.step = pending.step;
    json extras = json::object();
    for (const auto& [index, value] : pending.values) {
        setMeasure(metrics, extras, mappings_[index], value.first);
    }
    metrics.extrasJson = extras.dump();
    return metrics;
}

std::vector<store::StepMetrics> LogReader::takeChangedSteps()
{
    std::vector<store::StepMetrics> changed;
    changed.reserve(changed_.size());
    for (const size_t index : changed_) {
        steps_[index].changed = false;
        changed.push_back(stepMetrics(steps_[index]));
    }
    changed_.clear();
    return changed;
}

std::vector<MappedMetric> LogReader::mappedMetrics() const
{
    std::vector<MappedMetric> metrics;
    for (const auto& mapping : mappings_) {
        if (mapping.steps == 0 && !mapping.userMapped) {
            continue;
        }
        MappedMetric metric;
        metric.key = mapping.key;
        metric.measure = mapping.measureName();
        metric.estimator = mapping.estimator;
        metric.unit = !mapping.unit.empty() ? mapping.unit : mapping.measure ? mapping.measure->unit : "as logged";
        metric.userMapped = mapping.userMapped;
        metric.steps = mapping.steps;
        metrics.push_back(std::move(metric));
    }
    return metrics;
}

ImportedLog LogReader::finish()
{
    if (steps_.empty()) {
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
    for (const auto& pending : steps_) {
        result_.steps.push_back(stepMetrics(pending));
    }
    result_.metrics = mappedMetrics();
    result_.unmappedKeys = unmappedKeys();
    return std::move(result_);
}

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

} // namespace mismatch::io::importing

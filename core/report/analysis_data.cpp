#include "core/report/analysis_data.h"

#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

namespace mismatch::report {

namespace {

std::map<std::int64_t, std::string> runNames(const store::RunStore& store)
{
    std::map<std::int64_t, std::string> names;
    for (const store::RunInfo& run : store.listRuns()) {
        names[run.id] = run.name;
    }
    return names;
}

// A short human name for a stored candidate configuration.
std::string candidateName(const std::string& json, std::int64_t id)
{
    const nlohmann::json candidate = nlohmann::json::parse(json, nullptr, false);
    if (candidate.is_object()) {
        for (const char* key : {"name", "recipe"}) {
            const auto it = candidate.find(key);
            if (it != candidate.end() && it->is_string() && !it->get<std::string>().empty()) {
                return it->get<std::string>();
            }
        }
    }
    return "#" + std::to_string(id);
}

// A number under `key`, or nothing (absent, null or not a number).
std::optional<double> numberAt(const nlohmann::json& object, const char* key)
{
    if (object.is_object()) {
        const auto it = object.find(key);
        if (it != object.end() && it->is_number()) {
            return it->get<double>();
        }
    }
    return std::nullopt;
}

// Flags as stored ({"kind", "step", "reason"} objects); anything else in the array is skipped.
std::vector<CalibrationFlag> flagsFrom(const nlohmann::json& object, const char* key)
{
    std::vector<CalibrationFlag> flags;
    if (!object.is_object() || !object.contains(key) || !object.at(key).is_array()) {
        return flags;
    }
    for (const auto& item : object.at(key)) {
        if (!item.is_object() || !item.contains("kind") || !item.at("kind").is_string()) {
            continue;
        }
        CalibrationFlag flag;
        flag.kind = item.at("kind").get<std::string>();
        if (item.contains("step") && item.at("step").is_number_integer()) {
            flag.step = item.at("step").get<std::int64_t>();
        }
        if (item.contains("reason") && item.at("reason").is_string()) {
            flag.reason = item.at("reason").get<std::string>();
        }
        flags.push_back(std::move(flag));
    }
    return flags;
}

CalibrationInfo calibrationFromStored(const store::CalibrationInfo& stored)
{
    CalibrationInfo info {stored.id, stored.runId, stored.name, stored.student, stored.createdAt, {}, {}, {}, {}};
    const nlohmann::json config = nlohmann::json::parse(stored.configJson, nullptr, false);
    info.relativeThreshold = numberAt(config, "relative_threshold");
    info.confidence = numberAt(config, "confidence");
    if (const auto resamples = numberAt(config, "resamples")) {
        info.resamples = static_cast<std::int64_t>(*resamples);
    }
    info.flags = flagsFrom(config, "flags");
    return info;
}

} // namespace

std::optional<double> CalibrationPoint::bf16Multiple() const
{
    return bf16Unit && *bf16Unit > 0 ? std::optional<double>(mismatch / *bf16Unit) : std::nullopt;
}

std::optional<double> baselineUnitAt(const std::vector<CalibrationPoint>& points, std::int64_t step)
{
    for (const CalibrationPoint& p : points) {
        if (p.step == step && p.label == "baseline" && p.bf16Unit && *p.bf16Unit > 0) {
            return p.bf16Unit;
        }
    }
    return std::nullopt;
}

std::vector<CalibrationFlag> flagsAtStep(const CalibrationInfo& info, std::int64_t step)
{
    std::vector<CalibrationFlag> flags;
    for (const CalibrationFlag& flag : info.flags) {
        if (!flag.step || *flag.step == step) {
            flags.push_back(flag);
        }
    }
    return flags;
}

std::string describeFlag(const CalibrationFlag& flag)
{
    std::string text = flag.kind + (flag.step ? " at step " + std::to_string(*flag.step) : std::string());
    return flag.reason.empty() ? text : text + ": " + flag.reason;
}

std::pair<std::optional<double>, std::optional<double>> prefixShiftInterval(const std::string& detailsJson)
{
    const nlohmann::json details = nlohmann::json::parse(detailsJson, nullptr, false);
    if (details.is_object() && details.contains("prefix_shift_interval")) {
        const nlohmann::json& interval = details.at("prefix_shift_interval");
        if (interval.is_array() && interval.size() == 2 && interval[0].is_number() && interval[1].is_number()) {
            return {interval[0].get<double>(), interval[1].get<double>()};
        }
    }
    return {std::nullopt, std::nullopt};
}

std::optional<double> bf16Multiple(const AdmissionDecision& decision)
{
    if (decision.bf16Unit && *decision.bf16Unit > 0) {
        return decision.mismatch / *decision.bf16Unit;
    }
    return std::nullopt;
}

std::string admissionNotes(const AdmissionDecision& d, const std::string& separator)
{
    std::vector<std::string> notes;
    if (!d.protocolDiffers.empty()) {
        std::string fields;
        for (const std::string& field : d.protocolDiffers) {
            fields += (fields.empty() ? "" : ", ") + field;
        }
        notes.push_back("protocol differs from the calibration's: " + fields);
    }
    for (const CalibrationFlag& flag : d.calibrationFlags) {
        notes.push_back("calibration flagged: " + describeFlag(flag));
    }
    if (!d.thresholdNote.empty()) {
        notes.push_back("threshold: " + d.thresholdNote);
    }
    std::string text;
    for (const std::string& note : notes) {
        text += (text.empty() ? "" : separator) + note;
    }
    return text;
}

std::string estimatorCell(const metrics::EstimatorSummary& estimator)
{
    const auto correlation = [](const std::optional<double>& v) {
        if (!v) {
            return std::string("-");
        }
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.2f", *v);
        return std::string(buffer);
    };
    char mean[32];
    std::snprintf(mean, sizeof mean, "%.4g", estimator.mean);
    return std::string(mean) + " (" + correlation(estimator.pearson) + " / " + correlation(estimator.spearman) + ")";
}

std::string scanKvFormat(const std::string& configJson)
{
    const nlohmann::json config = nlohmann::json::parse(configJson, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.contains("kv") && config["kv"].is_object() && config["kv"].contains("format")
        && config["kv"]["format"].is_string()) {
        return config["kv"]["format"].get<std::string>();
    }
    return {};
}

std::vector<SensitivityScanInfo> AnalysisData::sensitivityScans() const
{
    std::map<std::int64_t, std::string> models;
    for (const store::ModelRecord& model : store_.listModels()) {
        models[model.id] = model.name;
    }
    std::vector<SensitivityScanInfo> scans;
    for (const store::SensitivityScanInfo& stored : store::sensitivityScans(store_)) {
        SensitivityScanInfo scan;
        scan.id = stored.id;
        scan.runId = stored.runId;
        scan.modelName = stored.modelId && models.count(*stored.modelId) ? models[*stored.modelId] : std::string();
        scan.format = stored.format;
        scan.kvFormat = scanKvFormat(stored.configJson);
        scan.bf16Unit = stored.bf16Unit;
        scan.createdAt = stored.createdAt;
        scan.status = stored.status;
        scans.push_back(std::move(scan));
    }
    return scans;
}

std::vector<SensitivityCell> AnalysisData::sensitivityCells(std::int64_t scanId) const
{
    std::vector<SensitivityCell> cells;
    const auto scan = store::sensitivityScan(store_, scanId);
    if (!scan) {
        return cells;
    }
    for (const store::SensitivityCell& stored : scan->cells) {
        SensitivityCell cell;
        cell.layer = stored.layer;
        cell.moduleGroup = stored.moduleGroup;
        cell.mismatch = stored.mismatch;
        cell.addedMismatch = stored.addedMismatch;
        cell.ciLow = stored.ciLow;
        cell.ciHigh = stored.ciHigh;
        cells.push_back(std::move(cell));
    }
    return cells;
}

std::vector<CalibrationInfo> AnalysisData::calibrations() const
{
    std::vector<CalibrationInfo> result;
    for (const store::CalibrationInfo& stored : store::calibrations(store_)) {
        result.push_back(calibrationFromStored(stored));
    }
    return result;
}

std::optional<CalibrationInfo> AnalysisData::calibrationInfo(std::int64_t calibrationId) const
{
    for (const store::CalibrationInfo& stored : store::calibrations(store_)) {
        if (stored.id == calibrationId) {
            return calibrationFromStored(stored);
        }
    }
    return std::nullopt;
}

std::vector<CalibrationPoint> AnalysisData::calibrationPoints(std::int64_t calibrationId) const
{
    std::vector<CalibrationPoint> points;
    const auto calibration = store::calibration(store_, calibrationId);
    if (!calibration) {
        return points;
    }
    const auto names = runNames(store_);
    for (const store::CalibrationPoint& stored : calibration->points) {
        CalibrationPoint point;
        point.runId = stored.runId;
        const auto name = names.find(stored.runId);
        point.runName = name == names.end() ? std::string() : name->second;
        if (stored.replicates > 1 && !stored.label.empty()) {
            // A replicate mean: the stored run id is only its first seed's run, so the run's name ("…/r0") would
            // label the mean as one seed's value.
            point.runName = calibration->info.name + "/" + stored.label + " (mean of "
                + std::to_string(stored.replicates) + " seeds)";
        }
        point.step = stored.step;
        point.mismatch = stored.mismatch;
        point.quality = stored.quality;
        point.relativeChange = stored.relativeChange;
        point.ciLow = stored.ciLow;
        point.ciHigh = stored.ciHigh;
        point.verdict = stored.verdict;
        point.changeLow = stored.changeLow;
        point.changeHigh = stored.changeHigh;
        point.label = stored.label;
        point.bf16Unit = stored.bf16Unit;
        point.trainingMismatch = stored.trainingMismatch;
        points.push_back(std::move(point));
    }
    return points;
}

std::vector<CalibrationBracket> AnalysisData::calibrationBrackets(std::int64_t calibrationId) const
{
    std::vector<CalibrationBracket> brackets;
    const auto calibration = store::calibration(store_, calibrationId);
    if (!calibration) {
        return brackets;
    }
    for (const store::CalibrationBracket& stored : calibration->brackets) {
        brackets.push_back({stored.step, stored.largestPassing, stored.smallestFailing, stored.threshold});
    }
    return brackets;
}

std::vector<AdmissionDecision> AnalysisData::admissionDecisions() const
{
    std::vector<AdmissionDecision> result;
    for (const store::AdmissionDecision& stored : store::admissionDecisions(store_)) {
        AdmissionDecision d;
        d.id = stored.id;
        d.runId = stored.runId;
        d.calibrationId = stored.calibrationId;
        d.candidateJson = stored.candidateJson;
        d.candidateName = candidateName(stored.candidateJson, stored.id);
        d.checkpoint = stored.checkpoint;
        d.mismatch = stored.mismatch;
        d.ciLow = stored.ciLow;
        d.ciHigh = stored.ciHigh;
        d.threshold = stored.threshold;
        d.decision = stored.decision;
        d.seconds = stored.seconds;
        d.toolVersion = stored.toolVersion;
        d.createdAt = stored.createdAt;
        const nlohmann::json candidate = nlohmann::json::parse(stored.candidateJson, nullptr, false);
        d.bf16Unit = numberAt(candidate, "bf16_unit");
        if (candidate.is_object()) {
            if (candidate.contains("recipe") && candidate.at("recipe").is_string()) {
                d.recipePath = candidate.at("recipe").get<std::string>();
            }
            if (candidate.contains("recipe_content") && candidate.at("recipe_content").is_object()) {
                d.recipeJson = candidate.at("recipe_content").dump();
            }
            if (candidate.contains("note") && candidate.at("note").is_string()) {
                d.thresholdNote = candidate.at("note").get<std::string>();
            }
            if (candidate.contains("protocol_differs") && candidate.at("protocol_differs").is_array()) {
                for (const auto& field : candidate.at("protocol_differs")) {
                    if (field.is_string()) {
                        d.protocolDiffers.push_back(field.get<std::string>());
                    }
                }
            }
        }
        d.staleness = static_cast<std::int64_t>(numberAt(candidate, "staleness").value_or(0.0));
        d.noise = numberAt(candidate, "noise").value_or(0.0);
        d.calibrationFlags = flagsFrom(candidate, "calibration_flags");
        result.push_back(std::move(d));
    }
    return result;
}

std::string AnalysisData::fingerprint() const
{
    store::Statement query(store_.handle(),
        "SELECT (SELECT count(*) || ':' || COALESCE(max(id), 0) FROM sensitivity_scans), "
        "(SELECT count(*) FROM sensitivity_cells), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM calibrations), "
        "(SELECT count(*) FROM calibration_points), (SELECT count(*) FROM calibration_brackets), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM admission_decisions), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM prefix_shift_analyses), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM breakdowns)");
    std::string text;
    if (query.step()) {
        for (int column = 0; column < 8; ++column) {
            text += query.text(column) + "/";
        }
    }
    return text;
}

} // namespace mismatch::report

#include "ui/analysis_data.h"

#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <map>

namespace mismatch::ui {

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

} // namespace

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
        result.push_back({stored.id, stored.runId, stored.name, stored.student, stored.createdAt});
    }
    return result;
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
        point.step = stored.step;
        point.mismatch = stored.mismatch;
        point.quality = stored.quality;
        point.relativeChange = stored.relativeChange;
        point.ciLow = stored.ciLow;
        point.ciHigh = stored.ciHigh;
        point.failed = stored.failed;
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
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM prefix_shift_analyses)");
    std::string text;
    if (query.step()) {
        for (int column = 0; column < 7; ++column) {
            text += query.text(column) + "/";
        }
    }
    return text;
}

} // namespace mismatch::ui

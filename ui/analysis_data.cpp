#include "ui/analysis_data.h"

#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

namespace mismatch::ui {

using store::Statement;

std::vector<SensitivityScanInfo> AnalysisData::sensitivityScans() const
{
    Statement query(store_.handle(),
        "SELECT s.id, s.run_id, COALESCE(m.name, ''), s.format, s.bf16_unit, s.created_at "
        "FROM sensitivity_scans s LEFT JOIN models m ON m.id = s.model_id ORDER BY s.id");
    std::vector<SensitivityScanInfo> scans;
    while (query.step()) {
        SensitivityScanInfo scan;
        scan.id = query.int64(0);
        scan.runId = query.optionalInt64(1);
        scan.modelName = query.text(2);
        scan.format = query.text(3);
        scan.bf16Unit = query.optionalReal(4);
        scan.createdAt = query.text(5);
        scans.push_back(std::move(scan));
    }
    return scans;
}

std::vector<SensitivityCell> AnalysisData::sensitivityCells(std::int64_t scanId) const
{
    Statement query(store_.handle(),
        "SELECT layer, module_group, mismatch, added_mismatch, ci_low, ci_high FROM sensitivity_cells "
        "WHERE scan_id = ? ORDER BY layer, module_group");
    query.bind(1, scanId);
    std::vector<SensitivityCell> cells;
    while (query.step()) {
        SensitivityCell cell;
        cell.layer = query.int64(0);
        cell.moduleGroup = query.text(1);
        cell.mismatch = query.real(2);
        cell.addedMismatch = query.real(3);
        cell.ciLow = query.optionalReal(4);
        cell.ciHigh = query.optionalReal(5);
        cells.push_back(std::move(cell));
    }
    return cells;
}

std::vector<CalibrationInfo> AnalysisData::calibrations() const
{
    Statement query(store_.handle(), "SELECT id, run_id, name, student, created_at FROM calibrations ORDER BY id");
    std::vector<CalibrationInfo> result;
    while (query.step()) {
        CalibrationInfo info;
        info.id = query.int64(0);
        info.runId = query.optionalInt64(1);
        info.name = query.text(2);
        info.student = query.text(3);
        info.createdAt = query.text(4);
        result.push_back(std::move(info));
    }
    return result;
}

std::vector<CalibrationPoint> AnalysisData::calibrationPoints(std::int64_t calibrationId) const
{
    Statement query(store_.handle(),
        "SELECT p.run_id, COALESCE(r.name, ''), p.step, p.mismatch, p.quality, p.relative_change, p.ci_low, "
        "p.ci_high, p.failed FROM calibration_points p LEFT JOIN runs r ON r.id = p.run_id "
        "WHERE p.calibration_id = ? ORDER BY p.mismatch, p.run_id, p.step");
    query.bind(1, calibrationId);
    std::vector<CalibrationPoint> points;
    while (query.step()) {
        CalibrationPoint point;
        point.runId = query.int64(0);
        point.runName = query.text(1);
        point.step = query.int64(2);
        point.mismatch = query.real(3);
        point.quality = query.real(4);
        point.relativeChange = query.optionalReal(5);
        point.ciLow = query.optionalReal(6);
        point.ciHigh = query.optionalReal(7);
        point.failed = query.int64(8) != 0;
        points.push_back(std::move(point));
    }
    return points;
}

std::vector<CalibrationBracket> AnalysisData::calibrationBrackets(std::int64_t calibrationId) const
{
    Statement query(store_.handle(),
        "SELECT step, largest_passing, smallest_failing, threshold FROM calibration_brackets "
        "WHERE calibration_id = ? ORDER BY step");
    query.bind(1, calibrationId);
    std::vector<CalibrationBracket> brackets;
    while (query.step()) {
        CalibrationBracket bracket;
        bracket.step = query.int64(0);
        bracket.largestPassing = query.optionalReal(1);
        bracket.smallestFailing = query.optionalReal(2);
        bracket.threshold = query.optionalReal(3);
        brackets.push_back(bracket);
    }
    return brackets;
}

namespace {
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

std::vector<AdmissionDecision> AnalysisData::admissionDecisions() const
{
    Statement query(store_.handle(),
        "SELECT id, run_id, calibration_id, candidate_json, checkpoint, mismatch, ci_low, ci_high, threshold, "
        "decision, seconds, tool_version, created_at FROM admission_decisions ORDER BY id");
    std::vector<AdmissionDecision> result;
    while (query.step()) {
        AdmissionDecision d;
        d.id = query.int64(0);
        d.runId = query.optionalInt64(1);
        d.calibrationId = query.optionalInt64(2);
        d.candidateJson = query.text(3);
        d.candidateName = candidateName(d.candidateJson, d.id);
        d.checkpoint = query.text(4);
        d.mismatch = query.real(5);
        d.ciLow = query.real(6);
        d.ciHigh = query.real(7);
        d.threshold = query.real(8);
        d.decision = query.text(9);
        d.seconds = query.real(10);
        d.toolVersion = query.text(11);
        d.createdAt = query.text(12);
        result.push_back(std::move(d));
    }
    return result;
}

std::string AnalysisData::fingerprint() const
{
    Statement query(store_.handle(),
        "SELECT (SELECT count(*) || ':' || COALESCE(max(id), 0) FROM sensitivity_scans), "
        "(SELECT count(*) FROM sensitivity_cells), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM calibrations), "
        "(SELECT count(*) FROM calibration_points), (SELECT count(*) FROM calibration_brackets), "
        "(SELECT count(*) || ':' || COALESCE(max(id), 0) FROM admission_decisions)");
    std::string text;
    if (query.step()) {
        for (int column = 0; column < 6; ++column) {
            text += query.text(column) + "/";
        }
    }
    return text;
}

} // namespace mismatch::ui

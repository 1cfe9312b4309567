#pragma once
// Read-only access to the analyses of a workspace (sensitivity scans, calibrations, admission decisions) for
// the GUI's views and the report (core/report/report.h), through core's analysis store (core/store/analysis_store.h),
// with the names they show (model and run names) resolved, and the texts both show. Nothing here writes. Every value
// is in nats per token unless its name says otherwise.
#include "core/metrics/estimators.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::report {

struct SensitivityScanInfo {
    std::int64_t id = 0;
    std::optional<std::int64_t> runId;
    std::string modelName; // empty when the scan names no registered model
    std::string format; // the format each cell was quantized to ("fp8_e4m3", "int4", ...)
    std::string kvFormat; // the KV cells' format (its configuration's kv.format); empty when not recorded
    std::optional<double> bf16Unit;
    std::string createdAt;
    std::string status = "finished"; // the scan's run: "running", "cancelled" or "failed" means partial
};

// The KV cells' format of a sensitivity scan from its stored configuration ({"kv": {"format": ...}}); empty when
// the configuration does not record one.
std::string scanKvFormat(const std::string& configJson);

struct SensitivityCell {
    std::int64_t layer = 0;
    std::string moduleGroup; // "q", "k", "v", "o", "gate", "up", "down", "kv", ...
    double mismatch = 0.0; // with this one group quantized
    double addedMismatch = 0.0; // mismatch - BF16 unit
    std::optional<double> ciLow;
    std::optional<double> ciHigh;
};

// A problem a calibration's protocol found with its own budget (config_json "flags"): "noise-dominated",
// "non-monotone", "null-failed" or "undecided", at one step or the whole calibration, with a sentence saying why.
struct CalibrationFlag {
    std::string kind;
    std::optional<std::int64_t> step; // nullopt: the whole calibration
    std::string reason;
};

struct CalibrationInfo {
    std::int64_t id = 0;
    std::optional<std::int64_t> runId;
    std::string name;
    std::string student;
    std::string createdAt;
    // The failure rule it was calibrated with (config_json; absent in files written before they were stored).
    std::optional<double> relativeThreshold; // fraction: 0.2 = a 20% rise of Q
    std::optional<double> confidence; // of the paired bootstrap interval
    std::optional<std::int64_t> resamples;
    std::vector<CalibrationFlag> flags; // empty: not flagged
};

// The flags of `info` that concern `step` (those of the whole calibration included).
std::vector<CalibrationFlag> flagsAtStep(const CalibrationInfo& info, std::int64_t step);
// "noise-dominated at step 20: REASON" (one line per flag).
std::string describeFlag(const CalibrationFlag& flag);

struct CalibrationPoint {
    std::int64_t runId = 0;
    std::string runName;
    std::int64_t step = 0;
    double mismatch = 0.0;
    double quality = 0.0;
    std::optional<double> relativeChange; // (Q_run - Q_base) / Q_base
    std::optional<double> ciLow; // interval of mean_i (q_i_run - q_i_base)
    std::optional<double> ciHigh;
    std::string verdict = "pass"; // "pass", "fail" or "undecided" (store::CalibrationPoint)
    bool failed() const { return verdict == "fail"; }
    bool undecided() const { return verdict == "undecided"; }
    std::optional<double> changeLow; // interval of the relative change that decided the verdict
    std::optional<double> changeHigh;
    std::string label; // the configuration ("baseline", "noise 0.1", ...); empty in calibrations stored before
    // The BF16 unit of this point's own runs over steps 1..step (the plain BF16 engine at their weights), nats per
    // token; absent in calibrations stored before it was measured per step.
    std::optional<double> bf16Unit;
    // The mean training-step mismatch over steps 1..step beside `mismatch`, the screen statistic (schema 10); absent
    // in calibrations stored before, whose `mismatch` is that training mean.
    std::optional<double> trainingMismatch;
    // mismatch / bf16Unit: the point's multiple of its own unit (absent without a positive unit).
    std::optional<double> bf16Multiple() const;
};

// The baseline's BF16 unit at `step` (the point labelled "baseline" there): the unit a bracket's threshold at that
// step is read against. nullopt when the calibration has no labelled baseline point with a unit at that step.
std::optional<double> baselineUnitAt(const std::vector<CalibrationPoint>& points, std::int64_t step);

struct CalibrationBracket {
    std::int64_t step = 0;
    std::optional<double> largestPassing;
    std::optional<double> smallestFailing;
    std::optional<double> threshold;
};

struct AdmissionDecision {
    std::int64_t id = 0;
    std::optional<std::int64_t> runId;
    std::optional<std::int64_t> calibrationId;
    std::string candidateJson;
    std::string candidateName; // the candidate's "name" (or its recipe's), else "#id"
    std::string checkpoint;
    double mismatch = 0.0;
    double ciLow = 0.0;
    double ciHigh = 0.0;
    double threshold = 0.0;
    std::string decision; // admit, reject, borderline
    double seconds = 0.0;
    std::string toolVersion;
    std::string createdAt;
    // From candidate_json (each absent in decisions stored before it existed):
    std::optional<double> bf16Unit; // the checkpoint's BF16 unit measured with it
    std::string recipePath; // empty: the BF16 engine
    std::string recipeJson; // the recipe's content as measured ("" when none)
    std::int64_t staleness = 0;
    double noise = 0.0;
    std::vector<std::string> protocolDiffers; // protocol fields measured differently from the calibration's
    std::vector<CalibrationFlag> calibrationFlags; // the calibration's flags when it was decided
    std::string thresholdNote; // how the threshold's bracket was chosen when not at the checkpoint's own step
};

// The prefix-shift part's interval an analysis stored in its details ("prefix_shift_interval": [low, high]); both
// ends nullopt when absent (an analysis stored before it was).
std::pair<std::optional<double>, std::optional<double>> prefixShiftInterval(const std::string& detailsJson);

// mismatch / BF16 unit, when the decision carries a positive unit.
std::optional<double> bf16Multiple(const AdmissionDecision& decision);

// The decision's warnings: "protocol differs from the calibration's: FIELDS", the calibration's flags and how its
// threshold was chosen, joined by `separator` ("" when none).
std::string admissionNotes(const AdmissionDecision& decision, const std::string& separator = "\n");

// An estimator's cell in the views' and the report's tables: "token mean (Pearson / Spearman)", "0.0123 (0.91 / 0.88)".
std::string estimatorCell(const metrics::EstimatorSummary& estimator);

// Reads through `store`'s connection (not owned). Throws StoreError from the store on a damaged database.
class AnalysisData {
public:
    explicit AnalysisData(const store::RunStore& store)
        : store_(store)
    {
    }

    std::vector<SensitivityScanInfo> sensitivityScans() const;
    std::vector<SensitivityCell> sensitivityCells(std::int64_t scanId) const;

    std::vector<CalibrationInfo> calibrations() const;
    std::optional<CalibrationInfo> calibrationInfo(std::int64_t calibrationId) const;
    std::vector<CalibrationPoint> calibrationPoints(std::int64_t calibrationId) const;
    std::vector<CalibrationBracket> calibrationBrackets(std::int64_t calibrationId) const;

    std::vector<AdmissionDecision> admissionDecisions() const;

    // Changes whenever any analysis table gains, loses or changes rows (row counts and newest ids; cheap: these
    // tables are small). Views re-read only when it moved.
    std::string fingerprint() const;

private:
    const store::RunStore& store_;
};

} // namespace mismatch::report

#pragma once
// One JSON shape per job result: what the CLI's `--json` prints and what the catalogue job's run (and resume)
// returns to `mismatch run` and to a study's later steps (core/jobs/job_spec.h), so the two never differ. Every
// value is in nats per token unless its key says otherwise; intervals are paired bootstrap intervals (95% unless
// the result gives its confidence). The jobs whose result type already has one (admission, time-to-quality,
// compare-objectives, demo) keep it in their own header.
#include "core/analysis/breakdown.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/prefix_shift.h"
#include "core/analysis/recipe_builder.h"
#include "core/analysis/sensitivity.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace mismatch::analysis {

// A scan: its cells (mismatch and added mismatch over the BF16 unit with their intervals), the BF16 unit, the KV
// format of its KV cells (`options`: what the scan was asked, or parseSensitivityConfig of a resumed one).
nlohmann::json toJson(const SensitivityResult& result, const SensitivityOptions& options);

// A built recipe: the cells kept in BF16 step by step, its mismatch against the budget, weight memory and KV
// capacity against BF16. `budgetSource`: where the budget came from ("budget", "calibration 3").
nlohmann::json toJson(const RecipeBuildResult& result, const RecipeBuildOptions& options, const std::string& budgetSource);

// A prefix-shift analysis: total, per-token and prefix-shift parts, divergence, by position, TIS/MIS corrections,
// the sampled-token estimators.
nlohmann::json toJson(const PrefixShiftResult& result);

// A breakdown run: each candidate's record (toJson of the record).
nlohmann::json toJson(const BreakdownResult& result);
// One candidate's breakdown as stored: its parts by each method, the subsets measured, total and BF16 unit.
nlohmann::json toJson(const store::BreakdownRecord& record);

// A calibration: its sweep runs, points, null comparisons, budget brackets, flags, rule and protocol.
// `command`: the reproducing command line (null when not known, e.g. a resumed calibration's).
nlohmann::json toJson(const CalibrationResult& result, const CalibrationOptions& options, const nlohmann::json& command);
// The calibration's failure rule in words (its JSON's "rule", the CLI's text).
std::string calibrationRuleText(
    const metrics::FailureRuleOptions& rule, std::int64_t replicates, std::int64_t maxReplicates);

// A training run: status, steps stored, final quality and accuracy, last checkpoint; `run` is the stored run (its
// name and status; nullopt reads as "unknown"), `workspace` the workspace directory.
nlohmann::json toJson(const train::TrainResult& result, const std::optional<store::RunInfo>& run,
    const std::string& workspace);

} // namespace mismatch::analysis

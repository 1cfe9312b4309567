#pragma once
// Runs imported from outside tools (verl, Tinker, CSV logs, AIMET sensitivity files). An imported run is a `runs`
// row of kind "external" (status finished) with an `external_runs` row naming the source, the file and the
// estimator of every measure; a log brings its `step_metrics`, an AIMET file a `sensitivity_scans` row with its
// `sensitivity_cells`. Each import is written in one transaction: a failure leaves the store unchanged.
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::store {

struct ExternalRunSpec {
    std::string name;
    std::string source; // "verl", "tinker", "csv", "aimet"
    std::string file; // the imported file as given
    std::string configJson = "{}"; // the runs row's config_json
    std::string estimatorJson = "{}"; // external_runs.estimator_json: what each stored measure was computed by
};

// One cell of an imported sensitivity matrix (layer -1 for the embedding and lm_head).
struct ExternalSensitivityCell {
    std::int64_t layer = 0;
    std::string moduleGroup; // q, k, v, o, gate, up, down, embed_tokens, lm_head
    double value = 0.0; // sensitivity_cells.mismatch: the source's own value in its own unit
    double added = 0.0; // sensitivity_cells.added_mismatch: its sensitivity, larger = more sensitive
};

struct ExternalScanSpec {
    std::string format; // sensitivity_scans.format
    std::string configJson = "{}"; // sensitivity_scans.config_json (units, reference, analysis)
    std::vector<ExternalSensitivityCell> cells;
};

struct ExternalImportIds {
    std::int64_t runId = 0;
    std::optional<std::int64_t> scanId;
};

// Stores the run, its steps (any order; a repeated step is a StoreError) and, when given, a sensitivity scan.
// All or nothing. Throws StoreError naming the workspace for a read-only store or a failed insert.
ExternalImportIds storeExternalRun(RunStore& store, const ExternalRunSpec& run, const std::vector<StepMetrics>& steps,
    const std::optional<ExternalScanSpec>& scan = std::nullopt);

// One batch of a log followed while its trainer writes it (io/import_follow.h), in one transaction. When `runId` is
// 0 the run is recorded first, running (RunStore::beginRun: its writer lock, provenance and the thread's
// RunBeginListener), with its external_runs row; else the run's config_json and estimator record become `run`'s.
// Each of `steps` is written; a step the run has already is written again under a new row id (one row per run and
// step), so that a reader following the run's rows (RunStore::stepsAfter) reads its new values. Returns the run id.
// StoreError naming the workspace for a read-only store or a failed write (nothing of the batch is then written).
std::int64_t storeFollowedSteps(
    RunStore& store, std::int64_t runId, const ExternalRunSpec& run, const std::vector<StepMetrics>& steps);

struct ExternalRunInfo {
    std::int64_t runId = 0;
    std::string source;
    std::string file;
    std::string estimatorJson;
    std::string importedAt;
};

// The external_runs row of a run, or nullopt for a local run.
std::optional<ExternalRunInfo> externalRun(const RunStore& store, std::int64_t runId);

// An imported run placed on the sampled-token estimators' axes (issue 21): what it logged under each estimator
// that local measurements also report (metrics::EstimatorComparison: k1, k3, mult_prob_error, prob_diff), as the
// mean over its steps of the logged per-step value. Imported runs have no full-vocabulary KL: only the estimator
// their trainer logged. Measures map to estimators as the import records them (io/import_log.h): k1 -> k1,
// k3 -> k3, mult_prob_error -> mult_prob_error, prob_diff_mean -> prob_diff; others (k2, chi2, ...) have no local
// counterpart and are left out.
struct ImportedEstimatorValue {
    std::string estimator; // k1, k3, mult_prob_error, prob_diff
    std::string key; // the logged key it was read from ("rollout_corr/kl")
    double mean = 0.0; // mean over the steps that logged it
    std::int64_t steps = 0;
};
struct ImportedEstimators {
    std::int64_t runId = 0;
    std::string name;
    std::string source; // verl, tinker, tensorboard, csv
    std::vector<ImportedEstimatorValue> values; // in the order k1, k3, mult_prob_error, prob_diff; only those logged
};
// Every imported run that logged at least one of the four, in run order. A run whose estimator record cannot be
// read (hand-edited) is left out rather than guessed at.
std::vector<ImportedEstimators> importedEstimators(const RunStore& store);

} // namespace mismatch::store

#include "core/store/schema.h"

#include "core/common/error.h"
#include "core/store/sqlite_util.h"

#include <string>

namespace mismatch::store {

namespace {

// Version 1: the objects the first tool version stored (models, recipes, prompt sets, runs and their steps).
const char* kSchemaV1 = R"sql(
CREATE TABLE models (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  path TEXT NOT NULL UNIQUE,
  architecture TEXT NOT NULL,
  parameter_count INTEGER NOT NULL DEFAULT 0,
  config_json TEXT NOT NULL DEFAULT '{}',
  added_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE recipes (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  path TEXT,
  content TEXT NOT NULL,
  added_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE prompt_sets (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  path TEXT NOT NULL UNIQUE,
  prompt_count INTEGER NOT NULL DEFAULT 0,
  added_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  kind TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('running','finished','failed','cancelled')),
  config_json TEXT NOT NULL DEFAULT '{}',
  model_id INTEGER REFERENCES models(id) ON DELETE SET NULL,
  started_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')),
  finished_at TEXT,
  error TEXT,
  tool_version TEXT NOT NULL DEFAULT ''
);
CREATE TABLE step_metrics (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  mismatch_kl REAL,
  k1 REAL,
  k3 REAL,
  bf16_multiple REAL,
  loss REAL,
  reward REAL,
  accuracy REAL,
  entropy REAL,
  staleness INTEGER,
  rollout_tokens_per_s REAL,
  train_tokens_per_s REAL,
  wall_time_s REAL,
  extras_json TEXT NOT NULL DEFAULT '{}',
  UNIQUE (run_id, step)
);
CREATE INDEX step_metrics_run ON step_metrics(run_id, id);
)sql";

// Version 2: analyses (evaluations with per-problem values, sensitivity scans, calibrations, admission
// decisions) and runs imported from external trainers.
const char* kSchemaV2 = R"sql(
CREATE TABLE evaluations (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  prompt_set_id INTEGER REFERENCES prompt_sets(id) ON DELETE SET NULL,
  quality REAL,
  accuracy REAL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')),
  UNIQUE (run_id, step)
);
CREATE TABLE evaluation_problems (
  evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
  problem_index INTEGER NOT NULL,
  problem_id TEXT NOT NULL,
  quality REAL NOT NULL,
  correct INTEGER NOT NULL,
  PRIMARY KEY (evaluation_id, problem_index)
);
CREATE TABLE sensitivity_scans (
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  model_id INTEGER REFERENCES models(id) ON DELETE SET NULL,
  format TEXT NOT NULL,
  bf16_unit REAL,
  config_json TEXT NOT NULL DEFAULT '{}',
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE sensitivity_cells (
  scan_id INTEGER NOT NULL REFERENCES sensitivity_scans(id) ON DELETE CASCADE,
  layer INTEGER NOT NULL,
  module_group TEXT NOT NULL,
  mismatch REAL NOT NULL,
  added_mismatch REAL NOT NULL,
  ci_low REAL,
  ci_high REAL,
  PRIMARY KEY (scan_id, layer, module_group)
);
CREATE TABLE calibrations (
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  name TEXT NOT NULL,
  student TEXT NOT NULL,
  config_json TEXT NOT NULL DEFAULT '{}',
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE calibration_points (
  calibration_id INTEGER NOT NULL REFERENCES calibrations(id) ON DELETE CASCADE,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  mismatch REAL NOT NULL,
  quality REAL NOT NULL,
  relative_change REAL,
  ci_low REAL,
  ci_high REAL,
  failed INTEGER NOT NULL,
  PRIMARY KEY (calibration_id, run_id, step)
);
CREATE TABLE calibration_brackets (
  calibration_id INTEGER NOT NULL REFERENCES calibrations(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  largest_passing REAL,
  smallest_failing REAL,
  threshold REAL,
  PRIMARY KEY (calibration_id, step)
);
CREATE TABLE admission_decisions (
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  calibration_id INTEGER REFERENCES calibrations(id) ON DELETE SET NULL,
  candidate_json TEXT NOT NULL,
  checkpoint TEXT NOT NULL,
  mismatch REAL NOT NULL,
  ci_low REAL NOT NULL,
  ci_high REAL NOT NULL,
  threshold REAL NOT NULL,
  decision TEXT NOT NULL CHECK (decision IN ('admit','reject','borderline')),
  seconds REAL NOT NULL,
  tool_version TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE external_runs (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  source TEXT NOT NULL,
  file TEXT NOT NULL,
  estimator_json TEXT NOT NULL DEFAULT '{}',
  imported_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
)sql";


// Version 3: the analyses' extra measures. Sensitivity cells get the interval of their own mismatch (ci_low and
// ci_high are the added mismatch's paired interval), their token count and time; prefix-shift analyses with
// their paired generations (tokens and per-token KL, for the viewer).
const char* kSchemaV3 = R"sql(
ALTER TABLE sensitivity_cells ADD COLUMN mismatch_ci_low REAL;
ALTER TABLE sensitivity_cells ADD COLUMN mismatch_ci_high REAL;
ALTER TABLE sensitivity_cells ADD COLUMN tokens INTEGER;
ALTER TABLE sensitivity_cells ADD COLUMN seconds REAL;
CREATE TABLE prefix_shift_analyses (
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  model TEXT NOT NULL,
  configuration_json TEXT NOT NULL,
  total REAL NOT NULL,
  per_token REAL NOT NULL,
  prefix_shift REAL NOT NULL,
  bf16_unit REAL NOT NULL,
  total_ci_low REAL,
  total_ci_high REAL,
  per_token_ci_low REAL,
  per_token_ci_high REAL,
  pairs INTEGER NOT NULL,
  diverged INTEGER NOT NULL,
  details_json TEXT NOT NULL DEFAULT '{}',
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE prefix_shift_pairs (
  analysis_id INTEGER NOT NULL REFERENCES prefix_shift_analyses(id) ON DELETE CASCADE,
  pair_index INTEGER NOT NULL,
  prompt_id TEXT NOT NULL,
  prompt_tokens_json TEXT NOT NULL,
  first_divergence INTEGER,
  candidate_tokens_json TEXT NOT NULL,
  candidate_kl_json TEXT NOT NULL,
  reference_tokens_json TEXT NOT NULL,
  reference_kl_json TEXT NOT NULL,
  PRIMARY KEY (analysis_id, pair_index)
);
)sql";

// Version 4: calibrations with seed replicates. A point is a configuration's replicate mean: its label, how many
// replicates it averages, the BF16 unit of its own runs up to its step and the held-out accuracy.
const char* kSchemaV4 = R"sql(
ALTER TABLE calibration_points ADD COLUMN label TEXT;
ALTER TABLE calibration_points ADD COLUMN replicates INTEGER NOT NULL DEFAULT 1;
ALTER TABLE calibration_points ADD COLUMN bf16_unit REAL;
ALTER TABLE calibration_points ADD COLUMN accuracy REAL;
)sql";

// Version 5: the token drill-down's details of stored prefix-shift pairs (per token: mu and pi of the chosen token,
// entropies, top-5 of each distribution; store::TokenDetail), and mismatch breakdowns by source
// (core/analysis/breakdown.h). One row per candidate of a `breakdown` run,
// its parts per method (add-one-in, leave-one-out, Shapley; source "interaction" for the remainder) and the
// measurement of every subset of its sources that was switched on (with the sampled-token estimators).
const char* kSchemaV5 = R"sql(
CREATE TABLE breakdowns (
  id INTEGER PRIMARY KEY,
  run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  candidate TEXT NOT NULL,
  model TEXT NOT NULL,
  configuration_json TEXT NOT NULL DEFAULT '{}',
  sources_json TEXT NOT NULL DEFAULT '[]',
  total REAL NOT NULL,
  total_ci_low REAL,
  total_ci_high REAL,
  bf16_unit REAL NOT NULL,
  unit_ci_low REAL,
  unit_ci_high REAL,
  tokens INTEGER NOT NULL,
  shapley INTEGER NOT NULL DEFAULT 0,
  seconds REAL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now'))
);
CREATE TABLE breakdown_parts (
  breakdown_id INTEGER NOT NULL REFERENCES breakdowns(id) ON DELETE CASCADE,
  method TEXT NOT NULL CHECK (method IN ('add_one_in','leave_one_out','shapley')),
  source TEXT NOT NULL,
  value REAL NOT NULL,
  ci_low REAL,
  ci_high REAL,
  PRIMARY KEY (breakdown_id, method, source)
);
CREATE TABLE breakdown_subsets (
  breakdown_id INTEGER NOT NULL REFERENCES breakdowns(id) ON DELETE CASCADE,
  subset TEXT NOT NULL,
  mismatch REAL NOT NULL,
  ci_low REAL,
  ci_high REAL,
  k1 REAL,
  k3 REAL,
  tokens INTEGER NOT NULL,
  estimators_json TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (breakdown_id, subset)
);
ALTER TABLE prefix_shift_pairs ADD COLUMN candidate_detail_json TEXT;
ALTER TABLE prefix_shift_pairs ADD COLUMN reference_detail_json TEXT;
)sql";

}  // namespace

// Version 6: the catalogue job that started a run (core/jobs: JobSpec::toJson, {"job", "parameters"}), so that a
// stored run says exactly what was asked and `mismatch run --resume RUN` reads the request back with
// JobSpec::fromJson. NULL for runs started otherwise (before version 6, a sweep's training runs, imports).
const char* kSchemaV6 = R"sql(
ALTER TABLE runs ADD COLUMN job_json TEXT;
)sql";

// Version 7: an admission decision's candidate generations on its first prompts, token by token (per-token KL and
// store::TokenDetail as JSON), for the token drill-down from the admission table.
const char* kSchemaV7 = R"sql(
CREATE TABLE admission_generations (
  decision_id INTEGER NOT NULL REFERENCES admission_decisions(id) ON DELETE CASCADE,
  generation_index INTEGER NOT NULL,
  prompt_id TEXT NOT NULL,
  prompt_tokens_json TEXT NOT NULL,
  tokens_json TEXT NOT NULL,
  kl_json TEXT NOT NULL,
  detail_json TEXT NOT NULL,
  PRIMARY KEY (decision_id, generation_index)
);
)sql";

// Version 8: a training run's rollouts at step 1, every evaluation step and the last step (its first sequences),
// token by token as admission_generations, for the token drill-down from a run's step.
const char* kSchemaV8 = R"sql(
CREATE TABLE step_generations (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  generation_index INTEGER NOT NULL,
  prompt_id TEXT NOT NULL,
  prompt_tokens_json TEXT NOT NULL,
  tokens_json TEXT NOT NULL,
  kl_json TEXT NOT NULL,
  detail_json TEXT NOT NULL,
  PRIMARY KEY (run_id, step, generation_index)
);
)sql";

// Version 9: three verdicts per calibration point (spec "Failure rule"): "pass", "fail" or "undecided", decided by
// the interval of the relative quality change d (change_low, change_high), no longer by d's point estimate. Points
// stored before keep `failed` and read as "fail" / "pass" with no interval of d.
const char* kSchemaV9 = R"sql(
ALTER TABLE calibration_points ADD COLUMN verdict TEXT;
ALTER TABLE calibration_points ADD COLUMN change_low REAL;
ALTER TABLE calibration_points ADD COLUMN change_high REAL;
)sql";

// Version 10: provenance (spec "Reproducibility"): every run records the tool's version, commit and compute path
// when it begins and each time it is resumed (provenance_json, a JSON list of common/provenance.h records; NULL for
// runs begun before). And one statistic on both axes (spec "Same statistic on both axes"): a calibration point's mismatch is
// measured as a screen measures it, on its runs' checkpoints at the step under the calibration's protocol; the mean
// training-step mismatch over steps 1..step is kept beside it (training_mismatch). NULL: a point stored before,
// whose mismatch is that training mean.
const char* kSchemaV10 = R"sql(
ALTER TABLE calibration_points ADD COLUMN training_mismatch REAL;
ALTER TABLE runs ADD COLUMN provenance_json TEXT;
)sql";

// Version 11: shards and merging (store_merge.h). Every workspace gets a random id when it is created or migrated
// (workspace_meta 'workspace_id'), which names it as a shard wherever its directory is copied; merged_runs records,
// per run merged in from a shard, the shard's id and run (its id, start and name: a workspace copied before its runs
// began shares its id with its copies, its runs do not share all three), so that merging a shard again adds nothing.
const char* kSchemaV11 = R"sql(
CREATE TABLE workspace_meta (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
INSERT INTO workspace_meta (key, value) VALUES ('workspace_id', lower(hex(randomblob(16))));
CREATE TABLE merged_runs (
  run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  shard_workspace_id TEXT NOT NULL,
  shard_run_id INTEGER NOT NULL,
  shard_run_started_at TEXT NOT NULL,
  shard_run_name TEXT NOT NULL,
  shard_path TEXT NOT NULL,
  merged_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')),
  UNIQUE (shard_workspace_id, shard_run_id, shard_run_started_at, shard_run_name)
);
)sql";

const std::vector<const char*>& migrations()
{
    static const std::vector<const char*> all
        = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4, kSchemaV5, kSchemaV6, kSchemaV7, kSchemaV8, kSchemaV9,
            kSchemaV10, kSchemaV11};
    return all;
}

std::vector<std::string> tablesCreatedBy(int version)
{
    std::vector<std::string> tables;
    if (version < 1 || version > static_cast<int>(migrations().size())) {
        return tables; // no migration creates anything
    }
    const std::string text = migrations().at(static_cast<size_t>(version - 1));
    const std::string marker = "CREATE TABLE ";
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + marker.size())) {
        const size_t begin = at + marker.size();
        const size_t end = text.find_first_of(" (", begin);
        tables.push_back(text.substr(begin, end - begin));
    }
    return tables;
}

void migrate(sqlite3* db, int fromVersion, int toVersion)
{
    const auto& all = migrations();
    // PRAGMA user_version is any 32-bit number: one outside 0..current (a negative one, written by hand) has no
    // migration, and is refused naming the file and the version rather than indexing past the list.
    if (fromVersion < 0 || toVersion > static_cast<int>(all.size()) || fromVersion > toVersion) {
        const char* file = sqlite3_db_filename(db, "main");
        throw StoreError(file && *file ? file : "<workspace>",
            "schema version " + std::to_string(fromVersion)
                + " is not one of Mismatch Lab's (PRAGMA user_version must lie in 0.."
                + std::to_string(all.size()) + ")");
    }
    for (int version = fromVersion; version < toVersion; ++version) {
        execute(db, all.at(static_cast<size_t>(version)));
    }
    execute(db, ("PRAGMA user_version = " + std::to_string(toVersion)).c_str());
    execute(db, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
}

}  // namespace mismatch::store

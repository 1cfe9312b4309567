#pragma once
// Budget calibration (`mismatch calibrate`, spec "Budget"): a sweep of training runs of one student at
// increasing mismatch plus the BF16-engine baseline; at each chosen step every run is compared with the baseline
// by the failure rule, and the budget bracket [largest passing mismatch, smallest failing mismatch] is stored.
//
// Every sweep run is the base run file with one change to its rollout configuration:
//   noise sigma s   rollout.noise.sigma = s (other rollout settings as the base with no recipe, staleness 0)
//   recipe R        rollout.recipe = R
//   staleness k     rollout.staleness = k (synchronous loop; the asynchronous loop gives the same numbers)
// and the baseline is the base with the plain BF16 engine (no recipe, no noise, staleness 0). All runs share the
// seed, prompts and evaluation set, so their per-problem q_i pair up. A run's mismatch at step S is the mean
// of its step mismatch over steps 1..S (the spec's run mismatch, up to that step). Runs whose failure is
// decided are stored as ordinary training runs (kind "train"), the calibration as a run of kind "calibrate"
// with its points and brackets (core/store/analysis_store.h).
//
// Resume (resumeCalibration, `mismatch calibrate --resume RUN`): the calibration run's config_json holds every
// option (recipe paths made absolute), digests of its input files (job_resume.h; a changed file is an InputError
// naming it) and "sweep_runs", the ids of its sweep runs, each linked in the transaction that records it. A
// resume keeps the finished sweep runs, continues the interrupted one from its newest checkpoint
// (train::resumeTraining; from step 1 when it has none), runs the rest, and then stores the points and brackets
// once, in the transaction that marks the run finished. Every draw is a function of the seeds, so a resumed
// calibration stores what an uninterrupted one would (wall times aside).
#include "core/common/progress.h"
#include "core/metrics/bootstrap.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct CalibrationOptions {
    std::string name = "calibration";
    train::RunConfig base; // the student's standard run (its rollout settings are replaced per sweep run)
    std::vector<double> noiseSigmas; // > 0
    std::vector<std::string> recipes; // recipe files
    std::vector<std::int64_t> staleness; // >= 1
    std::vector<std::int64_t> steps; // where the failure rule is applied; each must be an evaluated step
    metrics::FailureRuleOptions rule;
    double margin = 0.0; // admission threshold = largest passing * (1 - margin)
    std::string workspaceDirectory; // checkpoints (default: the store's directory)
    // Called once the calibration's run is recorded, with its id (front-ends print it).
    std::function<void(std::int64_t runId)> onRunStarted;
};

struct CalibrationSweepRun {
    std::string label; // "baseline", "noise 0.1", "recipe fp8-kv", "staleness 2"
    std::int64_t runId = 0;
    double wallSeconds = 0.0;
};

struct CalibrationResult {
    std::int64_t calibrationId = 0;
    std::int64_t runId = 0; // the "calibrate" run
    std::vector<CalibrationSweepRun> runs; // the baseline first
    std::vector<store::CalibrationPoint> points; // every sweep run (baseline included) at every step
    std::vector<store::CalibrationBracket> brackets; // per step
    double bf16Unit = 0.0; // the baseline's mean BF16 unit (nats/token)
    double wallSeconds = 0.0;
};

// The default sweep of `mismatch calibrate` on a base run: noise sigmas (relative to each tensor's RMS).
std::vector<double> defaultNoiseSigmas();

// Checks the options (InputError naming the option): at least one sweep entry, positive sigmas, staleness >= 1,
// steps within 1..base.steps that the base evaluates (multiples of evaluation.every, or the last step), a base
// with an evaluation set and an OPD objective. Runs the sweep; Progress fraction over all runs' steps,
// cancellable (the calibration is then stored with nothing; the runs done stay in the store as cancelled or
// finished training runs).
CalibrationResult runCalibration(store::RunStore& store, const CalibrationOptions& options, Progress& progress);
// The options calibrate run `runId` was started with (its config_json); InputError as resumeCalibration.
CalibrationOptions storedCalibrationOptions(const store::RunStore& store, std::int64_t runId);
// Continues calibrate run `runId` (see above), checkpoints under `workspaceDirectory` (empty: the store's
// directory). InputError when the run does not exist, is not a calibration, has finished or an input changed.
CalibrationResult resumeCalibration(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::string& workspaceDirectory = {}, const std::function<void(std::int64_t runId)>& onRunStarted = {});

} // namespace mismatch::analysis

#pragma once
// Budget calibration (`mismatch calibrate`, spec "Budget", "Seed replicates and noise floor"): a sweep of training
// runs of one student at increasing mismatch plus the BF16-engine baseline, each trained with R seeds; at each
// chosen step every configuration is compared with the baseline by the failure rule applied to the replicate
// means, and the budget bracket [largest passing mismatch, smallest failing mismatch] is stored.
//
// Every sweep run is the base run file with one change to its rollout configuration:
//   noise sigma s   rollout.noise.sigma = s (other rollout settings as the base with no recipe, staleness 0)
//   recipe R        rollout.recipe = R
//   staleness k     rollout.staleness = k (synchronous loop; the asynchronous loop gives the same numbers)
// and the baseline is the base with the plain BF16 engine (no recipe, no noise, staleness 0).
//
// Replicates. Replicate r (0, 1, ...) of every configuration runs with seed replicateSeed(base.seed, r) (r = 0 is
// the base seed itself) and noise seed replicateSeed(noise.seed, r): a different prompt order, different rollout
// and evaluation draws and a different noise draw. All runs evaluate the same held-out problems, so q_i pair up by
// problem across every run. The failure rule compares a configuration's replicate-mean Q with the baseline's
// through the interval of the relative change d = (Q_run - Q_base) / Q_base (metrics::applyFailureRule: the paired
// problem bootstrap plus each group's seed variance with Student's t, so that two seeds are not understated), and
// gives one of three verdicts: fail (the interval at or above the line), pass (below), undecided (it contains the
// line).
//
// Seeds until decided (spec "Seed replicates and noise floor"). Every configuration starts with `replicates`
// seeds, the null group too. The stopping rule, fixed before any run: after every round, the verdicts are
// computed at every rule step from all runs so far; each configuration with an undecided point at some step and
// fewer than `maxReplicates` seeds gets one more seed, and in that round the baseline and the null group get one
// more each too (their seed term is in every interval and in the noise floor); so does the null group alone when
// the null comparison is undecided. It stops when no point is undecided, or when every undecided configuration has
// maxReplicates seeds. Nothing else (no point estimate, no interval width) decides when to stop, and the final
// verdicts are computed once from all runs. A point may gain or lose decidedness as the baseline gains seeds; the
// rule keeps adding seeds to whatever is undecided.
//
// One statistic on both axes (spec "Same statistic on both axes"). At rule step S a point's mismatch is measured
// the way `admit` measures a screen (measureScreen: admission.h): each replicate's checkpoint at step S, the
// configuration as a candidate (its noise sigma with the run's noise seed and modules, its recipe, its staleness,
// whose engine weights are the run's own from S - k, kept in the checkpoint's history), on the calibration's
// protocol, replicate mean; the BF16 unit likewise at the checkpoint. So a configuration that set the threshold is
// screened at the threshold it set. The mean training-step mismatch over steps 1..S (fresh random prompts, noise
// redrawn every step) is kept beside it as the point's trainingMismatch, labelled. Sweep runs save a checkpoint at
// every rule step for this.
//
// Null comparison and flags. The baseline is also trained with further seeds (the null group: r = maxReplicates,
// maxReplicates + 1, ..., disjoint from every configuration's) and compared with
// the baseline by the same rule at every step: the quality change of two identical configurations. The noise floor
// is the half-width of its interval of d (what the comparison of two identical configurations cannot tell from
// zero), not its point estimate. A step is flagged
//   "null-failed"      the null comparison fails the rule (seed variance alone looks like damage),
//   "noise-dominated"  the noise floor is more than noiseFloorFraction of the failure line,
//   "non-monotone"     a configuration failed at a smaller mismatch than one that passed,
//   "undecided"        an undecided point lies between the bracket's ends (brackets use decided points only),
// each with its reason; a flagged calibration is reported as such wherever it is shown and by every admission
// check against it.
//
// Protocol (protocol.h): the calibration stores calibrationProtocol(base, probeCount), the screening protocol
// under which its budget is to be compared; admission checks and recipe builds use it by default.
//
// Runs whose failure is decided are stored as ordinary training runs (kind "train"), the calibration as a run of
// kind "calibrate" with its points (one per configuration and step, replicate means) and brackets
// (core/store/analysis_store.h); the replicates' own figures, the null comparisons, the flags and the protocol are
// in the calibration's config_json.
//
// Resume (resumeCalibration, `mismatch calibrate --resume RUN`, with the options of the job spec its run stored):
// the calibration run's config_json records every option (recipe paths made absolute; a resume's options must make
// the same record), digests of its input files (job_resume.h; a changed file is an InputError
// naming it), "sweep_runs", the ids of its runs in the order they are trained (replicate 0 of every
// configuration, then replicate 1, ..., then the null group; then each added round: the baseline, the undecided
// configurations, the null group), each linked in the transaction that records it, and "screens", each
// checkpoint's screen measurement as it is made. A resume keeps the finished runs and the screens made, continues
// the interrupted run from its newest checkpoint (train::resumeTraining; from step 1 when it has none), decides
// the added rounds again from the stored runs (the same stopping rule on the same figures), runs the rest, and
// then stores the points and brackets once, in the transaction that marks the run finished. Every draw is a
// function of the seeds, so a resumed calibration stores what an uninterrupted one would (wall times aside).
#include "core/analysis/protocol.h"
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

struct CalibrationUnit {
    std::string label; // "baseline", "noise 0.1", "recipe fp8-kv", "staleness 2", "null"
    std::int64_t replicate = 0; // 0..max_replicates-1; the null group max_replicates..2*max_replicates-1
    bool operator<(const CalibrationUnit& other) const
    {
        return label != other.label ? label < other.label : replicate < other.replicate;
    }
    bool operator==(const CalibrationUnit& other) const
    {
        return label == other.label && replicate == other.replicate;
    }
};

struct CalibrationOptions {
    std::string name = "calibration";
    train::RunConfig base; // the student's standard run (its rollout settings are replaced per sweep run)
    std::vector<double> noiseSigmas; // > 0
    std::vector<std::string> recipes; // recipe files
    std::vector<std::int64_t> staleness; // >= 1
    std::vector<std::int64_t> steps; // where the failure rule is applied; each must be an evaluated step
    metrics::FailureRuleOptions rule;
    double margin = 0.0; // admission threshold = largest passing * (1 - margin)
    // "noise-dominated" when the noise floor exceeds this fraction of the failure line (0, 1]. At 0.5 a point must
    // change Q by less than half the line to pass or by more than 1.5 times it to fail: only points at least half
    // the line away from it can be decided, and a budget from such a calibration is mostly undecided points.
    double noiseFloorFraction = 0.5;
    std::int64_t replicates = 2; // seeds per configuration at the start (>= 1); the null group starts with as many
    // Seeds an undecided configuration may grow to (>= replicates; equal: no seeds are added). At 4 a calibration
    // trains at most twice the runs of 2 seeds; when the seed term dominates, an interval's half-width goes as
    // t(2n - 2) / sqrt(n) for n seeds a group: 3.04, 1.60, 1.22, 1.03 for n = 2..5, so the 3rd and 4th seeds narrow
    // it by 47% and 24%, a 5th by 15% for another run per configuration.
    std::int64_t maxReplicates = 4;
    // BF16 unit of the non-BF16 runs: measured at step 1 and every this many steps (>= 1; the baseline is its own
    // unit at every step). Overrides the base's evaluation.bf16_unit_every.
    std::int64_t unitEvery = 1;
    std::int64_t probeCount = 128; // prompts of the protocol's screens (of the base's training prompt set)
    std::string workspaceDirectory; // checkpoints (default: the store's directory)
    // Called once the calibration's run is recorded, with its id (front-ends print it).
    std::function<void(std::int64_t runId)> onRunStarted;
    // Scale-out (core/jobs/cluster.h, "Units" below). `unit`: train only this sweep run and measure its screens, as
    // a run of kind "calibrate_unit" (a cluster node's share, in its own shard workspace). `fromUnits`: the decision
    // step in the workspace the units' shards were merged into; every sweep run is a finished unit's run found
    // there (with its screens), nothing is trained or measured.
    std::optional<CalibrationUnit> unit;
    bool fromUnits = false;
};

// Units (scale-out). A calibration's training runs are independent: each (configuration, seed) can run on its own
// machine as `calibrate --unit LABEL/rR` with the calibration's own options, recording a "calibrate_unit" run whose
// config_json is the calibration's record plus "unit" ({"label", "replicate"}), "sweep_runs" (its one training run)
// and "screens" (that run's screens at the rule steps, measured as the calibration measures them). Once the units'
// shards are merged into one workspace, `calibrate --from-units` there adopts each finished unit whose record equals
// its own and whose training run is the sweep run it would train, links it as a resume links a run it finished,
// takes its screens, and decides; every figure is the units', so the stored calibration is the single-process one
// on the same compute path (run ids aside). The stopping rule's added rounds are units too:
// calibrationUnitsNeeded says which units the decision step still lacks.
// "noise 0.1/r1" (what --unit takes); parseCalibrationUnit reads it back (InputError naming parameter "unit").
std::string toString(const CalibrationUnit& unit);
CalibrationUnit parseCalibrationUnit(const std::string& text);
// The first round's units in training order (calibrate.h "Replicates": replicate 0 of every configuration, ...,
// then the null group).
std::vector<CalibrationUnit> calibrationFirstRound(const CalibrationOptions& options);
// The units the decision step (`fromUnits`) lacks in `store`: the first round's missing ones; when the first round
// is complete, the stopping rule applied to the units' runs as the single-process calibration applies it, round
// after round, and the first round with a missing unit gives its missing ones. Empty: the decision step can run.
std::vector<CalibrationUnit> calibrationUnitsNeeded(const store::RunStore& store, const CalibrationOptions& options);

// How the calibration's intervals are computed, in words (stored with every calibration, printed with it).
extern const char* const kCalibrationIntervalMethod;
// What a point's mismatch is, in words (printed with it), and the stopping rule of the seeds.
extern const char* const kCalibrationMismatchStatistic;
extern const char* const kCalibrationStoppingRule;

// Seed of replicate r: r = 0 keeps `seed`, others mix it with r.
std::uint64_t replicateSeed(std::uint64_t seed, std::int64_t replicate);

struct CalibrationSweepRun {
    std::string label; // "baseline", "noise 0.1", "recipe fp8-kv", "staleness 2"; "null" for the null group
    std::int64_t replicate = 0; // 0..R-1 (null group: R..2R-1)
    std::uint64_t seed = 0;
    std::int64_t runId = 0;
    double wallSeconds = 0.0;
};

// One replicate's figures at one step.
struct ReplicatePoint {
    std::string label;
    std::int64_t replicate = 0;
    std::int64_t runId = 0;
    std::int64_t step = 0;
    // The screen statistic (measureScreen on this run's checkpoint at the step under the calibration's protocol)
    // and the checkpoint's BF16 unit under it; none for the null group (not a point) and for calibrations stored
    // before schema 10.
    std::optional<double> mismatch;
    std::optional<metrics::Interval> mismatchInterval;
    std::optional<double> bf16Unit;
    std::string engineWeights; // the screen engine's weights relative to the workspace directory (the run's checkpoint,
                               // or with staleness a version of its history.safetensors)
    double trainingMismatch = 0.0; // mean step KL over steps 1..step
    double trainingBf16Unit = 0.0; // mean of the units measured at steps 1..step
    double quality = 0.0;
    double accuracy = 0.0;
};

// A replicate point as the calibration's config_json and its --json store it ({"label", "replicate", "run_id",
// "step", "mismatch", "ci_low", "ci_high", "bf16_unit", "engine_weights", "training_mismatch",
// "training_bf16_unit", "quality", "accuracy"}; the screen's fields null for the null group), and read back (one
// stored before schema 10 has the training means as "mismatch" and "bf16_unit").
nlohmann::json toJson(const ReplicatePoint& point);
ReplicatePoint replicatePointFromJson(const nlohmann::json& json);

// The baseline against itself with other seeds, at one step.
struct NullComparison {
    std::int64_t step = 0;
    double relativeChange = 0.0; // (Q_null - Q_base) / Q_base
    metrics::Interval change; // the rule's interval of the relative change
    metrics::Interval difference; // the rule's interval of mean(q_null - q_base), nats per token
    metrics::Verdict verdict = metrics::Verdict::Pass;
    double noiseFloor = 0.0; // half the width of `change`
};

struct CalibrationFlag {
    std::string kind; // "null-failed", "noise-dominated", "non-monotone", "undecided"
    std::optional<std::int64_t> step;
    std::string reason;
};

struct CalibrationResult {
    std::int64_t calibrationId = 0;
    std::int64_t runId = 0; // the "calibrate" run
    std::int64_t replicates = 1; // seeds each configuration started with
    std::int64_t maxReplicates = 1; // what an undecided one could grow to
    std::vector<CalibrationSweepRun> runs; // in training order (added seeds after the first round's)
    std::vector<store::CalibrationPoint> points; // every configuration (baseline included) at every step
    std::vector<ReplicatePoint> replicatePoints; // every run (null group included) at every step
    std::vector<NullComparison> nullComparisons; // per step
    std::vector<store::CalibrationBracket> brackets; // per step
    std::vector<CalibrationFlag> flags; // empty: not flagged
    MeasurementProtocol protocol;
    double wallSeconds = 0.0;
    // The calibrate run's provenance records (store::RunInfo::provenanceJson): commit and compute path when it began
    // and at each resume.
    std::string provenanceJson;
};

// The flags of a calibration (see above), per step in the order of `nullComparisons`; `brackets` are the steps'
// brackets (store::bracketFromPoints).
std::vector<CalibrationFlag> calibrationFlags(const std::vector<store::CalibrationPoint>& points,
    const std::vector<NullComparison>& nullComparisons, const std::vector<store::CalibrationBracket>& brackets,
    double relativeThreshold, double noiseFloorFraction);

nlohmann::json flagsToJson(const std::vector<CalibrationFlag>& flags);
// The flags stored with calibration `configJson` (its "flags"; none when absent).
std::vector<CalibrationFlag> storedFlags(const std::string& configJson);
// "non-monotone at step 20: ..." for a message.
std::string flagText(const CalibrationFlag& flag);
// The protocol stored with a calibration's config_json; nullopt for a calibration made before protocols existed.
std::optional<MeasurementProtocol> storedProtocol(const std::string& configJson, const std::string& source);

// The default sweep of `mismatch calibrate` on a base run: noise sigmas (relative to each tensor's RMS).
std::vector<double> defaultNoiseSigmas();

// The checks runCalibration makes before it stores anything: InputError("calibrate", parameter, ...) naming the
// catalogue parameter (core/jobs/training_jobs.h: "noise", "staleness", "rule_steps", "margin", "noise_floor_fraction", "replicates",
// "max_replicates", "unit_every", "probe_count"; "sweep" when nothing is swept), or the base run file and its field.
void checkCalibrationOptions(const CalibrationOptions& options);

// Checks the options (checkCalibrationOptions): positive sigmas, staleness >= 1,
// steps within 1..base.steps that the base evaluates (multiples of evaluation.every, or the last step), a base
// with an evaluation set and an OPD objective, replicates, unitEvery and probeCount >= 1. Runs the sweep; Progress fraction over all runs' steps,
// cancellable (the calibration is then stored with nothing; the runs done stay in the store as cancelled or
// finished training runs).
CalibrationResult runCalibration(store::RunStore& store, const CalibrationOptions& options, Progress& progress);
// Continues calibrate run `runId` (see above) with `options`, the options of the job spec it was started with (its
// name is the run's), checkpoints under `workspaceDirectory` (empty: the store's directory). InputError when the
// run does not exist, is not a calibration, has finished, an input changed or the options no longer make the run's
// record (the base run file changed).
CalibrationResult resumeCalibration(store::RunStore& store, std::int64_t runId, CalibrationOptions options,
    Progress& progress, const std::string& workspaceDirectory = {});

} // namespace mismatch::analysis

#pragma once
// The admission check (spec "Admission check"): for each candidate rollout configuration and each student
// checkpoint, the candidate engine generates on the probe prompts, the FP32 trainer (that checkpoint) scores the
// same prefixes, and the token-mean mismatch KL(mu || pi) gets a bootstrap interval over prompts
// (metrics::bootstrapRatio). Decision against the threshold X (from a stored calibration's bracket or given):
//   admit       interval high < X
//   reject      interval low  > X
//   borderline  otherwise (the interval straddles X)
// No teacher and no training run.
//
// Steps. Every checkpoint has an optimizer step: state.json's "optimizer_steps" for a trainer checkpoint, 0 for
// a model directory without state.json (a student before training; train::checkpointOptimizerSteps). Staleness
// k is counted in optimizer steps (spec "Staleness"). For a screened checkpoint at step s the engine's weights are
// the checkpoint itself when k = 0, and otherwise those of step s - k of the screened checkpoint's own training
// run: the version of its history.safetensors (what the run's stale rollouts used), a checkpoint of the same run
// given with `history` or screened beside it, or another step-N checkpoint of its run directory. Another run's
// checkpoint of the same step is never used, so two runs' checkpoints of one step can be screened together. When
// the run has no weights of that step: an InputError naming the candidate, the screened checkpoint and what was
// searched (no silent clamping: a stale engine with fresher weights would under-state its mismatch). The human
// table notes every row whose engine weights are not the screened checkpoint's.
//
// Thresholds. With a calibration and no explicit steps, a checkpoint at step s is screened against the bracket of
// step s, else against the nearest earlier bracket (the row says which); a checkpoint earlier than every bracket
// is an InputError. Explicit steps (one for all or one per checkpoint) choose brackets as given; a bracket whose
// step is not the checkpoint's is noted in the row.
//
// Protocol (protocol.h). With a calibration that stores a measurement protocol and protocolFromCalibration, the
// probe prompts, count, sampling, seed and KV-scale policy are the calibration's. Otherwise the screen's own
// protocol (probePath, count, settings) is compared with the calibration's: any difference is an InputError
// listing them unless allowProtocolMismatch, and then every decision records the differences
// ("protocol_differs") so that the screen is labelled wherever it is shown. A calibration's flags (calibrate.h)
// are recorded with every decision made against it ("calibration_flags").
//
// Noise: engine::addWeightNoise on the engine's weights (sigma relative to each tensor's RMS, seeded).
// Every candidate is measured on the same prompts with the same per-prompt seeds.
//
// Store: a run of kind "admit"; each decision in its own transaction as soon as it is made (store::
// addAdmissionDecision) with its inputs (candidate, recipe text, checkpoints and their steps, the bracket step,
// probe set, sampling, bootstrap, protocol and its differences, the calibration's flags, BF16 unit) in
// candidate_json, the interval, the threshold and the seconds it took. A cancelled job leaves its
// whole decisions and the run marked cancelled.
//
// Paths (checkpoints, history, probe set, recipes) are made absolute before anything is stored. The run's
// config_json records every option and digests of the input files (job_resume.h), so that a killed, cancelled or
// failed check continues (resumeAdmission, `mismatch admit --resume RUN`, with the options of the job spec the run
// stored; the record they make must equal the stored one): the decisions already stored are kept
// (checked to be the first ones of the checkpoint-major order), a partly screened checkpoint's BF16 unit is
// measured again (it must equal the stored one exactly), and only the missing decisions are made, so the run ends
// with each decision once and the numbers of an uninterrupted check (their `seconds` are wall-clock).
#include "core/analysis/calibrate.h"
#include "core/analysis/protocol.h"
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
#include "core/metrics/estimators.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct Candidate {
    std::string name;
    std::string recipePath; // empty: the plain BF16 engine
    std::int64_t staleness = 0;
    double noise = 0.0;
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
    std::string source; // "FILE:line L" where it was written, for messages; empty for command-line candidates
};

// A candidates file: a YAML (or JSON) list of mappings
//   - name: fp8-kv            # required, unique
//     recipe: fp8-kv.yaml     # optional; relative paths are relative to the candidates file; absent: BF16 engine
//     staleness: 1            # optional integer >= 0 (default 0)
//     noise: 0.01             # optional number >= 0 (default 0)
//     noise_seed: 7           # optional integer >= 0 (default 0)
//     noise_modules: "model.layers.*"   # optional recipe match pattern (default "*")
// Every problem is an InputError naming the file, "line L, column C" and what was expected (unknown keys,
// wrong types, duplicate names, an empty list, a recipe file that does not load, a malformed pattern).
std::vector<Candidate> loadCandidates(const std::string& path);
std::vector<Candidate> parseCandidates(const std::string& text, const std::string& path);

enum class AdmissionVerdict { Admit, Reject, Borderline };
std::string toString(AdmissionVerdict verdict); // "admit", "reject", "borderline"
AdmissionVerdict decide(const metrics::Interval& interval, double threshold);

struct AdmissionOptions {
    std::vector<std::string> checkpoints; // screened student checkpoints (model directories), training order
    std::vector<std::string> history; // older checkpoints for staleness only, oldest first
    std::vector<Candidate> candidates;
    std::string probePath; // may be empty when the calibration's protocol gives it
    std::int64_t count = 0; // first N probe prompts; 0: all
    MeasureSettings settings;
    std::optional<double> threshold; // explicit threshold (nats per token)
    std::optional<std::int64_t> calibrationId; // or a stored calibration's bracket
    std::vector<std::int64_t> steps; // calibration steps: none (each checkpoint's own step, else the nearest earlier
                                     // bracket), one for all checkpoints, or one per checkpoint
    // With a calibration: measure under its stored protocol (probe set, count, sampling, seed, KV-scale policy),
    // ignoring probePath, count and those settings. false: measure as given, compared with the calibration's.
    bool protocolFromCalibration = true;
    // Screen under a protocol that differs from the calibration's anyway (the decisions are labelled).
    bool allowProtocolMismatch = false;
    bool measureUnit = true; // also the BF16 unit per checkpoint (for BF16 multiples)
    // Each candidate's generations on the first N prompts, stored token by token with its decision (token drill-down).
    std::int64_t storedGenerations = 8;
    // Called once the check's run is recorded, with its id (front-ends print it).
    std::function<void(std::int64_t runId)> onRunStarted;
};

struct AdmissionRow {
    std::string candidate;
    std::string checkpoint;
    std::int64_t checkpointStep = 0; // optimizer steps
    std::string engineWeights; // the checkpoint the engine used (staleness)
    std::int64_t engineStep = 0;
    std::optional<std::int64_t> bracketStep; // the calibration bracket the threshold comes from
    std::string note; // e.g. "no bracket at step 30: the bracket of step 20 is used"
    double threshold = 0.0;
    double mismatch = 0.0;
    metrics::Interval interval;
    double k1 = 0.0;
    double k3 = 0.0;
    std::int64_t tokens = 0;
    std::optional<double> bf16Unit;
    // The sampled-token estimators beside the full KL with their correlation across tokens (metrics/estimators.h);
    // stored in candidate_json "estimators" (absent in decisions stored before).
    std::optional<metrics::EstimatorComparison> estimators;
    AdmissionVerdict verdict = AdmissionVerdict::Borderline;
    double seconds = 0.0;
    std::int64_t decisionId = 0;
};

struct AdmissionResult {
    std::int64_t runId = 0;
    std::vector<AdmissionRow> rows; // checkpoint-major, candidates in order
    double seconds = 0.0;
    MeasurementProtocol protocol; // what the screen measured under
    std::vector<std::string> protocolDifferences; // from the calibration's protocol (empty: the same)
    std::vector<CalibrationFlag> calibrationFlags; // the calibration's flags (empty: not flagged)
};

// A checkpoint of the staleness timeline with its optimizer step and the training run that wrote it.
struct TimelineEntry {
    std::string directory;
    std::int64_t step = 0;
    // state.json's "run_id" (a trainer checkpoint); none for a model directory without state.json or one whose
    // state.json does not record it.
    std::optional<std::int64_t> runId;
    bool hasState = false; // the directory has a state.json
    // The versions its history.safetensors holds (state.json "history_versions"; none without them).
    std::vector<std::int64_t> historyVersions;
    // The weights are not the directory's own but version `historyVersion` of its history.safetensors (the
    // older weights a stale rollout of that run used; written with each checkpoint of a run with staleness).
    std::optional<std::int64_t> historyVersion;
};
// InputError(job, "--history", ...) naming the first of `directories` (older checkpoints of the student) that is not
// a model directory: missing, not a directory, without config.json, or not examinable (a loop of symbolic links).
// Unchecked, one would join the timeline as a step-0 checkpoint and a stale candidate would be told to give the
// checkpoint that was given. `job` names the command ("admit", "breakdown").
void requireHistoryDirectories(const std::vector<std::string>& directories, const std::string& job);

// options.history then options.checkpoints, with their steps (0 for a model directory without a training
// state.json) and runs.
std::vector<TimelineEntry> checkpointTimeline(const AdmissionOptions& options);
// Whether `entry` belongs to the training history of screened checkpoint `screened` (spec "Staleness": the
// engine's weights come from the screened checkpoint's own run): a model directory without state.json (the student
// before training, the common start of every run) does; a trainer checkpoint does when it is in the same run
// directory and records the same run (or neither records one).
bool sameRunHistory(const TimelineEntry& screened, const TimelineEntry& entry);
// The weights `candidate`'s engine uses at `screened`: with staleness 0 the screened checkpoint itself; with
// staleness k those of optimizer step screened.step - k of the screened checkpoint's own run, found in order in
// its history.safetensors, among the timeline's checkpoints of the same run (sameRunHistory), then among the
// other step-N checkpoints of its run directory. Never another run's checkpoint of that step. InputError naming
// the candidate (its source), the step and what was searched when there is none.
TimelineEntry engineCheckpoint(
    const std::vector<TimelineEntry>& timeline, const TimelineEntry& screened, const Candidate& candidate);
// "DIR" for a checkpoint's own weights, "DIR/history.safetensors (step N)" for a version of its history.
std::string weightsName(const TimelineEntry& entry);
// The weights of `entry` (a checkpoint's own, or a version of its history), checked to be the student's
// architecture `config`.
model::TransformerWeights loadTimelineWeights(
    const TimelineEntry& entry, const model::ModelConfig& config, const at::Device& device);

AdmissionResult runAdmission(store::RunStore& store, const AdmissionOptions& options, Progress& progress);

// One screen measurement made exactly as runAdmission makes a decision's (the same prompts, settings, engine weights,
// engine and functions), stored nowhere: `candidate` at `checkpoint` under `protocol` (its prompts, count, sampling,
// seed and KV-scale policy over `settings`), with the checkpoint's BF16 unit. Calibration measures its points with
// it (spec "Same statistic on both axes").
struct ScreenMeasurement {
    double mismatch = 0.0;
    metrics::Interval interval;
    double bf16Unit = 0.0;
    TimelineEntry engineWeights;
};
ScreenMeasurement measureScreen(const std::string& checkpoint, const Candidate& candidate,
    const MeasurementProtocol& protocol, const MeasureSettings& settings, Progress& progress);

// A row's mismatch as a multiple of its checkpoint's BF16 unit; none without a (positive) unit.
std::optional<double> bf16Multiple(const AdmissionRow& row);
// The one JSON of an admission check, printed by `mismatch admit --json` and under "admission" by `mismatch demo
// --json`: {"run_id", "decisions": [{"candidate", "checkpoint", "checkpoint_step", "engine_weights", "engine_step",
// "bracket_step", "note", "decision", "mismatch": interval (toJson), "threshold", "k1", "k3", "tokens", "bf16_unit",
// "bf16_multiple", "seconds", "decision_id"}, ...], "protocol", "protocol_differs", "calibration_flags", "seconds",
// "rule", "bf16_multiple"}.
nlohmann::json toJson(const AdmissionResult& result);
// Continues admit run `runId` (see above) with `options`, the options of the spec it was started with. InputError
// when the run does not exist, is not an admission check, has finished, one of its inputs changed (naming the file)
// or the options no longer make the run's record (a candidates file changed).
AdmissionResult resumeAdmission(
    store::RunStore& store, std::int64_t runId, const AdmissionOptions& options, Progress& progress);

} // namespace mismatch::analysis

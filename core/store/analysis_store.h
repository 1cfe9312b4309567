#pragma once
// The analyses' results in the workspace store: layer-sensitivity scans and their cells, calibrations (points
// and per-step budget brackets), admission decisions and prefix-shift analyses. Every write is one transaction;
// a job that writes as it goes (a scan's cells) links its rows to a run, whose status says whether the rows are
// complete (finished) or what a cancelled or failed job left (cancelled, failed: the rows stored are whole, the
// set is not).
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::store {

// ---- layer sensitivity --------------------------------------------------------------------------------------

// Module groups of a scan's cells: the seven projections ("q", "k", "v", "o", "gate", "up", "down") and "kv"
// (that layer's KV cache only) per layer; "embed_tokens", "lm_head" or, for tied embeddings, "embed_lm_head"
// at layer -1.
inline constexpr std::int64_t kNoLayer = -1;

struct SensitivityCell {
    std::int64_t layer = kNoLayer;
    std::string moduleGroup;
    double mismatch = 0.0; // KL(mu || pi) with only this cell quantized, nats per token
    double addedMismatch = 0.0; // mismatch - the BF16 unit of the scan
    std::optional<double> ciLow; // paired bootstrap interval of the added mismatch (prompts resampled)
    std::optional<double> ciHigh;
    std::optional<double> mismatchCiLow; // bootstrap interval of the mismatch itself
    std::optional<double> mismatchCiHigh;
    std::optional<std::int64_t> tokens; // response tokens measured
    std::optional<double> seconds; // time to measure the cell
};

struct SensitivityScanInfo {
    std::int64_t id = 0;
    std::optional<std::int64_t> runId;
    std::optional<std::int64_t> modelId;
    std::string format; // "fp8_e4m3/block128", "int8/channel", ...
    std::optional<double> bf16Unit; // nats per token
    std::string configJson = "{}";
    std::string createdAt;
    std::string status = "finished"; // the run's status ("running", "cancelled", ...); "finished" without a run
    std::int64_t cellCount = 0;
};

struct SensitivityScan {
    SensitivityScanInfo info;
    std::vector<SensitivityCell> cells; // by layer, then insertion order
};

// Creates a scan (one transaction). StoreError for an unknown run or model, an empty format or a unit that is not
// finite.
std::int64_t addSensitivityScan(RunStore& store, const SensitivityScanInfo& scan);
// Stores one cell (one transaction). StoreError for an unknown scan, a cell already stored, an empty group or a
// value that is not finite.
void addSensitivityCell(RunStore& store, std::int64_t scanId, const SensitivityCell& cell);
std::vector<SensitivityScanInfo> sensitivityScans(const RunStore& store);
std::optional<SensitivityScan> sensitivityScan(const RunStore& store, std::int64_t scanId);

// ---- calibrations -------------------------------------------------------------------------------------------

// One calibration configuration (its replicate runs; runId is replicate 0's) evaluated at one step against the BF16
// baseline (the failure rule).
struct CalibrationPoint {
    std::int64_t runId = 0;
    std::int64_t step = 0;
    double mismatch = 0.0; // the run's mismatch, nats per token
    double quality = 0.0; // Q of the run at the step
    std::optional<double> relativeChange; // (Q_run - Q_base) / Q_base
    std::optional<double> ciLow; // interval of mean(q_run - q_base), nats per token
    std::optional<double> ciHigh;
    // The failure rule's verdict (metrics::verdictName): "pass", "fail" or "undecided" (the interval of the relative
    // change contains the failure line). Points stored before schema 9 read as "pass" or "fail".
    std::string verdict = "pass";
    bool failed() const { return verdict == "fail"; }
    bool passed() const { return verdict == "pass"; }
    bool undecided() const { return verdict == "undecided"; }
    // Schema 4 (absent in calibrations stored before):
    std::string label; // the configuration: "baseline", "noise 0.1", "recipe fp8-kv", "staleness 2"
    std::int64_t replicates = 1; // seeds averaged into mismatch, quality, accuracy and the unit
    std::optional<double> bf16Unit; // the BF16 unit of this point's own runs over steps 1..step, nats per token
    std::optional<double> accuracy; // held-out exact-match accuracy at the step
    // Schema 9: the interval of the relative change (Q_run - Q_base) / Q_base that decided the verdict.
    std::optional<double> changeLow;
    std::optional<double> changeHigh;
    // Schema 10: `mismatch` is the screen statistic (admission's measurement on the point's runs' checkpoints at the
    // step, under the calibration's protocol, replicate mean) and this the mean training-step mismatch over steps
    // 1..step beside it. None: a point stored before, whose `mismatch` is that training mean.
    std::optional<double> trainingMismatch;
    bool screenStatistic() const { return trainingMismatch.has_value(); }
};

// The budget at one step: [largest passing mismatch, smallest failing mismatch]; `threshold` is the admission
// threshold chosen (the lower end unless a margin was set). Either end may be missing (nothing passed / failed).
struct CalibrationBracket {
    std::int64_t step = 0;
    std::optional<double> largestPassing;
    std::optional<double> smallestFailing;
    std::optional<double> threshold;
};

struct CalibrationInfo {
    std::int64_t id = 0;
    std::optional<std::int64_t> runId;
    std::string name;
    std::string student; // the student model directory
    std::string configJson = "{}";
    std::string createdAt;
};

struct Calibration {
    CalibrationInfo info;
    std::vector<CalibrationPoint> points; // by step, then mismatch
    std::vector<CalibrationBracket> brackets; // by step
};

// The bracket of the points at `step`, from decided points only: the smallest mismatch of a failing point, and the
// largest mismatch of a passing point below it (a run that passed at a larger mismatch than one that failed does
// not widen the budget: the sweep is not monotone there, and the conservative end is kept); threshold = largest
// passing * (1 - margin) (margin in [0, 1)), unset when nothing passed below the smallest failure. Undecided points
// never set an end (the calibration flags one that lies between the ends, analysis/calibrate.h).
// The bracket of `calibration` that something at optimizer step `step` (a screened checkpoint, a model a recipe
// is built for) is compared with: `explicitStep` when given, else the bracket at `step`, else the nearest earlier
// one. `note` says why the bracket's step is not `step` ("the bracket of step B was chosen explicitly for
// SUBJECT S", "no bracket at step S: the nearest earlier one (step B) is used"); `step` of the result is unset when
// `step` is before every bracket, and `steps` then lists them ("10, 30") for the caller's error.
struct BracketChoice {
    std::optional<std::int64_t> step;
    std::string note;
    std::string steps;
};
BracketChoice chooseBracket(const Calibration& calibration, std::int64_t step,
    std::optional<std::int64_t> explicitStep, const std::string& subject);

CalibrationBracket bracketFromPoints(
    const std::vector<CalibrationPoint>& points, std::int64_t step, double margin = 0.0);

// Creates a calibration with its points and brackets in one transaction. StoreError for an unknown run, an empty
// name or student, a value that is not finite or a step given twice.
std::int64_t addCalibration(RunStore& store, const CalibrationInfo& calibration,
    const std::vector<CalibrationPoint>& points, const std::vector<CalibrationBracket>& brackets);
// Adds points to an existing calibration (one transaction).
void addCalibrationPoints(RunStore& store, std::int64_t calibrationId, const std::vector<CalibrationPoint>& points);
// Sets (inserts or replaces) the bracket of one step (one transaction).
void setCalibrationBracket(RunStore& store, std::int64_t calibrationId, const CalibrationBracket& bracket);
std::vector<CalibrationInfo> calibrations(const RunStore& store);
std::optional<Calibration> calibration(const RunStore& store, std::int64_t calibrationId);

// The admission threshold of a calibration at `step`: the bracket's threshold, else its largest passing
// mismatch. StoreError naming the calibration and the steps it has when there is no such calibration, no
// bracket at that step or nothing passed there. Without a step the calibration must have exactly one bracket.
double admissionThreshold(const RunStore& store, std::int64_t calibrationId, std::optional<std::int64_t> step);

// ---- admission decisions ------------------------------------------------------------------------------------

// One generated token of a stored pair, for the token drill-down: the chosen token's log-probability under the
// engine (mu) and the trainer (pi), both distributions' entropies and their five most likely tokens (id,
// probability), most likely first. Schema 5; pairs stored before have none.
struct TokenDetail {
    double logMu = 0.0;
    double logPi = 0.0;
    double entropyMu = 0.0;
    double entropyPi = 0.0;
    std::vector<std::pair<std::int64_t, double>> topMu;
    std::vector<std::pair<std::int64_t, double>> topPi;
};

// One generation kept token by token for the token drill-down (schema 7: an admission decision's candidate on its
// first prompts): the prompt, the response, per token KL(mu || pi) (nats) and the token details (mu: the
// candidate engine on its own prefixes, pi: the trainer).
struct StoredGeneration {
    std::int64_t index = 0; // the prompt's position in the measured prompt list
    std::string promptId;
    std::vector<std::int64_t> promptTokens;
    std::vector<std::int64_t> tokens;
    std::vector<double> kl;
    std::vector<TokenDetail> details;
};

struct AdmissionDecision {
    std::int64_t id = 0; // filled on read
    std::optional<std::int64_t> runId;
    std::optional<std::int64_t> calibrationId;
    std::string candidateJson = "{}"; // the candidate and every input of the measurement
    std::string checkpoint; // the student checkpoint screened
    double mismatch = 0.0; // nats per token
    double ciLow = 0.0;
    double ciHigh = 0.0;
    double threshold = 0.0;
    std::string decision; // "admit", "reject", "borderline"
    double seconds = 0.0; // time taken
    std::string toolVersion; // empty: this build's version
    std::string createdAt; // filled on read
    // Written with the decision (admission_generations); admissionDecisions() leaves it empty: read them with
    // admissionGenerations(id).
    std::vector<StoredGeneration> generations;
};

// StoreError (nothing written) for an unknown run or calibration, a decision word outside the three, values
// that are not finite, an interval with low > high, or a generation whose tokens, KL values and details differ in
// length.
std::int64_t addAdmissionDecision(RunStore& store, const AdmissionDecision& decision);
// The generations stored with a decision, in prompt order (none for decisions stored before schema 7).
std::vector<StoredGeneration> admissionGenerations(const RunStore& store, std::int64_t decisionId);
// How many there are, without reading them.
std::int64_t admissionGenerationCount(const RunStore& store, std::int64_t decisionId);
// All decisions, or a run's, in insertion order.
std::vector<AdmissionDecision> admissionDecisions(const RunStore& store, std::optional<std::int64_t> runId = {});

// ---- training rollouts kept token by token (schema 8) --------------------------------------------------------

// Stores `generations` (index: the sequence's position in the step's batch; mu: the rollout engine, pi: the trainer
// before the step's update) as step `step` of training run `runId`, in one transaction (the trainer's own, holding
// the step's metrics). StoreError when there is no such run or a generation's lengths disagree; nothing written.
// RunStore::reopenRun deletes a resumed run's rows after its checkpoint with its steps.
void addStepGenerations(
    RunStore& store, std::int64_t runId, std::int64_t step, const std::vector<StoredGeneration>& generations);
// A step's stored generations in batch order (empty when none were kept).
std::vector<StoredGeneration> stepGenerations(const RunStore& store, std::int64_t runId, std::int64_t step);
// The run's steps that have stored generations, ascending.
std::vector<std::int64_t> stepsWithGenerations(const RunStore& store, std::int64_t runId);

// ---- prefix shift -------------------------------------------------------------------------------------------

// One paired generation: the candidate engine and the BF16 engine from the same prompt and seed.
struct PrefixShiftPair {
    std::string promptId;
    std::vector<std::int64_t> promptTokens;
    std::optional<std::int64_t> firstDivergence; // first response position whose tokens differ; none: identical
    std::vector<std::int64_t> candidateTokens;
    std::vector<double> candidateKl; // per token: KL(mu_candidate || pi) on the candidate's own prefixes
    std::vector<std::int64_t> referenceTokens; // the BF16 engine's response
    std::vector<double> referenceKl; // per token: KL(mu_candidate || pi) teacher-forced on the BF16 prefixes
    // Per token (empty, or as long as the tokens): mu is the candidate's distribution on its own prefixes, and the
    // teacher-forced candidate on the BF16 prefixes; pi the trainer's.
    std::vector<TokenDetail> candidateDetail;
    std::vector<TokenDetail> referenceDetail;
};

struct PrefixShiftRecord {
    std::int64_t id = 0; // filled on read
    std::optional<std::int64_t> runId;
    std::string model;
    std::string configurationJson = "{}"; // recipe, noise, sampling, prompts
    double total = 0.0; // nats per token on the candidate's own prefixes
    double perToken = 0.0; // on the BF16 engine's prefixes
    double prefixShift = 0.0; // total - perToken
    double bf16Unit = 0.0;
    std::optional<double> totalCiLow;
    std::optional<double> totalCiHigh;
    std::optional<double> perTokenCiLow;
    std::optional<double> perTokenCiHigh;
    std::int64_t pairs = 0;
    std::int64_t diverged = 0;
    std::string detailsJson = "{}"; // divergence histogram, by-position curves, corrections
    std::string createdAt;
};

// Stores an analysis and its stored pairs in one transaction; returns its id.
std::int64_t addPrefixShift(
    RunStore& store, const PrefixShiftRecord& record, const std::vector<PrefixShiftPair>& pairs);
std::vector<PrefixShiftRecord> prefixShifts(const RunStore& store);
std::optional<PrefixShiftRecord> prefixShift(const RunStore& store, std::int64_t id);
std::vector<PrefixShiftPair> prefixShiftPairs(const RunStore& store, std::int64_t id);

} // namespace mismatch::store

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
// Staleness k (the engine uses weights k optimizer steps old): the screened checkpoints and the optional older
// `history` checkpoints form one timeline in training order (history first, oldest first, then the screened
// checkpoints); for a screened checkpoint the engine's weights are those of the checkpoint k places earlier on
// the timeline. So pass checkpoints one optimizer step apart for k to mean steps. A candidate whose k reaches
// before the oldest checkpoint given is an InputError naming the candidate (no silent clamping: a stale engine
// with fresh weights would under-state its mismatch).
//
// Noise: engine::addWeightNoise on the engine's weights (sigma relative to each tensor's RMS, seeded).
// Every candidate is measured on the same prompts with the same per-prompt seeds.
//
// Store: a run of kind "admit"; each decision in its own transaction as soon as it is made (store::
// addAdmissionDecision) with its inputs (candidate, recipe text, checkpoints, probe set, sampling, bootstrap,
// BF16 unit) in candidate_json, the interval, the threshold and the seconds it took. A cancelled job leaves its
// whole decisions and the run marked cancelled.
//
// Paths (checkpoints, history, probe set, recipes) are made absolute before anything is stored. The run's
// config_json holds every option and digests of the input files (job_resume.h), so that a killed, cancelled or
// failed check continues (resumeAdmission, `mismatch admit --resume RUN`): the decisions already stored are kept
// (checked to be the first ones of the checkpoint-major order), a partly screened checkpoint's BF16 unit is
// measured again (it must equal the stored one exactly), and only the missing decisions are made, so the run ends
// with each decision once and the numbers of an uninterrupted check (their `seconds` are wall-clock).
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
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
    std::string probePath;
    std::int64_t count = 0; // first N probe prompts; 0: all
    MeasureSettings settings;
    std::optional<double> threshold; // explicit threshold (nats per token)
    std::optional<std::int64_t> calibrationId; // or a stored calibration's bracket
    std::vector<std::int64_t> steps; // calibration steps: none (the calibration has one), one for all checkpoints,
                                     // or one per checkpoint
    bool measureUnit = true; // also the BF16 unit per checkpoint (for BF16 multiples)
    // Called once the check's run is recorded, with its id (front-ends print it).
    std::function<void(std::int64_t runId)> onRunStarted;
};

struct AdmissionRow {
    std::string candidate;
    std::string checkpoint;
    std::string engineWeights; // the checkpoint the engine used (staleness)
    double threshold = 0.0;
    double mismatch = 0.0;
    metrics::Interval interval;
    double k1 = 0.0;
    double k3 = 0.0;
    std::int64_t tokens = 0;
    std::optional<double> bf16Unit;
    AdmissionVerdict verdict = AdmissionVerdict::Borderline;
    double seconds = 0.0;
    std::int64_t decisionId = 0;
};

struct AdmissionResult {
    std::int64_t runId = 0;
    std::vector<AdmissionRow> rows; // checkpoint-major, candidates in order
    double seconds = 0.0;
};

AdmissionResult runAdmission(store::RunStore& store, const AdmissionOptions& options, Progress& progress);
// Continues admit run `runId` (see above). InputError when the run does not exist, is not an admission check, has
// finished or one of its inputs changed (naming the file).
AdmissionResult resumeAdmission(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::function<void(std::int64_t runId)>& onRunStarted = {});

} // namespace mismatch::analysis

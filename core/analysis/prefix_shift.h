#pragma once
// Prefix shift (spec "Prefix shift"): a configuration's mismatch split into what it does on the same prefixes and
// what it does by reaching other prefixes. With the FP32 trainer pi, the candidate engine mu_c and the plain BF16
// engine mu_b generating from the same prompts with the same seeds (paired generations):
//   total        = token mean over the candidate's own responses of KL(mu_c(.|h) || pi(.|h))   (= its mismatch)
//   per-token    = token mean over the BF16 engine's responses of KL(mu_c(.|h) || pi(.|h)), the candidate's
//                  model teacher-forced on the BF16 engine's sequences (KV rounded as its cache does; mu_c is
//                  the candidate's sampling distribution at those prefixes)
//   prefix shift = total - per-token
//   BF16 unit    = token mean over the BF16 engine's responses of KL(mu_b || pi)
// Intervals: total and per-token by metrics::bootstrapRatio over prompts; the prefix-shift part by the paired
// bootstrap over prompts (pairedRatioDifference). All in nats per token.
// One code path for every part: the engines generate only the tokens; mu_c on its own prefixes, mu_c on the BF16
// prefixes and mu_b are all computed teacher-forced (the engine's quantizing forward over prompt + response, the
// function cached decoding computes), and pi by the trainer's forward over the same sequences. So the parts differ
// only where the sequences differ: when the candidate is the BF16 engine, or a pair does not diverge, the two parts
// are bit-identical on every CPU (oneDNN picks different kernels, and so different roundings, for a one-token
// decode step than for a whole sequence; mixing the two paths would leave a spurious prefix-shift part of that
// size).
//
// First divergence of a pair: the first response position whose tokens differ (a shorter response that is a
// prefix of the other diverges at its length); identical responses have none. Mismatch by position: the mean
// KL at each response position, on own prefixes and on the BF16 prefixes, with token counts.
//
// Corrections (train/objectives.h correctionWeights, cap C): per token w = pi(y) / mu_c(y) on the sampled token y
// (on the BF16 prefixes, y is the BF16 engine's token and mu_c the teacher-forced candidate); TIS weighs each
// token's KL by min(w, C) and divides by all tokens; MIS keeps tokens with w in [1/C, C] (weight 1) and divides by
// the kept ones. Reported per part, with the fraction of tokens the correction touched. Corrections re-weight the
// loss; they do not change what the engine samples, so the divergence positions are the same for every
// correction.
//
// Estimators: on the candidate's own prefixes (the total), every token's full KL, log mu_c(y) and log pi(y) give the
// sampled-token estimators side by side with the full KL (metrics::compareEstimators).
//
// Store: a run of kind "prefix_shift" and one prefix_shift_analyses row (details_json: divergence histogram,
// by-position curves, corrections) with the first `storedPairs` pairs token by token (prefix_shift_pairs, with each
// token's mu(y), pi(y), entropies and top-5 of both distributions for the token drill-down), in one
// transaction at the end: a cancelled job stores no analysis and marks its run cancelled.
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
#include "core/metrics/estimators.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct PrefixShiftOptions {
    std::string modelDirectory;
    std::string promptSetPath;
    std::int64_t count = 0; // first N prompts; 0: all
    MeasureSettings settings;
    EngineConfiguration configuration; // the candidate (recipe, noise)
    std::string recipePath; // for the record; empty when the configuration has no recipe
    double cap = 2.0; // C of TIS / MIS (>= 1)
    std::int64_t storedPairs = 16; // paired generations stored token by token
};

struct PositionMismatch {
    std::int64_t position = 0;
    double total = 0.0; // mean KL on own prefixes at this position (0 when no token)
    std::int64_t totalTokens = 0;
    double perToken = 0.0; // mean KL on the BF16 prefixes
    std::int64_t perTokenTokens = 0;
    double bf16Unit = 0.0;
};

struct CorrectionEffect {
    std::string kind; // "none", "tis", "mis"
    double cap = 0.0;
    double total = 0.0;
    double perToken = 0.0;
    double prefixShift = 0.0;
    double affectedOwn = 0.0; // fraction of own-prefix tokens the correction changed (TIS w > C; MIS dropped)
    double affectedReference = 0.0;
};

struct PrefixShiftResult {
    std::int64_t runId = 0;
    std::int64_t analysisId = 0;
    double total = 0.0;
    double perToken = 0.0;
    double prefixShift = 0.0;
    double bf16Unit = 0.0;
    metrics::Interval totalInterval;
    metrics::Interval perTokenInterval;
    metrics::Interval prefixShiftInterval;
    std::int64_t ownTokens = 0;
    std::int64_t referenceTokens = 0;
    std::int64_t pairs = 0;
    std::int64_t diverged = 0;
    std::vector<std::int64_t> divergenceHistogram; // [position] pairs first diverging there
    std::optional<double> medianDivergence; // over diverged pairs
    std::vector<PositionMismatch> byPosition;
    std::vector<CorrectionEffect> corrections; // none, tis, mis
    // The sampled-token estimators of the total (the candidate on its own prefixes) beside its full KL, with their
    // correlation across tokens (metrics/estimators.h); also in details_json "estimators".
    metrics::EstimatorComparison estimators;
    double seconds = 0.0;
};

PrefixShiftResult runPrefixShift(store::RunStore& store, const PrefixShiftOptions& options, Progress& progress);

// First response position where two token sequences differ; nullopt when they are equal.
std::optional<std::int64_t> firstDivergence(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b);

} // namespace mismatch::analysis

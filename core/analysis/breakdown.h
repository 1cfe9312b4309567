#pragma once
// Where a configuration's mismatch comes from (issue 21): the candidate's full-vocabulary mismatch KL(mu || pi)
// against the FP32 trainer split by source, measured by switching the sources on and off on the same prompts with
// the same per-prompt seeds (every measurement is paired with every other).
//
// Sources (only those the configuration has take part):
//   weights            per-layer projections' weight formats (q/k/v/o/gate/up/down) that are not bf16
//   activations        per-layer projections' fp8 input activations
//   kv_cache           layers whose KV cache is not bf16
//   embedding_lm_head  model.embed_tokens and lm_head: their weight formats and lm_head's input activations
//   staleness          the engine's weights from the checkpoint k optimizer steps older (admission.h's timeline)
//   noise              Gaussian weight noise (engine::addWeightNoise) on the engine's weights
// A subset S of the sources is the configuration with only those switched on: the recipe's plan with every other
// module/layer precision set back to bf16 (written as a recipe with one rule per module that differs, so that the
// engine is built exactly as for any recipe; no recipe source on gives the plain BF16 engine), fresh or stale
// weights, with or without the noise. M(S) is its token-mean mismatch; M({}) is the BF16 unit, M(all) the total.
//
// The split depends on the order in which sources are switched (their effects need not add up), so three are
// reported, each per source s, in nats per token and as a multiple of the BF16 unit:
//   add-one-in      M({s}) - M({})                 what s does alone on top of the BF16 engine
//   leave-one-out   M(all) - M(all \ {s})          what the configuration loses without s
//   Shapley         sum over S not holding s of |S|! (n-|S|-1)! / n! * (M(S + s) - M(S)): the average of s's
//                   marginal effect over every order of switching the n sources on; computed when n <= shapleyMax
//                   (default 4: 2^n measurements), and then its parts add up to M(all) - M({}) exactly
// and for add-one-in and leave-one-out the interaction remainder (M(all) - M({})) - sum of the parts (negative when
// the sources together do less than their parts alone). The measured subsets are {}, each {s}, each all \ {s} and
// all (every subset for Shapley); equal configurations are measured once (the BF16 unit for every candidate).
// Intervals: percentile bootstrap over prompts of each quantity as a linear combination of the subsets' token-mean
// ratios, the prompts drawn once per resample for all of them (metrics::bootstrapRatioCombination).
//
// Each measured subset also keeps the sampled-token estimators (k1, k3, NeMo-RL's token_mult_prob_error, |mu-pi|)
// and their correlation with the full KL across tokens (metrics/estimators.h).
//
// Store: a run of kind "breakdown"; every candidate's record (store/breakdown_store.h) in one transaction at the
// end: a cancelled job stores no breakdown and marks its run cancelled.
#include "core/analysis/admission.h"
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
#include "core/quant/recipe_plan.h"
#include "core/store/breakdown_store.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

enum class MismatchSource { Weights = 0, Activations, KvCache, EmbeddingLmHead, Staleness, Noise };
constexpr int kMismatchSourceCount = 6;
// "weights", "activations", "kv_cache", "embedding_lm_head", "staleness", "noise"
std::string toString(MismatchSource source);
using SourceMask = unsigned; // bit (1 << source)
constexpr SourceMask sourceBit(MismatchSource source)
{
    return 1u << static_cast<unsigned>(source);
}

// The sources `candidate` has, in enum order; `plan` is its recipe's plan (nullopt: no recipe).
std::vector<MismatchSource> presentSources(const Candidate& candidate, const std::optional<quant::RecipePlan>& plan);
// `plan` with the precision of every recipe source outside `mask` set back to bf16.
quant::RecipePlan maskedPlan(const quant::RecipePlan& plan, SourceMask mask);
// A recipe that resolves to `plan` (one rule per module or attention block that is not bf16; `name` as its name),
// or nullopt when the plan is all bf16 (the plain BF16 engine).
std::optional<quant::Recipe> recipeOfPlan(const quant::RecipePlan& plan, const std::string& name);

struct BreakdownOptions {
    std::string modelDirectory; // the student checkpoint (trainer and fresh engine weights)
    std::vector<std::string> history; // older checkpoints for staleness, oldest first
    std::vector<Candidate> candidates;
    std::string promptSetPath;
    std::int64_t count = 0; // first N prompts; 0: all
    MeasureSettings settings;
    std::int64_t shapleyMaxSources = 4; // Shapley parts when a candidate has at most this many sources
};

struct BreakdownResult {
    std::int64_t runId = 0;
    std::vector<store::BreakdownRecord> candidates; // as stored (ids filled)
    std::int64_t measurements = 0; // distinct configurations measured
    double seconds = 0.0;
};

BreakdownResult runBreakdown(store::RunStore& store, const BreakdownOptions& options, Progress& progress);

// The Shapley weight |S|! (n - |S| - 1)! / n! of a subset of size `subsetSize` not holding the source.
double shapleyWeight(int subsetSize, int sources);

} // namespace mismatch::analysis

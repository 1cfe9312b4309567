#pragma once
// Training-inference mismatch of a rollout engine against the trainer (spec "Measures"): the engine generates on
// the prompts with full distributions; the trainer scores the same prefixes (prompt + the engine's own earlier
// tokens) teacher-forced with its plain forward; per generated token
//   D   = KL(mu || pi) = sum_v mu(v) (log mu(v) - log pi(v))   full vocabulary, nats
//   k1  = log mu(y) - log pi(y)
//   k3  = r - 1 - log r,  r = pi(y) / mu(y)
// mu is the engine's sampling distribution (temperature, top-k, top-p: sampling.h); pi is the trainer's
// log_softmax(logits / temperature) over the full vocabulary (trainers apply the rollout temperature but do
// not truncate). Means are token means over every generated token of every prompt.
#include "core/common/progress.h"
#include "core/engine/engine.h"
#include "core/metrics/estimators.h"
#include "core/metrics/mismatch.h"
#include "core/model/transformer.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace mismatch::engine {

struct MismatchOptions {
    SamplingOptions sampling; // keepLogits is forced on
    std::int64_t batchSize = 16; // prompts generated and scored per chunk (bounds the [T, vocab] memory)
    // Memory for the [T, vocab] logits held between generating and scoring (bf16, or float32 for the FP32
    // engine): a chunk has at most batchSize prompts and at most as many as fit this budget (at maxNewTokens tokens
    // each, at least one), and the trainer scores a chunk in groups whose float32 log pi fit a quarter of it. With
    // the demo pair's 258-token vocabulary this never binds; with a 152k vocabulary 64 tokens of one prompt take
    // 19 MB in bf16.
    std::uint64_t distributionBytes = 512ull << 20;
    // Also keep every token's KL, log mu(y) and log pi(y) (MismatchMeasurement::tokenValues): 24 bytes a token,
    // for the sampled-token estimators side by side with the full KL (metrics/estimators.h).
    bool keepTokenValues = false;
    // Called for each prompt while its distributions are alive, in prompt order: the prompt's index in `requests`,
    // log mu [T, vocab] (the distribution the engine sampled from), the trainer's log pi [T, vocab], the generation
    // and its per-token values. Lets a caller keep token-level details of a few prompts (the token drill-down)
    // without holding every distribution.
    std::function<void(std::size_t, const at::Tensor&, const at::Tensor&, const GenerationResult&,
        const metrics::TokenMismatch&)>
        onPrompt;
    // Called before the engine generates each chunk and before the trainer scores it: lets an engine and a trainer
    // that share weights take turns on them (analysis::measureConfiguration's weight noise in place,
    // engine::InPlaceWeightNoise). Either may be empty.
    std::function<void()> beforeGenerating;
    std::function<void()> beforeScoring;
};

struct MismatchMeasurement {
    double kl = 0.0; // token means, nats per token
    double k1 = 0.0;
    double k3 = 0.0;
    std::int64_t tokens = 0;
    // Per prompt, for a bootstrap over prompts (metrics::bootstrapRatio(sums, tokens)).
    std::vector<double> promptKlSums;
    std::vector<double> promptK1Sums;
    std::vector<double> promptK3Sums;
    std::vector<std::int64_t> promptTokens;
    // Per token in prompt order, when MismatchOptions::keepTokenValues.
    metrics::SampledTokenValues tokenValues;
    // The engine's generations (without their distributions).
    std::vector<GenerationResult> generations;
};

// Generates with `engine` on `requests` and scores with `trainer`. A request the engine's cache can never hold
// throws its ResourceError. Progress: fraction of prompts done, cancellable between chunks.
MismatchMeasurement measureMismatch(const model::Transformer& trainer, Engine& engine,
    const std::vector<GenerationRequest>& requests, const MismatchOptions& options, Progress* progress = nullptr);

} // namespace mismatch::engine

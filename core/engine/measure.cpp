#include "core/engine/measure.h"

#include "core/common/error.h"
#include "core/metrics/mismatch.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace mismatch::engine {

namespace {

// One response's per-token KL, log mu(y), log pi(y) and the trainer's entropy, in float64 (tokenMismatch's values).
void appendTokenValues(metrics::SampledTokenValues& values, const metrics::TokenMismatch& mismatch)
{
    const auto append = [](std::vector<double>& to, const at::Tensor& from) {
        const at::Tensor column = from.to(at::kCPU).to(at::kDouble).contiguous();
        to.insert(to.end(), column.data_ptr<double>(), column.data_ptr<double>() + column.numel());
    };
    append(values.kl, mismatch.kl);
    append(values.logMu, mismatch.logMuY);
    append(values.logPi, mismatch.logPiY);
    append(values.entropyPi, mismatch.entropyPi);
}

} // namespace

MismatchMeasurement measureMismatch(const model::Transformer& trainer, Engine& engine,
    const std::vector<GenerationRequest>& requests, const MismatchOptions& options, Progress* progress)
{
    if (trainer.config().vocabSize != engine.model().config().vocabSize) {
        throw InputError("mismatch", "trainer",
            "vocabulary " + std::to_string(trainer.config().vocabSize) + " differs from the engine's "
                + std::to_string(engine.model().config().vocabSize));
    }
    if (options.batchSize < 1) {
        throw InputError("mismatch", "batch size", "must be >= 1, got " + std::to_string(options.batchSize));
    }
    SamplingOptions sampling = options.sampling;
    // The engine keeps the logits it sampled from (bf16 for the BF16 and recipe engines, half the bytes of float32
    // log mu); log mu is computed again from them per prompt, in float64, as the engine computed it to sample.
    sampling.keepLogits = true;
    ScoreOptions scoring;
    scoring.batchSize = options.batchSize;
    // log pi stays where the trainer computed it: the engine's log mu stays on the engine's device (logMuRows), and
    // the two meet there (the same device in every job; moved below when they are not).
    scoring.onHost = false;
    // The trainer's distribution at the rollout temperature (greedy rollouts compare at temperature 1).
    scoring.temperature = sampling.greedy || sampling.temperature == 0.0 ? 1.0 : sampling.temperature;

    MismatchMeasurement measurement;
    metrics::MismatchAccumulator total;
    // Prompts whose distributions fit `bytes` (at least one, at most batchSize).
    const std::uint64_t promptEntries = static_cast<std::uint64_t>(std::max<std::int64_t>(1, sampling.maxNewTokens))
        * static_cast<std::uint64_t>(engine.model().config().vocabSize);
    const std::uint64_t logitBytes = engine.model().precision() == EnginePrecision::Fp32 ? sizeof(float) : 2;
    const auto fitting = [&](std::uint64_t bytes, std::uint64_t entryBytes) {
        return static_cast<std::size_t>(std::clamp<std::uint64_t>(
            bytes / (promptEntries * entryBytes), 1, static_cast<std::uint64_t>(options.batchSize)));
    };
    const std::size_t chunk = fitting(options.distributionBytes, logitBytes);
    // The trainer's float32 log pi of a group of prompts.
    const std::size_t scoringGroup = fitting(options.distributionBytes / 4, sizeof(float));
    scoring.batchSize = static_cast<std::int64_t>(scoringGroup);
    for (std::size_t begin = 0; begin < requests.size(); begin += chunk) {
        if (progress) {
            progress->checkCancelled();
            progress->update(static_cast<double>(begin) / static_cast<double>(requests.size()), "measuring mismatch");
        }
        const std::size_t end = std::min(requests.size(), begin + chunk);
        const std::vector<GenerationRequest> part(
            requests.begin() + static_cast<std::ptrdiff_t>(begin), requests.begin() + static_cast<std::ptrdiff_t>(end));
        if (options.beforeGenerating) {
            options.beforeGenerating();
        }
        std::vector<GenerationResult> generations = engine.generate(part, sampling);
        throwIfRejected(generations);
        if (options.beforeScoring) {
            options.beforeScoring();
        }
        // The trainer scores the chunk a group at a time; each group's distributions are dropped once used.
        for (std::size_t group = 0; group < part.size(); group += scoringGroup) {
            const std::size_t groupEnd = std::min(part.size(), group + scoringGroup);
            std::vector<std::vector<std::int64_t>> prompts;
            std::vector<std::vector<std::int64_t>> responses;
            for (std::size_t i = group; i < groupEnd; ++i) {
                prompts.push_back(part[i].prompt);
                responses.push_back(generations[i].tokens);
            }
            std::vector<at::Tensor> trainerLogProbs = scoreSequences(trainer, prompts, responses, scoring);
            for (std::size_t i = group; i < groupEnd; ++i) {
                GenerationResult& generation = generations[i];
                metrics::MismatchExtras extras;
                extras.entropy = options.keepTokenValues;
                const at::Tensor logMu = logMuRows(generation.logits, sampling);
                trainerLogProbs[i - group] = trainerLogProbs[i - group].to(logMu.device());
                const metrics::TokenMismatch mismatch = metrics::tokenMismatch(
                    logMu, trainerLogProbs[i - group], at::tensor(generation.tokens, at::kLong), extras);
                if (options.keepTokenValues && !generation.tokens.empty()) {
                    appendTokenValues(measurement.tokenValues, mismatch);
                }
                if (options.onPrompt) {
                    options.onPrompt(begin + i, logMu, trainerLogProbs[i - group], generation, mismatch);
                }
                trainerLogProbs[i - group] = at::Tensor();
                metrics::MismatchAccumulator prompt;
                prompt.add(mismatch);
                total.add(prompt);
                measurement.promptKlSums.push_back(prompt.klSum);
                measurement.promptK1Sums.push_back(prompt.k1Sum);
                measurement.promptK3Sums.push_back(prompt.k3Sum);
                measurement.promptTokens.push_back(prompt.tokens);
                generation.logits = at::Tensor(); // [T, vocab] per prompt: not kept
                measurement.generations.push_back(std::move(generation));
            }
        }
    }
    measurement.kl = total.meanKl();
    measurement.k1 = total.meanK1();
    measurement.k3 = total.meanK3();
    measurement.tokens = total.tokens;
    if (progress) {
        progress->update(1.0, "measuring mismatch");
    }
    return measurement;
}

} // namespace mismatch::engine

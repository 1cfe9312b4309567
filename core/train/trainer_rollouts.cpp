// Training: the rollout side of a step. Which prompts a step trains on (a seeded shuffle per epoch), its generation
// requests, the rollout engine and a step's rollouts with the teacher's scores (Session::produce), which the
// asynchronous loop runs on its rollout thread.
#include "core/train/trainer_internal.h"

#include "core/common/error.h"
#include "core/common/random.h"
#include "core/engine/mismatch_sources.h"

#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace mismatch::train::detail {

std::vector<std::size_t> Session::batchPromptIndices(std::int64_t step)
{
    // Epoch e visits the whole set in the order of a Fisher-Yates shuffle seeded by (seed, e).
    const auto n = static_cast<std::int64_t>(trainSet_.prompts.size());
    std::vector<std::size_t> indices;
    for (std::int64_t j = 0; j < config_.batch.promptsPerStep; ++j) {
        const std::int64_t global = (step - 1) * config_.batch.promptsPerStep + j;
        const std::int64_t epoch = global / n;
        auto found = epochOrders_.find(epoch);
        if (found == epochOrders_.end()) {
            std::vector<std::size_t> order(static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < order.size(); ++i) {
                order[i] = i;
            }
            SplitMix64 generator(mixSeed(config_.seed, 0x6570637ull, static_cast<std::uint64_t>(epoch)));
            for (std::size_t i = order.size(); i > 1; --i) {
                std::swap(order[i - 1], order[generator.below(i)]);
            }
            found = epochOrders_.emplace(epoch, std::move(order)).first;
            if (epochOrders_.size() > 4) {
                epochOrders_.erase(epochOrders_.begin());
            }
        }
        indices.push_back(found->second[static_cast<std::size_t>(global % n)]);
    }
    return indices;
}

std::vector<engine::GenerationRequest> Session::batchRequests(std::int64_t step, std::vector<std::size_t>& promptIndex)
{
    const std::vector<std::size_t> prompts = batchPromptIndices(step);
    std::vector<engine::GenerationRequest> requests;
    promptIndex.clear();
    for (std::size_t j = 0; j < prompts.size(); ++j) {
        for (std::int64_t r = 0; r < config_.batch.samplesPerPrompt; ++r) {
            engine::GenerationRequest request;
            request.prompt = trainIds_[prompts[j]];
            request.seed = mixSeed(config_.seed, static_cast<std::uint64_t>(step),
                static_cast<std::uint64_t>(requests.size()));
            requests.push_back(std::move(request));
            promptIndex.push_back(prompts[j]);
        }
    }
    return requests;
}

std::unique_ptr<engine::Engine> Session::makeRolloutEngine(const model::TransformerWeights& published) const
{
    engine::EngineOptions options;
    options.precision = engine::EnginePrecision::Bf16Reference;
    auto rolloutEngine = std::make_unique<engine::Engine>(modelConfig_, published, plan_, options);
    rolloutEngine->setTokenizer(tokenizer_.get());
    return rolloutEngine;
}

Rollout Session::produce(std::int64_t step, engine::Engine& rolloutEngine, std::int64_t& syncedVersion,
    const model::TransformerWeights& versionWeights)
{
    try {
        return produceUnchecked(step, rolloutEngine, syncedVersion, versionWeights);
    } catch (const CancelledError&) {
        throw;
    } catch (const std::exception& error) {
        throw Error("step " + std::to_string(step) + ": the rollout with weight version "
            + std::to_string(rolloutVersion(step)) + " failed: " + error.what());
    }
}

Rollout Session::produceUnchecked(std::int64_t step, engine::Engine& rolloutEngine, std::int64_t& syncedVersion,
    const model::TransformerWeights& versionWeights)
{
    Rollout rollout;
    rollout.step = step;
    rollout.version = rolloutVersion(step);
    const Clock::time_point start = Clock::now();
    if (syncedVersion != rollout.version) {
        // A weight sync. The noise is drawn afresh for every version (seeded by the run's noise seed and the
        // version), as an engine whose error is not a fixed offset, in the dtype the engine reads each tensor in
        // (bf16 for the modules it rounds to bf16: w + noise rounded once, as the analyses' noisy engines).
        // Without noise the engine shares the version's tensors, which nothing writes to once published.
        const auto& noise = config_.rollout.noise;
        rolloutEngine.syncWeights(noise.sigma > 0.0
                ? engine::addWeightNoise(versionWeights, noise.sigma,
                    mixSeed(noise.seed, 0x6e6f697365ull, static_cast<std::uint64_t>(rollout.version)), noise.modules,
                    engine::engineNoiseDtype(modelConfig_, plan_ ? &*plan_ : nullptr))
                : versionWeights);
        syncedVersion = rollout.version;
    }
    rollout.requests = batchRequests(step, rollout.promptIndex);
    {
        at::NoGradGuard noGrad;
        rollout.generations = rolloutEngine.generate(rollout.requests, sampling_);
    }
    engine::throwIfRejected(rollout.generations);
    for (const auto& generation : rollout.generations) {
        rollout.tokens += static_cast<std::int64_t>(generation.tokens.size());
    }
    rollout.rolloutSeconds = secondsSince(start);
    if (usesTeacher(config_.objective.kind)) {
        const Clock::time_point teacherStart = Clock::now();
        std::vector<std::vector<std::int64_t>> prompts;
        std::vector<std::vector<std::int64_t>> responses;
        for (std::size_t i = 0; i < rollout.requests.size(); ++i) {
            prompts.push_back(rollout.requests[i].prompt);
            responses.push_back(rollout.generations[i].tokens);
        }
        at::NoGradGuard noGrad;
        engine::ScoreOptions scoring;
        scoring.batchSize = 64;
        scoring.onHost = false; // the objective reads them on the teacher's device, the student's
        rollout.teacherLogProbs = engine::scoreSequences(*teacher_, prompts, responses, scoring);
        rollout.teacherSeconds = secondsSince(teacherStart);
    }
    return rollout;
}

} // namespace mismatch::train::detail

// Training: one optimizer step on one step's rollouts (Session::trainStep). The packed batch, rewards, the
// objective, the update, the step's mismatch and the BF16 unit, and the step's measures.
#include "core/train/trainer_internal.h"

#include "core/engine/token_details.h"
#include "core/common/error.h"
#include "core/engine/measure.h"
#include "core/io/arith_task.h"
#include "core/metrics/mismatch.h"
#include "core/model/model_files.h"

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/fp8_ops.h"
#endif

#include <ATen/core/grad_mode.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace mismatch::train::detail {

namespace {

// `device`: where the student computes; the batch is built on the host and its tensors moved there once.
PackedBatch packBatch(const Rollout& rollout, const at::Device& device)
{
    PackedBatch packed;
    const auto batch = static_cast<std::int64_t>(rollout.requests.size());
    packed.batch = batch;
    std::int64_t longest = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
        longest = std::max<std::int64_t>(longest,
            static_cast<std::int64_t>(rollout.requests[b].prompt.size() + rollout.generations[b].tokens.size()));
    }
    packed.longest = longest;
    packed.ids = at::zeros({batch, longest}, at::kLong);
    packed.mask = at::zeros({batch, longest}, at::kLong);
    std::vector<std::int64_t> rows;
    std::vector<std::int64_t> sampled;
    std::vector<double> engineLogProbs;
    auto* idData = packed.ids.data_ptr<std::int64_t>();
    auto* maskData = packed.mask.data_ptr<std::int64_t>();
    for (std::int64_t b = 0; b < batch; ++b) {
        const auto& prompt = rollout.requests[b].prompt;
        const auto& generation = rollout.generations[b];
        std::int64_t t = 0;
        for (const std::int64_t id : prompt) {
            idData[b * longest + t] = id;
            maskData[b * longest + t] = 1;
            ++t;
        }
        for (std::size_t r = 0; r < generation.tokens.size(); ++r) {
            idData[b * longest + t] = generation.tokens[r];
            maskData[b * longest + t] = 1;
            rows.push_back(b * longest + t - 1);
            packed.sequenceOf.push_back(b);
            sampled.push_back(generation.tokens[r]);
            engineLogProbs.push_back(generation.logProbs[r]);
            ++t;
        }
    }
    packed.tokens = static_cast<std::int64_t>(rows.size());
    packed.rowIndex = at::tensor(rows, at::kLong);
    packed.engineTokens.sampled = at::tensor(sampled, at::kLong);
    packed.engineTokens.logProbs = at::tensor(engineLogProbs, at::kDouble);
    for (at::Tensor* tensor : {&packed.ids, &packed.mask, &packed.rowIndex, &packed.engineTokens.sampled,
             &packed.engineTokens.logProbs}) {
        *tensor = tensor->to(device); // the same tensor when already there
    }
    return packed;
}

// The L2 norm of all gradients, clipped to `clip` first when it is > 0.
double gradientL2Norm(const std::vector<at::Tensor>& parameters, double clip)
{
    return clip > 0.0 ? clipGradientNorm(parameters, clip) : gradientNorm(parameters);
}

} // namespace

// Rewards: exact-match answers of the rollouts (the verifiable reward of REINFORCE and GRPO).
std::vector<double> Session::rewards(const Rollout& rollout) const
{
    std::vector<double> rewards;
    for (std::size_t b = 0; b < rollout.requests.size(); ++b) {
        const io::Prompt& prompt = trainSet_.prompts[rollout.promptIndex[b]];
        const std::string text = tokenizer_->generatedText(rollout.generations[b].tokens);
        rewards.push_back(!prompt.answer.empty() && io::verifyAnswer(text, prompt.answer) ? 1.0 : 0.0);
    }
    return rewards;
}

// The run's objective on the student's logits at the response tokens, with the run's correction.
ObjectiveResult Session::objective(const at::Tensor& studentLogits, const Rollout& rollout, const PackedBatch& packed,
    const std::vector<double>& rewards) const
{
    const at::Tensor realTokens = at::ones({packed.tokens}, at::TensorOptions().dtype(at::kBool).device(device_));
    const at::Tensor rewardTensor = at::tensor(rewards, at::kDouble).to(device_);
    const at::Tensor sequenceOf = at::tensor(packed.sequenceOf, at::kLong).to(device_);
    const EngineTokens& engineTokens = packed.engineTokens;
    CorrectionOptions correction;
    correction.kind = config_.correction.kind == CorrectionKind::Tis
        ? CorrectionOptions::Tis
        : (config_.correction.kind == CorrectionKind::Mis ? CorrectionOptions::Mis : CorrectionOptions::None);
    correction.cap = config_.correction.cap;
    at::Tensor teacherLogProbs;
    if (usesTeacher(config_.objective.kind)) {
        teacherLogProbs = at::cat(rollout.teacherLogProbs, 0).to(device_); // scored where the teacher is
    }
    ObjectiveResult result;
    switch (config_.objective.kind) {
    case Objective::OpdFullKl:
        result = opdFullKl(studentLogits, teacherLogProbs, realTokens, engineTokens, correction);
        break;
    case Objective::OpdK1:
        result = opdK1(studentLogits, teacherLogProbs, realTokens, engineTokens, correction);
        break;
    case Objective::OpdK3:
        result = opdK3(studentLogits, teacherLogProbs, realTokens, engineTokens, correction);
        break;
    case Objective::OpdTopK:
        result = opdTopK(studentLogits, teacherLogProbs, realTokens, config_.objective.topK, engineTokens, correction);
        break;
    case Objective::Reinforce:
        result = reinforce(studentLogits, realTokens, sequenceOf, rewardTensor,
            engineTokens, correction);
        break;
    case Objective::Grpo: {
        GrpoOptions grpoOptions;
        grpoOptions.groupSize = config_.batch.samplesPerPrompt;
        result = grpo(studentLogits, realTokens, sequenceOf, rewardTensor, engineTokens,
            grpoOptions);
        break;
    }
    }
    return result;
}

// Backward pass and optimizer update of step `step`, refusing a non-finite loss, gradient or updated weights
// before anything of the step is stored. Returns {learning rate, gradient norm}.
std::pair<double, double> Session::update(
    std::int64_t step, const at::Tensor& loss, double lossValue, AdamW& optimizer, const std::vector<at::Tensor>& parameters)
{
    if (!std::isfinite(lossValue)) {
        throw Error("step " + std::to_string(step) + ": the " + toString(config_.objective.kind)
            + " loss is not finite (" + std::to_string(lossValue)
            + "); the student's logits or the teacher's log-probabilities hold NaN or infinite values");
    }
    loss.backward();
    const double norm = gradientL2Norm(parameters, config_.optimizer.gradientClip);
    if (!std::isfinite(norm)) {
        throw Error("step " + std::to_string(step) + ": the gradient norm is not finite; training stopped before "
            "the update so that no NaN reaches the weights");
    }
    const double learningRate = warmupCosineLearningRate(
        step - 1, config_.optimizer.warmupSteps, config_.steps, config_.optimizer.learningRate);
    optimizer.step(learningRate);
    optimizer.zeroGrad();
    for (const std::string& name : weights_.names()) {
        const std::string problem = model::nonFiniteSummary(weights_.get(name));
        if (!problem.empty()) {
            throw Error("step " + std::to_string(step) + ": after the optimizer update the weights are not finite: "
                + name + " holds " + problem + " (learning rate " + std::to_string(learningRate)
                + "); the run stops before anything of this step is stored");
        }
    }
    return {learningRate, norm};
}

// Mismatch of the step: the engine's mu against the trainer's pi_theta (before this update) at the rollout
// temperature, on the engine's own prefixes.
// With `kept`, the first kStoredRollouts sequences token by token: per-token KL and engine::tokenDetails of the
// same mu and pi rows.
StepMismatch Session::stepMismatch(std::int64_t step, const Rollout& rollout, const at::Tensor& studentLogits,
    const at::Tensor& sampled, std::vector<store::StoredGeneration>* kept) const
{
    StepMismatch mismatch;
    {
        at::NoGradGuard noGrad;
        std::vector<at::Tensor> mus;
        for (const auto& generation : rollout.generations) {
            mus.push_back(generation.distributions);
        }
        // The engine's distributions (on the engine's device; the host for the CPU's sampler): the mismatch is taken
        // where pi is.
        const at::Tensor logMu = at::cat(mus, 0).to(studentLogits.device());
        const at::Tensor scaled = studentLogits.detach() / measureTemperature_;
        metrics::TokenMismatch m;
#if defined(MISMATCH_HAVE_CUDA)
        if (scaled.is_cuda()) {
            // The fused kernel: one pass over mu's log-probabilities (their log-sum-exp is 0, so they serve as
            // logits) and pi's logits per row (cuda/online_kl_state.h; tests/gpu/kl_bounds.h holds it to the
            // two-pass float64 definition: ~1e-8 nats per row between a BF16 engine and its trainer), instead of a
            // float64 log-softmax of the whole [N, vocab] batch.
            const cuda::FusedMismatch fused = cuda::fusedMismatch(logMu.to(at::kFloat), scaled.to(at::kFloat), sampled);
            m.kl = fused.kl.to(at::kDouble);
            m.k1 = fused.k1.to(at::kDouble);
            m.k3 = fused.k3.to(at::kDouble);
        }
#endif
        if (!m.kl.defined()) {
            // The float64 log pi a block of rows at a time inside tokenMismatch, never the whole [N, vocab] batch
            // (1.2 GB at 1,024 tokens of a 151,936-token vocabulary).
            metrics::MismatchExtras fromLogits;
            fromLogits.trainerLogits = true;
            m = metrics::tokenMismatch(logMu, scaled, sampled, fromLogits);
        }
        mismatch.kl = m.kl.mean().item<double>();
        mismatch.k1 = m.k1.mean().item<double>();
        mismatch.k3 = m.k3.mean().item<double>();
        // The packed rows are the sequences' response tokens in batch order (packBatch).
        std::int64_t row = 0;
        for (std::size_t b = 0; kept && b < rollout.generations.size() && b < kStoredRollouts; ++b) {
            const engine::GenerationResult& generation = rollout.generations[b];
            const auto length = static_cast<std::int64_t>(generation.tokens.size());
            store::StoredGeneration stored;
            stored.index = static_cast<std::int64_t>(b);
            stored.promptId = trainSet_.prompts[rollout.promptIndex[b]].id;
            stored.promptTokens = rollout.requests[b].prompt;
            stored.tokens = generation.tokens;
            const at::Tensor kl = m.kl.slice(0, row, row + length).to(at::kCPU).to(at::kDouble).contiguous();
            stored.kl.assign(kl.data_ptr<double>(), kl.data_ptr<double>() + length);
            const at::Tensor rowsPi = at::log_softmax(scaled.slice(0, row, row + length).to(at::kDouble), -1);
            stored.details
                = engine::tokenDetails(generation.distributions.to(at::kCPU), rowsPi.to(at::kCPU), generation.tokens);
            kept->push_back(std::move(stored));
            row += length;
        }
    }
    if (!std::isfinite(mismatch.kl) || !std::isfinite(mismatch.k1) || !std::isfinite(mismatch.k3)) {
        throw Error("step " + std::to_string(step) + ": the mismatch is not finite (KL " + std::to_string(mismatch.kl)
            + "); the engine's or the trainer's distributions hold NaN or infinite values");
    }
    return mismatch;
}

// The BF16 unit: the plain BF16 engine at the trainer's weights before this update, same prompts and seeds.
// A BF16-engine rollout is its own unit at every step (nothing to measure); other engines measure it at step 1
// and at every multiple of bf16_unit_every (the steps evaluated when it equals evaluation.every). Returns whether
// it was measured at this step; `seconds` is the time it took.
bool Session::measureBf16Unit(const Rollout& rollout, double stepKl, Bf16Unit& bf16Unit, double& seconds)
{
    const std::int64_t step = rollout.step;
    const std::int64_t unitEvery = config_.evaluation.bf16UnitEvery;
    seconds = 0.0;
    const bool measure = rolloutIsBf16Engine() || step == 1 || bf16Unit.value <= 0.0
        || (unitEvery > 0 && step % unitEvery == 0);
    if (!measure) {
        return false;
    }
    const Clock::time_point unitStart = Clock::now();
    if (rolloutIsBf16Engine()) {
        bf16Unit.value = stepKl; // this rollout is the BF16 engine at the current weights
    } else {
        // The weights before this step's update are the version published last (step - 1).
        auto before = versions_.snapshot();
        const auto found = before.find(step - 1);
        engine::EngineOptions engineOptions;
        engineOptions.precision = engine::EnginePrecision::Bf16Reference;
        engine::Engine bf16Engine(modelConfig_, found->second, std::nullopt, engineOptions);
        const model::Transformer trainer(modelConfig_, found->second);
        engine::MismatchOptions measureOptions;
        measureOptions.sampling = sampling_;
        measureOptions.batchSize = 64;
        at::NoGradGuard noGrad;
        bf16Unit.value = engine::measureMismatch(trainer, bf16Engine, rollout.requests, measureOptions).kl;
    }
    bf16Unit.step = step;
    seconds = secondsSince(unitStart);
    return true;
}

store::StepMetrics Session::trainStep(const Rollout& rollout, AdamW& optimizer,
    const std::vector<at::Tensor>& parameters, model::Transformer& student, Bf16Unit& bf16Unit, double wallOffset,
    Clock::time_point start, std::vector<store::StoredGeneration>* kept)
{
    const std::int64_t step = rollout.step;
    const Clock::time_point trainStart = Clock::now();
    const PackedBatch packed = packBatch(rollout, device_);
    const std::int64_t batch = packed.batch;
    const std::int64_t tokens = packed.tokens;
    const std::vector<double> stepRewards = rewards(rollout);

    const at::Tensor logits = student.forward(packed.ids, packed.mask); // [B, L, V], FP32, with gradients
    const at::Tensor studentLogits
        = logits.reshape({batch * packed.longest, modelConfig_.vocabSize}).index_select(0, packed.rowIndex);
    const ObjectiveResult result = objective(studentLogits, rollout, packed, stepRewards);
    const double lossValue = result.loss.item<double>();
    const auto [learningRate, gradientNorm] = update(step, result.loss, lossValue, optimizer, parameters);
    const StepMismatch mismatch = stepMismatch(step, rollout, studentLogits, packed.engineTokens.sampled, kept);
    const double trainSeconds = secondsSince(trainStart);
    double unitSeconds = 0.0;
    const bool measureUnit = measureBf16Unit(rollout, mismatch.kl, bf16Unit, unitSeconds);

    store::StepMetrics metrics;
    metrics.step = step;
    metrics.mismatchKl = mismatch.kl;
    metrics.k1 = mismatch.k1;
    metrics.k3 = mismatch.k3;
    if (bf16Unit.value > 0.0) {
        metrics.bf16Multiple = mismatch.kl / bf16Unit.value;
    }
    metrics.loss = lossValue;
    double rewardMean = 0.0;
    for (const double r : stepRewards) {
        rewardMean += r;
    }
    rewardMean /= static_cast<double>(std::max<std::int64_t>(1, batch));
    if (!usesTeacher(config_.objective.kind)) {
        metrics.reward = rewardMean;
    }
    metrics.accuracy = rewardMean;
    metrics.entropy = result.studentEntropy;
    metrics.staleness = step - 1 - rollout.version;
    metrics.rolloutTokensPerSecond
        = rollout.rolloutSeconds > 0.0 ? static_cast<double>(rollout.tokens) / rollout.rolloutSeconds : 0.0;
    metrics.trainTokensPerSecond = trainSeconds > 0.0 ? static_cast<double>(tokens) / trainSeconds : 0.0;
    metrics.wallTimeSeconds = wallOffset + secondsSince(start);
    nlohmann::json extras = {{"learning_rate", learningRate}, {"gradient_norm", gradientNorm},
        {"objective_kl", result.meanKl}, {"correction_weight_mean", result.meanWeight},
        {"clipped_fraction", result.clippedFraction}, {"tokens", tokens}, {"sequences", batch},
        {"weight_version", rollout.version}, {"rollout_seconds", rollout.rolloutSeconds},
        {"teacher_seconds", rollout.teacherSeconds}, {"train_seconds", trainSeconds},
        {"response_length_mean", static_cast<double>(tokens) / static_cast<double>(std::max<std::int64_t>(1, batch))},
        {"bf16_unit", bf16Unit.value}, {"bf16_unit_measured", measureUnit}, {"bf16_unit_step", bf16Unit.step},
        {"bf16_unit_seconds", unitSeconds}};
    metrics.extrasJson = extras.dump();
    return metrics;
}

} // namespace mismatch::train::detail

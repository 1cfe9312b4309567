#pragma once
// What the trainer's files share: the run's Session and the step's types (core/train/trainer.cpp is the loop and
// the public entry; trainer_session.cpp loads and checks a run, trainer_rollouts.cpp produces a step's rollouts,
// trainer_step.cpp trains and measures one step, trainer_checkpoints.cpp saves and restores checkpoints;
// rollout_queue.h is the staleness queue between the rollout thread and the trainer). Internal to core/train.
#include "core/train/trainer.h"

#include "core/engine/engine.h"
#include "core/io/prompt_set.h"
#include "core/model/config.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe_plan.h"
#include "core/store/analysis_store.h"
#include "core/train/adamw.h"
#include "core/train/objectives.h"
#include "core/train/rollout_queue.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::train::detail {

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// The BF16 unit in force: its value (nats per token) and the step it was measured at.
struct Bf16Unit {
    double value = 0.0;
    std::int64_t step = 0;
};

// One step's rollouts as the trainer's input: a right-padded [B, L] batch of prompt + response, the row of the
// logits predicting each response token, and per response token its sequence and the engine's sample.
struct PackedBatch {
    std::int64_t batch = 0;
    std::int64_t longest = 0;
    std::int64_t tokens = 0; // response tokens, all sequences
    at::Tensor ids;
    at::Tensor mask;
    at::Tensor rowIndex;
    std::vector<std::int64_t> sequenceOf;
    EngineTokens engineTokens;
};

// A step's mismatch, token means.
struct StepMismatch {
    double kl = 0.0;
    double k1 = 0.0;
    double k3 = 0.0;
};

// How many of a step's sequences (the first in batch order) are stored token by token for the drill-down, at step 1,
// every evaluation step and the last step.
constexpr std::size_t kStoredRollouts = 4;

// Everything a run needs, loaded and validated before anything is stored.
class Session {
public:
    Session(const RunConfig& config, const std::string& workspaceDirectory); // trainer_session.cpp

    const RunConfig& config() const { return config_; }
    const model::ModelConfig& modelConfig() const { return modelConfig_; }
    std::int64_t parameterCount() const { return parameterCount_; }

    TrainResult run(store::RunStore& store, std::int64_t runId, Progress& progress, const TrainOptions& options,
        std::int64_t resumedFrom);

    // Restores the state saved with checkpoint `directory` (weights, optimizer, weight history, state.json).
    std::int64_t loadCheckpoint(const std::filesystem::path& directory);

private:
    // The memory checks of the setup (trainer_session.cpp).
    long double stepDistributionBytes(std::int64_t longestPrompt) const;
    std::uint64_t backwardGradientBytes() const;
    void requireJobFits(std::int64_t longestPrompt) const;
    void requireStepFits(const std::string& runFile, std::int64_t longestPrompt) const;
    struct CheckpointBytes {
        std::string largestFile;
        std::uint64_t largest = 0;
        std::uint64_t total = 0;
    };
    CheckpointBytes checkpointBytes() const;
    void requireCheckpointFits(const std::string& runFile) const; // InputError(run file, "checkpoint", ...)

    // The rollout side (trainer_rollouts.cpp).
    std::vector<std::size_t> batchPromptIndices(std::int64_t step);
    std::vector<engine::GenerationRequest> batchRequests(std::int64_t step, std::vector<std::size_t>& promptIndex);
    Rollout produce(std::int64_t step, engine::Engine& engine, std::int64_t& syncedVersion,
        const model::TransformerWeights& versionWeights);
    Rollout produceUnchecked(std::int64_t step, engine::Engine& engine, std::int64_t& syncedVersion,
        const model::TransformerWeights& versionWeights);
    // The rollout engine on `published` (a weight version: never written to, so the engine shares its tensors).
    std::unique_ptr<engine::Engine> makeRolloutEngine(const model::TransformerWeights& published) const;
    std::int64_t rolloutVersion(std::int64_t step) const
    {
        return std::max<std::int64_t>(0, step - 1 - config_.rollout.staleness);
    }
    bool rolloutIsBf16Engine() const
    {
        return !plan_ && config_.rollout.noise.sigma == 0.0 && config_.rollout.staleness == 0;
    }

    // One step (trainer_step.cpp).
    // `kept` (when given) receives the step's first kStoredRollouts sequences token by token.
    store::StepMetrics trainStep(const Rollout& rollout, AdamW& optimizer, const std::vector<at::Tensor>& parameters,
        model::Transformer& student, Bf16Unit& bf16Unit, double wallOffset, Clock::time_point start,
        std::vector<store::StoredGeneration>* kept);
    std::vector<double> rewards(const Rollout& rollout) const;
    ObjectiveResult objective(const at::Tensor& studentLogits, const Rollout& rollout, const PackedBatch& packed,
        const std::vector<double>& rewards) const;
    std::pair<double, double> update(std::int64_t step, const at::Tensor& loss, double lossValue, AdamW& optimizer,
        const std::vector<at::Tensor>& parameters);
    StepMismatch stepMismatch(std::int64_t step, const Rollout& rollout, const at::Tensor& studentLogits,
        const at::Tensor& sampled, std::vector<store::StoredGeneration>* kept) const;
    bool measureBf16Unit(const Rollout& rollout, double stepKl, Bf16Unit& bf16Unit, double& seconds);

    // The loop's schedule and evaluations (trainer.cpp).
    bool evaluatesAt(std::int64_t step) const;
    bool keepsRollouts(std::int64_t step) const;
    void evaluate(store::RunStore& store, std::int64_t runId, std::int64_t step, const model::Transformer& student,
        Progress& progress, const TrainOptions& options, TrainResult& result);

    // Checkpoints (trainer_checkpoints.cpp).
    void saveCheckpoint(std::int64_t runId, std::int64_t step, const AdamW& optimizer, const Bf16Unit& bf16Unit,
        double wallSeconds, TrainResult& result);
    void writeCheckpoint(const std::filesystem::path& staging, const std::filesystem::path& target, std::int64_t step,
        std::int64_t runId, const AdamW& optimizer, const Bf16Unit& bf16Unit, double wallSeconds);

    RunConfig config_;
    std::string workspace_;
    model::ModelConfig modelConfig_;
    std::unique_ptr<model::Tokenizer> tokenizer_;
    model::TransformerWeights weights_; // the student's FP32 master weights
    at::Device device_ = at::Device(at::kCPU); // where the run computes (RunConfig::device)
    std::int64_t parameterCount_ = 0;
    std::unique_ptr<model::Transformer> teacher_;
    io::PromptSet trainSet_;
    std::vector<std::vector<std::int64_t>> trainIds_;
    std::optional<io::PromptSet> evalSet_;
    std::optional<std::int64_t> evalSetId_;
    std::optional<quant::RecipePlan> plan_;
    engine::SamplingOptions sampling_;
    double measureTemperature_ = 1.0;
    int threads_ = 1;
    std::map<std::int64_t, std::vector<std::size_t>> epochOrders_;
    WeightVersions versions_;
    // Restored by a checkpoint:
    std::vector<std::pair<std::string, at::Tensor>> optimizerState_;
    Bf16Unit restoredBf16Unit_;
    double restoredWallSeconds_ = 0.0;
};

// The newest complete checkpoint of a run (trainer_checkpoints.cpp).
std::optional<std::filesystem::path> newestCheckpoint(const std::string& directory);

} // namespace mismatch::train::detail

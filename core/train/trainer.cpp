#include "core/train/trainer.h"

#include "core/engine/token_details.h"
#include "core/common/device.h"
#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/input_limits.h"
#include "core/common/random.h"
#include "core/common/version.h"
#include "core/engine/engine.h"
#include "core/engine/memory_plan.h"
#include "core/engine/measure.h"
#include "core/engine/mismatch_sources.h"
#include "core/io/arith_task.h"
#include "core/io/prompt_set.h"
#include "core/metrics/mismatch.h"
#include "core/model/config.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/train/adamw.h"
#include "core/train/objectives.h"
#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/quality.h"

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/fp8_ops.h"
#endif

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace mismatch::train {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start)
{
    return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string stepDirectoryName(std::int64_t step)
{
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
    return name;
}

// The BF16 unit in force: its value (nats per token) and the step it was measured at.
struct Bf16Unit {
    double value = 0.0;
    std::int64_t step = 0;
};

// One step's rollouts as the engine produced them, with the teacher's scores of the same prefixes.
struct Rollout {
    std::int64_t step = 0;
    std::int64_t version = 0; // weight version the engine generated with
    std::vector<engine::GenerationRequest> requests; // one per sequence (prompt-major, samples contiguous)
    std::vector<std::size_t> promptIndex; // per sequence: index into the training set
    std::vector<engine::GenerationResult> generations; // with full distributions log mu
    std::vector<at::Tensor> teacherLogProbs; // per sequence [T, vocab] (OPD objectives only)
    double rolloutSeconds = 0.0;
    double teacherSeconds = 0.0;
    std::int64_t tokens = 0;
};

// Weight versions the rollout side may need: version v = the student after v optimizer steps (detached).
class WeightVersions {
public:
    void publish(std::int64_t version, model::TransformerWeights weights)
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            versions_[version] = std::move(weights);
            newest_ = std::max(newest_, version);
        }
        changed_.notify_all();
    }
    // Waits until `version` is published (or `stop` is set: nullopt).
    std::optional<model::TransformerWeights> wait(std::int64_t version, const std::atomic<bool>& stop)
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop.load() || versions_.count(version) != 0; });
        if (stop.load() && versions_.count(version) == 0) {
            return std::nullopt;
        }
        return versions_.at(version);
    }
    void wake() { changed_.notify_all(); }
    // Forgets versions older than `oldest`.
    void prune(std::int64_t oldest)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = versions_.begin(); it != versions_.end() && it->first < oldest;) {
            it = versions_.erase(it);
        }
    }
    std::map<std::int64_t, model::TransformerWeights> snapshot() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return versions_;
    }

private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::map<std::int64_t, model::TransformerWeights> versions_;
    std::int64_t newest_ = -1;
};

// Bounded queue of rollouts between the rollout thread and the trainer.
class RolloutQueue {
public:
    explicit RolloutQueue(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}
    // False when the queue was closed (the trainer stopped).
    bool push(Rollout rollout)
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
        if (closed_) {
            return false;
        }
        items_.push_back(std::move(rollout));
        changed_.notify_all();
        return true;
    }
    void fail(std::exception_ptr error)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = error;
        changed_.notify_all();
    }
    // The next rollout; rethrows the producer's error.
    Rollout pop()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return !items_.empty() || error_ || closed_; });
        if (!items_.empty()) {
            Rollout rollout = std::move(items_.front());
            items_.pop_front();
            changed_.notify_all();
            return rollout;
        }
        if (error_) {
            std::rethrow_exception(error_);
        }
        throw CancelledError("the rollout queue was closed");
    }
    void close()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        closed_ = true;
        changed_.notify_all();
    }

private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Rollout> items_;
    std::size_t capacity_;
    bool closed_ = false;
    std::exception_ptr error_;
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
    Session(const RunConfig& config, const std::string& workspaceDirectory)
        : config_(config), workspace_(workspaceDirectory)
    {
        // Every check that needs no weights comes first (configurations, tokenizers, prompt lengths, the noise
        // pattern, the memory of one step), so that a meaningless setup is refused in seconds.
        const std::string runFile = config.sourceFile.empty() ? std::string("run configuration") : config.sourceFile;
        device_ = parseDevice(config.device, runFile, "device"); // before anything is loaded
        const model::ModelFiles studentFiles = model::openModelDirectory(config.student);
        modelConfig_ = studentFiles.config;
        tokenizer_ = std::make_unique<model::Tokenizer>(model::loadModelTokenizer(config.student, modelConfig_));
        parameterCount_ = model::checkpointStats(studentFiles.checkpoint).parameterCount;
        std::optional<model::ModelConfig> teacherConfig;
        if (!config.teacher.empty()) {
            const model::ModelFiles teacherFiles = model::openModelDirectory(config.teacher);
            teacherConfig = teacherFiles.config;
            if (teacherFiles.config.vocabSize != modelConfig_.vocabSize) {
                throw InputError(runFile, "teacher",
                    "the teacher's vocabulary (" + std::to_string(teacherFiles.config.vocabSize)
                        + ") differs from the student's (" + std::to_string(modelConfig_.vocabSize) + ")");
            }
            // The objectives compare the two distributions token id by token id: the ids must mean the same text.
            const model::Tokenizer teacherTokenizer = model::loadModelTokenizer(config.teacher, *teacherConfig);
            const std::string difference = tokenizer_->difference(teacherTokenizer);
            if (!difference.empty()) {
                throw InputError(runFile, "teacher",
                    "the teacher's tokenizer (" + (fs::path(config.teacher) / "tokenizer.json").string()
                        + ") differs from the student's (" + (fs::path(config.student) / "tokenizer.json").string()
                        + "): " + difference
                        + "; distillation compares the two models token by token, so they must share one tokenizer");
            }
        }
        engine::requireNoiseModulesMatch(modelConfig_, config.rollout.noise.modules, runFile, "rollout.noise.modules");
        trainSet_ = io::loadPromptSet(config.prompts);
        std::int64_t longestPrompt = 0;
        for (const io::Prompt& prompt : trainSet_.prompts) {
            std::vector<std::int64_t> ids = tokenizer_->encode(io::renderPrompt(trainSet_, prompt), true);
            if (ids.empty()) {
                throw InputError(config.prompts, "prompt '" + prompt.id + "'", "encodes to no tokens");
            }
            for (const model::ModelConfig* model : {&modelConfig_, teacherConfig ? &*teacherConfig : nullptr}) {
                if (model) {
                    model::requireFitsContext(*model, static_cast<std::int64_t>(ids.size()),
                        config.rollout.sampling.maxTokens, config.prompts,
                        "prompt '" + prompt.id + "' with rollout.sampling.max_tokens of " + runFile);
                }
            }
            longestPrompt = std::max<std::int64_t>(longestPrompt, static_cast<std::int64_t>(ids.size()));
            trainIds_.push_back(std::move(ids));
        }
        if (!config.evaluation.prompts.empty()) {
            evalSet_ = io::loadPromptSet(config.evaluation.prompts);
            for (const io::Prompt& prompt : evalSet_->prompts) {
                const auto tokens = static_cast<std::int64_t>(tokenizer_->encode(io::renderPrompt(*evalSet_, prompt), true).size());
                for (const model::ModelConfig* model : {&modelConfig_, teacherConfig ? &*teacherConfig : nullptr}) {
                    if (model) {
                        model::requireFitsContext(*model, tokens, config.evaluation.maxTokens,
                            config.evaluation.prompts,
                            "prompt '" + prompt.id + "' with evaluation.max_tokens of " + runFile);
                    }
                }
            }
        }
        if (!config.rollout.recipe.empty()) {
            plan_ = quant::resolveRecipe(quant::loadRecipe(config.rollout.recipe), modelConfig_);
        }
        requireStepFits(runFile, longestPrompt);
        requireJobFits(longestPrompt);
        // Finite (model::requireFiniteWeights). The master weights (and so AdamW's moments and the rollout engine's
        // copies) live on the device.
        weights_ = onDevice(model::loadWeights(config.student, modelConfig_), device_);
        if (teacherConfig) {
            // The teacher never trains: its stored values (a BF16 checkpoint stays BF16), multiplied exactly in FP32.
            model::TransformerWeights teacherWeights = onDevice(
                model::loadWeights(config.teacher, *teacherConfig, model::LoadPrecision::Stored), device_);
            teacher_ = std::make_unique<model::Transformer>(*teacherConfig, std::move(teacherWeights));
        }
        sampling_.temperature = config.rollout.sampling.temperature;
        sampling_.greedy = config.rollout.sampling.temperature == 0.0;
        sampling_.topP = config.rollout.sampling.topP;
        sampling_.topK = config.rollout.sampling.topK;
        sampling_.maxNewTokens = config.rollout.sampling.maxTokens;
        sampling_.seed = config.rollout.sampling.seed;
        sampling_.fullDistributions = true;
        engine::validateSamplingOptions(sampling_);
        measureTemperature_ = sampling_.greedy ? 1.0 : sampling_.temperature;
        threads_ = at::get_num_threads();
    }

    const RunConfig& config() const { return config_; }
    const model::ModelConfig& modelConfig() const { return modelConfig_; }
    std::int64_t parameterCount() const { return parameterCount_; }

    TrainResult run(store::RunStore& store, std::int64_t runId, Progress& progress, const TrainOptions& options,
        std::int64_t resumedFrom);

    // Restores the state saved with checkpoint `directory` (weights, optimizer, weight history, state.json).
    std::int64_t loadCheckpoint(const fs::path& directory);

private:
    // Bytes of one step's per-token distributions: the engine's, the student's with its gradient and the teacher's,
    // four float32 [tokens, vocabulary] arrays per sequence of up to `longestPrompt` + max_tokens tokens.
    long double stepDistributionBytes(std::int64_t longestPrompt) const
    {
        const long double sequences = static_cast<long double>(config_.batch.promptsPerStep)
            * static_cast<long double>(config_.batch.samplesPerPrompt);
        const long double tokens = static_cast<long double>(longestPrompt + config_.rollout.sampling.maxTokens);
        return sequences * tokens * static_cast<long double>(modelConfig_.vocabSize) * 4.0L * 4.0L;
    }

    // The backward's float32 gradients of the embedding and the lm_head (a full [vocabulary, hidden] matrix each)
    // exist before autograd adds them to the parameters' gradients: the lm_head's is added (and freed) before the
    // embedding's is made, but a tied embedding's two are summed first, so both exist at once: 1.16 GiB at the
    // Qwen3-0.6B shape (tied).
    std::uint64_t backwardGradientBytes() const
    {
        return (modelConfig_.tieWordEmbeddings ? 2u : 1u) * static_cast<std::uint64_t>(modelConfig_.vocabSize)
            * static_cast<std::uint64_t>(modelConfig_.hiddenSize) * sizeof(float);
    }

    // What the run will hold as a whole (engine/memory_plan.h), checked before any weights are loaded, after
    // requireStepFits has refused a step that cannot fit on its own: ResourceError naming every part.
    void requireJobFits(std::int64_t longestPrompt) const
    {
        const engine::StoredWeights stored = engine::storedWeights(config_.student);
        const quant::RecipePlan* plan = plan_ ? &*plan_ : nullptr;
        std::vector<model::MemoryItem> items {
            {"student master weights, gradients, AdamW moments and weight snapshots",
                engine::trainerBytes(stored.parameters, config_.rollout.staleness)},
            {"rollout engine weights", engine::engineExtraBytes(modelConfig_, plan, model::DType::F32, device_)},
            {"FP8 weight dequantized for one product", engine::engineProductTemporaryBytes(modelConfig_, plan, device_)},
            {"KV cache", engine::EngineOptions {}.kvCacheBytes},
            {"distributions and log-probabilities of a step",
                static_cast<std::uint64_t>(stepDistributionBytes(longestPrompt))},
            {"[vocabulary, hidden] gradients of the backward before they are added to the gradients",
                backwardGradientBytes()},
        };
        if (!rolloutIsBf16Engine()) {
            // The BF16 unit's engine (a plain BF16 engine at the weights before the step) lives beside the
            // rollout engine while it measures, with its own KV cache.
            items.push_back({"BF16 unit engine weights",
                engine::engineExtraBytes(modelConfig_, nullptr, model::DType::F32, device_)});
            items.push_back({"BF16 unit KV cache", engine::EngineOptions {}.kvCacheBytes});
        }
        if (config_.rollout.noise.sigma > 0.0) {
            // Each sync draws the version's noisy weights (engine::addWeightNoise) while the engine still holds
            // its view of the last version; after the sync the noisy bf16 modules are that view.
            items.push_back({"noisy weight version drawn at a rollout sync",
                engine::noisyCopyBytes(modelConfig_, plan, config_.rollout.noise.modules, at::kFloat, false)});
        }
        if (!config_.teacher.empty()) {
            items.push_back({"teacher weights as stored", engine::storedWeights(config_.teacher).bytes,
                /*stagedOnHost=*/true});
        }
        model::checkJobFits("training run " + config_.name, items, device_);
    }

    // InputError(run file, "batch.prompts_per_step", ...) when one step's per-token distributions (the engine's,
    // the student's with its gradient, the teacher's: four float32 [tokens, vocabulary] arrays per sequence)
    // cannot fit the available memory (model/memory_check.h): a huge batch would otherwise grind in swap. On a
    // cuda:N run they live on the device (the engine's distributions, the student's logits, the teacher's rows), so
    // the device's free memory is the one compared.
    void requireStepFits(const std::string& runFile, std::int64_t longestPrompt) const
    {
        const auto available = device_.is_cuda() ? model::availableDeviceMemory(device_) : model::availableMemory();
        if (!available) {
            return;
        }
        const long double bytes = stepDistributionBytes(longestPrompt);
        if (bytes <= static_cast<long double>(available->bytes)) {
            return;
        }
        char needed[64];
        std::snprintf(needed, sizeof needed, "%.3Lg bytes", bytes);
        throw InputError(runFile, "batch.prompts_per_step",
            "a step of " + std::to_string(config_.batch.promptsPerStep) + " prompts x "
                + std::to_string(config_.batch.samplesPerPrompt) + " samples, each up to "
                + std::to_string(longestPrompt + config_.rollout.sampling.maxTokens) + " tokens over a vocabulary of "
                + std::to_string(modelConfig_.vocabSize) + ", needs about " + needed
                + " for its per-token distributions but only " + formatByteSize(available->bytes) + " is available"
                + (device_.is_cuda() ? " on " + device_.str() : std::string()) + " (" + available->source
                + "); lower batch.prompts_per_step, batch.samples_per_prompt or rollout.sampling.max_tokens");
    }

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
    // `kept` (when given) receives the step's first kStoredRollouts sequences token by token.
    store::StepMetrics trainStep(const Rollout& rollout, AdamW& optimizer, const std::vector<at::Tensor>& parameters,
        model::Transformer& student, Bf16Unit& bf16Unit, double wallOffset, Clock::time_point start,
        std::vector<store::StoredGeneration>* kept);
    bool evaluatesAt(std::int64_t step) const;
    bool keepsRollouts(std::int64_t step) const;
    std::vector<double> rewards(const Rollout& rollout) const;
    ObjectiveResult objective(const at::Tensor& studentLogits, const Rollout& rollout, const PackedBatch& packed,
        const std::vector<double>& rewards) const;
    std::pair<double, double> update(std::int64_t step, const at::Tensor& loss, double lossValue, AdamW& optimizer,
        const std::vector<at::Tensor>& parameters);
    StepMismatch stepMismatch(std::int64_t step, const Rollout& rollout, const at::Tensor& studentLogits,
        const at::Tensor& sampled, std::vector<store::StoredGeneration>* kept) const;
    bool measureBf16Unit(const Rollout& rollout, double stepKl, Bf16Unit& bf16Unit, double& seconds);
    void evaluate(store::RunStore& store, std::int64_t runId, std::int64_t step, const model::Transformer& student,
        Progress& progress, const TrainOptions& options, TrainResult& result);
    void saveCheckpoint(std::int64_t runId, std::int64_t step, const AdamW& optimizer, const Bf16Unit& bf16Unit,
        double wallSeconds, TrainResult& result);
    void writeCheckpoint(const fs::path& staging, const fs::path& target, std::int64_t step, std::int64_t runId,
        const AdamW& optimizer, const Bf16Unit& bf16Unit, double wallSeconds);

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

// Every evaluation.every steps and the last step (the evaluation before training, step 0, is separate).
bool Session::evaluatesAt(std::int64_t step) const
{
    return step == config_.steps || (config_.evaluation.every > 0 && step % config_.evaluation.every == 0);
}

bool Session::keepsRollouts(std::int64_t step) const
{
    return step == 1 || evaluatesAt(step);
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

void Session::evaluate(store::RunStore& store, std::int64_t runId, std::int64_t step,
    const model::Transformer& student, Progress& progress, const TrainOptions& options, TrainResult& result)
{
    if (!evalSet_ || !teacher_) {
        return;
    }
    progress.setStage("evaluating step " + std::to_string(step));
    QualityOptions quality;
    quality.count = config_.evaluation.count;
    quality.maxTokens = config_.evaluation.maxTokens;
    quality.temperature = config_.rollout.sampling.temperature;
    quality.seed = mixSeed(config_.seed, 0x6576616cull);
    at::NoGradGuard noGrad;
    const QualityResult evaluation = evaluateQuality(student, *teacher_, *evalSet_, quality, *tokenizer_);
    if (!evalSetId_) {
        store::PromptSetRecord record;
        record.name = evalSet_->name;
        record.path = fs::absolute(config_.evaluation.prompts).string();
        record.promptCount = static_cast<std::int64_t>(evalSet_->prompts.size());
        evalSetId_ = store.addPromptSet(record);
    }
    store::addEvaluation(store, runId, step, evalSetId_, evaluation.problems);
    result.finalQuality = evaluation.quality;
    result.finalAccuracy = evaluation.accuracy;
    if (options.onEvaluation) {
        store::EvaluationSummary summary;
        summary.runId = runId;
        summary.step = step;
        summary.promptSetId = evalSetId_;
        summary.quality = evaluation.quality;
        summary.accuracy = evaluation.accuracy;
        summary.problemCount = static_cast<std::int64_t>(evaluation.problems.size());
        options.onEvaluation(summary);
    }
}

void Session::saveCheckpoint(std::int64_t runId, std::int64_t step, const AdamW& optimizer, const Bf16Unit& bf16Unit,
    double wallSeconds, TrainResult& result)
{
    const fs::path root(checkpointDirectory(workspace_, runId));
    const fs::path target = root / stepDirectoryName(step);
    const fs::path staging = root / (stepDirectoryName(step) + ".tmp");
    try {
        writeCheckpoint(staging, target, step, runId, optimizer, bf16Unit, wallSeconds);
    } catch (...) {
        // Nothing half-written stays behind: a failed write (full disk, file size limit) removes its staging
        // directory, and the newest complete checkpoint is still the previous one.
        std::error_code ignored;
        fs::remove_all(staging, ignored);
        throw;
    }
    result.lastCheckpoint = target.string();
    // Older checkpoints are kept: a resumable run needs only the newest, but earlier ones are student
    // checkpoints that admission checks and calibrations can use.
}

void Session::writeCheckpoint(const fs::path& staging, const fs::path& target, std::int64_t step, std::int64_t runId,
    const AdamW& optimizer, const Bf16Unit& bf16Unit, double wallSeconds)
{
    const auto fileSystem = [](const char* what, const fs::path& path, auto&& operation) {
        std::error_code error;
        operation(error);
        if (error) {
            throw Error(std::string("cannot ") + what + " " + path.string() + ": " + error.message());
        }
    };
    fileSystem("remove", staging, [&](std::error_code& e) { fs::remove_all(staging, e); });
    fileSystem("create", staging, [&](std::error_code& e) { fs::create_directories(staging, e); });
    writeFileAtomically((staging / "config.json").string(), model::configToJson(modelConfig_));
    fileSystem("write", staging / "tokenizer.json", [&](std::error_code& e) {
        fs::copy_file(fs::path(config_.student) / "tokenizer.json", staging / "tokenizer.json",
            fs::copy_options::overwrite_existing, e);
    });
    model::saveWeights(staging.string(), weights_, model::DType::F32); // as they are: nothing writes them meanwhile
    model::writeSafetensors((staging / "optimizer.safetensors").string(), optimizer.state());
    // The versions the next steps' rollouts use: max(0, step - k) .. step - 1 (step itself is the model).
    std::vector<std::pair<std::string, at::Tensor>> history;
    std::vector<std::int64_t> historyVersions;
    for (const auto& [version, weights] : versions_.snapshot()) {
        if (version >= step || version < step - config_.rollout.staleness) {
            continue;
        }
        historyVersions.push_back(version);
        for (const auto& [name, tensor] : weights.named()) {
            history.emplace_back("v" + std::to_string(version) + "/" + name, tensor);
        }
    }
    if (!history.empty()) {
        model::writeSafetensors((staging / "history.safetensors").string(), history);
    }
    nlohmann::json state = {{"run_id", runId}, {"step", step}, {"optimizer_steps", optimizer.stepCount()},
        {"bf16_unit", bf16Unit.value}, {"bf16_unit_step", bf16Unit.step}, {"wall_time_s", wallSeconds},
        {"history_versions", historyVersions},
        {"tool_version", kVersion}};
    writeFileAtomically((staging / "state.json").string(), state.dump(2) + "\n");
    fileSystem("remove", target, [&](std::error_code& e) { fs::remove_all(target, e); });
    fileSystem("rename", staging, [&](std::error_code& e) { fs::rename(staging, target, e); });
}

std::int64_t Session::loadCheckpoint(const fs::path& directory)
{
    const std::string statePath = (directory / "state.json").string();
    nlohmann::json state;
    std::int64_t step = 0;
    std::vector<std::int64_t> historyVersions;
    try {
        state = nlohmann::json::parse(readInputFile(statePath, limits::kConfigFile, "checkpoint state"));
        step = state.at("step").get<std::int64_t>();
        historyVersions = state.at("history_versions").get<std::vector<std::int64_t>>();
        restoredBf16Unit_.value = state.at("bf16_unit").get<double>();
        // Checkpoints written before the unit's step was recorded: the unit is the one of the checkpoint's step at
        // the latest (only `runs show`'s label uses it).
        restoredBf16Unit_.step = state.value("bf16_unit_step", step);
        restoredWallSeconds_ = state.at("wall_time_s").get<double>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError(statePath, "", std::string("malformed checkpoint state: ") + error.what());
    }
    model::TransformerWeights restored = model::loadWeights(directory.string(), modelConfig_);
    for (const std::string& name : weights_.names()) {
        weights_.set(name, restored.get(name).to(device_).clone());
    }
    const auto optimizerFile = model::SafetensorsFile::open((directory / "optimizer.safetensors").string());
    optimizerState_.clear();
    for (const auto& info : optimizerFile->tensors()) {
        optimizerState_.emplace_back(info.name, optimizerFile->load(info.name));
    }
    if (!historyVersions.empty()) {
        const auto historyFile = model::SafetensorsFile::open((directory / "history.safetensors").string());
        for (const std::int64_t version : historyVersions) {
            model::TransformerWeights snapshot;
            for (const std::string& name : weights_.names()) {
                snapshot.set(name, historyFile->load("v" + std::to_string(version) + "/" + name).to(device_));
            }
            versions_.publish(version, std::move(snapshot));
        }
    }
    return step;
}

TrainResult Session::run(store::RunStore& store, std::int64_t runId, Progress& progress, const TrainOptions& options,
    std::int64_t resumedFrom)
{
    TrainResult result;
    result.runId = runId;
    result.resumedFromStep = resumedFrom;
    const Clock::time_point start = Clock::now();
    const double wallOffset = resumedFrom > 0 ? restoredWallSeconds_ : 0.0;
    Bf16Unit bf16Unit = resumedFrom > 0 ? restoredBf16Unit_ : Bf16Unit {};

    std::vector<at::Tensor> parameters = weights_.parameters();
    AdamWOptions adamOptions;
    adamOptions.learningRate = config_.optimizer.learningRate;
    adamOptions.beta1 = config_.optimizer.beta1;
    adamOptions.beta2 = config_.optimizer.beta2;
    adamOptions.weightDecay = config_.optimizer.weightDecay;
    AdamW optimizer(parameters, adamOptions);
    if (resumedFrom > 0) {
        optimizer.loadState(optimizerState_);
    }
    model::Transformer student(modelConfig_, weights_);
    versions_.publish(resumedFrom, weights_.clone());

    if (resumedFrom == 0) {
        evaluate(store, runId, 0, student, progress, options, result);
    }

    std::atomic<bool> stop{false};
    std::unique_ptr<RolloutQueue> queue;
    std::thread producer;
    std::unique_ptr<engine::Engine> rolloutEngine = makeRolloutEngine(versions_.snapshot().at(resumedFrom));
    std::int64_t syncedVersion = -1;
    const std::int64_t first = resumedFrom + 1;
    const std::int64_t last = options.stopAfterSteps > 0
        ? std::min(config_.steps, resumedFrom + options.stopAfterSteps)
        : config_.steps;
    if (config_.rollout.asynchronous && first <= last) {
        queue = std::make_unique<RolloutQueue>(static_cast<std::size_t>(config_.rollout.staleness));
        producer = std::thread([this, &stop, &queue, &rolloutEngine, &syncedVersion, first, last] {
            at::set_num_threads(threads_);
            try {
                for (std::int64_t step = first; step <= last && !stop.load(); ++step) {
                    std::optional<model::TransformerWeights> weights = versions_.wait(rolloutVersion(step), stop);
                    if (!weights) {
                        return;
                    }
                    if (!queue->push(produce(step, *rolloutEngine, syncedVersion, *weights))) {
                        return;
                    }
                }
            } catch (...) {
                queue->fail(std::current_exception());
            }
        });
    }
    const auto stopProducer = [&] {
        if (producer.joinable()) {
            stop.store(true);
            versions_.wake();
            queue->close();
            producer.join();
        }
    };

    try {
        for (std::int64_t step = first; step <= last; ++step) {
            progress.checkCancelled();
            Rollout rollout;
            if (queue) {
                rollout = queue->pop();
            } else {
                const auto weights = versions_.snapshot();
                rollout = produce(step, *rolloutEngine, syncedVersion, weights.at(rolloutVersion(step)));
            }
            std::vector<store::StoredGeneration> kept;
            const store::StepMetrics metrics = trainStep(
                rollout, optimizer, parameters, student, bf16Unit, wallOffset, start, keepsRollouts(step) ? &kept : nullptr);
            // The later steps roll out with versions from step - k on (step s with s - 1 - k) and measure the BF16
            // unit at version step: the k + 1 versions step - k .. step are all that is kept (engine::trainerBytes
            // counts them), the oldest forgotten before the newest is made.
            versions_.prune(step - config_.rollout.staleness);
            versions_.publish(step, weights_.clone());
            {
                // The step and its kept rollouts together: a kill leaves both or neither.
                store::Transaction transaction(store.handle());
                store.appendSteps(runId, {metrics});
                if (!kept.empty()) {
                    store::addStepGenerations(store, runId, step, kept);
                }
                transaction.commit();
            }
            ++result.stepsStored;
            if (options.onStep) {
                options.onStep(metrics);
            }
            char stage[160];
            std::snprintf(stage, sizeof stage, "step %lld/%lld  loss %.4g  mismatch %.3g", static_cast<long long>(step),
                static_cast<long long>(config_.steps), metrics.loss.value_or(0.0), metrics.mismatchKl.value_or(0.0));
            progress.update(static_cast<double>(step) / static_cast<double>(config_.steps), stage);
            const bool lastStep = step == config_.steps;
            if (evaluatesAt(step)) {
                evaluate(store, runId, step, student, progress, options, result);
            }
            if (lastStep || (config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0)
                || std::find(options.checkpointSteps.begin(), options.checkpointSteps.end(), step)
                    != options.checkpointSteps.end()) {
                saveCheckpoint(runId, step, optimizer, bf16Unit, metrics.wallTimeSeconds.value_or(0.0), result);
            }
        }
    } catch (...) {
        stopProducer();
        throw;
    }
    stopProducer();
    result.wallSeconds = secondsSince(start);
    const auto info = store.run(runId);
    result.stepsStored = info ? info->stepCount : result.stepsStored;
    return result;
}

TrainResult runSession(Session& session, store::RunStore& store, std::int64_t runId, Progress& progress,
    const TrainOptions& options, std::int64_t resumedFrom)
{
    TrainResult result = store::recordRunOutcome(store, runId, [&] {
        TrainResult outcome = session.run(store, runId, progress, options, resumedFrom);
        const auto info = store.run(runId);
        if (info && info->lastStep.value_or(0) >= session.config().steps) {
            store.finishRun(runId, store::RunStatus::Finished);
        }
        return outcome;
    });
    store.releaseRunLock(runId); // stopped early (--stop-after): another process may resume it now
    return result;
}

std::string workspaceOf(const store::RunStore& store, const TrainOptions& options)
{
    return workspaceDirectoryOf(store, options.workspaceDirectory);
}

// The newest complete checkpoint of a run (a step-N directory with state.json), or nullopt.
std::optional<fs::path> newestCheckpoint(const std::string& directory)
{
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
        return std::nullopt;
    }
    std::optional<fs::path> newest;
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
        const std::string name = entry.path().filename().string();
        std::error_code missing;
        if (name.rfind("step-", 0) != 0 || name.find(".tmp") != std::string::npos
            || !fs::exists(entry.path() / "state.json", missing)) {
            continue;
        }
        if (!newest || name > newest->filename().string()) {
            newest = entry.path();
        }
    }
    return newest;
}

} // namespace

std::int64_t checkpointOptimizerSteps(const std::string& directory)
{
    const fs::path stateFile = fs::path(directory) / "state.json";
    std::error_code error;
    if (!fs::exists(stateFile, error)) {
        return 0; // a model directory that no training run wrote: the student before training
    }
    const nlohmann::json state = nlohmann::json::parse(readInputFile(stateFile.string(), limits::kConfigFile, "checkpoint state"), nullptr, false);
    if (!state.is_object() || !state.contains("optimizer_steps") || !state.at("optimizer_steps").is_number_integer()
        || state.at("optimizer_steps").get<std::int64_t>() < 0) {
        throw InputError(stateFile.string(), "optimizer_steps",
            "expected the checkpoint's optimizer step count (an integer >= 0) in the JSON object that training "
            "writes with each checkpoint");
    }
    return state.at("optimizer_steps").get<std::int64_t>();
}

std::string workspaceDirectoryOf(const store::RunStore& store, const std::string& workspaceDirectory)
{
    return workspaceDirectory.empty() ? fs::absolute(fs::path(store.path())).parent_path().string() : workspaceDirectory;
}

std::string checkpointDirectory(const std::string& workspaceDirectory, std::int64_t runId)
{
    return (fs::path(workspaceDirectory) / "checkpoints" / ("run-" + std::to_string(runId))).string();
}

std::string stepCheckpoint(
    const store::RunStore& store, const std::string& workspaceDirectory, std::int64_t runId, std::int64_t step)
{
    return (fs::path(checkpointDirectory(workspaceDirectoryOf(store, workspaceDirectory), runId))
        / stepDirectoryName(step))
        .string();
}

std::int64_t recordTrainingRun(const RunConfig& config, store::RunStore& store,
    const std::function<void(std::int64_t runId)>& alsoInTransaction)
{
    // What runTraining records, from the files alone (no weights are loaded).
    const model::ModelFiles files = model::openModelDirectory(config.student);
    store::ModelRecord model;
    model.name = fs::path(config.student).filename().string();
    model.path = fs::absolute(config.student).string();
    model.architecture = model::toString(files.config.architecture);
    model.parameterCount = model::checkpointStats(files.checkpoint).parameterCount;
    model.configJson = nlohmann::json::parse(model::configToJson(files.config)).dump();
    store::RunSpec spec;
    spec.name = config.name;
    spec.kind = "train";
    spec.configJson = runConfigToJson(config);
    spec.modelId = store.addModel(model);
    store::Transaction transaction(store.handle());
    const std::int64_t runId = store.beginRun(spec);
    if (alsoInTransaction) {
        alsoInTransaction(runId);
    }
    transaction.commit();
    return runId;
}

TrainResult runTraining(const RunConfig& config, store::RunStore& store, Progress& progress, const TrainOptions& options)
{
    progress.update(0.0, "loading models");
    Session session(config, workspaceOf(store, options));
    store::ModelRecord model;
    model.name = fs::path(config.student).filename().string();
    model.path = fs::absolute(config.student).string();
    model.architecture = model::toString(session.modelConfig().architecture);
    model.parameterCount = session.parameterCount();
    model.configJson = nlohmann::json::parse(model::configToJson(session.modelConfig())).dump();
    store::RunSpec spec;
    spec.name = config.name;
    spec.kind = "train";
    spec.configJson = runConfigToJson(config);
    spec.modelId = store.addModel(model);
    const std::int64_t runId = store.beginRun(spec);
    return runSession(session, store, runId, progress, options, 0);
}

TrainResult resumeTraining(std::int64_t runId, store::RunStore& store, Progress& progress, const TrainOptions& options)
{
    const auto info = store.run(runId);
    if (!info) {
        throw StoreError(store.path(), "has no run with id " + std::to_string(runId) + " (see `mismatch store runs`)");
    }
    if (info->kind != "train") {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " (" + info->name + ") is a '" + info->kind
            + "' run, not a training run");
    }
    if (info->status == store::RunStatus::Finished) {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " (" + info->name
            + ") has finished; there is nothing to resume");
    }
    const RunConfig config = parseRunConfig(info->configJson,
        store.path() + " (run " + std::to_string(runId) + " configuration)", fs::path(store.path()).parent_path().string());
    progress.update(0.0, "loading models");
    const std::string workspace = workspaceOf(store, options);
    Session session(config, workspace);
    const std::string directory = checkpointDirectory(workspace, runId);
    std::int64_t resumedFrom = 0;
    if (const auto checkpoint = newestCheckpoint(directory)) {
        resumedFrom = session.loadCheckpoint(*checkpoint);
    }
    // Unfinished checkpoint writes of the killed process.
    std::error_code ec;
    if (fs::is_directory(directory, ec)) {
        for (const auto& entry : fs::directory_iterator(directory, ec)) {
            if (entry.path().extension() == ".tmp") {
                fs::remove_all(entry.path(), ec);
            }
        }
    }
    // Steps and evaluations after the checkpoint are computed again (identically: every draw is a function of
    // the seed and the step); a run without a checkpoint starts over, its step-0 evaluation included.
    store.reopenRun(runId, resumedFrom > 0 ? resumedFrom : -1);
    return runSession(session, store, runId, progress, options, resumedFrom);
}

} // namespace mismatch::train

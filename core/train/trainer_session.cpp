// Training: loading and checking a run before anything is stored (Session's constructor): the models, tokenizers,
// prompt sets, recipe and sampling settings, and whether one step and the whole run fit the memory.
#include "core/train/trainer_internal.h"

#include "core/common/byte_size.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/quant/recipe.h"

#include <ATen/Parallel.h>

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstdio>

namespace fs = std::filesystem;

namespace mismatch::train::detail {

Session::Session(const RunConfig& config, const std::string& workspaceDirectory)
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
    requireCheckpointFits(runFile);
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

// Bytes of one step's per-token distributions: the engine's, the student's with its gradient and the teacher's,
// four float32 [tokens, vocabulary] arrays per sequence of up to `longestPrompt` + max_tokens tokens.
long double Session::stepDistributionBytes(std::int64_t longestPrompt) const
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
std::uint64_t Session::backwardGradientBytes() const
{
    return (modelConfig_.tieWordEmbeddings ? 2u : 1u) * static_cast<std::uint64_t>(modelConfig_.vocabSize)
        * static_cast<std::uint64_t>(modelConfig_.hiddenSize) * sizeof(float);
}

// What the run will hold as a whole (engine/memory_plan.h), checked before any weights are loaded, after
// requireStepFits has refused a step that cannot fit on its own: ResourceError naming every part.
void Session::requireJobFits(std::int64_t longestPrompt) const
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
void Session::requireStepFits(const std::string& runFile, std::int64_t longestPrompt) const
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

// Bytes of one checkpoint's files (trainer_checkpoints.cpp writeCheckpoint): model.safetensors (the float32
// weights), optimizer.safetensors (AdamW's two float32 moments per parameter) and history.safetensors (the
// float32 weights of up to `staleness` older versions). Headers, config.json, tokenizer.json and state.json are
// small beside them and left out.
Session::CheckpointBytes Session::checkpointBytes() const
{
    const std::uint64_t weights = static_cast<std::uint64_t>(parameterCount_) * sizeof(float);
    CheckpointBytes bytes;
    bytes.largestFile = "optimizer.safetensors";
    bytes.largest = 2 * weights;
    const std::uint64_t history = static_cast<std::uint64_t>(std::max<std::int64_t>(config_.rollout.staleness, 0)) * weights;
    if (history > bytes.largest) {
        bytes.largestFile = "history.safetensors";
        bytes.largest = history;
    }
    bytes.total = weights + 2 * weights + history;
    return bytes;
}

// Every run writes at least its final checkpoint: one that cannot be written (a file over the process's file size
// limit, `ulimit -f`, or more bytes than the workspace's file system has free) is refused before the run is
// stored, instead of failing after its steps have been trained and recorded.
void Session::requireCheckpointFits(const std::string& runFile) const
{
    const CheckpointBytes bytes = checkpointBytes();
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
        && static_cast<std::uint64_t>(limit.rlim_cur) < bytes.largest) {
        throw InputError(runFile, "checkpoint",
            "a checkpoint's " + bytes.largestFile + " takes about " + formatByteSize(bytes.largest)
                + " but this process may write files of at most " + formatByteSize(limit.rlim_cur)
                + " (its file size limit, `ulimit -f`); raise the limit before training");
    }
    struct statvfs space {};
    if (::statvfs(workspace_.c_str(), &space) == 0) {
        const std::uint64_t available = static_cast<std::uint64_t>(space.f_bavail) * space.f_frsize;
        if (available < bytes.total) {
            throw InputError(runFile, "checkpoint",
                "a checkpoint of this run takes about " + formatByteSize(bytes.total) + " but the workspace "
                    + workspace_ + " has only " + formatByteSize(available) + " free; free space before training");
        }
    }
}

} // namespace mismatch::train::detail

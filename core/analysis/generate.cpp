#include "core/analysis/generate.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/output_check.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/model/config.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

namespace fs = std::filesystem;

namespace mismatch::analysis {

GenerateResult generate(const GenerateOptions& o, Progress& progress)
{
    const std::string configPath = (fs::path(o.modelDirectory) / "config.json").string();
    const model::ModelConfig config = model::loadConfig(configPath);
    const model::Tokenizer tokenizer = model::loadModelTokenizer(o.modelDirectory, config);
    GenerateResult result;
    result.requests = promptRequests(o.prompts, tokenizer, 0);
    if (o.noise > 0.0) {
        engine::requireNoiseModulesMatch(config, o.noiseModules, o.noiseModulesSource, "");
    }

    // The engine's weights: the model's, or an older checkpoint of the same model (staleness), plus noise.
    result.weightSource = o.modelDirectory;
    if (!o.stalenessFrom.empty()) {
        const std::string staleConfigPath = (fs::path(o.stalenessFrom) / "config.json").string();
        if (model::loadConfig(staleConfigPath) != config) {
            throw InputError(staleConfigPath, "",
                "the older weights must be a checkpoint of the same model as " + o.modelDirectory
                    + " (config.json differs from " + configPath + ")");
        }
        result.weightSource = o.stalenessFrom;
    }
    EngineConfiguration configuration;
    result.precisionName = o.precision.empty() ? "bf16" : o.precision;
    std::optional<quant::RecipePlan> plan;
    if (!o.recipe.empty()) {
        configuration.recipe = quant::loadRecipe(o.recipe);
        plan = quant::resolveRecipe(*configuration.recipe, config);
        result.precisionName = "recipe " + o.recipe;
    }
    configuration.noise = o.noise;
    configuration.noiseSeed = o.noiseSeed;
    configuration.noiseModules = o.noiseModules;
    const bool fp32 = o.precision == "fp32";

    // The KV cache the user sized is checked on its own first (an error naming it), then the whole job.
    model::checkRequestFits(o.kvMemorySource, o.kvCacheBytes);
    const engine::StoredWeights stored = engine::storedWeights(result.weightSource);
    const quant::RecipePlan* planPointer = plan ? &*plan : nullptr;
    const bool noisy = o.noise > 0.0;
    model::checkJobFits("generate",
        {{"weights of " + result.weightSource + " as stored", stored.bytes, /*stagedOnHost=*/true},
            // The FP32 engine multiplies the weights as given; the others make their BF16 view of what they are
            // not given in bf16 (noisy copies come in the dtype the engine reads each tensor in).
            {"engine weights",
                fp32 ? 0
                     : engine::engineExtraBytes(config, planPointer, stored.dtype, o.device, engine::EngineKernels::Auto,
                         noisy ? engine::noisyTensorDtypes(config, planPointer, o.noiseModules)
                               : std::map<std::string, at::ScalarType>())},
            {"FP8 weight dequantized for one product",
                fp32 ? 0 : engine::engineProductTemporaryBytes(config, planPointer, o.device)},
            // buildEngine's copies, in the dtype the engine reads each tensor in.
            {"noisy weights",
                noisy ? engine::noisyCopyBytes(config, planPointer, o.noiseModules,
                            model::scalarType(stored.dtype), /*inPlace=*/false, fp32 && !plan)
                      : 0},
            {"KV cache", o.kvCacheBytes}},
        o.device);
    progress.checkCancelled();
    // As stored (a BF16 checkpoint stays BF16): the engine keeps no float32 copy.
    const model::TransformerWeights weights
        = onDevice(model::loadWeights(result.weightSource, config, model::LoadPrecision::Stored), o.device);
    // After the memory checks and the weights (whose problems are the model's, reported first), as `generate` always
    // did: each prompt plus the new tokens must fit the model's positions.
    requirePromptsFit(result.requests, config, o.sampling.maxNewTokens);
    engine::EngineOptions engineOptions;
    engineOptions.precision = fp32 ? engine::EnginePrecision::Fp32 : engine::EnginePrecision::Bf16Reference;
    engineOptions.kvCacheBytes = o.kvCacheBytes;
    engineOptions.kvBlockSize = o.blockSize;
    engineOptions.maxBatchSize = o.maxBatch;
    // FP8 KV scales fitted on the prompts being generated (the probe set of this run).
    const auto engine = buildEngine(
        config, weights, configuration, result.requests.prompts(), engineOptions, KvScalePolicy::FittedPerMeasurement);
    engine->setTokenizer(&tokenizer);

    engine::SamplingOptions sampling = o.sampling;
    if (!sampling.ignoreEos) {
        stopAtTokenizerEos(sampling, config, tokenizer);
    }
    result.results = engine->generate(result.requests.requests, sampling, &progress);
    result.kvCapacityTokens = engine->allocator().capacityTokens();
    return result;
}

GenerateFileResult generateToFile(const GenerateOptions& options, const std::string& out, Progress& progress)
{
    requireOutputNotInput(out, {{options.prompts, "prompt set"}, {options.recipe, "recipe"}},
        {options.modelDirectory, options.stalenessFrom}); // issue 46: before any work
    const auto started = std::chrono::steady_clock::now();
    GenerateFileResult r;
    r.modelDirectory = options.modelDirectory;
    r.out = out;
    r.noise = options.noise;
    r.kvCacheBytes = options.kvCacheBytes;
    r.generated = generate(options, progress);
    const std::vector<engine::GenerationResult>& results = r.generated.results;
    const std::vector<engine::GenerationRequest>& requests = r.generated.requests.requests;
    std::string text;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const engine::GenerationResult& result = results[i];
        nlohmann::json line = {{"id", r.generated.requests.ids[i]}, {"prompt_tokens", requests[i].prompt.size()},
            {"tokens", result.tokens}, {"text", result.text}, {"logprobs", result.logProbs},
            {"finish_reason", engine::toString(result.finishReason)}};
        if (options.sampling.topLogProbs > 0) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& position : result.topLogProbs) {
                nlohmann::json entries = nlohmann::json::array();
                for (const engine::TokenLogProb& entry : position) {
                    entries.push_back({{"id", entry.id}, {"logprob", entry.logProb}});
                }
                top.push_back(entries);
            }
            line["top_logprobs"] = top;
        }
        if (result.error) {
            line["error"] = result.error->what();
            ++r.rejected;
        }
        text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
        ++r.finishReasons[engine::toString(result.finishReason)];
        r.generatedTokens += static_cast<std::int64_t>(result.tokens.size());
        r.waves = std::max(r.waves, result.wave + 1);
    }
    progress.checkCancelled();
    writeFileAtomically(out, text);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return r;
}

}  // namespace mismatch::analysis

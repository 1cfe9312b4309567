#include "core/analysis/generate.h"

#include "core/common/error.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/model/config.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

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
    model::checkJobFits("generate",
        {{"weights of " + result.weightSource + " as stored", stored.bytes},
            {"engine weights", engine::engineExtraBytes(config, plan ? &*plan : nullptr, stored.dtype)},
            {"noisy weights", o.noise > 0.0 ? stored.bytes : 0}, {"KV cache", o.kvCacheBytes}});
    progress.checkCancelled();
    // As stored (a BF16 checkpoint stays BF16): the engine keeps no float32 copy.
    const model::TransformerWeights weights
        = model::loadWeights(result.weightSource, config, model::LoadPrecision::Stored);
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

}  // namespace mismatch::analysis

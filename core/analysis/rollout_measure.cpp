#include "core/analysis/rollout_measure.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/common/input_limits.h"
#include "core/engine/token_details.h"
#include "core/common/spill_file.h"
#include "core/model/model_files.h"
#include "core/common/random.h"
#include "core/engine/engine_model.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/model/memory_check.h"

#include <ATen/core/grad_mode.h>
#include "core/quant/formats.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <stdexcept>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

std::string configPath(const std::string& directory)
{
    return (fs::path(directory) / "config.json").string();
}

// Linear-interpolated quantile of sorted data (type 7, as metrics/bootstrap.cpp and numpy's default).
double quantile(const std::vector<double>& sorted, double q)
{
    const double position = q * static_cast<double>(sorted.size() - 1);
    const auto lower = static_cast<std::size_t>(std::floor(position));
    const std::size_t upper = std::min(lower + 1, sorted.size() - 1);
    const double fraction = position - static_cast<double>(lower);
    return sorted[lower] + fraction * (sorted[upper] - sorted[lower]);
}

} // namespace

std::string toString(KvScalePolicy policy)
{
    return policy == KvScalePolicy::FrozenFirstBatch ? "frozen_first_batch" : "fitted_per_measurement";
}

ModelDirectory loadModelDirectory(const std::string& directory, const at::Device& device)
{
    if (pathKind(directory) != PathKind::Directory) {
        throw InputError(directory, "", "is not a model directory (expected config.json, weights, tokenizer.json)");
    }
    ModelDirectory loaded;
    loaded.directory = directory;
    loaded.config = model::loadConfig(configPath(directory));
    // The tokenizer first: it is checked against config.json, and it is cheaper than the weights.
    loaded.tokenizer = std::make_shared<model::Tokenizer>(model::loadModelTokenizer(directory, loaded.config));
    loaded.weights = onDevice(model::loadWeights(directory, loaded.config, model::LoadPrecision::Stored), device);
    return loaded;
}

void requirePromptsFit(const PromptRequests& requests, const model::ModelConfig& config, std::int64_t maxNewTokens)
{
    for (std::size_t i = 0; i < requests.requests.size(); ++i) {
        model::requireFitsContext(config, static_cast<std::int64_t>(requests.requests[i].prompt.size()), maxNewTokens,
            requests.path, "prompt '" + requests.ids[i] + "'");
    }
}

model::TransformerWeights loadCheckpointWeights(
    const std::string& directory, const model::ModelConfig& reference, const at::Device& device)
{
    const model::ModelConfig config = model::loadConfig(configPath(directory));
    if (config != reference) {
        throw InputError(configPath(directory), "",
            "is not a checkpoint of the same model: its architecture (config.json) differs from the student's");
    }
    return onDevice(model::loadWeights(directory, config, model::LoadPrecision::Stored), device);
}

std::vector<std::vector<std::int64_t>> PromptRequests::prompts() const
{
    std::vector<std::vector<std::int64_t>> result;
    result.reserve(requests.size());
    for (const auto& request : requests) {
        result.push_back(request.prompt);
    }
    return result;
}

std::uint64_t promptSeed(const std::string& id)
{
    return fnv1a(id);
}

PromptRequests promptRequests(const std::string& promptSetPath, const model::Tokenizer& tokenizer, std::int64_t count)
{
    if (count < 0) {
        throw InputError(promptSetPath, "", "prompt count must be >= 0 (0: all), got " + std::to_string(count));
    }
    const io::PromptSet set = io::loadPromptSet(promptSetPath);
    PromptRequests result;
    result.path = promptSetPath;
    const std::size_t n
        = count == 0 ? set.prompts.size() : std::min(set.prompts.size(), static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < n; ++i) {
        const io::Prompt& prompt = set.prompts[i];
        engine::GenerationRequest request;
        request.prompt = tokenizer.encode(io::renderPrompt(set, prompt), /*addSpecialTokens=*/true);
        if (request.prompt.empty()) {
            throw InputError(promptSetPath, "prompt '" + prompt.id + "'", "encodes to no tokens");
        }
        request.seed = promptSeed(prompt.id);
        request.source = promptSetPath + ", prompt '" + prompt.id + "'";
        result.ids.push_back(prompt.id);
        result.requests.push_back(std::move(request));
    }
    return result;
}

void checkAnalysisMemory(const std::string& job, const std::vector<std::string>& checkpoints,
    const std::vector<const quant::RecipePlan*>& plans, const MeasureSettings& settings, std::int64_t enginesAtOnce,
    const std::vector<NoisyEngine>& noisy)
{
    if (checkpoints.empty()) {
        return;
    }
    const model::ModelConfig config = model::loadConfig(configPath(checkpoints.front()));
    std::vector<model::MemoryItem> items;
    model::DType stored = model::DType::BF16;
    std::uint64_t largest = 0;
    for (const std::string& directory : checkpoints) {
        const engine::StoredWeights weights = engine::storedWeights(directory);
        items.push_back({"weights of " + directory + " as stored", weights.bytes, /*stagedOnHost=*/true});
        if (model::byteSize(weights.dtype) > model::byteSize(stored)) {
            stored = weights.dtype;
        }
        largest = std::max(largest, weights.bytes);
    }
    if (!noisy.empty()) {
        // On the CPU the noise goes into the weights in place (measureConfiguration, engine::InPlaceWeightNoise) when
        // the spill directory has room for two copies; the tensors the engine reads in another dtype than stored
        // still get noisy copies (a BF16 engine's norms and biases in float32, the modules a recipe quantizes).
        const std::string spill = spillDirectory();
        const bool inPlace = settings.device.is_cpu() && spillFits(spill, 2 * largest);
        std::uint64_t copies = 0;
        bool largestInPlace = false; // the largest copies are those of a configuration noised partly in place
        for (const NoisyEngine& engine : noisy) {
            const bool partly = inPlace && engine.measuredInTurns;
            const std::uint64_t bytes
                = engine::noisyCopyBytes(config, engine.plan, engine.modules, model::scalarType(stored), partly);
            if (bytes > copies || (bytes == copies && partly)) {
                copies = bytes;
                largestInPlace = partly;
            }
        }
        items.push_back({largestInPlace ? "noisy weight copies (the rest noised in place, spilled to " + spill + ")"
                                        : "noisy weight copies",
            copies});
    }
    std::uint64_t engine = 0;
    std::uint64_t productTemporary = 0; // one product at a time, whichever engine makes it
    for (const quant::RecipePlan* plan : plans) {
        engine = std::max(engine, engine::engineExtraBytes(config, plan, stored, settings.device));
        productTemporary = std::max(productTemporary, engine::engineProductTemporaryBytes(config, plan, settings.device));
    }
    for (const NoisyEngine& noisyEngine : noisy) {
        // Given noisy copies in the dtype it reads each in: the BF16 view of the float32 ones (the modules a recipe
        // quantizes) it makes itself.
        engine = std::max(engine,
            engine::engineExtraBytes(config, noisyEngine.plan, stored, settings.device, engine::EngineKernels::Auto,
                engine::noisyTensorDtypes(config, noisyEngine.plan, noisyEngine.modules)));
    }
    const auto engines = static_cast<std::uint64_t>(std::max<std::int64_t>(1, enginesAtOnce));
    items.push_back({"engine weights", engines * engine});
    items.push_back({"FP8 weight dequantized for one product", productTemporary});
    // Fitting FP8 KV scales builds a BF16 engine beside the candidate's (engine::calibrateKvScales). On the CPU it
    // shares the candidate's BF16 view; on a device it holds what a BF16 engine holds there.
    const bool fp8Kv = std::any_of(plans.begin(), plans.end(), [](const quant::RecipePlan* plan) {
        return plan && std::any_of(plan->kvPerLayer.begin(), plan->kvPerLayer.end(),
                   [](const quant::KvPrecision& kv) { return kv.format == quant::KvFormat::Fp8E4m3; });
    });
    if (fp8Kv && !settings.device.is_cpu()) {
        items.push_back({"KV-scale calibration engine", engine::engineExtraBytes(config, nullptr, stored, settings.device)});
    }
    items.push_back({"KV cache", engines * settings.kvCacheBytes});
    items.push_back({"distributions and logits",
        engine::measurementBytes(config.vocabSize, settings.maxNewTokens, settings.batchSize,
            engine::MismatchOptions {}.distributionBytes)});
    model::checkJobFits(job, items, settings.device);
}

engine::SamplingOptions samplingOptions(
    const MeasureSettings& settings, const model::ModelConfig& config, const model::Tokenizer& tokenizer)
{
    engine::SamplingOptions sampling;
    sampling.temperature = settings.temperature;
    sampling.topP = settings.topP;
    sampling.topK = settings.topK;
    sampling.maxNewTokens = settings.maxNewTokens;
    sampling.seed = settings.seed;
    stopAtTokenizerEos(sampling, config, tokenizer);
    engine::validateSamplingOptions(sampling);
    return sampling;
}

void stopAtTokenizerEos(
    engine::SamplingOptions& sampling, const model::ModelConfig& config, const model::Tokenizer& tokenizer)
{
    if (config.eosTokenIds.empty() && tokenizer.eosTokenId()) {
        sampling.stopTokenIds.push_back(*tokenizer.eosTokenId());
    }
}

std::unique_ptr<engine::Engine> buildEngine(const model::ModelConfig& config, const model::TransformerWeights& weights,
    const EngineConfiguration& configuration, const std::vector<std::vector<std::int64_t>>& probePrompts,
    const MeasureSettings& settings)
{
    engine::EngineOptions options;
    options.precision = engine::EnginePrecision::Bf16Reference;
    options.kvCacheBytes = settings.kvCacheBytes;
    return buildEngine(config, weights, configuration, probePrompts, options, settings.kvScales, settings.kvFirstBatch);
}

std::unique_ptr<engine::Engine> buildEngine(const model::ModelConfig& config, const model::TransformerWeights& weights,
    const EngineConfiguration& configuration, const std::vector<std::vector<std::int64_t>>& probePrompts,
    const engine::EngineOptions& options, KvScalePolicy kvScales, std::int64_t kvFirstBatch)
{
    std::optional<quant::RecipePlan> plan;
    if (configuration.recipe) {
        plan = quant::resolveRecipe(*configuration.recipe, config);
    }
    if (configuration.noise < 0.0 || !std::isfinite(configuration.noise)) {
        throw InputError("rollout configuration", "noise", "sigma must be finite and >= 0");
    }
    model::TransformerWeights engineWeights = configuration.noise > 0.0
        ? engine::addWeightNoise(weights, configuration.noise, configuration.noiseSeed, configuration.noiseModules,
            engine::engineNoiseDtype(
                config, plan ? &*plan : nullptr, !plan && options.precision == engine::EnginePrecision::Fp32))
        : weights;
    auto result = std::make_unique<engine::Engine>(config, std::move(engineWeights), std::move(plan), options);
    if (kvScales == KvScalePolicy::FittedPerMeasurement) {
        result->model().calibrateKvScales(probePrompts);
    } else if (!probePrompts.empty()) {
        // What a training run does at its first step: the engine's own prefill of the first batch measures the
        // FP8 scales (amax over its real tokens), which then stay frozen. A forward through the quantizing cache
        // is that prefill without generating.
        if (kvFirstBatch < 1) {
            throw InputError("measurement protocol", "kv_first_batch",
                "frozen_first_batch needs the number of prompts of the first batch (>= 1)");
        }
        const auto first = static_cast<std::ptrdiff_t>(
            std::min<std::size_t>(probePrompts.size(), static_cast<std::size_t>(kvFirstBatch)));
        const auto [ids, mask] = engine::leftPaddedBatch({probePrompts.begin(), probePrompts.begin() + first});
        const at::NoGradGuard noGrad;
        // Only the cache matters here: the lm_head runs at the last position alone (a large vocabulary's logits
        // at every prompt position would cost more than the prefill).
        result->model().forwardQuantized(ids, mask, /*logProbs=*/false, /*lastPositions=*/1);
    }
    return result;
}

std::unique_ptr<engine::InPlaceWeightNoise> inPlaceNoise(
    const model::ModelConfig& config, const model::TransformerWeights& weights, const EngineConfiguration& configuration)
{
    if (!(configuration.noise > 0.0)) {
        return nullptr;
    }
    std::optional<quant::RecipePlan> plan;
    if (configuration.recipe) {
        plan = quant::resolveRecipe(*configuration.recipe, config);
    }
    return engine::InPlaceWeightNoise::create(weights, configuration.noise, configuration.noiseSeed,
        configuration.noiseModules, engine::engineNoiseDtype(config, plan ? &*plan : nullptr), spillDirectory());
}

engine::MismatchMeasurement measureConfiguration(const model::Transformer& trainer,
    const model::TransformerWeights& engineWeights, const EngineConfiguration& configuration,
    const PromptRequests& requests, const engine::SamplingOptions& sampling, const MeasureSettings& settings,
    Progress* progress, std::size_t keepGenerations, std::vector<store::StoredGeneration>* keptGenerations)
{
    if (progress) {
        progress->checkCancelled();
    }
    // Weight noise goes into the weights' own storage where it can (engine::InPlaceWeightNoise: a BF16 engine on the
    // CPU over weights stored in bf16, with room to spill them): the engine generates on the noisy values and the
    // trainer scores on the clean ones, in turns, instead of holding a noisy copy beside the clean weights.
    std::unique_ptr<engine::InPlaceWeightNoise> inPlace = inPlaceNoise(trainer.config(), engineWeights, configuration);
    EngineConfiguration built = configuration;
    if (inPlace) {
        inPlace->noisy(); // before the engine is built: it fits its FP8 KV scales on the noisy weights
        built.noise = 0.0;
    }
    auto engine = buildEngine(
        trainer.config(), inPlace ? inPlace->engineWeights() : engineWeights, built, requests.prompts(), settings);
    engine::MismatchOptions options;
    if (inPlace) {
        options.beforeGenerating = [&inPlace] { inPlace->noisy(); };
        options.beforeScoring = [&inPlace] { inPlace->clean(); };
    }
    options.batchSize = settings.batchSize;
    options.sampling = sampling;
    options.keepTokenValues = true; // for the sampled-token estimators beside the full KL (24 bytes a token)
    if (keptGenerations && keepGenerations > 0) {
        keptGenerations->clear();
        options.onPrompt = [&](std::size_t index, const at::Tensor& logMu, const at::Tensor& logPi,
                               const engine::GenerationResult& generation, const metrics::TokenMismatch& mismatch) {
            if (index >= keepGenerations) {
                return;
            }
            store::StoredGeneration kept;
            kept.index = static_cast<std::int64_t>(index);
            kept.promptId = index < requests.ids.size() ? requests.ids[index] : std::to_string(index);
            kept.promptTokens = requests.requests[index].prompt;
            kept.tokens = generation.tokens;
            const at::Tensor kl = mismatch.kl.to(at::kCPU).to(at::kDouble).contiguous();
            kept.kl.assign(kl.data_ptr<double>(), kl.data_ptr<double>() + kl.numel());
            kept.details = engine::tokenDetails(logMu.to(at::kCPU), logPi.to(at::kCPU), generation.tokens);
            keptGenerations->push_back(std::move(kept));
        };
    }
    engine::MismatchMeasurement measurement
        = engine::measureMismatch(trainer, *engine, requests.requests, options, progress);
    if (inPlace) {
        inPlace->clean(); // here, not in the destructor, so that a failure to restore is reported
    }
    return measurement;
}

metrics::Interval klInterval(const engine::MismatchMeasurement& measurement, const metrics::BootstrapOptions& options)
{
    std::vector<double> tokens(measurement.promptTokens.begin(), measurement.promptTokens.end());
    return metrics::bootstrapRatio(measurement.promptKlSums, tokens, options);
}

metrics::Interval pairedRatioDifference(const std::vector<double>& aSums, const std::vector<std::int64_t>& aTokens,
    const std::vector<double>& bSums, const std::vector<std::int64_t>& bTokens,
    const metrics::BootstrapOptions& options)
{
    const std::size_t n = aSums.size();
    if (n == 0 || aTokens.size() != n || bSums.size() != n || bTokens.size() != n) {
        throw std::invalid_argument("pairedRatioDifference: empty or unpaired samples");
    }
    if (options.resamples < 1 || !(options.confidence > 0.0 && options.confidence < 1.0)) {
        throw std::invalid_argument("bootstrap needs resamples >= 1 and confidence in (0, 1)");
    }
    auto ratio = [](double sum, double tokens) { return tokens > 0.0 ? sum / tokens : 0.0; };
    double aSum = 0.0, aTok = 0.0, bSum = 0.0, bTok = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        aSum += aSums[i];
        aTok += static_cast<double>(aTokens[i]);
        bSum += bSums[i];
        bTok += static_cast<double>(bTokens[i]);
    }
    SplitMix64 rng(options.seed);
    std::vector<double> statistics(static_cast<std::size_t>(options.resamples));
    for (double& statistic : statistics) {
        double as = 0.0, at = 0.0, bs = 0.0, bt = 0.0;
        for (std::size_t draw = 0; draw < n; ++draw) {
            const auto i = static_cast<std::size_t>(rng.below(n));
            as += aSums[i];
            at += static_cast<double>(aTokens[i]);
            bs += bSums[i];
            bt += static_cast<double>(bTokens[i]);
        }
        statistic = ratio(as, at) - ratio(bs, bt);
    }
    std::sort(statistics.begin(), statistics.end());
    const double alpha = 1.0 - options.confidence;
    metrics::Interval interval;
    interval.estimate = ratio(aSum, aTok) - ratio(bSum, bTok);
    interval.low = quantile(statistics, alpha / 2.0);
    interval.high = quantile(statistics, 1.0 - alpha / 2.0);
    interval.confidence = options.confidence;
    interval.resamples = options.resamples;
    return interval;
}

quant::WeightPrecision parseWeightPrecision(const std::string& text, const std::string& source)
{
    const auto colon = text.find(':');
    const std::string formatName = text.substr(0, colon);
    const auto format = quant::parseWeightFormat(formatName);
    if (!format) {
        std::string choices;
        for (const auto& choice : quant::weightFormatChoices()) {
            choices += (choices.empty() ? "" : ", ") + choice;
        }
        throw InputError(source, "", "unknown weight format '" + formatName + "' (expected one of " + choices + ")");
    }
    quant::WeightPrecision precision;
    precision.format = *format;
    precision.granularity = quant::defaultGranularity(*format);
    if (colon != std::string::npos) {
        const std::string granularityName = text.substr(colon + 1);
        const auto granularity = quant::parseGranularity(granularityName);
        if (!granularity || !quant::isSupported(*format, *granularity)) {
            std::string choices;
            for (const auto g : quant::allowedGranularities(*format)) {
                choices += (choices.empty() ? "" : ", ") + quant::toString(g);
            }
            throw InputError(source, "",
                "granularity '" + granularityName + "' does not apply to " + formatName
                    + (choices.empty() ? std::string(" (it has no scales)") : " (expected " + choices + ")"));
        }
        precision.granularity = *granularity;
    }
    return precision;
}

} // namespace mismatch::analysis

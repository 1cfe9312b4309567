#pragma once
// What the engine-only analyses (sensitivity, recipe builder, admission check, prefix shift) share: loading a
// model directory and a prompt set into seeded requests, building a rollout engine for a configuration (recipe,
// weight noise, older weights), measuring its mismatch against the FP32 trainer, bootstrap intervals over
// prompts.
#include "core/common/progress.h"
#include "core/engine/engine.h"
#include "core/engine/measure.h"
#include "core/engine/mismatch_sources.h"
#include "core/io/prompt_set.h"
#include "core/metrics/bootstrap.h"
#include "core/model/config.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/store/analysis_store.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

// A Hugging Face style model directory: config.json, the weights in their stored dtype (a BF16 checkpoint stays
// BF16: the FP32 trainer multiplies its exact values and the engines share them, model::LoadPrecision::Stored)
// and tokenizer.json. Nothing here trains, so no FP32 master copy is made.
struct ModelDirectory {
    std::string directory;
    model::ModelConfig config;
    model::TransformerWeights weights;
    std::shared_ptr<model::Tokenizer> tokenizer;
};
// The weights are placed on `device` (common/device.h): the engines and the trainer built on them run there.
ModelDirectory loadModelDirectory(const std::string& directory, const at::Device& device = at::Device(at::kCPU));
// Same config and tokenizer, other weights (another checkpoint of the same model): InputError naming the
// config.json when the architecture differs from `reference`.
model::TransformerWeights loadCheckpointWeights(const std::string& directory, const model::ModelConfig& reference,
    const at::Device& device = at::Device(at::kCPU));

// A prompt set as engine requests: each prompt rendered through the set's template and encoded with the special
// tokens; the request seed is FNV-1a of the prompt id, so a prompt gets the same sample in every configuration
// and whatever else is in the set (the pairing of every analysis). `count` > 0 keeps the first `count` prompts.
struct PromptRequests {
    std::string path;
    std::vector<std::string> ids;
    std::vector<engine::GenerationRequest> requests;
    std::vector<std::vector<std::int64_t>> prompts() const;
};
PromptRequests promptRequests(const std::string& promptSetPath, const model::Tokenizer& tokenizer, std::int64_t count);
// InputError(prompt set, "prompt 'ID'", ...) for the first prompt whose tokens plus maxNewTokens pass the model's
// max_position_embeddings (model::requireFitsContext).
void requirePromptsFit(const PromptRequests& requests, const model::ModelConfig& config, std::int64_t maxNewTokens);
std::uint64_t promptSeed(const std::string& id);

// How FP8 KV-cache scales are fitted for a measurement (protocol.h): measured by the candidate engine on the
// prefill of the first `kvFirstBatch` prompts and frozen (what a training run does), or fitted on every prompt of
// the measurement with a BF16 forward.
enum class KvScalePolicy { FrozenFirstBatch, FittedPerMeasurement };
std::string toString(KvScalePolicy policy); // "frozen_first_batch", "fitted_per_measurement"

// Sampling and measurement settings shared by every configuration of one analysis.
struct MeasureSettings {
    double temperature = 1.0;
    double topP = 1.0;
    std::int64_t topK = 0;
    std::int64_t maxNewTokens = 64;
    std::uint64_t seed = 0; // sampling seed (combined with each prompt's seed)
    std::int64_t batchSize = 16; // prompts generated and scored per chunk
    std::uint64_t kvCacheBytes = 256ull * 1024 * 1024;
    metrics::BootstrapOptions bootstrap; // intervals over prompts
    KvScalePolicy kvScales = KvScalePolicy::FittedPerMeasurement;
    std::int64_t kvFirstBatch = 32; // FrozenFirstBatch: prompts of the first batch (>= 1)
    // Where the engines and the trainer compute (common/device.h); not part of the measurement protocol, but
    // recorded with each analysis's settings.
    at::Device device = at::Device(at::kCPU);
};
// A configuration with weight noise, for the memory check: its engine's recipe plan (nullptr: the BF16 engine), the
// modules its noise reaches, and whether it is measured by measureConfiguration (which noises in place where it
// can) rather than on buildEngine's copy alone.
struct NoisyEngine {
    const quant::RecipePlan* plan = nullptr;
    std::string modules = "*";
    bool measuredInTurns = true;
};

// The memory check of an engine-only analysis, made before anything is loaded (model::checkJobFits, parts as
// engine/memory_plan.h): the weights of every directory in `checkpoints` as stored, `enginesAtOnce` times the
// largest extra engine weights among `plans` (nullptr: the BF16 engine) and a KV cache of settings.kvCacheBytes
// each, and one measurement's distributions and logits (settings.batchSize prompts of settings.maxNewTokens); with
// `noisy` configurations, the largest of their noisy copies (engine::noisyCopyBytes: on the CPU with room to spill,
// only what is not noised in place). ResourceError naming `job`, every part and what is available.
void checkAnalysisMemory(const std::string& job, const std::vector<std::string>& checkpoints,
    const std::vector<const quant::RecipePlan*>& plans, const MeasureSettings& settings, std::int64_t enginesAtOnce = 1,
    const std::vector<NoisyEngine>& noisy = {});

// The engine's sampling options: the settings above, stopping at the model's EOS ids (or the tokenizer's).
engine::SamplingOptions samplingOptions(
    const MeasureSettings& settings, const model::ModelConfig& config, const model::Tokenizer& tokenizer);
// Adds the tokenizer's EOS id to sampling.stopTokenIds when config.json names none (the engine stops at those).
void stopAtTokenizerEos(
    engine::SamplingOptions& sampling, const model::ModelConfig& config, const model::Tokenizer& tokenizer);

// A rollout configuration's engine side (spec "Rollout configuration" without the sampling settings).
struct EngineConfiguration {
    std::optional<quant::Recipe> recipe; // none: the plain BF16 engine (the BF16 unit's engine)
    double noise = 0.0; // sigma relative to each tensor's RMS (engine::addWeightNoise)
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
};

// An engine for `configuration` on `weights` (noise added here), FP8 KV scales fitted on `probePrompts` as
// settings.kvScales says (FrozenFirstBatch: the engine's own prefill of the first kvFirstBatch of them).
std::unique_ptr<engine::Engine> buildEngine(const model::ModelConfig& config, const model::TransformerWeights& weights,
    const EngineConfiguration& configuration, const std::vector<std::vector<std::int64_t>>& probePrompts,
    const MeasureSettings& settings);
// The same with the engine's options given (precision without a recipe, KV cache, blocks, batch), as
// `mismatch generate` builds it; the analyses' engine is the BF16 one with settings.kvCacheBytes.
std::unique_ptr<engine::Engine> buildEngine(const model::ModelConfig& config, const model::TransformerWeights& weights,
    const EngineConfiguration& configuration, const std::vector<std::vector<std::int64_t>>& probePrompts,
    const engine::EngineOptions& options, KvScalePolicy kvScales, std::int64_t kvFirstBatch = 32);

// The configuration's weight noise written into `weights` in place (engine::InPlaceWeightNoise, spilling to
// mismatch::spillDirectory()), or nullptr when it has no noise or the noise cannot go in place there (then
// buildEngine's noisy copy is the way). For the analyses' BF16 engine.
std::unique_ptr<engine::InPlaceWeightNoise> inPlaceNoise(
    const model::ModelConfig& config, const model::TransformerWeights& weights, const EngineConfiguration& configuration);

// measureMismatch of the configuration's engine (on `engineWeights`) against `trainer` on the requests, with
// `sampling` (from samplingOptions()); the measurement keeps its per-token values (tokenValues) for the estimators.
// Weight noise goes in place where inPlaceNoise() can (`engineWeights` hold the noisy values while the engine
// generates and the clean ones while the trainer scores, and the clean ones again on return), else in a copy.
// With `keptGenerations`, the first `keepGenerations` prompts' generations are kept token by token (per-token KL and
// tokenDetails) for the token drill-down.
engine::MismatchMeasurement measureConfiguration(const model::Transformer& trainer,
    const model::TransformerWeights& engineWeights, const EngineConfiguration& configuration,
    const PromptRequests& requests, const engine::SamplingOptions& sampling, const MeasureSettings& settings,
    Progress* progress, std::size_t keepGenerations = 0,
    std::vector<store::StoredGeneration>* keptGenerations = nullptr);

// Bootstrap interval of a measurement's token-mean KL, prompts resampled (metrics::bootstrapRatio).
metrics::Interval klInterval(const engine::MismatchMeasurement& measurement, const metrics::BootstrapOptions& options);
// Paired percentile bootstrap of ratio(a) - ratio(b), ratio(x) = sum(x sums) / sum(x tokens), resampling the
// same prompts for both (the same draws as metrics::bootstrapRatio would make for one of them). Sizes must agree.
metrics::Interval pairedRatioDifference(const std::vector<double>& aSums, const std::vector<std::int64_t>& aTokens,
    const std::vector<double>& bSums, const std::vector<std::int64_t>& bTokens,
    const metrics::BootstrapOptions& options);

// "fp8_e4m3", "fp8_e4m3:block128", "int8", "int4:group128", "bf16": a weight format with an optional granularity
// (the format's default when absent). InputError naming `source` otherwise.
quant::WeightPrecision parseWeightPrecision(const std::string& text, const std::string& source);

} // namespace mismatch::analysis

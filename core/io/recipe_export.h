#pragma once
// Exports a precision recipe, resolved against a model, to the configuration an outside rollout or quantization
// tool consumes, so that the recipe that passed the admission check runs unchanged in a large headless run:
//
//   vllm               JSON: vLLM's fp8 `quantization_config` (quant_method fp8, activation_scheme dynamic,
//                      weight_block_size, ignored_layers) and the engine arguments (quantization, kv_cache_dtype,
//                      kv_cache_dtype_skip_layers as strings; no calculate_kv_scales, which current vLLM removed)
//   llm-compressor     YAML: a recipe with one QuantizationModifier (targets, scheme or config_groups, ignore,
//                      kv_cache_scheme)
//   compressed-tensors JSON: the checkpoint's `quantization_config` (quant_method compressed-tensors, format,
//                      config_groups, ignore, kv_cache_scheme)
//   verl               YAML: dotted config overrides (actor_rollout_ref.rollout.quantization and vLLM engine
//                      arguments passed through actor_rollout_ref.rollout.engine_kwargs.vllm)
//   modelopt           JSON: NVIDIA ModelOpt's hf_quant_config.json (producer, quantization.quant_algo,
//                      kv_cache_quant_algo, exclude_modules)
//
// Modules the recipe leaves in BF16 are listed by their full names (ignored_layers / ignore / exclude_modules).
// Every target refuses different formats within a group vLLM fuses (q/k/v, gate/up of one layer).
// A recipe feature a target cannot express is an InputError located in the recipe that names the feature, the
// module or layer it applies to and the target (`cannot be exported --to vllm: ...`); nothing is dropped.
//
// One deliberate approximation: every FP8 engine quantizes the activations of 128x128-block FP8 weights per token
// in groups of 128 channels (DeepSeek-style 1x128), where the recipe's fp8_e4m3 activations are one scale per
// token. Block recipes export to those engines' block scheme (llm-compressor FP8_BLOCK, vLLM weight_block_size,
// verl's fp8 rollout) rather than being refused, since no engine offers block weights with per-token activations.
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mismatch::io {

enum class ExportTarget { Vllm, LlmCompressor, CompressedTensors, Verl, ModelOpt };

// "vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt".
std::string toString(ExportTarget target);
std::optional<ExportTarget> parseExportTarget(std::string_view name);
std::vector<std::string> exportTargetChoices();
// "json" or "yaml": the file format the target reads.
std::string fileExtension(ExportTarget target);

struct ExportOptions {
    ExportTarget target = ExportTarget::Vllm;
    // Weight staleness k of an asynchronous rollout (optimizer steps). 0: synchronous. Only verl takes a rollout
    // schedule, and no verl key with the meaning "weights exactly k steps old" is confirmed, so k > 0 is refused.
    std::int64_t staleness = 0;
};

// The target's file text for `recipe` resolved as `plan` (from quant::resolveRecipe on the same recipe). Throws
// InputError for a feature the target cannot express.
std::string exportRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options);

} // namespace mismatch::io

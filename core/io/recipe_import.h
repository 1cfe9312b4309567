#pragma once
// Reverse of recipe_export: builds a precision recipe from the quantization description of a checkpoint or an
// engine configuration that already runs, so that a user can measure what they run (`mismatch recipe import`):
//
//   compressed-tensors  a checkpoint's config.json (or a file holding its quantization_config, or that object
//                       alone): config_groups (targets "Linear" or module names; weights, input_activations),
//                       ignore, kv_cache_scheme; every format, mixed-precision and the microscaling ones
//                       (nvfp4-pack-quantized, mxfp4-pack-quantized, mxfp8-quantized: compressed-tensors' NVFP4,
//                       NVFP4A16, MXFP4, MXFP4A16, MXFP8, MXFP8A16 presets) included
//   ModelOpt            hf_quant_config.json ({producer, quantization: {quant_algo, kv_cache_quant_algo,
//                       exclude_modules, quantized_layers}}) or config.json's quantization_config with
//                       quant_method modelopt (ignore for exclude_modules, kv_cache_scheme for the KV cache);
//                       quant_algo in any case, as vLLM upper-cases it; NVFP4 (W4A4), W4A16_NVFP4 and MXFP8 (W8A8)
//                       with group_size 16, 16 and 32
//   vLLM                engine arguments: a JSON or YAML mapping of them (`vllm serve --config`, with dashes or
//                       underscores), or mismatch's own vllm export ({engine_args, quantization_config});
//                       quantization fp8_per_tensor | fp8_per_block | fp8_per_channel | mxfp8 | mxfp4 | fp8 (with an
//                       fp8 checkpoint's quantization_config: weight_block_size, ignored_layers; the export's
//                       checkpoint form names no quantization and is read as that checkpoint's fp8, or as its
//                       compressed-tensors quantization_config for a microscaling recipe),
//                       quantization_config.ignore, kv_cache_dtype, kv_cache_dtype_skip_layers
//   verl                a trainer config (YAML or JSON) with actor_rollout_ref.rollout (nested or dotted keys):
//                       quantization (fp8: 128x128 blocks) and engine_kwargs.vllm / engine_kwargs.sglang KV keys
//
// Each source maps to the recipe's formats as its engine runs them: FP8_PB_WO to block-FP8 weights with FP8
// activations (vLLM runs it so), fp8_per_tensor activations to the recipe's dynamic per-token FP8. What a recipe
// cannot say (static activation scales, asymmetric or other-sized groups, regex targets, ModelOpt's MXFP4, an
// attention-type KV skip such as sliding_window) is an InputError naming the file and the key path of the value.
// NVFP4 activations are read as the recipe's, whose per-tensor global scale is each token's where the checkpoint's
// is calibrated, and MX activations as written, though vLLM's kernels decide them by GPU (notes say so).
#include "core/quant/recipe.h"

#include <string>
#include <vector>

namespace mismatch::io {

struct ImportedRecipe {
    quant::Recipe recipe;
    std::string source; // "compressed-tensors", "modelopt", "vllm", "verl"
    std::vector<std::string> notes; // how something was read that is not one to one (FP8_PB_WO's activations, ...)
};

// Reads `path` (a configuration file, within the configuration-file size limit) and builds the recipe; `name` is
// the recipe's name (empty: the file's stem). Throws InputError naming the file and the place.
ImportedRecipe importRecipe(const std::string& path, const std::string& name = "");
// The same from text; `fileName` is used in messages and decides nothing else (JSON or YAML by content).
ImportedRecipe importRecipeText(const std::string& text, const std::string& fileName, const std::string& name = "");

} // namespace mismatch::io

#pragma once
// The emulated rollout engine's model: the reference transformer with the engine's rounding at every module
// boundary, computed in float32 on the CPU (or wherever the weights live).
//
// Per linear module (Transformer::linear seam), as a real engine's GEMM does it:
//   x_q = activations rounded to the module's activation format (bf16, or fp8_e4m3 with one dynamic scale
//         per token: scale = amax(|x_token|) / 448)
//   W_q = the weight fake-quantized to the module's weight format (bf16 rounding, fp16, fp8 with its
//         granularity, int8, int4), computed ONCE per weight sync, not per forward
//   y   = x_q W_q^T + bf16(b)      float32 products and sums (the FP32 accumulator of a real GEMM)
//   out = bf16(y)                  every module writes BF16 activations, the lm_head logits included
// The embedding lookup returns rows of the table rounded to the embedding's weight format. Norms, RoPE,
// softmax and the residual sums stay float32 (the reference's own arithmetic). Keys and values are rounded
// to each layer's KV-cache format when they enter the cache (KvQuantizer, used by the paged cache), so a
// forward without a quantizing cache leaves them unrounded: use forwardQuantized() for a full forward with
// the engine's KV rounding.
//
// Precision modes:
//   Fp32           no rounding anywhere: the engine computes exactly what the FP32 trainer computes
//   Bf16Reference  every module, the embedding and the KV cache in bf16: "the BF16 engine" (the BF16 unit)
//   Recipe         the formats of a resolved precision recipe (quant::RecipePlan)
#include "core/model/transformer.h"
#include "core/quant/recipe_plan.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::engine {

enum class EnginePrecision { Fp32, Bf16Reference, Recipe };
// "fp32", "bf16", "recipe".
std::string toString(EnginePrecision precision);

struct EngineOptions {
    // Ignored when a recipe plan is given (the plan means Recipe). Recipe without a plan is a programmer error.
    EnginePrecision precision = EnginePrecision::Bf16Reference;
    std::int64_t kvBlockSize = 16; // tokens per KV-cache block
    std::uint64_t kvCacheBytes = 256ull * 1024 * 1024; // memory of the paged KV cache, scales included
    std::int64_t maxBatchSize = 0; // sequences per wave; 0: as many as the cache holds
};

// FP8 KV-cache scales of every layer: keys[layer] and values[layer] are float32 [1] (per tensor) or
// [kvHeads] (per head); undefined for a BF16 layer or one not measured yet.
struct KvScaleTable {
    std::vector<at::Tensor> keys;
    std::vector<at::Tensor> values;
};

// Rounds keys and values to each layer's KV format and owns the FP8 scales. Scales are either calibrated
// (setScales) or measured from the first prefill that reaches a layer without scales (amax over the real
// tokens of that prefill, scale = amax / 448) and then frozen until cleared.
class KvQuantizer {
public:
    KvQuantizer() = default;
    // `round` false: keys and values are stored exactly (the FP32 engine).
    KvQuantizer(std::vector<quant::KvPrecision> perLayer, std::int64_t kvHeads, bool round);

    std::int64_t numLayers() const { return static_cast<std::int64_t>(perLayer_.size()); }
    bool rounds() const { return round_; }
    const quant::KvPrecision& precision(std::int64_t layer) const;
    bool isFp8(std::int64_t layer) const;
    // Number of float32 scales layer `layer` keeps for K and V together: 0 (bf16/fp32), 2 (per tensor) or
    // 2 * kvHeads (per head).
    std::int64_t scaleCount(std::int64_t layer) const;
    // Keys and values [B, kvHeads, T, headDim] as the cache stores them (float32). `real` [B, T] bool marks
    // the real (non-padding) tokens: only they enter a scale measured here.
    std::pair<at::Tensor, at::Tensor> quantize(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& real);

    const KvScaleTable& scales() const { return scales_; }
    // Installs calibrated scales (shapes checked: InputError naming "kv scales" and the layer).
    void setScales(const KvScaleTable& scales);
    // Forgets the scales of the listed layers (they are measured again at the next prefill or calibration).
    void clearScales(const std::vector<std::int64_t>& layers);
    bool hasScales(std::int64_t layer) const;

private:
    std::vector<quant::KvPrecision> perLayer_;
    std::int64_t kvHeads_ = 0;
    bool round_ = true;
    KvScaleTable scales_;
};

class EngineModel : public model::Transformer {
public:
    // A plan means EnginePrecision::Recipe; without one, options.precision chooses Fp32 or Bf16Reference.
    // The plan must have been resolved for `config` (resolveRecipe).
    EngineModel(model::ModelConfig config, model::TransformerWeights weights,
        std::optional<quant::RecipePlan> plan = std::nullopt, EngineOptions options = {});

    EnginePrecision precision() const { return precision_; }
    const EngineOptions& options() const { return options_; }
    const std::optional<quant::RecipePlan>& plan() const { return plan_; }
    // Each layer's KV format as the engine stores it (bf16 for Bf16Reference; Fp32 reports bf16 but does not
    // round, see KvQuantizer::rounds).
    const std::vector<quant::KvPrecision>& kvPrecisions() const { return kvPrecisions_; }

    // A weight sync: new weights, re-quantized once. FP8 KV scales of layers whose recipe says every_sync are
    // re-measured: on the calibration prompts when calibrateKvScales was called, else at the next prefill.
    // Use this, not Transformer::setWeights (which does not re-quantize; the engine then falls back to
    // quantizing per call).
    void syncWeights(model::TransformerWeights weights);
    std::int64_t syncCount() const { return syncCount_; }

    // Measures FP8 KV scales on `probePrompts` (calibrateKvScales below), installs them and remembers the
    // prompts for every_sync re-calibration. Does nothing for an engine without FP8 KV layers.
    void calibrateKvScales(std::vector<std::vector<std::int64_t>> probePrompts);

    KvQuantizer& kvQuantizer() { return kvQuantizer_; }
    const KvQuantizer& kvQuantizer() const { return kvQuantizer_; }

    // Full forward (no reuse) with keys and values rounded as the engine's cache rounds them: what cached
    // decoding computes, position for position. ids and attentionMask as Transformer::forward; float32 out.
    at::Tensor forwardQuantized(const at::Tensor& ids, const at::Tensor& attentionMask, bool logProbs = false);

    // The float32 weight the engine multiplies with for `module` (a moduleNames() name such as "lm_head" or
    // "embed_tokens"); for Fp32 the stored weight itself.
    at::Tensor engineWeight(const std::string& module) const;

protected:
    at::Tensor linear(const std::string& module, const at::Tensor& x, const at::Tensor& weight,
        const at::Tensor& bias) const override;
    at::Tensor embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const override;

private:
    struct ModuleState {
        at::Tensor sourceWeight; // the stored tensor it was computed from (staleness check)
        at::Tensor sourceBias;
        at::Tensor weight; // float32, fake-quantized
        at::Tensor bias; // float32, bf16-rounded; undefined when absent
        quant::WeightPrecision weights;
        quant::ActivationPrecision activations;
        // CUDA builds, fp8_e4m3 weights on a CUDA device: the e4m3 codes and float32 scale grid of `weight`
        // (bit-identical to it once dequantized), the operands of the cuBLASLt FP8 GEMM. Undefined otherwise.
        at::Tensor fp8Codes;
        at::Tensor fp8Scales;
    };
    void prepareModules();
    ModuleState moduleState(const std::string& module, const at::Tensor& weight, const at::Tensor& bias) const;
    quant::ModulePrecision modulePrecision(const std::string& module) const;

    EnginePrecision precision_;
    EngineOptions options_;
    std::optional<quant::RecipePlan> plan_;
    std::vector<quant::KvPrecision> kvPrecisions_;
    std::map<std::string, ModuleState> modules_; // by Transformer module name ("embed_tokens", "lm_head", ...)
    KvQuantizer kvQuantizer_;
    std::vector<std::vector<std::int64_t>> calibrationPrompts_;
    std::int64_t syncCount_ = 0;
};

// FP8 KV scales from a BF16 run over probe prompts: the BF16 reference engine on `model`'s weights runs each
// prompt (batched, left padded); per layer the amax of K and of V over every real token (per KV head for
// per_head layers) gives scale = amax / 448 (quant::scaleFromAmax). BF16 layers get undefined entries.
// InputError for an empty prompt set, an empty prompt or an id outside the vocabulary.
KvScaleTable calibrateKvScales(
    const EngineModel& model, const std::vector<std::vector<std::int64_t>>& probePrompts, std::int64_t batchSize = 16);

// How many linear() calls, process-wide, ran as a native FP8 GEMM on CUDA (cuda::fp8Gemm) instead of the emulation:
// fp8_e4m3 weights and activations with tensors on a CUDA device, in a build with MISMATCH_HAVE_CUDA.
std::int64_t nativeFp8LinearCalls();

// bf16 rounding (nearest even) of a float32 tensor, as a cast to bfloat16 and back: the engine's fast path,
// bit-identical to quant::roundToBFloat16 (tested).
at::Tensor roundBf16(const at::Tensor& values);

// [B, T] (left padded) int64 ids and mask for a batch of token sequences; pad id 0.
std::pair<at::Tensor, at::Tensor> leftPaddedBatch(const std::vector<std::vector<std::int64_t>>& sequences);
// InputError(source, "<what>[i]", ...) for an empty sequence or an id outside [0, vocabSize).
void validateTokenSequences(const std::vector<std::vector<std::int64_t>>& sequences, std::int64_t vocabSize,
    const std::string& source, const std::string& what, bool allowEmpty = false);

} // namespace mismatch::engine

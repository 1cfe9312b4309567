#pragma once
// The emulated rollout engine's model: the reference transformer with the engine's rounding at every module
// boundary, computed in float32 on the CPU (or wherever the weights live).
//
// Per linear module (Transformer::linear seam), as a real engine's GEMM does it:
//   x_q = activations rounded to the module's activation format (bf16, fp8_e4m3 with one dynamic scale
//         per token: scale = amax(|x_token|) / 448, or mxfp8 / mxfp4 / nvfp4 with dynamic block scales along
//         each token: quant/microscaling.h)
//   W_q = the weight fake-quantized to the module's weight format (bf16 rounding, fp16, fp8 with its
//         granularity, int8, int4, mxfp8, mxfp4, nvfp4), computed ONCE per weight sync, not per forward, and kept
//         in the format's own bytes (quant::QuantizedWeight: bf16 values, or codes and scales), not as a float32
//         copy. The microscaling formats run as block FP8 does: the product of the exact dequantized operands in
//         float32 (Hopper-class hardware has no FP4 tensor cores; a native FP4 GEMM multiplies the same exact values)
//   y   = x_q W_q^T + bf16(b)      exact products, float32 sums (the FP32 accumulator of a real GEMM)
//   out = bf16(y)                  every module writes BF16 activations, the lm_head logits included
// The order of the float32 sums is the BLAS library's, as in any GEMM: it is not part of the definition (it
// differs between CPUs, and between a prefill's product and a decode step's). How y is computed:
//   Float32 kernels   W_q widened to float32 a block of rows at a time (transformer_linear.h), float32 GEMM. The
//                     widened rows are bit-identical to quant::fakeQuantize's, so this is the float32 product of
//                     exactly x_q and W_q.
//   BFloat16 kernels  modules with bf16 weights and bf16 activations go through LibTorch's BF16 GEMM (oneDNN):
//                     x_q and W_q are exactly bf16 values, their products exact in float32 and summed in float32,
//                     and the kernel writes bf16(y). Only the sum's order and oneDNN's handling of subnormals
//                     (flushed) differ from the Float32 kernels, so an output differs from theirs by at most one
//                     bf16 ulp when the float32 sums fall on either side of a rounding boundary (tested against
//                     the Float32 kernels with a tolerance in BF16 ulps and BF16 units). FP8 e4m3 weights of
//                     over 128 Ki elements (not model::widenedWhole) on a CPU with AVX512-BF16 go through
//                     quant::fp8Bf16Product: the codes and the activations' exact bf16 values (fp8 activation
//                     code values with their per-token scales, or bf16 activations) in BF16 dot products,
//                     float32 sums per scale block, then scaled: within one bf16 ulp of the Float32 kernels'
//                     output (quant/fp8_cpu_gemm.h; tested against a float64 computation of the definition).
//                     Other formats, and smaller FP8 weights, use the Float32 kernels.
//   EngineKernels::Auto picks BFloat16 where the CPU has native BF16 dot products (AVX512-BF16 or AMX), where
//   LibTorch's BF16 GEMM is faster than FP32; elsewhere (AVX2) its BF16 GEMM is a slow fallback and Float32 is
//   used. MISMATCH_ENGINE_KERNELS=float32|bfloat16 overrides the choice for a whole process.
// On a CUDA device (engineKernels) the same two ways: BFloat16 kernels multiply the modules with bf16 weights and
//   bf16 activations through cuBLAS's BF16 GEMM on bf16 weights (the given tensor itself when it is bf16: the
//   BF16 engine then holds no weight memory of its own there either), float32 accumulation, with cuBLAS told to
//   keep split-K reductions in float32 (LibTorch's allowBF16ReductionCuBLAS off, for the whole process); Float32
//   kernels keep a float32 copy of each rounded weight (4 bytes an element) and multiply in float32. Auto picks
//   BFloat16 where that setting exists in this LibTorch and bf16GemmRoundsOnce holds for the device's GEMM.
//   FP8 e4m3 weights with e4m3 activations use the native FP8 GEMM (cuda/) either way, other formats the float32
//   product of their rounded weights.
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
//
// Memory: the engine does not keep the float32 weights it was given. After quantizing (construction and every
// syncWeights) its Transformer base holds the BF16 view of them (each linear and embedding weight rounded to
// bf16, which is what the BF16 reference engine of a KV-scale calibration reads; norms and biases as given). A
// weight already stored in bf16 (a BF16 checkpoint loaded with LoadPrecision::Stored) is shared, not copied: the
// BF16 engine on such weights holds no weight memory of its own, and an FP8 engine only its codes and scales.
#include "core/model/transformer.h"
#include "core/quant/quantize.h"
#include "core/quant/recipe_plan.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::engine {

enum class EnginePrecision { Fp32, Bf16Reference, Recipe };
// "fp32", "bf16", "recipe".
std::string toString(EnginePrecision precision);

// Which GEMM computes the bf16 modules (see above).
enum class EngineKernels { Auto, Float32, BFloat16 };
// "auto", "float32", "bfloat16".
std::string toString(EngineKernels kernels);
// What Auto means here: MISMATCH_ENGINE_KERNELS when set (float32 or bfloat16; InputError otherwise), else
// BFloat16 when the CPU has native BF16 dot products, else Float32. Explicit choices are returned as they are.
// An engine whose Auto resolves to BFloat16 also requires bf16KernelsRoundOnce for its layer widths, else it uses
// Float32 kernels.
EngineKernels resolveKernels(EngineKernels kernels);

// A BF16 GEMM under test: y = x w^T for bf16 x [M, K] and w [N, K], any floating result.
using Bf16Gemm = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& w)>;
// Whether `gemm` computes what the engine defines, one rounding of a float32-accumulated sum of exact products:
// on seeded random operands (K from `inFeatures` and 64 and 4096; M = 1, 8 and 100 rows; mixed magnitudes) every
// output must lie within one bf16 ulp of the exact (float64) dot product plus the float32 summation bound
// 2 K eps32 sum |x w|. A GEMM that rounds partial sums to bf16 between K blocks misses this by several ulps.
bool bf16GemmRoundsOnce(const Bf16Gemm& gemm, const std::vector<std::int64_t>& inFeatures);
// bf16GemmRoundsOnce for LibTorch's at::linear on bf16 tensors, cached per set of widths.
bool bf16KernelsRoundOnce(const std::vector<std::int64_t>& inFeatures);
// The same for at::linear on `device` (the operands moved there, the product brought back), with and without a
// bias, cached per device and widths; false for a device this process cannot use.
bool deviceBf16KernelsRoundOnce(const at::Device& device, const std::vector<std::int64_t>& inFeatures);
// How an engine whose weights live on a CUDA device keeps a module's weight there (EngineModel::moduleState;
// engine/memory_plan.h counts it), for the module's precision and the engine's resolved kernels:
//   Fp8Codes  the e4m3 codes and float32 scales the native FP8 GEMM multiplies (fp8_e4m3 weights and activations,
//             not the embedding; builds with the cuda/ kernels)
//   Bf16      the bf16 weight (the given tensor when it is bf16) cuBLAS's BF16 GEMM multiplies (bf16 weights and
//             activations under BFloat16 kernels)
//   Float32   the float32 rounded weight, multiplied in float32 (every other module)
enum class DeviceWeightLayout { Fp8Codes, Bf16, Float32 };
DeviceWeightLayout deviceWeightLayout(
    const std::string& module, const quant::ModulePrecision& precision, EngineKernels kernels);
// Whether cuBLASLt's FP8 GEMM (cuda::fp8Gemm's tensor-core paths) takes a module kept as Fp8Codes: per-tensor or
// per-channel weight scales (not block-128) and in and out features multiples of 16. Otherwise the engine
// multiplies the float32 weight dequantized from the codes at each call (EngineModel::linear; the memory plan counts
// that temporary: engineProductTemporaryBytes).
bool fp8TensorCoresTake(const quant::WeightPrecision& weights, std::int64_t outFeatures, std::int64_t inFeatures);
// The kernels an engine of `config` whose weights live on `device` uses for `requested`: on the CPU
// resolveKernels, with Auto's BFloat16 (MISMATCH_ENGINE_KERNELS=bfloat16 included) also requiring
// bf16KernelsRoundOnce for the model's widths; on another device an explicit choice as given (BFloat16 with
// cuBLAS's reductions kept in float32 where this LibTorch allows), and Auto as the header says.
EngineKernels engineKernels(EngineKernels requested, const at::Device& device, const model::ModelConfig& config);

struct EngineOptions {
    // Ignored when a recipe plan is given (the plan means Recipe). Recipe without a plan is a programmer error.
    EnginePrecision precision = EnginePrecision::Bf16Reference;
    std::int64_t kvBlockSize = 16; // tokens per KV-cache block
    std::uint64_t kvCacheBytes = 256ull * 1024 * 1024; // memory of the paged KV cache, scales included
    std::int64_t maxBatchSize = 0; // sequences per wave; 0: as many as the cache holds
    EngineKernels kernels = EngineKernels::Auto;
};

// FP8 KV-cache scales of every layer: keys[layer] and values[layer] are float32 [1] (per tensor) or
// [kvHeads] (per head); undefined for a BF16 layer or one not measured yet.
struct KvScaleTable {
    std::vector<at::Tensor> keys;
    std::vector<at::Tensor> values;
};

// Rounds keys and values to each layer's KV format and owns the fp8_e4m3 scales. Scales are either calibrated
// (setScales) or measured from the first prefill that reaches a layer without scales (amax over the real
// tokens of that prefill, scale = amax / 448) and then frozen until cleared. The per-token-head formats keep no
// scales here: each token's come with its codes (quant::quantizePerTokenHead, applied to the keys and values rounded
// to bf16 first: vLLM writes them in the model's dtype) and live in the cache beside them.
class KvQuantizer {
public:
    KvQuantizer() = default;
    // `round` false: keys and values are stored exactly (the FP32 engine).
    KvQuantizer(std::vector<quant::KvPrecision> perLayer, std::int64_t kvHeads, bool round);

    std::int64_t numLayers() const { return static_cast<std::int64_t>(perLayer_.size()); }
    bool rounds() const { return round_; }
    const quant::KvPrecision& precision(std::int64_t layer) const;
    bool isFp8(std::int64_t layer) const; // fp8_e4m3 (calibrated scales), when rounding
    bool isPerTokenHead(std::int64_t layer) const; // fp8_per_token_head or int8_per_token_head, when rounding
    // Number of float32 scales layer `layer` keeps for K and V together: 0 (bf16/fp32 and the per-token-head
    // formats, whose scales the cache stores per token), 2 (per tensor) or 2 * kvHeads (per head).
    std::int64_t scaleCount(std::int64_t layer) const;
    // Keys and values [B, kvHeads, T, headDim] as the cache stores them (float32). `real` [B, T] bool marks
    // the real (non-padding) tokens: only they enter a scale measured here.
    std::pair<at::Tensor, at::Tensor> quantize(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& real);
    // A per-token-head layer's keys or values [B, kvHeads, T, headDim] as codes and scales (on the CPU): quantize()
    // gives their products, the float32 values the cache reads back.
    quant::PerTokenHeadKv quantizeTokenHead(std::int64_t layer, const at::Tensor& kv) const;

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
    EngineKernels kernels() const { return kernels_; } // resolved: Float32 or BFloat16
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
    // lastPositions and trace as model::ForwardOptions.
    at::Tensor forwardQuantized(const at::Tensor& ids, const at::Tensor& attentionMask, bool logProbs = false,
        std::int64_t lastPositions = 0, model::NonFiniteTrace* trace = nullptr);

    // The float32 weight the engine multiplies with for `module` (a moduleNames() name such as "lm_head" or
    // "embed_tokens"); for Fp32 the stored weight itself, in float32.
    at::Tensor engineWeight(const std::string& module) const;
    // The module's weight as the engine stores it (undefined for Fp32, which multiplies the given weights).
    const quant::QuantizedWeight& storedWeight(const std::string& module) const;
    // Bytes of weight storage the engine owns or shares: the quantized module weights (each tied or shared tensor
    // once) plus the norms and biases. What a memory estimate counts for an engine on its own weights.
    std::uint64_t weightBytes() const;

protected:
    at::Tensor linear(const std::string& module, const at::Tensor& x, const at::Tensor& weight,
        const at::Tensor& bias) const override;
    at::Tensor embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const override;

private:
    struct ModuleState {
        at::Tensor sourceWeight; // the stored tensor it was computed from (staleness check)
        at::Tensor sourceBias;
        quant::QuantizedWeight weight; // the fake-quantized weight, on the CPU
        // Weights on another device (CUDA): the fake-quantized weight there, float32, or bf16 for a bf16 module
        // with bf16 activations under BFloat16 kernels (the given tensor itself when it is bf16); shared by the two
        // modules of a tied bf16 tensor; undefined for a module the native FP8 GEMM multiplies (fp8Codes below).
        at::Tensor deviceWeight;
        at::Tensor bias; // float32, bf16-rounded; undefined when absent
        quant::WeightPrecision weights;
        quant::ActivationPrecision activations;
        // CUDA builds, a module with fp8_e4m3 weights and activations on a CUDA device (not the embedding): the
        // e4m3 codes and float32 scale grid of its rounded weight (bit-identical to it once dequantized), the
        // operands of the cuBLASLt FP8 GEMM, kept instead of the float32 weight (for block-128 weights, which that
        // GEMM does not take, the float32 weight is dequantized from them at each call). Undefined otherwise.
        at::Tensor fp8Codes;
        at::Tensor fp8Scales;
    };
    void prepareModules();
    // `deviceBf16`: the bf16-rounded device weight another module already made of the same (tied) tensor, used
    // instead of a second copy when this module's weights are bf16 and would be kept in the same dtype.
    ModuleState moduleState(const std::string& module, const at::Tensor& weight, const at::Tensor& bias,
        const at::Tensor& deviceBf16 = at::Tensor()) const;
    // The float32 weight a device module multiplies with: deviceWeight, or the native module's codes dequantized.
    at::Tensor deviceFloatWeight(const ModuleState& state) const;
    at::Tensor moduleProduct(const ModuleState& state, const at::Tensor& x) const;
    quant::ModulePrecision modulePrecision(const std::string& module) const;

    EnginePrecision precision_;
    EngineKernels kernels_ = EngineKernels::Float32;
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
// How many linear() calls, process-wide, multiplied e4m3 weights kept as codes on a CUDA device without the FP8
// tensor cores (not fp8TensorCoresTake, or cuBLASLt refused at run time): the float32
// weight dequantized from the codes times the float32 rounded activations, in float32, as on the CPU.
std::int64_t deviceDequantizedFp8LinearCalls();
// How many KvQuantizer::quantize calls, process-wide, rounded FP8 keys and values on a CUDA device (the dense cache
// of a full forward and the values a paged-cache prefill attends to) instead of through the host's codec.
std::int64_t deviceKvRoundings();
// How many linear() calls, process-wide, rounded FP8 activations on a CUDA device (emulated FP8 products on a GPU:
// FP8 activations with weights the native GEMM does not take: e5m2, int8 or int4).
std::int64_t deviceFp8ActivationRoundings();
// How many linear() calls, process-wide, ran through quant::fp8Bf16Product (FP8 weights in a decode-sized product
// on a CPU with AVX512-BF16, BFloat16 kernels) instead of the float32 emulation.
std::int64_t bf16DotFp8LinearCalls();

// bf16 rounding (nearest even) of a float32 tensor, NaN kept: the engine's fast path (a vectorised loop on the
// CPU, a cast to bfloat16 and back elsewhere), bit-identical to quant::roundToBFloat16 (tested).
at::Tensor roundBf16(const at::Tensor& values);

// [B, T] (left padded) int64 ids and mask for a batch of token sequences; pad id 0.
std::pair<at::Tensor, at::Tensor> leftPaddedBatch(const std::vector<std::vector<std::int64_t>>& sequences);
// InputError(source, "<what>[i]", ...) for an empty sequence or an id outside [0, vocabSize).
void validateTokenSequences(const std::vector<std::vector<std::int64_t>>& sequences, std::int64_t vocabSize,
    const std::string& source, const std::string& what, bool allowEmpty = false);

} // namespace mismatch::engine

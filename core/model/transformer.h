#pragma once
// Reference forward of the Llama / Qwen2 / Qwen3 decoder (the trainer's path): RMSNorm, rotary embeddings,
// grouped-query causal attention, SwiGLU MLP, optional QKV bias, Qwen3 per-head q/k norm, tied or untied
// lm_head. Plain ATen ops, dtype-generic (FP32 by default, BF16 for the BF16 engine, float64 for gradient
// checks) and autograd-ready: gradients reach the weights in their own dtype.
//
// Engines build on it through two seams:
//  - every matrix product goes through the virtual Transformer::linear (and the embedding lookup through
//    Transformer::embed) with the recipe's module name, so a quantized engine substitutes its own weights
//    and activation rounding per module;
//  - incremental decoding goes through the KvCache interface, which a paged cache implements.
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/model/rope.h"
#include "core/model/safetensors.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::model {

// Named parameters with Hugging Face names (`model.layers.3.self_attn.q_proj.weight`), kept in the
// order of expectedTensors() (core/model/model_files.h). Copying shares the tensors (they are handles); clone() copies
// them.
class TransformerWeights {
public:
    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    // The tensor called `name`; throws mismatch::Error when there is none.
    const at::Tensor& get(const std::string& name) const;
    // Inserts (appending to the order) or replaces.
    void set(const std::string& name, at::Tensor tensor);
    const std::vector<std::string>& names() const { return names_; }
    std::size_t size() const { return names_.size(); }
    std::vector<std::pair<std::string, at::Tensor>> named() const;
    std::int64_t numel() const;

    // The tensors in order, each made to require gradients: what an optimizer updates. Tied embeddings
    // appear once (there is no lm_head.weight).
    std::vector<at::Tensor> parameters();
    // Detached deep copy that does not require gradients (a snapshot, e.g. for a stale engine).
    TransformerWeights clone() const;
    // Detached copies converted to `dtype` (e.g. kDouble for gradient checks, kBFloat16 for a BF16 engine).
    TransformerWeights to(at::ScalarType dtype) const;

private:
    std::vector<std::string> names_;
    std::map<std::string, at::Tensor> tensors_;
};

// Names of the modules a precision recipe can address, in forward order: `embed_tokens`,
// `model.layers.{i}.self_attn.{q,k,v,o}_proj`, `model.layers.{i}.mlp.{gate,up,down}_proj`, `lm_head`.
std::vector<std::string> moduleNames(const ModelConfig& config);

// Checks that `weights` holds every tensor of expectedTensors(config) with its shape and a floating dtype;
// InputError(source, tensor name, what was expected) otherwise. Extra tensors are ignored.
void validateWeights(const ModelConfig& config, const TransformerWeights& weights, const std::string& source);

// FP32 weights drawn from N(0, stddev^2) (projections, embeddings, biases); norm weights 1 + N(0, 0.1^2)
// so that tests notice a missing or misplaced norm. Deterministic in seed.
// Every tensor moved to `device` (the same tensors when already there).
TransformerWeights onDevice(const TransformerWeights& weights, const at::Device& device);
// Where the weights live, so where a model on them computes: the first tensor's device; the CPU for none.
at::Device deviceOf(const TransformerWeights& weights);

TransformerWeights randomWeights(const ModelConfig& config, std::uint64_t seed, double stddev = 0.02);
// How loadWeights keeps the tensors it reads.
enum class LoadPrecision {
    Float32, // every tensor converted to FP32: what a trainer updates (master weights)
    Stored, // each tensor in the dtype the checkpoint stores (a BF16 checkpoint stays BF16, half the memory):
            // what the FP32 reference forward and the engines read, exactly, when nothing trains
};
// Reads the checkpoint in modelDir (model.safetensors or shards). InputError naming the directory and tensor for
// missing tensors and wrong shapes. The memory check before reading (memory_check.h) counts the bytes of the
// precision asked for.
TransformerWeights loadWeights(
    const std::string& modelDir, const ModelConfig& config, LoadPrecision precision = LoadPrecision::Float32);
// Writes modelDir/model.safetensors with every tensor converted to dtype (creates modelDir).
void saveWeights(const std::string& modelDir, const TransformerWeights& weights, DType dtype);

// RMSNorm over the last dimension, computed in FP32 (float64 when x is float64):
//   y = x * rsqrt(mean(x^2) + eps) * weight, with weight rounded to x's dtype; returned in x's dtype.
at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Per-layer keys and values for incremental decoding. Rows of a batch share one length: sequences of
// different lengths are padded (left or right) and the attention mask says which positions are real.
class KvCache {
public:
    virtual ~KvCache() = default;
    // Positions already stored (the same for every layer and row).
    virtual std::int64_t length() const = 0;
    // Stores layer `layer`'s keys and values for positions length() .. length() + T - 1 (keys after RoPE, both
    // [B, kvHeads, T, headDim] in the compute dtype) and returns the keys and values of all positions
    // 0 .. length() + T - 1 ([B, kvHeads, length() + T, headDim], compute dtype) for attention.
    virtual std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values)
        = 0;
    // Called once per forward after every layer has appended: the T new positions now count in length().
    virtual void advance(std::int64_t tokens) = 0;
    // A cache that can attend over its own storage (the engine's paged cache, where handing out the keys and values
    // as tensors copies the whole cache every decoding step) stores keys and values as append() does and returns
    // what Transformer::attention returns for q [B, H, T, D], the keys and values of all positions and the additive
    // bias [B, 1, T, S]: [B, T, H * D]. An undefined tensor means it does not, for these arguments (nothing is
    // stored then); forward calls append() and attention() instead.
    virtual at::Tensor appendAndAttend(std::int64_t layer, const at::Tensor& q, const at::Tensor& keys,
        const at::Tensor& values, const at::Tensor& bias)
    {
        return {};
    }
};

// Contiguous per-layer tensors grown by concatenation: the reference cache.
class DenseKvCache : public KvCache {
public:
    explicit DenseKvCache(std::int64_t numLayers);
    std::int64_t length() const override { return length_; }
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override;
    void advance(std::int64_t tokens) override;
    void clear();

private:
    std::vector<at::Tensor> keys_;
    std::vector<at::Tensor> values_;
    std::int64_t length_ = 0;
};

// Where a forward pass first leaves the finite numbers (ForwardOptions::trace): the forward checks each
// intermediate in order (embedding, norms, every linear product, attention, the MLP's silu(gate) * up, each
// residual add, the logits) and records the first one holding a NaN or an infinity, with the largest magnitude of
// the input it was computed from. Each check is a reduction over the intermediate: for diagnosing an overflow
// (the engine traces one sequence when its logits are not finite), not for every forward.
struct NonFiniteTrace {
    std::string point; // a module name ("model.layers.1.mlp.down_proj", "lm_head") or a step; empty: all finite
    std::string operation; // "linear product", "rms norm", "attention", "residual add", ...
    bool linear = false; // `point` is a linear module (its weight can be looked up by that name)
    double inputMagnitude = 0.0; // largest |value| of the input (NaN when the input itself was not finite)
    bool nan = false; // the intermediate holds a NaN (else only infinities)
    bool found() const { return !point.empty(); }
    // Records (point, operation) when nothing was recorded yet and `output` is not finite.
    void check(const std::string& where, const char* what, const at::Tensor& output, const at::Tensor& input,
        bool isLinear = false);
};

struct ForwardOptions {
    bool logProbs = false; // log_softmax over the vocabulary instead of logits
    // Positions whose outputs are computed: 0 every position, n > 0 only the last n (the output is [B, n, vocab]).
    // The lm_head of a large vocabulary costs as much as a few layers per position, so a prefill that samples
    // from its last position, or a scoring pass that needs the response positions only, asks for those.
    std::int64_t lastPositions = 0;
    // Dtype of weights and activations in the matrix products: kFloat (reference), kBFloat16 (the BF16
    // engine: norms, softmax and the output still in FP32) or kDouble (gradient checks; everything float64).
    at::ScalarType compute = at::kFloat;
    NonFiniteTrace* trace = nullptr; // non-null: check every intermediate (NonFiniteTrace)
};

class Transformer {
public:
    // Validates weights against config (InputError with source "transformer weights").
    Transformer(ModelConfig config, TransformerWeights weights);
    virtual ~Transformer() = default;

    const ModelConfig& config() const { return config_; }
    const TransformerWeights& weights() const { return weights_; }
    void setWeights(TransformerWeights weights);

    // ids [B, T] int64; attentionMask [B, T] (1 = real token, 0 = padding, left or right). Position ids are
    // cumsum(mask) - 1, so real tokens get the outputs they would get unpadded. Returns [B, T, vocab]
    // logits (or log-probabilities) in FP32 (float64 when computing in float64), [B, n, vocab] with
    // options.lastPositions = n. Outputs at padded positions are finite but meaningless.
    at::Tensor forward(
        const at::Tensor& ids, const at::Tensor& attentionMask, const ForwardOptions& options = {}) const;
    // Incremental form. With a cache holding P positions, ids are the next T tokens and attentionMask covers
    // all P + T positions. positions [B, T] int64, or an undefined tensor for cumsum(mask) - 1 over the full
    // mask. Appends this step's keys and values to the cache (cache may be null: no past, nothing stored).
    at::Tensor forward(const at::Tensor& ids, const at::Tensor& attentionMask, const at::Tensor& positions,
        KvCache* cache, const ForwardOptions& options = {}) const;

protected:
    // y = x W^T + b for the module named `module` (recipe names: `model.layers.3.mlp.down_proj`, `lm_head`).
    // x is in the compute dtype; weight [out, in] and bias [out] (undefined when absent) are the stored
    // parameters in their own dtype (a BF16 checkpoint's tensors multiplied in FP32 are widened exactly, a block
    // of rows at a time: transformer_linear.h). Must return [..., out] in x's dtype. Overriding this substitutes
    // quantized weights and activations per module.
    virtual at::Tensor linear(
        const std::string& module, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const;
    // Rows of the embedding table for ids (module `embed_tokens`), any floating dtype; the forward converts
    // the result to the compute dtype.
    virtual at::Tensor embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const;

private:
    struct Layer {
        std::string qName, kName, vName, oName, gateName, upName, downName; // module names
        at::Tensor inputNorm, postAttentionNorm;
        at::Tensor qWeight, kWeight, vWeight, oWeight;
        at::Tensor qBias, kBias, vBias, oBias; // undefined when absent
        at::Tensor qNorm, kNorm; // Qwen3 only
        at::Tensor gateWeight, upWeight, downWeight;
    };
    void bindWeights();
    at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
        at::ScalarType accumulate) const;

    ModelConfig config_;
    TransformerWeights weights_;
    std::vector<double> inverseFrequencies_;
    std::vector<Layer> layers_;
    at::Tensor embedWeight_, finalNorm_, lmHeadWeight_;
};

} // namespace mismatch::model

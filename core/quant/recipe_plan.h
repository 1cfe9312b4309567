#pragma once
// A recipe resolved against one model: the precision of every module and every layer's KV cache, with the
// weight memory and KV-cache bytes per token it implies, compared with all-BF16. Resolution also performs the
// checks that need the model (see "model" in recipe.h): rules that name nothing, kv_cache on linear modules,
// W4A8 and the other unsupported weight / activation pairs, tied embeddings stored twice, microscaling weights
// without whole blocks.
#include "core/model/config.h"
#include "core/quant/recipe.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mismatch::quant {

// The seven per-layer projections in table order, as name suffixes after "model.layers.{i}.".
const std::vector<std::string>& projectionSuffixes(); // "self_attn.q_proj", ..., "mlp.down_proj"
// Their short column names for tables: "q", "k", "v", "o", "gate", "up", "down".
const std::vector<std::string>& projectionShortNames();
std::string layerModuleName(std::int64_t layer, const std::string& suffix); // "model.layers.3.mlp.up_proj"
std::string attentionName(std::int64_t layer); // "model.layers.3.self_attn"
inline const char* kEmbedName = "model.embed_tokens";
inline const char* kLmHeadName = "lm_head";

// Set by no rule: the value comes from the recipe's top-level section or is the BF16 default.
constexpr int kNoRule = -1;

struct ModulePrecision {
    WeightPrecision weights;
    ActivationPrecision activations; // always bf16 for the embedding: a lookup has no input to quantize
    int weightsRule = kNoRule; // index into Recipe::rules of the rule that decided it
    int activationsRule = kNoRule;
};

// Storage of one weight tensor in bytes (weight shape [rows, columns] = [out, in] as in PyTorch; the
// embedding is [vocab, hidden], a norm [size, 1]).
struct WeightMemory {
    std::int64_t rows = 0;
    std::int64_t columns = 0;
    std::int64_t valueBytes = 0; // the elements in their format (int4: two per byte, rows padded to bytes)
    // Scales: float32, 1, rows, ceil(rows/128)*ceil(columns/128) or rows*ceil(columns/128) of them; microscaling
    // formats one byte per block of 32 (mxfp8, mxfp4) or 16 (nvfp4, plus its 4-byte tensor scale).
    std::int64_t scaleBytes = 0;
    std::int64_t biasBytes = 0; // bf16 bias (never quantized)
    std::int64_t bf16Bytes = 0; // the same tensor and bias in BF16
    std::int64_t bytes() const { return valueBytes + scaleBytes + biasBytes; }
};

// Bytes of a [rows, columns] weight stored as `precision` (values plus scales, no bias).
WeightMemory weightMemory(std::int64_t rows, std::int64_t columns, const WeightPrecision& precision);

struct RecipePlan {
    std::int64_t numLayers = 0;
    // Every weight that enters a matmul, by name: seven per layer, model.embed_tokens and lm_head (present even
    // when tied; then it equals the embedding).
    std::map<std::string, ModulePrecision> modules;
    // Every stored weight tensor: the matmul weights (biases folded in), the norms (input_layernorm,
    // post_attention_layernorm, q_norm/k_norm when the model has them, model.norm; always BF16). A tied
    // lm_head is absent: it is the embedding, counted once.
    std::map<std::string, WeightMemory> memory;
    std::vector<KvPrecision> kvPerLayer;
    std::vector<int> kvRulePerLayer; // kNoRule or the rule that decided each layer's KV format

    std::int64_t weightBytes = 0; // sum of memory[*].bytes()
    std::int64_t bf16WeightBytes = 0; // the same model all in BF16
    // KV cache: sum over layers of 2 (K and V) * kv heads * head dim * bytes per element, plus 2 * kv heads * 4 for
    // a per-token-head layer (its float32 scales are stored with each token).
    std::int64_t kvBytesPerToken = 0;
    std::int64_t bf16KvBytesPerToken = 0;
    // Float32 fp8_e4m3 KV scales: fixed per layer, not per token (2 per layer per tensor, 2 * kv heads per head).
    std::int64_t kvScaleBytes = 0;

    double weightRatio() const; // weightBytes / bf16WeightBytes
    double kvBytesRatio() const; // kvBytesPerToken / bf16KvBytesPerToken
    double kvCapacityRatio() const; // tokens that fit the same memory, relative to BF16 (1 / kvBytesRatio)
};

// Resolves `recipe` for `config`: top-level defaults, then every rule in order (later rules win). Throws
// InputError located in the recipe's file for the model checks listed in recipe.h.
RecipePlan resolveRecipe(const Recipe& recipe, const model::ModelConfig& config);

} // namespace mismatch::quant

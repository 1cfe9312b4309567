#pragma once
// Model configuration read from a Hugging Face `config.json` (Llama, Qwen2, Qwen3 families).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::model {

enum class Architecture {
    Llama,  // LlamaForCausalLM: no QKV bias, no q/k norm
    Qwen2,  // Qwen2ForCausalLM: QKV bias
    Qwen3,  // Qwen3ForCausalLM: per-head RMSNorm on q and k, no QKV bias
};

std::string toString(Architecture architecture);  // the Hugging Face class name
// Supported names, for error messages: "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM".
std::string supportedArchitectures();

struct RopeScaling {
    // "none" or "llama3" (Llama 3.1 frequency-dependent scaling).
    std::string type = "none";
    double factor = 1.0;
    double lowFreqFactor = 1.0;
    double highFreqFactor = 4.0;
    std::int64_t originalMaxPositionEmbeddings = 8192;
};

struct ModelConfig {
    // parseConfig refuses more layers (docs/architecture.md "Limits on input").
    static constexpr std::int64_t kMaxLayers = 10000;
    // ... more attention heads (query or key/value) and a larger head dimension: the largest released models have
    // 128 heads of at most 256 dimensions. Commands that read only config.json (kv-capacity, recipe check) size
    // tables and products by them with no checkpoint to bound them.
    static constexpr std::int64_t kMaxHeads = 4096;
    static constexpr std::int64_t kMaxHeadDim = 4096;

    Architecture architecture = Architecture::Qwen2;
    std::int64_t vocabSize = 0;
    std::int64_t hiddenSize = 0;
    std::int64_t intermediateSize = 0;
    std::int64_t numLayers = 0;
    std::int64_t numHeads = 0;
    std::int64_t numKeyValueHeads = 0;  // GQA: numHeads % numKeyValueHeads == 0
    std::int64_t headDim = 0;           // explicit head_dim, else hiddenSize / numHeads
    double rmsNormEps = 1e-6;
    double ropeTheta = 10000.0;
    RopeScaling ropeScaling;
    std::int64_t maxPositionEmbeddings = 2048;
    bool tieWordEmbeddings = false;
    bool attentionBias = false;  // q/k/v projections carry a bias (Qwen2; Llama's attention_bias)
    // o_proj carries a bias too: Llama and Qwen3 apply attention_bias to all four projections, Qwen2 only to
    // q/k/v (its o_proj never has one).
    bool outputBias = false;
    bool qkNorm = false;         // Qwen3
    std::optional<std::int64_t> bosTokenId;
    std::vector<std::int64_t> eosTokenIds;  // config may give one id or a list
    std::string torchDtype = "float32";     // as stored ("bfloat16", "float16", "float32")

    std::int64_t qSize() const { return numHeads * headDim; }
    std::int64_t kvSize() const { return numKeyValueHeads * headDim; }
    // Parameter count implied by the configuration (embedding counted once when tied).
    std::int64_t parameterCount() const;
};

bool operator==(const RopeScaling& a, const RopeScaling& b);
bool operator==(const ModelConfig& a, const ModelConfig& b);
inline bool operator!=(const ModelConfig& a, const ModelConfig& b) { return !(a == b); }

// Parses config.json text; `file` names it in errors (InputError with the JSON key as location).
ModelConfig parseConfig(const std::string& jsonText, const std::string& file);
ModelConfig loadConfig(const std::string& configPath);
// Writes config.json text for a configuration (used by `mismatch zoo build` and tests).
std::string configToJson(const ModelConfig& config);

}  // namespace mismatch::model

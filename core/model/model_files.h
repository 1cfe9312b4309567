#pragma once
// A model directory's files checked against each other: config.json decides which tensors the checkpoint
// must hold, with which shapes and dtype, so that a wrong or truncated download fails at load with a message
// naming the tensor rather than as a shape error deep inside the engine.
#include "core/model/config.h"
#include "core/model/safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mismatch::model {

struct ExpectedTensor {
    std::string name;
    std::vector<std::int64_t> shape;
};

// Every parameter the architecture defines, in module order: embeddings, layers, final norm, lm_head.
std::vector<ExpectedTensor> expectedTensors(const ModelConfig& config);

// "bfloat16" -> BF16, "float16" -> F16, "float32" -> F32 (parseConfig admits only these).
DType dtypeFromTorchDtype(const std::string& torchDtype);

// Throws InputError (file: the checkpoint directory, location: the tensor name) for a missing tensor, an
// unexpected one, a shape that differs from the expected one, or a dtype other than config.torchDtype.
// Tolerated: `*.rotary_emb.inv_freq` buffers that older exports saved (recomputed from rope_theta), and an
// lm_head.weight next to tied embeddings when it is an exact copy of the embedding (some exporters save the
// tied copy; the embedding is what is used). A different lm_head beside tied embeddings is an error: the model
// would silently ignore it.
// Before any per-tensor check, checkLayersAgainstCheckpoint: a config.json with more layers than the checkpoint
// stores is refused as a whole rather than by its first missing tensor.
void validateCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint);

// InputError(DIRECTORY/config.json, "num_hidden_layers", ...) when config.json describes more layers than the
// checkpoint stores (distinct "model.layers.N." indices): config.json then does not describe these weights. Cheap:
// it reads only the safetensors headers. (num_hidden_layers is capped by parseConfig, ModelConfig::kMaxLayers, and
// the other sizes are checked tensor by tensor against the stored shapes.)
void checkLayersAgainstCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint);

// InputError(source, location, ...) when a prompt of `promptTokens` tokens followed by `maxNewTokens` generated
// ones would pass the model's max_position_embeddings: positions beyond it were never trained (rotary
// embeddings extrapolate silently), so what is measured there is not the model's behaviour.
void requireFitsContext(const ModelConfig& config, std::int64_t promptTokens, std::int64_t maxNewTokens,
    const std::string& source, const std::string& location);

class Tokenizer;
class TransformerWeights;

// DIRECTORY/tokenizer.json, checked against the model's config.json: every token id of the tokenizer (its
// vocabulary and added tokens) must have a row in the embedding (id < vocab_size). InputError naming the file.
Tokenizer loadModelTokenizer(const std::string& directory, const ModelConfig& config);

// Whether none of `count` floats (float32: mask 0x7F800000; bfloat16: 0x7F80, float16: 0x7C00) has an all-ones
// exponent (NaN or infinity), read from the bit patterns in one vectorized pass.
bool exponentsFinite(const std::uint32_t* data, std::int64_t count, std::uint32_t exponentMask);
bool exponentsFinite(const std::uint16_t* data, std::int64_t count, std::uint16_t exponentMask);

// "3 NaN and 1 infinite values (the first at [0, 5])" for a tensor with non-finite entries, empty when all are
// finite.
std::string nonFiniteSummary(const at::Tensor& tensor);

// Weights loaded from a model directory must be finite: InputError(directory, tensor name, "holds 1 NaN and 0
// infinite values ...") otherwise (loadWeights checks every tensor it loads).
void requireFiniteWeights(const TransformerWeights& weights, const std::string& directory);

// What the checkpoint actually stores (not what the configuration implies).
struct CheckpointStats {
    std::int64_t tensorCount = 0;
    std::int64_t parameterCount = 0; // sum of element counts
    std::uint64_t bytes = 0; // sum of stored tensor bytes
    std::map<DType, std::int64_t> parametersByDtype;
    std::vector<std::string> files;
};
CheckpointStats checkpointStats(const Checkpoint& checkpoint);

struct ModelFiles {
    std::string directory;
    ModelConfig config;
    Checkpoint checkpoint;
};
// Reads DIRECTORY/config.json, opens the checkpoint and validates one against the other.
ModelFiles openModelDirectory(const std::string& directory);

} // namespace mismatch::model

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
// lm_head.weight of the right shape next to tied embeddings (some exporters save the tied copy; the
// embedding is what is used).
void validateCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint);

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

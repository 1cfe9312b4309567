#pragma once
// `mismatch zoo shape NAME DIR`: a random-weight checkpoint with the exact shape of a real model (its config.json,
// sharded BF16 safetensors with model.safetensors.index.json, a tokenizer.json), so that speed, memory and
// capacity can be measured on real shapes without downloading weights. The weights are random: the text such a
// model generates means nothing, and its mismatch figures say nothing about the real model's.
//
// Weights: every projection and embedding N(0, 0.02^2) (the models' initializer range), norm weights
// 1 + N(0, 0.1^2) (as model::randomWeights), drawn per tensor from a generator seeded by (seed, tensor name), so a
// tensor does not depend on the shard it lands in, and rounded to BF16. Tensors are generated and written one
// shard at a time: the memory it takes is one shard, not the model (a Qwen3-8B shape is 16 GB of BF16).
//
// Tokenizer: the real one when given (its tokenizer.json is copied after checking it loads and fits the model's
// vocabulary), else a byte-level BPE without merges (the demo tokenizer's 256 byte tokens) plus the model's
// special tokens at their real ids (`<|endoftext|>` 151643, `<|im_start|>` 151644, `<|im_end|>` 151645 for Qwen;
// `<|begin_of_text|>` 128000, `<|end_of_text|>` 128001, `<|eot_id|>` 128009 for Llama 3), so that the config's
// BOS/EOS ids name real tokens. Ids between are gaps (the model's vocabulary is padded).
#include "core/common/progress.h"
#include "core/model/config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::train {

struct ShapeSpecialToken {
    std::int64_t id = 0;
    std::string content;
};

struct ModelShape {
    std::string name; // "qwen3-0.6b"
    std::string huggingFaceName; // "Qwen/Qwen3-0.6B"
    model::ModelConfig config; // torch_dtype bfloat16
    std::vector<ShapeSpecialToken> specialTokens;
};

// The shapes `zoo shape` knows, in a fixed order: qwen3-0.6b, qwen2.5-0.5b, llama-3.2-1b, qwen3-8b, qwen2.5-7b.
const std::vector<ModelShape>& modelShapes();
// The shape called `name` (case-insensitive); InputError listing the known names otherwise.
const ModelShape& modelShape(const std::string& name);

struct ZooShapeOptions {
    std::uint64_t seed = 1;
    std::uint64_t maxShardBytes = 1ull << 30; // BF16 bytes per safetensors shard (1 GiB)
    std::string tokenizerPath; // a real tokenizer.json to copy; empty: the byte-level one described above
    double stddev = 0.02;
};

struct ZooShapeReport {
    std::string name;
    std::string directory;
    std::int64_t parameters = 0; // stored tensors (tied embeddings once)
    std::uint64_t bytes = 0; // BF16 tensor bytes
    std::vector<std::string> shards; // file names, in order
    std::string tokenizer; // "byte-level" or the copied file
    double seconds = 0.0;
};

// The byte-level tokenizer.json text for `shape` (see above).
std::string shapeTokenizerJson(const ModelShape& shape);

// Writes the checkpoint into `directory` (created; existing checkpoint files there are replaced, each through a
// temporary name). Progress: fraction of the tensor bytes written, cancellable between tensors (a cancelled
// write leaves no index, so the directory is not a loadable checkpoint). InputError for a tokenizer that does not
// load or whose ids do not fit the vocabulary.
ZooShapeReport writeModelShape(
    const ModelShape& shape, const std::string& directory, const ZooShapeOptions& options, Progress& progress);

} // namespace mismatch::train

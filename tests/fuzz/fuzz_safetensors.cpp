// fuzz_safetensors: a safetensors file (8-byte header length, JSON header with dtypes, shapes and data offsets,
// data section) opened as a one-file checkpoint directory: header and offset validation, every tensor loaded,
// the statistics, and the file checked against a tiny Qwen2 configuration (core/model/model_files.h).
#include "tests/fuzz/fuzz_target.h"

#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"

#include <ATen/ATen.h>

namespace {

// The configuration tests/fuzz/seeds/safetensors/tiny-qwen2.safetensors satisfies.
mismatch::model::ModelConfig tinyConfig()
{
    mismatch::model::ModelConfig config;
    config.architecture = mismatch::model::Architecture::Qwen2;
    config.vocabSize = 8;
    config.hiddenSize = 4;
    config.intermediateSize = 8;
    config.numLayers = 1;
    config.numHeads = 2;
    config.numKeyValueHeads = 1;
    config.headDim = 2;
    config.tieWordEmbeddings = true;
    config.attentionBias = true;
    config.torchDtype = "float32";
    return config;
}

} // namespace

MISMATCH_FUZZ_TARGET(safetensors)
{
    static const mismatch::model::ModelConfig config = tinyConfig();
    const std::string path = fuzz::writeScratchFile("model.safetensors", data, size);
    try {
        const mismatch::model::Checkpoint checkpoint = mismatch::model::Checkpoint::open(fuzz::scratchDirectory());
        std::uint64_t bytes = 0;
        for (const std::string& name : checkpoint.names()) {
            const mismatch::model::TensorInfo& info = checkpoint.info(name);
            const at::Tensor tensor = checkpoint.load(name);
            fuzz::check(static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size() == info.end - info.begin,
                "a loaded tensor holds the bytes its offsets span");
            bytes += info.end - info.begin;
        }
        const mismatch::model::CheckpointStats stats = mismatch::model::checkpointStats(checkpoint);
        fuzz::check(stats.bytes == bytes, "checkpointStats counts every stored byte");
        fuzz::check(bytes <= size, "tensors lie inside the file");
        mismatch::model::validateCheckpoint(config, checkpoint);
    } catch (const mismatch::InputError&) {
    }
    return 0;
}

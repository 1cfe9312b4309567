#include "core/model/model_files.h"

#include "core/common/error.h"

#include <filesystem>
#include <set>

namespace mismatch::model {

namespace {

std::string shapeText(const std::vector<std::int64_t>& shape)
{
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        text += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return text + "]";
}

bool endsWith(const std::string& text, const std::string& suffix)
{
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void checkTensor(
    const ModelConfig& config, const Checkpoint& checkpoint, const ExpectedTensor& expected, DType expectedDtype)
{
    const TensorInfo& info = checkpoint.info(expected.name);
    if (info.shape != expected.shape) {
        throw InputError(checkpoint.directory(), expected.name,
            "tensor " + expected.name + " has shape " + shapeText(info.shape) + " but config.json implies "
                + shapeText(expected.shape));
    }
    if (info.dtype != expectedDtype) {
        throw InputError(checkpoint.directory(), expected.name,
            "tensor " + expected.name + " has dtype " + toString(info.dtype) + " but config.json torch_dtype is "
                + config.torchDtype + " (expected " + toString(expectedDtype) + ")");
    }
}

} // namespace

std::vector<ExpectedTensor> expectedTensors(const ModelConfig& config)
{
    const std::int64_t hidden = config.hiddenSize;
    std::vector<ExpectedTensor> tensors;
    tensors.push_back({"model.embed_tokens.weight", {config.vocabSize, hidden}});
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const std::string prefix = "model.layers." + std::to_string(layer) + ".";
        tensors.push_back({prefix + "input_layernorm.weight", {hidden}});
        // Linear weights are [out_features, in_features].
        tensors.push_back({prefix + "self_attn.q_proj.weight", {config.qSize(), hidden}});
        tensors.push_back({prefix + "self_attn.k_proj.weight", {config.kvSize(), hidden}});
        tensors.push_back({prefix + "self_attn.v_proj.weight", {config.kvSize(), hidden}});
        if (config.attentionBias) {
            tensors.push_back({prefix + "self_attn.q_proj.bias", {config.qSize()}});
            tensors.push_back({prefix + "self_attn.k_proj.bias", {config.kvSize()}});
            tensors.push_back({prefix + "self_attn.v_proj.bias", {config.kvSize()}});
        }
        if (config.qkNorm) {
            tensors.push_back({prefix + "self_attn.q_norm.weight", {config.headDim}});
            tensors.push_back({prefix + "self_attn.k_norm.weight", {config.headDim}});
        }
        tensors.push_back({prefix + "self_attn.o_proj.weight", {hidden, config.qSize()}});
        if (config.outputBias) {
            tensors.push_back({prefix + "self_attn.o_proj.bias", {hidden}});
        }
        tensors.push_back({prefix + "post_attention_layernorm.weight", {hidden}});
        tensors.push_back({prefix + "mlp.gate_proj.weight", {config.intermediateSize, hidden}});
        tensors.push_back({prefix + "mlp.up_proj.weight", {config.intermediateSize, hidden}});
        tensors.push_back({prefix + "mlp.down_proj.weight", {hidden, config.intermediateSize}});
    }
    tensors.push_back({"model.norm.weight", {hidden}});
    if (!config.tieWordEmbeddings) {
        tensors.push_back({"lm_head.weight", {config.vocabSize, hidden}});
    }
    return tensors;
}

DType dtypeFromTorchDtype(const std::string& torchDtype)
{
    if (torchDtype == "bfloat16") {
        return DType::BF16;
    }
    if (torchDtype == "float16") {
        return DType::F16;
    }
    return DType::F32;
}

void validateCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint)
{
    const DType expectedDtype = dtypeFromTorchDtype(config.torchDtype);
    std::set<std::string> known;
    for (const ExpectedTensor& expected : expectedTensors(config)) {
        known.insert(expected.name);
        if (!checkpoint.contains(expected.name)) {
            throw InputError(checkpoint.directory(), expected.name,
                "missing tensor " + expected.name + " (expected shape " + shapeText(expected.shape) + ", "
                    + toString(expectedDtype) + ")");
        }
        checkTensor(config, checkpoint, expected, expectedDtype);
    }
    const ExpectedTensor tiedHead {"lm_head.weight", {config.vocabSize, config.hiddenSize}};
    for (const std::string& name : checkpoint.names()) {
        if (known.count(name) || endsWith(name, ".rotary_emb.inv_freq")) {
            continue;
        }
        if (config.tieWordEmbeddings && name == tiedHead.name) {
            checkTensor(config, checkpoint, tiedHead, expectedDtype);
            continue;
        }
        throw InputError(checkpoint.directory(), name,
            "unexpected tensor " + name + ": " + toString(config.architecture)
                + " with this config.json defines no such parameter");
    }
}

CheckpointStats checkpointStats(const Checkpoint& checkpoint)
{
    CheckpointStats stats;
    for (const std::string& name : checkpoint.names()) {
        const TensorInfo& info = checkpoint.info(name);
        std::int64_t elements = 1;
        for (std::int64_t dim : info.shape) {
            elements *= dim;
        }
        stats.tensorCount += 1;
        stats.parameterCount += elements;
        stats.bytes += info.end - info.begin;
        stats.parametersByDtype[info.dtype] += elements;
    }
    stats.files = checkpoint.files();
    return stats;
}

ModelFiles openModelDirectory(const std::string& directory)
{
    if (!std::filesystem::is_directory(directory)) {
        throw InputError(directory, "", "not a model directory (expected config.json and safetensors files)");
    }
    ModelFiles files;
    files.directory = directory;
    files.config = loadConfig((std::filesystem::path(directory) / "config.json").string());
    files.checkpoint = Checkpoint::open(directory);
    validateCheckpoint(files.config, files.checkpoint);
    return files;
}

} // namespace mismatch::model

#include "core/model/model_files.h"

#include "core/common/message_text.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/vector_clones.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include <filesystem>
#include <set>

namespace mismatch::model {

namespace {

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

void checkLayersAgainstCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint)
{
    // The layer indices the checkpoint stores ("model.layers.N." prefixes); a missing tensor inside a stored layer
    // is left to the per-tensor checks, which name it.
    const std::string prefix = "model.layers.";
    std::set<std::int64_t> layers;
    for (const std::string& name : checkpoint.names()) {
        if (name.compare(0, prefix.size(), prefix) != 0) {
            continue;
        }
        const std::size_t dot = name.find('.', prefix.size());
        const std::string index = name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
        if (!index.empty() && index.size() <= 9 && index.find_first_not_of("0123456789") == std::string::npos) {
            layers.insert(std::stoll(index));
        }
    }
    const auto stored = static_cast<std::int64_t>(layers.size());
    if (config.numLayers > stored) {
        throw InputError((std::filesystem::path(checkpoint.directory()) / "config.json").string(), "num_hidden_layers",
            "config.json describes " + std::to_string(config.numLayers) + " layers but the checkpoint stores "
                + (stored == 0 ? std::string("none")
                               : std::to_string(stored) + " (model.layers." + std::to_string(*layers.begin())
                                   + " to model.layers." + std::to_string(*layers.rbegin()) + ")")
                + ": config.json does not describe these weights");
    }
}

void validateCheckpoint(const ModelConfig& config, const Checkpoint& checkpoint)
{
    checkLayersAgainstCheckpoint(config, checkpoint);
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
            if (!checkpoint.sameData(tiedHead.name, "model.embed_tokens.weight")) {
                throw InputError(checkpoint.directory(), name,
                    "lm_head.weight differs from model.embed_tokens.weight although config.json ties them "
                    "(tie_word_embeddings: true): the model computes with the embedding and would silently ignore "
                    "this lm_head; set tie_word_embeddings to false or remove the tensor");
            }
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
    if (pathKind(directory) != PathKind::Directory) {
        throw InputError(directory, "", "not a model directory (expected config.json and safetensors files)");
    }
    ModelFiles files;
    files.directory = directory;
    files.config = loadConfig((std::filesystem::path(directory) / "config.json").string());
    files.checkpoint = Checkpoint::open(directory);
    validateCheckpoint(files.config, files.checkpoint);
    return files;
}

void requireFitsContext(const ModelConfig& config, std::int64_t promptTokens, std::int64_t maxNewTokens,
    const std::string& source, const std::string& location)
{
    if (promptTokens + maxNewTokens > config.maxPositionEmbeddings) {
        throw InputError(source, location,
            std::to_string(promptTokens) + " prompt tokens + " + std::to_string(maxNewTokens)
                + " new tokens = " + std::to_string(promptTokens + maxNewTokens)
                + " positions, past the model's max_position_embeddings of "
                + std::to_string(config.maxPositionEmbeddings) + " (lower the maximum of new tokens or shorten the prompt)");
    }
}

Tokenizer loadModelTokenizer(const std::string& directory, const ModelConfig& config)
{
    const std::string path = (std::filesystem::path(directory) / "tokenizer.json").string();
    Tokenizer tokenizer = Tokenizer::fromFile(path);
    if (tokenizer.vocabSize() > config.vocabSize) {
        const std::int64_t id = tokenizer.vocabSize() - 1;
        throw InputError(path, "token id " + std::to_string(id),
            "token " + tokenizer.piece(id) + " has id " + std::to_string(id) + " but config.json vocab_size is "
                + std::to_string(config.vocabSize) + ": the embedding has no row for it (ids must be below vocab_size)");
    }
    return tokenizer;
}

namespace {

// Whether every element's exponent field is below all ones (no NaN, no infinity), read from the bit patterns in
// one pass over the stored bytes: at::isfinite would write a bool tensor of the weight's size and read it again.
// Two plain functions, not a template: clang's target_clones does not take function templates.
MISMATCH_VECTOR_CLONES bool exponentsFinite32(const std::uint32_t* data, std::int64_t count, std::uint32_t exponentMask)
{
    std::uint32_t nonFinite = 0; // non-zero: some element has an all-ones exponent
    for (std::int64_t i = 0; i < count; ++i) {
        nonFinite |= static_cast<std::uint32_t>((data[i] & exponentMask) == exponentMask);
    }
    return nonFinite == 0;
}

MISMATCH_VECTOR_CLONES bool exponentsFinite16(const std::uint16_t* data, std::int64_t count, std::uint16_t exponentMask)
{
    std::uint16_t nonFinite = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        nonFinite |= static_cast<std::uint16_t>((data[i] & exponentMask) == exponentMask);
    }
    return nonFinite == 0;
}

// True when the tensor (float32, bfloat16 or float16 on the CPU, contiguous) is finite; nullopt for other tensors.
std::optional<bool> allFiniteByBits(const at::Tensor& tensor)
{
    if (!tensor.device().is_cpu() || !tensor.is_contiguous()) {
        return std::nullopt;
    }
    std::atomic<bool> finite {true};
    const auto scan = [&](auto* data, auto mask) {
        at::parallel_for(0, tensor.numel(), 1 << 20, [&](std::int64_t begin, std::int64_t end) {
            if (!exponentsFinite(data + begin, end - begin, mask)) {
                finite = false;
            }
        });
    };
    switch (tensor.scalar_type()) {
    case at::kFloat:
        scan(static_cast<const std::uint32_t*>(tensor.data_ptr()), std::uint32_t {0x7F800000u});
        break;
    case at::kBFloat16:
        scan(static_cast<const std::uint16_t*>(tensor.data_ptr()), std::uint16_t {0x7F80u});
        break;
    case at::kHalf:
        scan(static_cast<const std::uint16_t*>(tensor.data_ptr()), std::uint16_t {0x7C00u});
        break;
    default:
        return std::nullopt;
    }
    return finite.load();
}

} // namespace

bool exponentsFinite(const std::uint32_t* data, std::int64_t count, std::uint32_t mask)
{
    return exponentsFinite32(data, count, mask);
}

bool exponentsFinite(const std::uint16_t* data, std::int64_t count, std::uint16_t mask)
{
    return exponentsFinite16(data, count, mask);
}

std::string nonFiniteSummary(const at::Tensor& tensor)
{
    const std::optional<bool> finite = allFiniteByBits(tensor);
    if (finite ? *finite : at::isfinite(tensor).all().item<bool>()) {
        return {};
    }
    const auto nans = at::isnan(tensor).sum().item<std::int64_t>();
    const auto infinities = at::isinf(tensor).sum().item<std::int64_t>();
    const at::Tensor first = at::nonzero(at::logical_not(at::isfinite(tensor)))[0];
    std::string index;
    for (std::int64_t d = 0; d < first.numel(); ++d) {
        index += (d ? ", " : "") + std::to_string(first[d].item<std::int64_t>());
    }
    return std::to_string(nans) + " NaN and " + std::to_string(infinities) + " infinite values (the first at [" + index
        + "])";
}

void requireFiniteWeights(const TransformerWeights& weights, const std::string& directory)
{
    for (const std::string& name : weights.names()) {
        const std::string problem = nonFiniteSummary(weights.get(name));
        if (!problem.empty()) {
            throw InputError(directory, name, "holds " + problem + " (a model's weights must be finite)");
        }
    }
}

} // namespace mismatch::model

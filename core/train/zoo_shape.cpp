#include "core/train/zoo_shape.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/hash.h"
#include "core/common/input_limits.h"
#include "core/io/char_tokenizer_json.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/tokenizer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::train {

namespace {

constexpr const char* kRecordName = "zoo_shape.json";
constexpr const char* kIndexName = "model.safetensors.index.json";

model::ModelConfig baseConfig(model::Architecture architecture)
{
    model::ModelConfig config;
    config.architecture = architecture;
    config.torchDtype = "bfloat16";
    config.rmsNormEps = 1e-6;
    config.ropeTheta = 1000000.0;
    config.qkNorm = architecture == model::Architecture::Qwen3;
    config.attentionBias = architecture == model::Architecture::Qwen2;
    return config;
}

std::vector<ShapeSpecialToken> qwenSpecialTokens()
{
    return {{151643, "<|endoftext|>"}, {151644, "<|im_start|>"}, {151645, "<|im_end|>"}};
}

std::vector<ModelShape> makeShapes()
{
    std::vector<ModelShape> shapes;
    {
        ModelShape shape {"qwen3-0.6b", "Qwen/Qwen3-0.6B", baseConfig(model::Architecture::Qwen3), qwenSpecialTokens()};
        model::ModelConfig& c = shape.config;
        c.vocabSize = 151936;
        c.hiddenSize = 1024;
        c.intermediateSize = 3072;
        c.numLayers = 28;
        c.numHeads = 16;
        c.numKeyValueHeads = 8;
        c.headDim = 128;
        c.maxPositionEmbeddings = 40960;
        c.tieWordEmbeddings = true;
        c.bosTokenId = 151643;
        c.eosTokenIds = {151645};
        shapes.push_back(shape);
    }
    {
        ModelShape shape {
            "qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", baseConfig(model::Architecture::Qwen2), qwenSpecialTokens()};
        model::ModelConfig& c = shape.config;
        c.vocabSize = 151936;
        c.hiddenSize = 896;
        c.intermediateSize = 4864;
        c.numLayers = 24;
        c.numHeads = 14;
        c.numKeyValueHeads = 2;
        c.headDim = 64;
        c.maxPositionEmbeddings = 32768;
        c.tieWordEmbeddings = true;
        c.bosTokenId = 151643;
        c.eosTokenIds = {151643};
        shapes.push_back(shape);
    }
    {
        ModelShape shape {"llama-3.2-1b", "meta-llama/Llama-3.2-1B", baseConfig(model::Architecture::Llama),
            {{128000, "<|begin_of_text|>"}, {128001, "<|end_of_text|>"}, {128009, "<|eot_id|>"}}};
        model::ModelConfig& c = shape.config;
        c.vocabSize = 128256;
        c.hiddenSize = 2048;
        c.intermediateSize = 8192;
        c.numLayers = 16;
        c.numHeads = 32;
        c.numKeyValueHeads = 8;
        c.headDim = 64;
        c.rmsNormEps = 1e-5;
        c.ropeTheta = 500000.0;
        c.ropeScaling.type = "llama3";
        c.ropeScaling.factor = 32.0;
        c.ropeScaling.lowFreqFactor = 1.0;
        c.ropeScaling.highFreqFactor = 4.0;
        c.ropeScaling.originalMaxPositionEmbeddings = 8192;
        c.maxPositionEmbeddings = 131072;
        c.tieWordEmbeddings = true;
        c.bosTokenId = 128000;
        c.eosTokenIds = {128001};
        shapes.push_back(shape);
    }
    {
        ModelShape shape {"qwen3-8b", "Qwen/Qwen3-8B", baseConfig(model::Architecture::Qwen3), qwenSpecialTokens()};
        model::ModelConfig& c = shape.config;
        c.vocabSize = 151936;
        c.hiddenSize = 4096;
        c.intermediateSize = 12288;
        c.numLayers = 36;
        c.numHeads = 32;
        c.numKeyValueHeads = 8;
        c.headDim = 128;
        c.maxPositionEmbeddings = 40960;
        c.tieWordEmbeddings = false;
        c.bosTokenId = 151643;
        c.eosTokenIds = {151645};
        shapes.push_back(shape);
    }
    {
        ModelShape shape {"qwen2.5-7b", "Qwen/Qwen2.5-7B", baseConfig(model::Architecture::Qwen2), qwenSpecialTokens()};
        model::ModelConfig& c = shape.config;
        c.vocabSize = 152064;
        c.hiddenSize = 3584;
        c.intermediateSize = 18944;
        c.numLayers = 28;
        c.numHeads = 28;
        c.numKeyValueHeads = 4;
        c.headDim = 128;
        c.maxPositionEmbeddings = 131072;
        c.tieWordEmbeddings = false;
        c.bosTokenId = 151643;
        c.eosTokenIds = {151643};
        shapes.push_back(shape);
    }
    return shapes;
}

std::string lower(std::string text)
{
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;
}

bool isNormWeight(const std::string& name)
{
    const auto endsWith = [&](const std::string& suffix) {
        return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return endsWith("norm.weight");
}

// FNV-1a of the name mixed with the seed: each tensor's own stream.
std::uint64_t tensorSeed(std::uint64_t seed, const std::string& name)
{
    return fnv1a(name) ^ (seed * 0x9E3779B97F4A7C15ULL);
}

at::Tensor randomTensor(const model::ExpectedTensor& tensor, const ZooShapeOptions& options)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(tensorSeed(options.seed, tensor.name));
    at::Tensor noise = at::randn(tensor.shape, generator, at::TensorOptions().dtype(at::kFloat));
    constexpr double kNormNoise = 0.1; // as model::randomWeights
    noise = isNormWeight(tensor.name) ? noise.mul_(kNormNoise).add_(1.0) : noise.mul_(options.stddev);
    return noise.to(at::kBFloat16);
}

std::uint64_t bf16Bytes(const model::ExpectedTensor& tensor)
{
    std::uint64_t elements = 1;
    for (const std::int64_t size : tensor.shape) {
        elements *= static_cast<std::uint64_t>(size);
    }
    return 2 * elements;
}

// The directory must be new, empty, or an earlier `zoo shape` output (its files are replaced).
void prepareDirectory(const fs::path& directory)
{
    std::error_code error;
    if (fs::exists(directory, error)) {
        if (!fs::is_directory(directory, error)) {
            throw InputError(directory.string(), "", "exists and is not a directory");
        }
        const bool empty = fs::directory_iterator(directory, error) == fs::directory_iterator();
        if (!empty && !fs::exists(directory / kRecordName, error)) {
            throw InputError(directory.string(), "",
                "is not empty and holds no zoo_shape.json: refusing to write a checkpoint over other files");
        }
        // An earlier shape: its index goes first, so an interrupted write never leaves a loadable mix.
        fs::remove(directory / kIndexName, error);
        fs::remove(directory / "model.safetensors", error);
        for (const auto& entry : fs::directory_iterator(directory, error)) {
            const std::string name = entry.path().filename().string();
            if (name.rfind("model-", 0) == 0 && name.size() > 12
                && name.compare(name.size() - 12, 12, ".safetensors") == 0) {
                fs::remove(entry.path(), error);
            }
        }
        return;
    }
    fs::create_directories(directory, error);
    if (error) {
        throw InputError(directory.string(), "", "cannot create directory: " + error.message());
    }
}

} // namespace

const std::vector<ModelShape>& modelShapes()
{
    static const std::vector<ModelShape> shapes = makeShapes();
    return shapes;
}

const ModelShape& modelShape(const std::string& name)
{
    std::string known;
    for (const ModelShape& shape : modelShapes()) {
        if (shape.name == lower(name)) {
            return shape;
        }
        known += (known.empty() ? "" : ", ") + shape.name;
    }
    throw InputError("zoo shape", name, "unknown model shape (expected one of " + known + ")");
}

std::string shapeTokenizerJson(const ModelShape& shape)
{
    nlohmann::ordered_json tokenizer = nlohmann::ordered_json::parse(io::demoTokenizerJson());
    nlohmann::ordered_json added = nlohmann::ordered_json::array();
    for (const ShapeSpecialToken& token : shape.specialTokens) {
        nlohmann::ordered_json entry = tokenizer["added_tokens"][0]; // the demo's <|endoftext|>, same flags
        entry["id"] = token.id;
        entry["content"] = token.content;
        added.push_back(entry);
    }
    tokenizer["added_tokens"] = added;
    return tokenizer.dump(2) + "\n";
}

ZooShapeReport writeModelShape(
    const ModelShape& shape, const std::string& directory, const ZooShapeOptions& options, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
    if (options.maxShardBytes == 0) {
        throw InputError("zoo shape", "max shard size", "must be > 0 bytes");
    }
    // The tokenizer first: a bad one fails before gigabytes are written.
    std::string tokenizerText = shapeTokenizerJson(shape);
    if (!options.tokenizerPath.empty()) {
        tokenizerText = readInputFile(options.tokenizerPath, limits::kTokenizerFile, "tokenizer file");
    }
    const model::Tokenizer tokenizer = model::Tokenizer::fromJson(
        tokenizerText, options.tokenizerPath.empty() ? "byte-level tokenizer" : options.tokenizerPath);
    if (tokenizer.vocabSize() > shape.config.vocabSize) {
        throw InputError(options.tokenizerPath, "",
            "tokenizer has ids up to " + std::to_string(tokenizer.vocabSize() - 1) + " but the " + shape.name
                + " vocabulary holds " + std::to_string(shape.config.vocabSize));
    }

    const fs::path root(directory);
    prepareDirectory(root);

    // Shards packed greedily in tensor order (a tensor above the limit gets one of its own), as
    // model::writeShardedSafetensors packs them; planned first so that every file name knows the count.
    const std::vector<model::ExpectedTensor> tensors = model::expectedTensors(shape.config);
    std::vector<std::vector<std::size_t>> shards;
    std::uint64_t current = 0;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const std::uint64_t bytes = bf16Bytes(tensors[i]);
        if (shards.empty() || (current > 0 && current + bytes > options.maxShardBytes)) {
            shards.emplace_back();
            current = 0;
        }
        shards.back().push_back(i);
        current += bytes;
        total += bytes;
    }

    ZooShapeReport report;
    report.name = shape.name;
    report.directory = directory;
    report.bytes = total;
    report.tokenizer = options.tokenizerPath.empty() ? std::string("byte-level") : options.tokenizerPath;
    // The record first (what is being written, by whom), so that an interrupted write can be redone in place.
    nlohmann::ordered_json record = {{"shape", shape.name}, {"of", shape.huggingFaceName}, {"random_weights", true},
        {"note",
            "random weights with the exact shape of the named model: for measuring speed, memory and capacity; the "
            "text it generates means nothing"},
        {"seed", options.seed}, {"stddev", options.stddev}, {"tokenizer", report.tokenizer}, {"complete", false}};
    writeFileAtomically((root / kRecordName).string(), record.dump(2) + "\n");
    writeFileAtomically((root / "config.json").string(), model::configToJson(shape.config));
    writeFileAtomically((root / "tokenizer.json").string(), tokenizerText);

    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    std::uint64_t written = 0;
    for (std::size_t s = 0; s < shards.size(); ++s) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
        std::vector<std::pair<std::string, at::Tensor>> shardTensors;
        for (const std::size_t i : shards[s]) {
            progress.checkCancelled();
            progress.update(static_cast<double>(written) / static_cast<double>(total), "generating " + tensors[i].name);
            shardTensors.emplace_back(tensors[i].name, randomTensor(tensors[i], options));
            written += bf16Bytes(tensors[i]);
            report.parameters += static_cast<std::int64_t>(bf16Bytes(tensors[i]) / 2);
            weightMap[tensors[i].name] = name;
        }
        progress.update(static_cast<double>(written) / static_cast<double>(total), std::string("writing ") + name);
        model::writeSafetensors((root / name).string(), shardTensors,
            {{"format", "pt"}, {"mismatch.zoo_shape", shape.name}, {"mismatch.random_weights", "true"}});
        report.shards.push_back(name);
    }
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weightMap;
    writeFileAtomically((root / kIndexName).string(), index.dump(2) + "\n");

    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    record["complete"] = true;
    record["parameters"] = report.parameters;
    record["bytes"] = report.bytes;
    record["shards"] = report.shards;
    record["seconds"] = report.seconds;
    writeFileAtomically((root / kRecordName).string(), record.dump(2) + "\n");
    progress.update(1.0, "done");
    return report;
}

} // namespace mismatch::train

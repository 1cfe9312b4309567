#include "core/model/config.h"

#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/common/input_limits.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <limits>
#include <sstream>

namespace mismatch::model {

namespace {

using nlohmann::json;

constexpr const char* kSupportedRopeTypes = "null, default, llama3";
constexpr const char* kSupportedDtypes = "bfloat16, float16, float32";

// Typed access to one JSON object with errors located at the key ("rope_scaling.factor").
class ConfigReader {
public:
    ConfigReader(const std::string& file, const json& object, std::string prefix = {})
        : file_(file)
        , object_(object)
        , prefix_(std::move(prefix))
    {
    }

    std::string location(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "." + key; }

    [[noreturn]] void fail(const std::string& key, const std::string& detail) const
    {
        throw InputError(file_, location(key), detail);
    }

    // A key given as null counts as absent: Hugging Face writes e.g. "head_dim": null for "derive it".
    const json* find(const std::string& key) const
    {
        const auto it = object_.find(key);
        if (it == object_.end() || it->is_null()) {
            return nullptr;
        }
        return &*it;
    }

    const json& required(const std::string& key) const
    {
        const json* value = find(key);
        if (!value) {
            fail(key, "missing required key");
        }
        return *value;
    }

    std::int64_t toInt(const std::string& key, const json& value) const
    {
        if (value.is_number_unsigned()) {
            if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
                fail(key, "integer out of range");
            }
            return static_cast<std::int64_t>(value.get<std::uint64_t>());
        }
        if (!value.is_number_integer()) {
            fail(key, std::string("expected an integer, got ") + value.type_name());
        }
        return value.get<std::int64_t>();
    }

    std::int64_t requiredInt(const std::string& key) const { return toInt(key, required(key)); }

    std::int64_t optionalInt(const std::string& key, std::int64_t fallback) const
    {
        const json* value = find(key);
        return value ? toInt(key, *value) : fallback;
    }

    std::int64_t positive(const std::string& key, std::int64_t value) const
    {
        if (value <= 0) {
            fail(key, "must be positive, got " + std::to_string(value));
        }
        return value;
    }

    double toDouble(const std::string& key, const json& value) const
    {
        if (!value.is_number()) {
            fail(key, std::string("expected a number, got ") + value.type_name());
        }
        return value.get<double>();
    }

    double requiredDouble(const std::string& key) const { return toDouble(key, required(key)); }

    double optionalDouble(const std::string& key, double fallback) const
    {
        const json* value = find(key);
        return value ? toDouble(key, *value) : fallback;
    }

    bool optionalBool(const std::string& key, bool fallback) const
    {
        const json* value = find(key);
        if (!value) {
            return fallback;
        }
        if (!value->is_boolean()) {
            fail(key, std::string("expected true or false, got ") + value->type_name());
        }
        return value->get<bool>();
    }

    std::string optionalString(const std::string& key, const std::string& fallback) const
    {
        const json* value = find(key);
        if (!value) {
            return fallback;
        }
        if (!value->is_string()) {
            fail(key, std::string("expected a string, got ") + value->type_name());
        }
        return value->get<std::string>();
    }

private:
    const std::string& file_;
    const json& object_;
    std::string prefix_;
};

Architecture parseArchitecture(const ConfigReader& reader, const json& root)
{
    const auto fromClassName = [&](const std::string& name, const std::string& key) {
        for (Architecture a : {Architecture::Llama, Architecture::Qwen2, Architecture::Qwen3}) {
            if (name == toString(a)) {
                return a;
            }
        }
        reader.fail(key, "unsupported architecture '" + name + "' (supported: " + supportedArchitectures() + ")");
    };
    if (const json* list = reader.find("architectures")) {
        if (!list->is_array() || list->empty() || !(*list)[0].is_string()) {
            reader.fail("architectures", "expected a list of class names such as [\"Qwen2ForCausalLM\"]");
        }
        return fromClassName((*list)[0].get<std::string>(), "architectures");
    }
    // Some exporters leave out `architectures`; `model_type` names the family just as well.
    if (root.contains("model_type")) {
        const std::string type = reader.optionalString("model_type", "");
        if (type == "llama") {
            return Architecture::Llama;
        }
        if (type == "qwen2") {
            return Architecture::Qwen2;
        }
        if (type == "qwen3") {
            return Architecture::Qwen3;
        }
        reader.fail("model_type",
            "unsupported model_type '" + type + "' (supported: llama, qwen2, qwen3, i.e. " + supportedArchitectures()
                + ")");
    }
    reader.fail("architectures", "missing (supported: " + supportedArchitectures() + ")");
}

RopeScaling parseRopeScaling(const std::string& file, const ConfigReader& reader)
{
    RopeScaling scaling;
    const json* value = reader.find("rope_scaling");
    if (!value) {
        return scaling;
    }
    if (!value->is_object()) {
        reader.fail("rope_scaling", std::string("expected null or an object, got ") + value->type_name());
    }
    const ConfigReader rope(file, *value, reader.location("rope_scaling"));
    // Transformers renamed `type` to `rope_type`; older configs still carry `type`.
    const std::string typeKey = rope.find("rope_type") ? "rope_type" : "type";
    const std::string type = rope.optionalString(typeKey, "");
    if (type == "default") {
        return scaling;
    }
    if (type != "llama3") {
        rope.fail(typeKey,
            "unsupported rope scaling type '" + type + "' (supported: " + std::string(kSupportedRopeTypes) + ")");
    }
    scaling.type = "llama3";
    scaling.factor = rope.requiredDouble("factor");
    scaling.lowFreqFactor = rope.requiredDouble("low_freq_factor");
    scaling.highFreqFactor = rope.requiredDouble("high_freq_factor");
    scaling.originalMaxPositionEmbeddings
        = rope.positive("original_max_position_embeddings", rope.requiredInt("original_max_position_embeddings"));
    if (!(scaling.factor > 0.0)) {
        rope.fail("factor", "must be positive");
    }
    if (!(scaling.lowFreqFactor > 0.0)) {
        rope.fail("low_freq_factor", "must be positive");
    }
    // The llama3 formula interpolates between the two wavelength bounds; equal bounds divide by zero.
    if (!(scaling.highFreqFactor > scaling.lowFreqFactor)) {
        rope.fail("high_freq_factor", "must be greater than low_freq_factor");
    }
    return scaling;
}

std::vector<std::int64_t> parseEos(const ConfigReader& reader)
{
    const json* value = reader.find("eos_token_id");
    if (!value) {
        return {};
    }
    if (value->is_array()) {
        std::vector<std::int64_t> ids;
        for (std::size_t i = 0; i < value->size(); ++i) {
            ids.push_back(reader.toInt("eos_token_id[" + std::to_string(i) + "]", (*value)[i]));
        }
        return ids;
    }
    if (!value->is_number_integer()) {
        reader.fail(
            "eos_token_id", std::string("expected an integer or a list of integers, got ") + value->type_name());
    }
    return {reader.toInt("eos_token_id", *value)};
}

} // namespace

std::string toString(Architecture architecture)
{
    switch (architecture) {
    case Architecture::Llama:
        return "LlamaForCausalLM";
    case Architecture::Qwen2:
        return "Qwen2ForCausalLM";
    case Architecture::Qwen3:
        return "Qwen3ForCausalLM";
    }
    return "unknown";
}

std::string supportedArchitectures()
{
    return "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";
}

namespace {

// parameterCount() with every product and sum checked: false when some step leaves int64.
bool parameterCountFits(const ModelConfig& c)
{
    std::int64_t q = 0, kv = 0, embedding = 0, layer = 0, term = 0, total = 0;
    const auto mul = [](std::int64_t a, std::int64_t b, std::int64_t& out) { return !__builtin_mul_overflow(a, b, &out); };
    const auto add = [](std::int64_t& sum, std::int64_t value) { return !__builtin_add_overflow(sum, value, &sum); };
    if (!mul(c.numHeads, c.headDim, q) || !mul(c.numKeyValueHeads, c.headDim, kv)
        || !mul(c.vocabSize, c.hiddenSize, embedding)) {
        return false;
    }
    // q and o (2 * hidden * q), k and v (2 * hidden * kv), biases, norms, gate/up/down (3 * hidden * intermediate).
    if (!mul(c.hiddenSize, q, term) || !mul(term, 2, term) || !add(layer, term) || !mul(c.hiddenSize, kv, term)
        || !mul(term, 2, term) || !add(layer, term) || !add(layer, q) || !mul(kv, 2, term) || !add(layer, term)
        || !add(layer, c.hiddenSize) || !mul(c.headDim, 2, term) || !add(layer, term)
        || !mul(c.hiddenSize, c.intermediateSize, term) || !mul(term, 3, term) || !add(layer, term)
        || !mul(c.hiddenSize, 2, term) || !add(layer, term)) {
        return false;
    }
    return mul(c.numLayers, layer, total) && add(total, embedding) && add(total, embedding) && add(total, c.hiddenSize);
}

} // namespace

std::int64_t ModelConfig::parameterCount() const
{
    const std::int64_t embedding = vocabSize * hiddenSize;
    std::int64_t layer = hiddenSize * qSize() + 2 * hiddenSize * kvSize() + qSize() * hiddenSize; // q, k, v, o
    if (attentionBias) {
        layer += qSize() + 2 * kvSize();
    }
    if (outputBias) {
        layer += hiddenSize;
    }
    if (qkNorm) {
        layer += 2 * headDim; // q_norm and k_norm are per head dimension, shared by all heads
    }
    layer += 3 * hiddenSize * intermediateSize; // gate, up, down
    layer += 2 * hiddenSize; // input_layernorm, post_attention_layernorm
    return embedding + numLayers * layer + hiddenSize + (tieWordEmbeddings ? 0 : embedding);
}

bool operator==(const RopeScaling& a, const RopeScaling& b)
{
    if (a.type != b.type) {
        return false;
    }
    // Without scaling the factors mean nothing, so they do not distinguish two configurations.
    return a.type == "none"
        || (a.factor == b.factor && a.lowFreqFactor == b.lowFreqFactor && a.highFreqFactor == b.highFreqFactor
            && a.originalMaxPositionEmbeddings == b.originalMaxPositionEmbeddings);
}

bool operator==(const ModelConfig& a, const ModelConfig& b)
{
    return a.architecture == b.architecture && a.vocabSize == b.vocabSize && a.hiddenSize == b.hiddenSize
        && a.intermediateSize == b.intermediateSize && a.numLayers == b.numLayers && a.numHeads == b.numHeads
        && a.numKeyValueHeads == b.numKeyValueHeads && a.headDim == b.headDim && a.rmsNormEps == b.rmsNormEps
        && a.ropeTheta == b.ropeTheta && a.ropeScaling == b.ropeScaling
        && a.maxPositionEmbeddings == b.maxPositionEmbeddings && a.tieWordEmbeddings == b.tieWordEmbeddings
        && a.attentionBias == b.attentionBias && a.outputBias == b.outputBias && a.qkNorm == b.qkNorm
        && a.bosTokenId == b.bosTokenId && a.eosTokenIds == b.eosTokenIds && a.torchDtype == b.torchDtype;
}

ModelConfig parseConfig(const std::string& jsonText, const std::string& file)
{
    if (const std::size_t deep = jsonNestingTooDeep(jsonText.data(), jsonText.data() + jsonText.size());
        deep != std::string::npos) {
        throw InputError(file, lineColumnOf(jsonText.data(), jsonText.data() + jsonText.size(), deep),
            nestingTooDeepDetail());
    }
    json root;
    try {
        root = json::parse(jsonText);
    } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
        throw InputError(file, "", "invalid JSON: " + jsonErrorDetail(error));
    }
    if (!root.is_object()) {
        throw InputError(file, "", std::string("expected a JSON object, got ") + root.type_name());
    }
    const ConfigReader reader(file, root);

    ModelConfig config;
    config.architecture = parseArchitecture(reader, root);
    config.vocabSize = reader.positive("vocab_size", reader.requiredInt("vocab_size"));
    config.hiddenSize = reader.positive("hidden_size", reader.requiredInt("hidden_size"));
    config.intermediateSize = reader.positive("intermediate_size", reader.requiredInt("intermediate_size"));
    config.numLayers = reader.positive("num_hidden_layers", reader.requiredInt("num_hidden_layers"));
    // Much of the tool works per layer (module lists, recipe plans, KV caches) before any weight is read; a
    // model directory's checkpoint bounds the count further (checkLayersAgainstCheckpoint).
    if (config.numLayers > ModelConfig::kMaxLayers) {
        reader.fail("num_hidden_layers",
            std::to_string(config.numLayers) + " layers, over the limit of " + std::to_string(ModelConfig::kMaxLayers)
                + " (the largest released models have under 200)");
    }
    config.numHeads = reader.positive("num_attention_heads", reader.requiredInt("num_attention_heads"));
    config.numKeyValueHeads
        = reader.positive("num_key_value_heads", reader.optionalInt("num_key_value_heads", config.numHeads));
    for (const auto& [key, heads] : {std::pair<const char*, std::int64_t> {"num_attention_heads", config.numHeads},
             std::pair<const char*, std::int64_t> {"num_key_value_heads", config.numKeyValueHeads}}) {
        if (heads > ModelConfig::kMaxHeads) {
            reader.fail(key,
                std::to_string(heads) + " heads, over the limit of " + std::to_string(ModelConfig::kMaxHeads)
                    + " (the largest released models have 128)");
        }
    }
    if (config.numHeads % config.numKeyValueHeads != 0) {
        reader.fail("num_key_value_heads",
            "num_attention_heads (" + std::to_string(config.numHeads) + ") is not a multiple of num_key_value_heads ("
                + std::to_string(config.numKeyValueHeads) + ")");
    }

    if (reader.find("head_dim")) {
        config.headDim = reader.positive("head_dim", reader.requiredInt("head_dim"));
    } else if (config.architecture == Architecture::Qwen3) {
        // Qwen3Config defaults head_dim to 128 rather than hidden/heads; guessing either would silently build
        // a different model, so the file has to say.
        reader.fail("head_dim", "missing required key (Qwen3ForCausalLM configs state head_dim explicitly)");
    } else {
        if (config.hiddenSize % config.numHeads != 0) {
            reader.fail("num_attention_heads",
                "hidden_size (" + std::to_string(config.hiddenSize) + ") is not a multiple of num_attention_heads ("
                    + std::to_string(config.numHeads) + ") and no head_dim is given");
        }
        config.headDim = config.hiddenSize / config.numHeads;
    }
    if (config.headDim > ModelConfig::kMaxHeadDim) {
        reader.fail("head_dim",
            "head dimension " + std::to_string(config.headDim) + ", over the limit of "
                + std::to_string(ModelConfig::kMaxHeadDim) + " (the largest released models have 256)");
    }
    // Rotary embeddings rotate pairs of dimensions.
    if (config.headDim % 2 != 0) {
        reader.fail(
            "head_dim", "head dimension " + std::to_string(config.headDim) + " must be even for rotary embeddings");
    }

    config.rmsNormEps = reader.optionalDouble("rms_norm_eps", config.rmsNormEps);
    if (!(config.rmsNormEps > 0.0)) {
        reader.fail("rms_norm_eps", "must be positive");
    }
    config.ropeTheta = reader.optionalDouble("rope_theta", config.ropeTheta);
    if (!(config.ropeTheta > 0.0)) {
        reader.fail("rope_theta", "must be positive");
    }
    config.ropeScaling = parseRopeScaling(file, reader);
    config.maxPositionEmbeddings = reader.positive(
        "max_position_embeddings", reader.optionalInt("max_position_embeddings", config.maxPositionEmbeddings));
    config.tieWordEmbeddings = reader.optionalBool("tie_word_embeddings", false);

    switch (config.architecture) {
    case Architecture::Llama:
        config.attentionBias = reader.optionalBool("attention_bias", false);
        config.outputBias = config.attentionBias;
        config.qkNorm = false;
        break;
    case Architecture::Qwen2:
        // Qwen2's q/k/v projections always carry a bias in Transformers; honour an explicit false.
        config.attentionBias = reader.optionalBool("attention_bias", true);
        config.outputBias = false;
        config.qkNorm = false;
        break;
    case Architecture::Qwen3:
        config.attentionBias = reader.optionalBool("attention_bias", false);
        config.outputBias = config.attentionBias;
        config.qkNorm = true;
        break;
    }
    if (reader.optionalBool("mlp_bias", false)) {
        reader.fail("mlp_bias", "MLP biases are not supported");
    }
    if (reader.optionalBool("use_sliding_window", false)) {
        reader.fail("use_sliding_window", "sliding-window attention is not supported");
    }
    const std::string activation = reader.optionalString("hidden_act", "silu");
    if (activation != "silu") {
        reader.fail("hidden_act", "unsupported activation '" + activation + "' (supported: silu)");
    }

    // Token ids index the embedding: anything outside [0, vocab_size) would stop generation never (eos) or
    // read past the table.
    const auto checkTokenId = [&](const std::string& key, std::int64_t id) {
        if (id < 0 || id >= config.vocabSize) {
            reader.fail(key,
                "token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(config.vocabSize - 1)
                    + ", vocab_size " + std::to_string(config.vocabSize) + ")");
        }
    };
    if (const json* bos = reader.find("bos_token_id")) {
        config.bosTokenId = reader.toInt("bos_token_id", *bos);
        checkTokenId("bos_token_id", *config.bosTokenId);
    }
    config.eosTokenIds = parseEos(reader);
    for (std::size_t i = 0; i < config.eosTokenIds.size(); ++i) {
        const bool list = reader.find("eos_token_id")->is_array();
        checkTokenId(list ? "eos_token_id[" + std::to_string(i) + "]" : "eos_token_id", config.eosTokenIds[i]);
    }

    // Transformers 4.56 renamed torch_dtype to dtype.
    const std::string dtypeKey = reader.find("torch_dtype") ? "torch_dtype" : "dtype";
    config.torchDtype = reader.optionalString(dtypeKey, config.torchDtype);
    if (config.torchDtype != "bfloat16" && config.torchDtype != "float16" && config.torchDtype != "float32") {
        reader.fail(dtypeKey,
            "unsupported dtype '" + config.torchDtype + "' (supported: " + std::string(kSupportedDtypes) + ")");
    }
    // parameterCount(), expectedTensors() and the memory estimates multiply these sizes unchecked.
    if (!parameterCountFits(config)) {
        reader.fail("hidden_size", "the sizes (vocab_size, hidden_size, intermediate_size, heads, head_dim, layers) "
                                   "imply more parameters than a 64-bit count holds");
    }
    return config;
}

ModelConfig loadConfig(const std::string& configPath)
{
    return parseConfig(readInputFile(configPath, limits::kConfigFile, "model configuration"), configPath);
}

std::string configToJson(const ModelConfig& config)
{
    nlohmann::ordered_json j;
    j["architectures"] = {toString(config.architecture)};
    switch (config.architecture) {
    case Architecture::Llama:
        j["model_type"] = "llama";
        break;
    case Architecture::Qwen2:
        j["model_type"] = "qwen2";
        break;
    case Architecture::Qwen3:
        j["model_type"] = "qwen3";
        break;
    }
    j["vocab_size"] = config.vocabSize;
    j["hidden_size"] = config.hiddenSize;
    j["intermediate_size"] = config.intermediateSize;
    j["num_hidden_layers"] = config.numLayers;
    j["num_attention_heads"] = config.numHeads;
    j["num_key_value_heads"] = config.numKeyValueHeads;
    j["head_dim"] = config.headDim;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = config.rmsNormEps;
    j["rope_theta"] = config.ropeTheta;
    if (config.ropeScaling.type == "none") {
        j["rope_scaling"] = nullptr;
    } else {
        j["rope_scaling"] = {{"rope_type", config.ropeScaling.type}, {"factor", config.ropeScaling.factor},
            {"low_freq_factor", config.ropeScaling.lowFreqFactor},
            {"high_freq_factor", config.ropeScaling.highFreqFactor},
            {"original_max_position_embeddings", config.ropeScaling.originalMaxPositionEmbeddings}};
    }
    j["max_position_embeddings"] = config.maxPositionEmbeddings;
    j["tie_word_embeddings"] = config.tieWordEmbeddings;
    j["attention_bias"] = config.attentionBias;
    if (config.architecture != Architecture::Llama) {
        j["use_sliding_window"] = false;
    }
    j["bos_token_id"] = config.bosTokenId ? nlohmann::ordered_json(*config.bosTokenId) : nlohmann::ordered_json();
    if (config.eosTokenIds.empty()) {
        j["eos_token_id"] = nullptr;
    } else if (config.eosTokenIds.size() == 1) {
        j["eos_token_id"] = config.eosTokenIds.front();
    } else {
        j["eos_token_id"] = config.eosTokenIds;
    }
    j["torch_dtype"] = config.torchDtype;
    return j.dump(2) + "\n";
}

} // namespace mismatch::model

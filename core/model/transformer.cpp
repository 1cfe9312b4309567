#include "core/model/transformer.h"

#include "core/model/memory_check.h"
#include "core/model/transformer_linear.h"

#include "core/common/message_text.h"
#include "core/common/error.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

namespace mismatch::model {

namespace {

std::string layerPrefix(std::int64_t layer)
{
    return "model.layers." + std::to_string(layer) + ".";
}

bool isNormWeight(const std::string& name)
{
    const auto endsWith = [&](const std::string& suffix) {
        return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return endsWith("layernorm.weight") || endsWith("_norm.weight") || name == "model.norm.weight";
}

// Norms and softmax accumulate in FP32, or in float64 when the whole forward is float64.
at::ScalarType accumulateType(at::ScalarType compute)
{
    return compute == at::kDouble ? at::kDouble : at::kFloat;
}

} // namespace

// ---------------------------------------------------------------------------------------------------------------
// TransformerWeights

const at::Tensor& TransformerWeights::get(const std::string& name) const
{
    const auto found = tensors_.find(name);
    if (found == tensors_.end()) {
        throw Error("transformer weights: no tensor named '" + name + "'");
    }
    return found->second;
}

void TransformerWeights::set(const std::string& name, at::Tensor tensor)
{
    if (tensors_.count(name) == 0) {
        names_.push_back(name);
    }
    tensors_[name] = std::move(tensor);
}

std::vector<std::pair<std::string, at::Tensor>> TransformerWeights::named() const
{
    std::vector<std::pair<std::string, at::Tensor>> out;
    out.reserve(names_.size());
    for (const std::string& name : names_) {
        out.emplace_back(name, tensors_.at(name));
    }
    return out;
}

std::int64_t TransformerWeights::numel() const
{
    std::int64_t total = 0;
    for (const auto& entry : tensors_) {
        total += entry.second.numel();
    }
    return total;
}

std::vector<at::Tensor> TransformerWeights::parameters()
{
    std::vector<at::Tensor> out;
    out.reserve(names_.size());
    for (const std::string& name : names_) {
        at::Tensor& tensor = tensors_.at(name);
        if (!tensor.requires_grad()) {
            tensor.requires_grad_(true);
        }
        out.push_back(tensor);
    }
    return out;
}

TransformerWeights TransformerWeights::clone() const
{
    TransformerWeights copy;
    for (const std::string& name : names_) {
        copy.set(name, tensors_.at(name).detach().clone());
    }
    return copy;
}

TransformerWeights TransformerWeights::to(at::ScalarType dtype) const
{
    TransformerWeights copy;
    for (const std::string& name : names_) {
        // clone() so that a same-dtype conversion still yields an independent leaf.
        copy.set(name, tensors_.at(name).detach().to(dtype).clone());
    }
    return copy;
}

// ---------------------------------------------------------------------------------------------------------------
// Shapes, names, construction

std::vector<std::string> moduleNames(const ModelConfig& config)
{
    std::vector<std::string> names {"embed_tokens"};
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const std::string prefix = layerPrefix(layer);
        for (const char* module : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
            names.push_back(prefix + module);
        }
    }
    names.push_back("lm_head");
    return names;
}

void validateWeights(const ModelConfig& config, const TransformerWeights& weights, const std::string& source)
{
    for (const auto& [name, shape] : expectedTensors(config)) {
        if (!weights.contains(name)) {
            throw InputError(source, name, "missing tensor, expected shape " + shapeText(shape));
        }
        const at::Tensor& tensor = weights.get(name);
        if (!tensor.defined() || tensor.sizes() != at::IntArrayRef(shape)) {
            throw InputError(source, name,
                "shape " + (tensor.defined() ? shapeText(tensor.sizes()) : std::string("undefined")) + ", expected "
                    + shapeText(shape));
        }
        if (!at::isFloatingType(tensor.scalar_type())) {
            throw InputError(source, name,
                "dtype " + std::string(c10::toString(tensor.scalar_type())) + ", expected a floating-point tensor");
        }
    }
}

TransformerWeights onDevice(const TransformerWeights& weights, const at::Device& device)
{
    TransformerWeights moved;
    for (const auto& [name, tensor] : weights.named()) {
        moved.set(name, tensor.device() == device ? tensor : tensor.to(device));
    }
    return moved;
}

at::Device deviceOf(const TransformerWeights& weights)
{
    return weights.size() == 0 ? at::Device(at::kCPU) : weights.get(weights.names().front()).device();
}

TransformerWeights randomWeights(const ModelConfig& config, std::uint64_t seed, double stddev)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const auto options = at::TensorOptions().dtype(at::kFloat);
    constexpr double kNormNoise = 0.1; // norm weights 1 + N(0, 0.1^2)
    TransformerWeights weights;
    for (const auto& [name, shape] : expectedTensors(config)) {
        at::Tensor noise = at::randn(shape, generator, options);
        weights.set(name, isNormWeight(name) ? 1.0 + kNormNoise * noise : stddev * noise);
    }
    return weights;
}

TransformerWeights loadWeights(const std::string& modelDir, const ModelConfig& config, LoadPrecision precision)
{
    const Checkpoint checkpoint = Checkpoint::open(modelDir);
    checkLayersAgainstCheckpoint(config, checkpoint);
    // Names and shapes first, then the memory the FP32 weights will take (memory_check.h), before any tensor is
    // read: a model that cannot fit is refused with nothing allocated.
    std::int64_t parameters = 0;
    std::uint64_t storedBytes = 0;
    std::uint64_t largestStored = 0;
    for (const auto& [name, shape] : expectedTensors(config)) {
        if (!checkpoint.contains(name)) {
            throw InputError(modelDir, name, "missing tensor, expected shape " + shapeText(shape));
        }
        const TensorInfo& info = checkpoint.info(name);
        if (info.shape != shape) {
            throw InputError(modelDir, name, "shape " + shapeText(info.shape) + ", expected " + shapeText(shape));
        }
        std::int64_t elements = 1;
        for (const std::int64_t size : shape) {
            elements *= size;
        }
        parameters += elements;
        storedBytes += info.end - info.begin;
        if (info.dtype != DType::F32) { // converted through a copy in the stored dtype
            largestStored = std::max<std::uint64_t>(largestStored, info.end - info.begin);
        }
    }
    if (precision == LoadPrecision::Float32) {
        checkModelFits(modelDir, parameters, static_cast<std::uint64_t>(parameters) * sizeof(float) + largestStored,
            "as float32");
    } else {
        checkModelFits(modelDir, parameters, storedBytes, "in their stored dtypes");
    }
    checkpoint.adviseWillNeed(); // the files read ahead while the first tensors' pages are prepared
    TransformerWeights weights;
    for (const auto& [name, shape] : expectedTensors(config)) {
        if (!checkpoint.contains(name)) {
            throw InputError(modelDir, name, "missing tensor, expected shape " + shapeText(shape));
        }
        const TensorInfo& info = checkpoint.info(name);
        if (info.shape != shape) {
            throw InputError(modelDir, name, "shape " + shapeText(info.shape) + ", expected " + shapeText(shape));
        }
        at::Tensor tensor = checkpoint.load(name);
        weights.set(name, precision == LoadPrecision::Float32 ? tensor.to(at::kFloat) : tensor);
    }
    requireFiniteWeights(weights, modelDir);
    return weights;
}

void saveWeights(const std::string& modelDir, const TransformerWeights& weights, DType dtype)
{
    std::error_code error;
    std::filesystem::create_directories(modelDir, error);
    if (error) {
        throw InputError(modelDir, "", "cannot create directory: " + error.message());
    }
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    tensors.reserve(weights.size());
    for (const auto& [name, tensor] : weights.named()) {
        tensors.emplace_back(name, tensor.detach().to(scalarType(dtype)).contiguous());
    }
    writeSafetensors((std::filesystem::path(modelDir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps)
{
    const at::ScalarType accumulate = accumulateType(x.scalar_type());
    const at::Tensor wide = x.to(accumulate);
    const at::Tensor normalized = wide * at::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps);
    // The weight is rounded to x's dtype first: a BF16 model has BF16 norm weights, whether it was given FP32
    // master weights or BF16 ones.
    return (normalized * weight.to(x.scalar_type()).to(accumulate)).to(x.scalar_type());
}

// ---------------------------------------------------------------------------------------------------------------
// KV cache

DenseKvCache::DenseKvCache(std::int64_t numLayers)
    : keys_(static_cast<std::size_t>(numLayers))
    , values_(static_cast<std::size_t>(numLayers))
{
}

std::pair<at::Tensor, at::Tensor> DenseKvCache::append(
    std::int64_t layer, const at::Tensor& keys, const at::Tensor& values)
{
    TORCH_CHECK(layer >= 0 && layer < static_cast<std::int64_t>(keys_.size()), "KV cache has no layer ", layer);
    at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    // Only positions committed by advance() count: a forward that threw half-way leaves no partial state.
    if (storedKeys.defined() && storedKeys.size(2) > length_) {
        storedKeys = storedKeys.narrow(2, 0, length_);
        storedValues = storedValues.narrow(2, 0, length_);
    }
    if (!storedKeys.defined() || length_ == 0) {
        storedKeys = keys;
        storedValues = values;
    } else {
        storedKeys = at::cat({storedKeys, keys}, 2);
        storedValues = at::cat({storedValues, values}, 2);
    }
    return {storedKeys, storedValues};
}

void DenseKvCache::advance(std::int64_t tokens)
{
    length_ += tokens;
}

void DenseKvCache::clear()
{
    for (std::size_t layer = 0; layer < keys_.size(); ++layer) {
        keys_[layer] = at::Tensor();
        values_[layer] = at::Tensor();
    }
    length_ = 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Transformer

Transformer::Transformer(ModelConfig config, TransformerWeights weights)
    : config_(std::move(config))
    , weights_(std::move(weights))
{
    TORCH_CHECK(
        config_.numHeads > 0 && config_.numKeyValueHeads > 0 && config_.numHeads % config_.numKeyValueHeads == 0,
        "numHeads (", config_.numHeads, ") must be a positive multiple of numKeyValueHeads (", config_.numKeyValueHeads,
        ")");
    inverseFrequencies_ = ropeInverseFrequencies(config_);
    bindWeights();
}

void Transformer::setWeights(TransformerWeights weights)
{
    weights_ = std::move(weights);
    bindWeights();
}

void Transformer::bindWeights()
{
    validateWeights(config_, weights_, "transformer weights");
    const auto optional
        = [&](const std::string& name) { return weights_.contains(name) ? weights_.get(name) : at::Tensor(); };
    layers_.clear();
    for (std::int64_t index = 0; index < config_.numLayers; ++index) {
        const std::string prefix = layerPrefix(index);
        Layer layer;
        layer.qName = prefix + "self_attn.q_proj";
        layer.kName = prefix + "self_attn.k_proj";
        layer.vName = prefix + "self_attn.v_proj";
        layer.oName = prefix + "self_attn.o_proj";
        layer.gateName = prefix + "mlp.gate_proj";
        layer.upName = prefix + "mlp.up_proj";
        layer.downName = prefix + "mlp.down_proj";
        layer.inputNorm = weights_.get(prefix + "input_layernorm.weight");
        layer.postAttentionNorm = weights_.get(prefix + "post_attention_layernorm.weight");
        layer.qWeight = weights_.get(layer.qName + ".weight");
        layer.kWeight = weights_.get(layer.kName + ".weight");
        layer.vWeight = weights_.get(layer.vName + ".weight");
        layer.oWeight = weights_.get(layer.oName + ".weight");
        if (config_.attentionBias) {
            layer.qBias = weights_.get(layer.qName + ".bias");
            layer.kBias = weights_.get(layer.kName + ".bias");
            layer.vBias = weights_.get(layer.vName + ".bias");
        }
        if (config_.outputBias) {
            layer.oBias = weights_.get(layer.oName + ".bias");
        }
        if (config_.qkNorm) {
            layer.qNorm = weights_.get(prefix + "self_attn.q_norm.weight");
            layer.kNorm = weights_.get(prefix + "self_attn.k_norm.weight");
        }
        layer.gateWeight = weights_.get(layer.gateName + ".weight");
        layer.upWeight = weights_.get(layer.upName + ".weight");
        layer.downWeight = weights_.get(layer.downName + ".weight");
        layers_.push_back(std::move(layer));
    }
    embedWeight_ = weights_.get("model.embed_tokens.weight");
    finalNorm_ = weights_.get("model.norm.weight");
    lmHeadWeight_ = config_.tieWordEmbeddings ? embedWeight_ : optional("lm_head.weight");
}

void NonFiniteTrace::check(
    const std::string& where, const char* what, const at::Tensor& output, const at::Tensor& input, bool isLinear)
{
    if (found() || at::isfinite(output).all().item<bool>()) {
        return;
    }
    point = where;
    operation = what;
    linear = isLinear;
    nan = at::isnan(output).any().item<bool>();
    const at::Tensor magnitude = input.abs().to(at::kDouble);
    inputMagnitude = at::isnan(magnitude).any().item<bool>() ? std::numeric_limits<double>::quiet_NaN()
                                                             : magnitude.max().item<double>();
}

at::Tensor Transformer::linear(
    const std::string& module, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const
{
    return linearWithWidening(x, weight, bias);
}

at::Tensor Transformer::embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const
{
    return at::embedding(weight, ids);
}

at::Tensor Transformer::forward(
    const at::Tensor& ids, const at::Tensor& attentionMask, const ForwardOptions& options) const
{
    return forward(ids, attentionMask, at::Tensor(), nullptr, options);
}

at::Tensor Transformer::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
    at::ScalarType accumulate) const
{
    // q [B, H, T, D]; k, v [B, KV, S, D]; bias [B, 1, T, S] additive (0 or -inf).
    // GQA without copying K/V: the `groups` query heads sharing a KV head are stacked along the query axis.
    const std::int64_t batch = q.size(0);
    const std::int64_t heads = q.size(1);
    const std::int64_t queries = q.size(2);
    const std::int64_t headDim = q.size(3);
    const std::int64_t kvHeads = k.size(1);
    const std::int64_t keys = k.size(2);
    const std::int64_t groups = heads / kvHeads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(headDim));

    const at::Tensor grouped = q.reshape({batch, kvHeads, groups * queries, headDim});
    at::Tensor scores = at::matmul(grouped, k.transpose(-2, -1)).to(accumulate) * scale;
    scores = scores.view({batch, kvHeads, groups, queries, keys}) + bias.unsqueeze(1);
    const at::Tensor probabilities
        = at::softmax(scores, -1).to(q.scalar_type()).view({batch, kvHeads, groups * queries, keys});
    const at::Tensor out = at::matmul(probabilities, v); // [B, KV, groups * T, D]
    return out.view({batch, heads, queries, headDim}).transpose(1, 2).reshape({batch, queries, heads * headDim});
}

at::Tensor Transformer::forward(const at::Tensor& tokenIds, const at::Tensor& attentionMask,
    const at::Tensor& positions, KvCache* cache, const ForwardOptions& options) const
{
    // The forward runs where the weights are (common/device.h): ids, mask and positions from the host move there.
    const at::Device device = embedWeight_.device();
    const at::Tensor ids = tokenIds.device() == device ? tokenIds : tokenIds.to(device);
    TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong, "ids must be [B, T] int64, got ", ids.sizes(), " ",
        ids.scalar_type());
    const std::int64_t batch = ids.size(0);
    const std::int64_t length = ids.size(1);
    const std::int64_t past = cache ? cache->length() : 0;
    const std::int64_t total = past + length;
    TORCH_CHECK(attentionMask.dim() == 2 && attentionMask.size(0) == batch && attentionMask.size(1) == total,
        "attention mask must be [", batch, ", ", total, "] (cached + new positions), got ", attentionMask.sizes());
    const at::ScalarType compute = options.compute;
    TORCH_CHECK(at::isFloatingType(compute), "compute dtype must be floating, got ", compute);
    const at::ScalarType accumulate = accumulateType(compute);
    const double eps = config_.rmsNormEps;
    const std::int64_t heads = config_.numHeads;
    const std::int64_t kvHeads = config_.numKeyValueHeads;
    const std::int64_t headDim = config_.headDim;

    const at::Tensor keyMask = attentionMask.to(device).ne(0); // [B, S]
    at::Tensor positionIds = positions;
    if (!positionIds.defined()) {
        // Position of a real token = number of real tokens before it; padding gets 0 (never attended to).
        positionIds = (keyMask.to(at::kLong).cumsum(1) - 1).clamp_min(0).narrow(1, past, length);
    }
    TORCH_CHECK(positionIds.dim() == 2 && positionIds.size(0) == batch && positionIds.size(1) == length,
        "positions must be [", batch, ", ", length, "], got ", positionIds.sizes());
    const RopeTables rope = ropeTables(inverseFrequencies_, positionIds.to(device), compute);

    // Query t (absolute position past + t) sees key s when s <= past + t and s is a real token. It always sees
    // itself, so that a padding query has a finite softmax instead of NaNs that would poison gradients.
    const auto longOptions = at::TensorOptions().dtype(at::kLong).device(device);
    const at::Tensor keyIndex = at::arange(total, longOptions).unsqueeze(0); // [1, S]
    const at::Tensor queryIndex = at::arange(past, total, longOptions).unsqueeze(1); // [T, 1]
    const at::Tensor causal = keyIndex.le(queryIndex).unsqueeze(0); // [1, T, S]
    const at::Tensor self = keyIndex.eq(queryIndex).unsqueeze(0); // [1, T, S]
    const at::Tensor allowed = causal.logical_and(keyMask.unsqueeze(1).logical_or(self)); // [B, T, S]
    const at::Tensor bias
        = at::zeros({batch, 1, length, total}, at::TensorOptions().dtype(accumulate).device(device))
              .masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<double>::infinity());

    NonFiniteTrace* const trace = options.trace;
    // `where` + `suffix` names the step; the name is made only when a trace is kept (no string work otherwise: this
    // is every decoding step's path).
    const auto checked = [trace](const at::Tensor& output, const std::string& where, const char* suffix,
                             const char* what, const at::Tensor& input, bool isLinear = false) {
        if (trace) {
            trace->check(where + suffix, what, output, input, isLinear);
        }
        return output;
    };
    const auto traced = [&](const std::string& module, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias) {
        return checked(linear(module, x, weight, bias), module, "", "linear product", x, true);
    };
    static const std::string kEmbedding = "embed_tokens";
    static const std::string kFinalNorm = "model.norm";
    at::Tensor x = checked(embed(kEmbedding, embedWeight_, ids).to(compute), kEmbedding, "", "embedding",
        embedWeight_); // [B, T, hidden]
    for (std::int64_t index = 0; index < config_.numLayers; ++index) {
        const Layer& layer = layers_[static_cast<std::size_t>(index)];
        const std::string prefix = trace ? "model.layers." + std::to_string(index) : std::string();
        const at::Tensor normed = checked(rmsNorm(x, layer.inputNorm, eps), prefix, ".input_layernorm", "rms norm", x);
        at::Tensor q = traced(layer.qName, normed, layer.qWeight, layer.qBias).view({batch, length, heads, headDim});
        at::Tensor k = traced(layer.kName, normed, layer.kWeight, layer.kBias).view({batch, length, kvHeads, headDim});
        at::Tensor v = traced(layer.vName, normed, layer.vWeight, layer.vBias).view({batch, length, kvHeads, headDim});
        if (config_.qkNorm) {
            q = checked(rmsNorm(q, layer.qNorm, eps), prefix, ".self_attn.q_norm", "rms norm", q); // Qwen3: per head
            k = checked(rmsNorm(k, layer.kNorm, eps), prefix, ".self_attn.k_norm", "rms norm", k); // before RoPE
        }
        q = applyRope(q.transpose(1, 2), rope); // [B, H, T, D]
        k = applyRope(k.transpose(1, 2), rope); // [B, KV, T, D]
        v = v.transpose(1, 2);
        at::Tensor attended = cache ? cache->appendAndAttend(index, q, k, v, bias) : at::Tensor();
        if (!attended.defined()) {
            if (cache) {
                std::tie(k, v) = cache->append(index, k, v);
            }
            attended = attention(q, k, v, bias, accumulate);
        }
        checked(attended, prefix, ".self_attn", "attention (RoPE, softmax, weighted values)", q);
        const at::Tensor o = traced(layer.oName, attended, layer.oWeight, layer.oBias);
        x = checked(x + o, prefix, ".self_attn", "residual add after attention", x);

        const at::Tensor normedMlp
            = checked(rmsNorm(x, layer.postAttentionNorm, eps), prefix, ".post_attention_layernorm", "rms norm", x);
        const at::Tensor gate = traced(layer.gateName, normedMlp, layer.gateWeight, at::Tensor());
        const at::Tensor up = traced(layer.upName, normedMlp, layer.upWeight, at::Tensor());
        const at::Tensor activated = checked(at::silu(gate) * up, prefix, ".mlp", "silu(gate) * up", gate);
        x = checked(x + traced(layer.downName, activated, layer.downWeight, at::Tensor()), prefix, ".mlp",
            "residual add after the MLP", x);
    }
    if (cache) {
        cache->advance(length);
    }
    if (options.lastPositions > 0 && options.lastPositions < length) {
        x = x.narrow(1, length - options.lastPositions, options.lastPositions);
    }
    x = checked(rmsNorm(x, finalNorm_, eps), kFinalNorm, "", "rms norm", x);
    const at::Tensor logits = traced("lm_head", x, lmHeadWeight_, at::Tensor()).to(accumulate);
    return options.logProbs ? at::log_softmax(logits, -1) : logits;
}

} // namespace mismatch::model

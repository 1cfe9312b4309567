#include "core/engine/engine_model.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/engine/module_names.h"
#include "core/model/transformer_linear.h"
#include "core/quant/fp8.h"
#include "core/quant/fp8_cpu_gemm.h"
#include "core/quant/quantize.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/fp8_ops.h"
#endif

namespace mismatch::engine {

namespace {

// The quantizers' InputErrors about a weight's values name only the element ("<input>:element [3, 4]: non-finite
// weight (inf)"): they do not know the tensor. A model's files are checked finite when loaded
// (model::requireFiniteWeights), so values that reach the engine non-finite came from what was done to them after.
template <class Make> auto namingTensor(const std::string& tensorName, Make make) -> decltype(make())
{
    try {
        return make();
    } catch (const InputError& error) {
        if (!error.file().empty()) {
            throw;
        }
        throw InputError("engine weights", tensorName + (error.location().empty() ? "" : " " + error.location()),
            error.detail()
                + " (the model's files are checked finite when loaded: these values come from weight noise, training "
                  "or a conversion after loading)");
    }
}

// A full-forward cache: stores nothing between calls, but rounds keys and values as the engine's paged cache
// does, so that a forward through it equals cached decoding position for position.
class QuantizingKvCache : public model::KvCache {
public:
    QuantizingKvCache(KvQuantizer& quantizer, std::int64_t numLayers, at::Tensor real)
        : quantizer_(quantizer)
        , dense_(numLayers)
        , real_(std::move(real))
    {
    }
    std::int64_t length() const override { return dense_.length(); }
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override
    {
        const at::Tensor real = real_.narrow(1, dense_.length(), keys.size(2));
        const auto [k, v] = quantizer_.quantize(layer, keys, values, real);
        return dense_.append(layer, k, v);
    }
    void advance(std::int64_t tokens) override { dense_.advance(tokens); }

private:
    KvQuantizer& quantizer_;
    model::DenseKvCache dense_;
    at::Tensor real_;
};

// Records, per layer, the amax of K and V over the real tokens (per KV head) of a BF16 forward.
class AmaxRecordingKvCache : public model::KvCache {
public:
    AmaxRecordingKvCache(std::vector<at::Tensor>& keyAmax, std::vector<at::Tensor>& valueAmax, at::Tensor real)
        : keyAmax_(keyAmax)
        , valueAmax_(valueAmax)
        , real_(std::move(real))
    {
    }
    std::int64_t length() const override { return 0; }
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override
    {
        // The BF16 engine's cache holds bf16 keys and values: their amax is what a calibration sees.
        const at::Tensor k = roundBf16(keys);
        const at::Tensor v = roundBf16(values);
        record(keyAmax_[static_cast<std::size_t>(layer)], k);
        record(valueAmax_[static_cast<std::size_t>(layer)], v);
        return {k, v};
    }
    void advance(std::int64_t) override { }

private:
    void record(at::Tensor& amax, const at::Tensor& kv) const
    {
        const at::Tensor keep = real_.to(kv.device()).view({real_.size(0), 1, real_.size(1), 1});
        const at::Tensor headAmax = at::where(keep, kv.abs(), at::zeros_like(kv)).amax({0, 2, 3}).to(at::kCPU);
        amax = amax.defined() ? at::maximum(amax, headAmax) : headAmax;
    }

    std::vector<at::Tensor>& keyAmax_;
    std::vector<at::Tensor>& valueAmax_;
    at::Tensor real_;
};

at::Tensor scalesFromHeadAmax(const at::Tensor& headAmax, quant::KvScales mode)
{
    const at::Tensor amax = mode == quant::KvScales::PerHead ? headAmax.contiguous() : headAmax.max().reshape({1});
    at::Tensor scales = at::empty({amax.numel()}, at::kFloat);
    for (std::int64_t i = 0; i < amax.numel(); ++i) {
        scales[i] = quant::scaleFromAmax(amax[i].item<float>(), quant::fp8Traits(quant::Fp8Format::E4M3).maxFinite);
    }
    return scales;
}

std::atomic<std::int64_t> nativeFp8Calls {0};
std::atomic<std::int64_t> deviceDequantizedFp8Calls {0};
std::atomic<std::int64_t> bf16DotFp8Calls {0};
std::atomic<std::int64_t> deviceFp8ActivationCalls {0};

// The module's input rounded to its activation format. FP8 activations on a CUDA device are rounded there
// (cuda::quantizeFp8 per row, then dequantizeFp8: the same codes, scales and float32 values as
// quant::fakeQuantizeActivations, which tests/gpu checks bit for bit) instead of a round trip through the host. The
// microscaling formats (mxfp8, mxfp4, nvfp4) are rounded by the CPU codec (quant/microscaling.h), on the host.
at::Tensor roundActivations(const at::Tensor& x, quant::ActivationFormat format)
{
    if (format == quant::ActivationFormat::Bf16) {
        return roundBf16(x);
    }
#if defined(MISMATCH_HAVE_CUDA)
    if (x.is_cuda() && format == quant::ActivationFormat::Fp8E4m3) {
        const at::Tensor rows = x.reshape({-1, x.size(-1)});
        ++deviceFp8ActivationCalls;
        const cuda::Fp8Tensor codes = cuda::quantizeFp8(rows, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row);
        return cuda::dequantizeFp8(codes).reshape(x.sizes());
    }
#endif
    return quant::fakeQuantizeActivations(x, format);
}

// Whether the CPU has native BF16 dot products (where oneDNN's BF16 GEMM beats FP32).
bool cpuHasNativeBf16()
{
#if defined(__x86_64__) && defined(__GNUC__)
    // AVX512-BF16 alone: every x86 CPU with AMX-BF16 (Sapphire Rapids and later) has it too, and clang 14 (the
    // sanitizer build's compiler) rejects "amx-bf16" as a feature name of __builtin_cpu_supports.
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return false;
#endif
}

#if defined(MISMATCH_HAVE_CUDA)
// The kernels' name for a weight granularity (fp8 weights have tensor, channel or block128 scales).
cuda::Fp8Scaling cudaScaling(const quant::WeightPrecision& weights)
{
    switch (quant::effectiveGranularity(weights.format, weights.granularity)) {
    case quant::Granularity::Channel:
        return cuda::Fp8Scaling::Row;
    case quant::Granularity::Block128:
        return cuda::Fp8Scaling::Block128;
    default:
        return cuda::Fp8Scaling::Tensor;
    }
}
#endif

quant::KvScales effectiveScales(const quant::KvPrecision& precision)
{
    // FP8 without a scale mode is per tensor (the recipe's default).
    return precision.scales == quant::KvScales::None ? quant::KvScales::PerTensor : precision.scales;
}

std::atomic<std::int64_t> deviceKvRoundCount {0};

#if defined(MISMATCH_HAVE_CUDA)
// quant::fakeQuantizeKv(kv, fp8_e4m3, mode, scales) for keys or values [B, kvHeads, T, headDim] on a CUDA device,
// computed there: rows of headDim in (b, h, t) order, each with its head's scale (per head: `scales` [kvHeads];
// per tensor: [1]), through cuda::quantizeFp8 with given row scales and dequantizeFp8 - the same codes and float32
// values as the host codec (tests/gpu). The scales live on the host (KvQuantizer keeps them there), so checking
// them as fakeQuantizeKv does costs no device synchronization.
at::Tensor roundKvOnDevice(const at::Tensor& kv, const at::Tensor& scales)
{
    const at::Tensor host = scales.to(at::kCPU).to(at::kFloat).contiguous();
    quant::requireUsableKvScales(host);
    const at::Tensor rows = kv.to(at::kFloat).contiguous().reshape({-1, kv.size(3)});
    const at::Tensor rowScales = host.to(kv.device())
                                     .reshape({1, -1, 1})
                                     .expand({kv.size(0), kv.size(1), kv.size(2)})
                                     .reshape({-1, 1})
                                     .contiguous();
    const cuda::Fp8Tensor codes = cuda::quantizeFp8(rows, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row, rowScales);
    return cuda::dequantizeFp8(codes).reshape(kv.sizes());
}
#endif

} // namespace

std::string toString(EnginePrecision precision)
{
    switch (precision) {
    case EnginePrecision::Fp32:
        return "fp32";
    case EnginePrecision::Bf16Reference:
        return "bf16";
    case EnginePrecision::Recipe:
        return "recipe";
    }
    return "unknown";
}

std::string toString(EngineKernels kernels)
{
    switch (kernels) {
    case EngineKernels::Auto:
        return "auto";
    case EngineKernels::Float32:
        return "float32";
    case EngineKernels::BFloat16:
        return "bfloat16";
    }
    return "auto";
}

namespace {

// MISMATCH_ENGINE_KERNELS when set.
std::optional<EngineKernels> kernelsFromEnvironment()
{
    const char* text = std::getenv("MISMATCH_ENGINE_KERNELS");
    if (!text || !*text) {
        return std::nullopt;
    }
    const std::string value = text;
    if (value == "float32") {
        return EngineKernels::Float32;
    }
    if (value == "bfloat16") {
        return EngineKernels::BFloat16;
    }
    throw InputError("MISMATCH_ENGINE_KERNELS", "", "expected float32 or bfloat16, got '" + value + "'");
}

} // namespace

EngineKernels resolveKernels(EngineKernels kernels)
{
    if (kernels != EngineKernels::Auto) {
        return kernels;
    }
    if (const auto chosen = kernelsFromEnvironment()) {
        return *chosen;
    }
    static const bool nativeBf16 = cpuHasNativeBf16();
    return nativeBf16 ? EngineKernels::BFloat16 : EngineKernels::Float32;
}

namespace {

// cuBLAS may sum the split-K partial products of a BF16 GEMM in bf16 unless told not to; the engine's function
// sums in float32. Set once for the whole process, before a device engine's first BF16 GEMM (other BF16 GEMMs of
// the process only gain precision). False where this LibTorch has no such setting.
bool keepCublasBf16ReductionsInFloat32()
{
#if defined(MISMATCH_TORCH_BF16_REDUCTION_SETTING)
    static std::once_flag once;
    std::call_once(once, [] { at::globalContext().setAllowBF16ReductionCuBLAS(false); });
    return true;
#else
    return false;
#endif
}

} // namespace

EngineKernels engineKernels(EngineKernels requested, const at::Device& device, const model::ModelConfig& config)
{
    const std::vector<std::int64_t> widths {config.hiddenSize, config.intermediateSize, config.qSize()};
    if (device.is_cpu()) {
        const EngineKernels kernels = resolveKernels(requested);
        // Auto's BFloat16 only where this LibTorch's BF16 GEMM computes the engine's function at these widths.
        return requested == EngineKernels::Auto && kernels == EngineKernels::BFloat16 && !bf16KernelsRoundOnce(widths)
            ? EngineKernels::Float32
            : kernels;
    }
    if (requested != EngineKernels::Auto) {
        // An explicit choice (a caller's, such as a test's) as given.
        if (requested == EngineKernels::BFloat16) {
            keepCublasBf16ReductionsInFloat32();
        }
        return requested;
    }
    // Auto, or MISMATCH_ENGINE_KERNELS: BFloat16 only where the reductions can be kept in float32 and the device's
    // GEMM then passes the rounding check (as MISMATCH_ENGINE_KERNELS=bfloat16 on the CPU is).
    if (kernelsFromEnvironment().value_or(EngineKernels::BFloat16) == EngineKernels::Float32
        || !keepCublasBf16ReductionsInFloat32()) {
        return EngineKernels::Float32;
    }
    return deviceBf16KernelsRoundOnce(device, widths) ? EngineKernels::BFloat16 : EngineKernels::Float32;
}

DeviceWeightLayout deviceWeightLayout(
    const std::string& module, const quant::ModulePrecision& precision, EngineKernels kernels)
{
#if defined(MISMATCH_HAVE_CUDA)
    if (precision.weights.format == quant::WeightFormat::Fp8E4m3
        && precision.activations.format == quant::ActivationFormat::Fp8E4m3 && module != "embed_tokens") {
        return DeviceWeightLayout::Fp8Codes;
    }
#else
    (void)module; // no kernels in this build: FP8 modules are emulated in float32
#endif
    if (precision.weights.format == quant::WeightFormat::Bf16
        && precision.activations.format == quant::ActivationFormat::Bf16 && kernels == EngineKernels::BFloat16) {
        return DeviceWeightLayout::Bf16;
    }
    return DeviceWeightLayout::Float32;
}

bool fp8TensorCoresTake(const quant::WeightPrecision& weights, std::int64_t outFeatures, std::int64_t inFeatures)
{
    return quant::effectiveGranularity(weights.format, weights.granularity) != quant::Granularity::Block128
        && outFeatures % 16 == 0 && inFeatures % 16 == 0;
}

bool bf16GemmRoundsOnce(const Bf16Gemm& gemm, const std::vector<std::int64_t>& inFeatures)
{
    const at::NoGradGuard noGrad;
    std::set<std::int64_t> widths(inFeatures.begin(), inFeatures.end());
    widths.insert({64, 4096});
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(20261201);
    constexpr std::int64_t kOutputs = 48;
    for (const std::int64_t width : widths) {
        for (const std::int64_t rows : {1, 8, 100}) {
            // Mixed magnitudes (a factor 2^+-4 per row and column) so that sums cancel and partial sums exceed the
            // total, which is where an extra rounding shows.
            const at::Tensor rowScale = at::pow(2.0, at::randint(-4, 5, {rows, 1}, generator).to(at::kFloat));
            const at::Tensor columnScale = at::pow(2.0, at::randint(-4, 5, {1, width}, generator).to(at::kFloat));
            const at::Tensor x = (at::randn({rows, width}, generator) * rowScale * columnScale).to(at::kBFloat16);
            const at::Tensor w = at::randn({kOutputs, width}, generator).to(at::kBFloat16);
            const at::Tensor xd = x.to(at::kDouble);
            const at::Tensor wd = w.to(at::kDouble);
            const at::Tensor exact = at::matmul(xd, wd.t());
            const at::Tensor magnitude = at::matmul(xd.abs(), wd.abs().t());
            // One bf16 ulp of |exact|: 2^(floor(log2 |exact|) - 7); at least the smallest normal's.
            const at::Tensor ulp = at::pow(2.0, at::floor(at::log2(exact.abs().clamp_min(1e-30))) - 7.0);
            const at::Tensor bound = ulp + 2.0 * static_cast<double>(width) * std::ldexp(1.0, -24) * magnitude;
            const at::Tensor y = gemm(x, w).to(at::kDouble);
            if (!((y - exact).abs() <= bound).all().item<bool>()) {
                return false;
            }
        }
    }
    return true;
}

bool deviceBf16KernelsRoundOnce(const at::Device& device, const std::vector<std::int64_t>& inFeatures)
{
    if (!device.is_cpu()) {
        const std::vector<std::string> usable = availableDevices();
        if (std::find(usable.begin(), usable.end(), deviceName(device)) == usable.end()) {
            return false;
        }
    }
    static std::mutex mutex;
    static std::map<std::pair<std::string, std::vector<std::int64_t>>, bool> known;
    const std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_pair(deviceName(device), inFeatures);
    const auto found = known.find(key);
    if (found != known.end()) {
        return found->second;
    }
    const auto product = [&device](const at::Tensor& x, const at::Tensor& w) {
        return at::linear(x.to(device), w.to(device)).to(at::kCPU);
    };
    // On a device also with a bias: LibTorch takes another cuBLAS path for a product with a bias (addmm's fused
    // bias epilogue), and the engine's modules with biases go there.
    const auto productWithBias = [&device](const at::Tensor& x, const at::Tensor& w) {
        const at::Tensor bias = at::zeros({w.size(0)}, w.options().device(device));
        return at::linear(x.to(device), w.to(device), bias).to(at::kCPU);
    };
    const bool roundsOnce = bf16GemmRoundsOnce(product, inFeatures)
        && (device.is_cpu() || bf16GemmRoundsOnce(productWithBias, inFeatures));
    known.emplace(key, roundsOnce);
    return roundsOnce;
}

bool bf16KernelsRoundOnce(const std::vector<std::int64_t>& inFeatures)
{
    return deviceBf16KernelsRoundOnce(at::Device(at::kCPU), inFeatures);
}

std::int64_t nativeFp8LinearCalls()
{
    return nativeFp8Calls.load();
}

std::int64_t deviceDequantizedFp8LinearCalls()
{
    return deviceDequantizedFp8Calls.load();
}

std::int64_t deviceKvRoundings()
{
    return deviceKvRoundCount.load();
}

std::int64_t deviceFp8ActivationRoundings()
{
    return deviceFp8ActivationCalls.load();
}

std::int64_t bf16DotFp8LinearCalls()
{
    return bf16DotFp8Calls.load();
}

at::Tensor roundBf16(const at::Tensor& values)
{
    if (!values.device().is_cpu() || values.scalar_type() != at::kFloat) {
        return values.to(at::kBFloat16).to(at::kFloat);
    }
    const at::Tensor input = values.contiguous();
    at::Tensor output = at::empty_like(input);
    model::roundToBFloat16Grid(input.data_ptr<float>(), output.data_ptr<float>(), input.numel());
    return output;
}

std::pair<at::Tensor, at::Tensor> leftPaddedBatch(const std::vector<std::vector<std::int64_t>>& sequences)
{
    std::size_t longest = 0;
    for (const auto& sequence : sequences) {
        longest = std::max(longest, sequence.size());
    }
    const auto batch = static_cast<std::int64_t>(sequences.size());
    const auto length = static_cast<std::int64_t>(longest);
    at::Tensor ids = at::zeros({batch, length}, at::kLong);
    at::Tensor mask = at::zeros({batch, length}, at::kLong);
    auto idsAccess = ids.accessor<std::int64_t, 2>();
    auto maskAccess = mask.accessor<std::int64_t, 2>();
    for (std::int64_t row = 0; row < batch; ++row) {
        const auto& sequence = sequences[static_cast<std::size_t>(row)];
        const std::int64_t padding = length - static_cast<std::int64_t>(sequence.size());
        for (std::size_t i = 0; i < sequence.size(); ++i) {
            idsAccess[row][padding + static_cast<std::int64_t>(i)] = sequence[i];
            maskAccess[row][padding + static_cast<std::int64_t>(i)] = 1;
        }
    }
    return {ids, mask};
}

void validateTokenSequences(const std::vector<std::vector<std::int64_t>>& sequences, std::int64_t vocabSize,
    const std::string& source, const std::string& what, bool allowEmpty)
{
    for (std::size_t i = 0; i < sequences.size(); ++i) {
        const std::string location = what + "[" + std::to_string(i) + "]";
        if (sequences[i].empty() && !allowEmpty) {
            throw InputError(source, location, "empty token sequence");
        }
        for (std::size_t t = 0; t < sequences[i].size(); ++t) {
            const std::int64_t id = sequences[i][t];
            if (id < 0 || id >= vocabSize) {
                throw InputError(source, location,
                    "token " + std::to_string(t) + " is id " + std::to_string(id) + ", outside the vocabulary [0, "
                        + std::to_string(vocabSize) + ")");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// KvQuantizer

KvQuantizer::KvQuantizer(std::vector<quant::KvPrecision> perLayer, std::int64_t kvHeads, bool round)
    : perLayer_(std::move(perLayer))
    , kvHeads_(kvHeads)
    , round_(round)
{
    scales_.keys.resize(perLayer_.size());
    scales_.values.resize(perLayer_.size());
}

const quant::KvPrecision& KvQuantizer::precision(std::int64_t layer) const
{
    assert(layer >= 0 && layer < numLayers());
    return perLayer_[static_cast<std::size_t>(layer)];
}

bool KvQuantizer::isFp8(std::int64_t layer) const
{
    return round_ && precision(layer).format == quant::KvFormat::Fp8E4m3;
}

bool KvQuantizer::isPerTokenHead(std::int64_t layer) const
{
    return round_ && quant::isPerTokenHead(precision(layer).format);
}

quant::PerTokenHeadKv KvQuantizer::quantizeTokenHead(std::int64_t layer, const at::Tensor& kv) const
{
    // Programmer error: only per-token-head layers have codes and per-token scales.
    assert(isPerTokenHead(layer));
    // vLLM's cache write reads the keys and values in the model's dtype (bf16) and widens them to float32.
    return quant::quantizePerTokenHead(roundBf16(kv), precision(layer).format);
}

std::int64_t KvQuantizer::scaleCount(std::int64_t layer) const
{
    if (!isFp8(layer)) {
        return 0;
    }
    return effectiveScales(precision(layer)) == quant::KvScales::PerHead ? 2 * kvHeads_ : 2;
}

bool KvQuantizer::hasScales(std::int64_t layer) const
{
    return scales_.keys[static_cast<std::size_t>(layer)].defined();
}

std::pair<at::Tensor, at::Tensor> KvQuantizer::quantize(
    std::int64_t layer, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& real)
{
    if (!round_) {
        return {keys.to(at::kFloat), values.to(at::kFloat)};
    }
    if (isPerTokenHead(layer)) {
        // Dynamic scales of each token's own values: nothing to measure or freeze, padding included (each token's
        // rows are quantized on their own, so padding cannot reach a real token's scale).
        const auto dequantized = [&](const at::Tensor& kv) {
            const quant::PerTokenHeadKv rounded = quantizeTokenHead(layer, kv);
            return (rounded.codes * rounded.scales.unsqueeze(3)).to(kv.device());
        };
        return {dequantized(keys), dequantized(values)};
    }
    if (!isFp8(layer)) {
        return {roundBf16(keys), roundBf16(values)};
    }
    const quant::KvScales mode = effectiveScales(precision(layer));
    at::Tensor& keyScales = scales_.keys[static_cast<std::size_t>(layer)];
    at::Tensor& valueScales = scales_.values[static_cast<std::size_t>(layer)];
    if (!keyScales.defined()) {
        // First prefill without calibrated scales: measure on its real tokens (padding would add the keys of
        // pad tokens to the amax), then freeze.
        const at::Tensor keep = real.to(keys.device()).ne(0).view({real.size(0), 1, real.size(1), 1});
        keyScales = quant::kvScales(at::where(keep, keys, at::zeros_like(keys)), quant::KvFormat::Fp8E4m3, mode);
        valueScales = quant::kvScales(at::where(keep, values, at::zeros_like(values)), quant::KvFormat::Fp8E4m3, mode);
    }
#if defined(MISMATCH_HAVE_CUDA)
    if (keys.is_cuda()) {
        ++deviceKvRoundCount;
        return {roundKvOnDevice(keys, keyScales), roundKvOnDevice(values, valueScales)};
    }
#endif
    return {quant::fakeQuantizeKv(keys, quant::KvFormat::Fp8E4m3, mode, keyScales),
        quant::fakeQuantizeKv(values, quant::KvFormat::Fp8E4m3, mode, valueScales)};
}

void KvQuantizer::setScales(const KvScaleTable& scales)
{
    if (scales.keys.size() != perLayer_.size() || scales.values.size() != perLayer_.size()) {
        throw InputError("kv scales", "",
            "scales for " + std::to_string(scales.keys.size()) + " layers, the model has "
                + std::to_string(perLayer_.size()));
    }
    for (std::size_t layer = 0; layer < perLayer_.size(); ++layer) {
        const std::string location = "layer " + std::to_string(layer);
        const bool defined = scales.keys[layer].defined();
        if (defined != scales.values[layer].defined()) {
            throw InputError("kv scales", location, "keys and values must both have scales or neither");
        }
        if (!defined) {
            continue;
        }
        if (isPerTokenHead(static_cast<std::int64_t>(layer))) {
            const quant::KvFormat format = precision(static_cast<std::int64_t>(layer)).format;
            throw InputError("kv scales", location,
                "scales given for a layer whose KV cache is " + quant::toString(format)
                    + ", whose scales are computed from each token when it is written");
        }
        if (!isFp8(static_cast<std::int64_t>(layer))) {
            throw InputError("kv scales", location, "scales given for a layer whose KV cache is not fp8");
        }
        const std::int64_t expected = scaleCount(static_cast<std::int64_t>(layer)) / 2;
        for (const at::Tensor& tensor : {scales.keys[layer], scales.values[layer]}) {
            if (tensor.numel() != expected) {
                throw InputError("kv scales", location,
                    "expected " + std::to_string(expected) + " scale(s), got " + std::to_string(tensor.numel()));
            }
            const at::Tensor asFloat = tensor.to(at::kCPU).to(at::kFloat);
            if (!asFloat.isfinite().all().item<bool>() || !(asFloat > 0).all().item<bool>()) {
                throw InputError("kv scales", location, "scales must be finite and > 0");
            }
        }
        scales_.keys[layer] = scales.keys[layer].to(at::kCPU).to(at::kFloat).reshape({-1}).clone();
        scales_.values[layer] = scales.values[layer].to(at::kCPU).to(at::kFloat).reshape({-1}).clone();
    }
    for (std::size_t layer = 0; layer < perLayer_.size(); ++layer) {
        if (!scales.keys[layer].defined()) {
            scales_.keys[layer] = at::Tensor();
            scales_.values[layer] = at::Tensor();
        }
    }
}

void KvQuantizer::clearScales(const std::vector<std::int64_t>& layers)
{
    for (std::int64_t layer : layers) {
        scales_.keys[static_cast<std::size_t>(layer)] = at::Tensor();
        scales_.values[static_cast<std::size_t>(layer)] = at::Tensor();
    }
}

// ---------------------------------------------------------------------------------------------------------------
// EngineModel

EngineModel::EngineModel(model::ModelConfig config, model::TransformerWeights weights,
    std::optional<quant::RecipePlan> plan, EngineOptions options)
    : model::Transformer(std::move(config), std::move(weights))
    , precision_(plan ? EnginePrecision::Recipe : options.precision)
    , options_(options)
    , plan_(std::move(plan))
{
    // Programmer error: a Recipe engine needs the plan it runs.
    assert(precision_ != EnginePrecision::Recipe || plan_.has_value());
    if (plan_ && plan_->numLayers != this->config().numLayers) {
        throw InputError("recipe plan", "",
            "resolved for " + std::to_string(plan_->numLayers) + " layers, the model has "
                + std::to_string(this->config().numLayers));
    }
    // The FP32 engine multiplies nothing in bf16: no GEMM check for it.
    kernels_ = precision_ == EnginePrecision::Fp32
        ? resolveKernels(options.kernels)
        : engineKernels(options.kernels, deviceOf(this->weights()), this->config());
    options_.precision = precision_;
    options_.kernels = kernels_;
    kvPrecisions_ = plan_ ? plan_->kvPerLayer
                          : std::vector<quant::KvPrecision>(static_cast<std::size_t>(this->config().numLayers));
    kvQuantizer_ = KvQuantizer(kvPrecisions_, this->config().numKeyValueHeads, precision_ != EnginePrecision::Fp32);
    prepareModules();
}

quant::ModulePrecision EngineModel::modulePrecision(const std::string& module) const
{
    if (precision_ != EnginePrecision::Recipe) {
        return {}; // bf16 weights and activations
    }
    const auto found = plan_->modules.find(planModuleName(module));
    // Programmer error: resolveRecipe plans every module of moduleNames().
    assert(found != plan_->modules.end());
    return found == plan_->modules.end() ? quant::ModulePrecision {} : found->second;
}

EngineModel::ModuleState EngineModel::moduleState(
    const std::string& module, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& deviceBf16) const
{
    const at::NoGradGuard noGrad;
    const quant::ModulePrecision precision = modulePrecision(module);
    ModuleState state;
    state.sourceWeight = weight;
    state.sourceBias = bias;
    state.weights = precision.weights;
    state.activations = precision.activations;
    if (weight.device().is_cpu()) {
        state.weight = namingTensor(weightTensorName(config(), module), [&] {
            return quant::QuantizedWeight::quantize(weight, precision.weights.format, precision.weights.granularity);
        });
    } else {
        // On a GPU the rounding stays there where the device computes fakeQuantize's values bit for bit: bf16
        // through the device's round-to-nearest-even conversion (roundBf16), e4m3 per tensor, channel or 128 x 128
        // block through the FP8 kernels (tests/gpu: the same codes, scales and float32 values). Other formats (the
        // microscaling ones included: their float32 dequantized weight stays on the device), and a weight that is
        // not finite (fakeQuantize names the element), go through the CPU codec: to the host and back once, when
        // the engine is built. What stays on the device is the module's deviceWeightLayout
        // (engine/memory_plan.h counts it), a bf16 copy once for a tied tensor.
        const at::Tensor source = weight.detach();
        const quant::WeightFormat format = precision.weights.format;
        const DeviceWeightLayout layout = deviceWeightLayout(module, precision, kernels_);
        // A bf16 module keeps its weight in bf16 for cuBLAS's BF16 GEMM (the given tensor when it is bf16: the
        // device's round-to-nearest-even conversion is roundBf16's rounding), else in float32.
        const at::ScalarType bf16Dtype = layout == DeviceWeightLayout::Bf16 ? at::kBFloat16 : at::kFloat;
        if (deviceBf16.defined() && format == quant::WeightFormat::Bf16 && deviceBf16.scalar_type() == bf16Dtype) {
            state.deviceWeight = deviceBf16; // rounding is idempotent: the other module's values are these
        }
        const bool finite = state.deviceWeight.defined() || at::isfinite(source).all().item<bool>();
        if (finite && format == quant::WeightFormat::Bf16 && !state.deviceWeight.defined()) {
            state.deviceWeight = bf16Dtype == at::kBFloat16 ? source.to(at::kBFloat16) : roundBf16(source.to(at::kFloat));
        }
#if defined(MISMATCH_HAVE_CUDA)
        // e4m3 takes only these three granularities (quant::allowedGranularities), each a cudaScaling.
        if (finite && source.is_cuda() && format == quant::WeightFormat::Fp8E4m3 && source.dim() == 2) {
            const cuda::Fp8Tensor quantized
                = cuda::quantizeFp8(source, cuda::Fp8Kind::E4M3, cudaScaling(precision.weights));
            if (layout == DeviceWeightLayout::Fp8Codes) {
                // The native GEMM's operands (linear()): the same codes and scales as the rounded weight.
                state.fp8Codes = quantized.codes;
                state.fp8Scales = quantized.scales;
            } else {
                // The embedding's lookup, or the emulated product of bf16 activations (cuBLASLt has no mixed
                // BF16 x FP8 GEMM).
                state.deviceWeight = cuda::dequantizeFp8(quantized);
            }
        }
#endif
        if (!state.deviceWeight.defined() && !state.fp8Codes.defined()) {
            state.deviceWeight = namingTensor(weightTensorName(config(), module),
                [&] { return quant::fakeQuantize(source, format, precision.weights.granularity); });
        }
    }
    if (bias.defined()) {
        state.bias = roundBf16(bias.detach().to(at::kFloat)); // engines keep biases in bf16
    }
    return state;
}

void EngineModel::prepareModules()
{
    modules_.clear();
    if (precision_ == EnginePrecision::Fp32) {
        return;
    }
    const model::TransformerWeights& stored = weights();
    // The BF16 view of each module weight: a bf16 module's own stored values, else the weight rounded to bf16.
    std::map<std::string, at::Tensor> bf16View;
    std::map<std::string, at::Tensor> deviceBf16; // the same on a device: the bf16-rounded weight (bf16 or float32)
    std::set<std::string> moduleTensors;
    for (const std::string& module : model::moduleNames(config())) {
        const std::string tensorName = weightTensorName(config(), module);
        moduleTensors.insert(tensorName);
        const at::Tensor& weight = stored.get(tensorName);
        const std::string biasName = module + ".bias";
        const at::Tensor bias = stored.contains(biasName) ? stored.get(biasName) : at::Tensor();
        // A tied tensor (embedding and lm_head) already given its BF16 view by the other module: a bf16 module
        // multiplies that same view (rounding is idempotent, so the values are the same) instead of a second copy.
        const auto viewed = bf16View.find(tensorName);
        const bool shareView
            = viewed != bf16View.end() && modulePrecision(module).weights.format == quant::WeightFormat::Bf16;
        const auto onDevice = deviceBf16.find(tensorName);
        ModuleState state = moduleState(module, shareView ? viewed->second : weight, bias,
            onDevice != deviceBf16.end() ? onDevice->second : at::Tensor());
        const at::Tensor& values = state.weight.values();
        if (values.defined() && values.scalar_type() == at::kBFloat16) {
            bf16View.emplace(tensorName, values);
        }
        if (state.deviceWeight.defined() && state.weights.format == quant::WeightFormat::Bf16) {
            deviceBf16.emplace(tensorName, state.deviceWeight);
        }
        modules_.emplace(module, std::move(state));
    }
    // The base keeps the view instead of the given weights (a float32 copy is released here); weights on another
    // device stay as given.
    model::TransformerWeights view;
    for (const auto& [name, tensor] : stored.named()) {
        const auto found = bf16View.find(name);
        if (found != bf16View.end()) {
            view.set(name, found->second);
        } else if (moduleTensors.count(name) && tensor.device().is_cpu()) {
            view.set(name, quant::QuantizedWeight::quantize(tensor, quant::WeightFormat::Bf16, quant::Granularity::None)
                               .values());
        } else {
            view.set(name, tensor);
        }
    }
    setWeights(std::move(view));
    for (auto& [module, state] : modules_) {
        state.sourceWeight = weights().get(weightTensorName(config(), module));
    }
}

void EngineModel::syncWeights(model::TransformerWeights weights)
{
    setWeights(std::move(weights));
    prepareModules();
    ++syncCount_;
    std::vector<std::int64_t> everySync;
    for (std::int64_t layer = 0; layer < config().numLayers; ++layer) {
        if (kvQuantizer_.isFp8(layer)
            && kvPrecisions_[static_cast<std::size_t>(layer)].calibration == quant::KvCalibration::EverySync) {
            everySync.push_back(layer);
        }
    }
    if (everySync.empty()) {
        return;
    }
    kvQuantizer_.clearScales(everySync);
    if (!calibrationPrompts_.empty()) {
        const KvScaleTable measured = engine::calibrateKvScales(*this, calibrationPrompts_);
        KvScaleTable merged = kvQuantizer_.scales();
        for (std::int64_t layer : everySync) {
            merged.keys[static_cast<std::size_t>(layer)] = measured.keys[static_cast<std::size_t>(layer)];
            merged.values[static_cast<std::size_t>(layer)] = measured.values[static_cast<std::size_t>(layer)];
        }
        kvQuantizer_.setScales(merged);
    }
}

void EngineModel::calibrateKvScales(std::vector<std::vector<std::int64_t>> probePrompts)
{
    bool anyFp8 = false;
    for (std::int64_t layer = 0; layer < config().numLayers; ++layer) {
        anyFp8 = anyFp8 || kvQuantizer_.isFp8(layer);
    }
    if (!anyFp8) {
        return;
    }
    kvQuantizer_.setScales(engine::calibrateKvScales(*this, probePrompts));
    calibrationPrompts_ = std::move(probePrompts);
}

at::Tensor EngineModel::forwardQuantized(
    const at::Tensor& ids, const at::Tensor& attentionMask, bool logProbs, std::int64_t lastPositions,
    model::NonFiniteTrace* trace)
{
    QuantizingKvCache cache(kvQuantizer_, config().numLayers, attentionMask.ne(0));
    model::ForwardOptions options;
    options.logProbs = logProbs;
    options.lastPositions = lastPositions;
    options.trace = trace;
    return forward(ids, attentionMask, at::Tensor(), &cache, options);
}

at::Tensor EngineModel::engineWeight(const std::string& module) const
{
    if (precision_ == EnginePrecision::Fp32) {
        return weights().get(weightTensorName(config(), module)).to(at::kFloat);
    }
    const ModuleState& state = modules_.at(module);
    return state.deviceWeight.defined() || state.fp8Codes.defined() ? deviceFloatWeight(state)
                                                                    : state.weight.dequantize();
}

at::Tensor EngineModel::deviceFloatWeight(const ModuleState& state) const
{
#if defined(MISMATCH_HAVE_CUDA)
    if (!state.deviceWeight.defined() && state.fp8Codes.defined()) {
        return cuda::dequantizeFp8(
            cuda::Fp8Tensor {state.fp8Codes, state.fp8Scales, cuda::Fp8Kind::E4M3, cudaScaling(state.weights)});
    }
#endif
    return state.deviceWeight.defined() ? state.deviceWeight.to(at::kFloat) : state.deviceWeight;
}

const quant::QuantizedWeight& EngineModel::storedWeight(const std::string& module) const
{
    static const quant::QuantizedWeight none;
    const auto found = modules_.find(module);
    return found == modules_.end() ? none : found->second.weight;
}

std::uint64_t EngineModel::weightBytes() const
{
    // Every tensor once: the view's tensors (shared by bf16 modules), other modules' codes and scales.
    std::set<const void*> seen;
    std::uint64_t bytes = 0;
    const auto count = [&](const at::Tensor& tensor) {
        if (tensor.defined() && seen.insert(tensor.storage().data()).second) {
            bytes += static_cast<std::uint64_t>(tensor.storage().nbytes());
        }
    };
    for (const auto& [name, tensor] : weights().named()) {
        count(tensor);
    }
    for (const auto& [module, state] : modules_) {
        for (const at::Tensor* tensor : {&state.weight.values(), &state.weight.codes(), &state.weight.scales(),
                 &state.deviceWeight, &state.fp8Codes, &state.fp8Scales, &state.bias}) {
            count(*tensor);
        }
    }
    return bytes;
}

at::Tensor EngineModel::moduleProduct(const ModuleState& state, const at::Tensor& x) const
{
    const quant::QuantizedWeight& stored = state.weight;
    if (kernels_ == EngineKernels::BFloat16 && !state.deviceWeight.defined() && x.device().is_cpu()
        && quant::fp8Bf16ProductAvailable() && quant::fp8Bf16ProductSupports(stored)
        && !model::widenedWhole(stored.rows(), stored.columns())) {
        // FP8 weights over 128 Ki elements on a CPU with BF16 dot products: the e4m3 codes times the activations'
        // exact bf16 values (fp8 code values and their per-token scales, or bf16 activations), float32 accumulation
        // per scale block (quant/fp8_cpu_gemm.h: within one bf16 ulp of the float32 emulation below). Smaller
        // weights (the demo pair's) keep the float32 product, which is exactly the float32 weights' product.
        std::vector<std::int64_t> shape = x.sizes().vec();
        const at::Tensor rows = x.reshape({-1, x.size(-1)});
        at::Tensor y;
        if (state.activations.format == quant::ActivationFormat::Fp8E4m3) {
            const quant::Fp8ActivationCodes codes = quant::fp8ActivationCodes(rows);
            y = quant::fp8Bf16Product(codes.values, codes.scales, stored);
        } else {
            y = quant::fp8Bf16Product(rows.to(at::kBFloat16), at::Tensor(), stored); // the RNE cast: roundBf16's values
        }
        if (state.bias.defined()) {
            y.add_(state.bias);
        }
        ++bf16DotFp8Calls;
        shape.back() = stored.rows();
        return roundBf16(y.reshape(shape));
    }
    const at::Tensor input = roundActivations(x, state.activations.format);
    if (state.deviceWeight.defined() && state.deviceWeight.scalar_type() == at::kBFloat16) {
        // BFloat16 kernels on a device: exact bf16 operands, float32 accumulation (split-K reductions included:
        // engineKernels), bf16(y) written by cuBLAS, as the CPU's BF16 GEMM below.
        const at::Tensor bias = state.bias.defined() ? state.bias.to(at::kBFloat16) : at::Tensor();
        return at::linear(input.to(at::kBFloat16), state.deviceWeight, bias).to(at::kFloat);
    }
    if (state.deviceWeight.defined() || state.fp8Codes.defined()) {
        // On a device (a native FP8 module reaches here only if linear() did not take the FP8 GEMM).
        return roundBf16(at::linear(input, deviceFloatWeight(state), state.bias));
    }
    const quant::QuantizedWeight& weight = state.weight;
    const bool bf16Operands = state.activations.format == quant::ActivationFormat::Bf16
        && weight.values().defined() && weight.values().scalar_type() == at::kBFloat16;
    if (kernels_ == EngineKernels::BFloat16 && bf16Operands) {
        // Exact bf16 operands, float32 accumulation, bf16(y) written by the kernel (see the header).
        const at::Tensor bias = state.bias.defined() ? state.bias.to(at::kBFloat16) : at::Tensor();
        return at::linear(input.to(at::kBFloat16), weight.values(), bias).to(at::kFloat);
    }
    return roundBf16(model::blockwiseLinear(input, weight.rows(), weight.columns(),
        [&weight](std::int64_t begin, std::int64_t end, float* out) { weight.dequantizeRows(begin, end, out); },
        state.bias));
}

at::Tensor EngineModel::linear(
    const std::string& module, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const
{
    if (precision_ == EnginePrecision::Fp32) {
        return model::Transformer::linear(module, x, weight, bias);
    }
    // Programmer error: the engine computes in float32 and rounds explicitly.
    assert(x.scalar_type() == at::kFloat);
    const auto found = modules_.find(module);
    assert(found != modules_.end());
    const ModuleState* state = &found->second;
    ModuleState current;
    const bool biasChanged
        = bias.defined() != state->sourceBias.defined() || (bias.defined() && !bias.is_same(state->sourceBias));
    if (!weight.is_same(state->sourceWeight) || biasChanged) {
        // Weights replaced through Transformer::setWeights instead of syncWeights: still correct, but the
        // quantization is redone on every call.
        current = moduleState(module, weight, bias);
        state = &current;
    }
#if defined(MISMATCH_HAVE_CUDA)
    // Native FP8 on the GPU: per-token e4m3 activations (the emulation's codes and scales, bit for bit) times the
    // e4m3 weight codes through cuBLASLt, FP32 accumulation, BF16 out. Same function as the emulation below up
    // to the accumulation order (tests/gpu compares them). Where the FP8 tensor cores do not apply (not
    // fp8TensorCoresTake, or a cuBLASLt refusal at run time: fp8Gemm declines), the product below: the exact
    // dequantized operands (codes x scales in float32, dequantized per call from the codes) multiplied in float32,
    // as on the CPU; fp8Gemm's own fallback would round both operands to bf16 first. Modules kept as codes have
    // FP8 activations (deviceWeightLayout); FP8 weights with BF16 activations stay emulated: cuBLASLt has no mixed
    // BF16 x FP8 GEMM.
    if (state->fp8Codes.defined() && x.is_cuda()) {
        if (fp8TensorCoresTake(state->weights, state->fp8Codes.size(0), state->fp8Codes.size(1))) {
            std::vector<std::int64_t> shape = x.sizes().vec();
            const at::Tensor rows = x.reshape({-1, x.size(-1)});
            const cuda::Fp8Tensor input = cuda::quantizeFp8(rows, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row);
            const cuda::Fp8Tensor weights {
                state->fp8Codes, state->fp8Scales, cuda::Fp8Kind::E4M3, cudaScaling(state->weights)};
            const cuda::Fp8GemmResult product
                = cuda::fp8Gemm(input, weights, state->bias, cuda::Fp8Fallback::Decline);
            if (product.output.defined()) {
                ++nativeFp8Calls;
                shape.back() = state->fp8Codes.size(0);
                return product.output.to(at::kFloat).reshape(shape);
            }
        }
        ++deviceDequantizedFp8Calls;
    }
#endif
    return moduleProduct(*state, x);
}

at::Tensor EngineModel::embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const
{
    if (precision_ == EnginePrecision::Fp32) {
        return model::Transformer::embed(module, weight, ids);
    }
    const auto found = modules_.find(module);
    assert(found != modules_.end());
    const auto lookup = [&ids](const ModuleState& state) {
        return state.deviceWeight.defined() ? at::embedding(state.deviceWeight, ids).to(at::kFloat)
                                            : state.weight.embed(ids).to(ids.device());
    };
    if (!weight.is_same(found->second.sourceWeight)) {
        return lookup(moduleState(module, weight, at::Tensor()));
    }
    return lookup(found->second);
}

// ---------------------------------------------------------------------------------------------------------------
// Calibration

KvScaleTable calibrateKvScales(
    const EngineModel& model, const std::vector<std::vector<std::int64_t>>& probePrompts, std::int64_t batchSize)
{
    const model::ModelConfig& config = model.config();
    if (probePrompts.empty()) {
        throw InputError("kv calibration", "probe prompts", "no prompts to calibrate on");
    }
    validateTokenSequences(probePrompts, config.vocabSize, "kv calibration", "probe prompts");
    assert(batchSize > 0);
    const auto layers = static_cast<std::size_t>(config.numLayers);
    EngineOptions bf16Options = model.options();
    bf16Options.precision = EnginePrecision::Bf16Reference;
    const EngineModel bf16Engine(config, model.weights(), std::nullopt, bf16Options);

    const at::NoGradGuard noGrad;
    std::vector<at::Tensor> keyAmax(layers);
    std::vector<at::Tensor> valueAmax(layers);
    for (std::size_t begin = 0; begin < probePrompts.size(); begin += static_cast<std::size_t>(batchSize)) {
        const std::size_t end = std::min(probePrompts.size(), begin + static_cast<std::size_t>(batchSize));
        const std::vector<std::vector<std::int64_t>> chunk(probePrompts.begin() + static_cast<std::ptrdiff_t>(begin),
            probePrompts.begin() + static_cast<std::ptrdiff_t>(end));
        const auto [ids, mask] = leftPaddedBatch(chunk);
        AmaxRecordingKvCache cache(keyAmax, valueAmax, mask.ne(0));
        model::ForwardOptions options;
        options.lastPositions = 1; // only the keys and values are wanted: skip the lm_head of the other positions
        bf16Engine.forward(ids, mask, at::Tensor(), &cache, options);
    }

    KvScaleTable table;
    table.keys.resize(layers);
    table.values.resize(layers);
    for (std::size_t layer = 0; layer < layers; ++layer) {
        if (!model.kvQuantizer().isFp8(static_cast<std::int64_t>(layer))) {
            continue;
        }
        const quant::KvScales mode = effectiveScales(model.kvQuantizer().precision(static_cast<std::int64_t>(layer)));
        table.keys[layer] = scalesFromHeadAmax(keyAmax[layer], mode);
        table.values[layer] = scalesFromHeadAmax(valueAmax[layer], mode);
    }
    return table;
}

} // namespace mismatch::engine

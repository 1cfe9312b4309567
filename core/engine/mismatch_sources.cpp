#include "core/engine/mismatch_sources.h"

#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/common/spill_file.h"
#include "core/engine/module_names.h"
#include "core/metrics/bootstrap.h"
#include "core/model/model_files.h"
#include "core/quant/recipe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

namespace mismatch::engine {

namespace {

// Elements per independently seeded chunk of a tensor's noise: fixed, so the noise is the same whatever the
// thread count.
constexpr std::int64_t kNoiseChunk = 1 << 16;

std::string moduleOf(const std::string& tensorName)
{
    for (const std::string suffix : {".weight", ".bias"}) {
        if (tensorName.size() > suffix.size()
            && tensorName.compare(tensorName.size() - suffix.size(), suffix.size(), suffix) == 0) {
            return tensorName.substr(0, tensorName.size() - suffix.size());
        }
    }
    return tensorName;
}

// The compiled noise module pattern; InputError (as located for a rollout configuration) when malformed.
quant::ModulePattern noisePattern(const std::string& modulePattern)
{
    try {
        return quant::ModulePattern::compile(modulePattern);
    } catch (const std::invalid_argument& error) {
        throw InputError("rollout configuration", "noise module pattern '" + modulePattern + "'", error.what());
    }
}

// n ~ N(0, 1) in float64 for elements [begin, end) of a tensor's noise stream (Box-Muller, both outputs used).
void fillGaussian(std::uint64_t tensorSeed, std::int64_t chunk, double* out, std::int64_t count)
{
    metrics::SplitMix64 generator(tensorSeed ^ (0x9E3779B97F4A7C15ULL * static_cast<std::uint64_t>(chunk + 1)));
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    for (std::int64_t i = 0; i < count; i += 2) {
        const double u1 = 1.0 - generator.uniform(); // (0, 1]: log stays finite
        const double u2 = generator.uniform();
        const double radius = std::sqrt(-2.0 * std::log(u1));
        out[i] = radius * std::cos(kTwoPi * u2);
        if (i + 1 < count) {
            out[i + 1] = radius * std::sin(kTwoPi * u2);
        }
    }
}

} // namespace

WeightHistory::WeightHistory(std::int64_t staleness)
    : staleness_(staleness)
{
    if (staleness < 0) {
        throw InputError("rollout configuration", "staleness", "must be >= 0 syncs, got " + std::to_string(staleness));
    }
}

void WeightHistory::push(const model::TransformerWeights& weights)
{
    snapshots_.push_back(weights.clone());
    ++syncs_;
    while (static_cast<std::int64_t>(snapshots_.size()) > staleness_ + 1) {
        snapshots_.pop_front();
    }
}

const model::TransformerWeights& WeightHistory::at(std::int64_t syncsAgo) const
{
    // Programmer error: a history is read after the first sync.
    assert(!snapshots_.empty());
    if (snapshots_.empty()) {
        throw std::logic_error("WeightHistory: no snapshot pushed yet");
    }
    const std::int64_t clamped = std::min<std::int64_t>(std::max<std::int64_t>(syncsAgo, 0), size() - 1);
    return snapshots_[static_cast<std::size_t>(size() - 1 - clamped)];
}

const model::TransformerWeights& WeightHistory::stale() const
{
    return at(staleness_);
}

std::vector<std::string> noiseModuleNames(const model::ModelConfig& config)
{
    std::vector<std::string> modules;
    for (const model::ExpectedTensor& tensor : model::expectedTensors(config)) {
        modules.push_back(moduleOf(tensor.name));
    }
    return modules;
}

void requireNoiseModulesMatch(const model::ModelConfig& config, const std::string& modulePattern,
    const std::string& file, const std::string& location)
{
    quant::ModulePattern pattern = quant::ModulePattern::compile("*");
    try {
        pattern = quant::ModulePattern::compile(modulePattern);
    } catch (const std::invalid_argument& error) {
        throw InputError(file, location, "malformed module pattern \"" + modulePattern + "\": " + error.what());
    }
    const std::vector<std::string> modules = noiseModuleNames(config);
    if (std::none_of(modules.begin(), modules.end(), [&](const std::string& m) { return pattern.matches(m); })) {
        throw InputError(file, location,
            "noise module pattern \"" + modulePattern + "\" matches no module of the model (nearest: "
                + quant::nearestNamesText(modulePattern, modules) + ")");
    }
}

std::uint64_t tensorNoiseSeed(std::uint64_t seed, const std::string& tensorName)
{
    metrics::SplitMix64 mixer(seed ^ fnv1a(tensorName));
    return mixer.next();
}

namespace {

// The names of the tensors of `weights` that noise of `sigma` on `modulePattern` changes (none when sigma = 0).
// InputError for sigma < 0 or not finite, or a malformed pattern or one that matches no tensor.
std::vector<std::string> noiseTargets(
    const model::TransformerWeights& weights, double sigma, const std::string& modulePattern)
{
    if (!std::isfinite(sigma) || sigma < 0.0) {
        throw InputError("rollout configuration", "noise sigma", "must be finite and >= 0, got " + numberText(sigma));
    }
    if (sigma > limits::kMaxNoiseSigma) {
        throw InputError("rollout configuration", "noise sigma",
            "must be <= " + numberText(limits::kMaxNoiseSigma) + ", got " + numberText(sigma) + ": "
                + limits::kMaxNoiseSigmaReason);
    }
    const quant::ModulePattern pattern = noisePattern(modulePattern);
    const bool anyMatch = std::any_of(weights.names().begin(), weights.names().end(),
        [&pattern](const std::string& name) { return pattern.matches(moduleOf(name)); });
    if (!anyMatch) {
        std::vector<std::string> modules;
        for (const std::string& name : weights.names()) {
            modules.push_back(moduleOf(name));
        }
        throw InputError("rollout configuration", "noise module pattern \"" + modulePattern + "\"",
            "matches no module of the model (nearest: " + quant::nearestNamesText(modulePattern, modules) + ")");
    }
    std::vector<std::string> targets;
    for (const std::string& name : weights.names()) {
        if (sigma > 0.0 && pattern.matches(moduleOf(name)) && weights.get(name).numel() > 0) {
            targets.push_back(name);
        }
    }
    return targets;
}

std::string dtypeName(at::ScalarType dtype)
{
    switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return c10::toString(dtype);
    }
}

// InputError naming the option and the tensor when noisy values (elements `first`... of tensor `name`, in the
// dtype the engine reads it in) overflow: finite weights of a large RMS, or a float16 tensor, can overflow under a
// sigma within limits::kMaxNoiseSigma, and the engine would then fail on non-finite weights or logits that no
// input holds.
void requireFiniteNoisy(
    const at::Tensor& noisy, std::int64_t first, double sigma, double rms, const std::string& name)
{
    const at::Tensor finite = at::isfinite(noisy);
    if (finite.all().item<bool>()) {
        return;
    }
    const std::int64_t bad = first + at::nonzero(finite.logical_not().reshape({-1}))[0][0].item<std::int64_t>();
    throw InputError("rollout configuration", "noise sigma",
        "noise of sigma " + numberText(sigma) + " times the RMS of " + name + " (" + numberText(rms)
            + ") makes its flat element " + std::to_string(bad) + " overflow " + dtypeName(noisy.scalar_type())
            + ": the engine cannot run on infinite weights; give a smaller sigma or leave " + name
            + " out of the noise modules");
}

// Writes w + sigma * rms(w) * n (the tensor `name`'s noise stream, seeded by `seed`) into `result`, flat like
// `source` and of the same size; `result` may be `source` itself (noise in place): rms(w) is taken over the whole
// source first, and each slice is read whole before it is written.
void writeNoisy(const at::Tensor& source, at::Tensor& result, double sigma, std::uint64_t seed, const std::string& name)
{
    // A slice of rows at a time, in float64 (the whole tensor in float64 would be 4x a BF16 checkpoint's bytes,
    // three times over: an embedding of 152k x 1024 would take 3.7 GB of temporaries). The noise of element i
    // is the same whatever the slice (fillGaussian's chunks of kNoiseChunk elements, seeded by tensor and
    // chunk), and each slice holds whole chunks.
    const std::int64_t count = source.numel();
    constexpr std::int64_t kSlice = kNoiseChunk * 64; // 32 MiB of float64 noise
    double squares = 0.0;
    for (std::int64_t first = 0; first < count; first += kSlice) {
        squares += source.narrow(0, first, std::min(kSlice, count - first)).to(at::kDouble).pow(2).sum().item<double>();
    }
    const double rms = std::sqrt(squares / static_cast<double>(count));
    const double factor = sigma * rms;
    const std::uint64_t tensorSeed = tensorNoiseSeed(seed, name);
    for (std::int64_t first = 0; first < count; first += kSlice) {
        const std::int64_t size = std::min(kSlice, count - first);
        at::Tensor noise = at::empty({size}, source.options().dtype(at::kDouble));
        double* data = noise.data_ptr<double>();
        const std::int64_t chunks = (size + kNoiseChunk - 1) / kNoiseChunk;
        at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t chunk = begin; chunk < end; ++chunk) {
                const std::int64_t offset = chunk * kNoiseChunk;
                fillGaussian(tensorSeed, (first + offset) / kNoiseChunk, data + offset,
                    std::min(kNoiseChunk, size - offset));
            }
        });
        const at::Tensor sum = (source.narrow(0, first, size).to(at::kDouble) + factor * noise).to(result.scalar_type());
        requireFiniteNoisy(sum, first, sigma, rms, name);
        result.narrow(0, first, size).copy_(sum);
    }
}

// A noisy copy of `tensor` (the tensor `name` of the weights), in `dtypeOf`'s dtype for it (default: its own), on its
// device: addWeightNoise's values for it.
at::Tensor noisyCopy(const at::Tensor& tensor, const std::string& name, double sigma, std::uint64_t seed,
    const NoiseDtype& dtypeOf)
{
    const at::Tensor source = tensor.detach();
    const at::Tensor flat = source.to(at::kCPU).contiguous().reshape({-1});
    const at::ScalarType dtype = dtypeOf ? dtypeOf(name, source) : source.scalar_type();
    at::Tensor result = at::empty({flat.numel()}, flat.options().dtype(dtype));
    writeNoisy(flat, result, sigma, seed, name);
    return result.view(source.sizes()).to(source.device());
}

std::uint64_t tensorBytes(const at::Tensor& tensor)
{
    return static_cast<std::uint64_t>(tensor.numel()) * static_cast<std::uint64_t>(tensor.element_size());
}

} // namespace

model::TransformerWeights addWeightNoise(const model::TransformerWeights& weights, double sigma, std::uint64_t seed,
    const std::string& modulePattern, const NoiseDtype& dtypeOf)
{
    const std::vector<std::string> targets = noiseTargets(weights, sigma, modulePattern);
    const std::set<std::string> noisyNames(targets.begin(), targets.end());
    const at::NoGradGuard noGrad;
    model::TransformerWeights noisy;
    for (const auto& [name, tensor] : weights.named()) {
        noisy.set(name, noisyNames.count(name) ? noisyCopy(tensor, name, sigma, seed, dtypeOf) : tensor.detach());
    }
    return noisy;
}

std::unique_ptr<InPlaceWeightNoise> InPlaceWeightNoise::create(const model::TransformerWeights& weights,
    double sigma, std::uint64_t seed, const std::string& modulePattern, const NoiseDtype& dtypeOf,
    const std::string& spillDirectory, std::string* why)
{
    const auto refuse = [why](const std::string& reason) {
        if (why) {
            *why = reason;
        }
        return std::unique_ptr<InPlaceWeightNoise>();
    };
    const std::vector<std::string> targets = noiseTargets(weights, sigma, modulePattern);
    std::vector<std::string> inPlace;
    std::set<std::string> copied;
    std::vector<at::Tensor> tensors;
    std::set<const void*> storages; // of the tensors noised in place
    std::uint64_t bytes = 0;
    for (const std::string& name : targets) {
        const at::Tensor& tensor = weights.get(name);
        if (!tensor.device().is_cpu()) {
            return refuse(name + " is on " + tensor.device().str() + ", not the CPU");
        }
        const at::ScalarType wanted = dtypeOf ? dtypeOf(name, tensor) : tensor.scalar_type();
        // A tensor sharing its storage with one already noised in place gets a copy: its noise (seeded by its own
        // name) differs, and one storage can hold only one of them.
        if (wanted != tensor.scalar_type() || !tensor.is_contiguous() || tensor.requires_grad()
            || !storages.insert(tensor.storage().data()).second) {
            copied.insert(name);
            continue;
        }
        inPlace.push_back(name);
        tensors.push_back(tensor);
        bytes += tensorBytes(tensor);
    }
    if (inPlace.empty()) {
        return refuse("no tensor noise reaches is stored in the dtype the engine reads it in");
    }
    std::string reason;
    if (!spillFits(spillDirectory, 2 * bytes, &reason)) {
        return refuse(reason);
    }
    // The engine's weights: the tensors noised in place themselves, noisy copies of the others (as addWeightNoise
    // makes them, from the clean values: nothing is noised yet), the rest shared.
    model::TransformerWeights engineWeights;
    const at::NoGradGuard noGrad;
    for (const auto& [name, tensor] : weights.named()) {
        engineWeights.set(name, copied.count(name) ? noisyCopy(tensor, name, sigma, seed, dtypeOf) : tensor);
    }
    return std::unique_ptr<InPlaceWeightNoise>(new InPlaceWeightNoise(
        std::move(inPlace), std::move(tensors), bytes, std::move(engineWeights), sigma, seed, spillDirectory));
}

InPlaceWeightNoise::InPlaceWeightNoise(std::vector<std::string> names, std::vector<at::Tensor> tensors,
    std::uint64_t bytes, model::TransformerWeights engineWeights, double sigma, std::uint64_t seed,
    const std::string& spillDirectory)
    : names_(std::move(names))
    , tensors_(std::move(tensors))
    , bytes_(bytes)
    , engineWeights_(std::move(engineWeights))
    , sigma_(sigma)
    , seed_(seed)
    , spill_(spillDirectory, "weight noise in place (clean and noisy weights put aside)")
{
}

InPlaceWeightNoise::~InPlaceWeightNoise()
{
    try {
        clean();
    } catch (...) {
        // The clean values could not be read back: the shared storage holds noisy or partly restored weights that
        // nothing may read as the clean ones. NaN everywhere makes any later use fail loudly instead.
        const at::NoGradGuard noGrad;
        for (at::Tensor& tensor : tensors_) {
            tensor.fill_(std::numeric_limits<double>::quiet_NaN());
        }
    }
}

void InPlaceWeightNoise::transfer(std::uint64_t base, bool toFile)
{
    std::uint64_t offset = base;
    for (at::Tensor& tensor : tensors_) {
        const std::uint64_t size = tensorBytes(tensor);
        if (toFile) {
            spill_.write(offset, tensor.data_ptr(), size);
        } else {
            spill_.read(offset, tensor.data_ptr(), size);
        }
        offset += size;
    }
}

void InPlaceWeightNoise::noisy()
{
    if (state_ == State::Noisy) {
        return;
    }
    if (!noisyStored_) {
        // First time: the clean values go aside, the noise is computed in place, and its result goes aside too.
        transfer(0, /*toFile=*/true);
        state_ = State::Mixed; // until every tensor holds its noisy values
        const at::NoGradGuard noGrad;
        for (std::size_t i = 0; i < tensors_.size(); ++i) {
            at::Tensor flat = tensors_[i].view({-1});
            writeNoisy(flat, flat, sigma_, seed_, names_[i]);
        }
        state_ = State::Noisy;
        transfer(bytes_, /*toFile=*/true);
        noisyStored_ = true;
        return;
    }
    state_ = State::Mixed; // until the read completes
    transfer(bytes_, /*toFile=*/false);
    state_ = State::Noisy;
}

void InPlaceWeightNoise::clean()
{
    if (state_ == State::Clean) {
        return;
    }
    state_ = State::Mixed;
    transfer(0, /*toFile=*/false);
    state_ = State::Clean;
}

std::map<std::string, at::ScalarType> noisyTensorDtypes(
    const model::ModelConfig& config, const quant::RecipePlan* plan, const std::string& modulePattern)
{
    const quant::ModulePattern pattern = noisePattern(modulePattern);
    const NoiseDtype dtypeOf = engineNoiseDtype(config, plan);
    std::map<std::string, at::ScalarType> dtypes;
    for (const std::string& module : model::moduleNames(config)) {
        const std::string tensor = weightTensorName(config, module);
        if (pattern.matches(moduleOf(tensor))) {
            dtypes.emplace(tensor, dtypeOf(tensor, at::Tensor()));
        }
    }
    return dtypes;
}

std::uint64_t noisyCopyBytes(const model::ModelConfig& config, const quant::RecipePlan* plan,
    const std::string& modulePattern, at::ScalarType stored, bool inPlace, bool fp32Engine)
{
    const quant::ModulePattern pattern = noisePattern(modulePattern);
    const NoiseDtype dtypeOf = engineNoiseDtype(config, plan, fp32Engine);
    std::uint64_t bytes = 0;
    for (const model::ExpectedTensor& expected : model::expectedTensors(config)) {
        if (!pattern.matches(moduleOf(expected.name))) {
            continue;
        }
        const at::ScalarType dtype = dtypeOf(expected.name, at::Tensor());
        if (inPlace && dtype == stored) {
            continue;
        }
        std::uint64_t count = 1;
        for (const std::int64_t size : expected.shape) {
            count *= static_cast<std::uint64_t>(size);
        }
        bytes += count * c10::elementSize(dtype);
    }
    return bytes;
}

NoiseDtype engineNoiseDtype(const model::ModelConfig& config, const quant::RecipePlan* plan, bool fp32Engine)
{
    std::set<std::string> bf16Only;
    std::set<std::string> other; // a tied embedding may serve a bf16 module and a quantized one
    for (const std::string& module : model::moduleNames(config)) {
        const bool bf16 = !fp32Engine
            && (!plan || plan->modules.at(planModuleName(module)).weights.format == quant::WeightFormat::Bf16);
        (bf16 ? bf16Only : other).insert(weightTensorName(config, module));
    }
    for (const std::string& tensor : other) {
        bf16Only.erase(tensor);
    }
    return [bf16Only](const std::string& name, const at::Tensor&) {
        return bf16Only.count(name) ? at::kBFloat16 : at::kFloat;
    };
}

} // namespace mismatch::engine

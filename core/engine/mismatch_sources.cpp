#include "core/engine/mismatch_sources.h"

#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/engine/module_names.h"
#include "core/metrics/bootstrap.h"
#include "core/quant/recipe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cassert>
#include <cmath>
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

model::TransformerWeights addWeightNoise(const model::TransformerWeights& weights, double sigma, std::uint64_t seed,
    const std::string& modulePattern, const NoiseDtype& dtypeOf)
{
    if (!std::isfinite(sigma) || sigma < 0.0) {
        throw InputError(
            "rollout configuration", "noise sigma", "must be finite and >= 0, got " + std::to_string(sigma));
    }
    quant::ModulePattern pattern = quant::ModulePattern::compile("*");
    try {
        pattern = quant::ModulePattern::compile(modulePattern);
    } catch (const std::invalid_argument& error) {
        throw InputError("rollout configuration", "noise module pattern '" + modulePattern + "'", error.what());
    }
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
    const at::NoGradGuard noGrad;
    model::TransformerWeights noisy;
    for (const auto& [name, tensor] : weights.named()) {
        const at::Tensor source = tensor.detach();
        if (sigma == 0.0 || !pattern.matches(moduleOf(name)) || source.numel() == 0) {
            noisy.set(name, source);
            continue;
        }
        // A slice of rows at a time, in float64 (the whole tensor in float64 would be 4x a BF16 checkpoint's bytes,
        // three times over: an embedding of 152k x 1024 would take 3.7 GB of temporaries). The noise of element i
        // is the same whatever the slice (fillGaussian's chunks of kNoiseChunk elements, seeded by tensor and
        // chunk), and each slice holds whole chunks.
        const at::Tensor flat = source.to(at::kCPU).contiguous().reshape({-1});
        const std::int64_t count = flat.numel();
        constexpr std::int64_t kSlice = kNoiseChunk * 64; // 32 MiB of float64 noise
        double squares = 0.0;
        for (std::int64_t first = 0; first < count; first += kSlice) {
            squares += flat.narrow(0, first, std::min(kSlice, count - first)).to(at::kDouble).pow(2).sum().item<double>();
        }
        const double rms = std::sqrt(squares / static_cast<double>(count));
        const double factor = sigma * rms;
        const at::ScalarType dtype = dtypeOf ? dtypeOf(name, source) : source.scalar_type();
        at::Tensor result = at::empty({count}, flat.options().dtype(dtype));
        const std::uint64_t tensorSeed = tensorNoiseSeed(seed, name);
        for (std::int64_t first = 0; first < count; first += kSlice) {
            const std::int64_t size = std::min(kSlice, count - first);
            at::Tensor noise = at::empty({size}, flat.options().dtype(at::kDouble));
            double* data = noise.data_ptr<double>();
            const std::int64_t chunks = (size + kNoiseChunk - 1) / kNoiseChunk;
            at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t chunk = begin; chunk < end; ++chunk) {
                    const std::int64_t offset = chunk * kNoiseChunk;
                    fillGaussian(tensorSeed, (first + offset) / kNoiseChunk, data + offset,
                        std::min(kNoiseChunk, size - offset));
                }
            });
            result.narrow(0, first, size).copy_((flat.narrow(0, first, size).to(at::kDouble) + factor * noise).to(dtype));
        }
        noisy.set(name, result.view(source.sizes()).to(source.device()));
    }
    return noisy;
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

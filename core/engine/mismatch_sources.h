#pragma once
// Mismatch sources of a rollout configuration besides precision: weight staleness (asynchronous rollouts use
// weights from k syncs ago) and injected Gaussian weight noise.
#include "core/model/transformer.h"
#include "core/quant/recipe_plan.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

namespace mismatch::engine {

// The last k + 1 synced weight snapshots. After the n-th push, stale() is the snapshot pushed at sync n - k
// (the engine's weights with staleness k); until k + 1 syncs have happened it is the oldest one kept (training
// has not gone k steps yet).
class WeightHistory {
public:
    explicit WeightHistory(std::int64_t staleness); // staleness >= 0 (InputError otherwise)

    std::int64_t staleness() const { return staleness_; }
    // Records a sync: a detached copy of `weights` (later in-place optimizer updates do not reach it).
    void push(const model::TransformerWeights& weights);
    // The snapshot k syncs ago (see above). Empty history is a programmer error.
    const model::TransformerWeights& stale() const;
    // The snapshot `syncsAgo` syncs ago, 0 = newest; clamped to the oldest kept.
    const model::TransformerWeights& at(std::int64_t syncsAgo) const;
    std::int64_t size() const { return static_cast<std::int64_t>(snapshots_.size()); }
    std::int64_t syncs() const { return syncs_; } // pushes so far

private:
    std::int64_t staleness_;
    std::deque<model::TransformerWeights> snapshots_; // newest at the back
    std::int64_t syncs_ = 0;
};

// A copy of `weights` with Gaussian noise relative to each tensor's RMS:
//   w' = w + sigma * rms(w) * n,   rms(w) = sqrt(mean(w^2)),   n ~ N(0, 1) elementwise
// applied to every tensor whose module name matches `modulePattern` (a recipe `match` pattern, recipe.h; the
// module name is the tensor name without ".weight"/".bias": "model.layers.3.mlp.down_proj",
// "model.layers.0.input_layernorm", "model.embed_tokens", "lm_head"; "*" matches all). The noise of a tensor
// is a function of (seed, tensor name) only, drawn from SplitMix64 with Box-Muller in float64, so it does not
// depend on other tensors, the filter, the thread count or the library version. The sum is computed in float64
// and returned in `dtypeOf(tensor name)` (default: the tensor's own dtype); an engine that rounds a weight to bf16
// anyway asks for bf16 there, which gives the same values in half the memory. Tensors the pattern does not match
// (every tensor when sigma = 0) are shared with `weights`, not copied: nothing here writes to them. InputError for
// sigma < 0 or not finite, or a malformed pattern or one that matches no tensor.
using NoiseDtype = std::function<at::ScalarType(const std::string& tensorName, const at::Tensor& tensor)>;
model::TransformerWeights addWeightNoise(const model::TransformerWeights& weights, double sigma, std::uint64_t seed,
    const std::string& modulePattern = "*", const NoiseDtype& dtypeOf = {});

// The dtypes an engine wants its noisy weights in: bf16 for a tensor that only bf16-format modules of `plan` (all
// modules without a plan) multiply with, since the engine rounds it to bf16 anyway (same values, half the memory);
// float32 for the others (norms and biases, which the engine reads unrounded, and weights of modules in another
// format, which are quantized from the exact noisy values) and for everything when `fp32Engine`.
NoiseDtype engineNoiseDtype(const model::ModelConfig& config, const quant::RecipePlan* plan, bool fp32Engine = false);

// The module names noise can address in a model of `config`: every tensor name without ".weight"/".bias".
std::vector<std::string> noiseModuleNames(const model::ModelConfig& config);
// InputError(file, location, ...) naming the pattern and the nearest module names when `modulePattern` is
// malformed or matches no module of the model: noise that lands nowhere would screen a configuration other than
// the one written. addWeightNoise checks the same (located as "rollout configuration"); callers that know where
// the pattern was written check first.
void requireNoiseModulesMatch(const model::ModelConfig& config, const std::string& modulePattern,
    const std::string& file, const std::string& location);

// The seed of one tensor's noise stream: FNV-1a of its name mixed with `seed`.
std::uint64_t tensorNoiseSeed(std::uint64_t seed, const std::string& tensorName);

} // namespace mismatch::engine

#pragma once
// Mismatch sources of a rollout configuration besides precision: weight staleness (asynchronous rollouts use
// weights from k syncs ago) and injected Gaussian weight noise.
#include "core/common/spill_file.h"
#include "core/model/transformer.h"
#include "core/quant/recipe_plan.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

// addWeightNoise's values written into the weights' own storage instead of a copy beside them, for a measurement
// whose engine and trainer share that storage and take turns (engine::measureMismatch's chunks: noisy() before the
// engine generates, clean() before the trainer scores). It saves the copy's memory (the bytes of the tensors noised
// in place: nearly the whole model with "*") for disk traffic: the first noisy() writes the clean values, then the
// noisy ones, to an unlinked temporary file in `spillDirectory` (twice those bytes on disk for the object's life);
// every later switch reads one set back over the other. The values are bit for bit addWeightNoise's, and clean()
// gives back the original bytes. Everything that holds these tensors sees the switch: it is for a job that owns its
// weights and runs one thing at a time on them. The destructor restores the clean values; if that read fails the
// tensors are filled with NaN, so nothing can go on reading noisy weights as clean ones.
class InPlaceWeightNoise {
public:
    // The in-place noise of `weights` (arguments as addWeightNoise's, whose InputErrors it throws too), or nullptr
    // with the reason in `why` (when given) if a tensor noise reaches is not on the CPU, none is stored in the dtype
    // `dtypeOf` asks for, or the spill directory keeps its files in memory or lacks room (mismatch::spillFits).
    // Tensors noise reaches that are stored in another dtype than `dtypeOf` asks for (a BF16 engine's norms, which it
    // reads in float32; modules a recipe quantizes from float32 noisy values), not contiguous, requiring
    // gradients, or sharing storage with a tensor noised in place get a noisy copy in engineWeights(), made here, as
    // addWeightNoise makes it. Starts clean.
    static std::unique_ptr<InPlaceWeightNoise> create(const model::TransformerWeights& weights, double sigma,
        std::uint64_t seed, const std::string& modulePattern, const NoiseDtype& dtypeOf,
        const std::string& spillDirectory, std::string* why = nullptr);
    ~InPlaceWeightNoise();
    InPlaceWeightNoise(const InPlaceWeightNoise&) = delete;
    InPlaceWeightNoise& operator=(const InPlaceWeightNoise&) = delete;

    void noisy(); // the tensors noised in place hold w + sigma * rms(w) * n
    void clean(); // they hold w
    // What the engine is built on (after noisy()): `weights` with the noisy copies in place of their tensors; the
    // same values as addWeightNoise(weights, ...) while noisy.
    const model::TransformerWeights& engineWeights() const { return engineWeights_; }
    std::uint64_t bytes() const { return bytes_; } // of the tensors noised in place (the copy it saves)

private:
    enum class State { Clean, Noisy, Mixed };
    InPlaceWeightNoise(std::vector<std::string> names, std::vector<at::Tensor> tensors, std::uint64_t bytes,
        model::TransformerWeights engineWeights, double sigma, std::uint64_t seed, const std::string& spillDirectory);
    void transfer(std::uint64_t base, bool toFile);

    std::vector<std::string> names_;
    std::vector<at::Tensor> tensors_;
    std::uint64_t bytes_;
    model::TransformerWeights engineWeights_;
    double sigma_;
    std::uint64_t seed_;
    SpillFile spill_;
    State state_ = State::Clean;
    bool noisyStored_ = false;
};

// The dtypes an engine wants its noisy weights in: bf16 for a tensor that only bf16-format modules of `plan` (all
// modules without a plan) multiply with, since the engine rounds it to bf16 anyway (same values, half the memory);
// float32 for the others (norms and biases, which the engine reads unrounded, and weights of modules in another
// format, which are quantized from the exact noisy values) and for everything when `fp32Engine`.
NoiseDtype engineNoiseDtype(const model::ModelConfig& config, const quant::RecipePlan* plan, bool fp32Engine = false);

// Bytes of the noisy copies an analysis holds for noise on `modulePattern` with an engine of `plan` (nullptr: the
// BF16 engine) over weights stored as `stored`: every tensor noise reaches, in the dtype engineNoiseDtype gives it,
// except, with `inPlace` (the CPU with room to spill: analysis::inPlaceNoise), those stored in that dtype, which are
// noised in place (InPlaceWeightNoise). InputError for a malformed pattern.
// `fp32Engine`: for the FP32 engine, which reads every tensor in float32 (engineNoiseDtype's fp32Engine).
std::uint64_t noisyCopyBytes(const model::ModelConfig& config, const quant::RecipePlan* plan,
    const std::string& modulePattern, at::ScalarType stored, bool inPlace, bool fp32Engine = false);
// The dtypes an engine of `plan` is given the module weight tensors that noise on `modulePattern` reaches in
// (engineNoiseDtype's: bf16 for those only bf16 modules read, float32 for the modules a recipe quantizes, which are
// quantized from the exact noisy values), for engineExtraBytes' givenAs. InputError for a malformed pattern.
std::map<std::string, at::ScalarType> noisyTensorDtypes(
    const model::ModelConfig& config, const quant::RecipePlan* plan, const std::string& modulePattern);

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

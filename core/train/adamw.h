#pragma once
// AdamW (decoupled weight decay, Loshchilov & Hutter) over ATen tensors, with global-norm gradient clipping
// and a linear-warmup + cosine learning-rate schedule. Written on ATen so that it needs only the narrow
// headers; its state saves to and loads from named tensors (checkpoints).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::train {

struct AdamWOptions {
    double learningRate = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double epsilon = 1e-8;
    double weightDecay = 0.0;
};

class AdamW {
public:
    AdamW(std::vector<at::Tensor> parameters, AdamWOptions options);

    // One update with the parameters' current gradients at learning rate `learningRate`:
    //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    //   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    // Parameters without a gradient are skipped (their moments stay).
    void step(double learningRate);
    void step() { step(options_.learningRate); }
    void zeroGrad();
    std::int64_t stepCount() const { return step_; }
    const AdamWOptions& options() const { return options_; }

    // Moments as named tensors ("exp_avg.N", "exp_avg_sq.N") plus "step" for checkpoints.
    std::vector<std::pair<std::string, at::Tensor>> state() const;
    void loadState(const std::vector<std::pair<std::string, at::Tensor>>& state);

private:
    std::vector<at::Tensor> parameters_;
    std::vector<at::Tensor> expAvg_;
    std::vector<at::Tensor> expAvgSq_;
    AdamWOptions options_;
    std::int64_t step_ = 0;
};

// The global L2 norm of the parameters' gradients (those defined), summed in float64 a block of 2^22 elements at a
// time: no float64 copy of a whole gradient (the embedding's, twice: 2 x 1.2 GB at the Qwen3-0.6B shape).
double gradientNorm(const std::vector<at::Tensor>& parameters);
// Scales gradients so that their global L2 norm is at most maxNorm; returns the norm before clipping.
double clipGradientNorm(const std::vector<at::Tensor>& parameters, double maxNorm);

// Learning rate at `step` (0-based): linear warmup over warmupSteps to peak, then cosine decay to
// peak * finalFraction at totalSteps.
double warmupCosineLearningRate(std::int64_t step, std::int64_t warmupSteps, std::int64_t totalSteps, double peak,
    double finalFraction = 0.1);

}  // namespace mismatch::train

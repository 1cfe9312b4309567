#pragma once
// Training-inference mismatch between the engine's distribution mu and the trainer's pi (all in nats).
//   D(h)  = KL(mu(.|h) || pi(.|h)) = sum_v mu(v|h) (log mu(v|h) - log pi(v|h))   full vocabulary
//   k1(y) = log mu(y) - log pi(y)                                                sampled token y ~ mu
//   k3(y) = r - 1 - log r, r = pi(y) / mu(y)                                     sampled token, >= 0
// k1 and k3 are unbiased (k1) and low-variance non-negative (k3) estimators of D from the sampled token
// alone; external trainers log them because they need no full distributions.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mismatch::metrics {

struct TokenMismatch {
    at::Tensor kl;  // [N] full-vocabulary KL(mu || pi) per position, float64
    at::Tensor k1;  // [N]
    at::Tensor k3;  // [N]
    at::Tensor logMuY; // [N] log mu(y) of the sampled token, float64
    at::Tensor logPiY; // [N] log pi(y)
    at::Tensor entropyPi; // [N] the trainer's entropy -sum_v pi(v) log pi(v); only with MismatchExtras::entropy
};

struct MismatchExtras {
    bool entropy = false; // also the trainer's entropy at each position (one more exp per vocabulary entry)
    // The trainer's side is given as logits: log pi is their float64 log_softmax, taken a block of rows at a time
    // like everything else here (the rows' values are the whole batch's log_softmax, bit for bit).
    bool trainerLogits = false;
};

// engineLogProbs, trainerLogProbs: [N, V] log-probabilities (any float dtype; computed in float64);
// sampled: [N] int64 token ids drawn from the engine. Positions are rows. The rows are taken a block at a time, so
// the float64 temporaries are a few rows' worth, not [N, V] (a 152k vocabulary's 64 positions would be 78 MB each).
TokenMismatch tokenMismatch(const at::Tensor& engineLogProbs, const at::Tensor& trainerLogProbs, const at::Tensor& sampled,
    MismatchExtras extras = {});

// H = -sum_v p(v) log p(v) per row of log-probabilities logP [N, V], p = exp(logP) given by the caller (who often
// has it), 0 log 0 = 0 (rows masked by top-k/top-p), summed in float64: [N] nats.
at::Tensor rowEntropy(const at::Tensor& logP, const at::Tensor& p);

// Same from logits (log_softmax taken here, in float64).
TokenMismatch tokenMismatchFromLogits(const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled);

// Running token-mean accumulator: the step mismatch is the mean of D over all response tokens of a batch.
struct MismatchAccumulator {
    double klSum = 0.0;
    double k1Sum = 0.0;
    double k3Sum = 0.0;
    std::int64_t tokens = 0;

    void add(const TokenMismatch& m);
    void add(const MismatchAccumulator& other);
    double meanKl() const { return tokens ? klSum / static_cast<double>(tokens) : 0.0; }
    double meanK1() const { return tokens ? k1Sum / static_cast<double>(tokens) : 0.0; }
    double meanK3() const { return tokens ? k3Sum / static_cast<double>(tokens) : 0.0; }
};

}  // namespace mismatch::metrics

#pragma once
// Per-row error bounds of the one-pass online KL (cuda/online_kl_state.h: groups with fixed maxima, float32
// exps and partial sums, a float64 running state) against the two-pass float64 definition on the same logits, for
// tests/gpu's CPU twin and CUDA kernel. With L = log mu - log pi, mA, mB the rows' maxima and eta = 2^-22 (first
// order, derived in online_kl_state.h):
//   alpha_v = eta (3 + |a_v - mA|), beta_v = eta (3 + |b_v - mB|)   an exp's and a partial sum's relative error
//   KL  sum_v mu_v alpha_v |L_v - KL - 1| + sum_v pi_v beta_v
//       + 2^-20 E_mu(|a - mA| + |b - mB|)                         d_v = (a_v - mA) - (b_v - mB) in float32
//       + V 2^-53 (2 + E_mu(|a - mA| + |b - mB|))                 float64 sums of V terms
//       + 2^-24 |KL|                                               the float32 output
//   k1  E_mu alpha + E_pi beta + 2 V 2^-53 + 2^-24 |k1|           log mu(y) and log pi(y) move with log sA, log sB
//   k3  |1 - exp(-k1)| (E_mu alpha + E_pi beta + 2 V 2^-53) + 2^-24 |k3|    (dk3/dk1 = 1 - exp(-k1))
// Masked (-inf) entries where mu = 0 contribute nothing.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>

namespace mismatch::testing {

// The worst-case bounds above add every rounding with one sign; for rows as close as a BF16 engine and its trainer
// (KL ~1e-4) they allow a few percent of the KL. What a measurement needs is tighter: the kernel's arithmetic may
// move the mean KL of such rows by at most this share of it (0.1%, so that a BF16 unit of ~1e-5 nats moves by
// ~1e-8). A float32 weighted sum of exp(a - mA) (a - b) instead of the d form misses it by 2-5x (measured).
constexpr double kNearIdenticalMeanShare = 1e-3;

// "mean |error| E, mean KL K" with three significant digits each, for a check's detail.
inline std::string meanErrorText(double meanError, double meanKl)
{
    char text[96];
    std::snprintf(text, sizeof text, "mean |error| %.3g, mean KL %.3g", meanError, meanKl);
    return text;
}

// Rows as close as a BF16 engine and its FP32 trainer: the engine's log-probabilities of bf16-rounded logits against
// the trainer's logits offset by 20 nats (KL ~1e-4 out of log-sum-exps of ~30 nats), float32 [rows, vocab] each.
inline std::pair<at::Tensor, at::Tensor> nearIdenticalRows(std::int64_t rows, std::int64_t vocab)
{
    const at::Tensor logits = at::randn({rows, vocab}) * 2.5;
    logits.select(1, 0).add_(12.0); // a likely token
    const at::Tensor engine = at::log_softmax(logits.to(at::kBFloat16).to(at::kDouble), -1).to(at::kFloat);
    return {engine, logits + 20.0};
}

struct KlBounds {
    at::Tensor kl; // float64 [N]
    at::Tensor k1;
    at::Tensor k3;
};

inline KlBounds onlineKlBounds(
    const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled)
{
    const double eta = std::ldexp(1.0, -22);
    const double output = std::ldexp(1.0, -24);
    const at::Tensor a = engineLogits.to(at::kCPU).to(at::kDouble);
    const at::Tensor b = trainerLogits.to(at::kCPU).to(at::kDouble);
    const double sums = static_cast<double>(a.size(1)) * std::ldexp(1.0, -53);
    const at::Tensor logMu = at::log_softmax(a, -1);
    const at::Tensor logPi = at::log_softmax(b, -1);
    const at::Tensor mu = logMu.exp();
    const at::Tensor pi = logPi.exp();
    const at::Tensor zero = at::zeros_like(mu);
    const at::Tensor liveA = mu > 0;
    const at::Tensor liveB = pi > 0;
    const at::Tensor ratio = at::where(liveA, logMu - logPi, zero);
    const at::Tensor kl = (mu * ratio).sum(-1);
    // Distances from the maxima (0 where masked, which contributes nothing there).
    const at::Tensor belowA = at::where(liveA, a.amax(-1, true) - a, zero);
    const at::Tensor belowB = at::where(liveB, b.amax(-1, true) - b, zero);
    const at::Tensor alpha = eta * (3.0 + belowA);
    const at::Tensor beta = eta * (3.0 + belowB);
    const at::Tensor spread = (mu * alpha * (ratio - kl.unsqueeze(1) - 1.0).abs()).sum(-1) + (pi * beta).sum(-1);
    const at::Tensor distance = (mu * (belowA + belowB)).sum(-1);
    const at::Tensor y = sampled.to(at::kCPU).to(at::kLong).unsqueeze(1);
    const at::Tensor k1 = (logMu.gather(1, y) - logPi.gather(1, y)).squeeze(1);
    const at::Tensor k3 = at::expm1(-k1) + k1;
    const at::Tensor logSums = (mu * alpha).sum(-1) + (pi * beta).sum(-1) + 2.0 * sums;
    KlBounds bounds;
    bounds.kl = spread + std::ldexp(1.0, -20) * distance + sums * (2.0 + distance) + output * kl.abs();
    bounds.k1 = logSums + output * k1.abs();
    bounds.k3 = (1.0 - at::exp(-k1)).abs() * logSums + output * k3.abs();
    return bounds;
}

} // namespace mismatch::testing

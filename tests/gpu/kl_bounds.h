#pragma once
// Per-row error bounds of the one-pass online KL (core/metrics/online_kl_state.h: float64 running sums, float32
// exps) against the two-pass float64 definition on the same logits, for tests/gpu's CPU twin and CUDA kernel.
// With L = log mu - log pi and eta = 2^-22 (expf within 2 ulp; the argument's float32 rounding corrected):
//   KL  eta (2 + E_mu|L - KL|)   first order in the exps' relative errors (derived in online_kl_state.h)
//       + 2^-24 |KL|             the float32 output
//       + V 2^-53 (2 + E_mu|a - b|)   float64 sums of V terms (sA, sB, and w = sum e (a - b) over sA)
//   k1  2 eta + 2^-24 |k1| + 2 V 2^-53    (log mu(y) and log pi(y) each move with their log-sum-exp)
//   k3  |1 - exp(-k1)| (2 eta + 2 V 2^-53) + 2^-24 |k3|   (dk3/dk1 = 1 - exp(-k1))
// Masked (-inf) entries where mu = 0 contribute nothing.
#include <ATen/ATen.h>

#include <cmath>

namespace mismatch::testing {

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
    const at::Tensor live = mu > 0;
    const at::Tensor zero = at::zeros_like(mu);
    const at::Tensor ratio = at::where(live, logMu - logPi, zero);
    const at::Tensor kl = (mu * ratio).sum(-1);
    const at::Tensor spread = (mu * (ratio - kl.unsqueeze(1)).abs()).sum(-1);
    const at::Tensor raw = (mu * at::where(live, (a - b).abs(), zero)).sum(-1);
    const at::Tensor y = sampled.to(at::kCPU).to(at::kLong).unsqueeze(1);
    const at::Tensor k1 = (logMu.gather(1, y) - logPi.gather(1, y)).squeeze(1);
    const at::Tensor k3 = at::expm1(-k1) + k1;
    KlBounds bounds;
    bounds.kl = eta * (2.0 + spread) + output * kl.abs() + sums * (2.0 + raw);
    bounds.k1 = 2.0 * eta + output * k1.abs() + 2.0 * sums;
    bounds.k3 = (1.0 - at::exp(-k1)).abs() * (2.0 * eta + 2.0 * sums) + output * k3.abs();
    return bounds;
}

} // namespace mismatch::testing

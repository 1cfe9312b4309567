#include "core/metrics/mismatch.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace mismatch::metrics {

TokenMismatch tokenMismatch(const at::Tensor& engineLogProbs, const at::Tensor& trainerLogProbs, const at::Tensor& sampled)
{
    // Programmer error, not input: callers pass aligned tensors.
    if (engineLogProbs.sizes() != trainerLogProbs.sizes() || engineLogProbs.dim() != 2 ||
        sampled.dim() != 1 || sampled.size(0) != engineLogProbs.size(0)) {
        throw std::invalid_argument("tokenMismatch: expected [N, V] log-probabilities and [N] sampled ids");
    }
    const at::Tensor logMu = engineLogProbs.to(at::kDouble);
    const at::Tensor logPi = trainerLogProbs.to(at::kDouble);
    const at::Tensor mu = logMu.exp();
    // mu * (log mu - log pi), with 0 * anything = 0 where mu underflows to zero (e.g. masked by top-p).
    const at::Tensor terms = at::where(mu > 0, mu * (logMu - logPi), at::zeros_like(mu));
    TokenMismatch result;
    result.kl = terms.sum(-1).clamp_min(0.0);  // KL >= 0; clamp the last-ulp negatives of identical rows
    const at::Tensor index = sampled.to(at::kLong).unsqueeze(1);
    const at::Tensor logMuY = logMu.gather(1, index).squeeze(1);
    const at::Tensor logPiY = logPi.gather(1, index).squeeze(1);
    result.k1 = logMuY - logPiY;
    const at::Tensor logR = logPiY - logMuY;
    result.k3 = logR.exp() - 1.0 - logR;
    return result;
}

TokenMismatch tokenMismatchFromLogits(const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled)
{
    return tokenMismatch(at::log_softmax(engineLogits.to(at::kDouble), -1),
        at::log_softmax(trainerLogits.to(at::kDouble), -1), sampled);
}

void MismatchAccumulator::add(const TokenMismatch& m)
{
    klSum += m.kl.sum().item<double>();
    k1Sum += m.k1.sum().item<double>();
    k3Sum += m.k3.sum().item<double>();
    tokens += m.kl.numel();
}

void MismatchAccumulator::add(const MismatchAccumulator& other)
{
    klSum += other.klSum;
    k1Sum += other.k1Sum;
    k3Sum += other.k3Sum;
    tokens += other.tokens;
}

}  // namespace mismatch::metrics

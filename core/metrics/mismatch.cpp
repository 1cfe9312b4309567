#include "core/metrics/mismatch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

namespace mismatch::metrics {

TokenMismatch tokenMismatch(
    const at::Tensor& engineLogProbs, const at::Tensor& trainerLogProbs, const at::Tensor& sampled, MismatchExtras extras)
{
    // Programmer error, not input: callers pass aligned tensors.
    if (engineLogProbs.sizes() != trainerLogProbs.sizes() || engineLogProbs.dim() != 2 ||
        sampled.dim() != 1 || sampled.size(0) != engineLogProbs.size(0)) {
        throw std::invalid_argument("tokenMismatch: expected [N, V] log-probabilities and [N] sampled ids");
    }
    const std::int64_t rows = engineLogProbs.size(0);
    const std::int64_t vocab = engineLogProbs.size(1);
    const auto options = engineLogProbs.options().dtype(at::kDouble);
    TokenMismatch result;
    result.kl = at::empty({rows}, options);
    if (extras.entropy) {
        result.entropyPi = at::empty({rows}, options);
    }
    const at::Tensor index = sampled.to(at::kLong).to(engineLogProbs.device()).unsqueeze(1);
    if (extras.trainerLogits) {
        result.logPiY = at::empty({rows}, options); // gathered from each block's log pi
    }
    // Rows a block at a time: each block's float64 temporaries stay near 8 MiB whatever N is.
    const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t {1} << 20) / std::max<std::int64_t>(1, vocab));
    for (std::int64_t begin = 0; begin < rows; begin += block) {
        const std::int64_t count = std::min(block, rows - begin);
        const at::Tensor logMu = engineLogProbs.narrow(0, begin, count).to(at::kDouble);
        const at::Tensor trainerRows = trainerLogProbs.narrow(0, begin, count).to(at::kDouble);
        const at::Tensor logPi = extras.trainerLogits ? at::log_softmax(trainerRows, -1) : trainerRows;
        if (extras.trainerLogits) {
            result.logPiY.narrow(0, begin, count).copy_(logPi.gather(1, index.narrow(0, begin, count)).squeeze(1));
        }
        const at::Tensor mu = logMu.exp();
        // mu * (log mu - log pi), with 0 * anything = 0 where mu underflows to zero (e.g. masked by top-p).
        const at::Tensor terms = at::where(mu > 0, mu * (logMu - logPi), at::zeros_like(mu));
        result.kl.narrow(0, begin, count).copy_(terms.sum(-1).clamp_min(0.0)); // KL >= 0; clamp the last-ulp
                                                                              // negatives of identical rows
        if (extras.entropy) {
            result.entropyPi.narrow(0, begin, count).copy_(-(logPi.exp() * logPi).sum(-1));
        }
    }
    result.logMuY = engineLogProbs.gather(1, index).squeeze(1).to(at::kDouble);
    if (!extras.trainerLogits) {
        result.logPiY = trainerLogProbs.gather(1, index).squeeze(1).to(at::kDouble);
    }
    result.k1 = result.logMuY - result.logPiY;
    const at::Tensor logR = result.logPiY - result.logMuY;
    result.k3 = logR.exp() - 1.0 - logR;
    return result;
}

at::Tensor rowEntropy(const at::Tensor& logP, const at::Tensor& p)
{
    return -at::where(p > 0, p * logP, at::zeros_like(p)).to(at::kDouble).sum(-1);
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

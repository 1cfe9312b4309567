#include "core/engine/token_details.h"

#include "core/metrics/mismatch.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace mismatch::engine {

std::vector<store::TokenDetail> tokenDetails(
    const at::Tensor& logMu, const at::Tensor& logPi, const std::vector<std::int64_t>& tokens)
{
    constexpr std::int64_t kTop = 5;
    // Rows a block at a time: with a 152k vocabulary one row is 1.2 MB in float64, and the entropy's temporaries are
    // several such tensors, so a whole 64-token response at once would hold ~0.4 GB.
    constexpr std::int64_t kRows = 8;
    std::vector<store::TokenDetail> details;
    const auto count = static_cast<std::int64_t>(tokens.size());
    for (std::int64_t begin = 0; begin < count; begin += kRows) {
        const std::int64_t end = std::min(count, begin + kRows);
        const at::Tensor mu = logMu.slice(0, begin, end).to(at::kDouble).contiguous();
        const at::Tensor pi = logPi.slice(0, begin, end).to(at::kDouble).contiguous();
        const at::Tensor entropyMu = metrics::rowEntropy(mu, mu.exp());
        const at::Tensor entropyPi = metrics::rowEntropy(pi, pi.exp());
        const std::int64_t top = std::min<std::int64_t>(kTop, mu.size(1));
        const auto [topMuValues, topMuIds] = at::topk(mu, top, -1);
        const auto [topPiValues, topPiIds] = at::topk(pi, top, -1);
        for (std::int64_t row = 0; row < end - begin; ++row) {
            const std::int64_t token = tokens[static_cast<std::size_t>(begin + row)];
            store::TokenDetail d;
            d.logMu = mu[row][token].item<double>();
            d.logPi = pi[row][token].item<double>();
            d.entropyMu = entropyMu[row].item<double>();
            d.entropyPi = entropyPi[row].item<double>();
            for (std::int64_t k = 0; k < top; ++k) {
                d.topMu.emplace_back(topMuIds[row][k].item<std::int64_t>(), std::exp(topMuValues[row][k].item<double>()));
                d.topPi.emplace_back(topPiIds[row][k].item<std::int64_t>(), std::exp(topPiValues[row][k].item<double>()));
            }
            details.push_back(std::move(d));
        }
    }
    return details;
}

} // namespace mismatch::engine

#include "core/metrics/online_kl.h"

#include "core/common/error.h"
#include "cuda/online_kl_state.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <limits>
#include <vector>

namespace mismatch::metrics {

namespace {

constexpr int kGroup = 8;

} // namespace

TokenMismatch onlineTokenMismatch(
    const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled, std::int64_t lanes)
{
    if (engineLogits.dim() != 2 || !engineLogits.sizes().equals(trainerLogits.sizes())) {
        throw InputError("", "logits", "expected two [N, V] logit tensors of the same shape");
    }
    if (sampled.dim() != 1 || sampled.size(0) != engineLogits.size(0)) {
        throw InputError("", "sampled", "expected [N] token ids, one per row");
    }
    if (lanes < 1) {
        throw InputError("", "lanes", "expected at least one lane");
    }
    const at::Tensor a = engineLogits.to(at::kCPU).to(at::kFloat).contiguous();
    const at::Tensor b = trainerLogits.to(at::kCPU).to(at::kFloat).contiguous();
    const at::Tensor y = sampled.to(at::kCPU).to(at::kLong).contiguous();
    const std::int64_t rows = a.size(0);
    const std::int64_t vocab = a.size(1);
    TokenMismatch result;
    at::Tensor kl = at::empty({rows}, at::kFloat);
    at::Tensor k1 = at::empty({rows}, at::kFloat);
    at::Tensor k3 = at::empty({rows}, at::kFloat);
    const float* aData = a.data_ptr<float>();
    const float* bData = b.data_ptr<float>();
    const std::int64_t* yData = y.data_ptr<std::int64_t>();
    float* klData = kl.data_ptr<float>();
    float* k1Data = k1.data_ptr<float>();
    float* k3Data = k3.data_ptr<float>();
    at::parallel_for(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
        std::vector<OnlineKlState> partial(static_cast<std::size_t>(lanes));
        for (std::int64_t r = begin; r < end; ++r) {
            const float* rowA = aData + r * vocab;
            const float* rowB = bData + r * vocab;
            // As the kernel on bf16 rows: groups of 8 (a 16-byte vector), lane i taking groups i, i + lanes, ...,
            // then the last vocab % 8 elements one at a time, lane i taking element i of them, i + lanes, ...
            const std::int64_t groups = vocab / kGroup;
            for (std::int64_t lane = 0; lane < lanes; ++lane) {
                OnlineKlState state;
                for (std::int64_t g = lane; g < groups; g += lanes) {
                    onlineKlAddGroup<kGroup>(state, rowA + g * kGroup, rowB + g * kGroup);
                }
                for (std::int64_t v = groups * kGroup + lane; v < vocab; v += lanes) {
                    onlineKlAdd(state, rowA[v], rowB[v]);
                }
                partial[static_cast<std::size_t>(lane)] = state;
            }
            // Pairwise tree, as a block reduction merges: stride 1, 2, 4, ...
            for (std::int64_t stride = 1; stride < lanes; stride *= 2) {
                for (std::int64_t lane = 0; lane + stride < lanes; lane += 2 * stride) {
                    onlineKlMerge(partial[static_cast<std::size_t>(lane)], partial[static_cast<std::size_t>(lane + stride)]);
                }
            }
            const OnlineKlState& total = partial[0];
            klData[r] = static_cast<float>(onlineKl(total));
            const std::int64_t token = yData[r];
            if (token < 0 || token >= vocab) {
                k1Data[r] = std::numeric_limits<float>::quiet_NaN();
                k3Data[r] = std::numeric_limits<float>::quiet_NaN();
            } else {
                const double logMu = rowA[token] - onlineLogSumExpA(total);
                const double logPi = rowB[token] - onlineLogSumExpB(total);
                k1Data[r] = static_cast<float>(logMu - logPi);
                k3Data[r] = static_cast<float>(k3FromK1(logMu - logPi));
            }
        }
    });
    result.kl = kl.to(at::kDouble);
    result.k1 = k1.to(at::kDouble);
    result.k3 = k3.to(at::kDouble);
    return result;
}

} // namespace mismatch::metrics

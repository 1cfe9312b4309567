#include "core/engine/sampling.h"

#include "core/common/error.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <limits>
#include <numeric>

namespace mismatch::engine {

namespace {

std::atomic<bool> tensorSamplingOnCpu {false};

constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();

bool isGreedy(const SamplingOptions& options)
{
    return options.greedy || options.temperature == 0.0;
}

// Strict total order "more probable first, lower id on ties".
struct MoreProbable {
    const std::vector<double>& logProbs;
    bool operator()(std::int64_t a, std::int64_t b) const
    {
        const double pa = logProbs[static_cast<std::size_t>(a)];
        const double pb = logProbs[static_cast<std::size_t>(b)];
        return pa > pb || (pa == pb && a < b);
    }
};

double logSumExp(const std::vector<double>& values, const std::vector<std::int64_t>& indices)
{
    double maximum = kNegativeInfinity;
    for (std::int64_t i : indices) {
        maximum = std::max(maximum, values[static_cast<std::size_t>(i)]);
    }
    if (!std::isfinite(maximum)) {
        return maximum;
    }
    double sum = 0.0;
    for (std::int64_t i : indices) {
        sum += std::exp(values[static_cast<std::size_t>(i)] - maximum);
    }
    return maximum + std::log(sum);
}

} // namespace

void validateSamplingOptions(const SamplingOptions& options)
{
    const std::string source = "sampling options";
    if (!std::isfinite(options.temperature) || options.temperature < 0.0) {
        throw InputError(source, "temperature", "must be >= 0 (0: greedy), got " + std::to_string(options.temperature));
    }
    if (!(options.topP > 0.0 && options.topP <= 1.0)) {
        throw InputError(source, "top_p", "must be in (0, 1], got " + std::to_string(options.topP));
    }
    if (options.topK < 0) {
        throw InputError(source, "top_k", "must be >= 0 (0: off), got " + std::to_string(options.topK));
    }
    if (options.maxNewTokens < 1) {
        throw InputError(source, "max_tokens", "must be >= 1, got " + std::to_string(options.maxNewTokens));
    }
    if (options.topLogProbs < 0) {
        throw InputError(source, "top_logprobs", "must be >= 0, got " + std::to_string(options.topLogProbs));
    }
    for (const std::string& stop : options.stopStrings) {
        if (stop.empty()) {
            throw InputError(source, "stop", "stop strings must not be empty");
        }
    }
}

std::uint64_t requestGeneratorSeed(std::uint64_t optionsSeed, std::uint64_t requestSeed)
{
    // Two SplitMix64 outputs chained so that (a, b) and (b, a) give unrelated streams.
    metrics::SplitMix64 first(optionsSeed);
    metrics::SplitMix64 second(first.next() ^ requestSeed);
    return second.next();
}

std::vector<double> samplingLogProbs(const float* logits, std::int64_t vocab, const SamplingOptions& options)
{
    const double temperature = isGreedy(options) ? 1.0 : options.temperature;
    const auto size = static_cast<std::size_t>(vocab);
    std::vector<double> logProbs(size);
    double maximum = kNegativeInfinity;
    for (std::size_t v = 0; v < size; ++v) {
        logProbs[v] = static_cast<double>(logits[v]) / temperature;
        maximum = std::max(maximum, logProbs[v]);
    }
    if (!std::isfinite(maximum)) {
        // NaN or infinite logits (an overflowing format, a broken checkpoint): no distribution to sample from.
        throw NonFiniteLogits("engine: non-finite logits (largest " + std::to_string(maximum) + "); cannot sample");
    }
    double sum = 0.0;
    for (std::size_t v = 0; v < size; ++v) {
        if (std::isnan(logProbs[v])) {
            throw NonFiniteLogits("engine: NaN logit at token id " + std::to_string(v) + "; cannot sample");
        }
        sum += std::exp(logProbs[v] - maximum);
    }
    const double logNormalizer = maximum + std::log(sum);
    for (double& value : logProbs) {
        value -= logNormalizer; // log_softmax(z / temperature)
    }

    const bool topK = options.topK > 0 && options.topK < vocab;
    const bool topP = options.topP < 1.0;
    if (!topK && !topP) {
        return logProbs;
    }
    std::vector<std::int64_t> kept(size);
    std::iota(kept.begin(), kept.end(), 0);
    const MoreProbable order {logProbs};
    if (topK) {
        std::nth_element(kept.begin(), kept.begin() + (options.topK - 1), kept.end(), order);
        kept.resize(static_cast<std::size_t>(options.topK));
    }
    if (topP) {
        std::sort(kept.begin(), kept.end(), order);
        const double logKept = logSumExp(logProbs, kept);
        double cumulative = 0.0;
        std::size_t count = 0;
        while (count < kept.size()) {
            cumulative += std::exp(logProbs[static_cast<std::size_t>(kept[count])] - logKept);
            ++count;
            if (cumulative >= options.topP) {
                break;
            }
        }
        kept.resize(count);
    }
    const double logKept = logSumExp(logProbs, kept);
    std::vector<double> result(size, kNegativeInfinity);
    for (std::int64_t v : kept) {
        result[static_cast<std::size_t>(v)] = logProbs[static_cast<std::size_t>(v)] - logKept;
    }
    return result;
}

at::Tensor logMuRows(const at::Tensor& logits, const SamplingOptions& options)
{
    if (usesTensorSampling(logits)) {
        return samplingLogProbsRows(logits, options);
    }
    const at::Tensor input = logits.to(at::kCPU).to(at::kFloat).contiguous();
    const std::int64_t rows = input.size(0);
    const std::int64_t vocab = input.size(1);
    at::Tensor output = at::empty({rows, vocab}, at::TensorOptions().dtype(at::kDouble));
    const float* in = input.data_ptr<float>();
    double* out = output.data_ptr<double>();
    at::parallel_for(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = begin; t < end; ++t) {
            const std::vector<double> logMu = samplingLogProbs(in + t * vocab, vocab, options);
            std::copy(logMu.begin(), logMu.end(), out + t * vocab);
        }
    });
    return output;
}

SampledToken sampleToken(const float* logits, const std::vector<double>& logMu, const SamplingOptions& options,
    metrics::SplitMix64& generator)
{
    const double u = generator.uniform();
    const auto vocab = static_cast<std::int64_t>(logMu.size());
    SampledToken token;
    if (isGreedy(options)) {
        std::int64_t best = 0;
        for (std::int64_t v = 1; v < vocab; ++v) {
            if (logits[v] > logits[best]) {
                best = v;
            }
        }
        token.id = best;
    } else {
        // Inverse CDF in id order over the kept tokens.
        double cumulative = 0.0;
        std::int64_t chosen = -1;
        for (std::int64_t v = 0; v < vocab; ++v) {
            const double logProb = logMu[static_cast<std::size_t>(v)];
            if (logProb == kNegativeInfinity) {
                continue;
            }
            chosen = v; // the last kept token catches u beyond a cumulative sum that rounds below 1
            cumulative += std::exp(logProb);
            if (cumulative > u) {
                break;
            }
        }
        token.id = chosen;
    }
    token.logProb = logMu[static_cast<std::size_t>(token.id)];
    if (options.topLogProbs > 0) {
        std::vector<std::int64_t> kept;
        for (std::int64_t v = 0; v < vocab; ++v) {
            if (logMu[static_cast<std::size_t>(v)] != kNegativeInfinity) {
                kept.push_back(v);
            }
        }
        const std::size_t count = std::min(kept.size(), static_cast<std::size_t>(options.topLogProbs));
        std::partial_sort(
            kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(count), kept.end(), MoreProbable {logMu});
        for (std::size_t i = 0; i < count; ++i) {
            token.top.push_back({kept[i], static_cast<float>(logMu[static_cast<std::size_t>(kept[i])])});
        }
    }
    return token;
}

bool usesTensorSampling(const at::Tensor& logits)
{
    return !logits.device().is_cpu() || tensorSamplingOnCpu.load();
}

void setTensorSamplingOnCpu(bool enabled)
{
    tensorSamplingOnCpu = enabled;
}

at::Tensor samplingLogProbsRows(const at::Tensor& logits, const SamplingOptions& options)
{
    const double temperature = isGreedy(options) ? 1.0 : options.temperature;
    const at::Tensor z = logits.to(at::kDouble) / temperature;
    const std::int64_t vocab = z.size(-1);
    // samplingLogProbs' checks, in its order: a row whose largest non-NaN logit is not finite, then any NaN.
    const at::Tensor nan = z.isnan();
    const at::Tensor largest = z.masked_fill(nan, kNegativeInfinity).amax(-1);
    const at::Tensor finite = largest.isfinite();
    if (!finite.all().item<bool>()) {
        const std::int64_t row = finite.logical_not().to(at::kInt).argmax().item<std::int64_t>();
        throw NonFiniteLogits("engine: non-finite logits (largest " + std::to_string(largest[row].item<double>())
            + "); cannot sample");
    }
    if (nan.any().item<bool>()) {
        const at::Tensor first = nan.nonzero().select(0, 0).to(at::kCPU);
        throw NonFiniteLogits("engine: NaN logit at token id " + std::to_string(first[1].item<std::int64_t>()) + "; cannot sample");
    }
    const at::Tensor logProbs = z - at::logsumexp(z, -1, true); // log_softmax(z / temperature)
    const bool topK = options.topK > 0 && options.topK < vocab;
    const bool topP = options.topP < 1.0;
    if (!topK && !topP) {
        return logProbs;
    }
    // More probable first, lower id on ties (a stable sort keeps ids in order among equal values).
    const auto sorted = at::sort(logProbs, /*stable=*/true, -1, /*descending=*/true);
    const std::int64_t head = topK ? options.topK : vocab;
    const at::Tensor headValues = std::get<0>(sorted).narrow(-1, 0, head);
    at::Tensor keptInHead = at::ones_like(headValues, headValues.options().dtype(at::kBool));
    if (topP) {
        // Position p of the head is kept while the renormalized mass before it is below top_p (the first always).
        const at::Tensor cumulative = at::exp(headValues - at::logsumexp(headValues, -1, true)).cumsum(-1);
        keptInHead.narrow(-1, 1, head - 1).copy_(cumulative.narrow(-1, 0, head - 1).lt(options.topP));
    }
    const at::Tensor kept = at::zeros_like(logProbs, logProbs.options().dtype(at::kBool))
                                .scatter_(-1, std::get<1>(sorted).narrow(-1, 0, head), keptInHead);
    const at::Tensor masked = logProbs.masked_fill(kept.logical_not(), kNegativeInfinity);
    return masked - at::logsumexp(masked, -1, true);
}

SampledRows sampleRows(const at::Tensor& logits, const std::vector<double>& uniforms, const SamplingOptions& options)
{
    // Programmer error: one draw per row.
    assert(static_cast<std::int64_t>(uniforms.size()) == logits.size(0));
    SampledRows result;
    result.logMu = samplingLogProbsRows(logits, options);
    const std::int64_t rows = logits.size(0);
    const std::int64_t vocab = logits.size(-1);
    at::Tensor ids;
    if (isGreedy(options)) {
        ids = logits.argmax(-1); // the first of equal maxima, as the host's strict comparison keeps it
    } else {
        // Inverse CDF in id order over the kept tokens: the first id whose cumulative mass passes u (a token outside
        // the kept set adds nothing, so the first such id is kept), else the last kept id.
        const at::Tensor u = at::tensor(uniforms, at::kDouble).to(logits.device()).unsqueeze(1);
        const at::Tensor above = result.logMu.exp().cumsum(-1).gt(u);
        const at::Tensor positions = at::arange(vocab, logits.options().dtype(at::kLong)).expand({rows, vocab});
        const at::Tensor firstAbove = above.to(at::kInt).argmax(-1);
        const at::Tensor lastKept
            = positions.masked_fill(result.logMu.eq(kNegativeInfinity), -1).amax(-1);
        ids = at::where(above.any(-1), firstAbove, lastKept);
    }
    const at::Tensor logProbs = result.logMu.gather(-1, ids.unsqueeze(1)).squeeze(1).to(at::kCPU).contiguous();
    const at::Tensor idsCpu = ids.to(at::kCPU).to(at::kLong).contiguous();
    result.tokens.resize(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
        SampledToken& token = result.tokens[static_cast<std::size_t>(r)];
        token.id = idsCpu.data_ptr<std::int64_t>()[r];
        token.logProb = logProbs.data_ptr<double>()[r];
    }
    if (options.topLogProbs > 0) {
        const std::int64_t count = std::min(options.topLogProbs, vocab);
        const auto sorted = at::sort(result.logMu, /*stable=*/true, -1, /*descending=*/true);
        const at::Tensor values = std::get<0>(sorted).narrow(-1, 0, count).to(at::kCPU).contiguous();
        const at::Tensor topIds = std::get<1>(sorted).narrow(-1, 0, count).to(at::kCPU).to(at::kLong).contiguous();
        for (std::int64_t r = 0; r < rows; ++r) {
            SampledToken& token = result.tokens[static_cast<std::size_t>(r)];
            for (std::int64_t i = 0; i < count; ++i) {
                const double value = values.data_ptr<double>()[r * count + i];
                if (value == kNegativeInfinity) {
                    break; // outside the kept set
                }
                token.top.push_back({topIds.data_ptr<std::int64_t>()[r * count + i], static_cast<float>(value)});
            }
        }
    }
    return result;
}

} // namespace mismatch::engine

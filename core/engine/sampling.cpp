#include "core/engine/sampling.h"

#include "core/common/error.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace mismatch::engine {

namespace {

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
        throw Error("engine: non-finite logits (largest " + std::to_string(maximum) + "); cannot sample");
    }
    double sum = 0.0;
    for (std::size_t v = 0; v < size; ++v) {
        if (std::isnan(logProbs[v])) {
            throw Error("engine: NaN logit at token id " + std::to_string(v) + "; cannot sample");
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

} // namespace mismatch::engine

#include "core/metrics/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace mismatch::metrics {

namespace {

// Linear-interpolated quantile of sorted data (the "type 7" definition, as numpy's default).
double quantile(const std::vector<double>& sorted, double q)
{
    const double position = q * static_cast<double>(sorted.size() - 1);
    const auto lower = static_cast<size_t>(std::floor(position));
    const size_t upper = std::min(lower + 1, sorted.size() - 1);
    const double fraction = position - static_cast<double>(lower);
    return sorted[lower] + fraction * (sorted[upper] - sorted[lower]);
}

template <typename Statistic>
Interval percentileBootstrap(size_t n, const BootstrapOptions& options, double estimate, Statistic statistic)
{
    if (n == 0) {
        throw std::invalid_argument("bootstrap of an empty sample");
    }
    if (options.resamples < 1 || !(options.confidence > 0.0 && options.confidence < 1.0)) {
        throw std::invalid_argument("bootstrap needs resamples >= 1 and confidence in (0, 1)");
    }
    SplitMix64 rng(options.seed);
    std::vector<size_t> sample(n);
    std::vector<double> statistics(static_cast<size_t>(options.resamples));
    for (double& s : statistics) {
        for (size_t& index : sample) {
            index = static_cast<size_t>(rng.below(n));
        }
        s = statistic(sample);
    }
    std::sort(statistics.begin(), statistics.end());
    const double alpha = 1.0 - options.confidence;
    Interval interval;
    interval.estimate = estimate;
    interval.low = quantile(statistics, alpha / 2.0);
    interval.high = quantile(statistics, 1.0 - alpha / 2.0);
    interval.confidence = options.confidence;
    interval.resamples = options.resamples;
    return interval;
}

double mean(const std::vector<double>& values)
{
    return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace

Interval bootstrapMean(const std::vector<double>& values, const BootstrapOptions& options)
{
    return percentileBootstrap(values.size(), options, values.empty() ? 0.0 : mean(values),
        [&](const std::vector<size_t>& sample) {
            double sum = 0.0;
            for (size_t i : sample) {
                sum += values[i];
            }
            return sum / static_cast<double>(sample.size());
        });
}

Interval bootstrapRatio(const std::vector<double>& numerators, const std::vector<double>& denominators,
    const BootstrapOptions& options)
{
    if (numerators.size() != denominators.size()) {
        throw std::invalid_argument("bootstrapRatio: numerators and denominators differ in length");
    }
    const double total = std::accumulate(denominators.begin(), denominators.end(), 0.0);
    const double estimate = total > 0 ? std::accumulate(numerators.begin(), numerators.end(), 0.0) / total : 0.0;
    return percentileBootstrap(numerators.size(), options, estimate, [&](const std::vector<size_t>& sample) {
        double num = 0.0;
        double den = 0.0;
        for (size_t i : sample) {
            num += numerators[i];
            den += denominators[i];
        }
        return den > 0 ? num / den : 0.0;
    });
}

Interval bootstrapRatioCombination(const std::vector<std::vector<double>>& numerators,
    const std::vector<std::vector<double>>& denominators, const std::vector<double>& coefficients,
    const BootstrapOptions& options)
{
    const size_t ratios = numerators.size();
    if (ratios == 0 || denominators.size() != ratios || coefficients.size() != ratios) {
        throw std::invalid_argument("bootstrapRatioCombination: no ratio, or numerators, denominators and "
                                    "coefficients differ in count");
    }
    const size_t n = numerators.front().size();
    for (size_t j = 0; j < ratios; ++j) {
        if (numerators[j].size() != n || denominators[j].size() != n) {
            throw std::invalid_argument("bootstrapRatioCombination: the ratios were measured on different items");
        }
    }
    const auto combination = [&](const auto& each) {
        double value = 0.0;
        for (size_t j = 0; j < ratios; ++j) {
            double num = 0.0;
            double den = 0.0;
            each([&](size_t i) {
                num += numerators[j][i];
                den += denominators[j][i];
            });
            value += coefficients[j] * (den > 0 ? num / den : 0.0);
        }
        return value;
    };
    const double estimate = combination([&](const auto& add) {
        for (size_t i = 0; i < n; ++i) {
            add(i);
        }
    });
    return percentileBootstrap(n, options, estimate, [&](const std::vector<size_t>& sample) {
        return combination([&](const auto& add) {
            for (size_t i : sample) {
                add(i);
            }
        });
    });
}

Interval pairedBootstrapDifference(const std::vector<double>& run, const std::vector<double>& base,
    const BootstrapOptions& options)
{
    if (run.size() != base.size()) {
        throw std::invalid_argument("pairedBootstrapDifference: the two runs were evaluated on different problem counts");
    }
    std::vector<double> differences(run.size());
    for (size_t i = 0; i < run.size(); ++i) {
        differences[i] = run[i] - base[i];
    }
    return bootstrapMean(differences, options);
}

Interval replicateBootstrapDifference(const std::vector<std::vector<double>>& run,
    const std::vector<std::vector<double>>& base, const BootstrapOptions& options)
{
    if (run.empty() || base.empty()) {
        throw std::invalid_argument("replicateBootstrapDifference: a group has no replicates");
    }
    const size_t n = run.front().size();
    for (const auto* group : {&run, &base}) {
        for (const auto& replicate : *group) {
            if (replicate.size() != n) {
                throw std::invalid_argument(
                    "replicateBootstrapDifference: the replicates were evaluated on different problem counts");
            }
        }
    }
    if (n == 0) {
        throw std::invalid_argument("bootstrap of an empty sample");
    }
    if (options.resamples < 1 || !(options.confidence > 0.0 && options.confidence < 1.0)) {
        throw std::invalid_argument("bootstrap needs resamples >= 1 and confidence in (0, 1)");
    }
    // mean over replicates of the mean over problems; the estimate uses every replicate once.
    const auto groupMean = [n](const std::vector<std::vector<double>>& group) {
        double sum = 0.0;
        for (const auto& replicate : group) {
            sum += std::accumulate(replicate.begin(), replicate.end(), 0.0);
        }
        return sum / static_cast<double>(n * group.size());
    };
    SplitMix64 rng(options.seed);
    std::vector<size_t> problems(n);
    std::vector<double> runSums(run.size());
    std::vector<double> baseSums(base.size());
    // Sum over the drawn problems of each replicate's values, then the mean of the drawn replicates' sums.
    const auto drawnMean = [&rng, n](const std::vector<std::vector<double>>& group, std::vector<double>& sums,
                               const std::vector<size_t>& drawn) {
        for (size_t r = 0; r < group.size(); ++r) {
            double sum = 0.0;
            for (const size_t i : drawn) {
                sum += group[r][i];
            }
            sums[r] = sum;
        }
        if (group.size() == 1) {
            return sums[0] / static_cast<double>(n);
        }
        double total = 0.0;
        for (size_t k = 0; k < group.size(); ++k) {
            total += sums[static_cast<size_t>(rng.below(group.size()))];
        }
        return total / static_cast<double>(n * group.size());
    };
    std::vector<double> statistics(static_cast<size_t>(options.resamples));
    for (double& statistic : statistics) {
        for (size_t& index : problems) {
            index = static_cast<size_t>(rng.below(n));
        }
        const double runMean = drawnMean(run, runSums, problems);
        statistic = runMean - drawnMean(base, baseSums, problems);
    }
    std::sort(statistics.begin(), statistics.end());
    const double alpha = 1.0 - options.confidence;
    Interval interval;
    interval.estimate = groupMean(run) - groupMean(base);
    interval.low = quantile(statistics, alpha / 2.0);
    interval.high = quantile(statistics, 1.0 - alpha / 2.0);
    interval.confidence = options.confidence;
    interval.resamples = options.resamples;
    return interval;
}

FailureVerdict applyFailureRule(const std::vector<std::vector<double>>& qRun,
    const std::vector<std::vector<double>>& qBase, const FailureRuleOptions& options)
{
    FailureVerdict verdict;
    verdict.difference = replicateBootstrapDifference(qRun, qBase, options.bootstrap);
    double runSum = 0.0;
    for (const auto& replicate : qRun) {
        runSum += mean(replicate);
    }
    double baseSum = 0.0;
    for (const auto& replicate : qBase) {
        baseSum += mean(replicate);
    }
    verdict.qualityRun = runSum / static_cast<double>(qRun.size());
    verdict.qualityBase = baseSum / static_cast<double>(qBase.size());
    verdict.relativeChange = (verdict.qualityRun - verdict.qualityBase) / verdict.qualityBase;
    verdict.failed = verdict.relativeChange >= options.relativeThreshold && verdict.difference.low > 0.0;
    return verdict;
}

FailureVerdict applyFailureRule(const std::vector<double>& qRun, const std::vector<double>& qBase,
    const FailureRuleOptions& options)
{
    FailureVerdict verdict;
    verdict.qualityRun = mean(qRun);
    verdict.qualityBase = mean(qBase);
    verdict.relativeChange = (verdict.qualityRun - verdict.qualityBase) / verdict.qualityBase;
    verdict.difference = pairedBootstrapDifference(qRun, qBase, options.bootstrap);
    verdict.failed = verdict.relativeChange >= options.relativeThreshold && verdict.difference.low > 0.0;
    return verdict;
}

}  // namespace mismatch::metrics

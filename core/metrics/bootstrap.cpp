#include "core/metrics/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>
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

namespace {

// Continued fraction of the regularized incomplete beta function I_x(a, b) (modified Lentz's method), valid for
// x < (a + 1) / (a + b + 2); betaRegularized uses the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) for the rest.
double betaContinuedFraction(double a, double b, double x)
{
    constexpr double kTiny = 1e-300;
    constexpr int kMaxTerms = 500;
    const auto guard = [](double v) { return std::abs(v) < kTiny ? kTiny : v; };
    double c = 1.0;
    double d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    double h = d;
    for (int m = 1; m <= kMaxTerms; ++m) {
        const double m2 = 2.0 * m;
        double term = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 / guard(1.0 + term * d);
        c = guard(1.0 + term / c);
        h *= d * c;
        term = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 / guard(1.0 + term * d);
        c = guard(1.0 + term / c);
        const double delta = d * c;
        h *= delta;
        if (std::abs(delta - 1.0) < 1e-15) {
            break;
        }
    }
    return h;
}

double betaRegularized(double a, double b, double x)
{
    if (x <= 0.0) {
        return 0.0;
    }
    if (x >= 1.0) {
        return 1.0;
    }
    const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x)
        + b * std::log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0)) {
        return front * betaContinuedFraction(a, b, x) / a;
    }
    return 1.0 - front * betaContinuedFraction(b, a, 1.0 - x) / b;
}

// P(T <= t) for T ~ t(nu): I_{nu / (nu + t^2)}(nu / 2, 1 / 2) / 2 is the tail beyond |t|.
double studentTDistribution(double t, double nu)
{
    const double tail = 0.5 * betaRegularized(nu / 2.0, 0.5, nu / (nu + t * t));
    return t > 0.0 ? 1.0 - tail : tail;
}

double sampleVariance(const std::vector<double>& values)
{
    const double m = mean(values);
    double sum = 0.0;
    for (const double v : values) {
        sum += (v - m) * (v - m);
    }
    return sum / static_cast<double>(values.size() - 1);
}

void checkFailureRuleOptions(const FailureRuleOptions& options)
{
    if (options.bootstrap.resamples < 2 || !(options.bootstrap.confidence > 0.0 && options.bootstrap.confidence < 1.0)) {
        throw std::invalid_argument("the failure rule needs resamples >= 2 and confidence in (0, 1)");
    }
}

Verdict verdictOf(const Interval& change, double line)
{
    if (change.low >= line) {
        return Verdict::Fail;
    }
    if (change.high < line) {
        return Verdict::Pass;
    }
    return Verdict::Undecided;
}

} // namespace

double studentTQuantile(double p, double degreesOfFreedom)
{
    if (!(p > 0.0 && p < 1.0) || !(degreesOfFreedom > 0.0)) {
        throw std::invalid_argument("studentTQuantile needs p in (0, 1) and degrees of freedom > 0");
    }
    const auto distribution = [degreesOfFreedom](double t) {
        return std::isinf(degreesOfFreedom) ? 0.5 * std::erfc(-t / std::sqrt(2.0))
                                            : studentTDistribution(t, degreesOfFreedom);
    };
    // Bisection on the increasing distribution function, in a bracket doubled until it holds p (a tiny p with few
    // degrees of freedom lies far out: t(0.001, 1) = -318.3).
    double low = -1.0;
    double high = 1.0;
    while (distribution(low) > p) {
        low *= 2.0;
    }
    while (distribution(high) < p) {
        high *= 2.0;
    }
    for (int i = 0; i < 200 && high - low > 1e-13 * std::max(1.0, std::abs(low)); ++i) {
        const double middle = 0.5 * (low + high);
        (distribution(middle) < p ? low : high) = middle;
    }
    return 0.5 * (low + high);
}

const char* verdictName(Verdict verdict)
{
    switch (verdict) {
    case Verdict::Pass:
        return "pass";
    case Verdict::Fail:
        return "fail";
    case Verdict::Undecided:
        return "undecided";
    }
    return "undecided";
}

std::optional<Verdict> parseVerdict(const std::string& word)
{
    for (const Verdict verdict : {Verdict::Pass, Verdict::Fail, Verdict::Undecided}) {
        if (word == verdictName(verdict)) {
            return verdict;
        }
    }
    return std::nullopt;
}

const char* const kFailureIntervalMethod
    = "relative quality change d = (Q_run - Q_base) / Q_base; one seed per group: paired percentile bootstrap over "
      "problems; two or more: d +- t(nu) * sqrt(V_problems + V_seeds), V_problems the variance of d over the paired "
      "problem bootstrap of the replicate-mean q, V_seeds each group's sample variance of its replicates' Q over "
      "the replicate count (delta method through the ratio), nu Welch-Satterthwaite's degrees of freedom; fail "
      "when the interval lies at or above the line, pass when below, undecided when it contains the line";

FailureVerdict applyFailureRule(const std::vector<std::vector<double>>& qRun,
    const std::vector<std::vector<double>>& qBase, const FailureRuleOptions& options)
{
    if (qRun.empty() || qBase.empty()) {
        throw std::invalid_argument("the failure rule: a group has no replicates");
    }
    const size_t n = qRun.front().size();
    for (const auto* group : {&qRun, &qBase}) {
        for (const auto& replicate : *group) {
            if (replicate.size() != n) {
                throw std::invalid_argument("the failure rule: the replicates were evaluated on different problem counts");
            }
        }
    }
    if (n == 0) {
        throw std::invalid_argument("the failure rule: no problems");
    }
    checkFailureRuleOptions(options);
    // Per problem, the replicate mean of each group; per replicate, its Q.
    const auto replicateMeans = [n](const std::vector<std::vector<double>>& group) {
        std::vector<double> means(n, 0.0);
        for (const auto& replicate : group) {
            for (size_t i = 0; i < n; ++i) {
                means[i] += replicate[i];
            }
        }
        for (double& m : means) {
            m /= static_cast<double>(group.size());
        }
        return means;
    };
    const std::vector<double> run = replicateMeans(qRun);
    const std::vector<double> base = replicateMeans(qBase);
    FailureVerdict verdict;
    verdict.qualityRun = mean(run);
    verdict.qualityBase = mean(base);
    if (!(verdict.qualityBase > 0.0)) {
        throw std::invalid_argument("the failure rule: the baseline's quality is not positive");
    }
    verdict.relativeChange = verdict.qualityRun / verdict.qualityBase - 1.0;

    // The paired problem bootstrap of d and of the mean difference, one draw of the problems for both.
    const BootstrapOptions& b = options.bootstrap;
    SplitMix64 rng(b.seed);
    std::vector<double> changes(static_cast<size_t>(b.resamples));
    std::vector<double> differences(static_cast<size_t>(b.resamples));
    for (size_t r = 0; r < changes.size(); ++r) {
        double runSum = 0.0;
        double baseSum = 0.0;
        for (size_t k = 0; k < n; ++k) {
            const auto i = static_cast<size_t>(rng.below(n));
            runSum += run[i];
            baseSum += base[i];
        }
        changes[r] = baseSum > 0.0 ? runSum / baseSum - 1.0 : 0.0;
        differences[r] = (runSum - baseSum) / static_cast<double>(n);
    }
    const double alpha = 1.0 - b.confidence;
    verdict.change.estimate = verdict.relativeChange;
    verdict.difference.estimate = verdict.qualityRun - verdict.qualityBase;
    for (Interval* interval : {&verdict.change, &verdict.difference}) {
        interval->confidence = b.confidence;
        interval->resamples = b.resamples;
    }
    if (qRun.size() == 1 && qBase.size() == 1) {
        verdict.degreesOfFreedom = std::numeric_limits<double>::infinity();
        for (auto [interval, draws] : {std::pair{&verdict.change, &changes}, std::pair{&verdict.difference, &differences}}) {
            std::sort(draws->begin(), draws->end());
            interval->low = quantile(*draws, alpha / 2.0);
            interval->high = quantile(*draws, 1.0 - alpha / 2.0);
        }
    } else {
        // Seed terms: each group's replicate Q's sample variance over its count (none for a single replicate).
        const auto seedTerm = [n](const std::vector<std::vector<double>>& group) {
            if (group.size() < 2) {
                return 0.0;
            }
            std::vector<double> qualities;
            for (const auto& replicate : group) {
                qualities.push_back(std::accumulate(replicate.begin(), replicate.end(), 0.0) / static_cast<double>(n));
            }
            return sampleVariance(qualities) / static_cast<double>(group.size());
        };
        const double seedRun = seedTerm(qRun);
        const double seedBase = seedTerm(qBase);
        const double qb = verdict.qualityBase;
        const double qr = verdict.qualityRun;
        const auto welch = [&](double termRun, double termBase, double problems, Interval& interval) {
            const double total = termRun + termBase + problems;
            double denominator = 0.0;
            if (qRun.size() > 1) {
                denominator += termRun * termRun / static_cast<double>(qRun.size() - 1);
            }
            if (qBase.size() > 1) {
                denominator += termBase * termBase / static_cast<double>(qBase.size() - 1);
            }
            const double nu = denominator > 0.0 ? total * total / denominator : std::numeric_limits<double>::infinity();
            const double half = studentTQuantile(1.0 - alpha / 2.0, nu) * std::sqrt(total);
            interval.low = interval.estimate - half;
            interval.high = interval.estimate + half;
            return nu;
        };
        verdict.degreesOfFreedom = welch(seedRun / (qb * qb), seedBase * (qr * qr) / (qb * qb * qb * qb),
            sampleVariance(changes), verdict.change);
        welch(seedRun, seedBase, sampleVariance(differences), verdict.difference);
    }
    verdict.verdict = verdictOf(verdict.change, options.relativeThreshold);
    return verdict;
}

FailureVerdict applyFailureRule(const std::vector<double>& qRun, const std::vector<double>& qBase,
    const FailureRuleOptions& options)
{
    if (qRun.size() != qBase.size()) {
        throw std::invalid_argument("the failure rule: the two runs were evaluated on different problem counts");
    }
    return applyFailureRule(std::vector<std::vector<double>> {qRun}, std::vector<std::vector<double>> {qBase}, options);
}

}  // namespace mismatch::metrics

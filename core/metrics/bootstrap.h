#pragma once
// Seeded bootstrap intervals and the spec's failure rule. The resampling uses the project's own
// deterministic generator so that a seed gives the same interval on every platform and library version.
#include "core/common/random.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::metrics {

// The project's deterministic generator (core/common/random.h), under the name metrics code uses.
using SplitMix64 = mismatch::SplitMix64;

struct Interval {
    double estimate = 0.0;  // the statistic on the original sample
    double low = 0.0;
    double high = 0.0;
    double confidence = 0.95;
    int resamples = 0;
};

struct BootstrapOptions {
    int resamples = 10000;
    double confidence = 0.95;
    std::uint64_t seed = 20261108;
};

// Percentile bootstrap interval of the mean of `values`.
Interval bootstrapMean(const std::vector<double>& values, const BootstrapOptions& options = {});
// Percentile bootstrap of sum(numerators) / sum(denominators), resampling items (e.g. prompts) with their
// token counts: the token-mean mismatch with prompts as the resampling unit.
Interval bootstrapRatio(const std::vector<double>& numerators, const std::vector<double>& denominators,
    const BootstrapOptions& options = {});
// Percentile bootstrap of a linear combination of ratios measured on the same items (prompts):
//   statistic = sum_j coefficients[j] * sum_i numerators[j][i] / sum_i denominators[j][i]
// resampling the items once per resample for every j (paired). A ratio whose denominators sum to zero counts as 0.
// With one ratio and coefficient 1 the draws and the interval are exactly bootstrapRatio's. Sizes must agree.
Interval bootstrapRatioCombination(const std::vector<std::vector<double>>& numerators,
    const std::vector<std::vector<double>>& denominators, const std::vector<double>& coefficients,
    const BootstrapOptions& options = {});
// Paired bootstrap of mean_i (run_i - base_i), resampling problems.
Interval pairedBootstrapDifference(const std::vector<double>& run, const std::vector<double>& base,
    const BootstrapOptions& options = {});

// Quantile of Student's t distribution with `degreesOfFreedom` (> 0, not necessarily whole; infinity gives the
// standard normal's): the t with P(T <= t) = p, p in (0, 1). From the regularized incomplete beta function
// (continued fraction) inverted by bisection; checked against printed tables in test_metrics.
double studentTQuantile(double p, double degreesOfFreedom);

// The spec's failure rule (spec "Failure rule"): the relative quality change d = (Q_run - Q_base) / Q_base and its
// interval decide, never the point estimate alone:
//   fail       the whole interval of d lies at or above the failure line (low >= line),
//   pass       it lies entirely below (high < line),
//   undecided  it contains the line.
enum class Verdict { Pass, Fail, Undecided };
// "pass", "fail", "undecided": the word every output uses.
const char* verdictName(Verdict verdict);
// The word back; nullopt for anything else.
std::optional<Verdict> parseVerdict(const std::string& word);

struct FailureRuleOptions {
    double relativeThreshold = 0.20; // the failure line for d
    BootstrapOptions bootstrap;
};

struct FailureVerdict {
    Verdict verdict = Verdict::Pass;
    double qualityRun = 0.0;
    double qualityBase = 0.0;
    double relativeChange = 0.0;     // d = (Q_run - Q_base) / Q_base
    Interval change;                 // interval of d: decides the verdict
    Interval difference;             // interval of mean(q_run - q_base), nats per token, by the same method
    // Degrees of freedom of the t quantile both intervals use; infinity when neither group has two seeds (the
    // interval is then the problems' percentile bootstrap).
    double degreesOfFreedom = 0.0;
    bool failed() const { return verdict == Verdict::Fail; }
};

// How the intervals are computed, in words (stored with every calibration and printed with it).
extern const char* const kFailureIntervalMethod;

// The rule on one evaluation per group (no seed replicates): the paired percentile bootstrap over problems of d and
// of mean(q_run - q_base) (`resamples` draws of the problems, one draw for both runs).
FailureVerdict applyFailureRule(const std::vector<double>& qRun, const std::vector<double>& qBase,
    const FailureRuleOptions& options = {});
// The rule on seed replicates: run[r][i] is replicate r's q of problem i (every replicate of both groups evaluated on
// the same problems, in the same order); Q_run and Q_base are the replicate means. With one replicate in each group
// this is the overload above. With two or more in either group the interval is
//     estimate +- t(nu, (1 + confidence) / 2) * sqrt(V_problems + V_seeds)
// V_problems: the variance of the statistic over the paired problem bootstrap of the replicate-mean q's;
// V_seeds: each group's seed variance (the sample variance of its replicates' Q, n - 1 in the denominator) over
// its replicate count, carried through d = Q_run / Q_base - 1 by the delta method (1 / Q_base^2 for the run's,
// (Q_run / Q_base^2)^2 for the base's); nu: Welch-Satterthwaite's degrees of freedom of the seed terms (n - 1 each;
// the problem term, from hundreds of problems, counts as exact). Resampling seeds with replacement instead, as
// before, gave 2 seeds the seed term (a - b)^2 / 8 instead of (a - b)^2 / 4 and a percentile from 3 values: the
// seed variance halved. test_metrics measures the coverage against simulations with known seed variance.
FailureVerdict applyFailureRule(const std::vector<std::vector<double>>& qRun,
    const std::vector<std::vector<double>>& qBase, const FailureRuleOptions& options = {});

}  // namespace mismatch::metrics

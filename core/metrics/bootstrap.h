#pragma once
// Seeded bootstrap intervals and the spec's failure rule. The resampling uses the project's own
// deterministic generator so that a seed gives the same interval on every platform and library version.
#include "core/common/random.h"

#include <cstdint>
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

// Seed replicates: run[r][i] is replicate r's value of problem i (every replicate of both groups evaluated on the
// same problems, in the same order). Two-level percentile bootstrap of
//     D = mean_i ( mean_r run[r][i] - mean_r base[r][i] ):
// each resample draws the problems with replacement (one draw for both groups: problems are paired) and then,
// independently for each group, as many replicates as it has, with replacement (seeds are not paired across
// configurations: runs with one seed and different engines diverge as they train). The interval so covers both
// problem and training-seed variance. A group with one replicate draws no seeds, so with one replicate in each group
// the draws are exactly those of pairedBootstrapDifference (the interval agrees with it up to summation order).
Interval replicateBootstrapDifference(const std::vector<std::vector<double>>& run,
    const std::vector<std::vector<double>>& base, const BootstrapOptions& options = {});

// The spec's failure rule: a run fails against the baseline at the same step when
// (Q_run - Q_base) / Q_base >= threshold AND the paired interval of mean(q_run - q_base) lies above zero.
struct FailureRuleOptions {
    double relativeThreshold = 0.20;
    BootstrapOptions bootstrap;
};

struct FailureVerdict {
    bool failed = false;
    double qualityRun = 0.0;
    double qualityBase = 0.0;
    double relativeChange = 0.0;  // (Q_run - Q_base) / Q_base
    Interval difference;          // paired interval of mean(q_run - q_base), nats per token
};

FailureVerdict applyFailureRule(const std::vector<double>& qRun, const std::vector<double>& qBase,
    const FailureRuleOptions& options = {});
// The rule on seed replicates: Q_run and Q_base are the replicate means of Q, the interval is
// replicateBootstrapDifference's (problems and seeds).
FailureVerdict applyFailureRule(const std::vector<std::vector<double>>& qRun,
    const std::vector<std::vector<double>>& qBase, const FailureRuleOptions& options = {});

}  // namespace mismatch::metrics

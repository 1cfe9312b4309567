// The sampled-token estimators beside the full KL (metrics/estimators.h) against float64 loops on fresh random
// distributions, the correlations against textbook formulas, and the paired bootstrap of a combination of ratios
// against bootstrapRatio and pairedRatioDifference (independent implementations of the same draws).
#include "core/analysis/rollout_measure.h"
#include "core/metrics/bootstrap.h"
#include "core/metrics/estimators.h"
#include "tests/common/test_main.h"

#include <nlohmann/json.hpp>

#include <QtTest>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>

using namespace mismatch;
using namespace mismatch::metrics;

namespace {

// Token means and correlations from the same float64 values, summed in another order (long double, one pass):
// only rounding differs, far below this.
constexpr double kTolerance = 1e-9;

struct RandomTokens {
    SampledTokenValues values;
    std::vector<double> k1, k3, multProbError, probDiff;
};

// N positions over a vocabulary of V: engine logits z, trainer logits z + eps (eps of scale `spread`), y drawn
// from mu; everything from the definitions with explicit loops in float64.
RandomTokens randomTokens(std::uint32_t seed, int positions, int vocab, double spread)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    RandomTokens result;
    for (int t = 0; t < positions; ++t) {
        std::vector<double> z(vocab), w(vocab);
        for (int v = 0; v < vocab; ++v) {
            z[v] = 2.0 * normal(rng);
            w[v] = z[v] + spread * normal(rng) * (1.0 + static_cast<double>(t % 5));
        }
        const auto logSoftmax = [](const std::vector<double>& x) {
            double m = x[0];
            for (double v : x) {
                m = std::max(m, v);
            }
            double s = 0.0;
            for (double v : x) {
                s += std::exp(v - m);
            }
            std::vector<double> out(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) {
                out[i] = x[i] - m - std::log(s);
            }
            return out;
        };
        const std::vector<double> logMu = logSoftmax(z);
        const std::vector<double> logPi = logSoftmax(w);
        double kl = 0.0;
        for (int v = 0; v < vocab; ++v) {
            kl += std::exp(logMu[v]) * (logMu[v] - logPi[v]);
        }
        double u = uniform(rng);
        int y = vocab - 1;
        for (int v = 0; v < vocab; ++v) {
            u -= std::exp(logMu[v]);
            if (u <= 0.0) {
                y = v;
                break;
            }
        }
        result.values.kl.push_back(kl);
        result.values.logMu.push_back(logMu[y]);
        result.values.logPi.push_back(logPi[y]);
        const double mu = std::exp(logMu[y]);
        const double pi = std::exp(logPi[y]);
        const double r = pi / mu;
        result.k1.push_back(std::log(mu) - std::log(pi));
        result.k3.push_back(r - 1.0 - std::log(r));
        result.multProbError.push_back(std::exp(std::fabs(std::log(pi) - std::log(mu))));
        result.probDiff.push_back(std::fabs(mu - pi));
    }
    return result;
}

double mean(const std::vector<double>& x)
{
    long double s = 0.0L;
    for (double v : x) {
        s += v;
    }
    return static_cast<double>(s / static_cast<long double>(x.size()));
}

// Textbook one-pass Pearson: (n sum xy - sum x sum y) / sqrt((n sum x^2 - (sum x)^2)(n sum y^2 - (sum y)^2)).
double textbookPearson(const std::vector<double>& x, const std::vector<double>& y)
{
    long double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    const auto n = static_cast<long double>(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        sx += x[i];
        sy += y[i];
        sxx += static_cast<long double>(x[i]) * x[i];
        syy += static_cast<long double>(y[i]) * y[i];
        sxy += static_cast<long double>(x[i]) * y[i];
    }
    return static_cast<double>((n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy)));
}

// Ranks by counting (O(n^2)): rank = #smaller + (#equal - 1) / 2, 0-based, ties averaged.
std::vector<double> countedRanks(const std::vector<double>& x)
{
    std::vector<double> ranks(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        double smaller = 0, equal = 0;
        for (std::size_t j = 0; j < x.size(); ++j) {
            smaller += x[j] < x[i] ? 1 : 0;
            equal += x[j] == x[i] ? 1 : 0;
        }
        ranks[i] = smaller + (equal - 1.0) / 2.0;
    }
    return ranks;
}

} // namespace

class TestEstimators : public QObject {
    Q_OBJECT

private slots:
    void estimatorsMatchFloat64Loops_data();
    void estimatorsMatchFloat64Loops();
    void correlationsEdgeCases();
    void estimatorJsonRoundTrip();
    void mismatchBinsAgainstACountingLoop();
    void ratioCombinationDrawsLikeBootstrapRatio();
    void ratioCombinationIsThePairedDifference();
};

void TestEstimators::estimatorsMatchFloat64Loops_data()
{
    QTest::addColumn<uint>("seed");
    QTest::addColumn<int>("positions");
    QTest::addColumn<int>("vocab");
    QTest::addColumn<double>("spread");
    QTest::newRow("close distributions") << 11u << 400 << 50 << 0.01;
    QTest::newRow("far distributions") << 12u << 300 << 258 << 0.5;
    QTest::newRow("few tokens") << 13u << 5 << 7 << 0.2;
}

void TestEstimators::estimatorsMatchFloat64Loops()
{
    QFETCH(uint, seed);
    QFETCH(int, positions);
    QFETCH(int, vocab);
    QFETCH(double, spread);
    const RandomTokens tokens = randomTokens(seed, positions, vocab, spread);
    const EstimatorComparison comparison = compareEstimators(tokens.values);
    QCOMPARE(comparison.tokens, std::int64_t(positions));
    QVERIFY(std::fabs(comparison.kl - mean(tokens.values.kl)) <= kTolerance);
    const std::vector<const std::vector<double>*> references
        = {&tokens.k1, &tokens.k3, &tokens.multProbError, &tokens.probDiff};
    const char* names[] = {"k1", "k3", "mult_prob_error", "prob_diff"};
    QCOMPARE(comparison.estimators.size(), std::size_t(4));
    for (std::size_t e = 0; e < 4; ++e) {
        const EstimatorSummary& summary = comparison.estimators[e];
        QCOMPARE(summary.name, std::string(names[e]));
        QVERIFY2(std::fabs(summary.mean - mean(*references[e])) <= kTolerance * std::max(1.0, std::fabs(summary.mean)),
            names[e]);
        QVERIFY(summary.pearson.has_value());
        QVERIFY2(std::fabs(*summary.pearson - textbookPearson(*references[e], tokens.values.kl)) <= 1e-7, names[e]);
        QVERIFY(summary.spearman.has_value());
        const double spearman
            = textbookPearson(countedRanks(*references[e]), countedRanks(tokens.values.kl));
        QVERIFY2(std::fabs(*summary.spearman - spearman) <= 1e-7, names[e]);
    }
    // Sanity of the definitions, not of the code: k3 and |mu - pi| are >= 0, the multiplicative error >= 1.
    QVERIFY(comparison.estimators[1].mean >= 0.0);
    QVERIFY(comparison.estimators[2].mean >= 1.0);
}

void TestEstimators::correlationsEdgeCases()
{
    // A constant series has no correlation; fewer than 3 pairs neither.
    QVERIFY(!pearsonCorrelation({1.0, 1.0, 1.0, 1.0}, {0.1, 0.5, 0.2, 0.3}).has_value());
    QVERIFY(!pearsonCorrelation({1.0, 2.0}, {3.0, 4.0}).has_value());
    // A monotone but non-linear relation: Spearman exactly 1, Pearson below 1.
    std::vector<double> x, y;
    for (int i = 1; i <= 20; ++i) {
        x.push_back(i);
        y.push_back(std::pow(static_cast<double>(i), 4.0));
    }
    QCOMPARE(*spearmanCorrelation(x, y), 1.0);
    QVERIFY(*pearsonCorrelation(x, y) < 0.99);
    QVERIFY(std::fabs(*spearmanCorrelation(x, std::vector<double>(y.rbegin(), y.rend())) + 1.0) < 1e-12);
    // Ties get their average rank: against the counted ranks.
    const std::vector<double> tied = {3, 1, 3, 2, 2, 2, 5, 1};
    const std::vector<double> other = {0.5, 0.1, 0.7, 0.2, 0.4, 0.3, 0.9, 0.0};
    QVERIFY(std::fabs(*spearmanCorrelation(tied, other) - textbookPearson(countedRanks(tied), countedRanks(other)))
        < 1e-12);
}

void TestEstimators::estimatorJsonRoundTrip()
{
    const EstimatorComparison comparison = compareEstimators(randomTokens(21, 40, 20, 0.3).values);
    const EstimatorComparison back = estimatorComparisonFromJson(nlohmann::json::parse(toJson(comparison).dump()));
    QCOMPARE(back.tokens, comparison.tokens);
    QCOMPARE(back.kl, comparison.kl);
    QCOMPARE(back.estimators.size(), comparison.estimators.size());
    for (std::size_t e = 0; e < back.estimators.size(); ++e) {
        QCOMPARE(back.estimators[e].name, comparison.estimators[e].name);
        QCOMPARE(back.estimators[e].mean, comparison.estimators[e].mean);
        QCOMPARE(back.estimators[e].pearson, comparison.estimators[e].pearson);
        QCOMPARE(back.estimators[e].spearman, comparison.estimators[e].spearman);
    }
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, estimatorComparisonFromJson(nlohmann::json::parse("{\"kl\": 1}")));
}

void TestEstimators::mismatchBinsAgainstACountingLoop()
{
    RandomTokens tokens = randomTokens(31, 500, 40, 0.4);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> uniform(0.0, 3.0);
    for (std::size_t t = 0; t < tokens.values.kl.size(); ++t) {
        tokens.values.entropyPi.push_back(uniform(rng));
    }
    tokens.values.entropyPi[0] = 0.3; // exactly on an edge: the bin above
    const EstimatorComparison comparison = compareEstimators(tokens.values);
    const auto check = [&](const std::vector<MismatchBin>& bins, const std::vector<double>& edges,
                           const std::function<double(std::size_t)>& key) {
        QCOMPARE(bins.size(), edges.size() - 1);
        double total = 0.0;
        for (double kl : tokens.values.kl) {
            total += kl;
        }
        std::int64_t counted = 0;
        for (std::size_t b = 0; b < bins.size(); ++b) {
            std::int64_t n = 0;
            double sum = 0.0;
            for (std::size_t t = 0; t < tokens.values.kl.size(); ++t) {
                const double k = key(t);
                const bool last = b + 1 == bins.size();
                if (k >= edges[b] && (last || k < edges[b + 1])) {
                    ++n;
                    sum += tokens.values.kl[t];
                }
            }
            QCOMPARE(bins[b].tokens, n);
            QVERIFY(std::fabs(bins[b].meanKl - (n > 0 ? sum / static_cast<double>(n) : 0.0)) <= kTolerance);
            QVERIFY(std::fabs(bins[b].klShare - sum / total) <= kTolerance);
            counted += n;
        }
        QCOMPARE(counted, comparison.tokens);
    };
    check(comparison.byProbability, kProbabilityEdges,
        [&](std::size_t t) { return std::exp(tokens.values.logMu[t]); });
    check(comparison.byEntropy, kEntropyEdges, [&](std::size_t t) { return tokens.values.entropyPi[t]; });
    QCOMPARE(comparison.byEntropy[3].low, 0.3);
    // Without entropies there are no entropy bins; the JSON round trip keeps the bins.
    const EstimatorComparison back = estimatorComparisonFromJson(nlohmann::json::parse(toJson(comparison).dump()));
    QCOMPARE(back.byEntropy.size(), comparison.byEntropy.size());
    QCOMPARE(back.byProbability[2].tokens, comparison.byProbability[2].tokens);
    tokens.values.entropyPi.clear();
    QVERIFY(compareEstimators(tokens.values).byEntropy.empty());
}

void TestEstimators::ratioCombinationDrawsLikeBootstrapRatio()
{
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<double> sums(37), tokens(37);
    for (std::size_t i = 0; i < sums.size(); ++i) {
        tokens[i] = 1.0 + std::floor(20.0 * uniform(rng));
        sums[i] = tokens[i] * 0.01 * uniform(rng);
    }
    BootstrapOptions options;
    options.resamples = 4000;
    options.seed = 77;
    const Interval one = bootstrapRatio(sums, tokens, options);
    const Interval combined = bootstrapRatioCombination({sums}, {tokens}, {1.0}, options);
    QCOMPARE(combined.estimate, one.estimate);
    QCOMPARE(combined.low, one.low);
    QCOMPARE(combined.high, one.high);
    // Scaled by a coefficient: every statistic scales, so do the quantiles.
    const Interval doubled = bootstrapRatioCombination({sums}, {tokens}, {2.0}, options);
    QVERIFY(std::fabs(doubled.low - 2.0 * one.low) <= 1e-15);
    QVERIFY(std::fabs(doubled.high - 2.0 * one.high) <= 1e-15);
    QVERIFY_THROWS_EXCEPTION(
        std::invalid_argument, bootstrapRatioCombination({sums}, {std::vector<double>(3, 1.0)}, {1.0}, options));
}

void TestEstimators::ratioCombinationIsThePairedDifference()
{
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const std::size_t n = 25;
    std::vector<double> aSums(n), bSums(n), cSums(n), aTok(n), bTok(n), cTok(n);
    std::vector<std::int64_t> aTokens(n), bTokens(n);
    for (std::size_t i = 0; i < n; ++i) {
        aTokens[i] = 1 + static_cast<std::int64_t>(15 * uniform(rng));
        bTokens[i] = 1 + static_cast<std::int64_t>(15 * uniform(rng));
        aTok[i] = static_cast<double>(aTokens[i]);
        bTok[i] = static_cast<double>(bTokens[i]);
        cTok[i] = 1 + std::floor(15 * uniform(rng));
        aSums[i] = aTok[i] * 0.02 * uniform(rng);
        bSums[i] = bTok[i] * 0.01 * uniform(rng);
        cSums[i] = cTok[i] * 0.03 * uniform(rng);
    }
    BootstrapOptions options;
    options.resamples = 3000;
    options.seed = 4;
    const Interval paired = analysis::pairedRatioDifference(aSums, aTokens, bSums, bTokens, options);
    const Interval combined = bootstrapRatioCombination({aSums, bSums}, {aTok, bTok}, {1.0, -1.0}, options);
    QCOMPARE(combined.estimate, paired.estimate);
    QCOMPARE(combined.low, paired.low);
    QCOMPARE(combined.high, paired.high);
    // Three ratios: the estimate is the linear combination of the full-sample ratios.
    const auto ratio = [](const std::vector<double>& s, const std::vector<double>& t) {
        return std::accumulate(s.begin(), s.end(), 0.0) / std::accumulate(t.begin(), t.end(), 0.0);
    };
    const Interval three
        = bootstrapRatioCombination({aSums, bSums, cSums}, {aTok, bTok, cTok}, {0.5, -1.5, 1.0}, options);
    QVERIFY(std::fabs(three.estimate - (0.5 * ratio(aSums, aTok) - 1.5 * ratio(bSums, bTok) + ratio(cSums, cTok)))
        <= 1e-15);
    QVERIFY(three.low <= three.estimate && three.estimate <= three.high);
}

MISMATCH_TEST_GUILESS_MAIN(TestEstimators)
#include "test_estimators.moc"

// Mismatch measures against float64 naive loops; bootstrap intervals and the failure rule.
#include "core/metrics/bootstrap.h"
#include "core/metrics/mismatch.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <numeric>
#include <random>

using namespace mismatch::metrics;

namespace {
// Naive float64 loops vs the ATen path in float64: only summation order differs.
constexpr double kKlTolerance = 1e-12;

struct Naive {
    std::vector<double> kl, k1, k3;
};

// Reference written from the definitions with explicit loops over positions and vocabulary.
Naive naiveMismatch(const std::vector<std::vector<double>>& engineLogits, const std::vector<std::vector<double>>& trainerLogits,
    const std::vector<long>& sampled)
{
    auto logSoftmax = [](const std::vector<double>& z) {
        double m = z[0];
        for (double v : z) m = std::max(m, v);
        double s = 0;
        for (double v : z) s += std::exp(v - m);
        std::vector<double> out(z.size());
        for (size_t i = 0; i < z.size(); ++i) out[i] = z[i] - m - std::log(s);
        return out;
    };
    Naive n;
    for (size_t t = 0; t < engineLogits.size(); ++t) {
        const auto lm = logSoftmax(engineLogits[t]);
        const auto lp = logSoftmax(trainerLogits[t]);
        double kl = 0;
        for (size_t v = 0; v < lm.size(); ++v) kl += std::exp(lm[v]) * (lm[v] - lp[v]);
        n.kl.push_back(kl);
        const double a = lm[static_cast<size_t>(sampled[t])];
        const double b = lp[static_cast<size_t>(sampled[t])];
        n.k1.push_back(a - b);
        const double r = std::exp(b - a);
        n.k3.push_back(r - 1 - std::log(r));
    }
    return n;
}

at::Tensor toTensor(const std::vector<std::vector<double>>& rows)
{
    at::Tensor t = at::empty({static_cast<long>(rows.size()), static_cast<long>(rows[0].size())}, at::kDouble);
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) t[static_cast<long>(i)][static_cast<long>(j)] = rows[i][j];
    return t;
}
}  // namespace

class TestMetrics : public QObject {
    Q_OBJECT
private slots:
    void mismatchMatchesNaiveLoops_data();
    void mismatchMatchesNaiveLoops();
    void trainerLogitsEqualTheirLogSoftmax();
    void identicalDistributionsHaveZeroMismatch();
    void accumulatorIsTokenMean();
    void bootstrapIsSeededAndCoversTheMean();
    void bootstrapRatioWeightsByTokens();
    void splitMixBelowIsUniform();
    void failureRule_data();
    void failureRule();
    void replicateBootstrapWithOneSeedIsThePairedBootstrap();
    void replicateBootstrapReachesEverySeedCombination();
    void replicateBootstrapWidensWithSeedVariance();
    void replicateFailureRuleUsesReplicateMeans();
};

void TestMetrics::mismatchMatchesNaiveLoops_data()
{
    QTest::addColumn<int>("positions");
    QTest::addColumn<int>("vocab");
    QTest::addColumn<double>("spread");
    QTest::addColumn<double>("noise");
    QTest::newRow("small vocab, mild") << 9 << 7 << 1.0 << 0.1;
    QTest::newRow("wide vocab, strong") << 5 << 300 << 4.0 << 1.5;
    QTest::newRow("peaked") << 6 << 50 << 12.0 << 0.05;
}

void TestMetrics::mismatchMatchesNaiveLoops()
{
    QFETCH(int, positions);
    QFETCH(int, vocab);
    QFETCH(double, spread);
    QFETCH(double, noise);
    std::mt19937_64 rng(static_cast<unsigned long>(positions * 1000 + vocab));
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<std::vector<double>> engine(positions, std::vector<double>(vocab));
    std::vector<std::vector<double>> trainer = engine;
    std::vector<long> sampled;
    for (int t = 0; t < positions; ++t) {
        for (int v = 0; v < vocab; ++v) {
            engine[t][v] = spread * normal(rng);
            trainer[t][v] = engine[t][v] + noise * normal(rng);
        }
        sampled.push_back(static_cast<long>(rng() % static_cast<unsigned long>(vocab)));
    }
    const Naive expected = naiveMismatch(engine, trainer, sampled);
    at::Tensor ids = at::empty({positions}, at::kLong);
    for (int t = 0; t < positions; ++t) ids[t] = sampled[static_cast<size_t>(t)];
    // float32 logits in, as the engine produces them: compare against the reference on the same float32 values.
    const TokenMismatch got = tokenMismatchFromLogits(toTensor(engine), toTensor(trainer), ids);
    for (int t = 0; t < positions; ++t) {
        QVERIFY(std::abs(got.kl[t].item<double>() - expected.kl[static_cast<size_t>(t)]) <= kKlTolerance * (1 + expected.kl[static_cast<size_t>(t)]));
        QVERIFY(std::abs(got.k1[t].item<double>() - expected.k1[static_cast<size_t>(t)]) <= kKlTolerance * (1 + std::abs(expected.k1[static_cast<size_t>(t)])));
        QVERIFY(std::abs(got.k3[t].item<double>() - expected.k3[static_cast<size_t>(t)]) <= kKlTolerance * (1 + expected.k3[static_cast<size_t>(t)]));
        QVERIFY(expected.kl[static_cast<size_t>(t)] > 0);
        QVERIFY(got.k3[t].item<double>() >= 0);
    }
    // The trainer's side given as logits (MismatchExtras::trainerLogits): the same reference.
    MismatchExtras fromLogits;
    fromLogits.trainerLogits = true;
    const TokenMismatch viaLogits
        = tokenMismatch(at::log_softmax(toTensor(engine).to(at::kDouble), -1), toTensor(trainer), ids, fromLogits);
    for (int t = 0; t < positions; ++t) {
        const auto i = static_cast<size_t>(t);
        QVERIFY(std::abs(viaLogits.kl[t].item<double>() - expected.kl[i]) <= kKlTolerance * (1 + expected.kl[i]));
        QVERIFY(std::abs(viaLogits.k1[t].item<double>() - expected.k1[i]) <= kKlTolerance * (1 + std::abs(expected.k1[i])));
        QVERIFY(std::abs(viaLogits.k3[t].item<double>() - expected.k3[i]) <= kKlTolerance * (1 + expected.k3[i]));
    }
}

// With the trainer's logits, log pi is taken a block of rows at a time inside tokenMismatch; a row's log_softmax
// does not depend on the rows beside it (the same per-row computation), so every value equals the whole batch's
// float64 log_softmax passed as log-probabilities, bit for bit, across several blocks (2^20 entries each).
void TestMetrics::trainerLogitsEqualTheirLogSoftmax()
{
    at::manual_seed(11);
    const std::int64_t rows = 23;
    const std::int64_t vocab = 100000; // 10 rows a block: three blocks
    const at::Tensor engineLogits = at::randn({rows, vocab}) * 3;
    const at::Tensor trainerLogits = (engineLogits + 0.2 * at::randn({rows, vocab})).to(at::kFloat);
    const at::Tensor logMu = at::log_softmax(engineLogits.to(at::kDouble), -1);
    const at::Tensor ids = at::randint(0, vocab, {rows}, at::kLong);
    MismatchExtras fromLogits;
    fromLogits.trainerLogits = true;
    fromLogits.entropy = true;
    MismatchExtras fromLogProbs;
    fromLogProbs.entropy = true;
    const TokenMismatch a = tokenMismatch(logMu, trainerLogits, ids, fromLogits);
    const TokenMismatch b = tokenMismatch(logMu, at::log_softmax(trainerLogits.to(at::kDouble), -1), ids, fromLogProbs);
    QVERIFY(at::equal(a.kl, b.kl));
    QVERIFY(at::equal(a.k1, b.k1));
    QVERIFY(at::equal(a.k3, b.k3));
    QVERIFY(at::equal(a.logPiY, b.logPiY));
    QVERIFY(at::equal(a.entropyPi, b.entropyPi));
    QVERIFY(a.kl.min().item<double>() > 0.0);
}

void TestMetrics::identicalDistributionsHaveZeroMismatch()
{
    at::manual_seed(7);
    const at::Tensor logits = at::randn({8, 40}, at::kFloat) * 3;
    const at::Tensor ids = at::randint(0, 40, {8}, at::kLong);
    const TokenMismatch m = tokenMismatchFromLogits(logits, logits.clone(), ids);
    QVERIFY(m.kl.abs().max().item<double>() < 1e-15);
    QVERIFY(m.k1.abs().max().item<double>() < 1e-15);
    QVERIFY(m.k3.abs().max().item<double>() < 1e-15);
}

void TestMetrics::accumulatorIsTokenMean()
{
    at::manual_seed(3);
    const at::Tensor a = at::randn({3, 10}), b = at::randn({3, 10}), c = at::randn({5, 10}), d = at::randn({5, 10});
    const TokenMismatch first = tokenMismatchFromLogits(a, b, at::zeros({3}, at::kLong));
    const TokenMismatch second = tokenMismatchFromLogits(c, d, at::ones({5}, at::kLong));
    MismatchAccumulator acc;
    acc.add(first);
    acc.add(second);
    QCOMPARE(acc.tokens, 8);
    const double expected = (first.kl.sum().item<double>() + second.kl.sum().item<double>()) / 8.0;
    QVERIFY(std::abs(acc.meanKl() - expected) < 1e-15);
    // A token mean, not a mean of the two batch means.
    QVERIFY(std::abs(acc.meanKl() - 0.5 * (first.kl.mean().item<double>() + second.kl.mean().item<double>())) > 1e-9);
}

void TestMetrics::bootstrapIsSeededAndCoversTheMean()
{
    std::mt19937_64 rng(11);
    std::normal_distribution<double> normal(0.3, 0.1);
    std::vector<double> values(200);
    for (double& v : values) v = normal(rng);
    BootstrapOptions options;
    options.resamples = 4000;
    options.seed = 42;
    const Interval a = bootstrapMean(values, options);
    const Interval b = bootstrapMean(values, options);
    QCOMPARE(a.low, b.low);
    QCOMPARE(a.high, b.high);
    options.seed = 43;
    const Interval c = bootstrapMean(values, options);
    QVERIFY(c.low != a.low);
    QVERIFY(a.low < a.estimate && a.estimate < a.high);
    // Width close to the normal-theory interval 2 * 1.96 * sd / sqrt(n) (sd 0.1, n 200): about 0.0277.
    const double width = a.high - a.low;
    QVERIFY2(width > 0.022 && width < 0.034, qPrintable(QString::number(width)));
}

void TestMetrics::bootstrapRatioWeightsByTokens()
{
    const std::vector<double> sums = {1.0, 10.0, 2.0};
    const std::vector<double> tokens = {10.0, 50.0, 20.0};
    const Interval r = bootstrapRatio(sums, tokens, {2000, 0.95, 5});
    QVERIFY(std::abs(r.estimate - 13.0 / 80.0) < 1e-15);
    QVERIFY(r.low <= r.estimate && r.estimate <= r.high);
    QVERIFY(r.low >= 0.1 - 1e-12 && r.high <= 0.2 + 1e-12);  // bounded by the per-item ratios
}

void TestMetrics::splitMixBelowIsUniform()
{
    SplitMix64 rng(1);
    std::vector<int> counts(6, 0);
    for (int i = 0; i < 60000; ++i) counts[rng.below(6)]++;
    for (int c : counts) QVERIFY2(std::abs(c - 10000) < 400, qPrintable(QString::number(c)));
}

void TestMetrics::failureRule_data()
{
    QTest::addColumn<double>("shift");
    QTest::addColumn<double>("noise");
    QTest::addColumn<int>("problems");
    QTest::addColumn<bool>("failed");
    QTest::newRow("same quality") << 0.0 << 0.05 << 300 << false;
    QTest::newRow("clear 30% rise") << 0.3 << 0.05 << 300 << true;
    QTest::newRow("10% rise, significant but small") << 0.1 << 0.01 << 300 << false;
    QTest::newRow("30% rise, too noisy") << 0.3 << 2.0 << 12 << false;
}

void TestMetrics::failureRule()
{
    QFETCH(double, shift);
    QFETCH(double, noise);
    QFETCH(int, problems);
    QFETCH(bool, failed);
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> base(0.5, 1.5);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> qBase(static_cast<size_t>(problems)), qRun(static_cast<size_t>(problems));
    for (size_t i = 0; i < qBase.size(); ++i) {
        qBase[i] = base(rng);
        // Large noise alternates in sign so that the mean rise stays exactly `shift` while the spread is wide.
        const double e = noise > 1.0 ? (i % 2 == 0 ? noise : -noise) * qBase[i] : noise * normal(rng);
        qRun[i] = qBase[i] * (1.0 + shift) + e;
    }
    const FailureVerdict v = applyFailureRule(qRun, qBase);
    QCOMPARE(v.failed, failed);
    if (noise > 1.0) {
        // The relative rise alone would fail it: the interval clause is what passes it.
        QVERIFY2(v.relativeChange >= 0.2, qPrintable(QString::number(v.relativeChange)));
        QVERIFY(v.difference.low <= 0.0);
    }
    QCOMPARE(v.difference.resamples, 10000);
    if (failed) {
        QVERIFY(v.relativeChange >= 0.2 && v.difference.low > 0);
    }
}

void TestMetrics::replicateBootstrapWithOneSeedIsThePairedBootstrap()
{
    // One replicate per group draws only problems, with the same generator sequence as the paired bootstrap; the
    // statistics differ by summation order only (sum of differences vs difference of sums).
    constexpr double kSummationTolerance = 1e-12;
    std::mt19937_64 rng(std::random_device {}());
    std::uniform_real_distribution<double> uniform(0.2, 2.0);
    std::vector<double> run(173), base(173);
    for (size_t i = 0; i < run.size(); ++i) {
        base[i] = uniform(rng);
        run[i] = base[i] * uniform(rng);
    }
    const BootstrapOptions options {3000, 0.9, rng()};
    const Interval paired = pairedBootstrapDifference(run, base, options);
    const Interval replicated = replicateBootstrapDifference({run}, {base}, options);
    QVERIFY(std::abs(paired.estimate - replicated.estimate) < kSummationTolerance);
    QVERIFY(std::abs(paired.low - replicated.low) < kSummationTolerance);
    QVERIFY(std::abs(paired.high - replicated.high) < kSummationTolerance);
}

void TestMetrics::replicateBootstrapReachesEverySeedCombination()
{
    // One problem, two seeds per group: a group's resampled mean is a1, (a1 + a2) / 2 or a2 with probabilities
    // 1/4, 1/2, 1/4, so every one of the nine differences has probability >= 1/16. The 2.5% and 97.5% quantiles of
    // 10,000 resamples are then the extreme combinations (min run - max base, max run - min base): 625 expected
    // draws of each against the 250 the quantile needs (a shortfall below 250 has probability < 1e-60).
    std::mt19937_64 rng(std::random_device {}());
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const std::vector<std::vector<double>> run = {{uniform(rng)}, {uniform(rng)}};
    const std::vector<std::vector<double>> base = {{uniform(rng)}, {uniform(rng)}};
    const Interval interval = replicateBootstrapDifference(run, base, {10000, 0.95, rng()});
    const double runLow = std::min(run[0][0], run[1][0]);
    const double runHigh = std::max(run[0][0], run[1][0]);
    const double baseLow = std::min(base[0][0], base[1][0]);
    const double baseHigh = std::max(base[0][0], base[1][0]);
    QCOMPARE(interval.low, runLow - baseHigh);
    QCOMPARE(interval.high, runHigh - baseLow);
    const double estimate = (run[0][0] + run[1][0]) / 2.0 - (base[0][0] + base[1][0]) / 2.0;
    QVERIFY(std::abs(interval.estimate - estimate) < 1e-15);
}

void TestMetrics::replicateBootstrapWidensWithSeedVariance()
{
    // The same problems; three seeds whose whole quality is offset by +-0.3 (seed variance) against three that
    // agree. The problem-only interval of one seed pair is narrow; the two-level one covers the seed spread.
    std::mt19937_64 rng(std::random_device {}());
    std::uniform_real_distribution<double> uniform(0.5, 1.5);
    std::normal_distribution<double> normal(0.0, 0.02);
    std::vector<double> problem(300);
    for (double& q : problem) q = uniform(rng);
    std::vector<std::vector<double>> agreeing(3, problem), disagreeing(3, problem);
    const double offsets[3] = {-0.3, 0.0, 0.3};
    for (size_t r = 0; r < 3; ++r) {
        for (size_t i = 0; i < problem.size(); ++i) {
            agreeing[r][i] += normal(rng);
            disagreeing[r][i] += offsets[r] + normal(rng);
        }
    }
    const BootstrapOptions options {4000, 0.95, rng()};
    const Interval problemsOnly = pairedBootstrapDifference(disagreeing[2], agreeing[2], options);
    const Interval twoLevel = replicateBootstrapDifference(disagreeing, agreeing, options);
    // Problem-only: a tight interval around +0.3, excluding zero.
    QVERIFY(problemsOnly.low > 0.25);
    // Two-level: resampling three seeds spans means from -0.3 to +0.3; the 95% interval must include zero and
    // reach well past +-0.1 on both sides (P(mean of 3 draws = 0 exactly) = 7/27, extremes 1/27 each).
    QVERIFY2(twoLevel.low < -0.1 && twoLevel.high > 0.1,
        qPrintable(QString("[%1, %2]").arg(twoLevel.low).arg(twoLevel.high)));
}

void TestMetrics::replicateFailureRuleUsesReplicateMeans()
{
    std::mt19937_64 rng(std::random_device {}());
    std::uniform_real_distribution<double> uniform(0.5, 1.5);
    std::vector<double> base(200);
    for (double& q : base) q = uniform(rng);
    std::vector<double> worse(base), better(base);
    for (size_t i = 0; i < base.size(); ++i) {
        worse[i] *= 1.5;
        better[i] *= 0.9;
    }
    const double qBase = std::accumulate(base.begin(), base.end(), 0.0) / 200.0;
    // Replicate means: run (1.5 + 0.9) / 2 = 1.2 x base -> +20%; the interval includes the 0.9x seed, so a
    // two-level draw of {better, better} gives a negative mean difference: not failed despite +20%.
    const FailureVerdict split = applyFailureRule({worse, better}, {base, base});
    QVERIFY(std::abs(split.qualityBase - qBase) < 1e-12);
    QVERIFY(std::abs(split.relativeChange - 0.2) < 1e-12);
    QVERIFY(split.difference.low < 0.0);
    QVERIFY(!split.failed);
    const FailureVerdict consistent = applyFailureRule({worse, worse}, {base, base});
    QVERIFY(std::abs(consistent.relativeChange - 0.5) < 1e-12);
    QVERIFY(consistent.difference.low > 0.0);
    QVERIFY(consistent.failed);
}

MISMATCH_TEST_GUILESS_MAIN(TestMetrics)
#include "test_metrics.moc"

// Mismatch measures against float64 naive loops; bootstrap intervals and the failure rule.
#include "core/metrics/bootstrap.h"
#include "core/metrics/mismatch.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
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
    void studentTQuantileMatchesTables();
    void oneSeedIsThePairedProblemBootstrap();
    void twoSeedsGiveTheFullSeedVariance();
    void seedIntervalCoversAtTheNominalRate_data();
    void seedIntervalCoversAtTheNominalRate();
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
    QTest::addColumn<QString>("verdict");
    QTest::newRow("same quality") << 0.0 << 0.05 << 300 << "pass";
    QTest::newRow("clear 30% rise") << 0.3 << 0.05 << 300 << "fail";
    QTest::newRow("10% rise, significant but small") << 0.1 << 0.01 << 300 << "pass";
    // A rise at the line: the interval of d contains 0.20 whatever the noise.
    QTest::newRow("20% rise") << 0.2 << 0.05 << 300 << "undecided";
    // 30% on average over 12 problems with +-2x swings: far too wide to say.
    QTest::newRow("30% rise, too noisy") << 0.3 << 2.0 << 12 << "undecided";
}

void TestMetrics::failureRule()
{
    QFETCH(double, shift);
    QFETCH(double, noise);
    QFETCH(int, problems);
    QFETCH(QString, verdict);
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
    QCOMPARE(QString(verdictName(v.verdict)), verdict);
    QCOMPARE(parseVerdict(verdict.toStdString()), std::optional<Verdict>(v.verdict));
    QCOMPARE(v.change.resamples, 10000);
    QVERIFY(std::isinf(v.degreesOfFreedom));
    // The verdict is the interval of d against the line, never the point estimate.
    QVERIFY(v.change.low <= v.relativeChange && v.relativeChange <= v.change.high);
    switch (v.verdict) {
    case Verdict::Fail:
        QVERIFY(v.change.low >= 0.2);
        break;
    case Verdict::Pass:
        QVERIFY(v.change.high < 0.2);
        break;
    case Verdict::Undecided:
        QVERIFY(v.change.low < 0.2 && v.change.high >= 0.2);
        break;
    }
    QVERIFY(!parseVerdict("failed"));
}

void TestMetrics::studentTQuantileMatchesTables()
{
    // Two-sided 95% (p = 0.975) and other points of Student's t, as printed to three decimals in standard tables.
    constexpr double kTableRounding = 5e-4;
    const std::vector<std::tuple<double, double, double>> table = {{0.975, 1, 12.706}, {0.975, 2, 4.303},
        {0.975, 3, 3.182}, {0.975, 5, 2.571}, {0.975, 10, 2.228}, {0.975, 30, 2.042}, {0.95, 1, 6.314},
        {0.95, 4, 2.132}, {0.995, 4, 4.604}, {0.995, 20, 2.845}, {0.9, 7, 1.415}};
    for (const auto& [p, nu, t] : table) {
        const double computed = studentTQuantile(p, nu);
        QVERIFY2(std::abs(computed - t) < kTableRounding,
            qPrintable(QString("t(%1, %2) = %3, table %4").arg(p).arg(nu).arg(computed).arg(t)));
        QVERIFY(std::abs(studentTQuantile(1.0 - p, nu) + computed) < 1e-9); // symmetric
    }
    QVERIFY(std::abs(studentTQuantile(0.975, std::numeric_limits<double>::infinity()) - 1.959964) < 1e-6);
    // Whole degrees of freedom are not required (Welch-Satterthwaite's are not): between its neighbours.
    const double between = studentTQuantile(0.975, 1.5);
    QVERIFY(between < 12.706 && between > 4.303);
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, studentTQuantile(1.0, 3.0));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, studentTQuantile(0.5, 0.0));
}

void TestMetrics::oneSeedIsThePairedProblemBootstrap()
{
    // One replicate per group: the interval of d is the percentile interval of the paired problem bootstrap of
    // sum(run) / sum(base) (bootstrapRatio draws the problems with the same generator sequence) minus one, and the
    // difference's that of pairedBootstrapDifference; they differ by summation order and the -1 only.
    constexpr double kSummationTolerance = 1e-12;
    std::mt19937_64 rng(std::random_device {}());
    std::uniform_real_distribution<double> uniform(0.2, 2.0);
    std::vector<double> run(173), base(173);
    for (size_t i = 0; i < run.size(); ++i) {
        base[i] = uniform(rng);
        run[i] = base[i] * uniform(rng);
    }
    FailureRuleOptions options;
    options.bootstrap = {3000, 0.9, rng()};
    const FailureVerdict v = applyFailureRule(run, base, options);
    const Interval ratio = bootstrapRatio(run, base, options.bootstrap);
    QVERIFY(std::abs(v.change.low - (ratio.low - 1.0)) < kSummationTolerance);
    QVERIFY(std::abs(v.change.high - (ratio.high - 1.0)) < kSummationTolerance);
    QVERIFY(std::abs(v.relativeChange - (ratio.estimate - 1.0)) < kSummationTolerance);
    const Interval paired = pairedBootstrapDifference(run, base, options.bootstrap);
    QVERIFY(std::abs(v.difference.low - paired.low) < kSummationTolerance);
    QVERIFY(std::abs(v.difference.high - paired.high) < kSummationTolerance);
    QCOMPARE(v.change.confidence, 0.9);
}

void TestMetrics::twoSeedsGiveTheFullSeedVariance()
{
    // Every problem of a replicate the same value: the problem bootstrap has no variance and the interval is the
    // seed term alone. Two seeds a1, a2 (run) and b1, b2 (base) with |a1 - a2| = |b1 - b2| = g: each group's seed
    // variance of its mean is (g^2 / 2) / 2 = g^2 / 4 (resampling two seeds with replacement gave g^2 / 8), the
    // Welch-Satterthwaite degrees of freedom (2v)^2 / (v^2 + v^2) = 2, t(0.975, 2) = 4.303 (tables), so the mean
    // difference's interval is D +- 4.303 * sqrt(g^2 / 2).
    constexpr double kTableRounding = 5e-4;
    const double a1 = 1.10, a2 = 1.30, b1 = 1.00, b2 = 0.80, g = 0.2;
    const std::vector<std::vector<double>> run = {std::vector<double>(50, a1), std::vector<double>(50, a2)};
    const std::vector<std::vector<double>> base = {std::vector<double>(50, b1), std::vector<double>(50, b2)};
    const FailureVerdict v = applyFailureRule(run, base);
    // The relative change's seed terms are scaled differently (1 / Q_base^2 for the run's, Q_run^2 / Q_base^4 for
    // the base's), so its degrees of freedom are (tr + tb)^2 / (tr^2 + tb^2) with tr = (g^2 / 4) / 0.81 and
    // tb = (g^2 / 4) * 1.44 / 0.6561 (Q_run = 1.2, Q_base = 0.9).
    const double tr = g * g / 4.0 / 0.81;
    const double tb = g * g / 4.0 * 1.44 / 0.6561;
    QVERIFY(std::abs(v.degreesOfFreedom - (tr + tb) * (tr + tb) / (tr * tr + tb * tb)) < 1e-9);
    const double d = (a1 + a2) / 2.0 - (b1 + b2) / 2.0;
    const double half = 4.303 * std::sqrt(g * g / 2.0);
    QVERIFY2(std::abs(v.difference.low - (d - half)) < kTableRounding * std::sqrt(g * g / 2.0) + 1e-12,
        qPrintable(QString("%1 vs %2").arg(v.difference.low).arg(d - half)));
    QVERIFY(std::abs(v.difference.high - (d + half)) < kTableRounding * std::sqrt(g * g / 2.0) + 1e-12);
    // d = 1.2 / 0.9 - 1 = +33%, but two seeds that disagree by 0.2 cannot decide it.
    QVERIFY(std::abs(v.relativeChange - (1.2 / 0.9 - 1.0)) < 1e-12);
    QCOMPARE(v.verdict, Verdict::Undecided);
}

void TestMetrics::seedIntervalCoversAtTheNominalRate_data()
{
    QTest::addColumn<int>("seeds");
    QTest::newRow("2 seeds") << 2;
    QTest::newRow("3 seeds") << 3;
    QTest::newRow("5 seeds") << 5;
}

void TestMetrics::seedIntervalCoversAtTheNominalRate()
{
    // Simulated calibration points with a known truth: per dataset, 60 problems drawn from a population
    // (difficulty ~ N(0.5, 0.2), floored at 0.05), the run's q = difficulty * (1 + d) + N(0, 0.05) per problem, so
    // that E[Q_run] / E[Q_base] - 1 = d = 0.2 exactly; every replicate (seed) shifts its whole Q by N(0, 0.05)
    // (10% of Q: seed variance dominating, the case two seeds understated) and each q by N(0, 0.05). The share of
    // datasets whose 95% interval of d contains 0.2 must be within 3 points of 95%: with 2000 datasets the
    // binomial standard error is 0.5 points, so a method off by 3 points fails and a correct one passes with
    // probability > 0.9999. Resamples are fewer than the default to keep the test short; they only estimate the
    // problem term's variance. Each run draws fresh data.
    QFETCH(int, seeds);
    constexpr int kDatasets = 2000;
    constexpr int kProblems = 60;
    constexpr double kTrueChange = 0.2;
    constexpr double kCoverageTolerance = 0.03;
    std::mt19937_64 rng(std::random_device {}());
    std::normal_distribution<double> difficulty(0.5, 0.2), seedShift(0.0, 0.05), noise(0.0, 0.05);
    FailureRuleOptions options;
    options.bootstrap.resamples = 200;
    int covered = 0;
    for (int dataset = 0; dataset < kDatasets; ++dataset) {
        std::vector<double> mu(kProblems), eta(kProblems);
        for (int i = 0; i < kProblems; ++i) {
            mu[static_cast<size_t>(i)] = std::max(0.05, difficulty(rng));
            eta[static_cast<size_t>(i)] = noise(rng);
        }
        std::vector<std::vector<double>> run(static_cast<size_t>(seeds)), base(static_cast<size_t>(seeds));
        for (size_t r = 0; r < run.size(); ++r) {
            const double shiftRun = seedShift(rng);
            const double shiftBase = seedShift(rng);
            for (size_t i = 0; i < mu.size(); ++i) {
                base[r].push_back(mu[i] + shiftBase + noise(rng));
                run[r].push_back(mu[i] * (1.0 + kTrueChange) + eta[i] + shiftRun + noise(rng));
            }
        }
        options.bootstrap.seed = rng();
        const FailureVerdict v = applyFailureRule(run, base, options);
        if (v.change.low <= kTrueChange && kTrueChange <= v.change.high) {
            ++covered;
        }
    }
    const double coverage = static_cast<double>(covered) / kDatasets;
    qInfo("%d seeds: %d of %d intervals (%.1f%%) contain the true change", seeds, covered, kDatasets, 100.0 * coverage);
    QVERIFY2(std::abs(coverage - 0.95) <= kCoverageTolerance, qPrintable(QString::number(coverage)));
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
    // Replicate means: run (1.5 + 0.9) / 2 = 1.2 x base -> +20%, on the line: whatever the seed spread, undecided.
    const FailureVerdict split = applyFailureRule({worse, better}, {base, base});
    QVERIFY(std::abs(split.qualityBase - qBase) < 1e-12);
    QVERIFY(std::abs(split.relativeChange - 0.2) < 1e-12);
    QVERIFY(split.change.low < 0.2 && split.change.high > 0.2);
    QCOMPARE(split.verdict, Verdict::Undecided);
    // Two seeds that agree, q_run = 1.5 q_base on every problem: no seed and no problem variance, d = +50% exactly.
    const FailureVerdict consistent = applyFailureRule({worse, worse}, {base, base});
    QVERIFY(std::abs(consistent.relativeChange - 0.5) < 1e-12);
    QVERIFY(std::abs(consistent.change.low - 0.5) < 1e-12);
    QVERIFY(consistent.difference.low > 0.0);
    QCOMPARE(consistent.verdict, Verdict::Fail);
}

MISMATCH_TEST_GUILESS_MAIN(TestMetrics)
#include "test_metrics.moc"

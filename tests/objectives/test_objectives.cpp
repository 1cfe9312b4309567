// Training objectives against float64 naive loops and central finite differences; the sampled-token OPD
// estimators against exact enumeration of the sampled token; GRPO normalisation and clipping; REINFORCE's
// sign; TIS and MIS corrections; padding positions that must not matter.
#include "core/train/objectives.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

using namespace mismatch::train;

namespace {
// ATen float64 against naive float64 loops: only summation order differs.
constexpr double kValueTolerance = 1e-12;
// Central differences with step kFiniteDifferenceStep in float64: truncation ~h^2, rounding ~1e-16 / h.
constexpr double kFiniteDifferenceStep = 1e-6;
constexpr double kFiniteDifferenceTolerance = 1e-8;
// Exact enumeration over the vocabulary, float64: sums of a few gradients.
constexpr double kExpectationTolerance = 1e-12;
constexpr double kCap = 2.0;
// float32 student logits (the trainer's dtype) against the float64 path.
constexpr double kFloat32Tolerance = 1e-5;

using Rows = std::vector<std::vector<double>>;

Rows toRows(const at::Tensor& t)
{
    const at::Tensor c = t.detach().to(at::kDouble).contiguous();
    Rows rows(static_cast<size_t>(c.size(0)), std::vector<double>(static_cast<size_t>(c.size(1))));
    const double* data = c.data_ptr<double>();
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j)
            rows[i][j] = data[i * rows[i].size() + j];
    return rows;
}

std::vector<double> toVector(const at::Tensor& t)
{
    const at::Tensor c = t.detach().to(at::kDouble).contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

std::vector<double> logSoftmax(const std::vector<double>& z)
{
    double m = z[0];
    for (double v : z)
        m = std::max(m, v);
    double s = 0;
    for (double v : z)
        s += std::exp(v - m);
    std::vector<double> out(z.size());
    for (size_t i = 0; i < z.size(); ++i)
        out[i] = z[i] - m - std::log(s);
    return out;
}

double maxAbsDifference(const at::Tensor& a, const at::Tensor& b)
{
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// A batch of B responses of up to T tokens over V tokens, flattened to N = B T positions. Response b has
// T - (b % 3) real tokens (at least 1) when `padded`, else T; the rest is padding.
struct Batch {
    at::Tensor logits; // [N, V] student logits
    at::Tensor teacher; // [N, V] teacher log-probabilities
    at::Tensor mask; // [N] bool
    at::Tensor sampled; // [N] sampled by the engine
    at::Tensor engineLogProbs; // [N] log mu(y)
    at::Tensor oldLogProbs; // [N] log pi_old(y), explicit so that correction weights are constants
    at::Tensor sequenceOf; // [N]
    at::Tensor rewards; // [B]
    std::int64_t sequences = 0;
    std::int64_t length = 0;

    EngineTokens engine() const { return {sampled, engineLogProbs, oldLogProbs}; }
};

Batch makeBatch(std::uint64_t seed, std::int64_t sequences, std::int64_t length, std::int64_t vocabulary, bool padded)
{
    at::manual_seed(seed);
    const std::int64_t n = sequences * length;
    Batch b;
    b.sequences = sequences;
    b.length = length;
    b.logits = at::randn({n, vocabulary}, at::kDouble) * 1.5;
    b.teacher = at::log_softmax(at::randn({n, vocabulary}, at::kDouble) * 1.5, -1);
    const at::Tensor engineLogProbs = at::log_softmax(b.logits + 0.3 * at::randn({n, vocabulary}, at::kDouble), -1);
    b.sampled = at::multinomial(engineLogProbs.exp(), 1).squeeze(1);
    b.engineLogProbs = engineLogProbs.gather(1, b.sampled.unsqueeze(1)).squeeze(1);
    b.oldLogProbs = b.engineLogProbs + 0.8 * at::randn({n}, at::kDouble);
    b.sequenceOf = at::arange(n, at::kLong).div(length, "floor");
    b.rewards = at::rand({sequences}, at::kDouble);
    b.mask = at::ones({n}, at::kBool);
    if (padded) {
        for (std::int64_t s = 0; s < sequences; ++s)
            for (std::int64_t t = std::max<std::int64_t>(1, length - s % 3); t < length; ++t)
                b.mask[s * length + t] = false;
    }
    return b;
}

// Naive per-token correction weight w = pi_old / mu and whether it is capped (TIS) or dropped (MIS).
struct NaiveWeight {
    double weight = 1.0;
    bool affected = false;
};

NaiveWeight naiveWeight(double logOld, double logMu, CorrectionOptions::Kind kind, double cap)
{
    const double ratio = std::exp(logOld - logMu);
    NaiveWeight w;
    if (kind == CorrectionOptions::Tis) {
        w.affected = ratio > cap;
        w.weight = std::min(ratio, cap);
    } else if (kind == CorrectionOptions::Mis) {
        w.affected = ratio < 1.0 / cap || ratio > cap;
        w.weight = w.affected ? 0.0 : 1.0;
    }
    return w;
}

at::Tensor leaf(const at::Tensor& t)
{
    return t.detach().clone().requires_grad_(true);
}
} // namespace

class TestObjectives : public QObject {
    Q_OBJECT
private slots:
    void opdFullKlMatchesNaiveLoop_data();
    void opdFullKlMatchesNaiveLoop();
    void opdFullKlGradientMatchesFiniteDifferences();
    void opdFullKlAtAWideVocabularyMatchesTheDefinition();
    void k1ExpectedGradientIsFullKlGradient();
    void k3ExpectedGradientHasForwardKlBias();
    void topKMatchesNaiveLoopAndFullKlAtV();
    void grpoAdvantagesAreNormalisedPerGroup();
    void grpoClipsOnlyOutsideTheTrustRegion();
    void reinforceRaisingARewardRaisesItsLogProb();
    void tisCapsWeightsAtC();
    void misMasksExactlyTokensOutsideTheBound();
    void paddingContributesNothing_data();
    void paddingContributesNothing();
    void float32LogitsMatchFloat64();
};

void TestObjectives::opdFullKlMatchesNaiveLoop_data()
{
    QTest::addColumn<int>("kind");
    QTest::newRow("none") << static_cast<int>(CorrectionOptions::None);
    QTest::newRow("tis") << static_cast<int>(CorrectionOptions::Tis);
    QTest::newRow("mis") << static_cast<int>(CorrectionOptions::Mis);
}

void TestObjectives::opdFullKlMatchesNaiveLoop()
{
    QFETCH(int, kind);
    const auto correctionKind = static_cast<CorrectionOptions::Kind>(kind);
    const Batch b = makeBatch(11, 4, 5, 9, true);
    const ObjectiveResult result = opdFullKl(b.logits, b.teacher, b.mask, b.engine(), {correctionKind, kCap});

    const Rows logits = toRows(b.logits);
    const Rows teacher = toRows(b.teacher);
    const std::vector<double> mask = toVector(b.mask);
    const std::vector<double> logOld = toVector(b.oldLogProbs);
    const std::vector<double> logMu = toVector(b.engineLogProbs);
    double weightedSum = 0, counted = 0, klSum = 0, entropySum = 0, weightSum = 0, affected = 0, real = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
        if (mask[t] == 0)
            continue;
        const std::vector<double> ls = logSoftmax(logits[t]);
        double kl = 0, entropy = 0;
        for (size_t v = 0; v < ls.size(); ++v) {
            kl += std::exp(ls[v]) * (ls[v] - teacher[t][v]);
            entropy -= std::exp(ls[v]) * ls[v];
        }
        const NaiveWeight w = naiveWeight(logOld[t], logMu[t], correctionKind, kCap);
        real += 1;
        klSum += kl;
        entropySum += entropy;
        weightSum += w.weight;
        affected += w.affected ? 1 : 0;
        if (correctionKind == CorrectionOptions::Mis && w.affected)
            continue;
        weightedSum += w.weight * kl;
        counted += 1;
    }
    if (correctionKind != CorrectionOptions::None) {
        QVERIFY2(affected > 0, "the random ratios must engage the correction for this test to mean anything");
    }
    QCOMPARE(result.tokens, static_cast<std::int64_t>(real));
    QVERIFY(std::abs(result.loss.item<double>() - weightedSum / counted) < kValueTolerance);
    QVERIFY(std::abs(result.meanKl - klSum / real) < kValueTolerance);
    QVERIFY(std::abs(result.studentEntropy - entropySum / real) < kValueTolerance);
    QVERIFY(std::abs(result.meanWeight - weightSum / real) < kValueTolerance);
    QVERIFY(std::abs(result.clippedFraction - affected / real) < kValueTolerance);
}

void TestObjectives::opdFullKlGradientMatchesFiniteDifferences()
{
    const Batch b = makeBatch(23, 2, 3, 7, true);
    for (auto kind : {CorrectionOptions::None, CorrectionOptions::Tis}) {
        const CorrectionOptions correction {kind, kCap};
        at::Tensor logits = leaf(b.logits);
        opdFullKl(logits, b.teacher, b.mask, b.engine(), correction).loss.backward();
        const at::Tensor analytic = logits.grad();

        at::Tensor numeric = at::zeros_like(b.logits);
        for (std::int64_t i = 0; i < b.logits.size(0); ++i) {
            for (std::int64_t j = 0; j < b.logits.size(1); ++j) {
                at::Tensor plus = b.logits.clone(), minus = b.logits.clone();
                plus[i][j] += kFiniteDifferenceStep;
                minus[i][j] -= kFiniteDifferenceStep;
                const double fPlus = opdFullKl(plus, b.teacher, b.mask, b.engine(), correction).loss.item<double>();
                const double fMinus = opdFullKl(minus, b.teacher, b.mask, b.engine(), correction).loss.item<double>();
                numeric[i][j] = (fPlus - fMinus) / (2 * kFiniteDifferenceStep);
            }
        }
        QVERIFY2(maxAbsDifference(analytic, numeric) < kFiniteDifferenceTolerance,
            qPrintable(QString("kind %1: max difference %2").arg(kind).arg(maxAbsDifference(analytic, numeric))));
        QVERIFY(analytic.abs().max().item<double>() > 1e-3); // a gradient worth comparing
    }
}

// opdFullKl's per-token KL has a backward of its own and computes its rows a group at a time (groups of at most
// 2^22 entries). At V = 50,000 and 120 rows (two groups, the second partial), fresh random logits with garbage in
// the padding rows, against autograd through the defining formula (log_softmax, exp, product, sum) in float64:
// loss, gradient, KL and entropy within kValueTolerance-like rounding of the two summation orders, scaled by the
// row length (each row sums 50,000 terms); and float32 logits against the float64 result within kFloat32Tolerance.
void TestObjectives::opdFullKlAtAWideVocabularyMatchesTheDefinition()
{
    constexpr std::int64_t kVocabulary = 50000;
    constexpr double kWideTolerance = 1e-10;
    Batch b = makeBatch(97, 8, 15, kVocabulary, true);
    QVERIFY2(b.logits.numel() > (std::int64_t {1} << 22), "the batch must span more than one row group");
    const at::Tensor padding = b.mask.logical_not();
    b.logits.index_put_({padding}, std::numeric_limits<double>::quiet_NaN());
    b.teacher.index_put_({padding}, -std::numeric_limits<double>::infinity());

    at::Tensor logits = leaf(b.logits);
    const ObjectiveResult result = opdFullKl(logits, b.teacher, b.mask);
    result.loss.backward();

    at::Tensor reference = leaf(b.logits);
    const at::Tensor real = b.mask.unsqueeze(1);
    const at::Tensor logP = at::log_softmax(reference.masked_fill(real.logical_not(), 0.0), -1);
    const at::Tensor logT = b.teacher.masked_fill(real.logical_not(), 0.0);
    const at::Tensor kl = (logP.exp() * (logP - logT)).sum(-1);
    const at::Tensor counted = b.mask.to(at::kDouble);
    const at::Tensor loss = (kl * counted).sum() / counted.sum();
    loss.backward();
    const double tokens = counted.sum().item<double>();
    const at::Tensor probs = logP.detach().exp();
    const double entropy = (-(probs * logP.detach()).sum(-1) * counted).sum().item<double>() / tokens;

    QVERIFY2(std::abs(result.loss.item<double>() - loss.item<double>()) < kWideTolerance,
        qPrintable(QString::number(result.loss.item<double>() - loss.item<double>())));
    QVERIFY(std::abs(result.meanKl - loss.item<double>()) < kWideTolerance);
    QVERIFY(std::abs(result.studentEntropy - entropy) < kWideTolerance);
    QVERIFY(logits.grad().isfinite().all().item<bool>());
    QVERIFY2(maxAbsDifference(logits.grad(), reference.grad()) < kWideTolerance,
        qPrintable(QString::number(maxAbsDifference(logits.grad(), reference.grad()))));
    QVERIFY(logits.grad().index({padding}).abs().max().item<double>() == 0.0);
    QVERIFY(reference.grad().abs().max().item<double>() > 1e-6); // a gradient worth comparing

    at::Tensor narrow = leaf(b.logits.to(at::kFloat));
    const ObjectiveResult single = opdFullKl(narrow, b.teacher.to(at::kFloat), b.mask);
    single.loss.backward();
    QCOMPARE(single.loss.scalar_type(), at::kFloat);
    QVERIFY(std::abs(single.loss.item<double>() - loss.item<double>()) < kFloat32Tolerance);
    QVERIFY(maxAbsDifference(narrow.grad(), reference.grad()) < kFloat32Tolerance);
    QVERIFY(!opdFullKlUsesFusedKernel(narrow)); // CPU tensors: the ATen forward
}

void TestObjectives::k1ExpectedGradientIsFullKlGradient()
{
    // E_{y ~ p_s}[grad l_k1(y)] = grad KL(p_s || p_t): enumerate y exactly, weighting each by p_s(y) per position.
    const Batch b = makeBatch(31, 1, 4, 6, false);
    const std::int64_t n = b.logits.size(0), vocabulary = b.logits.size(1);
    at::Tensor logits = leaf(b.logits);
    opdFullKl(logits, b.teacher, b.mask).loss.backward();
    const at::Tensor fullGradient = logits.grad().clone();

    const at::Tensor probs = at::softmax(b.logits, -1);
    at::Tensor expected = at::zeros_like(b.logits);
    for (std::int64_t y = 0; y < vocabulary; ++y) {
        EngineTokens engine;
        engine.sampled = at::full({n}, y, at::kLong);
        at::Tensor sampleLogits = leaf(b.logits);
        opdK1(sampleLogits, b.teacher, b.mask, engine).loss.backward();
        expected += probs.select(1, y).unsqueeze(1) * sampleLogits.grad();

        // The teacher's sampled-token log-probabilities alone give the same loss and gradient.
        at::Tensor narrowLogits = leaf(b.logits);
        const at::Tensor teacherY = b.teacher.gather(1, engine.sampled.unsqueeze(1)).squeeze(1);
        opdK1(narrowLogits, teacherY, b.mask, engine).loss.backward();
        QVERIFY(maxAbsDifference(narrowLogits.grad(), sampleLogits.grad()) < kValueTolerance);
    }
    QVERIFY2(maxAbsDifference(expected, fullGradient) < kExpectationTolerance,
        qPrintable(QString::number(maxAbsDifference(expected, fullGradient))));
    QVERIFY(fullGradient.abs().max().item<double>() > 1e-3);
}

void TestObjectives::k3ExpectedGradientHasForwardKlBias()
{
    // E_{y ~ p_s}[grad l_k3(y)] = grad KL(p_s || p_t) + (p_t - p_s) / n per position (token mean over n).
    const Batch b = makeBatch(37, 1, 4, 6, false);
    const std::int64_t n = b.logits.size(0), vocabulary = b.logits.size(1);
    at::Tensor logits = leaf(b.logits);
    opdFullKl(logits, b.teacher, b.mask).loss.backward();
    const at::Tensor probs = at::softmax(b.logits, -1);
    const at::Tensor bias = (b.teacher.exp() - probs) / static_cast<double>(n);
    QVERIFY2(bias.abs().max().item<double>() > 1e-2, "the bias term must be visible for the test to tell k1 from k3");

    at::Tensor expected = at::zeros_like(b.logits);
    for (std::int64_t y = 0; y < vocabulary; ++y) {
        EngineTokens engine;
        engine.sampled = at::full({n}, y, at::kLong);
        at::Tensor sampleLogits = leaf(b.logits);
        opdK3(sampleLogits, b.teacher, b.mask, engine).loss.backward();
        expected += probs.select(1, y).unsqueeze(1) * sampleLogits.grad();
    }
    QVERIFY2(maxAbsDifference(expected, logits.grad() + bias) < kExpectationTolerance,
        qPrintable(QString::number(maxAbsDifference(expected, logits.grad() + bias))));
}

void TestObjectives::topKMatchesNaiveLoopAndFullKlAtV()
{
    const Batch b = makeBatch(41, 3, 4, 8, true);
    const std::int64_t k = 3;
    const ObjectiveResult result = opdTopK(b.logits, b.teacher, b.mask, k);

    const Rows logits = toRows(b.logits);
    const Rows teacher = toRows(b.teacher);
    const std::vector<double> mask = toVector(b.mask);
    double sum = 0, real = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
        if (mask[t] == 0)
            continue;
        std::vector<size_t> order(logits[t].size());
        std::iota(order.begin(), order.end(), size_t {0});
        std::sort(order.begin(), order.end(), [&](size_t a, size_t c) { return logits[t][a] > logits[t][c]; });
        std::vector<double> zs, zt;
        for (std::int64_t i = 0; i < k; ++i) {
            zs.push_back(logits[t][order[static_cast<size_t>(i)]]);
            zt.push_back(teacher[t][order[static_cast<size_t>(i)]]);
        }
        const std::vector<double> qs = logSoftmax(zs), qt = logSoftmax(zt);
        double kl = 0;
        for (size_t i = 0; i < qs.size(); ++i)
            kl += std::exp(qs[i]) * (qs[i] - qt[i]);
        sum += kl;
        real += 1;
    }
    QVERIFY(std::abs(result.loss.item<double>() - sum / real) < kValueTolerance);
    QVERIFY(std::abs(result.meanKl - sum / real) < kValueTolerance);

    at::Tensor topLogits = leaf(b.logits), fullLogits = leaf(b.logits);
    const ObjectiveResult all = opdTopK(topLogits, b.teacher, b.mask, b.logits.size(1));
    const ObjectiveResult full = opdFullKl(fullLogits, b.teacher, b.mask);
    all.loss.backward();
    full.loss.backward();
    QVERIFY(std::abs(all.loss.item<double>() - full.loss.item<double>()) < kValueTolerance);
    QVERIFY(maxAbsDifference(topLogits.grad(), fullLogits.grad()) < kValueTolerance);
}

void TestObjectives::grpoAdvantagesAreNormalisedPerGroup()
{
    GrpoOptions options;
    options.groupSize = 4;
    at::manual_seed(53);
    at::Tensor rewards = at::cat(
        {at::rand({8}, at::kDouble), at::tensor({1.0, 0.0, 0.0, 1.0}, at::kDouble), at::ones({4}, at::kDouble)});
    const std::vector<double> advantages = toVector(grpoAdvantages(rewards, options));
    const std::vector<double> r = toVector(rewards);
    QCOMPARE(advantages.size(), r.size());
    for (size_t g = 0; g < r.size() / 4; ++g) {
        double mean = 0, variance = 0, advantageMean = 0, advantageVariance = 0;
        for (size_t i = 0; i < 4; ++i)
            mean += r[g * 4 + i] / 4;
        for (size_t i = 0; i < 4; ++i)
            variance += (r[g * 4 + i] - mean) * (r[g * 4 + i] - mean) / 4;
        const double deviation = std::sqrt(variance);
        for (size_t i = 0; i < 4; ++i) {
            const double a = advantages[g * 4 + i];
            QVERIFY(std::abs(a - (r[g * 4 + i] - mean) / (deviation + options.advantageEpsilon)) < kValueTolerance);
            advantageMean += a / 4;
        }
        for (size_t i = 0; i < 4; ++i)
            advantageVariance += (advantages[g * 4 + i] - advantageMean) * (advantages[g * 4 + i] - advantageMean) / 4;
        QVERIFY(std::abs(advantageMean) < kValueTolerance);
        if (g < 3) {
            // std / (std + eps): 1 up to eps / std.
            QVERIFY2(
                std::abs(std::sqrt(advantageVariance) - 1.0) < 1e-4, qPrintable(QString::number(advantageVariance)));
        } else {
            QVERIFY(std::sqrt(advantageVariance) < kValueTolerance); // equal rewards: no signal
        }
    }
}

void TestObjectives::grpoClipsOnlyOutsideTheTrustRegion()
{
    // Two responses of one prompt: rewards 1 and 0 give advantages +-1 (up to eps). Each response's tokens get
    // ratios p_s(y) / mu(y) set by choosing mu.
    const std::vector<double> targetRatio = {1.5, 0.5, 1.1, 0.9, 1.3, 0.7};
    const auto length = static_cast<std::int64_t>(targetRatio.size());
    Batch b = makeBatch(59, 2, length, 5, false);
    b.rewards = at::tensor({1.0, 0.0}, at::kDouble);
    const at::Tensor logProbs = at::log_softmax(b.logits, -1);
    const at::Tensor logPy = logProbs.gather(1, b.sampled.unsqueeze(1)).squeeze(1);
    at::Tensor logRatio = at::empty({2 * length}, at::kDouble);
    for (std::int64_t t = 0; t < 2 * length; ++t)
        logRatio[t] = std::log(targetRatio[static_cast<size_t>(t % length)]);
    b.engineLogProbs = logPy - logRatio;
    GrpoOptions options;
    options.groupSize = 2;

    at::Tensor logits = leaf(b.logits);
    const ObjectiveResult result = grpo(logits, b.mask, b.sequenceOf, b.rewards, b.engine(), options);
    result.loss.backward();
    const at::Tensor advantages = grpoAdvantages(b.rewards, options);
    QVERIFY(advantages[0].item<double>() > 0.99 && advantages[1].item<double>() < -0.99);

    const Rows probs = toRows(logProbs.exp());
    const Rows gradient = toRows(logits.grad());
    const std::vector<double> sampled = toVector(b.sampled);
    const std::vector<double> ratio = toVector((logPy - b.engineLogProbs).exp());
    const double n = static_cast<double>(2 * length);
    double loss = 0, clipped = 0;
    for (size_t t = 0; t < ratio.size(); ++t) {
        const double a = advantages[static_cast<std::int64_t>(t) / length].item<double>();
        const double r = ratio[t];
        const double c = std::min(std::max(r, 1.0 - options.clipEpsilon), 1.0 + options.clipEpsilon);
        loss -= std::min(r * a, c * a) / n;
        const bool isClipped = (a > 0 && r > 1.0 + options.clipEpsilon) || (a < 0 && r < 1.0 - options.clipEpsilon);
        clipped += isClipped ? 1 : 0;
        for (size_t v = 0; v < gradient[t].size(); ++v) {
            // Unclipped: d(-r a)/dz_v = -a r (1[v = y] - p_s(v)) / n; clipped: exactly zero.
            const double indicator = static_cast<double>(v) == sampled[t] ? 1.0 : 0.0;
            const double expected = isClipped ? 0.0 : -a * r * (indicator - probs[t][v]) / n;
            if (isClipped) {
                QVERIFY(gradient[t][v] == 0.0);
            } else {
                QVERIFY(std::abs(gradient[t][v] - expected) < kValueTolerance);
            }
        }
        if (!isClipped)
            QVERIFY(std::abs(gradient[t][static_cast<size_t>(sampled[t])]) > 1e-4);
    }
    // By construction: advantage > 0 clips ratios 1.5 and 1.3, advantage < 0 clips 0.5 and 0.7.
    QCOMPARE(clipped, 4.0);
    QVERIFY(std::abs(result.clippedFraction - clipped / n) < kValueTolerance);
    QVERIFY(std::abs(result.loss.item<double>() - loss) < kValueTolerance);
}

void TestObjectives::reinforceRaisingARewardRaisesItsLogProb()
{
    const Batch b = makeBatch(61, 4, 3, 6, false);
    const double learningRate = 0.5;
    auto sequenceZeroLogProbAfterStep = [&](const std::vector<double>& rewards) {
        at::Tensor logits = leaf(b.logits);
        reinforce(logits, b.mask, b.sequenceOf, at::tensor(rewards, at::kDouble), b.engine()).loss.backward();
        const at::Tensor stepped = b.logits - learningRate * logits.grad();
        const at::Tensor logPy = at::log_softmax(stepped, -1).gather(1, b.sampled.unsqueeze(1)).squeeze(1);
        return logPy.slice(0, 0, b.length).sum().item<double>();
    };
    const double before = at::log_softmax(b.logits, -1)
                              .gather(1, b.sampled.unsqueeze(1))
                              .squeeze(1)
                              .slice(0, 0, b.length)
                              .sum()
                              .item<double>();
    const std::vector<double> low = {0.2, 0.9, 0.4, 0.7}; // response 0 below the batch mean 0.55
    const std::vector<double> high = {1.4, 0.9, 0.4, 0.7}; // response 0 above the batch mean 0.85
    const double afterLow = sequenceZeroLogProbAfterStep(low);
    const double afterHigh = sequenceZeroLogProbAfterStep(high);
    QVERIFY2(afterHigh > afterLow, qPrintable(QString("%1 vs %2").arg(afterHigh).arg(afterLow)));
    QVERIFY(afterLow < before); // below the baseline: pushed down
    QVERIFY(afterHigh > before); // above the baseline: pushed up
}

void TestObjectives::tisCapsWeightsAtC()
{
    const Batch b = makeBatch(67, 5, 4, 7, true);
    const CorrectionOptions tis {CorrectionOptions::Tis, kCap};
    const CorrectionWeights weights = correctionWeights(b.oldLogProbs, b.engineLogProbs, tis);
    const std::vector<double> w = toVector(weights.weight);
    const std::vector<double> logOld = toVector(b.oldLogProbs), logMu = toVector(b.engineLogProbs);
    const std::vector<double> affected = toVector(weights.affected);
    int capped = 0;
    for (size_t t = 0; t < w.size(); ++t) {
        const NaiveWeight naive = naiveWeight(logOld[t], logMu[t], CorrectionOptions::Tis, kCap);
        QVERIFY(w[t] <= kCap);
        QVERIFY(std::abs(w[t] - naive.weight) < kValueTolerance);
        QCOMPARE(affected[t] != 0, naive.affected);
        capped += naive.affected ? 1 : 0;
    }
    QVERIFY2(capped > 0 && capped < static_cast<int>(w.size()), "some ratios must exceed C and some not");

    // REINFORCE with TIS against a naive loop: -(1/n) sum_t min(w_t, C) (R_b - mean R) log p_s(y_t).
    const ObjectiveResult result = reinforce(b.logits, b.mask, b.sequenceOf, b.rewards, b.engine(), tis);
    const Rows logits = toRows(b.logits);
    const std::vector<double> mask = toVector(b.mask), sampled = toVector(b.sampled), rewards = toVector(b.rewards);
    const double baseline = std::accumulate(rewards.begin(), rewards.end(), 0.0) / static_cast<double>(rewards.size());
    double sum = 0, real = 0, cappedReal = 0;
    for (size_t t = 0; t < logits.size(); ++t) {
        if (mask[t] == 0)
            continue;
        const double logPy = logSoftmax(logits[t])[static_cast<size_t>(sampled[t])];
        const double advantage = rewards[t / static_cast<size_t>(b.length)] - baseline;
        sum -= w[t] * advantage * logPy;
        real += 1;
        cappedReal += affected[t];
    }
    QVERIFY(std::abs(result.loss.item<double>() - sum / real) < kValueTolerance);
    QVERIFY(std::abs(result.clippedFraction - cappedReal / real) < kValueTolerance);
}

void TestObjectives::misMasksExactlyTokensOutsideTheBound()
{
    const Batch b = makeBatch(71, 5, 4, 7, true);
    const CorrectionOptions mis {CorrectionOptions::Mis, kCap};
    const CorrectionWeights weights = correctionWeights(b.oldLogProbs, b.engineLogProbs, mis);
    const std::vector<double> logOld = toVector(b.oldLogProbs), logMu = toVector(b.engineLogProbs);
    const std::vector<double> affected = toVector(weights.affected), w = toVector(weights.weight);
    int below = 0, above = 0;
    at::Tensor keptMask = b.mask.clone();
    for (size_t t = 0; t < logOld.size(); ++t) {
        const double ratio = std::exp(logOld[t] - logMu[t]);
        const bool outside = ratio < 1.0 / kCap || ratio > kCap;
        QCOMPARE(affected[t] != 0, outside);
        QCOMPARE(w[t], outside ? 0.0 : 1.0);
        below += ratio < 1.0 / kCap ? 1 : 0;
        above += ratio > kCap ? 1 : 0;
        if (outside)
            keptMask[static_cast<std::int64_t>(t)] = false;
    }
    QVERIFY2(below > 0 && above > 0, "both sides of the bound must be exercised");

    // Masking is the same as removing those tokens from the batch, for OPD and for REINFORCE.
    at::Tensor misLogits = leaf(b.logits), keptLogits = leaf(b.logits);
    const ObjectiveResult withMis = reinforce(misLogits, b.mask, b.sequenceOf, b.rewards, b.engine(), mis);
    const ObjectiveResult kept = reinforce(keptLogits, keptMask, b.sequenceOf, b.rewards, b.engine());
    withMis.loss.backward();
    kept.loss.backward();
    QVERIFY(std::abs(withMis.loss.item<double>() - kept.loss.item<double>()) < kValueTolerance);
    QVERIFY(maxAbsDifference(misLogits.grad(), keptLogits.grad()) < kValueTolerance);

    const double opdMis = opdFullKl(b.logits, b.teacher, b.mask, b.engine(), mis).loss.item<double>();
    const double opdKept = opdFullKl(b.logits, b.teacher, keptMask).loss.item<double>();
    QVERIFY(std::abs(opdMis - opdKept) < kValueTolerance);
    const double real = b.mask.sum().item<double>();
    const double dropped = b.mask.logical_and(weights.affected).sum().item<double>();
    QVERIFY(std::abs(withMis.clippedFraction - dropped / real) < kValueTolerance);
}

void TestObjectives::paddingContributesNothing_data()
{
    QTest::addColumn<QString>("objective");
    for (const char* name :
        {"fullKl", "fullKl+tis", "k1", "k1+mis", "k3", "topK", "reinforce", "reinforce+tis", "reinforce+mis", "grpo"})
        QTest::newRow(name) << QString(name);
}

void TestObjectives::paddingContributesNothing()
{
    QFETCH(QString, objective);
    const Batch clean = makeBatch(79, 4, 5, 6, true);
    auto evaluate = [&](const Batch& b, at::Tensor& logits) {
        CorrectionOptions correction;
        if (objective.endsWith("+tis"))
            correction = {CorrectionOptions::Tis, kCap};
        if (objective.endsWith("+mis"))
            correction = {CorrectionOptions::Mis, kCap};
        const QString base = objective.section('+', 0, 0);
        GrpoOptions grpoOptions;
        grpoOptions.groupSize = 2;
        if (base == "fullKl")
            return opdFullKl(logits, b.teacher, b.mask, b.engine(), correction);
        if (base == "k1")
            return opdK1(logits, b.teacher, b.mask, b.engine(), correction);
        if (base == "k3")
            return opdK3(logits, b.teacher, b.mask, b.engine(), correction);
        if (base == "topK")
            return opdTopK(logits, b.teacher, b.mask, 3, b.engine(), correction);
        if (base == "reinforce")
            return reinforce(logits, b.mask, b.sequenceOf, b.rewards, b.engine(), correction);
        return grpo(logits, b.mask, b.sequenceOf, b.rewards, b.engine(), grpoOptions);
    };

    // Garbage at every padding position: large logits, another teacher, invalid ids, NaN log-probabilities.
    Batch dirty = clean;
    at::manual_seed(83);
    const at::Tensor padding = clean.mask.logical_not();
    QVERIFY(padding.any().item<bool>());
    dirty.logits = at::where(padding.unsqueeze(1), 10.0 * at::randn_like(clean.logits), clean.logits);
    // A NaN in one padding row: must not reach the loss or any gradient either.
    const std::int64_t firstPadding = padding.nonzero()[0][0].item<std::int64_t>();
    dirty.logits[firstPadding][0] = std::nan("");
    dirty.teacher
        = at::where(padding.unsqueeze(1), at::log_softmax(3.0 * at::randn_like(clean.teacher), -1), clean.teacher);
    dirty.sampled = clean.sampled.masked_fill(padding, -1);
    dirty.sequenceOf = clean.sequenceOf.masked_fill(padding, -1);
    dirty.engineLogProbs = clean.engineLogProbs.masked_fill(padding, std::nan(""));
    dirty.oldLogProbs = clean.oldLogProbs.masked_fill(padding, std::nan(""));

    at::Tensor cleanLogits = leaf(clean.logits), dirtyLogits = leaf(dirty.logits);
    const ObjectiveResult a = evaluate(clean, cleanLogits);
    const ObjectiveResult b = evaluate(dirty, dirtyLogits);
    a.loss.backward();
    b.loss.backward();
    QVERIFY(std::isfinite(a.loss.item<double>()));
    QVERIFY(at::equal(a.loss, b.loss));
    QVERIFY(at::equal(cleanLogits.grad(), dirtyLogits.grad()));
    const at::Tensor gradient = cleanLogits.grad();
    QVERIFY(gradient.masked_select(padding.unsqueeze(1).expand_as(gradient)).abs().max().item<double>() == 0.0);
    QVERIFY(gradient.masked_select(clean.mask.unsqueeze(1).expand_as(gradient)).abs().max().item<double>() > 0.0);
    QCOMPARE(a.tokens, b.tokens);
    QCOMPARE(a.meanKl, b.meanKl);
    QCOMPARE(a.studentEntropy, b.studentEntropy);
    QCOMPARE(a.meanWeight, b.meanWeight);
    QCOMPARE(a.clippedFraction, b.clippedFraction);
}

void TestObjectives::float32LogitsMatchFloat64()
{
    const Batch b = makeBatch(89, 4, 5, 6, true);
    const CorrectionOptions tis {CorrectionOptions::Tis, kCap};
    GrpoOptions grpoOptions;
    grpoOptions.groupSize = 2;
    auto losses = [&](const at::Tensor& logits) {
        return std::vector<at::Tensor> {opdFullKl(logits, b.teacher, b.mask, b.engine(), tis).loss,
            opdK1(logits, b.teacher, b.mask, b.engine()).loss, opdK3(logits, b.teacher, b.mask, b.engine()).loss,
            opdTopK(logits, b.teacher, b.mask, 3).loss,
            reinforce(logits, b.mask, b.sequenceOf, b.rewards, b.engine(), tis).loss,
            grpo(logits, b.mask, b.sequenceOf, b.rewards, b.engine(), grpoOptions).loss};
    };
    const std::vector<at::Tensor> reference = losses(b.logits);
    const std::vector<at::Tensor> single = losses(b.logits.to(at::kFloat));
    for (size_t i = 0; i < reference.size(); ++i) {
        QCOMPARE(single[i].scalar_type(), at::kFloat);
        QVERIFY2(std::abs(single[i].item<double>() - reference[i].item<double>()) < kFloat32Tolerance,
            qPrintable(QString("objective %1").arg(i)));
    }
}

MISMATCH_TEST_GUILESS_MAIN(TestObjectives)
#include "test_objectives.moc"

// The reference forward against an independent float64 implementation written here with plain loops
// (per position, per head), plus padding, KV-cache, BF16, gradient and module-hook checks.
#include "core/common/error.h"
#include "core/model/transformer.h"
#include "core/model/transformer_linear.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace mismatch::model;

namespace {

// FP32 forward vs the float64 loops: max |difference| / max |reference| over a logits tensor.
constexpr double kFp32Tolerance = 1e-5;
// BF16 forward vs FP32: bfloat16 keeps 8 significant bits (relative rounding 2^-9 per operation).
constexpr double kBf16Tolerance = 5e-2;
// ...and the BF16 path must really round: it differs from FP32 by at least this much.
constexpr double kBf16MinimumDifference = 1e-4;
// Central differences in float64 with step 1e-6: truncation ~1e-12, cancellation ~1e-10.
constexpr double kFiniteDifferenceStep = 1e-6;
constexpr double kGradientTolerance = 1e-6;
// Test weights: large enough that attention is far from uniform and every term matters.
constexpr double kTestStddev = 0.2;

// ---------------------------------------------------------------------------------------------------------------
// Configurations

ModelConfig tinyConfig(const QString& row)
{
    ModelConfig config;
    config.vocabSize = 50;
    config.hiddenSize = 32;
    config.intermediateSize = 48;
    config.numLayers = 2;
    config.numHeads = 4;
    config.numKeyValueHeads = 2;
    config.headDim = 8;
    config.rmsNormEps = 1e-6;
    config.ropeTheta = 10000.0;
    if (row.startsWith("llama")) {
        config.architecture = Architecture::Llama;
        config.tieWordEmbeddings = false;
    } else if (row.startsWith("qwen2")) {
        config.architecture = Architecture::Qwen2;
        config.attentionBias = true;
        config.tieWordEmbeddings = true;
    } else if (row.startsWith("qwen3")) {
        config.architecture = Architecture::Qwen3;
        config.qkNorm = true;
        config.headDim = 16; // explicit head_dim: numHeads * headDim != hiddenSize, as in real Qwen3
        config.tieWordEmbeddings = true;
    }
    if (row.contains("tied") && !row.contains("untied")) {
        config.tieWordEmbeddings = true;
    }
    if (row.contains("untied")) {
        config.tieWordEmbeddings = false;
    }
    if (row.contains("mha")) {
        config.numKeyValueHeads = config.numHeads;
    }
    if (row.contains("mqa")) {
        config.numKeyValueHeads = 1;
    }
    if (row.contains("attention-bias")) {
        config.attentionBias = true;
        config.outputBias = true; // Llama's attention_bias also covers o_proj
    }
    return config;
}

void addFamilyRows()
{
    QTest::addColumn<QString>("row");
    for (const char* row : {"llama", "qwen2", "qwen3"}) {
        QTest::newRow(row) << QString(row);
    }
}

at::Tensor randomIds(std::int64_t batch, std::int64_t length, std::int64_t vocab, std::uint64_t seed)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    return at::randint(0, vocab, {batch, length}, generator, at::TensorOptions().dtype(at::kLong));
}

// ---------------------------------------------------------------------------------------------------------------
// Independent float64 reference: one sequence, explicit loops, no ATen arithmetic.

using Vector = std::vector<double>;
using Matrix = std::vector<Vector>; // [position][feature]

struct ReferenceModel {
    ModelConfig config;
    std::map<std::string, Vector> tensors;
    const Vector& operator[](const std::string& name) const { return tensors.at(name); }
    bool has(const std::string& name) const { return tensors.count(name) != 0; }
};

ReferenceModel referenceModel(const ModelConfig& config, const TransformerWeights& weights)
{
    ReferenceModel model {config, {}};
    for (const auto& [name, tensor] : weights.named()) {
        const at::Tensor values = tensor.detach().to(at::kDouble).contiguous();
        const double* data = values.data_ptr<double>();
        model.tensors[name] = Vector(data, data + values.numel());
    }
    return model;
}

// y[o] = sum_i W[o, i] x[i] (+ b[o]); W stored row-major [out, in].
Vector matVec(const Vector& weight, const Vector& x, std::int64_t out, const Vector* bias = nullptr)
{
    const std::size_t in = x.size();
    Vector y(static_cast<std::size_t>(out), 0.0);
    for (std::size_t o = 0; o < y.size(); ++o) {
        double sum = bias ? (*bias)[o] : 0.0;
        for (std::size_t i = 0; i < in; ++i) {
            sum += weight[o * in + i] * x[i];
        }
        y[o] = sum;
    }
    return y;
}

// RMSNorm of x[offset, offset + n) in place.
void rmsNormInPlace(Vector& x, std::size_t offset, std::size_t n, const Vector& weight, double eps)
{
    double sumSquares = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        sumSquares += x[offset + i] * x[offset + i];
    }
    const double scale = 1.0 / std::sqrt(sumSquares / static_cast<double>(n) + eps);
    for (std::size_t i = 0; i < n; ++i) {
        x[offset + i] = x[offset + i] * scale * weight[i];
    }
}

Vector referenceInverseFrequencies(const ModelConfig& config)
{
    const std::size_t half = static_cast<std::size_t>(config.headDim / 2);
    Vector frequencies(half);
    const double pi = 3.14159265358979323846;
    for (std::size_t i = 0; i < half; ++i) {
        double f = 1.0 / std::pow(config.ropeTheta, static_cast<double>(2 * i) / static_cast<double>(config.headDim));
        if (config.ropeScaling.type == "llama3") {
            const RopeScaling& s = config.ropeScaling;
            const double original = static_cast<double>(s.originalMaxPositionEmbeddings);
            const double wavelength = 2.0 * pi / f;
            if (wavelength > original / s.lowFreqFactor) {
                f = f / s.factor;
            } else if (wavelength >= original / s.highFreqFactor) {
                const double smooth = (original / wavelength - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
                f = (1.0 - smooth) * f / s.factor + smooth * f;
            }
        }
        frequencies[i] = f;
    }
    return frequencies;
}

// Rotates each head of x (heads * headDim values) by position * inv_freq, dimension i paired with i + d/2.
void ropeInPlace(Vector& x, std::int64_t heads, std::int64_t headDim, double position, const Vector& frequencies)
{
    const std::size_t d = static_cast<std::size_t>(headDim);
    const std::size_t half = d / 2;
    for (std::size_t h = 0; h < static_cast<std::size_t>(heads); ++h) {
        for (std::size_t i = 0; i < half; ++i) {
            const double angle = position * frequencies[i];
            const double a = x[h * d + i];
            const double b = x[h * d + i + half];
            x[h * d + i] = a * std::cos(angle) - b * std::sin(angle);
            x[h * d + i + half] = b * std::cos(angle) + a * std::sin(angle);
        }
    }
}

// Logits [T][vocab] of one unpadded sequence at the given positions.
Matrix referenceLogits(
    const ReferenceModel& model, const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& positions)
{
    const ModelConfig& c = model.config;
    const std::size_t length = ids.size();
    const std::size_t hidden = static_cast<std::size_t>(c.hiddenSize);
    const std::size_t headDim = static_cast<std::size_t>(c.headDim);
    const std::size_t heads = static_cast<std::size_t>(c.numHeads);
    const std::size_t groupSize = heads / static_cast<std::size_t>(c.numKeyValueHeads);
    const Vector frequencies = referenceInverseFrequencies(c);

    Matrix x(length);
    const Vector& embedding = model["model.embed_tokens.weight"];
    for (std::size_t t = 0; t < length; ++t) {
        const std::size_t row = static_cast<std::size_t>(ids[t]);
        x[t] = Vector(embedding.begin() + static_cast<std::ptrdiff_t>(row * hidden),
            embedding.begin() + static_cast<std::ptrdiff_t>((row + 1) * hidden));
    }
    for (std::int64_t layer = 0; layer < c.numLayers; ++layer) {
        const std::string p = "model.layers." + std::to_string(layer) + ".";
        const auto bias = [&](const std::string& name) { return model.has(name) ? &model[name] : nullptr; };
        Matrix q(length), k(length), v(length);
        for (std::size_t t = 0; t < length; ++t) {
            Vector n = x[t];
            rmsNormInPlace(n, 0, hidden, model[p + "input_layernorm.weight"], c.rmsNormEps);
            q[t] = matVec(model[p + "self_attn.q_proj.weight"], n, c.qSize(), bias(p + "self_attn.q_proj.bias"));
            k[t] = matVec(model[p + "self_attn.k_proj.weight"], n, c.kvSize(), bias(p + "self_attn.k_proj.bias"));
            v[t] = matVec(model[p + "self_attn.v_proj.weight"], n, c.kvSize(), bias(p + "self_attn.v_proj.bias"));
            if (c.qkNorm) {
                for (std::size_t h = 0; h < heads; ++h) {
                    rmsNormInPlace(q[t], h * headDim, headDim, model[p + "self_attn.q_norm.weight"], c.rmsNormEps);
                }
                for (std::size_t h = 0; h < static_cast<std::size_t>(c.numKeyValueHeads); ++h) {
                    rmsNormInPlace(k[t], h * headDim, headDim, model[p + "self_attn.k_norm.weight"], c.rmsNormEps);
                }
            }
            ropeInPlace(q[t], c.numHeads, c.headDim, static_cast<double>(positions[t]), frequencies);
            ropeInPlace(k[t], c.numKeyValueHeads, c.headDim, static_cast<double>(positions[t]), frequencies);
        }
        for (std::size_t t = 0; t < length; ++t) {
            Vector attended(heads * headDim, 0.0);
            for (std::size_t h = 0; h < heads; ++h) {
                const std::size_t kvHead = h / groupSize; // GQA: consecutive query heads share a KV head
                Vector scores(t + 1);
                double largest = -1e300;
                for (std::size_t s = 0; s <= t; ++s) {
                    double dot = 0.0;
                    for (std::size_t d = 0; d < headDim; ++d) {
                        dot += q[t][h * headDim + d] * k[s][kvHead * headDim + d];
                    }
                    scores[s] = dot / std::sqrt(static_cast<double>(headDim));
                    largest = std::max(largest, scores[s]);
                }
                double total = 0.0;
                for (double& score : scores) {
                    score = std::exp(score - largest);
                    total += score;
                }
                for (std::size_t s = 0; s <= t; ++s) {
                    for (std::size_t d = 0; d < headDim; ++d) {
                        attended[h * headDim + d] += scores[s] / total * v[s][kvHead * headDim + d];
                    }
                }
            }
            const Vector projected = matVec(
                model[p + "self_attn.o_proj.weight"], attended, c.hiddenSize, bias(p + "self_attn.o_proj.bias"));
            for (std::size_t i = 0; i < hidden; ++i) {
                x[t][i] += projected[i];
            }
        }
        for (std::size_t t = 0; t < length; ++t) {
            Vector n = x[t];
            rmsNormInPlace(n, 0, hidden, model[p + "post_attention_layernorm.weight"], c.rmsNormEps);
            const Vector gate = matVec(model[p + "mlp.gate_proj.weight"], n, c.intermediateSize);
            const Vector up = matVec(model[p + "mlp.up_proj.weight"], n, c.intermediateSize);
            Vector activated(gate.size());
            for (std::size_t i = 0; i < gate.size(); ++i) {
                activated[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i]; // silu(gate) * up
            }
            const Vector down = matVec(model[p + "mlp.down_proj.weight"], activated, c.hiddenSize);
            for (std::size_t i = 0; i < hidden; ++i) {
                x[t][i] += down[i];
            }
        }
    }
    const Vector& head = c.tieWordEmbeddings ? embedding : model["lm_head.weight"];
    Matrix logits(length);
    for (std::size_t t = 0; t < length; ++t) {
        rmsNormInPlace(x[t], 0, hidden, model["model.norm.weight"], c.rmsNormEps);
        logits[t] = matVec(head, x[t], c.vocabSize);
    }
    return logits;
}

Matrix referenceLogSoftmax(const Matrix& logits)
{
    Matrix out = logits;
    for (Vector& row : out) {
        const double largest = *std::max_element(row.begin(), row.end());
        double total = 0.0;
        for (double value : row) {
            total += std::exp(value - largest);
        }
        for (double& value : row) {
            value = value - largest - std::log(total);
        }
    }
    return out;
}

std::vector<std::int64_t> consecutive(std::int64_t first, std::int64_t count)
{
    std::vector<std::int64_t> out(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) {
        out[static_cast<std::size_t>(i)] = first + i;
    }
    return out;
}

std::vector<std::int64_t> idsOf(const at::Tensor& ids, std::int64_t b, std::int64_t begin, std::int64_t count)
{
    const at::Tensor slice = ids[b].narrow(0, begin, count).contiguous();
    return std::vector<std::int64_t>(slice.data_ptr<std::int64_t>(), slice.data_ptr<std::int64_t>() + count);
}

// max |actual - expected| / max |expected|; actual [T, V] rows compared with expected[T][V].
double relativeError(const at::Tensor& actual, const Matrix& expected)
{
    const at::Tensor values = actual.detach().to(at::kDouble).contiguous();
    QTEST_ASSERT(values.dim() == 2 && values.size(0) == static_cast<std::int64_t>(expected.size()));
    const double* data = values.data_ptr<double>();
    const std::size_t width = static_cast<std::size_t>(values.size(1));
    double worst = 0.0;
    double scale = 0.0;
    for (std::size_t t = 0; t < expected.size(); ++t) {
        for (std::size_t i = 0; i < width; ++i) {
            worst = std::max(worst, std::abs(data[t * width + i] - expected[t][i]));
            scale = std::max(scale, std::abs(expected[t][i]));
        }
    }
    return worst / scale;
}

double relativeError(const at::Tensor& actual, const at::Tensor& expected)
{
    const at::Tensor a = actual.detach().to(at::kDouble);
    const at::Tensor e = expected.detach().to(at::kDouble);
    return (a - e).abs().max().item<double>() / e.abs().max().item<double>();
}

} // namespace

class TestTransformer : public QObject {
    Q_OBJECT

private slots:
    void forwardMatchesFloat64Reference_data()
    {
        QTest::addColumn<QString>("row");
        for (const char* row :
            {"llama", "llama-tied-mha", "llama-attention-bias", "qwen2", "qwen2-untied-mqa", "qwen3", "qwen3-untied"}) {
            QTest::newRow(row) << QString(row);
        }
    }

    void forwardMatchesFloat64Reference()
    {
        QFETCH(QString, row);
        const ModelConfig config = tinyConfig(row);
        const TransformerWeights weights = randomWeights(config, 11, kTestStddev);
        const Transformer model(config, weights);
        const ReferenceModel reference = referenceModel(config, weights);

        const std::int64_t batch = 2;
        const std::int64_t length = 7;
        const at::Tensor ids = randomIds(batch, length, config.vocabSize, 101);
        const at::Tensor mask = at::ones({batch, length}, at::kLong);
        const at::Tensor logits = model.forward(ids, mask);
        ForwardOptions logProbOptions;
        logProbOptions.logProbs = true;
        const at::Tensor logProbs = model.forward(ids, mask, logProbOptions);
        QCOMPARE(logits.scalar_type(), at::kFloat);
        QCOMPARE(logits.sizes(), at::IntArrayRef({batch, length, config.vocabSize}));

        for (std::int64_t b = 0; b < batch; ++b) {
            const Matrix expected = referenceLogits(reference, idsOf(ids, b, 0, length), consecutive(0, length));
            const double error = relativeError(logits[b], expected);
            QVERIFY2(error <= kFp32Tolerance, qPrintable(QString("logits relative error %1").arg(error)));
            const double logProbError = relativeError(logProbs[b], referenceLogSoftmax(expected));
            QVERIFY2(
                logProbError <= kFp32Tolerance, qPrintable(QString("log-prob relative error %1").arg(logProbError)));
        }
    }

    void tiedEmbeddingsHaveNoLmHead()
    {
        const ModelConfig tied = tinyConfig("llama-tied");
        const ModelConfig untied = tinyConfig("llama-untied");
        const TransformerWeights tiedWeights = randomWeights(tied, 3);
        const TransformerWeights untiedWeights = randomWeights(untied, 3);
        QVERIFY(!tiedWeights.contains("lm_head.weight"));
        QVERIFY(untiedWeights.contains("lm_head.weight"));
        QCOMPARE(untiedWeights.size(), tiedWeights.size() + 1);
        QCOMPARE(static_cast<std::int64_t>(untiedWeights.numel() - tiedWeights.numel()),
            untied.vocabSize * untied.hiddenSize);
        // A tied model reads its output projection from the embedding: scaling the embedding row of a token that
        // the input never uses scales that token's logit and leaves every other logit alone.
        const std::int64_t unusedToken = tied.vocabSize - 1;
        const at::Tensor ids = randomIds(1, 5, tied.vocabSize - 1, 5); // ids < vocab - 1
        const at::Tensor mask = at::ones({1, 5}, at::kLong);
        const at::Tensor before = Transformer(tied, tiedWeights).forward(ids, mask);
        TransformerWeights changed = tiedWeights.clone();
        changed.get("model.embed_tokens.weight").narrow(0, unusedToken, 1).mul_(3.0);
        const at::Tensor after = Transformer(tied, changed).forward(ids, mask);
        QVERIFY(at::allclose(after.select(2, unusedToken), 3.0 * before.select(2, unusedToken), 1e-5, 1e-6));
        QVERIFY(at::equal(after.narrow(2, 0, unusedToken), before.narrow(2, 0, unusedToken)));
    }

    void paddingGivesUnpaddedOutputs_data()
    {
        QTest::addColumn<QString>("row");
        QTest::addColumn<bool>("left");
        for (const char* family : {"llama", "qwen2", "qwen3"}) {
            QTest::newRow(qPrintable(QString("%1-left").arg(family))) << QString(family) << true;
            QTest::newRow(qPrintable(QString("%1-right").arg(family))) << QString(family) << false;
        }
    }

    // RoPE scores depend on position differences only, so this checks the masking; whether positions are
    // consistent across a padded sequence is checked by the KV-cache test (left-padded row, decode steps).
    void paddingGivesUnpaddedOutputs()
    {
        QFETCH(QString, row);
        QFETCH(bool, left);
        const ModelConfig config = tinyConfig(row);
        const TransformerWeights weights = randomWeights(config, 12, kTestStddev);
        const Transformer model(config, weights);
        const ReferenceModel reference = referenceModel(config, weights);

        const std::int64_t width = 7;
        const std::vector<std::int64_t> lengths {7, 4, 2};
        const std::int64_t batch = static_cast<std::int64_t>(lengths.size());
        // Padding slots hold random ids too: they must not matter.
        at::Tensor ids = randomIds(batch, width, config.vocabSize, 202);
        at::Tensor mask = at::zeros({batch, width}, at::kLong);
        for (std::int64_t b = 0; b < batch; ++b) {
            const std::int64_t n = lengths[static_cast<std::size_t>(b)];
            mask[b].narrow(0, left ? width - n : 0, n).fill_(1);
        }
        const at::Tensor logits = model.forward(ids, mask);
        QVERIFY(at::isfinite(logits).all().item<bool>()); // padding rows too: they must not poison gradients
        for (std::int64_t b = 0; b < batch; ++b) {
            const std::int64_t n = lengths[static_cast<std::size_t>(b)];
            const std::int64_t begin = left ? width - n : 0;
            const at::Tensor realIds = ids[b].narrow(0, begin, n).unsqueeze(0).contiguous();
            const at::Tensor unpadded = model.forward(realIds, at::ones({1, n}, at::kLong))[0];
            const at::Tensor padded = logits[b].narrow(0, begin, n);
            const double error = relativeError(padded, unpadded);
            QVERIFY2(error <= kFp32Tolerance, qPrintable(QString("row %1: padded vs unpadded %2").arg(b).arg(error)));
            const double referenceError
                = relativeError(padded, referenceLogits(reference, idsOf(ids, b, begin, n), consecutive(0, n)));
            QVERIFY2(referenceError <= kFp32Tolerance,
                qPrintable(QString("row %1: padded vs float64 reference %2").arg(b).arg(referenceError)));
        }
    }

    void llama3RopeScalingMatchesReference()
    {
        ModelConfig config = tinyConfig("llama");
        // headDim 8, theta 1e4: wavelengths 6.3, 63, 628, 6283 positions. With original context 64 and factors
        // 1 / 4 the first is high-frequency (kept), the second medium (smoothed), the last two low (divided).
        config.ropeScaling.type = "llama3";
        config.ropeScaling.factor = 8.0;
        config.ropeScaling.lowFreqFactor = 1.0;
        config.ropeScaling.highFreqFactor = 4.0;
        config.ropeScaling.originalMaxPositionEmbeddings = 64;
        ModelConfig unscaled = config;
        unscaled.ropeScaling = RopeScaling {};

        const TransformerWeights weights = randomWeights(config, 13, kTestStddev);
        const Transformer model(config, weights);
        const std::int64_t length = 6;
        const at::Tensor ids = randomIds(2, length, config.vocabSize, 303);
        // Far positions make the low-frequency change visible.
        const std::vector<std::int64_t> starts {40, 1000};
        at::Tensor positions = at::empty({2, length}, at::kLong);
        for (std::int64_t b = 0; b < 2; ++b) {
            for (std::int64_t t = 0; t < length; ++t) {
                positions[b][t] = starts[static_cast<std::size_t>(b)] + t;
            }
        }
        const at::Tensor logits = model.forward(ids, at::ones({2, length}, at::kLong), positions, nullptr);
        for (std::int64_t b = 0; b < 2; ++b) {
            const std::vector<std::int64_t> where = consecutive(starts[static_cast<std::size_t>(b)], length);
            const double error = relativeError(
                logits[b], referenceLogits(referenceModel(config, weights), idsOf(ids, b, 0, length), where));
            QVERIFY2(error <= kFp32Tolerance, qPrintable(QString("llama3 relative error %1").arg(error)));
            const double unscaledError = relativeError(
                logits[b], referenceLogits(referenceModel(unscaled, weights), idsOf(ids, b, 0, length), where));
            QVERIFY2(unscaledError > 100 * kFp32Tolerance,
                qPrintable(QString("scaling changed nothing (%1)").arg(unscaledError)));
        }
        // The three frequency bands, by formula.
        const std::vector<double> frequencies = ropeInverseFrequencies(config);
        QCOMPARE(frequencies[0], 1.0);
        QVERIFY(std::abs(frequencies[2] - std::pow(1e4, -0.5) / 8.0) < 1e-15);
        const double smooth = (64.0 / (2.0 * M_PI / 0.1) - 1.0) / 3.0;
        QVERIFY(std::abs(frequencies[1] - ((1.0 - smooth) * 0.1 / 8.0 + smooth * 0.1)) < 1e-15);
    }

    void bf16IsCloseButNotEqual_data() { addFamilyRows(); }

    void bf16IsCloseButNotEqual()
    {
        QFETCH(QString, row);
        const ModelConfig config = tinyConfig(row);
        const Transformer model(config, randomWeights(config, 14, kTestStddev));
        const at::Tensor ids = randomIds(2, 7, config.vocabSize, 404);
        const at::Tensor mask = at::ones({2, 7}, at::kLong);
        ForwardOptions bf16;
        bf16.compute = at::kBFloat16;
        const at::Tensor reference = model.forward(ids, mask);
        const at::Tensor rounded = model.forward(ids, mask, bf16);
        QCOMPARE(rounded.scalar_type(), at::kFloat);
        const double error = relativeError(rounded, reference);
        QVERIFY2(error <= kBf16Tolerance, qPrintable(QString("BF16 vs FP32 %1").arg(error)));
        QVERIFY2(error >= kBf16MinimumDifference, qPrintable(QString("BF16 too close to FP32: %1").arg(error)));
        // BF16 weights given directly produce the same function as FP32 weights rounded in the forward.
        const Transformer bf16Weights(config, model.weights().to(at::kBFloat16));
        QVERIFY(at::equal(bf16Weights.forward(ids, mask, bf16), rounded));
    }

    void gradientsMatchFiniteDifferences_data() { addFamilyRows(); }

    void gradientsMatchFiniteDifferences()
    {
        QFETCH(QString, row);
        const ModelConfig config = tinyConfig(row);
        TransformerWeights weights = randomWeights(config, 15, kTestStddev).to(at::kDouble);
        const std::vector<at::Tensor> parameters = weights.parameters();
        const Transformer model(config, weights);

        const std::int64_t length = 5;
        const at::Tensor ids = randomIds(2, length, config.vocabSize, 505);
        at::Tensor mask = at::ones({2, length}, at::kLong);
        mask[1].narrow(0, 0, 2).fill_(0); // left padding in row 1
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(606);
        // loss = sum over real tokens of c[b, t, v] * log p(v), random coefficients so every output matters.
        const at::Tensor coefficients
            = at::randn({2, length, config.vocabSize}, generator, at::TensorOptions().dtype(at::kDouble))
            * mask.unsqueeze(-1).to(at::kDouble);
        ForwardOptions options;
        options.logProbs = true;
        options.compute = at::kDouble;
        const auto loss = [&]() { return (model.forward(ids, mask, options) * coefficients).sum(); };
        loss().backward();

        std::vector<std::string> checked {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
            "model.layers.1.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight",
            "model.layers.1.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
            "model.layers.1.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight",
            "model.layers.1.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight"};
        if (!config.tieWordEmbeddings) {
            checked.push_back("lm_head.weight");
        }
        if (config.attentionBias) {
            checked.push_back("model.layers.0.self_attn.q_proj.bias");
            checked.push_back("model.layers.1.self_attn.k_proj.bias");
        }
        if (config.qkNorm) {
            checked.push_back("model.layers.0.self_attn.q_norm.weight");
            checked.push_back("model.layers.1.self_attn.k_norm.weight");
        }
        at::Generator picker = at::make_generator<at::CPUGeneratorImpl>(707);
        for (const std::string& name : checked) {
            const at::Tensor parameter = weights.get(name);
            QVERIFY2(parameter.grad().defined(), name.c_str());
            for (int sample = 0; sample < 2; ++sample) {
                std::int64_t index
                    = at::randint(0, parameter.numel(), {1}, picker, at::TensorOptions().dtype(at::kLong))
                          .item<std::int64_t>();
                if (name == "model.embed_tokens.weight") {
                    // Rows of tokens absent from the input have a zero gradient when untied: pick an input token's.
                    index = ids[0][sample].item<std::int64_t>() * config.hiddenSize + index % config.hiddenSize;
                }
                const double analytic = parameter.grad().view(-1)[index].item<double>();
                double plus = 0.0;
                double minus = 0.0;
                {
                    at::NoGradGuard noGrad;
                    at::Tensor element = parameter.view(-1)[index];
                    const double original = element.item<double>();
                    element.fill_(original + kFiniteDifferenceStep);
                    plus = loss().item<double>();
                    element.fill_(original - kFiniteDifferenceStep);
                    minus = loss().item<double>();
                    element.fill_(original);
                }
                const double numeric = (plus - minus) / (2.0 * kFiniteDifferenceStep);
                QVERIFY2(std::abs(analytic) > 1e-8,
                    qPrintable(QString("%1[%2]: zero gradient").arg(name.c_str()).arg(index)));
                QVERIFY2(std::abs(analytic - numeric) <= kGradientTolerance * std::max(1.0, std::abs(numeric)),
                    qPrintable(QString("%1[%2]: autograd %3, finite difference %4")
                                   .arg(name.c_str())
                                   .arg(index)
                                   .arg(analytic, 0, 'g', 12)
                                   .arg(numeric, 0, 'g', 12)));
            }
        }
        // Every parameter of the FP32 model receives a gradient in FP32 too.
        TransformerWeights fp32 = randomWeights(config, 15, kTestStddev);
        const std::vector<at::Tensor> fp32Parameters = fp32.parameters();
        QCOMPARE(fp32Parameters.size(), expectedTensors(config).size());
        const Transformer fp32Model(config, fp32);
        ForwardOptions fp32Options;
        fp32Options.logProbs = true;
        (fp32Model.forward(ids, mask, fp32Options) * coefficients.to(at::kFloat)).sum().backward();
        for (const auto& [name, tensor] : fp32.named()) {
            QVERIFY2(tensor.grad().defined(), name.c_str());
            QCOMPARE(tensor.grad().scalar_type(), at::kFloat);
            QVERIFY2(tensor.grad().abs().sum().item<double>() > 0.0, name.c_str());
        }
        QCOMPARE(parameters.size(), fp32Parameters.size());
    }

    void kvCacheDecodeMatchesFullForward_data() { addFamilyRows(); }

    void kvCacheDecodeMatchesFullForward()
    {
        QFETCH(QString, row);
        const ModelConfig config = tinyConfig(row);
        const Transformer model(config, randomWeights(config, 16, kTestStddev));
        const std::int64_t length = 7;
        const std::int64_t prompt = 4;
        const at::Tensor ids = randomIds(2, length, config.vocabSize, 808);
        at::Tensor mask = at::ones({2, length}, at::kLong);
        mask[1].narrow(0, 0, 2).fill_(0); // row 1: a shorter prompt, left-padded
        const at::Tensor full = model.forward(ids, mask);

        DenseKvCache cache(config.numLayers);
        const at::Tensor prefill
            = model.forward(ids.narrow(1, 0, prompt), mask.narrow(1, 0, prompt), at::Tensor(), &cache);
        QCOMPARE(cache.length(), prompt);
        for (std::int64_t b = 0; b < 2; ++b) {
            const std::int64_t firstReal = b == 0 ? 0 : 2;
            const double error = relativeError(
                prefill[b].narrow(0, firstReal, prompt - firstReal), full[b].narrow(0, firstReal, prompt - firstReal));
            QVERIFY2(error <= kFp32Tolerance, qPrintable(QString("prefill row %1: %2").arg(b).arg(error)));
        }
        for (std::int64_t t = prompt; t < length; ++t) {
            const at::Tensor step = model.forward(ids.narrow(1, t, 1), mask.narrow(1, 0, t + 1), at::Tensor(), &cache);
            QCOMPARE(cache.length(), t + 1);
            const double error = relativeError(step.select(1, 0), full.select(1, t));
            QVERIFY2(error <= kFp32Tolerance, qPrintable(QString("decode step %1: %2").arg(t).arg(error)));
        }
        // A wrong-length mask (it must cover cached + new positions) is refused.
        bool refused = false;
        try {
            model.forward(ids.narrow(1, 0, 1), mask.narrow(1, 0, 1), at::Tensor(), &cache);
        } catch (const c10::Error&) {
            refused = true;
        }
        QVERIFY(refused);
        QCOMPARE(cache.length(), length);
    }

    void linearHookSeesEveryModule()
    {
        // An engine subclass sees each module by its recipe name, in forward order, and can substitute weights.
        class Recording : public Transformer {
        public:
            using Transformer::Transformer;
            mutable std::vector<std::string> seen;
            std::string zeroed;

        protected:
            at::Tensor linear(const std::string& module, const at::Tensor& x, const at::Tensor& weight,
                const at::Tensor& bias) const override
            {
                seen.push_back(module);
                const at::Tensor used = module == zeroed ? at::zeros_like(weight) : weight;
                return Transformer::linear(module, x, used, bias);
            }
            at::Tensor embed(const std::string& module, const at::Tensor& weight, const at::Tensor& ids) const override
            {
                seen.push_back(module);
                return Transformer::embed(module, weight, ids);
            }
        };
        const ModelConfig config = tinyConfig("qwen2");
        Recording model(config, randomWeights(config, 17, kTestStddev));
        const at::Tensor ids = randomIds(1, 4, config.vocabSize, 909);
        const at::Tensor mask = at::ones({1, 4}, at::kLong);
        const at::Tensor base = model.forward(ids, mask);
        QCOMPARE(model.seen, moduleNames(config));
        QCOMPARE(model.seen.size(), std::size_t(2 + 7 * config.numLayers));
        model.zeroed = "model.layers.1.mlp.down_proj";
        const at::Tensor substituted = model.forward(ids, mask);
        QVERIFY(relativeError(substituted, base) > 1e-3);
    }

    void saveAndLoadRoundTrip()
    {
        QTemporaryDir directory;
        QVERIFY(directory.isValid());
        const ModelConfig config = tinyConfig("qwen2-untied");
        const TransformerWeights weights = randomWeights(config, 18, kTestStddev);

        const std::string f32Dir = directory.filePath("f32").toStdString();
        saveWeights(f32Dir, weights, DType::F32);
        const TransformerWeights loaded = loadWeights(f32Dir, config);
        QCOMPARE(loaded.names(), weights.names());
        for (const auto& [name, tensor] : weights.named()) {
            QVERIFY2(at::equal(loaded.get(name), tensor), name.c_str());
        }

        const std::string bf16Dir = directory.filePath("bf16").toStdString();
        saveWeights(bf16Dir, weights, DType::BF16);
        const TransformerWeights loadedBf16 = loadWeights(bf16Dir, config);
        for (const auto& [name, tensor] : weights.named()) {
            QCOMPARE(loadedBf16.get(name).scalar_type(), at::kFloat);
            QVERIFY2(at::equal(loadedBf16.get(name), tensor.to(at::kBFloat16).to(at::kFloat)), name.c_str());
        }

        // A checkpoint missing a tensor, and one with a wrong shape, name the tensor.
        TransformerWeights missing;
        TransformerWeights misshapen;
        for (const auto& [name, tensor] : weights.named()) {
            if (name != "model.layers.1.mlp.up_proj.weight") {
                missing.set(name, tensor);
                misshapen.set(name, tensor);
            } else {
                misshapen.set(name, tensor.narrow(0, 0, 3));
            }
        }
        const std::string missingDir = directory.filePath("missing").toStdString();
        saveWeights(missingDir, missing, DType::F32);
        try {
            loadWeights(missingDir, config);
            QFAIL("a missing tensor was accepted");
        } catch (const mismatch::InputError& error) {
            QCOMPARE(error.location(), std::string("model.layers.1.mlp.up_proj.weight"));
        }
        const std::string misshapenDir = directory.filePath("misshapen").toStdString();
        saveWeights(misshapenDir, misshapen, DType::F32);
        try {
            loadWeights(misshapenDir, config);
            QFAIL("a wrong shape was accepted");
        } catch (const mismatch::InputError& error) {
            QCOMPARE(error.location(), std::string("model.layers.1.mlp.up_proj.weight"));
        }
        try {
            Transformer(config, misshapen);
            QFAIL("a wrong shape was accepted in memory");
        } catch (const mismatch::InputError& error) {
            QCOMPARE(error.location(), std::string("model.layers.1.mlp.up_proj.weight"));
        }
    }

    // A BF16 checkpoint kept in BF16 (LoadPrecision::Stored) and multiplied in FP32 gives exactly what its FP32
    // conversion gives: the widened rows are the same float32 values and the product is the same call.
    void storedBf16WeightsGiveTheFp32Forward_data() { addFamilyRows(); }
    void storedBf16WeightsGiveTheFp32Forward()
    {
        QFETCH(QString, row);
        QTemporaryDir directory;
        QVERIFY(directory.isValid());
        const ModelConfig config = tinyConfig(row);
        const TransformerWeights weights = randomWeights(config, 23, kTestStddev);
        const std::string bf16Dir = directory.filePath("bf16").toStdString();
        saveWeights(bf16Dir, weights, DType::BF16);
        const TransformerWeights stored = loadWeights(bf16Dir, config, LoadPrecision::Stored);
        const TransformerWeights widened = loadWeights(bf16Dir, config);
        for (const auto& [name, tensor] : stored.named()) {
            QCOMPARE(tensor.scalar_type(), at::kBFloat16);
            QVERIFY(at::equal(tensor.to(at::kFloat), widened.get(name)));
        }
        const at::Tensor ids = randomIds(2, 6, config.vocabSize, 24);
        const at::Tensor mask = at::ones({2, 6}, at::kLong);
        const at::NoGradGuard noGrad;
        const at::Tensor fromStored = Transformer(config, stored).forward(ids, mask);
        QCOMPARE(fromStored.scalar_type(), at::kFloat);
        QVERIFY(at::equal(fromStored, Transformer(config, widened).forward(ids, mask)));
    }

    // Weights widened a block of rows at a time against the whole float32 weight: each output element is a
    // float32 dot product over the same K, so any difference is float32 summation order, bounded by
    // 2 K eps32 sum_k |x_k w_k| (Higham's bound for a recursive sum, doubled for the products' own rounding).
    void blockwiseLinearMatchesWholeWeight()
    {
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(25);
        // {out, in, rows of x}: a weight small enough to be widened whole; a larger one with few rows (the fused
        // product, with row and k tails: 1001 % 4 and 300 % 8); the same with many rows (one BLAS block); one
        // beyond a 32 MiB block (several BLAS blocks).
        const std::vector<std::array<std::int64_t, 3>> cases
            = {{100, 300, 3}, {1001, 300, 1}, {1001, 300, 7}, {1001, 300, 33}, {2900, 3000, 40}};
        for (const auto& [out, in, rows] : cases) {
            const at::Tensor weight = at::randn({out, in}, generator).to(at::kBFloat16);
            const at::Tensor bias = at::randn({out}, generator);
            const at::Tensor wide = weight.to(at::kFloat);
            const at::Tensor x = at::randn({rows, 1, in}, generator);
            const at::Tensor y = linearWithWidening(x, weight, bias);
            QCOMPARE(y.sizes().vec(), (std::vector<std::int64_t> {rows, 1, out}));
            const at::Tensor reference = at::linear(x.to(at::kDouble), wide.to(at::kDouble), bias.to(at::kDouble));
            const at::Tensor bound = 2.0 * static_cast<double>(in) * std::ldexp(1.0, -24)
                * (at::matmul(x.abs().to(at::kDouble), wide.abs().to(at::kDouble).t()) + bias.abs().to(at::kDouble));
            QVERIFY2(((y.to(at::kDouble) - reference).abs() <= bound).all().item<bool>(),
                qPrintable(QString("%1 x %2, %3 rows").arg(out).arg(in).arg(rows)));
            QVERIFY(((at::linear(x, wide, bias).to(at::kDouble) - reference).abs() <= bound).all().item<bool>());
            if (out * in <= (1 << 17)) {
                QVERIFY(at::equal(y, at::linear(x, wide, bias))); // widened whole: the very same call
            }
        }
        // With gradients it converts the whole weight (autograd sees an ordinary linear).
        const at::Tensor weight = at::randn({1001, 300}, generator).to(at::kBFloat16);
        const at::Tensor x = at::randn({2, 300}, generator).requires_grad_(true);
        linearWithWidening(x, weight, at::Tensor()).sum().backward();
        QVERIFY(x.grad().defined());
    }

    // Only the last n positions' outputs: the same values as the full forward's last n rows (the lm_head and
    // final norm run on fewer rows: float32 summation order at most).
    void lastPositionsAreTheFullForwardsLastRows_data() { addFamilyRows(); }
    void lastPositionsAreTheFullForwardsLastRows()
    {
        QFETCH(QString, row);
        const ModelConfig config = tinyConfig(row);
        const Transformer model(config, randomWeights(config, 26, kTestStddev));
        const at::Tensor ids = randomIds(3, 7, config.vocabSize, 27);
        at::Tensor mask = at::ones({3, 7}, at::kLong);
        mask[1][0] = 0; // left padding
        mask[1][1] = 0;
        const at::NoGradGuard noGrad;
        const at::Tensor full = model.forward(ids, mask);
        ForwardOptions options;
        options.lastPositions = 3;
        const at::Tensor last = model.forward(ids, mask, options);
        QCOMPARE(last.sizes().vec(), (std::vector<std::int64_t> {3, 3, config.vocabSize}));
        const at::Tensor expected = full.narrow(1, 4, 3);
        QVERIFY((last - expected).abs().max().item<double>() <= kFp32Tolerance * expected.abs().max().item<double>());
        options.lastPositions = 7; // all of them
        QVERIFY(at::equal(model.forward(ids, mask, options), full));
    }

    // ForwardOptions::trace names the first intermediate that is not finite, in forward order, and changes nothing
    // else: a finite forward traced gives the same logits, bit for bit, and records nothing.
    void traceNamesTheFirstNonFiniteStep_data()
    {
        QTest::addColumn<QString>("tensor"); // empty: the weights as drawn
        QTest::addColumn<std::int64_t>("row");
        QTest::addColumn<QString>("point");
        QTest::addColumn<bool>("linear");
        QTest::newRow("finite") << QString() << std::int64_t {0} << QString() << false;
        // A q_proj output row of 3e38 per unit of input: the product overflows (|normed| is about 1 per element).
        QTest::newRow("q_proj") << "model.layers.1.self_attn.q_proj.weight" << std::int64_t {0}
                                << "model.layers.1.self_attn.q_proj" << true;
        // A norm weight of 3e38 times a normalized element above 1.2: the norm's output overflows; everything
        // before it (layer 0's attention) is finite.
        QTest::newRow("norm") << "model.layers.0.post_attention_layernorm.weight" << std::int64_t {-1}
                              << "model.layers.0.post_attention_layernorm" << false;
    }

    void traceNamesTheFirstNonFiniteStep()
    {
        QFETCH(QString, tensor);
        QFETCH(std::int64_t, row);
        QFETCH(QString, point);
        QFETCH(bool, linear);
        const ModelConfig config = tinyConfig("llama");
        TransformerWeights weights = randomWeights(config, 31, kTestStddev);
        if (!tensor.isEmpty()) {
            at::Tensor edited = weights.get(tensor.toStdString()).clone();
            (row >= 0 ? edited[row] : edited).fill_(3e38);
            weights.set(tensor.toStdString(), edited);
        }
        const Transformer model(config, weights);
        const at::Tensor ids = at::arange(1, 9, at::kLong).view({1, 8});
        const at::Tensor mask = at::ones({1, 8}, at::kLong);
        NonFiniteTrace trace;
        ForwardOptions options;
        options.trace = &trace;
        const at::Tensor traced = model.forward(ids, mask, options);
        const at::Tensor plain = model.forward(ids, mask);
        QCOMPARE(trace.found(), !point.isEmpty());
        QCOMPARE(QString::fromStdString(trace.point), point);
        QCOMPARE(trace.linear, linear);
        if (point.isEmpty()) {
            QVERIFY(at::equal(traced, plain));
            return;
        }
        QVERIFY(!at::isfinite(plain).all().item<bool>());
        // The input of the first non-finite step was finite (every step before it was checked).
        QVERIFY(std::isfinite(trace.inputMagnitude) && trace.inputMagnitude > 0.0);
    }

    void cloneIsIndependent()
    {
        const ModelConfig config = tinyConfig("llama");
        TransformerWeights weights = randomWeights(config, 19);
        const TransformerWeights snapshot = weights.clone();
        weights.parameters();
        QVERIFY(weights.get("model.norm.weight").requires_grad());
        QVERIFY(!snapshot.get("model.norm.weight").requires_grad());
        {
            at::NoGradGuard noGrad;
            weights.get("model.norm.weight").add_(1.0);
        }
        QVERIFY(!at::equal(weights.get("model.norm.weight"), snapshot.get("model.norm.weight")));
        // Deterministic in the seed, different across seeds.
        QVERIFY(at::equal(randomWeights(config, 19).get("lm_head.weight"), snapshot.get("lm_head.weight")));
        QVERIFY(!at::equal(randomWeights(config, 20).get("lm_head.weight"), snapshot.get("lm_head.weight")));
    }
};

MISMATCH_TEST_GUILESS_MAIN(TestTransformer)
#include "test_transformer.moc"

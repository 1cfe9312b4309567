// Optimizer and the demo-pair builder: AdamW against a float64 loop written from its definition, clipping,
// the learning-rate schedule, and a tiny `zoo build` that must lower its loss and write a loadable model.
// `zoo shape`: the known shapes against the parameter counts their model cards publish, and a tiny shape written
// in several shards that must load back as BF16 with the promised statistics and tokenizer.
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/io/arith_task.h"
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/train/adamw.h"
#include "core/model/safetensors.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/train/zoo.h"
#include "core/train/zoo_shape.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <nlohmann/json.hpp>
#include <fstream>

using namespace mismatch;

namespace {
constexpr double kAdamTolerance = 1e-5;  // float32 updates against the float64 reference
}

class TestTrain : public QObject {
    Q_OBJECT
private slots:
    void adamwMatchesFloat64Reference();
    void clippingScalesToMaxNorm();
    void scheduleWarmsUpAndDecays();
    void optimizerStateRoundTrip();
    void tinyZooBuildLearnsAndWritesAModel();
    void zooShapesHaveTheirModelCardsParameterCounts();
    void zooShapeWritesALoadableShardedBf16Checkpoint();
};

void TestTrain::adamwMatchesFloat64Reference()
{
    at::manual_seed(5);
    at::Tensor p = at::randn({7, 3}).requires_grad_(true);
    std::vector<double> ref(p.numel()), m(p.numel(), 0.0), v(p.numel(), 0.0);
    for (int64_t i = 0; i < p.numel(); ++i) ref[static_cast<size_t>(i)] = p.view({-1})[i].item<double>();
    train::AdamWOptions o{0.01, 0.9, 0.98, 1e-8, 0.1};
    train::AdamW optimizer({p}, o);
    for (int step = 1; step <= 5; ++step) {
        const at::Tensor g = at::randn({7, 3});
        p.mutable_grad() = g.clone();
        optimizer.step();
        for (int64_t i = 0; i < p.numel(); ++i) {
            const double gi = g.view({-1})[i].item<double>();
            auto k = static_cast<size_t>(i);
            m[k] = o.beta1 * m[k] + (1 - o.beta1) * gi;
            v[k] = o.beta2 * v[k] + (1 - o.beta2) * gi * gi;
            const double mh = m[k] / (1 - std::pow(o.beta1, step));
            const double vh = v[k] / (1 - std::pow(o.beta2, step));
            ref[k] = ref[k] * (1 - o.learningRate * o.weightDecay) - o.learningRate * mh / (std::sqrt(vh) + o.epsilon);
        }
    }
    for (int64_t i = 0; i < p.numel(); ++i) {
        QVERIFY(std::abs(p.view({-1})[i].item<double>() - ref[static_cast<size_t>(i)]) < kAdamTolerance);
    }
    QCOMPARE(optimizer.stepCount(), 5);

    // A tensor larger than the update's block (2^22 elements, made a block at a time): the float64 reference again,
    // and bit for bit the same update made on the whole tensor at once (elementwise IEEE operations in the same
    // order do not depend on where a block starts).
    const std::int64_t large = (std::int64_t(1) << 22) + 37;
    at::Tensor q = at::randn({large}).requires_grad_(true);
    at::Tensor whole = q.detach().clone();
    at::Tensor wholeM = at::zeros_like(whole);
    at::Tensor wholeV = at::zeros_like(whole);
    std::vector<double> qRef(q.data_ptr<float>(), q.data_ptr<float>() + large);
    std::vector<double> qm(static_cast<size_t>(large), 0.0), qv(static_cast<size_t>(large), 0.0);
    train::AdamW blocks({q}, o);
    for (int step = 1; step <= 3; ++step) {
        const at::Tensor g = at::randn({large});
        q.mutable_grad() = g.clone();
        blocks.step();
        const double c1 = 1 - std::pow(o.beta1, step);
        const double c2 = 1 - std::pow(o.beta2, step);
        wholeM.mul_(o.beta1).add_(g, 1.0 - o.beta1);
        wholeV.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
        whole.mul_(1.0 - o.learningRate * o.weightDecay);
        whole.addcdiv_(wholeM, (wholeV / c2).sqrt_().add_(o.epsilon), -o.learningRate / c1);
        const float* gi = g.data_ptr<float>();
        for (size_t k = 0; k < qRef.size(); ++k) {
            qm[k] = o.beta1 * qm[k] + (1 - o.beta1) * gi[k];
            qv[k] = o.beta2 * qv[k] + (1 - o.beta2) * gi[k] * gi[k];
            qRef[k] = qRef[k] * (1 - o.learningRate * o.weightDecay)
                - o.learningRate * (qm[k] / c1) / (std::sqrt(qv[k] / c2) + o.epsilon);
        }
    }
    QVERIFY(at::equal(q.detach(), whole));
    const float* qi = q.data_ptr<float>();
    double worst = 0.0;
    for (size_t k = 0; k < qRef.size(); ++k) {
        worst = std::max(worst, std::abs(qi[k] - qRef[k]));
    }
    QVERIFY2(worst < kAdamTolerance, qPrintable(QString::number(worst)));

    // The gradient norm over blocks of 2^22 elements against a float64 loop over the same gradients (a small
    // tensor and one past a block), within float64 summation error (~n eps relative, n = 4.2M: 1e-9).
    at::Tensor small = at::randn({5, 3}).requires_grad_(true);
    small.mutable_grad() = at::randn({5, 3});
    double squares = 0.0;
    for (const at::Tensor& gradient : {q.grad(), small.grad()}) {
        const at::Tensor values = gradient.contiguous();
        for (std::int64_t k = 0; k < values.numel(); ++k) {
            const double x = values.data_ptr<float>()[k];
            squares += x * x;
        }
    }
    const double norm = train::gradientNorm({q, small});
    QVERIFY2(std::abs(norm - std::sqrt(squares)) <= 1e-9 * std::sqrt(squares),
        qPrintable(QString("%1 vs %2").arg(norm, 0, 'g', 17).arg(std::sqrt(squares), 0, 'g', 17)));
}

void TestTrain::clippingScalesToMaxNorm()
{
    at::Tensor a = at::zeros({2}).requires_grad_(true);
    at::Tensor b = at::zeros({1}).requires_grad_(true);
    a.mutable_grad() = at::tensor({3.0f, 0.0f});
    b.mutable_grad() = at::tensor({4.0f});
    const double norm = train::clipGradientNorm({a, b}, 1.0);
    QVERIFY(std::abs(norm - 5.0) < 1e-6);
    QVERIFY(std::abs(a.grad()[0].item<double>() - 0.6) < 1e-5);
    QVERIFY(std::abs(b.grad()[0].item<double>() - 0.8) < 1e-5);
    // Below the limit: untouched.
    QVERIFY(std::abs(train::clipGradientNorm({a, b}, 10.0) - 1.0) < 1e-5);
    QVERIFY(std::abs(b.grad()[0].item<double>() - 0.8) < 1e-5);
}

void TestTrain::scheduleWarmsUpAndDecays()
{
    QVERIFY(std::abs(train::warmupCosineLearningRate(0, 10, 110, 1.0) - 0.1) < 1e-12);
    QVERIFY(std::abs(train::warmupCosineLearningRate(9, 10, 110, 1.0) - 1.0) < 1e-12);
    QVERIFY(std::abs(train::warmupCosineLearningRate(10, 10, 110, 1.0) - 1.0) < 1e-12);
    QVERIFY(std::abs(train::warmupCosineLearningRate(60, 10, 110, 1.0, 0.1) - 0.55) < 1e-12);
    QVERIFY(std::abs(train::warmupCosineLearningRate(110, 10, 110, 1.0, 0.1) - 0.1) < 1e-12);
}

void TestTrain::optimizerStateRoundTrip()
{
    at::manual_seed(9);
    at::Tensor p = at::randn({4}).requires_grad_(true);
    train::AdamW first({p}, {});
    p.mutable_grad() = at::randn({4});
    first.step();
    at::Tensor q = p.detach().clone().requires_grad_(true);
    train::AdamW second({q}, {});
    second.loadState(first.state());
    QCOMPARE(second.stepCount(), 1);
    const at::Tensor g = at::randn({4});
    p.mutable_grad() = g.clone();
    q.mutable_grad() = g.clone();
    first.step();
    second.step();
    QVERIFY(at::equal(p.detach(), q.detach()));
    QVERIFY_THROWS_EXCEPTION(Error, second.loadState({{"exp_avg.3", at::zeros({4})}}));
}

void TestTrain::tinyZooBuildLearnsAndWritesAModel()
{
    QTemporaryDir dir;
    train::ZooOptions options = train::defaultZooOptions(MISMATCH_SOURCE_DIR "/resources");
    options.outputDirectory = dir.path().toStdString();
    options.evaluationProblems = 16;
    train::ZooModelSpec spec = options.models.at(1);  // the student's architecture, briefly
    spec.name = "tiny";
    spec.steps = 40;
    spec.batchSize = 16;
    options.models = {spec};
    Progress progress;
    const auto reports = train::buildZoo(options, progress);
    QCOMPARE(reports.size(), size_t(1));
    // Untrained, the response cross-entropy is about log(258) = 5.55 nats; 40 steps must get well below.
    QVERIFY2(reports[0].finalLoss < 3.0, qPrintable(QString::number(reports[0].finalLoss)));
    QCOMPARE(reports[0].evaluated, 16);
    QVERIFY(reports[0].heldoutAccuracy >= 0.0 && reports[0].heldoutAccuracy <= 1.0);
    const std::string modelDir = dir.path().toStdString() + "/tiny";
    const model::ModelFiles opened = model::openModelDirectory(modelDir);  // config + weights validate
    QCOMPARE(opened.config.numLayers, spec.config.numLayers);
    std::ifstream record(modelDir + "/training.json");
    const auto json = nlohmann::json::parse(record);
    QCOMPARE(json.at("steps").get<int>(), 40);
    QVERIFY(!QFileInfo::exists(QString::fromStdString(modelDir + ".partial")));
}

void TestTrain::zooShapesHaveTheirModelCardsParameterCounts()
{
    // Total and non-embedding parameters as the Hugging Face model cards print them (billions, to the digits
    // shown): an independent check of every dimension of each shape. The cards round some figures and truncate
    // others (Qwen2.5-7B: 7,615,616,512 printed as 7.61B), so the tolerance is one unit of the last digit shown.
    struct Card {
        const char* name;
        double total;
        double totalLastDigit;
        double nonEmbedding; // < 0: the card does not print it
    };
    const std::vector<Card> cards = {
        {"qwen3-0.6b", 0.6, 0.1, 0.44},
        {"qwen2.5-0.5b", 0.49, 0.01, 0.36},
        {"llama-3.2-1b", 1.23, 0.01, -1.0},
        {"qwen3-8b", 8.2, 0.1, 6.95},
        {"qwen2.5-7b", 7.61, 0.01, 6.53},
    };
    QCOMPARE(train::modelShapes().size(), cards.size());
    for (const Card& card : cards) {
        const train::ModelShape& shape = train::modelShape(card.name);
        const model::ModelConfig& c = shape.config;
        const double total = static_cast<double>(c.parameterCount()) / 1e9;
        QVERIFY2(std::abs(total - card.total) <= card.totalLastDigit,
            qPrintable(QString("%1: %2").arg(card.name).arg(total)));
        if (card.nonEmbedding > 0) {
            const double embeddings = static_cast<double>(c.vocabSize * c.hiddenSize) * (c.tieWordEmbeddings ? 1 : 2);
            const double nonEmbedding = (static_cast<double>(c.parameterCount()) - embeddings) / 1e9;
            QVERIFY2(std::abs(nonEmbedding - card.nonEmbedding) <= 0.01,
                qPrintable(QString("%1: %2 non-embedding").arg(card.name).arg(nonEmbedding)));
        }
    }
    QCOMPARE(train::modelShape("Qwen3-0.6B").name, std::string("qwen3-0.6b")); // case-insensitive
    QVERIFY_THROWS_EXCEPTION(InputError, train::modelShape("qwen4"));
}

void TestTrain::zooShapeWritesALoadableShardedBf16Checkpoint()
{
    // A tiny shape (the real ones are gigabytes) through the same writer: several shards, BF16, loadable.
    train::ModelShape shape = train::modelShape("qwen3-0.6b");
    shape.name = "tiny";
    model::ModelConfig& c = shape.config;
    c.vocabSize = 151936 / 64; // keeps room for the byte tokens, not for Qwen's special ids
    c.hiddenSize = 64;
    c.intermediateSize = 96;
    c.numLayers = 3;
    c.numHeads = 4;
    c.numKeyValueHeads = 2;
    c.headDim = 16;
    shape.specialTokens = {{c.vocabSize - 2, "<|im_start|>"}, {c.vocabSize - 1, "<|im_end|>"}};
    c.bosTokenId = c.vocabSize - 2;
    c.eosTokenIds = {c.vocabSize - 1};
    QTemporaryDir dir;
    const std::string directory = dir.path().toStdString() + "/tiny";
    train::ZooShapeOptions options;
    options.maxShardBytes = 64 * 1024; // the embedding (296 KiB) alone, then layers packed below 64 KiB
    Progress progress;
    const train::ZooShapeReport report = train::writeModelShape(shape, directory, options, progress);
    QCOMPARE(report.parameters, c.parameterCount());
    QCOMPARE(report.bytes, static_cast<std::uint64_t>(2 * c.parameterCount()));
    QVERIFY(report.shards.size() > 2);

    const model::Checkpoint checkpoint = model::Checkpoint::open(directory);
    QCOMPARE(checkpoint.files().size(), report.shards.size());
    const model::TransformerWeights weights = model::loadWeights(directory, c, model::LoadPrecision::Stored);
    double projectionSquares = 0.0;
    double projectionCount = 0.0;
    for (const auto& [name, tensor] : weights.named()) {
        QCOMPARE(tensor.scalar_type(), at::kBFloat16);
        const at::Tensor values = tensor.to(at::kDouble);
        if (name.size() > 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0) {
            // 1 + N(0, 0.1^2): the mean of n draws is within 5 standard errors of 1.
            QVERIFY(std::abs(values.mean().item<double>() - 1.0) <= 5 * 0.1 / std::sqrt(values.numel()));
        } else {
            projectionSquares += values.pow(2).sum().item<double>();
            projectionCount += static_cast<double>(values.numel());
        }
    }
    // N(0, 0.02^2) over ~0.4 M draws: the sample standard deviation within 1 % of 0.02 (its relative standard
    // error is 1 / sqrt(2 n) ~ 0.1 %; bf16 rounding moves it by ~0.2 %).
    QVERIFY(std::abs(std::sqrt(projectionSquares / projectionCount) / 0.02 - 1.0) <= 0.01);
    // Seeded per tensor: the same seed writes the same tensors, another seed other ones.
    const std::string again = dir.path().toStdString() + "/again";
    train::writeModelShape(shape, again, options, progress);
    const model::TransformerWeights same = model::loadWeights(again, c, model::LoadPrecision::Stored);
    const std::string probe = "model.layers.2.mlp.down_proj.weight";
    QVERIFY(at::equal(same.get(probe), weights.get(probe)));
    options.seed = 2;
    train::writeModelShape(shape, again, options, progress); // over an earlier shape: allowed
    const model::TransformerWeights other = model::loadWeights(again, c, model::LoadPrecision::Stored);
    QVERIFY(!at::equal(other.get(probe), weights.get(probe)));

    // The byte-level tokenizer with the special tokens at the given ids.
    const model::Tokenizer tokenizer = model::Tokenizer::fromFile(directory + "/tokenizer.json");
    QCOMPARE(tokenizer.tokenId("<|im_end|>").value_or(-1), c.vocabSize - 1);
    QCOMPARE(tokenizer.encode("ab").size(), std::size_t(2));
    std::ifstream record(directory + "/zoo_shape.json");
    const auto json = nlohmann::json::parse(record);
    QVERIFY(json.at("random_weights").get<bool>());
    QVERIFY(json.at("complete").get<bool>());

    // A directory holding other files is refused; nothing there is touched.
    const std::string foreign = dir.path().toStdString() + "/foreign";
    QVERIFY(QDir().mkpath(QString::fromStdString(foreign)));
    std::ofstream(foreign + "/notes.txt") << "mine";
    QVERIFY_THROWS_EXCEPTION(InputError, train::writeModelShape(shape, foreign, options, progress));
    QVERIFY(QFileInfo::exists(QString::fromStdString(foreign + "/notes.txt")));
}

MISMATCH_TEST_GUILESS_MAIN(TestTrain)
#include "test_train.moc"

// Optimizer and the demo-pair builder: AdamW against a float64 loop written from its definition, clipping,
// the learning-rate schedule, and a tiny `zoo build` that must lower its loss and write a loadable model.
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/io/arith_task.h"
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/train/adamw.h"
#include "core/train/zoo.h"

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

QTEST_GUILESS_MAIN(TestTrain)
#include "test_train.moc"

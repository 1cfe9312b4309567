// Training on the built-in demo pair (label model): resources/runs/demo-opd-quick.yaml (60 steps of synchronous
// OPD with the BF16 engine) must lower the held-out quality Q (mean teacher KL) beyond the evaluation's noise (the
// paired bootstrap interval of the change lies below zero); the relative drop is printed. REINFORCE and GRPO must run
// stably (finite losses, rewards in [0, 1]) and their accuracy curves are printed for the issue note.
#include "core/common/progress.h"
#include "core/common/provenance.h"
#include "core/metrics/bootstrap.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "tests/common/test_main.h"

#include <ATen/Parallel.h>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

using namespace mismatch;
namespace fs = std::filesystem;

namespace {

// What is asserted about the quick run, and why it is not "Q falls by >= 20%": this test once asserted that bar with
// the shipped seed alone. Measured 2026-12-03 (AMD EPYC, 2 cores), the shipped file gives -20.9% and five other seeds
// (run seed and sampling seed shifted by 1..5) -23.3%, -12.9%, -16.3%, -24.4%, -16.5% (mean -19.1%); the shipped seed
// gave -19.7% on an Intel Sapphire Rapids VM, whose BF16 kernels round differently. On 64 held-out problems the
// 95% interval of each run's change is about 0.2 nats/token wide, as wide as the change itself, so one seed on one
// machine cannot show 20%: the assertion tested the noise. What every seed shows is that Q falls beyond it (every
// interval below zero, the widest ending at -0.028), and that is the claim checked here
// (docs/training-and-calibration.md).
constexpr double kConfidence = 0.95;
const std::string kResources = MISMATCH_SOURCE_DIR "/resources";

std::string writeRunFile(const QTemporaryDir& dir, const std::string& name, const std::string& body)
{
    const std::string path = (fs::path(dir.path().toStdString()) / (name + ".yaml")).string();
    std::ofstream(path) << body;
    return path;
}

std::string pairHeader()
{
    return "student: " + kResources + "/models/arith-student\nteacher: " + kResources
        + "/models/arith-teacher\nprompts: " + kResources + "/prompts/arith-train.jsonl\n";
}

} // namespace

class TestTrainerDemo : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))); }
    void sixtyStepsOfOpdLowerHeldOutQuality();
    void reinforceAndGrpoRunStably_data();
    void reinforceAndGrpoRunStably();
    void shortenedCalibrationIsReproducible();
};

void TestTrainerDemo::sixtyStepsOfOpdLowerHeldOutQuality()
{
    // The shipped quick run file itself (60 steps of 64 prompts, evaluation every 20 steps on 64 held-out
    // problems), so that what docs/training-and-calibration.md promises for it is what this test checks.
    QTemporaryDir dir;
    store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
    train::RunConfig config = train::loadRunConfig(kResources + "/runs/demo-opd-quick.yaml");
    Progress progress;
    const train::TrainResult result = train::runTraining(config, store, progress);
    const auto evaluations = store::evaluations(store, result.runId);
    QCOMPARE(evaluations.size(), std::size_t(4));
    const double initial = evaluations.front().quality;
    const double final = evaluations.back().quality;
    const double improvement = (initial - final) / initial;
    for (const auto& e : evaluations) {
        qInfo("OPD step %lld: Q = %.4f nats/token, accuracy %.1f%%", static_cast<long long>(e.step), e.quality,
            100.0 * e.accuracy);
    }
    const auto steps = store.stepsAfter(result.runId, 0);
    qInfo("OPD 60 steps: Q %.4f -> %.4f (%.1f%% lower), mismatch KL at step 60 %.3g nats/token (%.2fx BF16), "
          "wall %.1f s",
        initial, final, 100.0 * improvement, *steps.back().mismatchKl, steps.back().bf16Multiple.value_or(0.0),
        result.wallSeconds);
    // Paired by problem: the same 64 held-out problems are evaluated at every step.
    const auto first = store::evaluationAt(store, result.runId, evaluations.front().step);
    const auto last = store::evaluationAt(store, result.runId, evaluations.back().step);
    QVERIFY(first && last);
    metrics::BootstrapOptions bootstrap;
    bootstrap.confidence = kConfidence;
    const metrics::Interval change
        = metrics::pairedBootstrapDifference(store::qualitiesInOrderOf(*last, *first),
            store::qualitiesInOrderOf(*first, *first), bootstrap);
    qInfo("OPD 60 steps: mean per-problem change of q %.4f nats/token, %.0f%% interval [%.4f, %.4f]", change.estimate,
        100.0 * kConfidence, change.low, change.high);
    QVERIFY2(final < initial, qPrintable(QString("Q rose from %1 to %2").arg(initial).arg(final)));
    QVERIFY2(change.high < 0.0,
        qPrintable(QString("Q fell by %1% but the interval of the change [%2, %3] reaches zero")
                .arg(100.0 * improvement)
                .arg(change.low)
                .arg(change.high)));
}

void TestTrainerDemo::reinforceAndGrpoRunStably_data()
{
    QTest::addColumn<QString>("objective");
    QTest::newRow("reinforce") << "objective: reinforce\nbatch: {prompts_per_step: 16}\n";
    QTest::newRow("grpo") << "objective: grpo\nbatch: {prompts_per_step: 4, samples_per_prompt: 4}\n";
}

void TestTrainerDemo::reinforceAndGrpoRunStably()
{
    QFETCH(QString, objective);
    QTemporaryDir dir;
    store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
    // Long enough responses for the worked solution and its "A:" line (the verifiable reward needs them).
    const std::string body = pairHeader() + objective.toStdString()
        + "rollout:\n  sampling: {temperature: 1.0, max_tokens: 40, seed: 1}\n"
          "optimizer: {learning_rate: 1.0e-3, warmup_steps: 2}\n"
          "steps: 20\nseed: 7\n";
    Progress progress;
    const train::TrainResult result
        = train::runTraining(train::loadRunConfig(writeRunFile(dir, "rl", body)), store, progress);
    QString curve;
    for (const auto& m : store.stepsAfter(result.runId, 0)) {
        QVERIFY(m.loss && std::isfinite(*m.loss));
        QVERIFY(m.reward && *m.reward >= 0.0 && *m.reward <= 1.0);
        QVERIFY(m.mismatchKl && std::isfinite(*m.mismatchKl));
        QVERIFY(m.entropy && std::isfinite(*m.entropy) && *m.entropy > 0.0);
        curve += QString(" %1").arg(*m.accuracy, 0, 'f', 3);
    }
    qInfo("%s accuracy per step:%s", QTest::currentDataTag(), qPrintable(curve));
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
}

MISMATCH_TEST_GUILESS_MAIN(TestTrainerDemo)
#include "test_trainer_demo.moc"

// Spec "Reproducibility": resources/calibrations/remake.sh re-makes the shipped calibration; its --short form is
// re-made here with this build and compared figure for figure with the one it wrote into the repository
// (resources/calibrations/arith-student-short.json), on the same compute path only: BF16 kernels round differently
// across CPUs and LibTorch versions, and the file records the path that made it (its provenance).
void TestTrainerDemo::shortenedCalibrationIsReproducible()
{
    const nlohmann::json stored
        = nlohmann::json::parse(std::ifstream(kResources + "/calibrations/arith-student-short.json"));
    const std::string storedPath = stored.at("provenance").at(0).at("compute_path").at("key").get<std::string>();
    const std::string here = computePath().key();
    if (storedPath != here) {
        QSKIP(qPrintable(QString::fromStdString("the stored short calibration was made on '" + storedPath
            + "', this machine computes on '" + here + "': figures are compared on the same path only")));
    }
    QTemporaryDir out;
    QTemporaryDir workspace;
    QProcess remake;
    remake.start(QStringLiteral("bash"),
        {QString::fromStdString(kResources + "/calibrations/remake.sh"), "--short", "--out", out.path(), "--workspace",
            workspace.path() + "/ws", "--mismatch", QStringLiteral(MISMATCH_CLI_PATH)});
    QVERIFY(remake.waitForFinished(900000));
    QVERIFY2(remake.exitCode() == 0, remake.readAllStandardError().constData());
    const nlohmann::json made
        = nlohmann::json::parse(std::ifstream(out.path().toStdString() + "/calibrations/arith-student-short.json"));
    // (Its command and paths name the checkout it ran in; the figures are what must agree.)
    QCOMPARE(made.at("points").size(), stored.at("points").size());
    for (std::size_t i = 0; i < stored.at("points").size(); ++i) {
        const nlohmann::json& a = made.at("points").at(i);
        const nlohmann::json& b = stored.at("points").at(i);
        for (const char* key : {"label", "step", "replicates", "mismatch", "training_mismatch", "bf16_unit", "quality",
                 "accuracy", "relative_change", "change_low", "change_high", "verdict"}) {
            QVERIFY2(a.at(key) == b.at(key),
                qPrintable(QString::fromStdString(b.at("label").get<std::string>() + " step "
                    + std::to_string(b.at("step").get<int>()) + " " + key + ": " + a.at(key).dump() + " re-made, "
                    + b.at(key).dump() + " stored")));
        }
    }
    QCOMPARE(made.at("brackets"), stored.at("brackets"));
    QCOMPARE(made.at("null_comparisons"), stored.at("null_comparisons"));
}

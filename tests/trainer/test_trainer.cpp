// The training loop on tiny random models: the OPD gradient through the whole model against central finite
// differences (float64), the asynchronous loop against the synchronous one (k = 0 and k = 2, bit for bit),
// resume after a stop and after SIGKILL (nothing lost or duplicated, the same results as an uninterrupted
// run), cancellation, numerical faults, the stored measures, and time to quality.
#include "core/common/byte_size.h"
#include "core/common/device.h"
#include "core/analysis/admission.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/compare_objectives.h"
#include "core/analysis/time_to_quality.h"
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/common/random.h"
#include "core/engine/engine.h"
#include "core/engine/mismatch_sources.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/transformer.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/objectives.h"
#include "core/train/quality.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "core/train/zoo.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <sys/resource.h>

using namespace mismatch;
namespace fs = std::filesystem;

namespace {

constexpr double kGradientTolerance = 1e-6; // relative, float64 central differences with h = 1e-6
constexpr const char* kResources = MISMATCH_SOURCE_DIR "/resources";

// A small model pair over the demo tokenizer: a random student and a sharper random teacher.
struct TinyPair {
    QTemporaryDir dir;
    std::string student;
    std::string teacher;
    TinyPair()
    {
        student = (fs::path(dir.path().toStdString()) / "student").string();
        teacher = (fs::path(dir.path().toStdString()) / "teacher").string();
        const model::ModelConfig small = train::demoModelConfig(32, 2, 2, 1, 64);
        train::writeDemoModelDirectory(student, small, model::randomWeights(small, 11, 0.05));
        const model::ModelConfig larger = train::demoModelConfig(48, 2, 4, 2, 96);
        train::writeDemoModelDirectory(teacher, larger, model::randomWeights(larger, 12, 0.3));
    }
};

std::string writeRunFile(const std::string& directory, const std::string& name, const std::string& body)
{
    const std::string path = (fs::path(directory) / (name + ".yaml")).string();
    std::ofstream out(path);
    out << body;
    return path;
}

std::string runBody(const TinyPair& pair, const std::string& extra)
{
    return "student: " + pair.student + "\nteacher: " + pair.teacher + "\nprompts: " + std::string(kResources)
        + "/prompts/arith-train.jsonl\n" + "optimizer: {learning_rate: 3.0e-3, warmup_steps: 1}\n"
        + "batch: {prompts_per_step: 4}\nseed: 5\n" + extra;
}

std::string baseRollout(const std::string& more = "")
{
    return "rollout:\n  sampling: {temperature: 1.0, max_tokens: 6, seed: 3}\n" + more;
}

std::string evaluation(int every)
{
    return "evaluation: {every: " + std::to_string(every) + ", prompts: " + std::string(kResources)
        + "/prompts/arith-heldout.jsonl, count: 6, max_tokens: 6, bf16_unit_every: 2}\n";
}

// What must agree between two runs of the same configuration (timing columns excluded).
struct StepValues {
    std::int64_t step = 0;
    double kl = 0, k1 = 0, k3 = 0, loss = 0, entropy = 0, accuracy = 0;
    std::optional<double> bf16Multiple;
    std::int64_t staleness = 0;
    std::int64_t version = 0;
    bool operator==(const StepValues& o) const
    {
        return step == o.step && kl == o.kl && k1 == o.k1 && k3 == o.k3 && loss == o.loss && entropy == o.entropy
            && accuracy == o.accuracy && bf16Multiple == o.bf16Multiple && staleness == o.staleness
            && version == o.version;
    }
};

std::vector<StepValues> stepValues(const store::RunStore& store, std::int64_t runId)
{
    std::vector<StepValues> values;
    for (const auto& m : store.stepsAfter(runId, 0)) {
        StepValues v;
        v.step = m.step;
        v.kl = m.mismatchKl.value();
        v.k1 = m.k1.value();
        v.k3 = m.k3.value();
        v.loss = m.loss.value();
        v.entropy = m.entropy.value();
        v.accuracy = m.accuracy.value();
        v.bf16Multiple = m.bf16Multiple;
        v.staleness = m.staleness.value();
        v.version = nlohmann::json::parse(m.extrasJson).at("weight_version").get<std::int64_t>();
        values.push_back(v);
    }
    return values;
}

std::vector<std::pair<std::int64_t, double>> evaluationValues(const store::RunStore& store, std::int64_t runId)
{
    std::vector<std::pair<std::int64_t, double>> values;
    for (const auto& e : store::evaluations(store, runId)) {
        values.emplace_back(e.step, e.quality);
    }
    return values;
}

at::Tensor checkpointTensor(const std::string& workspace, std::int64_t runId, std::int64_t step, const char* name)
{
    char directory[32];
    std::snprintf(directory, sizeof directory, "step-%08lld", static_cast<long long>(step));
    const auto file = model::SafetensorsFile::open(
        (fs::path(train::checkpointDirectory(workspace, runId)) / directory / "model.safetensors").string());
    return file->load(name);
}

void printSteps(const char* label, const std::vector<StepValues>& values)
{
    for (const auto& v : values) {
        qInfo("%s step %lld: KL %.6g loss %.6g staleness %lld", label, static_cast<long long>(v.step), v.kl, v.loss,
            static_cast<long long>(v.staleness));
    }
}

// Cancels `progress` from its own listener once a stage containing `marker` is reported.
struct CancelAt {
    explicit CancelAt(std::string marker)
        : progress([this](double, const std::string& stage) {
            if (stage.find(this->marker) != std::string::npos) {
                progress.cancel();
            }
        })
        , marker(std::move(marker))
    {
    }
    Progress progress;
    std::string marker;
};

// Every step of `runId` stored once and numbered 1..n.
void verifyWholeSteps(const store::RunStore& store, std::int64_t runId)
{
    QCOMPARE(store::queryInt64(store.handle(),
                 ("SELECT coalesce(max(step), 0) - count(*) FROM step_metrics WHERE run_id = "
                     + std::to_string(runId))
                     .c_str()),
        std::int64_t(0));
    store::Statement integrity(store.handle(), "PRAGMA integrity_check");
    QVERIFY(integrity.step());
    QCOMPARE(QString::fromStdString(integrity.text(0)), QString("ok"));
}

} // namespace

class TestTrainer : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void opdGradientThroughTheModelMatchesFiniteDifferences();
    void storesEveryMeasureOfEveryStep();
    void asynchronousWithoutStalenessEqualsSynchronous();
    void asynchronousEqualsSynchronousAtTheSameStaleness();
    void resumeAfterStopIsExact();
    void resumeAfterSigkillLosesAndDuplicatesNothing();
    void cancelStoresWhatWasDoneAndStaysResumable();
    void nanWeightsFailTheRunWithAClearMessage();
    void resumeErrors();
    void mismatchedVocabulariesAreRejectedBeforeARunIsStored();
    void deviceOfTheRunFile();
    void memoryCheckListsWhatTheRunHolds();
    void checkpointOverTheFileSizeLimitIsRefusedBeforeARunIsStored();
    void idsBeyondTheTokenizerAreDrawnAndTrainedOn();
    void rewardObjectivesRunOnTinyModels_data();
    void rewardObjectivesRunOnTinyModels();
    void timeToQualityReadsTheStoredRun();
    void calibrationSweepStoresPointsAndBrackets();
    void calibrationWhoseSeedsDisagreeIsFlagged();
    void calibrationAddsSeedsUntilDecided();
    void thresholdSetterIsNeverRejectedAtItsStep();
    void calibrationFlagsFollowTheirDefinitions();
    void calibrationOptionErrors();
    void cancelledCalibrationStoresNoCalibration();
    void timeToQualityJobTrainsBothRuns();
    void compareObjectivesAppliesEachRule();
    void cancelledTimeToQualityKeepsWholeRuns();
    void cancelledCompareObjectivesStoresNoVerdicts();

private:
    analysis::CalibrationOptions fourStepCalibration(const std::string& ws, const std::string& name,
        const std::vector<double>& sigmas, std::int64_t replicates, std::int64_t maxReplicates) const;
    TinyPair pair_;
};

void TestTrainer::initTestCase()
{
    at::set_num_threads(2);
}

void TestTrainer::opdGradientThroughTheModelMatchesFiniteDifferences()
{
    // loss(theta) = token mean of KL(p_student || p_teacher) on fixed sequences, all in float64; its autograd
    // gradient against central differences on entries of several tensors.
    const model::ModelConfig config = train::demoModelConfig(16, 1, 2, 1, 24);
    model::TransformerWeights weights = model::randomWeights(config, 3, 0.2).to(at::kDouble);
    const model::TransformerWeights teacherWeights = model::randomWeights(config, 4, 0.5).to(at::kDouble);
    const model::Transformer teacher(config, teacherWeights);
    const at::Tensor ids = at::tensor(std::vector<std::int64_t> {81, 58, 49, 43, 50, 10, 49, 61, 55, 59}, at::kLong)
                               .reshape({2, 5});
    const at::Tensor mask = at::ones({2, 5}, at::kLong);
    // Everything in float64: a float32 forward would round the h = 1e-6 perturbations away.
    model::ForwardOptions float64;
    float64.compute = at::kDouble;
    const at::Tensor teacherLogProbs = at::log_softmax(teacher.forward(ids, mask, float64), -1).reshape({10, -1});
    const at::Tensor real = at::ones({10}, at::kBool);
    const auto lossOf = [&](const model::TransformerWeights& w) {
        const model::Transformer student(config, w);
        const at::Tensor logits = student.forward(ids, mask, float64).reshape({10, -1});
        Q_ASSERT(logits.scalar_type() == at::kDouble);
        return train::opdFullKl(logits, teacherLogProbs, real).loss;
    };
    std::vector<at::Tensor> parameters = weights.parameters();
    lossOf(weights).backward();
    const std::vector<std::string> names
        = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight", "model.norm.weight",
            "model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.bias"};
    int checked = 0;
    for (const std::string& name : names) {
        const at::Tensor parameter = weights.get(name);
        const at::Tensor gradient = parameter.grad().reshape({-1});
        for (const std::int64_t index : {std::int64_t(0), parameter.numel() / 2, parameter.numel() - 1}) {
            const double h = 1e-6;
            model::TransformerWeights plus = weights.clone();
            model::TransformerWeights minus = weights.clone();
            plus.get(name).reshape({-1})[index] += h;
            minus.get(name).reshape({-1})[index] -= h;
            const double numeric = (lossOf(plus).item<double>() - lossOf(minus).item<double>()) / (2 * h);
            const double analytic = gradient[index].item<double>();
            const double scale = std::max(1e-3, std::abs(numeric));
            QVERIFY2(std::abs(analytic - numeric) / scale < kGradientTolerance,
                qPrintable(QString::fromStdString(name) + "[" + QString::number(index) + "]: autograd "
                    + QString::number(analytic, 'g', 12) + " vs finite differences " + QString::number(numeric, 'g', 12)));
            ++checked;
        }
    }
    QCOMPARE(checked, 15);
}

void TestTrainer::storesEveryMeasureOfEveryStep()
{
    QTemporaryDir workspace;
    store::RunStore store = store::RunStore::open(store::databasePath(workspace.path().toStdString()));
    const train::RunConfig config = train::loadRunConfig(writeRunFile(workspace.path().toStdString(), "measures",
        runBody(pair_, "steps: 4\n" + baseRollout("  recipe: " + std::string(kResources) + "/recipes/fp8-kv.yaml\n")
                + evaluation(2) + "checkpoint: {every: 2}\n")));
    Progress progress;
    std::vector<std::int64_t> seen;
    train::TrainOptions options;
    options.onStep = [&seen](const store::StepMetrics& m) { seen.push_back(m.step); };
    const train::TrainResult result = train::runTraining(config, store, progress, options);
    QCOMPARE(seen, (std::vector<std::int64_t> {1, 2, 3, 4}));
    QCOMPARE(result.stepsStored, std::int64_t(4));
    const auto run = store.run(result.runId);
    QVERIFY(run);
    QVERIFY(run->status == store::RunStatus::Finished);
    QCOMPARE(nlohmann::json::parse(run->configJson).at("rollout").at("recipe").get<std::string>(),
        config.rollout.recipe);
    for (const auto& m : store.stepsAfter(result.runId, 0)) {
        for (const auto& value : {m.mismatchKl, m.k1, m.k3, m.bf16Multiple, m.loss, m.accuracy, m.entropy,
                 m.rolloutTokensPerSecond, m.trainTokensPerSecond, m.wallTimeSeconds}) {
            QVERIFY(value.has_value());
            QVERIFY(std::isfinite(*value));
        }
        QVERIFY(*m.mismatchKl >= 0.0);
        QVERIFY(*m.mismatchKl > 0.0); // an FP8 KV cache against the FP32 trainer cannot be exact
        QVERIFY(*m.bf16Multiple > 0.0);
        QCOMPARE(*m.staleness, std::int64_t(0));
        QVERIFY(!m.reward.has_value()); // OPD: no reward; accuracy is the rollouts' exact-match rate
        const auto extras = nlohmann::json::parse(m.extrasJson);
        QCOMPARE(extras.at("weight_version").get<std::int64_t>(), m.step - 1);
        // The multiple is the step's KL over the unit stored with it.
        QVERIFY(std::abs(*m.bf16Multiple - *m.mismatchKl / extras.at("bf16_unit").get<double>()) < 1e-12 * *m.bf16Multiple);
        // bf16_unit_every 2: the unit is measured at step 1 and at every even step (the evaluated ones), and each
        // step records the step whose weights gave the unit it was divided by.
        const bool measured = m.step == 1 || m.step % 2 == 0;
        QCOMPARE(extras.at("bf16_unit_measured").get<bool>(), measured);
        QCOMPARE(extras.at("bf16_unit_step").get<std::int64_t>(), measured ? m.step : m.step - 1);
    }
    // Evaluations at 0 (before training), 2 and 4, each with its 6 problems.
    const auto evaluations = store::evaluations(store, result.runId);
    QCOMPARE(evaluations.size(), std::size_t(3));
    QCOMPARE(evaluations[0].step, std::int64_t(0));
    QCOMPARE(evaluations[2].step, std::int64_t(4));
    for (const auto& e : evaluations) {
        QCOMPARE(e.problemCount, std::int64_t(6));
        QVERIFY(e.quality > 0.0);
    }
    QCOMPARE(*result.finalQuality, evaluations.back().quality);

    // Rollouts kept token by token at step 1, the evaluation steps (2, 4) and the last (4): the batch's first 4
    // sequences, here the whole batch (4 prompts, 1 sample each), so their token-mean KL is the step's stored KL.
    QCOMPARE(store::stepsWithGenerations(store, result.runId), (std::vector<std::int64_t> {1, 2, 4}));
    QVERIFY(store::stepGenerations(store, result.runId, 3).empty());
    const auto stepsStored = store.stepsAfter(result.runId, 0);
    for (const std::int64_t step : {1, 2, 4}) {
        const auto generations = store::stepGenerations(store, result.runId, step);
        QCOMPARE(generations.size(), std::size_t(4));
        double klSum = 0.0;
        double k1Sum = 0.0;
        std::size_t tokens = 0;
        for (const auto& g : generations) {
            QVERIFY(!g.tokens.empty() && !g.promptId.empty() && !g.promptTokens.empty());
            QCOMPARE(g.kl.size(), g.tokens.size());
            QCOMPARE(g.details.size(), g.tokens.size());
            for (std::size_t t = 0; t < g.tokens.size(); ++t) {
                klSum += g.kl[t];
                k1Sum += g.details[t].logMu - g.details[t].logPi;
                QVERIFY(g.kl[t] >= -1e-12);
            }
            tokens += g.tokens.size();
        }
        const auto& metrics = stepsStored[static_cast<std::size_t>(step - 1)];
        QCOMPARE(metrics.step, step);
        // Sums in another order than the step's token mean: float64 rounding only.
        QVERIFY(std::abs(klSum / static_cast<double>(tokens) - *metrics.mismatchKl) <= 1e-12 * *metrics.mismatchKl);
        QVERIFY(std::abs(k1Sum / static_cast<double>(tokens) - *metrics.k1) <= 1e-9 * std::max(1e-6, std::abs(*metrics.k1)));
    }
    // Step 1's pi is the student as loaded (no update yet): each kept token's log pi(y), entropy and top-5 against
    // the student's forward in float64. Tolerance 1e-4 nats: the trainer's forward is float32 (logits of this tiny
    // model are O(10), float32 roundings through 2 layers stay below 1e-5), its log-softmax float64.
    const model::ModelConfig studentConfig = model::loadConfig(pair_.student + "/config.json");
    const model::Transformer reference(
        studentConfig, model::loadWeights(pair_.student, studentConfig).to(at::kDouble));
    for (const auto& g : store::stepGenerations(store, result.runId, 1)) {
        std::vector<std::int64_t> ids = g.promptTokens;
        ids.insert(ids.end(), g.tokens.begin(), g.tokens.end());
        const auto length = static_cast<std::int64_t>(ids.size());
        const at::Tensor logits = reference.forward(at::tensor(ids, at::kLong).reshape({1, length}),
            at::ones({1, length}, at::kLong))[0];
        const at::Tensor logPi = at::log_softmax(logits, -1);
        const auto prompt = static_cast<std::int64_t>(g.promptTokens.size());
        for (std::size_t t = 0; t < g.tokens.size(); ++t) {
            const at::Tensor row = logPi[prompt - 1 + static_cast<std::int64_t>(t)];
            const auto& d = g.details[t];
            QVERIFY2(std::abs(d.logPi - row[g.tokens[t]].item<double>()) < 1e-4,
                qPrintable(QString("token %1: %2 vs %3").arg(t).arg(d.logPi).arg(row[g.tokens[t]].item<double>())));
            const double entropy = -(row.exp() * row).sum().item<double>();
            QVERIFY(std::abs(d.entropyPi - entropy) < 1e-4);
            QCOMPARE(d.topPi.size(), std::size_t(5));
            QVERIFY(std::abs(d.topPi[0].second - row.exp().max().item<double>()) < 1e-4);
        }
    }

    // Checkpoints at 2 and 4 are model directories.
    for (const char* step : {"step-00000002", "step-00000004"}) {
        const fs::path dir = fs::path(train::checkpointDirectory(workspace.path().toStdString(), result.runId)) / step;
        QVERIFY2(fs::exists(dir / "optimizer.safetensors"), dir.c_str());
        QCOMPARE(model::openModelDirectory(dir.string()).config.hiddenSize, std::int64_t(32));
    }
}

void TestTrainer::asynchronousWithoutStalenessEqualsSynchronous()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const train::TrainResult sync = train::runTraining(
        train::loadRunConfig(writeRunFile(ws, "sync", runBody(pair_, "steps: 5\n" + baseRollout() + evaluation(5)))),
        store, progress);
    const train::TrainResult async = train::runTraining(train::loadRunConfig(writeRunFile(ws, "async",
                                                            runBody(pair_, "steps: 5\n" + baseRollout("  asynchronous: true\n")
                                                                    + evaluation(5)))),
        store, progress);
    const auto a = stepValues(store, sync.runId);
    const auto b = stepValues(store, async.runId);
    printSteps("sync", a);
    QCOMPARE(a.size(), std::size_t(5));
    QVERIFY(a == b);
    QVERIFY(evaluationValues(store, sync.runId) == evaluationValues(store, async.runId));
    QVERIFY(at::equal(checkpointTensor(ws, sync.runId, 5, "model.layers.1.mlp.up_proj.weight"),
        checkpointTensor(ws, async.runId, 5, "model.layers.1.mlp.up_proj.weight")));
    // Training moved the weights.
    QVERIFY(!at::equal(checkpointTensor(ws, sync.runId, 5, "model.layers.1.mlp.up_proj.weight"),
        model::loadWeights(pair_.student, model::openModelDirectory(pair_.student).config)
            .get("model.layers.1.mlp.up_proj.weight")));
}

void TestTrainer::asynchronousEqualsSynchronousAtTheSameStaleness()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const std::string noise = "  noise: {sigma: 0.05, seed: 9}\n";
    const train::TrainResult sync = train::runTraining(train::loadRunConfig(writeRunFile(ws, "sync2",
                                                           runBody(pair_, "steps: 6\n" + baseRollout("  staleness: 2\n" + noise)))),
        store, progress);
    const train::TrainResult async = train::runTraining(train::loadRunConfig(writeRunFile(ws, "async2",
                                                            runBody(pair_, "steps: 6\n"
                                                                    + baseRollout("  staleness: 2\n  asynchronous: true\n" + noise)))),
        store, progress);
    const auto a = stepValues(store, sync.runId);
    const auto b = stepValues(store, async.runId);
    printSteps("async k=2", b);
    QVERIFY(a == b);
    // Batch s was generated with weights max(0, s - 1 - 2): staleness min(2, s - 1).
    for (const auto& v : b) {
        QCOMPARE(v.version, std::max<std::int64_t>(0, v.step - 3));
        QCOMPARE(v.staleness, std::min<std::int64_t>(2, v.step - 1));
    }
}

void TestTrainer::resumeAfterStopIsExact()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const std::string body = runBody(pair_, "steps: 8\n" + baseRollout("  staleness: 1\n  asynchronous: true\n")
            + evaluation(2) + "checkpoint: {every: 3}\n");
    const train::TrainResult whole = train::runTraining(train::loadRunConfig(writeRunFile(ws, "whole", body)), store, progress);

    // Stop after 5 steps: checkpoint at 3, steps 4 and 5 and the evaluation at 4 stored after it.
    train::TrainOptions stopEarly;
    stopEarly.stopAfterSteps = 5;
    const train::TrainResult first
        = train::runTraining(train::loadRunConfig(writeRunFile(ws, "parts", body)), store, progress, stopEarly);
    QCOMPARE(first.stepsStored, std::int64_t(5));
    QVERIFY(store.run(first.runId)->status == store::RunStatus::Running);
    const train::TrainResult rest = train::resumeTraining(first.runId, store, progress);
    QCOMPARE(rest.resumedFromStep, std::int64_t(3));
    QVERIFY(store.run(first.runId)->status == store::RunStatus::Finished);
    const auto expected = stepValues(store, whole.runId);
    const auto resumed = stepValues(store, first.runId);
    QCOMPARE(resumed.size(), std::size_t(8));
    QVERIFY(expected == resumed);
    QVERIFY(evaluationValues(store, whole.runId) == evaluationValues(store, first.runId));
    // The rollouts kept at step 4 before the stop were deleted with the steps after the checkpoint and kept again:
    // the same steps, tokens and per-token KL as the uninterrupted run's.
    QCOMPARE(store::stepsWithGenerations(store, first.runId), (std::vector<std::int64_t> {1, 2, 4, 6, 8}));
    QCOMPARE(store::stepsWithGenerations(store, whole.runId), store::stepsWithGenerations(store, first.runId));
    for (const std::int64_t step : store::stepsWithGenerations(store, whole.runId)) {
        const auto a = store::stepGenerations(store, whole.runId, step);
        const auto b = store::stepGenerations(store, first.runId, step);
        QCOMPARE(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
            QCOMPARE(a[i].tokens, b[i].tokens);
            QCOMPARE(a[i].kl, b[i].kl);
        }
    }
    QCOMPARE(store::queryInt64(store.handle(),
                 ("SELECT count(DISTINCT step) - count(*) FROM step_metrics WHERE run_id = " + std::to_string(first.runId))
                     .c_str()),
        std::int64_t(0));
    QVERIFY(at::equal(checkpointTensor(ws, whole.runId, 8, "model.embed_tokens.weight"),
        checkpointTensor(ws, first.runId, 8, "model.embed_tokens.weight")));
}

void TestTrainer::resumeAfterSigkillLosesAndDuplicatesNothing()
{
    // The CLI in a child process, killed with SIGKILL after its first checkpoint and later steps are stored,
    // then resumed with `mismatch train --resume`; compared with an uninterrupted CLI run.
    const QString binary = QStringLiteral(MISMATCH_BINARY_DIR "/app/mismatch");
    QVERIFY2(QFileInfo::exists(binary), "the mismatch CLI is built with the tests");
    // Killed several times (MISMATCH_TRAIN_KILLS, default 3) at random moments once more steps than at the last
    // kill are stored, each time resumed with `mismatch train --resume 1`; the run is long enough for them.
    const int plannedKills = qEnvironmentVariableIsSet("MISMATCH_TRAIN_KILLS")
        ? qEnvironmentVariableIntValue("MISMATCH_TRAIN_KILLS")
        : 3;
    const int steps = std::max(30, 8 * plannedKills);
    QTemporaryDir files;
    const std::string runFile = writeRunFile(files.path().toStdString(), "killed",
        runBody(pair_, "steps: " + std::to_string(steps) + "\n" + baseRollout() + evaluation(8) + "checkpoint: {every: 4}\n"));
    const auto runCli = [&](const QString& workspace, const QStringList& arguments) {
        QProcess process;
        process.start(binary, QStringList {"--workspace", workspace, "--threads", "1"} + arguments);
        QVERIFY(process.waitForFinished(120000));
        QVERIFY2(process.exitCode() == 0, process.readAllStandardError().constData());
    };
    QTemporaryDir reference;
    runCli(reference.path(), {"train", QString::fromStdString(runFile), "--quiet"});

    QTemporaryDir killed;
    const std::string ws = killed.path().toStdString();
    const std::string database = store::databasePath(ws);
    const auto storedSteps = [&database]() -> std::int64_t {
        if (!fs::exists(database)) {
            return 0;
        }
        try {
            const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
            return store::queryInt64(reader.handle(), "SELECT count(*) FROM step_metrics");
        } catch (const StoreError&) {
            return 0; // the writer is still creating the schema
        }
    };
    SplitMix64 random(20261129);
    int kills = 0;
    std::int64_t lastKilledAt = 0;
    bool finished = false;
    while (!finished) {
        QProcess process;
        QStringList arguments {"--workspace", killed.path(), "--threads", "1", "train", "--quiet"};
        arguments += kills == 0 && lastKilledAt == 0 ? QStringList {QString::fromStdString(runFile)}
                                                     : QStringList {"--resume", "1"};
        process.start(binary, arguments);
        QVERIFY(process.waitForStarted());
        if (kills >= plannedKills) {
            QVERIFY(process.waitForFinished(120000));
            QVERIFY2(process.exitCode() == 0, process.readAllStandardError().constData());
            finished = true;
            break;
        }
        const std::int64_t target = lastKilledAt + 1 + static_cast<std::int64_t>(random.below(5));
        QElapsedTimer timer;
        timer.start();
        while (timer.elapsed() < 120000 && process.state() == QProcess::Running && storedSteps() < target) {
            QThread::msleep(10);
        }
        if (process.state() != QProcess::Running) {
            QVERIFY2(process.exitCode() == 0, process.readAllStandardError().constData());
            finished = true; // it finished before this kill
            break;
        }
        QThread::msleep(static_cast<unsigned long>(random.below(40))); // anywhere inside the next step or two
        ::kill(static_cast<pid_t>(process.processId()), SIGKILL);
        process.waitForFinished(10000);
        lastKilledAt = storedSteps();
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        if (reader.run(1)->status == store::RunStatus::Finished) {
            finished = true; // the run completed inside the random delay, before the kill landed
            break;
        }
        QVERIFY(reader.run(1)->status == store::RunStatus::Running); // killed: nobody marked it
        ++kills;
    }
    qInfo("killed the training process %d times with SIGKILL, resumed each time", kills);
    QVERIFY(kills >= 1);

    const store::RunStore a = store::RunStore::open(store::databasePath(reference.path().toStdString()), store::OpenMode::ReadOnly);
    const store::RunStore b = store::RunStore::open(database, store::OpenMode::ReadOnly);
    QVERIFY(b.run(1)->status == store::RunStatus::Finished);
    const auto expected = stepValues(a, 1);
    const auto resumed = stepValues(b, 1);
    QCOMPARE(resumed.size(), static_cast<std::size_t>(steps));
    QVERIFY(expected == resumed);
    QVERIFY(evaluationValues(a, 1) == evaluationValues(b, 1));
}

void TestTrainer::cancelStoresWhatWasDoneAndStaysResumable()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    train::TrainOptions options;
    options.onStep = [&progress](const store::StepMetrics& m) {
        if (m.step == 3) {
            progress.cancel();
        }
    };
    const train::RunConfig config = train::loadRunConfig(writeRunFile(ws, "cancelled",
        runBody(pair_, "steps: 6\n" + baseRollout("  staleness: 1\n  asynchronous: true\n") + "checkpoint: {every: 2}\n")));
    QVERIFY_EXCEPTION_THROWN(train::runTraining(config, store, progress, options), CancelledError);
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(1));
    QVERIFY(runs[0].status == store::RunStatus::Cancelled);
    QCOMPARE(runs[0].stepCount, std::int64_t(3));
    Progress fresh;
    const train::TrainResult rest = train::resumeTraining(runs[0].id, store, fresh);
    QCOMPARE(rest.resumedFromStep, std::int64_t(2));
    QCOMPARE(store.run(runs[0].id)->stepCount, std::int64_t(6));
    QVERIFY(store.run(runs[0].id)->status == store::RunStatus::Finished);
}

void TestTrainer::nanWeightsFailTheRunWithAClearMessage()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    const model::ModelConfig config = train::demoModelConfig(32, 2, 2, 1, 64);
    model::TransformerWeights weights = model::randomWeights(config, 11, 0.05);
    weights.get("model.layers.1.mlp.down_proj.weight")[3][5] = std::nan("");
    const std::string student = (fs::path(ws) / "nan-student").string();
    train::writeDemoModelDirectory(student, config, weights);
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    const std::string body = "student: " + student + "\nteacher: " + pair_.teacher + "\nprompts: "
        + std::string(kResources) + "/prompts/arith-train.jsonl\nsteps: 3\nbatch: {prompts_per_step: 2}\n" + baseRollout();
    Progress progress;
    // Refused when the student is loaded: the error names the file and the tensor; no run is stored.
    try {
        train::runTraining(train::loadRunConfig(writeRunFile(ws, "nan", body)), store, progress);
        QFAIL("a student with NaN weights trained");
    } catch (const InputError& error) {
        const QString message = error.what();
        QVERIFY2(message.contains("NaN"), qPrintable(message));
        QVERIFY2(message.contains("model.layers.1.mlp.down_proj.weight"), qPrintable(message));
        QVERIFY2(message.contains("nan-student"), qPrintable(message));
    }
    QCOMPARE(store.listRuns().size(), std::size_t(0));

    // A learning rate so large that the update overflows: the run stops at the step where it happened, is
    // marked failed with the reason, and no non-finite value reaches the store.
    const std::string blowUp = "student: " + pair_.student + "\nteacher: " + pair_.teacher + "\nprompts: "
        + std::string(kResources) + "/prompts/arith-train.jsonl\nsteps: 3\nbatch: {prompts_per_step: 2}\n"
        + "optimizer: {learning_rate: 1.0e+30, gradient_clip: 0}\n" + baseRollout();
    try {
        train::runTraining(train::loadRunConfig(writeRunFile(ws, "overflow", blowUp)), store, progress);
        QFAIL("a run whose weights overflowed finished");
    } catch (const Error& error) {
        const QString message = error.what();
        QVERIFY2(message.contains("step ") && message.contains("finite"), qPrintable(message));
    }
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(1));
    QVERIFY(runs[0].status == store::RunStatus::Failed);
    QVERIFY(runs[0].error.find("finite") != std::string::npos);
    QVERIFY(runs[0].stepCount < 3);
    for (const auto& m : store.stepsAfter(runs[0].id, 0)) { // nothing non-finite was stored
        QVERIFY(std::isfinite(*m.loss) && std::isfinite(*m.mismatchKl) && std::isfinite(*m.entropy));
    }
}

void TestTrainer::resumeErrors()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    QVERIFY_EXCEPTION_THROWN(train::resumeTraining(42, store, progress), StoreError);
    const std::int64_t demo = store.beginRun({"not-training", "demo", "{}", std::nullopt});
    try {
        train::resumeTraining(demo, store, progress);
        QFAIL("resumed a demo run");
    } catch (const StoreError& error) {
        QVERIFY2(std::string(error.what()).find("not a training run") != std::string::npos, error.what());
    }
    const train::TrainResult done = train::runTraining(
        train::loadRunConfig(writeRunFile(ws, "done", runBody(pair_, "steps: 1\n" + baseRollout()))), store, progress);
    try {
        train::resumeTraining(done.runId, store, progress);
        QFAIL("resumed a finished run");
    } catch (const StoreError& error) {
        QVERIFY2(std::string(error.what()).find("has finished") != std::string::npos, error.what());
    }
}

void TestTrainer::mismatchedVocabulariesAreRejectedBeforeARunIsStored()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    model::ModelConfig other = train::demoModelConfig(32, 1, 2, 1, 64);
    other.vocabSize = 300;
    const std::string teacher = (fs::path(ws) / "wide-teacher").string();
    fs::create_directories(teacher);
    {
        std::ofstream(fs::path(teacher) / "config.json") << model::configToJson(other);
    }
    model::saveWeights(teacher, model::randomWeights(other, 1), model::DType::F32);
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    const std::string body = "student: " + pair_.student + "\nteacher: " + teacher + "\nprompts: "
        + std::string(kResources) + "/prompts/arith-train.jsonl\nsteps: 2\n";
    const std::string file = writeRunFile(ws, "wide", body);
    Progress progress;
    try {
        train::runTraining(train::loadRunConfig(file), store, progress);
        QFAIL("trained against a teacher with another vocabulary");
    } catch (const InputError& error) {
        QVERIFY2(std::string(error.what()).find("vocabulary") != std::string::npos, error.what());
        QVERIFY2(std::string(error.what()).find(file) != std::string::npos, error.what());
    }
    QCOMPARE(store.listRuns().size(), std::size_t(0));
}

void TestTrainer::deviceOfTheRunFile()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    // `device: cpu` written out is the default: the same run, value for value.
    const std::string body = runBody(pair_, "steps: 2\n" + baseRollout());
    const auto plain = train::runTraining(train::loadRunConfig(writeRunFile(ws, "plain", body)), store, progress);
    const auto onCpu
        = train::runTraining(train::loadRunConfig(writeRunFile(ws, "cpu", body + "device: cpu\n")), store, progress);
    QCOMPARE(stepValues(store, onCpu.runId).size(), std::size_t(2));
    QVERIFY(stepValues(store, onCpu.runId) == stepValues(store, plain.runId));
    // A CUDA device this machine (or this build's LibTorch) does not have: refused before a run is stored, naming
    // the run file, the key and the devices there are.
    const std::size_t runs = store.listRuns().size();
    const std::string missing = "cuda:" + std::to_string(availableDevices().size() - 1);
    const std::string file = writeRunFile(ws, "gpu", body + "device: " + missing + "\n");
    try {
        train::runTraining(train::loadRunConfig(file), store, progress);
        QFAIL("trained on a device that is not there");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), QString::fromStdString(file));
        QCOMPARE(QString::fromStdString(error.location()), QString("device"));
        QVERIFY2(error.detail().find("available: cpu") != std::string::npos, error.what());
    }
    QCOMPARE(store.listRuns().size(), runs);
}

// A run's memory check (before anything is loaded or stored) names what the run will hold: the trainer's
// 16 bytes a parameter plus k + 1 float32 weight versions (the steps after step s roll out with versions from
// s - k and measure the BF16 unit at s), and with rollout noise the noisy version a sync draws next to the
// engine's view of the last one (in the dtypes engine::noisyCopyBytes counts by hand in test_engine), and the
// backward's [vocabulary, hidden] gradients before autograd adds them.
void TestTrainer::memoryCheckListsWhatTheRunHolds()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const model::ModelConfig config = model::loadConfig(pair_.student + "/config.json");
    const std::int64_t parameters = model::loadWeights(pair_.student, config).numel();
    const auto contains = [](const std::string& text, const std::string& part) {
        return text.find(part) != std::string::npos;
    };
    const auto refusal = [&](const std::string& name, const std::string& rollout) {
        // 64 MiB: one step's distributions fit (a few MB at this vocabulary), the 256 MiB KV cache does not.
        ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", std::to_string(64ull << 20).c_str(), 1);
        std::string message;
        try {
            train::runTraining(
                train::loadRunConfig(writeRunFile(ws, name, runBody(pair_, "steps: 2\n" + baseRollout(rollout)))),
                store, progress);
        } catch (const ResourceError& error) {
            message = error.what();
        }
        ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");
        return message;
    };
    const std::string plain = refusal("plain", "");
    const std::string noisy = refusal("noisy", "  staleness: 2\n  noise: {sigma: 0.02, seed: 1, modules: \"*mlp*\"}\n");
    QVERIFY2(contains(plain, "nothing was loaded"), plain.c_str());
    QVERIFY2(
        contains(plain, "weight snapshots: " + formatByteSize(std::uint64_t(parameters) * (16 + 4))), plain.c_str());
    QVERIFY2(!contains(plain, "noisy"), plain.c_str());
    // The tied embedding's two [vocabulary, hidden] float32 gradients in the backward.
    QVERIFY(config.tieWordEmbeddings);
    QVERIFY2(contains(plain, "before they are added to the gradients: "
                 + formatByteSize(2 * std::uint64_t(config.vocabSize) * std::uint64_t(config.hiddenSize) * 4)),
        plain.c_str());
    QVERIFY2(contains(noisy, "weight snapshots: " + formatByteSize(std::uint64_t(parameters) * (16 + 4 * 3))),
        noisy.c_str());
    const std::uint64_t noised = engine::noisyCopyBytes(config, nullptr, "*mlp*", at::kFloat, false);
    QVERIFY(noised > 0 && noised < engine::noisyCopyBytes(config, nullptr, "*", at::kFloat, false));
    QVERIFY2(contains(noisy, "noisy weight version drawn at a rollout sync: " + formatByteSize(noised)), noisy.c_str());
    QVERIFY(store.listRuns().empty()); // refused before a run was stored
}

// Every run writes at least its final checkpoint; under a file size limit (`ulimit -f`) that its largest file
// cannot fit, the run is refused before it is stored (issue 46: it used to train, record its steps and then fail
// with "File too large", leaving a failed run). The sizes are the float32 files trainer_checkpoints.cpp writes:
// optimizer.safetensors holds AdamW's two moments per parameter, history.safetensors one copy of the weights per
// version a stale rollout may still use.
void TestTrainer::checkpointOverTheFileSizeLimitIsRefusedBeforeARunIsStored()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const model::ModelConfig config = model::loadConfig(pair_.student + "/config.json");
    // The trained parameters (a tied embedding counted once), each with one float32 value and two moments.
    model::TransformerWeights weights = model::loadWeights(pair_.student, config);
    std::uint64_t parameters = 0;
    for (const at::Tensor& parameter : weights.parameters()) {
        parameters += static_cast<std::uint64_t>(parameter.numel());
    }
    const std::string fresh = writeRunFile(ws, "fresh", runBody(pair_, "steps: 1\n" + baseRollout()));
    const std::string stale
        = writeRunFile(ws, "stale", runBody(pair_, "steps: 1\n" + baseRollout("  staleness: 3\n")));
    struct rlimit saved {};
    QCOMPARE(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    std::signal(SIGXFSZ, SIG_IGN); // a write past the limit fails with EFBIG instead of ending the test
    const auto refusal = [&](const std::string& runFile, std::uint64_t limitBytes) {
        struct rlimit limit = saved;
        limit.rlim_cur = static_cast<rlim_t>(limitBytes);
        std::string message = "setrlimit failed";
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
            return message;
        }
        message = "trained without a refusal";
        try {
            train::runTraining(train::loadRunConfig(runFile), store, progress);
        } catch (const InputError& error) {
            message = error.what();
        }
        if (::setrlimit(RLIMIT_FSIZE, &saved) != 0) {
            message += " (and the limit could not be restored)";
        }
        return message;
    };
    const std::string optimizer = refusal(fresh, 8 * parameters - 1);
    QVERIFY2(optimizer.find(fresh) != std::string::npos, optimizer.c_str());
    QVERIFY2(optimizer.find("optimizer.safetensors takes about " + formatByteSize(8 * parameters)) != std::string::npos,
        optimizer.c_str());
    QVERIFY2(optimizer.find("ulimit -f") != std::string::npos, optimizer.c_str());
    const std::string history = refusal(stale, 12 * parameters - 1);
    QVERIFY2(history.find("history.safetensors takes about " + formatByteSize(12 * parameters)) != std::string::npos,
        history.c_str());
    QVERIFY(store.listRuns().empty()); // refused before a run was stored
    QVERIFY(!fs::exists(fs::path(ws) / "checkpoints"));
}

// Real checkpoints pad their vocabulary beyond the tokenizer's ids (Qwen3: 151,936 rows, 151,669 tokens), and a
// sampler over the whole vocabulary can draw a padding id. A run must go on (the id adds no text to the answer a
// reward or an evaluation checks) instead of failing on the tokenizer. Here the padding rows of a tied embedding
// are made long, so that the rollouts and the evaluations draw them often; the kept rollouts show that they did.
void TestTrainer::idsBeyondTheTokenizerAreDrawnAndTrainedOn()
{
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const auto write = [&](const std::string& name, std::int64_t hidden, std::uint64_t seed) {
        model::ModelConfig config = train::demoModelConfig(hidden, 1, 2, 1, 2 * hidden);
        const std::int64_t tokenizerIds = config.vocabSize;
        config.vocabSize += 8; // no token for ids tokenizerIds .. tokenizerIds + 7
        model::TransformerWeights weights = model::randomWeights(config, seed, 0.05);
        weights.get("model.embed_tokens.weight").narrow(0, tokenizerIds, 8).mul_(200.0);
        train::writeDemoModelDirectory(root + "/" + name, config, weights);
        return tokenizerIds;
    };
    const std::int64_t tokenizerIds = write("student", 32, 21);
    write("teacher", 32, 22);
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    Progress progress;
    const std::string body = "student: " + root + "/student\nteacher: " + root + "/teacher\nprompts: "
        + std::string(kResources) + "/prompts/arith-train.jsonl\nsteps: 2\nseed: 3\nobjective: reinforce\n"
        + "batch: {prompts_per_step: 4}\n" + baseRollout() + evaluation(2);
    const train::TrainResult result
        = train::runTraining(train::loadRunConfig(writeRunFile(ws, "padded", body)), store, progress);
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
    std::int64_t padding = 0;
    for (const auto& generation : store::stepGenerations(store, result.runId, 1)) {
        padding += std::count_if(generation.tokens.begin(), generation.tokens.end(),
            [&](std::int64_t id) { return id >= tokenizerIds; });
    }
    QVERIFY2(padding > 0, "no padding id was drawn: the test does not exercise what it is for");
    for (const auto& m : store.stepsAfter(result.runId, 0)) {
        QVERIFY(m.reward.has_value() && std::isfinite(*m.loss));
    }
}

void TestTrainer::rewardObjectivesRunOnTinyModels_data()
{
    QTest::addColumn<QString>("objective");
    QTest::newRow("reinforce") << "objective: reinforce\ncorrection: {kind: tis, cap: 2.0}\n";
    QTest::newRow("grpo") << "objective: grpo\nbatch: {prompts_per_step: 2, samples_per_prompt: 3}\n";
    QTest::newRow("opd_k3 with mis") << "objective: opd_k3\ncorrection: {kind: mis, cap: 3.0}\n";
    QTest::newRow("opd_topk") << "objective: {name: opd_topk, top_k: 8}\n";
}

void TestTrainer::rewardObjectivesRunOnTinyModels()
{
    QFETCH(QString, objective);
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    std::string body = "student: " + pair_.student + "\nteacher: " + pair_.teacher + "\nprompts: "
        + std::string(kResources) + "/prompts/arith-train.jsonl\nsteps: 3\nseed: 2\n" + objective.toStdString()
        + baseRollout("  staleness: 1\n  noise: {sigma: 0.02, seed: 1}\n");
    if (!objective.contains("batch")) {
        body += "batch: {prompts_per_step: 3}\n";
    }
    Progress progress;
    const train::TrainResult result = train::runTraining(train::loadRunConfig(writeRunFile(ws, "objective", body)), store, progress);
    const bool reward = objective.contains("reinforce") || objective.contains("grpo");
    for (const auto& m : store.stepsAfter(result.runId, 0)) {
        QVERIFY(std::isfinite(*m.loss));
        QVERIFY(std::isfinite(*m.mismatchKl));
        QCOMPARE(m.reward.has_value(), reward);
        if (objective.contains("grpo")) {
            QCOMPARE(nlohmann::json::parse(m.extrasJson).at("sequences").get<int>(), 6);
        }
    }
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
}

void TestTrainer::timeToQualityReadsTheStoredRun()
{
    QTemporaryDir workspace;
    store::RunStore store = store::RunStore::open(store::databasePath(workspace.path().toStdString()));
    const std::int64_t run = store.beginRun({"ttq", "train", "{}", std::nullopt});
    std::vector<store::StepMetrics> steps;
    for (int s = 1; s <= 30; ++s) {
        store::StepMetrics m;
        m.step = s;
        m.wallTimeSeconds = 2.5 * s;
        steps.push_back(m);
    }
    store.appendSteps(run, steps);
    const std::vector<std::pair<int, double>> qualities = {{0, 1.0}, {10, 0.8}, {20, 0.55}, {30, 0.6}};
    for (const auto& [step, q] : qualities) {
        store::addEvaluation(store, run, step, std::nullopt, {{"p1", q, false}, {"p2", q, true}});
    }
    const train::TimeToQuality reached = train::timeToQuality(store, run, 0.7);
    QVERIFY(reached.reached);
    QCOMPARE(reached.step, std::int64_t(20));
    QCOMPARE(reached.wallSeconds, 50.0);
    QCOMPARE(reached.quality, 0.55);
    QCOMPARE(*reached.bestQuality, 0.55);
    QCOMPARE(reached.evaluations, std::int64_t(4));
    const train::TimeToQuality never = train::timeToQuality(store, run, 0.5);
    QVERIFY(!never.reached);
    QVERIFY_EXCEPTION_THROWN(train::timeToQuality(store, run + 1, 0.5), StoreError);
}

// Long: one calibration is trained once and every stored figure of it is checked against a recomputation here, in
// the order they are made: runs and seeds, each point's figures (its screens re-made by admit), verdicts, brackets,
// the null comparisons, the stored configuration and protocol.
void TestTrainer::calibrationSweepStoresPointsAndBrackets()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options;
    options.name = "tiny";
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(2))));
    options.noiseSigmas = {0.2, 3.0};
    options.staleness = {1};
    options.steps = {2, 4};
    options.replicates = 2;
    options.maxReplicates = 2; // no seeds added (calibrationAddsSeedsUntilDecided tests that)
    options.probeCount = 16; // prompts of each screen
    options.rule.bootstrap.resamples = 2000;
    Progress progress;
    const analysis::CalibrationResult result = analysis::runCalibration(store, options, progress);
    // Four configurations x two seeds, then the null group (the baseline with two more seeds).
    QCOMPARE(result.runs.size(), std::size_t(10));
    QCOMPARE(QString::fromStdString(result.runs[0].label), QString("baseline"));
    QCOMPARE(result.runs[0].seed, options.base.seed); // replicate 0 is the base run as written
    QCOMPARE(QString::fromStdString(result.runs[8].label), QString("null"));
    QCOMPARE(result.runs[8].replicate, std::int64_t(2));
    std::set<std::uint64_t> baselineSeeds;
    for (const auto& run : result.runs) {
        if (run.label == "baseline" || run.label == "null") {
            baselineSeeds.insert(run.seed);
        }
        // Every run's stored seed is the one its configuration says.
        QCOMPARE(train::parseRunConfig(store.run(run.runId)->configJson, "stored", ws).seed, run.seed);
    }
    QCOMPARE(baselineSeeds.size(), std::size_t(4)); // the null comparison uses other seeds
    QCOMPARE(result.points.size(), std::size_t(8));
    // The protocol screens measure under (spec "Same statistic on both axes").
    const analysis::MeasurementProtocol protocol = analysis::protocolFromJson(
        nlohmann::json::parse(store::calibration(store, result.calibrationId)->info.configJson).at("protocol"),
        "stored");
    // Each point is the replicate mean of its runs' figures, recomputed here from the stored steps and evaluations:
    // training mismatch = mean step KL up to the step; training unit = mean of the units measured up to the step;
    // and mismatch = the mean of what `admit` measures on the runs' checkpoints at the step, under the protocol,
    // with the configuration as its candidate (admitted separately here, each run's own checkpoint).
    for (const auto& point : result.points) {
        double mismatch = 0.0, unit = 0.0, quality = 0.0, screened = 0.0, screenedUnit = 0.0;
        int replicates = 0;
        for (const auto& run : result.runs) {
            if (run.label != point.label) {
                continue;
            }
            double sum = 0.0, unitSum = 0.0;
            int count = 0, unitCount = 0;
            for (const auto& m : store.stepsAfter(run.runId, 0)) {
                if (m.step <= point.step) {
                    sum += *m.mismatchKl;
                    ++count;
                    const auto extras = nlohmann::json::parse(m.extrasJson);
                    if (extras.at("bf16_unit_measured").get<bool>()) {
                        unitSum += extras.at("bf16_unit").get<double>();
                        ++unitCount;
                    }
                }
            }
            QCOMPARE(count, static_cast<int>(point.step));
            QCOMPARE(unitCount, static_cast<int>(point.step)); // calibrations measure the unit at every step
            mismatch += sum / count;
            unit += unitSum / unitCount;
            quality += store::evaluationAt(store, run.runId, point.step)->summary.quality;
            ++replicates;
            const train::RunConfig config = train::parseRunConfig(store.run(run.runId)->configJson, "stored", ws);
            analysis::Candidate candidate;
            candidate.name = point.label;
            candidate.noise = config.rollout.noise.sigma;
            candidate.noiseSeed = config.rollout.noise.seed;
            candidate.staleness = config.rollout.staleness;
            analysis::AdmissionOptions admit;
            admit.checkpoints = {train::stepCheckpoint(store, ws, run.runId, point.step)};
            admit.candidates = {candidate};
            admit.calibrationId = result.calibrationId; // its protocol, its bracket
            admit.steps = {point.step};
            Progress screening;
            const analysis::AdmissionResult admitted = analysis::runAdmission(store, admit, screening);
            screened += admitted.rows.at(0).mismatch;
            screenedUnit += *admitted.rows.at(0).bf16Unit;
            QCOMPARE(admitted.protocol, protocol);
        }
        QCOMPARE(replicates, 2);
        QCOMPARE(point.replicates, std::int64_t(2));
        QVERIFY(point.trainingMismatch);
        QVERIFY(std::abs(*point.trainingMismatch - mismatch / 2) <= 1e-12 * std::max(1e-12, mismatch));
        // The same measurement made the same way: equal but for the order of the two-term mean.
        QVERIFY2(std::abs(point.mismatch - screened / 2) <= 1e-12 * std::max(1e-12, point.mismatch),
            (point.label + ": " + std::to_string(point.mismatch) + " vs " + std::to_string(screened / 2)).c_str());
        QVERIFY(std::abs(*point.bf16Unit - screenedUnit / 2) <= 1e-12 * std::max(1e-12, screenedUnit));
        QVERIFY(std::abs(point.quality - quality / 2) <= 1e-12 * quality);
        if (point.label == "baseline") {
            // The baseline is the plain BF16 engine at the checkpoint: the unit measurement itself, exactly.
            QCOMPARE(*point.bf16Unit, point.mismatch);
        }
    }
    for (const auto& replicate : result.replicatePoints) {
        // The null group is no point: it has no screen; every configuration's seed has one.
        QCOMPARE(replicate.label == "null", !replicate.mismatch.has_value());
        QCOMPARE(replicate.label == "null", !replicate.bf16Unit.has_value());
        if (replicate.label == "baseline") {
            QCOMPARE(*replicate.bf16Unit, *replicate.mismatch);
        }
        if (replicate.label == "staleness 1") {
            // Its engine ran on the run's own weights one optimizer step older, kept in the checkpoint's history.
            QVERIFY2(replicate.engineWeights.find("history.safetensors (step " + std::to_string(replicate.step - 1) + ")")
                    != std::string::npos, replicate.engineWeights.c_str());
        }
    }
    // The noisier the engine, the larger the mismatch (sigma 3 against sigma 0.2 against none).
    const auto at = [&](const std::string& label, std::int64_t step) {
        for (const auto& point : result.points) {
            if (point.label == label && point.step == step) {
                return point;
            }
        }
        return store::CalibrationPoint {};
    };
    QVERIFY(at("noise 3", 4).mismatch > at("noise 0.2", 4).mismatch);
    QVERIFY(at("noise 0.2", 4).mismatch > at("baseline", 4).mismatch);
    QCOMPARE(at("baseline", 4).verdict, std::string("pass"));
    // Every other point's verdict is its interval of the relative change against the line (spec "Failure rule").
    for (const auto& point : result.points) {
        if (point.label == "baseline") {
            continue;
        }
        QVERIFY(point.changeLow && point.changeHigh);
        const std::string expected = *point.changeLow >= options.rule.relativeThreshold ? "fail"
            : *point.changeHigh < options.rule.relativeThreshold                       ? "pass"
                                                                                        : "undecided";
        QCOMPARE(point.verdict, expected);
    }
    // Brackets from the decided points, computed here from their definition (a passing point above a failing one
    // does not widen the budget; an undecided point sets no end).
    for (const auto& bracket : result.brackets) {
        std::optional<double> failing;
        for (const auto& point : result.points) {
            if (point.step == bracket.step && point.verdict == "fail") {
                failing = failing ? std::min(*failing, point.mismatch) : point.mismatch;
            }
        }
        std::optional<double> passing;
        for (const auto& point : result.points) {
            if (point.step == bracket.step && point.verdict == "pass" && (!failing || point.mismatch < *failing)) {
                passing = passing ? std::max(*passing, point.mismatch) : point.mismatch;
            }
        }
        QCOMPARE(bracket.largestPassing, passing);
        QCOMPARE(bracket.smallestFailing, failing);
    }
    // One null comparison per step, its noise floor the half-width of its interval of the relative change.
    QCOMPARE(result.nullComparisons.size(), std::size_t(2));
    for (const auto& null : result.nullComparisons) {
        QCOMPARE(null.noiseFloor, (null.change.high - null.change.low) / 2.0);
        QVERIFY(null.change.low <= null.relativeChange && null.relativeChange <= null.change.high);
    }
    const auto stored = store::calibration(store, result.calibrationId);
    QVERIFY(stored);
    QCOMPARE(stored->points.size(), std::size_t(8));
    QCOMPARE(stored->brackets.size(), std::size_t(2));
    for (const auto& point : stored->points) {
        QVERIFY(point.bf16Unit.has_value());
        QVERIFY(point.trainingMismatch.has_value()); // schema 10: the training mean kept beside the screen statistic
        QVERIFY(point.accuracy.has_value());
        QVERIFY(!point.label.empty());
    }
    const nlohmann::json config = nlohmann::json::parse(stored->info.configJson);
    QCOMPARE(config.at("replicates").get<std::int64_t>(), std::int64_t(2));
    QCOMPARE(config.at("null_comparisons").size(), std::size_t(2));
    QCOMPARE(config.at("replicate_points").size(), std::size_t(20)); // 10 runs x 2 steps
    // The protocol screens against it: the base run's prompts, rollout sampling, KV frozen from the first batch.
    QCOMPARE(protocol.prompts, fs::absolute(options.base.prompts).lexically_normal().string());
    QCOMPARE(protocol.maxTokens, options.base.rollout.sampling.maxTokens);
    QVERIFY(protocol.kvScales == analysis::KvScalePolicy::FrozenFirstBatch);
    QCOMPARE(protocol.kvFirstBatch, options.base.batch.promptsPerStep);
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
    QCOMPARE(QString::fromStdString(store.run(result.runId)->kind), QString("calibrate"));
}

// A calibration of the tiny pair's 4-step run (evaluated at step 4) over noise `sigmas`, the rule at step 4.
analysis::CalibrationOptions TestTrainer::fourStepCalibration(const std::string& ws, const std::string& name,
    const std::vector<double>& sigmas, std::int64_t replicates, std::int64_t maxReplicates) const
{
    analysis::CalibrationOptions options;
    options.name = name;
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(4))));
    options.noiseSigmas = sigmas;
    options.steps = {4};
    options.replicates = replicates;
    options.maxReplicates = maxReplicates;
    options.rule.bootstrap.resamples = 1000;
    return options;
}

namespace {

// The runs of `label` in a calibration, in replicate order.
std::vector<analysis::CalibrationSweepRun> runsOf(const analysis::CalibrationResult& result, const std::string& label)
{
    std::vector<analysis::CalibrationSweepRun> runs;
    for (const auto& run : result.runs) {
        if (run.label == label) {
            runs.push_back(run);
        }
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.replicate < b.replicate; });
    return runs;
}

} // namespace

// Spec "Seed replicates and noise floor": undecided points get more seeds, up to a maximum, under a stopping rule
// fixed in advance (calibrate.h). The rounds are replayed here from the stored evaluations by the rule as stated:
// after each round, every configuration with an undecided point at some step gets a seed, the baseline and the null
// group one each in that round; the null group also when its own comparison is undecided; until nothing is
// undecided or the undecided configurations have the maximum.
void TestTrainer::calibrationAddsSeedsUntilDecided()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options = fourStepCalibration(ws, "adaptive", {0.5, 3.0}, 1, 1);
    options.probeCount = 8;
    // The first round alone (no seeds added), to put the failure line inside noise 3's interval: the same seeds
    // give the same first round below, where that point is then undecided and must get seeds.
    {
        QTemporaryDir firstWorkspace;
        store::RunStore firstStore
            = store::RunStore::open(store::databasePath(firstWorkspace.path().toStdString()));
        Progress firstProgress;
        analysis::CalibrationOptions firstOptions = options;
        firstOptions.workspaceDirectory = firstWorkspace.path().toStdString();
        for (const auto& point : analysis::runCalibration(firstStore, firstOptions, firstProgress).points) {
            if (point.label == "noise 3") {
                options.rule.relativeThreshold = (*point.changeLow + *point.changeHigh) / 2;
            }
        }
    }
    options.maxReplicates = 3;
    Progress progress;
    const analysis::CalibrationResult result = analysis::runCalibration(store, options, progress);

    const std::vector<std::string> labels = {"baseline", "noise 0.5", "noise 3"};
    std::map<std::string, std::vector<std::vector<double>>> qualities; // label -> replicate -> q_i
    const auto base = store::evaluationAt(store, runsOf(result, "baseline").at(0).runId, 4);
    for (const std::string& label : {"baseline", "noise 0.5", "noise 3", "null"}) {
        for (const auto& run : runsOf(result, label)) {
            qualities[label].push_back(store::qualitiesInOrderOf(*store::evaluationAt(store, run.runId, 4), *base));
        }
    }
    const auto first = [&](const std::string& label, std::size_t n) {
        return std::vector<std::vector<double>>(qualities[label].begin(), qualities[label].begin() + static_cast<long>(n));
    };
    std::map<std::string, std::size_t> seeds = {{"baseline", 1}, {"noise 0.5", 1}, {"noise 3", 1}, {"null", 1}};
    int rounds = 0;
    while (true) {
        std::set<std::string> undecided;
        for (const std::string& label : {"noise 0.5", "noise 3"}) {
            if (metrics::applyFailureRule(first(label, seeds[label]), first("baseline", seeds["baseline"]), options.rule)
                    .verdict == metrics::Verdict::Undecided) {
                undecided.insert(label);
            }
        }
        const bool nullUndecided
            = metrics::applyFailureRule(first("null", seeds["null"]), first("baseline", seeds["baseline"]), options.rule)
                  .verdict == metrics::Verdict::Undecided;
        bool grows = false;
        for (const std::string& label : undecided) {
            grows = grows || seeds[label] < 3;
        }
        std::map<std::string, std::size_t> next = seeds;
        for (const std::string& label : labels) {
            if ((label == "baseline" ? grows : undecided.count(label) > 0) && seeds[label] < 3) {
                ++next[label];
            }
        }
        if ((grows || nullUndecided) && seeds["null"] < 3) {
            ++next["null"];
        }
        if (next == seeds) {
            break;
        }
        seeds = next;
        ++rounds;
    }
    qDebug("replayed %d added round(s): seeds baseline %zu, noise 0.5 %zu, noise 3 %zu, null %zu", rounds,
        seeds["baseline"], seeds["noise 0.5"], seeds["noise 3"], seeds["null"]);
    for (const auto& [label, n] : seeds) {
        QCOMPARE(runsOf(result, label).size(), n);
    }
    // The replay above is the rule; this calibration must also have exercised it (a round added).
    QVERIFY2(rounds >= 1, "no seeds were added: this calibration does not exercise the stopping rule");
    // Replicates r = 0.. for configurations, maxReplicates.. for the null group: no seed is used twice.
    std::set<std::uint64_t> baselineSeeds;
    for (const auto& run : result.runs) {
        if (run.label == "baseline" || run.label == "null") {
            QVERIFY(baselineSeeds.insert(run.seed).second);
        }
        if (run.label == "null") {
            QVERIFY(run.replicate >= options.maxReplicates);
        }
    }
    // Each point is decided from all its seeds, and says how many.
    for (const auto& point : result.points) {
        QCOMPARE(point.replicates, static_cast<std::int64_t>(seeds[point.label]));
        if (point.label != "baseline") {
            const auto verdict = metrics::applyFailureRule(qualities[point.label], qualities["baseline"], options.rule);
            QCOMPARE(point.verdict, metrics::verdictName(verdict.verdict));
        }
    }
    const nlohmann::json stored = nlohmann::json::parse(store::calibration(store, result.calibrationId)->info.configJson);
    QCOMPARE(stored.at("max_replicates").get<std::int64_t>(), std::int64_t(3));
    QCOMPARE(stored.at("stopping_rule").get<std::string>(), std::string(analysis::kCalibrationStoppingRule));

    // Interrupted in an added round's run, then in a screen, and resumed each time: the resume decides the same
    // rounds from the stored runs, keeps the screens made, and stores what the uninterrupted calibration did.
    QTemporaryDir otherWorkspace;
    const std::string other = otherWorkspace.path().toStdString();
    store::RunStore interrupted = store::RunStore::open(store::databasePath(other));
    options.workspaceDirectory = other;
    CancelAt inRound("noise 3 (seed 3): step 2/");
    QVERIFY_EXCEPTION_THROWN(analysis::runCalibration(interrupted, options, inRound.progress), CancelledError);
    const std::int64_t runId = interrupted.listRuns().at(0).id;
    CancelAt inScreens("screen of noise 3 (seed 2)");
    QVERIFY_EXCEPTION_THROWN(analysis::resumeCalibration(interrupted, runId, options, inScreens.progress, other), CancelledError);
    QVERIFY(nlohmann::json::parse(interrupted.run(runId)->configJson).at("screens").size() >= 1);
    Progress rest;
    const analysis::CalibrationResult resumed = analysis::resumeCalibration(interrupted, runId, options, rest, other);
    QCOMPARE(resumed.runs.size(), result.runs.size());
    QCOMPARE(resumed.points.size(), result.points.size());
    for (std::size_t i = 0; i < result.points.size(); ++i) {
        QCOMPARE(resumed.points[i].label, result.points[i].label);
        QCOMPARE(resumed.points[i].replicates, result.points[i].replicates);
        QCOMPARE(resumed.points[i].mismatch, result.points[i].mismatch);
        QCOMPARE(resumed.points[i].quality, result.points[i].quality);
        QCOMPARE(resumed.points[i].verdict, result.points[i].verdict);
    }
}

// Spec "Same statistic on both axes": the configuration that sets a step's threshold by passing, screened by
// `admit` at that step on its own checkpoints under the calibration's protocol, is admitted or borderline, never
// rejected (its point is the mean of exactly those measurements).
void TestTrainer::thresholdSetterIsNeverRejectedAtItsStep()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options = fourStepCalibration(ws, "threshold", {0.05, 0.1}, 2, 2);
    options.probeCount = 16;
    options.rule.relativeThreshold = 5.0; // a line no 4-step run reaches: every point passes, the largest sets it
    Progress progress;
    const analysis::CalibrationResult result = analysis::runCalibration(store, options, progress);
    QCOMPARE(result.brackets.size(), std::size_t(1));
    const store::CalibrationBracket& bracket = result.brackets[0];
    QVERIFY(bracket.threshold && bracket.largestPassing);
    const store::CalibrationPoint* setter = nullptr;
    for (const auto& point : result.points) {
        if (point.passed() && point.mismatch == *bracket.largestPassing) {
            setter = &point;
        }
    }
    QVERIFY(setter);
    QCOMPARE(setter->label, std::string("noise 0.1"));
    // The training-step mean the budget used before differs from the screen figure (fresh prompts and noise every
    // step against the step-4 checkpoint on the probe prompts).
    QVERIFY(setter->trainingMismatch && *setter->trainingMismatch != setter->mismatch);
    std::vector<analysis::AdmissionRow> screens;
    for (const auto& run : runsOf(result, setter->label)) {
        const train::RunConfig config = train::parseRunConfig(store.run(run.runId)->configJson, "stored", ws);
        analysis::Candidate candidate;
        candidate.name = setter->label;
        candidate.noise = config.rollout.noise.sigma;
        candidate.noiseSeed = config.rollout.noise.seed;
        analysis::AdmissionOptions admit;
        admit.checkpoints = {train::stepCheckpoint(store, ws, run.runId, 4)};
        admit.candidates = {candidate};
        admit.calibrationId = result.calibrationId;
        Progress screening;
        const analysis::AdmissionResult admitted = analysis::runAdmission(store, admit, screening);
        const analysis::AdmissionRow& row = admitted.rows.at(0);
        qDebug("seed %lld: %.6g [%.6g, %.6g] against the threshold %.6g: %s", static_cast<long long>(run.replicate),
            row.mismatch, row.interval.low, row.interval.high, row.threshold, analysis::toString(row.verdict).c_str());
        QCOMPARE(row.threshold, *bracket.threshold);
        screens.push_back(row);
    }
    // The point is the mean of these two screens, so the lower one is at or below the threshold it set: its interval
    // cannot lie above it. (The other seed's screen may, by the seed-to-seed spread of the mismatch: printed above.)
    QCOMPARE(screens.size(), std::size_t(2));
    QVERIFY(std::abs((screens[0].mismatch + screens[1].mismatch) / 2 - setter->mismatch) <= 1e-12 * setter->mismatch);
    const analysis::AdmissionRow& lower = screens[0].mismatch <= screens[1].mismatch ? screens[0] : screens[1];
    QVERIFY(lower.mismatch <= *bracket.threshold);
    QVERIFY(lower.verdict != analysis::AdmissionVerdict::Reject);
}

void TestTrainer::calibrationWhoseSeedsDisagreeIsFlagged()
{
    // Four steps of a random tiny student: two seeds of the same configuration end at different qualities. Against a
    // threshold of 0.1% any such disagreement is more than half of it, so the calibration must say it is
    // noise-dominated (the rule is applied as configured; nothing here is tuned to produce the flag).
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options;
    options.name = "disagreeing";
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(4))));
    options.noiseSigmas = {0.2};
    options.steps = {4};
    options.replicates = 2;
    options.rule.relativeThreshold = 0.001;
    options.rule.bootstrap.resamples = 1000;
    Progress progress;
    const analysis::CalibrationResult result = analysis::runCalibration(store, options, progress);
    QCOMPARE(result.nullComparisons.size(), std::size_t(1));
    const analysis::NullComparison& null = result.nullComparisons[0];
    QVERIFY2(null.noiseFloor > 0.0005, qPrintable(QString::number(null.noiseFloor))); // the seeds disagree
    bool noiseDominated = false;
    for (const auto& flag : result.flags) {
        noiseDominated = noiseDominated || (flag.kind == "noise-dominated" && flag.step == 4);
    }
    QVERIFY(noiseDominated);
    // The flags are stored with the calibration (what the GUI, the report and admission checks read).
    const auto stored = analysis::storedFlags(store::calibration(store, result.calibrationId)->info.configJson);
    QCOMPARE(stored.size(), result.flags.size());
    QCOMPARE(stored[0].kind, result.flags[0].kind);
    // An admission check against it says so with every decision: the baseline's final checkpoint (step 4).
    analysis::AdmissionOptions admit;
    admit.checkpoints = {(fs::path(train::checkpointDirectory(ws, result.runs[0].runId)) / "step-00000004").string()};
    admit.candidates = {analysis::Candidate {"bf16"}};
    admit.calibrationId = result.calibrationId;
    admit.measureUnit = false;
    Progress screening;
    const analysis::AdmissionResult admitted = analysis::runAdmission(store, admit, screening);
    QCOMPARE(admitted.calibrationFlags.size(), result.flags.size());
    QCOMPARE(admitted.rows.at(0).checkpointStep, std::int64_t(4));
    const nlohmann::json inputs
        = nlohmann::json::parse(store::admissionDecisions(store, admitted.runId).at(0).candidateJson);
    QCOMPARE(inputs.at("calibration_flags").size(), result.flags.size());
}

void TestTrainer::calibrationFlagsFollowTheirDefinitions()
{
    // Points at one step: baseline, a failure at 0.1 and a pass at 0.3 (non-monotone); a null comparison that fails
    // (its interval [22%, 28%] at or above the 20% line: null-failed); a noise floor of 12% (above half the line).
    const auto point = [](const char* label, double mismatch, const char* verdict) {
        store::CalibrationPoint p;
        p.label = label;
        p.step = 10;
        p.mismatch = mismatch;
        p.verdict = verdict;
        return p;
    };
    const auto flagsOf = [](const std::vector<store::CalibrationPoint>& points, const analysis::NullComparison& null,
                             double fraction) {
        return analysis::calibrationFlags(
            points, {null}, {store::bracketFromPoints(points, 10, 0.0)}, 0.2, fraction);
    };
    const auto kindsOf = [](const std::vector<analysis::CalibrationFlag>& flags) {
        std::set<std::string> kinds;
        for (const auto& flag : flags) {
            kinds.insert(flag.kind);
            if (flag.step != std::optional<std::int64_t>(10)) {
                kinds.insert("wrong step");
            }
        }
        return kinds;
    };
    analysis::NullComparison null;
    null.step = 10;
    null.relativeChange = 0.25;
    null.change = {0.25, 0.22, 0.28, 0.95, 1000};
    null.noiseFloor = 0.12;
    null.difference = {0.1, 0.05, 0.15, 0.95, 1000};
    null.verdict = metrics::Verdict::Fail;
    QCOMPARE(kindsOf(flagsOf({point("baseline", 1e-4, "pass"), point("noise 0.1", 0.1, "fail"),
                                 point("noise 0.2", 0.3, "pass")},
                 null, 0.5)),
        (std::set<std::string> {"non-monotone", "noise-dominated", "null-failed"}));
    // A monotone sweep with a quiet null comparison (floor 5% of a 20% line) is not flagged; neither is an
    // undecided point outside the bracket (above its smallest failure).
    null.relativeChange = -0.05;
    null.change = {-0.05, -0.10, 0.0, 0.95, 1000};
    null.noiseFloor = 0.05;
    null.verdict = metrics::Verdict::Pass;
    QVERIFY(flagsOf({point("baseline", 1e-4, "pass"), point("noise 0.1", 0.1, "pass"), point("noise 0.2", 0.3, "fail"),
                        point("noise 0.3", 0.5, "undecided")},
        null, 0.5)
                .empty());
    // An undecided point between the bracket's ends is flagged: the budget may lie on either side of it.
    QCOMPARE(kindsOf(flagsOf({point("baseline", 1e-4, "pass"), point("noise 0.1", 0.1, "pass"),
                                 point("noise 0.15", 0.2, "undecided"), point("noise 0.2", 0.3, "fail")},
                 null, 0.5)),
        (std::set<std::string> {"undecided"}));
    // An undecided null comparison is not a failure.
    null.verdict = metrics::Verdict::Undecided;
    QVERIFY(flagsOf({point("baseline", 1e-4, "pass")}, null, 0.5).empty());
    // The noise-floor flag follows its setting: a 5% floor is more than a fifth of the 20% line, and exactly half
    // the line is not "more than half".
    QCOMPARE(kindsOf(flagsOf({point("baseline", 1e-4, "pass")}, null, 0.2)), (std::set<std::string> {"noise-dominated"}));
    null.noiseFloor = 0.1;
    QVERIFY(flagsOf({point("baseline", 1e-4, "pass")}, null, 0.5).empty());
}

void TestTrainer::calibrationOptionErrors()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(2))));
    options.steps = {3};
    options.noiseSigmas = {0.1};
    Progress progress;
    const auto expectError = [&](const analysis::CalibrationOptions& o, const char* part) {
        try {
            analysis::runCalibration(store, o, progress);
            QFAIL("accepted a bad calibration");
        } catch (const InputError& error) {
            QVERIFY2(std::string(error.what()).find(part) != std::string::npos, error.what());
        }
    };
    expectError(options, "step 3 is not evaluated");
    options.steps = {2};
    options.noiseSigmas = {-1.0};
    expectError(options, "noise: sigmas must be finite");
    options.noiseSigmas = {};
    expectError(options, "at least one noise sigma");
    options.noiseSigmas = {0.1};
    options.staleness = {0};
    expectError(options, "staleness: values must be >= 1");
    QCOMPARE(store.listRuns().size(), std::size_t(0)); // nothing stored for a refused calibration
}

void TestTrainer::cancelledCalibrationStoresNoCalibration()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CalibrationOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(2))));
    options.noiseSigmas = {0.2, 0.4};
    options.steps = {4};
    // Cancelled from the progress listener once the second sweep run has stored its second step.
    CancelAt cancel("noise 0.2 (seed 1): step 2/");
    QVERIFY_EXCEPTION_THROWN(analysis::runCalibration(store, options, cancel.progress), CancelledError);
    QCOMPARE(store::calibrations(store).size(), std::size_t(0)); // no calibration from a partial sweep
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(3)); // the calibration, the baseline, the cancelled sweep run
    QVERIFY(runs[0].kind == "calibrate" && runs[0].status == store::RunStatus::Cancelled);
    QVERIFY(runs[1].status == store::RunStatus::Finished && runs[1].stepCount == 4);
    QVERIFY(runs[2].status == store::RunStatus::Cancelled);
    QVERIFY(runs[2].stepCount >= 2 && runs[2].stepCount < 4); // whole steps only, numbered from 1
    verifyWholeSteps(store, runs[2].id);
}

void TestTrainer::timeToQualityJobTrainsBothRuns()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::TimeToQualityOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "ttq", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(2))));
    options.recipe = std::string(kResources) + "/recipes/fp8-kv.yaml";
    options.staleness = 1;
    Progress progress;
    const analysis::TimeToQualityResult result = analysis::runTimeToQuality(store, options, progress);
    QCOMPARE(result.targetStep, std::int64_t(4));
    QCOMPARE(result.targetQuality, store::evaluationAt(store, result.baseline.runId, 4)->summary.quality);
    // The baseline reaches its own quality at step 4 at the latest.
    QVERIFY(result.baseline.reached.reached);
    QVERIFY(result.baseline.reached.step <= 4);
    const auto candidate = store.stepsAfter(result.candidate.runId, 0);
    QCOMPARE(candidate.size(), std::size_t(4));
    QCOMPARE(*candidate.back().staleness, std::int64_t(1));
    // A speedup needs both runs to reach the target after some training (a run already there at step 0 has none).
    QCOMPARE(result.speedup.has_value(),
        result.candidate.reached.reached && result.candidate.reached.step > 0 && result.baseline.reached.reached);
    if (result.speedup) {
        QVERIFY(std::abs(*result.speedup - result.baseline.reached.wallSeconds / result.candidate.reached.wallSeconds) < 1e-12);
    }
}

void TestTrainer::compareObjectivesAppliesEachRule()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CompareObjectivesOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(4))));
    options.noiseSigmas = {0.5};
    options.samplesPerPrompt = 2;
    options.rule.bootstrap.resamples = 2000;
    Progress progress;
    const analysis::CompareObjectivesResult result = analysis::runCompareObjectives(store, options, progress);
    QCOMPARE(result.rows.size(), std::size_t(6)); // 3 objectives x (bf16, noise 0.5)
    QCOMPARE(result.breaks.size(), std::size_t(3));
    for (std::size_t i = 0; i < result.rows.size(); i += 2) {
        const auto& bf16 = result.rows[i];
        const auto& noisy = result.rows[i + 1];
        QCOMPARE(QString::fromStdString(bf16.configuration), QString("bf16"));
        QCOMPARE(bf16.bf16Multiple, 1.0);
        QVERIFY(noisy.mismatch > bf16.mismatch);
        QVERIFY(std::abs(noisy.bf16Multiple - noisy.mismatch / bf16.mismatch) < 1e-12 * noisy.bf16Multiple);
        if (train::usesTeacher(bf16.objective)) {
            QVERIFY(noisy.quality && noisy.relativeChange);
            QVERIFY(std::abs(*noisy.relativeChange - (*noisy.quality - *bf16.quality) / *bf16.quality) < 1e-9);
        } else {
            // The tiny random student never answers correctly: its BF16 reward is 0, so the rule cannot decide.
            QCOMPARE(*bf16.reward, 0.0);
            QVERIFY(noisy.verdict == analysis::ObjectiveVerdict::Undecided);
        }
    }
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
    const auto stored = nlohmann::json::parse(store.run(result.runId)->configJson);
    QCOMPARE(stored.at("rows").size(), std::size_t(6));
}

void TestTrainer::cancelledTimeToQualityKeepsWholeRuns()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::TimeToQualityOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "ttq", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(2))));
    options.staleness = 1;
    CancelAt cancel("candidate: step 2/");
    QVERIFY_EXCEPTION_THROWN(analysis::runTimeToQuality(store, options, cancel.progress), CancelledError);
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(3)); // the analysis, the BF16 run, the candidate
    QCOMPARE(QString::fromStdString(runs[0].kind), QString("time_to_quality"));
    QVERIFY(runs[0].status == store::RunStatus::Cancelled);
    QVERIFY(!nlohmann::json::parse(runs[0].configJson).contains("result")); // no speedup from half a comparison
    QVERIFY(runs[1].status == store::RunStatus::Finished && runs[1].stepCount == 4);
    QVERIFY(runs[2].status == store::RunStatus::Cancelled);
    QVERIFY(runs[2].stepCount >= 2 && runs[2].stepCount < 4);
    verifyWholeSteps(store, runs[2].id);

    // Uncancelled, the analysis run holds the result the function returns.
    Progress progress;
    const analysis::TimeToQualityResult result = analysis::runTimeToQuality(store, options, progress);
    const auto stored = nlohmann::json::parse(store.run(result.runId)->configJson);
    QVERIFY(store.run(result.runId)->status == store::RunStatus::Finished);
    QCOMPARE(stored.at("result"), analysis::timeToQualityJson(result));
    QCOMPARE(stored.at("result").at("baseline").at("run_id").get<std::int64_t>(), result.baseline.runId);
}

void TestTrainer::cancelledCompareObjectivesStoresNoVerdicts()
{
    QTemporaryDir workspace;
    const std::string ws = workspace.path().toStdString();
    store::RunStore store = store::RunStore::open(store::databasePath(ws));
    analysis::CompareObjectivesOptions options;
    options.base = train::loadRunConfig(writeRunFile(ws, "base", runBody(pair_, "steps: 4\n" + baseRollout() + evaluation(4))));
    options.noiseSigmas = {0.5};
    options.rule.bootstrap.resamples = 2000;
    // OPD's two runs finish; REINFORCE's BF16 run is cancelled after its second step.
    CancelAt cancel("reinforce, bf16: step 2/");
    QVERIFY_EXCEPTION_THROWN(analysis::runCompareObjectives(store, options, cancel.progress), CancelledError);
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(4));
    QCOMPARE(QString::fromStdString(runs[0].kind), QString("compare_objectives"));
    QVERIFY(runs[0].status == store::RunStatus::Cancelled);
    QVERIFY(!nlohmann::json::parse(runs[0].configJson).contains("rows"));
    for (int i : {1, 2}) {
        QVERIFY(runs[i].status == store::RunStatus::Finished && runs[i].stepCount == 4);
    }
    QVERIFY(runs[3].status == store::RunStatus::Cancelled);
    QVERIFY(runs[3].stepCount >= 2 && runs[3].stepCount < 4);
    verifyWholeSteps(store, runs[3].id);
}

MISMATCH_TEST_GUILESS_MAIN(TestTrainer)
#include "test_trainer.moc"

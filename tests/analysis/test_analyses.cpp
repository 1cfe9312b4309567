// The engine-only analyses on a tiny random model: admission decisions with known answers, a constructed
// borderline case, seeded bootstrap, sensitivity of a BF16 "format" (adds nothing) and of a real format against a
// hand-written recipe, the recipe builder, the prefix-shift split against a float64 reference, cancellation
// leaving the store consistent, and located errors for bad candidates files.
#include "analysis_fixture.h"
#include "core/analysis/admission.h"
#include "core/analysis/generate.h"
#include "core/analysis/prefix_shift.h"
#include "core/analysis/recipe_builder.h"
#include "core/analysis/rollout_measure.h"
#include "core/analysis/sensitivity.h"
#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/engine/engine_model.h"
#include "core/engine/mismatch_sources.h"
#include "core/metrics/bootstrap.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/transformer.h"
#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"
#include "core/store/store_merge.h"
#include "core/train/zoo.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace mismatch;

namespace {

// Absolute tolerance for KL values recomputed independently in float64 from float32 forwards (nats per token):
// the engine scores batches of left-padded sequences, the reference one unpadded sequence at a time.
constexpr double kKlTolerance = 2e-4;
// Thresholds for the known-answer decisions (nats per token), fixed by hand: the BF16 engine's mismatch on this
// model is far below the first, sigma = 1 noise far above the second (both asserted as preconditions).
constexpr double kGenerousThreshold = 0.05;
constexpr double kStrictThreshold = 0.05;

using test::probePath;
using test::smallSettings;
using test::writeText;

// The independent reference of stored generations: `response` after `prompt` teacher-forced through the trainer
// and the engine model in one unbatched forward each; float64 log-probability rows [response length, vocab], row t
// the distribution of response token t.
struct ForcedRows {
    at::Tensor logMu;
    at::Tensor logPi;
};
ForcedRows forcedRows(const model::Transformer& trainer, engine::EngineModel& engineModel,
    const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& response)
{
    std::vector<std::int64_t> sequence = prompt;
    sequence.insert(sequence.end(), response.begin(), response.end());
    const at::Tensor ids = at::tensor(sequence, at::kLong).unsqueeze(0);
    const at::Tensor mask = at::ones_like(ids, ids.options().dtype(at::kBool));
    const auto first = static_cast<std::int64_t>(prompt.size()) - 1;
    const auto rows = static_cast<std::int64_t>(response.size());
    return {at::log_softmax(engineModel.forwardQuantized(ids, mask).to(at::kDouble), -1)[0].slice(0, first, first + rows),
        at::log_softmax(trainer.forward(ids, mask).to(at::kDouble), -1)[0].slice(0, first, first + rows)};
}

// KL(mu || pi) of one row pair in a float64 loop over the vocabulary.
double klLoop(const ForcedRows& rows, std::int64_t row)
{
    double kl = 0.0;
    for (std::int64_t v = 0; v < rows.logMu.size(1); ++v) {
        const double lm = rows.logMu[row][v].item<double>();
        const double lp = rows.logPi[row][v].item<double>();
        kl += std::exp(lm) * (lm - lp);
    }
    return kl;
}

// A stored number as its bits and its value, "none" when absent (QString: a failed QCOMPARE prints it): QCOMPARE on
// doubles is fuzzy, and a scan assembled from units must be the single-process scan bit for bit.
QString exact(const std::optional<double>& value)
{
    if (!value) {
        return QStringLiteral("none");
    }
    std::uint64_t bits = 0;
    std::memcpy(&bits, &*value, sizeof bits);
    char text[64];
    std::snprintf(text, sizeof text, "%016llx (%.17g)", static_cast<unsigned long long>(bits), *value);
    return QString::fromLatin1(text);
}

// Every number a cell stores but `seconds` (wall-clock), exactly.
QString exactCell(const store::SensitivityCell& cell)
{
    return QString::number(cell.layer) + " " + QString::fromStdString(cell.moduleGroup) + ": mismatch "
        + exact(cell.mismatch) + ", added " + exact(cell.addedMismatch) + " [" + exact(cell.ciLow) + ", "
        + exact(cell.ciHigh) + "], own [" + exact(cell.mismatchCiLow) + ", " + exact(cell.mismatchCiHigh) + "], tokens "
        + (cell.tokens ? QString::number(*cell.tokens) : QStringLiteral("none"));
}

} // namespace

namespace {

// A progress that cancels its job as soon as a stage beginning with `prefix` starts (a kill at a known point).
class CancelAtStage {
public:
    explicit CancelAtStage(std::string prefix)
        : prefix_(std::move(prefix))
        , progress([this](double, const std::string& stage) {
            if (stage.rfind(prefix_, 0) == 0) {
                progress.cancel();
            }
        })
    {
    }

private:
    std::string prefix_;

public:
    Progress progress;
};

} // namespace

class TestAnalyses : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void pairedBootstrapIsSeededAndMatchesBootstrapRatio();
    void decisionRule();
    void zeroNoiseIsAdmittedHugeNoiseRejected();
    void constructedBorderlineIsDetected();
    void admissionStoresGenerationsForTheDrillDown();
    void stalenessIsCountedInOptimizerSteps();
    void engineWeightsComeFromTheScreenedRun();
    void admissionMeasuresUnderTheCalibrationsProtocol();
    void admissionRefusesAnotherProtocolUnlessAllowed();
    void admissionScreensAgainstTheBracketOfTheCheckpointsStep();
    void recipeBudgetIsTheBracketOfTheModelsStep();
    void bf16SensitivityAddsNothing();
    void sensitivityCellMatchesHandWrittenRecipe();
    void recipeBuilderReachesTheTargetAndWritesACheckedRecipe();
    void recipeBuilderRefusesAnImpossibleTarget();
    void prefixShiftPartsAgainstFloat64Reference();
    void prefixShiftOfTheBf16EngineIsZero();
    void sensitivityUnitsMergeToTheSingleProcessScan();
    void cancelledScanLeavesWholeCellsAndAMarkedRun();
    void cancelledAdmissionLeavesWholeDecisions();
    void cancelledPrefixShiftStoresNothing();
    void badCandidatesFiles_data();
    void badCandidatesFiles();
    void generateUsesTheAnalysesRequests();
    void noisyConfigurationIsMeasuredInPlaceAsWithACopy();

private:
    // An admission check of one candidate, the BF16 engine with weight noise `noise` (seed `seed`), on the first
    // `count` probe prompts of the test model, without the BF16 unit; the threshold is the caller's.
    analysis::AdmissionOptions noisyCandidate(std::int64_t count, double noise, std::uint64_t seed) const
    {
        analysis::AdmissionOptions options;
        options.checkpoints = {model_};
        options.probePath = probePath();
        options.count = count;
        options.settings = smallSettings();
        options.measureUnit = false;
        analysis::Candidate noisy;
        noisy.name = "noisy";
        noisy.noise = noise;
        noisy.noiseSeed = seed;
        options.candidates = {noisy};
        return options;
    }

    store::RunStore openStore(const QString& name)
    {
        return store::RunStore::open((dir_.path() + "/" + name + ".db").toStdString());
    }
    QTemporaryDir dir_;
    std::string model_;
    std::string olderModel_;
    model::ModelConfig config_;
};

void TestAnalyses::initTestCase()
{
    QVERIFY(dir_.isValid());
    config_ = train::demoModelConfig(64, 2, 4, 2, 128);
    // Larger than the default init so that the next-token distributions are peaked, as in a trained model.
    model_ = (dir_.path() + "/student").toStdString();
    train::writeDemoModelDirectory(model_, config_, model::randomWeights(config_, 7, 0.3));
    olderModel_ = (dir_.path() + "/student-older").toStdString();
    train::writeDemoModelDirectory(olderModel_, config_, model::randomWeights(config_, 8, 0.3));
}

void TestAnalyses::pairedBootstrapIsSeededAndMatchesBootstrapRatio()
{
    const std::vector<double> sums = {0.5, 1.25, 0.1, 2.0, 0.7, 0.05, 1.1};
    const std::vector<std::int64_t> tokens = {5, 9, 3, 12, 6, 2, 8};
    const std::vector<double> zeros(sums.size(), 0.0);
    metrics::BootstrapOptions options;
    options.resamples = 3000;
    options.seed = 99;
    // Against a zero sample with the same tokens the paired difference is the ratio itself, drawn with the same
    // prompt indices as metrics::bootstrapRatio: the intervals agree exactly.
    const metrics::Interval paired = analysis::pairedRatioDifference(sums, tokens, zeros, tokens, options);
    const metrics::Interval ratio
        = metrics::bootstrapRatio(sums, std::vector<double>(tokens.begin(), tokens.end()), options);
    QCOMPARE(paired.low, ratio.low);
    QCOMPARE(paired.high, ratio.high);
    double total = 0.0, count = 0.0;
    for (std::size_t i = 0; i < sums.size(); ++i) {
        total += sums[i];
        count += static_cast<double>(tokens[i]);
    }
    QCOMPARE(paired.estimate, total / count);
    // Same seed, same interval; another seed, another interval; a sample against itself is exactly zero.
    const metrics::Interval again = analysis::pairedRatioDifference(sums, tokens, zeros, tokens, options);
    QCOMPARE(again.low, paired.low);
    QCOMPARE(again.high, paired.high);
    options.seed = 100;
    const metrics::Interval other = analysis::pairedRatioDifference(sums, tokens, zeros, tokens, options);
    QVERIFY(other.low != paired.low || other.high != paired.high);
    const metrics::Interval self = analysis::pairedRatioDifference(sums, tokens, sums, tokens, options);
    QCOMPARE(self.low, 0.0);
    QCOMPARE(self.high, 0.0);
}

void TestAnalyses::decisionRule()
{
    metrics::Interval interval;
    interval.low = 0.1;
    interval.high = 0.2;
    QCOMPARE(analysis::toString(analysis::decide(interval, 0.25)), std::string("admit"));
    QCOMPARE(analysis::toString(analysis::decide(interval, 0.05)), std::string("reject"));
    QCOMPARE(analysis::toString(analysis::decide(interval, 0.15)), std::string("borderline"));
    QCOMPARE(analysis::toString(analysis::decide(interval, 0.2)), std::string("borderline")); // touching is not below
}

void TestAnalyses::zeroNoiseIsAdmittedHugeNoiseRejected()
{
    store::RunStore store = openStore("admit-known");
    analysis::AdmissionOptions options;
    options.checkpoints = {model_};
    options.probePath = probePath();
    options.count = 16;
    options.settings = smallSettings();
    analysis::Candidate clean;
    clean.name = "bf16-no-noise";
    analysis::Candidate huge;
    huge.name = "huge-noise";
    huge.noise = 1.0;
    huge.noiseSeed = 3;
    options.candidates = {clean, huge};
    options.threshold = kGenerousThreshold;
    Progress progress;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    QCOMPARE(result.rows.size(), std::size_t(2));
    // Preconditions of the known answers: the engines sit far on either side of the fixed threshold.
    QVERIFY2(
        result.rows[0].interval.high < kGenerousThreshold / 10, std::to_string(result.rows[0].interval.high).c_str());
    QVERIFY2(result.rows[1].interval.low > kStrictThreshold * 2, std::to_string(result.rows[1].interval.low).c_str());
    QCOMPARE(analysis::toString(result.rows[0].verdict), std::string("admit"));
    QCOMPARE(analysis::toString(result.rows[1].verdict), std::string("reject"));
    // The noiseless BF16 engine is the BF16 unit itself (same engine, prompts and seeds).
    QCOMPARE(result.rows[0].mismatch, *result.rows[0].bf16Unit);
    const auto stored = store::admissionDecisions(store, result.runId);
    QCOMPARE(stored.size(), std::size_t(2));
    QCOMPARE(stored[0].decision, std::string("admit"));
    QCOMPARE(stored[1].decision, std::string("reject"));
    QCOMPARE(stored[1].ciLow, result.rows[1].interval.low);
    QVERIFY(stored[1].seconds > 0.0);
    QVERIFY(stored[1].candidateJson.find("\"noise\":1.0") != std::string::npos);
    QCOMPARE(store::toString(store.run(result.runId)->status), std::string("finished"));
}

void TestAnalyses::constructedBorderlineIsDetected()
{
    store::RunStore store = openStore("admit-borderline");
    analysis::AdmissionOptions options = noisyCandidate(16, 0.1, 11);
    options.threshold = 1e3; // first pass: only to measure the interval
    Progress first;
    const analysis::AdmissionResult measured = analysis::runAdmission(store, options, first);
    const metrics::Interval interval = measured.rows[0].interval;
    QVERIFY(interval.low < interval.high);
    // A threshold inside the interval: the same seeded measurement must now straddle it.
    options.threshold = 0.5 * (interval.low + interval.high);
    Progress second;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, second);
    QCOMPARE(result.rows[0].interval.low, interval.low);
    QCOMPARE(result.rows[0].interval.high, interval.high);
    QCOMPARE(analysis::toString(result.rows[0].verdict), std::string("borderline"));
    // Thresholds just outside the interval flip it to admit / reject.
    options.threshold = interval.high * 1.0001;
    Progress third;
    QCOMPARE(analysis::toString(analysis::runAdmission(store, options, third).rows[0].verdict), std::string("admit"));
    options.threshold = interval.low * 0.9999;
    Progress fourth;
    QCOMPARE(analysis::toString(analysis::runAdmission(store, options, fourth).rows[0].verdict), std::string("reject"));
}

// The first --store-generations prompts of a candidate are stored token by token with its decision, and what is
// stored is checked against an independent float64 reference: the trainer and the noisy engine model (the same
// noise) teacher-forced on the stored response in one unbatched forward each, KL(mu || pi) per position in a float64
// loop over the vocabulary, mu(y), pi(y), both entropies and the top-5 of each. With every prompt stored, the
// stored per-token KLs average to the decision's mismatch.
void TestAnalyses::admissionStoresGenerationsForTheDrillDown()
{
    store::RunStore store = openStore("admit-generations");
    analysis::AdmissionOptions options = noisyCandidate(6, 0.05, 2);
    options.threshold = kGenerousThreshold;
    options.storedGenerations = 3;
    Progress progress;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    const auto generations = store::admissionGenerations(store, result.rows[0].decisionId);
    QCOMPARE(generations.size(), std::size_t(3));

    const analysis::ModelDirectory model = analysis::loadModelDirectory(model_);
    const model::Transformer trainer(model.config, model.weights);
    engine::EngineModel engineModel(model.config, engine::addWeightNoise(model.weights, 0.05, 2), std::nullopt, {});
    const analysis::PromptRequests requests = analysis::promptRequests(probePath(), *model.tokenizer, 6);
    for (std::size_t g = 0; g < generations.size(); ++g) {
        const store::StoredGeneration& stored = generations[g];
        QCOMPARE(stored.index, static_cast<std::int64_t>(g));
        QCOMPARE(stored.promptId, requests.ids[g]);
        QCOMPARE(stored.promptTokens, requests.requests[g].prompt);
        QVERIFY(!stored.tokens.empty());
        QCOMPARE(stored.kl.size(), stored.tokens.size());
        QCOMPARE(stored.details.size(), stored.tokens.size());
        const ForcedRows rows = forcedRows(trainer, engineModel, stored.promptTokens, stored.tokens);
        const at::Tensor& logMu = rows.logMu;
        const at::Tensor& logPi = rows.logPi;
        for (std::size_t t = 0; t < stored.tokens.size(); ++t) {
            const auto row = static_cast<std::int64_t>(t);
            const double kl = klLoop(rows, row);
            double entropyMu = 0.0;
            double entropyPi = 0.0;
            std::vector<std::pair<double, std::int64_t>> muRanked;
            for (std::int64_t v = 0; v < model.config.vocabSize; ++v) {
                const double lm = logMu[row][v].item<double>();
                const double lp = logPi[row][v].item<double>();
                entropyMu -= std::exp(lm) * lm;
                entropyPi -= std::exp(lp) * lp;
                muRanked.emplace_back(lm, v);
            }
            std::sort(muRanked.rbegin(), muRanked.rend());
            const store::TokenDetail& d = stored.details[t];
            const std::string where = stored.promptId + " t " + std::to_string(t);
            QVERIFY2(std::abs(kl - stored.kl[t]) < kKlTolerance, (where + ": KL " + std::to_string(kl)).c_str());
            const std::int64_t y = stored.tokens[t];
            // Log-probabilities and entropies of one float32 forward against the batched one: the KL's tolerance.
            QVERIFY2(std::abs(logMu[row][y].item<double>() - d.logMu) < kKlTolerance, where.c_str());
            QVERIFY2(std::abs(logPi[row][y].item<double>() - d.logPi) < kKlTolerance, where.c_str());
            QVERIFY2(std::abs(entropyMu - d.entropyMu) < kKlTolerance, where.c_str());
            QVERIFY2(std::abs(entropyPi - d.entropyPi) < kKlTolerance, where.c_str());
            QCOMPARE(d.topMu.size(), std::size_t(5));
            QCOMPARE(d.topPi.size(), std::size_t(5));
            // The most likely token agrees unless the first two are closer than the tolerance.
            if (muRanked[0].first - muRanked[1].first > kKlTolerance) {
                QCOMPARE(d.topMu[0].first, muRanked[0].second);
            }
            QVERIFY2(std::abs(d.topMu[0].second - std::exp(muRanked[0].first)) < kKlTolerance, where.c_str());
        }
    }

    // Every prompt stored: the per-token KLs average to the decision's mismatch (the same values, summed in
    // another order).
    options.storedGenerations = 6;
    Progress again;
    const analysis::AdmissionResult all = analysis::runAdmission(store, options, again);
    double sum = 0.0;
    std::size_t tokens = 0;
    for (const store::StoredGeneration& g : store::admissionGenerations(store, all.rows[0].decisionId)) {
        for (const double value : g.kl) {
            sum += value;
            ++tokens;
        }
    }
    QVERIFY(tokens > 0);
    QVERIFY2(std::abs(sum / static_cast<double>(tokens) - all.rows[0].mismatch) < 1e-12 * all.rows[0].mismatch + 1e-15,
        (std::to_string(sum / static_cast<double>(tokens)) + " vs " + std::to_string(all.rows[0].mismatch)).c_str());
    // 0 stores none.
    options.storedGenerations = 0;
    Progress none;
    QVERIFY(store::admissionGenerations(store, analysis::runAdmission(store, options, none).rows[0].decisionId).empty());
}

using test::checkpointAt;

void TestAnalyses::stalenessIsCountedInOptimizerSteps()
{
    store::RunStore store = openStore("admit-stale");
    // The timeline: the older model as the checkpoint of step 10, the screened one at step 12.
    const std::string older = checkpointAt(dir_, olderModel_, "ckpt-10", 10);
    const std::string screened = checkpointAt(dir_, model_, "ckpt-12", 12);
    analysis::AdmissionOptions options;
    options.checkpoints = {screened};
    options.history = {older};
    options.probePath = probePath();
    options.count = 8;
    options.settings = smallSettings();
    options.measureUnit = false;
    analysis::Candidate fresh;
    fresh.name = "fresh";
    analysis::Candidate stale;
    stale.name = "stale";
    stale.staleness = 2; // two optimizer steps: the checkpoint of step 10, one place earlier on the timeline
    options.candidates = {fresh, stale};
    options.threshold = 0.05;
    Progress progress;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    QCOMPARE(result.rows[1].engineWeights, older);
    QCOMPARE(result.rows[1].engineStep, std::int64_t(10));
    QCOMPARE(result.rows[1].checkpointStep, std::int64_t(12));
    // Another model's weights as the engine: far more mismatch than the fresh BF16 engine.
    QVERIFY(result.rows[1].mismatch > 10.0 * result.rows[0].mismatch);
    // k = 1 means step 11, which no checkpoint holds (one place earlier is step 10, not one step): refused before
    // anything runs, naming the candidate and every checkpoint with its step; so is k = 3 (step 9).
    const auto before = store.listRuns().size();
    for (const std::int64_t k : {1, 3}) {
        options.candidates[1].staleness = k;
        Progress again;
        try {
            analysis::runAdmission(store, options, again);
            QFAIL("expected an InputError");
        } catch (const InputError& error) {
            const std::string message = error.what();
            QVERIFY2(message.find("'stale'") != std::string::npos, error.what());
            QVERIFY2(message.find("step " + std::to_string(12 - k)) != std::string::npos, error.what());
            QVERIFY2(message.find(older + " (step 10)") != std::string::npos, error.what());
            QVERIFY2(message.find(screened + " (step 12)") != std::string::npos, error.what());
        }
    }
    QCOMPARE(store.listRuns().size(), before);
    // The engine's weights are found by step in the screened checkpoint's own run, so the order the checkpoints
    // are given in does not matter: older (step 10) screened with k = 2 needs step 8, which nothing holds.
    options.candidates[1].staleness = 2;
    options.history = {screened};
    options.checkpoints = {older};
    Progress third;
    try {
        analysis::runAdmission(store, options, third);
        QFAIL("expected an InputError");
    } catch (const InputError& error) {
        QVERIFY2(std::string(error.what()).find("optimizer step 8") != std::string::npos, error.what());
    }
    options.candidates = {fresh};
    options.history = {};
    options.checkpoints = {screened, older};
    Progress fourth;
    const analysis::AdmissionResult unordered = analysis::runAdmission(store, options, fourth);
    QCOMPARE(unordered.rows.size(), std::size_t(2));
    QCOMPARE(unordered.rows[1].checkpointStep, std::int64_t(10));
}

namespace {

// A copy of `model` as checkpoint step-%08d of training run `runId` in `runDirectory` (state.json as training
// writes it: run id, optimizer steps and, when given, the versions of its history.safetensors).
std::string runCheckpoint(const std::string& runDirectory, const std::string& model, std::int64_t runId, int step,
    const std::vector<std::int64_t>& historyVersions = {})
{
    char name[32];
    std::snprintf(name, sizeof name, "step-%08d", step);
    const std::string target = runDirectory + "/" + name;
    std::filesystem::create_directories(target);
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
        std::filesystem::copy_file(model + "/" + file, target + "/" + file, std::filesystem::copy_options::overwrite_existing);
    }
    test::writeText(target + "/state.json",
        nlohmann::json({{"run_id", runId}, {"step", step}, {"optimizer_steps", step}, {"history_versions", historyVersions}})
            .dump());
    return target;
}

} // namespace

// Spec "Staleness": the engine's weights for staleness k come from the screened checkpoint's own run, never from
// another run's checkpoint of the same step, and k = 0 is the screened checkpoint itself. Two runs' checkpoints of
// one step screened together used to share the first one's weights (its engine at 448x its own unit).
void TestAnalyses::engineWeightsComeFromTheScreenedRun()
{
    store::RunStore store = openStore("admit-two-runs");
    const std::string runA = dir_.path().toStdString() + "/two-runs/checkpoints/run-3";
    const std::string runB = dir_.path().toStdString() + "/two-runs/checkpoints/run-4";
    // Run A: olderModel_ at step 10, model_ at step 12; run B the other way round.
    const std::string a10 = runCheckpoint(runA, olderModel_, 3, 10);
    const std::string a12 = runCheckpoint(runA, model_, 3, 12);
    const std::string b10 = runCheckpoint(runB, model_, 4, 10);
    const std::string b12 = runCheckpoint(runB, olderModel_, 4, 12);
    analysis::AdmissionOptions options;
    options.checkpoints = {a12, b12};
    options.probePath = probePath();
    options.count = 8;
    options.settings = smallSettings();
    analysis::Candidate fresh;
    fresh.name = "fresh";
    analysis::Candidate stale;
    stale.name = "stale";
    stale.staleness = 2;
    options.candidates = {fresh, stale};
    options.threshold = 0.05;
    Progress progress;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    QCOMPARE(result.rows.size(), std::size_t(4));
    // k = 0: each checkpoint's own weights, so the plain BF16 engine measures exactly its checkpoint's unit.
    QCOMPARE(result.rows[0].engineWeights, a12);
    QCOMPARE(result.rows[2].engineWeights, b12);
    for (const std::size_t i : {std::size_t(0), std::size_t(2)}) {
        QVERIFY(result.rows[i].bf16Unit);
        QCOMPARE(result.rows[i].mismatch, *result.rows[i].bf16Unit);
    }
    // k = 2: step 10 of the same run, found in the run's directory (no --history given).
    QCOMPARE(result.rows[1].engineWeights, a10);
    QCOMPARE(result.rows[3].engineWeights, b10);
    QCOMPARE(result.rows[3].engineStep, std::int64_t(10));
    QVERIFY(result.rows[3].mismatch > 10.0 * result.rows[2].mismatch);

    // Another run's checkpoint of the wanted step is not used: B's step 12 with only A's step 10 beside it (B's
    // own step 10 gone) is refused, naming the other run's checkpoint as not used.
    std::filesystem::remove_all(b10);
    options.checkpoints = {b12};
    options.history = {a10};
    Progress refused;
    try {
        analysis::runAdmission(store, options, refused);
        QFAIL("expected an InputError");
    } catch (const InputError& error) {
        const std::string message = error.what();
        QVERIFY2(message.find("another run's: " + a10) != std::string::npos, error.what());
        QVERIFY2(message.find("optimizer step 10 of the same training run") != std::string::npos, error.what());
    }

    // A run with staleness keeps the weights its stale rollouts used in each checkpoint's history.safetensors: B's
    // step 12 holding model_'s weights as version 10 gives the same measurement as B's step-10 checkpoint did.
    const model::TransformerWeights older = model::loadWeights(model_, config_, model::LoadPrecision::Stored);
    std::vector<std::pair<std::string, at::Tensor>> history;
    for (const auto& [name, tensor] : older.named()) {
        history.emplace_back("v10/" + name, tensor);
    }
    model::writeSafetensors(b12 + "/history.safetensors", history);
    runCheckpoint(runB, olderModel_, 4, 12, {10, 11});
    options.history = {};
    Progress fromHistory;
    const analysis::AdmissionResult stored = analysis::runAdmission(store, options, fromHistory);
    QCOMPARE(stored.rows[1].engineWeights, b12 + "/history.safetensors (step 10)");
    QCOMPARE(stored.rows[1].engineStep, std::int64_t(10));
    QCOMPARE(stored.rows[1].mismatch, result.rows[3].mismatch);
}

namespace {

// A calibration with brackets at `steps` (threshold 0.05 each) and `protocol` stored with it.
std::int64_t storeCalibration(store::RunStore& store, const std::vector<std::int64_t>& steps,
    const std::optional<analysis::MeasurementProtocol>& protocol, const std::string& flags = "[]")
{
    store::CalibrationInfo info;
    info.name = "fixture";
    info.student = "student";
    nlohmann::json config = {{"flags", nlohmann::json::parse(flags)}};
    if (protocol) {
        config["protocol"] = analysis::protocolToJson(*protocol);
    }
    info.configJson = config.dump();
    std::vector<store::CalibrationBracket> brackets;
    for (const std::int64_t step : steps) {
        brackets.push_back({step, 0.05, 0.5, 0.05});
    }
    return store::addCalibration(store, info, {}, brackets);
}

analysis::MeasurementProtocol fixtureProtocol()
{
    analysis::MeasurementProtocol protocol;
    protocol.prompts = probePath();
    protocol.count = 6;
    protocol.maxTokens = 7;
    protocol.temperature = 0.9;
    protocol.seed = 17;
    protocol.kvScales = analysis::KvScalePolicy::FrozenFirstBatch;
    protocol.kvFirstBatch = 4;
    return protocol;
}

} // namespace

void TestAnalyses::admissionMeasuresUnderTheCalibrationsProtocol()
{
    store::RunStore store = openStore("admit-protocol");
    const analysis::MeasurementProtocol protocol = fixtureProtocol();
    analysis::AdmissionOptions options;
    options.checkpoints = {model_};
    options.candidates = {analysis::Candidate {"bf16"}};
    options.calibrationId = storeCalibration(store, {0}, protocol,
        R"([{"kind": "noise-dominated", "step": 0, "reason": "fixture"}])");
    options.settings = smallSettings(); // its sampling settings are replaced by the protocol's
    Progress progress;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    QVERIFY(result.protocol == protocol);
    QVERIFY(result.protocolDifferences.empty());
    QCOMPARE(result.calibrationFlags.size(), std::size_t(1));
    QCOMPARE(result.rows.size(), std::size_t(1));
    // At most max_tokens per prompt, on the protocol's 6 prompts.
    QVERIFY(result.rows[0].tokens <= 6 * 7);
    const auto decisions = store::admissionDecisions(store, result.runId);
    const nlohmann::json inputs = nlohmann::json::parse(decisions.at(0).candidateJson);
    QCOMPARE(inputs.at("settings").at("max_tokens").get<std::int64_t>(), std::int64_t(7));
    QCOMPARE(inputs.at("settings").at("prompts").get<std::int64_t>(), std::int64_t(6));
    QCOMPARE(inputs.at("settings").at("kv_scales").get<std::string>(), std::string("frozen_first_batch"));
    QVERIFY(inputs.at("protocol_differs").empty());
    QCOMPARE(inputs.at("calibration_flags").at(0).at("kind").get<std::string>(), std::string("noise-dominated"));
}

void TestAnalyses::admissionRefusesAnotherProtocolUnlessAllowed()
{
    store::RunStore store = openStore("admit-other-protocol");
    analysis::AdmissionOptions options;
    options.checkpoints = {model_};
    options.candidates = {analysis::Candidate {"bf16"}};
    options.calibrationId = storeCalibration(store, {0}, fixtureProtocol());
    // The screen's own settings: the analysis defaults (64 tokens, KV scales fitted on the measured prompts).
    options.protocolFromCalibration = false;
    options.probePath = probePath();
    options.count = 6;
    options.settings = analysis::applyProtocol(fixtureProtocol(), smallSettings());
    options.settings.maxNewTokens = 12;
    options.settings.kvScales = analysis::KvScalePolicy::FittedPerMeasurement;
    const auto before = store.listRuns().size();
    Progress progress;
    try {
        analysis::runAdmission(store, options, progress);
        QFAIL("a screen under another protocol was accepted");
    } catch (const InputError& error) {
        const std::string message = error.what();
        QVERIFY2(message.find("max_tokens 12 (budget: 7)") != std::string::npos, error.what());
        QVERIFY2(message.find("kv_scales fitted_per_measurement (budget: frozen_first_batch)") != std::string::npos,
            error.what());
    }
    QCOMPARE(store.listRuns().size(), before); // nothing stored
    // Allowed explicitly: measured, and every decision carries the differences.
    options.allowProtocolMismatch = true;
    Progress again;
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, again);
    QCOMPARE(result.protocolDifferences.size(), std::size_t(2));
    const nlohmann::json inputs
        = nlohmann::json::parse(store::admissionDecisions(store, result.runId).at(0).candidateJson);
    QCOMPARE(inputs.at("protocol_differs").size(), std::size_t(2));
    // A calibration made before protocols were recorded cannot be compared: refused too, unless allowed.
    analysis::AdmissionOptions old = options;
    old.allowProtocolMismatch = false;
    old.calibrationId = storeCalibration(store, {0}, std::nullopt);
    Progress third;
    QVERIFY_THROWS_EXCEPTION(InputError, analysis::runAdmission(store, old, third));
}

void TestAnalyses::admissionScreensAgainstTheBracketOfTheCheckpointsStep()
{
    store::RunStore store = openStore("admit-brackets");
    const std::string at20 = checkpointAt(dir_, model_, "ckpt-20", 20);
    analysis::AdmissionOptions options;
    options.checkpoints = {at20};
    options.candidates = {analysis::Candidate {"bf16"}};
    options.calibrationId = storeCalibration(store, {10, 30}, fixtureProtocol());
    options.measureUnit = false;
    Progress progress;
    // No bracket at step 20: the nearest earlier one (10), said in the row.
    const analysis::AdmissionResult result = analysis::runAdmission(store, options, progress);
    QCOMPARE(result.rows[0].bracketStep, std::optional<std::int64_t>(10));
    QVERIFY2(result.rows[0].note.find("step 10") != std::string::npos, result.rows[0].note.c_str());
    // A checkpoint before every bracket (step 5) is refused, naming the steps, unless a bracket is chosen.
    options.checkpoints = {checkpointAt(dir_, model_, "ckpt-5", 5)};
    Progress again;
    try {
        analysis::runAdmission(store, options, again);
        QFAIL("screened before every bracket");
    } catch (const InputError& error) {
        QVERIFY2(std::string(error.what()).find("steps 10, 30") != std::string::npos, error.what());
    }
    options.steps = {30};
    Progress third;
    const analysis::AdmissionResult chosen = analysis::runAdmission(store, options, third);
    QCOMPARE(chosen.rows[0].bracketStep, std::optional<std::int64_t>(30));
    QVERIFY2(chosen.rows[0].note.find("chosen explicitly") != std::string::npos, chosen.rows[0].note.c_str());
}

void TestAnalyses::recipeBudgetIsTheBracketOfTheModelsStep()
{
    // `recipe build --calibration` chooses its bracket from the model's optimizer step as `admit` does for a
    // checkpoint (issue 40, item 7): the same three cases as admissionScreensAgainstTheBracketOfTheCheckpointsStep.
    store::RunStore store = openStore("recipe-brackets");
    const std::int64_t calibration = storeCalibration(store, {10, 30}, fixtureProtocol());
    const analysis::BudgetChoice at20 = analysis::budgetForModel(store, calibration, std::nullopt,
        checkpointAt(dir_, model_, "recipe-ckpt-20", 20));
    QCOMPARE(at20.modelStep, std::int64_t(20));
    QCOMPARE(at20.step, std::int64_t(10));
    QCOMPARE(at20.budget, store::admissionThreshold(store, calibration, 10));
    QVERIFY2(at20.note.find("nearest earlier one (step 10)") != std::string::npos, at20.note.c_str());
    const analysis::BudgetChoice at30 = analysis::budgetForModel(store, calibration, std::nullopt,
        checkpointAt(dir_, model_, "recipe-ckpt-30", 30));
    QCOMPARE(at30.step, std::int64_t(30));
    QVERIFY(at30.note.empty());
    // The student before training (no state.json: step 0) is before every bracket: refused, naming them.
    try {
        analysis::budgetForModel(store, calibration, std::nullopt, model_);
        QFAIL("built for a model before every bracket");
    } catch (const InputError& error) {
        QVERIFY2(std::string(error.what()).find("optimizer step 0, before every bracket") != std::string::npos
                && std::string(error.what()).find("steps 10, 30") != std::string::npos,
            error.what());
    }
    // Chosen explicitly: used, and said.
    const analysis::BudgetChoice chosen = analysis::budgetForModel(store, calibration, 30, model_);
    QCOMPARE(chosen.step, std::int64_t(30));
    QVERIFY2(chosen.note.find("chosen explicitly for a model at optimizer step 0") != std::string::npos,
        chosen.note.c_str());
}

void TestAnalyses::bf16SensitivityAddsNothing()
{
    store::RunStore store = openStore("sensitivity-bf16");
    analysis::SensitivityOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 8;
    options.settings = smallSettings();
    options.weights = analysis::parseWeightPrecision("bf16", "test");
    options.kvCells = false;
    Progress progress;
    const analysis::SensitivityResult result = analysis::runSensitivity(store, options, progress);
    // 2 layers x 7 projections + the tied embedding/lm_head cell.
    QCOMPARE(result.cells.size(), std::size_t(15));
    QVERIFY(result.bf16Unit > 0.0);
    for (const auto& cell : result.cells) {
        // A cell "quantized" to BF16 is the BF16 engine: the same tokens and the same KL.
        QVERIFY2(std::abs(cell.addedMismatch) <= 1e-12 * result.bf16Unit,
            (cell.moduleGroup + " " + std::to_string(cell.addedMismatch)).c_str());
        QVERIFY(std::abs(*cell.ciLow) <= 1e-12 && std::abs(*cell.ciHigh) <= 1e-12);
    }
    const auto stored = store::sensitivityScan(store, result.scanId);
    QCOMPARE(stored->info.status, std::string("finished"));
    QCOMPARE(stored->cells.size(), std::size_t(15));
    QCOMPARE(*stored->info.bf16Unit, result.bf16Unit);
}

void TestAnalyses::sensitivityCellMatchesHandWrittenRecipe()
{
    store::RunStore store = openStore("sensitivity-int4");
    analysis::SensitivityOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 8;
    options.settings = smallSettings();
    options.weights = analysis::parseWeightPrecision("int4", "test");
    options.embeddingCells = false;
    Progress progress;
    const analysis::SensitivityResult result = analysis::runSensitivity(store, options, progress);
    QCOMPARE(result.cells.size(), std::size_t(16)); // 2 x (7 + kv)
    // Layer 1 down_proj, measured again from a recipe written by hand.
    const std::string recipePath = (dir_.path() + "/layer1-down-int4.yaml").toStdString();
    writeText(recipePath,
        "version: 1\nrules:\n  - match: \"model.layers.1.mlp.down_proj\"\n    weights: {format: int4}\n"
        "    activations: {format: bf16}\n");
    const analysis::ModelDirectory model = analysis::loadModelDirectory(model_);
    const analysis::PromptRequests requests = analysis::promptRequests(probePath(), *model.tokenizer, 8);
    const model::Transformer trainer(model.config, model.weights);
    analysis::EngineConfiguration configuration;
    configuration.recipe = quant::loadRecipe(recipePath);
    const auto sampling = analysis::samplingOptions(options.settings, model.config, *model.tokenizer);
    const engine::MismatchMeasurement direct = analysis::measureConfiguration(
        trainer, model.weights, configuration, requests, sampling, options.settings, nullptr);
    const store::SensitivityCell* down = nullptr;
    for (const auto& cell : result.cells) {
        if (cell.layer == 1 && cell.moduleGroup == "down") {
            down = &cell;
        }
    }
    QVERIFY(down);
    QCOMPARE(down->mismatch, direct.kl);
    QCOMPARE(down->addedMismatch, direct.kl - result.bf16Unit);
    // int4 weights change the distributions: the cell adds mismatch over the unit.
    QVERIFY(down->addedMismatch > 0.0);
}

void TestAnalyses::recipeBuilderReachesTheTargetAndWritesACheckedRecipe()
{
    store::RunStore store = openStore("recipe-build");
    analysis::RecipeBuildOptions options;
    options.scan.modelDirectory = model_;
    options.scan.promptSetPath = probePath();
    options.scan.count = 8;
    options.scan.settings = smallSettings();
    options.scan.weights = analysis::parseWeightPrecision("int4", "test");
    options.scan.kvCells = false;
    Progress scanProgress;
    const analysis::SensitivityResult scan = analysis::runSensitivity(store, options.scan, scanProgress);
    options.scanId = scan.scanId;
    // Everything int4 first, to place the budget between the unit and the all-quantized mismatch.
    double everything = 0.0;
    {
        options.budget = 1e6;
        options.outPath = (dir_.path() + "/everything.yaml").toStdString();
        Progress progress;
        const analysis::RecipeBuildResult all = analysis::buildRecipe(store, options, progress);
        QCOMPARE(all.bf16Cells.size(), std::size_t(0));
        everything = all.mismatch;
        QVERIFY(all.weightBytes < all.bf16WeightBytes);
    }
    QVERIFY(everything > 4.0 * scan.bf16Unit);
    options.budget = 0.5 * (everything + scan.bf16Unit); // target = half of it
    options.targetFraction = 0.5;
    options.outPath = (dir_.path() + "/built.yaml").toStdString();
    Progress progress;
    const analysis::RecipeBuildResult built = analysis::buildRecipe(store, options, progress);
    QVERIFY(!built.bf16Cells.empty());
    QVERIFY(built.mismatch <= built.target);
    // Every step before the last missed the target (the greedy stops at the first that reaches it).
    for (std::size_t i = 0; i + 1 < built.steps.size(); ++i) {
        QVERIFY(built.steps[i].mismatch > built.target);
    }
    // The first cell kept in BF16 is the scan's most sensitive one.
    const store::SensitivityCell* most = &scan.cells.front();
    for (const auto& cell : scan.cells) {
        if (cell.addedMismatch > most->addedMismatch) {
            most = &cell;
        }
    }
    QCOMPARE(built.bf16Cells.front(), analysis::cellLabel(most->layer, most->moduleGroup));
    // The file is a valid recipe for the model (what `mismatch recipe check` runs) and measures as reported.
    const quant::Recipe written = quant::loadRecipe(options.outPath);
    const quant::RecipePlan plan = quant::resolveRecipe(written, config_);
    QCOMPARE(plan.weightBytes, built.weightBytes);
    const analysis::ModelDirectory model = analysis::loadModelDirectory(model_);
    const analysis::PromptRequests requests = analysis::promptRequests(probePath(), *model.tokenizer, 8);
    analysis::EngineConfiguration configuration;
    configuration.recipe = written;
    const auto sampling = analysis::samplingOptions(options.scan.settings, model.config, *model.tokenizer);
    const model::Transformer trainer(model.config, model.weights);
    QCOMPARE(analysis::measureConfiguration(
                 trainer, model.weights, configuration, requests, sampling, options.scan.settings, nullptr)
                 .kl,
        built.mismatch);
    const auto steps = store.stepsAfter(built.runId);
    QCOMPARE(steps.size(), built.steps.size());
    QCOMPARE(store::toString(store.run(built.runId)->status), std::string("finished"));

    // The scan measured the embedding and lm_head (the default), so "everything quantized" quantized them; with
    // keepEmbeddingBf16 (`--no-embedding`, the Build Recipe dialog's box) the same stored scan builds a recipe that
    // leaves them in BF16, which the vLLM export accepts (it quantizes linear layers only).
    QVERIFY(std::any_of(scan.cells.begin(), scan.cells.end(),
        [](const store::SensitivityCell& cell) { return cell.layer == store::kNoLayer; }));
    const quant::RecipePlan everythingPlan = quant::resolveRecipe(quant::loadRecipe((dir_.path() + "/everything.yaml").toStdString()), config_);
    QVERIFY(everythingPlan.modules.at(quant::kLmHeadName).weights.format != quant::WeightFormat::Bf16);
    options.budget = 1e6;
    options.keepEmbeddingBf16 = true;
    options.outPath = (dir_.path() + "/linear-only.yaml").toStdString();
    Progress linearProgress;
    analysis::buildRecipe(store, options, linearProgress);
    const quant::Recipe linearOnly = quant::loadRecipe(options.outPath);
    const quant::RecipePlan linearPlan = quant::resolveRecipe(linearOnly, config_);
    QVERIFY(linearPlan.modules.at(quant::kLmHeadName).weights.format == quant::WeightFormat::Bf16);
    QVERIFY(linearPlan.modules.at("model.layers.0.mlp.down_proj").weights.format != quant::WeightFormat::Bf16);
}

void TestAnalyses::recipeBuilderRefusesAnImpossibleTarget()
{
    store::RunStore store = openStore("recipe-impossible");
    analysis::RecipeBuildOptions options;
    options.scan.modelDirectory = model_;
    options.scan.promptSetPath = probePath();
    options.scan.count = 4;
    options.scan.settings = smallSettings();
    options.scan.weights = analysis::parseWeightPrecision("fp8_e4m3:channel", "test");
    options.scan.kvCells = false;
    options.scan.embeddingCells = false;
    options.budget = 1e-9; // below the BF16 unit: no recipe can reach it
    options.outPath = (dir_.path() + "/impossible.yaml").toStdString();
    Progress progress;
    QVERIFY_THROWS_EXCEPTION(Error, analysis::buildRecipe(store, options, progress));
    QVERIFY(!QFile::exists(QString::fromStdString(options.outPath)));
    const auto runs = store.listRuns();
    QCOMPARE(runs.back().kind, std::string("recipe_build"));
    QCOMPARE(store::toString(runs.back().status), std::string("failed"));
}

void TestAnalyses::prefixShiftPartsAgainstFloat64Reference()
{
    store::RunStore store = openStore("prefix-shift");
    analysis::PrefixShiftOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 12;
    options.settings = smallSettings();
    options.configuration.noise = 0.05;
    options.configuration.noiseSeed = 2;
    options.storedPairs = 4;
    Progress progress;
    const analysis::PrefixShiftResult result = analysis::runPrefixShift(store, options, progress);
    QCOMPARE(result.pairs, std::int64_t(12));
    QCOMPARE(result.total, result.perToken + result.prefixShift);
    QVERIFY(result.diverged > 0);
    std::int64_t histogramPairs = 0;
    for (const auto count : result.divergenceHistogram) {
        histogramPairs += count;
    }
    QCOMPARE(histogramPairs, result.diverged);
    // The uncorrected row of the corrections table is the split itself.
    QCOMPARE(result.corrections[0].kind, std::string("none"));
    QVERIFY(std::abs(result.corrections[0].total - result.total) < 1e-12);
    QVERIFY(std::abs(result.corrections[0].perToken - result.perToken) < 1e-12);

    // Independent reference of the stored pairs: the trainer and the noisy engine model (the same noise) run the
    // whole sequence in one unbatched forward each; KL(mu || pi) per position in a float64 loop over the vocabulary.
    const auto pairs = store::prefixShiftPairs(store, result.analysisId);
    QCOMPARE(pairs.size(), std::size_t(4));
    const analysis::ModelDirectory model = analysis::loadModelDirectory(model_);
    const model::Transformer trainer(model.config, model.weights);
    engine::EngineModel noisy(model.config, engine::addWeightNoise(model.weights, 0.05, 2), std::nullopt, {});
    for (const auto& pair : pairs) {
        for (int side = 0; side < 2; ++side) {
            const std::vector<std::int64_t>& response = side == 0 ? pair.referenceTokens : pair.candidateTokens;
            const std::vector<double>& stored = side == 0 ? pair.referenceKl : pair.candidateKl;
            const ForcedRows rows = forcedRows(trainer, noisy, pair.promptTokens, response);
            QCOMPARE(stored.size(), response.size());
            for (std::size_t t = 0; t < response.size(); ++t) {
                const double kl = klLoop(rows, static_cast<std::int64_t>(t));
                QVERIFY2(std::abs(kl - stored[t]) < kKlTolerance,
                    (pair.promptId + " side " + std::to_string(side) + " t " + std::to_string(t) + ": "
                        + std::to_string(kl) + " vs " + std::to_string(stored[t]))
                        .c_str());
            }
        }
        if (pair.firstDivergence) {
            const auto d = static_cast<std::size_t>(*pair.firstDivergence);
            for (std::size_t t = 0; t < d; ++t) {
                QCOMPARE(pair.candidateTokens[t], pair.referenceTokens[t]);
            }
            QVERIFY(d == std::min(pair.candidateTokens.size(), pair.referenceTokens.size())
                || pair.candidateTokens[d] != pair.referenceTokens[d]);
        } else {
            QCOMPARE(pair.candidateTokens, pair.referenceTokens);
        }
    }
}

void TestAnalyses::prefixShiftOfTheBf16EngineIsZero()
{
    store::RunStore store = openStore("prefix-shift-bf16");
    analysis::PrefixShiftOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 6;
    options.settings = smallSettings();
    Progress progress;
    const analysis::PrefixShiftResult result = analysis::runPrefixShift(store, options, progress);
    // The candidate is the BF16 engine: the same tokens, and every part computed on the same path (prefix_shift.h),
    // so the split is exact on every CPU: the per-token part is the unit and nothing shifts, bit for bit.
    QCOMPARE(result.diverged, std::int64_t(0));
    QVERIFY(result.bf16Unit > 0.0);
    QCOMPARE(result.prefixShift, 0.0);
    QCOMPARE(result.total, result.perToken);
    QCOMPARE(result.perToken, result.bf16Unit);
}

// Issue 43: a scan split by layer into units, each scanned in its own shard workspace (as a cluster node writes it; one
// of them interrupted and resumed), merged into another workspace and assembled there (fromUnits) is the
// single-process scan bit for bit: every cell, the BF16 unit with its interval, the run's record and inputs. An
// assembly that lacks a unit is refused, naming its layer, and a layer the model does not have is refused; neither
// stores anything.
void TestAnalyses::sensitivityUnitsMergeToTheSingleProcessScan()
{
    analysis::SensitivityOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 4;
    options.settings = smallSettings();
    options.weights = analysis::parseWeightPrecision("int8", "test");
    Progress progress;
    store::RunStore single = openStore("units-single");
    const analysis::SensitivityResult full = analysis::runSensitivity(single, options, progress);
    QCOMPARE(full.cells.size(), std::size_t(2 * 8 + 1)); // 2 layers x (7 projections + kv) + tied embedding/lm_head
    QVERIFY(!nlohmann::json::parse(single.run(full.runId)->configJson).contains("layers"));

    // The units; layer 0 is in two of them (its cells must agree) and the last one's layers are given unsorted.
    const std::vector<std::vector<std::int64_t>> shares = {{0}, {1}, {0, store::kNoLayer}};
    const char* const recorded[] = {"[0]", "[1]", "[-1,0]"}; // each unit's record: its layers sorted
    std::vector<std::string> shards;
    for (std::size_t u = 0; u < shares.size(); ++u) {
        shards.push_back((dir_.path() + "/unit-shards/" + QString::number(u)).toStdString());
        store::RunStore shard = store::RunStore::open(store::databasePath(shards.back()));
        analysis::SensitivityOptions unit = options;
        unit.layers = shares[u];
        analysis::SensitivityResult part;
        if (u == 1) {
            // A unit resumes like any scan (a requeued node): cancelled as its fourth cell starts, then continued.
            CancelAtStage cancelAt("layer 1 o");
            Progress& cancelling = cancelAt.progress;
            QVERIFY_THROWS_EXCEPTION(CancelledError, analysis::runSensitivity(shard, unit, cancelling));
            const auto cancelled = store::sensitivityScans(shard);
            QCOMPARE(cancelled.size(), std::size_t(1));
            QVERIFY(cancelled[0].cellCount > 0 && cancelled[0].cellCount < 8); // whole cells, not all of them
            part = analysis::resumeSensitivity(shard, *cancelled[0].runId, unit, progress);
        } else {
            part = analysis::runSensitivity(shard, unit, progress);
        }
        QCOMPARE(part.cells.size(), std::size_t(u == 2 ? 9 : 8));
        QCOMPARE(exact(part.bf16Unit), exact(full.bf16Unit));
        const auto run = shard.run(part.runId);
        QCOMPARE(run->kind, std::string("sensitivity"));
        QCOMPARE(nlohmann::json::parse(run->configJson).at("layers").dump(), std::string(recorded[u]));
    }

    store::RunStore merged = openStore("units-merged");
    for (const std::string& shard : shards) {
        QCOMPARE(store::mergeShard(merged, shard).runs.size(), std::size_t(1));
    }
    analysis::SensitivityOptions assemble = options;
    assemble.fromUnits = true;
    const analysis::SensitivityResult assembled = analysis::runSensitivity(merged, assemble, progress);
    QCOMPARE(exact(assembled.bf16Unit), exact(full.bf16Unit));
    QCOMPARE(exact(assembled.bf16UnitInterval.estimate), exact(full.bf16UnitInterval.estimate));
    QCOMPARE(exact(assembled.bf16UnitInterval.low), exact(full.bf16UnitInterval.low));
    QCOMPARE(exact(assembled.bf16UnitInterval.high), exact(full.bf16UnitInterval.high));
    QCOMPARE(exact(assembled.bf16UnitInterval.confidence), exact(full.bf16UnitInterval.confidence));
    QCOMPARE(assembled.bf16UnitInterval.resamples, full.bf16UnitInterval.resamples);
    QCOMPARE(assembled.unitTokens, full.unitTokens);
    QCOMPARE(assembled.layers, full.layers);
    QCOMPARE(assembled.format, full.format);
    QCOMPARE(assembled.cells.size(), full.cells.size());
    for (std::size_t c = 0; c < full.cells.size(); ++c) {
        QCOMPARE(exactCell(assembled.cells[c]), exactCell(full.cells[c]));
    }
    // Stored as the single-process scan stores it: the same cells in the same order, the same unit, the same run
    // (kind, name, record and inputs), which adds the units it was assembled from.
    const auto storedFull = store::sensitivityScan(single, full.scanId);
    const auto storedAssembled = store::sensitivityScan(merged, assembled.scanId);
    QVERIFY(storedFull && storedAssembled);
    QCOMPARE(storedAssembled->info.status, std::string("finished"));
    QCOMPARE(storedAssembled->info.format, storedFull->info.format);
    QCOMPARE(exact(storedAssembled->info.bf16Unit), exact(storedFull->info.bf16Unit));
    QCOMPARE(storedAssembled->cells.size(), storedFull->cells.size());
    for (std::size_t c = 0; c < storedFull->cells.size(); ++c) {
        QCOMPARE(exactCell(storedAssembled->cells[c]), exactCell(storedFull->cells[c]));
    }
    const auto singleRun = single.run(full.runId);
    const auto assembledRun = merged.run(assembled.runId);
    QCOMPARE(assembledRun->kind, singleRun->kind);
    QCOMPARE(assembledRun->name, singleRun->name);
    QCOMPARE(store::toString(assembledRun->status), std::string("finished"));
    QCOMPARE(storedAssembled->info.configJson, assembledRun->configJson);
    nlohmann::json record = nlohmann::json::parse(assembledRun->configJson);
    QCOMPARE(record.at("assembled_from").size(), shares.size());
    record.erase("assembled_from");
    QCOMPARE(record.dump(), nlohmann::json::parse(singleRun->configJson).dump());

    // Layer 1's unit not merged: refused before anything is stored, naming the layer.
    store::RunStore partial = openStore("units-partial");
    store::mergeShard(partial, shards[0]);
    store::mergeShard(partial, shards[2]);
    const std::size_t runs = partial.listRuns().size();
    const std::size_t scans = store::sensitivityScans(partial).size();
    try {
        analysis::runSensitivity(partial, assemble, progress);
        QFAIL("an assembly without layer 1's unit was not refused");
    } catch (const InputError& error) {
        QCOMPARE(error.location(), std::string("from_units"));
        QVERIFY2(error.detail().find("of layer 1 (") != std::string::npos, error.what());
    }
    QCOMPARE(partial.listRuns().size(), runs);
    QCOMPARE(store::sensitivityScans(partial).size(), scans);

    // A layer the model does not have.
    analysis::SensitivityOptions beyond = options;
    beyond.layers = {2};
    try {
        analysis::runSensitivity(partial, beyond, progress);
        QFAIL("layer 2 of a 2-layer model was not refused");
    } catch (const InputError& error) {
        QCOMPARE(error.location(), std::string("layers"));
        QVERIFY2(error.detail().find("it has 2 layers") != std::string::npos, error.what());
    }
    QCOMPARE(partial.listRuns().size(), runs);
}

void TestAnalyses::cancelledScanLeavesWholeCellsAndAMarkedRun()
{
    store::RunStore store = openStore("cancel-scan");
    analysis::SensitivityOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 4;
    options.settings = smallSettings();
    options.weights = analysis::parseWeightPrecision("int8", "test");
    options.count = 8;
    options.settings.batchSize = 4; // two chunks per measurement: the cancel lands inside the fourth cell
    // Cancel as soon as the fourth cell starts measuring.
    CancelAtStage cancelAt("layer 0 o");
    Progress& progress = cancelAt.progress;
    QVERIFY_THROWS_EXCEPTION(CancelledError, analysis::runSensitivity(store, options, progress));
    const auto scans = store::sensitivityScans(store);
    QCOMPARE(scans.size(), std::size_t(1));
    QCOMPARE(scans[0].status, std::string("cancelled"));
    const auto scan = store::sensitivityScan(store, scans[0].id);
    // q, k, v were measured whole; nothing of o or later.
    QCOMPARE(scan->cells.size(), std::size_t(3));
    for (const auto& cell : scan->cells) {
        QVERIFY(cell.tokens && *cell.tokens > 0 && cell.ciLow && cell.mismatchCiHigh);
    }
    QCOMPARE(store::toString(store.run(*scans[0].runId)->status), std::string("cancelled"));
}

void TestAnalyses::cancelledAdmissionLeavesWholeDecisions()
{
    store::RunStore store = openStore("cancel-admit");
    analysis::AdmissionOptions options;
    options.checkpoints = {model_};
    options.probePath = probePath();
    options.count = 4;
    options.settings = smallSettings();
    options.measureUnit = false;
    options.count = 8;
    options.settings.batchSize = 4; // the cancel lands inside the second candidate's measurement
    for (int i = 0; i < 3; ++i) {
        analysis::Candidate candidate;
        candidate.name = "c" + std::to_string(i);
        candidate.noise = 0.01 * (i + 1);
        options.candidates.push_back(candidate);
    }
    options.threshold = 0.1;
    CancelAtStage cancelAt("c1");
    Progress& progress = cancelAt.progress;
    QVERIFY_THROWS_EXCEPTION(CancelledError, analysis::runAdmission(store, options, progress));
    const auto runs = store.listRuns();
    QCOMPARE(store::toString(runs.back().status), std::string("cancelled"));
    const auto decisions = store::admissionDecisions(store, runs.back().id);
    QCOMPARE(decisions.size(), std::size_t(1));
    QVERIFY(decisions[0].candidateJson.find("\"c0\"") != std::string::npos);
}

void TestAnalyses::cancelledPrefixShiftStoresNothing()
{
    store::RunStore store = openStore("cancel-prefix");
    analysis::PrefixShiftOptions options;
    options.modelDirectory = model_;
    options.promptSetPath = probePath();
    options.count = 8;
    options.settings = smallSettings();
    options.settings.batchSize = 4;
    options.configuration.noise = 0.05;
    Progress* self = nullptr;
    Progress progress([&self](double fraction, const std::string& stage) {
        if (self && stage == "paired generations" && fraction > 0.0) {
            self->cancel(); // after the first chunk of pairs
        }
    });
    self = &progress;
    QVERIFY_THROWS_EXCEPTION(CancelledError, analysis::runPrefixShift(store, options, progress));
    QCOMPARE(store::prefixShifts(store).size(), std::size_t(0));
    QCOMPARE(store.listRuns().back().kind, std::string("prefix_shift"));
    QCOMPARE(store::toString(store.listRuns().back().status), std::string("cancelled"));
}

void TestAnalyses::badCandidatesFiles_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("location");
    QTest::addColumn<QString>("detail");
    QTest::newRow("not a list") << "name: a\n"
                                << "line 1, column 1"
                                << "expected a list of candidates";
    QTest::newRow("empty list") << "[]\n"
                                << "line 1, column 1"
                                << "empty";
    QTest::newRow("unknown key") << "- name: a\n  noize: 0.1\n"
                                 << "line 2, column 3"
                                 << "unknown key 'noize'";
    QTest::newRow("duplicate key") << "- name: a\n  noise: 0.1\n  noise: 0.2\n"
                                   << "line 3, column 3"
                                   << "duplicate key 'noise' (first given at line 2, column 3)";
    QTest::newRow("null key") << "- name: a\n  ~: 0.1\n"
                              << "line 2, column 3"
                              << "expected a key name, got nothing (null)";
    QTest::newRow("negative staleness") << "- name: a\n  staleness: -1\n"
                                        << "line 2, column 14"
                                        << "must be >= 0";
    QTest::newRow("text noise") << "- name: a\n  noise: lots\n"
                                << "line 2, column 10"
                                << "`noise` must be a number";
    QTest::newRow("missing name") << "- noise: 0.1\n"
                                  << "line 1, column 3"
                                  << "has no `name`";
    QTest::newRow("duplicate name") << "- name: a\n- name: a\n"
                                    << "line 2, column 3"
                                    << "used twice";
    QTest::newRow("missing recipe") << "- name: a\n  recipe: nowhere.yaml\n"
                                    << "line 2, column 11"
                                    << "does not exist";
    QTest::newRow("item not a mapping") << "- a\n"
                                        << "line 1, column 3"
                                        << "expected a mapping";
    QTest::newRow("bad pattern") << "- name: a\n  noise_modules: \"model.{3-1}\"\n"
                                 << "line 2, column 18"
                                 << "not a module pattern";
    QTest::newRow("malformed yaml") << "- name: [a\n"
                                    << "line 2"
                                    << "malformed YAML";
}

void TestAnalyses::badCandidatesFiles()
{
    QFETCH(QString, text);
    QFETCH(QString, location);
    QFETCH(QString, detail);
    const std::string path = (dir_.path() + "/candidates.yaml").toStdString();
    try {
        analysis::parseCandidates(text.toStdString(), path);
        QFAIL("expected an InputError");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), QString::fromStdString(path));
        QVERIFY2(QString::fromStdString(error.location()).startsWith(location), error.what());
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
}

void TestAnalyses::generateUsesTheAnalysesRequests()
{
    analysis::GenerateOptions options;
    options.modelDirectory = model_;
    options.prompts = probePath();
    options.sampling.temperature = 0.0;
    options.sampling.maxNewTokens = 4;
    options.kvCacheBytes = 8ull << 20;
    Progress progress;
    const analysis::GenerateResult first = analysis::generate(options, progress);
    // The requests are the analyses' (analysis::promptRequests): same ids, tokens and per-prompt seeds (FNV-1a of
    // the id), so a prompt gets the same sample in `generate` as in a measurement.
    const model::Tokenizer tokenizer = model::loadModelTokenizer(model_, config_);
    const analysis::PromptRequests expected = analysis::promptRequests(probePath(), tokenizer, 0);
    QCOMPARE(first.requests.ids, expected.ids);
    QCOMPARE(first.results.size(), expected.requests.size());
    for (std::size_t i = 0; i < expected.requests.size(); ++i) {
        QCOMPARE(first.requests.requests[i].prompt, expected.requests[i].prompt);
        QCOMPARE(first.requests.requests[i].seed, fnv1a(expected.ids[i]));
        QVERIFY(!first.results[i].tokens.empty() && first.results[i].tokens.size() <= 4);
    }
    QCOMPARE(first.weightSource, model_);
    QCOMPARE(first.precisionName, std::string("bf16"));
    QVERIFY(first.kvCapacityTokens > 0);
    // Older weights of the same model are used as the engine's; another architecture is refused before loading.
    options.stalenessFrom = olderModel_;
    QCOMPARE(analysis::generate(options, progress).weightSource, olderModel_);
    const std::string other = (dir_.path() + "/other-architecture").toStdString();
    const model::ModelConfig otherConfig = train::demoModelConfig(32, 1, 2, 1, 64);
    train::writeDemoModelDirectory(other, otherConfig, model::randomWeights(otherConfig, 3, 0.1));
    options.stalenessFrom = other;
    try {
        analysis::generate(options, progress);
        QFAIL("older weights of another architecture were accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.file(), other + "/config.json");
    }
    options.stalenessFrom.clear();
    // A noise pattern that matches nothing is named with the caller's words for it.
    options.noise = 0.1;
    options.noiseModules = "model.nothing.*";
    options.noiseModulesSource = "--noise-modules";
    try {
        analysis::generate(options, progress);
        QFAIL("noise on no module was accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.file(), std::string("--noise-modules"));
    }
    options.noise = 0.0;
    // Cancelled: nothing is returned.
    Progress cancelled;
    cancelled.cancel();
    QVERIFY_THROWS_EXCEPTION(CancelledError, analysis::generate(options, cancelled));
}

void TestAnalyses::noisyConfigurationIsMeasuredInPlaceAsWithACopy()
{
    // measureConfiguration (admit, breakdown, sensitivity, recipe builder) noises the weights in place where it can:
    // the weights as a BF16 checkpoint loads them (bf16), on the CPU, spilling to a directory of the test's.
    const QByteArray savedTmpdir = qgetenv("TMPDIR");
    const bool hadTmpdir = qEnvironmentVariableIsSet("TMPDIR");
    QTemporaryDir spill(QDir::currentPath() + "/spill-XXXXXX"); // the build tree, on a disk (not a tmpfs /tmp)
    QVERIFY(spill.isValid());
    qputenv("TMPDIR", spill.path().toUtf8());
    const analysis::ModelDirectory model = analysis::loadModelDirectory(model_);
    const model::TransformerWeights weights = model.weights.to(at::kBFloat16);
    const model::TransformerWeights original = weights.clone();
    const model::Transformer trainer(model.config, weights);
    const analysis::PromptRequests requests = analysis::promptRequests(probePath(), *model.tokenizer, 6);
    analysis::MeasureSettings settings = smallSettings();
    settings.batchSize = 2; // three chunks
    const auto sampling = analysis::samplingOptions(settings, model.config, *model.tokenizer);
    analysis::EngineConfiguration configuration;
    configuration.noise = 0.3;
    configuration.noiseSeed = 4;
    QVERIFY(analysis::inPlaceNoise(model.config, weights, configuration)); // the path measured below
    const engine::MismatchMeasurement inPlace
        = analysis::measureConfiguration(trainer, weights, configuration, requests, sampling, settings, nullptr);
    // The weights are clean again, bit for bit.
    for (const std::string& name : weights.names()) {
        QVERIFY2(at::equal(weights.get(name), original.get(name)), name.c_str());
    }
    // The copy: buildEngine adds the noise to a copy of the weights (engine::addWeightNoise).
    auto engine = analysis::buildEngine(model.config, weights, configuration, requests.prompts(), settings);
    engine::MismatchOptions options;
    options.batchSize = settings.batchSize;
    options.sampling = sampling;
    options.keepTokenValues = true;
    const engine::MismatchMeasurement copy
        = engine::measureMismatch(trainer, *engine, requests.requests, options, nullptr);
    QCOMPARE(inPlace.promptKlSums, copy.promptKlSums);
    QCOMPARE(inPlace.tokenValues.logMu, copy.tokenValues.logMu);
    QCOMPARE(inPlace.tokens, copy.tokens);
    QVERIFY(inPlace.kl > 0.0);
    if (hadTmpdir) {
        qputenv("TMPDIR", savedTmpdir);
    } else {
        qunsetenv("TMPDIR");
    }
}

MISMATCH_TEST_MAIN(TestAnalyses)
#include "test_analyses.moc"

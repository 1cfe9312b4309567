// Tests of the imports (core/io/import_log, core/io/import_aimet, core/store/import_store, `mismatch import`).
// The fixtures in fixtures/ were written by hand in each tool's format, reviewed against the tools' sources:
//   verl: verl-project/verl (formerly volcengine/verl) verl/utils/tracking.py FileLogger writes
//     {"step": N, "data": {...}} lines with orjson.dumps, and orjson (ijl/orjson README.md) writes NaN and
//     infinities as null; verl/trainer/distillation/losses.py distillation_ppo_loss logs the OPD loss as
//     "distillation/loss" among the actor's metrics, logged as actor/distillation/loss next to actor/pg_loss
//     (verl/trainer/ppo/ray_trainer.py RayPPOTrainer._update_actor prefixes them with verl/utils/py_functional.py
//     rename_dict, at 1dda039b9c6311889a9c9a26040677e1254814f9).
//     Validation: verl/trainer/ppo/ray_trainer.py RayPPOTrainer._val_metrics_update names the metrics of
//     verl/trainer/ppo/metric_utils.py process_validation_metrics "val-core/<data_source>/<var_name>/<metric_name>"
//     for the core variable ("acc" when the reward function returns it) and mean@N, maj@N/*, best@N/* at the
//     largest N, "val-aux/..." for the rest (std@N, worst@N/*, the other variables); mean@N is each problem's mean
//     over its N responses, averaged over the data source's problems. fit() logs the validation before training
//     on its own line at step 0 and later ones merged into the line of every test_freq-th step; the data source is
//     the dataset's data_source, "openai/gsm8k" in examples/data_preprocess/gsm8k.py.
//   Tinker: thinking-machines-lab/tinker-cookbook tinker_cookbook/utils/ml_log.py JsonLogger writes metrics.jsonl
//     lines {"step": N, ...} and the run's Config to config.json beside it; rl/train.py Config has num_substeps
//     and async_config {max_steps_off_policy, groups_per_batch} (AsyncConfig in released tinker-cookbook, v0.5.5 =
//     9dfcc3a2cf44432d621a01005073dc6d76a1e87a; pipeline_depth exists only on the unmerged branch
//     async-rl-blocking-staleness, 0d7fee56c02c97e2d82c1ec44558033054830427), and the asynchronous trainer's
//     evaluation loop logs its metrics on a line of their own with the step of the sampler it evaluated, which
//     is the step of the next training line (fixtures/tinker_async); distillation/train_on_policy.py
//     incorporate_kl_penalty computes teacher_kl from the datum's sampler log-probabilities.
//   NeMo-RL: NVIDIA-NeMo/RL nemo_rl/algorithms/loss/loss_functions.py (7ea279abfbeb698b092856d0dab61e7cf39bc909);
//     the tests written after verlValidationAccuraciesOfSeveralDataSources cite the function each value follows.
// The fixtures' mismatch values were computed from per-token probabilities of the rollout engine (mu) and the
// trainer (pi) that this test lists again below; the test recomputes every estimator from those probabilities (k1,
// k3, k2, chi-square, probability differences) and checks that each value landed in the right measure, so a
// swapped mapping or a probability difference stored as a KL fails here.
#include "app/cli/cli.h"
#include "core/common/error.h"
#include "core/io/import_aimet.h"
#include "core/io/import_follow.h"
#include "core/io/import_log.h"
#include "core/store/import_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "core/jobs/job_file.h"
#include "tests/common/cli_runner.h"
#include "tests/common/golden_json.h"
#include "tests/common/tensorboard_writer.h"
#include "tests/common/test_main.h"

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

using namespace mismatch;
using test::parseJson;
using test::runCli;

namespace {

const std::string kFixtures = std::string(MISMATCH_SOURCE_DIR) + "/tests/import/fixtures/";
constexpr double kTolerance = 1e-9; // the fixtures hold 12 significant digits

// Per-token probabilities of the sampled tokens: the engine's mu(y) and the trainer's pi(y).
struct TokenProbabilities {
    std::vector<double> mu;
    std::vector<double> pi;
};

// The batches behind the fixtures' steps (verl steps 1, 2, 7; Tinker steps 0, 1, 4).
const TokenProbabilities kBatchA{{0.5, 0.8, 0.25, 0.6}, {0.4, 0.9, 0.3, 0.6}};
const TokenProbabilities kBatchB{{0.7, 0.1, 0.95}, {0.65, 0.2, 0.9}};
const TokenProbabilities kBatchC{{0.9, 0.35}, {0.85, 0.5}};

// The estimators, written out from their definitions (spec: k1 = log mu - log pi, k3 = r - 1 - log r, r = pi/mu).
double k1(const TokenProbabilities& t)
{
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) sum += std::log(t.mu[i]) - std::log(t.pi[i]);
    return sum / t.mu.size();
}
double k3(const TokenProbabilities& t)
{
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) {
        const double r = t.pi[i] / t.mu[i];
        sum += r - 1 - std::log(r);
    }
    return sum / t.mu.size();
}
double k2(const TokenProbabilities& t)
{
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) {
        const double d = std::log(t.mu[i]) - std::log(t.pi[i]);
        sum += 0.5 * d * d;
    }
    return sum / t.mu.size();
}
double chiSquare(const TokenProbabilities& t)
{
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) sum += (t.pi[i] / t.mu[i]) * (t.pi[i] / t.mu[i]);
    return sum / t.mu.size() - 1;
}
double probDiffMean(const TokenProbabilities& t)
{
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) sum += std::fabs(t.mu[i] - t.pi[i]);
    return sum / t.mu.size();
}
double probDiffMax(const TokenProbabilities& t)
{
    double best = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) best = std::max(best, std::fabs(t.mu[i] - t.pi[i]));
    return best;
}
double probDiffStd(const TokenProbabilities& t) // torch.std: the unbiased (n - 1) estimate
{
    const double mean = probDiffMean(t);
    double sum = 0;
    for (size_t i = 0; i < t.mu.size(); ++i) sum += std::pow(std::fabs(t.mu[i] - t.pi[i]) - mean, 2);
    return std::sqrt(sum / (t.mu.size() - 1));
}
double samplerEntropy(const TokenProbabilities& t)
{
    double sum = 0;
    for (double p : t.mu) sum -= std::log(p);
    return sum / t.mu.size();
}

#define COMPARE_NEAR(actual, expected)                                                                           \
    do {                                                                                                         \
        const double a_ = (actual);                                                                              \
        const double e_ = (expected);                                                                            \
        if (!(std::fabs(a_ - e_) <= kTolerance)) {                                                               \
            QFAIL(qPrintable(QString("%1 = %2, expected %3").arg(#actual).arg(a_, 0, 'g', 15).arg(e_, 0, 'g', 15))); \
        }                                                                                                        \
    } while (0)

const store::StepMetrics& stepOf(const io::ImportedLog& log, std::int64_t step)
{
    for (const auto& s : log.steps) {
        if (s.step == step) return s;
    }
    qFatal("step %lld was not imported", static_cast<long long>(step));
}

std::vector<std::int64_t> stepNumbers(const io::ImportedLog& log)
{
    std::vector<std::int64_t> steps;
    for (const auto& s : log.steps) steps.push_back(s.step);
    return steps;
}

std::vector<std::int64_t> skippedLines(const io::ImportedLog& log)
{
    std::vector<std::int64_t> lines;
    for (const auto& s : log.skipped) lines.push_back(s.line);
    return lines;
}

// "LINE KEY REASON" of each dropped value, in order.
std::vector<std::string> droppedValues(const io::ImportedLog& log)
{
    std::vector<std::string> values;
    for (const auto& d : log.dropped) values.push_back(std::to_string(d.line) + " " + d.key + " " + d.reason);
    return values;
}

std::string reasonOf(const io::ImportedLog& log, std::int64_t line)
{
    for (const auto& s : log.skipped) {
        if (s.line == line) return s.reason;
    }
    return "(line " + std::to_string(line) + " not skipped)";
}

bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

std::string writeFile(const QTemporaryDir& dir, const std::string& name, const std::string& text)
{
    const std::string path = dir.path().toStdString() + "/" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// Every row of every table, as text: two dumps are equal exactly when the store's content is.
std::string dumpRows(sqlite3* db)
{
    std::string out;
    std::vector<std::string> tables;
    {
        store::Statement list(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
        while (list.step()) tables.push_back(list.text(0));
    }
    for (const auto& table : tables) {
        out += "[" + table + "]\n";
        sqlite3_stmt* stmt = nullptr;
        const std::string sql = "SELECT * FROM \"" + table + "\" ORDER BY rowid";
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
            // WITHOUT ROWID tables have no rowid; none exist today, but keep the dump complete.
            sqlite3_prepare_v2(db, ("SELECT * FROM \"" + table + "\"").c_str(), -1, &stmt, nullptr);
        }
        while (sqlite3_step(stmt) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
                const unsigned char* text = sqlite3_column_text(stmt, c);
                out += (c ? "|" : "") + (text ? std::string(reinterpret_cast<const char*>(text)) : "NULL");
            }
            out += "\n";
        }
        sqlite3_finalize(stmt);
    }
    return out;
}

// The rows of `table` whose `runColumn` is `runId`, every column but the row's own id, the run and scan ids and
// timestamps.
std::string rowsOfRun(sqlite3* db, const std::string& table, const std::string& runColumn, std::int64_t runId)
{
    static const std::set<std::string> skipped = {"id", "run_id", "scan_id", "imported_at", "created_at",
        "started_at", "finished_at", "updated_at"};
    sqlite3_stmt* stmt = nullptr;
    const std::string sql = "SELECT * FROM \"" + table + "\" WHERE " + runColumn + " = ? ORDER BY rowid";
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
        return "cannot read " + table;
    }
    sqlite3_bind_int64(stmt, 1, runId);
    std::string out;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
            if (skipped.count(sqlite3_column_name(stmt, c))) continue;
            const unsigned char* text = sqlite3_column_text(stmt, c);
            out += std::string(sqlite3_column_name(stmt, c)) + "="
                + (text ? std::string(reinterpret_cast<const char*>(text)) : "NULL") + "|";
        }
        out += "\n";
    }
    sqlite3_finalize(stmt);
    return out;
}

std::string summaryText(const store::StoreSummary& s)
{
    return std::to_string(s.runs) + "/" + std::to_string(s.steps) + "/" + std::to_string(s.externalRuns) + "/"
        + std::to_string(s.sensitivityScans);
}

} // namespace

class TestImport : public QObject {
    Q_OBJECT

private slots:
    void verlMapsEachKeyOntoItsEstimator();
    void verlReportsMalformedLinesByNumber();
    void mapReplacesBuiltInSource();
    void tinkerMapsSampledTokenEstimators();
    void tinkerAsyncEvaluationLinesMerge();
    void tinkerConfigProblemsAreReported_data();
    void tinkerConfigProblemsAreReported();
    void tinkerPipelineDepthOnlyWhenPresent();
    void unusableValuesAreReported();
    void readmeMappingTableMatchesCode();
    void csvReadsMappedColumns();
    void csvHeaderProblemsAreErrors();
    void fileWithoutUsableLineIsError();
    void mapEntriesAreChecked_data();
    void mapEntriesAreChecked();
    void aimetLayerNames_data();
    void aimetLayerNames();
    void aimetEnabledScores();
    void aimetDisabledAndLowerIsBetter();
    void aimetMse();
    void aimetErrors();
    void verlOffPolicyDiagnostics();
    void verlValidationAccuracyOfOneDataSource_data();
    void verlValidationAccuracyOfOneDataSource();
    void verlValidationAccuraciesOfSeveralDataSources();
    void verlImportanceWeightStatistics();
    void verlRejectionSamplingStatistics();
    void verlDistillationLosses();
    void verlValidationReward();
    void tinkerPerDatasetTeacherKl();
    void tinkerTagsAndEvaluation();
    void nemoRlMismatchKeys();
    void keyPatternsMatchTheirShape();
    void failedStoreLeavesWorkspaceUnchanged();
    void cliImportsLogEndToEnd();
    void cliFailuresLeaveWorkspaceUnchanged();
    void cliImportsAimetScan();
    void jobFileImportStoresWhatTheCommandStores();
    void importedRunsOnTheEstimatorAxes();
    void followStoresEachStepOnceThroughTruncationAndRotation_data();
    void followStoresEachStepOnceThroughTruncationAndRotation();
    void followOfAnAppendedLogStoresWhatImportStores();
    void followContinuesItsRunAndRefusesOthers();
};

void TestImport::verlMapsEachKeyOntoItsEstimator()
{
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl");
    // Step 0 is the validation before training: its line holds only the validation accuracy.
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2, 4, 5, 6, 7}));
    const std::map<std::int64_t, const TokenProbabilities*> batches = {{1, &kBatchA}, {2, &kBatchB}, {7, &kBatchC}};
    for (const auto& [step, batch] : batches) {
        const auto& m = stepOf(log, step);
        QVERIFY2(m.k1 && m.k3, qPrintable(QString("step %1 lacks k1 or k3").arg(step)));
        COMPARE_NEAR(*m.k1, k1(*batch));
        COMPARE_NEAR(*m.k3, k3(*batch));
        // verl logs no full-vocabulary KL; a probability difference must never stand in for it.
        QVERIFY(!m.mismatchKl);
        const auto extras = nlohmann::json::parse(m.extrasJson);
        COMPARE_NEAR(extras.at("prob_diff_mean").get<double>(), probDiffMean(*batch));
        COMPARE_NEAR(extras.at("prob_diff_max").get<double>(), probDiffMax(*batch));
        COMPARE_NEAR(extras.at("prob_diff_std").get<double>(), probDiffStd(*batch));
        QVERIFY(!extras.contains("k1") && !extras.contains("mismatch_kl"));
        if (step != 7) {
            COMPARE_NEAR(extras.at("chi2_token").get<double>(), chiSquare(*batch));
        } else {
            QVERIFY(!extras.contains("chi2_token")); // step 7 does not log it
        }
    }
    // The other measures, as logged. Step 2's second line (line 7) adds the distillation loss and replaces the
    // entropy of line 3.
    QCOMPARE(*stepOf(log, 1).entropy, 0.8512);
    QCOMPARE(*stepOf(log, 2).loss, 0.0425);
    QCOMPARE(*stepOf(log, 2).entropy, 0.8299);
    QVERIFY(!stepOf(log, 1).loss);
    QCOMPARE(*stepOf(log, 2).reward, 0.4375);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 7).extrasJson).at("pg_loss").get<double>(), -0.0088);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 1).extrasJson).at("step_time_s").get<double>(), 41.7);
    // The log's one validation accuracy key (one data source) is read as accuracy, at the steps that logged it.
    QCOMPARE(*stepOf(log, 0).accuracy, 0.412);
    QCOMPARE(*stepOf(log, 7).accuracy, 0.455);
    QVERIFY(!stepOf(log, 1).accuracy && !stepOf(log, 2).accuracy);
    QVERIFY(log.notes.empty());

    // The estimators recorded with the run.
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("k1").at("key").get<std::string>(), std::string("rollout_corr/kl"));
    QVERIFY(contains(estimators.at("k1").at("estimator").get<std::string>(), "log mu(y) - log pi(y)"));
    QVERIFY(contains(estimators.at("k3").at("estimator").get<std::string>(), "r - 1 - log r"));
    QVERIFY(contains(estimators.at("prob_diff_mean").at("estimator").get<std::string>(), "not a KL"));
    QCOMPARE(estimators.at("prob_diff_mean").at("unit").get<std::string>(), std::string("probability"));
    QCOMPARE(estimators.at("k1").at("steps").get<int>(), 4); // steps 1, 2, 6, 7 (dropped on 4 and 5)
    QCOMPARE(estimators.at("k3").at("steps").get<int>(), 5); // steps 1, 2, 4, 5, 7 (Infinity on 6)
    QCOMPARE(estimators.at("chi2_token").at("steps").get<int>(), 2);
    QCOMPARE(estimators.at("loss").at("key").get<std::string>(), std::string("actor/distillation/loss"));
    QVERIFY(!estimators.contains("mismatch_kl"));
    // Keys read by no mapping are listed, not stored.
    const std::set<std::string> unmapped(log.unmappedKeys.begin(), log.unmappedKeys.end());
    QVERIFY(unmapped.count("perf/throughput") && !unmapped.count("rollout_corr/training_ppl"));
    QVERIFY(!unmapped.count("val-core/openai/gsm8k/acc/mean@1"));
    // verl's sequence-level diagnostics have their own measures (verlOffPolicyDiagnostics): training_ppl here.
    QCOMPARE(estimators.at("training_ppl").at("steps").get<int>(), 2);
}

void TestImport::verlReportsMalformedLinesByNumber()
{
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl");
    QCOMPARE(log.linesRead, std::int64_t{10}); // 11 lines, one blank
    // Only lines without a usable step or mapped value are skipped.
    // (Line 1 holds the validation accuracy alone: read, not skipped.)
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{4, 5}));
    QVERIFY(contains(reasonOf(log, 4), "bad JSON"));
    QVERIFY(contains(reasonOf(log, 5), "no \"step\""));
    // An unusable value is dropped alone, with its line and key; the rest of its line is kept.
    // verl's file logger writes NaN as null (line 8): reported like any unusable value, not taken as "no value".
    QCOMPARE(droppedValues(log),
        (std::vector<std::string>{"6 rollout_corr/kl is the string \"n/a\", expected a number",
            "8 rollout_corr/kl is null (verl's file logger writes NaN and infinities as null), expected a finite number",
            "10 rollout_corr/k3_kl is Infinity, not a finite number"}));
    QCOMPARE(*stepOf(log, 4).k3, 0.0011);
    QCOMPARE(*stepOf(log, 4).entropy, 0.8302);
    QVERIFY(!stepOf(log, 4).k1);
    QCOMPARE(*stepOf(log, 5).k3, 0.0012);
    QVERIFY(!stepOf(log, 5).k1);
    QCOMPARE(*stepOf(log, 6).k1, 0.0024);
    QVERIFY(!stepOf(log, 6).k3);
    // Line 7 repeats step 2: merged into it, the later entropy kept and the replaced one listed.
    QCOMPARE(log.linesMerged, std::int64_t{1});
    QCOMPARE(log.conflicts.size(), size_t{1});
    const io::StepConflict& conflict = log.conflicts[0];
    QCOMPARE(conflict.step, std::int64_t{2});
    QCOMPARE(conflict.key, std::string("actor/entropy"));
    QCOMPARE(conflict.firstLine, std::int64_t{3});
    QCOMPARE(conflict.firstValue, 0.8407);
    QCOMPARE(conflict.line, std::int64_t{7});
    QCOMPARE(conflict.value, 0.8299);
    // Keys only one of the two lines has keep their value (step 2's k1 is still batch B's).
    COMPARE_NEAR(*stepOf(log, 2).k1, k1(kBatchB));
}

void TestImport::mapReplacesBuiltInSource()
{
    io::LogImportOptions options;
    options.map = {"val-core/openai/gsm8k/acc/mean@1=accuracy", "rollout_corr/kl=extra:raw_rollout_kl"};
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl", options);
    // Line 1 now has a mapped metric: step 0 is kept with its validation accuracy.
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2, 4, 5, 6, 7}));
    QCOMPARE(*stepOf(log, 0).accuracy, 0.412);
    QCOMPARE(*stepOf(log, 7).accuracy, 0.455);
    // rollout_corr/kl went to extras under the given name and k1 has no source any more.
    QVERIFY(!stepOf(log, 1).k1);
    COMPARE_NEAR(nlohmann::json::parse(stepOf(log, 1).extrasJson).at("raw_rollout_kl").get<double>(), k1(kBatchA));
    // Line 6's "n/a" under the remapped key is still dropped, by the key's name.
    QCOMPARE(log.dropped.at(0).line, std::int64_t{6});
    QCOMPARE(log.dropped.at(0).key, std::string("rollout_corr/kl"));
    QVERIFY(contains(log.dropped.at(0).reason, "is the string"));
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QVERIFY(estimators.at("accuracy").at("user_mapped").get<bool>());
    QVERIFY(!estimators.contains("k1"));
}

void TestImport::tinkerMapsSampledTokenEstimators()
{
    const auto log = io::importLog(io::LogSource::Tinker, kFixtures + "tinker_metrics.jsonl");
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2, 4}));
    const std::map<std::int64_t, const TokenProbabilities*> batches = {{0, &kBatchA}, {1, &kBatchB}, {4, &kBatchC}};
    for (const auto& [step, batch] : batches) {
        const auto& m = stepOf(log, step);
        COMPARE_NEAR(*m.k1, k1(*batch));
        // kl_sample_train_v2 is the half squared log ratio (k2), not k3: it must not land in the k3 column.
        QVERIFY(!m.k3 && !m.mismatchKl);
        const auto extras = nlohmann::json::parse(m.extrasJson);
        COMPARE_NEAR(extras.at("k2").get<double>(), k2(*batch));
        COMPARE_NEAR(*m.entropy, samplerEntropy(*batch));
    }
    QCOMPARE(*stepOf(log, 1).reward, 0.375);
    // env/all/correct is the training batch's fraction correct: train_accuracy, not the held-out accuracy.
    QVERIFY(!stepOf(log, 4).accuracy);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 4).extrasJson).at("train_accuracy").get<double>(), 0.5);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 0).extrasJson).at("teacher_kl").get<double>(), 0.731);
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{4, 5, 6, 8}));
    // Line 3's reward is a string: dropped alone, the line's k1 kept.
    QCOMPARE(droppedValues(log),
        (std::vector<std::string>{"3 env/all/reward/total is the string \"0.5\", expected a number"}));
    QCOMPARE(*stepOf(log, 2).k1, 0.001);
    QVERIFY(!stepOf(log, 2).reward);
    QVERIFY(contains(reasonOf(log, 4), "no \"step\""));
    QVERIFY(contains(reasonOf(log, 5), "expected a JSON object"));
    QVERIFY(contains(reasonOf(log, 6), "step 1.5 is not a non-negative integer"));
    // A line whose only mapped value is unusable is skipped, naming the value.
    QVERIFY(contains(reasonOf(log, 8), "optim/kl_sample_train_v1 is -Infinity, not a finite number"));
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("k1").at("key").get<std::string>(), std::string("optim/kl_sample_train_v1"));
    QCOMPARE(estimators.at("k2").at("key").get<std::string>(), std::string("optim/kl_sample_train_v2"));
    // kl_sample_train_* includes policy drift with substeps or async training; teacher_kl uses the sampler's mu.
    QVERIFY(contains(estimators.at("k1").at("estimator").get<std::string>(), "includes policy drift"));
    QVERIFY(contains(estimators.at("k2").at("estimator").get<std::string>(), "num_substeps > 1 or async"));
    const std::string teacher = estimators.at("teacher_kl").at("estimator").get<std::string>();
    QVERIFY(contains(teacher, "not a mismatch"));
    QVERIFY(contains(teacher, "log mu(y) - log teacher(y)"));
    QVERIFY(contains(teacher, "sampler's log-probabilities"));
    // No config.json beside this fixture: nothing recorded, no problem reported.
    QVERIFY(!log.tinkerConfig);
    QVERIFY(log.tinkerConfigProblem.empty());
}

void TestImport::tinkerAsyncEvaluationLinesMerge()
{
    // Tinker's asynchronous trainer: the evaluation of sampler step s is logged on its own line with step s, before
    // the training line of step s. Reading the evaluation's accuracy must not drop the training line's metrics.
    const std::string file = kFixtures + "tinker_async/metrics.jsonl";
    io::LogImportOptions options;
    options.map = {"test/env/all/correct=accuracy"};
    const auto log = io::importLog(io::LogSource::Tinker, file, options);
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2}));
    QVERIFY(log.skipped.empty());
    QVERIFY(log.dropped.empty());
    QVERIFY(log.conflicts.empty()); // the two lines of a step share no key
    QCOMPARE(log.linesMerged, std::int64_t{2});
    const std::map<std::int64_t, const TokenProbabilities*> batches = {{0, &kBatchA}, {1, &kBatchB}, {2, &kBatchC}};
    for (const auto& [step, batch] : batches) {
        const auto& m = stepOf(log, step);
        QVERIFY2(m.k1, qPrintable(QString("step %1 lost its training metrics").arg(step)));
        COMPARE_NEAR(*m.k1, k1(*batch));
        COMPARE_NEAR(nlohmann::json::parse(m.extrasJson).at("k2").get<double>(), k2(*batch));
        COMPARE_NEAR(*m.entropy, samplerEntropy(*batch));
    }
    QVERIFY(!stepOf(log, 0).accuracy); // no evaluation line for step 0
    QCOMPARE(*stepOf(log, 1).accuracy, 0.41);
    QCOMPARE(*stepOf(log, 2).accuracy, 0.47);
    QCOMPARE(*stepOf(log, 2).reward, 0.5);

    // config.json beside metrics.jsonl: num_substeps 2 and async_config, both of which put policy drift into
    // kl_sample_train_*.
    QVERIFY2(log.tinkerConfig, log.tinkerConfigProblem.c_str());
    const io::TinkerRunConfig& config = *log.tinkerConfig;
    QCOMPARE(config.file, kFixtures + "tinker_async/config.json");
    QCOMPARE(config.numSubsteps, std::optional<std::int64_t>(2));
    QVERIFY(config.asyncRecorded);
    QCOMPARE(config.maxStepsOffPolicy, std::optional<std::int64_t>(2));
    QCOMPARE(config.groupsPerBatch, std::optional<std::int64_t>(32));
    QVERIFY(!config.pipelineDepth); // not in released tinker-cookbook's AsyncConfig
    QVERIFY(config.includesPolicyDrift());
    const auto record = nlohmann::json::parse(config.json());
    QCOMPARE(record.at("num_substeps").get<int>(), 2);
    QCOMPARE(record.at("async_config").at("max_steps_off_policy").get<int>(), 2);
    QVERIFY(!record.at("async_config").contains("pipeline_depth")); // recorded only when a config.json has it
    QVERIFY(record.at("kl_sample_train_includes_policy_drift").get<bool>());
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QVERIFY2(contains(estimators.at("k1").at("estimator").get<std::string>(),
                 "(this run's config.json: num_substeps 2, async max_steps_off_policy 2: includes policy drift)"),
        estimators.at("k1").at("estimator").get<std::string>().c_str());
    QVERIFY(!contains(estimators.at("accuracy").at("estimator").get<std::string>(), "config.json"));

    // Without --map the evaluation's test/env/all/correct (the one key of <evaluator>/env/all/correct) is the
    // accuracy and test/env/all/reward/total the evaluation reward; env/all/correct of the training lines is the
    // training batch's train_accuracy.
    const auto plain = io::importLog(io::LogSource::Tinker, file);
    QCOMPARE(stepNumbers(plain), (std::vector<std::int64_t>{0, 1, 2}));
    QVERIFY(plain.skipped.empty());
    QVERIFY(plain.notes.empty());
    QVERIFY(!stepOf(plain, 0).accuracy);
    QCOMPARE(*stepOf(plain, 1).accuracy, 0.41);
    QCOMPARE(*stepOf(plain, 2).accuracy, 0.47);
    QCOMPARE(nlohmann::json::parse(stepOf(plain, 1).extrasJson).at("eval_reward").get<double>(), 0.41);
    QCOMPARE(nlohmann::json::parse(stepOf(plain, 1).extrasJson).at("train_accuracy").get<double>(), 0.375);
    QVERIFY(contains(nlohmann::json::parse(plain.estimatorJson()).at("accuracy").at("estimator").get<std::string>(),
        "held-out evaluation accuracy"));

    // The CLI stores the configuration with the run and prints it.
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const auto result = runCli({"--workspace", workspace, "--json", "import", "tinker", file, "--map",
        "test/env/all/correct=accuracy"});
    QVERIFY2(result.code == 0, result.err.c_str());
    const auto out = parseJson(result.out);
    QCOMPARE(out.at("tinker_config").at("num_substeps").get<int>(), 2);
    QCOMPARE(out.at("lines_merged").get<int>(), 2);
    store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
    const auto stored = nlohmann::json::parse(store.run(out.at("run_id").get<std::int64_t>())->configJson);
    QCOMPARE(stored.at("tinker_config").at("async_config").at("groups_per_batch").get<int>(), 32);
    QVERIFY(stored.at("tinker_config").at("kl_sample_train_includes_policy_drift").get<bool>());
    const auto human = runCli({"--workspace", workspace, "import", "tinker", file});
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY2(contains(human.out, "num_substeps 2, async_config {\"groups_per_batch\":32,\"max_steps_off_policy\":2} "
                                 "(kl_sample_train_* includes policy drift)"),
        human.out.c_str());
}

void TestImport::tinkerConfigProblemsAreReported_data()
{
    QTest::addColumn<QString>("config"); // config.json's text; "<dir>": a directory named config.json
    QTest::addColumn<QString>("problem"); // empty: read without a problem
    QTest::addColumn<bool>("drift");
    QTest::newRow("synchronous") << R"({"num_substeps": 1, "async_config": null})" << "" << false;
    QTest::newRow("substeps only") << R"({"num_substeps": 4})" << "" << true;
    QTest::newRow("async at 0 steps off policy")
        << R"({"num_substeps": 1, "async_config": {"max_steps_off_policy": 0, "groups_per_batch": 8}})" << ""
        << false;
    // pipeline_depth is not in released tinker-cookbook (rl/train.py AsyncConfig at v0.5.5,
    // 9dfcc3a2cf44432d621a01005073dc6d76a1e87a); a config.json from the unmerged async-rl-blocking-staleness branch
    // has it, and it is read and recorded then (tinkerPipelineDepthOnlyWhenPresent).
    QTest::newRow("unreleased pipeline_depth")
        << R"({"num_substeps": 1, "async_config": {"max_steps_off_policy": 2, "groups_per_batch": 8, "pipeline_depth": 1}})"
        << "" << true;
    QTest::newRow("bad JSON") << "{\n  \"num_substeps\": 2,\n  \"async_config\": }" << "config.json:line 3, column 19: bad JSON"
                              << false;
    QTest::newRow("substeps text") << R"({"num_substeps": "two"})"
                                   << "config.json:num_substeps: is the string \"two\", expected a whole number of 1 or more"
                                   << false;
    QTest::newRow("substeps zero") << R"({"num_substeps": 0})" << "num_substeps: is 0, expected a whole number of 1 or more"
                                   << false;
    QTest::newRow("async list") << R"({"async_config": [2]})" << "async_config: is a JSON array, expected null or an object"
                                << false;
    QTest::newRow("async without groups") << R"({"async_config": {"max_steps_off_policy": 2}})"
                                          << "async_config.groups_per_batch: is missing" << false;
    QTest::newRow("async NaN") << R"({"async_config": {"max_steps_off_policy": NaN, "groups_per_batch": 8}})"
                               << "async_config.max_steps_off_policy: is NaN" << false;
    QTest::newRow("not an object") << "[1, 2]" << "expected a JSON object, got a JSON array" << false;
    QTest::newRow("directory") << "<dir>" << "config.json" << false;
}

void TestImport::tinkerConfigProblemsAreReported()
{
    QFETCH(QString, config);
    QFETCH(QString, problem);
    QFETCH(bool, drift);
    QTemporaryDir dir;
    const std::string log = writeFile(dir, "metrics.jsonl", "{\"step\": 0, \"optim/kl_sample_train_v1\": 0.01}\n");
    if (config == "<dir>") {
        QVERIFY(QDir(dir.path()).mkdir("config.json"));
    } else {
        writeFile(dir, "config.json", config.toStdString());
    }
    const auto imported = io::importLog(io::LogSource::Tinker, log); // a bad config.json never fails the import
    QCOMPARE(imported.steps.size(), size_t{1});
    if (problem.isEmpty()) {
        QVERIFY2(imported.tinkerConfig, imported.tinkerConfigProblem.c_str());
        QCOMPARE(imported.tinkerConfig->includesPolicyDrift(), drift);
        return;
    }
    QVERIFY(!imported.tinkerConfig);
    QVERIFY2(contains(imported.tinkerConfigProblem, problem.toStdString()), imported.tinkerConfigProblem.c_str());
    QVERIFY2(contains(imported.tinkerConfigProblem, dir.path().toStdString() + "/config.json"),
        imported.tinkerConfigProblem.c_str());
    // The run's config_json says why nothing was recorded.
    const auto record = nlohmann::json::parse(imported.runConfigJson(log, {}));
    QVERIFY(!record.contains("tinker_config"));
    QCOMPARE(record.at("tinker_config_problem").get<std::string>(), imported.tinkerConfigProblem);
}

void TestImport::tinkerPipelineDepthOnlyWhenPresent()
{
    // thinking-machines-lab/tinker-cookbook: released rl/train.py AsyncConfig (v0.5.5,
    // 9dfcc3a2cf44432d621a01005073dc6d76a1e87a) has max_steps_off_policy and groups_per_batch only; pipeline_depth is
    // on the unmerged branch async-rl-blocking-staleness (0d7fee56c02c97e2d82c1ec44558033054830427, CHANGELOG.md "a
    // new pipeline_depth"). The record names it only when the run's config.json has it.
    QTemporaryDir dir;
    const std::string log = writeFile(dir, "metrics.jsonl", "{\"step\": 0, \"optim/kl_sample_train_v1\": 0.01}\n");
    writeFile(dir, "config.json",
        R"({"num_substeps": 1, "async_config": {"max_steps_off_policy": 2, "groups_per_batch": 8, "pipeline_depth": 1}})");
    const auto branch = io::importLog(io::LogSource::Tinker, log);
    QVERIFY2(branch.tinkerConfig, branch.tinkerConfigProblem.c_str());
    QCOMPARE(branch.tinkerConfig->pipelineDepth, std::optional<std::int64_t>(1));
    QCOMPARE(nlohmann::json::parse(branch.tinkerConfig->json()).at("async_config").at("pipeline_depth").get<int>(), 1);
    writeFile(dir, "config.json", R"({"num_substeps": 1, "async_config": {"max_steps_off_policy": 2, "groups_per_batch": 8}})");
    const auto released = io::importLog(io::LogSource::Tinker, log);
    QVERIFY2(released.tinkerConfig, released.tinkerConfigProblem.c_str());
    QVERIFY(!released.tinkerConfig->pipelineDepth);
    const auto record = nlohmann::json::parse(released.tinkerConfig->json()).at("async_config");
    QCOMPARE(record, nlohmann::json({{"max_steps_off_policy", 2}, {"groups_per_batch", 8}}));
}

void TestImport::unusableValuesAreReported()
{
    QTemporaryDir dir;
    // A null step cannot be placed; a null value is dropped and named; a null unmapped key is not reported.
    const std::string tinker = writeFile(dir, "metrics.jsonl",
        "{\"step\": null, \"optim/kl_sample_train_v1\": 0.01}\n"
        "{\"step\": 3, \"optim/kl_sample_train_v1\": null, \"optim/entropy\": 0.5, \"extra/key\": null}\n");
    const auto log = io::importLog(io::LogSource::Tinker, tinker);
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{3}));
    QVERIFY(contains(reasonOf(log, 1), "the step is null"));
    QCOMPARE(droppedValues(log), (std::vector<std::string>{"2 optim/kl_sample_train_v1 is null, expected a number"}));
    // An integer measure takes whole numbers that fit its 64-bit column; others are dropped by name.
    const std::string csv = writeFile(dir, "lag.csv", "step,lag,k1\n1,2,0.1\n2,1.5,0.2\n3,1e300,0.3\n");
    io::LogImportOptions options;
    options.map = {"lag=staleness"};
    const auto lag = io::importLog(io::LogSource::Csv, csv, options);
    QCOMPARE(stepNumbers(lag), (std::vector<std::int64_t>{1, 2, 3}));
    QCOMPARE(*stepOf(lag, 1).staleness, std::int64_t{2});
    QVERIFY(!stepOf(lag, 2).staleness && !stepOf(lag, 3).staleness);
    QCOMPARE(droppedValues(lag), (std::vector<std::string>{"3 lag is 1.5, expected an integer (staleness)",
                                     "4 lag is 1e+300, expected an integer (staleness)"}));
    // verl: a line whose only mapped value is null is skipped, and a file of such lines is an error naming them.
    const std::string verl = writeFile(dir, "verl.jsonl", "{\"step\": 1, \"data\": {\"rollout_corr/kl\": null}}\n");
    try {
        io::importLog(io::LogSource::Verl, verl);
        QFAIL("a file whose only value is null was accepted");
    } catch (const InputError& error) {
        QVERIFY2(contains(error.detail(), "line 1: rollout_corr/kl is null (verl's file logger writes NaN"), error.what());
    }
}

void TestImport::readmeMappingTableMatchesCode()
{
    // docs/exporting-and-importing.md's import table lists one logged key per row: "| verl `KEY` | `MEASURE` ... |
    // ... |". The rows must be exactly the built-in table (knownKeys), so that the page never names a key the code
    // does not read.
    std::ifstream readme(std::string(MISMATCH_SOURCE_DIR) + "/docs/exporting-and-importing.md");
    QVERIFY(readme.good());
    std::set<std::string> documented;
    std::map<std::string, std::string> rowOf; // "SOURCE KEY" -> the row
    std::string line;
    bool inTable = false;
    while (std::getline(readme, line)) {
        if (line == "| source key | measure | estimator |") {
            inTable = true;
            continue;
        }
        if (!inTable) continue;
        if (line.rfind("|", 0) != 0) break;
        if (line.rfind("| ---", 0) == 0) continue;
        const auto firstTick = line.find('`');
        const auto secondTick = line.find('`', firstTick + 1);
        const auto thirdTick = line.find('`', secondTick + 1);
        const auto fourthTick = line.find('`', thirdTick + 1);
        QVERIFY2(fourthTick != std::string::npos, line.c_str());
        const std::string source = line.substr(2, firstTick - 3);
        documented.insert(source + " " + line.substr(firstTick + 1, secondTick - firstTick - 1) + " -> "
            + line.substr(thirdTick + 1, fourthTick - thirdTick - 1));
        rowOf[source + " " + line.substr(firstTick + 1, secondTick - firstTick - 1)] = line;
    }
    std::set<std::string> code;
    for (const auto& [source, name] : {std::pair{io::LogSource::Verl, "verl"}, std::pair{io::LogSource::Tinker, "Tinker"},
             std::pair{io::LogSource::TensorBoard, "NeMo-RL"}}) {
        for (const auto& known : io::knownKeys(source)) {
            // An event file's table holds verl's keys too (verl's tensorboard logger); the page lists them once.
            if (known.source == source) {
                code.insert(std::string(name) + " " + known.key + " -> " + known.measure);
            }
        }
        // The key patterns (verl's val-core/<data source>/acc/mean@<N>) are rows of the same table: the measure
        // (a pattern without one, its series) first, and the series each matching key is kept under in the row.
        for (const auto& pattern : io::knownKeyPatterns(source)) {
            if (pattern.source != source) continue;
            const std::string row = std::string(name) + " " + pattern.key;
            code.insert(row + " -> " + (pattern.measure.empty() ? pattern.series : pattern.measure));
            const auto documentedRow = rowOf.find(row);
            QVERIFY2(documentedRow == rowOf.end() || contains(documentedRow->second, "`" + pattern.series + "`"),
                ("the docs row of " + row + " does not name its series " + pattern.series).c_str());
        }
    }
    QVERIFY(!documented.empty());
    for (const auto& row : documented) QVERIFY2(code.count(row), ("docs row not in the code: " + row).c_str());
    for (const auto& row : code) QVERIFY2(documented.count(row), ("mapping missing from docs/exporting-and-importing.md: " + row).c_str());
}

void TestImport::csvReadsMappedColumns()
{
    io::LogImportOptions options;
    options.map = {"full_kl=mismatch_kl", "reward_mean=reward", "wall=wall_time_s"};
    const auto log = io::importLog(io::LogSource::Csv, kFixtures + "generic.csv", options);
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 3, 4, 8}));
    // The verl key in the header is read like verl's own log.
    COMPARE_NEAR(*stepOf(log, 0).k1, k1(kBatchA));
    COMPARE_NEAR(*stepOf(log, 8).k1, k1(kBatchC));
    QCOMPARE(*stepOf(log, 8).reward, 0.625);
    QCOMPARE(*stepOf(log, 8).wallTimeSeconds, 109.4);
    QCOMPARE(log.linesRead, std::int64_t{10});
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{4, 8, 9, 10}));
    QVERIFY(contains(reasonOf(log, 4), "3 fields, expected 6"));
    // Line 5's "abc" and line 6's nan are dropped alone; the other columns of those lines are kept.
    QCOMPARE(droppedValues(log), (std::vector<std::string>{"5 rollout_corr/kl is \"abc\", expected a number",
                                      "6 full_kl is nan, not a finite number"}));
    QCOMPARE(*stepOf(log, 3).mismatchKl, 0.005);
    QVERIFY(!stepOf(log, 3).k1);
    QCOMPARE(*stepOf(log, 4).k1, 0.002);
    QVERIFY(!stepOf(log, 4).mismatchKl);
    // Line 7 logs step 1 again: merged, its values win, and each replaced value is listed (header order).
    QCOMPARE(*stepOf(log, 1).mismatchKl, 0.002);
    QCOMPARE(*stepOf(log, 1).k1, 0.001);
    QCOMPARE(log.linesMerged, std::int64_t{1});
    std::vector<std::string> conflictKeys;
    for (const auto& c : log.conflicts) {
        QCOMPARE(c.step, std::int64_t{1});
        QCOMPARE(c.firstLine, std::int64_t{3});
        QCOMPARE(c.line, std::int64_t{7});
        conflictKeys.push_back(c.key);
    }
    QCOMPARE(conflictKeys, (std::vector<std::string>{"rollout_corr/kl", "full_kl", "reward_mean", "wall"}));
    QCOMPARE(log.conflicts[1].firstValue, 0.0957);
    QCOMPARE(log.conflicts[1].value, 0.002);
    QVERIFY(contains(reasonOf(log, 8), "step 5.5"));
    QVERIFY(contains(reasonOf(log, 9), "step column step is empty"));
    QVERIFY(contains(reasonOf(log, 10), "unterminated quoted field"));
    QCOMPARE(log.unmappedKeys, (std::vector<std::string>{"notes"}));

    // Without --map only the recognised header is read; the nan of the unread column is not reported, and line 5,
    // whose only read value is "abc", is skipped naming it.
    const auto plain = io::importLog(io::LogSource::Csv, kFixtures + "generic.csv");
    QCOMPARE(stepNumbers(plain), (std::vector<std::int64_t>{0, 1, 4, 8}));
    QVERIFY(!stepOf(plain, 1).mismatchKl);
    QVERIFY(plain.dropped.empty());
    QVERIFY(contains(reasonOf(plain, 5), "rollout_corr/kl is \"abc\", expected a number"));
}

void TestImport::csvHeaderProblemsAreErrors()
{
    QTemporaryDir dir;
    const auto expectError = [&](const std::string& text, const std::vector<std::string>& map, const std::string& part) {
        const std::string path = writeFile(dir, "log.csv", text);
        io::LogImportOptions options;
        options.map = map;
        try {
            io::importLog(io::LogSource::Csv, path, options);
        } catch (const InputError& error) {
            QVERIFY2(contains(error.what(), part) && contains(error.what(), path), error.what());
            return;
        }
        QFAIL(("no error for " + part).c_str());
    };
    expectError("iteration,k1\n1,0.5\n", {}, "no step column");
    expectError("step,k1\n1,0.5\n", {"kl_full=mismatch_kl"}, "--map names the column kl_full");
    expectError("step,rollout_corr/kl,optim/kl_sample_train_v1\n1,0.5,0.4\n", {}, "both map to k1");
    expectError("step,k1,k1\n1,0.5,0.4\n", {}, "appears twice");
    // The step column can be named with --map; two columns for one measure resolve with extra:NAME.
    const std::string path = writeFile(dir, "iter.csv", "iteration,rollout_corr/kl,optim/kl_sample_train_v1\n3,0.5,0.4\n");
    io::LogImportOptions options;
    options.map = {"iteration=step", "optim/kl_sample_train_v1=extra:tinker_k1"};
    const auto log = io::importLog(io::LogSource::Csv, path, options);
    QCOMPARE(log.steps.at(0).step, std::int64_t{3});
    QCOMPARE(*log.steps.at(0).k1, 0.5);
    QCOMPARE(nlohmann::json::parse(log.steps.at(0).extrasJson).at("tinker_k1").get<double>(), 0.4);
}

void TestImport::fileWithoutUsableLineIsError()
{
    QTemporaryDir dir;
    const std::string path = writeFile(dir, "broken.jsonl", "{\"step\": 1, \"data\": {\"rollout_corr/kl\": NaN}}\nnot json\n");
    try {
        io::importLog(io::LogSource::Verl, path);
        QFAIL("a file without a usable line was accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.file(), path);
        QVERIFY2(contains(error.detail(), "no usable line (2 data lines read"), error.what());
        QVERIFY2(contains(error.detail(), "line 1: rollout_corr/kl is NaN"), error.what());
    }
    QVERIFY_EXCEPTION_THROWN(io::importLog(io::LogSource::Tinker, writeFile(dir, "empty.jsonl", "\n\n")), InputError);
    QVERIFY_EXCEPTION_THROWN(io::importLog(io::LogSource::Csv, dir.path().toStdString() + "/missing.csv"), InputError);
}

void TestImport::mapEntriesAreChecked_data()
{
    QTest::addColumn<QString>("entry");
    QTest::addColumn<QString>("problem"); // empty: valid
    QTest::newRow("k1") << "rollout_corr/kl=k1" << "";
    QTest::newRow("key with =") << "a=b=k3" << "";
    QTest::newRow("extra") << "perf/throughput=extra:throughput" << "";
    QTest::newRow("no =") << "rollout_corr/kl" << "expected COLUMN=MEASURE";
    QTest::newRow("no measure") << "rollout_corr/kl=" << "expected COLUMN=MEASURE";
    QTest::newRow("unknown") << "x=kl" << "unknown measure 'kl'";
    QTest::newRow("extra hides a measure") << "x=extra:k1" << "would hide the measure k1";
    QTest::newRow("empty extra") << "x=extra:" << "needs a name";
}

void TestImport::mapEntriesAreChecked()
{
    QFETCH(QString, entry);
    QFETCH(QString, problem);
    const std::string found = io::checkMapEntry(entry.toStdString());
    if (problem.isEmpty()) {
        QVERIFY2(found.empty(), found.c_str());
    } else {
        QVERIFY2(contains(found, problem.toStdString()), found.c_str());
    }
}

void TestImport::aimetLayerNames_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("layer"); // -2: not a cell
    QTest::addColumn<QString>("group");
    QTest::newRow("down") << "model.layers.3.mlp.down_proj" << 3 << "down";
    QTest::newRow("q") << "model.layers.12.self_attn.q_proj" << 12 << "q";
    QTest::newRow("gate") << "model.layers.0.mlp.gate_proj" << 0 << "gate";
    QTest::newRow("onnx node") << "/model/layers.5/self_attn/o_proj/MatMul" << 5 << "o";
    QTest::newRow("embedding") << "model.embed_tokens" << -1 << "embed_tokens";
    QTest::newRow("lm_head") << "lm_head" << -1 << "lm_head";
    QTest::newRow("norm") << "model.layers.3.input_layernorm" << -2 << "";
    QTest::newRow("activation") << "model.layers.3.mlp.act_fn" << -2 << "";
    QTest::newRow("longer suffix") << "model.layers.3.mlp.down_proj_extra" << -2 << "";
    QTest::newRow("rotary") << "model.layers.3.self_attn.rotary_emb" << -2 << "";
}

void TestImport::aimetLayerNames()
{
    QFETCH(QString, name);
    QFETCH(int, layer);
    QFETCH(QString, group);
    const auto cell = io::sensitivityCellOf(name.toStdString());
    if (layer == -2) {
        QVERIFY(!cell);
        return;
    }
    QVERIFY(cell);
    QCOMPARE(cell->first, std::int64_t{layer});
    QCOMPARE(QString::fromStdString(cell->second), group);
}

void TestImport::aimetEnabledScores()
{
    const auto imported = io::importAimetSensitivity(kFixtures + "per_layer_quant_enabled.json");
    QVERIFY(imported.analysis == io::AimetAnalysis::QuantEnabled); // from the file name
    QCOMPARE(imported.entriesRead, std::int64_t{18});
    // The fixture's usable scores, listed again: (layer, group) -> eval score with only that module quantized.
    const std::map<std::pair<std::int64_t, std::string>, double> scores = {{{-1, "embed_tokens"}, 0.7125},
        {{0, "q"}, 0.7102}, {{0, "k"}, 0.7098}, {{0, "v"}, 0.7011}, {{0, "o"}, 0.7089}, {{0, "gate"}, 0.7077},
        {{0, "up"}, 0.7081}, {{0, "down"}, 0.6420}, {{1, "q"}, 0.7110}, {{1, "k"}, 0.7106}, {{1, "v"}, 0.7064},
        {{1, "gate"}, 0.7093}, {{1, "up"}, 0.7090}, {{1, "down"}, 0.6905}, {{-1, "lm_head"}, 0.6988}};
    double best = 0;
    for (const auto& [cell, score] : scores) best = std::max(best, score);
    QCOMPARE(imported.cells.size(), scores.size());
    for (const auto& cell : imported.cells) {
        const auto found = scores.find({cell.layer, cell.moduleGroup});
        QVERIFY2(found != scores.end(), cell.name.c_str());
        QCOMPARE(cell.value, found->second);
        // No float score given: sensitivity is the drop from the best layer.
        COMPARE_NEAR(cell.sensitivity, best - found->second);
    }
    QCOMPARE(imported.reference, best);
    // Norm, activation and the NaN score are reported, not stored.
    std::map<std::string, std::string> skipped;
    for (const auto& s : imported.skipped) skipped[s.name] = s.reason;
    QCOMPARE(skipped.size(), size_t{3});
    QVERIFY(contains(skipped["model.layers.1.self_attn.o_proj"], "NaN is not a finite number"));
    QVERIFY(contains(skipped["model.layers.0.mlp.act_fn"], "not a quantized module"));
    const auto config = nlohmann::json::parse(imported.configJson);
    QVERIFY(contains(config.at("unit").get<std::string>(), "not nats"));
    QCOMPARE(config.at("not_nats").get<bool>(), true);
    QCOMPARE(config.at("reference").at("kind").get<std::string>(), std::string("best layer in the file"));

    // With the float model's score the drop is measured from it.
    io::AimetImportOptions options;
    options.referenceScore = 0.72;
    options.scheme = "int8 w8a8";
    const auto given = io::importAimetSensitivity(kFixtures + "per_layer_quant_enabled.json", options);
    for (const auto& cell : given.cells) {
        COMPARE_NEAR(cell.sensitivity, 0.72 - scores.at({cell.layer, cell.moduleGroup}));
    }
    QCOMPARE(given.format, std::string("aimet:int8 w8a8"));
}

void TestImport::aimetDisabledAndLowerIsBetter()
{
    QTemporaryDir dir;
    // Perplexity with every layer quantized except the named one (lower is better).
    const std::string path = writeFile(dir, "per_layer_quant_disabled.json",
        "{\"model.layers.0.mlp.down_proj\": 9.5, \"model.layers.0.self_attn.q_proj\": 11.75, "
        "\"model.layers.1.mlp.down_proj\": 10.25}");
    io::AimetImportOptions options;
    options.lowerIsBetter = true;
    const auto imported = io::importAimetSensitivity(path, options);
    QVERIFY(imported.analysis == io::AimetAnalysis::QuantDisabled);
    // Reference: the worst (highest) perplexity, 11.75; recovering to 9.5 by keeping layer 0's down_proj in float
    // makes it the most sensitive.
    std::map<std::string, double> sensitivity;
    for (const auto& c : imported.cells) sensitivity[std::to_string(c.layer) + c.moduleGroup] = c.sensitivity;
    COMPARE_NEAR(sensitivity["0down"], 11.75 - 9.5);
    COMPARE_NEAR(sensitivity["0q"], 0.0);
    COMPARE_NEAR(sensitivity["1down"], 11.75 - 10.25);
    // A given fully quantized perplexity replaces the worst layer.
    options.referenceScore = 12.0;
    const auto given = io::importAimetSensitivity(path, options);
    for (const auto& c : given.cells) {
        if (c.layer == 0 && c.moduleGroup == "down") COMPARE_NEAR(c.sensitivity, 12.0 - 9.5);
    }
}

void TestImport::aimetMse()
{
    QTemporaryDir dir;
    const std::string path = writeFile(dir, "per_layer_mse_loss.json",
        "{\"model.layers.0.mlp.up_proj\": 0.0031, \"model.layers.0.mlp.down_proj\": -0.5, \"lm_head\": 0.0102}");
    const auto imported = io::importAimetSensitivity(path);
    QVERIFY(imported.analysis == io::AimetAnalysis::MseLoss);
    QCOMPARE(imported.cells.size(), size_t{2});
    QCOMPARE(imported.cells[0].sensitivity, 0.0031);
    QCOMPARE(imported.cells[1].sensitivity, 0.0102);
    QVERIFY(contains(imported.skipped.at(0).reason, "negative"));
    io::AimetImportOptions options;
    options.referenceScore = 1.0;
    QVERIFY_EXCEPTION_THROWN(io::importAimetSensitivity(path, options), InputError);
}

void TestImport::aimetErrors()
{
    QTemporaryDir dir;
    const auto expectError = [&](const std::string& name, const std::string& text, const std::string& part) {
        const std::string path = writeFile(dir, name, text);
        try {
            io::importAimetSensitivity(path);
        } catch (const InputError& error) {
            QVERIFY2(contains(error.what(), part) && error.file() == path, error.what());
            return;
        }
        QFAIL(("no error for " + name).c_str());
    };
    expectError("scores.json", "{\"lm_head\": 0.5}", "--analysis enabled|disabled|mse");
    try {
        io::importAimetSensitivity(writeFile(dir, "per_layer_quant_enabled.json", "{\n  \"lm_head\": 0.5,\n  \"x\": }"));
        QFAIL("truncated JSON accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.location(), std::string("3:8")); // line 3, the column of the stray brace
    }
    expectError("per_layer_quant_enabled.json", "[0.5, 0.6]", "expected one JSON object");
    expectError("per_layer_quant_enabled.json", "{\"model.norm\": 0.5}", "no usable layer entry");
}

void TestImport::failedStoreLeavesWorkspaceUnchanged()
{
    QTemporaryDir dir;
    store::RunStore store = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    // Something already there.
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl");
    store::ExternalRunSpec spec{"first", "verl", "verl_metrics.jsonl", "{}", log.estimatorJson()};
    const auto first = store::storeExternalRun(store, spec, log.steps);
    const std::string rowsBefore = dumpRows(store.handle());
    const std::string summaryBefore = summaryText(store.summary());

    // A repeated step fails on its insert, after the runs and external_runs rows and one step were written.
    std::vector<store::StepMetrics> steps = log.steps;
    steps.push_back(steps.front());
    spec.name = "second";
    QVERIFY_EXCEPTION_THROWN(store::storeExternalRun(store, spec, steps), StoreError);
    QCOMPARE(dumpRows(store.handle()), rowsBefore);
    QCOMPARE(summaryText(store.summary()), summaryBefore);

    // A repeated sensitivity cell fails after the run and the scan row were written.
    store::ExternalScanSpec scan;
    scan.format = "aimet:test";
    scan.cells = {{0, "down", 0.64, 0.07}, {0, "down", 0.65, 0.06}};
    QVERIFY_EXCEPTION_THROWN(store::storeExternalRun(store, spec, {}, scan), StoreError);
    QCOMPARE(dumpRows(store.handle()), rowsBefore);
    QCOMPARE(summaryText(store.summary()), summaryBefore);

    // The first import reads back as stored, with its provenance.
    const auto external = store::externalRun(store, first.runId);
    QVERIFY(external);
    QCOMPARE(external->source, std::string("verl"));
    QCOMPARE(store.run(first.runId)->kind, std::string("external"));
    QVERIFY(store.run(first.runId)->status == store::RunStatus::Finished);
    QCOMPARE(store.stepsAfter(first.runId).size(), size_t{7});
}

void TestImport::cliImportsLogEndToEnd()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const auto result = runCli({"--workspace", workspace, "--json", "import", "verl", kFixtures + "verl_metrics.jsonl",
        "--name", "big verl run"});
    QVERIFY2(result.code == 0, result.err.c_str());
    const auto out = parseJson(result.out);
    // The whole --json output (tests/cli/fixtures/import-verl.json); the figures below are checked on their own.
    std::vector<std::string> differences
        = test::goldenDifferences(out, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/import-verl.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    QCOMPARE(out.at("kind").get<std::string>(), std::string("external"));
    QCOMPARE(out.at("lines_read").get<int>(), 10);
    QCOMPARE(out.at("steps_imported").get<int>(), 7); // step 0: the validation accuracy alone
    QCOMPARE(out.at("lines_skipped").get<int>(), 2);
    std::vector<int> lines;
    for (const auto& s : out.at("skipped")) lines.push_back(s.at("line").get<int>());
    QCOMPARE(lines, (std::vector<int>{4, 5}));
    QCOMPARE(out.at("lines_merged").get<int>(), 1);
    QCOMPARE(out.at("dropped_values").size(), size_t{3});
    QCOMPARE(out.at("dropped_values")[1].at("line").get<int>(), 8);
    QCOMPARE(out.at("dropped_values")[1].at("key").get<std::string>(), std::string("rollout_corr/kl"));
    QCOMPARE(out.at("conflicts").size(), size_t{1});
    QCOMPARE(out.at("conflicts")[0].at("key").get<std::string>(), std::string("actor/entropy"));
    QCOMPARE(out.at("conflicts")[0].at("first_line").get<int>(), 3);
    std::map<std::string, std::string> estimatorOf;
    for (const auto& m : out.at("metrics")) estimatorOf[m.at("measure").get<std::string>()] = m.at("estimator").get<std::string>();
    QVERIFY(contains(estimatorOf.at("k1"), "log mu(y) - log pi(y)"));
    QVERIFY(contains(estimatorOf.at("prob_diff_mean"), "not a KL"));
    const auto runId = out.at("run_id").get<std::int64_t>();

    // The run is listed beside local runs and its steps read back through the store API the GUI plot uses.
    const auto runs = parseJson(runCli({"--workspace", workspace, "--json", "store", "runs"}).out);
    QCOMPARE(runs.size(), size_t{1});
    QCOMPARE(runs[0].at("name").get<std::string>(), std::string("big verl run"));
    QCOMPARE(runs[0].at("kind").get<std::string>(), std::string("external"));
    const auto info = parseJson(runCli({"--workspace", workspace, "--json", "store", "info"}).out);
    QCOMPARE(info.at("external_runs").get<int>(), 1);
    store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
    const auto steps = store.stepsAfter(runId);
    QCOMPARE(steps.size(), size_t{7});
    COMPARE_NEAR(*steps[2].k3, k3(kBatchB));
    // The import's counts are stored with the run.
    const auto stored = nlohmann::json::parse(store.run(runId)->configJson);
    QCOMPARE(stored.at("import").at("values_dropped").get<int>(), 3);
    QCOMPARE(stored.at("import").at("conflicts").get<int>(), 1);
    QVERIFY(!stored.contains("tinker_config"));
    const auto external = store::externalRun(store, runId);
    QVERIFY(external && contains(external->estimatorJson, "prob_diff_mean"));

    // The human summary names the estimators and the skipped lines.
    const auto human = runCli({"--workspace", workspace, "import", "tinker", kFixtures + "tinker_metrics.jsonl"});
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY(contains(human.out, "optim/kl_sample_train_v2  k2"));
    QVERIFY(contains(human.out, "line 6: the step 1.5 is not a non-negative integer"));
    QVERIFY(contains(human.out, "dropped values (the rest of each line was kept):\n  line 3: env/all/reward/total is the string"));
    const auto verlHuman = runCli({"--workspace", workspace, "import", "verl", kFixtures + "verl_metrics.jsonl"});
    QVERIFY(contains(verlHuman.out, "step 2, actor/entropy: 0.8407 (line 3) replaced by 0.8299 (line 7)"));
    const auto csv = runCli({"--workspace", workspace, "--json", "import", "csv", kFixtures + "generic.csv", "--map",
        "full_kl=mismatch_kl", "--map", "wall=wall_time_s"});
    QVERIFY2(csv.code == 0, csv.err.c_str());
    QCOMPARE(parseJson(csv.out).at("steps_imported").get<int>(), 5); // steps 0, 1, 3, 4, 8 (see csvReadsMappedColumns)
}

void TestImport::cliFailuresLeaveWorkspaceUnchanged()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", kFixtures + "verl_metrics.jsonl"}).code, 0);
    store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
    const std::string rowsBefore = dumpRows(store.handle());
    const std::string summaryBefore = summaryText(store.summary());

    // No usable line: exit 1 naming the file.
    const std::string broken = writeFile(dir, "broken.jsonl", "{\"step\": 1}\n{\"step\": 2, \"data\": 5}\n");
    auto result = runCli({"--workspace", workspace, "import", "verl", broken});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, broken) && contains(result.err, "no usable line"), result.err.c_str());
    // A missing file, a CSV --map naming no column: exit 1.
    QCOMPARE(runCli({"--workspace", workspace, "import", "csv", dir.path().toStdString() + "/none.csv"}).code, 1);
    result = runCli({"--workspace", workspace, "import", "csv", kFixtures + "generic.csv", "--map", "nope=k3"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, "nope"), result.err.c_str());
    // Bad arguments: exit 2.
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", kFixtures + "verl_metrics.jsonl", "--map", "x=kl"}).code, 2);
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", kFixtures + "verl_metrics.jsonl", "--map", "a=k1",
                 "--map", "b=k1"}).code,
        2);
    QCOMPARE(runCli({"--workspace", workspace, "import", "aimet", kFixtures + "per_layer_quant_enabled.json",
                 "--analysis", "both"}).code,
        2);
    QCOMPARE(runCli({"--workspace", workspace, "import", "tinker", kFixtures + "tinker_metrics.jsonl", "--map",
                 "progress/batch=step"}).code,
        2);
    QCOMPARE(runCli({"--workspace", workspace, "import"}).code, 2);

    QCOMPARE(dumpRows(store.handle()), rowsBefore);
    QCOMPARE(summaryText(store.summary()), summaryBefore);
}

void TestImport::cliImportsAimetScan()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const auto result = runCli({"--workspace", workspace, "--json", "import", "aimet",
        kFixtures + "per_layer_quant_enabled.json", "--reference-score", "0.7200", "--scheme", "int8 w8a8"});
    QVERIFY2(result.code == 0, result.err.c_str());
    const auto out = parseJson(result.out);
    // The whole --json output (tests/cli/fixtures/import-aimet.json); the figures below are checked on their own.
    const std::vector<std::string> differences
        = test::goldenDifferences(out, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/import-aimet.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    QCOMPARE(out.at("cells_stored").get<int>(), 15);
    QCOMPARE(out.at("entries_skipped").get<int>(), 3);
    QVERIFY(contains(out.at("unit").get<std::string>(), "not nats"));
    const auto scanId = out.at("scan_id").get<std::int64_t>();

    store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
    store::Statement cell(store.handle(),
        "SELECT mismatch, added_mismatch FROM sensitivity_cells WHERE scan_id = ? AND layer = 0 AND module_group = 'down'");
    cell.bind(1, scanId);
    QVERIFY(cell.step());
    QCOMPARE(cell.real(0), 0.6420);
    COMPARE_NEAR(cell.real(1), 0.7200 - 0.6420);
    store::Statement scan(store.handle(), "SELECT format, config_json, run_id FROM sensitivity_scans WHERE id = ?");
    scan.bind(1, scanId);
    QVERIFY(scan.step());
    QCOMPARE(scan.text(0), std::string("aimet:int8 w8a8"));
    QVERIFY(contains(scan.text(1), "not nats"));
    QCOMPARE(store.run(scan.int64(2))->kind, std::string("external"));
    QCOMPARE(store::externalRun(store, scan.int64(2))->source, std::string("aimet"));
    QCOMPARE(store::queryInt64(store.handle(), "SELECT count(*) FROM sensitivity_cells"), std::int64_t{15});
}

// `mismatch run` of an import job file stores what `mismatch import` stores (the run, its steps and estimators; the
// AIMET scan and its cells), row for row, and reports the command's --json result.
void TestImport::jobFileImportStoresWhatTheCommandStores()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    struct Case {
        jobs::JobSpec spec;
        std::vector<std::pair<std::string, std::string>> tables; // table, its run column
    };
    jobs::JobSpec csv("import_csv");
    csv.set("file", kFixtures + "generic.csv").set("name", "csv run");
    csv.set("map", nlohmann::json::array({"full_kl=mismatch_kl", "wall=wall_time_s"}));
    jobs::JobSpec aimet("import_aimet");
    aimet.set("file", kFixtures + "per_layer_quant_enabled.json").set("reference_score", 0.72).set("scheme", "int8");
    const std::vector<Case> cases = {{csv, {{"runs", "id"}, {"step_metrics", "run_id"}, {"external_runs", "run_id"}}},
        {aimet, {{"runs", "id"}, {"external_runs", "run_id"}, {"sensitivity_scans", "run_id"}}}};
    for (const Case& c : cases) {
        std::vector<std::string> arguments = {"--workspace", workspace, "--json"};
        const std::vector<std::string> command = c.spec.toArguments();
        arguments.insert(arguments.end(), command.begin(), command.end());
        const auto direct = runCli(arguments);
        QVERIFY2(direct.code == 0, direct.err.c_str());
        const std::string file = workspace + "/" + c.spec.kind() + ".job.yaml";
        jobs::writeJobFile(file, c.spec);
        const auto viaFile = runCli({"--workspace", workspace, "--json", "run", file});
        QVERIFY2(viaFile.code == 0, viaFile.err.c_str());
        nlohmann::json expected = parseJson(direct.out);
        nlohmann::json result = parseJson(viaFile.out).at("steps").at(0).at("result");
        const std::int64_t first = expected.at("run_id").get<std::int64_t>();
        const std::int64_t second = result.at("run_id").get<std::int64_t>();
        QVERIFY(first != second);
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        for (const auto& [table, column] : c.tables) {
            const std::string a = rowsOfRun(store.handle(), table, column, first);
            QVERIFY2(!a.empty(), table.c_str());
            QCOMPARE(rowsOfRun(store.handle(), table, column, second), a);
        }
        if (expected.contains("scan_id")) {
            const auto cells = [&store](const nlohmann::json& json) {
                return rowsOfRun(store.handle(), "sensitivity_cells", "scan_id", json["scan_id"].get<std::int64_t>());
            };
            QVERIFY(!cells(expected).empty());
            QCOMPARE(cells(result), cells(expected));
            expected.erase("scan_id");
            result.erase("scan_id");
        }
        expected.erase("run_id");
        result.erase("run_id");
        QCOMPARE(result, expected);
    }
}

void TestImport::verlOffPolicyDiagnostics()
{
    // verl's sequence-level diagnostics (rollout_corr_helper.py compute_offpolicy_metrics), computed here from two
    // sequences' per-token probabilities: each lands in its own measure, never in a KL column.
    const std::vector<std::vector<double>> mu = {{0.5, 0.8, 0.25}, {0.7, 0.1}};
    const std::vector<std::vector<double>> pi = {{0.4, 0.9, 0.3}, {0.65, 0.2}};
    double logPplDiff = 0.0, logPplAbsDiff = 0.0, trainingPpl = 0.0, rolloutPpl = 0.0, pplRatio = 0.0, chi2Seq = 0.0;
    for (std::size_t s = 0; s < mu.size(); ++s) {
        double meanLogMu = 0.0, meanLogPi = 0.0, logRho = 0.0;
        for (std::size_t t = 0; t < mu[s].size(); ++t) {
            meanLogMu += std::log(mu[s][t]) / static_cast<double>(mu[s].size());
            meanLogPi += std::log(pi[s][t]) / static_cast<double>(mu[s].size());
            logRho += std::log(pi[s][t] / mu[s][t]);
        }
        logPplDiff += (meanLogMu - meanLogPi) / 2.0;
        logPplAbsDiff += std::fabs(meanLogMu - meanLogPi) / 2.0;
        trainingPpl += std::exp(-meanLogPi) / 2.0;
        rolloutPpl += std::exp(-meanLogMu) / 2.0;
        pplRatio += std::exp(meanLogMu - meanLogPi) / 2.0;
        chi2Seq += std::exp(2.0 * logRho) / 2.0;
    }
    chi2Seq -= 1.0;
    const std::map<std::string, std::pair<std::string, double>> logged = {
        {"rollout_corr/chi2_seq", {"chi2_seq", chi2Seq}},
        {"rollout_corr/log_ppl_diff", {"log_ppl_diff", logPplDiff}},
        {"rollout_corr/log_ppl_abs_diff", {"log_ppl_abs_diff", logPplAbsDiff}},
        {"rollout_corr/training_ppl", {"training_ppl", trainingPpl}},
        {"rollout_corr/rollout_ppl", {"rollout_ppl", rolloutPpl}},
        {"rollout_corr/ppl_ratio", {"ppl_ratio", pplRatio}},
    };
    // The importance-weight statistics (token level, no truncation at a threshold of 2): rho = pi(y) / mu(y).
    std::vector<double> rho;
    for (std::size_t s = 0; s < mu.size(); ++s) {
        for (std::size_t t = 0; t < mu[s].size(); ++t) rho.push_back(pi[s][t] / mu[s][t]);
    }
    double rhoMean = 0.0, high = 0.0, low = 0.0;
    for (const double r : rho) {
        rhoMean += r / static_cast<double>(rho.size());
        high += (r > 2.0 ? 1.0 : 0.0) / static_cast<double>(rho.size());
        low += (r < 0.5 ? 1.0 : 0.0) / static_cast<double>(rho.size());
    }
    const std::map<std::string, std::pair<std::string, double>> weights = {
        {"rollout_corr/rollout_is_mean", {"is_weight_mean", rhoMean}},
        {"rollout_corr/rollout_is_max", {"is_weight_max", *std::max_element(rho.begin(), rho.end())}},
        {"rollout_corr/rollout_is_min", {"is_weight_min", *std::min_element(rho.begin(), rho.end())}},
        {"rollout_corr/rollout_is_ratio_fraction_high", {"is_fraction_high", high}},
        {"rollout_corr/rollout_is_ratio_fraction_low", {"is_fraction_low", low}},
    };
    nlohmann::json data = nlohmann::json::object();
    for (const auto& [key, measure] : logged) data[key] = measure.second;
    for (const auto& [key, measure] : weights) data[key] = measure.second;
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/verl.jsonl").toStdString();
    std::ofstream(path) << nlohmann::json {{"step", 3}, {"data", data}}.dump() << "\n";
    const io::ImportedLog log = io::importLog(io::LogSource::Verl, path);
    QCOMPARE(log.steps.size(), std::size_t(1));
    QVERIFY(!log.steps[0].mismatchKl && !log.steps[0].k1 && !log.steps[0].k3);
    const nlohmann::json extras = nlohmann::json::parse(log.steps[0].extrasJson);
    for (const auto& [key, measure] : logged) {
        QVERIFY2(std::fabs(extras.at(measure.first).get<double>() - measure.second) <= kTolerance * std::fabs(measure.second),
            key.c_str());
    }
    for (const auto& [key, measure] : weights) {
        QVERIFY2(std::fabs(extras.at(measure.first).get<double>() - measure.second) <= kTolerance * std::fabs(measure.second) + 1e-15,
            key.c_str());
    }
    QCOMPARE(log.metrics.size(), logged.size() + weights.size());
    for (const io::MappedMetric& metric : log.metrics) {
        if (logged.count(metric.key)) {
            QCOMPARE(metric.measure, logged.at(metric.key).first);
            QVERIFY2(metric.estimator.find("over sequences") != std::string::npos, metric.estimator.c_str());
        } else {
            QCOMPARE(metric.measure, weights.at(metric.key).first);
            QVERIFY2(metric.estimator.find("importance weight") != std::string::npos, metric.estimator.c_str());
        }
    }
    // What the weights mean depends on verl's rollout_is level (verl-project/verl
    // verl/trainer/ppo/rollout_corr_helper.py compute_is_metrics, 7fbc00a9c0fad60e0694429b539bad98f414d712): at
    // sequence level max/min are the raw sequence weights before truncation; at token level they are the applied
    // (truncated, or IcePop-zeroed) weights; the low fraction counts raw weights below rollout_is_threshold_lower,
    // which is 1 / rollout_is_threshold only when the threshold is a single number (a "lower_upper" one names it).
    std::map<std::string, std::string> estimatorOf;
    for (const io::MappedMetric& metric : log.metrics) estimatorOf[metric.key] = metric.estimator;
    const std::string maxText = estimatorOf.at("rollout_corr/rollout_is_max");
    QVERIFY2(contains(maxText, "at the run's rollout_is level sequence, the raw sequence weight before truncation")
            && contains(maxText, "at level token, the largest applied weight, after truncation"),
        maxText.c_str());
    const std::string minText = estimatorOf.at("rollout_corr/rollout_is_min");
    QVERIFY2(contains(minText, "at level sequence the raw sequence weight before truncation")
            && contains(minText, "at level token the smallest applied weight"),
        minText.c_str());
    const std::string lowText = estimatorOf.at("rollout_corr/rollout_is_ratio_fraction_low");
    QVERIFY2(contains(lowText, "1 / rollout_is_threshold by default")
            && contains(lowText, "the lower of a \"lower_upper\""),
        lowText.c_str());
    QVERIFY(contains(estimatorOf.at("rollout_corr/rollout_is_ratio_fraction_high"), "raw importance weights"));
}

// verl's validation accuracy of one data source (val-core/<data source>/acc/mean@<N>, see the top of this file) is
// read as accuracy at the steps that evaluated, without --map: at step 0 on a line of its own, and merged into the
// lines of steps 5 and 10. The other validation keys of that source (best@N, maj@N, std@N) are not accuracy and stay
// unread; the reward variable (val-aux beside acc) is the validation reward, eval_reward.
void TestImport::verlValidationAccuracyOfOneDataSource_data()
{
    QTest::addColumn<int>("responses"); // actor_rollout_ref.rollout.val_kwargs.n: N in mean@N
    QTest::newRow("one response per problem") << 1;
    QTest::newRow("four responses per problem") << 4;
}

void TestImport::verlValidationAccuracyOfOneDataSource()
{
    QFETCH(int, responses);
    const std::string n = std::to_string(responses);
    const std::string key = "val-core/openai/gsm8k/acc/mean@" + n;
    // Four problems; response r of problem p at evaluation step s is correct when (3 s / 5 + p + 2 r p + r) % 7 < 4.
    // mean@N: each problem's fraction of correct responses, averaged over the problems.
    const auto meanAccuracy = [&](int step) {
        double sum = 0.0;
        for (int problem = 0; problem < 4; ++problem) {
            int correct = 0;
            for (int response = 0; response < responses; ++response) {
                correct += (3 * (step / 5) + problem + 2 * response * problem + response) % 7 < 4;
            }
            sum += static_cast<double>(correct) / responses;
        }
        return sum / 4.0;
    };
    std::string text;
    const auto validation = [&](int step) {
        nlohmann::json data = {{key, meanAccuracy(step)}, {"val-aux/openai/gsm8k/reward/mean@" + n, 0.25 + step}};
        if (responses > 1) { // verl's other core metrics: not the mean accuracy
            data["val-core/openai/gsm8k/acc/best@" + n + "/mean"] = 0.97;
            data["val-core/openai/gsm8k/acc/maj@" + n + "/mean"] = 0.96;
            data["val-aux/openai/gsm8k/acc/std@" + n] = 0.31;
        }
        return data;
    };
    text += nlohmann::json {{"step", 0}, {"data", validation(0)}}.dump() + "\n"; // before training
    for (int step = 1; step <= 10; ++step) {
        nlohmann::json data = {{"rollout_corr/kl", 0.001 * step}};
        if (step % 5 == 0) data.update(validation(step)); // test_freq 5
        text += nlohmann::json {{"step", step}, {"data", data}}.dump() + "\n";
    }
    QTemporaryDir dir;
    const io::ImportedLog log = io::importLog(io::LogSource::Verl, writeFile(dir, "verl.jsonl", text));
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    for (const store::StepMetrics& step : log.steps) {
        if (step.step % 5 == 0) {
            QVERIFY2(step.accuracy, qPrintable(QString("step %1 has no accuracy").arg(step.step)));
            COMPARE_NEAR(*step.accuracy, meanAccuracy(static_cast<int>(step.step)));
        } else {
            QVERIFY2(!step.accuracy, qPrintable(QString("step %1 has an accuracy").arg(step.step)));
        }
    }
    // The steps' values differ: a value read at the wrong step would show.
    QVERIFY(meanAccuracy(0) != meanAccuracy(5) && meanAccuracy(5) != meanAccuracy(10) && meanAccuracy(0) != meanAccuracy(10));
    QVERIFY(log.notes.empty());
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("accuracy").at("key").get<std::string>(), key);
    QCOMPARE(estimators.at("accuracy").at("steps").get<int>(), 3);
    QVERIFY(!estimators.at("accuracy").at("user_mapped").get<bool>());
    const std::string estimator = estimators.at("accuracy").at("estimator").get<std::string>();
    QVERIFY2(contains(estimator, "verl validation accuracy: mean over the " + n
                 + " responses per problem of openai/gsm8k's acc"),
        estimator.c_str());
    const std::set<std::string> unmapped(log.unmappedKeys.begin(), log.unmappedKeys.end());
    QVERIFY(!unmapped.count(key));
    // The reward variable beside acc, under val-aux: the validation reward, not the accuracy.
    COMPARE_NEAR(nlohmann::json::parse(stepOf(log, 10).extrasJson).at("eval_reward").get<double>(), 10.25);
    QCOMPARE(estimators.at("eval_reward").at("key").get<std::string>(), "val-aux/openai/gsm8k/reward/mean@" + n);
    if (responses > 1) {
        QVERIFY(unmapped.count("val-core/openai/gsm8k/acc/best@" + n + "/mean"));
        QVERIFY(unmapped.count("val-core/openai/gsm8k/acc/maj@" + n + "/mean"));
    }

    // A CSV export of the run (Weights & Biases: one column per key, empty where a step did not log it) reads the
    // column the same way.
    std::string csv = "step,rollout_corr/kl," + key + "\n";
    for (int step = 0; step <= 10; ++step) {
        csv += std::to_string(step) + "," + (step ? std::to_string(0.001 * step) : std::string()) + ","
            + (step % 5 == 0 ? nlohmann::json(meanAccuracy(step)).dump() : std::string()) + "\n";
    }
    const io::ImportedLog table = io::importLog(io::LogSource::Csv, writeFile(dir, "verl.csv", csv));
    COMPARE_NEAR(*stepOf(table, 5).accuracy, meanAccuracy(5));
    QVERIFY(!stepOf(table, 4).accuracy);
    QVERIFY(contains(nlohmann::json::parse(table.estimatorJson()).at("accuracy").at("estimator").get<std::string>(),
        "verl validation accuracy"));

    // A --map entry for accuracy wins over the pattern: the validation key is then kept under its own name,
    // accuracy/openai/gsm8k, and step 0's line (validation keys only) is read through it.
    io::LogImportOptions options;
    options.map = {"rollout_corr/kl=accuracy"};
    const io::ImportedLog mapped = io::importLog(io::LogSource::Verl, writeFile(dir, "verl.jsonl", text), options);
    COMPARE_NEAR(*stepOf(mapped, 5).accuracy, 0.005);
    QVERIFY(mapped.skipped.empty());
    COMPARE_NEAR(
        nlohmann::json::parse(stepOf(mapped, 5).extrasJson).at("accuracy/openai/gsm8k").get<double>(), meanAccuracy(5));
    QVERIFY(!std::count(mapped.unmappedKeys.begin(), mapped.unmappedKeys.end(), key));
    QVERIFY(mapped.notes.empty()); // the measure is filled: nothing to pick
}

// Two data sources log one validation accuracy key each: neither is read as accuracy (which one the run's quality is
// depends on the user); each is kept under its own name, accuracy/<data source>, and the import's notes name both
// and the --map entry that picks one; with that entry the chosen source's values are read as accuracy.
void TestImport::verlValidationAccuraciesOfSeveralDataSources()
{
    const std::string gsm8k = "val-core/openai/gsm8k/acc/mean@1";
    const std::string math = "val-core/lighteval/MATH/acc/mean@1";
    std::string text;
    for (int step = 0; step <= 6; ++step) {
        nlohmann::json data = {{"rollout_corr/k3_kl", 0.0005 * (step + 1)}};
        if (step % 3 == 0) {
            data[gsm8k] = 0.40 + 0.01 * step;
            data[math] = 0.20 + 0.02 * step;
        }
        text += nlohmann::json {{"step", step}, {"data", data}}.dump() + "\n";
    }
    QTemporaryDir dir;
    const std::string path = writeFile(dir, "verl.jsonl", text);
    const io::ImportedLog log = io::importLog(io::LogSource::Verl, path);
    QCOMPARE(log.steps.size(), std::size_t {7});
    for (const store::StepMetrics& step : log.steps) {
        QVERIFY2(!step.accuracy, qPrintable(QString("step %1 has an accuracy").arg(step.step)));
    }
    const auto records = nlohmann::json::parse(log.estimatorJson());
    QVERIFY(!records.contains("accuracy"));
    for (int step : {0, 3, 6}) {
        const auto extras = nlohmann::json::parse(stepOf(log, step).extrasJson);
        COMPARE_NEAR(extras.at("accuracy/openai/gsm8k").get<double>(), 0.40 + 0.01 * step);
        COMPARE_NEAR(extras.at("accuracy/lighteval/MATH").get<double>(), 0.20 + 0.02 * step);
    }
    QVERIFY(!nlohmann::json::parse(stepOf(log, 1).extrasJson).contains("accuracy/openai/gsm8k"));
    QCOMPARE(records.at("accuracy/lighteval/MATH").at("key").get<std::string>(), math);
    QCOMPARE(records.at("accuracy/lighteval/MATH").at("unit").get<std::string>(), std::string("fraction"));
    QVERIFY(contains(records.at("accuracy/lighteval/MATH").at("estimator").get<std::string>(),
        "mean over the 1 responses per problem of lighteval/MATH's acc"));
    const std::set<std::string> unmapped(log.unmappedKeys.begin(), log.unmappedKeys.end());
    QVERIFY(!unmapped.count(gsm8k) && !unmapped.count(math));
    QCOMPARE(log.notes.size(), std::size_t {1});
    const std::string& note = log.notes[0];
    QVERIFY2(contains(note, gsm8k) && contains(note, math) && contains(note, "accuracy not read")
            && contains(note, "accuracy/openai/gsm8k"),
        note.c_str());
    // The entry it proposes is one that --map accepts, for one of the two keys.
    const auto proposed = note.find("--map ");
    QVERIFY2(proposed != std::string::npos, note.c_str());
    const std::string entry = note.substr(proposed + 6);
    QVERIFY2(entry == gsm8k + "=accuracy" || entry == math + "=accuracy", note.c_str());
    QVERIFY2(io::checkMapEntry(entry).empty(), entry.c_str());
    // The note is stored with the run.
    const auto config = nlohmann::json::parse(log.runConfigJson(path, {}));
    QVERIFY(config.at("import").at("notes") == nlohmann::json(log.notes));

    // --map picks one: MATH's values at steps 0, 3 and 6; the other key, with the measure filled, is kept under its
    // own name; no note.
    io::LogImportOptions options;
    options.map = {math + "=accuracy"};
    const io::ImportedLog picked = io::importLog(io::LogSource::Verl, path, options);
    for (int step : {0, 3, 6}) COMPARE_NEAR(*stepOf(picked, step).accuracy, 0.20 + 0.02 * step);
    QVERIFY(!stepOf(picked, 1).accuracy);
    QVERIFY(picked.notes.empty());
    COMPARE_NEAR(nlohmann::json::parse(stepOf(picked, 3).extrasJson).at("accuracy/openai/gsm8k").get<double>(), 0.43);
    QVERIFY(!nlohmann::json::parse(stepOf(picked, 3).extrasJson).contains("accuracy/lighteval/MATH"));
    const auto estimators = nlohmann::json::parse(picked.estimatorJson());
    QCOMPARE(estimators.at("accuracy").at("key").get<std::string>(), math);
    QVERIFY(estimators.at("accuracy").at("user_mapped").get<bool>());
    // The key picked by --map is still said to be what verl computed.
    const std::string estimator = estimators.at("accuracy").at("estimator").get<std::string>();
    QVERIFY2(contains(estimator, "verl validation accuracy: mean over the 1 responses per problem of lighteval/MATH's acc")
            && contains(estimator, "(mapped with --map)"),
        estimator.c_str());
    QVERIFY(!nlohmann::json::parse(picked.runConfigJson(path, options.map)).at("import").contains("notes"));
}

namespace {

// Per-sequence probabilities of the sampled tokens, the engine's mu(y) and the trainer's pi(y), for verl's sequence
// statistics: four sequences of different lengths, one with weights pi / mu above 2 (truncated at 2), two whose mean
// raw weight is below 1/2, and a token on which engine and trainer agree.
struct Sequences {
    std::vector<std::vector<double>> mu;
    std::vector<std::vector<double>> pi;
};
const Sequences kSequences {{{0.5, 0.8, 0.25, 0.6}, {0.1, 0.7, 0.05}, {0.9, 0.6}, {0.8, 0.5}},
    {{0.4, 0.9, 0.3, 0.6}, {0.35, 0.65, 0.2}, {0.3, 0.2}, {0.2, 0.15}}};

double meanOf(const std::vector<double>& values)
{
    return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

// No two values within kTolerance of each other: a value read into another key's measure would then show.
bool allDistinct(const std::vector<double>& values)
{
    for (std::size_t i = 0; i < values.size(); ++i) {
        for (std::size_t j = i + 1; j < values.size(); ++j) {
            if (std::fabs(values[i] - values[j]) <= kTolerance) return false;
        }
    }
    return true;
}

std::string verlLine(std::int64_t step, const nlohmann::json& data)
{
    return nlohmann::json {{"step", step}, {"data", data}}.dump() + "\n";
}

// The step's extras value `name`, NaN when it has none (so that a comparison with it fails).
double extraAt(const io::ImportedLog& log, std::int64_t step, const std::string& name)
{
    const auto extras = nlohmann::json::parse(stepOf(log, step).extrasJson);
    const auto found = extras.find(name);
    return found == extras.end() ? std::numeric_limits<double>::quiet_NaN() : found->get<double>();
}

const io::MappedMetric* metricOf(const io::ImportedLog& log, const std::string& measure)
{
    for (const io::MappedMetric& metric : log.metrics) {
        if (metric.measure == measure) return &metric;
    }
    return nullptr;
}

io::KnownKeyPattern patternOf(io::LogSource source, const std::string& key)
{
    for (const io::KnownKeyPattern& pattern : io::knownKeyPatterns(source)) {
        if (pattern.key == key) return pattern;
    }
    qFatal("no key pattern %s", key.c_str());
}

} // namespace

// verl's importance-weight statistics and sequence log-perplexities (verl-project/verl
// 1dda039b9c6311889a9c9a26040677e1254814f9, verl/trainer/ppo/rollout_corr_helper.py compute_is_metrics,
// compute_rollout_correction_weights and compute_offpolicy_metrics), computed here in float64 from kSequences at
// rollout_is level token with rollout_is_threshold 2 (TIS: the applied weight is w = min(pi / mu, 2); the lower bound
// is 1/2). Each key lands in its own measure, none in a KL column.
void TestImport::verlImportanceWeightStatistics()
{
    const double upper = 2.0;
    const double lower = 1.0 / upper;
    const std::size_t count = kSequences.mu.size();
    std::vector<double> applied; // w of every response token
    std::vector<double> sequenceMeans; // per sequence, the token mean of w
    std::vector<double> rawSequenceMeans; // per sequence, the token mean of pi / mu before truncation
    std::vector<double> logPplDiffs; // per sequence, mean log mu - mean log pi
    double trainingLogPpl = 0.0;
    double rolloutLogPpl = 0.0;
    double outsideIcePop = 0.0; // raw weights outside [1/2, 2]
    for (std::size_t s = 0; s < count; ++s) {
        const auto n = static_cast<double>(kSequences.mu[s].size());
        double sumApplied = 0.0, sumRaw = 0.0, sumLogMu = 0.0, sumLogPi = 0.0;
        for (std::size_t t = 0; t < kSequences.mu[s].size(); ++t) {
            const double rho = kSequences.pi[s][t] / kSequences.mu[s][t];
            applied.push_back(std::min(rho, upper));
            sumApplied += std::min(rho, upper);
            sumRaw += rho;
            sumLogMu += std::log(kSequences.mu[s][t]);
            sumLogPi += std::log(kSequences.pi[s][t]);
            outsideIcePop += (rho < lower || rho > upper) ? 1.0 : 0.0;
        }
        sequenceMeans.push_back(sumApplied / n);
        rawSequenceMeans.push_back(sumRaw / n);
        logPplDiffs.push_back(sumLogMu / n - sumLogPi / n);
        trainingLogPpl += -sumLogPi / n / static_cast<double>(count);
        rolloutLogPpl += -sumLogMu / n / static_cast<double>(count);
    }
    outsideIcePop /= static_cast<double>(applied.size());
    const double meanApplied = meanOf(applied);
    double squares = 0.0, normalizedSquares = 0.0;
    for (const double w : applied) {
        squares += w * w / static_cast<double>(applied.size());
        normalizedSquares += (w / meanApplied) * (w / meanApplied) / static_cast<double>(applied.size());
    }
    const double sequenceMean = meanOf(sequenceMeans);
    double sequenceVariance = 0.0, deviation = 0.0, high = 0.0, low = 0.0;
    for (const double m : sequenceMeans) {
        sequenceVariance
            += (m - sequenceMean) * (m - sequenceMean) / static_cast<double>(count - 1); // torch.std: n - 1
        deviation = std::max(deviation, std::fabs(m - 1.0));
    }
    for (const double m : rawSequenceMeans) {
        high += (m > upper ? 1.0 : 0.0) / static_cast<double>(count);
        low += (m < lower ? 1.0 : 0.0) / static_cast<double>(count);
    }
    const std::vector<std::tuple<std::string, std::string, double>> expected = {
        {"rollout_corr/rollout_is_std", "is_weight_std", std::sqrt(squares - meanApplied * meanApplied)},
        {"rollout_corr/rollout_is_eff_sample_size", "is_eff_sample_size", 1.0 / normalizedSquares},
        {"rollout_corr/rollout_is_seq_mean", "is_seq_weight_mean", sequenceMean},
        {"rollout_corr/rollout_is_seq_std", "is_seq_weight_std", std::sqrt(sequenceVariance)},
        {"rollout_corr/rollout_is_seq_max", "is_seq_weight_max",
            *std::max_element(sequenceMeans.begin(), sequenceMeans.end())},
        {"rollout_corr/rollout_is_seq_min", "is_seq_weight_min",
            *std::min_element(sequenceMeans.begin(), sequenceMeans.end())},
        {"rollout_corr/rollout_is_seq_max_deviation", "is_seq_max_deviation", deviation},
        {"rollout_corr/rollout_is_seq_fraction_high", "is_seq_fraction_high", high},
        {"rollout_corr/rollout_is_seq_fraction_low", "is_seq_fraction_low", low},
        {"rollout_corr/training_log_ppl", "training_log_ppl", trainingLogPpl},
        {"rollout_corr/rollout_log_ppl", "rollout_log_ppl", rolloutLogPpl},
        {"rollout_corr/log_ppl_diff_max", "log_ppl_diff_max",
            *std::max_element(logPplDiffs.begin(), logPplDiffs.end())},
        {"rollout_corr/log_ppl_diff_min", "log_ppl_diff_min",
            *std::min_element(logPplDiffs.begin(), logPplDiffs.end())},
    };
    nlohmann::json data = nlohmann::json::object();
    std::vector<double> values = {outsideIcePop};
    for (const auto& [key, measure, value] : expected) {
        data[key] = value;
        values.push_back(value);
    }
    QVERIFY(allDistinct(values));
    // The data truncate a weight and fill both sequence fractions.
    QVERIFY(high > 0.0 && low > 0.0 && *std::max_element(applied.begin(), applied.end()) == upper);
    // IcePop ("0.5_2": weights outside [1/2, 2] zeroed) logs the fraction of raw weights outside, here on step 2.
    QTemporaryDir dir;
    const std::string path = writeFile(dir, "verl.jsonl",
        verlLine(1, data)
            + verlLine(2, {{"rollout_corr/rollout_is_oob_ratio", outsideIcePop}, {"rollout_corr/kl", 0.01}}));
    const io::ImportedLog log = io::importLog(io::LogSource::Verl, path);
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t> {1, 2}));
    QVERIFY(!stepOf(log, 1).mismatchKl && !stepOf(log, 1).k1 && !stepOf(log, 1).k3);
    for (const auto& [key, measure, value] : expected) {
        QVERIFY2(std::fabs(extraAt(log, 1, measure) - value) <= kTolerance, (key + " -> " + measure).c_str());
    }
    COMPARE_NEAR(extraAt(log, 2, "is_fraction_outside"), outsideIcePop);
    QVERIFY(log.unmappedKeys.empty());
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    for (const auto& [key, measure, value] : expected) {
        QCOMPARE(estimators.at(measure).at("key").get<std::string>(), key);
    }
    QVERIFY(contains(estimators.at("is_eff_sample_size").at("estimator").get<std::string>(),
        "1 / token mean of (w / token mean of w)^2"));
    QVERIFY(contains(estimators.at("is_seq_fraction_high").at("estimator").get<std::string>(),
        "raw importance weights (before truncation)"));
    QVERIFY(contains(estimators.at("is_fraction_outside").at("estimator").get<std::string>(), "IcePop"));
    QCOMPARE(estimators.at("is_seq_weight_std").at("unit").get<std::string>(), std::string("ratio"));
    QCOMPARE(estimators.at("is_fraction_outside").at("unit").get<std::string>(), std::string("fraction"));
    QCOMPARE(estimators.at("training_log_ppl").at("unit").get<std::string>(), std::string("nats/token"));
}

// verl's rejection sampling (rollout_corr_helper.py compute_rollout_rejection_mask and compute_rs_metrics at the
// commit above) with rollout_rs "token_k3,seq_mean_k1" and rollout_rs_threshold "0.5,0.5_2", computed here from
// kSequences: token_k3 rejects a token whose k3 = r - 1 - log r (r = pi / mu) is above 0.5, seq_mean_k1 a sequence
// whose mean of k1 = log mu - log pi is outside [log 1/2, log 2]. Each option's statistics are kept under their own
// names, rs_<option>_<statistic>; the fractions masked by both options together have measures; none is a KL.
void TestImport::verlRejectionSamplingStatistics()
{
    const double k3Upper = 0.5;
    const double k1Lower = std::log(0.5);
    const double k1Upper = std::log(2.0);
    const std::size_t count = kSequences.mu.size();
    std::vector<double> k3s; // k3 of every response token
    std::vector<double> k3SequenceMeans;
    std::vector<double> k1SequenceMeans;
    double tokens = 0.0, masked = 0.0, maskedSequences = 0.0, k3Masked = 0.0, k3MaskedSequences = 0.0;
    for (std::size_t s = 0; s < count; ++s) {
        std::vector<double> k3Here;
        double k1Sum = 0.0;
        for (std::size_t t = 0; t < kSequences.mu[s].size(); ++t) {
            const double l = std::log(kSequences.pi[s][t]) - std::log(kSequences.mu[s][t]); // |l| < 20: no clamp
            k3Here.push_back(std::exp(l) - 1.0 - l);
            k1Sum += -l;
        }
        const double k1Mean = k1Sum / static_cast<double>(k3Here.size());
        const bool sequenceKept = k1Mean >= k1Lower && k1Mean <= k1Upper;
        bool anyMasked = false, anyK3Masked = false;
        for (const double k3 : k3Here) {
            k3s.push_back(k3);
            tokens += 1.0;
            masked += (k3 <= k3Upper && sequenceKept) ? 0.0 : 1.0;
            k3Masked += k3 <= k3Upper ? 0.0 : 1.0;
            anyMasked = anyMasked || k3 > k3Upper || !sequenceKept;
            anyK3Masked = anyK3Masked || k3 > k3Upper;
        }
        maskedSequences += anyMasked ? 1.0 : 0.0;
        k3MaskedSequences += anyK3Masked ? 1.0 : 0.0;
        k3SequenceMeans.push_back(meanOf(k3Here));
        k1SequenceMeans.push_back(k1Mean);
    }
    double clampedMean = 0.0, clampedSquares = 0.0;
    for (const double k3 : k3s) {
        const double clamped = std::min(std::max(k3, 0.0), k3Upper); // clamped to [0, the upper bound] for std
        clampedMean += clamped / tokens;
        clampedSquares += clamped * clamped / tokens;
    }
    double deviation = 0.0, below = 0.0;
    for (const double m : k1SequenceMeans) {
        deviation = std::max(deviation, std::fabs(m));
        below += (m < k1Lower ? 1.0 : 0.0) / static_cast<double>(count);
    }
    // key, where it lands (a series name or a measure), value, unit
    const std::vector<std::tuple<std::string, std::string, double, std::string>> expected = {
        {"rollout_corr/rollout_rs_token_k3_mean", "rs_token_k3_mean", meanOf(k3s), "nats"},
        {"rollout_corr/rollout_rs_token_k3_max", "rs_token_k3_max", *std::max_element(k3s.begin(), k3s.end()), "nats"},
        {"rollout_corr/rollout_rs_token_k3_min", "rs_token_k3_min", *std::min_element(k3s.begin(), k3s.end()), "nats"},
        {"rollout_corr/rollout_rs_token_k3_std", "rs_token_k3_std",
            std::sqrt(clampedSquares - clampedMean * clampedMean), "nats"},
        {"rollout_corr/rollout_rs_token_k3_seq_mean", "rs_token_k3_seq_mean", meanOf(k3SequenceMeans), "nats"},
        {"rollout_corr/rollout_rs_token_k3_masked_fraction", "rs_token_k3_masked_fraction", k3Masked / tokens,
            "fraction"},
        {"rollout_corr/rollout_rs_token_k3_seq_masked_fraction", "rs_token_k3_seq_masked_fraction",
            k3MaskedSequences / static_cast<double>(count), "fraction"},
        {"rollout_corr/rollout_rs_seq_mean_k1_fraction_low", "rs_seq_mean_k1_fraction_low", below, "fraction"},
        {"rollout_corr/rollout_rs_seq_mean_k1_seq_max_deviation", "rs_seq_mean_k1_seq_max_deviation", deviation,
            "nats"},
        {"rollout_corr/rollout_rs_masked_fraction", "rs_masked_fraction", masked / tokens, "fraction"},
        {"rollout_corr/rollout_rs_seq_masked_fraction", "rs_seq_masked_fraction",
            maskedSequences / static_cast<double>(count), "fraction"},
    };
    nlohmann::json data = nlohmann::json::object();
    std::vector<double> values;
    for (const auto& [key, where, value, unit] : expected) {
        data[key] = value;
        values.push_back(value);
    }
    QVERIFY(allDistinct(values));
    QVERIFY(below > 0.0 && masked > k3Masked); // both options reject something
    // Not verl's names: an option it does not have, a statistic it does not log.
    data["rollout_corr/rollout_rs_token_k4_mean"] = 0.5;
    data["rollout_corr/rollout_rs_seq_max_k1_mean"] = 0.5;
    data["rollout_corr/rollout_rs_token_k3_median"] = 0.5;
    QTemporaryDir dir;
    const io::ImportedLog log = io::importLog(io::LogSource::Verl, writeFile(dir, "verl.jsonl", verlLine(4, data)));
    QVERIFY(!stepOf(log, 4).mismatchKl && !stepOf(log, 4).k1 && !stepOf(log, 4).k3);
    for (const auto& [key, where, value, unit] : expected) {
        QVERIFY2(std::fabs(extraAt(log, 4, where) - value) <= kTolerance, (key + " -> " + where).c_str());
        const io::MappedMetric* metric = metricOf(log, where);
        QVERIFY2(metric && metric->key == key && metric->unit == unit, (key + " -> " + where).c_str());
    }
    QCOMPARE(log.unmappedKeys,
        (std::vector<std::string> {"rollout_corr/rollout_rs_seq_max_k1_mean", "rollout_corr/rollout_rs_token_k3_median",
            "rollout_corr/rollout_rs_token_k4_mean"}));
    QVERIFY(log.notes.empty());
    const std::string k3Mean = metricOf(log, "rs_token_k3_mean")->estimator;
    QVERIFY2(contains(k3Mean, "token_k3 (per response token, k3 = r - 1 - log r with r = pi(y) / mu(y)")
            && contains(k3Mean, "the mean of the value over response tokens"),
        k3Mean.c_str());
    const std::string k1Low = metricOf(log, "rs_seq_mean_k1_fraction_low")->estimator;
    QVERIFY2(
        contains(k1Low, "seq_mean_k1 (per sequence, the mean over its response tokens of k1 = log mu(y) - log pi(y)")
            && contains(k1Low, "below the lower bound"),
        k1Low.c_str());
}

// verl's on-policy distillation losses: verl/trainer/distillation/losses.py (verl-project/verl
// 1dda039b9c6311889a9c9a26040677e1254814f9) distillation_ppo_loss logs distillation/loss, distillation_loss the
// per-token loss's extremes over the response tokens (distillation/loss_min, loss_max) and
// compute_distillation_loss_reverse_kl_estimator the token mean of its absolute value (distillation/abs_loss);
// RayPPOTrainer._update_actor (verl/trainer/ppo/ray_trainer.py) prefixes the actor's metrics with "actor/"
// (verl/utils/py_functional.py rename_dict). With loss_mode k1 the per-token loss is log pi(y) - log teacher(y)
// (verl/trainer/ppo/core_algos.py kl_penalty) and with loss_agg_mode token-mean the loss is its mean.
void TestImport::verlDistillationLosses()
{
    const std::vector<double> student = {-0.2, -1.5, -0.05, -2.3, -0.7};
    const std::vector<double> teacher = {-0.35, -0.9, -0.1, -3.1, -0.4};
    std::vector<double> perToken;
    std::vector<double> absolute;
    for (std::size_t t = 0; t < student.size(); ++t) {
        perToken.push_back(student[t] - teacher[t]);
        absolute.push_back(std::fabs(student[t] - teacher[t]));
    }
    const double loss = meanOf(perToken);
    const double smallest = *std::min_element(perToken.begin(), perToken.end());
    const double largest = *std::max_element(perToken.begin(), perToken.end());
    const double absLoss = meanOf(absolute);
    QVERIFY(allDistinct({loss, smallest, largest, absLoss}) && smallest < 0.0);
    QTemporaryDir dir;
    const io::ImportedLog log = io::importLog(io::LogSource::Verl,
        writeFile(dir, "verl.jsonl",
            verlLine(3,
                {{"actor/distillation/loss", loss}, {"actor/distillation/loss_min", smallest},
                    {"actor/distillation/loss_max", largest}, {"actor/distillation/abs_loss", absLoss}})));
    COMPARE_NEAR(*stepOf(log, 3).loss, loss);
    COMPARE_NEAR(extraAt(log, 3, "distillation_loss_min"), smallest);
    COMPARE_NEAR(extraAt(log, 3, "distillation_loss_max"), largest);
    COMPARE_NEAR(extraAt(log, 3, "distillation_abs_loss"), absLoss);
    QVERIFY(!stepOf(log, 3).k1 && !stepOf(log, 3).mismatchKl);
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("distillation_loss_min").at("key").get<std::string>(),
        std::string("actor/distillation/loss_min"));
    QCOMPARE(estimators.at("distillation_abs_loss").at("key").get<std::string>(),
        std::string("actor/distillation/abs_loss"));
    QVERIFY(
        contains(estimators.at("distillation_loss_max").at("estimator").get<std::string>(), "before loss_max_clamp"));
    QVERIFY(log.unmappedKeys.empty());
}

// verl's validation reward (ray_trainer.py _val_metrics_update, see the top of this file): a reward function that
// returns no acc makes the reward the core variable, val-core/<data source>/reward/mean@<N>; one that returns acc
// logs the reward under val-aux. Either is the validation reward, eval_reward, never the accuracy; best@N and maj@N
// (the best of N responses, a majority vote) are other statistics and stay unread.
void TestImport::verlValidationReward()
{
    // Three problems, four responses each: the reward function's score (+1 right, -1 wrong) and acc (right or not).
    const std::vector<std::vector<double>> scores = {{1, -1, 1, 1}, {-1, -1, -1, 1}, {1, 1, 1, 1}};
    double meanReward = 0.0, meanAccuracy = 0.0;
    for (const auto& problem : scores) {
        double right = 0.0;
        for (const double score : problem)
            right += score > 0 ? 1.0 : 0.0;
        meanReward += meanOf(problem) / static_cast<double>(scores.size());
        meanAccuracy += right / static_cast<double>(problem.size()) / static_cast<double>(scores.size());
    }
    QVERIFY(std::fabs(meanReward - meanAccuracy) > kTolerance);
    QTemporaryDir dir;
    const io::ImportedLog core = io::importLog(io::LogSource::Verl,
        writeFile(dir, "core.jsonl",
            verlLine(0,
                {{"val-core/openai/gsm8k/reward/mean@4", meanReward}, {"val-core/openai/gsm8k/reward/best@4/mean", 1.0},
                    {"val-core/openai/gsm8k/reward/maj@4/mean", 0.9}})));
    COMPARE_NEAR(extraAt(core, 0, "eval_reward"), meanReward);
    QVERIFY(!stepOf(core, 0).accuracy && !stepOf(core, 0).reward);
    QCOMPARE(core.unmappedKeys,
        (std::vector<std::string> {
            "val-core/openai/gsm8k/reward/best@4/mean", "val-core/openai/gsm8k/reward/maj@4/mean"}));
    const std::string estimator = metricOf(core, "eval_reward")->estimator;
    QVERIFY2(contains(estimator, "mean over the 4 responses per problem of openai/gsm8k's reward-function score")
            && contains(estimator, "returns no acc"),
        estimator.c_str());

    const io::ImportedLog both = io::importLog(io::LogSource::Verl,
        writeFile(dir, "both.jsonl",
            verlLine(0,
                {{"val-core/openai/gsm8k/acc/mean@4", meanAccuracy}, {"val-aux/openai/gsm8k/reward/mean@4", meanReward},
                    {"val-aux/openai/gsm8k/acc/std@4", 0.3}})));
    COMPARE_NEAR(*stepOf(both, 0).accuracy, meanAccuracy);
    COMPARE_NEAR(extraAt(both, 0, "eval_reward"), meanReward);
    QVERIFY(contains(metricOf(both, "eval_reward")->estimator, "logged under val-aux"));

    // Two data sources: each reward under its own name, and a note for the measure left empty.
    const io::ImportedLog two = io::importLog(io::LogSource::Verl,
        writeFile(dir, "two.jsonl",
            verlLine(0,
                {{"val-core/openai/gsm8k/reward/mean@4", meanReward},
                    {"val-core/lighteval/MATH/reward/mean@4", -0.5}})));
    COMPARE_NEAR(extraAt(two, 0, "eval_reward/openai/gsm8k"), meanReward);
    COMPARE_NEAR(extraAt(two, 0, "eval_reward/lighteval/MATH"), -0.5);
    QVERIFY(!nlohmann::json::parse(stepOf(two, 0).extrasJson).contains("eval_reward"));
    QCOMPARE(two.notes.size(), std::size_t {1});
    QVERIFY2(contains(two.notes[0], "eval_reward not read")
            && contains(two.notes[0], "--map val-core/lighteval/MATH/reward/mean@4=eval_reward"),
        two.notes[0].c_str());
}

// Tinker's on-policy distillation over two datasets (tinker-cookbook 9dfcc3a2cf44432d621a01005073dc6d76a1e87a,
// tinker_cookbook/distillation/train_on_policy.py incorporate_kl_penalty): teacher_kl is the mean of log mu(y) - log
// teacher(y) over every action token of the batch, teacher_kl/dataset_<i> the same over dataset i's tokens. The total
// is the measure and each dataset's is kept under its own name; a single dataset's key repeats the total and is kept
// the same way; a log whose only teacher key is a dataset's reads it as teacher_kl.
void TestImport::tinkerPerDatasetTeacherKl()
{
    struct Datum {
        int dataset;
        std::vector<double> sampler; // log mu(y) of its action tokens
        std::vector<double> teacher; // log teacher(y)
    };
    const std::vector<Datum> batch = {{0, {-0.1, -0.9, -0.3}, {-0.4, -1.2, -0.3}}, {1, {-2.0, -0.5}, {-1.1, -0.45}},
        {0, {-0.7}, {-1.6}}, {1, {-0.2, -0.3, -1.0}, {-0.9, -0.3, -1.4}}};
    double sums[2] = {0.0, 0.0};
    double counts[2] = {0.0, 0.0};
    for (const Datum& datum : batch) {
        for (std::size_t t = 0; t < datum.sampler.size(); ++t) {
            sums[datum.dataset] += datum.sampler[t] - datum.teacher[t];
            counts[datum.dataset] += 1.0;
        }
    }
    const double total = (sums[0] + sums[1]) / (counts[0] + counts[1]);
    const double first = sums[0] / counts[0];
    const double second = sums[1] / counts[1];
    QVERIFY(allDistinct({total, first, second}));
    QTemporaryDir dir;
    const auto tinkerLog = [&](const std::string& name, const nlohmann::json& line) {
        QDir(dir.path()).mkdir(QString::fromStdString(name));
        return io::importLog(io::LogSource::Tinker, writeFile(dir, name + "/metrics.jsonl", line.dump() + "\n"));
    };
    const io::ImportedLog log = tinkerLog("two",
        {{"step", 0}, {"teacher_kl", total}, {"teacher_kl/dataset_0", first}, {"teacher_kl/dataset_1", second},
            {"optim/kl_sample_train_v1", 0.01}});
    COMPARE_NEAR(extraAt(log, 0, "teacher_kl"), total);
    COMPARE_NEAR(extraAt(log, 0, "teacher_kl/dataset_0"), first);
    COMPARE_NEAR(extraAt(log, 0, "teacher_kl/dataset_1"), second);
    QVERIFY(log.notes.empty() && log.unmappedKeys.empty());
    QCOMPARE(metricOf(log, "teacher_kl")->key, std::string("teacher_kl"));
    const io::MappedMetric* perDataset = metricOf(log, "teacher_kl/dataset_1");
    QVERIFY(perDataset && perDataset->key == "teacher_kl/dataset_1" && perDataset->unit == "nats/token");
    QVERIFY2(
        contains(perDataset->estimator, "on dataset 1 of the run's dataset_configs"), perDataset->estimator.c_str());

    const io::ImportedLog one = tinkerLog("one", {{"step", 0}, {"teacher_kl", first}, {"teacher_kl/dataset_0", first}});
    COMPARE_NEAR(extraAt(one, 0, "teacher_kl"), first);
    COMPARE_NEAR(extraAt(one, 0, "teacher_kl/dataset_0"), first);
    QCOMPARE(metricOf(one, "teacher_kl")->key, std::string("teacher_kl"));

    const io::ImportedLog only = tinkerLog("only", {{"step", 0}, {"teacher_kl/dataset_0", first}});
    COMPARE_NEAR(extraAt(only, 0, "teacher_kl"), first);
    QCOMPARE(metricOf(only, "teacher_kl")->key, std::string("teacher_kl/dataset_0"));
    QVERIFY(!nlohmann::json::parse(stepOf(only, 0).extrasJson).contains("teacher_kl/dataset_0"));
}

// Tinker's trajectory metrics (tinker-cookbook tinker_cookbook/rl/metric_util.py compute_trajectory_metrics at the
// commit above): env/all/... over the training batch, env/<tag>/... per logging tag when tags split the batch, and
// RLTestSetEvaluator's over the held-out test set, prefixed test/ by rl/train.py and test/test/ by
// distillation/train_on_policy.py. The test set's fraction correct is the accuracy and its reward eval_reward; the
// training batch's are train_accuracy and reward; each tag's is kept under its own name.
void TestImport::tinkerTagsAndEvaluation()
{
    struct Episode {
        std::string tag;
        double correct; // the environment's "correct" metric (problem_env.py)
        double reward; // its total reward: format_coef * (format - 1) + correct, format_coef 0.1
    };
    const std::vector<Episode> training = {{"gsm8k", 1, 1.0}, {"gsm8k", 0, -0.1}, {"gsm8k", 1, 1.0}, {"math", 0, 0.0},
        {"math", 1, 1.0}, {"math", 0, -0.1}, {"math", 0, 0.0}};
    const std::vector<Episode> test = {{"gsm8k", 1, 1.0}, {"gsm8k", 1, 1.0}, {"math", 0, -0.1}, {"math", 1, 1.0}};
    // Means over the episodes of `tag` ("" for all).
    const auto means = [](const std::vector<Episode>& episodes, const std::string& tag) {
        double correct = 0.0, reward = 0.0, count = 0.0;
        for (const Episode& episode : episodes) {
            if (!tag.empty() && episode.tag != tag) continue;
            correct += episode.correct;
            reward += episode.reward;
            count += 1.0;
        }
        return std::pair<double, double> {correct / count, reward / count};
    };
    const auto [allCorrect, allReward] = means(training, "");
    const auto [gsm8kCorrect, gsm8kReward] = means(training, "gsm8k");
    const auto [mathCorrect, mathReward] = means(training, "math");
    const auto [testCorrect, testReward] = means(test, "");
    QVERIFY(allDistinct(
        {allCorrect, allReward, gsm8kCorrect, gsm8kReward, mathCorrect, mathReward, testCorrect, testReward}));
    QTemporaryDir dir;
    const auto tinkerLog = [&](const std::string& name, const nlohmann::json& line) {
        QDir(dir.path()).mkdir(QString::fromStdString(name));
        return io::importLog(io::LogSource::Tinker, writeFile(dir, name + "/metrics.jsonl", line.dump() + "\n"));
    };
    const io::ImportedLog log = tinkerLog("rl",
        {{"step", 3}, {"env/all/correct", allCorrect}, {"env/all/reward/total", allReward},
            {"env/gsm8k/correct", gsm8kCorrect}, {"env/gsm8k/reward/total", gsm8kReward},
            {"env/math/correct", mathCorrect}, {"env/math/reward/total", mathReward},
            {"test/env/all/correct", testCorrect}, {"test/env/all/reward/total", testReward}});
    const store::StepMetrics& step = stepOf(log, 3);
    COMPARE_NEAR(*step.accuracy, testCorrect);
    COMPARE_NEAR(*step.reward, allReward);
    COMPARE_NEAR(extraAt(log, 3, "eval_reward"), testReward);
    COMPARE_NEAR(extraAt(log, 3, "train_accuracy"), allCorrect);
    COMPARE_NEAR(extraAt(log, 3, "train_accuracy/gsm8k"), gsm8kCorrect);
    COMPARE_NEAR(extraAt(log, 3, "train_accuracy/math"), mathCorrect);
    COMPARE_NEAR(extraAt(log, 3, "reward/gsm8k"), gsm8kReward);
    COMPARE_NEAR(extraAt(log, 3, "reward/math"), mathReward);
    const auto extras = nlohmann::json::parse(step.extrasJson);
    QVERIFY(!extras.contains("train_accuracy/all") && !extras.contains("reward/all")); // env/all/... is the total
    QVERIFY(log.notes.empty() && log.unmappedKeys.empty());
    QCOMPARE(metricOf(log, "accuracy")->key, std::string("test/env/all/correct"));
    QVERIFY(contains(metricOf(log, "accuracy")->estimator, "held-out evaluation accuracy"));
    QVERIFY(contains(metricOf(log, "train_accuracy/math")->estimator, "episodes tagged math"));
    QCOMPARE(metricOf(log, "train_accuracy/math")->unit, std::string("fraction"));

    // A CSV export of the run (one column per key) reads them the same way, each estimator naming Tinker's key.
    const std::string csv = writeFile(dir, "tinker.csv",
        "step,env/all/correct,env/gsm8k/correct,env/math/correct,test/env/all/correct\n3,"
            + nlohmann::json(allCorrect).dump() + "," + nlohmann::json(gsm8kCorrect).dump() + ","
            + nlohmann::json(mathCorrect).dump() + "," + nlohmann::json(testCorrect).dump() + "\n");
    const io::ImportedLog table = io::importLog(io::LogSource::Csv, csv);
    COMPARE_NEAR(*stepOf(table, 3).accuracy, testCorrect);
    COMPARE_NEAR(extraAt(table, 3, "train_accuracy"), allCorrect);
    COMPARE_NEAR(extraAt(table, 3, "train_accuracy/math"), mathCorrect);
    QVERIFY(contains(metricOf(table, "accuracy")->estimator, "(tinker key)"));
    QVERIFY(contains(metricOf(table, "train_accuracy/gsm8k")->estimator, "(tinker key)"));

    // On-policy distillation's evaluation: test/test/env/all/correct.
    const io::ImportedLog distillation = tinkerLog("opd",
        {{"step", 0}, {"test/test/env/all/correct", testCorrect}, {"env/all/correct", allCorrect},
            {"teacher_kl", 0.4}});
    COMPARE_NEAR(*stepOf(distillation, 0).accuracy, testCorrect);
    QVERIFY(contains(metricOf(distillation, "accuracy")->estimator, "prefixed test/test/"));

    // Two evaluators: neither is the accuracy; each is kept under its own name, and a note says how to pick one.
    const io::ImportedLog two = tinkerLog("two",
        {{"step", 0}, {"test/env/all/correct", testCorrect}, {"val/env/all/correct", gsm8kCorrect},
            {"optim/kl_sample_train_v1", 0.01}});
    QVERIFY(!stepOf(two, 0).accuracy);
    COMPARE_NEAR(extraAt(two, 0, "accuracy/test"), testCorrect);
    COMPARE_NEAR(extraAt(two, 0, "accuracy/val"), gsm8kCorrect);
    QCOMPARE(two.notes.size(), std::size_t {1});
    const std::string& note = two.notes[0];
    QVERIFY2(contains(note, "accuracy not read") && contains(note, "val/env/all/correct"), note.c_str());
    const auto proposed = note.find("--map ");
    QVERIFY2(
        proposed != std::string::npos && note.substr(proposed + 6) == "test/env/all/correct=accuracy", note.c_str());
    QVERIFY(io::checkMapEntry(note.substr(proposed + 6)).empty());
}

// NeMo-RL's mismatch metrics (NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909,
// nemo_rl/algorithms/loss/loss_functions.py ClippedPGLossFn.__call__, logged by nemo_rl/algorithms/grpo.py with the
// prefix "train" through its tensorboard logger), computed here in float64 from per-token probabilities: mu =
// exp(generation_logprobs), pi = exp(prev_logprobs) (the trainer before the step), current = exp(curr_logprobs) (the
// step's forward pass); truncated importance sampling "tis" with truncated_importance_sampling_ratio 2 (min 0), at
// token level. The event file holds float32 scalars, as a tensorboard SummaryWriter writes them.
void TestImport::nemoRlMismatchKeys()
{
    const std::vector<double> mu = {0.5, 0.1, 0.7, 0.05, 0.9};
    const std::vector<double> pi = {0.4, 0.35, 0.65, 0.2, 0.3};
    const std::vector<double> current = {0.45, 0.3, 0.6, 0.25, 0.35};
    const double n = static_cast<double>(mu.size());
    double js = 0.0, entropy = 0.0, ratio = 0.0, outside = 0.0;
    for (std::size_t t = 0; t < mu.size(); ++t) {
        const double mixture = 0.5 * (pi[t] + mu[t]);
        const double a = pi[t] / mixture;
        const double b = mu[t] / mixture;
        js += (0.5 * (a - 1.0 - std::log(a)) + 0.5 * (b - 1.0 - std::log(b))) / n;
        entropy += -(current[t] / mu[t]) * std::log(current[t]) / n;
        const double weight = pi[t] / mu[t];
        ratio += std::min(std::max(weight, 0.0), 2.0) / n;
        outside += (weight > 2.0 || weight < 0.0 ? 1.0 : 0.0) / n;
    }
    QVERIFY(allDistinct({js, entropy, ratio, outside}) && outside > 0.0);
    namespace tb = mismatch::test::tensorboard;
    std::string file = tb::record(tb::key(1, 1) + tb::doubleBits(1.7e9) + tb::lengthDelimited(3, "brain.Event:2"));
    file += tb::record(tb::eventBytes(5,
        tb::simpleValue("train/js_divergence_error", static_cast<float>(js))
            + tb::simpleValue("train/approx_entropy", static_cast<float>(entropy))
            + tb::simpleValue("train/sampling_importance_ratio", static_cast<float>(ratio))
            + tb::simpleValue("train/is_oob_ratio", static_cast<float>(outside))));
    QTemporaryDir dir;
    const std::string path = writeFile(dir, "events.out.tfevents.1700000000.host", file);
    const io::ImportedLog log = io::importLog(io::LogSource::TensorBoard, path);
    const store::StepMetrics& step = stepOf(log, 5);
    const auto asLogged = [](double value) { return static_cast<double>(static_cast<float>(value)); };
    QCOMPARE(extraAt(log, 5, "js_divergence"), asLogged(js));
    QCOMPARE(*step.entropy, asLogged(entropy));
    QCOMPARE(extraAt(log, 5, "is_weight_mean"), asLogged(ratio));
    QCOMPARE(extraAt(log, 5, "is_fraction_outside"), asLogged(outside));
    QVERIFY(!step.mismatchKl && !step.k1 && !step.k3);
    QVERIFY(log.unmappedKeys.empty());
    QVERIFY(contains(metricOf(log, "js_divergence")->estimator, "Jensen-Shannon"));
    QVERIFY(contains(metricOf(log, "entropy")->estimator, "-(pi(y) / mu(y)) log pi(y)"));
    QVERIFY(contains(metricOf(log, "is_weight_mean")->estimator, "sampling_importance_ratio"));
    QVERIFY(contains(metricOf(log, "is_fraction_outside")->estimator, "seq-mask-tis"));
}

// The key patterns' placeholders: <N> takes digits only, a text placeholder non-empty text with slashes (the match
// that ends the key wins), a vocabulary placeholder one of verl's words; a data source holding "<N>" is not replaced
// again; a key that is not UTF-8 is not read through a pattern; a long key with many partial matches is refused in
// time linear in its length (a matcher that copied each candidate would run past the test's timeout).
void TestImport::keyPatternsMatchTheirShape()
{
    const io::KnownKeyPattern accuracy = patternOf(io::LogSource::Verl, "val-core/<data source>/acc/mean@<N>");
    const auto sixteen = io::matchKeyPattern(accuracy, "val-core/openai/gsm8k/acc/mean@16");
    QVERIFY(sixteen);
    QCOMPARE(sixteen->series, std::string("accuracy/openai/gsm8k"));
    QVERIFY2(contains(sixteen->estimator, "mean over the 16 responses per problem of openai/gsm8k's acc"),
        sixteen->estimator.c_str());
    QVERIFY(sixteen->unit.empty()); // the measure's own
    const auto nested = io::matchKeyPattern(accuracy, "val-core/x/acc/mean@3/acc/mean@4");
    QVERIFY(nested && nested->series == "accuracy/x/acc/mean@3" && contains(nested->estimator, "the 4 responses"));
    const auto bracketed = io::matchKeyPattern(accuracy, "val-core/a<N>b/acc/mean@2");
    QVERIFY(bracketed && bracketed->series == "accuracy/a<N>b");
    QVERIFY2(
        contains(bracketed->estimator, "the 2 responses per problem of a<N>b's acc"), bracketed->estimator.c_str());
    for (const char* other : {"val-core//acc/mean@1", "val-core/x/acc/mean@", "val-core/x/acc/mean@1x",
             "val-core/x/acc/best@4/mean", "val-aux/x/acc/mean@1", "xval-core/x/acc/mean@1"}) {
        QVERIFY2(!io::matchKeyPattern(accuracy, other), other);
    }

    const io::KnownKeyPattern rejection
        = patternOf(io::LogSource::Verl, "rollout_corr/rollout_rs_<option>_<statistic>");
    QVERIFY(rejection.measure.empty());
    const auto deviation = io::matchKeyPattern(rejection, "rollout_corr/rollout_rs_seq_mean_k3_seq_max_deviation");
    QVERIFY(deviation && deviation->series == "rs_seq_mean_k3_seq_max_deviation" && deviation->unit == "nats");
    const auto maskedFraction = io::matchKeyPattern(rejection, "rollout_corr/rollout_rs_token_k2_seq_masked_fraction");
    QVERIFY(maskedFraction && maskedFraction->unit == "fraction");
    for (const char* other : {"rollout_corr/rollout_rs_seq_max_k1_mean", "rollout_corr/rollout_rs_masked_fraction",
             "rollout_corr/rollout_rs_token_k1_", "rollout_corr/rollout_rs_token_k1_mean_"}) {
        QVERIFY2(!io::matchKeyPattern(rejection, other), other);
    }

    const io::KnownKeyPattern evaluation = patternOf(io::LogSource::Tinker, "<evaluator>/env/all/correct");
    const auto doubled = io::matchKeyPattern(evaluation, "test/test/env/all/correct");
    QVERIFY(doubled && doubled->series == "accuracy/test/test");
    QVERIFY(
        !io::matchKeyPattern(evaluation, "/env/all/correct") && !io::matchKeyPattern(evaluation, "env/all/correct"));
    QVERIFY(!io::matchKeyPattern(evaluation, "test/env/gsm8k/correct"));

    // A key that is not UTF-8 (a CSV header's bytes) is not read through a pattern: its part would name a series in
    // the run's JSON records.
    QTemporaryDir dir;
    const std::string bytes = writeFile(dir, "bytes.csv", "step,val-core/\xff/acc/mean@1,rollout_corr/kl\n1,0.5,0.01\n");
    const io::ImportedLog notText = io::importLog(io::LogSource::Csv, bytes);
    QVERIFY(!stepOf(notText, 1).accuracy);
    QVERIFY(!notText.estimatorJson().empty());

    std::string hostile = "val-core/x";
    for (int i = 0; i < 100000; ++i)
        hostile += "/acc/mean@1x";
    QVERIFY(!io::matchKeyPattern(accuracy, hostile));
    QVERIFY(io::matchKeyPattern(accuracy, hostile + "/acc/mean@7"));
}

MISMATCH_TEST_MAIN(TestImport)
#include "test_import.moc"

// Imported runs placed on the local estimator columns (store::importedEstimators): each logged estimator's mean
// over the steps that logged it, the key it came from; a run that logged none of them, and local runs, are left
// out. Expected means are worked out by hand from the lines below.
void TestImport::importedRunsOnTheEstimatorAxes()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const std::string withEstimators = dir.filePath("verl.jsonl").toStdString();
    std::ofstream(withEstimators)
        << R"({"step": 1, "data": {"rollout_corr/kl": 0.010, "rollout_corr/k3_kl": 0.004, "training/rollout_probs_diff_mean": 0.05}})"
        << "\n"
        << R"({"step": 2, "data": {"rollout_corr/kl": 0.030, "training/rollout_probs_diff_mean": 0.07}})" << "\n"
        << R"({"step": 3, "data": {"rollout_corr/k3_kl": 0.008, "actor/entropy": 0.8}})" << "\n";
    const std::string entropyOnly = dir.filePath("entropy.jsonl").toStdString();
    std::ofstream(entropyOnly) << R"({"step": 1, "data": {"actor/entropy": 0.8}})" << "\n";
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", withEstimators, "--name", "logged"}).code, 0);
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", entropyOnly, "--name", "entropy only"}).code, 0);

    store::RunStore store = store::RunStore::open(workspace + "/workspace.db");
    store::RunSpec local;
    local.name = "local";
    local.kind = "admit";
    store.finishRun(store.beginRun(local), store::RunStatus::Finished);

    const std::vector<store::ImportedEstimators> runs = store::importedEstimators(store);
    QCOMPARE(runs.size(), std::size_t {1});
    QCOMPARE(runs[0].name, std::string("logged"));
    QCOMPARE(runs[0].source, std::string("verl"));
    QCOMPARE(runs[0].values.size(), std::size_t {3});
    const std::vector<std::tuple<std::string, std::string, double>> expected
        = {{"k1", "rollout_corr/kl", 0.02}, {"k3", "rollout_corr/k3_kl", 0.006},
            {"prob_diff", "training/rollout_probs_diff_mean", 0.06}};
    for (std::size_t i = 0; i < expected.size(); ++i) {
        const store::ImportedEstimatorValue& value = runs[0].values[i];
        QCOMPARE(value.estimator, std::get<0>(expected[i]));
        QCOMPARE(value.key, std::get<1>(expected[i]));
        QCOMPARE(value.steps, std::int64_t {2});
        // Two decimal values summed and halved in double: a few ulps from the decimal mean.
        QVERIFY2(std::abs(value.mean - std::get<2>(expected[i])) < 1e-15, value.estimator.c_str());
    }
}

namespace {

// A trainer scripted between the polls of io::followLog: the follow's wait runs the script's next action (what the
// trainer writes between two reads) and moves the test's clock by the poll interval. No thread and no sleep: each
// poll sees exactly what the script wrote before it.
struct ScriptedTrainer {
    std::vector<std::function<void()>> actions;
    std::size_t next = 0;
    double now = 0.0;

    io::FollowOptions options(double idleExitSeconds)
    {
        io::FollowOptions options;
        options.pollSeconds = 1.0;
        options.idleExitSeconds = idleExitSeconds;
        options.clock = [this] { return now; };
        options.wait = [this](double seconds) {
            now += seconds;
            if (next < actions.size()) {
                actions[next++]();
            }
        };
        return options;
    }
};

void appendTo(const std::string& path, const std::string& text)
{
    std::ofstream(path, std::ios::binary | std::ios::app) << text;
}

void replaceWith(const std::string& path, const std::string& text)
{
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string exact(double value)
{
    std::ostringstream text;
    text << std::setprecision(17) << value;
    return text.str();
}

// One line of step `step` holding k1 and k3 of `batch` (verl's file logger, or a CSV row under csvHeader()), and a
// line of the same step holding only the sampler entropy of `batch`.
std::string followLine(const std::string& format, std::int64_t step, const TokenProbabilities& batch)
{
    if (format == "csv") {
        return std::to_string(step) + "," + exact(k1(batch)) + "," + exact(k3(batch)) + ",\n";
    }
    return "{\"step\": " + std::to_string(step) + ", \"data\": {\"rollout_corr/kl\": " + exact(k1(batch))
        + ", \"rollout_corr/k3_kl\": " + exact(k3(batch)) + "}}\n";
}
std::string entropyLine(const std::string& format, std::int64_t step, const TokenProbabilities& batch)
{
    if (format == "csv") {
        return std::to_string(step) + ",,," + exact(samplerEntropy(batch)) + "\n";
    }
    return "{\"step\": " + std::to_string(step) + ", \"data\": {\"actor/entropy\": " + exact(samplerEntropy(batch))
        + "}}\n";
}
std::string csvHeader(const std::string& format)
{
    return format == "csv" ? "step,rollout_corr/kl,rollout_corr/k3_kl,actor/entropy\n" : "";
}

bool anyMessage(const io::FollowResult& result, const std::string& part)
{
    return std::any_of(result.messages.begin(), result.messages.end(),
        [&](const std::string& message) { return contains(message, part); });
}

std::string allMessages(const io::FollowResult& result)
{
    std::string text;
    for (const std::string& message : result.messages) text += message + "\n";
    return text;
}

} // namespace

void TestImport::followStoresEachStepOnceThroughTruncationAndRotation_data()
{
    QTest::addColumn<QString>("format");
    QTest::newRow("verl JSONL") << "verl";
    QTest::newRow("CSV") << "csv";
}

// A log followed while its trainer writes it (core/io/import_follow.h): a line is read only once its newline is
// there; a later line of a stored step merges into it (and a reader following the run's rows sees the merged
// values); a truncated file is read again from its start, the step it logs again taking the new values; a rotated
// file is read to its end before the new file. Each step is stored once, with the values of the lines written for
// it (the estimators computed here from the batches' probabilities).
void TestImport::followStoresEachStepOnceThroughTruncationAndRotation()
{
    QFETCH(QString, format);
    const std::string source = format.toStdString();
    QTemporaryDir dir;
    store::RunStore store = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    const std::string path = dir.path().toStdString() + (source == "csv" ? "/metrics.csv" : "/metrics.jsonl");
    const std::string line2 = followLine(source, 2, kBatchB);
    std::int64_t rowsAfterPoll3 = 0;
    std::int64_t runId = 0;
    const auto stepsNow = [&] { return runId == 0 ? std::vector<store::StepMetrics>() : store.stepsAfter(runId); };
    ScriptedTrainer trainer;
    trainer.actions = {
        // After poll 1 (the file did not exist): step 1, and half of step 2's line.
        [&] { appendTo(path, csvHeader(source) + followLine(source, 1, kBatchA) + line2.substr(0, 9)); },
        // After poll 2: only step 1 is stored (half a line is not read; as a CSV row it would read a wrong value).
        [&] {
            const auto runs = store.listRuns();
            QCOMPARE(runs.size(), std::size_t(1));
            runId = runs.front().id;
            QVERIFY(runs.front().status == store::RunStatus::Running);
            QCOMPARE(stepsNow().size(), std::size_t(1));
            appendTo(path, line2.substr(9) + followLine(source, 3, kBatchC));
        },
        // After poll 3: a later line of step 3.
        [&] {
            QCOMPARE(stepsNow().size(), std::size_t(3));
            rowsAfterPoll3 = stepsNow().back().rowId;
            appendTo(path, entropyLine(source, 3, kBatchC));
        },
        // After poll 4: the merged step 3 is what a live reader past the old rows reads. Then the trainer restarts
        // from step 2's checkpoint and rewrites its log: step 3 again with other values, then step 4.
        [&] {
            const auto fresh = store.stepsAfter(runId, rowsAfterPoll3);
            QCOMPARE(fresh.size(), std::size_t(1));
            QCOMPARE(fresh[0].step, std::int64_t(3));
            QVERIFY(fresh[0].entropy && fresh[0].k1);
            replaceWith(path, csvHeader(source) + followLine(source, 3, kBatchA) + followLine(source, 4, kBatchB));
        },
        // After poll 5: the old writer's last line, then rotation (rename, a new file).
        [&] {
            appendTo(path, followLine(source, 5, kBatchC));
            QCOMPARE(std::rename(path.c_str(), (path + ".1").c_str()), 0);
            replaceWith(path, csvHeader(source) + followLine(source, 6, kBatchA));
        },
        // Then nothing: the follow stops after 3 s without growth.
    };
    Progress progress;
    const io::FollowResult result
        = io::followLog(store, source == "csv" ? io::LogSource::Csv : io::LogSource::Verl, path, trainer.options(3.0),
            progress);
    QVERIFY2(!QTest::currentTestFailed(), allMessages(result).c_str());

    QCOMPARE(result.runId, runId);
    QCOMPARE(result.stoppedBy, std::string("idle"));
    QCOMPARE(result.truncations, std::int64_t(1));
    QCOMPARE(result.rotations, std::int64_t(1));
    QCOMPARE(result.stepsStored, std::int64_t(6));
    QCOMPARE(result.stepsUpdated, std::int64_t(2)); // step 3: its later line, then the rewritten file's
    QCOMPARE(result.log.linesRead, std::int64_t(8)); // 4 in the first file, 3 after the truncation, 1 in the new one
    QVERIFY2(anyMessage(result, "waiting for " + path + " to appear"), allMessages(result).c_str());
    QVERIFY2(anyMessage(result, "(truncated: a restarted trainer?)"), allMessages(result).c_str());
    QVERIFY2(anyMessage(result, "was replaced by a new file (rotation): the old file was read to its end"),
        allMessages(result).c_str());
    QVERIFY2(anyMessage(result, "step 3 (stored before) logged again"), allMessages(result).c_str());

    // Each step once, with its lines' values.
    const std::vector<store::StepMetrics> steps = store.stepsAfter(runId);
    std::map<std::int64_t, store::StepMetrics> byStep;
    for (const store::StepMetrics& step : steps) {
        QVERIFY2(byStep.emplace(step.step, step).second, qPrintable(QString("step %1 stored twice").arg(step.step)));
    }
    QCOMPARE(byStep.size(), std::size_t(6));
    const std::map<std::int64_t, const TokenProbabilities*> batches
        = {{1, &kBatchA}, {2, &kBatchB}, {3, &kBatchA}, {4, &kBatchB}, {5, &kBatchC}, {6, &kBatchA}};
    for (const auto& [step, batch] : batches) {
        QVERIFY2(byStep.count(step), qPrintable(QString("step %1 not stored").arg(step)));
        COMPARE_NEAR(*byStep.at(step).k1, k1(*batch));
        COMPARE_NEAR(*byStep.at(step).k3, k3(*batch));
        QCOMPARE(bool(byStep.at(step).entropy), step == 3);
    }
    COMPARE_NEAR(*byStep.at(3).entropy, samplerEntropy(kBatchC)); // kept from its line before the truncation

    // The run: finished, its record counting the stored steps, the follow's counts in its configuration.
    const auto run = store.run(runId);
    QCOMPARE(run->kind, std::string("external"));
    QVERIFY(run->status == store::RunStatus::Finished);
    const auto external = store::externalRun(store, runId);
    QVERIFY(external);
    QCOMPARE(external->source, source);
    const auto record = nlohmann::json::parse(external->estimatorJson);
    QCOMPARE(record.at("k1").at("steps").get<int>(), 6);
    QCOMPARE(record.at("entropy").at("steps").get<int>(), 1);
    const auto config = nlohmann::json::parse(run->configJson);
    QCOMPARE(config.at("follow").at("truncations").get<int>(), 1);
    QCOMPARE(config.at("follow").at("rotations").get<int>(), 1);
    QCOMPARE(config.at("import").at("lines_read").get<int>(), 8);
}

// Tinker's asynchronous trainer writes a step's evaluation line before its training line (fixtures/tinker_async).
// Followed one line per poll, each step is stored when its first line comes and completed by the next, so the run
// ends as importing the whole file stores it: the estimators from the batches' probabilities, the evaluation's
// accuracy, and the config.json beside the log in the k1 estimator.
void TestImport::followOfAnAppendedLogStoresWhatImportStores()
{
    QTemporaryDir dir;
    store::RunStore store = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    const std::string fixture = kFixtures + "tinker_async/metrics.jsonl";
    const std::string path = dir.path().toStdString() + "/metrics.jsonl";
    QVERIFY(QFile::copy(QString::fromStdString(kFixtures + "tinker_async/config.json"), dir.path() + "/config.json"));
    std::vector<std::string> lines;
    {
        std::ifstream in(fixture);
        for (std::string line; std::getline(in, line);) {
            if (!line.empty()) lines.push_back(line + "\n");
        }
    }
    QCOMPARE(lines.size(), std::size_t(5));
    ScriptedTrainer trainer;
    for (const std::string& line : lines) {
        trainer.actions.push_back([&path, line] { appendTo(path, line); });
    }
    io::FollowOptions options = trainer.options(2.0);
    options.import.map = {"test/env/all/correct=accuracy"};
    Progress progress;
    const io::FollowResult result = io::followLog(store, io::LogSource::Tinker, path, options, progress);
    QCOMPARE(result.stepsStored, std::int64_t(3));
    QCOMPARE(result.stepsUpdated, std::int64_t(2)); // steps 1 and 2: the training line after the evaluation's
    QCOMPARE(result.log.linesMerged, std::int64_t(2));

    const auto steps = store.stepsAfter(result.runId);
    QCOMPARE(steps.size(), std::size_t(3));
    const TokenProbabilities* batches[] = {&kBatchA, &kBatchB, &kBatchC};
    const std::optional<double> accuracy[] = {std::nullopt, 0.41, 0.47};
    std::map<std::int64_t, store::StepMetrics> byStep;
    for (const auto& step : steps) byStep[step.step] = step;
    for (std::int64_t step = 0; step < 3; ++step) {
        const store::StepMetrics& m = byStep.at(step);
        QVERIFY2(m.k1, qPrintable(QString("step %1 lost its training metrics").arg(step)));
        COMPARE_NEAR(*m.k1, k1(*batches[step]));
        COMPARE_NEAR(nlohmann::json::parse(m.extrasJson).at("k2").get<double>(), k2(*batches[step]));
        QVERIFY2(m.accuracy == accuracy[step], qPrintable(QString("step %1's accuracy").arg(step)));
    }
    // The same as the whole file's import, value for value.
    io::LogImportOptions whole;
    whole.map = options.import.map;
    const io::ImportedLog imported = io::importLog(io::LogSource::Tinker, fixture, whole);
    for (const store::StepMetrics& expected : imported.steps) {
        const store::StepMetrics& got = byStep.at(expected.step);
        QVERIFY(got.k1 == expected.k1);
        QVERIFY(got.entropy == expected.entropy);
        QVERIFY(got.reward == expected.reward);
        QVERIFY(got.accuracy == expected.accuracy);
        QVERIFY(nlohmann::json::parse(got.extrasJson) == nlohmann::json::parse(expected.extrasJson));
    }
    const auto record = nlohmann::json::parse(store::externalRun(store, result.runId)->estimatorJson);
    QVERIFY2(contains(record.at("k1").at("estimator").get<std::string>(), ": includes policy drift)"),
        record.dump().c_str());
    QCOMPARE(record.at("accuracy").at("steps").get<int>(), 2);
}

// A follow started again under its run's name continues the run (its steps kept, the lines read again merging as
// the same values); another file under that name, a run being followed by another writer, a log without a usable
// line and a follow cancelled before its first step store nothing.
void TestImport::followContinuesItsRunAndRefusesOthers()
{
    QTemporaryDir dir;
    const std::string database = dir.path().toStdString() + "/workspace.db";
    store::RunStore store = store::RunStore::open(database);
    const std::string path = dir.path().toStdString() + "/metrics.jsonl";
    replaceWith(path, followLine("verl", 1, kBatchA) + followLine("verl", 2, kBatchB));
    Progress progress;
    ScriptedTrainer first;
    const io::FollowResult firstResult = io::followLog(store, io::LogSource::Verl, path, first.options(2.0), progress);
    QCOMPARE(firstResult.name, std::string("verl metrics.jsonl"));
    QCOMPARE(firstResult.runSteps, std::int64_t(2));

    appendTo(path, followLine("verl", 3, kBatchC));
    ScriptedTrainer again;
    const io::FollowResult second = io::followLog(store, io::LogSource::Verl, path, again.options(2.0), progress);
    QVERIFY(second.resumed);
    QCOMPARE(second.runId, firstResult.runId);
    QCOMPARE(second.stepsUnchanged, std::int64_t(2));
    QCOMPARE(second.stepsStored, std::int64_t(1));
    QCOMPARE(second.runSteps, std::int64_t(3));
    QCOMPARE(store.stepsAfter(second.runId).size(), std::size_t(3));
    COMPARE_NEAR(*store.stepsAfter(second.runId).back().k3, k3(kBatchC));
    QVERIFY(contains(store.run(second.runId)->provenanceJson, "\"resumed\""));
    QCOMPARE(store.listRuns().size(), std::size_t(1));

    // Another file under the run's name: refused, naming the run.
    const std::string other = dir.path().toStdString() + "/other.jsonl";
    replaceWith(other, followLine("verl", 1, kBatchA));
    io::FollowOptions named = again.options(2.0);
    named.name = "verl metrics.jsonl";
    try {
        io::followLog(store, io::LogSource::Verl, other, named, progress);
        QFAIL("a follow of another file continued the run");
    } catch (const InputError& error) {
        QVERIFY2(contains(error.what(), "not an import of " + other), error.what());
    }
    // The run being written by another writer (another store here; another process alike): refused by its lock.
    {
        store::RunStore writer = store::RunStore::open(database);
        writer.reopenRun(second.runId, std::numeric_limits<std::int64_t>::max());
        ScriptedTrainer blocked;
        QVERIFY_EXCEPTION_THROWN(io::followLog(store, io::LogSource::Verl, path, blocked.options(2.0), progress), StoreError);
        writer.finishRun(second.runId, store::RunStatus::Finished);
    }
    QCOMPARE(store.listRuns().size(), std::size_t(1));

    // No usable line before the idle time: an error naming the file; cancelled before any step: CancelledError.
    const std::string empty = dir.path().toStdString() + "/empty.jsonl";
    replaceWith(empty, "{\"step\": 1}\n");
    ScriptedTrainer idle;
    try {
        io::followLog(store, io::LogSource::Verl, empty, idle.options(2.0), progress);
        QFAIL("a follow without a usable line stored a run");
    } catch (const InputError& error) {
        QVERIFY2(contains(error.what(), empty) && contains(error.what(), "no usable line") && contains(error.what(), "line 1"),
            error.what());
    }
    Progress cancelled;
    cancelled.cancel();
    ScriptedTrainer never;
    QVERIFY_EXCEPTION_THROWN(io::followLog(store, io::LogSource::Verl, empty, never.options(2.0), cancelled), CancelledError);
    QCOMPARE(store.listRuns().size(), std::size_t(1));
}

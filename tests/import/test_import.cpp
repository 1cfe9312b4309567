// Tests of the imports (core/io/import_log, core/io/import_aimet, core/store/import_store, `mismatch import`).
// The fixtures in fixtures/ were written by hand in each tool's format. Their mismatch values were computed from
// per-token probabilities of the rollout engine (mu) and the trainer (pi) that this test lists again below; the
// test recomputes every estimator from those probabilities (k1, k3, k2, chi-square, probability differences) and
// checks that each value landed in the right measure, so a swapped mapping or a probability difference stored as
// a KL fails here.
#include "app/cli/cli.h"
#include "core/common/error.h"
#include "core/io/import_aimet.h"
#include "core/io/import_log.h"
#include "core/store/import_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "tests/common/cli_runner.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>

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
    void failedStoreLeavesWorkspaceUnchanged();
    void cliImportsLogEndToEnd();
    void cliFailuresLeaveWorkspaceUnchanged();
    void cliImportsAimetScan();
};

void TestImport::verlMapsEachKeyOntoItsEstimator()
{
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl");
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{1, 2, 7}));
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
    // The other measures, as logged.
    QCOMPARE(*stepOf(log, 1).entropy, 0.8512);
    QCOMPARE(*stepOf(log, 2).reward, 0.4375);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 7).extrasJson).at("pg_loss").get<double>(), -0.0088);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 1).extrasJson).at("step_time_s").get<double>(), 41.7);
    QVERIFY(!stepOf(log, 7).accuracy); // a validation accuracy key names its data source: read only with --map

    // The estimators recorded with the run.
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("k1").at("key").get<std::string>(), std::string("rollout_corr/kl"));
    QVERIFY(contains(estimators.at("k1").at("estimator").get<std::string>(), "log mu(y) - log pi(y)"));
    QVERIFY(contains(estimators.at("k3").at("estimator").get<std::string>(), "r - 1 - log r"));
    QVERIFY(contains(estimators.at("prob_diff_mean").at("estimator").get<std::string>(), "not a KL"));
    QCOMPARE(estimators.at("prob_diff_mean").at("unit").get<std::string>(), std::string("probability"));
    QCOMPARE(estimators.at("k1").at("steps").get<int>(), 3);
    QCOMPARE(estimators.at("chi2_token").at("steps").get<int>(), 2);
    QVERIFY(!estimators.contains("mismatch_kl"));
    // Keys read by no mapping are listed, not stored.
    const std::set<std::string> unmapped(log.unmappedKeys.begin(), log.unmappedKeys.end());
    QVERIFY(unmapped.count("perf/throughput") && unmapped.count("rollout_corr/training_ppl"));
}

void TestImport::verlReportsMalformedLinesByNumber()
{
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl");
    QCOMPARE(log.linesRead, std::int64_t{10}); // 11 lines, one blank
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{1, 4, 5, 6, 7, 8, 10}));
    QVERIFY(contains(reasonOf(log, 1), "no mapped metric"));
    QVERIFY(contains(reasonOf(log, 4), "bad JSON"));
    QVERIFY(contains(reasonOf(log, 5), "no \"step\""));
    QVERIFY(contains(reasonOf(log, 6), "rollout_corr/kl is the string \"n/a\", expected a number"));
    QVERIFY(contains(reasonOf(log, 7), "step 2 was already read on line 3"));
    QVERIFY(contains(reasonOf(log, 8), "rollout_corr/kl is NaN, not a finite number"));
    QVERIFY(contains(reasonOf(log, 10), "rollout_corr/k3_kl is Infinity, not a finite number"));
    // The duplicate kept the first line's values (step 2 of the fixture's batch B, not line 7's 0.0027).
    COMPARE_NEAR(*stepOf(log, 2).k1, k1(kBatchB));
}

void TestImport::mapReplacesBuiltInSource()
{
    io::LogImportOptions options;
    options.map = {"val-core/openai/gsm8k/acc/mean@1=accuracy", "rollout_corr/kl=extra:raw_rollout_kl"};
    const auto log = io::importLog(io::LogSource::Verl, kFixtures + "verl_metrics.jsonl", options);
    // Line 1 now has a mapped metric: step 0 is kept with its validation accuracy.
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 2, 7}));
    QCOMPARE(*stepOf(log, 0).accuracy, 0.412);
    QCOMPARE(*stepOf(log, 7).accuracy, 0.455);
    // rollout_corr/kl went to extras under the given name and k1 has no source any more.
    QVERIFY(!stepOf(log, 1).k1);
    COMPARE_NEAR(nlohmann::json::parse(stepOf(log, 1).extrasJson).at("raw_rollout_kl").get<double>(), k1(kBatchA));
    // Line 6 ("n/a" under the remapped key) is still rejected, by the key's name.
    QVERIFY(contains(reasonOf(log, 6), "rollout_corr/kl is the string"));
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QVERIFY(estimators.at("accuracy").at("user_mapped").get<bool>());
    QVERIFY(!estimators.contains("k1"));
}

void TestImport::tinkerMapsSampledTokenEstimators()
{
    const auto log = io::importLog(io::LogSource::Tinker, kFixtures + "tinker_metrics.jsonl");
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 4}));
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
    QCOMPARE(*stepOf(log, 4).accuracy, 0.5);
    QCOMPARE(nlohmann::json::parse(stepOf(log, 0).extrasJson).at("teacher_kl").get<double>(), 0.731);
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{3, 4, 5, 6, 8}));
    QVERIFY(contains(reasonOf(log, 3), "env/all/reward/total is the string \"0.5\""));
    QVERIFY(contains(reasonOf(log, 4), "no \"step\""));
    QVERIFY(contains(reasonOf(log, 5), "expected a JSON object"));
    QVERIFY(contains(reasonOf(log, 6), "step 1.5 is not a non-negative integer"));
    QVERIFY(contains(reasonOf(log, 8), "-Infinity, not a finite number"));
    const auto estimators = nlohmann::json::parse(log.estimatorJson());
    QCOMPARE(estimators.at("k1").at("key").get<std::string>(), std::string("optim/kl_sample_train_v1"));
    QCOMPARE(estimators.at("k2").at("key").get<std::string>(), std::string("optim/kl_sample_train_v2"));
    QVERIFY(contains(estimators.at("teacher_kl").at("estimator").get<std::string>(), "not a mismatch"));
}

void TestImport::csvReadsMappedColumns()
{
    io::LogImportOptions options;
    options.map = {"full_kl=mismatch_kl", "reward_mean=reward", "wall=wall_time_s"};
    const auto log = io::importLog(io::LogSource::Csv, kFixtures + "generic.csv", options);
    QCOMPARE(stepNumbers(log), (std::vector<std::int64_t>{0, 1, 8}));
    // The verl key in the header is read like verl's own log.
    COMPARE_NEAR(*stepOf(log, 0).k1, k1(kBatchA));
    COMPARE_NEAR(*stepOf(log, 8).k1, k1(kBatchC));
    QCOMPARE(*stepOf(log, 1).mismatchKl, 0.0957);
    QCOMPARE(*stepOf(log, 8).reward, 0.625);
    QCOMPARE(*stepOf(log, 8).wallTimeSeconds, 109.4);
    QCOMPARE(log.linesRead, std::int64_t{10});
    QCOMPARE(skippedLines(log), (std::vector<std::int64_t>{4, 5, 6, 7, 8, 9, 10}));
    QVERIFY(contains(reasonOf(log, 4), "3 fields, expected 6"));
    QVERIFY(contains(reasonOf(log, 5), "rollout_corr/kl is \"abc\", expected a number"));
    QVERIFY(contains(reasonOf(log, 6), "full_kl is nan, not a finite number"));
    QVERIFY(contains(reasonOf(log, 7), "step 1 was already read on line 3"));
    QVERIFY(contains(reasonOf(log, 8), "step 5.5"));
    QVERIFY(contains(reasonOf(log, 9), "step column step is empty"));
    QVERIFY(contains(reasonOf(log, 10), "unterminated quoted field"));
    QCOMPARE(log.unmappedKeys, (std::vector<std::string>{"notes"}));

    // Without --map only the recognised header is read; the nan of the unread column does not reject line 6.
    const auto plain = io::importLog(io::LogSource::Csv, kFixtures + "generic.csv");
    QCOMPARE(stepNumbers(plain), (std::vector<std::int64_t>{0, 1, 4, 8}));
    QVERIFY(!stepOf(plain, 1).mismatchKl);
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
    QCOMPARE(store.stepsAfter(first.runId).size(), size_t{3});
}

void TestImport::cliImportsLogEndToEnd()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const auto result = runCli({"--workspace", workspace, "--json", "import", "verl", kFixtures + "verl_metrics.jsonl",
        "--name", "big verl run"});
    QVERIFY2(result.code == 0, result.err.c_str());
    const auto out = parseJson(result.out);
    QCOMPARE(out.at("kind").get<std::string>(), std::string("external"));
    QCOMPARE(out.at("lines_read").get<int>(), 10);
    QCOMPARE(out.at("steps_imported").get<int>(), 3);
    QCOMPARE(out.at("lines_skipped").get<int>(), 7);
    std::vector<int> lines;
    for (const auto& s : out.at("skipped")) lines.push_back(s.at("line").get<int>());
    QCOMPARE(lines, (std::vector<int>{1, 4, 5, 6, 7, 8, 10}));
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
    QCOMPARE(steps.size(), size_t{3});
    COMPARE_NEAR(*steps[1].k3, k3(kBatchB));
    const auto external = store::externalRun(store, runId);
    QVERIFY(external && contains(external->estimatorJson, "prob_diff_mean"));

    // The human summary names the estimators and the skipped lines.
    const auto human = runCli({"--workspace", workspace, "import", "tinker", kFixtures + "tinker_metrics.jsonl"});
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY(contains(human.out, "optim/kl_sample_train_v2  k2"));
    QVERIFY(contains(human.out, "line 6: the step 1.5 is not a non-negative integer"));
    const auto csv = runCli({"--workspace", workspace, "--json", "import", "csv", kFixtures + "generic.csv", "--map",
        "full_kl=mismatch_kl", "--map", "wall=wall_time_s"});
    QVERIFY2(csv.code == 0, csv.err.c_str());
    QCOMPARE(parseJson(csv.out).at("steps_imported").get<int>(), 3);
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

QTEST_MAIN(TestImport)
#include "test_import.moc"

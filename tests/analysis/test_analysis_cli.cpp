// The analysis commands end to end in-process: sensitivity, recipe build, admit and prefix-shift with --json and
// their human tables, exit codes for bad input (1) and bad arguments (2), and what they leave in the workspace.
#include "analysis_fixture.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"
#include "tests/common/golden_json.h"

#include "core/model/transformer.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"
#include "core/train/zoo.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>

using namespace mismatch;
using test::parseJson;
using test::runCli;

class TestAnalysisCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void helpTextsExist();
    void sensitivityThenRecipeBuild();
    void admitWithCandidatesFileAndThreshold();
    void admitWithStoredCalibration();
    void admitErrors();
    void admitNamesOneCandidateAfterWhatItChanges();
    void prefixShift();

private:
    std::vector<std::string> common(std::vector<std::string> arguments) const
    {
        arguments.insert(arguments.end(),
            {"--workspace", workspace_, "--prompts", probe_, "--count", "4", "--max-tokens", "8", "--resamples",
                "500"});
        return arguments;
    }
    QTemporaryDir dir_;
    std::string model_;
    std::string workspace_;
    std::string probe_;
    std::int64_t scanId_ = 0;
};

void TestAnalysisCli::initTestCase()
{
    QVERIFY(dir_.isValid());
    model_ = (dir_.path() + "/student").toStdString();
    test::writeTinyStudent(model_);
    workspace_ = (dir_.path() + "/workspace").toStdString();
    probe_ = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
}

void TestAnalysisCli::helpTextsExist()
{
    for (const std::vector<std::string>& command : std::vector<std::vector<std::string>> {{"sensitivity", "--help"},
             {"recipe", "build", "--help"}, {"admit", "--help"}, {"prefix-shift", "--help"}}) {
        const auto result = runCli(command);
        QCOMPARE(result.code, 0);
        QVERIFY2(result.out.find("--json") != std::string::npos || result.out.find("Options") != std::string::npos,
            result.out.c_str());
    }
    // `recipe` now says it builds too.
    QVERIFY(runCli({"recipe", "--help"}).out.find("build") != std::string::npos);
}

void TestAnalysisCli::sensitivityThenRecipeBuild()
{
    const auto scan = runCli(common({"--json", "sensitivity", model_, "--format", "int8", "--no-kv"}));
    QVERIFY2(scan.code == 0, scan.err.c_str());
    const nlohmann::json scanJson = parseJson(scan.out);
    QCOMPARE(scanJson["cells"].size(), std::size_t(15));
    QVERIFY(scanJson["bf16_unit"]["estimate"].get<double>() > 0.0);
    const std::int64_t scanId = scanJson["scan_id"].get<std::int64_t>();
    scanId_ = scanId;

    const auto human = runCli(common({"sensitivity", model_, "--format", "fp8_e4m3:channel", "--no-embedding"}));
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY(human.out.find("added mismatch over the BF16 unit") != std::string::npos);
    QVERIFY(human.out.find("gate") != std::string::npos);

    const std::string out = (dir_.path() + "/built.yaml").toStdString();
    const auto build = runCli({"--workspace", workspace_, "--json", "recipe", "build", "--scan", std::to_string(scanId),
        "--budget", "1000", "--out", out});
    QVERIFY2(build.code == 0, build.err.c_str());
    const nlohmann::json built = parseJson(build.out);
    QCOMPARE(built["bf16_cells"].size(), std::size_t(0)); // a generous budget: everything stays int8
    QVERIFY(built["weight_ratio"].get<double>() < 1.0);
    QVERIFY(QFile::exists(QString::fromStdString(out)));
    const auto check = runCli({"recipe", "check", out, "--model", model_});
    QVERIFY2(check.code == 0, check.err.c_str());

    const auto humanBuild = runCli({"--workspace", workspace_, "recipe", "build", "--scan", std::to_string(scanId),
        "--budget", "1000", "--out", (dir_.path() + "/built2.yaml").toStdString()});
    QVERIFY2(humanBuild.code == 0, humanBuild.err.c_str());
    QVERIFY(humanBuild.out.find("kv tokens in") != std::string::npos);
    // No budget at all: a clear error (1); budget and calibration together: an argument error (2).
    QCOMPARE(
        runCli({"--workspace", workspace_, "recipe", "build", "--scan", std::to_string(scanId), "--out", out}).code, 1);
    QCOMPARE(runCli({"--workspace", workspace_, "recipe", "build", "--scan", std::to_string(scanId), "--budget", "1",
                        "--calibration", "1", "--out", out})
                 .code,
        2);
}

void TestAnalysisCli::admitWithCandidatesFileAndThreshold()
{
    const std::string recipe = (dir_.path() + "/int4.yaml").toStdString();
    std::ofstream(recipe) << "version: 1\nweights: {format: int4}\n";
    const std::string candidates = (dir_.path() + "/candidates.yaml").toStdString();
    std::ofstream(candidates) << "- name: plain\n- name: int4\n  recipe: int4.yaml\n  noise: 0.01\n";
    const auto result = runCli(common({"--json", "admit", model_, "--candidates", candidates, "--threshold", "0.05"}));
    QVERIFY2(result.code == 0, result.err.c_str());
    const nlohmann::json json = parseJson(result.out);
    // The one admission JSON (analysis::toJson), against its fixture; tests/cli's demo test checks that the demo
    // prints the same rows.
    const std::vector<std::string> differences
        = test::goldenDifferences(json, MISMATCH_SOURCE_DIR "/tests/analysis/fixtures/admit.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    QCOMPARE(json["decisions"].size(), std::size_t(2));
    QCOMPARE(json["decisions"][0]["candidate"].get<std::string>(), std::string("plain"));
    std::int64_t admitted = 0;
    for (const nlohmann::json& decision : json["decisions"]) {
        admitted += decision["decision"].get<std::string>() == "admit" ? 1 : 0;
    }
    QCOMPARE(json["admitted"].get<std::int64_t>(), admitted);
    QCOMPARE(json["decisions"][0]["decision"].get<std::string>(), std::string("admit"));
    QCOMPARE(json["decisions"][1]["threshold"].get<double>(), 0.05);
    const store::RunStore store = store::RunStore::open(store::databasePath(workspace_), store::OpenMode::ReadOnly);
    QCOMPARE(store::admissionDecisions(store, json["run_id"].get<std::int64_t>()).size(), std::size_t(2));

    const auto human = runCli(common({"admit", model_, "--recipe", recipe, "--threshold", "0.05"}));
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY(human.out.find("decision") != std::string::npos);
    QVERIFY(human.out.find("int4") != std::string::npos);
}

void TestAnalysisCli::admitWithStoredCalibration()
{
    std::int64_t calibrationId = 0;
    {
        store::RunStore store = store::RunStore::open(store::databasePath(workspace_));
        const std::int64_t run = store.beginRun({"calibration run", "train", "{}", std::nullopt});
        store::CalibrationInfo info;
        info.name = "hand-made";
        info.student = model_;
        calibrationId = store::addCalibration(store, info, {{run, 100, 0.02, 0.5, 0.0, {}, {}, "pass"}},
            {{100, 0.02, 0.4, std::nullopt}, {200, 0.03, 0.4, 0.025}});
    }
    // A calibration made before protocols were recorded: its mismatch scale is unknown, so a screen against it is
    // refused unless the comparison is allowed explicitly, and then labelled.
    const auto refused = runCli(common(
        {"--json", "admit", model_, "--calibration", std::to_string(calibrationId), "--step", "200", "--no-unit"}));
    QCOMPARE(refused.code, 1);
    QVERIFY2(refused.err.find("stores no measurement protocol") != std::string::npos, refused.err.c_str());
    const auto result = runCli(common({"--json", "admit", model_, "--calibration", std::to_string(calibrationId),
        "--step", "200", "--no-unit", "--allow-protocol-mismatch"}));
    QVERIFY2(result.code == 0, result.err.c_str());
    const nlohmann::json json = parseJson(result.out);
    QCOMPARE(json["protocol_differs"].size(), std::size_t(1));
    QCOMPARE(json["decisions"][0]["threshold"].get<double>(), 0.025);
    // The bracket of step 200 was chosen explicitly for a checkpoint at step 0 (a model directory without
    // state.json): the decision says so.
    QCOMPARE(json["decisions"][0]["bracket_step"].get<std::int64_t>(), std::int64_t(200));
    QVERIFY(json["decisions"][0]["note"].get<std::string>().find("chosen explicitly") != std::string::npos);
    QVERIFY(json["decisions"][0]["bf16_unit"].is_null());
    // The recipe builder takes its budget from the same bracket.
    const auto build = runCli({"--workspace", workspace_, "--json", "recipe", "build", "--scan",
        std::to_string(scanId_), "--calibration", std::to_string(calibrationId), "--step", "200", "--target-fraction",
        "1", "--out", (dir_.path() + "/from-calibration.json").toStdString()});
    QVERIFY2(build.code == 0, build.err.c_str());
    const nlohmann::json built = parseJson(build.out);
    QCOMPARE(built["budget"].get<double>(), 0.025);
    QVERIFY(built["mismatch"]["estimate"].get<double>() <= 0.025);
    QVERIFY(runCli({"recipe", "check", (dir_.path() + "/from-calibration.json").toStdString()}).code == 0);
    // Two brackets and no --step: which one is ambiguous.
    const auto ambiguous = runCli(common({"admit", model_, "--calibration", std::to_string(calibrationId)}));
    QCOMPARE(ambiguous.code, 1);
    QVERIFY2(ambiguous.err.find("100, 200") != std::string::npos, ambiguous.err.c_str());
}

void TestAnalysisCli::admitErrors()
{
    const std::string bad = (dir_.path() + "/bad-candidates.yaml").toStdString();
    std::ofstream(bad) << "- name: a\n  staleness: two\n";
    const auto located = runCli(common({"admit", model_, "--candidates", bad, "--threshold", "0.1"}));
    QCOMPARE(located.code, 1);
    QVERIFY2(located.err.find(bad + ":line 2, column 14") != std::string::npos, located.err.c_str());
    // Neither threshold nor calibration.
    QCOMPARE(runCli(common({"admit", model_})).code, 1);
    // Both: an argument error.
    QCOMPARE(runCli(common({"admit", model_, "--threshold", "0.1", "--calibration", "1"})).code, 2);
    // --candidates with a single-candidate option.
    QCOMPARE(runCli(common({"admit", model_, "--candidates", bad, "--noise", "0.1", "--threshold", "0.1"})).code, 2);
}

void TestAnalysisCli::admitNamesOneCandidateAfterWhatItChanges()
{
    // A candidate given by options (no --name) is stored under a name that says what makes it differ from the BF16
    // engine: a noisy BF16 engine is not "bf16".
    const std::string recipe = (dir_.path() + "/int8-named.yaml").toStdString();
    std::ofstream(recipe) << "version: 1\nweights: {format: int8}\n";
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{}, "bf16"},
        {{"--noise", "0.05", "--noise-seed", "3"}, "bf16+noise-0.05"},
        {{"--recipe", recipe}, "int8-named"},
        {{"--recipe", recipe, "--noise", "1e-05"}, "int8-named+noise-1e-05"},
        {{"--noise", "0.05", "--name", "mine"}, "mine"},
        {{"--staleness", "1", "--history", test::checkpointAt(dir_, model_, "named-step-1", 1), "--noise", "0.01"},
            "bf16+stale-1+noise-0.01"},
    };
    const std::string screened = test::checkpointAt(dir_, model_, "named-step-2", 2);
    for (const auto& [options, expected] : cases) {
        std::vector<std::string> arguments = {"--json", "admit", screened, "--no-unit", "--threshold", "0.05"};
        arguments.insert(arguments.end(), options.begin(), options.end());
        const auto result = runCli(common(arguments));
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        QCOMPARE(json["decisions"][0]["candidate"].get<std::string>(), expected);
        const store::RunStore store
            = store::RunStore::open(store::databasePath(workspace_), store::OpenMode::ReadOnly);
        const std::vector<store::AdmissionDecision> stored
            = store::admissionDecisions(store, json["run_id"].get<std::int64_t>());
        QCOMPARE(stored.size(), std::size_t(1));
        QCOMPARE(nlohmann::json::parse(stored[0].candidateJson).at("name").get<std::string>(), expected);
    }
}

void TestAnalysisCli::prefixShift()
{
    const auto result
        = runCli(common({"--json", "prefix-shift", model_, "--noise", "0.05", "--noise-seed", "4", "--cap", "2"}));
    QVERIFY2(result.code == 0, result.err.c_str());
    const nlohmann::json json = parseJson(result.out);
    const double total = json["total"]["estimate"].get<double>();
    const double perToken = json["per_token"]["estimate"].get<double>();
    const double shift = json["prefix_shift"]["estimate"].get<double>();
    QVERIFY(std::abs(total - (perToken + shift)) <= 1e-12 * std::max(1.0, total));
    QCOMPARE(json["corrections"].size(), std::size_t(3));
    QCOMPARE(json["pairs"].get<int>(), 4);
    const store::RunStore store = store::RunStore::open(store::databasePath(workspace_), store::OpenMode::ReadOnly);
    QCOMPARE(store::prefixShiftPairs(store, json["analysis_id"].get<std::int64_t>()).size(), std::size_t(4));
    const auto human = runCli(common({"prefix-shift", model_, "--noise", "0.05"}));
    QVERIFY2(human.code == 0, human.err.c_str());
    QVERIFY(human.out.find("prefix shift (total - per-token)") != std::string::npos);
    QVERIFY(human.out.find("tis C=2") != std::string::npos);
}

MISMATCH_TEST_MAIN(TestAnalysisCli)
#include "test_analysis_cli.moc"

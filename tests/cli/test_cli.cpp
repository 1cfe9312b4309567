// The `mismatch` command line: parsing, exit codes, human and JSON output of the store commands and demo, and the
// run-name rule `mismatch train` shares with job files and the GUI.
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"
#include "tests/common/golden_json.h"
#include "core/analysis/demo.h"
#include "core/common/runtime.h"
#include "core/common/version.h"
#include "core/io/char_tokenizer_json.h"
#include "core/io/prompt_set.h"
#include "core/model/transformer.h"
#include "core/train/run_config.h"
#include "core/train/zoo.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <QElapsedTimer>

#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/types.h>

using namespace mismatch;

namespace {

using test::CliResult;
using test::runCli;
using test::parseJson;

}  // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    void versionAndHelp();
    void badArguments_data();
    void badArguments();
    void storeInitInfoRuns();
    void runsListsStoredRunsAsTableAndJson();
    void runNamesFollowOneRule();
    void badWorkspaceFileIsAnErrorNotACrash();
    void storeMergeJson();
    void demoRegistersResources();
    void realBinaryExitCodes();
    void reportOfTheDemoWorkspace();
    void kvCapacityOfA7bShapedConfig();
    void generateIsSeededAndWritesLogProbs();
    void ctrlCCancelsGenerateAndLogits();
    void importFollowStoresStepsAsTheyArrive();
    void readmeTourRuns();
};

void TestCli::versionAndHelp()
{
    const CliResult version = runCli({"--version"});
    QCOMPARE(version.code, 0);
    QVERIFY2(QString::fromStdString(version.out).contains(QString("mismatch ") + kVersion), version.out.c_str());
    QVERIFY(QString::fromStdString(version.out).contains("LibTorch"));

    const CliResult help = runCli({"--help"});
    QCOMPARE(help.code, 0);
    for (const char* word : {"store", "demo", "--workspace", "--json"}) {
        QVERIFY2(QString::fromStdString(help.out).contains(word), word);
    }
    const CliResult storeHelp = runCli({"store", "--help"});
    QCOMPARE(storeHelp.code, 0);
    for (const char* word : {"init", "info", "runs"}) {
        QVERIFY2(QString::fromStdString(storeHelp.out).contains(word), word);
    }
}

void TestCli::badArguments_data()
{
    QTest::addColumn<QStringList>("arguments");
    QTest::newRow("no command") << QStringList{};
    QTest::newRow("unknown command") << QStringList{"bogus"};
    QTest::newRow("store without subcommand") << QStringList{"store"};
    QTest::newRow("unknown option") << QStringList{"store", "info", "--frobnicate"};
    QTest::newRow("negative threads") << QStringList{"--threads", "-3", "store", "info"};
    QTest::newRow("missing workspace value") << QStringList{"store", "info", "--workspace"};
}

void TestCli::badArguments()
{
    QFETCH(QStringList, arguments);
    std::vector<std::string> args;
    for (const QString& a : arguments) {
        args.push_back(a.toStdString());
    }
    const CliResult r = runCli(args);
    QCOMPARE(r.code, 2);
    QVERIFY(!r.err.empty());
    QVERIFY(r.out.empty() || QString::fromStdString(r.out).contains("Usage"));
}

void TestCli::storeInitInfoRuns()
{
    QTemporaryDir dir;
    const std::string ws = dir.path().toStdString() + "/ws";
    // info on a workspace that does not exist yet: a clear error, nothing created.
    const CliResult missing = runCli({"--workspace", ws, "store", "info"});
    QCOMPARE(missing.code, 1);
    QVERIFY2(QString::fromStdString(missing.err).contains("does not exist"), missing.err.c_str());
    QVERIFY(!QFile::exists(QString::fromStdString(ws + "/workspace.db")));

    const CliResult init = runCli({"--workspace", ws, "--json", "store", "init"});
    QCOMPARE(init.code, 0);
    const auto initJson = parseJson(init.out);
    QCOMPARE(initJson.at("schema_version").get<int>(), store::currentSchemaVersion());
    QCOMPARE(QString::fromStdString(initJson.at("path").get<std::string>()), QString::fromStdString(ws + "/workspace.db"));

    const CliResult info = runCli({"-w", ws, "store", "info", "--json"});
    QCOMPARE(info.code, 0);
    const auto infoJson = parseJson(info.out);
    QCOMPARE(infoJson.at("runs").get<int>(), 0);
    QCOMPARE(infoJson.at("steps").get<int>(), 0);
    QVERIFY(infoJson.contains("admission_decisions"));

    const CliResult human = runCli({"-w", ws, "store", "info"});
    QCOMPARE(human.code, 0);
    QVERIFY(QString::fromStdString(human.out).contains("schema version"));

    const CliResult runs = runCli({"-w", ws, "store", "runs", "--json"});
    QCOMPARE(runs.code, 0);
    QVERIFY(parseJson(runs.out).is_array());
    QCOMPARE(parseJson(runs.out).size(), size_t(0));
}

void TestCli::runsListsStoredRunsAsTableAndJson()
{
    QTemporaryDir dir;
    const std::string ws = dir.path().toStdString();
    {
        store::RunStore s = store::RunStore::open(store::databasePath(ws));
        const auto a = s.beginRun({"opd-bf16", "train", "{}", std::nullopt});
        store::StepMetrics m;
        m.step = 0;
        m.mismatchKl = 0.0123;
        s.appendSteps(a, {m});
        s.finishRun(a, store::RunStatus::Finished);
        s.beginRun({"admit-fp8", "admit", "{}", std::nullopt});
    }
    const CliResult json = runCli({"-w", ws, "--json", "store", "runs"});
    QCOMPARE(json.code, 0);
    const auto list = parseJson(json.out);
    QCOMPARE(list.size(), size_t(2));
    QCOMPARE(QString::fromStdString(list[0].at("name").get<std::string>()), QStringLiteral("opd-bf16"));
    QCOMPARE(QString::fromStdString(list[0].at("status").get<std::string>()), QStringLiteral("finished"));
    QCOMPARE(list[0].at("steps").get<int>(), 1);
    QCOMPARE(list[0].at("last_mismatch").get<double>(), 0.0123);
    QVERIFY(list[1].at("last_mismatch").is_null());
    QCOMPARE(QString::fromStdString(list[1].at("status").get<std::string>()), QStringLiteral("running"));

    const CliResult table = runCli({"-w", ws, "store", "runs"});
    QCOMPARE(table.code, 0);
    const QString text = QString::fromStdString(table.out);
    QVERIFY(text.contains("opd-bf16"));
    QVERIFY(text.contains("admit-fp8"));
    QVERIFY(text.contains("0.0123"));
}

// One rule for run names (core/train/run_config.h): `mismatch train`, a job file's train step and the GUI's training
// form refuse the same names with the same sentences (runNameProblem, runNameTaken; the form shows them after "Run
// name: ", and tests/ui/test_main_window checks the window against the binary on one duplicate). A name a training run
// of the workspace has is refused before anything is loaded or stored, naming the run file, `name` and that run; a
// resume continues the same run and is not a new name.
void TestCli::runNamesFollowOneRule()
{
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const std::string ws = root + "/ws";
    const auto writeRunFile = [&root](const std::string& file, const std::string& nameLine) {
        const std::string path = root + "/" + file;
        std::ofstream(path) << nameLine
                            << "student: " MISMATCH_SOURCE_DIR "/resources/models/arith-student\n"
                               "teacher: " MISMATCH_SOURCE_DIR "/resources/models/arith-teacher\n"
                               "prompts: " MISMATCH_SOURCE_DIR "/resources/prompts/arith-train.jsonl\n"
                               "rollout: {sampling: {max_tokens: 4, seed: 1}}\nbatch: {prompts_per_step: 1}\n"
                               "steps: 2\ncheckpoint: {every: 1}\nseed: 3\n";
        return path;
    };
    const auto runCount = [&ws] {
        const store::RunStore store = store::RunStore::open(store::databasePath(ws), store::OpenMode::ReadOnly);
        return store.listRuns().size();
    };
    // The sentence the GUI's form shows for `name`, from the workspace as it is now.
    const auto taken = [&ws](const std::string& name) {
        const store::RunStore store = store::RunStore::open(store::databasePath(ws), store::OpenMode::ReadOnly);
        return train::runNameTaken(store, name);
    };

    // A run stopped after its first step: resumable.
    const std::string runFile = writeRunFile("twice.yaml", "name: twice\n");
    const CliResult stopped = runCli({"--workspace", ws, "train", runFile, "--stop-after", "1", "--quiet"});
    QVERIFY2(stopped.code == 0, stopped.err.c_str());
    const std::string stoppedRun = taken("twice");
    QVERIFY2(stoppedRun.find("training run 1 (running)") != std::string::npos
            && stoppedRun.find("mismatch train --resume 1") != std::string::npos,
        stoppedRun.c_str());
    // The same file again, from the command line and from a job file: refused, nothing stored.
    const CliResult again = runCli({"--workspace", ws, "train", runFile, "--quiet"});
    QCOMPARE(again.code, 1);
    QVERIFY2(again.err.find(runFile + ":name: " + stoppedRun) != std::string::npos, again.err.c_str());
    const std::string jobFile = root + "/train.job.yaml";
    std::ofstream(jobFile) << "job: train\nrun_file: " << runFile << "\n";
    const CliResult fromJob = runCli({"--workspace", ws, "run", jobFile});
    QVERIFY2(fromJob.code != 0 && fromJob.err.find(":name: " + stoppedRun) != std::string::npos, fromJob.err.c_str());
    QCOMPARE(runCount(), std::size_t(1));

    // A resume continues the run under its name (found by it); the finished run keeps the name.
    const CliResult resumed = runCli({"--workspace", ws, "train", "--resume", "twice", "--quiet"});
    QVERIFY2(resumed.code == 0, resumed.err.c_str());
    QCOMPARE(runCount(), std::size_t(1));
    const std::string finishedRun = taken("twice");
    QVERIFY2(finishedRun.find("training run 1 (finished)") != std::string::npos
            && finishedRun.find("--resume") == std::string::npos,
        finishedRun.c_str());
    const CliResult afterResume = runCli({"--workspace", ws, "train", runFile, "--quiet"});
    QCOMPARE(afterResume.code, 1);
    QVERIFY2(afterResume.err.find(runFile + ":name: " + finishedRun) != std::string::npos, afterResume.err.c_str());
    // Another name is a new run.
    const CliResult other = runCli(
        {"--workspace", ws, "train", writeRunFile("twice-2.yaml", "name: twice-2\n"), "--stop-after", "1", "--quiet"});
    QVERIFY2(other.code == 0, other.err.c_str());
    QCOMPARE(runCount(), std::size_t(2));

    // Names that are not run names, given and from the file's stem: refused where the file says them.
    const std::string problem = train::runNameProblem("two words");
    QVERIFY(!problem.empty());
    QVERIFY(train::runNameProblem("twice-2").empty());
    QVERIFY(!train::runNameProblem("base/ttq-sync-bf16").empty()); // an analysis's run: no run file can name it
    const std::string spaced = writeRunFile("spaced.yaml", "name: two words\n");
    const CliResult given = runCli({"--workspace", ws, "train", spaced, "--quiet"});
    QVERIFY2(given.code != 0 && given.err.find(spaced + ":line 1, column 7: name: " + problem) != std::string::npos,
        given.err.c_str());
    const std::string stem = writeRunFile("two words.yaml", "");
    const CliResult fromStem = runCli({"--workspace", ws, "train", stem, "--quiet"});
    QVERIFY2(fromStem.code != 0 && fromStem.err.find(problem + "; give it a `name`") != std::string::npos,
        fromStem.err.c_str());
    QCOMPARE(runCount(), std::size_t(2));
}

void TestCli::badWorkspaceFileIsAnErrorNotACrash()
{
    QTemporaryDir dir;
    QFile junk(dir.path() + "/workspace.db");
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write(QByteArray(1000, 'z'));
    junk.close();
    for (const char* command : {"init", "info", "runs"}) {
        const CliResult r = runCli({"-w", dir.path().toStdString(), "store", command});
        QCOMPARE(r.code, 1);
        QVERIFY2(QString::fromStdString(r.err).contains("is not a SQLite database"), r.err.c_str());
        QVERIFY2(QString::fromStdString(r.err).contains(dir.path() + "/workspace.db"), r.err.c_str());
    }
}

// `mismatch store merge SHARD... [--into WORKSPACE] --json` (issue 43): per shard the runs merged and the rows added
// per table (tests/cli/fixtures/store-merge.json), "already merged" the second time, and a shard whose unit was killed
// mid-run refused by name with exit 1 while the others are merged.
void TestCli::storeMergeJson()
{
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const auto shard = [&](const std::string& name, int steps, bool finish) {
        store::RunStore s = store::RunStore::open(store::databasePath(root + "/" + name));
        const std::int64_t model = s.addModel({0, "tiny", root + "/models/tiny", "Qwen2ForCausalLM", 99, "{}"});
        const std::int64_t run = s.beginRun({name + "-unit", "train", "{}", model});
        std::vector<store::StepMetrics> list;
        for (int step = 1; step <= steps; ++step) {
            store::StepMetrics m;
            m.step = step;
            m.mismatchKl = 0.01 * step + 0.003;
            list.push_back(m);
        }
        s.appendSteps(run, list);
        if (finish) {
            s.finishRun(run, store::RunStatus::Finished);
        }
    };
    shard("a", 2, true);
    shard("b", 3, true);
    shard("killed", 1, false);
    const std::string target = root + "/main";
    const CliResult first = runCli({"-w", target, "--json", "store", "merge", root + "/a", root + "/b"});
    QVERIFY2(first.code == 0, first.err.c_str());
    const nlohmann::json report = parseJson(first.out);
    const std::vector<std::string> differences
        = test::goldenDifferences(report, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/store-merge.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    QCOMPARE(report.at("shards").at(0).at("shard").get<std::string>(), store::databasePath(root + "/a"));

    const CliResult again = runCli({"--json", "store", "merge", root + "/a", root + "/b", "--into", target});
    QVERIFY2(again.code == 0, again.err.c_str());
    const nlohmann::json againReport = parseJson(again.out); // kept: a range-for over a temporary's member dangles
    for (const nlohmann::json& entry : againReport.at("shards")) {
        QCOMPARE(entry.at("status").get<std::string>(), std::string("already merged"));
        QCOMPARE(entry.at("runs").size(), size_t(0));
        QCOMPARE(entry.at("already_merged").size(), size_t(1));
    }
    const CliResult human = runCli({"-w", target, "store", "merge", root + "/a"});
    QVERIFY2(human.code == 0 && human.out.find("already merged") != std::string::npos, human.out.c_str());

    const CliResult refused = runCli({"-w", target, "--json", "store", "merge", root + "/killed"});
    QCOMPARE(refused.code, 1);
    const nlohmann::json refusal = parseJson(refused.out).at("refused").at(0);
    const std::string why = refusal.at("error").get<std::string>();
    QVERIFY2(why.find(store::databasePath(root + "/killed")) != std::string::npos, why.c_str());
    QVERIFY2(why.find("resume its unit first (mismatch run --resume 1 --workspace " + root + "/killed)")
            != std::string::npos,
        why.c_str());
    QVERIFY2(refused.err.find("1 of 1 shards refused") != std::string::npos, refused.err.c_str());
    const CliResult runs = runCli({"-w", target, "--json", "store", "runs"});
    QCOMPARE(parseJson(runs.out).size(), size_t(2)); // a's and b's runs only
}

void TestCli::demoRegistersResources()
{
    QTemporaryDir dir;
    const std::string ws = dir.path().toStdString();
    // 16 probe prompts keep the screening short: a screen under another protocol than the budget's (128), which
    // the demo allows and labels.
    const CliResult first = runCli({"-w", ws, "--json", "demo", "--count", "16"});
    QCOMPARE(first.code, 0);
    const auto report = parseJson(first.out);
    const std::vector<std::string> differences
        = test::goldenDifferences(report, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/demo.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    // The demo prints the admission rows `mismatch admit --json` prints: the same keys, row and result.
    const nlohmann::json admit = test::readFixture(MISMATCH_SOURCE_DIR "/tests/analysis/fixtures/admit.json");
    const auto keys = [](const nlohmann::json& object) {
        std::vector<std::string> names;
        for (auto it = object.begin(); it != object.end(); ++it) names.push_back(it.key());
        return names;
    };
    QCOMPARE(keys(report.at("admission")), keys(admit));
    QCOMPARE(keys(report.at("admission").at("decisions").at(0)), keys(admit.at("decisions").at(0)));
    QCOMPARE(keys(report.at("admission").at("decisions").at(0).at("mismatch")),
        keys(admit.at("decisions").at(0).at("mismatch")));
    const QDir prompts(QStringLiteral(MISMATCH_SOURCE_DIR "/resources/prompts"));
    QCOMPARE(report.at("prompt_sets").size(), static_cast<size_t>(prompts.entryList({"*.jsonl"}, QDir::Files).size()));
    // The demo run, one record run per sweep run of the shipped calibration, the admission run.
    const auto shipped = nlohmann::json::parse(
        std::ifstream(MISMATCH_SOURCE_DIR "/resources/calibrations/arith-student.json"));
    const int sweepRuns = static_cast<int>(shipped.at("runs").size());
    QCOMPARE(report.at("runs").get<int>(), 1 + sweepRuns + 1);
    QVERIFY(report.at("calibration_id").is_number());
    const auto& admission = report.at("admission");
    // Only the probe count differs from the shipped calibration's protocol, and it is said.
    QCOMPARE(admission.at("protocol_differs").size(), std::size_t(1));
    QVERIFY(admission.at("protocol_differs")[0].get<std::string>().rfind("count 16", 0) == 0);
    const auto& decisions = admission.at("decisions");
    QVERIFY(decisions.size() >= 6);
    const std::int64_t step = report.at("calibration_step").get<std::int64_t>();
    for (const auto& d : decisions) {
        // The screened checkpoint is the one of the bracket's step, and the bracket is that step's own.
        QCOMPARE(d.at("checkpoint_step").get<std::int64_t>(), step);
        QCOMPARE(d.at("bracket_step").get<std::int64_t>(), step);
        const auto& m = d.at("mismatch");
        const double mismatch = m.at("estimate").get<double>();
        QVERIFY(m.at("low").get<double>() <= mismatch && mismatch <= m.at("high").get<double>());
        const std::string verdict = d.at("decision").get<std::string>();
        // The decision follows from the interval and the threshold.
        const std::string expected = m.at("high").get<double>() < d.at("threshold").get<double>()
            ? "admit"
            : (m.at("low").get<double>() > d.at("threshold").get<double>() ? "reject" : "borderline");
        QCOMPARE(QString::fromStdString(verdict), QString::fromStdString(expected));
    }
    // Running it again registers nothing twice and reuses the shipped calibration.
    const CliResult second = runCli({"-w", ws, "--json", "demo", "--count", "4"});
    QCOMPARE(second.code, 0);
    const auto again = parseJson(second.out);
    QCOMPARE(again.at("prompt_sets").size(), report.at("prompt_sets").size());
    store::RunStore s = store::RunStore::open(store::databasePath(ws), store::OpenMode::ReadOnly);
    QCOMPARE(s.summary().promptSets, static_cast<std::int64_t>(report.at("prompt_sets").size()));
    QCOMPARE(s.summary().runs, 1 + sweepRuns + 1 + 2);
    QCOMPARE(s.summary().calibrations, std::int64_t(1));
    QCOMPARE(parseJson(second.out).at("calibration_id"), report.at("calibration_id"));
    {
        // A re-made shipped file (another content under the same name, as after a tool update) is stored beside the
        // old one, named by its digest, and used; storing it again reuses it.
        nlohmann::json remade = nlohmann::json::parse(
            std::ifstream(MISMATCH_SOURCE_DIR "/resources/calibrations/arith-student.json"));
        remade["brackets"][0]["threshold"] = 0.123;
        const std::string path = dir.path().toStdString() + "/remade.json";
        std::ofstream(path) << remade.dump();
        store::RunStore writer = store::RunStore::open(store::databasePath(ws));
        const std::int64_t first = analysis::storeShippedCalibration(writer, path, MISMATCH_SOURCE_DIR "/resources");
        QVERIFY(first != report.at("calibration_id").get<std::int64_t>());
        QVERIFY(QString::fromStdString(store::calibration(writer, first)->info.name).startsWith("demo-opd-calibration (shipped "));
        QCOMPARE(analysis::storeShippedCalibration(writer, path, MISMATCH_SOURCE_DIR "/resources"), first);
        QCOMPARE(store::calibration(writer, first)->brackets[0].threshold, std::optional<double>(0.123));
    }

    const CliResult human = runCli({"-w", ws, "demo", "--count", "4"});
    QCOMPARE(human.code, 0);
    QVERIFY(QString::fromStdString(human.out).contains("Built-in prompt sets"));
    QVERIFY(QString::fromStdString(human.out).contains("Admission check of the shipped candidates"));
    QVERIFY(QString::fromStdString(human.out).contains("OTHER PROTOCOL"));
}

void TestCli::realBinaryExitCodes()
{
    QProcess process;
    process.start(MISMATCH_CLI_PATH, {"--version"});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 0);
    const QString version = QString::fromUtf8(process.readAllStandardOutput());
    QVERIFY(version.startsWith("mismatch "));
    // The real binary re-executes itself at start-up so that OpenBLAS runs the kernels of the CPU's vector width
    // (core/common/runtime.h): on a CPU with AVX2 the core it names is never one of the generic SSE fallbacks.
    const QRegularExpressionMatch core = QRegularExpression("OpenBLAS core (\\w+)").match(version);
    bool avx2Fma = false;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    avx2Fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    if (core.hasMatch() && avx2Fma) {
        QVERIFY2(openblasCoreChoice(core.captured(1).toStdString(), true, true).empty(), qPrintable(version));
    }
    process.start(MISMATCH_CLI_PATH, {"store", "bogus"});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 2);
}

// `mismatch report` in the real binary (it makes its own offscreen QApplication): with the GUI it writes the page
// and its plots; a build without the GUI writes the page and the tables without plots and says so (checked in a
// headless build).
void TestCli::reportOfTheDemoWorkspace()
{
    QTemporaryDir dir;
    const std::string ws = dir.filePath("ws").toStdString();
    QCOMPARE(runCli({"-w", ws, "demo", "--count", "4"}).code, 0);
    const QString out = dir.filePath("report");
    QProcess process;
    process.start(MISMATCH_CLI_PATH, {"-w", QString::fromStdString(ws), "--json", "report", "workspace", "--out", out});
    QVERIFY(process.waitForFinished(120000));
    const QByteArray stdoutText = process.readAllStandardOutput();
    const QByteArray stderrText = process.readAllStandardError();
    QVERIFY2(process.exitCode() == 0, stderrText.constData());
    const auto j = parseJson(stdoutText.toStdString());
    QCOMPARE(QString::fromStdString(j.at("index").get<std::string>()), QDir(out).absoluteFilePath("index.html"));
    QVERIFY(QFile::exists(out + "/index.html"));
    // The calibration's brackets and the admission decisions as CSV tables, with and without the GUI.
    QVERIFY(QFile::exists(out + "/tables/calibration-1-brackets.csv"));
#if MISMATCH_TEST_GUI_BUILD
    QCOMPARE(j.at("with_plots").get<bool>(), true);
    // The demo stores the shipped calibration (one plot per bracket step) and screens the candidates against it.
    const auto shipped = nlohmann::json::parse(
        std::ifstream(MISMATCH_SOURCE_DIR "/resources/calibrations/arith-student.json"));
    for (const auto& bracket : shipped.at("brackets")) {
        const QString plot = out + "/plots/calibration-1-step-" + QString::number(bracket.at("step").get<int>()) + ".png";
        QVERIFY2(QFile::exists(plot), qPrintable(plot));
    }
    bool admission = false;
    for (const auto& file : j.at("files")) {
        admission = admission || file.get<std::string>().rfind("plots/admission-", 0) == 0;
    }
    QVERIFY(admission);
#else
    // Without the GUI there are no views to draw with: the page and the tables, no plots, and the page says so.
    QCOMPARE(j.at("with_plots").get<bool>(), false);
    for (const auto& section : j.at("sections")) {
        QVERIFY(section.at("plots").empty());
    }
    QVERIFY(!QFile::exists(out + "/plots"));
    QFile page(out + "/index.html");
    QVERIFY(page.open(QIODevice::ReadOnly));
    QVERIFY(page.readAll().contains("This report has no plots"));
#endif
}

void TestCli::kvCapacityOfA7bShapedConfig()
{
    // Qwen2.5-7B's shape (config only: kv-capacity needs no weights): 28 layers, 4 KV heads, head dim 128.
    QTemporaryDir dir;
    std::ofstream(dir.path().toStdString() + "/config.json")
        << R"({"architectures":["Qwen2ForCausalLM"],"hidden_size":3584,"intermediate_size":18944,)"
           R"("num_hidden_layers":28,"num_attention_heads":28,"num_key_value_heads":4,"vocab_size":152064,)"
           R"("rms_norm_eps":1e-6,"rope_theta":1000000.0,"max_position_embeddings":32768,)"
           R"("tie_word_embeddings":false,"torch_dtype":"bfloat16","eos_token_id":151643})";
    const CliResult r = runCli({"--json", "kv-capacity", "--model", dir.path().toStdString(), "--recipe",
        MISMATCH_SOURCE_DIR "/resources/recipes/fp8-kv.yaml", "--memory", "8GiB"});
    QCOMPARE(r.code, 0);
    const auto j = parseJson(r.out);
    // By hand: BF16 = 28 layers * 2 (K, V) * 4 heads * 128 dims * 2 bytes = 57344 B/token, FP8 half of it;
    // per-head float32 scales: 28 layers * 2 * 4 heads * 4 B = 896 B, taken from the budget first; blocks of 16.
    const std::int64_t budget = 8LL * 1024 * 1024 * 1024;
    QCOMPARE(j.at("bytes_per_token").get<std::int64_t>(), 28672);
    QCOMPARE(j.at("bf16_blocks").get<std::int64_t>(), budget / (16 * 57344));
    QCOMPARE(j.at("blocks").get<std::int64_t>(), (budget - 896) / (16 * 28672));
    const double ratio = static_cast<double>(j.at("blocks").get<std::int64_t>()) / j.at("bf16_blocks").get<std::int64_t>();
    QVERIFY2(ratio >= 1.93, qPrintable(QString::number(ratio)));  // the paper's figure
    const CliResult bad = runCli({"kv-capacity", "--model", dir.path().toStdString(), "--recipe",
        MISMATCH_SOURCE_DIR "/resources/recipes/fp8-kv.yaml", "--memory", "8 parsecs"});
    QVERIFY(bad.code != 0);
}

void TestCli::generateIsSeededAndWritesLogProbs()
{
    QTemporaryDir dir;
    const std::string modelDir = dir.path().toStdString() + "/model";
    const model::ModelConfig config = train::demoModelConfig(32, 2, 4, 2, 48);
    train::writeDemoModelDirectory(modelDir, config, model::randomWeights(config, 3, 0.3));
    const std::string prompts = MISMATCH_SOURCE_DIR "/resources/prompts/arith-probe.jsonl";
    auto generate = [&](const std::string& out, const std::string& seed) {
        return runCli({"--json", "generate", "--model", modelDir, "--recipe",
            MISMATCH_SOURCE_DIR "/resources/recipes/fp8-w8a8-block.yaml", "--prompts", prompts, "--max-tokens", "8",
            "--temperature", "1", "--seed", seed, "--out", out});
    };
    const std::string a = dir.path().toStdString() + "/a.jsonl";
    const std::string b = dir.path().toStdString() + "/b.jsonl";
    const std::string c = dir.path().toStdString() + "/c.jsonl";
    QCOMPARE(generate(a, "7").code, 0);
    QCOMPARE(generate(b, "7").code, 0);
    QCOMPARE(generate(c, "8").code, 0);
    auto lines = [](const std::string& path) {
        std::ifstream in(path);
        std::vector<nlohmann::json> all;
        std::string line;
        while (std::getline(in, line)) all.push_back(nlohmann::json::parse(line));
        return all;
    };
    const auto first = lines(a), same = lines(b), other = lines(c);
    QCOMPARE(first.size(), size_t(128));
    bool anyDifferent = false;
    for (size_t i = 0; i < first.size(); ++i) {
        const auto& tokens = first[i].at("tokens");
        QVERIFY(!tokens.empty() && tokens.size() <= 8);
        QCOMPARE(first[i].at("logprobs").size(), tokens.size());
        for (const auto& lp : first[i].at("logprobs")) QVERIFY(lp.get<double>() <= 0.0);
        QCOMPARE(first[i].dump(), same[i].dump());  // same seed, same output
        anyDifferent = anyDifferent || other[i].at("tokens") != tokens;
    }
    QVERIFY(anyDifferent);

    // The --json summary (tests/cli/fixtures/generate.json): with --ignore-eos every one of the 128 prompts gets
    // its 8 tokens, in one wave (the default 1 GiB cache holds them all); paths and timing vary.
    const std::string d = dir.path().toStdString() + "/d.jsonl";
    const CliResult summary = runCli({"--json", "generate", "--model", modelDir, "--prompts", prompts, "--max-tokens",
        "8", "--ignore-eos", "--noise", "0.01", "--out", d});
    QVERIFY2(summary.code == 0, summary.err.c_str());
    const std::vector<std::string> differences
        = test::goldenDifferences(parseJson(summary.out), MISMATCH_SOURCE_DIR "/tests/cli/fixtures/generate.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    QCOMPARE(lines(d).size(), size_t(128));
    // The output may not overwrite an input: an input error naming both options, nothing written.
    const CliResult overwrite = runCli({"generate", "--model", modelDir, "--prompts", d, "--out", d});
    QCOMPARE(overwrite.code, 1);
    QVERIFY2(overwrite.err.find("--out: names the same file as '--prompts'") != std::string::npos,
        overwrite.err.c_str());
    QCOMPARE(lines(d).size(), size_t(128));
}

void TestCli::ctrlCCancelsGenerateAndLogits()
{
    // Commands that drew a progress bar but ignored Ctrl-C (generate, logits, zoo build): the real binary, SIGINT once its first progress line
    // is on stderr (the job has started; 4096 prompts with 100 tokens each keep it busy for far longer than the
    // signal takes), then exit 130, the cancel named on stderr, and no output file, whole or partial.
    QTemporaryDir dir;
    const QString root = dir.path();
    const std::string modelDir = root.toStdString() + "/model";
    test::writeTinyStudent(modelDir, 3);
    const QString prompts = MISMATCH_SOURCE_DIR "/resources/prompts/arith-train.jsonl";
    const QStringList before = QDir(root).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);

    struct Case {
        const char* command;
        QStringList arguments;
        QString out;
    };
    const std::vector<Case> cases = {
        {"generate",
            {"generate", "--model", QString::fromStdString(modelDir), "--prompts", prompts, "--max-tokens", "100",
                "--ignore-eos", "--out", root + "/generated.jsonl"},
            root + "/generated.jsonl"},
        {"logits",
            {"logits", "--model", QString::fromStdString(modelDir), "--prompts", prompts, "--with-answer", "--out",
                root + "/logits.safetensors"},
            root + "/logits.safetensors"},
        // 500 training steps: cancelled while training, before any model directory (or its .partial) is made.
        {"zoo build", {"zoo", "build", "--only", "arith-student", "--out", root + "/zoo"}, root + "/zoo"},
    };
    for (const Case& c : cases) {
        QProcess process;
        process.start(MISMATCH_CLI_PATH, QStringList {"--threads", "1"} + c.arguments);
        QVERIFY2(process.waitForStarted(), c.command);
        QByteArray err;
        QElapsedTimer timer;
        timer.start();
        // Not a terminal: the bar prints one line per stage ("[  0%] loading model", "[  0%] generating ...").
        while (!err.contains("%] ") && process.state() == QProcess::Running && timer.elapsed() < 60000) {
            process.waitForReadyRead(50);
            err += process.readAllStandardError();
        }
        QVERIFY2(process.state() == QProcess::Running, c.command);
        ::kill(static_cast<pid_t>(process.processId()), SIGINT);
        QVERIFY2(process.waitForFinished(60000), c.command);
        err += process.readAllStandardError();
        QCOMPARE(process.exitStatus(), QProcess::NormalExit);
        QVERIFY2(process.exitCode() == 130, qPrintable(QString(c.command) + ": exit " + QString::number(process.exitCode())
                                                   + ", stderr: " + QString::fromUtf8(err)));
        QVERIFY2(err.contains("cancelled"), err.constData());
        QVERIFY2(!QFileInfo::exists(c.out), c.command);
        // Nothing else either (no temporary file beside it).
        QCOMPARE(QDir(root).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden), before);
    }
}

// `mismatch import verl LOG --follow` (core/io/import_follow.h) as a process while the test writes the log as a
// trainer would: it waits for the file, stores each step as its line arrives (saying so on stderr), stops after
// --idle-exit without growth with its JSON result on stdout; a second follow continues the run and SIGTERM stops it
// as a normal end (exit 0, the run finished). The k1 values are the ones written.
void TestCli::importFollowStoresStepsAsTheyArrive()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString() + "/ws";
    const QString log = dir.path() + "/metrics.jsonl";
    const std::map<int, double> k1 = {{1, 0.0125}, {2, -0.003}, {3, 0.0421}, {4, 0.0077}};
    const auto append = [&](std::initializer_list<int> steps) {
        QByteArray text;
        for (const int step : steps) {
            text += QString("{\"step\": %1, \"data\": {\"rollout_corr/kl\": %2}}\n").arg(step).arg(k1.at(step), 0, 'g', 17).toUtf8();
        }
        QFile file(log);
        QVERIFY(file.open(QIODevice::Append));
        file.write(text); // one write: the follow reads whole lines only, so a read between lines is no matter
    };
    const auto waitFor = [](QProcess& process, QByteArray& err, const QByteArray& text) {
        QElapsedTimer timer;
        timer.start();
        while (!err.contains(text) && process.state() == QProcess::Running && timer.elapsed() < 60000) {
            process.waitForReadyRead(50);
            err += process.readAllStandardError();
        }
        err += process.readAllStandardError();
        return err.contains(text);
    };

    // The options and their help; --poll or --idle-exit without --follow is an argument error.
    const CliResult help = runCli({"import", "verl", "--help"});
    for (const char* word : {"--follow", "--poll", "--idle-exit", "SIGTERM"}) {
        QVERIFY2(QString::fromStdString(help.out).contains(word), word);
    }
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", log.toStdString(), "--poll", "1"}).code, 2);
    QCOMPARE(runCli({"--workspace", workspace, "import", "verl", log.toStdString(), "--idle-exit", "1"}).code, 2);

    QProcess follow;
    follow.start(MISMATCH_CLI_PATH, {"--threads", "1", "--workspace", QString::fromStdString(workspace), "--json",
                                        "import", "verl", log, "--follow", "--poll", "0.1", "--idle-exit", "3"});
    QVERIFY(follow.waitForStarted());
    QByteArray err;
    QVERIFY2(waitFor(follow, err, "waiting for " + log.toUtf8() + " to appear"), err.constData());
    append({1});
    QVERIFY2(waitFor(follow, err, "stored step 1 "), err.constData());
    append({2, 3});
    QVERIFY2(waitFor(follow, err, "3 steps, steps 1 to 3)"), err.constData());
    QVERIFY(follow.waitForFinished(60000));
    QCOMPARE(follow.exitStatus(), QProcess::NormalExit);
    QVERIFY2(follow.exitCode() == 0, err.constData());
    const auto result = parseJson(follow.readAllStandardOutput().toStdString());
    QCOMPARE(result.at("stopped_by").get<std::string>(), std::string("idle"));
    QCOMPARE(result.at("steps_stored").get<int>(), 3);
    QCOMPARE(result.at("run_steps").get<int>(), 3);
    const std::int64_t runId = result.at("run_id").get<std::int64_t>();

    QProcess resumed;
    resumed.start(MISMATCH_CLI_PATH, {"--threads", "1", "--workspace", QString::fromStdString(workspace), "import",
                                         "verl", log, "--follow", "--poll", "0.1"});
    QVERIFY(resumed.waitForStarted());
    QByteArray resumedErr;
    QVERIFY2(waitFor(resumed, resumedErr, "continuing run " + QByteArray::number(qint64(runId))), resumedErr.constData());
    append({4});
    QVERIFY2(waitFor(resumed, resumedErr, "stored step 4 "), resumedErr.constData());
    ::kill(static_cast<pid_t>(resumed.processId()), SIGTERM);
    QVERIFY(resumed.waitForFinished(60000));
    QCOMPARE(resumed.exitStatus(), QProcess::NormalExit);
    QVERIFY2(resumed.exitCode() == 0, (resumedErr + resumed.readAllStandardError()).constData());
    QVERIFY(resumed.readAllStandardOutput().contains("stopped on request"));

    store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
    QCOMPARE(store.listRuns().size(), std::size_t(1));
    QVERIFY(store.run(runId)->status == store::RunStatus::Finished);
    const std::vector<store::StepMetrics> steps = store.stepsAfter(runId);
    QCOMPARE(steps.size(), std::size_t(4));
    for (const store::StepMetrics& step : steps) {
        QCOMPARE(*step.k1, k1.at(static_cast<int>(step.step)));
    }
}

// README.md's five-minute tour runs as written (its one `sh` block after "## A five-minute tour"), with this build's
// binary and a temporary directory in place of build/release/app/mismatch and /tmp/tour: every step exits 0, and the
// steps leave what the tour says they do.
void TestCli::readmeTourRuns()
{
    std::ifstream readme(MISMATCH_SOURCE_DIR "/README.md");
    std::stringstream text;
    text << readme.rdbuf();
    const std::string all = text.str();
    const auto tour = all.find("## A five-minute tour");
    QVERIFY(tour != std::string::npos);
    const auto begin = all.find("```sh\n", tour);
    QVERIFY(begin != std::string::npos);
    const auto end = all.find("```", begin + 6);
    QVERIFY(end != std::string::npos);
    QString script = QString::fromStdString(all.substr(begin + 6, end - begin - 6));
    QTemporaryDir dir;
    QVERIFY(script.contains("build/release/app/mismatch") && script.contains("/tmp/tour"));
    script.replace("build/release/app/mismatch", QStringLiteral(MISMATCH_CLI_PATH));
    script.replace("/tmp/tour", dir.path() + "/tour");
    QProcess shell;
    shell.setWorkingDirectory(QStringLiteral(MISMATCH_SOURCE_DIR));
    shell.start("bash", {"-e", "-c", script});
    QVERIFY(shell.waitForFinished(600000));
    const QByteArray out = shell.readAllStandardOutput();
    QVERIFY2(shell.exitCode() == 0, (out + shell.readAllStandardError()).constData());
    QVERIFY(QFile::exists(dir.path() + "/tour/recipe.yaml"));
    QVERIFY(QFile::exists(dir.path() + "/tour/vllm/vllm_serve.sh"));
    // The screen of the built recipe is a decision against the shipped budget.
    QVERIFY2(QRegularExpression("recipe +arith-student-step100 \\(step 100\\).*(admit|borderline|reject)")
                 .match(QString::fromUtf8(out))
                 .hasMatch(),
        out.constData());
}

MISMATCH_TEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"

// The `mismatch` command line: parsing, exit codes, human and JSON output of the store commands and demo.
#include "app/cli/cli.h"
#include "core/common/version.h"
#include "core/store/run_store.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <sstream>

using namespace mismatch;

namespace {

struct Result {
    int code = 0;
    std::string out;
    std::string err;
};

Result runCli(const std::vector<std::string>& arguments)
{
    std::vector<std::string> argv = {"mismatch"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    std::ostringstream out;
    std::ostringstream err;
    Result r;
    r.code = cli::run(argv, out, err);
    r.out = out.str();
    r.err = err.str();
    return r;
}

nlohmann::json parseJson(const std::string& text)
{
    try {
        return nlohmann::json::parse(text);
    } catch (const std::exception& error) {
        qFatal("output is not JSON (%s): %s", error.what(), text.c_str());
    }
}

}  // namespace

class TestCli : public QObject {
    Q_OBJECT

private slots:
    void versionAndHelp();
    void badArguments_data();
    void badArguments();
    void storeInitInfoRuns();
    void runsListsStoredRunsAsTableAndJson();
    void badWorkspaceFileIsAnErrorNotACrash();
    void demoRegistersResources();
    void realBinaryExitCodes();
};

void TestCli::versionAndHelp()
{
    const Result version = runCli({"--version"});
    QCOMPARE(version.code, 0);
    QVERIFY2(QString::fromStdString(version.out).contains(QString("mismatch ") + kVersion), version.out.c_str());
    QVERIFY(QString::fromStdString(version.out).contains("LibTorch"));

    const Result help = runCli({"--help"});
    QCOMPARE(help.code, 0);
    for (const char* word : {"store", "demo", "--workspace", "--json"}) {
        QVERIFY2(QString::fromStdString(help.out).contains(word), word);
    }
    const Result storeHelp = runCli({"store", "--help"});
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
    const Result r = runCli(args);
    QCOMPARE(r.code, 2);
    QVERIFY(!r.err.empty());
    QVERIFY(r.out.empty() || QString::fromStdString(r.out).contains("Usage"));
}

void TestCli::storeInitInfoRuns()
{
    QTemporaryDir dir;
    const std::string ws = dir.path().toStdString() + "/ws";
    // info on a workspace that does not exist yet: a clear error, nothing created.
    const Result missing = runCli({"--workspace", ws, "store", "info"});
    QCOMPARE(missing.code, 1);
    QVERIFY2(QString::fromStdString(missing.err).contains("does not exist"), missing.err.c_str());
    QVERIFY(!QFile::exists(QString::fromStdString(ws + "/workspace.db")));

    const Result init = runCli({"--workspace", ws, "--json", "store", "init"});
    QCOMPARE(init.code, 0);
    const auto initJson = parseJson(init.out);
    QCOMPARE(initJson.at("schema_version").get<int>(), store::currentSchemaVersion());
    QCOMPARE(QString::fromStdString(initJson.at("path").get<std::string>()), QString::fromStdString(ws + "/workspace.db"));

    const Result info = runCli({"-w", ws, "store", "info", "--json"});
    QCOMPARE(info.code, 0);
    const auto infoJson = parseJson(info.out);
    QCOMPARE(infoJson.at("runs").get<int>(), 0);
    QCOMPARE(infoJson.at("steps").get<int>(), 0);
    QVERIFY(infoJson.contains("admission_decisions"));

    const Result human = runCli({"-w", ws, "store", "info"});
    QCOMPARE(human.code, 0);
    QVERIFY(QString::fromStdString(human.out).contains("schema version"));

    const Result runs = runCli({"-w", ws, "store", "runs", "--json"});
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
    const Result json = runCli({"-w", ws, "--json", "store", "runs"});
    QCOMPARE(json.code, 0);
    const auto list = parseJson(json.out);
    QCOMPARE(list.size(), size_t(2));
    QCOMPARE(QString::fromStdString(list[0].at("name").get<std::string>()), QStringLiteral("opd-bf16"));
    QCOMPARE(QString::fromStdString(list[0].at("status").get<std::string>()), QStringLiteral("finished"));
    QCOMPARE(list[0].at("steps").get<int>(), 1);
    QCOMPARE(list[0].at("last_mismatch").get<double>(), 0.0123);
    QVERIFY(list[1].at("last_mismatch").is_null());
    QCOMPARE(QString::fromStdString(list[1].at("status").get<std::string>()), QStringLiteral("running"));

    const Result table = runCli({"-w", ws, "store", "runs"});
    QCOMPARE(table.code, 0);
    const QString text = QString::fromStdString(table.out);
    QVERIFY(text.contains("opd-bf16"));
    QVERIFY(text.contains("admit-fp8"));
    QVERIFY(text.contains("0.0123"));
}

void TestCli::badWorkspaceFileIsAnErrorNotACrash()
{
    QTemporaryDir dir;
    QFile junk(dir.path() + "/workspace.db");
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write(QByteArray(1000, 'z'));
    junk.close();
    for (const char* command : {"init", "info", "runs"}) {
        const Result r = runCli({"-w", dir.path().toStdString(), "store", command});
        QCOMPARE(r.code, 1);
        QVERIFY2(QString::fromStdString(r.err).contains("is not a SQLite database"), r.err.c_str());
        QVERIFY2(QString::fromStdString(r.err).contains(dir.path() + "/workspace.db"), r.err.c_str());
    }
}

void TestCli::demoRegistersResources()
{
    QTemporaryDir dir;
    const std::string ws = dir.path().toStdString();
    const Result first = runCli({"-w", ws, "--json", "demo"});
    QCOMPARE(first.code, 0);
    const auto report = parseJson(first.out);
    const QDir prompts(QStringLiteral(MISMATCH_SOURCE_DIR "/resources/prompts"));
    QCOMPARE(report.at("prompt_sets").size(), static_cast<size_t>(prompts.entryList({"*.jsonl"}, QDir::Files).size()));
    QCOMPARE(report.at("runs").get<int>(), 1);
    // Running it again registers nothing twice.
    const Result second = runCli({"-w", ws, "--json", "demo"});
    QCOMPARE(second.code, 0);
    const auto again = parseJson(second.out);
    QCOMPARE(again.at("prompt_sets").size(), report.at("prompt_sets").size());
    store::RunStore s = store::RunStore::open(store::databasePath(ws), store::OpenMode::ReadOnly);
    QCOMPARE(s.summary().promptSets, static_cast<std::int64_t>(report.at("prompt_sets").size()));
    QCOMPARE(s.summary().runs, 2);

    const Result human = runCli({"-w", ws, "demo"});
    QCOMPARE(human.code, 0);
    QVERIFY(QString::fromStdString(human.out).contains("Built-in prompt sets"));
}

void TestCli::realBinaryExitCodes()
{
    QProcess process;
    process.start(MISMATCH_CLI_PATH, {"--version"});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 0);
    QVERIFY(process.readAllStandardOutput().startsWith("mismatch "));
    process.start(MISMATCH_CLI_PATH, {"store", "bogus"});
    QVERIFY(process.waitForFinished(60000));
    QCOMPARE(process.exitCode(), 2);
}

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"

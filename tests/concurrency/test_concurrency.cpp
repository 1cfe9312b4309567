// Concurrency on one workspace: the GUI (MainWindow polling the store) and two `mismatch train` processes writing
// steps, evaluations and checkpoints at the same time, for MISMATCH_CONCURRENCY_SECONDS (default 60). No writer may
// fail (no "database is locked"), the GUI must list both runs and follow their steps, and every stored run must
// have each of its steps exactly once.
#include "core/model/transformer.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/zoo.h"
#include "tests/common/test_main.h"
#include "ui/main_window.h"
#include "ui/views/run_table_model.h"

#include <QElapsedTimer>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>

using namespace mismatch;
namespace fs = std::filesystem;

class TestConcurrency : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { Q_INIT_RESOURCE(resources); }
    void guiAndTwoWritersShareOneWorkspace();
};

void TestConcurrency::guiAndTwoWritersShareOneWorkspace()
{
    const int seconds = qEnvironmentVariableIsSet("MISMATCH_CONCURRENCY_SECONDS")
        ? qEnvironmentVariableIntValue("MISMATCH_CONCURRENCY_SECONDS")
        : 60;
    QTemporaryDir dir;
    const fs::path root(dir.path().toStdString());
    const model::ModelConfig small = train::demoModelConfig(32, 2, 2, 1, 64);
    train::writeDemoModelDirectory((root / "student").string(), small, model::randomWeights(small, 1, 0.05));
    train::writeDemoModelDirectory((root / "teacher").string(), small, model::randomWeights(small, 2, 0.3));
    const fs::path workspace = root / "workspace";
    fs::create_directories(workspace);
    store::RunStore::open(store::databasePath(workspace.string())); // created before the writers start
    std::vector<std::string> runFiles;
    for (int i = 0; i < 2; ++i) {
        const fs::path file = root / ("writer" + std::to_string(i) + ".yaml");
        std::ofstream(file) << "name: writer" << i << "\nstudent: " << (root / "student").string()
                            << "\nteacher: " << (root / "teacher").string() << "\nprompts: " MISMATCH_SOURCE_DIR
                               "/resources/prompts/arith-train.jsonl\n"
                            << "rollout: {sampling: {max_tokens: 4, seed: " << i << "}}\n"
                            << "batch: {prompts_per_step: 2}\nsteps: 100000\nseed: " << i << "\n"
                            << "evaluation: {every: 25, prompts: " MISMATCH_SOURCE_DIR
                               "/resources/prompts/arith-heldout.jsonl, count: 2, max_tokens: 4}\n"
                            << "checkpoint: {every: 40}\n";
        runFiles.push_back(file.string());
    }

    ui::MainWindow window(QString::fromStdString(workspace.string()));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    std::vector<std::unique_ptr<QProcess>> writers;
    for (const std::string& file : runFiles) {
        auto process = std::make_unique<QProcess>();
        process->start(QStringLiteral(MISMATCH_BINARY_DIR "/app/mismatch"),
            {"--workspace", QString::fromStdString(workspace.string()), "--threads", "1", "train",
                QString::fromStdString(file), "--quiet"});
        QVERIFY(process->waitForStarted());
        writers.push_back(std::move(process));
    }
    // The GUI thread keeps reading too (its own polling plus a store query every 50 ms).
    std::int64_t reads = 0;
    std::int64_t lastSeenSteps = 0;
    QTimer reader;
    QObject::connect(&reader, &QTimer::timeout, [&] {
        const store::RunStore store
            = store::RunStore::open(store::databasePath(workspace.string()), store::OpenMode::ReadOnly);
        lastSeenSteps = store.summary().steps;
        ++reads;
    });
    reader.start(50);
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < seconds * 1000) {
        QTest::qWait(100);
        for (const auto& w : writers) {
            QVERIFY2(w->state() == QProcess::Running,
                qPrintable("a writer stopped early: " + QString::fromUtf8(w->readAllStandardError())));
        }
    }
    reader.stop();
    for (const auto& w : writers) {
        ::kill(static_cast<pid_t>(w->processId()), SIGKILL);
        w->waitForFinished(10000);
        const QString err = QString::fromUtf8(w->readAllStandardError());
        QVERIFY2(!err.contains("locked") && !err.contains("busy"), qPrintable(err));
    }
    // The GUI lists both runs and has followed them.
    QTRY_COMPARE_WITH_TIMEOUT(window.runModel()->rowCount(), 2, 5000);
    const store::RunStore store = store::RunStore::open(store::databasePath(workspace.string()), store::OpenMode::ReadOnly);
    std::int64_t total = 0;
    for (const auto& run : store.listRuns()) {
        QVERIFY(run.stepCount > 10);
        QCOMPARE(*run.lastStep, run.stepCount); // steps 1..n, each once
        total += run.stepCount;
    }
    qInfo("%d s: two writers stored %lld steps (%lld evaluations), the GUI thread read the store %lld times",
        seconds, static_cast<long long>(total), static_cast<long long>(store.summary().evaluations),
        static_cast<long long>(reads));
    QVERIFY(lastSeenSteps > 0);
}

MISMATCH_TEST_MAIN(TestConcurrency)
#include "test_concurrency.moc"

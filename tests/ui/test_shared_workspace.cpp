// The GUI and headless `mismatch` processes sharing one workspace (issue: the GUI lost its SQLite locks when a
// store was opened again in its process, and a headless job then deleted the WAL under it). For a minute
// (MISMATCH_SHARED_SECONDS) the window (offscreen) runs its own jobs (training runs and prefix-shift analyses, each
// on its own connection, as the dialogs start them) while up to two real `mismatch` processes at a time train, scan
// layer sensitivity, import a log and list the runs on the same workspace. (The window and the headless processes
// make runs of different kinds, or named ones, so that each headless process's run is known for its lock check.)
// Throughout, /proc/locks must show this process holding its locks on the database and each headless job holding its
// own while its run is open, and the WAL must never disappear under the window. At the end: every process exited
// cleanly, every GUI job finished, the window never reported a store problem, the run table and the plot show exactly
// what the store holds, and PRAGMA integrity_check is "ok".
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "fixture_workspace.h"
#include "tests/common/posix_locks.h"
#include "tests/common/test_main.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/plots/run_plot.h"
#include "ui/views/run_table_model.h"

#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

using namespace mismatch;

namespace {

const QString kResources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");

// A small OPD run on the built-in pair: a dozen steps of two prompts, evaluated twice on four problems.
QString writeRunFile(const QString& directory, const QString& name)
{
    const QString path = directory + "/" + name + ".yaml";
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        qFatal("cannot write %s", qPrintable(path));
    }
    file.write(QStringLiteral(
        "name: %1\nstudent: %2/models/arith-student\nteacher: %2/models/arith-teacher\n"
        "prompts: %2/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
        "rollout:\n  sampling: {temperature: 1.0, max_tokens: 6, seed: 1}\n"
        "optimizer: {learning_rate: 1.0e-3}\nbatch: {prompts_per_step: 2, samples_per_prompt: 1}\nsteps: 12\n"
        "evaluation: {every: 6, prompts: %2/prompts/arith-heldout.jsonl, count: 4, max_tokens: 6}\n"
        "checkpoint: {every: 0}\nseed: 7\nthreads: 1\n")
                   .arg(name, kResources)
                   .toUtf8());
    return path;
}

// A CSV log for `mismatch import csv`.
QString writeLog(const QString& directory)
{
    const QString path = directory + "/log.csv";
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        qFatal("cannot write %s", qPrintable(path));
    }
    QByteArray text = "step,k1,k3\n";
    for (int step = 1; step <= 50; ++step) {
        text += QByteArray::number(step) + "," + QByteArray::number(0.01 + 0.0001 * step) + ","
            + QByteArray::number(0.009 + 0.0001 * step) + "\n";
    }
    file.write(text);
    return path;
}

struct Child {
    std::unique_ptr<QProcess> process;
    QString label;
    QString kind; // the kind of run it creates ("" for a reader)
    QString runName; // for a training run: its unique name
    std::set<std::int64_t> runsBefore; // run ids that existed when it started
    std::optional<std::int64_t> runId; // its run, once found
    int lockSamples = 0; // samples taken while its run was open
    pid_t pid = 0;
};

} // namespace

class TestSharedWorkspace : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { fixture::initGuiTest(); }

    void guiAndHeadlessJobsShareOneWorkspace();
};

// Long: one scenario read top to bottom (the window's jobs and the headless processes interleaved over a minute,
// the lock and WAL checks between them, the final integrity check); split, its steps would share a dozen locals.
void TestSharedWorkspace::guiAndHeadlessJobsShareOneWorkspace()
{
    const int seconds = qEnvironmentVariableIntValue("MISMATCH_SHARED_SECONDS") > 0
        ? qEnvironmentVariableIntValue("MISMATCH_SHARED_SECONDS")
        : 60; // the "for a minute"
    QTemporaryDir workspace;
    QTemporaryDir files;
    const std::string database = store::databasePath(workspace.path().toStdString());
    {
        store::RunStore::open(database);
    } // created, closed
    const QString log = writeLog(files.path());

    ui::MainWindow window(workspace.path());
    window.resize(1280, 820);
    window.tabs()->setCurrentIndex(ui::MainWindow::RunsTab);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    // The test's own reader: a second connection in this (the GUI's) process, as the views' store is.
    store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);

    std::vector<Child> children;
    int launched = 0;
    int cliTrainings = 0;
    auto running = [&](const QString& kind) {
        return std::any_of(children.begin(), children.end(),
            [&](const Child& c) { return c.kind == kind && c.process->state() != QProcess::NotRunning; });
    };
    auto launch = [&](int slot) {
        Child child;
        child.process = std::make_unique<QProcess>();
        QStringList arguments {"--workspace", workspace.path(), "--threads", "1"};
        // One scan at a time: its run is the first new sensitivity run.
        const int kind = slot % 4 == 1 && running(QStringLiteral("sensitivity")) ? 0 : slot % 4;
        if (kind == 0 || kind == 2) {
            child.runName = QStringLiteral("cli-train-%1").arg(++cliTrainings);
            child.kind = QStringLiteral("train");
            arguments += QStringList {"train", writeRunFile(files.path(), child.runName), "--quiet"};
        } else if (kind == 1) {
            child.kind = QStringLiteral("sensitivity");
            arguments += QStringList {"sensitivity", kResources + "/models/arith-student", "--format", "int8",
                "--prompts", kResources + "/prompts/arith-probe.jsonl", "--count", "2", "--max-tokens", "4"};
        } else if (launched % 2 == 0) {
            child.kind = QStringLiteral("external");
            arguments += QStringList {"import", "csv", log, "--name", QStringLiteral("log-%1").arg(launched)};
        } else {
            arguments += QStringList {"--json", "store", "runs"}; // a pure reader
        }
        child.label = arguments.mid(4).join(' ');
        for (const store::RunInfo& run : reader.listRuns()) {
            child.runsBefore.insert(run.id);
        }
        child.process->start(QStringLiteral(MISMATCH_CLI_PATH), arguments);
        QVERIFY2(child.process->waitForStarted(10000), qPrintable(child.label));
        child.pid = static_cast<pid_t>(child.process->processId());
        ++launched;
        children.push_back(std::move(child));
    };

    // GUI jobs: a training run or a prefix-shift analysis whenever the queue is idle, each opening its own store.
    int guiJobs = 0;
    int guiJobsFailed = 0;
    QStringList guiErrors;
    connect(window.jobQueue(), &ui::JobQueue::jobFinished, this,
        [&](int, const QString& name, bool ok, bool, const QString& error) {
            if (!ok) {
                ++guiJobsFailed;
                guiErrors << name + ": " + error;
            }
        });
    auto startGuiJob = [&] {
        ++guiJobs;
        if (guiJobs % 2 == 1) {
            const QString name = QStringLiteral("gui-train-%1").arg(guiJobs);
            QVERIFY(window.startTraining(writeRunFile(files.path(), name)) != 0);
        } else {
            ui::PrefixShiftDialog dialog(workspace.path());
            dialog.setModelDirectory(kResources + "/models/arith-student");
            dialog.setRecipe(QString());
            dialog.setNoise(0.2);
            dialog.setPromptSet(kResources + "/prompts/arith-probe.jsonl");
            dialog.setCount(4);
            dialog.setMaxTokens(6);
            dialog.setStoredPairs(2);
            QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
            window.jobQueue()->enqueue(dialog.jobName(), dialog.cliCommand(), dialog.fieldNamedJob());
        }
    };

    // The locks: this process always (its window and reader connections are open and have read), each headless
    // job while its run is open (the run exists and is still "running" after the sample).
    int ownSamples = 0;
    int childSamples = 0;
    QStringList violations;
    int liveUpdates = 0;
    int lastRowCount = window.runModel()->rowCount();
    auto sample = [&] {
        const int own = test::posixLocksHeld(::getpid(), database);
        ++ownSamples;
        if (own <= 0) {
            violations << QStringLiteral("this process held no lock on the database (sample %1)").arg(ownSamples);
        }
        if (!QFile::exists(QString::fromStdString(database) + "-wal")) {
            violations << QStringLiteral("the WAL was deleted while the window had the workspace open");
        }
        for (Child& child : children) {
            if (child.process->state() != QProcess::Running || child.kind.isEmpty()) {
                continue;
            }
            if (!child.runId) {
                for (const store::RunInfo& run : reader.listRuns()) {
                    const bool mine = child.runName.isEmpty()
                        ? run.kind == child.kind.toStdString() && !child.runsBefore.count(run.id)
                        : run.name == child.runName.toStdString();
                    if (mine && !child.runId) {
                        child.runId = run.id; // the first new run of its kind (no other process makes that kind)
                    }
                }
            }
            if (!child.runId) {
                continue; // not written anything yet: it may not hold a lock yet
            }
            const int held = test::posixLocksHeld(child.pid, database);
            const auto run = reader.run(*child.runId);
            if (run && run->status == store::RunStatus::Running && child.process->state() == QProcess::Running) {
                ++child.lockSamples;
                ++childSamples;
                if (held <= 0) {
                    violations << QStringLiteral("%1 (pid %2) held no lock while its run %3 was open")
                                      .arg(child.label)
                                      .arg(child.pid)
                                      .arg(*child.runId);
                }
            }
        }
        if (window.runModel()->rowCount() > lastRowCount) {
            ++liveUpdates; // the window saw new runs while they were being written
            lastRowCount = window.runModel()->rowCount();
        }
    };

    QElapsedTimer clock;
    clock.start();
    int slot = 0;
    while (clock.elapsed() < seconds * 1000) {
        int running = 0;
        for (const Child& child : children) {
            running += child.process->state() == QProcess::Running ? 1 : 0;
        }
        while (running < 2) {
            launch(slot++);
            ++running;
        }
        if (window.jobQueue()->runningJob() == 0 && window.jobQueue()->queuedCount() == 0) {
            startGuiJob();
        }
        sample();
        QTest::qWait(200);
    }
    // Let everything finish (sampling on), then compare.
    QElapsedTimer drain;
    drain.start();
    bool busy = true;
    while (busy && drain.elapsed() < 120000) {
        busy = window.jobQueue()->runningJob() != 0 || window.jobQueue()->queuedCount() > 0;
        for (const Child& child : children) {
            busy = busy || child.process->state() != QProcess::NotRunning;
        }
        sample();
        QTest::qWait(200);
    }
    QVERIFY2(!busy, "jobs still running two minutes after the last one started");

    for (Child& child : children) {
        const QByteArray errors = child.process->readAllStandardError();
        QVERIFY2(child.process->exitStatus() == QProcess::NormalExit && child.process->exitCode() == 0,
            qPrintable(child.label + ": exit " + QString::number(child.process->exitCode()) + "\n" + errors));
        QVERIFY2(!errors.contains("malformed") && !errors.contains("not a database"), errors.constData());
    }
    QVERIFY2(guiJobsFailed == 0, qPrintable(guiErrors.join('\n')));
    QVERIFY2(violations.isEmpty(), qPrintable(violations.mid(0, 10).join('\n')));
    QCOMPARE(window.storeProblem(), QString());

    // The window shows what the store holds: every run, its status and its steps.
    const auto runs = reader.listRuns();
    QTRY_COMPARE_WITH_TIMEOUT(window.runModel()->rowCount(), static_cast<int>(runs.size()), 5000);
    for (int row = 0; row < window.runModel()->rowCount(); ++row) {
        const store::RunInfo* shown = window.runModel()->runAt(row);
        const auto stored = reader.run(shown->id);
        QVERIFY(stored.has_value());
        QTRY_VERIFY_WITH_TIMEOUT(window.runModel()->runAt(row)->status == stored->status, 5000);
        QCOMPARE(window.runModel()->runAt(row)->stepCount, stored->stepCount);
    }
    std::int64_t lastCliRun = 0;
    for (const store::RunInfo& run : runs) {
        if (run.name.rfind("cli-train-", 0) == 0) {
            lastCliRun = run.id;
        }
    }
    QVERIFY(lastCliRun != 0);
    QVERIFY(window.showRunInTable(lastCliRun));
    QTRY_COMPARE_WITH_TIMEOUT(window.runPlot()->runId(), lastCliRun, 5000);
    QCOMPARE(static_cast<std::int64_t>(window.runPlot()->pointCount()), reader.run(lastCliRun)->stepCount);

    store::RunStore checker = store::RunStore::open(database, store::OpenMode::OpenExisting);
    store::Statement integrity(checker.handle(), "PRAGMA integrity_check");
    QVERIFY(integrity.step());
    QCOMPARE(QString::fromStdString(integrity.text(0)), QStringLiteral("ok"));

    qInfo("%d headless processes and %d GUI jobs on one workspace in %.0f s: %zu runs; locks sampled %d times in this "
          "process and %d times in headless jobs with an open run; the window saw new runs appear %d times",
        launched, guiJobs, clock.elapsed() / 1000.0, runs.size(), ownSamples, childSamples, liveUpdates);
    QVERIFY(childSamples > 0); // the headless jobs' locks were checked, not just skipped
    QVERIFY(liveUpdates >= 3);
}

MISMATCH_TEST_MAIN(TestSharedWorkspace)
#include "test_shared_workspace.moc"

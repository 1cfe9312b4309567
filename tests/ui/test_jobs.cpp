// Jobs from the GUI, offscreen: a training run started from its dialog emits progress and finishes with its run
// and plot visible; cancelling one from the job panel leaves the store consistent (run cancelled, steps whole
// and contiguous, database intact); and while another connection appends steps as fast as it can, the GUI
// event loop stays responsive (latency measured with a QTimer probe, p99 under 100 ms, printed). The Jobs tab lists
// the workspace's Slurm submissions with their units (issue 43), and the submit dialog's dry run writes the scripts.
#include "core/jobs/cluster.h"
#include "core/model/config.h"
#include "core/common/device.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/views/analysis_data.h"
#include "ui/plots/compare_plot.h"
#include "ui/dialogs/submit_dialog.h"
#include "ui/jobs/cluster_panel.h"
#include "ui/jobs/job_queue.h"
#include "ui/jobs/job_runner.h"
#include "ui/main_window.h"
#include "ui/plots/run_plot.h"
#include "ui/views/run_table_model.h"
#include "ui/dialogs/sensitivity_dialog.h"
#include "ui/views/sensitivity_view.h"
#include "ui/dialogs/training_dialog.h"
#include <qcustomplot.h>

#include <QComboBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <thread>

using namespace mismatch;

namespace {

void saveScreenshot(QWidget& widget, const QString& name)
{
    QTest::qWait(120);
    const QString path = fixture::screenshotPath(name);
    QVERIFY2(widget.grab().save(path), qPrintable(path));
    qInfo("screenshot: %s", qPrintable(path));
}

// A small OPD run on the built-in pair: a few steps of two prompts, evaluated on four held-out problems.
QString writeRunFile(const QString& directory, const QString& name, int steps, int evaluateEvery)
{
    const QString resources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");
    const QString path = directory + "/" + name + ".yaml";
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly))
        qFatal("cannot write %s", qPrintable(path));
    QString text = QStringLiteral(
        "name: %1\nstudent: %2/models/arith-student\nteacher: %2/models/arith-teacher\n"
        "prompts: %2/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
        "rollout:\n  sampling: {temperature: 1.0, max_tokens: 8, seed: 1}\n"
        "optimizer: {learning_rate: 1.0e-3}\nbatch: {prompts_per_step: 2, samples_per_prompt: 1}\nsteps: %3\n")
                       .arg(name, resources)
                       .arg(steps);
    if (evaluateEvery > 0) {
        text += QStringLiteral(
            "evaluation: {every: %1, prompts: %2/prompts/arith-heldout.jsonl, count: 4, max_tokens: 8}\n")
                    .arg(evaluateEvery)
                    .arg(resources);
    }
    text += QStringLiteral("checkpoint: {every: 0}\nseed: 7\n");
    file.write(text.toUtf8());
    return path;
}

// A sensitivity scan of the built-in student as a job file: its layers (and the embedding / lm_head cells) are the
// units a Slurm submission runs.
QString sensitivityJobText()
{
    return QStringLiteral("job: sensitivity\nmodel: %1/models/arith-student\nformat: int4:group128\n"
                          "prompts: %1/prompts/arith-probe.jsonl\ncount: 8\nmax_tokens: 6\n")
        .arg(QStringLiteral(MISMATCH_SOURCE_DIR "/resources"));
}

QString canonical(const std::string& path)
{
    return QFileInfo(QString::fromStdString(path)).canonicalFilePath();
}

} // namespace

class TestJobs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void trainingDialogRejectsBadRunFile();
    void trainingDialogChecksTheRecipeAgainstTheStudent();
    void trainingDialogShowsTheRunFilesDevice();
    void trainingFromDialogShowsProgressAndResult();
    void sensitivityScanFromDialogFillsHeatmap();
    void cancelLeavesStoreConsistent();
    void eventLoopStaysResponsiveWhileRunAppends();
    void jobsTabListsASlurmSubmission();
    void finishedSubmissionNamesItsResultIds();
    void submitDialogDryRunWritesTheStageScripts();
};

void TestJobs::initTestCase()
{
    Q_INIT_RESOURCE(resources);
    QCoreApplication::setOrganizationName("Mismatch Lab Tests");
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
}

void TestJobs::trainingDialogRejectsBadRunFile()
{
    QTemporaryDir dir;
    QFile file(dir.filePath("bad.yaml"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("name: bad\nstudent: /nonexistent/student\nobjective: opd_full_kl\n");
    file.close();
    ui::TrainingDialog dialog(dir.path());
    dialog.setRunFile(file.fileName());
    QVERIFY(!dialog.runFileValid());
    QVERIFY(!dialog.startButton()->isEnabled());
    QVERIFY2(
        dialog.errorText().contains("bad.yaml") && dialog.errorText().contains("line"), qPrintable(dialog.errorText()));
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    saveScreenshot(dialog, "training_dialog_error.png");
}

// A rollout recipe written for another model (the shipped fp8-keep-edges names layers 0-3; the demo student has 2)
// keeps Start disabled with the recipe's own error, instead of failing after Start (issue 42 item 4).
void TestJobs::trainingDialogChecksTheRecipeAgainstTheStudent()
{
    QTemporaryDir dir;
    const QString runFile = writeRunFile(dir.path(), "recipe-run", 2, 0);
    ui::TrainingDialog dialog(dir.path());
    dialog.setRunFile(runFile);
    QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
    const QString edges = QStringLiteral(MISMATCH_SOURCE_DIR "/resources/recipes/fp8-keep-edges.yaml");
    const model::ModelConfig student
        = model::loadConfig(dialog.config()->student + "/config.json");
    QVERIFY(student.numLayers < 4); // the premise: the recipe names layers the student does not have
    dialog.setRecipe(edges);
    QVERIFY(!dialog.runFileValid());
    QVERIFY(!dialog.startButton()->isEnabled());
    QVERIFY2(dialog.errorText().startsWith("Rollout recipe:") && dialog.errorText().contains("fp8-keep-edges.yaml"),
        qPrintable(dialog.errorText()));
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    saveScreenshot(dialog, "training_dialog_recipe_misfit.png");
    // A recipe that fits: Start is enabled again.
    dialog.setRecipe(QStringLiteral(MISMATCH_SOURCE_DIR "/resources/recipes/fp8-kv.yaml"));
    QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
    QVERIFY(dialog.startButton()->isEnabled());
}

void TestJobs::trainingDialogShowsTheRunFilesDevice()
{
    QTemporaryDir dir;
    const QString runFile = writeRunFile(dir.path(), "gpu-run", 2, 0);
    // A run file written for a machine with more CUDA devices than this one.
    const QString missing = QString("cuda:%1").arg(availableDevices().size() - 1);
    {
        QFile file(runFile);
        QVERIFY(file.open(QIODevice::Append));
        file.write(QString("device: %1\n").arg(missing).toUtf8());
    }
    ui::TrainingDialog dialog(dir.path());
    dialog.setRunFile(runFile);
    auto* device = dialog.findChild<QComboBox*>("runDevice");
    QVERIFY(device);
    QCOMPARE(device->currentData().toString(), missing);
    QVERIFY(device->currentText().contains("not on this machine"));
    QVERIFY(!dialog.runFileValid());
    QVERIFY2(dialog.errorText().contains("device '" + missing + "'") && dialog.errorText().contains("available: cpu"),
        qPrintable(dialog.errorText()));
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    saveScreenshot(dialog, "training_dialog_missing_device.png");
    // Choosing the CPU makes it a valid run the form writes as a new run file.
    device->setCurrentIndex(device->findData(QString("cpu")));
    QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
    QVERIFY(dialog.writesRunFile());
    QCOMPARE(QString::fromStdString(dialog.config()->device), QString("cpu"));
}

void TestJobs::trainingFromDialogShowsProgressAndResult()
{
    QTemporaryDir dir;
    const QString runFile = writeRunFile(dir.path(), "gui-opd", 4, 2);
    ui::MainWindow window(dir.path());
    window.resize(1280, 820);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    window.showTrainingDialog();
    auto* dialog = window.findChild<ui::TrainingDialog*>();
    QVERIFY(dialog);
    dialog->setRunFile(runFile);
    QVERIFY2(dialog->runFileValid(), qPrintable(dialog->errorText()));
    QVERIFY(dialog->summaryText().contains("gui-opd"));
    QCOMPARE(dialog->cliCommand(), QStringLiteral("mismatch --workspace %1 train %2").arg(dir.path(), runFile));
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    saveScreenshot(*dialog, "training_dialog.png");

    QSignalSpy progress(window.jobRunner(), &ui::JobRunner::progressChanged);
    QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
    QTest::mouseClick(dialog->startButton(), Qt::LeftButton);
    QCOMPARE(window.jobQueue()->state(1), QStringLiteral("running"));
    QVERIFY(finished.wait(120000));
    const QList<QVariant> result = finished.takeFirst();
    QVERIFY2(result.at(2).toBool(), qPrintable(result.at(4).toString()));
    // Progress arrived as the steps went (fraction = steps done / steps), ending at 1.
    QVERIFY2(progress.count() >= 4, qPrintable(QString::number(progress.count())));
    QCOMPARE(progress.last().at(0).toDouble(), 1.0);
    QCOMPARE(window.jobQueue()->state(1), QStringLiteral("finished"));

    // The run is in the browser, finished, with its steps and evaluations plotted.
    QTRY_COMPARE_WITH_TIMEOUT(window.runModel()->rowCount(), 1, 5000);
    const store::RunInfo* run = window.runModel()->runAt(0);
    QCOMPARE(QString::fromStdString(run->name), QStringLiteral("gui-opd"));
    QVERIFY(run->status == store::RunStatus::Finished);
    QCOMPARE(run->stepCount, std::int64_t(4));
    window.runTable()->selectRow(0);
    QCOMPARE(window.runPlot()->pointCount(), 4);
    QCOMPARE(window.runPlot()->evaluationCount(), 3); // steps 0, 2, 4
    saveScreenshot(window, "training_finished_run.png");
    window.tabs()->setCurrentIndex(ui::MainWindow::JobsTab);
    saveScreenshot(window, "training_job_queue.png");
}

void TestJobs::sensitivityScanFromDialogFillsHeatmap()
{
    QTemporaryDir dir;
    ui::MainWindow window(dir.path());
    window.resize(1280, 820);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    window.showSensitivityDialog();
    auto* dialog = window.findChild<ui::SensitivityDialog*>();
    QVERIFY(dialog);
    QVERIFY2(dialog->valid(), qPrintable(dialog->errorText())); // starts at the built-in student and probe set
    const QString model = QStringLiteral(MISMATCH_SOURCE_DIR "/resources/models/arith-student");
    const QString prompts = QStringLiteral(MISMATCH_SOURCE_DIR "/resources/prompts/arith-probe.jsonl");
    dialog->setModelDirectory(model);
    dialog->setPromptSet(prompts);
    dialog->setFormat("int4/group128");
    dialog->setCount(8);
    dialog->setMaxTokens(6);
    QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));
    QCOMPARE(dialog->cliCommand(),
        QStringLiteral("mismatch --workspace %1 sensitivity %2 --format int4:group128 --prompts %3 --count 8 "
                       "--max-tokens 6")
            .arg(dir.path(), model, prompts));
    QVERIFY(QTest::qWaitForWindowExposed(dialog));
    saveScreenshot(*dialog, "sensitivity_dialog.png");
    QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
    QTest::mouseClick(dialog->startButton(), Qt::LeftButton);
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.first().at(2).toBool(), qPrintable(finished.first().at(4).toString()));
    // The scan is stored and the heatmap shows it: 2 layers x (7 projections + kv) and the tied embedding cell.
    store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));
    const auto scans = store::sensitivityScans(reader);
    QCOMPARE(scans.size(), size_t(1));
    const auto scan = store::sensitivityScan(reader, scans[0].id);
    QTRY_COMPARE_WITH_TIMEOUT(window.sensitivityView()->scanId(), scans[0].id, 5000);
    QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::SensitivityTab));
    const auto& cell = scan->cells.front();
    const int column = static_cast<int>(std::find(window.sensitivityView()->moduleGroups().begin(),
                                            window.sensitivityView()->moduleGroups().end(), cell.moduleGroup)
        - window.sensitivityView()->moduleGroups().begin());
    QCOMPARE(window.sensitivityView()->colorMap()->data()->cell(
                 column, static_cast<int>(cell.layer - window.sensitivityView()->firstRow())),
        cell.addedMismatch);
    saveScreenshot(window, "sensitivity_scan_from_dialog.png");
}

void TestJobs::cancelLeavesStoreConsistent()
{
    QTemporaryDir dir;
    const QString runFile = writeRunFile(dir.path(), "long-opd", 400, 0);
    ui::MainWindow window(dir.path());
    window.resize(1280, 820);
    window.tabs()->setCurrentIndex(ui::MainWindow::JobsTab);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QSignalSpy progress(window.jobRunner(), &ui::JobRunner::progressChanged);
    QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
    const int job = window.startTraining(runFile);
    QVERIFY(job != 0);
    // The same run again: its name is taken by the running job.
    QCOMPARE(window.startTraining(runFile), 0);
    QVERIFY2(window.lastError().contains("already used"), qPrintable(window.lastError()));
    // A second job queued behind it, dropped from the queue before it starts (no question: it never ran).
    const int queued = window.startTraining(writeRunFile(dir.path(), "long-opd-2", 400, 0));
    QCOMPARE(window.jobQueue()->state(queued), QStringLiteral("queued"));
    QVERIFY(window.requestCancel(queued));
    QVERIFY(!window.cancelQuestion());
    QCOMPARE(window.jobQueue()->state(queued), QStringLiteral("cancelled"));

    // Let a few steps be stored, then cancel from the panel.
    QTRY_VERIFY_WITH_TIMEOUT(!progress.isEmpty() && progress.last().at(0).toDouble() >= 3.0 / 400, 60000);
    window.jobPanel()->table()->selectRow(window.jobQueue()->rowOf(job));
    QCOMPARE(window.jobQueue()->state(job), QStringLiteral("running"));
    QVERIFY(window.findChild<QProgressBar*>("jobProgress")->isVisible());
    saveScreenshot(window, "training_running.png");
    // A stray Esc asks first; keeping the job running leaves it running.
    QTest::keyClick(&window, Qt::Key_Escape);
    QVERIFY(window.cancelQuestion());
    QVERIFY(window.cancelQuestion()->text().contains("long-opd"));
    saveScreenshot(*window.cancelQuestion(), "cancel_question.png");
    QTest::mouseClick(window.cancelQuestion()->findChild<QPushButton*>("keepRunningButton"), Qt::LeftButton);
    QTRY_VERIFY(!window.cancelQuestion());
    QCOMPARE(window.jobQueue()->state(job), QStringLiteral("running"));
    // Cancel from the panel, confirmed.
    QTest::mouseClick(window.jobPanel()->findChild<QPushButton*>("cancelJobButton"), Qt::LeftButton);
    QVERIFY(window.cancelQuestion());
    QCOMPARE(window.jobQueue()->state(job), QStringLiteral("running"));
    QTest::mouseClick(window.cancelQuestion()->findChild<QPushButton*>("confirmCancelButton"), Qt::LeftButton);
    QVERIFY(finished.wait(60000));
    const QList<QVariant> result = finished.takeFirst();
    QCOMPARE(result.at(0).toInt(), job);
    QVERIFY(!result.at(2).toBool());
    QVERIFY(result.at(3).toBool()); // cancelled
    QCOMPARE(window.jobQueue()->state(job), QStringLiteral("cancelled"));
    QTest::qWait(200);
    QCOMPARE(finished.count(), 0); // the dropped job never ran

    // The store: one run, cancelled, finish time set, steps 1..n whole and contiguous, nothing half-written.
    store::RunStore reader
        = store::RunStore::open(store::databasePath(dir.path().toStdString()), store::OpenMode::ReadOnly);
    const auto runs = reader.listRuns();
    QCOMPARE(runs.size(), size_t(1));
    QVERIFY(runs[0].status == store::RunStatus::Cancelled);
    QVERIFY(!runs[0].finishedAt.empty());
    const auto steps = reader.stepsAfter(runs[0].id);
    QVERIFY(steps.size() >= 3 && steps.size() < 400);
    QCOMPARE(runs[0].stepCount, static_cast<std::int64_t>(steps.size()));
    for (size_t i = 0; i < steps.size(); ++i) {
        QCOMPARE(steps[i].step, static_cast<std::int64_t>(i + 1));
        QVERIFY(steps[i].mismatchKl.has_value() && steps[i].loss.has_value());
    }
    store::Statement integrity(reader.handle(), "PRAGMA integrity_check");
    QVERIFY(integrity.step());
    QCOMPARE(QString::fromStdString(integrity.text(0)), QStringLiteral("ok"));
    // The GUI shows it cancelled.
    QTRY_COMPARE_WITH_TIMEOUT(
        window.runModel()->data(window.runModel()->index(0, ui::RunTableModel::Status), Qt::DisplayRole).toString(),
        QStringLiteral("cancelled"), 5000);
    saveScreenshot(window, "training_cancelled_jobs.png");
}

void TestJobs::eventLoopStaysResponsiveWhileRunAppends()
{
    QTemporaryDir dir;
    ui::MainWindow window(dir.path());
    window.resize(1280, 820);
    window.tabs()->setCurrentIndex(ui::MainWindow::RunsTab); // the run plot following the writer
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    // Another connection on its own thread (as `mismatch train` in another process would) creates a run, then
    // appends a step every 2 ms, one transaction each, for 4 seconds.
    const std::string database = store::databasePath(dir.path().toStdString());
    store::RunStore writer = store::RunStore::open(database);
    const std::int64_t runId = writer.beginRun({"fast-writer", "train", "{}", std::nullopt});
    writer.appendSteps(runId, fixture::steps(1, 1, 0.01, 0.0002));
    QTRY_COMPARE_WITH_TIMEOUT(window.runModel()->rowCount(), 1, 5000);
    window.runTable()->selectRow(0);
    QCOMPARE(window.runPlot()->runId(), runId);

    std::atomic<bool> stop {false};
    std::atomic<int> written {1};
    std::thread appender([&] {
        int step = 2;
        const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
        while (!stop.load() && std::chrono::steady_clock::now() < end) {
            writer.appendSteps(runId, fixture::steps(step, 1, 0.01, 0.0002));
            written.store(step++);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
    });

    // The probe: a 10 ms timer; latency = how late each tick fires after the previous one.
    constexpr int kProbeMs = 10;
    std::vector<double> lateness;
    QElapsedTimer clock;
    QTimer probe;
    probe.setTimerType(Qt::PreciseTimer);
    qint64 last = 0;
    clock.start();
    connect(&probe, &QTimer::timeout, this, [&] {
        const qint64 now = clock.nsecsElapsed();
        if (last != 0)
            lateness.push_back(std::max(0.0, (now - last) / 1e6 - kProbeMs));
        last = now;
    });
    probe.start(kProbeMs);
    QTest::qWait(4300);
    probe.stop();
    stop.store(true);
    appender.join();

    std::sort(lateness.begin(), lateness.end());
    QVERIFY(lateness.size() > 100);
    const double p50 = lateness[lateness.size() / 2];
    const double p99 = lateness[static_cast<size_t>(0.99 * (lateness.size() - 1))];
    const double worst = lateness.back();
    qInfo("event-loop latency while %d steps were appended (one commit each): p50 %.1f ms, p99 %.1f ms, max %.1f ms "
          "over %zu probe ticks; replots %d",
        written.load(), p50, p99, worst, lateness.size(), window.runPlot()->replotCount());
    QVERIFY2(p99 < 100.0, qPrintable(QString("p99 event-loop latency %1 ms").arg(p99)));
    // The window kept up: every step plotted, replotted far fewer times than steps arrived (throttled).
    QTRY_COMPARE_WITH_TIMEOUT(window.runPlot()->pointCount(), written.load(), 5000);
    QVERIFY(window.runPlot()->replotCount() < written.load() / 10);
    saveScreenshot(window, "live_fast_writer.png");
}

// A submission written by jobs::cluster::submit (a dry run: its units wait, nothing is handed to Slurm) is listed in
// the Jobs tab with its units pending; the tab fits a 1024x700 window; Merge runs off the GUI thread and has the
// window read the store again.
// What a finished submission's status shows of its result (the CLI's `mismatch status` line and the Jobs tab, one
// core function): the integers under keys ending in _id and merged_units, in the result's key order; other numbers,
// strings and a bare "id" are left to --json.
void TestJobs::finishedSubmissionNamesItsResultIds()
{
    const nlohmann::json result = {{"run_id", 25}, {"calibration_id", 1}, {"threshold", 0.06}, {"merged_units", 4},
        {"name", "sweep"}, {"scan_id", "3"}, {"id", 5}, {"steps", 120}};
    const std::vector<std::pair<std::string, std::int64_t>> expected
        = {{"calibration_id", 1}, {"merged_units", 4}, {"run_id", 25}};
    QCOMPARE(jobs::cluster::resultIds(result), expected);
    QCOMPARE(ui::describeResult(result), QStringLiteral("calibration 1, merged units 4, run 25"));
    QVERIFY(jobs::cluster::resultIds(nlohmann::json::array({1, 2})).empty());
    QCOMPARE(ui::describeResult(nlohmann::json()), QString());
}

void TestJobs::jobsTabListsASlurmSubmission()
{
    QTemporaryDir dir;
    const QString jobFile = dir.filePath("scan.yaml");
    {
        QFile file(jobFile);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(sensitivityJobText().toUtf8());
    }
    jobs::cluster::SubmitOptions options;
    options.jobFile = jobFile.toStdString();
    options.workspace = dir.path().toStdString();
    options.dryRun = true;
    const jobs::cluster::Submission submission = jobs::cluster::submit(options);
    QVERIFY(!submission.units.empty());
    QVERIFY(submission.dryRun);

    ui::MainWindow window(dir.path());
    window.resize(1024, 700);
    window.tabs()->setCurrentIndex(ui::MainWindow::JobsTab);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QVERIFY(window.jobPanel()->findChild<QPushButton*>("submitToSlurmButton"));
    ui::ClusterPanel* panel = window.jobPanel()->clusterPanel();
    QVERIFY(panel);
    QTRY_COMPARE_WITH_TIMEOUT(panel->submissionModel()->rowCount(), 1, 10000);
    QTRY_VERIFY_WITH_TIMEOUT(!panel->busy(), 10000);
    QVERIFY(!panel->showingEmpty());
    panel->submissionTable()->selectRow(0);
    QCOMPARE(QFileInfo(panel->selectedSubmission()).canonicalFilePath(), canonical(submission.directory));

    // The submission's row: every unit pending, nothing finished.
    const int units = static_cast<int>(submission.units.size());
    const QStandardItemModel* rows = panel->submissionModel();
    const auto cell = [rows](int column) { return rows->item(0, column)->text(); };
    QCOMPARE(cell(ui::ClusterPanel::SubmissionName), QStringLiteral("scan-1 (scan)")); // its directory, its name
    QCOMPARE(cell(ui::ClusterPanel::SubmissionKind), QString::fromStdString(submission.kind));
    QVERIFY2(cell(ui::ClusterPanel::SubmittedAt).endsWith(" UTC"), qPrintable(cell(ui::ClusterPanel::SubmittedAt)));
    QCOMPARE(cell(ui::ClusterPanel::PendingCount), QString::number(units));
    for (int column : {ui::ClusterPanel::RunningCount, ui::ClusterPanel::DoneCount, ui::ClusterPanel::FailedCount,
             ui::ClusterPanel::MergedCount}) {
        QCOMPARE(cell(column), QStringLiteral("0"));
    }
    QCOMPARE(cell(ui::ClusterPanel::Finished), QStringLiteral("no"));

    // Its units, each pending and not in Slurm.
    const QStandardItemModel* unitRows = panel->unitModel();
    QCOMPARE(unitRows->rowCount(), units);
    QStringList shown;
    QStringList submitted;
    for (int row = 0; row < units; ++row) {
        shown << unitRows->item(row, ui::ClusterPanel::UnitId)->text();
        submitted << QString::fromStdString(submission.units[row].id);
        QCOMPARE(unitRows->item(row, ui::ClusterPanel::UnitState)->text(), QStringLiteral("pending"));
        QCOMPARE(unitRows->item(row, ui::ClusterPanel::SlurmJob)->text(), QStringLiteral("-"));
        QVERIFY(!unitRows->item(row, ui::ClusterPanel::UnitLabel)->text().isEmpty());
    }
    shown.sort();
    submitted.sort();
    QCOMPARE(shown, submitted);
    // Nothing finished to merge; the rest may be resumed or cancelled.
    QVERIFY(!panel->findChild<QPushButton*>("clusterMergeButton")->isEnabled());
    QVERIFY(panel->findChild<QPushButton*>("clusterResumeButton")->isEnabled());
    QVERIFY(panel->findChild<QPushButton*>("clusterCancelButton")->isEnabled());

    // The tab fits the window: no scrolling sideways or down.
    auto* area = qobject_cast<QScrollArea*>(window.tabs()->widget(ui::MainWindow::JobsTab));
    QVERIFY(area && area->widget());
    const QSize needed = area->widget()->minimumSizeHint();
    QVERIFY2(needed.width() <= area->viewport()->width() && needed.height() <= area->viewport()->height(),
        qPrintable(QStringLiteral("the Jobs tab needs %1x%2 px, the window gives it %3x%4")
                       .arg(needed.width())
                       .arg(needed.height())
                       .arg(area->viewport()->width())
                       .arg(area->viewport()->height())));
    fixture::saveScreenshot(window, "jobs_tab_slurm_submission.png");

    // Merge runs on the panel's thread (the window stays responsive) and has the window read the store again.
    QSignalSpy storeChanged(panel, &ui::ClusterPanel::storeChanged);
    panel->mergeSelected();
    QVERIFY(panel->busy());
    QVERIFY(storeChanged.wait(20000));
    QTRY_VERIFY_WITH_TIMEOUT(!panel->busy(), 10000);
    if (panel->errorBox()) {
        // An error names the submission.
        QVERIFY2(panel->errorBox()->text().contains(QFileInfo(panel->selectedSubmission()).fileName()),
            qPrintable(panel->errorBox()->text()));
        panel->errorBox()->close();
    } else {
        QVERIFY2(panel->message().startsWith("Merge of "), qPrintable(panel->message()));
    }
    QCOMPARE(panel->submissionModel()->rowCount(), 1);
}

// The submit dialog on a job's text: a dry run writes the job file, the units and the stage scripts to the default
// directory (WORKSPACE/cluster/KIND-N), submits nothing, and the next submission gets the next directory; the Jobs
// tab lists the submission under the directory's name.
void TestJobs::submitDialogDryRunWritesTheStageScripts()
{
    QTemporaryDir dir;
    ui::SubmitDialog dialog(dir.path(), sensitivityJobText(), ui::SubmitDialog::Source::Text);
    dialog.setDryRun(true);
    QVERIFY2(dialog.errorText().isEmpty(), qPrintable(dialog.errorText()));
    QVERIFY(dialog.submitButton()->isEnabled());
    const QString directory = QDir(dir.path()).filePath("cluster/sensitivity-1");
    QCOMPARE(dialog.directory(), QDir::cleanPath(directory));
    QVERIFY(dialog.findChild<QLabel*>("submitJob")->text().contains("sensitivity"));
    if (!dialog.canSubmit()) {
        // Without sbatch only a dry run: the dialog says so, and refuses to submit for real.
        QVERIFY(dialog.findChild<QLabel*>("submitSbatchNote")->text().contains("not on this machine's PATH"));
        dialog.setDryRun(false);
        QVERIFY(dialog.errorText().contains("sbatch"));
        QVERIFY(!dialog.submitButton()->isEnabled());
        dialog.setDryRun(true);
    }
    // A profile that does not exist is named.
    dialog.setProfilePath(dir.filePath("no-such-profile.yaml"));
    QVERIFY2(dialog.errorText().startsWith("Cluster profile:"), qPrintable(dialog.errorText()));
    dialog.setProfilePath({});
    QVERIFY(dialog.errorText().isEmpty());
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));

    QSignalSpy submitted(&dialog, &ui::SubmitDialog::submitted);
    QTest::mouseClick(dialog.submitButton(), Qt::LeftButton);
    QVERIFY2(dialog.submission().has_value(), qPrintable(dialog.resultText()));
    QCOMPARE(submitted.count(), 1);
    const jobs::cluster::Submission& submission = *dialog.submission();
    QVERIFY(submission.dryRun);
    QVERIFY(!submission.stages.empty());
    QVERIFY(QFile::exists(directory + "/sensitivity-1.yaml")); // the job file, named as its directory
    QVERIFY(QFile::exists(directory + "/submission.json"));
    QVERIFY(QFile::exists(directory + "/stage-1.sbatch"));
    for (const jobs::cluster::SubmittedStage& stage : submission.stages) {
        QVERIFY(stage.jobIds.empty()); // nothing handed to Slurm
        QVERIFY(!stage.scripts.empty());
        for (const std::string& script : stage.scripts) {
            QVERIFY2(QFile::exists(QString::fromStdString(script)), script.c_str());
            QVERIFY2(dialog.resultText().contains(QString::fromStdString(script)), qPrintable(dialog.resultText()));
        }
    }
    QVERIFY(!dialog.submitButton()->isEnabled()); // not twice by a second click
    QCOMPARE(
        QString::fromStdString(jobs::cluster::status(directory.toStdString()).name), QStringLiteral("sensitivity-1"));
    QVERIFY2(dialog.statusText().contains("nothing was submitted"), qPrintable(dialog.statusText()));
    fixture::saveScreenshot(dialog, "submit_dialog_dry_run.png");

    // The next submission goes to the next directory; the written one is refused.
    ui::SubmitDialog next(dir.path(), sensitivityJobText(), ui::SubmitDialog::Source::Text);
    next.setDryRun(true);
    QCOMPARE(next.directory(), QDir::cleanPath(QDir(dir.path()).filePath("cluster/sensitivity-2")));
    next.setDirectory(directory);
    QVERIFY2(next.errorText().contains("already holds a submission"), qPrintable(next.errorText()));
    QVERIFY(!next.submitButton()->isEnabled());
}

MISMATCH_TEST_MAIN(TestJobs)
#include "test_jobs.moc"

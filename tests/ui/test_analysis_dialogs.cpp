// The analysis dialogs (ui/dialogs/analysis_dialogs.h), offscreen: each one rejects bad input with a message naming the
// field (Start disabled), shows the exact headless command, and a job started from it finishes with its result
// stored and visible in its tab. Then the dialog's "Copy CLI Command" text is run with the real `mismatch` binary
// on the same workspace, and what it stores must equal what the GUI's job stored (every number, exactly): the
// command reproduces the job.
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/views/admission_view.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/views/budget_view.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/plots/mismatch_profile.h"
#include "ui/views/prefix_shift_view.h"

#include <qcustomplot.h>

#include <QFile>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

using namespace mismatch;

namespace {

const QString kResources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");

void saveScreenshot(QWidget& widget, const QString& name)
{
    QTest::qWait(120);
    const QString path = fixture::screenshotPath(name);
    QVERIFY2(widget.grab().save(path), qPrintable(path));
    qInfo("screenshot: %s", qPrintable(path));
}

// Jobs here run whole (a quick calibration trains several runs): minutes under ASan+UBSan or on a loaded machine.
// The limit only stops a hung job; the test's CTest TIMEOUT (900 s) bounds the whole.
constexpr int kJobLimitMs = 600000;

// Runs a dialog's command line with the real binary (the first word, "mismatch", is the binary).
void runCommand(const QString& command)
{
    QStringList arguments = QProcess::splitCommand(command);
    QVERIFY(!arguments.isEmpty());
    QCOMPARE(arguments.takeFirst(), QStringLiteral("mismatch"));
    QProcess process;
    process.start(QStringLiteral(MISMATCH_CLI_PATH), arguments);
    QVERIFY(process.waitForFinished(kJobLimitMs));
    QVERIFY2(process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0,
        process.readAllStandardError().constData());
}

// Starts the dialog's job through its Start button and waits for the queue to report it finished.
void startAndWait(ui::MainWindow& window, ui::JobDialog& dialog)
{
    QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
    QTest::mouseClick(dialog.startButton(), Qt::LeftButton);
    QVERIFY(finished.wait(kJobLimitMs));
    QVERIFY2(finished.first().at(2).toBool(), qPrintable(finished.first().at(4).toString()));
}

} // namespace

class TestAnalysisDialogs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        Q_INIT_RESOURCE(resources);
        QCoreApplication::setOrganizationName("Mismatch Lab Tests");
        QStandardPaths::setTestModeEnabled(true);
        QSettings().clear();
    }

    void admissionCheck()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showAdmissionDialog();
        auto* dialog = window.findChild<ui::AdmissionDialog*>();
        QVERIFY(dialog);
        // Defaults: the built-in student, candidates and probe set.
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));

        // A malformed candidates file: the message names the file and the line; Start is disabled.
        const QString bad = dir.filePath("bad-candidates.yaml");
        QFile file(bad);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("- name: a\n  noise: lots\n");
        file.close();
        dialog->setCandidates(bad);
        QVERIFY(!dialog->valid());
        QVERIFY2(dialog->errorText().contains("bad-candidates.yaml") && dialog->errorText().contains("line 2"),
            qPrintable(dialog->errorText()));
        QVERIFY(!dialog->startButton()->isEnabled());
        dialog->setCheckpoints(dir.filePath("no-model"));
        QVERIFY(dialog->errorText().contains("no-model"));

        const QString student = kResources + "/models/arith-student";
        const QString candidates = kResources + "/candidates/demo.yaml";
        const QString probe = kResources + "/prompts/arith-probe.jsonl";
        dialog->setCheckpoints(student);
        dialog->setCandidates(candidates);
        dialog->setProbeSet(probe);
        dialog->setThreshold(0.05);
        dialog->setCount(4);
        dialog->setMaxTokens(8);
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));
        const QString command = dialog->cliCommand();
        QCOMPARE(command,
            QStringLiteral("mismatch --workspace %1 admit %2 --candidates %3 --prompts %4 --threshold 0.05 --count 4 "
                           "--max-tokens 8")
                .arg(dir.path(), student, candidates, probe));
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        saveScreenshot(*dialog, "admission_dialog.png");
        startAndWait(window, *dialog);

        store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        const auto fromGui = store::admissionDecisions(reader);
        QCOMPARE(fromGui.size(), size_t {7}); // the seven shipped candidates, one checkpoint
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::AdmissionTab));
        QTRY_COMPARE_WITH_TIMEOUT(window.admissionView()->decisionModel()->rowCount(), 7, 5000);
        // Where each candidate's mismatch sits (the bins stored with every decision): all seven, then the selected.
        ui::MismatchProfile* profile = window.admissionView()->profile();
        QCOMPARE(profile->drawn(), 7);
        QCOMPARE(profile->plot()->plottableCount(), 7);
        saveScreenshot(window, "admission_from_dialog.png");
        window.admissionView()->table()->selectRow(2);
        QCOMPARE(profile->drawn(), 1);
        profile->setAxis(ui::MismatchProfile::ByEntropy);
        QCOMPARE(profile->drawn(), 1);
        QVERIFY(profile->plot()->xAxis->label().contains("entropy"));
        window.admissionView()->table()->clearSelection();
        QCOMPARE(profile->drawn(), 7);

        runCommand(command);
        const auto all = store::admissionDecisions(reader);
        QCOMPARE(all.size(), size_t {14});
        for (size_t i = 0; i < 7; ++i) {
            const auto& gui = all[i];
            const auto& cli = all[i + 7];
            QVERIFY(gui.runId != cli.runId);
            QCOMPARE(cli.candidateJson, gui.candidateJson); // every input, paths included
            QCOMPARE(cli.checkpoint, gui.checkpoint);
            QCOMPARE(cli.mismatch, gui.mismatch);
            QCOMPARE(cli.ciLow, gui.ciLow);
            QCOMPARE(cli.ciHigh, gui.ciHigh);
            QCOMPARE(cli.threshold, gui.threshold);
            QCOMPARE(cli.decision, gui.decision);
        }
    }

    void prefixShiftAnalysis()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showPrefixShiftDialog();
        auto* dialog = window.findChild<ui::PrefixShiftDialog*>();
        QVERIFY(dialog);
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));
        dialog->setRecipe(dir.filePath("missing.yaml"));
        QVERIFY(!dialog->valid());
        QVERIFY2(dialog->errorText().startsWith("Recipe") && dialog->errorText().contains("missing.yaml"),
            qPrintable(dialog->errorText()));

        const QString model = kResources + "/models/arith-student";
        const QString recipe = kResources + "/recipes/fp8-per-tensor.yaml";
        const QString prompts = kResources + "/prompts/arith-probe.jsonl";
        dialog->setModelDirectory(model);
        dialog->setRecipe(recipe);
        dialog->setPromptSet(prompts);
        dialog->setCount(6);
        dialog->setMaxTokens(12);
        dialog->setStoredPairs(3);
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));
        const QString command = dialog->cliCommand();
        QCOMPARE(command,
            QStringLiteral("mismatch --workspace %1 prefix-shift %2 --recipe %3 --prompts %4 --store-pairs 3 --count 6 "
                           "--max-tokens 12")
                .arg(dir.path(), model, recipe, prompts));
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        saveScreenshot(*dialog, "prefix_shift_dialog.png");
        startAndWait(window, *dialog);

        store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        const auto records = store::prefixShifts(reader);
        QCOMPARE(records.size(), size_t {1});
        QCOMPARE(records[0].pairs, std::int64_t {6});
        QCOMPARE(store::prefixShiftPairs(reader, records[0].id).size(), size_t {3});
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::PrefixShiftTab));
        QTRY_COMPARE_WITH_TIMEOUT(window.prefixShiftView()->analysisId(), records[0].id, 5000);
        // The analysis stores its bins: where the candidate's mismatch sits is drawn.
        QCOMPARE(window.prefixShiftView()->profile()->drawn(), 1);
        saveScreenshot(window, "prefix_shift_from_dialog.png");

        runCommand(command);
        const auto both = store::prefixShifts(reader);
        QCOMPARE(both.size(), size_t {2});
        QCOMPARE(both[1].configurationJson, both[0].configurationJson);
        QCOMPARE(both[1].total, both[0].total);
        QCOMPARE(both[1].perToken, both[0].perToken);
        QCOMPARE(both[1].prefixShift, both[0].prefixShift);
        QCOMPARE(both[1].bf16Unit, both[0].bf16Unit);
        QCOMPARE(both[1].totalCiLow, both[0].totalCiLow);
        QCOMPARE(both[1].totalCiHigh, both[0].totalCiHigh);
        QCOMPARE(both[1].diverged, both[0].diverged);
        QCOMPARE(both[1].detailsJson, both[0].detailsJson);
    }

    void calibration()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showCalibrationDialog();
        auto* dialog = window.findChild<ui::CalibrationDialog*>();
        QVERIFY(dialog);
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText())); // the demo pair's run, quick
        dialog->setNoise("0.1, x");
        QVERIFY(!dialog->valid());
        QVERIFY2(dialog->errorText().contains("Noise sigmas") && dialog->errorText().contains("'x'"),
            qPrintable(dialog->errorText()));
        dialog->setNoise("0.1, -0.2");
        // The catalogue's range check, named by the field's label.
        QVERIFY2(dialog->errorText().startsWith("Noise sigmas (relative to RMS): must be > 0, got -0.2"),
            qPrintable(dialog->errorText()));
        dialog->setNoise("0.3");
        dialog->setStaleness("0");
        QVERIFY2(dialog->errorText().startsWith("Staleness values in the sweep: must be >= 1"),
            qPrintable(dialog->errorText()));
        dialog->setStaleness("");
        // A rule step the run does not evaluate (the quick run evaluates 20 and 40): core's check, in the GUI's words.
        dialog->setSteps("21");
        QVERIFY2(dialog->errorText().startsWith("Failure rule at steps: step 21 is not evaluated by the base run"),
            qPrintable(dialog->errorText()));
        dialog->setSteps("");
        dialog->setRunFile(dir.filePath("nothing.yaml"));
        QVERIFY(dialog->errorText().contains("nothing.yaml"));

        const QString runFile = kResources + "/runs/demo-opd-quick.yaml";
        dialog->setRunFile(runFile);
        dialog->setQuick(true);
        dialog->setName("dialog-calibration");
        dialog->setReplicates(1); // one seed each (and one null run), none added, keeps the test short
        dialog->setMaxReplicates(1);
        QVERIFY2(dialog->valid(), qPrintable(dialog->errorText()));
        const QString command = dialog->cliCommand();
        QCOMPARE(command,
            QStringLiteral("mismatch --workspace %1 calibrate %2 --name dialog-calibration --quick --noise 0.3 "
                           "--replicates 1 --max-replicates 1")
                .arg(dir.path(), runFile));
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        saveScreenshot(*dialog, "calibration_dialog.png");
        startAndWait(window, *dialog);

        store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        auto calibrations = store::calibrations(reader);
        QCOMPARE(calibrations.size(), size_t {1});
        const auto fromGui = store::calibration(reader, calibrations[0].id);
        QCOMPARE(fromGui->info.name, std::string("dialog-calibration"));
        QCOMPARE(fromGui->points.size(), size_t {4}); // baseline and noise 0.3, at the quick run's steps 20 and 40
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::BudgetTab));
        // The baseline and noise 0.3 at the shown step, each drawn as passed, failed or undecided.
        QTRY_VERIFY_WITH_TIMEOUT(window.budgetView()->passCount() + window.budgetView()->failCount()
                == 2 - window.budgetView()->undecidedCount(),
            5000);
        saveScreenshot(window, "calibration_from_dialog.png");

        // The CLI runs the same spec (test_job_dialogs: the command's spec equals the dialog's).
    }
};

MISMATCH_TEST_MAIN(TestAnalysisDialogs)
#include "test_analysis_dialogs.moc"

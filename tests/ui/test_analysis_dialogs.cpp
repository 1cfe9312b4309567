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
#include "ui/dialogs/export_dialog.h"
#include "ui/dialogs/sensitivity_dialog.h"
#include "ui/dialogs/study_dialogs.h"
#include "ui/views/budget_view.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/plots/mismatch_profile.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/views/recipe_editor.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QAction>
#include <QCheckBox>
#include <QLabel>
#include <QComboBox>
#include <QFile>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

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

// Empty when `widget` is shown and lies wholly inside `window`'s rectangle (what a user sees at the window's size);
// otherwise where it is.
QString outsideWindow(const QWidget& window, const QWidget* widget)
{
    if (widget == nullptr || !widget->isVisible()) {
        return QStringLiteral("not shown");
    }
    const QRect rect(widget->mapTo(&window, QPoint(0, 0)), widget->size());
    if (window.rect().contains(rect)) {
        return QString();
    }
    return QStringLiteral("%1 at (%2, %3) %4x%5 is outside the window's %6x%7")
        .arg(widget->objectName().isEmpty() ? QString::fromLatin1(widget->metaObject()->className())
                                            : widget->objectName())
        .arg(rect.x())
        .arg(rect.y())
        .arg(rect.width())
        .arg(rect.height())
        .arg(window.width())
        .arg(window.height());
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

    // Issue 45 from the dialogs: after the demo, a sensitivity scan with NVFP4 weights and activations (W4A4) and an
    // admission screen of an NVFP4 recipe against the demo student's shipped budget, each started from its dialog;
    // the heatmap and the decision are shown (screenshots nvfp4_sensitivity.png, nvfp4_admission.png).
    void nvfp4ScanAndScreenFromTheDialogs()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1200, 780);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        {
            QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
            window.runDemo();
            QVERIFY(finished.wait(kJobLimitMs));
            QVERIFY2(finished.first().at(2).toBool(), qPrintable(finished.first().at(4).toString()));
        }
        const auto calibrations = store::calibrations(reader);
        QCOMPARE(calibrations.size(), size_t {1});
        const auto calibration = store::calibration(reader, calibrations[0].id);
        QVERIFY(calibration && !calibration->brackets.empty());
        const std::int64_t step = calibration->brackets.front().step;

        window.showSensitivityDialog();
        auto* scanDialog = window.findChild<ui::SensitivityDialog*>();
        QVERIFY(scanDialog);
        auto* format = scanDialog->findChild<QComboBox*>("scanFormatBox");
        QVERIFY(format && format->findText("nvfp4/group16") >= 0); // the format with its own block of 16
        scanDialog->setFormat("nvfp4/group16");
        auto* activations = scanDialog->findChild<QComboBox*>("scanActivationsBox");
        QVERIFY(activations && activations->findText("nvfp4") >= 0);
        activations->setCurrentText("nvfp4");
        // The KV cells in one of vLLM's per-token-head formats (issue 44): the catalogue's choices, on the CLI line.
        auto* kvFormat = scanDialog->findChild<QComboBox*>("scanKvFormatBox");
        QVERIFY(kvFormat && kvFormat->findText("int8_per_token_head") >= 0 && kvFormat->currentText() == "fp8_e4m3");
        kvFormat->setCurrentText("int8_per_token_head");
        QVERIFY2(scanDialog->cliCommand().contains("--kv-format int8_per_token_head"), qPrintable(scanDialog->cliCommand()));
        scanDialog->findChild<QCheckBox*>("scanNoKvBox")->setChecked(true);
        QVERIFY(!kvFormat->isEnabled());
        scanDialog->findChild<QCheckBox*>("scanNoKvBox")->setChecked(false);
        QVERIFY(kvFormat->isEnabled());
        scanDialog->setCount(8);
        scanDialog->setMaxTokens(6);
        QVERIFY2(scanDialog->valid(), qPrintable(scanDialog->errorText()));
        startAndWait(window, *scanDialog);
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        const auto scans = store::sensitivityScans(reader);
        QCOMPARE(scans.size(), size_t {1});
        QVERIFY2(scans[0].format == "nvfp4/group16 a4", scans[0].format.c_str()); // weights and activations (W4A4)
        QVERIFY2(nlohmann::json::parse(scans[0].configJson).dump().find("\"nvfp4\"") != std::string::npos,
            scans[0].configJson.c_str()); // the activations too
        QVERIFY2(scans[0].configJson.find("int8_per_token_head") != std::string::npos, scans[0].configJson.c_str());
        QTRY_COMPARE_WITH_TIMEOUT(window.sensitivityView()->scanId(), scans[0].id, 5000);
        QVERIFY(window.sensitivityView()->writtenCellCount() > 0);
        // The summary names the KV cells' own format beside the weights'.
        const QString summary = window.sensitivityView()->findChild<QLabel*>("sensitivitySummary")->text();
        QVERIFY2(summary.contains("quantized to nvfp4/group16 a4 (KV cells to int8_per_token_head)"), qPrintable(summary));
        saveScreenshot(window, "nvfp4_sensitivity.png");

        const QString recipe = dir.filePath("nvfp4-w4a4.yaml");
        {
            QFile file(recipe);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write("version: 1\nname: nvfp4-w4a4\nweights: {format: nvfp4}\nactivations: {format: nvfp4}\n");
        }
        const size_t before = store::admissionDecisions(reader).size();
        window.showAdmissionDialog();
        auto* admitDialog = window.findChild<ui::AdmissionDialog*>();
        QVERIFY(admitDialog);
        admitDialog->setCheckpoints(kResources + QStringLiteral("/models/arith-student-step%1").arg(step));
        admitDialog->setRecipe(recipe);
        QVERIFY(admitDialog->setCalibration(calibrations[0].id, step));
        QVERIFY2(admitDialog->valid(), qPrintable(admitDialog->errorText()));
        startAndWait(window, *admitDialog);
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        const auto decisions = store::admissionDecisions(reader);
        QCOMPARE(decisions.size(), before + 1);
        QVERIFY2(decisions.back().candidateJson.find("nvfp4-w4a4.yaml") != std::string::npos,
            decisions.back().candidateJson.c_str());
        QCOMPARE(decisions.back().calibrationId, std::optional<std::int64_t>(calibrations[0].id));
        QTRY_COMPARE_WITH_TIMEOUT(window.admissionView()->decisionModel()->rowCount(), 1, 5000);
        saveScreenshot(window, "nvfp4_admission.png");
    }

    // Issue 42's path at 1024x700, as a user walks it: the demo, a sensitivity scan, a recipe built from it against
    // the demo calibration's budget, that recipe screened by the admission check, and its vLLM export. Every step
    // shows no error, its tab's key widget inside the window, and leaves a screenshot walkthrough_NN_<step>.png.
    // Long: one scenario read top to bottom; each step starts from what the one before left on screen.
    void walkthroughFromDemoToVllmExport()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1024, 700);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCOMPARE(window.size(), QSize(1024, 700));
        store::RunStore reader = store::RunStore::open(store::databasePath(dir.path().toStdString()));

        // 1. Jobs > Run the Demo: the Budget and Admission tabs have the demo's calibration and decisions.
        {
            QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
            window.runDemo();
            QVERIFY(finished.wait(kJobLimitMs));
            QVERIFY2(finished.first().at(2).toBool(), qPrintable(finished.first().at(4).toString()));
        }
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        const auto calibrations = store::calibrations(reader);
        QCOMPARE(calibrations.size(), size_t {1}); // the shipped calibration of the demo student
        const std::int64_t calibrationId = calibrations[0].id;
        const auto calibration = store::calibration(reader, calibrationId);
        QVERIFY(calibration && !calibration->brackets.empty());
        // The demo screens at the calibration's first calibrated step, with the shipped checkpoint of that step.
        const std::int64_t step = calibration->brackets.front().step;
        const QString checkpoint = kResources + QStringLiteral("/models/arith-student-step%1").arg(step);
        const size_t demoDecisions = store::admissionDecisions(reader).size();
        QVERIFY(demoDecisions > 0);
        window.tabs()->setCurrentIndex(ui::MainWindow::BudgetTab);
        QTRY_VERIFY_WITH_TIMEOUT(window.budgetView()->pointModel()->rowCount() > 0, 5000);
        QVERIFY(window.budgetView()->shownBracket().has_value());
        QString outside = outsideWindow(window, window.budgetView()->plot());
        QVERIFY2(outside.isEmpty(), qPrintable("Budget plot: " + outside));
        saveScreenshot(window, "walkthrough_01_demo_budget.png");
        window.tabs()->setCurrentIndex(ui::MainWindow::AdmissionTab);
        QTRY_COMPARE_WITH_TIMEOUT(window.admissionView()->decisionModel()->rowCount(), int(demoDecisions), 5000);
        outside = outsideWindow(window, window.admissionView()->table());
        QVERIFY2(outside.isEmpty(), qPrintable("Admission table: " + outside));
        saveScreenshot(window, "walkthrough_02_demo_admission.png");

        // 2. Jobs > Start Sensitivity Scan: ready as it opens (the demo student on its probe set); made small, FP8
        // weights and activations (what vLLM's online FP8 runs), started; the Sensitivity tab shows the scan.
        window.showSensitivityDialog();
        auto* scanDialog = window.findChild<ui::SensitivityDialog*>();
        QVERIFY(scanDialog);
        QVERIFY2(scanDialog->valid(), qPrintable(scanDialog->errorText()));
        scanDialog->setFormat("fp8_e4m3/block128");
        auto* activations = scanDialog->findChild<QComboBox*>("scanActivationsBox");
        QVERIFY(activations && activations->findText("fp8_e4m3") >= 0);
        activations->setCurrentText("fp8_e4m3");
        scanDialog->setCount(8);
        scanDialog->setMaxTokens(6);
        QVERIFY2(scanDialog->valid(), qPrintable(scanDialog->errorText()));
        QVERIFY(QTest::qWaitForWindowExposed(scanDialog));
        saveScreenshot(*scanDialog, "walkthrough_03_scan_dialog.png");
        startAndWait(window, *scanDialog);
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        const auto scans = store::sensitivityScans(reader);
        QCOMPARE(scans.size(), size_t {1});
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::SensitivityTab));
        QTRY_COMPARE_WITH_TIMEOUT(window.sensitivityView()->scanId(), scans[0].id, 5000);
        QVERIFY(window.sensitivityView()->writtenCellCount() > 0);
        outside = outsideWindow(window, window.sensitivityView()->plot());
        QVERIFY2(outside.isEmpty(), qPrintable("Sensitivity heatmap: " + outside));
        outside = outsideWindow(window, window.sensitivityView()->buildButton());
        QVERIFY2(outside.isEmpty(), qPrintable("Build button: " + outside));
        saveScreenshot(window, "walkthrough_04_sensitivity.png");

        // 3. "Build recipe from this scan": against the demo calibration's budget at the demo's step, the embedding
        // and lm_head kept in BF16 (vLLM quantizes linear layers only); the built recipe opens in the Recipe tab.
        QTest::mouseClick(window.sensitivityView()->buildButton(), Qt::LeftButton);
        auto* buildDialog = window.findChild<ui::RecipeBuildDialog*>();
        QVERIFY(buildDialog);
        QVERIFY2(buildDialog->cliCommand().contains(QStringLiteral("--scan %1").arg(scans[0].id)),
            qPrintable(buildDialog->cliCommand()));
        QVERIFY(buildDialog->setCalibration(calibrationId, step));
        auto* keepEmbedding = buildDialog->findChild<QCheckBox*>("recipeBuildKeepEmbedding");
        QVERIFY(keepEmbedding && keepEmbedding->isVisible());
        keepEmbedding->setChecked(true);
        QVERIFY2(buildDialog->valid(), qPrintable(buildDialog->errorText()));
        const QString builtRecipe = buildDialog->outputPath();
        QVERIFY(QTest::qWaitForWindowExposed(buildDialog));
        saveScreenshot(*buildDialog, "walkthrough_05_build_dialog.png");
        startAndWait(window, *buildDialog);
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        QVERIFY2(QFileInfo(builtRecipe).isFile(), qPrintable(builtRecipe));
        QTRY_COMPARE_WITH_TIMEOUT(window.recipeEditor()->filePath(), builtRecipe, 5000);
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::RecipeTab));
        QFile builtFile(builtRecipe);
        QVERIFY(builtFile.open(QIODevice::ReadOnly));
        QCOMPARE(window.recipeEditor()->textEdit()->toPlainText(), QString::fromUtf8(builtFile.readAll()));
        QVERIFY(window.recipeEditor()->textEdit()->toPlainText().contains("fp8_e4m3"));
        // It resolves for the model the Recipe tab shows (the export needs that), in the module table shown first.
        QVERIFY2(window.recipeEditor()->resolves(), qPrintable(window.recipeEditor()->validationMessage()));
        QVERIFY(window.recipeEditor()->tableModel()->rowCount() > 0);
        outside = outsideWindow(window, window.recipeEditor()->moduleTable());
        QVERIFY2(outside.isEmpty(), qPrintable("Recipe module table: " + outside));
        saveScreenshot(window, "walkthrough_06_recipe.png");

        // 4. Jobs > Start Admission Check: the built recipe as the only candidate (the dialog's recipe picker lists
        // the recipes built into the workspace), at the demo student checkpoint, against the demo calibration (under
        // its protocol); the Admission tab shows the new check's decision.
        window.showAdmissionDialog();
        auto* admitDialog = window.findChild<ui::AdmissionDialog*>();
        QVERIFY(admitDialog);
        QVERIFY2(admitDialog->valid(), qPrintable(admitDialog->errorText()));
        admitDialog->setCheckpoints(checkpoint);
        auto* recipePicker = admitDialog->findChild<ui::PathPicker*>(QStringLiteral("admissionRecipeEdit"));
        QVERIFY(recipePicker);
        int listed = -1;
        for (int i = 0; i < recipePicker->comboBox()->count(); ++i) {
            if (recipePicker->comboBox()->itemText(i).contains(QFileInfo(builtRecipe).completeBaseName())) {
                listed = i;
            }
        }
        QVERIFY2(listed >= 0, "the recipe picker does not list the recipe just built");
        admitDialog->setRecipe(builtRecipe);
        QVERIFY(!admitDialog->findChild<ui::PathPicker*>(QStringLiteral("admissionCandidatesEdit"))->isEnabled());
        QVERIFY(admitDialog->setCalibration(calibrationId, step));
        QVERIFY2(admitDialog->valid(), qPrintable(admitDialog->errorText()));
        QVERIFY(QTest::qWaitForWindowExposed(admitDialog));
        saveScreenshot(*admitDialog, "walkthrough_07_admission_dialog.png");
        startAndWait(window, *admitDialog);
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        const auto decisions = store::admissionDecisions(reader);
        QCOMPARE(decisions.size(), demoDecisions + 1);
        QVERIFY2(decisions.back().candidateJson.find(builtRecipe.toStdString()) != std::string::npos,
            decisions.back().candidateJson.c_str());
        QCOMPARE(decisions.back().calibrationId, std::optional<std::int64_t>(calibrationId));
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::AdmissionTab));
        QTRY_COMPARE_WITH_TIMEOUT(window.admissionView()->decisionModel()->rowCount(), 1, 5000);
        outside = outsideWindow(window, window.admissionView()->table());
        QVERIFY2(outside.isEmpty(), qPrintable("Admission table: " + outside));
        outside = outsideWindow(window, window.admissionView()->plot());
        QVERIFY2(outside.isEmpty(), qPrintable("Admission plot: " + outside));
        saveScreenshot(window, "walkthrough_08_admission.png");

        // 5. File > Export Recipe For > vllm on the open recipe: the files, no refusal; saved to a folder.
        window.tabs()->setCurrentIndex(ui::MainWindow::RecipeTab);
        QAction* vllm = fixture::menuAction(window, QStringLiteral("vllm..."));
        QVERIFY(vllm);
        vllm->trigger();
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        auto* exportDialog = window.findChild<ui::ExportDialog*>();
        QVERIFY(exportDialog);
        QVERIFY2(exportDialog->errorText().isEmpty(), qPrintable(exportDialog->errorText()));
        QVERIFY(!exportDialog->files().empty());
        QVERIFY(QTest::qWaitForWindowExposed(exportDialog));
        QVERIFY2(exportDialog->width() <= window.width() && exportDialog->height() <= window.height(),
            qPrintable(QStringLiteral("export dialog %1x%2").arg(exportDialog->width()).arg(exportDialog->height())));
        saveScreenshot(*exportDialog, "walkthrough_09_export_dialog.png");
        QTemporaryDir out;
        QString error;
        QVERIFY2(exportDialog->saveTo(out.path(), &error), qPrintable(error));
        QVERIFY(QFileInfo(out.filePath("vllm.json")).isFile());
        QVERIFY(QFileInfo(out.filePath("README.txt")).isFile());
        exportDialog->close();
        QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
    }
};

MISMATCH_TEST_MAIN(TestAnalysisDialogs)
#include "test_analysis_dialogs.moc"

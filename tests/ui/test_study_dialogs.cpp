// The dialogs' pickers and forms, and the dialogs of the jobs that were only in the CLI, offscreen:
//   - the admission dialog offers a calibration's bracket steps (never "its only bracket" for one with several),
//     says which step gives no threshold, and names fields, not flags, in the errors core writes with flags;
//   - the training form writes a run file that `mismatch train` accepts as the same run, still trains a chosen
//     run file as it is, and refuses a run name the workspace already uses;
//   - the recipe builder, log import, time-to-quality and objective comparison dialogs: their check names the
//     field, their job stores its result, and (import, recipe build) the "Copy CLI Command" text run with the real
//     binary stores the same; the run comparison shows the verdict `mismatch compare` prints.
#include "core/analysis/protocol.h"
#include "core/analysis/admission.h"
#include "core/common/error.h"
#include "core/quant/recipe.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "core/train/run_config.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/dialogs/pickers.h"
#include "ui/dialogs/study_dialogs.h"
#include "ui/dialogs/training_dialog.h"

#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTableWidget>
#include <QtTest>

#include <nlohmann/json.hpp>

using namespace mismatch;

namespace {

const QString kResources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");

// Runs a dialog's command line with the real binary; its stdout, or nothing when it failed.
std::optional<QByteArray> runCommand(const QString& command)
{
    QStringList arguments = QProcess::splitCommand(command);
    if (arguments.isEmpty() || arguments.takeFirst() != QLatin1String("mismatch")) {
        qWarning("not a mismatch command: %s", qPrintable(command));
        return std::nullopt;
    }
    QProcess process;
    process.start(QStringLiteral(MISMATCH_CLI_PATH), arguments);
    if (!process.waitForFinished(240000) || process.exitStatus() != QProcess::NormalExit || process.exitCode() != 0) {
        qWarning("%s failed: %s", qPrintable(command), process.readAllStandardError().constData());
        return std::nullopt;
    }
    return process.readAllStandardOutput();
}

bool startAndWait(ui::JobQueue& queue, ui::JobDialog& dialog, QString* error = nullptr)
{
    QSignalSpy finished(&queue, &ui::JobQueue::jobFinished);
    queue.enqueue(dialog.jobName(), dialog.cliCommand(), dialog.fieldNamedJob());
    if (!finished.wait(240000)) {
        return false;
    }
    if (error) {
        *error = finished.first().at(4).toString();
    }
    return finished.first().at(2).toBool();
}

// A calibration with brackets at steps 20 and 40 (nothing passed at 20), as a quick calibration stores them.
std::int64_t addTwoStepCalibration(store::RunStore& store)
{
    const std::int64_t run = store.beginRun({"two-step-base", "train", "{}", std::nullopt});
    store::CalibrationInfo info;
    info.name = "two steps";
    info.student = (kResources + "/models/arith-student").toStdString();
    // Its measurement protocol: the probe set's first 16 prompts, 24 tokens.
    analysis::MeasurementProtocol protocol;
    protocol.prompts = (kResources + "/prompts/arith-probe.jsonl").toStdString();
    protocol.count = 16;
    protocol.maxTokens = 24;
    info.configJson = nlohmann::json {{"protocol", analysis::protocolToJson(protocol)}}.dump();
    std::vector<store::CalibrationPoint> points
        = {{run, 20, 0.3, 1.0, 0.3, 0.01, 0.02, "fail"}, {run, 40, 0.01, 1.0, 0.01, -0.01, 0.01, "pass"}};
    return store::addCalibration(
        store, info, points, {{20, std::nullopt, 0.3, std::nullopt}, {40, 0.01, std::nullopt, 0.01}});
}

using fixture::saveScreenshot;

// The import dialog's preview summary, preview table and status line lie one below another inside the dialog; the
// wrapped ones as tall as their lines; the table at least its minimum height.
void checkStatusBelowPreview(ui::ImportLogDialog& dialog, const char* when)
{
    const auto inDialog = [&dialog](const QWidget* widget) {
        return QRect(widget->mapTo(&dialog, QPoint(0, 0)), widget->size());
    };
    auto* summary = dialog.findChild<QLabel*>("importPreviewSummary");
    auto* status = dialog.findChild<QLabel*>("importStatus");
    QTableWidget* preview = dialog.previewTable();
    QVERIFY(summary && status && preview);
    const QRect summaryRect = inDialog(summary);
    const QRect previewRect = inDialog(preview);
    const QRect statusRect = inDialog(status);
    const QString where = QStringLiteral("%1 (dialog %2x%3): summary y %4..%5, preview y %6..%7, status y %8..%9")
                              .arg(when)
                              .arg(dialog.width())
                              .arg(dialog.height())
                              .arg(summaryRect.top())
                              .arg(summaryRect.bottom())
                              .arg(previewRect.top())
                              .arg(previewRect.bottom())
                              .arg(statusRect.top())
                              .arg(statusRect.bottom());
    QVERIFY2(!statusRect.intersects(previewRect) && statusRect.top() > previewRect.bottom(), qPrintable(where));
    QVERIFY2(!summaryRect.intersects(previewRect) && summaryRect.bottom() < previewRect.top(), qPrintable(where));
    QVERIFY2(dialog.rect().contains(statusRect) && dialog.rect().contains(previewRect), qPrintable(where));
    QVERIFY2(status->height() >= status->heightForWidth(status->width()), qPrintable(where));
    QVERIFY2(summary->height() >= summary->heightForWidth(summary->width()), qPrintable(where));
    QVERIFY2(preview->height() >= preview->minimumHeight(), qPrintable(where));
}

} // namespace

class TestStudyDialogs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { fixture::initGuiTest(); }

    void admissionOffersTheStoredSteps()
    {
        QTemporaryDir dir;
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        store.addModel(
            {0, "my-student", (kResources + "/models/arith-student").toStdString(), "Qwen2ForCausalLM", 1, "{}"});
        const std::int64_t calibration = addTwoStepCalibration(store);
        ui::AdmissionDialog dialog(dir.path(), &store);
        dialog.setCheckpoints(kResources + "/models/arith-student");
        dialog.setCandidates(kResources + "/candidates/demo.yaml");
        dialog.setProbeSet(kResources + "/prompts/arith-probe.jsonl");
        ui::CalibrationPicker* picker = dialog.calibrationPicker();
        // The newest calibration, at its latest step, with the threshold it gives.
        QCOMPARE(picker->calibrationId(), calibration);
        QCOMPARE(picker->stepCount(), 2);
        QCOMPARE(picker->step(), std::optional<std::int64_t>(40));
        QCOMPARE(*picker->threshold(), 0.01);
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        QVERIFY2(dialog.cliCommand().contains(QStringLiteral("--calibration %1 --step 40").arg(calibration)),
            qPrintable(dialog.cliCommand()));
        QVERIFY(dialog.statusText().contains("0.01"));
        // Under the calibration's protocol: its probe set, count and tokens, not editable, and none of them on the
        // command line (the CLI takes them from the calibration too).
        auto* count = dialog.findChild<ui::PathPicker*>("admissionProbeEdit");
        QVERIFY(count && !count->isEnabled());
        QCOMPARE(dialog.probeSet(), kResources + "/prompts/arith-probe.jsonl");
        QVERIFY2(!dialog.cliCommand().contains("--prompts") && !dialog.cliCommand().contains("--count"),
            qPrintable(dialog.cliCommand()));
        // Another protocol is an explicit choice, and the command says so.
        dialog.setOtherProtocol(true);
        dialog.setCount(8);
        QVERIFY(count->isEnabled());
        QVERIFY2(dialog.cliCommand().contains("--count 8") && dialog.cliCommand().contains("--allow-protocol-mismatch"),
            qPrintable(dialog.cliCommand()));
        dialog.setOtherProtocol(false);
        QVERIFY(!dialog.cliCommand().contains("--allow-protocol-mismatch"));
        // Step 20 gives no threshold: the field is named, Start is disabled.
        QVERIFY(dialog.setCalibration(calibration, 20));
        QVERIFY(!dialog.valid());
        QVERIFY2(dialog.errorText().startsWith("Calibration step:") && dialog.errorText().contains("step 20"),
            qPrintable(dialog.errorText()));
        QVERIFY(!dialog.startButton()->isEnabled());
        QVERIFY(!dialog.setCalibration(calibration, 30)); // not a bracket step
        // The registered model is offered by name.
        auto* models = dialog.findChild<ui::PathPicker*>("admissionCheckpointsEdit");
        QVERIFY(models->comboBox()->findText("my-student (registered)") >= 0);
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        saveScreenshot(dialog, "admission_dialog_steps.png");

        // Core's message for a calibration with several brackets and no step names the flag; the dialog's job
        // names the field instead.
        try {
            store::admissionThreshold(store, calibration, std::nullopt);
            QFAIL("no error for a calibration with two brackets and no step");
        } catch (const StoreError& error) {
            const std::string message = error.what();
            QVERIFY2(message.find("--step") != std::string::npos, message.c_str());
            const std::string named = ui::nameFields(message, dialog.fieldNames());
            QVERIFY2(named.find("--") == std::string::npos && named.find("\"Calibration step\"") != std::string::npos,
                named.c_str());
        }
        try {
            analysis::AdmissionOptions options;
            options.checkpoints = {(kResources + "/models/arith-student").toStdString()};
            options.candidates = analysis::loadCandidates((kResources + "/candidates/demo.yaml").toStdString());
            Progress progress;
            analysis::runAdmission(store, options, progress);
            QFAIL("no error without a threshold");
        } catch (const InputError& error) {
            const std::string named = ui::nameFields(error.what(), dialog.fieldNames());
            QVERIFY2(named.find("--") == std::string::npos
                    && named.find("a calibration or an explicit threshold") != std::string::npos,
                named.c_str());
        }
    }

    void trainingFormWritesARunFile()
    {
        QTemporaryDir dir;
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        store.beginRun({"taken", "train", "{}", std::nullopt});
        ui::TrainingDialog dialog(dir.path(), nullptr, &store);
        // A chosen run file, unchanged, is trained as it is.
        const QString quick = kResources + "/runs/demo-opd-quick.yaml";
        dialog.setRunFile(quick);
        QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
        QVERIFY(!dialog.writesRunFile());
        QCOMPARE(dialog.cliCommand(), ui::trainingCliCommand(dir.path(), quick));

        // Changed in the form: written as WORKSPACE/runs/NAME.json, which `mismatch train` reads as the same run.
        dialog.setName("form-run");
        dialog.setSteps(3);
        dialog.setBatch(2, 1);
        dialog.setRecipe(kResources + "/recipes/fp8-kv.yaml");
        QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
        QVERIFY(dialog.writesRunFile());
        const QString written = QDir::cleanPath(dir.path() + "/runs/form-run.json");
        QCOMPARE(dialog.effectiveRunFile(), written);
        QCOMPARE(dialog.cliCommand(), ui::trainingCliCommand(dir.path(), written));
        QVERIFY(dialog.writeRunFile());
        const train::RunConfig read = train::loadRunConfig(written.toStdString());
        QVERIFY(read == *dialog.config());
        QCOMPARE(read.steps, std::int64_t {3});
        QCOMPARE(read.rollout.recipe, (kResources + "/recipes/fp8-kv.yaml").toStdString());
        QCOMPARE(read.student, train::loadRunConfig(quick.toStdString()).student); // kept from the file
        QVERIFY(runCommand(
            QStringLiteral("mismatch --workspace %1 train %2 --stop-after 1 --quiet").arg(dir.path(), written)));
        QVERIFY(ui::runNamed(store, "form-run").has_value());

        // Issue 46: the run file is never written over a file the run reads (here its recipe, kept as
        // WORKSPACE/runs/over.json): refused naming both, the recipe left as it was.
        const QString over = dir.path() + "/runs/over.json";
        {
            QFile file(over);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(quant::recipeToJson(quant::loadRecipe((kResources + "/recipes/fp8-kv.yaml").toStdString())).c_str());
        }
        const QByteArray recipeBytes = [&] {
            QFile file(over);
            return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
        }();
        dialog.setRecipe(over);
        dialog.setName("over");
        QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
        QCOMPARE(dialog.effectiveRunFile(), QDir::cleanPath(over));
        QVERIFY(!dialog.writeRunFile());
        QVERIFY2(dialog.errorText().contains("over the rollout recipe"), qPrintable(dialog.errorText()));
        {
            QFile file(over);
            QVERIFY(file.open(QIODevice::ReadOnly));
            QCOMPARE(file.readAll(), recipeBytes);
        }
        dialog.setRecipe(kResources + "/recipes/fp8-kv.yaml");

        // Names are unique in a workspace.
        dialog.setName("taken");
        QVERIFY(!dialog.runFileValid());
        QVERIFY2(dialog.errorText().startsWith("Run name:") && dialog.errorText().contains("already used"),
            qPrintable(dialog.errorText()));
        QVERIFY(!dialog.startButton()->isEnabled());
        dialog.setName("form run"); // a space: not a file name
        QVERIFY(dialog.errorText().startsWith("Run name:"));
        // A field that does not hold what it should is named.
        dialog.setName("form-run-2");
        dialog.setStudent(dir.filePath("nowhere"));
        QVERIFY2(dialog.errorText().startsWith("Student:"), qPrintable(dialog.errorText()));
        dialog.setStudent(kResources + "/models/arith-student");
        dialog.setObjective("opd_full_kl");
        dialog.setTeacher(QString());
        QVERIFY2(dialog.errorText().startsWith("Teacher:"), qPrintable(dialog.errorText()));
        dialog.setTeacher(kResources + "/models/arith-teacher");
        QVERIFY2(dialog.runFileValid(), qPrintable(dialog.errorText()));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        saveScreenshot(dialog, "training_form.png");
    }

    void importLogDialogMatchesTheCommand()
    {
        QTemporaryDir dir;
        QFile log(dir.filePath("metrics.csv"));
        QVERIFY(log.open(QIODevice::WriteOnly));
        log.write("iteration,k1,reward\n1,0.011,0.1\n2,0.012,0.2\n3,0.014,0.2\n4,oops,0.3\n");
        log.close();
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        ui::MainWindow window(dir.path());
        ui::ImportLogDialog dialog(dir.path(), nullptr, &store);
        dialog.setSource("csv");
        dialog.setFile(log.fileName());
        dialog.setMap("iteration=nonsense");
        QVERIFY2(!dialog.valid() && dialog.errorText().startsWith("Column mapping:"), qPrintable(dialog.errorText()));
        // Without a step column the file cannot be imported: the preview reads it and the status says why.
        dialog.setMap("");
        QVERIFY2(!dialog.valid() && dialog.errorText().startsWith("Log file: ") && dialog.errorText().contains("step"),
            qPrintable(dialog.errorText()));
        dialog.setMap("iteration=step");
        dialog.setName("gui-import");
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        // The preview: the CSV headers named like measures are read (k1 on the 3 steps with a number, reward on
        // all 4), the "oops" dropped; nothing is stored by it.
        QTableWidget* preview = dialog.previewTable();
        std::map<QString, std::pair<QString, QString>> rows;
        for (int row = 0; row < preview->rowCount(); ++row) {
            rows[preview->item(row, 0)->text()] = {preview->item(row, 1)->text(), preview->item(row, 2)->text()};
        }
        QCOMPARE(rows.size(), std::size_t(2));
        QCOMPARE(rows["k1"], (std::pair<QString, QString> {"k1", "3"}));
        QCOMPARE(rows["reward"], (std::pair<QString, QString> {"reward", "4"}));
        QVERIFY2(dialog.previewSummary().startsWith("4 steps from 4 lines (0 merged); 0 lines skipped, 1 values dropped"),
            qPrintable(dialog.previewSummary()));
        QVERIFY(!ui::runNamed(store, "gui-import"));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        saveScreenshot(dialog, "import_dialog_preview.png");
        QCOMPARE(dialog.cliCommand(),
            QStringLiteral("mismatch --workspace %1 import csv %2 --name gui-import --map "
                           "iteration=step")
                .arg(dir.path(), log.fileName()));
        QVERIFY(startAndWait(*window.jobQueue(), dialog));
        const QString command = dialog.cliCommand().replace("gui-import", "cli-import");
        QVERIFY(runCommand(command));
        const auto gui = ui::runNamed(store, "gui-import");
        const auto cli = ui::runNamed(store, "cli-import");
        QVERIFY(gui && cli);
        const auto guiSteps = store.stepsAfter(*gui);
        const auto cliSteps = store.stepsAfter(*cli);
        // The "oops" value is dropped alone: step 4 keeps its reward and has no k1.
        QCOMPARE(guiSteps.size(), size_t {4});
        QVERIFY(!guiSteps[3].k1);
        QCOMPARE(*guiSteps[3].reward, 0.3);
        QCOMPARE(cliSteps.size(), guiSteps.size());
        for (size_t i = 0; i < guiSteps.size(); ++i) {
            QCOMPARE(cliSteps[i].step, guiSteps[i].step);
            QCOMPARE(cliSteps[i].k1, guiSteps[i].k1);
            QCOMPARE(cliSteps[i].reward, guiSteps[i].reward);
        }
        QCOMPARE(
            nlohmann::json::parse(store.run(*cli)->configJson), nlohmann::json::parse(store.run(*gui)->configJson));
        // The name is now taken.
        ui::ImportLogDialog again(dir.path(), nullptr, &store);
        again.setSource("csv");
        again.setFile(log.fileName());
        again.setMap("iteration=step");
        again.setName("gui-import");
        QVERIFY2(!again.valid() && again.errorText().startsWith("Run name:"), qPrintable(again.errorText()));
    }

    // Issue 42 item 6: the import dialog's status line ("Ready: ..." once a log previews) is never drawn over the
    // preview table: at the dialog's opening size, after the preview fills (its summary and the status wrapping to
    // more lines), and narrowed to its least width (more lines still), the summary, the table and the status lie one
    // below another inside the dialog, each wrapped line as tall as its lines.
    void importStatusStaysBelowThePreview()
    {
        QTemporaryDir dir;
        // Six columns the import does not read: the summary names them and wraps.
        QFile log(dir.filePath("metrics-with-many-columns.csv"));
        QVERIFY(log.open(QIODevice::WriteOnly));
        log.write("iteration,k1,reward,learning_rate_schedule,gradient_norm_before_clip,tokens_per_second_per_gpu,"
                  "wall_clock_seconds,checkpoint_bytes_written,rollout_queue_depth\n"
                  "1,0.011,0.1,1,2,3,4,5,6\n2,0.012,0.2,1,2,3,4,5,6\n3,0.014,0.2,1,2,3,4,5,6\n");
        log.close();
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        ui::ImportLogDialog dialog(dir.path(), nullptr, &store);
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        const int openingWidth = dialog.width();
        checkStatusBelowPreview(dialog, "opened");
        dialog.setSource("csv");
        dialog.setFile(log.fileName());
        dialog.setMap("iteration=step");
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        QVERIFY2(dialog.statusText().startsWith("Ready:"), qPrintable(dialog.statusText()));
        QCOMPARE(dialog.previewTable()->rowCount(), 2); // k1 and reward
        QVERIFY2(dialog.previewSummary().contains("rollout_queue_depth")
                || dialog.previewSummary().contains("learning_rate_schedule"),
            qPrintable(dialog.previewSummary()));
        QTest::qWait(50); // the layout requests of the new texts
        QCOMPARE(dialog.width(), openingWidth); // the height grows, the width stays
        auto* status = dialog.findChild<QLabel*>("importStatus");
        QVERIFY(status->height() > status->fontMetrics().height()); // wrapped: the case that overlapped
        checkStatusBelowPreview(dialog, "previewed");
        saveScreenshot(dialog, "import_dialog_status_below_preview.png");
        dialog.resize(dialog.minimumWidth(), dialog.height());
        QTest::qWait(50);
        checkStatusBelowPreview(dialog, "narrowed");
        saveScreenshot(dialog, "import_dialog_status_below_preview_narrow.png");
    }

    void recipeBuildDialogMatchesTheCommand()
    {
        QTemporaryDir dir;
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        ui::MainWindow window(dir.path());
        ui::RecipeBuildDialog dialog(dir.path(), &store);
        dialog.setScan(0); // scan the model now
        dialog.setModelDirectory(kResources + "/models/arith-student");
        dialog.setPromptSet(kResources + "/prompts/arith-probe.jsonl");
        dialog.setFormat("int8/channel");
        dialog.setCount(2);
        dialog.setMaxTokens(4);
        dialog.setBudget(10.0); // generous: everything quantized fits
        dialog.setOutput(dir.filePath("recipes/gui-built.yaml"));
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        dialog.setOutput(dir.filePath("recipes/gui-built.txt"));
        QVERIFY2(
            !dialog.valid() && dialog.errorText().startsWith("Recipe file to write:"), qPrintable(dialog.errorText()));
        dialog.setOutput(dir.filePath("recipes/gui-built.yaml"));
        const QString command = dialog.cliCommand();
        QCOMPARE(command,
            QStringLiteral("mismatch --workspace %1 recipe build %2 --format int8:channel --prompts %3 --budget 10 "
                           "--out %4 --count 2 --max-tokens 4")
                .arg(dir.path(), kResources + "/models/arith-student", kResources + "/prompts/arith-probe.jsonl",
                    dir.filePath("recipes/gui-built.yaml")));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        saveScreenshot(dialog, "recipe_build_dialog.png");
        QString error;
        QVERIFY2(startAndWait(*window.jobQueue(), dialog, &error), qPrintable(error));
        const quant::Recipe gui = quant::loadRecipe(dir.filePath("recipes/gui-built.yaml").toStdString());
        QVERIFY(runCommand(QString(command).replace("gui-built", "cli-built")));
        const quant::Recipe cli = quant::loadRecipe(dir.filePath("recipes/cli-built.yaml").toStdString());
        QVERIFY(gui == cli);

        // From the stored scan now, with the budget of a calibration's step.
        const std::int64_t calibration = addTwoStepCalibration(store);
        ui::RecipeBuildDialog fromScan(dir.path(), &store);
        QVERIFY(fromScan.setScan(store::sensitivityScans(store).front().id));
        QVERIFY(fromScan.setCalibration(calibration, 40));
        QVERIFY2(fromScan.valid(), qPrintable(fromScan.errorText()));
        QVERIFY2(fromScan.cliCommand().contains(QStringLiteral("--calibration %1 --step 40 --scan %2")
                                                    .arg(calibration)
                                                    .arg(store::sensitivityScans(store).front().id)),
            qPrintable(fromScan.cliCommand()));
        QVERIFY(fromScan.setCalibration(calibration, 20));
        QVERIFY2(
            !fromScan.valid() && fromScan.errorText().startsWith("Budget step:"), qPrintable(fromScan.errorText()));
    }

    void timeToQualityAndObjectiveDialogs()
    {
        QTemporaryDir dir;
        // A tiny base run: 4 steps, evaluated at 2 and 4.
        const QString runFile = dir.filePath("tiny.yaml");
        QFile file(runFile);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(QStringLiteral("name: tiny\nstudent: %1/models/arith-student\nteacher: %1/models/arith-teacher\n"
                                  "prompts: %1/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
                                  "rollout:\n  sampling: {temperature: 1.0, max_tokens: 6, seed: 1}\n"
                                  "optimizer: {learning_rate: 1.0e-3}\nbatch: {prompts_per_step: 2}\nsteps: 4\n"
                                  "evaluation: {every: 2, prompts: %1/prompts/arith-heldout.jsonl, count: 4, "
                                  "max_tokens: 6}\nseed: 3\nthreads: 1\n")
                       .arg(kResources)
                       .toUtf8());
        file.close();
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        ui::MainWindow window(dir.path());
        ui::TimeToQualityDialog ttq(dir.path(), nullptr, &store);
        ttq.setRunFile(dir.filePath("missing.yaml"));
        QVERIFY2(!ttq.valid() && ttq.errorText().startsWith("Base run file:"), qPrintable(ttq.errorText()));
        ttq.setRunFile(runFile);
        ttq.setRecipe(kResources + "/recipes/fp8-kv.yaml");
        ttq.setStaleness(1);
        QVERIFY2(ttq.valid(), qPrintable(ttq.errorText()));
        QCOMPARE(ttq.cliCommand(),
            QStringLiteral("mismatch --workspace %1 time-to-quality %2 --recipe %3")
                .arg(dir.path(), runFile, kResources + "/recipes/fp8-kv.yaml"));
        // The device: the run file's unless chosen; a choice goes into the command.
        auto* device = ttq.findChild<QComboBox*>(QStringLiteral("deviceField"));
        QVERIFY(device);
        QCOMPARE(device->currentText(), QStringLiteral("As the run file says"));
        device->setCurrentIndex(device->findData(QStringLiteral("cpu")));
        QVERIFY2(ttq.valid(), qPrintable(ttq.errorText()));
        QCOMPARE(ttq.cliCommand(),
            QStringLiteral("mismatch --workspace %1 time-to-quality %2 --recipe %3 --device cpu")
                .arg(dir.path(), runFile, kResources + "/recipes/fp8-kv.yaml"));
        ttq.show();
        saveScreenshot(ttq, QStringLiteral("time_to_quality_dialog.png"));
        QString error;
        QVERIFY2(startAndWait(*window.jobQueue(), ttq, &error), qPrintable(error));
        bool stored = false;
        for (const store::RunInfo& run : store.listRuns()) {
            stored = stored || (run.kind == "time_to_quality" && run.status == store::RunStatus::Finished);
        }
        QVERIFY(stored);

        ui::CompareObjectivesDialog objectives(dir.path(), nullptr, &store);
        objectives.setRunFile(runFile);
        objectives.setObjectives({});
        QVERIFY2(!objectives.valid() && objectives.errorText().startsWith("Objectives:"),
            qPrintable(objectives.errorText()));
        objectives.setObjectives({"opd_full_kl"});
        objectives.setNoise("0.1, nan-ish");
        QVERIFY2(!objectives.valid() && objectives.errorText().startsWith("Noise sigmas"),
            qPrintable(objectives.errorText()));
        objectives.setNoise("0.3");
        QVERIFY2(objectives.valid(), qPrintable(objectives.errorText()));
        QCOMPARE(objectives.cliCommand(),
            QStringLiteral("mismatch --workspace %1 compare-objectives %2 --objectives opd_full_kl --noise 0.3")
                .arg(dir.path(), runFile));
        auto* objectivesDevice = objectives.findChild<QComboBox*>(QStringLiteral("deviceField"));
        QVERIFY(objectivesDevice);
        QCOMPARE(objectivesDevice->currentText(), QStringLiteral("As the run file says"));
        QCOMPARE(objectivesDevice->findData(QStringLiteral("cpu")), 1);
        QVERIFY2(startAndWait(*window.jobQueue(), objectives, &error), qPrintable(error));
        stored = false;
        for (const store::RunInfo& run : store.listRuns()) {
            stored = stored || (run.kind == "compare_objectives" && run.status == store::RunStatus::Finished);
        }
        QVERIFY(stored);
    }

    void compareRunsShowsTheVerdictOfTheCommand()
    {
        QTemporaryDir dir;
        store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
        const fixture::Ids ids = fixture::build(store);
        ui::CompareRunsDialog dialog(dir.path(), &store);
        QVERIFY(dialog.setRuns(ids.noisyRun, ids.baselineRun));
        QVERIFY(dialog.setStep(80));
        QVERIFY(!dialog.verdict().isEmpty());
        const auto json = runCommand(
            QString(dialog.cliCommand()).replace(QLatin1String("mismatch "), QLatin1String("mismatch --json ")));
        QVERIFY(json);
        const nlohmann::json result = nlohmann::json::parse(json->toStdString());
        QCOMPARE(dialog.verdict(), QString::fromStdString(result.at("verdict").get<std::string>()));
        const double change = result.at("relative_change").get<double>();
        QVERIFY2(dialog.resultText().contains(QString::asprintf("%+.2f%%", 100.0 * change)),
            qPrintable(dialog.resultText()));
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        saveScreenshot(dialog, "compare_runs_dialog.png");
        QVERIFY(!dialog.setStep(100)); // not evaluated by both
    }
};

MISMATCH_TEST_MAIN(TestStudyDialogs)
#include "test_study_dialogs.moc"

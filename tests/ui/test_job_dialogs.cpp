// The dialogs of the catalogue's jobs (sensitivity, recipe build, admission check) bind their fields to a
// JobSpec: the spec a dialog builds equals the one the CLI's generated options read from the dialog's own command
// (the same inputs), and a job file exported from the dialog, run with `mismatch run`, stores exactly what the
// dialog's job stored. The queue's Jobs tab exports the job file of a queued job too. Every field a dialog makes from
// a parameter shows the definition's label, help text, range and choices, and its value reaches the spec. Every job
// dialog, as the main window opens it, shows all its rows at its opening size, none over another; the Sensitivity
// dialog opens ready to start on the demo's workspace.
#include "app/cli/job_options.h"
#include "core/analysis/demo.h"
#include "core/common/runtime.h"
#include "core/common/device.h"
#include "core/jobs/job_file.h"
#include "core/model/transformer.h"
#include "core/store/analysis_store.h"
#include "core/train/zoo.h"
#include "fixture_workspace.h"
#include "tests/common/cli_runner.h"
#include "tests/common/shell_words.h"
#include "tests/common/tensorboard_writer.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"
#include "core/jobs/training_jobs.h"
#include "core/jobs/analysis_jobs.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/dialogs/breakdown_dialog.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/dialogs/sensitivity_dialog.h"
#include "ui/dialogs/spec_job_dialog.h"
#include "ui/dialogs/study_dialogs.h"
#include "core/jobs/experiment_jobs.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

using namespace mismatch;

namespace {

const QString kResources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");

// The spec the CLI reads from a dialog's command line ("mismatch --workspace W ARGS...").
jobs::JobSpec cliSpec(const QString& command, const QString& workspace)
{
    // Split as the shell a user pastes it into would (single quotes included).
    const std::vector<std::string> words = test::shellWords(command.toStdString());
    if (words.size() < 3 || words[0] != "mismatch" || words[1] != "--workspace" || words[2] != workspace.toStdString()) {
        throw std::runtime_error("unexpected command: " + command.toStdString());
    }
    return cli::parseJobArguments(std::vector<std::string>(words.begin() + 3, words.end()));
}

// The whole numbers an Integer parameter's range holds, as a spin box can offer them: above an exclusive low, from an
// inclusive one, up to the high; int's limits where the range has none.
std::pair<int, int> wholeRange(const jobs::Parameter& p)
{
    const auto bound = [](double v) {
        return static_cast<int>(
            std::clamp(v, double(std::numeric_limits<int>::min()), double(std::numeric_limits<int>::max())));
    };
    const int low
        = p.low ? bound(p.lowExclusive ? std::floor(*p.low) + 1 : std::ceil(*p.low)) : std::numeric_limits<int>::min();
    const int high = p.high ? bound(std::floor(*p.high)) : std::numeric_limits<int>::max();
    return {low, high};
}

// The row label of a form field.
QString rowLabel(const QWidget& dialog, QWidget* field)
{
    for (QFormLayout* form : dialog.findChildren<QFormLayout*>()) {
        if (auto* label = qobject_cast<QLabel*>(form->labelForField(field))) {
            return label->text();
        }
    }
    return {};
}

// The value a field shows, as the parameter's JSON value (null: the entry that leaves it not given, or an empty
// field); read from the widget itself.
nlohmann::json shownValue(const jobs::Parameter& p, QWidget* field)
{
    if (auto* box = qobject_cast<QSpinBox*>(field)) {
        return box->value() < wholeRange(p).first ? nlohmann::json() : nlohmann::json(box->value());
    }
    if (auto* box = qobject_cast<QDoubleSpinBox*>(field)) {
        return box->value();
    }
    if (auto* box = qobject_cast<QCheckBox*>(field)) {
        return box->isChecked();
    }
    if (auto* box = qobject_cast<QComboBox*>(field)) {
        const QString value = box->currentData().toString();
        return value.isEmpty() ? nlohmann::json() : nlohmann::json(value.toStdString());
    }
    if (auto* edit = qobject_cast<QLineEdit*>(field)) {
        const QString text = edit->text().trimmed();
        return text.isEmpty() ? nlohmann::json() : nlohmann::json(text.toStdString());
    }
    return nullptr;
}

// Changes a field as a user would (the next value, the other state, the next choice, another text); false for a field
// it does not change (pickers, and line edits of anything but text).
bool nudge(const jobs::Parameter& p, QWidget* field)
{
    if (auto* box = qobject_cast<QSpinBox*>(field)) {
        box->setValue(box->value() < box->maximum() ? box->value() + 1 : box->value() - 1);
    } else if (auto* box = qobject_cast<QDoubleSpinBox*>(field)) {
        const double up = box->value() + box->singleStep();
        box->setValue(up <= box->maximum() ? up : box->value() - box->singleStep());
    } else if (auto* box = qobject_cast<QCheckBox*>(field)) {
        box->setChecked(!box->isChecked());
    } else if (auto* box = qobject_cast<QComboBox*>(field)) {
        box->setCurrentIndex((box->currentIndex() + 1) % box->count());
    } else if (auto* edit = qobject_cast<QLineEdit*>(field); edit && p.type == jobs::ParameterType::Text) {
        edit->setText(QStringLiteral("nudged-%1").arg(QString::fromStdString(p.name)));
    } else {
        return false;
    }
    return true;
}

} // namespace

class TestJobDialogs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        fixture::initGuiTest();
        QVERIFY(dir_.isValid());
        model_ = dir_.path() + "/student";
        test::writeTinyStudent(model_.toStdString());
        probe_ = kResources + "/prompts/arith-probe.jsonl";
    }

    // Long: one block per dialog, each filling its fields and comparing the spec with the CLI's for the same
    // values; the blocks share the fixture's model, probe set and stored scan.
    void dialogSpecsEqualTheCliSpecs()
    {
        const QString workspace = dir_.path() + "/specs";
        store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));

        ui::SensitivityDialog scan(workspace, nullptr, &store);
        scan.setModelDirectory(model_);
        scan.setPromptSet(probe_);
        scan.setFormat("fp8_e4m3/channel");
        scan.setCount(5);
        scan.setMaxTokens(7);
        QVERIFY2(scan.valid(), qPrintable(scan.errorText()));
        QVERIFY(cliSpec(scan.cliCommand(), workspace) == *scan.spec());
        QCOMPARE(scan.spec()->text("format"), std::string("fp8_e4m3:channel"));
        QCOMPARE(scan.spec()->integer("max_tokens"), std::int64_t(7));

        ui::AdmissionDialog admit(workspace, &store);
        admit.setCheckpoints(model_ + ";" + model_);
        admit.setHistory(model_);
        admit.setCandidates(kResources + "/candidates/demo.yaml");
        admit.setProbeSet(probe_);
        admit.setThreshold(0.05);
        admit.setCount(3);
        admit.setMaxTokens(9);
        QVERIFY2(admit.valid(), qPrintable(admit.errorText()));
        QVERIFY(cliSpec(admit.cliCommand(), workspace) == *admit.spec());
        QCOMPARE(admit.spec()->strings("students").size(), std::size_t(2));
        QCOMPARE(admit.spec()->number("threshold"), 0.05);
        // The Device row lists the devices this build and machine compute on (cpu first, selected).
        auto* device = admit.findChild<QComboBox*>("deviceField");
        QVERIFY(device);
        QCOMPARE(device->count(), int(availableDevices().size()));
        QCOMPARE(device->currentData().toString(), QString("cpu"));
        QCOMPARE(admit.spec()->text("device"), std::string("cpu"));

        ui::RecipeBuildDialog build(workspace, &store);
        build.setScan(0);
        build.setModelDirectory(model_);
        build.setPromptSet(probe_);
        build.setFormat("int4/group128");
        build.setBudget(0.25);
        build.setTargetFraction(0.75);
        build.setOutput(dir_.path() + "/recipes/built.yaml");
        QVERIFY2(build.valid(), qPrintable(build.errorText()));
        QVERIFY(cliSpec(build.cliCommand(), workspace) == *build.spec());
        QCOMPARE(build.spec()->number("target_fraction"), 0.75);
        // A changed field changes the spec.
        build.setTargetFraction(0.5);
        QVERIFY(cliSpec(build.cliCommand(), workspace) == *build.spec());
        QVERIFY(!build.spec()->toJson()["parameters"].contains("target_fraction"));
        // Leaving the embedding and lm_head in BF16 (for vLLM / llm-compressor exports) is the command's --no-embedding.
        QVERIFY(!build.spec()->flag("no_embedding"));
        auto* keepEmbedding = build.findChild<QCheckBox*>("recipeBuildKeepEmbedding");
        QVERIFY(keepEmbedding);
        keepEmbedding->setChecked(true);
        QVERIFY(build.spec()->flag("no_embedding"));
        QVERIFY(build.cliCommand().contains("--no-embedding"));
        QVERIFY(cliSpec(build.cliCommand(), workspace) == *build.spec());
        QVERIFY(jobs::recipeBuildOptions(*build.spec(), store).keepEmbeddingBf16);
        keepEmbedding->setChecked(false);

        ui::PrefixShiftDialog shift(workspace, nullptr, &store);
        shift.setModelDirectory(model_);
        shift.setRecipe(kResources + "/recipes/fp8-per-tensor.yaml");
        shift.setNoise(0.01, 5);
        shift.setPromptSet(probe_);
        shift.setCount(6);
        shift.setCap(3.5);
        shift.setStoredPairs(2);
        QVERIFY2(shift.valid(), qPrintable(shift.errorText()));
        QVERIFY(cliSpec(shift.cliCommand(), workspace) == *shift.spec());
        QCOMPARE(shift.spec()->integer("noise_seed"), std::int64_t(5));
        QCOMPARE(shift.spec()->number("cap"), 3.5);

        ui::CalibrationDialog calibration(workspace, nullptr, &store);
        calibration.setRunFile(kResources + "/runs/demo-opd.yaml");
        calibration.setQuick(true);
        calibration.setName("spec-calibration"); // QProcess::splitCommand reads double quotes only
        calibration.setNoise("0.1, 0.3");
        calibration.setRecipes(kResources + "/recipes/fp8-kv.yaml");
        calibration.setStaleness("2");
        calibration.setSteps("20");
        calibration.setMargin(0.1);
        calibration.setReplicates(3);
        QVERIFY2(calibration.valid(), qPrintable(calibration.errorText()));
        QVERIFY(cliSpec(calibration.cliCommand(), workspace) == *calibration.spec());
        QCOMPARE(calibration.spec()->numbers("noise"), (std::vector<double> {0.1, 0.3}));
        QCOMPARE(calibration.spec()->strings("recipes").size(), std::size_t(1));
        QCOMPARE(calibration.spec()->integer("replicates"), std::int64_t(3));
        // The default maximum of seeds is not written out; another one is, and both front-ends run it.
        QVERIFY(!calibration.spec()->given("max_replicates"));
        QCOMPARE(jobs::calibrationOptions(*calibration.spec()).maxReplicates, std::int64_t(4));
        calibration.setMaxReplicates(6);
        QCOMPARE(calibration.spec()->integer("max_replicates"), std::int64_t(6));
        QVERIFY(cliSpec(calibration.cliCommand(), workspace) == *calibration.spec());
        QCOMPARE(jobs::calibrationOptions(*calibration.spec()).maxReplicates, std::int64_t(6));
        // Calibration's Device row starts at "As the run file says": no device given, the run file's is used.
        auto* calibrationDevice = calibration.findChild<QComboBox*>("deviceField");
        QVERIFY(calibrationDevice);
        QCOMPARE(calibrationDevice->count(), int(availableDevices().size()) + 1);
        QVERIFY(!calibration.spec()->given("device"));
        calibrationDevice->setCurrentIndex(1);
        QCOMPARE(calibration.spec()->text("device"), std::string("cpu"));
        QVERIFY(cliSpec(calibration.cliCommand(), workspace) == *calibration.spec());
        calibrationDevice->setCurrentIndex(0);
        // The options both front-ends run: the quick cut, the sweep and the rule as given.
        const analysis::CalibrationOptions options = jobs::calibrationOptions(*calibration.spec());
        QCOMPARE(options.base.steps, std::int64_t(40));
        QCOMPARE(options.steps, (std::vector<std::int64_t> {20}));
        QCOMPARE(options.staleness, (std::vector<std::int64_t> {2}));
        QCOMPARE(options.name, std::string("spec-calibration"));
        // The comma form of the CLI's lists reads the same.
        QVERIFY(cliSpec(calibration.cliCommand().replace("--noise 0.1 --noise 0.3", "--noise 0.1,0.3"), workspace)
            == *calibration.spec());

        ui::BreakdownDialog breakdown(workspace, &store);
        breakdown.setModelDirectory(model_);
        breakdown.setRecipe(kResources + "/recipes/fp8-kv.yaml");
        breakdown.setStaleness(1, model_);
        breakdown.setNoise(0.02, 4);
        breakdown.setPromptSet(probe_);
        breakdown.setCount(3);
        breakdown.setMaxTokens(5);
        breakdown.setShapleyMax(3);
        QVERIFY2(breakdown.valid(), qPrintable(breakdown.errorText()));
        QVERIFY(cliSpec(breakdown.cliCommand(), workspace) == *breakdown.spec());
        const analysis::BreakdownOptions parts = jobs::breakdownOptions(*breakdown.spec());
        QCOMPARE(parts.candidates.size(), std::size_t(1));
        QCOMPARE(parts.candidates[0].name, std::string("fp8-kv+stale-1+noise-0.02")); // named after what it changes
        QCOMPARE(parts.candidates[0].staleness, std::int64_t(1));
        QCOMPARE(parts.candidates[0].noiseSeed, std::uint64_t(4));
        QCOMPARE(parts.settings.maxNewTokens, std::int64_t(5));
        QCOMPARE(parts.shapleyMaxSources, std::int64_t(3));

        ui::TimeToQualityDialog ttq(workspace, nullptr, &store);
        ttq.setRunFile(kResources + "/runs/demo-opd-quick.yaml");
        ttq.setRecipe(kResources + "/recipes/fp8-kv.yaml");
        ttq.setStaleness(2);
        ttq.setSynchronous(true);
        ttq.setTargetStep(40);
        QVERIFY2(ttq.valid(), qPrintable(ttq.errorText()));
        QVERIFY(cliSpec(ttq.cliCommand(), workspace) == *ttq.spec());
        const analysis::TimeToQualityOptions ttqOptions = jobs::timeToQualityOptions(*ttq.spec());
        QCOMPARE(ttqOptions.staleness, std::int64_t(2));
        QVERIFY(!ttqOptions.asynchronous);
        QCOMPARE(ttqOptions.targetStep.value_or(0), std::int64_t(40));
        QCOMPARE(ttqOptions.base.steps, std::int64_t(60));
        // A step the run does not evaluate is named by the dialog's field label, before anything is queued.
        ttq.setTargetStep(30);
        QVERIFY2(!ttq.valid() && ttq.errorText().startsWith("Target step:"), qPrintable(ttq.errorText()));

        ui::CompareObjectivesDialog objectives(workspace, nullptr, &store);
        objectives.setRunFile(kResources + "/runs/demo-opd-quick.yaml");
        objectives.setObjectives({"opd_k3", "grpo"});
        objectives.setNoise("0.2, 0.6");
        objectives.setRecipes(kResources + "/recipes/fp8-kv.yaml");
        objectives.setSteps(8);
        QVERIFY2(objectives.valid(), qPrintable(objectives.errorText()));
        QVERIFY(cliSpec(objectives.cliCommand(), workspace) == *objectives.spec());
        const analysis::CompareObjectivesOptions compared = jobs::compareObjectivesOptions(*objectives.spec());
        QCOMPARE(compared.objectives.size(), std::size_t(2));
        QVERIFY(compared.objectives[0] == train::Objective::OpdK3 && compared.objectives[1] == train::Objective::Grpo);
        QCOMPARE(compared.noiseSigmas, (std::vector<double> {0.2, 0.6}));
        QCOMPARE(compared.recipes.size(), std::size_t(1));
        QCOMPARE(compared.base.steps, std::int64_t(8));
        QCOMPARE(compared.rlMaxTokens, std::int64_t(40));
        // The comma form of the CLI's objective list reads the same.
        QVERIFY(cliSpec(objectives.cliCommand().replace("--objectives opd_k3 --objectives grpo",
                            "--objectives opd_k3,grpo"),
                    workspace)
            == *objectives.spec());

        // The Export Job File button and the exported file: the same spec.
        scan.show();
        QVERIFY(QTest::qWaitForWindowExposed(&scan));
        auto* exportButton = scan.findChild<QPushButton*>("exportJobFileButton");
        QVERIFY(exportButton && exportButton->isVisible());
        fixture::saveScreenshot(scan, "job_dialog_sensitivity_export.png");
        const QString file = dir_.path() + "/exported.yaml";
        QString error;
        QVERIFY2(scan.exportJobFile(file, &error), qPrintable(error));
        const jobs::JobFile loaded = jobs::loadJobFile(file.toStdString());
        QVERIFY(loaded.steps.at(0).spec == *scan.spec());
        QVERIFY(!scan.exportJobFile(dir_.path() + "/no-such-folder/x.yaml", &error));
        QVERIFY2(error.contains("no-such-folder"), qPrintable(error));
    }

    // The dialog's job and `mismatch run` on its exported file store the same scan and the same decisions.
    void exportedJobFilesStoreWhatTheDialogsStored()
    {
        const QString workspace = dir_.path() + "/runs";
        store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));
        ui::SensitivityDialog scan(workspace, nullptr, &store);
        scan.setModelDirectory(model_);
        scan.setPromptSet(probe_);
        scan.setFormat("int8/channel");
        scan.setCount(4);
        scan.setMaxTokens(8);
        QVERIFY2(scan.valid(), qPrintable(scan.errorText()));
        Progress progress;
        scan.job()(progress);
        const QString scanFile = dir_.path() + "/scan.job.yaml";
        QVERIFY(scan.exportJobFile(scanFile));
        auto result = test::runCli({"--workspace", workspace.toStdString(), "run", scanFile.toStdString()});
        QVERIFY2(result.code == 0, result.err.c_str());
        const auto scans = store::sensitivityScans(store);
        QCOMPARE(scans.size(), std::size_t(2));
        const auto gui = store::sensitivityScan(store, scans[0].id);
        const auto file = store::sensitivityScan(store, scans[1].id);
        QCOMPARE(file->info.configJson, gui->info.configJson);
        QCOMPARE(file->info.bf16Unit, gui->info.bf16Unit);
        QCOMPARE(file->cells.size(), gui->cells.size());
        QVERIFY(gui->cells.size() >= 15);
        for (std::size_t i = 0; i < gui->cells.size(); ++i) {
            QCOMPARE(file->cells[i].moduleGroup, gui->cells[i].moduleGroup);
            QCOMPARE(file->cells[i].mismatch, gui->cells[i].mismatch);
            QCOMPARE(file->cells[i].ciLow, gui->cells[i].ciLow);
            QCOMPARE(file->cells[i].ciHigh, gui->cells[i].ciHigh);
        }

        const QString candidates = dir_.path() + "/candidates.yaml";
        QFile text(candidates);
        QVERIFY(text.open(QIODevice::WriteOnly));
        text.write("- name: plain\n- name: noisy\n  noise: 0.02\n  noise_seed: 3\n");
        text.close();
        ui::AdmissionDialog admit(workspace, &store);
        admit.setCheckpoints(model_);
        admit.setCandidates(candidates);
        admit.setProbeSet(probe_);
        admit.setThreshold(0.05);
        admit.setCount(4);
        admit.setMaxTokens(8);
        QVERIFY(!admit.cliCommand().contains("--store-generations")); // the default (8) is not spelled out
        admit.setStoredGenerations(2);
        QVERIFY2(admit.cliCommand().contains("--store-generations 2"), qPrintable(admit.cliCommand()));
        QVERIFY2(admit.valid(), qPrintable(admit.errorText()));
        admit.job()(progress);
        const QString admitFile = dir_.path() + "/admit.job.yaml";
        QVERIFY(admit.exportJobFile(admitFile));
        result = test::runCli({"--workspace", workspace.toStdString(), "run", admitFile.toStdString()});
        QVERIFY2(result.code == 0, result.err.c_str());
        const auto decisions = store::admissionDecisions(store);
        QCOMPARE(decisions.size(), std::size_t(4));
        for (std::size_t i = 0; i < 2; ++i) {
            const auto& g = decisions[i];
            const auto& f = decisions[i + 2];
            QVERIFY(g.runId != f.runId);
            QCOMPARE(f.candidateJson, g.candidateJson); // every input, paths included
            QCOMPARE(f.checkpoint, g.checkpoint);
            QCOMPARE(f.mismatch, g.mismatch);
            QCOMPARE(f.ciLow, g.ciLow);
            QCOMPARE(f.ciHigh, g.ciHigh);
            QCOMPARE(f.threshold, g.threshold);
            QCOMPARE(f.decision, g.decision);
            // The dialog's stored-generations field reached the job: 2 of the 4 probe prompts, from either front-end.
            QCOMPARE(store::admissionGenerationCount(store, g.id), std::int64_t(2));
            QCOMPARE(store::admissionGenerationCount(store, f.id), std::int64_t(2));
        }
    }

    // The Jobs tab keeps each queued catalogue job's file and exports it.
    // A cancelled run of a catalogue job, selected in the Runs tab, is resumed from the job it stored (what
    // `mismatch run --resume` does); a run without a stored job says why it cannot be.
    void runsTabResumesAStoredJob()
    {
        const QString workspace = dir_.path() + "/resume";
        jobs::JobSpec spec("sensitivity");
        spec.set("model", model_.toStdString()).set("format", "int8").set("prompts", probe_.toStdString());
        spec.set("count", 3).set("max_tokens", 4).set("no_kv", true).set("resamples", 200);
        std::int64_t cut = 0;
        std::int64_t plain = 0;
        {
            store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));
            std::shared_ptr<Progress> cancelling;
            cancelling = std::make_shared<Progress>([&cancelling](double fraction, const std::string&) {
                if (fraction > 0.3) {
                    cancelling->cancel();
                }
            });
            QVERIFY_EXCEPTION_THROWN(spec.run(store, *cancelling, [&cut](std::int64_t id) { cut = id; }), CancelledError);
            plain = store.beginRun({"by hand", "sensitivity", "{}", std::nullopt});
            store.finishRun(plain, store::RunStatus::Cancelled);
        }
        ui::MainWindow window(workspace);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        auto* table = window.findChild<QTableView*>("runTable");
        QVERIFY(table);
        const auto selectRun = [&](std::int64_t id) {
            for (int row = 0; row < table->model()->rowCount(); ++row) {
                if (table->model()->index(row, 0).data().toString() == QString::number(id)) {
                    table->selectRow(row);
                    return true;
                }
            }
            return false;
        };
        QVERIFY(selectRun(plain));
        QCOMPARE(window.resumeSelectedRun(), 0); // no stored job: nothing queued, and the reason is shown
        QVERIFY2(window.lastError().contains("not started by a job of the catalogue"), qPrintable(window.lastError()));
        QVERIFY(selectRun(cut));
        QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
        const int id = window.resumeSelectedRun();
        QVERIFY(id != 0);
        QCOMPARE(window.jobQueue()->cliCommand(id),
            QString::fromStdString(jobs::commandLine(
                {"--workspace", workspace.toStdString(), "run", "--resume", std::to_string(cut)})));
        QVERIFY(finished.wait(120000));
        const store::RunStore store
            = store::RunStore::open(store::databasePath(workspace.toStdString()), store::OpenMode::ReadOnly);
        QVERIFY(store.run(cut)->status == store::RunStatus::Finished);
        QVERIFY(jobs::JobSpec::ofRun(*store.run(cut)) == spec);
    }

    void jobsTabExportsTheJobFile()
    {
        const QString workspace = dir_.path() + "/queue";
        ui::MainWindow window(workspace);
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        ui::SensitivityDialog scan(workspace, nullptr);
        scan.setModelDirectory(model_);
        scan.setPromptSet(probe_);
        scan.setFormat("int8/channel");
        scan.setCount(2);
        scan.setMaxTokens(4);
        QVERIFY2(scan.valid(), qPrintable(scan.errorText()));
        QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
        const int id = window.jobQueue()->enqueue(scan.jobName(), scan.cliCommand(), scan.fieldNamedJob());
        window.jobQueue()->setJobFile(id, QString::fromStdString(jobs::jobFileText(*scan.spec())));
        QVERIFY(finished.wait(120000));
        const QString file = dir_.path() + "/from-queue.yaml";
        QString error;
        QVERIFY2(window.jobQueue()->exportJobFile(id, file, &error), qPrintable(error));
        QVERIFY(jobs::loadJobFile(file.toStdString()).steps.at(0).spec == *scan.spec());
        window.tabs()->setCurrentIndex(ui::MainWindow::JobsTab);
        auto* panel = window.findChild<ui::JobQueuePanel*>();
        QVERIFY(panel);
        panel->table()->selectRow(0);
        QVERIFY(panel->findChild<QPushButton*>("exportJobFileButton"));
        fixture::saveScreenshot(window, "jobs_tab_export_job_file.png");
        // A job without a spec has no file to export.
        const int plain = window.jobQueue()->enqueue("plain", "mismatch --version", [](Progress&) {});
        QVERIFY(!window.jobQueue()->exportJobFile(plain, file + ".2", &error));
    }

    // The catalogue's jobs without a dialog of their own get one built from their parameters: for each, the spec
    // the dialog builds equals the CLI's parse of the dialog's command; a field's problem is named by its label;
    // the quantize job run from the dialog and from its exported job file writes the same file.
    void specDialogsBindTheOtherJobs()
    {
        const QString workspace = dir_.path() + "/spec-dialogs";
        store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));
        const QString weights = model_ + "/model.safetensors";
        const QString aimet = dir_.path() + "/per_layer_quant_enabled.json";
        QFile file(aimet);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("{\"model.layers.0.self_attn.q_proj\": 0.5}\n");
        file.close();
        // Every value typed as a user would (lists separated as the placeholders say).
        const std::map<std::string, std::vector<std::pair<std::string, QString>>> inputs = {
            {"generate",
                {{"model", model_}, {"prompts", probe_}, {"out", dir_.path() + "/generated.jsonl"},
                    {"max_tokens", "4"}, {"temperature", "0.7"}, {"stop", "==; 9"}, {"ignore_eos", "true"},
                    {"precision", "bf16"}}},
            {"logits", {{"model", model_}, {"prompts", probe_}, {"out", dir_.path() + "/logits.safetensors"},
                           {"bf16", "true"}}},
            {"quantize", {{"format", "int8"}, {"input", weights}, {"output", dir_.path() + "/gui-q.safetensors"}}},
            {"zoo_build", {{"out", dir_.path() + "/zoo"}, {"only", "arith-student"}, {"student_steps", "2"}}},
            {"zoo_shape", {{"shape", "qwen3-0.6b"}, {"directory", dir_.path() + "/shape"}, {"seed", "3"}}},
            {"import_aimet", {{"file", aimet}, {"analysis", "enabled"}, {"reference_score", "0.75"},
                                 {"scheme", "int8 w8a8"}}},
            {"report", {{"study", "workspace"}, {"out", dir_.path() + "/report"}, {"width", "640"}}},
        };
        for (const std::string& kind : ui::specDialogJobs()) {
            ui::SpecJobDialog dialog(kind, workspace, nullptr, &store);
            QVERIFY2(inputs.count(kind) == 1, kind.c_str());
            for (const auto& [name, value] : inputs.at(kind)) {
                dialog.setValue(name, value);
            }
            QVERIFY2(dialog.valid(), qPrintable(QString::fromStdString(kind) + ": " + dialog.errorText()));
            QVERIFY2(cliSpec(dialog.cliCommand(), workspace) == *dialog.spec(), qPrintable(dialog.cliCommand()));
            for (const auto& [name, value] : inputs.at(kind)) {
                QVERIFY2(dialog.spec()->given(name), name.c_str()); // every typed value reached the spec
            }
        }
        ui::SpecJobDialog generate("generate", workspace, nullptr, &store);
        generate.setValue("model", model_);
        generate.setValue("prompts", probe_);
        generate.setValue("out", dir_.path() + "/generated.jsonl");
        QVERIFY(generate.valid());
        QCOMPARE(generate.spec()->strings("stop"), std::vector<std::string> {});
        generate.setValue("stop", "a, b; c");
        QCOMPARE(generate.spec()->strings("stop"), (std::vector<std::string> {"a, b", "c"}));
        generate.setValue("max_tokens", "many");
        QVERIFY2(!generate.valid() && generate.errorText().startsWith("Generated tokens per prompt: "),
            qPrintable(generate.errorText()));
        generate.setValue("max_tokens", "0");
        QVERIFY2(!generate.valid() && generate.errorText().startsWith("Generated tokens per prompt"),
            qPrintable(generate.errorText()));
        generate.setValue("max_tokens", "");
        generate.setValue("prompts", "");
        QVERIFY2(!generate.valid() && generate.errorText().startsWith("Prompt set"), qPrintable(generate.errorText()));
        generate.setValue("prompts", probe_);
        generate.show();
        QVERIFY(QTest::qWaitForWindowExposed(&generate));
        fixture::saveScreenshot(generate, "spec_job_dialog_generate.png");

        ui::SpecJobDialog quantize("quantize", workspace, nullptr, &store);
        quantize.setValue("format", "int8");
        quantize.setValue("input", weights);
        quantize.setValue("output", dir_.path() + "/gui-q.safetensors");
        QVERIFY2(quantize.valid(), qPrintable(quantize.errorText()));
        Progress progress;
        quantize.job()(progress);
        const QString jobFile = dir_.path() + "/quantize.job.yaml";
        QVERIFY(quantize.exportJobFile(jobFile));
        QFile::rename(dir_.path() + "/gui-q.safetensors", dir_.path() + "/gui-q-first.safetensors");
        const auto result = test::runCli({"--workspace", workspace.toStdString(), "run", jobFile.toStdString()});
        QVERIFY2(result.code == 0, result.err.c_str());
        const auto bytes = [](const QString& path) {
            QFile in(path);
            return in.open(QIODevice::ReadOnly) ? in.readAll() : QByteArray();
        };
        QVERIFY(!bytes(dir_.path() + "/gui-q-first.safetensors").isEmpty());
        QCOMPARE(bytes(dir_.path() + "/gui-q.safetensors"), bytes(dir_.path() + "/gui-q-first.safetensors"));
    }

    // The log import dialog builds the catalogue's import job of the chosen format.
    void importLogDialogBindsTheImportJob()
    {
        // One small log of each format (the dialog previews the file: it must be of the chosen format).
        const QString workspace = dir_.path() + "/imports";
        const std::map<std::string, std::string> logs = {
            {"verl", "{\"step\": 1, \"data\": {\"rollout_corr/kl\": 0.01, \"iteration\": 1}}\n"},
            {"tinker", "{\"step\": 1, \"optim/kl_sample_train_v1\": 0.01, \"iteration\": 1}\n"},
            {"csv", "iteration,k1\n1,0.01\n2,0.02\n"},
            {"tensorboard",
                test::tensorboard::fileVersionRecord()
                    + test::tensorboard::record(test::tensorboard::eventBytes(
                        1, test::tensorboard::simpleValue("rollout_corr/kl", 0.01f)
                               + test::tensorboard::simpleValue("iteration", 1.0f)))},
        };
        ui::ImportLogDialog dialog(workspace);
        for (const auto& [source, text] : logs) {
            const QString log = dir_.path() + "/log-" + QString::fromStdString(source);
            QFile file(log);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write(text.data(), static_cast<qint64>(text.size()));
            file.close();
            dialog.setSource(QString::fromStdString(source));
            dialog.setFile(log);
            dialog.setName("imported");
            dialog.setMap(source == "csv" ? "iteration=step; k1=k3" : "iteration=k3");
            QVERIFY2(dialog.valid(), qPrintable(QString::fromStdString(source) + ": " + dialog.errorText()));
            QCOMPARE(dialog.spec()->kind(), "import_" + source);
            QVERIFY2(cliSpec(dialog.cliCommand(), workspace) == *dialog.spec(), qPrintable(dialog.cliCommand()));
        }
        dialog.setMap("k1=k3; k1=loss");
        QVERIFY2(!dialog.valid() && dialog.errorText().startsWith("Column mapping: "), qPrintable(dialog.errorText()));
    }

    // Every field a dialog makes from a catalogue parameter (the plain fields of the hand-written dialogs, each field
    // of a generic dialog) shows the definition's label, help text, integer range and choices; changed as a user
    // would, its value reaches the spec under the parameter's name, and the CLI reads the dialog's command as the same
    // spec.
    void parameterFieldsShowTheDefinition()
    {
        const QString workspace = dir_.path() + "/fields";
        store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));

        ui::SensitivityDialog scan(workspace, nullptr, &store);
        checkFields(scan, "sensitivity", {"activations", "count", "max_tokens", "no_kv", "no_embedding"});
        // The cells skipped are the parameters' own flags, unchecked: nothing is skipped unless asked.
        auto* noEmbedding = scan.findChild<QCheckBox*>("scanNoEmbeddingBox");
        QVERIFY(noEmbedding && !noEmbedding->isChecked());
        // The GUI's smaller starting measurement (the CLI's defaults are every prompt and 64 tokens).
        QCOMPARE(scan.spec()->integer("count"), std::int64_t(64));
        QCOMPARE(scan.spec()->integer("max_tokens"), std::int64_t(16));
        scan.setModelDirectory(model_);
        scan.setPromptSet(probe_);
        scan.setFormat("int8/channel");
        scan.setCount(5);
        checkValues(scan, workspace);

        ui::BreakdownDialog breakdown(workspace, &store);
        checkFields(breakdown, "breakdown", {"staleness", "noise", "noise_seed", "count", "max_tokens", "shapley_max"});
        breakdown.setModelDirectory(model_);
        breakdown.setRecipe(kResources + "/recipes/fp8-kv.yaml");
        breakdown.setStaleness(1, model_);
        breakdown.setNoise(0.02, 4);
        breakdown.setPromptSet(probe_);
        checkValues(breakdown, workspace);

        ui::CalibrationDialog calibration(workspace, nullptr, &store);
        checkFields(calibration, "calibrate", {"name", "quick", "margin", "replicates", "max_replicates"});
        calibration.setRunFile(kResources + "/runs/demo-opd.yaml");
        calibration.setName("fields");
        calibration.setReplicates(3);
        checkValues(calibration, workspace);

        ui::AdmissionDialog admit(workspace, &store);
        checkFields(admit, "admit", {"count", "max_tokens", "allow_protocol_mismatch", "store_generations"});
        admit.setCheckpoints(model_);
        admit.setCandidates(kResources + "/candidates/demo.yaml");
        admit.setProbeSet(probe_);
        admit.setThreshold(0.05);
        checkValues(admit, workspace);

        ui::PrefixShiftDialog shift(workspace, nullptr, &store);
        checkFields(shift, "prefix_shift", {"noise", "noise_seed", "count", "max_tokens", "cap", "store_pairs"});
        shift.setModelDirectory(model_);
        shift.setNoise(0.01, 5);
        shift.setPromptSet(probe_);
        checkValues(shift, workspace);

        ui::RecipeBuildDialog build(workspace, &store);
        checkFields(
            build, "recipe_build", {"count", "max_tokens", "target_fraction", "kv_cache", "no_embedding", "name"});
        build.setScan(0);
        build.setModelDirectory(model_);
        build.setPromptSet(probe_);
        build.setBudget(0.25);
        build.setOutput(dir_.path() + "/recipes/fields.yaml");
        checkValues(build, workspace);

        ui::TimeToQualityDialog ttq(workspace, nullptr, &store);
        checkFields(ttq, "time_to_quality", {"staleness", "synchronous", "target_step"});
        ttq.setRunFile(kResources + "/runs/demo-opd-quick.yaml");
        checkValues(ttq, workspace);

        ui::CompareObjectivesDialog objectives(workspace, nullptr, &store);
        checkFields(objectives, "compare_objectives", {"run_steps", "rl_max_tokens", "group", "window", "collapse"});
        objectives.setRunFile(kResources + "/runs/demo-opd-quick.yaml");
        checkValues(objectives, workspace);

        ui::ImportLogDialog import(workspace, nullptr, &store);
        checkFields(import, "import_verl", {"name"});
        const QString log = dir_.path() + "/fields-log.csv";
        QFile file(log);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write("iteration,k1\n1,0.01\n2,0.02\n");
        file.close();
        import.setSource("csv");
        import.setFile(log);
        import.setMap("iteration=step");
        checkValues(import, workspace);

        // The generic dialog: a field for every parameter, each as the definition says (its values: above).
        for (const std::string& kind : ui::specDialogJobs()) {
            ui::SpecJobDialog dialog(kind, workspace, nullptr, &store);
            std::vector<std::string> every;
            for (const jobs::Parameter& p : jobs::findJob(kind)->parameters) {
                every.push_back(p.name);
            }
            checkFields(dialog, kind, every);
        }
    }

    // Issue 42 item 10: on the workspace `mismatch demo` registers its models and prompt sets in, a new user's first
    // Sensitivity scan starts ready, as the other analysis dialogs do: the demo's student (its registered entry) on
    // the probe set, no red error, Start enabled, from the main window's Jobs menu as from the dialog alone.
    void sensitivityStartsReadyOnTheDemoWorkspace()
    {
        const QString workspace = demoWorkspace();
        QSettings().remove(QStringLiteral("sensitivity")); // no path remembered from an earlier scan
        const QString resources = QString::fromStdString(resourceDirectory());
        const QString student = QDir::cleanPath(QFileInfo(resources + "/models/arith-student").absoluteFilePath());
        const QString probe = QDir::cleanPath(QFileInfo(resources + "/prompts/arith-probe.jsonl").absoluteFilePath());
        ui::MainWindow window(workspace);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.showSensitivityDialog();
        auto* scan = window.findChild<ui::SensitivityDialog*>();
        QVERIFY(scan);
        QVERIFY(QTest::qWaitForWindowExposed(scan));
        QCOMPARE(QDir::cleanPath(scan->modelDirectory()), student);
        QCOMPARE(QDir::cleanPath(scan->promptSet()), probe);
        // Shown as the workspace's registered entries.
        QCOMPARE(scan->findChild<ui::PathPicker*>("scanModelEdit")->comboBox()->currentText(),
            QStringLiteral("arith-student (registered)"));
        QVERIFY2(scan->findChild<ui::PathPicker*>("scanPromptsEdit")->comboBox()->currentText().startsWith(
                     QStringLiteral("arith-probe (registered")),
            qPrintable(scan->findChild<ui::PathPicker*>("scanPromptsEdit")->comboBox()->currentText()));
        QVERIFY2(scan->valid(), qPrintable(scan->errorText()));
        QVERIFY(scan->startButton()->isEnabled());
        QVERIFY2(scan->statusText().startsWith(QStringLiteral("Ready:")), qPrintable(scan->statusText()));
        QVERIFY(cliSpec(scan->cliCommand(), workspace) == *scan->spec());
        fixture::saveScreenshot(*scan, "job_dialog_sensitivity_demo_workspace.png");
        scan->reject();

        // A workspace with nothing registered starts at the built-in student and probe set.
        const QString empty = dir_.path() + "/nothing-registered";
        store::RunStore store = store::RunStore::open(store::databasePath(empty.toStdString()));
        ui::SensitivityDialog fresh(empty, nullptr, &store);
        QCOMPARE(QDir::cleanPath(fresh.modelDirectory()), student);
        QCOMPARE(QDir::cleanPath(fresh.promptSet()), probe);
        QVERIFY2(fresh.valid(), qPrintable(fresh.errorText()));
        // A path given replaces the starting one; an empty one (nothing remembered) keeps it.
        fresh.setModelDirectory(model_);
        QCOMPARE(fresh.modelDirectory(), model_);
        fresh.setModelDirectory(QString());
        QCOMPARE(fresh.modelDirectory(), model_);
    }

    // Issue 42 item 6: every job dialog, opened as the main window opens it (its remembered or starting inputs, its
    // status line saying what is wrong or what the job will do), is tall enough at its opening size for every row:
    // each form row, the status line, the command and the buttons lie inside the dialog, one below another, and a
    // wrapped line has the height of all its lines. Screenshots of each are saved.
    void everyJobDialogShowsItsRows()
    {
        ui::MainWindow window(demoWorkspace());
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        std::vector<std::pair<QString, std::function<void()>>> openers = {
            {"sensitivity", [&window] { window.showSensitivityDialog(); }},
            {"calibration", [&window] { window.showCalibrationDialog(); }},
            {"admission", [&window] { window.showAdmissionDialog(); }},
            {"prefix_shift", [&window] { window.showPrefixShiftDialog(); }},
            {"breakdown", [&window] { window.showBreakdownDialog(); }},
            {"recipe_build", [&window] { window.showRecipeBuildDialog(); }},
            {"time_to_quality", [&window] { window.showTimeToQualityDialog(); }},
            {"compare_objectives", [&window] { window.showCompareObjectivesDialog(); }},
            {"import", [&window] { window.showImportLogDialog(); }},
            {"follow", [&window] { window.showFollowLogDialog(); }},
        };
        for (const std::string& kind : ui::specDialogJobs()) {
            openers.emplace_back(QString::fromStdString(kind), [&window, kind] { window.showSpecJobDialog(kind); });
        }
        for (const auto& [name, open] : openers) {
            open();
            const QList<ui::JobDialog*> dialogs = window.findChildren<ui::JobDialog*>();
            QVERIFY2(dialogs.size() == 1, qPrintable(name));
            ui::JobDialog* dialog = dialogs.front();
            QVERIFY(QTest::qWaitForWindowExposed(dialog));
            QTest::qWait(50); // the layout requests of texts set while opening
            checkRowsShown(*dialog, name);
            if (QTest::currentTestFailed()) {
                return;
            }
            fixture::saveScreenshot(*dialog, QStringLiteral("job_dialog_opening_%1.png").arg(name));
            dialog->reject(); // deleted on close
            QTRY_VERIFY(window.findChildren<ui::JobDialog*>().isEmpty());
        }
    }

private:
    // A workspace holding what `mismatch demo` registers (the built-in models and prompt sets; no screening), made once.
    QString demoWorkspace()
    {
        const QString workspace = dir_.path() + "/demo";
        if (!QFileInfo::exists(QString::fromStdString(store::databasePath(workspace.toStdString())))) {
            store::RunStore store = store::RunStore::open(store::databasePath(workspace.toStdString()));
            analysis::DemoOptions options;
            options.resourceDirectory = resourceDirectory();
            options.screen = false;
            Progress progress;
            const analysis::DemoReport report = analysis::runDemo(store, options, progress);
            if (report.models.empty() || report.promptSets.empty()) {
                qWarning("the demo registered no models or prompt sets");
            }
        }
        return workspace;
    }

    // Every row of `dialog` shown whole: the form's rows (label and field), then what the dialog's layout holds under
    // the form (a preview, the status line, the command, the buttons), each inside the dialog and below the one
    // before it; a word-wrapped label as tall as its lines at its width.
    static void checkRowsShown(const ui::JobDialog& dialog, const QString& name)
    {
        const auto inDialog = [&dialog](const QWidget* widget) {
            return QRect(widget->mapTo(&dialog, QPoint(0, 0)), widget->size());
        };
        const auto describe = [](const QRect& r) {
            return QStringLiteral("y %1..%2, x %3..%4").arg(r.top()).arg(r.bottom()).arg(r.left()).arg(r.right());
        };
        std::vector<std::pair<QString, QRect>> rows; // top to bottom
        const auto addWidget = [&](QWidget* widget, QRect& row, QString& what) {
            if (widget->isHidden()) {
                return;
            }
            const QRect shown = inDialog(widget);
            if (auto* label = qobject_cast<QLabel*>(widget); label && label->wordWrap()) {
                QVERIFY2(shown.height() >= label->heightForWidth(shown.width()),
                    qPrintable(QStringLiteral("%1: the label '%2' is %3 px tall, its lines %4 px")
                                   .arg(name, label->text().left(60))
                                   .arg(shown.height())
                                   .arg(label->heightForWidth(shown.width()))));
            }
            row = row.united(shown);
            what += (what.isEmpty() ? QString() : QStringLiteral(" / ")) + widget->objectName()
                + (qobject_cast<QLabel*>(widget) ? qobject_cast<QLabel*>(widget)->text().left(30) : QString());
        };
        const QLayout* contents = dialog.layout();
        QVERIFY2(contents, qPrintable(name));
        for (int i = 0; i < contents->count(); ++i) {
            QLayoutItem* item = contents->itemAt(i);
            if (auto* form = qobject_cast<QFormLayout*>(item->layout())) {
                for (int r = 0; r < form->rowCount(); ++r) {
                    QRect row;
                    QString what;
                    for (const auto role : {QFormLayout::LabelRole, QFormLayout::FieldRole, QFormLayout::SpanningRole}) {
                        if (QLayoutItem* part = form->itemAt(r, role); part && part->widget()) {
                            addWidget(part->widget(), row, what);
                        } else if (part && part->layout()) {
                            row = row.united(part->geometry()); // a row of widgets: the layout's place in the dialog
                        }
                    }
                    if (!row.isNull()) {
                        rows.emplace_back(QStringLiteral("form row %1 (%2)").arg(r).arg(what), row);
                    }
                }
            } else if (item->widget()) {
                QRect row;
                QString what;
                addWidget(item->widget(), row, what);
                if (!row.isNull()) {
                    rows.emplace_back(what, row);
                }
            }
        }
        QVERIFY2(rows.size() >= 5, qPrintable(name)); // a field, the status, the command's title and text, the buttons
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const auto& [what, row] = rows[i];
            QVERIFY2(dialog.rect().contains(row),
                qPrintable(QStringLiteral("%1 (%2x%3): %4 at %5 is not inside the dialog")
                               .arg(name)
                               .arg(dialog.width())
                               .arg(dialog.height())
                               .arg(what, describe(row))));
            if (i > 0) {
                const auto& [before, above] = rows[i - 1];
                QVERIFY2(row.top() > above.bottom(),
                    qPrintable(QStringLiteral("%1: %2 at %3 overlaps %4 at %5")
                                   .arg(name, what, describe(row), before, describe(above))));
            }
        }
    }

    // The dialog's job is `kind`, and its fields made from parameters (every one of `expected` among them) show their
    // parameter's label (" *" for a required one) and help text; a spin box offers the parameter's range (an Integer
    // without a default may add an entry below it that leaves it not given), a list its choices.
    void checkFields(ui::JobDialog& dialog, const std::string& kind, const std::vector<std::string>& expected)
    {
        QVERIFY2(dialog.spec(), kind.c_str());
        const jobs::JobDefinition& job = dialog.spec()->definition();
        QCOMPARE(job.kind, kind);
        for (const std::string& name : expected) {
            QVERIFY2(dialog.parameterField(name), (kind + ": no field of " + name).c_str());
        }
        for (const ui::ParameterField& field : dialog.parameterFields()) {
            const jobs::Parameter* p = job.parameter(field.parameter->name);
            const std::string where = kind + ": " + field.parameter->name;
            QVERIFY2(p, where.c_str());
            QCOMPARE(rowLabel(dialog, field.widget),
                QString::fromStdString(p->label) + (p->required ? QStringLiteral(" *:") : QStringLiteral(":")));
            QCOMPARE(field.widget->toolTip(), QString::fromStdString(p->help));
            if (auto* box = qobject_cast<QSpinBox*>(field.widget)) {
                QVERIFY2(p->type == jobs::ParameterType::Integer, where.c_str());
                const auto [low, high] = wholeRange(*p);
                QCOMPARE(box->maximum(), high);
                const bool notGivenEntry
                    = box->minimum() == low - 1 && p->defaultValue.is_null() && !box->specialValueText().isEmpty();
                QVERIFY2(box->minimum() == low || notGivenEntry,
                    qPrintable(QStringLiteral("%1: minimum %2, the range's low %3")
                                   .arg(QString::fromStdString(where))
                                   .arg(box->minimum())
                                   .arg(low)));
            } else if (auto* box = qobject_cast<QDoubleSpinBox*>(field.widget)) {
                QVERIFY2(p->type == jobs::ParameterType::Number, where.c_str());
                const double unit = std::pow(10.0, -box->decimals()) + 1e-12; // the box's bounds have its decimals
                if (p->low) {
                    QVERIFY2(p->lowExclusive ? box->minimum() > *p->low : box->minimum() >= *p->low, where.c_str());
                    QVERIFY2(box->minimum() - *p->low <= unit, where.c_str());
                }
                if (p->high) {
                    QVERIFY2(box->maximum() <= *p->high && *p->high - box->maximum() <= unit, where.c_str());
                }
            } else if (auto* box = qobject_cast<QComboBox*>(field.widget)) {
                QVERIFY2(p->type == jobs::ParameterType::Choice, where.c_str());
                const int first = p->defaultValue.is_null() ? 1 : 0; // the "(not given)" / "(choose)" entry
                QCOMPARE(box->count(), first + int(p->choices.size()));
                for (std::size_t i = 0; i < p->choices.size(); ++i) {
                    QCOMPARE(box->itemData(first + int(i)).toString(), QString::fromStdString(p->choices[i]));
                }
            } else if (qobject_cast<QCheckBox*>(field.widget)) {
                QVERIFY2(p->type == jobs::ParameterType::Flag, where.c_str());
            } else if (auto* picker = qobject_cast<ui::PathPicker*>(field.widget)) {
                QVERIFY2(p->type == jobs::ParameterType::Path, where.c_str());
                QCOMPARE(picker->comboBox()->toolTip(), QString::fromStdString(p->help));
            } else {
                QVERIFY2(qobject_cast<QLineEdit*>(field.widget), where.c_str());
            }
        }
    }

    // Changes each enabled field made from a parameter in turn (a disabled one is not the dialog's input now): the
    // spec then holds the field's value under the parameter's name (its default when the field leaves it not given),
    // and the CLI reads the dialog's command as the same spec.
    void checkValues(ui::JobDialog& dialog, const QString& workspace)
    {
        const std::string kind = dialog.spec()->kind();
        QVERIFY2(cliSpec(dialog.cliCommand(), workspace) == *dialog.spec(), qPrintable(dialog.cliCommand()));
        int changed = 0;
        for (const ui::ParameterField& field : dialog.parameterFields()) {
            const jobs::Parameter& p = *field.parameter;
            if (!field.widget->isEnabled() || !nudge(p, field.widget)) {
                continue;
            }
            ++changed;
            const nlohmann::json shown = shownValue(p, field.widget);
            const nlohmann::json expected = shown.is_null() ? p.defaultValue : shown;
            QVERIFY2(dialog.spec()->value(p.name) == expected,
                (kind + ": " + p.name + " shows " + expected.dump() + ", the spec holds "
                    + dialog.spec()->value(p.name).dump())
                    .c_str());
            QVERIFY2(cliSpec(dialog.cliCommand(), workspace) == *dialog.spec(),
                qPrintable(QString::fromStdString(kind + ": " + p.name + ": ") + dialog.cliCommand()));
        }
        QVERIFY2(changed > 0, kind.c_str());
    }

    QTemporaryDir dir_;
    QString model_;
    QString probe_;
};

MISMATCH_TEST_MAIN(TestJobDialogs)
#include "test_job_dialogs.moc"

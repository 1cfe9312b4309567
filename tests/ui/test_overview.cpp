// The Overview tab, where the window opens: on an empty workspace it says where to start (its buttons run the demo
// or open the dialogs); on the fixture workspace it shows the student's budget per step with the protocol's flag,
// the best admitted candidates with their BF16 multiple, weight memory and KV capacity (from the recipe each was
// measured with, resolved for the student), the latest runs with their trend, and the next steps for what is
// missing. Screenshots of both under MISMATCH_TEST_OUTPUT. Imported runs without a full-vocabulary curve say which
// sampled-token estimators they logged instead.
#include "core/common/error.h"
#include "core/io/import_log.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/store/import_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/jobs/job_queue.h"
#include "ui/main_window.h"
#include "ui/views/overview_view.h"
#include "ui/views/run_table_model.h"
#include "ui/dialogs/training_dialog.h"

#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <map>

using namespace mismatch;

using fixture::saveScreenshot;

class TestOverview : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { fixture::initGuiTest(); }

    void emptyWorkspaceSaysWhereToStart()
    {
        QTemporaryDir dir;
        ui::MainWindow window(dir.path());
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::OverviewTab)); // where the window opens
        ui::OverviewView* overview = window.overview();
        QVERIFY(overview->students().isEmpty());
        QVERIFY2(overview->pageText().contains("Start here"), qPrintable(overview->pageText()));
        QVERIFY(overview->actionButton("Run the Demo"));
        QVERIFY(overview->actionButton("Add a Model Directory..."));
        saveScreenshot(window, "overview_empty.png");

        // "Start a Training Run..." opens the training form.
        QTest::mouseClick(overview->actionButton("Start a Training Run..."), Qt::LeftButton);
        auto* training = window.findChild<ui::TrainingDialog*>();
        QVERIFY(training);
        training->close();
        // "Run the Demo" queues the demo job (dropped again: this test is about the button).
        QSignalSpy started(window.jobQueue(), &ui::JobQueue::jobStarted);
        QTest::mouseClick(overview->actionButton("Run the Demo"), Qt::LeftButton);
        QCOMPARE(started.count(), 1);
        QCOMPARE(started.first().at(1).toString(), QStringLiteral("Demo"));
        QSignalSpy finished(window.jobQueue(), &ui::JobQueue::jobFinished);
        window.jobQueue()->cancel(window.jobQueue()->runningJob());
        QVERIFY(finished.wait(60000));
    }

    void fullWorkspaceShowsBudgetCandidatesAndRuns()
    {
        QTemporaryDir dir;
        {
            store::RunStore store = store::RunStore::open(store::databasePath(dir.path().toStdString()));
            ids_ = fixture::build(store);
        }
        ui::MainWindow window(dir.path());
        window.resize(1280, 980);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::OverviewTab));
        ui::OverviewView* overview = window.overview();
        const QString student = QStringLiteral(MISMATCH_SOURCE_DIR "/resources/models/arith-student");
        QCOMPARE(overview->students(), QStringList {QDir::cleanPath(student)});

        // The budget per step: the fixture's bracket at step 120 and its flag.
        QTableWidget* budget = overview->budgetTable(0);
        QVERIFY(budget);
        QCOMPARE(budget->rowCount(), 1);
        QCOMPARE(budget->item(0, 0)->text(), QStringLiteral("120"));
        QCOMPARE(budget->item(0, 1)->text(), QStringLiteral("0.06"));
        QCOMPARE(budget->item(0, 2)->text(), QStringLiteral("0.15"));
        QCOMPARE(budget->item(0, 3)->text(), QStringLiteral("0.06"));
        // 0.06 / 0.00021 = 285.7 units
        QCOMPARE(budget->item(0, 4)->text(), QStringLiteral("286x"));
        QVERIFY2(budget->item(0, 5)->text().contains("non-monotone at step 120")
                && budget->item(0, 5)->text().contains(fixture::kFixtureFlagReason),
            qPrintable(budget->item(0, 5)->text()));

        // Best admitted candidates: the two admitted at step-100, least weight memory first. Their memory and KV
        // capacity are the recipes' plans for the student's architecture; fp8-keep-edges names layer 3, which the
        // 2-layer student lacks, so its memory is "unknown" (the cell's tooltip says why) and it comes last.
        const model::ModelConfig config = model::loadConfig((student + "/config.json").toStdString());
        const quant::RecipePlan kv
            = quant::resolveRecipe(quant::loadRecipe(MISMATCH_SOURCE_DIR "/resources/recipes/fp8-kv.yaml"), config);
        QVERIFY_THROWS_EXCEPTION(InputError,
            quant::resolveRecipe(
                quant::loadRecipe(MISMATCH_SOURCE_DIR "/resources/recipes/fp8-keep-edges.yaml"), config));
        const auto best = overview->bestCandidates(0);
        QCOMPARE(best.size(), size_t {2});
        QCOMPARE(best[0].name, QStringLiteral("fp8-kv"));
        QCOMPARE(*best[0].weightBytes, kv.weightBytes);
        QCOMPARE(*best[0].bf16WeightBytes, kv.bf16WeightBytes);
        QCOMPARE(*best[0].kvCapacityRatio, kv.kvCapacityRatio());
        QCOMPARE(best[1].name, QStringLiteral("fp8-keep-edges"));
        QVERIFY(!best[1].weightBytes && !best[1].kvCapacityRatio);
        for (const auto& candidate : best) {
            QCOMPARE(*candidate.bf16Multiple, candidate.mismatch / fixture::kFixtureUnit);
        }
        QTableWidget* candidates = overview->candidateTable(0);
        QCOMPARE(candidates->rowCount(), 2);
        QVERIFY(candidates->item(0, 4)->text().contains("MiB"));
        QCOMPARE(candidates->item(0, 5)->text(), QStringLiteral("%1x BF16").arg(kv.kvCapacityRatio(), 0, 'f', 2));
        QCOMPARE(candidates->item(1, 4)->text(), QStringLiteral("unknown"));
        QCOMPARE(candidates->item(1, 5)->text(), QStringLiteral("unknown"));
        QVERIFY2(candidates->item(1, 4)->toolTip().contains("does not resolve for this student"),
            qPrintable(candidates->item(1, 4)->toolTip()));
        QVERIFY(candidates->item(0, 4)->toolTip().isEmpty());

        // Latest runs, newest first, with their trend (the fixture's mismatch rises by 0.4% a step).
        QTableWidget* runs = overview->latestRuns();
        QVERIFY(runs);
        QCOMPARE(runs->rowCount(), 5);
        QCOMPARE(runs->item(0, 1)->text(), QStringLiteral("opd-noise-0.08"));
        QCOMPARE(runs->item(0, 7)->text(), QStringLiteral("rising"));
        for (int row = 0; row < runs->rowCount(); ++row) { // every fixture run has a curve: a drawn sparkline
            const auto* spark = qobject_cast<QLabel*>(runs->cellWidget(row, 6));
            QVERIFY(spark && !spark->pixmap().isNull() && spark->text().isEmpty());
        }
        // Double-clicking a run shows it in the Runs tab.
        emit runs->cellDoubleClicked(1, 1);
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::RunsTab));
        QCOMPARE(QString::fromStdString(window.runModel()->runAt(window.runTable()->currentIndex().row())->name),
            runs->item(1, 1)->text());
        window.tabs()->setCurrentIndex(ui::MainWindow::OverviewTab);

        // Next steps: no model is registered here, and the budget is flagged.
        QVERIFY(overview->actionButton("Add a Model Directory..."));
        QVERIFY(overview->actionButton("Start a New Calibration..."));
        QVERIFY(!overview->actionButton("Run the Demo")); // not an empty workspace
        saveScreenshot(window, "overview_full.png");

        // "Show in the Budget Tab" selects the calibration there.
        QTest::mouseClick(overview->actionButton("Show in the Budget Tab"), Qt::LeftButton);
        QCOMPARE(window.tabs()->currentIndex(), int(ui::MainWindow::BudgetTab));
    }

    // Runs imported from verl and Tinker logs (through io::importLog and store::storeExternalRun, as `mismatch
    // import` does) logged sampled-token estimators, not the full-vocabulary KL: the sparkline's place says what
    // they have and on how many steps, not "no per-step mismatch". A log with no estimator at all still says that.
    void importedRunsNameTheirSampledEstimators()
    {
        QTemporaryDir dir;
        const std::string root = dir.path().toStdString();
        {
            std::ofstream verl(root + "/verl.jsonl");
            for (int step = 1; step <= 40; ++step) { // verl's file logger lines: rollout_corr/kl -> k1, k3_kl -> k3
                verl << "{\"step\": " << step << ", \"data\": {\"rollout_corr/kl\": " << 0.001 * step
                     << ", \"rollout_corr/k3_kl\": " << 0.0005 * step << ", \"actor/entropy\": 0.8}}\n";
            }
        }
        // Tinker's metrics.jsonl: kl_sample_train_v1 -> k1 on steps 0-2, kl_sample_train_v2 -> k2 (extras) on 0-1.
        std::ofstream(root + "/metrics.jsonl")
            << "{\"step\": 0, \"optim/kl_sample_train_v1\": 0.01, \"optim/kl_sample_train_v2\": 0.002}\n"
            << "{\"step\": 1, \"optim/kl_sample_train_v1\": 0.02, \"optim/kl_sample_train_v2\": 0.003}\n"
            << "{\"step\": 2, \"optim/kl_sample_train_v1\": 0.03}\n";
        std::ofstream(root + "/entropy.jsonl") << "{\"step\": 1, \"data\": {\"actor/entropy\": 0.8}}\n";
        store::RunStore store = store::RunStore::open(store::databasePath(root));
        const auto add = [&](io::LogSource source, const std::string& file, const std::string& name) {
            const io::ImportedLog log = io::importLog(source, root + "/" + file);
            store::ExternalRunSpec spec {name, io::toString(source), file, "{}", log.estimatorJson()};
            store::storeExternalRun(store, spec, log.steps);
        };
        add(io::LogSource::Verl, "verl.jsonl", "verl k1 k3");
        add(io::LogSource::Tinker, "metrics.jsonl", "tinker k1 k2");
        add(io::LogSource::Verl, "entropy.jsonl", "entropy only");

        ui::OverviewView overview;
        overview.setStore(&store);
        overview.resize(1280, 820);
        overview.show();
        QVERIFY(QTest::qWaitForWindowExposed(&overview));
        QTableWidget* runs = overview.latestRuns();
        QCOMPARE(runs->rowCount(), 3);
        std::map<QString, const QLabel*> sparkOf;
        for (int row = 0; row < runs->rowCount(); ++row) {
            sparkOf[runs->item(row, 1)->text()] = qobject_cast<QLabel*>(runs->cellWidget(row, 6));
        }
        QVERIFY(sparkOf["verl k1 k3"] && sparkOf["tinker k1 k2"] && sparkOf["entropy only"]);
        QCOMPARE(sparkOf["verl k1 k3"]->text(),
            QStringLiteral("no full-vocabulary mismatch; 40 steps of k1 and k3 (sampled-token estimates)"));
        QCOMPARE(sparkOf["tinker k1 k2"]->text(),
            QStringLiteral("no full-vocabulary mismatch; 3 steps of k1 and 2 of k2 (sampled-token estimates)"));
        QCOMPARE(sparkOf["entropy only"]->text(), QStringLiteral("no per-step mismatch"));
        // The column is wide enough to show the whole text.
        QVERIFY(runs->columnWidth(6) >= sparkOf["verl k1 k3"]->sizeHint().width());
        saveScreenshot(overview, "overview_imported.png");
    }

    void trendWords()
    {
        QCOMPARE(ui::trendOf({1.0, 1.0, 1.0}), QString());
        QCOMPARE(ui::trendOf({1.0, 1.0, 1.0, 1.0}), QStringLiteral("flat"));
        QCOMPARE(ui::trendOf({1.0, 1.05, 1.1, 1.2}), QStringLiteral("rising"));
        QCOMPARE(ui::trendOf({1.0, 0.9, 0.9, 0.8}), QStringLiteral("falling"));
        QCOMPARE(ui::trendOf({1.0, 2.0, 0.5, 1.05}), QStringLiteral("flat")); // first and last quarter differ 5%
    }

private:
    fixture::Ids ids_;
};

MISMATCH_TEST_MAIN(TestOverview)
#include "test_overview.moc"

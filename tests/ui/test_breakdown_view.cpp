// The Breakdown tab (ui/views/breakdown_view.h) on hand-made breakdowns: the stacked segments are the stored parts (per
// method and unit; a candidate without Shapley parts falls back to add-one-in), a negative interaction is drawn
// below zero, the bars read back through the value axis, hovering reads a candidate's parts, the estimator table
// has a row per whole configuration, the view opens in a unit where every bar is drawn (one candidate 100 times the
// others), and the dialog's command names the job. Screenshots at 1x, and at 2x when run with QT_SCALE_FACTOR=2
// (test_breakdown_view_2x).
#include "core/metrics/estimators.h"
#include "core/store/breakdown_store.h"
#include "core/store/import_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/dialogs/breakdown_dialog.h"
#include "ui/views/breakdown_view.h"

#include <qcustomplot.h>

#include <nlohmann/json.hpp>

#include <QAbstractItemModel>
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

using namespace mismatch;

namespace {

store::BreakdownPart part(const std::string& method, const std::string& source, double value)
{
    return {method, source, value, value - 0.1 * std::abs(value) - 1e-6, value + 0.1 * std::abs(value) + 1e-6};
}

std::string estimators(double kl)
{
    metrics::EstimatorComparison comparison;
    comparison.kl = kl;
    comparison.tokens = 4096;
    comparison.estimators = {{"k1", kl * 0.9, 0.41, 0.38}, {"k3", kl * 1.1, 0.62, 0.55},
        {"mult_prob_error", 1.0 + 2.0 * kl, 0.58, 0.49}, {"prob_diff", kl * 0.3, 0.33, 0.29}};
    return metrics::toJson(comparison).dump();
}

// Three candidates with known parts: W8A8 + FP8 KV (Shapley; its add-one-in interaction is negative), FP8 KV alone,
// and the BF16 engine (nothing to split); a five-source candidate without Shapley parts.
std::vector<store::BreakdownRecord> records(std::int64_t runId)
{
    const double unit = 6e-5;
    store::BreakdownRecord w8a8;
    w8a8.runId = runId;
    w8a8.candidate = "fp8-per-tensor";
    w8a8.model = "student";
    w8a8.sources = {"weights", "activations", "kv_cache"};
    w8a8.total = 0.0045;
    w8a8.totalCiLow = 0.0039;
    w8a8.totalCiHigh = 0.0052;
    w8a8.bf16Unit = unit;
    w8a8.unitCiLow = 5e-5;
    w8a8.unitCiHigh = 7e-5;
    w8a8.tokens = 8000;
    w8a8.shapley = true;
    const double excess = w8a8.total - unit;
    w8a8.parts = {part("add_one_in", "weights", 0.0012), part("add_one_in", "activations", 0.0009),
        part("add_one_in", "kv_cache", 0.0030), part("add_one_in", "interaction", excess - 0.0051),
        part("leave_one_out", "weights", 0.0010), part("leave_one_out", "activations", 0.0006),
        part("leave_one_out", "kv_cache", 0.0027), part("leave_one_out", "interaction", excess - 0.0043),
        part("shapley", "weights", 0.0011), part("shapley", "activations", 0.00075),
        part("shapley", "kv_cache", excess - 0.00185)};
    w8a8.subsets = {{"", unit, 5e-5, 7e-5, 1e-5, 6e-5, 8000, estimators(unit)},
        {"weights+activations+kv_cache", w8a8.total, 0.0039, 0.0052, 0.0041, 0.0047, 8000, estimators(w8a8.total)}};
    store::BreakdownRecord kv;
    kv.runId = runId;
    kv.candidate = "fp8-kv";
    kv.model = "student";
    kv.sources = {"kv_cache"};
    kv.total = 0.0031;
    kv.totalCiLow = 0.0027;
    kv.totalCiHigh = 0.0035;
    kv.bf16Unit = unit;
    kv.tokens = 8000;
    kv.shapley = true;
    kv.parts = {part("add_one_in", "kv_cache", kv.total - unit), part("add_one_in", "interaction", 0.0),
        part("leave_one_out", "kv_cache", kv.total - unit), part("leave_one_out", "interaction", 0.0),
        part("shapley", "kv_cache", kv.total - unit)};
    kv.subsets = {{"kv_cache", kv.total, 0.0027, 0.0035, 0.003, 0.0032, 8000, estimators(kv.total)}};
    store::BreakdownRecord bf16;
    bf16.runId = runId;
    bf16.candidate = "bf16";
    bf16.model = "student";
    bf16.total = unit;
    bf16.bf16Unit = unit;
    bf16.tokens = 8000;
    bf16.shapley = true;
    bf16.subsets = {{"", unit, 5e-5, 7e-5, 1e-5, 6e-5, 8000, estimators(unit)}};
    store::BreakdownRecord five;
    five.runId = runId;
    five.candidate = "everything";
    five.model = "student";
    five.sources = {"weights", "activations", "kv_cache", "embedding_lm_head", "noise"};
    five.total = 0.012;
    five.totalCiLow = 0.010;
    five.totalCiHigh = 0.014;
    five.bf16Unit = unit;
    five.tokens = 8000;
    five.shapley = false;
    five.parts = {part("add_one_in", "weights", 0.002), part("add_one_in", "activations", 0.001),
        part("add_one_in", "kv_cache", 0.003), part("add_one_in", "embedding_lm_head", 0.0015),
        part("add_one_in", "noise", 0.004), part("add_one_in", "interaction", 0.012 - unit - 0.0115),
        part("leave_one_out", "weights", 0.0022), part("leave_one_out", "activations", 0.0008),
        part("leave_one_out", "kv_cache", 0.0031), part("leave_one_out", "embedding_lm_head", 0.0012),
        part("leave_one_out", "noise", 0.0041), part("leave_one_out", "interaction", 0.012 - unit - 0.0114)};
    return {w8a8, kv, bf16, five};
}

// Seven candidates of one run as the issue saw them: one at 1.2 nats/token, six about 100 times smaller (0.008 to
// 0.015), all on the same BF16 unit, so that BF16 multiples are as lopsided as nats.
std::vector<store::BreakdownRecord> lopsided(std::int64_t runId)
{
    const double unit = 6e-5;
    const std::pair<const char*, double> totals[]
        = {{"int4-everything", 1.2}, {"fp8-kv", 0.012}, {"fp8-per-tensor", 0.009}, {"fp8-w8a8-block", 0.015},
            {"fp8-keep-edges", 0.011}, {"fp8-block128", 0.008}, {"fp8-attention", 0.013}};
    std::vector<store::BreakdownRecord> result;
    for (const auto& [name, total] : totals) {
        store::BreakdownRecord r;
        r.runId = runId;
        r.candidate = name;
        r.model = "student";
        r.sources = {"weights"};
        r.total = total;
        r.totalCiLow = 0.9 * total;
        r.totalCiHigh = 1.1 * total;
        r.bf16Unit = unit;
        r.tokens = 8000;
        r.shapley = true;
        r.parts = {part("add_one_in", "weights", total - unit), part("add_one_in", "interaction", 0.0),
            part("leave_one_out", "weights", total - unit), part("leave_one_out", "interaction", 0.0),
            part("shapley", "weights", total - unit)};
        r.subsets = {{"weights", total, 0.9 * total, 1.1 * total, 0.9 * total, 1.1 * total, 8000, estimators(total)}};
        result.push_back(r);
    }
    return result;
}

// The drawn height, in pixels, of candidate `index`'s bar: from zero to the top of its parts above zero (QCustomPlot
// stacks each sign on its own side of zero), read back from the plottables through the value axis. -1 when the top
// lies outside the value axis's range (the bar would be cut).
double barPixels(QCustomPlot* plot, int index)
{
    double top = 0.0;
    for (int i = 0; i < plot->plottableCount(); ++i) {
        auto* bars = qobject_cast<QCPBars*>(plot->plottable(i));
        if (!bars) {
            continue;
        }
        for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) {
            if (it->key == static_cast<double>(index) && it->value > 0.0) {
                top += it->value;
            }
        }
    }
    if (!plot->yAxis->range().contains(top)) {
        return -1.0;
    }
    return std::abs(plot->yAxis->coordToPixel(0.0) - plot->yAxis->coordToPixel(top));
}

} // namespace

class TestBreakdownView : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        fixture::initGuiTest();
        QVERIFY(directory_.isValid());
        scale_ = qEnvironmentVariable("QT_SCALE_FACTOR", QStringLiteral("1")).toDouble();
        QCOMPARE(qApp->devicePixelRatio(), scale_);
        store_.emplace(store::RunStore::open(directory_.filePath("workspace.db").toStdString()));
        runId_ = store_->beginRun({"breakdown", "breakdown", "{}", std::nullopt});
        store::addBreakdowns(*store_, records(runId_));
        store_->finishRun(runId_, store::RunStatus::Finished);
        // An imported verl run that logged k1 on two steps (0.01, 0.03: mean 0.02) and k3 on one (0.004).
        store::ExternalRunSpec imported;
        imported.name = "verl fp8 run";
        imported.source = "verl";
        imported.file = "metrics.jsonl";
        imported.estimatorJson = R"({"k1": {"key": "rollout_corr/kl"}, "k3": {"key": "rollout_corr/k3_kl"}})";
        store::StepMetrics first;
        first.step = 1;
        first.k1 = 0.01;
        first.k3 = 0.004;
        store::StepMetrics second;
        second.step = 2;
        second.k1 = 0.03;
        store::storeExternalRun(*store_, imported, {first, second});
    }

    void segmentsAreTheStoredParts()
    {
        ui::BreakdownView view;
        view.resize(1000, 720);
        view.setStore(&*store_);
        QVERIFY(view.selectRun(runId_));
        QCOMPARE(view.records().size(), std::size_t(4));
        const std::vector<store::BreakdownRecord> stored = store::breakdowns(*store_, runId_);
        for (int method = 0; method < 3; ++method) {
            view.setMethod(static_cast<ui::BreakdownView::Method>(method));
            for (int unit = 0; unit < 3; ++unit) {
                view.setUnit(static_cast<ui::BreakdownView::Unit>(unit));
                for (std::size_t i = 0; i < stored.size(); ++i) {
                    const store::BreakdownRecord& r = stored[i];
                    const double scale = unit == ui::BreakdownView::Bf16Multiples ? 1.0 / r.bf16Unit
                        : unit == ui::BreakdownView::ShareOfTotal                ? 100.0 / r.total
                                                                                 : 1.0;
                    const auto segments = view.segments(static_cast<int>(i));
                    const auto shown = ui::BreakdownView::shownParts(r, static_cast<ui::BreakdownView::Method>(method));
                    QCOMPARE(segments.size(), shown.size() + 1); // the BF16 unit below the parts
                    QCOMPARE(segments.front().first, QStringLiteral("BF16 unit"));
                    QVERIFY(std::abs(segments.front().second - r.bf16Unit * scale) <= 1e-12 * std::max(1.0, scale));
                    double sum = 0.0;
                    for (const auto& [name, value] : segments) {
                        sum += value;
                        bool found = name == QLatin1String("BF16 unit");
                        for (const auto& p : shown) {
                            if (QString::fromStdString(p.source) == name) {
                                QVERIFY(std::abs(value - p.value * scale) <= 1e-12 * std::max(1.0, scale));
                                found = true;
                            }
                        }
                        QVERIFY2(found, qPrintable(name));
                    }
                    // Every method's segments add up to the total (unit + parts + interaction).
                    QVERIFY2(std::abs(sum - r.total * scale) <= 1e-9 * std::max(1.0, scale),
                        qPrintable(QString("%1 method %2: %3 vs %4").arg(QString::fromStdString(r.candidate))
                                       .arg(method).arg(sum).arg(r.total * scale)));
                }
            }
        }
        // The add-one-in interaction of the first candidate is negative: drawn below zero, read back through the
        // value axis from its bar.
        view.setMethod(ui::BreakdownView::AddOneIn);
        view.setBf16Units(false);
        QCPBars* interaction = nullptr;
        for (int i = 0; i < view.plot()->plottableCount(); ++i) {
            if (auto* bars = qobject_cast<QCPBars*>(view.plot()->plottable(i));
                bars && bars->name().startsWith(QLatin1String("interaction"))) {
                interaction = bars;
            }
        }
        QVERIFY(interaction);
        const double negative = stored[0].partsOf("add_one_in").back().value;
        QVERIFY(negative < 0.0);
        QCOMPARE(interaction->data()->at(0)->value, negative);
        // Every bar below it in the stack is positive at this candidate, so (QCustomPlot stacks each sign on its own
        // side of zero) the negative remainder is drawn from zero downwards.
        int below = 0;
        for (QCPBars* bars = interaction->barBelow(); bars; bars = bars->barBelow()) {
            QVERIFY(bars->data()->at(0)->value >= 0.0);
            ++below;
        }
        QCOMPARE(below, 6); // the BF16 unit, weights, activations, kv_cache, embedding_lm_head, noise (0 here)
        QVERIFY(view.plot()->yAxis->range().lower < negative);
        // Shapley on the five-source candidate falls back to add-one-in, marked in its tick label.
        view.setMethod(ui::BreakdownView::Shapley);
        const auto ticker = view.plot()->xAxis->ticker().dynamicCast<QCPAxisTickerText>();
        QVERIFY(ticker);
        QCOMPARE(ticker->ticks().value(3.0), QStringLiteral("everything *"));
        QCOMPARE(ticker->ticks().value(0.0), QStringLiteral("fp8-per-tensor"));
    }

    void hoverAndTablesAndScreenshots()
    {
        ui::BreakdownView view;
        view.resize(1100, 760);
        view.setStore(&*store_);
        view.setMethod(ui::BreakdownView::Shapley);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QTest::qWait(100);
        QCustomPlot* plot = view.plot();
        // Over the first candidate's bar, half-way up the value axis (whichever unit the view opened in).
        const QPoint over(static_cast<int>(plot->xAxis->coordToPixel(0.0)),
            static_cast<int>(plot->yAxis->coordToPixel(plot->yAxis->range().center())));
        view.hoverAt(over);
        QVERIFY2(view.readoutText().contains(QLatin1String("fp8-per-tensor")), qPrintable(view.readoutText()));
        QVERIFY2(view.readoutText().contains(QLatin1String("kv_cache")), qPrintable(view.readoutText()));
        QVERIFY2(view.readoutText().contains(QLatin1String("0.0045")), qPrintable(view.readoutText()));
        // Rows: per candidate the total, the unit, and each source plus the interaction.
        QCOMPARE(view.table()->model()->rowCount(), (2 + 4) + (2 + 2) + 2 + (2 + 6));
        // Estimators: one row per candidate whose whole configuration was stored with them (not "everything").
        // and the imported run below them, on the estimators it logged (no full KL, no correlation).
        const QAbstractItemModel* estimators = view.estimatorTable()->model();
        QCOMPARE(estimators->rowCount(), 4);
        QVERIFY(estimators->index(0, 2).data().toString().contains(QLatin1String("0.41")));
        QCOMPARE(estimators->index(3, 0).data().toString(), QStringLiteral("imported: verl fp8 run (verl)"));
        QCOMPARE(estimators->index(3, 1).data().toString(), QStringLiteral("not measured"));
        QCOMPARE(estimators->index(3, 2).data().toString(), QStringLiteral("0.02 (logged, 2 steps)"));
        QCOMPARE(estimators->index(3, 3).data().toString(), QStringLiteral("0.004 (logged, 1 step)"));
        QCOMPARE(estimators->index(3, 4).data().toString(), QStringLiteral("-"));
        QVERIFY(estimators->index(3, 0).data(Qt::ToolTipRole).toString().contains(QLatin1String("rollout_corr/kl")));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_breakdown") : QStringLiteral("breakdown");
        fixture::saveScreenshot(view, prefix + QStringLiteral("_view.png"));
        view.estimatorTable()->scrollToBottom(); // the imported run's row
        fixture::saveScreenshot(view, prefix + QStringLiteral("_view_imported_estimators.png"));
        view.setMethod(ui::BreakdownView::AddOneIn);
        view.setBf16Units(true);
        fixture::saveScreenshot(view, prefix + QStringLiteral("_view_add_one_in_bf16.png"));
        QCOMPARE(view.grab().devicePixelRatio(), scale_);
    }

    // Issue 42 item 8: beside one candidate 100 times larger than the rest, every bar is drawn at least a few pixels
    // tall in the unit the view opens in (nats/token would flatten the six small ones); a unit the user chooses is
    // kept when the store changes.
    void defaultUnitShowsEveryBar()
    {
        store::RunStore store = store::RunStore::open(directory_.filePath("lopsided.db").toStdString());
        const std::int64_t run = store.beginRun({"breakdown", "breakdown", "{}", std::nullopt});
        const std::vector<store::BreakdownRecord> stored = lopsided(run);
        store::addBreakdowns(store, stored);
        store.finishRun(run, store::RunStatus::Finished);
        ui::BreakdownView view;
        view.resize(1100, 760);
        view.setStore(&store);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QTest::qWait(100);
        view.plot()->replot();
        QCOMPARE(view.records().size(), stored.size());
        // At least 6 pixels a bar (logical pixels, at any scale), where nats/token leaves the smallest under 4.
        const double minimum = 6.0;
        for (int i = 0; i < static_cast<int>(stored.size()); ++i) {
            const double pixels = barPixels(view.plot(), i);
            QVERIFY2(pixels >= minimum,
                qPrintable(QStringLiteral("%1: %2 px in %3")
                               .arg(QString::fromStdString(stored[i].candidate))
                               .arg(pixels)
                               .arg(view.plot()->yAxis->label())));
        }
        // The summary says why the view did not open in nats/token.
        QVERIFY(view.currentUnit() != ui::BreakdownView::Nats);
        const QString summary = view.findChild<QLabel*>("breakdownSummary")->text();
        QVERIFY2(summary.contains(QLatin1String("in nats/token the smallest total is under 5% of the largest")),
            qPrintable(summary));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_breakdown") : QStringLiteral("breakdown");
        fixture::saveScreenshot(view, prefix + QStringLiteral("_view_lopsided_totals.png"));

        // In nats/token the same plot flattens the small candidates: the rule above is what keeps them readable.
        view.setUnit(ui::BreakdownView::Nats);
        view.plot()->replot();
        QVERIFY(view.plot()->yAxis->label().contains(QLatin1String("nats/token")));
        double smallest = 1e9;
        for (int i = 1; i < static_cast<int>(stored.size()); ++i) {
            smallest = std::min(smallest, barPixels(view.plot(), i));
        }
        QVERIFY2(smallest >= 0.0 && smallest < 4.0, qPrintable(QString::number(smallest)));
        // The user's choice survives a refresh (the store's change counter moving), here and from the list.
        view.refresh();
        QCOMPARE(view.currentUnit(), ui::BreakdownView::Nats);
        auto* unitBox = view.findChild<QComboBox*>("breakdownUnit");
        QVERIFY(unitBox);
        unitBox->setCurrentIndex(ui::BreakdownView::Bf16Multiples);
        view.refresh();
        QCOMPARE(view.currentUnit(), ui::BreakdownView::Bf16Multiples);
        QVERIFY(view.plot()->yAxis->label().contains(QLatin1String("BF16")));
    }

    void dialogChecksAndNamesTheCommand()
    {
        const QString resources = QStringLiteral(MISMATCH_SOURCE_DIR "/resources");
        ui::BreakdownDialog dialog(directory_.path(), &*store_);
        dialog.setModelDirectory(resources + "/models/arith-student-step100");
        dialog.setCandidates(resources + "/candidates/demo.yaml");
        dialog.setPromptSet(resources + "/prompts/arith-probe.jsonl");
        dialog.setCount(32);
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        QVERIFY(dialog.startButton()->isEnabled());
        QVERIFY(dialog.cliCommand().contains(QLatin1String(" breakdown ")));
        QVERIFY(dialog.cliCommand().contains(QLatin1String("--candidates ")));
        QVERIFY(dialog.cliCommand().contains(QLatin1String("--count 32")));
        // A candidates file and a one-configuration field together are refused, naming the fields.
        dialog.setNoise(0.05);
        QVERIFY(!dialog.valid());
        QVERIFY2(dialog.errorText().startsWith(QLatin1String(
                     "Weight noise sigma (relative to RMS): cannot be given together with 'Candidates file'")),
            qPrintable(dialog.errorText()));
        dialog.setNoise(0.0);
        dialog.setCandidates({});
        dialog.setStaleness(2);
        QVERIFY(!dialog.valid());
        QVERIFY2(dialog.errorText().startsWith(QLatin1String("Older checkpoints")), qPrintable(dialog.errorText()));
        dialog.setStaleness(0);
        dialog.setRecipe(resources + "/recipes/fp8-kv.yaml");
        QVERIFY2(dialog.valid(), qPrintable(dialog.errorText()));
        QVERIFY(dialog.cliCommand().contains(QLatin1String("--recipe ")));
        QVERIFY(dialog.jobName().contains(QLatin1String("fp8-kv")));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_breakdown") : QStringLiteral("breakdown");
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        fixture::saveScreenshot(dialog, prefix + QStringLiteral("_dialog.png"));
    }

private:
    QTemporaryDir directory_;
    std::optional<store::RunStore> store_;
    std::int64_t runId_ = 0;
    double scale_ = 1.0;
};

MISMATCH_TEST_MAIN(TestBreakdownView)
#include "test_breakdown_view.moc"

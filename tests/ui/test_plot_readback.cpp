// Every plot shows the stored numbers where its axes say they are. For each view (run plot, overlay, budget,
// admission, heatmap, prefix shift) filled from the fixture workspace, each plotted point is converted to a pixel
// through the axis its series is bound to and read back through the visible axis whose label names the measure,
// as a person reads the plot; the value read must be the stored one (up to the round trip's floating-point error),
// and it must lie inside the range shown. A series must be bound to the visible axis that carries its label: one
// bound to another axis (the accuracy drawn on the hidden default right axis, 0-5, beside the labelled 0-100% one)
// fails here, and reads back wrong wherever the two axes' ranges differ.
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/views/admission_view.h"
#include "ui/views/budget_view.h"
#include "ui/plots/compare_plot.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/plots/run_plot.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

using namespace mismatch;

namespace {

// A value read back through a pixel agrees with the stored one to a few ulps of the pixel round trip: the
// coordinate-to-pixel and pixel-to-coordinate maps are the same affine (or log-affine) map and its inverse in
// double precision, so 1e-9 relative covers them with a wide margin, and an axis mix-up (a factor of 20 for the
// accuracy) is many orders above it.
constexpr double kRoundTrip = 1e-9;

// The one visible axis of `rect` whose label contains `text`.
QCPAxis* labelledAxis(QCPAxisRect* rect, const QString& text)
{
    QCPAxis* found = nullptr;
    for (QCPAxis* axis : rect->axes()) {
        if (axis->visible() && axis->label().contains(text)) {
            if (found) {
                qWarning("two visible axes labelled '%s'", qPrintable(text));
                return nullptr;
            }
            found = axis;
        }
    }
    return found;
}

// Reads `value` of a point back as a person would: through the pixel the series draws it at, on the axis labelled
// with its measure.
double readBack(QCPAxis* boundTo, QCPAxis* labelled, double value)
{
    return labelled->pixelToCoord(boundTo->coordToPixel(value));
}

bool close(double read, double stored)
{
    return std::abs(read - stored) <= kRoundTrip * std::max(std::abs(stored), 1e-12);
}

// Checks every point of `graph` against `stored` (by key), read back on the axis of `rect` labelled `label`; visible
// points must also lie inside that axis' range.
void checkGraph(QCPGraph* graph, QCPAxisRect* rect, const QString& label, const std::map<double, double>& stored)
{
    QCPAxis* axis = labelledAxis(rect, label);
    QVERIFY2(axis, qPrintable("no visible axis labelled " + label));
    QVERIFY2(graph->valueAxis() == axis,
        qPrintable(QStringLiteral("%1 is drawn on the axis '%2' (%3), not on the one labelled '%4'")
                       .arg(graph->name(), graph->valueAxis()->label(),
                           graph->valueAxis()->visible() ? QStringLiteral("visible") : QStringLiteral("hidden"),
                           axis->label())));
    QCOMPARE(graph->dataCount(), static_cast<int>(stored.size()));
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
        const auto expected = stored.find(it->key);
        QVERIFY2(expected != stored.end(), qPrintable(graph->name() + ": unexpected key " + QString::number(it->key)));
        const double read = readBack(graph->valueAxis(), axis, it->value);
        QVERIFY2(close(read, expected->second),
            qPrintable(QStringLiteral("%1 at %2: reads %3 on the axis '%4', stored %5")
                           .arg(graph->name())
                           .arg(it->key)
                           .arg(read)
                           .arg(axis->label())
                           .arg(expected->second)));
        if (graph->visible()) {
            QVERIFY2(axis->range().contains(read),
                qPrintable(QStringLiteral("%1 at %2: %3 lies outside the axis range [%4, %5]")
                               .arg(graph->name())
                               .arg(it->key)
                               .arg(read)
                               .arg(axis->range().lower)
                               .arg(axis->range().upper)));
        }
    }
}

} // namespace

class TestPlotReadback : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        Q_INIT_RESOURCE(resources);
        QVERIFY(directory_.isValid());
        store_ = std::make_unique<store::RunStore>(
            store::RunStore::open(directory_.filePath("workspace.db").toStdString()));
        ids_ = fixture::build(*store_);
    }

    void runPlot()
    {
        ui::RunPlot view;
        view.resize(900, 600);
        view.setStore(store_.get());
        view.showRun(ids_.fp8Run, "opd-fp8-kv");
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.replot();
        view.plot()->replot();
        std::map<double, double> kl, k1, k3, multiple, quality, accuracy;
        for (const store::StepMetrics& s : store_->stepsAfter(ids_.fp8Run)) {
            kl[static_cast<double>(s.step)] = *s.mismatchKl;
            k1[static_cast<double>(s.step)] = *s.k1;
            k3[static_cast<double>(s.step)] = *s.k3;
            multiple[static_cast<double>(s.step)] = *s.bf16Multiple;
        }
        for (const store::EvaluationSummary& e : store::evaluations(*store_, ids_.fp8Run)) {
            quality[static_cast<double>(e.step)] = e.quality;
            accuracy[static_cast<double>(e.step)] = 100.0 * e.accuracy; // the axis is in percent
        }
        QCustomPlot* plot = view.plot();
        QCPAxisRect* top = plot->axisRect(0);
        QCPAxisRect* bottom = plot->axisRect(1);
        checkGraph(plot->graph(ui::RunPlot::FullKl), top, "mismatch (nats/token)", kl);
        checkGraph(plot->graph(ui::RunPlot::K1), top, "mismatch (nats/token)", k1);
        checkGraph(plot->graph(ui::RunPlot::K3), top, "mismatch (nats/token)", k3);
        checkGraph(plot->graph(ui::RunPlot::Bf16Multiple), top, "x BF16 unit", multiple);
        checkGraph(plot->graph(ui::RunPlot::Quality), bottom, "quality Q", quality);
        checkGraph(plot->graph(ui::RunPlot::Accuracy), bottom, "accuracy (%)", accuracy);
        // The same with k1 and k3 shown (they then count for the range) and with smoothing on: the stored series
        // stay as stored.
        view.k1Box()->setChecked(true);
        view.k3Box()->setChecked(true);
        view.smoothingBox()->setCurrentIndex(2);
        view.replot();
        plot->replot();
        checkGraph(plot->graph(ui::RunPlot::K1), top, "mismatch (nats/token)", k1);
        checkGraph(plot->graph(ui::RunPlot::FullKl), top, "mismatch (nats/token)", kl);
        // Zeros at one height on both value axes of each panel.
        QCOMPARE(plot->yAxis->coordToPixel(0.0), plot->yAxis2->coordToPixel(0.0));
        QCOMPARE(view.qualityAxis()->coordToPixel(0.0), view.accuracyAxis()->coordToPixel(0.0));
    }

    // A resumed training run records again the steps after its newest checkpoint (the store deletes them first):
    // the live plot shows the new values, not the pre-cancel ones beside them (issue 42: step 35 read 0.008291
    // while the store held 0.005946, until another run was selected).
    void runPlotShowsTheStepsAResumeRecordsAgain()
    {
        const std::int64_t run = store_->beginRun({"resumed", "train", "{}", std::nullopt});
        const auto steps = [](int from, int to, double scale) {
            std::vector<store::StepMetrics> list;
            for (int step = from; step <= to; ++step) {
                store::StepMetrics m;
                m.step = step;
                m.mismatchKl = scale * step;
                m.extrasJson = "{}";
                list.push_back(m);
            }
            return list;
        };
        store_->appendSteps(run, steps(1, 6, 0.1));
        store_->finishRun(run, store::RunStatus::Cancelled);
        ui::RunPlot view;
        view.setStore(store_.get());
        view.showRun(run, "resumed");
        QCOMPARE(view.pointCount(), 6);
        store_->reopenRun(run, 3); // resumed from its checkpoint at step 3: steps 4-6 go
        store_->appendSteps(run, steps(4, 6, 0.5));
        view.tail();
        QCustomPlot* plot = view.plot();
        auto data = plot->graph(ui::RunPlot::FullKl)->data();
        QCOMPARE(data->size(), 6);
        for (auto point = data->constBegin(); point != data->constEnd(); ++point) {
            QCOMPARE(point->value, (point->key <= 3 ? 0.1 : 0.5) * point->key);
        }
        store_->finishRun(run, store::RunStatus::Finished);
    }

    void overlay()
    {
        ui::ComparePlot view;
        view.resize(900, 500);
        view.setStore(store_.get());
        view.setRuns({{ids_.baselineRun, "opd-bf16-baseline"}, {ids_.noisyRun, "opd-noise-0.02"}});
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        for (const bool logarithmic : {false, true}) {
            view.logScaleBox()->setChecked(logarithmic);
            view.replot();
            view.plot()->replot();
            for (int i = 0; i < 2; ++i) {
                const std::int64_t run = i == 0 ? ids_.baselineRun : ids_.noisyRun;
                std::map<double, double> kl;
                for (const store::StepMetrics& s : store_->stepsAfter(run)) {
                    kl[static_cast<double>(s.step)] = *s.mismatchKl;
                }
                checkGraph(view.plot()->graph(i), view.plot()->axisRect(), "mismatch KL", kl);
            }
        }
        view.setMeasure(ui::ComparePlot::Quality);
        view.replot();
        view.plot()->replot();
        std::map<double, double> quality;
        for (const store::EvaluationSummary& e : store::evaluations(*store_, ids_.noisyRun)) {
            quality[static_cast<double>(e.step)] = e.quality;
        }
        checkGraph(view.plot()->graph(1), view.plot()->axisRect(), "quality Q", quality);
    }

    void budget()
    {
        ui::BudgetView view;
        view.resize(900, 600);
        view.setStore(store_.get());
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(view.selectCalibration(ids_.calibration, 120));
        view.plot()->replot();
        const auto calibration = store::calibration(*store_, ids_.calibration);
        QCPAxis* x = labelledAxis(view.plot()->axisRect(), "mismatch");
        QCPAxis* y = labelledAxis(view.plot()->axisRect(), "quality change");
        QVERIFY(x && y);
        int checked = 0;
        for (int g = 0; g < 2; ++g) {
            QCPGraph* graph = view.plot()->graph(g);
            QVERIFY(graph->keyAxis() == x && graph->valueAxis() == y);
            for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
                const double mismatch = readBack(graph->keyAxis(), x, it->key);
                const double change = readBack(graph->valueAxis(), y, it->value);
                bool matched = false;
                for (const store::CalibrationPoint& p : calibration->points) {
                    matched = matched
                        || (p.step == 120 && p.failed() == (g == 1) && close(mismatch, p.mismatch)
                            && close(change, *p.relativeChange * 100.0));
                }
                QVERIFY2(
                    matched, qPrintable(QStringLiteral("point (%1, %2) is no stored point").arg(mismatch).arg(change)));
                QVERIFY(x->range().contains(mismatch) && y->range().contains(change));
                ++checked;
            }
        }
        QCOMPARE(checked, 5); // the five points at step 120
        // The failure rule drawn is the calibration's own relative threshold (+20%), read on the same axis.
        QCOMPARE(view.failureRise(), 0.2);
    }

    void admission()
    {
        ui::AdmissionView view;
        view.resize(900, 500);
        view.setStore(store_.get());
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const auto stored = store::admissionDecisions(*store_);
        for (const bool logarithmic : {true, false}) {
            view.logScaleBox()->setChecked(logarithmic);
            view.plot()->replot();
            QCPAxis* x = labelledAxis(view.plot()->axisRect(), "mismatch");
            QVERIFY(x);
            int checked = 0;
            for (int g = 0; g < view.plot()->graphCount(); ++g) {
                QCPGraph* graph = view.plot()->graph(g);
                QVERIFY(graph->valueAxis() == x);
                auto* bars = qobject_cast<QCPErrorBars*>(view.plot()->plottable(2 * g + 1));
                QVERIFY(bars && bars->dataPlottable() == graph);
                int i = 0;
                for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it, ++i) {
                    const store::AdmissionDecision& d = stored[static_cast<size_t>(std::lround(it->key))];
                    QCOMPARE(QString::fromStdString(d.decision), graph->name());
                    QVERIFY(close(readBack(graph->valueAxis(), x, it->value), d.mismatch));
                    const QCPErrorBarsData error = bars->data()->at(i);
                    QVERIFY(close(readBack(graph->valueAxis(), x, it->value - error.errorMinus), d.ciLow));
                    QVERIFY(close(readBack(graph->valueAxis(), x, it->value + error.errorPlus), d.ciHigh));
                    QVERIFY(x->range().contains(d.ciLow) && x->range().contains(d.ciHigh));
                    ++checked;
                }
            }
            QCOMPARE(checked, static_cast<int>(stored.size()));
        }
    }

    void heatmap()
    {
        ui::SensitivityView view;
        view.resize(900, 600);
        view.setStore(store_.get());
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(view.selectScan(ids_.scan));
        const auto scan = store::sensitivityScan(*store_, ids_.scan);
        QCPColorMapData* data = view.colorMap()->data();
        for (const store::SensitivityCell& cell : scan->cells) {
            const int column = view.panel().column(cell.moduleGroup);
            QVERIFY(column >= 0);
            // The cell's centre, read through the axes the map is drawn on, lands on this cell's layer and group.
            double key = 0.0;
            double value = 0.0;
            data->cellToCoord(column, static_cast<int>(cell.layer - view.firstRow()), &key, &value);
            QCOMPARE(std::lround(value), static_cast<long>(cell.layer));
            QCOMPARE(view.moduleGroups()[static_cast<size_t>(std::lround(key))], cell.moduleGroup);
            QCOMPARE(data->cell(column, static_cast<int>(cell.layer - view.firstRow())), cell.addedMismatch);
        }
        QVERIFY(view.colorScale()->axis()->label().contains("added mismatch"));
        QCOMPARE(view.colorMap()->colorScale(), view.colorScale());
    }

    void prefixShift()
    {
        ui::PrefixShiftView view;
        view.resize(1000, 700);
        view.setStore(store_.get());
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(view.selectAnalysis(ids_.prefixShift));
        view.plot()->replot();
        QVERIFY(view.positionsFromAllPairs());
        // By position over all 40 analysed pairs (the stored details), not the 3 stored pairs.
        std::map<double, double> total, perToken, unit;
        for (const auto& [position, t, p, u] : fixture::prefixShiftPositions()) {
            total[position] = t;
            perToken[position] = p;
            unit[position] = u;
        }
        QCPAxisRect* rect = view.plot()->axisRect();
        checkGraph(view.plot()->graph(ui::PrefixShiftView::MeanCandidate), rect, "KL(mu || pi)", total);
        checkGraph(view.plot()->graph(ui::PrefixShiftView::MeanReference), rect, "KL(mu || pi)", perToken);
        checkGraph(view.plot()->graph(ui::PrefixShiftView::Bf16UnitByPosition), rect, "KL(mu || pi)", unit);
        // The divergence histogram: the stored counts per position (zero bins are not drawn).
        auto* bars = qobject_cast<QCPBars*>(view.histogramPlot()->plottable(0));
        QVERIFY(bars);
        view.histogramPlot()->replot();
        QCPAxis* count = labelledAxis(view.histogramPlot()->axisRect(), "paired generations");
        QVERIFY(count);
        const std::map<double, double> histogram = {{1, 4}, {2, 3}, {4, 2}};
        QCOMPARE(bars->dataCount(), static_cast<int>(histogram.size()));
        for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) {
            QVERIFY(close(readBack(bars->valueAxis(), count, it->value), histogram.at(it->key)));
        }
        // The TIS/MIS table: one row per correction, as stored.
        QCOMPARE(view.correctionModel()->rowCount(), 3);
        QCOMPARE(view.correctionModel()->item(1, 0)->text(), QStringLiteral("tis"));
        QCOMPARE(view.correctionModel()->item(1, 2)->text(), QStringLiteral("0.027"));
        QCOMPARE(view.correctionModel()->item(2, 4)->text(), QStringLiteral("0.0165"));
    }

private:
    QTemporaryDir directory_;
    std::unique_ptr<store::RunStore> store_;
    fixture::Ids ids_;
};

MISMATCH_TEST_MAIN(TestPlotReadback)
#include "test_plot_readback.moc"

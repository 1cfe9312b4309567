#include "ui/run_plot.h"

#include "core/store/evaluation_store.h"
#include "ui/plot_export.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {
constexpr int kReplotDelayMs = 40;
enum Graph { FullKl, K1, K3, Bf16Multiple, Quality, Accuracy };
} // namespace

RunPlot::RunPlot(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    title_ = new QLabel(tr("Select a run to plot its per-step mismatch."), this);
    title_->setObjectName("runPlotTitle");
    layout->addWidget(title_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("runPlot");
    plot_->setMinimumHeight(240);
    plot_->xAxis->setLabel(tr("step"));
    plot_->yAxis->setLabel(tr("mismatch (nats/token)"));
    plot_->yAxis2->setVisible(true);
    plot_->yAxis2->setLabel(tr("x BF16 unit"));
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
    plot_->legend->setBrush(QColor(255, 255, 255, 210)); // the curves stay visible under the legend
    plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);

    // The quality panel below shares the step axis.
    qualityRect_ = new QCPAxisRect(plot_);
    plot_->plotLayout()->addElement(1, 0, qualityRect_);
    plot_->plotLayout()->setRowStretchFactor(0, 2);
    plot_->plotLayout()->setRowStretchFactor(1, 1);
    qualityRect_->axis(QCPAxis::atBottom)->setLabel(tr("step"));
    qualityRect_->axis(QCPAxis::atLeft)->setLabel(tr("quality Q (nats/token)"));
    QCPAxis* accuracyAxis = qualityRect_->addAxis(QCPAxis::atRight);
    accuracyAxis->setLabel(tr("accuracy (%)"));
    accuracyAxis->setRange(0, 100); // fixed: a flat accuracy must not be stretched over the panel
    auto* margins = new QCPMarginGroup(plot_);
    plot_->axisRect()->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    qualityRect_->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), qualityRect_->axis(QCPAxis::atBottom),
        qOverload<const QCPRange&>(&QCPAxis::setRange));

    const struct {
        const char* name;
        QColor color;
        Qt::PenStyle style;
    } graphs[] = {{"KL(mu || pi), full vocabulary", QColor(0x1f, 0x6f, 0xd1), Qt::SolidLine},
        {"k1 (sampled token)", QColor(0xef, 0x8a, 0x17), Qt::DashLine},
        {"k3 (sampled token)", QColor(0x2e, 0x7d, 0x32), Qt::DotLine}};
    for (const auto& g : graphs) {
        QCPGraph* graph = plot_->addGraph();
        graph->setName(tr(g.name));
        graph->setPen(QPen(g.color, 2, g.style));
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
    }
    QCPGraph* multiple = plot_->addGraph(plot_->xAxis, plot_->yAxis2);
    multiple->setName(tr("BF16 multiple (right axis)"));
    multiple->setPen(QPen(QColor(0x9e, 0x9e, 0x9e), 1.5));

    QCPGraph* quality = plot_->addGraph(qualityRect_->axis(QCPAxis::atBottom), qualityRect_->axis(QCPAxis::atLeft));
    quality->setName(tr("quality Q at evaluations"));
    quality->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 2));
    quality->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, QColor(0x6a, 0x1b, 0x9a), 8));
    QCPGraph* accuracy = plot_->addGraph(qualityRect_->axis(QCPAxis::atBottom), qualityRect_->axis(QCPAxis::atRight));
    accuracy->setName(tr("accuracy (right axis)"));
    accuracy->setPen(QPen(QColor(0x00, 0x89, 0x7b), 1.5, Qt::DashLine));
    accuracy->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, QColor(0x00, 0x89, 0x7b), 7));
    // The two quality graphs get their own legend inside the lower panel.
    auto* qualityLegend = new QCPLegend;
    qualityRect_->insetLayout()->addElement(qualityLegend, Qt::AlignTop | Qt::AlignRight);
    qualityLegend->setLayer("legend");
    qualityLegend->setFont(QFont(font().family(), 8));
    qualityLegend->setBrush(QColor(255, 255, 255, 210));
    plot_->legend->removeItem(plot_->legend->itemCount() - 1);
    plot_->legend->removeItem(plot_->legend->itemCount() - 1);
    quality->addToLegend(qualityLegend);
    accuracy->addToLegend(qualityLegend);

    layout->addWidget(plot_, 1);
    addPlotExportMenu(plot_);
    replotTimer_.setSingleShot(true);
    replotTimer_.setInterval(kReplotDelayMs);
    connect(&replotTimer_, &QTimer::timeout, this, &RunPlot::replot);
}

void RunPlot::setStore(store::RunStore* store)
{
    store_ = store;
    showRun(0, {});
}

void RunPlot::showRun(std::int64_t runId, const QString& title)
{
    runId_ = runId;
    cursor_ = 0;
    for (int i = 0; i < plot_->graphCount(); ++i) {
        plot_->graph(i)->data()->clear();
    }
    title_->setText(runId ? tr("Run %1: %2 — per-step mismatch and quality").arg(runId).arg(title)
                          : tr("Select a run to plot its per-step mismatch."));
    tail();
    scheduleReplot();
}

void RunPlot::tail()
{
    if (!store_ || runId_ == 0) {
        return;
    }
    const auto steps = store_->stepsAfter(runId_, cursor_);
    for (const auto& s : steps) {
        const double x = static_cast<double>(s.step);
        if (s.mismatchKl)
            plot_->graph(FullKl)->addData(x, *s.mismatchKl);
        if (s.k1)
            plot_->graph(K1)->addData(x, *s.k1);
        if (s.k3)
            plot_->graph(K3)->addData(x, *s.k3);
        if (s.bf16Multiple)
            plot_->graph(Bf16Multiple)->addData(x, *s.bf16Multiple);
        cursor_ = s.rowId;
    }
    bool changed = !steps.empty();
    // Evaluations are few (one per `evaluation.every` steps): re-read them when their count moved.
    const auto evaluations = store::evaluations(*store_, runId_);
    if (static_cast<int>(evaluations.size()) != plot_->graph(Quality)->dataCount()) {
        QVector<double> x, q, a;
        for (const auto& e : evaluations) {
            x.append(static_cast<double>(e.step));
            q.append(e.quality);
            a.append(100.0 * e.accuracy);
        }
        plot_->graph(Quality)->setData(x, q, true);
        plot_->graph(Accuracy)->setData(x, a, true);
        changed = true;
    }
    if (changed) {
        scheduleReplot();
    }
}

int RunPlot::pointCount() const
{
    return plot_->graph(FullKl)->dataCount();
}

int RunPlot::bf16MultipleCount() const
{
    return plot_->graph(Bf16Multiple)->dataCount();
}

int RunPlot::evaluationCount() const
{
    return plot_->graph(Quality)->dataCount();
}

void RunPlot::scheduleReplot()
{
    if (!replotTimer_.isActive()) {
        replotTimer_.start();
    }
}

void RunPlot::replot()
{
    ++replots_;
    plot_->xAxis->rescale();
    plot_->yAxis->rescale();
    plot_->yAxis2->rescale();
    qualityRect_->axis(QCPAxis::atLeft)->rescale();
    // The step axis covers both panels' data (evaluations include step 0 and the last step).
    const QCPRange evaluationSteps = [this] {
        bool found = false;
        QCPRange range = plot_->graph(Quality)->getKeyRange(found);
        return found ? range : plot_->xAxis->range();
    }();
    plot_->xAxis->setRange(std::min(plot_->xAxis->range().lower, evaluationSteps.lower),
        std::max(plot_->xAxis->range().upper, evaluationSteps.upper));
    // A little headroom so that the extreme points are not drawn on the axes.
    plot_->xAxis->scaleRange(1.04, plot_->xAxis->range().center());
    plot_->yAxis->scaleRange(1.1, plot_->yAxis->range().center());
    plot_->yAxis2->scaleRange(1.1, plot_->yAxis2->range().center());
    QCPAxis* qualityAxis = qualityRect_->axis(QCPAxis::atLeft);
    qualityAxis->scaleRange(1.2, qualityAxis->range().center());
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace mismatch::ui

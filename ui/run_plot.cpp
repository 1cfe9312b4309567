#include "ui/run_plot.h"

#include <qcustomplot.h>

#include <QLabel>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {
constexpr int kReplotDelayMs = 40;
enum Graph { FullKl, K1, K3 };
}  // namespace

RunPlot::RunPlot(QWidget* parent) : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    title_ = new QLabel(tr("Select a run to plot its per-step mismatch."), this);
    title_->setObjectName("runPlotTitle");
    layout->addWidget(title_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("runPlot");
    plot_->setMinimumHeight(180);
    plot_->xAxis->setLabel(tr("step"));
    plot_->yAxis->setLabel(tr("mismatch (nats/token)"));
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
    plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
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
        QPen pen(g.color, 2, g.style);
        graph->setPen(pen);
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
    }
    layout->addWidget(plot_, 1);
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
    title_->setText(runId ? tr("Run %1: %2 — per-step mismatch").arg(runId).arg(title)
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
        if (s.mismatchKl) plot_->graph(FullKl)->addData(x, *s.mismatchKl);
        if (s.k1) plot_->graph(K1)->addData(x, *s.k1);
        if (s.k3) plot_->graph(K3)->addData(x, *s.k3);
        cursor_ = s.rowId;
    }
    if (!steps.empty()) {
        scheduleReplot();
    }
}

int RunPlot::pointCount() const
{
    return plot_->graph(FullKl)->dataCount();
}

void RunPlot::scheduleReplot()
{
    if (!replotTimer_.isActive()) {
        replotTimer_.start();
    }
}

void RunPlot::replot()
{
    plot_->rescaleAxes();
    // A little headroom so that the extreme points are not drawn on the axes.
    plot_->yAxis->scaleRange(1.1, plot_->yAxis->range().center());
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace mismatch::ui

#include "ui/plots/plot_tools.h"

#include <qcustomplot.h>

#include <QLabel>

#include <algorithm>
#include <cmath>

namespace mismatch::ui {

namespace {
const QColor kHiddenText(0xa0, 0xa0, 0xa0);
} // namespace

void placeLegendAbove(QCustomPlot* plot, std::function<void()> onToggle, int perRow)
{
    QCPLegend* legend = plot->legend;
    QCPLayoutGrid* layout = plot->plotLayout();
    // Take the legend out of the axis rect's inset layout and give it a row of its own above everything.
    if (QCPLayoutInset* inset = plot->axisRect()->insetLayout(); inset->elements(false).contains(legend)) {
        inset->take(legend);
        inset->simplify();
    }
    // The row: the legend at its own width on the left, an empty element taking the rest (a legend stretched over
    // the whole width would spread its entries apart).
    auto* row = new QCPLayoutGrid;
    layout->insertRow(0);
    layout->addElement(0, 0, row);
    layout->setRowStretchFactor(0, 0.001); // as small as its entries need
    layout->setRowSpacing(2);
    row->addElement(0, 0, legend);
    row->addElement(0, 1, new QCPLayoutElement(plot));
    row->setColumnStretchFactor(0, 0.001);
    row->setColumnStretchFactor(1, 1.0);
    legend->setVisible(true);
    legend->setWrap(perRow);
    legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true); // re-laid out with the wrap
    legend->setBrush(Qt::NoBrush);
    legend->setBorderPen(Qt::NoPen);
    legend->setMargins(QMargins(4, 2, 4, 0));
    legend->setMaximumSize(QWIDGETSIZE_MAX, QWIDGETSIZE_MAX);
    // A layout with several columns (a colour scale beside the plot) spans the legend over all of them.
    if (layout->columnCount() > 1) {
        for (int column = 1; column < layout->columnCount(); ++column) {
            if (!layout->hasElement(0, column)) {
                layout->addElement(0, column, new QCPLayoutElement(plot));
            }
        }
    }
    QObject::connect(
        plot, &QCustomPlot::legendClick, plot, [plot, onToggle](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
            auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
            if (!entry) {
                return;
            }
            setSeriesVisible(plot, entry->plottable(), !entry->plottable()->visible());
            if (onToggle) {
                onToggle();
            }
            plot->replot();
        });
}

void setSeriesVisible(QCustomPlot* plot, QCPAbstractPlottable* plottable, bool visible)
{
    plottable->setVisible(visible);
    for (QCPLegend* legend : {plot->legend}) {
        if (QCPPlottableLegendItem* item = legend->itemWithPlottable(plottable)) {
            item->setTextColor(visible ? legend->textColor() : kHiddenText);
        }
    }
}

void enableZoomAndReset(QCustomPlot* plot, std::function<void()> reset, Qt::Orientations orientations)
{
    plot->setInteraction(QCP::iRangeDrag, true);
    plot->setInteraction(QCP::iRangeZoom, true);
    for (QCPAxisRect* rect : plot->axisRects()) {
        rect->setRangeDrag(orientations);
        rect->setRangeZoom(orientations);
    }
    QObject::connect(plot, &QCustomPlot::mouseDoubleClick, plot, [reset](QMouseEvent*) {
        if (reset) {
            reset();
        }
    });
}

QLabel* makeReadout(QWidget* parent, const QString& objectName, const QString& idle)
{
    auto* label = new QLabel(idle.isEmpty()
            ? QObject::tr("Hover the plot to read its values; drag or wheel to zoom, double-click to reset.")
            : idle,
        parent);
    label->setObjectName(objectName);
    label->setProperty("idle", label->text()); // what it says again when the mouse leaves the data
    label->setStyleSheet(QStringLiteral("color: #444"));
    label->setWordWrap(true);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    return label;
}

void setLogScale(QCPAxis* axis, bool logarithmic)
{
    axis->setScaleType(logarithmic ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (logarithmic) {
        auto ticker = QSharedPointer<QCPAxisTickerLog>::create();
        ticker->setSubTickCount(8);
        axis->setTicker(ticker);
        axis->setNumberFormat(QStringLiteral("gb"));
    } else {
        axis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        axis->setNumberFormat(QStringLiteral("gb"));
    }
}

std::optional<std::pair<double, double>> nearestPoint(const QCPGraph* graph, double key)
{
    const auto data = graph->data();
    if (data->isEmpty()) {
        return std::nullopt;
    }
    auto it = data->findBegin(key, false);
    if (it == data->constEnd()) {
        --it;
    }
    if (it != data->constBegin()) {
        auto before = it;
        --before;
        if (std::abs(before->key - key) <= std::abs(it->key - key)) {
            it = before;
        }
    }
    return std::make_pair(it->key, it->value);
}

PlotCrosshair::PlotCrosshair(
    QCustomPlot* plot, std::vector<QCPAxisRect*> rects, QLabel* readout, QString keyLabel, Describe describe)
    : QObject(plot)
    , plot_(plot)
    , rects_(std::move(rects))
    , readout_(readout)
    , keyLabel_(std::move(keyLabel))
    , idleText_(readout->property("idle").isValid() ? readout->property("idle").toString() : readout->text())
    , describe_(std::move(describe))
{
    for (QCPAxisRect* rect : rects_) {
        auto* line = new QCPItemStraightLine(plot_);
        line->setClipAxisRect(rect);
        line->point1->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point2->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
        line->point1->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point2->setTypeY(QCPItemPosition::ptAxisRectRatio);
        line->point1->setAxisRect(rect);
        line->point2->setAxisRect(rect);
        line->setPen(QPen(QColor(0x60, 0x60, 0x60, 160), 1, Qt::DashLine));
        line->setSelectable(false);
        line->setVisible(false);
        line->setLayer(QStringLiteral("overlay"));
        lines_.push_back(line);
    }
    plot_->layer(QStringLiteral("overlay"))->setMode(QCPLayer::lmBuffered); // the line redraws alone
    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
        for (QCPAxisRect* rect : rects_) {
            if (rect->rect().contains(event->pos())) {
                showAt(rect->axis(QCPAxis::atBottom)->pixelToCoord(event->pos().x()));
                return;
            }
        }
        hide();
    });
}

void PlotCrosshair::showAt(double key)
{
    for (QCPItemStraightLine* line : lines_) {
        line->point1->setCoords(key, 0);
        line->point2->setCoords(key, 1);
        line->setVisible(true);
    }
    readout_->setText(describe_ ? describe_(key) : describeDefault(key));
    plot_->layer(QStringLiteral("overlay"))->replot();
}

void PlotCrosshair::hide()
{
    bool wasVisible = false;
    for (QCPItemStraightLine* line : lines_) {
        wasVisible = wasVisible || line->visible();
        line->setVisible(false);
    }
    if (wasVisible) {
        readout_->setText(idleText_);
        plot_->layer(QStringLiteral("overlay"))->replot();
    }
}

QString PlotCrosshair::text() const
{
    return readout_->text();
}

QString PlotCrosshair::describeDefault(double key) const
{
    QStringList parts;
    double shownKey = key;
    bool first = true;
    for (int i = 0; i < plot_->graphCount(); ++i) {
        const QCPGraph* graph = plot_->graph(i);
        if (!graph->visible() || graph->name().isEmpty()
            || std::find(rects_.begin(), rects_.end(), graph->keyAxis()->axisRect()) == rects_.end()) {
            continue;
        }
        const auto point = nearestPoint(graph, key);
        if (!point) {
            continue;
        }
        if (first) {
            shownKey = point->first;
            first = false;
        }
        QString part = QStringLiteral("%1 %2").arg(graph->name()).arg(point->second, 0, 'g', 4);
        if (point->first != shownKey) {
            part += QObject::tr(" (at %1)").arg(point->first, 0, 'g', 6);
        }
        parts << part;
    }
    if (parts.isEmpty()) {
        return idleText_;
    }
    return QStringLiteral("%1 %2: %3").arg(keyLabel_).arg(shownKey, 0, 'g', 6).arg(parts.join(QStringLiteral(" · ")));
}

} // namespace mismatch::ui

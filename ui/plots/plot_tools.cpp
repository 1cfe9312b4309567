#include "ui/plots/plot_tools.h"

#include "ui/plots/glossary_tips.h"

#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHelpEvent>
#include <QLabel>
#include <QSignalBlocker>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace mismatch::ui {

namespace {
const QColor kHiddenText(0xa0, 0xa0, 0xa0);

// Every axis of `plot`: those of its axis rects and those of its colour scales.
QList<QCPAxis*> plotAxes(const QCustomPlot* plot)
{
    QList<QCPAxis*> axes;
    for (QCPAxisRect* rect : plot->axisRects()) {
        axes << rect->axes();
    }
    for (QCPLayoutElement* element : plot->plotLayout()->elements(true)) {
        if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
            axes << scale->axis();
        }
    }
    return axes;
}

// The tooltip over axis titles (installAxisGlossaryTips): on a mouse move, and on a tooltip request (the mouse
// resting there), which would otherwise show the plot's own tooltip.
class AxisGlossaryTips : public QObject {
public:
    explicit AxisGlossaryTips(QCustomPlot* plot)
        : QObject(plot)
        , plot_(plot)
    {
        setObjectName(QStringLiteral("axisGlossaryTips"));
        plot->setMouseTracking(true);
        plot->installEventFilter(this);
        connect(plot, &QCustomPlot::mouseMove, this,
            [this](QMouseEvent* event) { show(event->pos(), event->globalPosition().toPoint()); });
    }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override
    {
        if (watched == plot_ && event->type() == QEvent::ToolTip) {
            const auto* help = static_cast<QHelpEvent*>(event);
            return show(help->pos(), help->globalPos());
        }
        return QObject::eventFilter(watched, event);
    }

private:
    bool show(const QPoint& pixel, const QPoint& global)
    {
        const QString tip = axisGlossaryTipAt(plot_, pixel);
        if (!tip.isEmpty()) {
            QToolTip::showText(global, tip, plot_);
        } else if (showing_) {
            QToolTip::hideText(); // left the title: its tip goes
        }
        showing_ = !tip.isEmpty();
        return showing_;
    }

    QCustomPlot* plot_;
    bool showing_ = false;
};
} // namespace

void installAxisGlossaryTips(QCustomPlot* plot)
{
    if (!plot->findChild<QObject*>(QStringLiteral("axisGlossaryTips"), Qt::FindDirectChildrenOnly)) {
        new AxisGlossaryTips(plot);
    }
}

QString axisGlossaryTipAt(const QCustomPlot* plot, const QPoint& pixel)
{
    for (const QCPAxis* axis : plotAxes(plot)) {
        if (axis->visible() && !axis->label().isEmpty() && axis->getPartAt(pixel) == QCPAxis::spAxisLabel) {
            return glossaryTipFor(axis->label());
        }
    }
    return {};
}

std::optional<QPoint> axisTitlePoint(const QCPAxis* axis)
{
    if (!axis || !axis->visible() || axis->label().isEmpty()) {
        return std::nullopt;
    }
    // Outwards from the axis rect's edge, halfway along the axis, to the title drawn beyond the tick labels.
    const QRect rect = axis->axisRect()->rect();
    const int reach = std::max(axis->parentPlot()->width(), axis->parentPlot()->height());
    for (int distance = 0; distance < reach; ++distance) {
        QPoint point;
        switch (axis->axisType()) {
        case QCPAxis::atLeft:
            point = QPoint(rect.left() - distance, rect.center().y());
            break;
        case QCPAxis::atRight:
            point = QPoint(rect.right() + distance, rect.center().y());
            break;
        case QCPAxis::atTop:
            point = QPoint(rect.center().x(), rect.top() - distance);
            break;
        case QCPAxis::atBottom:
            point = QPoint(rect.center().x(), rect.bottom() + distance);
            break;
        }
        if (axis->getPartAt(point) == QCPAxis::spAxisLabel) {
            return point;
        }
    }
    return std::nullopt;
}

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

namespace {

// Powers of ten, and where the axis spans less than a decade and a half (every point between 0.012 and 0.09, say,
// where powers of ten alone leave no labelled tick in view) 1, 2 and 5 times them, with sub-ticks at the other
// whole mantissas (3, 4, 6, 7, 8, 9).
class DecadeTicker : public QCPAxisTickerLog {
protected:
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override
    {
        dense_ = range.lower > 0.0 && range.upper > 0.0 && range.upper / range.lower < 30.0;
        if (!dense_) {
            return QCPAxisTickerLog::createTickVector(tickStep, range);
        }
        QVector<double> ticks;
        for (double decade = std::pow(10.0, std::floor(std::log10(range.lower))); decade <= range.upper * 10.0;
             decade *= 10.0) {
            for (const double mantissa : {1.0, 2.0, 5.0}) {
                ticks.append(mantissa * decade);
            }
        }
        return ticks;
    }

    QVector<double> createSubTickVector(int subTickCount, const QVector<double>& ticks) override
    {
        if (!dense_ || ticks.isEmpty()) {
            return QCPAxisTickerLog::createSubTickVector(subTickCount, ticks);
        }
        QVector<double> subTicks;
        for (double decade = std::pow(10.0, std::floor(std::log10(ticks.front()))); decade <= ticks.back();
             decade *= 10.0) {
            for (const double mantissa : {3.0, 4.0, 6.0, 7.0, 8.0, 9.0}) {
                subTicks.append(mantissa * decade);
            }
        }
        return subTicks;
    }

private:
    bool dense_ = false;
};

} // namespace

void fillBudgetChoices(QComboBox* box, store::RunStore* store)
{
    const QSignalBlocker block(box);
    box->clear();
    box->addItem(QObject::tr("none"), QVariant::fromValue<qlonglong>(0));
    box->setItemData(0, QVariant::fromValue<qlonglong>(0), Qt::UserRole + 1);
    if (!store) {
        return;
    }
    try {
        for (const store::CalibrationInfo& info : store::calibrations(*store)) {
            const auto calibration = store::calibration(*store, info.id);
            for (const store::CalibrationBracket& bracket :
                calibration ? calibration->brackets : std::vector<store::CalibrationBracket> {}) {
                double threshold = 0.0;
                try {
                    threshold = store::admissionThreshold(*store, info.id, bracket.step);
                } catch (const StoreError&) {
                    continue; // nothing passed at that step: it gives no budget
                }
                const QString name = QString::fromStdString(info.name);
                box->addItem(QObject::tr("#%1 %2, step %3: %4")
                                 .arg(info.id)
                                 .arg(name)
                                 .arg(bracket.step)
                                 .arg(threshold, 0, 'g', 3),
                    QVariant::fromValue<qlonglong>(info.id));
                const int row = box->count() - 1;
                box->setItemData(row, QVariant::fromValue<qlonglong>(bracket.step), Qt::UserRole + 1);
                box->setItemData(row, threshold, Qt::UserRole + 2);
                box->setItemData(row,
                    QObject::tr("Calibration #%1 \"%2\", its bracket at step %3: admission threshold %4 nats/token")
                        .arg(info.id)
                        .arg(name)
                        .arg(bracket.step)
                        .arg(threshold, 0, 'g', 4),
                    Qt::ToolTipRole);
            }
        }
    } catch (const std::exception&) {
        // Unreadable: only "none" is offered (the window's polling shows the store's problem).
        while (box->count() > 1) {
            box->removeItem(1);
        }
    }
}

int budgetChoiceRow(const QComboBox* box, std::int64_t calibrationId, std::int64_t step)
{
    for (int row = 0; row < box->count(); ++row) {
        if (box->itemData(row, Qt::UserRole).toLongLong() == calibrationId
            && (calibrationId == 0 || box->itemData(row, Qt::UserRole + 1).toLongLong() == step)) {
            return row;
        }
    }
    return -1;
}

void setLogScale(QCPAxis* axis, bool logarithmic)
{
    axis->setScaleType(logarithmic ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (logarithmic) {
        auto ticker = QSharedPointer<DecadeTicker>::create();
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

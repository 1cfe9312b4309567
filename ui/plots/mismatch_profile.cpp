#include "ui/plots/mismatch_profile.h"

#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <algorithm>

namespace mismatch::ui {

namespace {
// The strip's least height, from its fonts: the legend row (its entries' text and margins), an axis rect as long as
// the vertical title with half a tick label to spare at each end (QCustomPlot does not clip an axis title: a longer
// one runs past the rect's ends into the legend row and the x axis) and, under it, the x axis's tick labels and
// title with QCustomPlot's paddings (tick label padding and label padding, 5 px each).
int stripMinimumHeight(const QCustomPlot* plot)
{
    const QFontMetrics title(plot->yAxis->labelFont());
    const QFontMetrics ticks(plot->xAxis->tickLabelFont());
    const int legendRow = QFontMetrics(plot->legend->font()).height() + 8;
    const int axisRect = title.horizontalAdvance(plot->yAxis->label()) + ticks.height();
    const int xAxis = ticks.height() + QFontMetrics(plot->xAxis->labelFont()).height() + 10;
    return legendRow + axisRect + xAxis;
}
} // namespace

MismatchProfile::MismatchProfile(const QString& objectPrefix, QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Where the mismatch sits:"), this));
    axisBox_ = new QComboBox(this);
    axisBox_->setObjectName(objectPrefix + QStringLiteral("Profile"));
    axisBox_->addItems({tr("by the engine's probability of the chosen token mu(y)"), tr("by the trainer's entropy")});
    // As wide as the longer choice where there is room; on a narrow window it shrinks (eliding the choice, its
    // full text in the tooltip) rather than widening the window.
    axisBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    axisBox_->setMinimumContentsLength(16);
    axisBox_->setMaximumWidth(axisBox_->fontMetrics().horizontalAdvance(axisBox_->itemText(0)) + 48);
    for (int item = 0; item < axisBox_->count(); ++item) {
        axisBox_->setItemData(item, axisBox_->itemText(item), Qt::ToolTipRole);
    }
    axisBox_->setToolTip(axisBox_->currentText());
    top->addWidget(axisBox_, 1);
    note_ = new QLabel(this);
    note_->setObjectName(objectPrefix + QStringLiteral("ProfileNote"));
    note_->setWordWrap(true); // wraps under a narrow window instead of widening it
    top->addWidget(note_, 1);
    layout->addLayout(top);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName(objectPrefix + QStringLiteral("ProfilePlot"));
    plot_->xAxis->grid()->setVisible(false);
    plot_->yAxis->setLabel(tr("% of summed KL"));
    // Shares of 0..100%: a tick every 50% (sub-ticks every 10%) keeps the labels apart on a short strip.
    auto shareTicks = QSharedPointer<QCPAxisTickerFixed>::create();
    shareTicks->setTickStep(50.0);
    shareTicks->setScaleStrategy(QCPAxisTickerFixed::ssNone);
    plot_->yAxis->setTicker(shareTicks);
    plot_->legend->setFont(QFont(font().family(), 8));
    placeLegendAbove(plot_);
    plot_->setMinimumHeight(stripMinimumHeight(plot_));
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);
    layout->addWidget(plot_, 1);
    connect(axisBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] {
        axisBox_->setToolTip(axisBox_->currentText());
        redraw();
        emit axisChanged();
    });
}

void MismatchProfile::setAxis(Axis axis)
{
    axisBox_->setCurrentIndex(static_cast<int>(axis));
}

MismatchProfile::Axis MismatchProfile::axis() const
{
    return axisBox_->currentIndex() == ByEntropy ? ByEntropy : ByProbability;
}

void MismatchProfile::setSeries(std::vector<std::pair<QString, metrics::EstimatorComparison>> series)
{
    series_ = std::move(series);
    redraw();
}

void MismatchProfile::redraw()
{
    plot_->clearPlottables();
    for (QCPBarsGroup* old : plot_->findChildren<QCPBarsGroup*>()) {
        delete old; // empty: its bars went with the plottables
    }
    const bool byEntropy = axis() == ByEntropy;
    auto* group = new QCPBarsGroup(plot_);
    group->setSpacingType(QCPBarsGroup::stAbsolute);
    group->setSpacing(1);
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    static const QColor palette[] = {QColor(0x1f, 0x77, 0xb4), QColor(0xff, 0x7f, 0x0e), QColor(0x2c, 0xa0, 0x2c),
        QColor(0xd6, 0x27, 0x28), QColor(0x94, 0x67, 0xbd), QColor(0x8c, 0x56, 0x4b), QColor(0xe3, 0x77, 0xc2),
        QColor(0x7f, 0x7f, 0x7f), QColor(0xbc, 0xbd, 0x22), QColor(0x17, 0xbe, 0xcf)};
    std::size_t bins = 0;
    drawn_ = 0;
    int withoutBins = 0;
    for (const auto& [name, comparison] : series_) {
        const std::vector<metrics::MismatchBin>& list = byEntropy ? comparison.byEntropy : comparison.byProbability;
        if (list.empty()) {
            ++withoutBins;
            continue;
        }
        QVector<double> keys, shares;
        for (std::size_t b = 0; b < list.size(); ++b) {
            keys << static_cast<double>(b);
            shares << 100.0 * list[b].klShare;
            if (b >= bins) {
                const QString high = list[b].high > 1e299 ? QStringLiteral("∞") : QString::number(list[b].high, 'g', 3);
                ticker->addTick(static_cast<double>(b), QStringLiteral("[%1, %2)").arg(list[b].low, 0, 'g', 3).arg(high));
            }
        }
        bins = std::max(bins, list.size());
        auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
        bars->setName(name);
        const QColor color = palette[drawn_ % 10];
        bars->setPen(QPen(color.darker(130), 1));
        bars->setBrush(color);
        bars->setWidth(0.8 / std::max<double>(1.0, static_cast<double>(series_.size())));
        bars->setBarsGroup(group);
        bars->setData(keys, shares, true);
        ++drawn_;
    }
    note_->setText(withoutBins > 0 ? tr("(%1 without stored bins: measured before they were kept)").arg(withoutBins)
                                   : QString());
    plot_->xAxis->setTicker(ticker);
    plot_->xAxis->setLabel(byEntropy ? tr("the trainer's entropy at the prefix (nats)")
                                     : tr("the engine's probability of the chosen token mu(y)"));
    plot_->xAxis->setRange(-0.6, std::max<double>(1.0, static_cast<double>(bins)) - 0.4);
    plot_->yAxis->setRange(0.0, 100.0);
    plot_->replot();
}

} // namespace mismatch::ui

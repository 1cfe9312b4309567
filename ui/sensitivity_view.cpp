#include "ui/sensitivity_view.h"

#include "ui/plot_export.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <map>

namespace mismatch::ui {

namespace {
// Columns in pipeline order; groups a scan names that are not listed here follow, sorted.
const std::vector<std::string>& knownGroupOrder()
{
    static const std::vector<std::string> order
        = {"embed_tokens", "embed_lm_head", "q", "k", "v", "o", "attn", "kv", "gate", "up", "down", "mlp", "lm_head"};
    return order;
}
} // namespace

SensitivityView::SensitivityView(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Scan:"), this));
    scanBox_ = new QComboBox(this);
    scanBox_->setObjectName("sensitivityScanBox");
    scanBox_->setMinimumWidth(320);
    top->addWidget(scanBox_);
    logScale_ = new QCheckBox(tr("Log colour scale"), this);
    logScale_->setObjectName("sensitivityLogScale");
    logScale_->setChecked(true);
    top->addWidget(logScale_);
    summary_ = new QLabel(this);
    top->addWidget(summary_, 1);
    layout->addLayout(top);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("sensitivityPlot");
    plot_->setMinimumHeight(260);
    plot_->setMouseTracking(true);
    plot_->xAxis->setLabel(tr("module group"));
    plot_->yAxis->setLabel(tr("layer"));
    plot_->yAxis->setRangeReversed(true); // layer 0 at the top, as in a model's module list
    plot_->xAxis->grid()->setVisible(false);
    plot_->yAxis->grid()->setVisible(false);
    colorMap_ = new QCPColorMap(plot_->xAxis, plot_->yAxis);
    colorMap_->setInterpolate(false);
    colorScale_ = new QCPColorScale(plot_);
    plot_->plotLayout()->addElement(0, 1, colorScale_);
    colorScale_->setType(QCPAxis::atRight);
    colorScale_->axis()->setLabel(tr("added mismatch (nats/token)"));
    colorMap_->setColorScale(colorScale_);
    // Viridis: perceptually uniform, readable in grey and by colour-blind readers; no white end that could be
    // mistaken for a blank (unmeasured) cell.
    QCPColorGradient viridis;
    viridis.clearColorStops();
    viridis.setColorStopAt(0.0, QColor(0x44, 0x01, 0x54));
    viridis.setColorStopAt(0.25, QColor(0x3b, 0x52, 0x8b));
    viridis.setColorStopAt(0.5, QColor(0x21, 0x91, 0x8c));
    viridis.setColorStopAt(0.75, QColor(0x5e, 0xc9, 0x62));
    viridis.setColorStopAt(1.0, QColor(0xfd, 0xe7, 0x25));
    viridis.setNanHandling(QCPColorGradient::nhLowestColor);
    colorMap_->setGradient(viridis);
    selectionFrame_ = new QCPItemRect(plot_);
    selectionFrame_->setPen(QPen(QColor(0xe5, 0x39, 0x35), 3));
    selectionFrame_->setBrush(Qt::NoBrush);
    selectionFrame_->setVisible(false);
    // Keep the colour scale as tall as the heatmap.
    auto* margins = new QCPMarginGroup(plot_);
    plot_->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    colorScale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    layout->addWidget(plot_, 1);
    addPlotExportMenu(plot_);

    detail_ = new QLabel(tr("Click a cell to see its figures."), this);
    detail_->setObjectName("sensitivityDetail");
    detail_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(detail_);

    connect(scanBox_, qOverload<int>(&QComboBox::currentIndexChanged), this, &SensitivityView::showScan);
    connect(logScale_, &QCheckBox::toggled, this, [this] { showScan(scanBox_->currentIndex()); });
    connect(plot_, &QCustomPlot::mouseMove, this, &SensitivityView::onMouseMove);
    connect(plot_, &QCustomPlot::mousePress, this, &SensitivityView::onMousePress);
}

void SensitivityView::setStore(const store::RunStore* store)
{
    store_ = store;
    scanId_ = 0;
    refresh();
}

void SensitivityView::refresh()
{
    const std::int64_t keep = scanId_;
    scans_ = store_ ? AnalysisData(*store_).sensitivityScans() : std::vector<SensitivityScanInfo> {};
    const QSignalBlocker block(scanBox_);
    scanBox_->clear();
    int keepIndex = scans_.empty() ? -1 : static_cast<int>(scans_.size()) - 1; // newest by default
    for (size_t i = 0; i < scans_.size(); ++i) {
        const SensitivityScanInfo& scan = scans_[i];
        QString label = tr("#%1 %2").arg(scan.id).arg(QString::fromStdString(scan.format));
        if (!scan.modelName.empty()) {
            label += tr(" on %1").arg(QString::fromStdString(scan.modelName));
        }
        label += QStringLiteral(" (%1)").arg(QString::fromStdString(scan.createdAt));
        if (scan.status != "finished") {
            label += tr(" [%1: partial]").arg(QString::fromStdString(scan.status));
        }
        scanBox_->addItem(label, QVariant::fromValue<qlonglong>(scan.id));
        if (scan.id == keep) {
            keepIndex = static_cast<int>(i);
        }
    }
    scanBox_->setCurrentIndex(keepIndex);
    showScan(keepIndex);
}

bool SensitivityView::selectScan(std::int64_t scanId)
{
    const int index = scanBox_->findData(QVariant::fromValue<qlonglong>(scanId));
    if (index < 0) {
        return false;
    }
    scanBox_->setCurrentIndex(index);
    showScan(index);
    return true;
}

bool SensitivityView::logarithmic() const
{
    return logarithmic_;
}

void SensitivityView::showScan(int comboIndex)
{
    cells_.clear();
    groups_.clear();
    layers_ = 0;
    firstRow_ = 0;
    scanId_ = 0;
    if (comboIndex >= 0 && comboIndex < static_cast<int>(scans_.size()) && store_) {
        scanId_ = scans_[static_cast<size_t>(comboIndex)].id;
        cells_ = AnalysisData(*store_).sensitivityCells(scanId_);
    }
    std::vector<std::string> unknown;
    for (const SensitivityCell& cell : cells_) {
        layers_ = std::max(layers_, cell.layer + 1);
        firstRow_ = std::min(firstRow_, cell.layer); // -1: the embedding / lm_head cells
        const auto& order = knownGroupOrder();
        if (std::find(order.begin(), order.end(), cell.moduleGroup) == order.end()
            && std::find(unknown.begin(), unknown.end(), cell.moduleGroup) == unknown.end()) {
            unknown.push_back(cell.moduleGroup);
        }
    }
    for (const std::string& group : knownGroupOrder()) {
        if (std::any_of(
                cells_.begin(), cells_.end(), [&](const SensitivityCell& c) { return c.moduleGroup == group; })) {
            groups_.push_back(group);
        }
    }
    std::sort(unknown.begin(), unknown.end());
    groups_.insert(groups_.end(), unknown.begin(), unknown.end());

    const int columns = static_cast<int>(groups_.size());
    const int rows = static_cast<int>(layers_ - firstRow_);
    colorMap_->data()->clear();
    if (columns > 0 && rows > 0) {
        // Cell centres at integer coordinates: column c at x = c, layer l at y = l (row l - firstRow_).
        colorMap_->data()->setSize(columns, rows);
        colorMap_->data()->setRange(QCPRange(0, columns - 1), QCPRange(static_cast<double>(firstRow_), layers_ - 1.0));
        for (int c = 0; c < columns; ++c) {
            for (int l = 0; l < rows; ++l) {
                colorMap_->data()->setCell(c, l, std::nan(""));
                colorMap_->data()->setAlpha(c, l, 0); // cells the scan did not measure stay blank
            }
        }
        double low = 0.0;
        double high = 0.0;
        bool first = true;
        for (const SensitivityCell& cell : cells_) {
            const int c
                = static_cast<int>(std::find(groups_.begin(), groups_.end(), cell.moduleGroup) - groups_.begin());
            const int row = static_cast<int>(cell.layer - firstRow_);
            colorMap_->data()->setCell(c, row, cell.addedMismatch);
            colorMap_->data()->setAlpha(c, row, 255);
            low = first ? cell.addedMismatch : std::min(low, cell.addedMismatch);
            high = first ? cell.addedMismatch : std::max(high, cell.addedMismatch);
            first = false;
        }
        double floor = 0.0; // the log scale's lower end: smallest positive value, at least high * 1e-4
        for (const SensitivityCell& cell : cells_) {
            if (cell.addedMismatch > 0 && (floor == 0.0 || cell.addedMismatch < floor)) {
                floor = cell.addedMismatch;
            }
        }
        floor = std::max(floor, high * 1e-4);
        logarithmic_ = logScale_->isChecked() && high > 0 && floor < high;
        if (logarithmic_) {
            // Values below the floor clamp to the lowest colour; zero or negative ones (log undefined) take it too
            // through the gradient's NaN handling. Unmeasured cells stay blank: their alpha is 0.
            colorMap_->setDataScaleType(QCPAxis::stLogarithmic);
            colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
            colorMap_->setDataRange(QCPRange(floor, high));
            colorScale_->axis()->setLabel(tr("added mismatch (nats/token, log scale; %1 and below at the bottom colour)")
                                              .arg(floor, 0, 'g', 2));
        } else {
            colorMap_->setDataScaleType(QCPAxis::stLinear);
            colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>::create());
            colorMap_->setDataRange(QCPRange(std::min(0.0, low), high > low ? high : low + 1e-6));
            colorScale_->axis()->setLabel(tr("added mismatch (nats/token)"));
        }
    }
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int c = 0; c < columns; ++c) {
        ticker->addTick(c, QString::fromStdString(groups_[static_cast<size_t>(c)]));
    }
    plot_->xAxis->setTicker(ticker);
    // Every layer labelled up to 40 layers, then every fourth.
    auto layerTicker = QSharedPointer<QCPAxisTickerText>::create();
    const std::int64_t every = layers_ > 40 ? 4 : 1;
    for (std::int64_t layer = firstRow_; layer < layers_; ++layer) {
        if (layer < 0) {
            layerTicker->addTick(static_cast<double>(layer), tr("emb/head"));
        } else if (layer % every == 0) {
            layerTicker->addTick(static_cast<double>(layer), QString::number(layer));
        }
    }
    plot_->yAxis->setTicker(layerTicker);
    plot_->xAxis->setRange(-0.5, std::max(columns, 1) - 0.5);
    plot_->yAxis->setRange(firstRow_ - 0.5, std::max<std::int64_t>(layers_, firstRow_ + 1) - 0.5);

    if (scanId_ == 0) {
        summary_->setText(scans_.empty() ? tr("No sensitivity scans in this workspace yet.") : QString());
    } else {
        const SensitivityScanInfo& scan = scans_[static_cast<size_t>(comboIndex)];
        summary_->setText(tr("%1 layers x %2 groups quantized to %3 one at a time; BF16 unit %4 nats/token")
                              .arg(layers_)
                              .arg(columns)
                              .arg(QString::fromStdString(scan.format))
                              .arg(scan.bf16Unit ? QString::number(*scan.bf16Unit, 'g', 4) : tr("unknown")));
    }
    detail_->setText(tr("Click a cell to see its figures."));
    selectionFrame_->setVisible(false);
    plot_->replot();
}

const SensitivityCell* SensitivityView::cell(std::int64_t layer, int groupColumn) const
{
    if (groupColumn < 0 || groupColumn >= static_cast<int>(groups_.size())) {
        return nullptr;
    }
    const std::string& group = groups_[static_cast<size_t>(groupColumn)];
    for (const SensitivityCell& c : cells_) {
        if (c.layer == layer && c.moduleGroup == group) {
            return &c;
        }
    }
    return nullptr;
}

QString SensitivityView::describeCell(const SensitivityCell& c) const
{
    QString text = tr("%1, %2: +%3 nats/token over BF16 (mismatch %4)")
                       .arg(c.layer < 0 ? tr("Embedding/lm_head") : tr("Layer %1").arg(c.layer))
                       .arg(QString::fromStdString(c.moduleGroup))
                       .arg(c.addedMismatch, 0, 'g', 4)
                       .arg(c.mismatch, 0, 'g', 4);
    if (c.ciLow && c.ciHigh) {
        text += tr(", 95% interval [%1, %2]").arg(*c.ciLow, 0, 'g', 4).arg(*c.ciHigh, 0, 'g', 4);
    }
    for (const SensitivityScanInfo& scan : scans_) {
        if (scan.id == scanId_ && scan.bf16Unit && *scan.bf16Unit > 0) {
            text += tr(", %1x BF16").arg(c.mismatch / *scan.bf16Unit, 0, 'f', 1);
        }
    }
    return text;
}

QString SensitivityView::detailText() const
{
    return detail_->text();
}

QPoint SensitivityView::cellCenter(std::int64_t layer, int groupColumn) const
{
    return QPoint(qRound(plot_->xAxis->coordToPixel(groupColumn)), qRound(plot_->yAxis->coordToPixel(layer)));
}

const SensitivityCell* SensitivityView::cellAtPixel(const QPoint& pixel) const
{
    if (!plot_->axisRect()->rect().contains(pixel)) {
        return nullptr;
    }
    const double x = plot_->xAxis->pixelToCoord(pixel.x());
    const double y = plot_->yAxis->pixelToCoord(pixel.y());
    return cell(static_cast<std::int64_t>(std::lround(y)), static_cast<int>(std::lround(x)));
}

void SensitivityView::onMouseMove(QMouseEvent* event)
{
    const SensitivityCell* c = cellAtPixel(event->pos());
    if (c) {
        QToolTip::showText(event->globalPosition().toPoint(), describeCell(*c), plot_);
    } else {
        QToolTip::hideText();
    }
}

void SensitivityView::onMousePress(QMouseEvent* event)
{
    const SensitivityCell* c = cellAtPixel(event->pos());
    if (!c) {
        return;
    }
    detail_->setText(describeCell(*c));
    const double column
        = static_cast<double>(std::find(groups_.begin(), groups_.end(), c->moduleGroup) - groups_.begin());
    selectionFrame_->topLeft->setCoords(column - 0.5, static_cast<double>(c->layer) - 0.5);
    selectionFrame_->bottomRight->setCoords(column + 0.5, static_cast<double>(c->layer) + 0.5);
    selectionFrame_->setVisible(true);
    plot_->replot();
    emit cellSelected(c->layer, QString::fromStdString(c->moduleGroup));
}

} // namespace mismatch::ui

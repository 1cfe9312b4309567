#include "ui/views/sensitivity_view.h"

#include "ui/plots/glossary_tips.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/empty_state.h"

#include "core/model/config.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QFontMetrics>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
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

const QColor kNotApplicableLines(0xb0, 0xb0, 0xb0);
const QColor kSelectionColor(0xe5, 0x39, 0x35);

// Viridis: perceptually uniform, readable in grey and by colour-blind readers; no white end that could be mistaken
// for a blank (unmeasured) cell. Positions without a value (NaN) are transparent: the hatching or the blank
// background shows there.
QCPColorGradient viridis()
{
    QCPColorGradient gradient;
    gradient.clearColorStops();
    gradient.setColorStopAt(0.0, QColor(0x44, 0x01, 0x54));
    gradient.setColorStopAt(0.25, QColor(0x3b, 0x52, 0x8b));
    gradient.setColorStopAt(0.5, QColor(0x21, 0x91, 0x8c));
    gradient.setColorStopAt(0.75, QColor(0x5e, 0xc9, 0x62));
    gradient.setColorStopAt(1.0, QColor(0xfd, 0xe7, 0x25));
    gradient.setNanHandling(QCPColorGradient::nhNanColor);
    gradient.setNanColor(QColor(0, 0, 0, 0));
    return gradient;
}

// "4.2e-4", "0.012", "1.3": two significant digits in the fewest characters.
QString compactNumber(double value)
{
    QString text = QString::number(value, 'g', 2);
    text.replace(QLatin1String("e-0"), QLatin1String("e-"));
    text.replace(QLatin1String("e+0"), QLatin1String("e"));
    return text;
}

bool isEmbeddingGroup(const std::string& group)
{
    return group == "embed_tokens" || group == "embed_lm_head" || group == "lm_head";
}
} // namespace

bool groupApplies(const std::string& group, std::int64_t layer)
{
    return isEmbeddingGroup(group) ? layer < 0 : layer >= 0;
}

const SensitivityCell* HeatmapPanel::cell(std::int64_t layer, int column) const
{
    if (column < 0 || column >= static_cast<int>(groups.size())) {
        return nullptr;
    }
    const std::string& group = groups[static_cast<size_t>(column)];
    for (const SensitivityCell& c : cells) {
        if (c.layer == layer && c.moduleGroup == group) {
            return &c;
        }
    }
    return nullptr;
}

int HeatmapPanel::column(const std::string& group) const
{
    const auto it = std::find(groups.begin(), groups.end(), group);
    return it == groups.end() ? -1 : static_cast<int>(it - groups.begin());
}

SensitivityView::SensitivityView(QWidget* parent)
    : QWidget(parent)
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Scan:"), this));
    scanBox_ = new QComboBox(this);
    scanBox_->setObjectName("sensitivityScanBox");
    scanBox_->setMinimumWidth(300);
    top->addWidget(scanBox_);
    top->addWidget(new QLabel(tr("Compare with:"), this));
    compareBox_ = new QComboBox(this);
    compareBox_->setObjectName("sensitivityCompareBox");
    compareBox_->setMinimumWidth(200);
    top->addWidget(compareBox_);
    logScale_ = new QCheckBox(tr("Log colour scale"), this);
    logScale_->setObjectName("sensitivityLogScale");
    logScale_->setChecked(true);
    top->addWidget(logScale_);
    top->addStretch(1);
    layout->addLayout(top);
    summary_ = new QLabel(this);
    summary_->setObjectName("sensitivitySummary");
    summary_->setWordWrap(true);
    layout->addWidget(summary_);

    auto* actions = new QHBoxLayout;
    keepButton_ = new QPushButton(tr("Keep Selected in BF16"), this);
    keepButton_->setObjectName("keepInBf16Button");
    keepButton_->setToolTip(tr("Add rules to the recipe editor that keep the selected modules in BF16"));
    buildButton_ = new QPushButton(tr("Build Recipe from This Scan..."), this);
    buildButton_->setObjectName("buildRecipeButton");
    buildButton_->setToolTip(tr("The recipe builder: quantize everything, then keep the most sensitive cells of this "
                                "scan in BF16 until the measured mismatch fits a budget"));
    selectionLabel_ = new QLabel(this);
    selectionLabel_->setObjectName("sensitivitySelection");
    selectionLabel_->setWordWrap(true);
    actions->addWidget(keepButton_);
    actions->addWidget(buildButton_);
    actions->addWidget(selectionLabel_, 1);
    layout->addLayout(actions);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("sensitivityPlot");
    plot_->setMinimumHeight(260);
    plot_->setMouseTracking(true);
    main_.rect = plot_->axisRect();
    main_.rect->axis(QCPAxis::atBottom)->setLabel(tr("module group"));
    main_.rect->axis(QCPAxis::atLeft)->setLabel(tr("layer"));
    main_.rect->axis(QCPAxis::atLeft)->setRangeReversed(true); // layer 0 at the top, as in a model's module list
    main_.rect->axis(QCPAxis::atBottom)->grid()->setVisible(false);
    main_.rect->axis(QCPAxis::atLeft)->grid()->setVisible(false);
    main_.map = new QCPColorMap(main_.rect->axis(QCPAxis::atBottom), main_.rect->axis(QCPAxis::atLeft));
    main_.map->setInterpolate(false);
    colorScale_ = new QCPColorScale(plot_);
    plot_->plotLayout()->addElement(0, 1, colorScale_);
    colorScale_->setType(QCPAxis::atRight);
    colorScale_->axis()->setLabel(tr("added mismatch (nats/token)"));
    colorScale_->setGradient(viridis());
    main_.map->setColorScale(colorScale_);
    main_.map->setGradient(viridis());
    // Keep the colour scale as tall as the heatmap.
    auto* margins = new QCPMarginGroup(plot_);
    main_.rect->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    colorScale_->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    layout->addWidget(plot_, 1);
    addPlotExportMenu(plot_);

    auto* key = new QLabel(tr("Hatched grey: no such module there (not applicable). Blank: not measured yet (a "
                              "partial scan). Click a cell to select it, Ctrl+click to add more."),
        this);
    key->setStyleSheet(QStringLiteral("color: #555"));
    key->setWordWrap(true);
    layout->addWidget(key);
    detail_ = new QLabel(tr("Click a cell to see its figures."), this);
    detail_->setObjectName("sensitivityDetail");
    detail_->setWordWrap(true);
    detail_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(detail_);

    connect(scanBox_, qOverload<int>(&QComboBox::activated), this, [this] {
        selection_.clear();
        showScans();
    });
    connect(compareBox_, qOverload<int>(&QComboBox::activated), this, [this] { showScans(); });
    connect(logScale_, &QCheckBox::toggled, this, [this] { showScans(); });
    connect(plot_, &QCustomPlot::mouseMove, this, &SensitivityView::onMouseMove);
    connect(plot_, &QCustomPlot::mousePress, this, &SensitivityView::onMousePress);
    connect(plot_, &QCustomPlot::afterLayout, this, &SensitivityView::updateCellLabels);
    connect(keepButton_, &QPushButton::clicked, this, [this] {
        if (!selection_.empty()) {
            emit keepInBf16Requested(selectedCells());
        }
    });
    connect(buildButton_, &QPushButton::clicked, this, [this] {
        if (main_.scanId != 0) {
            emit buildRecipeRequested(main_.scanId);
        }
    });
    emptyState_ = new EmptyState(this, page,
        {QStringLiteral("sensitivity"), tr("No sensitivity scans in this workspace yet"),
            tr("This tab will show a layer sensitivity heatmap: each layer's module groups quantized one at a time, "
               "coloured by the mismatch each adds over the BF16 unit, so that you can see which modules to keep "
               "in BF16.<br>Start a scan here, or run <code>mismatch sensitivity</code> on this workspace."),
            tr("Start Sensitivity Scan...")});
    connect(emptyState_, &EmptyState::startRequested, this, &SensitivityView::startRequested);
}

SensitivityView::~SensitivityView() = default;

void SensitivityView::setStore(const store::RunStore* store)
{
    store_ = store;
    main_.scanId = 0;
    selection_.clear();
    compareBox_->clear();
    refresh();
}

void SensitivityView::refresh()
{
    const std::int64_t keep = main_.scanId;
    const QVariant keepCompared = compareBox_->currentData();
    scans_ = store_ ? AnalysisData(*store_).sensitivityScans() : std::vector<SensitivityScanInfo> {};
    const QSignalBlocker block(scanBox_);
    const QSignalBlocker blockCompare(compareBox_);
    scanBox_->clear();
    compareBox_->clear();
    compareBox_->addItem(tr("(no second scan)"), QVariant::fromValue<qlonglong>(0));
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
        compareBox_->addItem(label, QVariant::fromValue<qlonglong>(scan.id));
        if (scan.id == keep) {
            keepIndex = static_cast<int>(i);
        }
    }
    scanBox_->setCurrentIndex(keepIndex);
    emptyState_->setEmpty(scans_.empty());
    const int compareIndex = keepCompared.isValid() ? compareBox_->findData(keepCompared) : 0;
    compareBox_->setCurrentIndex(std::max(compareIndex, 0));
    showScans();
}

bool SensitivityView::selectScan(std::int64_t scanId)
{
    const int index = scanBox_->findData(QVariant::fromValue<qlonglong>(scanId));
    if (index < 0) {
        return false;
    }
    if (scanId != main_.scanId) {
        selection_.clear();
    }
    scanBox_->setCurrentIndex(index);
    showScans();
    return true;
}

bool SensitivityView::compareWith(std::int64_t scanId)
{
    const int index = compareBox_->findData(QVariant::fromValue<qlonglong>(scanId));
    if (index < 0) {
        return false;
    }
    compareBox_->setCurrentIndex(index);
    showScans();
    return true;
}

bool SensitivityView::logarithmic() const
{
    return logarithmic_;
}

const SensitivityScanInfo* SensitivityView::scanInfo(std::int64_t scanId) const
{
    for (const SensitivityScanInfo& scan : scans_) {
        if (scan.id == scanId) {
            return &scan;
        }
    }
    return nullptr;
}

QString SensitivityView::scanModelName() const
{
    const SensitivityScanInfo* scan = scanInfo(main_.scanId);
    return scan ? QString::fromStdString(scan->modelName) : QString();
}

void SensitivityView::fillPanel(HeatmapPanel& panel, std::int64_t scanId)
{
    panel.scanId = scanId;
    panel.cells
        = scanId != 0 && store_ ? AnalysisData(*store_).sensitivityCells(scanId) : std::vector<SensitivityCell> {};
    // The heatmap has a row for every layer from the first to the last: a layer index that no model can have (a
    // workspace written by hand; imports refuse them) would size it, so such cells are left out of the drawing
    // (the report's table still lists them) and the rows stay within num_hidden_layers' limit.
    panel.cells.erase(std::remove_if(panel.cells.begin(), panel.cells.end(),
                          [](const SensitivityCell& cell) {
                              return cell.layer < -1 || cell.layer >= model::ModelConfig::kMaxLayers;
                          }),
        panel.cells.end());
    panel.groups.clear();
    panel.layers = 0;
    panel.firstRow = 0;
    std::vector<std::string> unknown;
    for (const SensitivityCell& cell : panel.cells) {
        panel.layers = std::max(panel.layers, cell.layer + 1);
        panel.firstRow = std::min(panel.firstRow, cell.layer); // -1: the embedding / lm_head cells
        const auto& order = knownGroupOrder();
        if (std::find(order.begin(), order.end(), cell.moduleGroup) == order.end()
            && std::find(unknown.begin(), unknown.end(), cell.moduleGroup) == unknown.end()) {
            unknown.push_back(cell.moduleGroup);
        }
    }
    for (const std::string& group : knownGroupOrder()) {
        if (std::any_of(panel.cells.begin(), panel.cells.end(),
                [&](const SensitivityCell& c) { return c.moduleGroup == group; })) {
            panel.groups.push_back(group);
        }
    }
    std::sort(unknown.begin(), unknown.end());
    panel.groups.insert(panel.groups.end(), unknown.begin(), unknown.end());
}

void SensitivityView::clearPanelItems(HeatmapPanel& panel)
{
    for (QCPItemRect* item : panel.notApplicable) {
        plot_->removeItem(item);
    }
    panel.notApplicable.clear();
    for (auto& [cell, label] : panel.labels) {
        plot_->removeItem(label);
    }
    panel.labels.clear();
}

void SensitivityView::drawPanel(HeatmapPanel& panel, const std::vector<std::int64_t>& rows)
{
    clearPanelItems(panel);
    QCPAxis* xAxis = panel.rect->axis(QCPAxis::atBottom);
    QCPAxis* yAxis = panel.rect->axis(QCPAxis::atLeft);
    const int columns = static_cast<int>(panel.groups.size());
    const std::int64_t firstRow = rows.empty() ? 0 : rows.front();
    const std::int64_t lastRow = rows.empty() ? 0 : rows.back();
    panel.map->data()->clear();
    if (columns > 0 && !rows.empty()) {
        // Cell centres at integer coordinates: column c at x = c, layer l at y = l. Positions without a stored
        // cell are NaN (transparent).
        const int height = static_cast<int>(lastRow - firstRow + 1);
        panel.map->data()->setSize(columns, height);
        panel.map->data()->setRange(QCPRange(0, std::max(columns - 1, 0)),
            QCPRange(static_cast<double>(firstRow), static_cast<double>(lastRow)));
        for (int c = 0; c < columns; ++c) {
            for (int r = 0; r < height; ++r) {
                panel.map->data()->setCell(c, r, std::nan(""));
            }
        }
        for (const SensitivityCell& cell : panel.cells) {
            const int c = panel.column(cell.moduleGroup);
            panel.map->data()->setCell(c, static_cast<int>(cell.layer - firstRow), cell.addedMismatch);
        }
        QFont font = plot_->font();
        font.setPointSizeF(7.5);
        for (std::int64_t layer = firstRow; layer <= lastRow; ++layer) {
            for (int c = 0; c < columns; ++c) {
                const std::string& group = panel.groups[static_cast<size_t>(c)];
                if (!groupApplies(group, layer)) {
                    auto* hatch = new QCPItemRect(plot_);
                    hatch->setClipAxisRect(panel.rect);
                    hatch->topLeft->setAxes(xAxis, yAxis);
                    hatch->bottomRight->setAxes(xAxis, yAxis);
                    hatch->topLeft->setCoords(c - 0.5, static_cast<double>(layer) - 0.5);
                    hatch->bottomRight->setCoords(c + 0.5, static_cast<double>(layer) + 0.5);
                    hatch->setPen(QPen(kNotApplicableLines, 0.5));
                    hatch->setBrush(QBrush(kNotApplicableLines, Qt::BDiagPattern));
                    hatch->setSelectable(false);
                    panel.notApplicable.push_back(hatch);
                }
            }
        }
        for (const SensitivityCell& cell : panel.cells) {
            auto* label = new QCPItemText(plot_);
            label->setClipAxisRect(panel.rect);
            label->position->setAxes(xAxis, yAxis);
            label->position->setCoords(panel.column(cell.moduleGroup), static_cast<double>(cell.layer));
            label->setPositionAlignment(Qt::AlignCenter);
            label->setFont(font);
            label->setText(compactNumber(cell.addedMismatch));
            label->setSelectable(false);
            label->setVisible(false); // updateCellLabels() decides once the cell size is known
            panel.labels.emplace_back(&cell, label);
        }
    }
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (int c = 0; c < columns; ++c) {
        ticker->addTick(c, QString::fromStdString(panel.groups[static_cast<size_t>(c)]));
    }
    xAxis->setTicker(ticker);
    // Every layer labelled up to 40 layers, then every fourth.
    auto layerTicker = QSharedPointer<QCPAxisTickerText>::create();
    const std::int64_t every = lastRow > 40 ? 4 : 1;
    for (std::int64_t layer = firstRow; layer <= lastRow && !rows.empty(); ++layer) {
        if (layer < 0) {
            layerTicker->addTick(static_cast<double>(layer), tr("emb/head"));
        } else if (layer % every == 0) {
            layerTicker->addTick(static_cast<double>(layer), QString::number(layer));
        }
    }
    yAxis->setTicker(layerTicker);
    xAxis->setRange(-0.5, std::max(columns, 1) - 0.5);
    yAxis->setRange(static_cast<double>(firstRow) - 0.5, static_cast<double>(std::max(lastRow, firstRow)) + 0.5);
}

void SensitivityView::showScans()
{
    const int index = scanBox_->currentIndex();
    fillPanel(main_, index >= 0 && index < static_cast<int>(scans_.size()) ? scans_[static_cast<size_t>(index)].id : 0);
    const std::int64_t comparedId = compareBox_->currentData().toLongLong();
    const bool comparing = comparedId != 0 && main_.scanId != 0;
    // The second panel: created when asked for, removed (with its axes, map and items) when not.
    if (!comparing && compared_) {
        clearPanelItems(*compared_);
        plot_->removePlottable(compared_->map);
        plot_->plotLayout()->remove(compared_->rect);
        plot_->plotLayout()->take(colorScale_);
        plot_->plotLayout()->simplify();
        plot_->plotLayout()->addElement(0, 1, colorScale_);
        compared_.reset();
    } else if (comparing && !compared_) {
        compared_ = std::make_unique<HeatmapPanel>();
        plot_->plotLayout()->take(colorScale_);
        plot_->plotLayout()->simplify();
        compared_->rect = new QCPAxisRect(plot_);
        plot_->plotLayout()->addElement(0, 1, compared_->rect);
        plot_->plotLayout()->addElement(0, 2, colorScale_);
        compared_->rect->axis(QCPAxis::atBottom)->setLabel(tr("module group"));
        compared_->rect->axis(QCPAxis::atLeft)->setRangeReversed(true);
        compared_->rect->axis(QCPAxis::atBottom)->grid()->setVisible(false);
        compared_->rect->axis(QCPAxis::atLeft)->grid()->setVisible(false);
        compared_->rect->axis(QCPAxis::atTop)->setVisible(true);
        compared_->rect->axis(QCPAxis::atTop)->setTicks(false);
        compared_->rect->axis(QCPAxis::atTop)->setTickLabels(false);
        compared_->rect->axis(QCPAxis::atTop)->setBasePen(Qt::NoPen);
        compared_->map
            = new QCPColorMap(compared_->rect->axis(QCPAxis::atBottom), compared_->rect->axis(QCPAxis::atLeft));
        compared_->map->setInterpolate(false);
        compared_->map->setGradient(viridis());
        compared_->map->setColorScale(colorScale_);
        auto* margins = colorScale_->marginGroup(QCP::msTop);
        compared_->rect->setMarginGroup(QCP::msBottom | QCP::msTop, margins);
    }
    if (compared_) {
        fillPanel(*compared_, comparedId);
    }
    // Both panels show the same rows so that a layer reads across.
    std::int64_t firstRow = main_.firstRow;
    std::int64_t lastRow = main_.layers - 1;
    if (compared_) {
        firstRow = std::min(firstRow, compared_->firstRow);
        lastRow = std::max(lastRow, compared_->layers - 1);
    }
    std::vector<std::int64_t> rows;
    for (std::int64_t row = firstRow; row <= lastRow; ++row) {
        rows.push_back(row);
    }
    drawPanel(main_, rows);
    main_.rect->axis(QCPAxis::atTop)->setVisible(compared_ != nullptr);
    main_.rect->axis(QCPAxis::atTop)->setTicks(false);
    main_.rect->axis(QCPAxis::atTop)->setTickLabels(false);
    main_.rect->axis(QCPAxis::atTop)->setBasePen(Qt::NoPen);
    if (compared_) {
        drawPanel(*compared_, rows);
        const SensitivityScanInfo* a = scanInfo(main_.scanId);
        const SensitivityScanInfo* b = scanInfo(compared_->scanId);
        main_.rect->axis(QCPAxis::atTop)
            ->setLabel(a ? tr("scan #%1 (%2)").arg(a->id).arg(QString::fromStdString(a->format)) : QString());
        compared_->rect->axis(QCPAxis::atTop)
            ->setLabel(b ? tr("scan #%1 (%2)").arg(b->id).arg(QString::fromStdString(b->format)) : QString());
    }

    fitColourScale();

    if (main_.scanId == 0) {
        summary_->setText(scans_.empty() ? tr("No sensitivity scans in this workspace yet.") : QString());
    } else {
        const SensitivityScanInfo* scan = scanInfo(main_.scanId);
        // The KV cells take the scan's KV format (--kv-format), not the weights' format.
        const bool kvCells = std::find(main_.groups.begin(), main_.groups.end(), "kv") != main_.groups.end();
        const QString kvFormat = scan && kvCells ? QString::fromStdString(scan->kvFormat) : QString();
        QString text = tr("%1 layers x %2 groups quantized to %3%4 one at a time; BF16 unit %5 nats/token")
                           .arg(main_.layers)
                           .arg(main_.groups.size())
                           .arg(scan ? QString::fromStdString(scan->format) : QString())
                           .arg(kvFormat.isEmpty() ? QString() : tr(" (KV cells to %1)").arg(kvFormat))
                           .arg(scan && scan->bf16Unit ? QString::number(*scan->bf16Unit, 'g', 4) : tr("unknown"));
        if (compared_) {
            text += tr(". Beside it scan #%1, on the same colour scale").arg(compared_->scanId);
        }
        summary_->setText(text + QStringLiteral(". ") + scaleNote_);
    }
    // Cells selected in a scan that no longer has them are dropped.
    for (auto it = selection_.begin(); it != selection_.end();) {
        const int column = main_.column(it->second);
        it = column >= 0 && main_.cell(it->first, column) ? std::next(it) : selection_.erase(it);
    }
    buildButton_->setEnabled(main_.scanId != 0);
    detail_->setText(tr("Click a cell to see its figures."));
    updateSelectionFrames();
    plot_->replot();
}

// The colour scale over every cell shown, and each cell's value in a colour readable on its cell. The scale's title
// stays short (it is drawn along the bar and must fit its height on a small window); what the bottom colour stands
// for is in the summary line and in the tooltip over the scale.
void SensitivityView::fitColourScale()
{
    double low = 0.0;
    double high = 0.0;
    double floor = 0.0; // the log scale's lower end: smallest positive value, at least high * 1e-4
    bool first = true;
    for (const HeatmapPanel* panel : std::initializer_list<const HeatmapPanel*> {&main_, compared_.get()}) {
        if (!panel) {
            continue;
        }
        for (const SensitivityCell& cell : panel->cells) {
            low = first ? cell.addedMismatch : std::min(low, cell.addedMismatch);
            high = first ? cell.addedMismatch : std::max(high, cell.addedMismatch);
            first = false;
            if (cell.addedMismatch > 0 && (floor == 0.0 || cell.addedMismatch < floor)) {
                floor = cell.addedMismatch;
            }
        }
    }
    floor = std::max(floor, high * 1e-4);
    logarithmic_ = logScale_->isChecked() && high > 0 && floor < high;
    if (logarithmic_) {
        // Values below the floor clamp to the lowest colour (zero or negative ones too).
        colorScale_->setDataScaleType(QCPAxis::stLogarithmic);
        colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
        scaleLow_ = floor;
        scaleHigh_ = high;
        colorScale_->axis()->setLabel(tr("added mismatch (nats/token, log scale)"));
        scaleNote_ = tr("Log colour scale: %1 nats/token and below at the bottom colour.").arg(floor, 0, 'g', 2);
    } else {
        colorScale_->setDataScaleType(QCPAxis::stLinear);
        colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>::create());
        scaleLow_ = std::min(0.0, low);
        scaleHigh_ = high > scaleLow_ ? high : scaleLow_ + 1e-6;
        colorScale_->axis()->setLabel(tr("added mismatch (nats/token)"));
        scaleNote_
            = tr("Linear colour scale from %1 to %2 nats/token.").arg(scaleLow_, 0, 'g', 2).arg(scaleHigh_, 0, 'g', 2);
    }
    colorScale_->setDataRange(QCPRange(scaleLow_, scaleHigh_));
    // Each cell's value in black on light colours and white on dark ones (viridis grows lighter along the scale:
    // purple, blue, green, yellow).
    for (HeatmapPanel* panel : std::initializer_list<HeatmapPanel*> {&main_, compared_.get()}) {
        if (!panel) {
            continue;
        }
        for (auto& [cell, label] : panel->labels) {
            const double v = cell->addedMismatch;
            const double position = v <= scaleLow_ ? 0.0
                : logarithmic_                     ? std::log(v / scaleLow_) / std::log(scaleHigh_ / scaleLow_)
                                                   : (v - scaleLow_) / (scaleHigh_ - scaleLow_);
            label->setColor(position < 0.55 ? Qt::white : Qt::black);
        }
    }
}

void SensitivityView::updateCellLabels()
{
    // Runs after every layout, before drawing: a value is written in its cell when it fits there.
    for (HeatmapPanel* panel : std::initializer_list<HeatmapPanel*> {&main_, compared_.get()}) {
        if (!panel || panel->labels.empty()) {
            continue;
        }
        QCPAxis* xAxis = panel->rect->axis(QCPAxis::atBottom);
        QCPAxis* yAxis = panel->rect->axis(QCPAxis::atLeft);
        const double cellWidth = std::abs(xAxis->coordToPixel(1.0) - xAxis->coordToPixel(0.0));
        const double cellHeight = std::abs(yAxis->coordToPixel(1.0) - yAxis->coordToPixel(0.0));
        for (auto& [cell, label] : panel->labels) {
            const QFontMetrics metrics(label->font());
            const bool fits
                = metrics.horizontalAdvance(label->text()) + 4 <= cellWidth && metrics.height() <= cellHeight;
            label->setVisible(fits);
        }
    }
}

int SensitivityView::writtenCellCount() const
{
    int count = 0;
    for (const HeatmapPanel* panel : std::initializer_list<const HeatmapPanel*> {&main_, compared_.get()}) {
        if (panel) {
            for (const auto& [cell, label] : panel->labels) {
                count += label->visible() ? 1 : 0;
            }
        }
    }
    return count;
}

const SensitivityCell* SensitivityView::cell(std::int64_t layer, int groupColumn) const
{
    return main_.cell(layer, groupColumn);
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
    const bool compared = compared_ && !compared_->cells.empty() && &c >= compared_->cells.data()
        && &c < compared_->cells.data() + compared_->cells.size();
    const SensitivityScanInfo* scan = scanInfo(compared ? compared_->scanId : main_.scanId);
    if (compared) {
        text = tr("Scan #%1: %2").arg(compared_->scanId).arg(text);
    }
    if (scan && scan->bf16Unit && *scan->bf16Unit > 0) {
        text += tr(", %1x BF16").arg(c.mismatch / *scan->bf16Unit, 0, 'f', 1);
    }
    return text;
}

QString SensitivityView::detailText() const
{
    return detail_->text();
}

QPoint SensitivityView::cellCenter(std::int64_t layer, int groupColumn) const
{
    return QPoint(qRound(main_.rect->axis(QCPAxis::atBottom)->coordToPixel(groupColumn)),
        qRound(main_.rect->axis(QCPAxis::atLeft)->coordToPixel(static_cast<double>(layer))));
}

const SensitivityCell* SensitivityView::cellAtPixel(const QPoint& pixel) const
{
    if (!main_.rect->rect().contains(pixel)) {
        return nullptr;
    }
    const double x = main_.rect->axis(QCPAxis::atBottom)->pixelToCoord(pixel.x());
    const double y = main_.rect->axis(QCPAxis::atLeft)->pixelToCoord(pixel.y());
    return cell(static_cast<std::int64_t>(std::lround(y)), static_cast<int>(std::lround(x)));
}

void SensitivityView::onMouseMove(QMouseEvent* event)
{
    const SensitivityCell* c = cellAtPixel(event->pos());
    if (!c && compared_ && compared_->rect->rect().contains(event->pos())) {
        const double x = compared_->rect->axis(QCPAxis::atBottom)->pixelToCoord(event->pos().x());
        const double y = compared_->rect->axis(QCPAxis::atLeft)->pixelToCoord(event->pos().y());
        c = compared_->cell(static_cast<std::int64_t>(std::lround(y)), static_cast<int>(std::lround(x)));
    }
    if (c) {
        QToolTip::showText(event->globalPosition().toPoint(), describeCell(*c), plot_);
    } else if (colorScale_->outerRect().contains(event->pos())) {
        const QString scale = colorScale_->axis()->label() + QStringLiteral("\n") + scaleNote_;
        QToolTip::showText(event->globalPosition().toPoint(),
            withGlossaryTip(scale, glossaryTipFor(colorScale_->axis()->label())), plot_);
    } else if (const QString tip = axisGlossaryTipAt(plot_, event->pos()); !tip.isEmpty()) {
        QToolTip::showText(event->globalPosition().toPoint(), tip, plot_); // an axis title: its glossary text
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
    const auto key = std::make_pair(c->layer, c->moduleGroup);
    if (event->modifiers() & (Qt::ControlModifier | Qt::ShiftModifier)) {
        if (!selection_.erase(key)) {
            selection_.insert(key);
        }
    } else {
        selection_ = {key};
    }
    detail_->setText(describeCell(*c));
    updateSelectionFrames();
    plot_->replot();
    emit cellSelected(c->layer, QString::fromStdString(c->moduleGroup));
}

std::vector<std::pair<std::int64_t, std::string>> SensitivityView::selectedCells() const
{
    return {selection_.begin(), selection_.end()};
}

void SensitivityView::setCellSelected(std::int64_t layer, const std::string& group, bool selected)
{
    if (selected && main_.column(group) >= 0 && main_.cell(layer, main_.column(group))) {
        selection_.insert({layer, group});
    } else {
        selection_.erase({layer, group});
    }
    updateSelectionFrames();
    plot_->replot();
}

void SensitivityView::clearSelection()
{
    selection_.clear();
    updateSelectionFrames();
    plot_->replot();
}

void SensitivityView::updateSelectionFrames()
{
    for (QCPItemRect* frame : selectionFrames_) {
        plot_->removeItem(frame);
    }
    selectionFrames_.clear();
    for (const auto& [layer, group] : selection_) {
        const double column = main_.column(group);
        auto* frame = new QCPItemRect(plot_);
        frame->setClipAxisRect(main_.rect);
        frame->topLeft->setAxes(main_.rect->axis(QCPAxis::atBottom), main_.rect->axis(QCPAxis::atLeft));
        frame->bottomRight->setAxes(main_.rect->axis(QCPAxis::atBottom), main_.rect->axis(QCPAxis::atLeft));
        frame->topLeft->setCoords(column - 0.5, static_cast<double>(layer) - 0.5);
        frame->bottomRight->setCoords(column + 0.5, static_cast<double>(layer) + 0.5);
        frame->setPen(QPen(kSelectionColor, 3));
        frame->setBrush(Qt::NoBrush);
        frame->setSelectable(false);
        selectionFrames_.push_back(frame);
    }
    keepButton_->setEnabled(!selection_.empty());
    selectionLabel_->setText(selection_.empty()
            ? tr("Select cells (Ctrl+click for several) to keep their modules in BF16.")
            : tr("%n cell(s) selected", nullptr, static_cast<int>(selection_.size())));
}

} // namespace mismatch::ui

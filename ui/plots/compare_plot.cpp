#include "ui/plots/compare_plot.h"

#include "core/store/evaluation_store.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include <algorithm>
#include <initializer_list>

namespace mismatch::ui {

namespace {
constexpr int kReplotDelayMs = 40;
// Colour-blind-safe qualitative palette (Okabe-Ito), repeated with dashes beyond eight runs.
const QColor kPalette[]
    = {QColor(0x00, 0x72, 0xb2), QColor(0xe6, 0x9f, 0x00), QColor(0x00, 0x9e, 0x73), QColor(0xd5, 0x5e, 0x00),
        QColor(0xcc, 0x79, 0xa7), QColor(0x56, 0xb4, 0xe9), QColor(0x00, 0x00, 0x00), QColor(0xf0, 0xe4, 0x42)};
} // namespace

ComparePlot::ComparePlot(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Measure:"), this));
    measureBox_ = new QComboBox(this);
    measureBox_->setObjectName("compareMeasureBox");
    measureBox_->addItems({tr("KL(mu || pi), full vocabulary"), tr("k1 (sampled token)"), tr("k3 (sampled token)"),
        tr("multiple of the BF16 unit"), tr("quality Q at evaluations")});
    top->addWidget(measureBox_);
    logScale_ = new QCheckBox(tr("Logarithmic scale"), this);
    logScale_->setObjectName("compareLogScale");
    logScale_->setToolTip(tr("Mismatch spans orders of magnitude (BF16 unit to hundreds of times it)"));
    top->addWidget(logScale_);
    top->addWidget(new QLabel(tr("Budget:"), this));
    budgetBox_ = new QComboBox(this);
    budgetBox_->setObjectName("compareBudgetBox");
    budgetBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    budgetBox_->setMinimumContentsLength(16); // the whole entry in its list and tooltip; the row fits 1024 px
    budgetBox_->setToolTip(tr("A calibration's budget at one of its steps (the bracket's admission threshold), drawn "
                              "across the runs on the full-KL measure"));
    top->addWidget(budgetBox_);
    budgetNote_ = new QLabel(tr("(the budget is a full-KL threshold: choose that measure to see it)"), this);
    budgetNote_->setObjectName("compareBudgetNote");
    budgetNote_->setStyleSheet(QStringLiteral("color: #666"));
    budgetNote_->setWordWrap(true); // wraps rather than widening the window
    top->addWidget(budgetNote_);
    hint_ = new QLabel(tr("Select several runs in the run table (Ctrl+click) to overlay them."), this);
    hint_->setWordWrap(true);
    top->addWidget(hint_, 1);
    top->addStretch(1);
    layout->addLayout(top);
    readout_ = makeReadout(this, QStringLiteral("compareReadout"));
    layout->addWidget(readout_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("comparePlot");
    plot_->setMinimumHeight(220);
    plot_->xAxis->setLabel(tr("step"));
    plot_->legend->setFont(QFont(font().family(), 8));
    placeLegendAbove(
        plot_, [this] { replot(); }, 4);
    crosshair_ = new PlotCrosshair(plot_, {plot_->axisRect()}, readout_, tr("step"));
    enableZoomAndReset(plot_, [this] { replot(); });
    layout->addWidget(plot_, 1);
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);
    replotTimer_.setSingleShot(true);
    replotTimer_.setInterval(kReplotDelayMs);
    connect(&replotTimer_, &QTimer::timeout, this, &ComparePlot::replot);
    connect(logScale_, &QCheckBox::toggled, this, [this](bool on) {
        setLogScale(plot_->yAxis, on);
        scheduleReplot();
    });
    connect(measureBox_, qOverload<int>(&QComboBox::activated), this,
        [this](int index) { setMeasure(static_cast<Measure>(index)); });
    connect(budgetBox_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        drawBudget();
        scheduleReplot();
    });
    budgetLine_ = new QCPItemStraightLine(plot_);
    budgetLine_->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 1.5, Qt::DashLine));
    budgetLabel_ = new QCPItemText(plot_);
    budgetLabel_->setColor(QColor(0x6a, 0x1b, 0x9a));
    budgetLabel_->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
    budgetLabel_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    budgetLabel_->position->setTypeY(QCPItemPosition::ptPlotCoords);
    for (QCPAbstractItem* item : std::initializer_list<QCPAbstractItem*> {budgetLine_, budgetLabel_}) {
        item->setClipToAxisRect(true);
        item->setSelectable(false);
    }
    fillBudgetChoices(budgetBox_, store_);
    rebuild();
}

void ComparePlot::setStore(store::RunStore* store)
{
    store_ = store;
    runs_.clear();
    fillBudgetChoices(budgetBox_, store_); // "none" chosen
    rebuild();
}

bool ComparePlot::setBudget(std::int64_t calibrationId, std::int64_t step)
{
    fillBudgetChoices(budgetBox_, store_); // a calibration stored since is offered
    const int row = budgetChoiceRow(budgetBox_, calibrationId, step);
    if (row >= 0) {
        budgetBox_->setCurrentIndex(row);
    }
    drawBudget(); // without the row: "none", the list was filled anew
    return row >= 0;
}

std::optional<double> ComparePlot::budgetThreshold() const
{
    const int row = budgetBox_->currentIndex();
    if (row <= 0 || measure_ != FullKl) {
        return std::nullopt;
    }
    return budgetBox_->itemData(row, Qt::UserRole + 2).toDouble();
}

void ComparePlot::drawBudget()
{
    const std::optional<double> threshold = budgetThreshold();
    budgetNote_->setVisible(budgetBox_->currentIndex() > 0 && !threshold);
    budgetLine_->setVisible(threshold.has_value());
    budgetLabel_->setVisible(threshold.has_value());
    if (!threshold) {
        return;
    }
    budgetLine_->point1->setCoords(0.0, *threshold);
    budgetLine_->point2->setCoords(1.0, *threshold);
    budgetLabel_->position->setCoords(0.99, *threshold);
    budgetLabel_->setText(tr("budget %1 (%2)").arg(*threshold, 0, 'g', 3).arg(budgetBox_->currentText().section(':', 0, 0)));
}

void ComparePlot::setRuns(const std::vector<std::pair<std::int64_t, QString>>& runs)
{
    runs_ = runs;
    rebuild();
}

void ComparePlot::setMeasure(Measure measure)
{
    measure_ = measure;
    measureBox_->setCurrentIndex(measure);
    rebuild();
}

int ComparePlot::curveCount() const
{
    return plot_->graphCount();
}

int ComparePlot::pointCount(std::int64_t runId) const
{
    const auto it = graphOfRun_.find(runId);
    return it == graphOfRun_.end() ? 0 : plot_->graph(it->second)->dataCount();
}

void ComparePlot::rebuild()
{
    crosshair_->hide();
    plot_->clearGraphs();
    cursors_.clear();
    graphOfRun_.clear();
    static const char* labels[]
        = {"mismatch KL (nats/token)", "k1 (nats/token)", "k3 (nats/token)", "x BF16 unit", "quality Q (nats/token)"};
    plot_->yAxis->setLabel(tr(labels[measure_]));
    int index = 0;
    for (const auto& [runId, name] : runs_) {
        QCPGraph* graph = plot_->addGraph();
        graph->setName(tr("%1 (#%2)").arg(name).arg(runId));
        const QColor color = kPalette[index % 8];
        graph->setPen(QPen(color, 2, index < 8 ? Qt::SolidLine : Qt::DashLine));
        if (measure_ == Quality) {
            graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, color, 7));
        }
        graphOfRun_[runId] = index++;
        cursors_[runId] = 0;
    }
    hint_->setVisible(runs_.size() < 2);
    // The budgets as stored now (a calibration may have finished since), the chosen one kept.
    const qlonglong chosenId = budgetBox_->currentData(Qt::UserRole).toLongLong();
    const qlonglong chosenStep = budgetBox_->currentData(Qt::UserRole + 1).toLongLong();
    fillBudgetChoices(budgetBox_, store_);
    {
        const QSignalBlocker block(budgetBox_);
        budgetBox_->setCurrentIndex(std::max(0, budgetChoiceRow(budgetBox_, chosenId, chosenStep)));
    }
    drawBudget();
    tail();
    scheduleReplot();
}

void ComparePlot::tail()
{
    if (!store_) {
        return;
    }
    bool changed = false;
    for (const auto& [runId, name] : runs_) {
        QCPGraph* graph = plot_->graph(graphOfRun_[runId]);
        if (measure_ == Quality) {
            const auto evaluations = store::evaluations(*store_, runId);
            if (static_cast<int>(evaluations.size()) != graph->dataCount()) {
                QVector<double> x, y;
                for (const auto& e : evaluations) {
                    x.append(static_cast<double>(e.step));
                    y.append(e.quality);
                }
                graph->setData(x, y, true);
                changed = true;
            }
            continue;
        }
        const auto steps = store_->stepsAfter(runId, cursors_[runId]);
        for (const auto& s : steps) {
            const std::optional<double> value = measure_ == FullKl ? s.mismatchKl
                : measure_ == K1                                   ? s.k1
                : measure_ == K3                                   ? s.k3
                                                                   : s.bf16Multiple;
            // A step drawn already comes again when a followed log's later line adds to it (its row written anew).
            graph->data()->remove(static_cast<double>(s.step));
            if (value) {
                graph->addData(static_cast<double>(s.step), *value);
            }
            cursors_[runId] = s.rowId;
        }
        changed = changed || !steps.empty();
    }
    if (changed) {
        scheduleReplot();
    }
}

void ComparePlot::scheduleReplot()
{
    if (!replotTimer_.isActive()) {
        replotTimer_.start();
    }
}

void ComparePlot::replot()
{
    plot_->rescaleAxes(true); // the runs shown (a legend click hides one)
    plot_->xAxis->scaleRange(1.04, plot_->xAxis->range().center());
    if (const std::optional<double> threshold = budgetThreshold()) {
        // The budget in view, however far from the runs.
        QCPRange range = plot_->yAxis->range();
        range.expand(*threshold);
        plot_->yAxis->setRange(range);
    }
    if (plot_->yAxis->scaleType() == QCPAxis::stLogarithmic) {
        plot_->yAxis->setRange(plot_->yAxis->range().lower / 1.5, plot_->yAxis->range().upper * 1.5);
    } else {
        plot_->yAxis->scaleRange(1.1, plot_->yAxis->range().center());
    }
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace mismatch::ui

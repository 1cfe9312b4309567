#include "ui/views/budget_view.h"

#include "ui/plots/glossary_tips.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/empty_state.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <set>

namespace mismatch::ui {

namespace {
enum Graph { Passed, Failed, Undecided };
const QColor kPassColor(0x2e, 0x7d, 0x32);
const QColor kFailColor(0xc6, 0x28, 0x28);
const QColor kUndecidedColor(0xef, 0x8a, 0x17);

// The point's mismatch, with the training mean beside it in the tooltip (schema 10; before, the mismatch was that
// training mean).
QStandardItem* mismatchItem(const mismatch::report::CalibrationPoint& p)
{
    auto* item = new QStandardItem(QString::number(p.mismatch, 'g', 4));
    item->setToolTip(p.trainingMismatch
            ? QObject::tr("Measured as admit screens it: each seed's checkpoint at step %1 under the calibration's "
                          "protocol. Mean training-step mismatch over steps 1..%1: %2")
                  .arg(p.step)
                  .arg(*p.trainingMismatch, 0, 'g', 4)
            : QObject::tr("The mean training-step mismatch over steps 1..%1 (a calibration made before points were "
                          "measured on their checkpoints)")
                  .arg(p.step));
    return item;
}

QColor colorOf(const mismatch::report::CalibrationPoint& p)
{
    return p.failed() ? kFailColor : p.undecided() ? kUndecidedColor : kPassColor;
}
// The failure rule's relative quality threshold when a calibration stored none (spec: fail at a rise of 20%).
constexpr double kDefaultFailRise = 0.20;
} // namespace

BudgetView::BudgetView(QWidget* parent)
    : QWidget(parent)
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Calibration:"), this));
    calibrationBox_ = new QComboBox(this);
    calibrationBox_->setObjectName("calibrationBox");
    // A calibration's entry names its student's directory: shown whole where there is room; on a narrow window the
    // list shrinks (its full text in the tooltip) rather than widening the window.
    calibrationBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    calibrationBox_->setMinimumContentsLength(36);
    calibrationBox_->setMinimumWidth(260);
    top->addWidget(calibrationBox_, 1);
    top->addWidget(new QLabel(tr("Student step:"), this));
    stepBox_ = new QComboBox(this);
    stepBox_->setObjectName("calibrationStepBox");
    top->addWidget(stepBox_);
    logScale_ = new QCheckBox(tr("Log mismatch axis"), this);
    logScale_->setObjectName("budgetLogScale");
    logScale_->setChecked(true);
    top->addWidget(logScale_);
    top->addStretch(1);
    layout->addLayout(top);
    // The summary on a line of its own: beside the lists it was squeezed into a narrow column of many lines.
    summary_ = new QLabel(this);
    summary_->setObjectName("budgetSummary");
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    banner_ = new QLabel(this);
    banner_->setObjectName("budgetFlagBanner");
    banner_->setWordWrap(true);
    banner_->setStyleSheet(QStringLiteral(
        "background: #fff3cd; color: #5d4200; border: 1px solid #e0b84c; border-radius: 3px; padding: 4px 8px"));
    banner_->setVisible(false);
    layout->addWidget(banner_);
    readout_ = makeReadout(this, QStringLiteral("budgetReadout"),
        tr("Hover a point to read it; drag or wheel to zoom, double-click to reset."));
    layout->addWidget(readout_);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("budgetPlot");
    plot_->setMinimumHeight(240);
    plot_->xAxis->setLabel(tr("mismatch (nats/token)"));
    // Q is the held-out teacher KL: higher is worse, so the failure line is above zero. The title is short enough
    // for the axis of a 700 px window (QCustomPlot draws a longer one past the axis' ends, cut by the plot's edges).
    plot_->yAxis->setLabel(tr("quality change vs BF16 (%, up = worse)"));
    plot_->legend->setFont(QFont(font().family(), 8));

    bracket_ = new QCPItemRect(plot_);
    bracket_->setPen(Qt::NoPen);
    bracket_->setBrush(QColor(255, 193, 7, 70));
    bracket_->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
    bracket_->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
    bracket_->setLayer("background");
    thresholdLine_ = new QCPItemStraightLine(plot_);
    thresholdLine_->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 1.5, Qt::DashLine));
    failLine_ = new QCPItemStraightLine(plot_);
    failLine_->setPen(QPen(QColor(0x75, 0x75, 0x75), 1, Qt::DotLine));
    // Horizontal: x in axis-rect fractions, so that it also works on a logarithmic mismatch axis.
    failLine_->point1->setTypeX(QCPItemPosition::ptAxisRectRatio);
    failLine_->point2->setTypeX(QCPItemPosition::ptAxisRectRatio);

    bracketLabel_ = new QCPItemText(plot_);
    bracketLabel_->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    bracketLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    bracketLabel_->setPadding(QMargins(6, 0, 0, 0));
    bracketLabel_->setColor(QColor(0x8d, 0x6e, 0x00));
    thresholdLabel_ = new QCPItemText(plot_);
    thresholdLabel_->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
    thresholdLabel_->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
    thresholdLabel_->setRotation(-90);
    thresholdLabel_->setColor(QColor(0x6a, 0x1b, 0x9a));
    thresholdLabel_->setText(tr("admission threshold "));
    failLabel_ = new QCPItemText(plot_);
    failLabel_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    failLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    failLabel_->setColor(QColor(0x75, 0x75, 0x75));

    QCPGraph* passed = plot_->addGraph();
    passed->setName(tr("passed"));
    passed->setLineStyle(QCPGraph::lsNone);
    passed->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, kPassColor, 9));
    QCPGraph* failed = plot_->addGraph();
    failed->setName(tr("failed"));
    failed->setLineStyle(QCPGraph::lsNone);
    failed->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, QPen(kFailColor, 3), QBrush(), 11));
    // Undecided (the interval of the change contains the failure line): a third shape, not a colour alone.
    QCPGraph* undecided = plot_->addGraph();
    undecided->setName(tr("undecided"));
    undecided->setLineStyle(QCPGraph::lsNone);
    undecided->setScatterStyle(
        QCPScatterStyle(QCPScatterStyle::ssTriangle, QPen(kUndecidedColor, 2), QBrush(Qt::white), 11));
    placeLegendAbove(plot_);
    enableZoomAndReset(plot_, [this] { fitView(); });
    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) { hoverAt(event->pos()); });
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);

    pointModel_ = new QStandardItemModel(this);
    table_ = new QTableView(this);
    table_->setObjectName("calibrationTable");
    table_->setModel(pointModel_);
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    // One line a row, elided (full texts in the tooltips): wrapped cells in rows of one line's height were cut.
    table_->setWordWrap(false);
    // Result, what the table is read for, takes the room left; the figures are as wide as their contents (short
    // headers, the long wording in their tooltips) and a long run name is elided, so that Result stays on screen.
    table_->horizontalHeader()->setStretchLastSection(true);
    addTableExportMenu(table_);

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(plot_);
    split->addWidget(table_);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);

    connect(calibrationBox_, qOverload<int>(&QComboBox::activated), this, [this] {
        stepBox_->clear();
        showCalibration();
    });
    connect(stepBox_, qOverload<int>(&QComboBox::activated), this, [this] { showCalibration(); });
    connect(logScale_, &QCheckBox::toggled, this, [this] { showCalibration(); });
    emptyState_ = new EmptyState(this, page,
        {QStringLiteral("budget"), tr("No calibrations in this workspace yet"),
            tr("This tab will show a student's mismatch budget: calibration runs at increasing mismatch, each "
               "passing or failing the quality rule against the BF16 baseline, the bracket between the largest "
               "passing and the smallest failing mismatch, and the admission threshold it sets.<br>Start a "
               "calibration here, or run <code>mismatch calibrate</code> on this workspace."),
            tr("Start Calibration...")});
    connect(emptyState_, &EmptyState::startRequested, this, &BudgetView::startRequested);
}

void BudgetView::setStore(const store::RunStore* store)
{
    store_ = store;
    calibrationBox_->clear();
    refresh();
}

void BudgetView::refresh()
{
    const QVariant keep = calibrationBox_->currentData();
    calibrations_ = store_ ? AnalysisData(*store_).calibrations() : std::vector<CalibrationInfo> {};
    {
        const QSignalBlocker block(calibrationBox_);
        calibrationBox_->clear();
        int widest = 0;
        for (const CalibrationInfo& c : calibrations_) {
            const QString text = tr("#%1 %2 (student %3)")
                                     .arg(c.id)
                                     .arg(QString::fromStdString(c.name), QString::fromStdString(c.student));
            calibrationBox_->addItem(text, QVariant::fromValue<qlonglong>(c.id));
            calibrationBox_->setItemData(calibrationBox_->count() - 1, text, Qt::ToolTipRole);
            widest = std::max(widest, calibrationBox_->fontMetrics().horizontalAdvance(text));
        }
        // No wider than its longest entry (with room for the arrow): the rest of the row stays free.
        calibrationBox_->setMaximumWidth(std::max(calibrationBox_->minimumWidth(), widest + 48));
        const int index = keep.isValid() ? calibrationBox_->findData(keep) : -1;
        calibrationBox_->setCurrentIndex(index >= 0 ? index : calibrationBox_->count() - 1);
    }
    emptyState_->setEmpty(calibrations_.empty());
    showCalibration();
}

bool BudgetView::selectCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step)
{
    const int index = calibrationBox_->findData(QVariant::fromValue<qlonglong>(calibrationId));
    if (index < 0) {
        return false;
    }
    calibrationBox_->setCurrentIndex(index);
    stepBox_->clear();
    showCalibration();
    if (step) {
        const int stepIndex = stepBox_->findData(QVariant::fromValue<qlonglong>(*step));
        if (stepIndex < 0) {
            return false;
        }
        stepBox_->setCurrentIndex(stepIndex);
        showCalibration();
    }
    return true;
}

int BudgetView::passCount() const
{
    return plot_->graph(Passed)->dataCount();
}

int BudgetView::failCount() const
{
    return plot_->graph(Failed)->dataCount();
}

int BudgetView::undecidedCount() const
{
    return plot_->graph(Undecided)->dataCount();
}

void BudgetView::showCalibration()
{
    calibrationBox_->setToolTip(calibrationBox_->currentText());
    const std::optional<CalibrationInfo> info = loadCalibration();
    const std::optional<std::int64_t> step = fillStepBox();

    resetPointTable();
    showFailureRule(info);
    showFlags(info, step);
    PointExtent extent = plotPoints(step);

    for (const CalibrationBracket& b : brackets_) {
        if (step && b.step == *step) {
            shownBracket_ = b;
        }
    }
    // A logarithmic mismatch axis needs positive values; KL is never negative, a zero (an exact engine) falls back.
    bool logAxis = logScale_->isChecked() && extent.xMinPositive > 0.0;
    for (const CalibrationPoint& p : points_) {
        if ((!step || p.step == *step) && p.mismatch <= 0.0) {
            logAxis = false;
        }
    }
    setLogScale(plot_->xAxis, logAxis);
    plot_->xAxis->setLabel(logAxis ? tr("mismatch (nats/token, log scale)") : tr("mismatch (nats/token)"));
    const bool haveBracket = drawBracket(logAxis, extent);
    drawThreshold();
    failLabel_->setVisible(!points_.empty());
    failLine_->setVisible(!points_.empty());
    fitRanges(logAxis, extent);

    showSummary(haveBracket);
    plot_->replot();
}

std::optional<CalibrationInfo> BudgetView::loadCalibration()
{
    points_.clear();
    brackets_.clear();
    shownBracket_.reset();
    const QVariant id = calibrationBox_->currentData();
    std::optional<CalibrationInfo> info;
    if (store_ && id.isValid()) {
        const AnalysisData data(*store_);
        points_ = data.calibrationPoints(id.toLongLong());
        brackets_ = data.calibrationBrackets(id.toLongLong());
        for (const CalibrationInfo& c : calibrations_) {
            if (c.id == id.toLongLong()) {
                info = c;
            }
        }
    }
    return info;
}

std::optional<std::int64_t> BudgetView::fillStepBox()
{
    // Steps: the student checkpoints the calibration measured; the budget is per step.
    std::set<std::int64_t> steps;
    for (const CalibrationPoint& p : points_)
        steps.insert(p.step);
    for (const CalibrationBracket& b : brackets_)
        steps.insert(b.step);
    const QVariant keepStep = stepBox_->currentData();
    {
        const QSignalBlocker block(stepBox_);
        stepBox_->clear();
        for (std::int64_t s : steps) {
            stepBox_->addItem(QString::number(s), QVariant::fromValue<qlonglong>(s));
        }
        const int index = keepStep.isValid() ? stepBox_->findData(keepStep) : -1;
        stepBox_->setCurrentIndex(index >= 0 ? index : stepBox_->count() - 1); // latest step by default
    }
    std::optional<std::int64_t> step;
    if (stepBox_->currentIndex() >= 0) {
        step = stepBox_->currentData().toLongLong();
    }
    return step;
}

void BudgetView::resetPointTable()
{
    pointModel_->clear();
    pointModel_->setHorizontalHeaderLabels({tr("Run"), tr("Step"), tr("Mismatch"), tr("x BF16 (own unit)"),
        tr("Quality Q"), tr("Change vs BF16"), tr("95% interval"), tr("Result")});
    pointModel_->horizontalHeaderItem(2)->setToolTip(
        tr("Mismatch (nats/token), the screen statistic: admit's measurement of the configuration on each seed's "
           "checkpoint at the step, under the calibration's protocol (seed mean). The training-step mean is in each "
           "cell's tooltip."));
    pointModel_->horizontalHeaderItem(3)->setToolTip(
        tr("Mismatch over the BF16 unit of the same checkpoints under the same protocol (the plain BF16 engine at "
           "their weights, same prompts and seeds): the baseline is 1x at every step."));
    pointModel_->horizontalHeaderItem(4)->setToolTip(
        tr("The held-out quality Q of the run's checkpoint at the step (teacher KL, nats/token: lower is better)"));
    pointModel_->horizontalHeaderItem(5)->setToolTip(
        tr("The relative change of Q against the BF16 baseline (up = worse)"));
    pointModel_->horizontalHeaderItem(6)->setToolTip(tr("The 95% interval of the change against the BF16 baseline"));
    pointModel_->horizontalHeaderItem(7)->setToolTip(
        tr("The failure rule's verdict: failed when the interval of the change is at or above the failure line, "
           "undecided when it contains it, else passed"));
    addGlossaryHeaderTips(pointModel_, {{7, {QStringLiteral("failure line")}}});
}

void BudgetView::showFailureRule(const std::optional<CalibrationInfo>& info)
{
    // The failure rule this calibration was measured with.
    failureRise_ = info && info->relativeThreshold ? *info->relativeThreshold : kDefaultFailRise;
    failLine_->point1->setCoords(0, failureRise_ * 100);
    failLine_->point2->setCoords(1, failureRise_ * 100);
    failLabel_->position->setCoords(0.01, failureRise_ * 100);
    failLabel_->setText(failureRuleText());
}

void BudgetView::showFlags(const std::optional<CalibrationInfo>& info, std::optional<std::int64_t> step)
{
    // Flags of the calibration's protocol at this step (and of the whole calibration).
    QStringList flagLines;
    if (info) {
        for (const CalibrationFlag& flag : step ? flagsAtStep(*info, *step) : info->flags) {
            flagLines << QString::fromStdString(describeFlag(flag)).toHtmlEscaped();
        }
    }
    banner_->setText(flagLines.isEmpty()
            ? QString()
            : tr("<b>&#9888; This budget is flagged</b> by its calibration's protocol; treat the bracket with "
                 "care:<br>%1")
                  .arg(flagLines.join(QStringLiteral("<br>"))));
    banner_->setVisible(!flagLines.isEmpty());
}

BudgetView::PointExtent BudgetView::plotPoints(std::optional<std::int64_t> step)
{
    QVector<double> passX, passY, failX, failY, undecidedX, undecidedY;
    PointExtent extent;
    extent.yMax = failureRise_ * 100;
    for (const CalibrationPoint& p : points_) {
        if (step && p.step != *step) {
            continue;
        }
        const double change = p.relativeChange.value_or(0.0) * 100.0;
        (p.failed() ? failX : p.undecided() ? undecidedX : passX).append(p.mismatch);
        (p.failed() ? failY : p.undecided() ? undecidedY : passY).append(change);
        extent.xMax = std::max(extent.xMax, p.mismatch);
        if (p.mismatch > 0 && (extent.xMinPositive == 0.0 || p.mismatch < extent.xMinPositive)) {
            extent.xMinPositive = p.mismatch;
        }
        extent.yMin = std::min(extent.yMin, change);
        extent.yMax = std::max(extent.yMax, change);
        QList<QStandardItem*> row;
        const QString run = QString::fromStdString(p.runName.empty() ? "#" + std::to_string(p.runId) : p.runName);
        row << new QStandardItem(run) << new QStandardItem(QString::number(p.step)) << mismatchItem(p)
            << new QStandardItem(p.bf16Multiple() ? QStringLiteral("%1x").arg(*p.bf16Multiple(), 0, 'f', 1) : tr("-"))
            << new QStandardItem(QString::number(p.quality, 'g', 4))
            << new QStandardItem(p.relativeChange ? QString::asprintf("%+.1f%%", change) : tr("-"))
            << new QStandardItem(p.changeLow && p.changeHigh
                       ? QString::asprintf("[%+.1f%%, %+.1f%%]", 100.0 * *p.changeLow, 100.0 * *p.changeHigh)
                       : tr("-"))
            << new QStandardItem(p.failed() ? tr("failed") : p.undecided() ? tr("undecided") : tr("passed"));
        row.back()->setForeground(colorOf(p));
        row.front()->setToolTip(run); // the name is elided when long
        pointModel_->appendRow(row);
    }
    table_->resizeColumnsToContents();
    // A sweep's run names ("CALIBRATION/label") can be long: past this width the name is elided, not Result pushed
    // off the table.
    constexpr int kRunColumnMaxWidth = 240;
    table_->setColumnWidth(0, std::min(table_->columnWidth(0), kRunColumnMaxWidth));
    labelPoints(step);
    plot_->graph(Passed)->setData(passX, passY);
    plot_->graph(Failed)->setData(failX, failY);
    plot_->graph(Undecided)->setData(undecidedX, undecidedY);
    return extent;
}

void BudgetView::labelPoints(std::optional<std::int64_t> step)
{
    for (QCPItemText* label : pointLabels_) {
        plot_->removeItem(label);
    }
    pointLabels_.clear();
    // Sweep runs are named "CALIBRATION/label": on the plot the label alone says which run a point is.
    std::optional<std::string> common;
    for (const CalibrationPoint& p : points_) {
        if (step && p.step != *step) {
            continue;
        }
        if (!common) {
            common = p.runName;
        } else {
            size_t n = 0;
            while (n < common->size() && n < p.runName.size() && (*common)[n] == p.runName[n]) {
                ++n;
            }
            common->resize(n);
        }
    }
    const size_t slash = common ? common->rfind('/') : std::string::npos;
    const size_t cut = slash == std::string::npos ? 0 : slash + 1;
    for (const CalibrationPoint& p : points_) {
        if (step && p.step != *step) {
            continue;
        }
        auto* label = new QCPItemText(plot_);
        label->position->setCoords(p.mismatch, p.relativeChange.value_or(0.0) * 100.0);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
        label->setPadding(QMargins(6, 0, 0, 4));
        label->setFont(QFont(font().family(), 8));
        label->setColor(colorOf(p));
        label->setText(QString::fromStdString(p.runName.empty() ? "#" + std::to_string(p.runId) : p.runName.substr(cut)));
        pointLabels_.push_back(label);
    }
}

bool BudgetView::drawBracket(bool logAxis, PointExtent& extent)
{
    const bool haveBracket = shownBracket_ && (shownBracket_->largestPassing || shownBracket_->smallestFailing);
    bracket_->setVisible(haveBracket);
    bracketLabel_->setVisible(haveBracket);
    if (haveBracket) {
        // With nothing passing the bracket starts at the axis' left end (zero, or below every point on a log axis).
        const double low = shownBracket_->largestPassing.value_or(logAxis ? extent.xMinPositive / 10.0 : 0.0);
        // With no failing run yet the bracket is open to the right: shade to beyond the axis end.
        const bool open = !shownBracket_->smallestFailing.has_value();
        const double high = open ? std::max(extent.xMax, low) * 10.0 : *shownBracket_->smallestFailing;
        bracket_->topLeft->setCoords(low, 0.0);
        bracket_->bottomRight->setCoords(high, 1.0);
        // Left-aligned just inside the bracket, clear of the threshold's label left of its line.
        bracketLabel_->position->setCoords(low, 0.02);
        bracketLabel_->setText(open ? tr("budget bracket\n[%1, no failing run yet)").arg(low, 0, 'g', 3)
                                    : tr("budget bracket\n[%1, %2]").arg(low, 0, 'g', 3).arg(high, 0, 'g', 3));
        // Room right of the passing end for the open bracket and the labels of the points near it.
        extent.xMax = open ? std::max(extent.xMax, low) * (logAxis ? 6.0 : 1.5) : std::max(extent.xMax, high);
        if (logAxis && shownBracket_->largestPassing) {
            extent.xMinPositive = std::min(extent.xMinPositive, *shownBracket_->largestPassing);
        }
    }
    return haveBracket;
}

void BudgetView::drawThreshold()
{
    const bool haveThreshold = shownBracket_ && shownBracket_->threshold;
    thresholdLine_->setVisible(haveThreshold);
    if (haveThreshold) {
        thresholdLine_->point1->setCoords(*shownBracket_->threshold, 0);
        thresholdLine_->point2->setCoords(*shownBracket_->threshold, 1);
        thresholdLabel_->position->setCoords(*shownBracket_->threshold, 0.02);
    }
    thresholdLabel_->setVisible(haveThreshold);
}

void BudgetView::fitRanges(bool logAxis, const PointExtent& extent)
{
    if (logAxis) {
        // Labels sit right of their points: room on the right in proportion to the decades shown.
        const double lower = extent.xMinPositive / 1.8;
        const double decades = std::log10(extent.xMax) - std::log10(lower);
        fitX_[0] = lower;
        fitX_[1] = extent.xMax * std::pow(10.0, std::max(0.35, 0.2 * decades));
    } else {
        fitX_[0] = extent.xMax > 0 ? -extent.xMax * 0.02 : 0.0;
        fitX_[1] = extent.xMax > 0 ? extent.xMax * 1.2 : 1.0;
    }
    const double pad = (extent.yMax - extent.yMin) * 0.1 + 1.0;
    fitY_[0] = extent.yMin - pad;
    fitY_[1] = extent.yMax + pad;
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    plot_->yAxis->setRange(fitY_[0], fitY_[1]);
}

void BudgetView::showSummary(bool haveBracket)
{
    if (calibrations_.empty()) {
        summary_->setText(tr("No calibrations in this workspace yet."));
    } else if (haveBracket) {
        auto show
            = [](const std::optional<double>& v) { return v ? QString::number(*v, 'g', 4) : QObject::tr("none"); };
        summary_->setText(tr("Budget at step %1: [%2, %3] nats/token, threshold %4")
                              .arg(shownBracket_->step)
                              .arg(show(shownBracket_->largestPassing), show(shownBracket_->smallestFailing),
                                  show(shownBracket_->threshold)));
    } else {
        summary_->setText(tr("No bracket stored for this step."));
    }
}

void BudgetView::fitView()
{
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    plot_->yAxis->setRange(fitY_[0], fitY_[1]);
    plot_->replot();
}

QString BudgetView::failureRuleText() const
{
    // Spec "Failure rule": the interval of the change decides (fail: at or above the line; undecided: contains it).
    QString text = tr("failure line %1% quality loss").arg(QString::asprintf("%+g", failureRise_ * 100.0));
    const QVariant id = calibrationBox_->currentData();
    for (const CalibrationInfo& c : calibrations_) {
        if (id.isValid() && c.id == id.toLongLong() && c.confidence) {
            text += tr(": fail when the %1% interval of the change is at or above it, undecided when it contains it")
                        .arg(*c.confidence * 100.0, 0, 'g', 3);
        }
    }
    return text;
}

QString BudgetView::readoutText() const
{
    return readout_->text();
}

void BudgetView::hoverAt(const QPoint& pixel)
{
    const std::optional<std::int64_t> step = stepBox_->currentIndex() >= 0
        ? std::optional<std::int64_t>(stepBox_->currentData().toLongLong())
        : std::nullopt;
    const CalibrationPoint* nearest = nullptr;
    double best = 12.0; // pixels
    for (const CalibrationPoint& p : points_) {
        if (step && p.step != *step) {
            continue;
        }
        const double dx = plot_->xAxis->coordToPixel(p.mismatch) - pixel.x();
        const double dy = plot_->yAxis->coordToPixel(p.relativeChange.value_or(0.0) * 100.0) - pixel.y();
        const double distance = std::hypot(dx, dy);
        if (distance < best) {
            best = distance;
            nearest = &p;
        }
    }
    if (!nearest) {
        readout_->setText(readout_->property("idle").toString());
        return;
    }
    QString text = tr("%1 at step %2: mismatch %3 nats/token")
                       .arg(QString::fromStdString(
                           nearest->runName.empty() ? "#" + std::to_string(nearest->runId) : nearest->runName))
                       .arg(nearest->step)
                       .arg(nearest->mismatch, 0, 'g', 4);
    if (nearest->trainingMismatch) {
        text += tr(" (as admit screens it; training mean %1)").arg(*nearest->trainingMismatch, 0, 'g', 4);
    }
    if (const auto multiple = nearest->bf16Multiple()) {
        text += tr(" (%1x its own BF16 unit at step %2)").arg(*multiple, 0, 'f', 1).arg(nearest->step);
    }
    if (nearest->relativeChange) {
        text += tr(", quality change %1").arg(QString::asprintf("%+.1f%%", *nearest->relativeChange * 100.0));
    }
    if (nearest->changeLow && nearest->changeHigh) {
        text += tr(", interval of the change [%1, %2]")
                    .arg(QString::asprintf("%+.1f%%", 100.0 * *nearest->changeLow))
                    .arg(QString::asprintf("%+.1f%%", 100.0 * *nearest->changeHigh));
    } else if (nearest->ciLow && nearest->ciHigh) {
        text += tr(", interval of mean q diff [%1, %2]")
                    .arg(*nearest->ciLow, 0, 'g', 3)
                    .arg(*nearest->ciHigh, 0, 'g', 3);
    }
    text += nearest->failed() ? tr(": failed") : nearest->undecided() ? tr(": undecided") : tr(": passed");
    readout_->setText(text);
}

} // namespace mismatch::ui

#include "ui/budget_view.h"

#include "ui/plot_export.h"

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
enum Graph { Passed, Failed };
const QColor kPassColor(0x2e, 0x7d, 0x32);
const QColor kFailColor(0xc6, 0x28, 0x28);
// The failure rule's relative quality threshold (spec: fail at a rise of 20% or more).
constexpr double kFailRise = 0.20;
} // namespace

BudgetView::BudgetView(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Calibration:"), this));
    calibrationBox_ = new QComboBox(this);
    calibrationBox_->setObjectName("calibrationBox");
    calibrationBox_->setMinimumWidth(260);
    top->addWidget(calibrationBox_);
    top->addWidget(new QLabel(tr("Student step:"), this));
    stepBox_ = new QComboBox(this);
    stepBox_->setObjectName("calibrationStepBox");
    top->addWidget(stepBox_);
    logScale_ = new QCheckBox(tr("Log mismatch axis"), this);
    logScale_->setObjectName("budgetLogScale");
    logScale_->setChecked(true);
    top->addWidget(logScale_);
    summary_ = new QLabel(this);
    summary_->setObjectName("budgetSummary");
    top->addWidget(summary_, 1);
    layout->addLayout(top);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("budgetPlot");
    plot_->setMinimumHeight(240);
    plot_->xAxis->setLabel(tr("mismatch (nats/token)"));
    plot_->yAxis->setLabel(tr("quality change against the BF16 baseline (%)"));
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
    plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignBottom | Qt::AlignRight);

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
    failLine_->point1->setCoords(0, kFailRise * 100);
    failLine_->point2->setCoords(1, kFailRise * 100);

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
    failLabel_->position->setCoords(0.01, kFailRise * 100);
    failLabel_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    failLabel_->setColor(QColor(0x75, 0x75, 0x75));
    failLabel_->setText(tr("failure rule: +20% quality loss"));

    QCPGraph* passed = plot_->addGraph();
    passed->setName(tr("passed"));
    passed->setLineStyle(QCPGraph::lsNone);
    passed->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, kPassColor, 9));
    QCPGraph* failed = plot_->addGraph();
    failed->setName(tr("failed"));
    failed->setLineStyle(QCPGraph::lsNone);
    failed->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, QPen(kFailColor, 3), QBrush(), 11));
    addPlotExportMenu(plot_);

    pointModel_ = new QStandardItemModel(this);
    table_ = new QTableView(this);
    table_->setObjectName("calibrationTable");
    table_->setModel(pointModel_);
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
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
        for (const CalibrationInfo& c : calibrations_) {
            calibrationBox_->addItem(tr("#%1 %2 (student %3)")
                                         .arg(c.id)
                                         .arg(QString::fromStdString(c.name), QString::fromStdString(c.student)),
                QVariant::fromValue<qlonglong>(c.id));
        }
        const int index = keep.isValid() ? calibrationBox_->findData(keep) : -1;
        calibrationBox_->setCurrentIndex(index >= 0 ? index : calibrationBox_->count() - 1);
    }
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

void BudgetView::showCalibration()
{
    points_.clear();
    brackets_.clear();
    shownBracket_.reset();
    const QVariant id = calibrationBox_->currentData();
    if (store_ && id.isValid()) {
        const AnalysisData data(*store_);
        points_ = data.calibrationPoints(id.toLongLong());
        brackets_ = data.calibrationBrackets(id.toLongLong());
    }
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

    QVector<double> passX, passY, failX, failY;
    double xMinPositive = 0.0; // smallest positive mismatch shown (the log axis starts below it)
    pointModel_->clear();
    pointModel_->setHorizontalHeaderLabels({tr("Run"), tr("Step"), tr("Mismatch (nats/token)"), tr("Quality Q"),
        tr("Change vs BF16"), tr("95% interval of mean q diff"), tr("Result")});
    double xMax = 0.0;
    double yMin = 0.0;
    double yMax = kFailRise * 100;
    for (const CalibrationPoint& p : points_) {
        if (step && p.step != *step) {
            continue;
        }
        const double change = p.relativeChange.value_or(0.0) * 100.0;
        (p.failed ? failX : passX).append(p.mismatch);
        (p.failed ? failY : passY).append(change);
        xMax = std::max(xMax, p.mismatch);
        if (p.mismatch > 0 && (xMinPositive == 0.0 || p.mismatch < xMinPositive)) {
            xMinPositive = p.mismatch;
        }
        yMin = std::min(yMin, change);
        yMax = std::max(yMax, change);
        QList<QStandardItem*> row;
        row << new QStandardItem(QString::fromStdString(p.runName.empty() ? "#" + std::to_string(p.runId) : p.runName))
            << new QStandardItem(QString::number(p.step)) << new QStandardItem(QString::number(p.mismatch, 'g', 4))
            << new QStandardItem(QString::number(p.quality, 'g', 4))
            << new QStandardItem(p.relativeChange ? QString::asprintf("%+.1f%%", change) : tr("-"))
            << new QStandardItem(p.ciLow && p.ciHigh
                       ? QStringLiteral("[%1, %2]").arg(*p.ciLow, 0, 'g', 3).arg(*p.ciHigh, 0, 'g', 3)
                       : tr("-"))
            << new QStandardItem(p.failed ? tr("failed") : tr("passed"));
        row.back()->setForeground(p.failed ? kFailColor : kPassColor);
        pointModel_->appendRow(row);
    }
    table_->resizeColumnsToContents();
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
        label->setColor(p.failed ? kFailColor : kPassColor);
        label->setText(QString::fromStdString(p.runName.empty() ? "#" + std::to_string(p.runId) : p.runName.substr(cut)));
        pointLabels_.push_back(label);
    }
    plot_->graph(Passed)->setData(passX, passY);
    plot_->graph(Failed)->setData(failX, failY);

    for (const CalibrationBracket& b : brackets_) {
        if (step && b.step == *step) {
            shownBracket_ = b;
        }
    }
    // A logarithmic mismatch axis needs positive values; KL is never negative, a zero (an exact engine) falls back.
    bool logAxis = logScale_->isChecked() && xMinPositive > 0.0;
    for (const CalibrationPoint& p : points_) {
        if ((!step || p.step == *step) && p.mismatch <= 0.0) {
            logAxis = false;
        }
    }
    plot_->xAxis->setScaleType(logAxis ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    plot_->xAxis->setTicker(logAxis ? QSharedPointer<QCPAxisTicker>(new QCPAxisTickerLog)
                                    : QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    plot_->xAxis->setLabel(logAxis ? tr("mismatch (nats/token, log scale)") : tr("mismatch (nats/token)"));
    const bool haveBracket = shownBracket_ && (shownBracket_->largestPassing || shownBracket_->smallestFailing);
    bracket_->setVisible(haveBracket);
    bracketLabel_->setVisible(haveBracket);
    if (haveBracket) {
        // With nothing passing the bracket starts at the axis' left end (zero, or below every point on a log axis).
        const double low = shownBracket_->largestPassing.value_or(logAxis ? xMinPositive / 10.0 : 0.0);
        // With no failing run yet the bracket is open to the right: shade to beyond the axis end.
        const bool open = !shownBracket_->smallestFailing.has_value();
        const double high = open ? std::max(xMax, low) * 10.0 : *shownBracket_->smallestFailing;
        bracket_->topLeft->setCoords(low, 0.0);
        bracket_->bottomRight->setCoords(high, 1.0);
        // Left-aligned just inside the bracket, clear of the threshold's label left of its line.
        bracketLabel_->position->setCoords(low, 0.02);
        bracketLabel_->setText(open ? tr("budget bracket\n[%1, no failing run yet)").arg(low, 0, 'g', 3)
                                    : tr("budget bracket\n[%1, %2]").arg(low, 0, 'g', 3).arg(high, 0, 'g', 3));
        // Room right of the passing end for the open bracket and the labels of the points near it.
        xMax = open ? std::max(xMax, low) * (logAxis ? 6.0 : 1.5) : std::max(xMax, high);
        if (logAxis && shownBracket_->largestPassing) {
            xMinPositive = std::min(xMinPositive, *shownBracket_->largestPassing);
        }
    }
    const bool haveThreshold = shownBracket_ && shownBracket_->threshold;
    thresholdLine_->setVisible(haveThreshold);
    if (haveThreshold) {
        thresholdLine_->point1->setCoords(*shownBracket_->threshold, 0);
        thresholdLine_->point2->setCoords(*shownBracket_->threshold, 1);
        thresholdLabel_->position->setCoords(*shownBracket_->threshold, 0.02);
    }
    thresholdLabel_->setVisible(haveThreshold);
    failLabel_->setVisible(!points_.empty());
    failLine_->setVisible(!points_.empty());
    if (logAxis) {
        // Labels sit right of their points: room on the right in proportion to the decades shown.
        const double lower = xMinPositive / 1.8;
        const double decades = std::log10(xMax) - std::log10(lower);
        plot_->xAxis->setRange(lower, xMax * std::pow(10.0, std::max(0.35, 0.2 * decades)));
    } else {
        plot_->xAxis->setRange(xMax > 0 ? -xMax * 0.02 : 0.0, xMax > 0 ? xMax * 1.2 : 1.0);
    }
    const double pad = (yMax - yMin) * 0.1 + 1.0;
    plot_->yAxis->setRange(yMin - pad, yMax + pad);

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
    plot_->replot();
}

} // namespace mismatch::ui

#include "ui/plots/run_plot.h"

#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"

#include <nlohmann/json.hpp>
#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QStackedWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <set>

namespace mismatch::ui {

namespace {
constexpr int kReplotDelayMs = 40;
constexpr int kFadedAlpha = 70;
constexpr int kLeastPlotHeight = 240; // px, before the plot has laid out its panels

const struct {
    const char* name;
    QColor color;
    Qt::PenStyle style;
} kMismatchGraphs[] = {{"KL(mu || pi), full vocabulary", QColor(0x1f, 0x6f, 0xd1), Qt::SolidLine},
    {"k1 (sampled token)", QColor(0xef, 0x8a, 0x17), Qt::DashLine},
    {"k3 (sampled token)", QColor(0x2e, 0x7d, 0x32), Qt::DotLine}};
// The mismatch series' names in the budget's label ("k1 above it at 4 of 12 steps").
const char* const kShortNames[] = {"KL", "k1", "k3"};

// The budget as the Budget tab and the admission plot draw a threshold and a bracket (budget_view.cpp): a dashed purple
// line, an amber band; the steps above it ringed in the Budget tab's colour of a failed point.
const QColor kBudgetColor(0x6a, 0x1b, 0x9a);
const QColor kBracketColor(255, 193, 7, 70);
const QColor kAboveColor(0xc6, 0x28, 0x28);
constexpr int kBudgetBoxChars = 32; // the budget list's width in characters ("#3 noise sweep, step 200: 0.0123")

// The tab that shows the results of a run of `kind` that stores no per-step measures ("" when none does).
QString resultsTab(const QString& kind)
{
    if (kind == QLatin1String("admit"))
        return QObject::tr("Admission");
    if (kind == QLatin1String("sensitivity"))
        return QObject::tr("Sensitivity");
    if (kind == QLatin1String("calibrate"))
        return QObject::tr("Budget");
    if (kind == QLatin1String("prefix_shift"))
        return QObject::tr("Prefix Shift");
    if (kind == QLatin1String("breakdown"))
        return QObject::tr("Breakdown");
    if (kind == QLatin1String("demo"))
        return QObject::tr("Overview");
    return {};
}

// The length of an axis title drawn along its axis: its longest line, in px.
int titleLength(const QCPAxis* axis)
{
    int longest = 0;
    for (const QString& line : axis->label().split(QLatin1Char('\n'))) {
        longest = std::max(longest, QFontMetrics(axis->labelFont()).horizontalAdvance(line));
    }
    return longest;
}
} // namespace

QVector<double> movingAverage(const QVector<double>& values, int window)
{
    if (window <= 1) {
        return values;
    }
    const int half = window / 2;
    QVector<double> result(values.size());
    // Prefix sums: each output is the mean of the points within `half` on both sides that exist.
    std::vector<double> prefix(static_cast<size_t>(values.size()) + 1, 0.0);
    for (int i = 0; i < values.size(); ++i) {
        prefix[static_cast<size_t>(i) + 1] = prefix[static_cast<size_t>(i)] + values[i];
    }
    for (int i = 0; i < values.size(); ++i) {
        const int low = std::max(0, i - half);
        const int high = std::min(static_cast<int>(values.size()) - 1, i + half);
        result[i] = (prefix[static_cast<size_t>(high) + 1] - prefix[static_cast<size_t>(low)]) / (high - low + 1);
    }
    return result;
}

RunPlot::RunPlot(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* top = new QHBoxLayout;
    title_ = new QLabel(tr("Select a run to plot its per-step mismatch."), this);
    title_->setObjectName("runPlotTitle");
    title_->setWordWrap(true);
    top->addWidget(title_, 1);
    k1Box_ = new QCheckBox(tr("k1"), this);
    k1Box_->setObjectName("runPlotK1");
    k1Box_->setToolTip(tr("Sampled-token estimator mean(log mu(y) - log pi(y)): noisy and sometimes negative"));
    k3Box_ = new QCheckBox(tr("k3"), this);
    k3Box_->setObjectName("runPlotK3");
    k3Box_->setToolTip(tr("Sampled-token estimator mean(r - 1 - log r), r = pi(y) / mu(y)"));
    top->addWidget(k1Box_);
    top->addWidget(k3Box_);
    top->addWidget(new QLabel(tr("Smoothing:"), this));
    smoothing_ = new QComboBox(this);
    smoothing_->setObjectName("runPlotSmoothing");
    smoothing_->addItem(tr("none"), 0);
    for (int window : {5, 11, 25}) {
        smoothing_->addItem(tr("%1 steps").arg(window), window);
    }
    smoothing_->setToolTip(tr("Centered moving average of the mismatch series; the measured points stay, faded"));
    top->addWidget(smoothing_);
    rolloutStep_ = new QComboBox(this);
    rolloutStep_->setObjectName("runPlotRolloutStep");
    rolloutStep_->setToolTip(tr("Steps whose first rollouts the run kept token by token (step 1, its evaluation "
                                "steps and the last step)"));
    drillDown_ = new QPushButton(tr("Token &Drill-Down..."), this);
    drillDown_->setObjectName("runPlotDrillDown");
    drillDown_->setToolTip(tr("The chosen step's first rollouts token by token, coloured by KL(mu || pi) per token"));
    top->addWidget(new QLabel(tr("Rollouts at step:"), this));
    top->addWidget(rolloutStep_);
    top->addWidget(drillDown_);
    top->addWidget(makeBudgetControls());
    connect(drillDown_, &QPushButton::clicked, this, [this] {
        if (rolloutStep_->currentIndex() >= 0) {
            openDrillDown(rolloutStep_->currentData().toLongLong());
        }
    });
    layout->addLayout(top);
    readout_ = makeReadout(this, QStringLiteral("runPlotReadout"));
    layout->addWidget(readout_);

    stack_ = new QStackedWidget(this);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("runPlot");
    plot_->xAxis->setTickLabels(false); // the step axis is the quality panel's below (ranges tied): numbered there
    plot_->yAxis->setLabel(tr("mismatch (nats/token)"));
    plot_->yAxis2->setVisible(true);
    plot_->yAxis2->setLabel(tr("x BF16 unit"));
    plot_->legend->setFont(QFont(font().family(), 8));

    // The quality panel below shares the step axis. Its default right axis is the accuracy axis (0-100%): every
    // series is bound to the axis that carries its label.
    qualityRect_ = new QCPAxisRect(plot_);
    plot_->plotLayout()->addElement(1, 0, qualityRect_);
    plot_->plotLayout()->setRowStretchFactor(0, 2);
    plot_->plotLayout()->setRowStretchFactor(1, 1);
    qualityRect_->axis(QCPAxis::atBottom)->setLabel(tr("step"));
    qualityRect_->axis(QCPAxis::atLeft)->setLabel(tr("quality Q\n(nats/token)")); // two lines: the panel is short
    QCPAxis* accuracyAxis = qualityRect_->axis(QCPAxis::atRight);
    accuracyAxis->setVisible(true);
    accuracyAxis->setTickLabels(true);
    accuracyAxis->setLabel(tr("accuracy (%)"));
    accuracyAxis->setRange(0, 100); // fixed: a flat accuracy must not be stretched over the panel
    layOutPanels();
    connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), qualityRect_->axis(QCPAxis::atBottom),
        qOverload<const QCPRange&>(&QCPAxis::setRange));
    connect(qualityRect_->axis(QCPAxis::atBottom), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), plot_->xAxis,
        qOverload<const QCPRange&>(&QCPAxis::setRange));

    for (const auto& g : kMismatchGraphs) {
        QCPGraph* graph = plot_->addGraph(plot_->xAxis, plot_->yAxis);
        graph->setName(tr(g.name));
        graph->setPen(QPen(g.color, 2, g.style));
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
    }
    QCPGraph* multiple = plot_->addGraph(plot_->xAxis, plot_->yAxis2);
    multiple->setName(tr("BF16 multiple (right axis)"));
    multiple->setPen(QPen(QColor(0x9e, 0x9e, 0x9e), 1.5));

    QCPGraph* quality = plot_->addGraph(qualityRect_->axis(QCPAxis::atBottom), qualityRect_->axis(QCPAxis::atLeft));
    quality->setName(tr("quality Q"));
    quality->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 2));
    quality->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssSquare, QColor(0x6a, 0x1b, 0x9a), 8));
    QCPGraph* accuracy = plot_->addGraph(qualityRect_->axis(QCPAxis::atBottom), accuracyAxis);
    accuracy->setName(tr("accuracy % (lower right axis)"));
    accuracy->setPen(QPen(QColor(0x00, 0x89, 0x7b), 1.5, Qt::DashLine));
    accuracy->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, QColor(0x00, 0x89, 0x7b), 7));
    for (const auto& g : kMismatchGraphs) {
        QCPGraph* smoothed = plot_->addGraph(plot_->xAxis, plot_->yAxis);
        smoothed->setPen(QPen(g.color, 2.2, g.style));
        smoothed->removeFromLegend();
        smoothed->setVisible(false);
    }
    addBudgetGraphs();
    placeLegendAbove(plot_, [this] {
        // A legend click toggles a series: keep the k1/k3 boxes and the range in step with it.
        const QSignalBlocker b1(k1Box_);
        const QSignalBlocker b3(k3Box_);
        k1Box_->setChecked(plot_->graph(K1)->visible());
        k3Box_->setChecked(plot_->graph(K3)->visible());
        replot();
    });
    crosshair_ = new PlotCrosshair(plot_, {plot_->axisRect(), qualityRect_}, readout_, tr("step"));
    enableZoomAndReset(plot_, [this] { replot(); });

    auto* messagePage = new QWidget(this);
    auto* messageLayout = new QVBoxLayout(messagePage);
    messageLayout->addStretch(1);
    message_ = new QLabel(messagePage);
    message_->setObjectName("runPlotMessage");
    message_->setWordWrap(true);
    message_->setAlignment(Qt::AlignCenter);
    message_->setTextFormat(Qt::RichText);
    messageLayout->addWidget(message_);
    openButton_ = new QPushButton(messagePage);
    openButton_->setObjectName("runPlotOpenResults");
    messageLayout->addWidget(openButton_, 0, Qt::AlignHCenter);
    messageLayout->addStretch(2);
    connect(openButton_, &QPushButton::clicked, this, [this] { emit openResults(kind_, runId_); });
    stack_->addWidget(plot_);
    stack_->addWidget(messagePage);
    layout->addWidget(stack_, 1);

    connect(k1Box_, &QCheckBox::toggled, this, [this](bool on) {
        setSeriesVisible(plot_, plot_->graph(K1), on);
        updateSmoothing();
        replot();
    });
    connect(k3Box_, &QCheckBox::toggled, this, [this](bool on) {
        setSeriesVisible(plot_, plot_->graph(K3), on);
        updateSmoothing();
        replot();
    });
    connect(smoothing_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        updateSmoothing();
        replot();
    });
    setSeriesVisible(plot_, plot_->graph(K1), false);
    setSeriesVisible(plot_, plot_->graph(K3), false);

    addPlotExportMenu(plot_);
    replotTimer_.setSingleShot(true);
    replotTimer_.setInterval(kReplotDelayMs);
    connect(&replotTimer_, &QTimer::timeout, this, &RunPlot::replot);
}

QWidget* RunPlot::makeBudgetControls()
{
    budgetControls_ = new QWidget(this);
    budgetControls_->setObjectName("runPlotBudgetControls");
    auto* budgetLayout = new QHBoxLayout(budgetControls_);
    budgetLayout->setContentsMargins(0, 0, 0, 0);
    budgetLayout->addWidget(new QLabel(tr("Budget beside the run:"), budgetControls_));
    budgetBox_ = new QComboBox(budgetControls_);
    budgetBox_->setObjectName("runPlotBudget");
    budgetBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    budgetBox_->setMinimumContentsLength(kBudgetBoxChars);
    budgetBox_->setToolTip(tr("A calibration's budget at one of its steps (the bracket's admission threshold, "
                              "nats/token) drawn on the mismatch axis beside this run, remembered for the run while "
                              "the window is open. The budget is on the screen statistic (measured on a checkpoint "
                              "under the calibration's protocol); the run's points are its training-step estimates."));
    budgetLayout->addWidget(budgetBox_);
    connect(budgetBox_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int row) {
        if (runId_ != 0 && row >= 0
            && !setRunBudget(runId_, budgetBox_->itemData(row, Qt::UserRole).toLongLong(),
                budgetBox_->itemData(row, Qt::UserRole + 1).toLongLong())) {
            reloadBudgets(); // the bracket is gone from the workspace: the list as it is now, the run's choice kept
            applyRunBudget();
        }
    });
    reloadBudgets(); // "none" until a store is set
    budgetBox_->setEnabled(false); // no run shown
    return budgetControls_;
}

void RunPlot::addBudgetGraphs()
{
    // The budget, on the mismatch axis (plot_->yAxis) only: the line is a graph, so that the crosshair reads "budget"
    // beside the series; out of the legend, whose row is full at 1024 px (the label names it on the plot).
    QCPGraph* budget = plot_->addGraph(plot_->xAxis, plot_->yAxis);
    budget->setName(tr("budget"));
    budget->setPen(QPen(kBudgetColor, 1.5, Qt::DashLine));
    budget->removeFromLegend();
    budget->setVisible(false);
    QCPGraph* above = plot_->addGraph(plot_->xAxis, plot_->yAxis);
    above->setLineStyle(QCPGraph::lsNone);
    above->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(kAboveColor, 1.5), Qt::NoBrush, 11));
    above->removeFromLegend();
    above->setVisible(false);
    // The bracket's band, across the panel at any zoom (x in axis-rect fractions), behind the data.
    budgetBracket_ = new QCPItemRect(plot_);
    budgetBracket_->setObjectName("runPlotBudgetBracket");
    budgetBracket_->setPen(Qt::NoPen);
    budgetBracket_->setBrush(kBracketColor);
    budgetBracket_->setLayer(QStringLiteral("background"));
    budgetBracket_->setClipAxisRect(plot_->axisRect());
    for (QCPItemPosition* corner : {budgetBracket_->topLeft, budgetBracket_->bottomRight}) {
        corner->setAxes(plot_->xAxis, plot_->yAxis);
        corner->setAxisRect(plot_->axisRect());
        corner->setTypeX(QCPItemPosition::ptAxisRectRatio);
    }
    budgetBracket_->setVisible(false);
    budgetLabel_ = new QCPItemText(plot_);
    budgetLabel_->setObjectName("runPlotBudgetLabel");
    budgetLabel_->setClipAxisRect(plot_->axisRect());
    budgetLabel_->position->setAxes(plot_->xAxis, plot_->yAxis);
    budgetLabel_->position->setAxisRect(plot_->axisRect());
    budgetLabel_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    budgetLabel_->setTextAlignment(Qt::AlignRight);
    budgetLabel_->setFont(QFont(font().family(), 8));
    budgetLabel_->setColor(kBudgetColor);
    budgetLabel_->setPadding(QMargins(4, 1, 4, 1));
    budgetLabel_->setBrush(QColor(255, 255, 255, 190));
    budgetLabel_->setLayer(QStringLiteral("grid")); // under the run's points and lines: the label never hides a step
    budgetLabel_->setVisible(false);
}

void RunPlot::layOutPanels()
{
    // The panels' data areas start and end at the same x (one margin group for their left and right margins).
    auto* margins = new QCPMarginGroup(plot_);
    plot_->axisRect()->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    qualityRect_->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    // QCPAxis does not clip a title: one longer than its panel runs past the panel's ends, where the other panel or
    // the plot's edge cuts it. So each panel is at least as tall as its value axes' titles (the top panel's step axis,
    // without numbers, needs only a small margin above the quality panel) ...
    plot_->axisRect()->setMinimumMargins(QMargins(15, 15, 15, 8));
    qualityRect_->setMinimumMargins(QMargins(15, 8, 15, 15));
    for (QCPAxisRect* rect : {plot_->axisRect(), qualityRect_}) {
        int longest = rect->minimumSize().height();
        for (QCPAxis* axis : rect->axes(QCPAxis::atLeft | QCPAxis::atRight)) {
            longest = std::max(longest, axis->visible() ? titleLength(axis) : 0);
        }
        rect->setMinimumSize(rect->minimumSize().width(), longest);
    }
    // ... and the plot as tall as those panels with the legend and the axes' margins need, read from the laid-out
    // plot (the margins hold the tick labels, whose height QCustomPlot knows once it has laid them out).
    plot_->setMinimumHeight(kLeastPlotHeight);
    connect(plot_, &QCustomPlot::afterLayout, this, [this] {
        const int least = std::max(kLeastPlotHeight, plot_->plotLayout()->minimumOuterSizeHint().height());
        if (plot_->minimumHeight() != least) {
            plot_->setMinimumHeight(least);
        }
    });
}

void RunPlot::setStore(store::RunStore* store)
{
    store_ = store;
    runBudgets_.clear(); // run ids of another workspace
    budget_.reset();
    reloadBudgets();
    showRun(0, {});
}

void RunPlot::showRun(std::int64_t runId, const QString& title)
{
    runId_ = runId;
    cursor_ = 0;
    resumes_ = -1;
    kind_.clear();
    status_.clear();
    defaultsChosen_ = false;
    axisUnit_.reset();
    for (int i = 0; i < plot_->graphCount(); ++i) {
        plot_->graph(i)->data()->clear();
    }
    crosshair_->hide();
    rolloutStep_->clear();
    updateRolloutSteps();
    title_->setText(runId ? tr("Run %1: %2 — per-step mismatch and quality").arg(runId).arg(title)
                          : tr("Select a run to plot its per-step mismatch."));
    budgetBox_->setEnabled(runId != 0);
    applyRunBudget();
    tail();
    scheduleReplot();
}

void RunPlot::tail()
{
    if (!store_ || runId_ == 0) {
        updateMessage();
        return;
    }
    if (const auto run = store_->run(runId_)) {
        kind_ = QString::fromStdString(run->kind);
        status_ = QString::fromStdString(store::toString(run->status));
        // A resume (store::RunStore::reopenRun) deletes the steps after the checkpoint it continues from and records
        // them again, possibly under the same row ids, so the cursor would not see them: every resume adds a
        // provenance record, and a new one means reading the run's steps again from the first.
        int resumes = 0;
        for (std::size_t at = run->provenanceJson.find("\"resumed\""); at != std::string::npos;
             at = run->provenanceJson.find("\"resumed\"", at + 1)) {
            ++resumes;
        }
        if (resumes_ >= 0 && resumes != resumes_) {
            cursor_ = 0;
            for (const int series : {FullKl, K1, K3, Bf16Multiple}) {
                plot_->graph(series)->data()->clear();
            }
        }
        resumes_ = resumes;
    }
    const auto steps = store_->stepsAfter(runId_, cursor_);
    for (const auto& s : steps) {
        const double x = static_cast<double>(s.step);
        // A step drawn already comes again when a followed log's later line adds to it (store::storeFollowedSteps
        // writes the step's row anew): its new values replace the drawn ones.
        for (const int series : {FullKl, K1, K3, Bf16Multiple}) {
            plot_->graph(series)->data()->remove(x);
        }
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
    // KL is the primary series; a run that has none (an imported log) shows its sampled-token estimators.
    if (!defaultsChosen_ && pointCount() + plot_->graph(K1)->dataCount() + plot_->graph(K3)->dataCount() > 0) {
        defaultsChosen_ = true;
        const bool noKl = pointCount() == 0;
        k1Box_->setChecked(noKl && plot_->graph(K1)->dataCount() > 0);
        k3Box_->setChecked(noKl && plot_->graph(K3)->dataCount() > 0);
        setSeriesVisible(plot_, plot_->graph(K1), k1Box_->isChecked());
        setSeriesVisible(plot_, plot_->graph(K3), k3Box_->isChecked());
    }
    updateMessage();
    if (changed) {
        updateRolloutSteps();
        updateSmoothing();
        scheduleReplot();
    }
}

void RunPlot::updateRolloutSteps()
{
    const std::vector<std::int64_t> steps
        = store_ && runId_ != 0 ? store::stepsWithGenerations(*store_, runId_) : std::vector<std::int64_t> {};
    if (static_cast<int>(steps.size()) != rolloutStep_->count()) {
        const QVariant chosen = rolloutStep_->currentData();
        rolloutStep_->clear();
        for (const std::int64_t step : steps) {
            rolloutStep_->addItem(QString::number(step), QVariant::fromValue<qlonglong>(step));
        }
        const int index = rolloutStep_->findData(chosen);
        rolloutStep_->setCurrentIndex(index >= 0 ? index : rolloutStep_->count() - 1); // the newest by default
    }
    rolloutStep_->setEnabled(!steps.empty());
    drillDown_->setEnabled(!steps.empty());
}

TokenDrillDown* RunPlot::openDrillDown(std::int64_t step)
{
    if (!store_ || runId_ == 0) {
        return nullptr;
    }
    std::string student;
    if (const auto run = store_->run(runId_)) {
        const nlohmann::json config = nlohmann::json::parse(run->configJson, nullptr, false);
        if (config.is_object() && config.contains("student") && config["student"].is_string()) {
            student = config["student"].get<std::string>();
        }
    }
    return showStoredGenerations(student.empty() ? nullptr : tokenizers_.forModel(student),
        tr("Run %1, step %2: the step's first rollouts as the engine sampled them (mu), against the trainer "
           "before the step's update (pi). A rollout has no paired BF16 generation, so there is no first "
           "divergence.")
            .arg(runId_)
            .arg(step),
        store::stepGenerations(*store_, runId_, step), this);
}

void RunPlot::updateMessage()
{
    const bool empty = runId_ != 0 && pointCount() == 0 && plot_->graph(K1)->dataCount() == 0
        && plot_->graph(K3)->dataCount() == 0 && evaluationCount() == 0;
    if (!empty) {
        stack_->setCurrentIndex(0);
        return;
    }
    const QString tab = resultsTab(kind_);
    if (kind_ == QLatin1String("train") || kind_.isEmpty()) {
        message_->setText(status_ == QLatin1String("running")
                ? tr("<p>Run %1 is running; its first step has not been stored yet.</p>").arg(runId_)
                : tr("<p>Run %1 (%2) stored no steps.</p>").arg(runId_).arg(status_));
        openButton_->setVisible(false);
    } else if (tab.isEmpty()) {
        message_->setText(tr("<p>Run %1 is a <b>%2</b> run: it stores no per-step measures of its own. Its results "
                             "are in its configuration (<code>mismatch runs show %1</code>) and in "
                             "<code>mismatch report %1</code>; the runs it trained are listed in the table.</p>")
                              .arg(runId_)
                              .arg(kind_.toHtmlEscaped()));
        openButton_->setVisible(false);
    } else {
        message_->setText(tr("<p>Run %1 is a <b>%2</b> run (%3): it stores no per-step measures. Its results are "
                             "shown in the %4 tab.</p>")
                              .arg(runId_)
                              .arg(kind_.toHtmlEscaped(), status_, tab));
        openButton_->setText(tr("Show in the %1 tab").arg(tab));
        openButton_->setVisible(true);
    }
    stack_->setCurrentIndex(1);
}

void RunPlot::reloadBudgets()
{
    fillBudgetChoices(budgetBox_, store_);
    const QSignalBlocker block(budgetBox_);
    budgetBox_->setCurrentIndex(std::max(0, budget_ ? budgetChoiceRow(budgetBox_, budget_->calibrationId, budget_->step) : 0));
}

bool RunPlot::setRunBudget(std::int64_t runId, std::int64_t calibrationId, std::int64_t step)
{
    if (calibrationId == 0) {
        runBudgets_.erase(runId);
    } else {
        if (!store_) {
            return false;
        }
        try {
            store::admissionThreshold(*store_, calibrationId, step); // the bracket exists and gives a threshold
        } catch (const std::exception&) {
            return false;
        }
        runBudgets_[runId] = {calibrationId, step};
    }
    if (runId == runId_) {
        applyRunBudget();
    }
    return true;
}

void RunPlot::applyRunBudget()
{
    budget_.reset();
    const auto chosen = runBudgets_.find(runId_);
    if (runId_ != 0 && chosen != runBudgets_.end() && store_) {
        const auto [calibrationId, step] = chosen->second;
        try {
            if (const auto calibration = store::calibration(*store_, calibrationId)) {
                for (const store::CalibrationBracket& bracket : calibration->brackets) {
                    if (bracket.step == step) {
                        budget_
                            = ShownBudget {calibrationId, step, store::admissionThreshold(*store_, calibrationId, step),
                                bracket.largestPassing, bracket.smallestFailing};
                    }
                }
            }
        } catch (const std::exception&) {
            // Unreadable, or the bracket gives no threshold any more: nothing is drawn.
        }
    }
    if (budget_ && budgetChoiceRow(budgetBox_, budget_->calibrationId, budget_->step) < 0) {
        reloadBudgets(); // a calibration stored since the list was read
    }
    const QSignalBlocker block(budgetBox_);
    budgetBox_->setCurrentIndex(std::max(0, budget_ ? budgetChoiceRow(budgetBox_, budget_->calibrationId, budget_->step) : 0));
    scheduleReplot();
}

std::optional<double> RunPlot::budgetThreshold() const
{
    return budget_ ? std::optional<double>(budget_->threshold) : std::nullopt;
}

int RunPlot::stepsAboveBudget() const
{
    return plot_->graph(AboveBudget)->dataCount();
}

void RunPlot::drawBudget(const QCPRange& steps)
{
    QCPGraph* line = plot_->graph(Budget);
    QCPGraph* above = plot_->graph(AboveBudget);
    line->data()->clear();
    above->data()->clear();
    line->setVisible(budget_.has_value());
    above->setVisible(budget_.has_value());
    budgetLabel_->setVisible(budget_.has_value());
    budgetBracket_->setVisible(budget_ && budget_->largestPassing && budget_->smallestFailing);
    if (!budget_) {
        return;
    }
    // The line at the ends of the step axis and at every step of the run, so that the crosshair reads it at the step
    // under the mouse.
    std::set<double> keys {steps.lower, steps.upper};
    for (int g : {FullKl, K1, K3}) {
        for (auto it = plot_->graph(g)->data()->constBegin(); it != plot_->graph(g)->data()->constEnd(); ++it) {
            keys.insert(it->key);
        }
    }
    const QVector<double> lineKeys(keys.begin(), keys.end());
    line->setData(lineKeys, QVector<double>(lineKeys.size(), budget_->threshold), true);
    // The series it is compared with: the first shown of KL, k1 and k3 that has points (the primary one).
    int compared = -1;
    for (int g : {FullKl, K1, K3}) {
        if (compared < 0 && plot_->graph(g)->visible() && plot_->graph(g)->dataCount() > 0) {
            compared = g;
        }
    }
    if (compared >= 0) {
        const auto data = plot_->graph(compared)->data();
        for (auto it = data->constBegin(); it != data->constEnd(); ++it) {
            if (it->value > budget_->threshold) {
                above->addData(it->key, it->value);
            }
        }
    }
    const bool bracket = budget_->largestPassing && budget_->smallestFailing;
    if (bracket) {
        budgetBracket_->topLeft->setCoords(0.0, *budget_->smallestFailing);
        budgetBracket_->bottomRight->setCoords(1.0, *budget_->largestPassing);
    }
    QString text = tr("budget %1 nats/token (calibration #%2, step %3)")
                       .arg(budget_->threshold, 0, 'g', 3)
                       .arg(budget_->calibrationId)
                       .arg(budget_->step);
    if (bracket) {
        text += tr(", bracket [%1, %2]")
                    .arg(*budget_->largestPassing, 0, 'g', 3)
                    .arg(*budget_->smallestFailing, 0, 'g', 3);
    } else if (budget_->largestPassing) {
        text += tr(", no failing run yet");
    }
    text += QLatin1Char('\n')
        + (compared < 0 ? tr("no steps yet")
                        : tr("%1 above it at %2 of %3 steps")
                              .arg(QLatin1String(kShortNames[compared]))
                              .arg(above->dataCount())
                              .arg(plot_->graph(compared)->dataCount()));
    budgetLabel_->setText(text);
}

void RunPlot::placeBudgetLabel()
{
    if (!budget_) {
        return;
    }
    budgetLabel_->position->setCoords(1.0, budget_->threshold);
    const double line = plot_->yAxis->coordToPixel(budget_->threshold);
    const QMargins padding = budgetLabel_->padding();
    const int height = 2 * QFontMetrics(budgetLabel_->font()).height() + padding.top() + padding.bottom();
    const bool below = line - plot_->axisRect()->top() < height;
    budgetLabel_->setPositionAlignment(Qt::AlignRight | (below ? Qt::AlignTop : Qt::AlignBottom));
}

bool RunPlot::showingMessage() const
{
    return stack_->currentIndex() == 1;
}

QString RunPlot::messageText() const
{
    return message_->text();
}

QCPAxis* RunPlot::mismatchAxis() const
{
    return plot_->yAxis;
}

QCPAxis* RunPlot::multipleAxis() const
{
    return plot_->yAxis2;
}

QCPAxis* RunPlot::qualityAxis() const
{
    return qualityRect_->axis(QCPAxis::atLeft);
}

QCPAxis* RunPlot::accuracyAxis() const
{
    return qualityRect_->axis(QCPAxis::atRight);
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

void RunPlot::updateSmoothing()
{
    const int window = smoothing_->currentData().toInt();
    for (int g = FullKl; g <= K3; ++g) {
        QCPGraph* raw = plot_->graph(g);
        QCPGraph* smoothed = plot_->graph(SmoothedKl + g);
        QPen pen = raw->pen();
        QColor color = kMismatchGraphs[g].color;
        color.setAlpha(window > 1 ? kFadedAlpha : 255);
        pen.setColor(color);
        pen.setWidthF(window > 1 ? 1.0 : 2.0);
        raw->setPen(pen);
        raw->setScatterStyle(
            window > 1 ? QCPScatterStyle(QCPScatterStyle::ssNone) : QCPScatterStyle(QCPScatterStyle::ssDisc, 4));
        smoothed->setVisible(window > 1 && raw->visible());
        if (window > 1) {
            QVector<double> keys, values;
            for (auto it = raw->data()->constBegin(); it != raw->data()->constEnd(); ++it) {
                keys.append(it->key);
                values.append(it->value);
            }
            smoothed->setData(keys, movingAverage(values, window), true);
        } else {
            smoothed->data()->clear();
        }
    }
}

void RunPlot::replot()
{
    ++replots_;
    // Step axis: every stored point of both panels.
    bool anyKey = false;
    QCPRange steps;
    for (int g : {FullKl, K1, K3, Bf16Multiple, Quality}) {
        bool found = false;
        const QCPRange range = plot_->graph(g)->getKeyRange(found);
        if (found) {
            steps = anyKey ? QCPRange(std::min(steps.lower, range.lower), std::max(steps.upper, range.upper)) : range;
            anyKey = true;
        }
    }
    if (anyKey) {
        const double pad = std::max(0.5, (steps.upper - steps.lower) * 0.02);
        plot_->xAxis->setRange(steps.lower - pad, steps.upper + pad);
    }
    drawBudget(plot_->xAxis->range());
    // Mismatch axis: the visible mismatch series only (k1 can be negative and noisy), with zero in view.
    bool anyValue = false;
    QCPRange values(0.0, 0.0);
    for (int g : {FullKl, K1, K3}) {
        if (!plot_->graph(g)->visible()) {
            continue;
        }
        bool found = false;
        const QCPRange range = plot_->graph(g)->getValueRange(found);
        if (found) {
            values = QCPRange(std::min(values.lower, range.lower), std::max(values.upper, range.upper));
            anyValue = true;
        }
    }
    // The budget's line and its bracket's lower end stay in view: where the run stands against them is what they are
    // drawn for (a run far below its budget shows as such).
    if (budget_) {
        values.upper = std::max({values.upper, budget_->threshold, budget_->largestPassing.value_or(0.0)});
        anyValue = true;
    }
    if (!anyValue || values.upper <= values.lower) {
        values = QCPRange(0.0, 1.0);
    }
    const double span = values.upper - values.lower;
    plot_->yAxis->setRange(values.lower < 0 ? values.lower - 0.06 * span : 0.0, values.upper + 0.08 * span);
    // Right axis: the same scale in BF16 units (right = left / unit), so a point on the KL curve reads its
    // multiple there and both zeros sit at one height. The unit is the median of the run's KL / multiple (it is
    // re-measured during a run and moves a little; the stored multiples are drawn as they are).
    std::vector<double> units;
    const auto kl = plot_->graph(FullKl)->data();
    for (auto it = plot_->graph(Bf16Multiple)->data()->constBegin();
         it != plot_->graph(Bf16Multiple)->data()->constEnd(); ++it) {
        const auto found = kl->findBegin(it->key, false);
        if (found != kl->constEnd() && found->key == it->key && it->value > 0 && found->value > 0) {
            units.push_back(found->value / it->value);
        }
    }
    axisUnit_.reset();
    if (!units.empty()) {
        std::nth_element(units.begin(), units.begin() + static_cast<std::ptrdiff_t>(units.size() / 2), units.end());
        axisUnit_ = units[units.size() / 2];
        plot_->yAxis2->setRange(plot_->yAxis->range().lower / *axisUnit_, plot_->yAxis->range().upper / *axisUnit_);
    } else {
        bool found = false;
        const QCPRange multiples = plot_->graph(Bf16Multiple)->getValueRange(found);
        plot_->yAxis2->setRange(0.0, found && multiples.upper > 0 ? multiples.upper * 1.08 : 1.0);
    }
    plot_->yAxis2->setVisible(bf16MultipleCount() > 0);
    // Quality panel: Q and accuracy both from zero (zeros aligned), accuracy over its whole 0-100% range.
    bool foundQuality = false;
    const QCPRange quality = plot_->graph(Quality)->getValueRange(foundQuality);
    qualityAxis()->setRange(0.0, foundQuality && quality.upper > 0 ? quality.upper * 1.15 : 1.0);
    accuracyAxis()->setRange(0.0, 100.0);
    placeBudgetLabel();
    plot_->replot(QCustomPlot::rpQueuedReplot);
}

} // namespace mismatch::ui

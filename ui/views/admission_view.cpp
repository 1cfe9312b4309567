#include "ui/views/admission_view.h"

#include "ui/plots/mismatch_profile.h"

#include "ui/views/breakdown_view.h"
#include "ui/plots/glossary_tips.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/empty_state.h"
#include "ui/views/token_drilldown.h"

#include "core/store/analysis_store.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QFontMetrics>
#include <QEvent>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace mismatch::ui {

QColor decisionColor(const std::string& decision)
{
    if (decision == "admit")
        return QColor(0x2e, 0x7d, 0x32);
    if (decision == "reject")
        return QColor(0xc6, 0x28, 0x28);
    return QColor(0xef, 0x8a, 0x17); // borderline
}

QString decisionNotes(const AdmissionDecision& d)
{
    return QString::fromStdString(report::admissionNotes(d));
}

namespace {

// The decision's stored estimator comparison (nullopt for a decision stored without one).
std::optional<metrics::EstimatorComparison> storedEstimators(const AdmissionDecision& d)
{
    const nlohmann::json inputs = nlohmann::json::parse(d.candidateJson, nullptr, false);
    if (!inputs.is_object() || !inputs.contains("estimators")) {
        return std::nullopt;
    }
    try {
        return metrics::estimatorComparisonFromJson(inputs.at("estimators"));
    } catch (const std::invalid_argument&) {
        return std::nullopt;
    }
}

// "k1 ... (r / rho), k3 ..." from the decision's stored estimators ("" for a decision stored without them).
QString estimatorsText(const AdmissionDecision& d)
{
    const auto comparison = storedEstimators(d);
    if (!comparison) {
        return {};
    }
    QStringList items;
    for (const metrics::EstimatorSummary& e : comparison->estimators) {
        items << QString::fromStdString(e.name) + QLatin1Char(' ') + estimatorCell(e);
    }
    return items.join(QStringLiteral(", "));
}

// A checkpoint is often a directory path: its last component names it well enough on an axis.
QString checkpointName(const AdmissionDecision& d)
{
    const QString name = QFileInfo(QString::fromStdString(d.checkpoint)).fileName();
    return name.isEmpty() ? QString::fromStdString(d.checkpoint) : name;
}

// The picker's data for every check together, and for the decisions stored without a run (run ids start at 1).
constexpr qlonglong kEveryCheck = -1;
constexpr qlonglong kWithoutRun = 0;

qlonglong checkKey(const AdmissionDecision& d)
{
    return d.runId ? static_cast<qlonglong>(*d.runId) : kWithoutRun;
}

// "run 7", "no run": a check as row labels, thresholds and the profile's legend name it when several are shown.
QString checkName(qlonglong key)
{
    return key == kWithoutRun ? QObject::tr("no run") : QObject::tr("run %1").arg(key);
}

// "1 candidate", "3 candidates".
QString counted(std::size_t count, const QString& singular)
{
    return QStringLiteral("%1 %2%3").arg(count).arg(singular, count == 1 ? QString() : QStringLiteral("s"));
}

// One stored admission check: the decisions of one admit run, or those stored without a run.
struct AdmissionCheck {
    qlonglong key = kWithoutRun;
    std::int64_t newestId = 0; // its newest decision: checks are listed newest first
    std::size_t decisions = 0;
    std::set<std::string> candidates;
    std::set<std::string> checkpoints;
    std::set<std::int64_t> calibrations;
    std::set<double> thresholds;
    std::string createdAt;
};

std::vector<AdmissionCheck> checksOf(const std::vector<AdmissionDecision>& decisions)
{
    std::map<qlonglong, AdmissionCheck> byKey;
    for (const AdmissionDecision& d : decisions) {
        AdmissionCheck& check = byKey[checkKey(d)];
        check.key = checkKey(d);
        ++check.decisions;
        check.candidates.insert(d.candidateName);
        check.checkpoints.insert(d.checkpoint);
        if (d.calibrationId) {
            check.calibrations.insert(*d.calibrationId);
        }
        check.thresholds.insert(d.threshold);
        if (d.id >= check.newestId) {
            check.newestId = d.id;
            check.createdAt = d.createdAt;
        }
    }
    std::vector<AdmissionCheck> checks;
    for (auto& entry : byKey) {
        checks.push_back(std::move(entry.second));
    }
    std::sort(checks.begin(), checks.end(),
        [](const AdmissionCheck& a, const AdmissionCheck& b) { return a.newestId > b.newestId; });
    return checks;
}

// "admit run 7: 3 candidates x 2 checkpoints, calibration 1, 2025-01-03 10:00:00" (the run's stored name), with the
// number of decisions when it is not that product, and the threshold when no calibration set it.
QString checkLabel(const AdmissionCheck& check, const store::RunStore* store)
{
    QString text = QObject::tr("decisions without a run");
    if (check.key != kWithoutRun) {
        const std::optional<store::RunInfo> run = store ? store->run(check.key) : std::nullopt;
        text = QObject::tr("%1 run %2")
                   .arg(QString::fromStdString(run ? run->name : std::string("admit")))
                   .arg(check.key);
    }
    text += QStringLiteral(": %1 x %2")
                .arg(counted(check.candidates.size(), QObject::tr("candidate")),
                    counted(check.checkpoints.size(), QObject::tr("checkpoint")));
    if (check.decisions != check.candidates.size() * check.checkpoints.size()) {
        text += QStringLiteral(" (%1)").arg(counted(check.decisions, QObject::tr("decision")));
    }
    QStringList sources;
    for (std::int64_t id : check.calibrations) {
        sources << QString::number(id);
    }
    if (!sources.isEmpty()) {
        text += (sources.size() == 1 ? QObject::tr(", calibration ") : QObject::tr(", calibrations "))
            + sources.join(QStringLiteral(", "));
    } else {
        for (double threshold : check.thresholds) {
            sources << QString::number(threshold, 'g', 3);
        }
        text += QObject::tr(", threshold ") + sources.join(QStringLiteral(", "));
    }
    if (!check.createdAt.empty()) {
        text += QStringLiteral(", ") + QString::fromStdString(check.createdAt);
    }
    return text;
}

// Shade `index` of a decision's colour: the same hue and saturation, the lightness moved from the decision's own by
// the golden ratio's steps through [45, 205) (neither black nor white): the first candidates of one decision far
// apart, the later ones between them, and every decision keeps its hue.
QColor decisionShade(const std::string& decision, int index)
{
    const QColor base = decisionColor(decision);
    const double step = 0.6180339887 * index;
    const int offset = static_cast<int>(std::lround(160.0 * (step - std::floor(step))));
    const int lightness = 45 + (std::clamp(base.lightness(), 45, 204) - 45 + offset) % 160;
    return QColor::fromHsl(base.hslHue(), base.hslSaturation(), lightness);
}

} // namespace

QString AdmissionView::checkSuffix(const AdmissionDecision& d) const
{
    return severalChecks_ ? QStringLiteral(" [%1]").arg(checkName(checkKey(d))) : QString();
}

void AdmissionView::updateProfile()
{
    std::set<int> selected;
    for (const QModelIndex& index : table_->selectionModel()->selectedRows()) {
        selected.insert(index.row());
    }
    std::set<std::string> checkpoints;
    for (const AdmissionDecision& d : decisions_) {
        checkpoints.insert(d.checkpoint);
    }
    std::vector<std::pair<QString, metrics::EstimatorComparison>> series;
    profileEntries_.clear();
    for (std::size_t i = 0; i < decisions_.size(); ++i) {
        if (!selected.empty() && selected.count(static_cast<int>(i)) == 0) {
            continue;
        }
        const AdmissionDecision& d = decisions_[i];
        // The candidate, its checkpoint when the decisions shown span several, and its check when several are shown;
        // a decision stored without the comparison is counted as "without stored bins".
        const QString name = QString::fromStdString(d.candidateName)
            + (checkpoints.size() > 1 ? " @ " + checkpointName(d) : QString()) + checkSuffix(d);
        series.emplace_back(name, storedEstimators(d).value_or(metrics::EstimatorComparison {}));
        profileEntries_.push_back({name, d.decision, !series.back().second.byProbability.empty(),
            !series.back().second.byEntropy.empty()});
    }
    profile_->setSeries(std::move(series));
    styleProfile();
}

std::vector<std::pair<QCPBars*, const AdmissionView::ProfileEntry*>> AdmissionView::profileBars() const
{
    // The profile draws the series with bins on its axis, in order, one QCPBars each.
    QCustomPlot* plot = profile_->plot();
    const bool byEntropy = profile_->axis() == MismatchProfile::ByEntropy;
    std::vector<std::pair<QCPBars*, const ProfileEntry*>> bars;
    int plottable = 0;
    for (const ProfileEntry& entry : profileEntries_) {
        if (!(byEntropy ? entry.byEntropy : entry.byProbability)) {
            continue;
        }
        auto* drawn = plottable < plot->plottableCount() ? qobject_cast<QCPBars*>(plot->plottable(plottable)) : nullptr;
        ++plottable;
        if (!drawn) {
            break;
        }
        bars.emplace_back(drawn, &entry);
    }
    return bars;
}

void AdmissionView::styleProfile()
{
    // Each candidate's bars in its decision's colour, a shade per candidate of that decision.
    std::map<std::string, int> shades;
    for (const auto& [bars, entry] : profileBars()) {
        const QColor color = decisionShade(entry->decision, shades[entry->decision]++);
        bars->setPen(QPen(color.darker(130), 1));
        bars->setBrush(color);
    }
    updateProfileLegend();
    profile_->plot()->replot();
}

void AdmissionView::updateProfileLegend()
{
    // One entry per candidate when they all fit in the row above the plot (an entry given less than its name's
    // width is cut), else one per decision, "admit (9 decisions)": the candidates told apart by their shade and
    // their order in each bin, the table's order (select rows there to name a few).
    QCustomPlot* plot = profile_->plot();
    QCPLegend* legend = plot->legend;
    legend->clearItems();
    const auto bars = profileBars();
    for (const auto& [drawn, entry] : bars) {
        drawn->setName(entry->name);
        drawn->addToLegend(legend);
        setSeriesVisible(plot, drawn, drawn->visible()); // a series hidden from the legend stays greyed there
    }
    int needed = legend->margins().left() + legend->margins().right();
    for (int i = 0; i < legend->itemCount(); ++i) {
        if (const QCPLayoutElement* item = legend->item(i)) {
            needed += item->minimumOuterSizeHint().width() + legend->columnSpacing();
        }
    }
    decisionLegend_ = needed > plot->width() - 2 * legend->columnSpacing();
    if (!decisionLegend_) {
        return;
    }
    legend->clearItems();
    for (const char* kind : {"admit", "borderline", "reject"}) {
        QCPBars* first = nullptr;
        std::size_t count = 0;
        for (const auto& [drawn, entry] : bars) {
            if (entry->decision == kind) {
                first = first ? first : drawn;
                ++count;
            }
        }
        if (first) {
            first->setName(QStringLiteral("%1 (%2)").arg(QString::fromLatin1(kind), counted(count, tr("decision"))));
            first->addToLegend(legend);
            setSeriesVisible(plot, first, first->visible());
        }
    }
}

bool AdmissionView::eventFilter(QObject* watched, QEvent* event)
{
    // The profile's legend (its plot is the one object watched) follows the plot's width, before the plot's own
    // resize handler replots it.
    if (event->type() == QEvent::Resize && qobject_cast<QCustomPlot*>(watched)) {
        updateProfileLegend();
    }
    return QWidget::eventFilter(watched, event);
}

AdmissionView::AdmissionView(QWidget* parent)
    : QWidget(parent)
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Check:"), this));
    checkBox_ = new QComboBox(this);
    checkBox_->setObjectName("admissionCheck");
    // As wide as its longest check where there is room (fillCheckBox); on a narrow window it shrinks, eliding the
    // check (its full text in the tooltip), rather than widening the window.
    checkBox_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    checkBox_->setMinimumContentsLength(24);
    checkBox_->setToolTip(tr("The stored admission check to show (newest first): one admit run's decisions, the "
                             "decisions stored without a run, or every check together"));
    top->addWidget(checkBox_, 1);
    logScale_ = new QCheckBox(tr("Log mismatch axis"), this);
    logScale_->setObjectName("admissionLogScale");
    logScale_->setChecked(true);
    logScale_->setToolTip(tr("Candidates span orders of magnitude: on a linear axis the small ones sit on top of "
                             "each other"));
    top->addWidget(logScale_);
    drillDown_ = new QPushButton(tr("Token &Drill-Down..."), this);
    drillDown_->setObjectName("admissionDrillDown");
    drillDown_->setToolTip(tr("The selected decision's candidate generations token by token (the first prompts, "
                              "stored with `admit --store-generations`): each token coloured by its KL(mu || pi), mu "
                              "and pi of the chosen token, entropies, top-5; the largest-KL tokens; repetition and "
                              "undecodable output flagged. Double-click a row to open it too."));
    drillDown_->setEnabled(false);
    top->addWidget(drillDown_);
    top->addStretch(1);
    layout->addLayout(top);
    summary_ = new QLabel(this);
    summary_->setObjectName("admissionSummary");
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    readout_ = makeReadout(this, QStringLiteral("admissionReadout"),
        tr("Hover a candidate to read it; drag or wheel to zoom, double-click to reset."));
    layout->addWidget(readout_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("admissionPlot");
    plot_->setMinimumHeight(220);
    plot_->xAxis->setLabel(tr("mismatch (nats/token), 95% bootstrap interval over prompts"));
    plot_->yAxis->grid()->setVisible(false);
    plot_->yAxis->setRangeReversed(true); // first decision at the top, as in the table
    plot_->legend->setFont(QFont(font().family(), 8));
    placeLegendAbove(plot_);
    enableZoomAndReset(
        plot_, [this] { fitView(); }, Qt::Horizontal);
    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) { hoverAt(event->pos()); });
    // The threshold labels are placed in pixels, after every layout (a resize, a zoom).
    connect(plot_, &QCustomPlot::afterLayout, this, &AdmissionView::placeThresholdLabels);
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);

    model_ = new QStandardItemModel(this);
    table_ = new QTableView(this);
    table_->setObjectName("admissionTable");
    table_->setModel(model_);
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setWordWrap(false);
    addTableExportMenu(table_);

    // Where each decision's mismatch sits (its stored estimator comparison's bins): the selected decisions, or all.
    profile_ = new MismatchProfile(QStringLiteral("admission"), this);
    profile_->plot()->installEventFilter(this);
    profile_->plot()->setToolTip(tr("Each candidate's bars in its decision's colour (a shade per candidate), in the "
                                    "table's order within each bin; select rows in the table to compare a few by "
                                    "name."));
    connect(profile_, &MismatchProfile::axisChanged, this, &AdmissionView::styleProfile);
    // A decision's entry (placeLegendAbove has just shown or hidden its first bar) shows or hides all its bars.
    connect(profile_->plot(), &QCustomPlot::legendClick, this,
        [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
            auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
            if (!decisionLegend_ || !entry) {
                return;
            }
            const auto bars = profileBars();
            const auto clicked = std::find_if(
                bars.begin(), bars.end(), [entry](const auto& bar) { return bar.first == entry->plottable(); });
            for (const auto& [drawn, decision] : bars) {
                if (clicked != bars.end() && decision->decision == clicked->second->decision) {
                    drawn->setVisible(entry->plottable()->visible());
                }
            }
            profile_->plot()->replot();
        });
    connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        updateProfile();
        const int row = table_->currentIndex().isValid() ? table_->currentIndex().row() : -1;
        drillDown_->setEnabled(store_ && row >= 0 && row < static_cast<int>(decisions_.size())
            && store::admissionGenerationCount(*store_, decisions_[static_cast<std::size_t>(row)].id) > 0);
    });
    connect(drillDown_, &QPushButton::clicked, this, [this] {
        if (table_->currentIndex().isValid()) {
            openDrillDown(table_->currentIndex().row());
        }
    });
    connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) { openDrillDown(index.row()); });

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(plot_);
    split->addWidget(profile_);
    split->addWidget(table_);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setStretchFactor(2, 2);
    layout->addWidget(split, 1);
    connect(logScale_, &QCheckBox::toggled, this, [this] { showSelectedCheck(); });
    connect(checkBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] { showSelectedCheck(); });
    emptyState_ = new EmptyState(this, page,
        {QStringLiteral("admission"), tr("No admission checks in this workspace yet"),
            tr("This tab will show admission decisions: each candidate rollout configuration's mismatch on a "
               "student checkpoint with its 95% interval, against the threshold of the student's budget: admit, "
               "borderline or reject.<br>Start a check here (it needs a calibration), or run <code>mismatch "
               "admit</code> on this workspace."),
            tr("Start Admission Check...")});
    connect(emptyState_, &EmptyState::startRequested, this, &AdmissionView::startRequested);
}

void AdmissionView::setStore(const store::RunStore* store)
{
    store_ = store;
    refresh();
}

void AdmissionView::refresh()
{
    all_ = store_ ? AnalysisData(*store_).admissionDecisions() : std::vector<AdmissionDecision> {};
    emptyState_->setEmpty(all_.empty());
    fillCheckBox();
    showSelectedCheck();
}

void AdmissionView::fillCheckBox()
{
    // The check shown stays shown, unless it was the newest: then the newest is shown (a check just run appears).
    const QVariant previous = checkBox_->currentData();
    const bool followNewest = checkBox_->currentIndex() <= 0;
    const QSignalBlocker block(checkBox_);
    checkBox_->clear();
    const std::vector<AdmissionCheck> checks = checksOf(all_);
    for (const AdmissionCheck& check : checks) {
        checkBox_->addItem(checkLabel(check, store_), QVariant::fromValue<qlonglong>(check.key));
    }
    if (checks.size() > 1) {
        checkBox_->addItem(
            tr("every check: %1 in %2 checks").arg(counted(all_.size(), tr("decision"))).arg(checks.size()),
            QVariant::fromValue<qlonglong>(kEveryCheck));
    }
    int widest = 0;
    for (int item = 0; item < checkBox_->count(); ++item) {
        checkBox_->setItemData(item, checkBox_->itemText(item), Qt::ToolTipRole);
        widest = std::max(widest, checkBox_->fontMetrics().horizontalAdvance(checkBox_->itemText(item)));
    }
    checkBox_->setMaximumWidth(std::max(widest + 48, 200));
    int index = checks.empty() ? -1 : 0;
    if (!followNewest && previous.isValid() && checkBox_->findData(previous) >= 0) {
        index = checkBox_->findData(previous);
    }
    checkBox_->setCurrentIndex(index);
}

bool AdmissionView::selectCheck(std::optional<std::int64_t> runId)
{
    const int index = checkBox_->findData(QVariant::fromValue<qlonglong>(runId ? *runId : kWithoutRun));
    {
        const QSignalBlocker block(checkBox_);
        checkBox_->setCurrentIndex(index);
    }
    showSelectedCheck();
    return index >= 0;
}

void AdmissionView::showEveryCheck()
{
    const int index = checkBox_->findData(QVariant::fromValue<qlonglong>(kEveryCheck));
    {
        const QSignalBlocker block(checkBox_);
        checkBox_->setCurrentIndex(index >= 0 || checkBox_->count() == 0 ? index : 0); // one check: it is every check
    }
    showSelectedCheck();
}

void AdmissionView::showSelectedCheck()
{
    decisions_.clear();
    std::set<qlonglong> shownChecks;
    if (checkBox_->currentIndex() >= 0) {
        const qlonglong key = checkBox_->currentData().toLongLong();
        for (const AdmissionDecision& d : all_) {
            if (key == kEveryCheck || checkKey(d) == key) {
                decisions_.push_back(d);
                shownChecks.insert(checkKey(d));
            }
        }
    }
    severalChecks_ = shownChecks.size() > 1;
    model_->clear();
    model_->setHorizontalHeaderLabels(
        {tr("Candidate"), tr("Checkpoint"), tr("Mismatch"), tr("95% interval"), tr("Threshold"), tr("x BF16"),
            tr("Decision"), tr("Notes"), tr("Seconds"), tr("Tool version"), tr("Decided (UTC)"),
            tr("Sampled-token estimators (token mean, r / rho with the full KL)")});
    addGlossaryHeaderTips(model_);
    for (const AdmissionDecision& d : decisions_) {
        model_->appendRow(tableRow(d));
    }
    table_->resizeColumnsToContents();
    plotDecisions();
    drawThresholds();
    fitAxes();
    showSummary();
    plot_->replot();
    updateProfile();
}

QList<QStandardItem*> AdmissionView::tableRow(const AdmissionDecision& d) const
{
    const QString notes = decisionNotes(d);
    const std::optional<double> multiple = bf16Multiple(d);
    QList<QStandardItem*> items;
    items << new QStandardItem(QString::fromStdString(d.candidateName))
          << new QStandardItem(QString::fromStdString(d.checkpoint))
          << new QStandardItem(QString::number(d.mismatch, 'g', 4))
          << new QStandardItem(QStringLiteral("[%1, %2]").arg(d.ciLow, 0, 'g', 4).arg(d.ciHigh, 0, 'g', 4))
          << new QStandardItem(QString::number(d.threshold, 'g', 4))
          << new QStandardItem(multiple ? QStringLiteral("%1x").arg(*multiple, 0, 'g', 3) : tr("-"))
          << new QStandardItem(QString::fromStdString(d.decision))
          << new QStandardItem(notes.isEmpty()
                     ? QString()
                     : QStringLiteral("\u26a0 ") + QString(notes).replace('\n', QStringLiteral("; ")))
          << new QStandardItem(QString::number(d.seconds, 'f', 1))
          << new QStandardItem(QString::fromStdString(d.toolVersion))
          << new QStandardItem(QString::fromStdString(d.createdAt)) << new QStandardItem(estimatorsText(d));
    items[Decision]->setForeground(decisionColor(d.decision));
    items[Notes]->setForeground(QColor(0x8d, 0x5a, 0x00));
    items[Notes]->setToolTip(notes);
    items[Candidate]->setToolTip(QString::fromStdString(d.candidateJson));
    for (int column : {Mismatch, Threshold, Bf16Multiple, Seconds}) {
        items[column]->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    }
    return items;
}

void AdmissionView::plotDecisions()
{
    plot_->clearPlottables();
    // One graph per decision kind (for the legend and colours), each with horizontal error bars.
    std::map<std::string, std::pair<QVector<double>, QVector<double>>> points; // decision -> (mismatch, row)
    std::map<std::string, QVector<double>> lowErrors, highErrors;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (size_t i = 0; i < decisions_.size(); ++i) {
        const AdmissionDecision& d = decisions_[i];
        const double row = static_cast<double>(i);
        points[d.decision].first.append(d.mismatch);
        points[d.decision].second.append(row);
        lowErrors[d.decision].append(d.mismatch - d.ciLow);
        highErrors[d.decision].append(d.ciHigh - d.mismatch);
        ticker->addTick(row,
            QString::fromStdString(d.candidateName) + " @ " + checkpointName(d) + checkSuffix(d)
                + (decisionNotes(d).isEmpty() ? QString() : QStringLiteral(" \u26a0")));
    }
    for (const char* kind : {"admit", "borderline", "reject"}) {
        const auto it = points.find(kind);
        if (it == points.end()) {
            continue;
        }
        // Key axis vertical: the graph's keys are the rows and its values the mismatch.
        QCPGraph* graph = plot_->addGraph(plot_->yAxis, plot_->xAxis);
        graph->setName(QString::fromLatin1(kind));
        graph->setLineStyle(QCPGraph::lsNone);
        const QColor color = decisionColor(kind);
        graph->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, color, 9));
        graph->setData(it->second.second, it->second.first, true);
        auto* bars = new QCPErrorBars(plot_->yAxis, plot_->xAxis);
        bars->removeFromLegend();
        bars->setDataPlottable(graph);
        bars->setErrorType(QCPErrorBars::etValueError);
        bars->setPen(QPen(color, 2));
        bars->setWhiskerWidth(8);
        bars->setData(lowErrors[kind], highErrors[kind]);
    }
    plot_->yAxis->setTicker(ticker);
    // Each row keeps a line of its own: the plot grows with the decisions shown (the tab scrolls) rather than
    // stacking their labels; 110 px for the legend, the axis and its title.
    const int rowHeight = QFontMetrics(plot_->yAxis->tickLabelFont()).height() + 4;
    plot_->setMinimumHeight(std::max(220, 110 + static_cast<int>(decisions_.size()) * rowHeight));
}

void AdmissionView::drawThresholds()
{
    plot_->clearItems();
    thresholdLabels_.clear();
    // Who each threshold belongs to: threshold -> check -> its checkpoints at that threshold. A check's threshold is
    // per checkpoint (the calibration's bracket at the checkpoint's step), so one check can hold several.
    std::map<double, std::map<qlonglong, QStringList>> owners;
    std::map<qlonglong, std::set<double>> thresholdsOfCheck;
    for (const AdmissionDecision& d : decisions_) {
        QStringList& checkpoints = owners[d.threshold][checkKey(d)];
        if (!checkpoints.contains(checkpointName(d))) {
            checkpoints << checkpointName(d);
        }
        thresholdsOfCheck[checkKey(d)].insert(d.threshold);
    }
    for (const auto& [threshold, checks] : owners) {
        // Named by its check when several are shown, by its checkpoints when its check has several thresholds.
        QStringList names;
        for (const auto& [key, checkpoints] : checks) {
            QStringList parts;
            if (severalChecks_) {
                parts << checkName(key);
            }
            if (thresholdsOfCheck[key].size() > 1) {
                parts << checkpoints.join(QStringLiteral(", "));
            }
            names << parts.join(QStringLiteral(" @ "));
        }
        auto* line = new QCPItemStraightLine(plot_);
        line->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 1.5, Qt::DashLine));
        line->point1->setCoords(threshold, 0);
        line->point2->setCoords(threshold, 1);
        auto* label = new QCPItemText(plot_);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAbsolute); // pixels, set by placeThresholdLabels()
        label->position->setCoords(threshold, 0.0);
        QString text = tr("threshold %1").arg(threshold, 0, 'g', 3);
        if (owners.size() > 1) {
            text += QStringLiteral(" (%1)").arg(names.join(QStringLiteral("; ")));
        }
        label->setText(text);
        label->setColor(QColor(0x6a, 0x1b, 0x9a));
        label->setPadding(QMargins(3, 1, 3, 1));
        label->setBrush(QColor(255, 255, 255, 190)); // readable over a marker, which still shows through
        thresholdLabels_.push_back(label);
    }
}

void AdmissionView::placeThresholdLabels()
{
    // Each label reads rightwards from the top of its line (leftwards when it would leave the plot there); a label
    // that would cover one already placed goes below it. Left to right, so the stack reads in threshold order.
    const QRect area = plot_->axisRect()->rect();
    std::vector<QRectF> placed;
    const auto rectOf = [](const QCPItemText* label) {
        return QRectF(label->topLeft->pixelPosition(), label->bottomRight->pixelPosition()).normalized();
    };
    for (QCPItemText* label : thresholdLabels_) {
        const double threshold = label->position->coords().x();
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->position->setCoords(threshold, area.top() + 2.0);
        if (rectOf(label).right() > area.right()) {
            label->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
        }
        for (bool moved = true; moved;) {
            moved = false;
            const QRectF rect = rectOf(label);
            for (const QRectF& other : placed) {
                if (rect.intersects(other.adjusted(-1.0, -1.0, 1.0, 1.0))) {
                    label->position->setCoords(threshold, other.bottom() + 2.0);
                    moved = true;
                    break;
                }
            }
        }
        placed.push_back(rectOf(label));
    }
}

void AdmissionView::fitAxes()
{
    double xMax = 0.0;
    double xMinPositive = 0.0;
    bool positive = true; // a logarithmic axis needs every interval above zero
    for (const AdmissionDecision& d : decisions_) {
        xMax = std::max({xMax, d.ciHigh, d.threshold});
        for (double v : {d.ciLow, d.mismatch, d.threshold}) {
            if (v > 0 && (xMinPositive == 0.0 || v < xMinPositive)) {
                xMinPositive = v;
            }
        }
        positive = positive && d.ciLow > 0.0;
    }
    // A logarithmic axis needs positive values; an interval reaching zero or below falls back to linear.
    const bool logAxis = logScale_->isChecked() && xMinPositive > 0.0 && positive;
    setLogScale(plot_->xAxis, logAxis);
    plot_->xAxis->setLabel(logAxis ? tr("mismatch (nats/token, log scale), 95% bootstrap interval over prompts")
                                   : tr("mismatch (nats/token), 95% bootstrap interval over prompts"));
    if (logAxis) {
        fitX_[0] = xMinPositive / 1.6;
        fitX_[1] = xMax * 2.2; // room right of the widest interval for the threshold's label
    } else {
        fitX_[0] = 0.0;
        fitX_[1] = xMax > 0 ? xMax * 1.35 : 1.0;
    }
    // Rows from the top; room above the first row for the stacked threshold labels beyond the first.
    fitY_[0] = -0.6 - 0.5 * std::max<double>(0.0, static_cast<double>(thresholdLabels_.size()) - 1.0);
    fitY_[1] = std::max<double>(1.0, static_cast<double>(decisions_.size())) - 0.4;
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    plot_->yAxis->setRange(fitY_[0], fitY_[1]);
}

void AdmissionView::showSummary()
{
    int counts[3] = {0, 0, 0};
    int flagged = 0;
    for (const AdmissionDecision& d : decisions_) {
        counts[d.decision == "admit" ? 0 : d.decision == "reject" ? 2 : 1]++;
        flagged += decisionNotes(d).isEmpty() ? 0 : 1;
    }
    QString summary = decisions_.empty()
        ? (all_.empty() ? tr("No admission decisions in this workspace yet.") : tr("No admission check selected."))
        : tr("%1 decisions: %2 admitted, %3 borderline, %4 rejected")
              .arg(decisions_.size())
              .arg(counts[0])
              .arg(counts[1])
              .arg(counts[2]);
    if (flagged > 0) {
        summary += tr("; \u26a0 %n with a note (protocol differs, flagged calibration or threshold from another step)", nullptr, flagged);
    }
    summary_->setText(summary);
}

void AdmissionView::fitView()
{
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    plot_->yAxis->setRange(fitY_[0], fitY_[1]);
    plot_->replot();
}

QString AdmissionView::readoutText() const
{
    return readout_->text();
}

void AdmissionView::hoverAt(const QPoint& pixel)
{
    const double row = plot_->yAxis->pixelToCoord(pixel.y());
    const long index = std::lround(row);
    if (!plot_->axisRect()->rect().contains(pixel) || index < 0 || index >= static_cast<long>(decisions_.size())
        || std::abs(row - static_cast<double>(index)) > 0.45) {
        readout_->setText(readout_->property("idle").toString());
        return;
    }
    const AdmissionDecision& d = decisions_[static_cast<size_t>(index)];
    QString text
        = tr("%1 @ %2: mismatch %3 [%4, %5] nats/token")
              .arg(QString::fromStdString(d.candidateName), QFileInfo(QString::fromStdString(d.checkpoint)).fileName())
              .arg(d.mismatch, 0, 'g', 4)
              .arg(d.ciLow, 0, 'g', 4)
              .arg(d.ciHigh, 0, 'g', 4);
    if (const auto multiple = bf16Multiple(d)) {
        text += tr(" (%1x BF16)").arg(*multiple, 0, 'g', 3);
    }
    text += tr(" against %1: %2").arg(d.threshold, 0, 'g', 4).arg(QString::fromStdString(d.decision));
    const QString notes = decisionNotes(d);
    if (!notes.isEmpty()) {
        text += QStringLiteral(" \u26a0 ") + QString(notes).replace('\n', QStringLiteral("; "));
    }
    readout_->setText(text);
}

TokenDrillDown* AdmissionView::openDrillDown(int row)
{
    if (!store_ || row < 0 || row >= static_cast<int>(decisions_.size())) {
        return nullptr;
    }
    const AdmissionDecision& d = decisions_[static_cast<std::size_t>(row)];
    // The checkpoint's tokenizer shows the tokens as text (ids without it).
    return showStoredGenerations(tokenizers_.forModel(d.checkpoint),
        tr("Admission decision %1: <b>%2</b> at %3, %4 (mismatch %5 nats/token). The candidate's own "
           "generations; no paired BF16 generation was kept, so there is no first divergence.")
            .arg(d.id)
            .arg(QString::fromStdString(d.candidateName).toHtmlEscaped(), QString::fromStdString(d.checkpoint).toHtmlEscaped(),
                QString::fromStdString(d.decision))
            .arg(d.mismatch, 0, 'g', 3),
        store::admissionGenerations(*store_, d.id), this);
}

} // namespace mismatch::ui

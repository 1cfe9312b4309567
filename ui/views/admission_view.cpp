#include "ui/views/admission_view.h"

#include "ui/plots/mismatch_profile.h"

#include "ui/views/breakdown_view.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/token_drilldown.h"

#include "core/store/analysis_store.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QItemSelectionModel>
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

} // namespace

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
    for (std::size_t i = 0; i < decisions_.size(); ++i) {
        if (!selected.empty() && selected.count(static_cast<int>(i)) == 0) {
            continue;
        }
        const AdmissionDecision& d = decisions_[i];
        // The candidate, and its checkpoint when the decisions shown span several; a decision stored without the
        // comparison is counted as "without stored bins".
        const QString name
            = QString::fromStdString(d.candidateName) + (checkpoints.size() > 1 ? " @ " + checkpointName(d) : QString());
        series.emplace_back(name, storedEstimators(d).value_or(metrics::EstimatorComparison {}));
    }
    profile_->setSeries(std::move(series));
}

AdmissionView::AdmissionView(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    summary_ = new QLabel(this);
    summary_->setObjectName("admissionSummary");
    summary_->setWordWrap(true);
    top->addWidget(summary_, 1);
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
    layout->addLayout(top);
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
    addPlotExportMenu(plot_);

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
    connect(logScale_, &QCheckBox::toggled, this, [this] { refresh(); });
}

void AdmissionView::setStore(const store::RunStore* store)
{
    store_ = store;
    refresh();
}

void AdmissionView::setRunFilter(std::optional<std::int64_t> runId)
{
    runFilter_ = runId;
    refresh();
}

void AdmissionView::refresh()
{
    decisions_ = store_ ? AnalysisData(*store_).admissionDecisions() : std::vector<AdmissionDecision> {};
    if (runFilter_) {
        decisions_.erase(std::remove_if(decisions_.begin(), decisions_.end(),
                             [this](const AdmissionDecision& d) { return d.runId != runFilter_; }),
            decisions_.end());
    }
    plot_->clearPlottables();
    plot_->clearItems();
    thresholdLines_ = 0;
    model_->clear();
    model_->setHorizontalHeaderLabels(
        {tr("Candidate"), tr("Checkpoint"), tr("Mismatch"), tr("95% interval"), tr("Threshold"), tr("x BF16"),
            tr("Decision"), tr("Notes"), tr("Seconds"), tr("Tool version"), tr("Decided (UTC)"),
            tr("Sampled-token estimators (token mean, r / rho with the full KL)")});

    // One graph per decision kind (for the legend and colours), each with horizontal error bars.
    std::map<std::string, std::pair<QVector<double>, QVector<double>>> points; // decision -> (mismatch, row)
    std::map<std::string, QVector<double>> lowErrors, highErrors;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double xMax = 0.0;
    double xMinPositive = 0.0;
    std::set<double> thresholds;
    int counts[3] = {0, 0, 0};
    int flagged = 0;
    for (size_t i = 0; i < decisions_.size(); ++i) {
        const AdmissionDecision& d = decisions_[i];
        const double row = static_cast<double>(i);
        points[d.decision].first.append(d.mismatch);
        points[d.decision].second.append(row);
        lowErrors[d.decision].append(d.mismatch - d.ciLow);
        highErrors[d.decision].append(d.ciHigh - d.mismatch);
        const QString notes = decisionNotes(d);
        flagged += notes.isEmpty() ? 0 : 1;
        ticker->addTick(row,
            QString::fromStdString(d.candidateName) + " @ " + checkpointName(d)
                + (notes.isEmpty() ? QString() : QStringLiteral(" \u26a0")));
        xMax = std::max({xMax, d.ciHigh, d.threshold});
        for (double v : {d.ciLow, d.mismatch, d.threshold}) {
            if (v > 0 && (xMinPositive == 0.0 || v < xMinPositive)) {
                xMinPositive = v;
            }
        }
        thresholds.insert(d.threshold);
        counts[d.decision == "admit" ? 0 : d.decision == "reject" ? 2 : 1]++;

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
        model_->appendRow(items);
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
    for (double threshold : thresholds) {
        auto* line = new QCPItemStraightLine(plot_);
        line->setPen(QPen(QColor(0x6a, 0x1b, 0x9a), 1.5, Qt::DashLine));
        line->point1->setCoords(threshold, 0);
        line->point2->setCoords(threshold, 1);
        auto* label = new QCPItemText(plot_);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(threshold, 0.0);
        label->setText(tr(" threshold %1").arg(threshold, 0, 'g', 3));
        label->setColor(QColor(0x6a, 0x1b, 0x9a));
        ++thresholdLines_;
    }
    plot_->yAxis->setTicker(ticker);
    plot_->yAxis->setRange(-0.6, std::max<double>(1.0, static_cast<double>(decisions_.size())) - 0.4);
    // A logarithmic axis needs positive values; an interval reaching zero or below falls back to linear.
    bool logAxis = logScale_->isChecked() && xMinPositive > 0.0;
    for (const AdmissionDecision& d : decisions_) {
        logAxis = logAxis && d.ciLow > 0.0;
    }
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
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    table_->resizeColumnsToContents();
    QString summary = decisions_.empty() ? tr("No admission decisions in this workspace yet.")
                                         : tr("%1 decisions: %2 admitted, %3 borderline, %4 rejected")
                                               .arg(decisions_.size())
                                               .arg(counts[0])
                                               .arg(counts[1])
                                               .arg(counts[2]);
    if (flagged > 0) {
        summary += tr("; \u26a0 %n with a note (protocol differs, flagged calibration or threshold from another step)", nullptr, flagged);
    }
    summary_->setText(summary);
    plot_->replot();
    updateProfile();
}

void AdmissionView::fitView()
{
    plot_->xAxis->setRange(fitX_[0], fitX_[1]);
    plot_->yAxis->setRange(-0.6, std::max<double>(1.0, static_cast<double>(decisions_.size())) - 0.4);
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

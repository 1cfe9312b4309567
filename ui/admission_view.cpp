#include "ui/admission_view.h"

#include "ui/plot_export.h"

#include <qcustomplot.h>

#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

#include <algorithm>
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

AdmissionView::AdmissionView(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    summary_ = new QLabel(this);
    summary_->setObjectName("admissionSummary");
    layout->addWidget(summary_);
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("admissionPlot");
    plot_->setMinimumHeight(220);
    plot_->xAxis->setLabel(tr("mismatch (nats/token), 95% bootstrap interval over prompts"));
    plot_->yAxis->grid()->setVisible(false);
    plot_->yAxis->setRangeReversed(true); // first decision at the top, as in the table
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
    plot_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    addPlotExportMenu(plot_);

    model_ = new QStandardItemModel(this);
    table_ = new QTableView(this);
    table_->setObjectName("admissionTable");
    table_->setModel(model_);
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->horizontalHeader()->setStretchLastSection(true);
    addTableExportMenu(table_);

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(plot_);
    split->addWidget(table_);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);
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
    model_->setHorizontalHeaderLabels({tr("Candidate"), tr("Checkpoint"), tr("Mismatch"), tr("95% interval"),
        tr("Threshold"), tr("Decision"), tr("Seconds"), tr("Tool version"), tr("Decided (UTC)")});

    // One graph per decision kind (for the legend and colours), each with horizontal error bars.
    std::map<std::string, std::pair<QVector<double>, QVector<double>>> points; // decision -> (mismatch, row)
    std::map<std::string, QVector<double>> lowErrors, highErrors;
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    double xMax = 0.0;
    std::set<double> thresholds;
    int counts[3] = {0, 0, 0};
    for (size_t i = 0; i < decisions_.size(); ++i) {
        const AdmissionDecision& d = decisions_[i];
        const double row = static_cast<double>(i);
        points[d.decision].first.append(d.mismatch);
        points[d.decision].second.append(row);
        lowErrors[d.decision].append(d.mismatch - d.ciLow);
        highErrors[d.decision].append(d.ciHigh - d.mismatch);
        // A checkpoint is often a directory path: its last component names it well enough on an axis.
        const QString checkpoint = QFileInfo(QString::fromStdString(d.checkpoint)).fileName();
        ticker->addTick(row,
            QString::fromStdString(d.candidateName) + " @ "
                + (checkpoint.isEmpty() ? QString::fromStdString(d.checkpoint) : checkpoint));
        xMax = std::max({xMax, d.ciHigh, d.threshold});
        thresholds.insert(d.threshold);
        counts[d.decision == "admit" ? 0 : d.decision == "reject" ? 2 : 1]++;

        QList<QStandardItem*> items;
        items << new QStandardItem(QString::fromStdString(d.candidateName))
              << new QStandardItem(QString::fromStdString(d.checkpoint))
              << new QStandardItem(QString::number(d.mismatch, 'g', 4))
              << new QStandardItem(QStringLiteral("[%1, %2]").arg(d.ciLow, 0, 'g', 4).arg(d.ciHigh, 0, 'g', 4))
              << new QStandardItem(QString::number(d.threshold, 'g', 4))
              << new QStandardItem(QString::fromStdString(d.decision))
              << new QStandardItem(QString::number(d.seconds, 'f', 1))
              << new QStandardItem(QString::fromStdString(d.toolVersion))
              << new QStandardItem(QString::fromStdString(d.createdAt));
        items[5]->setForeground(decisionColor(d.decision));
        items[0]->setToolTip(QString::fromStdString(d.candidateJson));
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
    // Room on the right for the legend, clear of the widest interval.
    plot_->xAxis->setRange(0, xMax > 0 ? xMax * 1.35 : 1.0);
    table_->resizeColumnsToContents();
    summary_->setText(decisions_.empty() ? tr("No admission decisions in this workspace yet.")
                                         : tr("%1 decisions: %2 admitted, %3 borderline, %4 rejected")
                                               .arg(decisions_.size())
                                               .arg(counts[0])
                                               .arg(counts[1])
                                               .arg(counts[2]));
    plot_->replot();
}

} // namespace mismatch::ui

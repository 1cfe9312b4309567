#include "ui/views/breakdown_view.h"

#include "ui/plots/mismatch_profile.h"

#include "core/metrics/estimators.h"
#include "core/report/analysis_data.h"
#include "core/store/import_store.h"
#include "ui/plots/glossary_tips.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/empty_state.h"

#include <nlohmann/json.hpp>

#include <qcustomplot.h>

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
#include <limits>
#include <map>
#include <set>

namespace mismatch::ui {

namespace {

const char* const kUnitSeries = "BF16 unit";
const char* const kMethodNames[] = {"shapley", "add_one_in", "leave_one_out"};

// Bottom-up order of the stack (the BF16 unit first, the interaction last).
const std::vector<QString>& seriesOrder()
{
    static const std::vector<QString> order = {QString::fromLatin1(kUnitSeries), QStringLiteral("weights"),
        QStringLiteral("activations"), QStringLiteral("kv_cache"), QStringLiteral("embedding_lm_head"),
        QStringLiteral("staleness"), QStringLiteral("noise"), QStringLiteral("interaction")};
    return order;
}

QString intervalText(double value, const std::optional<double>& low, const std::optional<double>& high)
{
    QString text = QString::number(value, 'g', 4);
    if (low && high) {
        text += QStringLiteral(" [%1, %2]").arg(*low, 0, 'g', 3).arg(*high, 0, 'g', 3);
    }
    return text;
}

QString allSources(const store::BreakdownRecord& record)
{
    QStringList names;
    for (const std::string& source : record.sources) {
        names << QString::fromStdString(source);
    }
    return names.join(QLatin1Char('+'));
}

} // namespace

QString estimatorCell(const metrics::EstimatorSummary& estimator)
{
    return QString::fromStdString(report::estimatorCell(estimator));
}

QString estimatorLine(const metrics::EstimatorComparison& comparison)
{
    QStringList items;
    for (const metrics::EstimatorSummary& e : comparison.estimators) {
        items << QString::fromStdString(e.name) + QLatin1Char(' ') + estimatorCell(e);
    }
    return QObject::tr("Sampled-token estimators over %1 tokens (token mean, r / rho = Pearson / Spearman with the "
                       "per-token full KL %2): %3.")
        .arg(comparison.tokens)
        .arg(comparison.kl, 0, 'g', 4)
        .arg(items.join(QStringLiteral(", ")));
}

QColor BreakdownView::sourceColor(const QString& source)
{
    static const std::map<QString, QColor> colors = {{QString::fromLatin1(kUnitSeries), QColor(0x9e, 0x9e, 0x9e)},
        {QStringLiteral("weights"), QColor(0x1f, 0x77, 0xb4)}, {QStringLiteral("activations"), QColor(0xff, 0x7f, 0x0e)},
        {QStringLiteral("kv_cache"), QColor(0x2c, 0xa0, 0x2c)},
        {QStringLiteral("embedding_lm_head"), QColor(0x94, 0x67, 0xbd)},
        {QStringLiteral("staleness"), QColor(0x8c, 0x56, 0x4b)}, {QStringLiteral("noise"), QColor(0xe3, 0x77, 0xc2)},
        {QStringLiteral("interaction"), QColor(0x45, 0x45, 0x45)}};
    const auto found = colors.find(source);
    return found == colors.end() ? QColor(Qt::black) : found->second;
}

std::vector<store::BreakdownPart> BreakdownView::shownParts(const store::BreakdownRecord& record, Method method)
{
    if (method == Shapley && !record.shapley) {
        return record.partsOf("add_one_in");
    }
    return record.partsOf(kMethodNames[method]);
}

BreakdownView::BreakdownView(QWidget* parent)
    : QWidget(parent)
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Breakdown:"), this));
    runBox_ = new QComboBox(this);
    runBox_->setObjectName("breakdownRun");
    runBox_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    top->addWidget(runBox_);
    top->addWidget(new QLabel(tr("Split:"), this));
    methodBox_ = new QComboBox(this);
    methodBox_->setObjectName("breakdownMethod");
    methodBox_->addItems({tr("Shapley (mean over every order)"), tr("Add-one-in (each alone on BF16)"),
        tr("Leave-one-out (each removed from all)")});
    methodBox_->setToolTip(tr("Sources need not add up: the split depends on the order they are switched on. "
                              "Shapley averages over every order (its parts sum to the total); add-one-in and "
                              "leave-one-out leave an interaction remainder."));
    top->addWidget(methodBox_);
    top->addWidget(new QLabel(tr("Unit:"), this));
    unitBox_ = new QComboBox(this);
    unitBox_->setObjectName("breakdownUnit");
    unitBox_->addItems({tr("nats/token"), tr("x BF16 unit"), tr("% of the total")});
    top->addWidget(unitBox_);
    top->addStretch(1);
    layout->addLayout(top);
    summary_ = new QLabel(this);
    summary_->setObjectName("breakdownSummary");
    summary_->setWordWrap(true);
    layout->addWidget(summary_);
    readout_ = makeReadout(this, QStringLiteral("breakdownReadout"),
        tr("Hover a candidate's bar to read its parts; drag or wheel to zoom, double-click to reset."));
    layout->addWidget(readout_);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("breakdownPlot");
    plot_->setMinimumHeight(180);
    plot_->xAxis->grid()->setVisible(false);
    plot_->legend->setFont(QFont(font().family(), 8));
    placeLegendAbove(plot_);
    enableZoomAndReset(
        plot_, [this] { fitView(); }, Qt::Vertical);
    plot_->setMouseTracking(true);
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) { hoverAt(event->pos()); });
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);

    // A read-only table over `model` with CSV export from its context menu.
    const auto table = [this](QStandardItemModel* model, const char* name) {
        auto* view = new QTableView(this);
        view->setObjectName(QString::fromLatin1(name));
        view->setModel(model);
        view->verticalHeader()->hide();
        view->setEditTriggers(QAbstractItemView::NoEditTriggers);
        view->horizontalHeader()->setStretchLastSection(true);
        view->setWordWrap(false);
        addTableExportMenu(view);
        return view;
    };
    model_ = new QStandardItemModel(this);
    table_ = table(model_, "breakdownTable");
    estimatorModel_ = new QStandardItemModel(this);
    estimatorTable_ = table(estimatorModel_, "breakdownEstimators");
    estimatorTable_->setToolTip(
        tr("Sampled-token estimators of each whole configuration (what trainers log) beside the full-vocabulary KL: "
           "token mean, and r / rho = Pearson / Spearman correlation with the per-token full KL. k1 = log mu(y) - log "
           "pi(y); k3 = r - 1 - log r; mult_prob_error = exp|log pi(y) - log mu(y)| (NeMo-RL's "
           "token_mult_prob_error); prob_diff = |mu(y) - pi(y)|. Imported runs (italic) show what their trainer "
           "logged, as its mean over the steps: they have no full KL to compare with."));

    // Where each whole configuration's mismatch sits (ui/plots/mismatch_profile.h; the Admission tab shows the same).
    profileWidget_ = new MismatchProfile(QStringLiteral("breakdown"), this);
    profileBox_ = profileWidget_->axisBox();
    profile_ = profileWidget_->plot();
    QWidget* profileBox = profileWidget_;

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(plot_);
    split->addWidget(profileBox);
    split->addWidget(table_);
    split->addWidget(estimatorTable_);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 2);
    split->setStretchFactor(2, 2);
    split->setStretchFactor(3, 1);
    layout->addWidget(split, 1);
    connect(runBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] { rebuild(); });
    connect(methodBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] { rebuild(); });
    // A change of the unit other than the default's (made with the list's signals blocked) is the user's choice.
    connect(unitBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, [this] {
        unitChosen_ = true;
        rebuild();
    });
    emptyState_ = new EmptyState(this, page,
        {QStringLiteral("breakdown"), tr("No mismatch breakdowns in this workspace yet"),
            tr("This tab will show where each candidate's mismatch comes from: the BF16 unit, then the part of each "
               "source (weights, activations, KV cache, embedding and lm_head, staleness, noise) by Shapley, "
               "add-one-in or leave-one-out, and the sampled-token estimators beside the full KL.<br>Start a "
               "breakdown here, or run <code>mismatch breakdown</code> on this workspace."),
            tr("Start Mismatch Breakdown...")});
    connect(emptyState_, &EmptyState::startRequested, this, &BreakdownView::startRequested);
}

void BreakdownView::setStore(const store::RunStore* store)
{
    store_ = store;
    refresh();
}

void BreakdownView::setMethod(Method method)
{
    methodBox_->setCurrentIndex(static_cast<int>(method));
}

void BreakdownView::setProfile(Profile profile)
{
    profileWidget_->setAxis(profile == ByEntropy ? MismatchProfile::ByEntropy : MismatchProfile::ByProbability);
}

void BreakdownView::rebuildProfile()
{
    std::vector<std::pair<QString, metrics::EstimatorComparison>> series;
    for (const store::BreakdownRecord& r : records_) {
        const store::BreakdownSubset* whole = r.subsetOf(allSources(r).toStdString());
        if (!whole) {
            continue;
        }
        try {
            series.emplace_back(QString::fromStdString(r.candidate),
                metrics::estimatorComparisonFromJson(nlohmann::json::parse(whole->estimatorsJson)));
        } catch (const std::exception&) {
            series.emplace_back(QString::fromStdString(r.candidate), metrics::EstimatorComparison {});
        }
    }
    profileWidget_->setSeries(std::move(series));
}

void BreakdownView::setUnit(Unit unit)
{
    unitChosen_ = true;
    if (unitBox_->currentIndex() == static_cast<int>(unit)) {
        rebuild(); // the same unit, now chosen: the summary no longer says why it was
        return;
    }
    unitBox_->setCurrentIndex(static_cast<int>(unit));
}

BreakdownView::Unit BreakdownView::currentUnit() const
{
    return static_cast<Unit>(unitBox_->currentIndex());
}

BreakdownView::Unit BreakdownView::readableUnit(const std::vector<store::BreakdownRecord>& records)
{
    // The rule: a bar is readable when its total is at least kSmallestShownShare (5%) of the largest, about 10
    // pixels of a 200-pixel plot. Totals are compared, not single parts: a part is read in the table and read-out.
    for (const Unit unit : {Nats, Bf16Multiples, ShareOfTotal}) {
        double smallest = std::numeric_limits<double>::infinity();
        double largest = 0.0;
        for (const store::BreakdownRecord& r : records) {
            if (r.total == 0.0) {
                continue; // nothing to draw whatever the unit
            }
            const double scale = unit == Bf16Multiples ? (r.bf16Unit > 0.0 ? 1.0 / r.bf16Unit : 0.0)
                : unit == ShareOfTotal                 ? (r.total > 0.0 ? 100.0 / r.total : 0.0)
                                                       : 1.0; // as stackValues() scales
            const double height = std::abs(r.total * scale);
            smallest = std::min(smallest, height);
            largest = std::max(largest, height);
        }
        if (largest == 0.0 || smallest >= kSmallestShownShare * largest) {
            return unit;
        }
    }
    return ShareOfTotal;
}

bool BreakdownView::selectRun(std::int64_t runId)
{
    const int index = runBox_->findData(QVariant::fromValue<qlonglong>(runId));
    if (index < 0) {
        return false;
    }
    runBox_->setCurrentIndex(index);
    rebuild();
    return true;
}

void BreakdownView::refresh()
{
    const std::vector<store::BreakdownRecord> all
        = store_ ? store::breakdowns(*store_) : std::vector<store::BreakdownRecord> {};
    std::map<std::int64_t, std::pair<int, QString>> runs; // run id (0: none) -> (candidates, created)
    for (const store::BreakdownRecord& record : all) {
        auto& entry = runs[record.runId.value_or(0)];
        ++entry.first;
        entry.second = QString::fromStdString(record.createdAt);
    }
    const QVariant previous = runBox_->currentData();
    const QSignalBlocker block(runBox_);
    runBox_->clear();
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) { // newest first
        runBox_->addItem(it->first > 0 ? tr("run %1: %n candidate(s), %2", nullptr, it->second.first)
                                             .arg(it->first)
                                             .arg(it->second.second)
                                       : tr("without a run: %n candidate(s)", nullptr, it->second.first),
            QVariant::fromValue<qlonglong>(it->first));
    }
    const int keep = previous.isValid() ? runBox_->findData(previous) : -1;
    runBox_->setCurrentIndex(keep >= 0 ? keep : 0);
    // Imported runs' estimators are shown on the estimator table's columns even without a breakdown.
    emptyState_->setEmpty(all.empty() && (!store_ || store::importedEstimators(*store_).empty()));
    rebuild();
}

std::vector<std::pair<QString, double>> BreakdownView::segments(int index) const
{
    return index >= 0 && index < static_cast<int>(segments_.size()) ? segments_[static_cast<std::size_t>(index)]
                                                                      : std::vector<std::pair<QString, double>> {};
}

// The plotted values per candidate, in the shown unit.
struct BreakdownView::Stacks {
    std::map<QString, QVector<double>> values; // per series, one value per candidate
    QVector<double> keys, totals, totalLow, totalHigh;
    QSharedPointer<QCPAxisTickerText> ticker = QSharedPointer<QCPAxisTickerText>::create();
    double low = 0.0, high = 0.0;
    int fallbacks = 0; // candidates shown by add-one-in for want of Shapley parts
};

void BreakdownView::rebuild()
{
    records_.clear();
    if (store_ && runBox_->count() > 0) {
        const qlonglong runId = runBox_->currentData().toLongLong();
        for (store::BreakdownRecord& record : store::breakdowns(*store_)) {
            if (record.runId.value_or(0) == runId) {
                records_.push_back(std::move(record));
            }
        }
    }
    if (!unitChosen_) {
        const QSignalBlocker block(unitBox_);
        unitBox_->setCurrentIndex(static_cast<int>(readableUnit(records_)));
    }
    const auto method = static_cast<Method>(methodBox_->currentIndex());
    const auto unit = static_cast<Unit>(unitBox_->currentIndex());
    const int fallbacks = plotStacks(method, unit);

    fillPartTables(method);
    // Imported runs on the same columns: the estimator their trainer logged (mean over its steps), no full KL.
    if (store_) {
        appendImportedEstimators();
    }
    table_->resizeColumnsToContents();
    estimatorTable_->resizeColumnsToContents();

    showSummary(fallbacks);
    plot_->replot();
    rebuildProfile();
}

int BreakdownView::plotStacks(Method method, Unit unit)
{
    plot_->clearPlottables();
    plot_->clearItems();
    segments_.assign(records_.size(), {});

    const Stacks stacks = stackValues(method, unit);
    drawStacks(stacks);
    if (!records_.empty()) {
        drawTotals(stacks);
    }
    plot_->xAxis->setTicker(stacks.ticker);
    plot_->xAxis->setTickLabelRotation(records_.size() > 5 ? 25 : 0);
    // Short titles: the plot can be under 200 px tall at 1024x700; the unit list says the rest.
    plot_->yAxis->setLabel(unit == Bf16Multiples ? tr("mismatch (x BF16 unit)")
            : unit == ShareOfTotal              ? tr("mismatch (% of total)")
                                                : tr("mismatch (nats/token)"));
    const double span = std::max(stacks.high - stacks.low, 1e-12);
    fitY_[0] = stacks.low < 0.0 ? stacks.low - 0.08 * span : 0.0;
    fitY_[1] = stacks.high + 0.08 * span;
    if (records_.empty()) { // nothing drawn: a plain 0..1 axis rather than one scaled to rounding noise
        fitY_[0] = 0.0;
        fitY_[1] = 1.0;
    }
    fitView();
    return stacks.fallbacks;
}

BreakdownView::Stacks BreakdownView::stackValues(Method method, Unit unit)
{
    // Values per series and candidate, in the shown unit.
    Stacks stacks;
    for (std::size_t i = 0; i < records_.size(); ++i) {
        const store::BreakdownRecord& r = records_[i];
        const double scale = unit == Bf16Multiples ? (r.bf16Unit > 0.0 ? 1.0 / r.bf16Unit : 0.0)
            : unit == ShareOfTotal                 ? (r.total > 0.0 ? 100.0 / r.total : 0.0)
                                                   : 1.0;
        const double key = static_cast<double>(i);
        stacks.keys << key;
        const bool fallback = method == Shapley && !r.shapley && !r.sources.empty();
        stacks.fallbacks += fallback ? 1 : 0;
        stacks.ticker->addTick(
            key, QString::fromStdString(r.candidate) + (fallback ? QStringLiteral(" *") : QString()));
        std::map<QString, double> shown = {{QString::fromLatin1(kUnitSeries), r.bf16Unit * scale}};
        for (const store::BreakdownPart& part : shownParts(r, method)) {
            shown[QString::fromStdString(part.source)] = part.value * scale;
        }
        double positive = 0.0, negative = 0.0;
        for (const QString& series : seriesOrder()) {
            const auto found = shown.find(series);
            const double value = found == shown.end() ? 0.0 : found->second;
            stacks.values[series].resize(static_cast<int>(records_.size()));
            stacks.values[series][static_cast<int>(i)] = value;
            if (found != shown.end()) {
                segments_[i].push_back({series, value});
                (value >= 0.0 ? positive : negative) += value;
            }
        }
        stacks.totals << r.total * scale;
        stacks.totalLow << (r.totalCiLow ? (r.total - *r.totalCiLow) * scale : 0.0);
        stacks.totalHigh << (r.totalCiHigh ? (*r.totalCiHigh - r.total) * scale : 0.0);
        stacks.low = std::min({stacks.low, negative, r.totalCiLow.value_or(r.total) * scale});
        stacks.high = std::max({stacks.high, positive, r.totalCiHigh.value_or(r.total) * scale});
    }
    return stacks;
}

void BreakdownView::drawStacks(const Stacks& stacks)
{
    QCPBars* below = nullptr;
    for (const QString& series : seriesOrder()) {
        const auto found = stacks.values.find(series);
        if (found == stacks.values.end()) {
            continue;
        }
        bool any = false;
        for (std::size_t i = 0; i < records_.size(); ++i) {
            for (const auto& segment : segments_[i]) {
                any = any || segment.first == series;
            }
        }
        if (!any) {
            continue;
        }
        auto* bars = new QCPBars(plot_->xAxis, plot_->yAxis);
        bars->setName(series == QLatin1String("interaction") ? tr("interaction (remainder)") : series);
        bars->setWidth(0.55);
        const QColor color = sourceColor(series);
        bars->setPen(QPen(color.darker(130), 1));
        QColor fill = color;
        fill.setAlpha(series == QLatin1String(kUnitSeries) ? 140 : 210);
        bars->setBrush(series == QLatin1String("interaction") ? QBrush(fill, Qt::BDiagPattern) : QBrush(fill));
        bars->setData(stacks.keys, found->second, true);
        if (below) {
            bars->moveAbove(below);
        }
        below = bars;
    }
}

void BreakdownView::drawTotals(const Stacks& stacks)
{
    QCPGraph* total = plot_->addGraph(plot_->xAxis, plot_->yAxis);
    total->setName(tr("total [95%]"));
    total->setLineStyle(QCPGraph::lsNone);
    total->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, QPen(Qt::black, 1.5), QBrush(Qt::white), 10));
    QVector<double> markerKeys;
    for (double key : stacks.keys) {
        markerKeys << key + 0.36;
    }
    total->setData(markerKeys, stacks.totals, true);
    auto* bars = new QCPErrorBars(plot_->xAxis, plot_->yAxis);
    bars->removeFromLegend();
    bars->setDataPlottable(total);
    bars->setErrorType(QCPErrorBars::etValueError);
    bars->setPen(QPen(Qt::black, 1.5));
    bars->setWhiskerWidth(6);
    bars->setData(stacks.totalLow, stacks.totalHigh);
    auto* zero = new QCPItemStraightLine(plot_);
    zero->setPen(QPen(QColor(0x60, 0x60, 0x60), 1));
    zero->point1->setCoords(0, 0);
    zero->point2->setCoords(1, 0);
}

void BreakdownView::fillPartTables(Method method)
{
    model_->clear();
    model_->setHorizontalHeaderLabels({tr("Candidate"), tr("Source"), tr("Add-one-in [95%]"),
        tr("Leave-one-out [95%]"), tr("Shapley [95%]"), tr("Shown part (x BF16)")});
    estimatorModel_->clear();
    estimatorModel_->setHorizontalHeaderLabels({tr("Candidate (whole configuration)"), tr("full KL"),
        tr("k1 (r / rho)"), tr("k3 (r / rho)"), tr("mult_prob_error (r / rho)"), tr("|mu - pi| (r / rho)")});
    addGlossaryHeaderTips(model_);
    addGlossaryHeaderTips(estimatorModel_);
    for (const store::BreakdownRecord& r : records_) {
        const auto row = [&](const QString& source, const QString& aoi, const QString& loo, const QString& shapley,
                             const std::optional<double>& shownValue) {
            QList<QStandardItem*> items;
            items << new QStandardItem(QString::fromStdString(r.candidate)) << new QStandardItem(source)
                  << new QStandardItem(aoi) << new QStandardItem(loo) << new QStandardItem(shapley)
                  << new QStandardItem(shownValue && r.bf16Unit > 0.0
                             ? QStringLiteral("%1x").arg(*shownValue / r.bf16Unit, 0, 'g', 3)
                             : QStringLiteral("-"));
            items[1]->setForeground(sourceColor(source).darker(120));
            model_->appendRow(items);
        };
        row(tr("total"), intervalText(r.total, r.totalCiLow, r.totalCiHigh), QString(), QString(), r.total);
        row(QString::fromLatin1(kUnitSeries), intervalText(r.bf16Unit, r.unitCiLow, r.unitCiHigh), QString(),
            QString(), r.bf16Unit);
        std::vector<std::string> sources = r.sources;
        if (!sources.empty()) {
            sources.push_back("interaction");
        }
        for (const std::string& source : sources) {
            QString cells[3];
            std::optional<double> shownValue;
            for (int m = 0; m < 3; ++m) {
                for (const store::BreakdownPart& part : r.partsOf(kMethodNames[m])) {
                    if (part.source == source) {
                        cells[m] = intervalText(part.value, part.ciLow, part.ciHigh);
                    }
                }
            }
            if (cells[0].isEmpty() && source == "interaction" && r.shapley) {
                cells[0] = tr("0 (by construction)");
            }
            for (const store::BreakdownPart& part : shownParts(r, method)) {
                if (part.source == source) {
                    shownValue = part.value;
                }
            }
            row(QString::fromStdString(source), cells[1], cells[2], cells[0], shownValue);
        }
        if (const store::BreakdownSubset* whole = r.subsetOf(allSources(r).toStdString())) {
            try {
                const metrics::EstimatorComparison comparison
                    = metrics::estimatorComparisonFromJson(nlohmann::json::parse(whole->estimatorsJson));
                QList<QStandardItem*> items;
                items << new QStandardItem(QString::fromStdString(r.candidate))
                      << new QStandardItem(QString::number(comparison.kl, 'g', 4));
                for (const metrics::EstimatorSummary& e : comparison.estimators) {
                    items << new QStandardItem(estimatorCell(e));
                }
                estimatorModel_->appendRow(items);
            } catch (const std::exception&) {
                // A record written without estimators: no row.
            }
        }
    }
}

void BreakdownView::appendImportedEstimators()
{
    for (const store::ImportedEstimators& run : store::importedEstimators(*store_)) {
        QList<QStandardItem*> items;
        items << new QStandardItem(
            tr("imported: %1 (%2)").arg(QString::fromStdString(run.name), QString::fromStdString(run.source)))
              << new QStandardItem(tr("not measured"));
        QStringList logged;
        for (const std::string& estimator : metrics::estimatorNames()) { // the local rows' columns
            QString cell = QStringLiteral("-");
            for (const store::ImportedEstimatorValue& value : run.values) {
                if (value.estimator == estimator) {
                    const QString mean = QString::number(value.mean, 'g', 4);
                    cell = value.steps == 1 ? tr("%1 (logged, 1 step)").arg(mean)
                                            : tr("%1 (logged, %2 steps)").arg(mean).arg(value.steps);
                    logged << QStringLiteral("%1 = %2").arg(
                        QString::fromStdString(estimator), QString::fromStdString(value.key));
                }
            }
            items << new QStandardItem(cell);
        }
        const QString tip = tr("Imported from %1; logged per step: %2. Each value is the mean over the steps that "
                               "logged it. Imported runs have no full-vocabulary KL and no per-token values, so "
                               "no correlation with it.")
                                .arg(QString::fromStdString(run.source), logged.join(QStringLiteral(", ")));
        for (QStandardItem* item : items) {
            item->setToolTip(tip);
            item->setForeground(QColor(90, 90, 90));
            QFont font = item->font();
            font.setItalic(true);
            item->setFont(font);
        }
        estimatorModel_->appendRow(items);
    }
}

void BreakdownView::showSummary(int fallbacks)
{
    QString summary;
    if (records_.empty()) {
        summary = tr("No mismatch breakdowns in this workspace yet (Jobs > Start Mismatch Breakdown, or `mismatch "
                     "breakdown`).");
    } else {
        summary = tr("%n candidate(s). Each bar: the BF16 unit, then every source's part by %1, then the remainder; "
                     "the diamond is the measured total with its 95% interval. Parts below zero are drawn below zero.",
            nullptr, static_cast<int>(records_.size()))
                      .arg(methodBox_->currentText());
        if (fallbacks > 0) {
            summary += tr(" * no Shapley parts (more sources than its limit): add-one-in shown.");
        }
        if (!unitChosen_ && currentUnit() != Nats) {
            summary += tr(" Shown %1: in nats/token the smallest total is under %2% of the largest and its bar would "
                          "be flat (Unit chooses another).")
                           .arg(currentUnit() == Bf16Multiples ? tr("in multiples of each BF16 unit")
                                                               : tr("as % of each total"))
                           .arg(100.0 * kSmallestShownShare, 0, 'g', 3);
        }
    }
    summary_->setText(summary);
}

void BreakdownView::fitView()
{
    plot_->xAxis->setRange(-0.6, std::max<double>(1.0, static_cast<double>(records_.size())) - 0.2);
    plot_->yAxis->setRange(fitY_[0], fitY_[1]);
    plot_->replot();
}

QString BreakdownView::readoutText() const
{
    return readout_->text();
}

void BreakdownView::hoverAt(const QPoint& pixel)
{
    const double key = plot_->xAxis->pixelToCoord(pixel.x());
    const long index = std::lround(key - 0.1);
    if (!plot_->axisRect()->rect().contains(pixel) || index < 0 || index >= static_cast<long>(records_.size())
        || std::abs(key - static_cast<double>(index) - 0.1) > 0.45) {
        readout_->setText(readout_->property("idle").toString());
        return;
    }
    const store::BreakdownRecord& r = records_[static_cast<std::size_t>(index)];
    const auto method = static_cast<Method>(methodBox_->currentIndex());
    const auto multiple = [&](double value) {
        return r.bf16Unit > 0.0 ? QStringLiteral(" (%1x)").arg(value / r.bf16Unit, 0, 'g', 3) : QString();
    };
    QString text = tr("%1: total %2%3 = BF16 unit %4")
                       .arg(QString::fromStdString(r.candidate), intervalText(r.total, r.totalCiLow, r.totalCiHigh),
                           multiple(r.total))
                       .arg(r.bf16Unit, 0, 'g', 3);
    for (const store::BreakdownPart& part : shownParts(r, method)) {
        text += QStringLiteral(" %1 %2 %3%4")
                    .arg(part.value < 0.0 ? QStringLiteral("-") : QStringLiteral("+"),
                        QString::fromStdString(part.source), intervalText(std::abs(part.value), {}, {}),
                        part.ciLow && part.ciHigh
                            ? QStringLiteral(" [%1, %2]").arg(*part.ciLow, 0, 'g', 3).arg(*part.ciHigh, 0, 'g', 3)
                            : QString())
                    .append(multiple(part.value));
    }
    if (r.sources.empty()) {
        text += tr(" (no source besides the BF16 engine)");
    }
    text += QStringLiteral(" nats/token");
    readout_->setText(text);
}

} // namespace mismatch::ui

#include "ui/views/prefix_shift_view.h"

#include "ui/plots/mismatch_profile.h"

#include "core/model/tokenizer.h"
#include "core/store/analysis_store.h"
#include "ui/views/analysis_data.h"
#include "ui/views/breakdown_view.h"
#include "ui/views/empty_state.h"
#include "ui/dialogs/help_dialog.h"
#include "ui/plots/glossary_tips.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/plot_tools.h"
#include "ui/views/token_drilldown.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>

namespace mismatch::ui {

struct PrefixShiftView::Data {
    std::vector<store::PrefixShiftRecord> records;
    std::vector<store::PrefixShiftPair> pairs;
    std::unique_ptr<model::Tokenizer> tokenizer; // of the analysis's model, when its tokenizer.json is readable
    std::vector<QCPAbstractItem*> marks; // the selected pair's divergence line and label (the crosshair stays)
};

namespace {
// A number under `key` of a JSON object, or nothing.
std::optional<double> numberAt(const nlohmann::json& object, const char* key)
{
    if (object.is_object() && object.contains(key) && object.at(key).is_number()) {
        return object.at(key).get<double>();
    }
    return std::nullopt;
}

} // namespace

PrefixShiftView::PrefixShiftView(QWidget* parent)
    : QWidget(parent)
    , data_(std::make_unique<Data>())
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    auto* top = new QHBoxLayout;
    top->addWidget(new QLabel(tr("Analysis:"), this));
    analysisBox_ = new QComboBox(this);
    analysisBox_->setObjectName("prefixShiftBox");
    analysisBox_->setMinimumWidth(300);
    top->addWidget(analysisBox_);
    top->addStretch(1);
    layout->addLayout(top);
    summary_ = new QLabel(this);
    summary_->setObjectName("prefixShiftSummary");
    summary_->setWordWrap(true);
    layout->addWidget(summary_);

    pairList_ = new QListWidget(this);
    pairList_->setObjectName("prefixShiftPairs");
    pairList_->setMaximumWidth(260);
    tokens_ = new QTextBrowser(this);
    tokens_->setObjectName("prefixShiftTokens");
    auto* pairSplit = new QSplitter(Qt::Horizontal, this);
    drillDown_ = new QPushButton(tr("Token &Drill-Down..."), this);
    drillDown_->setObjectName("prefixShiftDrillDown");
    drillDown_->setToolTip(tr("The selected pair token by token: mu and pi of each chosen token, entropies, top-5 of "
                              "both distributions, first divergence and largest-KL tokens (double-click a pair too)"));
    auto* pairColumn = new QWidget(this);
    auto* pairLayout = new QVBoxLayout(pairColumn);
    pairLayout->setContentsMargins(0, 0, 0, 0);
    pairLayout->addWidget(pairList_, 1);
    pairLayout->addWidget(drillDown_);
    pairColumn->setMaximumWidth(260);
    pairSplit->addWidget(pairColumn);
    pairSplit->addWidget(tokens_);
    pairSplit->setStretchFactor(1, 1);

    readout_ = makeReadout(this, QStringLiteral("prefixShiftReadout"));
    plot_ = new QCustomPlot(this);
    plot_->setObjectName("prefixShiftPlot");
    plot_->setMinimumHeight(200);
    plot_->xAxis->setLabel(tr("response position (token)"));
    auto positions = QSharedPointer<QCPAxisTickerFixed>::create();
    positions->setTickStep(1.0);
    positions->setScaleStrategy(QCPAxisTickerFixed::ssMultiples); // whole positions only
    plot_->xAxis->setTicker(positions);
    plot_->yAxis->setLabel(tr("KL(mu || pi) (nats/token)"));
    plot_->legend->setFont(QFont(font().family(), 8));
    const struct {
        const char* name;
        QColor colour;
        Qt::PenStyle style;
        double width;
    } graphs[] = {{"total: own prefixes (all pairs)", QColor(0xc6, 0x28, 0x28), Qt::SolidLine, 2.0},
        {"per-token: BF16 prefixes (all pairs)", QColor(0x1f, 0x6f, 0xd1), Qt::SolidLine, 2.0},
        {"BF16 unit", QColor(0x75, 0x75, 0x75), Qt::DashLine, 1.5},
        {"selected pair, own prefixes", QColor(0xc6, 0x28, 0x28), Qt::DotLine, 1.5},
        {"selected pair, BF16 prefixes", QColor(0x1f, 0x6f, 0xd1), Qt::DotLine, 1.5}};
    for (const auto& g : graphs) {
        QCPGraph* graph = plot_->addGraph();
        graph->setName(tr(g.name));
        graph->setPen(QPen(g.colour, g.width, g.style));
    }
    placeLegendAbove(
        plot_, [this] { fitPositions(); }, 3);
    crosshair_ = new PlotCrosshair(plot_, {plot_->axisRect()}, readout_, tr("position"));
    enableZoomAndReset(plot_, [this] { fitPositions(); });
    addPlotExportMenu(plot_);
    installAxisGlossaryTips(plot_);

    histogram_ = new QCustomPlot(this);
    histogram_->setObjectName("prefixShiftHistogram");
    histogram_->setMinimumHeight(160);
    histogram_->xAxis->setLabel(tr("first divergence (response position)"));
    histogram_->yAxis->setLabel(tr("paired generations"));
    histogram_->xAxis->setTicker(positions);
    auto* bars = new QCPBars(histogram_->xAxis, histogram_->yAxis);
    bars->setName(tr("first divergences"));
    bars->setWidth(0.8);
    bars->setPen(QPen(QColor(0x8d, 0x6e, 0x00)));
    bars->setBrush(QColor(0xff, 0xc1, 0x07, 170));
    histogram_->legend->setFont(QFont(font().family(), 8));
    placeLegendAbove(histogram_);
    enableZoomAndReset(
        histogram_, [this] { fitHistogram(); }, Qt::Horizontal);
    addPlotExportMenu(histogram_);
    installAxisGlossaryTips(histogram_);

    corrections_ = new QStandardItemModel(this);
    correctionTable_ = new QTableView(this);
    correctionTable_->setObjectName("prefixShiftCorrections");
    correctionTable_->setModel(corrections_);
    correctionTable_->verticalHeader()->hide();
    correctionTable_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    correctionTable_->setWordWrap(false);
    // Every column as wide as its contents (short headers, the long wording in their tooltips); where the pane is
    // narrower than the columns the table scrolls sideways, and it is tall enough for its header, the three
    // corrections and that scroll bar.
    correctionTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    correctionTable_->horizontalHeader()->setStretchLastSection(true);
    correctionTable_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    correctionTable_->setMinimumHeight(correctionTable_->horizontalHeader()->sizeHint().height()
        + 3 * correctionTable_->verticalHeader()->defaultSectionSize()
        + correctionTable_->horizontalScrollBar()->sizeHint().height() + 2 * correctionTable_->frameWidth());
    addTableExportMenu(correctionTable_);

    auto* plots = new QSplitter(Qt::Horizontal, this);
    auto* positionsPane = new QWidget(this);
    auto* positionsLayout = new QVBoxLayout(positionsPane);
    positionsLayout->setContentsMargins(0, 0, 0, 0);
    positionsLayout->addWidget(readout_);
    positionsLayout->addWidget(plot_, 1);
    // Where the candidate's mismatch sits on its own prefixes (the analysis's stored bins; the Admission and
    // Breakdown tabs show the same view).
    profile_ = new MismatchProfile(QStringLiteral("prefixShift"), this);
    positionsLayout->addWidget(profile_, 1);
    plots->addWidget(positionsPane);
    auto* divergencePane = new QWidget(this);
    auto* divergenceLayout = new QVBoxLayout(divergencePane);
    divergenceLayout->setContentsMargins(0, 0, 0, 0);
    divergenceLayout->addWidget(histogram_, 3);
    auto* correctionTitle = new QLabel(tr("TIS / MIS corrections (importance-weighted mismatch of each part):"), this);
    correctionTitle->setWordWrap(true);
    divergenceLayout->addWidget(correctionTitle);
    divergenceLayout->addWidget(correctionTable_, 2);
    plots->addWidget(divergencePane);
    plots->setStretchFactor(0, 3);
    plots->setStretchFactor(1, 2);

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(pairSplit);
    split->addWidget(plots);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);

    connect(analysisBox_, qOverload<int>(&QComboBox::activated), this, &PrefixShiftView::showAnalysis);
    connect(pairList_, &QListWidget::currentRowChanged, this, &PrefixShiftView::selectPair);
    connect(pairList_, &QListWidget::itemDoubleClicked, this,
        [this](QListWidgetItem* item) { openDrillDown(pairList_->row(item)); });
    connect(drillDown_, &QPushButton::clicked, this, [this] { openDrillDown(pairList_->currentRow()); });
    createEmptyState(page);
}

void PrefixShiftView::createEmptyState(QWidget* page)
{
    emptyState_ = new EmptyState(this, page,
        {QStringLiteral("prefixShift"), tr("No prefix-shift analyses in this workspace yet"),
            tr("This tab will show how much of a configuration's mismatch comes token by token (per-token part) and "
               "how much from reaching other prefixes (prefix-shift part), where paired generations first diverge, "
               "and what TIS and MIS corrections change.<br>Start an analysis here, or run <code>mismatch "
               "prefix-shift</code> on this workspace."),
            tr("Start Prefix-Shift Analysis...")});
    connect(emptyState_, &EmptyState::startRequested, this, &PrefixShiftView::startRequested);
}

PrefixShiftView::~PrefixShiftView() = default;

void PrefixShiftView::setStore(const store::RunStore* store)
{
    store_ = store;
    analysisId_ = 0;
    refresh();
}

void PrefixShiftView::refresh()
{
    const std::int64_t keep = analysisId_;
    data_->records = store_ ? store::prefixShifts(*store_) : std::vector<store::PrefixShiftRecord> {};
    int index = data_->records.empty() ? -1 : static_cast<int>(data_->records.size()) - 1;
    const QSignalBlocker block(analysisBox_);
    analysisBox_->clear();
    for (size_t i = 0; i < data_->records.size(); ++i) {
        const store::PrefixShiftRecord& r = data_->records[i];
        analysisBox_->addItem(tr("#%1 %2 (%3)")
                                  .arg(r.id)
                                  .arg(QString::fromStdString(std::filesystem::path(r.model).filename().string()),
                                      QString::fromStdString(r.createdAt)),
            QVariant::fromValue<qlonglong>(r.id));
        if (r.id == keep)
            index = static_cast<int>(i);
    }
    analysisBox_->setCurrentIndex(index);
    emptyState_->setEmpty(data_->records.empty());
    showAnalysis(index);
}

bool PrefixShiftView::selectAnalysis(std::int64_t id)
{
    const int index = analysisBox_->findData(QVariant::fromValue<qlonglong>(id));
    if (index < 0)
        return false;
    analysisBox_->setCurrentIndex(index);
    showAnalysis(index);
    return true;
}

QString PrefixShiftView::summaryText() const
{
    return summary_->text();
}

QString PrefixShiftView::tokenHtml() const
{
    return tokens_->toHtml();
}

void PrefixShiftView::showAnalysis(int comboIndex)
{
    clearAnalysis();
    const QSignalBlocker block(pairList_);
    pairList_->clear();
    tokens_->clear();
    if (comboIndex < 0 || comboIndex >= static_cast<int>(data_->records.size()) || !store_) {
        summary_->setText(data_->records.empty() ? tr("No prefix-shift analyses in this workspace yet.") : QString());
        plot_->replot();
        histogram_->replot();
        return;
    }
    const store::PrefixShiftRecord& r = data_->records[static_cast<size_t>(comboIndex)];
    analysisId_ = r.id;
    data_->pairs = store::prefixShiftPairs(*store_, r.id);
    try {
        data_->tokenizer = std::make_unique<model::Tokenizer>(
            model::Tokenizer::fromFile((std::filesystem::path(r.model) / "tokenizer.json").string()));
    } catch (const std::exception&) {
        data_->tokenizer.reset(); // tokens are then shown as ids
    }
    const nlohmann::json details = nlohmann::json::parse(r.detailsJson, nullptr, false);
    showSummary(r, details);

    // Colour scale: the 99th percentile of every stored token KL, so one outlier does not wash out the rest.
    std::vector<double> all;
    for (const auto& p : data_->pairs) {
        all.insert(all.end(), p.candidateKl.begin(), p.candidateKl.end());
        all.insert(all.end(), p.referenceKl.begin(), p.referenceKl.end());
    }
    scaleMax_ = klColourScale(std::move(all));

    plotPositions(r, details);
    plotDivergences(r, details);
    fillCorrections(details);
    // Called with pairList_'s signals blocked (above).
    listPairs();
}

void PrefixShiftView::clearAnalysis()
{
    data_->pairs.clear();
    data_->tokenizer.reset();
    analysisId_ = 0;
    fromAllPairs_ = false;
    for (int g = 0; g < plot_->graphCount(); ++g)
        plot_->graph(g)->data()->clear();
    for (QCPAbstractItem* item : data_->marks)
        plot_->removeItem(item);
    data_->marks.clear();
    crosshair_->hide();
    auto* bars = qobject_cast<QCPBars*>(histogram_->plottable(0));
    bars->data()->clear();
    histogram_->clearItems();
    corrections_->clear();
    corrections_->setHorizontalHeaderLabels({tr("Correction"), tr("Cap"), tr("Total"), tr("Per-token"),
        tr("Prefix shift"), tr("Weighted (own)"), tr("Weighted (BF16)")});
    const QStringList tips {tr("The correction: none, TIS (truncated importance sampling) or MIS (masked IS)"),
        tr("The cap C on the importance weight"), tr("Importance-weighted total mismatch (nats/token)"),
        tr("Importance-weighted per-token part (nats/token)"), tr("Importance-weighted prefix-shift part (nats/token)"),
        tr("Tokens weighted (own prefixes): the share of tokens on the candidate's own prefixes that the correction "
           "changed (TIS: weight above the cap; MIS: dropped)"),
        tr("Tokens weighted (BF16 prefixes): the share of tokens on the BF16 engine's prefixes that the correction "
           "changed (TIS: weight above the cap; MIS: dropped)")};
    for (int column = 0; column < tips.size(); ++column) {
        corrections_->horizontalHeaderItem(column)->setToolTip(tips[column]);
    }
    // The columns whose titles do not name their terms: the corrections (TIS, MIS and their cap C) and the total
    // mismatch; "Per-token" and "Prefix shift" name theirs.
    const QStringList corrections {QStringLiteral("TIS"), QStringLiteral("MIS")};
    addGlossaryHeaderTips(corrections_, {{0, corrections}, {1, corrections}, {2, {QStringLiteral("mismatch")}}});
}

void PrefixShiftView::showSummary(const store::PrefixShiftRecord& r, const nlohmann::json& details)
{
    auto interval = [](const std::optional<double>& low, const std::optional<double>& high) {
        return low && high ? QObject::tr(" [%1, %2]").arg(*low, 0, 'g', 3).arg(*high, 0, 'g', 3) : QString();
    };
    const auto [shiftLow, shiftHigh] = prefixShiftInterval(r.detailsJson);
    const double share = r.total > 0 ? 100.0 * r.prefixShift / r.total : 0.0;
    QString summary = tr("Total %1%2 = per-token %3%4 + prefix shift %5%6 nats/token (%7% of the total; BF16 unit %8). "
                         "%9 of %10 paired generations diverged")
                          .arg(r.total, 0, 'g', 4)
                          .arg(interval(r.totalCiLow, r.totalCiHigh))
                          .arg(r.perToken, 0, 'g', 4)
                          .arg(interval(r.perTokenCiLow, r.perTokenCiHigh))
                          .arg(r.prefixShift, 0, 'g', 4)
                          .arg(interval(shiftLow, shiftHigh))
                          .arg(share, 0, 'f', 0)
                          .arg(r.bf16Unit, 0, 'g', 3)
                          .arg(r.diverged)
                          .arg(r.pairs);
    if (const auto median = numberAt(details, "median_divergence")) {
        summary += tr(" (median first divergence at token %1)").arg(*median, 0, 'g', 4);
    }
    summary += tr("; %n pair(s) stored token by token.", nullptr, static_cast<int>(data_->pairs.size()));
    metrics::EstimatorComparison comparison;
    if (details.is_object() && details.contains("estimators")) {
        try {
            comparison = metrics::estimatorComparisonFromJson(details.at("estimators"));
            summary += QLatin1Char(' ') + estimatorLine(comparison);
        } catch (const std::invalid_argument&) {
            // An analysis stored before the estimators were: nothing to add.
        }
    }
    profile_->setSeries({{tr("candidate, own prefixes"), comparison}});
    summary_->setText(summary);
}

void PrefixShiftView::plotPositions(const store::PrefixShiftRecord& r, const nlohmann::json& details)
{
    // Mismatch by position over every analysed pair (the stored details); without them, over the stored pairs.
    if (details.is_object() && details.contains("by_position") && details.at("by_position").is_array()) {
        fromAllPairs_ = true;
        for (const auto& position : details.at("by_position")) {
            const auto at = numberAt(position, "position");
            if (!at) {
                continue;
            }
            if (const auto total = numberAt(position, "total");
                total && numberAt(position, "total_tokens").value_or(1) > 0)
                plot_->graph(MeanCandidate)->addData(*at, *total);
            if (const auto perToken = numberAt(position, "per_token");
                perToken && numberAt(position, "per_token_tokens").value_or(1) > 0)
                plot_->graph(MeanReference)->addData(*at, *perToken);
            if (const auto unit = numberAt(position, "bf16_unit");
                unit && numberAt(position, "per_token_tokens").value_or(1) > 0)
                plot_->graph(Bf16UnitByPosition)->addData(*at, *unit);
        }
    } else {
        std::vector<double> sumC, sumR;
        std::vector<int> countC, countR;
        for (const auto& p : data_->pairs) {
            for (size_t i = 0; i < p.candidateKl.size(); ++i) {
                if (sumC.size() <= i) {
                    sumC.resize(i + 1);
                    countC.resize(i + 1);
                }
                sumC[i] += p.candidateKl[i];
                ++countC[i];
            }
            for (size_t i = 0; i < p.referenceKl.size(); ++i) {
                if (sumR.size() <= i) {
                    sumR.resize(i + 1);
                    countR.resize(i + 1);
                }
                sumR[i] += p.referenceKl[i];
                ++countR[i];
            }
        }
        for (size_t i = 0; i < sumC.size(); ++i)
            plot_->graph(MeanCandidate)->addData(static_cast<double>(i), sumC[i] / countC[i]);
        for (size_t i = 0; i < sumR.size(); ++i)
            plot_->graph(MeanReference)->addData(static_cast<double>(i), sumR[i] / countR[i]);
    }
    plot_->graph(MeanCandidate)
        ->setName(fromAllPairs_ ? tr("total: own prefixes (all %1 pairs)").arg(r.pairs)
                                : tr("total: own prefixes (the %1 stored pairs)").arg(data_->pairs.size()));
    plot_->graph(MeanReference)
        ->setName(fromAllPairs_ ? tr("per-token: BF16 prefixes (all %1 pairs)").arg(r.pairs)
                                : tr("per-token: BF16 prefixes (the %1 stored pairs)").arg(data_->pairs.size()));
    plot_->graph(Bf16UnitByPosition)->setVisible(plot_->graph(Bf16UnitByPosition)->dataCount() > 0);
}

void PrefixShiftView::plotDivergences(const store::PrefixShiftRecord& r, const nlohmann::json& details)
{
    auto* bars = qobject_cast<QCPBars*>(histogram_->plottable(0));
    // First divergences: one bar per response position (the last bin holds every divergence at or after it).
    if (details.is_object() && details.contains("divergence_histogram")
        && details.at("divergence_histogram").is_array()) {
        const auto& histogram = details.at("divergence_histogram");
        for (size_t i = 0; i < histogram.size(); ++i) {
            if (histogram[i].is_number() && histogram[i].get<double>() > 0) {
                bars->addData(static_cast<double>(i), histogram[i].get<double>());
            }
        }
    } else {
        std::map<std::int64_t, int> counts;
        for (const auto& p : data_->pairs) {
            if (p.firstDivergence) {
                ++counts[*p.firstDivergence];
            }
        }
        for (const auto& [position, count] : counts) {
            bars->addData(static_cast<double>(position), count);
        }
    }
    bars->setName(fromAllPairs_ ? tr("first divergences (%1 of %2 pairs)").arg(r.diverged).arg(r.pairs)
                                : tr("first divergences (stored pairs)"));
    if (const auto median = numberAt(details, "median_divergence")) {
        auto* line = new QCPItemStraightLine(histogram_);
        line->setPen(QPen(Qt::black, 1.2, Qt::DashLine));
        line->point1->setCoords(*median, 0);
        line->point2->setCoords(*median, 1);
        auto* label = new QCPItemText(histogram_);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(*median, 0.02);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(tr(" median %1").arg(*median, 0, 'g', 4));
    }
    fitHistogram();
}

void PrefixShiftView::fillCorrections(const nlohmann::json& details)
{
    // TIS / MIS: the importance-weighted mismatch of each part.
    if (details.is_object() && details.contains("corrections") && details.at("corrections").is_array()) {
        for (const auto& c : details.at("corrections")) {
            if (!c.is_object()) {
                continue;
            }
            auto number = [&c](const char* key, int digits = 4) {
                const auto value = numberAt(c, key);
                return value ? QString::number(*value, 'g', digits) : QStringLiteral("-");
            };
            auto percent = [&c](const char* key) {
                const auto value = numberAt(c, key);
                return value ? QStringLiteral("%1%").arg(*value * 100.0, 0, 'f', 1) : QStringLiteral("-");
            };
            const QString kind = c.contains("kind") && c.at("kind").is_string()
                ? QString::fromStdString(c.at("kind").get<std::string>())
                : QStringLiteral("?");
            QList<QStandardItem*> row;
            row << new QStandardItem(kind) << new QStandardItem(kind == QLatin1String("none") ? tr("-") : number("cap"))
                << new QStandardItem(number("total")) << new QStandardItem(number("per_token"))
                << new QStandardItem(number("prefix_shift")) << new QStandardItem(percent("affected_own"))
                << new QStandardItem(percent("affected_reference"));
            row.front()->setToolTip(glossaryTip(kind)); // "tis", "mis": what the correction does ("none": nothing)
            corrections_->appendRow(row);
        }
    }
    correctionTable_->resizeColumnsToContents();
}

void PrefixShiftView::listPairs()
{
    for (const auto& p : data_->pairs) {
        const QString label = p.firstDivergence
            ? tr("%1 — diverges at %2").arg(QString::fromStdString(p.promptId)).arg(*p.firstDivergence)
            : tr("%1 — identical").arg(QString::fromStdString(p.promptId));
        pairList_->addItem(label);
    }
    // The first diverging pair is the interesting one to show first.
    int first = 0;
    for (size_t i = 0; i < data_->pairs.size(); ++i) {
        if (data_->pairs[i].firstDivergence) {
            first = static_cast<int>(i);
            break;
        }
    }
    if (!data_->pairs.empty()) {
        pairList_->setCurrentRow(first);
        selectPair(first);
    } else {
        fitPositions();
    }
}

void PrefixShiftView::fitHistogram()
{
    histogram_->rescaleAxes();
    histogram_->xAxis->setRange(histogram_->xAxis->range().lower - 0.6, histogram_->xAxis->range().upper + 0.6);
    histogram_->yAxis->setRange(0, std::max(1.0, histogram_->yAxis->range().upper * 1.12));
    histogram_->replot();
}

void PrefixShiftView::fitPositions()
{
    plot_->rescaleAxes(true);
    plot_->xAxis->scaleRange(1.05, plot_->xAxis->range().center());
    plot_->yAxis->setRangeLower(0);
    plot_->yAxis->setRangeUpper(std::max(plot_->yAxis->range().upper * 1.1, 1e-9));
    plot_->replot();
}

QString PrefixShiftView::tokenText(std::int64_t id) const
{
    return visibleTokenText(data_->tokenizer.get(), id);
}

TokenDrillDown* PrefixShiftView::openDrillDown(int index)
{
    if (index < 0 || index >= static_cast<int>(data_->pairs.size())) {
        return nullptr;
    }
    const store::PrefixShiftPair& p = data_->pairs[static_cast<size_t>(index)];
    auto* dialog = new TokenDrillDown(data_->tokenizer.get(), scaleMax_, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    QString prompt;
    for (std::int64_t id : p.promptTokens) {
        prompt += tokenText(id);
    }
    dialog->setSequences(tr("Prefix-shift analysis %1, prompt <b>%2</b>: <tt>%3</tt>")
                             .arg(analysisId_)
                             .arg(QString::fromStdString(p.promptId).toHtmlEscaped(), prompt),
        {{tr("candidate engine (its own prefixes)"), p.candidateTokens, p.candidateKl, p.candidateDetail,
             p.firstDivergence},
            {tr("BF16 engine's prefixes (the candidate teacher-forced)"), p.referenceTokens, p.referenceKl,
                p.referenceDetail, p.firstDivergence}});
    dialog->show();
    return dialog;
}

QString PrefixShiftView::tokensHtml(const std::vector<std::int64_t>& tokens, const std::vector<double>& kl,
    std::optional<std::int64_t> divergence) const
{
    QString html;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const double value = i < kl.size() ? kl[i] : 0.0;
        const bool diverges = divergence && static_cast<std::int64_t>(i) == *divergence;
        const bool dark = scaleMax_ > 0 && value / scaleMax_ > 0.55; // white text on the darkest backgrounds
        html += QStringLiteral("<span title=\"position %1: KL %2 nats\" style=\"background-color:%3;%4\">%5</span>")
                    .arg(i)
                    .arg(value, 0, 'g', 3)
                    .arg(klColour(value, scaleMax_).name() + (dark ? QStringLiteral("; color:#fff") : QString()))
                    .arg(diverges ? QStringLiteral("border:2px solid #000; font-weight:bold; text-decoration:underline")
                                  : QString())
                    .arg(tokenText(tokens[i]));
        if (diverges) {
            html += QStringLiteral("<span style=\"font-size:9pt; color:#000\"> &#9664; first divergence </span>");
        }
        html += QStringLiteral("&#8203;"); // a break opportunity between tokens
    }
    return html;
}

void PrefixShiftView::selectPair(int index)
{
    if (index < 0 || index >= static_cast<int>(data_->pairs.size())) {
        return;
    }
    const store::PrefixShiftPair& p = data_->pairs[static_cast<size_t>(index)];
    QString prompt;
    for (std::int64_t id : p.promptTokens)
        prompt += tokenText(id);
    tokens_->setHtml(tr("<p><b>Prompt</b> %1: <tt>%2</tt></p>"
                        "<p><b>Candidate engine</b> (its own prefixes):<br><span style=\"font-family:monospace; "
                        "font-size:16pt\">%3</span></p>"
                        "<p><b>BF16 engine</b> (the candidate's KL, teacher-forced on these prefixes):<br><span "
                        "style=\"font-family:monospace; font-size:16pt\">%4</span></p>"
                        "<p style=\"color:#555\">Background: the token's KL(mu || pi), white = 0 to dark red = %5 nats "
                        "(99th percentile). "
                        "Hover a token for its value.</p>")
                         .arg(QString::fromStdString(p.promptId).toHtmlEscaped(), prompt)
                         .arg(tokensHtml(p.candidateTokens, p.candidateKl, p.firstDivergence))
                         .arg(tokensHtml(p.referenceTokens, p.referenceKl, p.firstDivergence))
                         .arg(scaleMax_, 0, 'g', 3));
    plot_->graph(PairCandidate)->data()->clear();
    plot_->graph(PairReference)->data()->clear();
    for (size_t i = 0; i < p.candidateKl.size(); ++i)
        plot_->graph(PairCandidate)->addData(static_cast<double>(i), p.candidateKl[i]);
    for (size_t i = 0; i < p.referenceKl.size(); ++i)
        plot_->graph(PairReference)->addData(static_cast<double>(i), p.referenceKl[i]);
    for (QCPAbstractItem* item : data_->marks)
        plot_->removeItem(item);
    data_->marks.clear();
    if (p.firstDivergence) {
        auto* line = new QCPItemStraightLine(plot_);
        line->setPen(QPen(Qt::black, 1.5, Qt::DashLine));
        line->point1->setCoords(static_cast<double>(*p.firstDivergence), 0);
        line->point2->setCoords(static_cast<double>(*p.firstDivergence), 1);
        auto* label = new QCPItemText(plot_);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(static_cast<double>(*p.firstDivergence), 0.02);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(tr(" first divergence of the selected pair"));
        data_->marks = {line, label};
    }
    fitPositions();
}

} // namespace mismatch::ui

#include "ui/prefix_shift_view.h"

#include "core/model/tokenizer.h"
#include "core/store/analysis_store.h"
#include "ui/plot_export.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QSplitter>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <algorithm>
#include <filesystem>

namespace mismatch::ui {

struct PrefixShiftView::Data {
    std::vector<store::PrefixShiftRecord> records;
    std::vector<store::PrefixShiftPair> pairs;
    std::unique_ptr<model::Tokenizer> tokenizer; // of the analysis's model, when its tokenizer.json is readable
};

namespace {
enum Graph { MeanCandidate, MeanReference, PairCandidate, PairReference };

// White (0 nats) to dark red (the scale's maximum): a token's KL as its background.
QColor klColour(double kl, double scaleMax)
{
    const double t = std::clamp(scaleMax > 0 ? kl / scaleMax : 0.0, 0.0, 1.0);
    return QColor::fromRgbF(1.0 - 0.35 * t, 1.0 - 0.85 * t, 1.0 - 0.85 * t);
}
} // namespace

PrefixShiftView::PrefixShiftView(QWidget* parent)
    : QWidget(parent)
    , data_(std::make_unique<Data>())
{
    auto* layout = new QVBoxLayout(this);
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
    pairSplit->addWidget(pairList_);
    pairSplit->addWidget(tokens_);
    pairSplit->setStretchFactor(1, 1);

    plot_ = new QCustomPlot(this);
    plot_->setObjectName("prefixShiftPlot");
    plot_->setMinimumHeight(200);
    plot_->xAxis->setLabel(tr("response position (token)"));
    auto positions = QSharedPointer<QCPAxisTickerFixed>::create();
    positions->setTickStep(1.0);
    positions->setScaleStrategy(QCPAxisTickerFixed::ssMultiples); // whole positions only
    plot_->xAxis->setTicker(positions);
    plot_->yAxis->setLabel(tr("KL(mu || pi) (nats)"));
    plot_->legend->setVisible(true);
    plot_->legend->setFont(QFont(font().family(), 8));
    plot_->legend->setBrush(QColor(255, 255, 255, 210));
    const struct {
        const char* name;
        QColor colour;
        Qt::PenStyle style;
        double width;
    } graphs[] = {{"mean over pairs, own prefixes (total)", QColor(0xc6, 0x28, 0x28), Qt::SolidLine, 2.0},
        {"mean over pairs, BF16 prefixes (per-token)", QColor(0x1f, 0x6f, 0xd1), Qt::SolidLine, 2.0},
        {"selected pair, own prefixes", QColor(0xc6, 0x28, 0x28), Qt::DotLine, 1.5},
        {"selected pair, BF16 prefixes", QColor(0x1f, 0x6f, 0xd1), Qt::DotLine, 1.5}};
    for (const auto& g : graphs) {
        QCPGraph* graph = plot_->addGraph();
        graph->setName(tr(g.name));
        graph->setPen(QPen(g.colour, g.width, g.style));
    }
    addPlotExportMenu(plot_);

    auto* split = new QSplitter(Qt::Vertical, this);
    split->addWidget(pairSplit);
    split->addWidget(plot_);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    layout->addWidget(split, 1);

    connect(analysisBox_, qOverload<int>(&QComboBox::activated), this, &PrefixShiftView::showAnalysis);
    connect(pairList_, &QListWidget::currentRowChanged, this, &PrefixShiftView::selectPair);
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
    data_->pairs.clear();
    data_->tokenizer.reset();
    analysisId_ = 0;
    for (int g = 0; g < plot_->graphCount(); ++g)
        plot_->graph(g)->data()->clear();
    plot_->clearItems();
    const QSignalBlocker block(pairList_);
    pairList_->clear();
    tokens_->clear();
    if (comboIndex < 0 || comboIndex >= static_cast<int>(data_->records.size()) || !store_) {
        summary_->setText(data_->records.empty() ? tr("No prefix-shift analyses in this workspace yet.") : QString());
        plot_->replot();
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
    auto interval = [](const std::optional<double>& low, const std::optional<double>& high) {
        return low && high ? QObject::tr(" [%1, %2]").arg(*low, 0, 'g', 3).arg(*high, 0, 'g', 3) : QString();
    };
    const double share = r.total > 0 ? 100.0 * r.prefixShift / r.total : 0.0;
    summary_->setText(tr("Total %1%2 = per-token %3%4 + prefix shift %5 nats/token (%6% of the total; BF16 unit %7). "
                         "%8 of %9 paired generations diverged.")
                          .arg(r.total, 0, 'g', 4)
                          .arg(interval(r.totalCiLow, r.totalCiHigh))
                          .arg(r.perToken, 0, 'g', 4)
                          .arg(interval(r.perTokenCiLow, r.perTokenCiHigh))
                          .arg(r.prefixShift, 0, 'g', 4)
                          .arg(share, 0, 'f', 0)
                          .arg(r.bf16Unit, 0, 'g', 3)
                          .arg(r.diverged)
                          .arg(r.pairs));

    // Colour scale: the 99th percentile of every stored token KL, so one outlier does not wash out the rest.
    std::vector<double> all;
    for (const auto& p : data_->pairs) {
        all.insert(all.end(), p.candidateKl.begin(), p.candidateKl.end());
        all.insert(all.end(), p.referenceKl.begin(), p.referenceKl.end());
    }
    std::sort(all.begin(), all.end());
    scaleMax_ = all.empty() ? 1.0 : std::max(all[static_cast<size_t>(0.99 * (all.size() - 1))], 1e-12);

    // Mismatch by position: mean over the pairs that reach each position.
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
        plot_->rescaleAxes();
        plot_->replot();
    }
}

QString PrefixShiftView::tokenText(std::int64_t id) const
{
    if (data_->tokenizer) {
        try {
            QString text = QString::fromUtf8(QByteArray::fromStdString(data_->tokenizer->tokenBytes(id)));
            text.replace(QLatin1Char('\n'), QStringLiteral("\u21b5")); // a visible newline
            text.replace(QLatin1Char(' '), QStringLiteral("\u00b7")); // a visible space
            return text.toHtmlEscaped();
        } catch (const std::exception&) {
        }
    }
    return QStringLiteral("[%1]").arg(id);
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
    plot_->clearItems();
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
    }
    plot_->rescaleAxes();
    plot_->xAxis->scaleRange(1.05, plot_->xAxis->range().center());
    plot_->yAxis->setRangeLower(0);
    plot_->yAxis->setRangeUpper(plot_->yAxis->range().upper * 1.1);
    plot_->replot();
}

} // namespace mismatch::ui

#include "ui/views/token_drilldown.h"

#include "core/common/utf8.h"
#include "ui/dialogs/help_dialog.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

namespace mismatch::ui {

const model::Tokenizer* TokenizerCache::forModel(const std::string& directory)
{
    auto cached = tokenizers_.find(directory);
    if (cached == tokenizers_.end()) {
        std::shared_ptr<const model::Tokenizer> read;
        try {
            read = std::make_shared<const model::Tokenizer>(
                model::Tokenizer::fromFile((std::filesystem::path(directory) / "tokenizer.json").string()));
        } catch (const std::exception&) {
            // no readable tokenizer: the drill-down shows token ids
        }
        cached = tokenizers_.emplace(directory, read).first;
    }
    return cached->second.get();
}

TokenDrillDown* showStoredGenerations(const model::Tokenizer* tokenizer, const QString& heading,
    std::vector<store::StoredGeneration> generations, QWidget* parent)
{
    if (generations.empty()) {
        return nullptr;
    }
    std::vector<double> all;
    for (const store::StoredGeneration& g : generations) {
        all.insert(all.end(), g.kl.begin(), g.kl.end());
    }
    auto* dialog = new TokenDrillDown(tokenizer, klColourScale(std::move(all)), parent);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    std::vector<TokenDrillDown::Sequence> sequences;
    for (store::StoredGeneration& g : generations) {
        TokenDrillDown::Sequence sequence;
        sequence.title
            = QObject::tr("prompt %1 (%2 tokens)").arg(QString::fromStdString(g.promptId)).arg(g.tokens.size());
        sequence.tokens = std::move(g.tokens);
        sequence.kl = std::move(g.kl);
        sequence.details = std::move(g.details);
        sequences.push_back(std::move(sequence));
    }
    dialog->setSequences(heading, std::move(sequences));
    dialog->show();
    return dialog;
}

double klColourScale(std::vector<double> kl)
{
    if (kl.empty()) {
        return 1.0;
    }
    std::sort(kl.begin(), kl.end());
    return std::max(kl[static_cast<std::size_t>(0.99 * static_cast<double>(kl.size() - 1))], 1e-12);
}

QColor klColour(double kl, double scaleMax)
{
    const double t = std::clamp(scaleMax > 0 ? kl / scaleMax : 0.0, 0.0, 1.0);
    return QColor::fromRgbF(1.0 - 0.35 * t, 1.0 - 0.85 * t, 1.0 - 0.85 * t);
}

QString visibleTokenText(const model::Tokenizer* tokenizer, std::int64_t id)
{
    if (tokenizer) {
        try {
            QString text = QString::fromUtf8(QByteArray::fromStdString(tokenizer->tokenBytes(id)));
            text.replace(QLatin1Char('\n'), QStringLiteral("\u21b5")); // a visible newline
            text.replace(QLatin1Char(' '), QStringLiteral("\u00b7")); // a visible space
            return text.toHtmlEscaped();
        } catch (const std::exception&) {
        }
    }
    return QStringLiteral("[%1]").arg(id);
}

std::optional<Repetition> findRepetition(const std::vector<std::int64_t>& tokens, int maxN, int minTimes)
{
    std::optional<Repetition> best;
    const auto size = static_cast<std::int64_t>(tokens.size());
    for (std::int64_t n = 1; n <= maxN; ++n) {
        for (std::int64_t start = 0; start + n * minTimes <= size; ++start) {
            std::int64_t times = 1;
            while (start + (times + 1) * n <= size
                && std::equal(tokens.begin() + start, tokens.begin() + start + n, tokens.begin() + start + times * n)) {
                ++times;
            }
            if (times >= minTimes && (!best || times * n > best->times * best->length)) {
                best = Repetition {start, n, times};
            }
        }
    }
    return best;
}

std::optional<std::size_t> firstUndecodableByte(const model::Tokenizer* tokenizer, const std::vector<std::int64_t>& tokens)
{
    if (!tokenizer) {
        return std::nullopt;
    }
    try {
        return firstInvalidUtf8(tokenizer->decode(tokens));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

TokenDrillDown::TokenDrillDown(const model::Tokenizer* tokenizer, double colourScaleMax, QWidget* parent)
    : QDialog(parent)
    , tokenizer_(tokenizer)
    , scaleMax_(colourScaleMax)
{
    setObjectName("tokenDrillDown");
    setWindowTitle(tr("Token Drill-Down"));
    resize(980, 620);
    auto* layout = new QVBoxLayout(this);
    heading_ = new QLabel(this);
    heading_->setWordWrap(true);
    layout->addWidget(heading_);
    auto* controls = new QHBoxLayout;
    controls->addWidget(new QLabel(tr("Generation:"), this));
    sequenceBox_ = new QComboBox(this);
    sequenceBox_->setObjectName("drillDownSequence");
    controls->addWidget(sequenceBox_);
    firstDivergence_ = new QPushButton(tr("First &Divergence"), this);
    firstDivergence_->setObjectName("drillDownFirstDivergence");
    firstDivergence_->setToolTip(glossaryTip(QStringLiteral("first divergence")));
    controls->addWidget(firstDivergence_);
    largestButton_ = new QPushButton(tr("Next &Largest KL"), this);
    largestButton_->setObjectName("drillDownLargest");
    controls->addWidget(largestButton_);
    controls->addStretch(1);
    layout->addLayout(controls);
    flags_ = new QLabel(this);
    flags_->setObjectName("drillDownFlags");
    flags_->setWordWrap(true);
    layout->addWidget(flags_);
    tokens_ = new QTextBrowser(this);
    tokens_->setObjectName("drillDownTokens");
    tokens_->setOpenLinks(false);
    tokens_->setMouseTracking(true);
    detail_ = new QLabel(this);
    detail_->setObjectName("drillDownDetail");
    detail_->setWordWrap(true);
    detail_->setTextFormat(Qt::RichText);
    detail_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    detail_->setMinimumWidth(320);
    auto* split = new QSplitter(Qt::Horizontal, this);
    split->addWidget(tokens_);
    split->addWidget(detail_);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    layout->addWidget(split, 1);
    auto* close = new QPushButton(tr("Close"), this);
    connect(close, &QPushButton::clicked, this, &QDialog::accept);
    auto* bottom = new QHBoxLayout;
    bottom->addStretch(1);
    bottom->addWidget(close);
    layout->addLayout(bottom);

    connect(sequenceBox_, QOverload<int>::of(&QComboBox::currentIndexChanged), this, &TokenDrillDown::showSequence);
    connect(firstDivergence_, &QPushButton::clicked, this, [this] { jumpToFirstDivergence(); });
    connect(largestButton_, &QPushButton::clicked, this, &TokenDrillDown::jumpToNextLargest);
    const auto positionOf = [](const QUrl& url) {
        bool ok = false;
        const int position = url.toString().section(QLatin1Char(':'), 1).toInt(&ok);
        return ok ? position : -1;
    };
    connect(tokens_, &QTextBrowser::highlighted, this, [this, positionOf](const QUrl& url) {
        if (const int position = positionOf(url); position >= 0) {
            selectToken(position);
        }
    });
    connect(tokens_, &QTextBrowser::anchorClicked, this, [this, positionOf](const QUrl& url) {
        if (const int position = positionOf(url); position >= 0) {
            selectToken(position);
        }
    });
}

void TokenDrillDown::setSequences(const QString& heading, std::vector<Sequence> sequences)
{
    heading_->setText(heading);
    sequences_ = std::move(sequences);
    const QSignalBlocker block(sequenceBox_);
    sequenceBox_->clear();
    for (const Sequence& sequence : sequences_) {
        sequenceBox_->addItem(sequence.title);
    }
    showSequence(0);
}

void TokenDrillDown::showSequence(int index)
{
    if (index < 0 || index >= static_cast<int>(sequences_.size())) {
        return;
    }
    current_ = index;
    if (sequenceBox_->currentIndex() != index) {
        const QSignalBlocker block(sequenceBox_);
        sequenceBox_->setCurrentIndex(index);
    }
    const Sequence& s = sequences_[static_cast<std::size_t>(index)];
    largest_.resize(s.kl.size());
    std::iota(largest_.begin(), largest_.end(), 0);
    std::stable_sort(largest_.begin(), largest_.end(), [&s](int a, int b) {
        return s.kl[static_cast<std::size_t>(a)] > s.kl[static_cast<std::size_t>(b)];
    });
    largestIndex_ = -1;
    firstDivergence_->setEnabled(s.firstDivergence.has_value()
        && *s.firstDivergence < static_cast<std::int64_t>(s.tokens.size()));
    largestButton_->setEnabled(!s.kl.empty());
    QStringList flags;
    if (const auto repetition = findRepetition(s.tokens)) {
        flags << tr("\u26a0 repetition: %n token(s) from position %1 repeated %2 times in a row", nullptr,
                     static_cast<int>(repetition->length))
                     .arg(repetition->start)
                     .arg(repetition->times);
    }
    if (const auto bad = firstUndecodableByte(tokenizer_, s.tokens); bad && *bad != std::string::npos) {
        flags << tr("\u26a0 not decodable: the generated bytes are not valid UTF-8 from byte %1").arg(*bad);
    }
    flags_->setText(flags.isEmpty() ? tr("No repetition (an n-gram of up to 4 tokens 3 times in a row) and valid UTF-8.")
                                    : flags.join(QStringLiteral("<br>")));
    selected_ = -1;
    render();
    detail_->setText(tr("Hover or click a token for its details."));
}

void TokenDrillDown::render()
{
    const Sequence& s = sequences_[static_cast<std::size_t>(current_)];
    QString html = QStringLiteral("<p style=\"font-family:monospace; font-size:16pt\">");
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        const double value = i < s.kl.size() ? s.kl[i] : 0.0;
        const bool dark = scaleMax_ > 0 && value / scaleMax_ > 0.55;
        const bool diverges = s.firstDivergence && static_cast<std::int64_t>(i) == *s.firstDivergence;
        const bool selected = static_cast<int>(i) == selected_;
        QString style = QStringLiteral("background-color:%1; color:%2; text-decoration:none")
                            .arg(klColour(value, scaleMax_).name(), dark ? QStringLiteral("#fff") : QStringLiteral("#000"));
        if (diverges) {
            style += QStringLiteral("; font-weight:bold; text-decoration:underline");
        }
        if (selected) {
            style += QStringLiteral("; border:2px solid #1565c0");
        }
        html += QStringLiteral("<a href=\"tok:%1\" style=\"%2\">%3%4</a>&#8203;")
                    .arg(i)
                    .arg(style, selected ? QStringLiteral("\u25b8") : QString(), visibleTokenText(tokenizer_, s.tokens[i]));
        if (diverges) {
            html += QStringLiteral("<span style=\"font-size:9pt\"> \u25c0 first divergence </span>");
        }
    }
    html += QStringLiteral("</p><p style=\"color:#555\">") +
        tr("Background: the token's KL(mu || pi), white = 0 to dark red = %1 nats. \u25b8 marks the token shown "
           "on the right.")
            .arg(scaleMax_, 0, 'g', 3)
        + QStringLiteral("</p>");
    tokens_->setHtml(html);
}

void TokenDrillDown::selectToken(int position)
{
    const Sequence& s = sequences_[static_cast<std::size_t>(current_)];
    if (position < 0 || position >= static_cast<int>(s.tokens.size())) {
        return;
    }
    const bool changed = selected_ != position;
    selected_ = position;
    const auto p = static_cast<std::size_t>(position);
    QString text = tr("<b>Position %1</b>: <tt>%2</tt> (id %3)<br>KL(mu || pi) at this prefix: <b>%4</b> nats")
                       .arg(position)
                       .arg(visibleTokenText(tokenizer_, s.tokens[p]))
                       .arg(s.tokens[p])
                       .arg(p < s.kl.size() ? s.kl[p] : 0.0, 0, 'g', 4);
    if (s.firstDivergence && *s.firstDivergence == position) {
        text += tr("<br><b>first divergence</b> from the paired generation");
    }
    if (p < s.details.size()) {
        const store::TokenDetail& d = s.details[p];
        text += tr("<br>chosen token: mu(y) = %1, pi(y) = %2 (log ratio %3)<br>entropy: mu %4, pi %5 nats")
                    .arg(std::exp(d.logMu), 0, 'g', 4)
                    .arg(std::exp(d.logPi), 0, 'g', 4)
                    .arg(d.logMu - d.logPi, 0, 'g', 3)
                    .arg(d.entropyMu, 0, 'g', 3)
                    .arg(d.entropyPi, 0, 'g', 3);
        text += QStringLiteral("<table cellspacing=\"0\" cellpadding=\"3\" border=\"1\" style=\"border-collapse:collapse\">"
                               "<tr><th>#</th><th>top-5 mu</th><th>p</th><th>top-5 pi</th><th>p</th></tr>");
        for (std::size_t k = 0; k < std::max(d.topMu.size(), d.topPi.size()); ++k) {
            const auto cell = [&](const std::vector<std::pair<std::int64_t, double>>& top, bool probability) {
                if (k >= top.size()) {
                    return QString();
                }
                const bool chosen = top[k].first == s.tokens[p];
                const QString value = probability ? QString::number(top[k].second, 'g', 3)
                                                  : QStringLiteral("<tt>%1</tt>").arg(visibleTokenText(tokenizer_, top[k].first));
                return chosen ? QStringLiteral("<b>%1</b>").arg(value) : value;
            };
            text += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td><td>%5</td></tr>")
                        .arg(k + 1)
                        .arg(cell(d.topMu, false), cell(d.topMu, true), cell(d.topPi, false), cell(d.topPi, true));
        }
        text += QStringLiteral("</table>");
    } else {
        text += tr("<br>(this pair was stored without per-token details: re-run the prefix-shift analysis for mu, pi, "
                   "entropies and top-5)");
    }
    detail_->setText(text);
    if (changed) {
        render();
        tokens_->scrollToAnchor(QStringLiteral("tok:%1").arg(position));
    }
}

bool TokenDrillDown::jumpToFirstDivergence()
{
    const Sequence& s = sequences_[static_cast<std::size_t>(current_)];
    if (!s.firstDivergence || *s.firstDivergence >= static_cast<std::int64_t>(s.tokens.size())) {
        return false;
    }
    selectToken(static_cast<int>(*s.firstDivergence));
    return true;
}

void TokenDrillDown::jumpToNextLargest()
{
    if (largest_.empty()) {
        return;
    }
    largestIndex_ = (largestIndex_ + 1) % static_cast<int>(largest_.size());
    selectToken(largest_[static_cast<std::size_t>(largestIndex_)]);
}

QString TokenDrillDown::detailText() const
{
    return detail_->text();
}

QString TokenDrillDown::flagsText() const
{
    return flags_->text();
}

} // namespace mismatch::ui

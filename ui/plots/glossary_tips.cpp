#include "ui/plots/glossary_tips.h"

#include "core/metrics/glossary.h"
#include "ui/dialogs/help_dialog.h"

#include <QAbstractItemModel>
#include <QTextDocument>

#include <algorithm>
#include <utility>
#include <vector>

namespace mismatch::ui {

namespace {

// Every spelling of every glossary entry with the entry's term, longest first.
const std::vector<std::pair<QString, QString>>& spellings()
{
    static const std::vector<std::pair<QString, QString>> all = [] {
        std::vector<std::pair<QString, QString>> list;
        for (const metrics::GlossaryEntry& entry : metrics::glossary()) {
            const QString term = QString::fromStdString(entry.term);
            list.emplace_back(term, term);
            for (const std::string& alias : entry.aliases) {
                list.emplace_back(QString::fromStdString(alias), term);
            }
        }
        std::stable_sort(
            list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
        return list;
    }();
    return all;
}

bool isWordCharacter(QChar c)
{
    return c.isLetterOrNumber() || c == QLatin1Char('_');
}

// Whether `length` characters of `text` at `at` stand as a whole word: a spelling that begins (ends) with a letter
// or digit is not the middle of a longer word ("k" is not found in "Checkpoint", "Q" not in "Quality").
bool wholeWord(const QString& text, int at, int length)
{
    const bool startsWord = isWordCharacter(text[at]);
    const bool endsWord = isWordCharacter(text[at + length - 1]);
    const bool before = at > 0 && isWordCharacter(text[at - 1]);
    const bool after = at + length < text.size() && isWordCharacter(text[at + length]);
    return !(startsWord && before) && !(endsWord && after);
}

} // namespace

QStringList glossaryTermsIn(const QString& text)
{
    std::vector<bool> taken(static_cast<std::size_t>(text.size()), false);
    std::vector<std::pair<int, QString>> found; // (position, term)
    for (const auto& [spelling, term] : spellings()) {
        const Qt::CaseSensitivity sensitivity = spelling.size() <= 2 ? Qt::CaseSensitive : Qt::CaseInsensitive;
        const int length = static_cast<int>(spelling.size());
        for (int at = text.indexOf(spelling, 0, sensitivity); at >= 0;
             at = text.indexOf(spelling, at + 1, sensitivity)) {
            const auto first = taken.begin() + at;
            if (!wholeWord(text, at, length) || std::find(first, first + length, true) != first + length) {
                continue;
            }
            std::fill(first, first + length, true);
            found.emplace_back(at, term);
        }
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    QStringList terms;
    for (const auto& [position, term] : found) {
        if (!terms.contains(term)) {
            terms << term;
        }
    }
    return terms;
}

QString glossaryTipOf(const QStringList& terms)
{
    QStringList paragraphs;
    for (const QString& term : terms) {
        const QString tip = glossaryTip(term);
        if (!tip.isEmpty() && !paragraphs.contains(tip)) {
            paragraphs << tip;
        }
    }
    return paragraphs.isEmpty() ? QString()
                                : QStringLiteral("<p>%1</p>").arg(paragraphs.join(QStringLiteral("</p><p>")));
}

QString glossaryTipFor(const QString& text)
{
    return glossaryTipOf(glossaryTermsIn(text));
}

QString withGlossaryTip(const QString& ownTip, const QString& tip)
{
    if (tip.isEmpty() || ownTip.contains(tip)) {
        return ownTip;
    }
    if (ownTip.isEmpty()) {
        return tip;
    }
    // A plain own tip becomes rich text beside the glossary's: escaped, its line breaks kept.
    const QString own = Qt::mightBeRichText(ownTip)
        ? ownTip
        : ownTip.toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>"));
    return QStringLiteral("<p>%1</p>%2").arg(own, tip);
}

void addGlossaryHeaderTips(QAbstractItemModel* model, const std::map<int, QStringList>& columnTerms)
{
    for (int column = 0; column < model->columnCount(); ++column) {
        const auto given = columnTerms.find(column);
        const QString tip = given != columnTerms.end()
            ? glossaryTipOf(given->second)
            : glossaryTipFor(model->headerData(column, Qt::Horizontal, Qt::DisplayRole).toString());
        if (tip.isEmpty()) {
            continue;
        }
        const QString own = model->headerData(column, Qt::Horizontal, Qt::ToolTipRole).toString();
        model->setHeaderData(column, Qt::Horizontal, withGlossaryTip(own, tip), Qt::ToolTipRole);
    }
}

} // namespace mismatch::ui

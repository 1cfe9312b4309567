#pragma once
// The glossary where its terms are shown (issue 42 item 10): the terms of core's glossary (core/metrics/glossary.h)
// found in a column header or an axis title, and their text as a tooltip (ui::glossaryTip, Help > Glossary's text).
// Column headers get it from addGlossaryHeaderTips, axis titles from installAxisGlossaryTips (plot_tools.h).
#include <QString>
#include <QStringList>

#include <map>

class QAbstractItemModel;

namespace mismatch::ui {

// The glossary's terms named in `text`, in the order they appear, each once: every spelling of every entry (its term
// and aliases) is looked for as a whole word (case-insensitive; one or two characters, such as "Q", "d", "k", "mu",
// case-sensitive), the longest first, so that "KL(mu || pi)" is the mismatch and not mu and pi.
QStringList glossaryTermsIn(const QString& text);
// The tooltip for `terms`: each term's glossary text (glossaryTip) in a paragraph of its own; "" when none is known.
QString glossaryTipOf(const QStringList& terms);
// glossaryTipOf(glossaryTermsIn(text)).
QString glossaryTipFor(const QString& text);
// `ownTip` (a widget's or header's own tooltip, plain or rich text; first) with the glossary's `tip` below it. An
// own tip that already holds `tip` is returned as it is, so that adding twice adds once.
QString withGlossaryTip(const QString& ownTip, const QString& tip);

// Every horizontal header of `model` whose title names a glossary term gets that term's text in its tooltip, below
// any tooltip of its own. `columnTerms` gives the terms of a column whose title does not name them (the
// "Correction" column lists TIS and MIS), in place of those its title names. Call it after the headers are set
// (QStandardItemModel::clear() drops them).
void addGlossaryHeaderTips(QAbstractItemModel* model, const std::map<int, QStringList>& columnTerms = {});

} // namespace mismatch::ui

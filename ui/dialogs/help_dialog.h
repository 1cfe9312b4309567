#pragma once
// Help > Guide and Help > Glossary: the user guide inside the app (what each tab answers, a worked path from a
// model to an exported recipe; resources/help/guide.html) and the glossary of every term shown on screen, from
// core's table (core/metrics/glossary.h) with its formula and what it is for. glossaryTip() gives the same text as
// a tooltip for a column header or an axis title.
#include <QDialog>
#include <QString>

class QTabWidget;
class QTextBrowser;

namespace mismatch::ui {

class HelpDialog : public QDialog {
    Q_OBJECT
public:
    enum class Page { Guide, Glossary };
    explicit HelpDialog(Page page, QWidget* parent = nullptr);

    void showPage(Page page);
    // The glossary as HTML: one row per term (term and its other spellings, formula, meaning).
    static QString glossaryHtml();
    static QString guideHtml();

private:
    QTabWidget* tabs_ = nullptr;
};

// "<b>term</b> (formula): meaning" for a tooltip, or the empty string when the glossary has no such term.
QString glossaryTip(const QString& term);

} // namespace mismatch::ui

#include "ui/dialogs/help_dialog.h"

#include "core/metrics/glossary.h"

#include <QDialogButtonBox>
#include <QFile>
#include <QTabWidget>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {

QString html(const std::string& text)
{
    return QString::fromStdString(text).toHtmlEscaped();
}

QTextBrowser* browser(const QString& objectName, const QString& content, QWidget* parent)
{
    auto* view = new QTextBrowser(parent);
    view->setObjectName(objectName);
    view->setOpenExternalLinks(false);
    view->setHtml(content);
    return view;
}

} // namespace

HelpDialog::HelpDialog(Page page, QWidget* parent) : QDialog(parent)
{
    setObjectName(QStringLiteral("helpDialog"));
    setWindowTitle(tr("Mismatch Lab Help"));
    resize(820, 640);
    auto* layout = new QVBoxLayout(this);
    tabs_ = new QTabWidget(this);
    tabs_->addTab(browser(QStringLiteral("helpGuide"), guideHtml(), this), tr("&Guide"));
    tabs_->addTab(browser(QStringLiteral("helpGlossary"), glossaryHtml(), this), tr("G&lossary"));
    layout->addWidget(tabs_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    showPage(page);
}

void HelpDialog::showPage(Page page)
{
    tabs_->setCurrentIndex(page == Page::Guide ? 0 : 1);
}

QString HelpDialog::guideHtml()
{
    QFile file(QStringLiteral(":/mismatch/help/guide.html"));
    if (!file.open(QIODevice::ReadOnly)) {
        return tr("The guide is missing from this build (resources/help/guide.html).");
    }
    return QString::fromUtf8(file.readAll());
}

QString HelpDialog::glossaryHtml()
{
    QString text = tr("<h2>Glossary</h2><p>mu: the rollout engine's next-token distribution; pi: the trainer's; y: the "
                      "sampled token; h: its prefix. Every KL and estimator is in nats per token.</p>");
    text += QStringLiteral("<table cellpadding=\"4\" border=\"0\">");
    for (const metrics::GlossaryEntry& entry : metrics::glossary()) {
        QStringList aliases;
        for (const std::string& alias : entry.aliases) {
            aliases << html(alias);
        }
        text += QStringLiteral("<tr><td valign=\"top\"><a name=\"%1\"><b>%2</b></a>%3</td><td valign=\"top\">%4%5</td></tr>")
                    .arg(html(entry.term), html(entry.term),
                        aliases.isEmpty() ? QString() : QStringLiteral("<br><small>%1</small>").arg(aliases.join(QStringLiteral(", "))),
                        entry.formula.empty() ? QString() : QStringLiteral("<tt>%1</tt><br>").arg(html(entry.formula)),
                        html(entry.meaning));
    }
    text += QStringLiteral("</table>");
    return text;
}

QString glossaryTip(const QString& term)
{
    const metrics::GlossaryEntry* entry = metrics::findGlossaryEntry(term.toStdString());
    if (!entry) {
        return {};
    }
    return QStringLiteral("<b>%1</b>%2: %3")
        .arg(html(entry->term),
            entry->formula.empty() ? QString() : QStringLiteral(" (<tt>%1</tt>)").arg(html(entry->formula)),
            html(entry->meaning));
}

} // namespace mismatch::ui

#include "ui/views/empty_state.h"

#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace mismatch::ui {

EmptyState::EmptyState(QWidget* view, QWidget* page, const Text& text)
    : QStackedWidget(view)
    , page_(page)
{
    setObjectName(text.objectPrefix + QStringLiteral("Pages"));
    emptyPage_ = new QWidget(this);
    emptyPage_->setObjectName(text.objectPrefix + QStringLiteral("EmptyState"));
    auto* layout = new QVBoxLayout(emptyPage_);
    layout->addStretch();
    auto* label
        = new QLabel(QStringLiteral("<h2>%1</h2><p>%2</p>").arg(text.title.toHtmlEscaped(), text.body), emptyPage_);
    label->setObjectName(text.objectPrefix + QStringLiteral("EmptyText"));
    label->setTextFormat(Qt::RichText);
    label->setAlignment(Qt::AlignCenter);
    label->setWordWrap(true); // a narrow window wraps the text instead of widening
    layout->addWidget(label);
    startButton_ = new QPushButton(text.button, emptyPage_);
    startButton_->setObjectName(text.objectPrefix + QStringLiteral("StartButton"));
    layout->addWidget(startButton_, 0, Qt::AlignHCenter);
    layout->addStretch();
    connect(startButton_, &QPushButton::clicked, this, &EmptyState::startRequested);

    addWidget(emptyPage_);
    addWidget(page_);
    auto* viewLayout = new QVBoxLayout(view);
    viewLayout->setContentsMargins(0, 0, 0, 0);
    viewLayout->addWidget(this);
    setCurrentWidget(emptyPage_);
}

void EmptyState::setEmpty(bool empty)
{
    setCurrentWidget(empty ? emptyPage_ : page_);
}

bool EmptyState::showingEmpty() const
{
    return currentWidget() == emptyPage_;
}

} // namespace mismatch::ui

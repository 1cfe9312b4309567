#pragma once
// What an analysis tab shows while the workspace holds nothing of its kind, in place of empty axes (as the Runs tab's
// empty state does): a short text saying what the tab will show and a button that starts the job that fills it. The
// view's own page shows once there is something to show; the views refresh on the store's change counter, so the
// empty page goes when a job (here or from the CLI) stores its first result.
#include <QStackedWidget>

class QPushButton;

namespace mismatch::ui {

class EmptyState : public QStackedWidget {
    Q_OBJECT
public:
    struct Text {
        QString objectPrefix; // object names PREFIX + "EmptyState" (the empty page), PREFIX + "StartButton"
        QString title; // "No sensitivity scans yet"
        QString body; // what the tab will show (rich text)
        QString button; // "Start Sensitivity Scan..."
    };
    // Lays out `view` as this stack alone (no margins), holding the empty page and `page` (the view's own widgets,
    // with its own layout); shows the empty page until setEmpty(false).
    EmptyState(QWidget* view, QWidget* page, const Text& text);

    void setEmpty(bool empty);
    bool showingEmpty() const;
    QWidget* emptyPage() const { return emptyPage_; }
    QPushButton* startButton() const { return startButton_; }

signals:
    // The start button was clicked: the main window opens the job's dialog.
    void startRequested();

private:
    QWidget* emptyPage_ = nullptr;
    QWidget* page_ = nullptr;
    QPushButton* startButton_ = nullptr;
};

} // namespace mismatch::ui

#pragma once
// The Mismatch Lab main window: workspace, run browser (live), per-run mismatch plot, job progress.
#include "core/store/run_store.h"

#include <QMainWindow>

#include <memory>

class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QStackedWidget;
class QTableView;

namespace mismatch::ui {

class JobRunner;
class RunPlot;
class RunTableModel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(const QString& workspaceDirectory, QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens (creating when missing) the workspace directory; on failure shows the error and keeps the old one.
    bool openWorkspace(const QString& directory);
    QString workspaceDirectory() const { return workspaceDirectory_; }
    QString lastError() const { return lastError_; }

    RunTableModel* runModel() const { return runModel_; }
    QTableView* runTable() const { return runTable_; }
    RunPlot* runPlot() const { return runPlot_; }
    JobRunner* jobRunner() const { return jobRunner_; }
    QWidget* emptyState() const { return emptyState_; }
    bool showingEmptyState() const;

public slots:
    void runDemo();
    void refresh();
    void showAbout();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void createMenus();
    void updateView();
    void showError(const QString& title, const QString& message);
    void rememberWorkspace(const QString& directory);
    void rebuildRecentMenu();
    void onSelectionChanged();

    QString workspaceDirectory_;
    QString lastError_;
    std::unique_ptr<store::RunStore> store_;
    RunTableModel* runModel_ = nullptr;
    QTableView* runTable_ = nullptr;
    RunPlot* runPlot_ = nullptr;
    QStackedWidget* stack_ = nullptr;
    QWidget* emptyState_ = nullptr;
    JobRunner* jobRunner_ = nullptr;
    QLabel* workspaceLabel_ = nullptr;
    QLabel* runCountLabel_ = nullptr;
    QProgressBar* jobProgress_ = nullptr;
    QPushButton* cancelButton_ = nullptr;
    QMenu* recentMenu_ = nullptr;
};

}  // namespace mismatch::ui

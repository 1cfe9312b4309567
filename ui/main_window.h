#pragma once
// The Mismatch Lab main window. Tabs: runs (live run browser, per-run plot, overlay of selected runs), models,
// prompt sets, recipe editor, layer sensitivity, budget (calibrations), admission, prefix shift, jobs. Everything shown
// comes from the workspace's store, polled for commits by any process (the CLI included); jobs run off the GUI thread.
#include "core/store/run_store.h"

#include <QMainWindow>

#include <functional>

#include <memory>

class QLabel;
class QMenu;
class QProgressBar;
class QPushButton;
class QStackedWidget;
class QTabWidget;
class QTableView;

namespace mismatch::ui {

class JobDialog;
class AdmissionView;
class BudgetView;
class ComparePlot;
class JobQueue;
class JobQueuePanel;
class JobRunner;
class ModelLibraryPanel;
class PrefixShiftView;
class PromptSetPanel;
class RecipeEditor;
class RunPlot;
class RunTableModel;
class SensitivityView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Tab {
        RunsTab,
        ModelsTab,
        PromptSetsTab,
        RecipeTab,
        SensitivityTab,
        BudgetTab,
        AdmissionTab,
        PrefixShiftTab,
        JobsTab
    };

    explicit MainWindow(const QString& workspaceDirectory, QWidget* parent = nullptr);
    ~MainWindow() override;

    // Opens (creating when missing) the workspace directory; on failure shows the error and keeps the old one.
    bool openWorkspace(const QString& directory);
    QString workspaceDirectory() const { return workspaceDirectory_; }
    QString lastError() const { return lastError_; }

    RunTableModel* runModel() const { return runModel_; }
    QTableView* runTable() const { return runTable_; }
    RunPlot* runPlot() const { return runPlot_; }
    ComparePlot* comparePlot() const { return comparePlot_; }
    JobRunner* jobRunner() const { return jobRunner_; }
    JobQueue* jobQueue() const { return jobQueue_; }
    QWidget* emptyState() const { return emptyState_; }
    bool showingEmptyState() const;
    QTabWidget* tabs() const { return tabs_; }
    ModelLibraryPanel* modelPanel() const { return modelPanel_; }
    PromptSetPanel* promptSetPanel() const { return promptSetPanel_; }
    RecipeEditor* recipeEditor() const { return recipeEditor_; }
    SensitivityView* sensitivityView() const { return sensitivityView_; }
    BudgetView* budgetView() const { return budgetView_; }
    AdmissionView* admissionView() const { return admissionView_; }
    PrefixShiftView* prefixShiftView() const { return prefixShiftView_; }
    JobQueuePanel* jobPanel() const { return jobPanel_; }

    // Queues a training run from a run file (as the "Start Training Run" dialog does); returns the job id or 0
    // with the error shown.
    int startTraining(const QString& runFile);
    // The job id of the last job queued from a dialog (0: none).
    int lastQueuedJob() const { return lastQueuedJob_; }
    // Handles dropped or opened paths: model directories, recipe files, run files, prompt sets.
    void openPaths(const QStringList& paths);

public slots:
    void runDemo();
    void refresh();
    void showAbout();
    void showTrainingDialog();
    void showSensitivityDialog();
    void showCalibrationDialog();
    void showAdmissionDialog();
    void showPrefixShiftDialog();
    void copyCliCommand();
    void exportCurrentPlot();
    void exportCurrentTable();

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    void createMenus();
    // Queues the job of an accepted dialog (or shows why it cannot start), remembers its inputs through
    // `remember` and shows `tab`, where the job's results appear.
    void openJobDialog(JobDialog* dialog, int tab, std::function<void()> remember);
    void updateView();
    void showError(const QString& title, const QString& message);
    void rememberWorkspace(const QString& directory);
    void rebuildRecentMenu();
    void onSelectionChanged();
    void refreshAnalyses(bool force);
    void updateRecipeModels();
    void updateRecipeTitle();

    QString workspaceDirectory_;
    QString lastError_;
    QString analysisFingerprint_;
    int lastQueuedJob_ = 0;
    std::unique_ptr<store::RunStore> store_;
    RunTableModel* runModel_ = nullptr;
    QTableView* runTable_ = nullptr;
    RunPlot* runPlot_ = nullptr;
    ComparePlot* comparePlot_ = nullptr;
    QTabWidget* plotTabs_ = nullptr;
    QStackedWidget* stack_ = nullptr;
    QWidget* emptyState_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    ModelLibraryPanel* modelPanel_ = nullptr;
    PromptSetPanel* promptSetPanel_ = nullptr;
    RecipeEditor* recipeEditor_ = nullptr;
    SensitivityView* sensitivityView_ = nullptr;
    BudgetView* budgetView_ = nullptr;
    AdmissionView* admissionView_ = nullptr;
    PrefixShiftView* prefixShiftView_ = nullptr;
    JobRunner* jobRunner_ = nullptr;
    JobQueue* jobQueue_ = nullptr;
    JobQueuePanel* jobPanel_ = nullptr;
    QLabel* workspaceLabel_ = nullptr;
    QLabel* runCountLabel_ = nullptr;
    QProgressBar* jobProgress_ = nullptr;
    QPushButton* cancelButton_ = nullptr;
    QMenu* recentMenu_ = nullptr;
};

} // namespace mismatch::ui

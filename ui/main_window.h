#pragma once
// The Mismatch Lab main window. Tabs: overview (where it opens: budget and best candidates per student, latest runs,
// next steps), runs (live run browser, per-run plot, overlay of selected runs), models, prompt sets, recipe editor,
// layer sensitivity, budget (calibrations), admission, prefix shift, jobs. Everything shown comes from the
// workspace's store, polled for commits by any process (the CLI included); jobs run off the GUI thread. A store
// error while polling or refreshing is shown in the status bar (and the window keeps running); cancelling a running
// job asks first. Its menus are built in main_window_menus.cpp, its tabs in main_window_tabs.cpp, the rest in
// main_window.cpp.
#include "core/store/run_store.h"
#include "ui/jobs/job_queue.h" // JobQueue::Lane

#include <QMainWindow>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

class QLabel;
class QMenu;
class QMessageBox;
class QProgressBar;
class QPushButton;
class QSplitter;
class QStackedWidget;
class QTimer;
class QTabWidget;
class QTableView;

namespace mismatch {
class Progress;
}

namespace mismatch::ui {

class JobDialog;
class AdmissionView;
class BudgetView;
class ComparePlot;
class JobQueue;
class JobQueuePanel;
class JobRunner;
class ImportLogDialog;
class ModelLibraryPanel;
class OverviewView;
class PrefixShiftView;
class BreakdownView;
class PromptSetPanel;
class RecipeEditor;
class RunPlot;
class RunTableModel;
class SensitivityView;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    enum Tab {
        OverviewTab,
        RunsTab,
        ModelsTab,
        PromptSetsTab,
        RecipeTab,
        SensitivityTab,
        BudgetTab,
        AdmissionTab,
        PrefixShiftTab,
        BreakdownTab,
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
    BreakdownView* breakdownView() const { return breakdownView_; }
    JobQueuePanel* jobPanel() const { return jobPanel_; }
    OverviewView* overview() const { return overview_; }
    // The status bar's message (elided on screen; the whole text here and in its tooltip).
    QString statusText() const;
    // The standing warning about the workspace (a store error of the last poll), empty when none.
    QString storeProblem() const;
    // Asks whether to cancel job `jobId` when it is running (the question is cancelQuestion() until answered);
    // a queued job is dropped without asking. Returns false for an unknown or finished job.
    bool requestCancel(int jobId);
    QMessageBox* cancelQuestion() const { return cancelQuestion_; }
    // Shows run `runId` in the Runs tab (selected and scrolled to): the user's choice, which then stays selected.
    bool showRunInTable(std::int64_t runId);

    // Queues a training run from a run file (as the "Start Training Run" dialog does); returns the job id or 0
    // with the error shown.
    int startTraining(const QString& runFile);
    // The job id of the last job queued from a dialog (0: none).
    int lastQueuedJob() const { return lastQueuedJob_; }
    // Handles dropped or opened paths: model directories, recipe files, run files, prompt sets.
    void openPaths(const QStringList& paths);

public slots:
    void runDemo();
    // The run selected in the Runs tab, continued by the catalogue job it stored (JobSpec::ofRun and the job's
    // resume; what `mismatch run --resume RUN` does), queued as a job. Returns the queued job's id (0: none, with
    // the reason shown).
    int resumeSelectedRun();
    // Writes the job file of the selected run's stored job (`mismatch run FILE` runs the same request again).
    void exportSelectedRunJobFile();
    void refresh();
    void showAbout();
    void showTrainingDialog();
    void showSensitivityDialog();
    void showCalibrationDialog();
    void showAdmissionDialog();
    void showPrefixShiftDialog();
    void showBreakdownDialog();
    // The recipe builder, ordering cells by scan `scanId` (0: the newest finished scan).
    void showRecipeBuildDialog(std::int64_t scanId = 0);
    void showTimeToQualityDialog();
    void showCompareObjectivesDialog();
    void showImportLogDialog();
    // Jobs > Follow Training Log: the import dialog as a follow (`mismatch import ... --follow`), its job alongside the
    // queue; the followed run is selected in the Runs tab as it is recorded and drawn as its steps arrive, beside the
    // budget chosen in the dialog's "Budget from:".
    void showFollowLogDialog();
    void showCompareRunsDialog();
    // A catalogue job without a dialog of its own, in the dialog built from its parameters.
    void showSpecJobDialog(const std::string& kind);
    // File > Export Recipe For > TARGET: the export dialog for the recipe in the editor.
    void showExportDialog(const QString& target);
    // Adds rules keeping these sensitivity cells' modules in BF16 to the recipe editor, and shows it.
    void keepInBf16(const std::vector<std::pair<std::int64_t, std::string>>& cells);
    void copyCliCommand();
    void exportCurrentPlot();
    void exportCurrentTable();

protected:
    void closeEvent(QCloseEvent* event) override;
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    // The menu bar, one menu a function, in menu order (main_window_menus.cpp).
    void createMenus();
    void createFileMenu();
    void createEditMenu();
    void createViewMenu();
    void createJobsMenu();
    void createHelpMenu();
    // The tabs and their views (main_window_tabs.cpp); returns the Runs tab's splitter, whose state is restored with
    // the window's.
    QSplitter* createTabs();
    QSplitter* createRunsTab();
    // Wires the views to the store's polling, the run selection and each other (main_window_tabs.cpp).
    void connectTabs();
    // The status bar: workspace, messages, store problem, run count, job progress and its Cancel button.
    void createStatusBar();
    // The job runner's progress and the queue's started/finished to the status bar.
    void connectJobProgress();
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
    // Whether the open recipe may be replaced or closed by `action` ("New Recipe", ...): yes when it has no unsaved
    // edits; otherwise a question (objectName "unsavedRecipeQuestion") offers Save, Discard and Cancel, and the
    // answer is yes after a successful save or Discard, no after Cancel or a failed save.
    bool mayReplaceRecipe(const QString& action);
    // Saves the open recipe to its file, or to one the user chooses; false when not saved (the reason shown).
    bool saveRecipe();
    // Saves the open recipe to `path`; false, with the reason shown, when it cannot.
    bool saveRecipeTo(const QString& path);
    void showStatus(const QString& message, int milliseconds = 6000);
    void onStoreError(const QString& message);
    void onOverviewAction(int action, qint64 id, const QString& argument);
    void updateProgressText();

    // Which run the Runs tab shows as runs come and go (main_window.cpp). The window follows the runs that the jobs
    // queued here begin; a run another process begins never moves the selection or the plot; a run the user selects
    // stays selected until the user selects another (or queues a job). The selection is kept by run id across the
    // model's refreshes (RunTableModel::refresh).
    enum class RunFollowing {
        Newest, // nothing chosen since the workspace opened: an empty selection gets the newest run
        OwnJobs, // a job was queued here: each run it begins is selected when it appears
        UserChoice, // the user chose (a click, the keyboard, Show Run): nothing moves the selection
    };
    struct BegunRuns; // the runs this window's jobs began, reported from the jobs' threads
    // Queues `job` with the runs it begins reported (store::RunBeginListener), and follows them from now on.
    int enqueueOwnJob(const QString& name, const QString& cliCommand, std::function<void(Progress&)> job,
        JobQueue::Lane lane = JobQueue::Lane::Queue);
    // A change of the run selection made by the user (not by followNewRuns or a model refresh) is a choice.
    void connectRunFollowing();
    // Applies runFollowing_ after a refresh of the run table (and when a workspace opens).
    void followNewRuns();
    // The newest run the jobs queued here began that the run table shows (0: none); forgets every reported run it
    // shows or that belongs to another workspace, keeps the ones the table does not show yet.
    std::int64_t takeShownOwnRun();
    // Selects row `row` of the run table and scrolls to it, as the window's own change.
    void selectRunRow(int row);
    // The budget an import or follow dialog's "Budget from:" chose, for the run its job stores into: the run does not
    // exist when the job is queued (a follow records it with its first step), so it waits here, by run name (an
    // import refuses a name that another run has; a follow continues only the run of that name that imported the same
    // file), until the run table shows that run; then the Runs tab draws it beside the run (RunPlot::setRunBudget)
    // for the rest of the session.
    struct PendingBudget {
        std::string database; // the workspace's, so that a workspace opened since does not take it
        std::string runName;
        std::int64_t calibrationId = 0;
        std::int64_t step = 0;
    };
    void budgetBesideImportedRun(ImportLogDialog* dialog);
    void attachPendingBudgets();

    QString workspaceDirectory_;
    QString lastError_;
    QString analysisFingerprint_;
    int lastQueuedJob_ = 0;
    RunFollowing runFollowing_ = RunFollowing::Newest;
    bool selectingRuns_ = false; // the window or a model refresh is changing the run selection, not the user
    std::shared_ptr<BegunRuns> begunRuns_;
    std::vector<PendingBudget> pendingBudgets_;
    double progressFraction_ = 0.0;
    double progressEta_ = -1.0;
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
    BreakdownView* breakdownView_ = nullptr;
    JobRunner* jobRunner_ = nullptr;
    JobQueue* jobQueue_ = nullptr;
    JobQueuePanel* jobPanel_ = nullptr;
    OverviewView* overview_ = nullptr;
    QLabel* workspaceLabel_ = nullptr;
    QLabel* statusMessage_ = nullptr;
    QTimer* statusTimer_ = nullptr;
    QTimer* overviewTimer_ = nullptr; // live run changes refresh the Overview at most this often
    QLabel* storeProblem_ = nullptr;
    QMessageBox* cancelQuestion_ = nullptr;
    QLabel* runCountLabel_ = nullptr;
    QProgressBar* jobProgress_ = nullptr;
    QPushButton* cancelButton_ = nullptr;
    QMenu* recentMenu_ = nullptr;
};

} // namespace mismatch::ui

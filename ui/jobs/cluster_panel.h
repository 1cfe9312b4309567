#pragma once
// The Jobs tab's Slurm section (issue 43): the workspace's cluster submissions (jobs::cluster::submissions, newest
// first), one row each with its units counted by state, its advance step and its result, and the units of the
// selected one. Merge Finished Units (jobs::cluster::mergeFinished), Resume (jobs::cluster::resume), Cancel (asks
// first; jobs::cluster::cancel) and Refresh. The status is read off the GUI thread (status() runs squeue and sacct,
// which a busy cluster answers slowly): every ten seconds while the section is on screen, when it is shown, and after
// each action, which runs on the same thread. One read or action at a time; what is asked meanwhile runs after it. An
// action's error is shown in a message box naming the submission; a merge emits storeChanged so that the window's
// views read the merged results.
#include "core/jobs/cluster.h"

#include <QPointer>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

class QLabel;
class QMessageBox;
class QPushButton;
class QStandardItemModel;
class QTableView;
class QThread;
class QTimer;

namespace mismatch::ui {

class EmptyState;

class ClusterPanel : public QWidget {
    Q_OBJECT
public:
    enum SubmissionColumn {
        SubmissionName,
        SubmissionKind,
        SubmittedAt,
        PendingCount,
        RunningCount,
        DoneCount,
        FailedCount,
        MergedCount,
        AdvanceStep,
        Finished,
        Result,
        SubmissionColumnCount
    };
    enum UnitColumn { UnitId, UnitLabel, UnitStage, UnitState, SlurmJob, SlurmState, UnitDetail, UnitColumnCount };
    static constexpr int kRefreshMs = 10000; // the status is read again this often while the section is on screen

    // A submission as last read: its status, or why it could not be read (`problem`, the status then holds only its
    // directory and name).
    struct Row {
        jobs::cluster::SubmissionStatus status;
        QString problem;
    };

    explicit ClusterPanel(QWidget* parent = nullptr);
    ~ClusterPanel() override;

    // The workspace whose WORKSPACE/cluster submissions are listed; reads them at once.
    void setWorkspace(const QString& directory);
    QString workspace() const { return workspace_; }
    // Reads the submissions again, off the GUI thread (after what is in flight, when something is).
    void refresh();
    // A read or action is in flight.
    bool busy() const { return thread_ != nullptr; }

    QTableView* submissionTable() const { return submissionTable_; }
    QTableView* unitTable() const { return unitTable_; }
    QStandardItemModel* submissionModel() const { return submissionModel_; }
    QStandardItemModel* unitModel() const { return unitModel_; }
    const std::vector<Row>& rows() const { return rows_; }
    // The selected submission's directory ("" when none) and its row (nullptr when none).
    QString selectedSubmission() const { return selected_; }
    const Row* selectedRow() const;
    // Selects the submission in `directory`; false when it is not listed.
    bool selectSubmission(const QString& directory);
    // Reads the submissions again and selects the one in `directory` once it is listed (a new submission).
    void showSubmission(const QString& directory);
    // Whether the section shows its empty page (no submission in the workspace).
    bool showingEmpty() const;
    // The line under the title: when the status was read, what the last action did.
    QString message() const;

    // The buttons' actions on the selected submission (each runs off the GUI thread, then the status is read again).
    void mergeSelected();
    void resumeSelected();
    // Asks first (cancelQuestion(), until answered); cancels when confirmed.
    void cancelSelected();
    QMessageBox* cancelQuestion() const { return cancelQuestion_; }
    // The last action's error box (nullptr once closed or when none).
    QMessageBox* errorBox() const { return errorBox_; }

signals:
    // Merge stored results in the workspace: the window re-reads the store.
    void storeChanged();
    // What an action did, in words (the window's status bar).
    void statusMessage(const QString& message);
    // The empty page's "Submit a Job File to Slurm...".
    void submitRequested();
    // A read finished and the tables show it.
    void refreshed();

protected:
    void showEvent(QShowEvent* event) override;

private:
    // What runs on the worker thread: an action on one submission (none for a plain read), then the status of every
    // submission of the workspace.
    using Action = std::function<QStringList(const std::string& directory)>;
    struct Task {
        QString action; // "Merge", "Resume", "Cancel"; "" for a plain read
        QString directory;
        QString name;
        Action run;
        bool changesStore = false;
    };
    struct Outcome;

    QWidget* createPage();
    void createTables(QWidget* page);
    void start(Task task);
    void finish(const Task& task, const std::shared_ptr<Outcome>& outcome);
    void fillSubmissions();
    void fillUnits();
    void updateButtons();
    void showActionError(const Task& task, const QString& error);
    // Runs `run` on submission `directory` off the GUI thread, then reads every submission again.
    void act(const QString& action, const QString& directory, Action run, bool changesStore = false);

    QString workspace_;
    std::vector<Row> rows_;
    QString selected_;
    QString wanted_; // showSubmission's directory, selected when a read lists it
    bool filling_ = false; // the tables are being refilled: their selection changes are not the user's
    QThread* thread_ = nullptr;
    bool runningAction_ = false; // the thread runs an action, not only a read
    std::optional<Task> queued_; // asked while the thread was busy: runs next (an action wins over a read)
    QTimer* timer_ = nullptr;
    EmptyState* emptyState_ = nullptr;
    QLabel* message_ = nullptr;
    QPushButton* refresh_ = nullptr;
    QPushButton* merge_ = nullptr;
    QPushButton* resume_ = nullptr;
    QPushButton* cancel_ = nullptr;
    QLabel* unitsTitle_ = nullptr;
    QTableView* submissionTable_ = nullptr;
    QTableView* unitTable_ = nullptr;
    QStandardItemModel* submissionModel_ = nullptr;
    QStandardItemModel* unitModel_ = nullptr;
    QPointer<QMessageBox> cancelQuestion_;
    QPointer<QMessageBox> errorBox_;
};

// A submission's result ids ({"run_id": 12, "calibration_id": 3}) in words: "run 12, calibration 3".
QString describeResult(const nlohmann::json& result);
// What submit() or resume() submitted, one line each: the stages, their scripts and Slurm job ids.
QStringList describeSubmission(const jobs::cluster::Submission& submission);

} // namespace mismatch::ui

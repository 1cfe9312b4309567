#pragma once
// A queue of jobs run one after another through a JobRunner (one worker thread at a time, so two jobs never
// compete for the machine's cores). A job that mostly waits on outside input (following a training log as a cluster
// job writes it) runs alongside the queue instead, at once, on a runner of its own: it would otherwise hold the
// queue until it is stopped. The model lists every job of the session: queued, running (with progress and ETA),
// finished, failed (with the error) or cancelled; the panel shows it with cancel and "copy CLI command" (the headless
// command that reproduces the job). Below the session's jobs, the workspace's Slurm submissions
// (ui/jobs/cluster_panel.h); "Submit to Slurm..." hands a job's job file to the cluster.
#include "ui/jobs/job_runner.h"

#include <QWidget>

#include <deque>
#include <map>

class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class ClusterPanel;
class SubmitDialog;

class JobQueue : public QObject {
    Q_OBJECT
public:
    enum Column { Name, State, ProgressColumn, Eta, Detail, ColumnCount };

    // Queue: one at a time, after the jobs queued before it. Alongside: started at once on a runner of its own, for a
    // job that waits on outside input rather than computes (a followed log); it never delays the queue.
    enum class Lane { Queue, Alongside };

    JobQueue(JobRunner* runner, QObject* parent = nullptr);

    // Queues `job` (starts it now when nothing runs), or starts it alongside the queue. Returns the job's id.
    int enqueue(const QString& name, const QString& cliCommand, JobWorker::Job job, Lane lane = Lane::Queue);
    // Cancels a running job (it stops at its next boundary) or drops a queued one. False for an unknown or
    // finished job.
    bool cancel(int id);
    // Cancels every job running alongside the queue (the window is closing).
    void cancelAlongside();
    // The job the queue runs (0: none); jobs alongside it are not counted.
    int runningJob() const { return running_; }
    // The jobs running alongside the queue.
    int alongsideCount() const { return static_cast<int>(alongside_.size()); }
    int queuedCount() const { return static_cast<int>(pending_.size()); }
    QString cliCommand(int id) const;
    // The job file of a job whose dialog has a catalogue spec (core/jobs/job_file.h; empty for the others), set
    // after enqueue(); "Export Job File..." writes it.
    void setJobFile(int id, const QString& text);
    QString jobFile(int id) const;
    // Writes job `id`'s job file to `path` (temporary file + rename); false with `error` set when it has none or
    // the file cannot be written.
    bool exportJobFile(int id, const QString& path, QString* error = nullptr) const;
    QString state(int id) const;
    QStandardItemModel* model() const { return model_; }
    int rowOf(int id) const;
    int idAtRow(int row) const;

signals:
    // A job of the queue started (the status bar's progress follows it; a job alongside has its row only).
    void jobStarted(int id, const QString& name);
    void jobFinished(int id, const QString& name, bool ok, bool cancelled, const QString& error);

private:
    struct Pending {
        int id;
        QString name;
        JobWorker::Job job;
    };
    void startNext();
    void startAlongside(int id, const QString& name, JobWorker::Job job);
    void setRow(int id, const QString& state, const QString& detail = {});
    // A job's row when it ended, and jobFinished.
    void finishRow(int id, const QString& name, bool ok, bool cancelled, const QString& error);

    JobRunner* runner_;
    std::map<int, JobRunner*> alongside_; // job id -> its own runner, while it runs
    QStandardItemModel* model_;
    std::deque<Pending> pending_;
    int nextId_ = 1;
    int running_ = 0;
};

class JobQueuePanel : public QWidget {
    Q_OBJECT
public:
    JobQueuePanel(JobQueue* queue, QWidget* parent = nullptr);
    QTableView* table() const { return table_; }
    // The selected job's id, 0 when none.
    int selectedJob() const;
    // The workspace whose Slurm submissions the panel lists (and where Submit to Slurm puts new ones).
    void setWorkspace(const QString& directory);
    ClusterPanel* clusterPanel() const { return cluster_; }
    // "Submit to Slurm..." for the selected job: the submit dialog, open (window-modal, deleted when closed);
    // nullptr when no job is selected, or (the reason shown) when the job has no job file.
    SubmitDialog* submitSelectedJob();
    // The empty Slurm section's button: a job or study file chosen on disk, in the submit dialog (nullptr when none).
    SubmitDialog* submitJobFile(const QString& path);

signals:
    // "Cancel Job" for the selected job: the window asks before cancelling a running one.
    void cancelRequested(int id);

private:
    // Shows `dialog` (deleted when closed); the submissions are read again after it submits.
    void openSubmitDialog(SubmitDialog* dialog);

    JobQueue* queue_;
    QTableView* table_;
    ClusterPanel* cluster_;
};

} // namespace mismatch::ui

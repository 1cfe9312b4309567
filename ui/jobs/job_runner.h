#pragma once
// Runs one core job off the GUI thread: a worker object moved to a QThread. Progress arrives as signals
// (throttled by the receiver), cancel sets the job's atomic flag directly.
#include "core/common/progress.h"

#include <QObject>
#include <QString>
#include <QThread>

#include <functional>
#include <memory>

namespace mismatch::ui {

class JobWorker : public QObject {
    Q_OBJECT
public:
    using Job = std::function<void(Progress&)>;
    JobWorker(Job job, std::shared_ptr<Progress> progress) : job_(std::move(job)), progress_(std::move(progress)) {}

public slots:
    void start();

signals:
    void finished(bool ok, bool cancelled, const QString& error);

private:
    Job job_;
    std::shared_ptr<Progress> progress_;
};

class JobRunner : public QObject {
    Q_OBJECT
public:
    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override;

    // Starts `job` on a new thread; returns false when a job is already running.
    bool start(const QString& name, JobWorker::Job job);
    void cancel();
    bool running() const { return thread_ != nullptr; }
    QString jobName() const { return name_; }

signals:
    void progressChanged(double fraction, const QString& stage, double etaSeconds);
    void finished(const QString& name, bool ok, bool cancelled, const QString& error);

private:
    void onWorkerFinished(bool ok, bool cancelled, const QString& error);

    QThread* thread_ = nullptr;
    std::shared_ptr<Progress> progress_;
    QString name_;
};

}  // namespace mismatch::ui

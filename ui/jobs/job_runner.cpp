#include "ui/jobs/job_runner.h"

#include "core/common/error.h"

#include <QMetaObject>

namespace mismatch::ui {

void JobWorker::start()
{
    try {
        job_(*progress_);
        emit finished(true, false, {});
    } catch (const CancelledError& error) {
        emit finished(false, true, QString::fromUtf8(error.what()));
    } catch (const std::exception& error) {
        emit finished(false, false, QString::fromUtf8(error.what()));
    }
}

JobRunner::JobRunner(QObject* parent) : QObject(parent) {}

JobRunner::~JobRunner()
{
    if (thread_) {
        progress_->cancel();
        thread_->quit();
        thread_->wait();
    }
}

bool JobRunner::start(const QString& name, JobWorker::Job job)
{
    if (thread_) {
        return false;
    }
    name_ = name;
    // The listener runs on the worker thread; a queued invocation carries the values to the GUI thread.
    progress_ = std::make_shared<Progress>([this](double fraction, const std::string& stage) {
        const double eta = progress_ ? progress_->etaSeconds() : -1.0;
        QMetaObject::invokeMethod(
            this, [this, fraction, stage = QString::fromStdString(stage), eta] { emit progressChanged(fraction, stage, eta); },
            Qt::QueuedConnection);
    });
    thread_ = new QThread(this);
    auto* worker = new JobWorker(std::move(job), progress_);
    worker->moveToThread(thread_);
    connect(thread_, &QThread::started, worker, &JobWorker::start);
    connect(worker, &JobWorker::finished, this, &JobRunner::onWorkerFinished, Qt::QueuedConnection);
    connect(thread_, &QThread::finished, worker, &QObject::deleteLater);
    thread_->start();
    return true;
}

void JobRunner::cancel()
{
    if (progress_) {
        progress_->cancel();
    }
}

void JobRunner::onWorkerFinished(bool ok, bool cancelled, const QString& error)
{
    thread_->quit();
    thread_->wait();
    thread_->deleteLater();
    thread_ = nullptr;
    emit finished(name_, ok, cancelled, error);
}

}  // namespace mismatch::ui

#include "ui/jobs/job_queue.h"

#include "core/io/recipe_export.h"
#include "core/jobs/job_file.h"
#include "ui/dialogs/submit_dialog.h"
#include "ui/jobs/cluster_panel.h"
#include "ui/plots/plot_export.h"

#include <QClipboard>
#include <QDir>
#include <QFileDialog>
#include <QMessageBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {
constexpr int kIdRole = Qt::UserRole;
constexpr int kCliRole = Qt::UserRole + 1;
constexpr int kJobFileRole = Qt::UserRole + 2;

QString noJobFileText()
{
    return QObject::tr("This job has no job file: only jobs of the catalogue (`mismatch run --help` lists them) run "
                       "from one. Copy its CLI command instead.");
}

QColor stateColor(const QString& state)
{
    if (state == QLatin1String("running"))
        return QColor(0x1f, 0x6f, 0xd1);
    if (state == QLatin1String("finished"))
        return QColor(0x2e, 0x7d, 0x32);
    if (state == QLatin1String("failed"))
        return QColor(0xc6, 0x28, 0x28);
    return QColor(0x75, 0x75, 0x75);
}
} // namespace

JobQueue::JobQueue(JobRunner* runner, QObject* parent)
    : QObject(parent)
    , runner_(runner)
{
    model_ = new QStandardItemModel(this);
    model_->setHorizontalHeaderLabels({tr("Job"), tr("State"), tr("Progress"), tr("ETA"), tr("Detail")});
    connect(runner_, &JobRunner::progressChanged, this, [this](double fraction, const QString& stage, double eta) {
        const int row = rowOf(running_);
        if (row < 0)
            return;
        model_->item(row, ProgressColumn)->setText(QStringLiteral("%1%").arg(fraction * 100.0, 0, 'f', 0));
        model_->item(row, Eta)->setText(eta >= 0 ? tr("%1 s").arg(eta, 0, 'f', 0) : tr("-"));
        model_->item(row, Detail)->setText(stage);
    });
    connect(runner_, &JobRunner::finished, this,
        [this](const QString& name, bool ok, bool cancelled, const QString& error) {
            const int id = running_;
            running_ = 0;
            if (id != 0) {
                finishRow(id, name, ok, cancelled, error);
            }
            startNext();
        });
}

void JobQueue::finishRow(int id, const QString& name, bool ok, bool cancelled, const QString& error)
{
    setRow(id, ok ? tr("finished") : cancelled ? tr("cancelled") : tr("failed"), ok ? QString() : error);
    if (ok)
        model_->item(rowOf(id), ProgressColumn)->setText(QStringLiteral("100%"));
    model_->item(rowOf(id), Eta)->setText(QString());
    emit jobFinished(id, name, ok, cancelled, error);
}

int JobQueue::enqueue(const QString& name, const QString& cliCommand, JobWorker::Job job, Lane lane)
{
    const int id = nextId_++;
    QList<QStandardItem*> row;
    row << new QStandardItem(name) << new QStandardItem(tr("queued")) << new QStandardItem(QStringLiteral("0%"))
        << new QStandardItem(tr("-")) << new QStandardItem(QString());
    row.front()->setData(id, kIdRole);
    row.front()->setData(cliCommand, kCliRole);
    row.front()->setToolTip(cliCommand);
    row[ProgressColumn]->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    model_->appendRow(row);
    if (lane == Lane::Alongside) {
        startAlongside(id, name, std::move(job));
        return id;
    }
    pending_.push_back({id, name, std::move(job)});
    startNext();
    return id;
}

void JobQueue::startAlongside(int id, const QString& name, JobWorker::Job job)
{
    auto* runner = new JobRunner(this);
    alongside_[id] = runner;
    model_->item(rowOf(id), ProgressColumn)->setText(tr("-")); // it has no fraction: it runs until stopped
    connect(runner, &JobRunner::progressChanged, this, [this, id](double, const QString& stage, double) {
        if (const int row = rowOf(id); row >= 0) {
            model_->item(row, Detail)->setText(stage);
            model_->item(row, Detail)->setToolTip(stage);
        }
    });
    connect(runner, &JobRunner::finished, this,
        [this, id, runner](const QString& jobName, bool ok, bool cancelled, const QString& error) {
            alongside_.erase(id);
            runner->deleteLater();
            finishRow(id, jobName, ok, cancelled, error);
        });
    runner->start(name, std::move(job));
    setRow(id, tr("running"), tr("alongside the queue"));
}

void JobQueue::cancelAlongside()
{
    for (const auto& [id, runner] : alongside_) {
        runner->cancel();
    }
}

void JobQueue::startNext()
{
    if (running_ != 0 || runner_->running() || pending_.empty()) {
        return;
    }
    Pending next = std::move(pending_.front());
    pending_.pop_front();
    if (!runner_->start(next.name, std::move(next.job))) {
        setRow(next.id, tr("failed"), tr("the job runner is busy"));
        return;
    }
    running_ = next.id;
    setRow(next.id, tr("running"));
    emit jobStarted(next.id, next.name);
}

bool JobQueue::cancel(int id)
{
    if (id != 0 && id == running_) {
        runner_->cancel();
        model_->item(rowOf(id), Detail)->setText(tr("cancelling at the next step..."));
        return true;
    }
    if (const auto alongside = alongside_.find(id); alongside != alongside_.end()) {
        alongside->second->cancel();
        model_->item(rowOf(id), Detail)->setText(tr("stopping..."));
        return true;
    }
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if (it->id == id) {
            pending_.erase(it);
            setRow(id, tr("cancelled"), tr("removed from the queue"));
            return true;
        }
    }
    return false;
}

QString JobQueue::cliCommand(int id) const
{
    const int row = rowOf(id);
    return row < 0 ? QString() : model_->item(row, Name)->data(kCliRole).toString();
}

void JobQueue::setJobFile(int id, const QString& text)
{
    if (const int row = rowOf(id); row >= 0) {
        model_->item(row, Name)->setData(text, kJobFileRole);
    }
}

QString JobQueue::jobFile(int id) const
{
    const int row = rowOf(id);
    return row < 0 ? QString() : model_->item(row, Name)->data(kJobFileRole).toString();
}

bool JobQueue::exportJobFile(int id, const QString& path, QString* error) const
{
    const QString text = jobFile(id);
    try {
        if (text.isEmpty()) {
            throw std::runtime_error("this job has no job file (only jobs of the catalogue have one)");
        }
        jobs::writeJobFileText(path.toStdString(), text.toStdString());
    } catch (const std::exception& failure) {
        if (error) {
            *error = QString::fromUtf8(failure.what());
        }
        return false;
    }
    return true;
}

QString JobQueue::state(int id) const
{
    const int row = rowOf(id);
    return row < 0 ? QString() : model_->item(row, State)->text();
}

int JobQueue::rowOf(int id) const
{
    for (int row = 0; row < model_->rowCount(); ++row) {
        if (model_->item(row, Name)->data(kIdRole).toInt() == id) {
            return row;
        }
    }
    return -1;
}

int JobQueue::idAtRow(int row) const
{
    return row >= 0 && row < model_->rowCount() ? model_->item(row, Name)->data(kIdRole).toInt() : 0;
}

void JobQueue::setRow(int id, const QString& state, const QString& detail)
{
    const int row = rowOf(id);
    if (row < 0)
        return;
    model_->item(row, State)->setText(state);
    model_->item(row, State)->setForeground(stateColor(state));
    model_->item(row, Detail)->setText(detail);
    model_->item(row, Detail)->setToolTip(detail);
}

JobQueuePanel::JobQueuePanel(JobQueue* queue, QWidget* parent)
    : QWidget(parent)
    , queue_(queue)
{
    auto* layout = new QVBoxLayout(this);
    auto* local = new QWidget(this);
    auto* localLayout = new QVBoxLayout(local);
    localLayout->setContentsMargins(0, 0, 0, 0);
    auto* buttons = new QHBoxLayout;
    auto* cancel = new QPushButton(tr("Cancel Job"), this);
    cancel->setObjectName("cancelJobButton");
    auto* copy = new QPushButton(tr("Copy CLI Command"), this);
    copy->setObjectName("copyJobCliButton");
    auto* exportFile = new QPushButton(tr("Export Job File..."), this);
    exportFile->setObjectName("exportJobFileButton");
    exportFile->setToolTip(tr("Write the selected job as a job file that `mismatch run FILE` runs headless"));
    auto* submit = new QPushButton(tr("Submit to Slurm..."), this);
    submit->setObjectName("submitToSlurmButton");
    submit->setToolTip(tr("Run the selected job's independent units on a Slurm cluster, one sbatch job each, their "
                          "results merged into this workspace (or write the scripts only: a dry run)"));
    buttons->addWidget(cancel);
    buttons->addWidget(copy);
    buttons->addWidget(exportFile);
    buttons->addWidget(submit);
    auto* note = new QLabel(tr("Jobs run one at a time, off the window's thread (a followed training log runs "
                               "alongside them until cancelled); partial results stay in the workspace when a job is "
                               "cancelled or fails."),
        this);
    note->setObjectName("jobQueueNote");
    note->setWordWrap(true); // wraps rather than widening the tab past a 1024 px window
    buttons->addWidget(note, 1);
    localLayout->addLayout(buttons);
    table_ = new QTableView(this);
    table_->setObjectName("jobTable");
    table_->setModel(queue_->model());
    table_->verticalHeader()->hide();
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setWordWrap(false);
    table_->setColumnWidth(JobQueue::Name, 300);
    table_->setColumnWidth(JobQueue::State, 90);
    table_->setColumnWidth(JobQueue::ProgressColumn, 80);
    table_->setColumnWidth(JobQueue::Eta, 80);
    addTableExportMenu(table_);
    localLayout->addWidget(table_, 1);

    // The session's jobs over the workspace's Slurm submissions; the handle between them moves.
    cluster_ = new ClusterPanel(this);
    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->setObjectName("jobsSplitter");
    splitter->setChildrenCollapsible(false);
    splitter->addWidget(local);
    splitter->addWidget(cluster_);
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 3);
    splitter->setSizes({120, 480});
    layout->addWidget(splitter, 1);

    connect(cancel, &QPushButton::clicked, this, [this] {
        if (selectedJob() != 0) {
            emit cancelRequested(selectedJob());
        }
    });
    connect(copy, &QPushButton::clicked, this, [this] {
        const QString command = queue_->cliCommand(selectedJob());
        if (!command.isEmpty())
            QGuiApplication::clipboard()->setText(command);
    });
    connect(exportFile, &QPushButton::clicked, this, [this] {
        const int id = selectedJob();
        if (id == 0) {
            return;
        }
        if (queue_->jobFile(id).isEmpty()) {
            QMessageBox::information(this, tr("Export Job File"), noJobFileText());
            return;
        }
        const QString path = QFileDialog::getSaveFileName(this, tr("Export Job File"),
            QDir::home().filePath(QStringLiteral("job.yaml")), tr("Job files (*.yaml *.yml)"));
        QString error;
        if (!path.isEmpty() && !queue_->exportJobFile(id, path, &error)) {
            QMessageBox::warning(this, tr("Export Job File"), error);
        }
    });
    connect(submit, &QPushButton::clicked, this, [this] { submitSelectedJob(); });
    connect(cluster_, &ClusterPanel::submitRequested, this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("Job File to Submit to Slurm"), cluster_->workspace(), tr("Job and study files (*.yaml *.yml)"));
        if (!path.isEmpty()) {
            submitJobFile(path);
        }
    });
}

void JobQueuePanel::setWorkspace(const QString& directory)
{
    cluster_->setWorkspace(directory);
}

SubmitDialog* JobQueuePanel::submitSelectedJob()
{
    const int id = selectedJob();
    if (id == 0) {
        return nullptr;
    }
    if (queue_->jobFile(id).isEmpty()) {
        QMessageBox::information(this, tr("Submit to Slurm"), noJobFileText());
        return nullptr;
    }
    const QString name = queue_->model()->item(queue_->rowOf(id), JobQueue::Name)->text();
    auto* dialog = new SubmitDialog(
        cluster_->workspace(), queue_->jobFile(id), SubmitDialog::Source::Text, this, tr("job \"%1\"").arg(name));
    openSubmitDialog(dialog);
    return dialog;
}

SubmitDialog* JobQueuePanel::submitJobFile(const QString& path)
{
    if (path.isEmpty()) {
        return nullptr;
    }
    auto* dialog = new SubmitDialog(cluster_->workspace(), path, SubmitDialog::Source::File, this);
    openSubmitDialog(dialog);
    return dialog;
}

void JobQueuePanel::openSubmitDialog(SubmitDialog* dialog)
{
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &SubmitDialog::submitted, cluster_, &ClusterPanel::showSubmission);
    dialog->open();
}

int JobQueuePanel::selectedJob() const
{
    const QModelIndexList rows = table_->selectionModel()->selectedRows();
    return rows.isEmpty() ? 0 : queue_->idAtRow(rows.front().row());
}

} // namespace mismatch::ui

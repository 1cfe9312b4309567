#include "ui/jobs/cluster_panel.h"

#include "ui/plots/plot_export.h"
#include "ui/views/empty_state.h"

#include <algorithm>

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QShowEvent>
#include <QSplitter>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QTableView>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace cluster = jobs::cluster;

namespace {
constexpr int kDirectoryRole = Qt::UserRole;

QColor unitStateColor(cluster::UnitState state)
{
    switch (state) {
    case cluster::UnitState::Running:
        return QColor(0x1f, 0x6f, 0xd1);
    case cluster::UnitState::Done:
        return QColor(0x2e, 0x7d, 0x32);
    case cluster::UnitState::Failed:
        return QColor(0xc6, 0x28, 0x28);
    case cluster::UnitState::Merged:
        return QColor(0x00, 0x69, 0x5c);
    case cluster::UnitState::Pending:
        break;
    }
    return QColor(0x75, 0x75, 0x75);
}

// Sets the text of cell (row, column), reusing its item: the selection and the scroll position stay as they were
// when a refresh changes only the texts.
QStandardItem* setCell(QStandardItemModel* model, int row, int column, const QString& text, const QString& tip = {})
{
    QStandardItem* item = model->item(row, column);
    if (!item) {
        item = new QStandardItem;
        model->setItem(row, column, item);
    }
    item->setText(text);
    item->setToolTip(tip.isEmpty() ? text : tip);
    item->setData(QVariant(), Qt::ForegroundRole);
    return item;
}

QStandardItem* setCount(QStandardItemModel* model, int row, int column, std::int64_t count)
{
    QStandardItem* item = setCell(model, row, column, QString::number(count));
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

QTableView* makeTable(QWidget* parent, const QString& objectName, QStandardItemModel* model)
{
    auto* table = new QTableView(parent);
    table->setObjectName(objectName);
    table->setModel(model);
    table->verticalHeader()->hide();
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setSelectionMode(QAbstractItemView::SingleSelection);
    table->horizontalHeader()->setStretchLastSection(true);
    table->setWordWrap(false);
    addTableExportMenu(table);
    return table;
}

QString jsonText(const nlohmann::json& value)
{
    return QString::fromStdString(value.is_string() ? value.get<std::string>() : value.dump());
}

// "2026-11-08T14:03:27Z" -> "2026-11-08 14:03 UTC" (the text as it is when it is no such time).
QString submittedText(const std::string& timestamp)
{
    const QString text = QString::fromStdString(timestamp);
    const QDateTime time = QDateTime::fromString(text, Qt::ISODate);
    return time.isValid() ? time.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm 'UTC'")) : text;
}

QString joined(const std::vector<std::string>& items, const QString& separator = QStringLiteral(", "))
{
    QStringList list;
    for (const std::string& item : items) {
        list << QString::fromStdString(item);
    }
    return list.join(separator);
}
} // namespace

QString describeResult(const nlohmann::json& result)
{
    if (result.is_null()) {
        return {};
    }
    if (!result.is_object()) {
        return jsonText(result);
    }
    // The ids a result names (calibration 1, run 25, scan 3) and its counts: the rest of a job's result (a
    // calibration's whole record) is in the tabs.
    QStringList parts;
    for (const auto& [name, value] : jobs::cluster::resultIds(result)) {
        QString key = QString::fromStdString(name);
        if (key.endsWith(QLatin1String("_id"))) {
            key.chop(3);
        }
        key.replace(QLatin1Char('_'), QLatin1Char(' '));
        parts << QStringLiteral("%1 %2").arg(key).arg(value);
    }
    return parts.join(QStringLiteral(", "));
}

QStringList describeSubmission(const cluster::Submission& submission)
{
    QStringList lines;
    if (submission.stages.empty()) {
        lines << QObject::tr("Nothing was submitted: no unit needed it.");
    }
    for (const cluster::SubmittedStage& stage : submission.stages) {
        lines << QObject::tr("Stage %1: %n unit(s) (%2)", nullptr, static_cast<int>(stage.units.size()))
                     .arg(stage.stage)
                     .arg(joined(stage.units));
        for (const std::string& script : stage.scripts) {
            lines << QObject::tr("  script %1").arg(QString::fromStdString(script));
        }
        if (stage.jobIds.size() == 1) {
            lines << QObject::tr("  Slurm job %1").arg(QString::fromStdString(stage.jobIds.front()));
        } else if (stage.jobIds.size() > 1) {
            // The units' jobs, then the stage's advance step.
            const std::vector<std::string> units(stage.jobIds.begin(), stage.jobIds.end() - 1);
            lines << QObject::tr("  Slurm jobs %1 (units), %2 (advance step: merges them when they end)")
                         .arg(joined(units), QString::fromStdString(stage.jobIds.back()));
        }
    }
    if (submission.dryRun) {
        lines << QObject::tr("Dry run: nothing was handed to Slurm. Resume in the Jobs tab submits it.");
    }
    return lines;
}

// What the worker thread hands back.
struct ClusterPanel::Outcome {
    QString workspace; // the workspace it read
    QStringList lines; // what the action did
    QString error; // the action's error
    QString readError; // listing the submissions failed
    std::vector<Row> rows;
};

ClusterPanel::ClusterPanel(QWidget* parent)
    : QWidget(parent)
{
    setObjectName("clusterPanel");
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* header = new QHBoxLayout;
    auto* title = new QLabel(tr("<b>Slurm submissions</b>"), this);
    title->setObjectName("clusterTitle");
    header->addWidget(title);
    message_ = new QLabel(this);
    message_->setObjectName("clusterMessage");
    message_->setWordWrap(true); // wraps rather than widening the tab past a 1024 px window
    message_->setStyleSheet(QStringLiteral("color: #616161"));
    header->addWidget(message_, 1);
    refresh_ = new QPushButton(tr("Refresh"), this);
    refresh_->setObjectName("clusterRefreshButton");
    refresh_->setToolTip(tr("Read the submissions' state again (Slurm's squeue and sacct, the shards, the results)"));
    header->addWidget(refresh_);
    layout->addLayout(header);

    auto* body = new QWidget(this);
    emptyState_ = new EmptyState(body, createPage(),
        {QStringLiteral("cluster"), tr("No Slurm submissions in this workspace"),
            tr("A job file's independent units (a calibration's seeds, a sensitivity scan's layers, an admission "
               "check's candidates, a study's steps) can run on a Slurm cluster as sbatch jobs, their results merged "
               "into this workspace by the step that follows each stage (or now, with Merge Finished Units). Select a "
               "job above and click <b>Submit to Slurm...</b>, or run <code>mismatch submit JOB.yaml --executor "
               "slurm</code> on the cluster's login node."),
            tr("Submit a Job File to Slurm...")});
    layout->addWidget(body, 1);

    timer_ = new QTimer(this);
    timer_->setInterval(kRefreshMs);
    connect(timer_, &QTimer::timeout, this, [this] {
        if (isVisible()) {
            refresh(); // squeue only while a person can see what it says
        }
    });
    timer_->start();
    connect(refresh_, &QPushButton::clicked, this, &ClusterPanel::refresh);
    connect(emptyState_, &EmptyState::startRequested, this, &ClusterPanel::submitRequested);
    updateButtons();
}

ClusterPanel::~ClusterPanel()
{
    if (thread_) {
        // The read (squeue, a few files) ends soon; its outcome is dropped.
        disconnect(thread_, nullptr, this, nullptr);
        thread_->wait();
        delete thread_;
    }
}

QWidget* ClusterPanel::createPage()
{
    auto* page = new QWidget(this);
    auto* layout = new QVBoxLayout(page);
    layout->setContentsMargins(0, 0, 0, 0);
    auto* buttons = new QHBoxLayout;
    merge_ = new QPushButton(tr("Merge Finished Units"), page);
    merge_->setObjectName("clusterMergeButton");
    merge_->setToolTip(tr("Merge the shards of the finished units into this workspace now (their runs and results "
                          "appear in the tabs); the final step still waits for every unit"));
    resume_ = new QPushButton(tr("Resume"), page);
    resume_->setObjectName("clusterResumeButton");
    resume_->setToolTip(tr("Submit again the units that failed or were never submitted (a unit killed mid-run "
                           "continues from its last checkpoint), with a new advance step"));
    cancel_ = new QPushButton(tr("Cancel Submission..."), page);
    cancel_->setObjectName("clusterCancelButton");
    cancel_->setToolTip(tr("Cancel the submission's Slurm jobs that are still queued or running (asks first)"));
    buttons->addWidget(merge_);
    buttons->addWidget(resume_);
    buttons->addWidget(cancel_);
    buttons->addStretch(1);
    layout->addLayout(buttons);
    createTables(page);
    connect(merge_, &QPushButton::clicked, this, &ClusterPanel::mergeSelected);
    connect(resume_, &QPushButton::clicked, this, &ClusterPanel::resumeSelected);
    connect(cancel_, &QPushButton::clicked, this, &ClusterPanel::cancelSelected);
    return page;
}

void ClusterPanel::createTables(QWidget* page)
{
    submissionModel_ = new QStandardItemModel(0, SubmissionColumnCount, this);
    submissionModel_->setHorizontalHeaderLabels({tr("Submission"), tr("Job"), tr("Submitted"), tr("Pending"),
        tr("Running"), tr("Done"), tr("Failed"), tr("Merged"), tr("Advance step"), tr("Finished"), tr("Result")});
    submissionModel_->horizontalHeaderItem(DoneCount)->setToolTip(tr("Units finished on the cluster, not merged yet"));
    submissionModel_->horizontalHeaderItem(AdvanceStep)
        ->setToolTip(tr("The step that merges the finished units into the workspace and runs the final step"));
    submissionTable_ = makeTable(page, QStringLiteral("clusterSubmissionTable"), submissionModel_);
    const std::vector<std::pair<int, int>> widths
        = {{SubmissionName, 150}, {SubmissionKind, 90}, {SubmittedAt, 150}, {PendingCount, 58}, {RunningCount, 58},
            {DoneCount, 48}, {FailedCount, 52}, {MergedCount, 58}, {AdvanceStep, 120}, {Finished, 60}};
    for (const auto& [column, width] : widths) {
        submissionTable_->setColumnWidth(column, width);
    }

    unitModel_ = new QStandardItemModel(0, UnitColumnCount, this);
    unitModel_->setHorizontalHeaderLabels({tr("Unit"), tr("What it computes"), tr("Stage"), tr("State"),
        tr("Slurm job"), tr("Slurm state"), tr("Detail")});
    auto* units = new QWidget(page);
    auto* unitsLayout = new QVBoxLayout(units);
    unitsLayout->setContentsMargins(0, 0, 0, 0);
    unitsTitle_ = new QLabel(units);
    unitsTitle_->setObjectName("clusterUnitsTitle");
    unitsTitle_->setTextFormat(Qt::PlainText);
    unitsTitle_->setWordWrap(true);
    unitsLayout->addWidget(unitsTitle_);
    unitTable_ = makeTable(units, QStringLiteral("clusterUnitTable"), unitModel_);
    const std::vector<std::pair<int, int>> unitWidths
        = {{UnitId, 70}, {UnitLabel, 250}, {UnitStage, 50}, {UnitState, 80}, {SlurmJob, 90}, {SlurmState, 110}};
    for (const auto& [column, width] : unitWidths) {
        unitTable_->setColumnWidth(column, width);
    }
    unitsLayout->addWidget(unitTable_, 1);

    auto* splitter = new QSplitter(Qt::Vertical, page);
    splitter->setObjectName("clusterSplitter");
    splitter->setChildrenCollapsible(false);
    splitter->addWidget(submissionTable_);
    splitter->addWidget(units);
    // A workspace has a few submissions and each has many units (a calibration: configurations x seeds): the
    // units get most of the height.
    splitter->setStretchFactor(0, 1);
    splitter->setStretchFactor(1, 3);
    splitter->setSizes({100, 300});
    page->layout()->addWidget(splitter);

    connect(submissionTable_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        if (filling_) {
            return;
        }
        const QModelIndexList rows = submissionTable_->selectionModel()->selectedRows();
        selected_ = rows.isEmpty()
            ? QString()
            : submissionModel_->item(rows.front().row(), SubmissionName)->data(kDirectoryRole).toString();
        fillUnits();
        updateButtons();
    });
}

void ClusterPanel::setWorkspace(const QString& directory)
{
    if (directory != workspace_) {
        workspace_ = directory;
        rows_.clear();
        selected_.clear();
        wanted_.clear();
        message_->clear();
        fillSubmissions();
    }
    refresh();
}

void ClusterPanel::refresh()
{
    start(Task {});
}

void ClusterPanel::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (!event->spontaneous()) {
        refresh(); // the tab is shown: what it says is read now, not up to ten seconds later
    }
}

void ClusterPanel::start(Task task)
{
    if (workspace_.isEmpty() && !task.run) {
        return;
    }
    if (thread_) {
        if (!queued_ || (queued_->action.isEmpty() && !task.action.isEmpty())) {
            queued_ = std::move(task); // an action also reads; a read adds nothing to a queued action
        }
        updateButtons();
        return;
    }
    auto outcome = std::make_shared<Outcome>();
    outcome->workspace = workspace_;
    // Runs on the worker thread: only the outcome and copies, never this panel.
    thread_ = QThread::create(
        [outcome, run = task.run, directory = task.directory.toStdString(), workspace = workspace_.toStdString()] {
            if (run) {
                try {
                    outcome->lines = run(directory);
                } catch (const std::exception& error) {
                    outcome->error = QString::fromUtf8(error.what());
                }
            }
            if (workspace.empty()) {
                return;
            }
            std::vector<std::string> directories;
            try {
                directories = cluster::submissions(workspace);
            } catch (const std::exception& error) {
                outcome->readError = QString::fromUtf8(error.what());
                return;
            }
            for (const std::string& submission : directories) {
                Row row;
                try {
                    row.status = cluster::status(submission);
                } catch (const std::exception& error) {
                    row.status.directory = submission;
                    row.problem = QString::fromUtf8(error.what());
                }
                if (row.status.directory.empty()) {
                    row.status.directory = submission;
                }
                if (row.status.name.empty()) {
                    row.status.name = QFileInfo(QString::fromStdString(submission)).fileName().toStdString();
                }
                outcome->rows.push_back(std::move(row));
            }
        });
    thread_->setObjectName(QStringLiteral("clusterStatus"));
    connect(thread_, &QThread::finished, this, [this, task, outcome] { finish(task, outcome); });
    if (!task.action.isEmpty()) {
        message_->setText(tr("%1 of %2 running...").arg(task.action, task.name));
    }
    runningAction_ = !task.action.isEmpty();
    thread_->start();
    updateButtons();
}

void ClusterPanel::finish(const Task& task, const std::shared_ptr<Outcome>& outcome)
{
    thread_->wait();
    thread_->deleteLater();
    thread_ = nullptr;
    runningAction_ = false;
    const bool current = outcome->workspace == workspace_;
    if (current) {
        rows_ = std::move(outcome->rows);
        fillSubmissions();
    }
    if (!task.action.isEmpty()) {
        if (task.changesStore) {
            emit storeChanged(); // also after an error: the shards merged before it are in the workspace
        }
        if (!outcome->error.isEmpty()) {
            message_->setText(tr("%1 of %2 failed.").arg(task.action, task.name));
            message_->setToolTip(outcome->error);
            showActionError(task, outcome->error);
        } else {
            const QString text
                = tr("%1 of %2: %3").arg(task.action, task.name, outcome->lines.join(QStringLiteral("; ")));
            message_->setText(text);
            message_->setToolTip(outcome->lines.join(QLatin1Char('\n')));
            emit statusMessage(text);
        }
    } else if (!outcome->readError.isEmpty()) {
        message_->setText(tr("Cannot list the submissions: %1").arg(outcome->readError));
        message_->setToolTip(outcome->readError);
    } else if (current) {
        QString text = tr("Read at %1; read again every %2 s while this tab is shown.")
                           .arg(QTime::currentTime().toString(QStringLiteral("HH:mm:ss")))
                           .arg(kRefreshMs / 1000);
        const bool unreachable = std::any_of(rows_.begin(), rows_.end(),
            [](const Row& row) { return row.status.slurmUnreachable; });
        if (unreachable) {
            text += tr(" Slurm cannot be asked from this machine (squeue, sacct, scontrol): a unit without a result "
                       "shows as pending; resume from a login node.");
        }
        message_->setText(text);
        message_->setToolTip({});
    }
    emit refreshed();
    if (queued_) {
        Task next = std::move(*queued_);
        queued_.reset();
        start(std::move(next));
    } else if (!current) {
        refresh(); // the workspace changed while it read the old one
    }
    updateButtons();
}

const ClusterPanel::Row* ClusterPanel::selectedRow() const
{
    for (const Row& row : rows_) {
        if (QString::fromStdString(row.status.directory) == selected_) {
            return &row;
        }
    }
    return nullptr;
}

bool ClusterPanel::selectSubmission(const QString& directory)
{
    for (int row = 0; row < submissionModel_->rowCount(); ++row) {
        if (submissionModel_->item(row, SubmissionName)->data(kDirectoryRole).toString() == directory) {
            submissionTable_->selectRow(row);
            return true;
        }
    }
    return false;
}

void ClusterPanel::showSubmission(const QString& directory)
{
    wanted_ = QDir::cleanPath(directory);
    refresh();
}

bool ClusterPanel::showingEmpty() const
{
    return emptyState_->showingEmpty();
}

QString ClusterPanel::message() const
{
    return message_->text();
}

void ClusterPanel::fillSubmissions()
{
    filling_ = true;
    const QColor failed(0xc6, 0x28, 0x28);
    submissionModel_->setRowCount(static_cast<int>(rows_.size()));
    for (int r = 0; r < static_cast<int>(rows_.size()); ++r) {
        const Row& row = rows_[r];
        const cluster::SubmissionStatus& s = row.status;
        const QString directory = QString::fromStdString(s.directory);
        // The directory's name tells submissions apart (`mismatch submit scan.yaml` twice: scan-1 and scan-2, both
        // named "scan"); the submission's own name is added when it differs.
        const QString name = QString::fromStdString(s.name);
        const QString base = QFileInfo(directory).fileName();
        setCell(submissionModel_, r, SubmissionName, base == name ? name : tr("%1 (%2)").arg(base, name), directory)
            ->setData(directory, kDirectoryRole);
        setCell(submissionModel_, r, SubmissionKind, QString::fromStdString(s.kind));
        setCell(submissionModel_, r, SubmittedAt, submittedText(s.submittedAt), QString::fromStdString(s.submittedAt));
        const std::vector<std::pair<int, cluster::UnitState>> counts = {{PendingCount, cluster::UnitState::Pending},
            {RunningCount, cluster::UnitState::Running}, {DoneCount, cluster::UnitState::Done},
            {FailedCount, cluster::UnitState::Failed}, {MergedCount, cluster::UnitState::Merged}};
        for (const auto& [column, state] : counts) {
            QStandardItem* item = setCount(submissionModel_, r, column, row.problem.isEmpty() ? s.count(state) : 0);
            if (row.problem.isEmpty() && s.count(state) > 0 && state != cluster::UnitState::Pending) {
                item->setForeground(unitStateColor(state));
            }
        }
        QString advance = s.advanceJob.empty() ? tr("-") : tr("job %1").arg(QString::fromStdString(s.advanceJob));
        if (!s.advanceState.empty()) {
            advance += QStringLiteral(": ") + QString::fromStdString(s.advanceState);
        }
        setCell(submissionModel_, r, AdvanceStep, advance, QString::fromStdString(s.error));
        setCell(submissionModel_, r, Finished, s.finished ? tr("yes") : tr("no"));
        QString result = s.finished ? describeResult(s.result) : QString();
        if (s.finished && result.isEmpty()) {
            result = tr("stored in the workspace");
        }
        const QString problem = !row.problem.isEmpty()
            ? tr("cannot read it: %1").arg(row.problem)
            : (s.error.empty() ? QString() : tr("advance step failed: %1").arg(QString::fromStdString(s.error)));
        QStandardItem* resultItem = setCell(submissionModel_, r, Result, problem.isEmpty() ? result : problem);
        if (!problem.isEmpty()) {
            resultItem->setForeground(failed);
            submissionModel_->item(r, AdvanceStep)->setForeground(failed);
        }
    }
    emptyState_->setEmpty(rows_.empty());
    // The selection follows the submission (rows move when a newer one appears): the one showSubmission asked for
    // once it is listed, else the one selected, else the newest.
    int selectedRow = -1;
    for (int r = 0; r < static_cast<int>(rows_.size()); ++r) {
        const QString directory = QString::fromStdString(rows_[r].status.directory);
        if (!wanted_.isEmpty() && QDir::cleanPath(directory) == wanted_) {
            selectedRow = r;
            wanted_.clear();
            break;
        }
        if (directory == selected_) {
            selectedRow = r;
        }
    }
    if (selectedRow < 0 && !rows_.empty()) {
        selectedRow = 0;
    }
    const QModelIndexList current = submissionTable_->selectionModel()->selectedRows();
    if (selectedRow < 0) {
        submissionTable_->clearSelection();
        selected_.clear();
    } else {
        if (current.size() != 1 || current.front().row() != selectedRow) {
            submissionTable_->selectRow(selectedRow);
        }
        selected_ = QString::fromStdString(rows_[selectedRow].status.directory);
    }
    filling_ = false;
    fillUnits();
    updateButtons();
}

void ClusterPanel::fillUnits()
{
    const Row* row = selectedRow();
    static const std::vector<cluster::UnitStatus> none;
    const std::vector<cluster::UnitStatus>& units = row ? row->status.units : none;
    if (!row) {
        unitsTitle_->setText(tr("Units: select a submission above."));
    } else if (!row->problem.isEmpty()) {
        unitsTitle_->setText(
            tr("Units of %1: cannot read the submission: %2")
                .arg(QFileInfo(QString::fromStdString(row->status.directory)).fileName(), row->problem));
    } else {
        const QString directory = QString::fromStdString(row->status.directory);
        unitsTitle_->setText(tr("Units of %1 (%2)").arg(QFileInfo(directory).fileName(), directory));
    }
    unitModel_->setRowCount(static_cast<int>(units.size()));
    for (int r = 0; r < static_cast<int>(units.size()); ++r) {
        const cluster::UnitStatus& unit = units[r];
        setCell(unitModel_, r, UnitId, QString::fromStdString(unit.id));
        setCell(unitModel_, r, UnitLabel, QString::fromStdString(unit.label));
        setCount(unitModel_, r, UnitStage, unit.stage);
        setCell(unitModel_, r, UnitState, QString::fromStdString(cluster::toString(unit.state)))
            ->setForeground(unitStateColor(unit.state));
        setCell(unitModel_, r, SlurmJob, unit.slurmJob.empty() ? tr("-") : QString::fromStdString(unit.slurmJob),
            unit.slurmJob.empty() ? tr("not submitted") : QString());
        setCell(unitModel_, r, SlurmState, QString::fromStdString(unit.slurmState));
        setCell(unitModel_, r, UnitDetail, QString::fromStdString(unit.detail));
    }
}

void ClusterPanel::updateButtons()
{
    const Row* row = selectedRow();
    const bool acting = runningAction_ || (queued_ && !queued_->action.isEmpty());
    const bool usable = row && row->problem.isEmpty() && !acting;
    merge_->setEnabled(usable && row->status.count(cluster::UnitState::Done) > 0);
    resume_->setEnabled(usable && !row->status.finished);
    cancel_->setEnabled(usable && !row->status.finished);
    refresh_->setEnabled(!workspace_.isEmpty());
}

void ClusterPanel::act(const QString& action, const QString& directory, Action run, bool changesStore)
{
    // Named by its directory's name, which tells it apart from the others (see fillSubmissions).
    start(Task {action, directory, QFileInfo(directory).fileName(), std::move(run), changesStore});
}

void ClusterPanel::mergeSelected()
{
    if (!selectedRow()) {
        return;
    }
    act(
        tr("Merge"), selected_,
        [](const std::string& directory) {
            QStringList lines;
            for (const std::string& line : cluster::mergeFinished(directory)) {
                lines << QString::fromStdString(line);
            }
            if (lines.isEmpty()) {
                lines << tr("no finished unit was waiting to be merged");
            }
            return lines;
        },
        true);
}

void ClusterPanel::resumeSelected()
{
    if (!selectedRow()) {
        return;
    }
    act(tr("Resume"), selected_,
        [](const std::string& directory) { return describeSubmission(cluster::resume(directory)); });
}

void ClusterPanel::cancelSelected()
{
    const Row* row = selectedRow();
    if (!row || cancelQuestion_) {
        return;
    }
    const QString directory = selected_;
    const QString name = QFileInfo(directory).fileName();
    auto* box = new QMessageBox(QMessageBox::Question, tr("Cancel Submission"),
        tr("Cancel the Slurm jobs of submission \"%1\" that are still queued or running?\n\nFinished units keep their "
           "shards: Merge Finished Units still merges them, and Resume submits the others again later.")
            .arg(name),
        QMessageBox::NoButton, this);
    box->setObjectName("clusterCancelQuestion");
    box->setAttribute(Qt::WA_DeleteOnClose);
    QPushButton* confirm = box->addButton(tr("Cancel Slurm Jobs"), QMessageBox::DestructiveRole);
    confirm->setObjectName("confirmClusterCancelButton");
    QPushButton* keep = box->addButton(tr("Keep Them"), QMessageBox::RejectRole);
    keep->setObjectName("keepClusterJobsButton");
    box->setDefaultButton(keep);
    box->setEscapeButton(keep);
    connect(box, &QMessageBox::buttonClicked, this, [this, confirm, directory](QAbstractButton* clicked) {
        if (clicked != confirm) {
            return;
        }
        act(tr("Cancel"), directory, [](const std::string& submission) {
            const std::vector<std::string> ids = cluster::cancel(submission);
            return QStringList {ids.empty() ? tr("no job of it was queued or running")
                                            : tr("asked Slurm to cancel job(s) %1").arg(joined(ids))};
        });
    });
    cancelQuestion_ = box;
    box->open();
}

void ClusterPanel::showActionError(const Task& task, const QString& error)
{
    if (errorBox_) {
        errorBox_->close();
    }
    auto* box = new QMessageBox(QMessageBox::Warning, tr("%1 failed").arg(task.action),
        tr("%1 of submission \"%2\" failed:\n\n%3\n\nSubmission directory: %4")
            .arg(task.action, task.name, error, task.directory),
        QMessageBox::Ok, this);
    box->setObjectName("clusterErrorBox");
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setTextInteractionFlags(Qt::TextSelectableByMouse);
    errorBox_ = box;
    box->open();
}

} // namespace mismatch::ui

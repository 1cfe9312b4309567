// The main window: its construction, the workspace and its store, the status bar and job progress, the open
// recipe (save, open, the unsaved-recipe question), the job dialogs and opening dropped files. Its menus are in
// main_window_menus.cpp, its tabs in main_window_tabs.cpp.
#include "ui/main_window.h"
#include "ui/plots/plot_export.h"

#include "core/common/input_limits.h"
#include "core/analysis/demo.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/jobs/job_file.h"
#include "core/jobs/stored_specs.h"
#include "core/model/config.h"
#include "core/store/analysis_store.h"
#include "ui/views/admission_view.h"
#include "ui/views/analysis_data.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/dialogs/breakdown_dialog.h"
#include "ui/views/breakdown_view.h"
#include "ui/views/budget_view.h"
#include "ui/plots/compare_plot.h"
#include "ui/jobs/job_queue.h"
#include "ui/jobs/job_runner.h"
#include "ui/views/library_panels.h"
#include "ui/views/overview_view.h"
#include "ui/dialogs/pickers.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/views/recipe_editor.h"
#include "ui/plots/run_plot.h"
#include "ui/views/run_table_model.h"
#include "ui/dialogs/sensitivity_dialog.h"
#include "ui/views/sensitivity_view.h"
#include "ui/dialogs/export_dialog.h"
#include "ui/dialogs/spec_job_dialog.h"
#include "ui/dialogs/study_dialogs.h"
#include "ui/dialogs/training_dialog.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSplitter>
#include <QStandardItemModel>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QUndoStack>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>

namespace mismatch::ui {

namespace {
constexpr int kPollIntervalMs = 500;
constexpr int kMaxRecentWorkspaces = 8;

// A dropped or listed file's text, within the limits on input (a FIFO dropped on the window must not block the
// GUI); "" when it cannot be read: the reader it goes to reports the problem with the file named.
std::string readText(const QString& path)
{
    try {
        return readInputFile(path.toStdString(), limits::kConfigFile, "file");
    } catch (const InputError&) {
        return {};
    }
}

// What a dropped or opened file is: decided by its contents' top-level keys, not only its suffix (a run file
// and a recipe are both YAML).
enum class FileKind { ModelDirectory, Recipe, RunFile, PromptSet, Unknown };
FileKind classify(const QString& path)
{
    const QFileInfo info(path);
    if (info.isDir()) {
        return QFile::exists(QDir(path).filePath("config.json")) ? FileKind::ModelDirectory : FileKind::Unknown;
    }
    const QString suffix = info.suffix().toLower();
    if (suffix == QLatin1String("jsonl"))
        return FileKind::PromptSet;
    if (suffix == QLatin1String("yaml") || suffix == QLatin1String("yml") || suffix == QLatin1String("json")) {
        const QString text = QString::fromStdString(readText(path));
        static const QRegularExpression runKey(QStringLiteral("(^|\\n)\\s*\"?(student|objective)\"?\\s*:"));
        return text.contains(runKey) ? FileKind::RunFile : FileKind::Recipe;
    }
    return FileKind::Unknown;
}
// A status-bar label that elides its text to the room it has (the whole text in its tooltip), so that a long
// message never runs under the run count or the progress bar.
class ElidedLabel : public QLabel {
public:
    using QLabel::QLabel;
    QSize minimumSizeHint() const override { return QSize(40, QLabel::minimumSizeHint().height()); }
    QSize sizeHint() const override { return QSize(40, QLabel::sizeHint().height()); }

protected:
    void paintEvent(QPaintEvent*) override
    {
        QPainter painter(this);
        painter.setPen(palette().color(foregroundRole()));
        const QString shown = fontMetrics().elidedText(text(), Qt::ElideRight, contentsRect().width());
        painter.drawText(contentsRect(), Qt::AlignLeft | Qt::AlignVCenter, shown);
    }
};
} // namespace

MainWindow::MainWindow(const QString& workspaceDirectory, QWidget* parent)
    : QMainWindow(parent)
{
    setWindowTitle(tr("Mismatch Lab"));
    setWindowIcon(QIcon(":/mismatch/icons/mismatch-lab.svg"));
    setObjectName("mainWindow");
    setAcceptDrops(true);
    resize(1200, 780);

    runModel_ = new RunTableModel(this);
    begunRuns_ = std::make_shared<BegunRuns>();
    jobRunner_ = new JobRunner(this);
    jobQueue_ = new JobQueue(jobRunner_, this);

    // In this order: each step wires signals to the widgets of the steps before it.
    QSplitter* browser = createTabs();
    createStatusBar();
    connectJobProgress();
    connectTabs();
    connectRunFollowing();

    createMenus();
    QSettings settings;
    restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
    restoreState(settings.value("mainWindow/state").toByteArray());
    browser->restoreState(settings.value("mainWindow/browserSplitter").toByteArray());
    tabs_->setCurrentIndex(OverviewTab); // where a researcher starts, whatever tab was open last time
    openWorkspace(workspaceDirectory);
    runModel_->setLivePolling(kPollIntervalMs);
}

MainWindow::~MainWindow()
{
    // The recipe editor (a child, destroyed after this body) emits fileChanged/cleanChanged while its undo stack
    // is torn down; by then this is no longer a MainWindow, so no slot of it may run.
    disconnect(recipeEditor_, nullptr, this, nullptr);
    disconnect(recipeEditor_->undoStack(), nullptr, this, nullptr);
    // The views hold raw pointers to the store: detach them before it closes.
    runModel_->setLivePolling(0);
    runModel_->setStore(nullptr);
    runPlot_->setStore(nullptr);
    comparePlot_->setStore(nullptr);
}

void MainWindow::createStatusBar()
{
    workspaceLabel_ = new ElidedLabel(this); // a long path is elided, whole in the tooltip
    workspaceLabel_->setMaximumWidth(420);
    statusMessage_ = new ElidedLabel(this);
    statusMessage_->setObjectName("statusMessage");
    statusTimer_ = new QTimer(this);
    statusTimer_->setSingleShot(true);
    connect(statusTimer_, &QTimer::timeout, this, [this] {
        statusMessage_->clear();
        statusMessage_->setToolTip({});
    });
    storeProblem_ = new QLabel(this);
    storeProblem_->setObjectName("storeProblem");
    storeProblem_->setStyleSheet(QStringLiteral("color: #c62828"));
    storeProblem_->setVisible(false);
    runCountLabel_ = new QLabel(this);
    jobProgress_ = new QProgressBar(this);
    jobProgress_->setObjectName("jobProgress");
    jobProgress_->setMinimumWidth(340);
    jobProgress_->setRange(0, 1000);
    jobProgress_->setVisible(false);
    cancelButton_ = new QPushButton(tr("Cancel"), this);
    cancelButton_->setObjectName("statusCancelButton");
    cancelButton_->setVisible(false);
    connect(cancelButton_, &QPushButton::clicked, this, [this] { requestCancel(jobQueue_->runningJob()); });
    statusBar()->addWidget(workspaceLabel_);
    statusBar()->addWidget(statusMessage_, 1);
    statusBar()->addPermanentWidget(storeProblem_);
    statusBar()->addPermanentWidget(runCountLabel_);
    statusBar()->addPermanentWidget(jobProgress_);
    statusBar()->addPermanentWidget(cancelButton_);
}

void MainWindow::connectJobProgress()
{
    connect(jobRunner_, &JobRunner::progressChanged, this, [this](double fraction, const QString& stage, double eta) {
        // The bar shows the job and the numbers; the stage text (which can be long) goes to its tooltip and to
        // the job table.
        progressFraction_ = fraction;
        progressEta_ = eta;
        jobProgress_->setValue(static_cast<int>(fraction * 1000));
        updateProgressText();
        jobProgress_->setToolTip(tr("%1\n%2").arg(jobRunner_->jobName(), stage));
    });
    connect(jobQueue_, &JobQueue::jobStarted, this, [this](int, const QString&) {
        progressFraction_ = 0.0;
        progressEta_ = -1.0;
        jobProgress_->setValue(0);
        jobProgress_->setVisible(true);
        cancelButton_->setVisible(true);
        updateProgressText();
    });
    connect(jobQueue_, &JobQueue::jobFinished, this,
        [this](int id, const QString& name, bool ok, bool cancelled, const QString& error) {
            if (cancelQuestion_ && cancelQuestion_->property("jobId").toInt() == id) {
                cancelQuestion_->close(); // nothing left to cancel
            }
            jobProgress_->setVisible(jobRunner_->running());
            cancelButton_->setVisible(jobRunner_->running());
            refresh();
            if (ok) {
                showStatus(tr("%1 finished").arg(name));
            } else if (cancelled) {
                showStatus(tr("%1 cancelled; what it stored is kept").arg(name));
            } else {
                showError(tr("%1 failed").arg(name), error);
            }
        });
}

bool MainWindow::openWorkspace(const QString& directory)
{
    try {
        auto store = std::make_unique<store::RunStore>(
            store::RunStore::open(store::databasePath(directory.toStdString()), store::OpenMode::CreateOrOpen));
        runModel_->setStore(nullptr);
        runPlot_->setStore(nullptr);
        comparePlot_->setStore(nullptr);
        store_ = std::move(store);
        workspaceDirectory_ = directory;
        const std::string database = store_->path();
        setProtectedFiles({{database, "workspace database"}, {database + "-wal", "workspace database's log"},
            {database + "-shm", "workspace database's shared memory"}});
        runFollowing_ = RunFollowing::Newest; // before the run table reads the new store
        runModel_->setStore(store_.get());
        runPlot_->setStore(store_.get());
        comparePlot_->setStore(store_.get());
        modelPanel_->setStore(store_.get());
        promptSetPanel_->setStore(store_.get());
        sensitivityView_->setStore(store_.get());
        budgetView_->setStore(store_.get());
        admissionView_->setStore(store_.get());
        prefixShiftView_->setStore(store_.get());
        breakdownView_->setStore(store_.get());
        overview_->setStore(store_.get());
        jobPanel_->setWorkspace(directory); // its Slurm submissions, under WORKSPACE/cluster
        analysisFingerprint_ = QString::fromStdString(AnalysisData(*store_).fingerprint());
        storeProblem_->clear();
        storeProblem_->setVisible(false);
        updateRecipeModels();
        workspaceLabel_->setText(tr("Workspace: %1").arg(QString::fromStdString(store_->path())));
        workspaceLabel_->setToolTip(workspaceLabel_->text());
        workspaceLabel_->setMinimumWidth(
            std::min(420, workspaceLabel_->fontMetrics().horizontalAdvance(workspaceLabel_->text()) + 8));
        rememberWorkspace(directory);
        updateView();
        followNewRuns(); // the newest run is selected, so that the plot is not empty
        return true;
    } catch (const Error& error) {
        showError(tr("Cannot open workspace"), QString::fromUtf8(error.what()));
        return false;
    }
}

void MainWindow::updateRecipeModels()
{
    std::vector<RecipeModel> models;
    auto add = [&models](const QString& name, const QString& directory, const std::string& configJson) {
        try {
            models.push_back(
                {name, directory, model::parseConfig(configJson, directory.toStdString() + "/config.json")});
        } catch (const Error&) {
            // A registered model whose config no longer parses is listed in the models tab with the problem.
        }
    };
    QStringList seen;
    if (store_) {
        for (const store::ModelRecord& record : store_->listModels()) {
            add(QString::fromStdString(record.name), QString::fromStdString(record.path), record.configJson);
            seen << QString::fromStdString(record.path);
        }
    }
    // The built-in demo models, so that a recipe can be sized before any model is registered.
    const QDir builtIn(QString::fromStdString(resourceDirectory()) + "/models");
    for (const QString& name : builtIn.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString directory = QDir::cleanPath(builtIn.absoluteFilePath(name));
        if (!seen.contains(directory) && QFile::exists(directory + "/config.json")) {
            add(name, directory, readText(directory + "/config.json"));
        }
    }
    recipeEditor_->setModels(models);
}

void MainWindow::updateRecipeTitle()
{
    const QString path = recipeEditor_->filePath();
    QString title = path.isEmpty() ? tr("R&ecipe") : tr("R&ecipe: %1").arg(QFileInfo(path).fileName());
    if (!recipeEditor_->undoStack()->isClean()) {
        title += QStringLiteral(" *");
    }
    tabs_->setTabText(RecipeTab, title);
}

void MainWindow::refresh()
{
    try {
        runModel_->refresh();
        modelPanel_->refresh();
        promptSetPanel_->refresh();
        refreshAnalyses(true);
    } catch (const std::exception& error) {
        onStoreError(QString::fromUtf8(error.what()));
    }
}

void MainWindow::onStoreError(const QString& message)
{
    // Shown, never thrown on: the window stays up and polling goes on, so it recovers when the store does.
    lastError_ = message;
    storeProblem_->setText(tr("\u26a0 Workspace problem"));
    storeProblem_->setToolTip(message);
    storeProblem_->setVisible(true);
    showStatus(tr("Cannot read the workspace: %1").arg(message), 15000);
}

void MainWindow::showStatus(const QString& message, int milliseconds)
{
    statusMessage_->setText(message);
    statusMessage_->setToolTip(message);
    statusTimer_->start(milliseconds);
}

QString MainWindow::statusText() const
{
    return statusMessage_->text();
}

QString MainWindow::storeProblem() const
{
    return storeProblem_->isVisible() ? storeProblem_->toolTip() : QString();
}

void MainWindow::updateProgressText()
{
    // "NAME: 42% (ETA 17 s)": the name is elided so that the numbers always fit the bar (full name in the tooltip).
    const QString numbers = progressEta_ >= 0 ? tr(": %p% (ETA %1 s)").arg(progressEta_, 0, 'f', 0) : tr(": %p%");
    const QString shownNumbers = QString(numbers).replace(
        QLatin1String("%p"), QString::number(static_cast<int>(std::lround(progressFraction_ * 100.0))));
    const QFontMetrics metrics(jobProgress_->font());
    const int room = jobProgress_->width() - 24 - metrics.horizontalAdvance(shownNumbers);
    const QString name = metrics.elidedText(jobRunner_->jobName(), Qt::ElideMiddle, std::max(room, 40));
    jobProgress_->setFormat(name + numbers);
}

bool MainWindow::requestCancel(int jobId)
{
    const QString state = jobQueue_->state(jobId);
    if (state == tr("queued")) {
        return jobQueue_->cancel(jobId); // nothing ran yet: nothing to lose
    }
    if (state != tr("running")) {
        return false;
    }
    if (cancelQuestion_) {
        cancelQuestion_->raise();
        return true;
    }
    const int row = jobQueue_->rowOf(jobId);
    const QString name = jobQueue_->model()->item(row, JobQueue::Name)->text();
    cancelQuestion_ = new QMessageBox(QMessageBox::Question, tr("Cancel the running job?"),
        tr("Cancel \"%1\"? It stops at its next step; what it stored so far is kept. A training run can be "
           "resumed (Jobs > Resume Selected Run, or mismatch train --resume): it continues from its newest "
           "checkpoint and records the steps stored after that checkpoint again.")
            .arg(name),
        QMessageBox::NoButton, this);
    cancelQuestion_->setObjectName("cancelQuestion");
    cancelQuestion_->setProperty("jobId", jobId);
    QPushButton* yes = cancelQuestion_->addButton(tr("Cancel the Job"), QMessageBox::AcceptRole);
    yes->setObjectName("confirmCancelButton");
    QPushButton* no = cancelQuestion_->addButton(tr("Keep Running"), QMessageBox::RejectRole);
    no->setObjectName("keepRunningButton");
    cancelQuestion_->setDefaultButton(no); // Esc or Enter keeps the job
    cancelQuestion_->setEscapeButton(no);
    cancelQuestion_->setAttribute(Qt::WA_DeleteOnClose);
    connect(cancelQuestion_, &QMessageBox::buttonClicked, this, [this, yes, jobId](QAbstractButton* button) {
        if (button == yes) {
            jobQueue_->cancel(jobId);
        }
    });
    connect(cancelQuestion_, &QObject::destroyed, this, [this] { cancelQuestion_ = nullptr; });
    cancelQuestion_->open();
    return true;
}

struct MainWindow::BegunRuns {
    std::mutex mutex;
    std::vector<std::pair<std::string, std::int64_t>> runs; // (database path, run id), in the order begun
};

int MainWindow::enqueueOwnJob(
    const QString& name, const QString& cliCommand, std::function<void(Progress&)> job, JobQueue::Lane lane)
{
    // The job runs on its own thread with its own store connection: the listener there reports the runs it begins,
    // and only those (a headless process's runs begin elsewhere).
    const int id = jobQueue_->enqueue(
        name, cliCommand,
        [begun = begunRuns_, job = std::move(job)](Progress& progress) {
            const store::RunBeginListener listener([begun](const std::string& database, std::int64_t runId) {
                const std::lock_guard<std::mutex> lock(begun->mutex);
                begun->runs.emplace_back(database, runId);
            });
            job(progress);
        },
        lane);
    runFollowing_ = RunFollowing::OwnJobs; // queued by the user just now: a newer choice than a run clicked before
    return id;
}

void MainWindow::connectRunFollowing()
{
    connect(runTable_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
        if (!selectingRuns_) {
            runFollowing_ = RunFollowing::UserChoice;
        }
    });
    connect(runModel_, &RunTableModel::removingRows, this, [this](bool removing) { selectingRuns_ = removing; });
}

void MainWindow::followNewRuns()
{
    if (!store_) {
        return;
    }
    const std::int64_t ownRun = takeShownOwnRun(); // taken in every state: a run reported once is acted on once
    std::int64_t shown = 0;
    if (runFollowing_ == RunFollowing::OwnJobs) {
        shown = ownRun;
    } else if (runFollowing_ == RunFollowing::Newest && runModel_->rowCount() > 0
        && !runTable_->selectionModel()->hasSelection()) {
        shown = runModel_->runAt(runModel_->rowCount() - 1)->id; // rows are ordered by id
    }
    if (shown != 0) {
        selectRunRow(runModel_->rowOfRun(shown));
    }
}

std::int64_t MainWindow::takeShownOwnRun()
{
    const std::lock_guard<std::mutex> lock(begunRuns_->mutex);
    std::int64_t newest = 0;
    auto& runs = begunRuns_->runs;
    const auto acted = std::remove_if(runs.begin(), runs.end(), [&](const std::pair<std::string, std::int64_t>& run) {
        if (run.first != store_->path()) {
            return true; // a job of a workspace open before this one
        }
        if (runModel_->rowOfRun(run.second) < 0) {
            return false; // reported before the table's refresh shows it: the next refresh does
        }
        newest = std::max(newest, run.second);
        return true;
    });
    runs.erase(acted, runs.end());
    return newest;
}

void MainWindow::selectRunRow(int row)
{
    if (row < 0) {
        return;
    }
    const bool wasSelecting = selectingRuns_;
    selectingRuns_ = true;
    runTable_->selectRow(row);
    runTable_->scrollTo(runModel_->index(row, 0));
    selectingRuns_ = wasSelecting;
}

void MainWindow::runDemo()
{
    const std::string databasePath = store_ ? store_->path() : std::string();
    if (databasePath.empty()) {
        showError(tr("No workspace"), tr("Open a workspace first."));
        return;
    }
    // The catalogue's demo job with its defaults: what `mismatch demo` runs (and "Export Job File..." writes).
    const jobs::JobSpec spec("demo");
    const int id = enqueueOwnJob(
        tr("Demo"), specCommandLine(workspaceDirectory_, spec), specWorkerJob(workspaceDirectory_, spec));
    jobQueue_->setJobFile(id, QString::fromStdString(jobs::jobFileText(spec)));
}

namespace {

// The one run selected in the Runs tab and the catalogue job it stored (for a run stored before runs kept their job,
// the one its record gives: jobs::migratedSpec; a resume stores it); `problem` says why there is none.
std::optional<std::pair<store::RunInfo, jobs::JobSpec>> selectedRunJob(
    const QTableView* table, const RunTableModel* model, const store::RunStore* store, QString* problem)
{
    const QModelIndexList rows = table->selectionModel()->selectedRows();
    const store::RunInfo* run = rows.size() == 1 ? model->runAt(rows.front().row()) : nullptr;
    if (!run) {
        *problem = QObject::tr("Select one run in the Runs tab.");
        return std::nullopt;
    }
    try {
        if (const std::optional<jobs::JobSpec> spec = jobs::JobSpec::ofRun(*run)) {
            return std::make_pair(*run, *spec);
        }
        if (store) {
            return std::make_pair(*run, jobs::migratedSpec(*store, *run));
        }
    } catch (const std::exception& error) {
        *problem = QString::fromStdString(error.what());
        return std::nullopt;
    }
    *problem = QObject::tr("Run %1 (%2) has no stored job.").arg(run->id).arg(QString::fromStdString(run->kind));
    return std::nullopt;
}

} // namespace

int MainWindow::resumeSelectedRun()
{
    QString problem;
    const auto selected = selectedRunJob(runTable_, runModel_, store_.get(), &problem);
    if (!selected) {
        showError(tr("Cannot resume the run"), problem);
        return 0;
    }
    const store::RunInfo& run = selected->first;
    const jobs::JobSpec& spec = selected->second;
    if (!spec.definition().resume) {
        showError(tr("Cannot resume the run"),
            tr("A %1 job cannot be resumed; run it again: %2")
                .arg(QString::fromStdString(spec.kind()), specCommandLine(workspaceDirectory_, spec)));
        return 0;
    }
    if (run.status == store::RunStatus::Finished) {
        showError(tr("Cannot resume the run"), tr("Run %1 is finished.").arg(run.id));
        return 0;
    }
    const std::int64_t runId = run.id;
    const QString command = QString::fromStdString(jobs::commandLine(
        {"--workspace", workspaceDirectory_.toStdString(), "run", "--resume", std::to_string(runId)}));
    if (spec.kind() == "train") {
        showStatus(tr("Resuming run %1 from its newest checkpoint: the steps it stored after that checkpoint are "
                      "recorded again")
                       .arg(runId));
    }
    lastQueuedJob_ = enqueueOwnJob(tr("Resume %1 run %2").arg(QString::fromStdString(spec.kind())).arg(runId), command,
        [workspace = workspaceDirectory_.toStdString(), runId](Progress& progress) {
            store::RunStore store
                = store::RunStore::open(store::databasePath(workspace), store::OpenMode::OpenExisting);
            jobs::resumeRun(store, runId, progress);
        });
    return lastQueuedJob_;
}

void MainWindow::exportSelectedRunJobFile()
{
    QString problem;
    const auto selected = selectedRunJob(runTable_, runModel_, store_.get(), &problem);
    if (!selected) {
        showError(tr("Cannot export the job file"), problem);
        return;
    }
    const QString path = QFileDialog::getSaveFileName(this, tr("Export Job File"),
        QDir(workspaceDirectory_).filePath(QStringLiteral("run-%1.job.yaml").arg(selected->first.id)),
        tr("Job files (*.yaml *.yml)"));
    if (path.isEmpty()) {
        return;
    }
    try {
        jobs::writeJobFile(path.toStdString(), selected->second);
        showStatus(tr("Wrote %1").arg(path), 6000);
    } catch (const std::exception& error) {
        showError(tr("Cannot export the job file"), QString::fromStdString(error.what()));
    }
}

int MainWindow::startTraining(const QString& runFile)
{
    if (!store_) {
        showError(tr("No workspace"), tr("Open a workspace first."));
        return 0;
    }
    TrainingDialog check(workspaceDirectory_, nullptr, store_.get());
    check.setRunFile(runFile);
    if (!check.runFileValid()) {
        showError(tr("Cannot start training"), check.errorText());
        return 0;
    }
    // A run of this name may also be waiting in the queue (not in the store yet): names stay unique.
    const QString jobName = tr("Train %1").arg(check.runName());
    for (int row = 0; row < jobQueue_->model()->rowCount(); ++row) {
        const int id = jobQueue_->idAtRow(row);
        if (jobQueue_->model()->item(row, JobQueue::Name)->text() == jobName
            && (jobQueue_->state(id) == tr("queued") || jobQueue_->state(id) == tr("running"))) {
            showError(tr("Cannot start training"),
                tr("Run name: '%1' is already used by a queued or running job; choose another name")
                    .arg(check.runName()));
            return 0;
        }
    }
    if (check.writesRunFile() && !check.writeRunFile()) {
        showError(tr("Cannot start training"), check.errorText());
        return 0;
    }
    const QString file = check.effectiveRunFile();
    return enqueueOwnJob(
        jobName, trainingCliCommand(workspaceDirectory_, file), trainingJob(workspaceDirectory_, file));
}

void MainWindow::showTrainingDialog()
{
    auto* dialog = new TrainingDialog(workspaceDirectory_, this, store_.get());
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setRunFile(QSettings().value("training/lastRunFile", resources + "/runs/demo-opd-quick.yaml").toString());
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        // The dialog wrote its form as a run file when it was changed: train that file.
        QSettings().setValue("training/lastRunFile", dialog->effectiveRunFile());
        lastQueuedJob_ = startTraining(dialog->effectiveRunFile());
        if (lastQueuedJob_ != 0) {
            tabs_->setCurrentIndex(RunsTab);
        }
    });
    dialog->open();
}

void MainWindow::showSensitivityDialog()
{
    auto* dialog = new SensitivityDialog(workspaceDirectory_, this, store_.get());
    const QSettings settings;
    dialog->setModelDirectory(settings.value("sensitivity/model").toString());
    dialog->setPromptSet(settings.value("sensitivity/prompts").toString());
    openJobDialog(dialog, SensitivityTab, [dialog] {
        QSettings remembered;
        remembered.setValue("sensitivity/model", dialog->modelDirectory());
        remembered.setValue("sensitivity/prompts", dialog->promptSet());
    });
}

void MainWindow::openJobDialog(JobDialog* dialog, int tab, std::function<void()> remember)
{
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this, [this, dialog, tab, remember] {
        if (!dialog->valid()) {
            showError(tr("Cannot start the job"), dialog->errorText());
            return;
        }
        remember();
        try {
            lastQueuedJob_ = enqueueOwnJob(dialog->jobName(), dialog->cliCommand(), dialog->fieldNamedJob(),
                dialog->runsAlongsideQueue() ? JobQueue::Lane::Alongside : JobQueue::Lane::Queue);
            if (const auto spec = dialog->spec()) {
                jobQueue_->setJobFile(lastQueuedJob_, QString::fromStdString(jobs::jobFileText(*spec)));
            }
        } catch (const std::exception& error) {
            // An input that changed on disk between validation and start.
            showError(tr("Cannot start the job"), QString::fromStdString(error.what()));
            return;
        }
        tabs_->setCurrentIndex(tab);
    });
    dialog->open();
}

void MainWindow::showCalibrationDialog()
{
    auto* dialog = new CalibrationDialog(workspaceDirectory_, this, store_.get());
    const QSettings settings;
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setRunFile(settings.value("calibration/runFile", resources + "/runs/demo-opd.yaml").toString());
    dialog->setQuick(settings.value("calibration/quick", true).toBool());
    openJobDialog(dialog, BudgetTab, [dialog] {
        QSettings remembered;
        remembered.setValue("calibration/runFile", dialog->runFile());
        remembered.setValue("calibration/quick", dialog->cliCommand().contains(QLatin1String(" --quick")));
    });
}

void MainWindow::showAdmissionDialog()
{
    auto* dialog = new AdmissionDialog(workspaceDirectory_, store_.get(), this);
    const QSettings settings;
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setCheckpoints(settings.value("admission/checkpoints", resources + "/models/arith-student").toString());
    dialog->setCandidates(settings.value("admission/candidates", resources + "/candidates/demo.yaml").toString());
    dialog->setProbeSet(settings.value("admission/probe", resources + "/prompts/arith-probe.jsonl").toString());
    openJobDialog(dialog, AdmissionTab, [dialog] {
        QSettings remembered;
        remembered.setValue("admission/checkpoints", dialog->checkpoints());
        remembered.setValue("admission/candidates", dialog->candidates());
        remembered.setValue("admission/probe", dialog->probeSet());
    });
}

void MainWindow::showBreakdownDialog()
{
    auto* dialog = new BreakdownDialog(workspaceDirectory_, store_.get(), this);
    const QSettings settings;
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setModelDirectory(
        settings.value("breakdown/model", resources + "/models/arith-student-step100").toString());
    dialog->setCandidates(settings.value("breakdown/candidates", resources + "/candidates/demo.yaml").toString());
    dialog->setPromptSet(settings.value("breakdown/prompts", resources + "/prompts/arith-probe.jsonl").toString());
    openJobDialog(dialog, BreakdownTab, [dialog] {
        QSettings remembered;
        remembered.setValue("breakdown/model", dialog->modelDirectory());
        remembered.setValue("breakdown/candidates", dialog->candidates());
        remembered.setValue("breakdown/prompts", dialog->promptSet());
    });
}

void MainWindow::showPrefixShiftDialog()
{
    auto* dialog = new PrefixShiftDialog(workspaceDirectory_, this, store_.get());
    const QSettings settings;
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setModelDirectory(settings.value("prefixShift/model", resources + "/models/arith-student").toString());
    dialog->setRecipe(settings.value("prefixShift/recipe", resources + "/recipes/fp8-per-tensor.yaml").toString());
    dialog->setPromptSet(settings.value("prefixShift/prompts", resources + "/prompts/arith-probe.jsonl").toString());
    openJobDialog(dialog, PrefixShiftTab, [dialog] {
        QSettings remembered;
        remembered.setValue("prefixShift/model", dialog->modelDirectory());
        remembered.setValue("prefixShift/recipe", dialog->recipe());
        remembered.setValue("prefixShift/prompts", dialog->promptSet());
    });
}

void MainWindow::showRecipeBuildDialog(std::int64_t scanId)
{
    auto* dialog = new RecipeBuildDialog(workspaceDirectory_, store_.get(), this);
    if (scanId != 0) {
        dialog->setScan(scanId);
    }
    const QSettings settings;
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setModelDirectory(settings.value("recipeBuild/model", resources + "/models/arith-student").toString());
    dialog->setPromptSet(settings.value("recipeBuild/prompts", resources + "/prompts/arith-probe.jsonl").toString());
    openJobDialog(dialog, RecipeTab, [dialog] {
        QSettings remembered;
        remembered.setValue("recipeBuild/model", dialog->findChild<PathPicker*>("recipeBuildModel")->path());
        remembered.setValue("recipeBuild/prompts", dialog->findChild<PathPicker*>("recipeBuildPrompts")->path());
    });
    // The built recipe opens in the editor when its job finishes.
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        const int job = lastQueuedJob_;
        if (job == 0 || jobQueue_->cliCommand(job) != dialog->cliCommand()) {
            return; // the job did not start (the reason was shown)
        }
        const QString path = dialog->outputPath();
        auto connection = std::make_shared<QMetaObject::Connection>();
        *connection = connect(jobQueue_, &JobQueue::jobFinished, this,
            [this, job, path, connection](int id, const QString&, bool ok, bool, const QString&) {
                if (id != job) {
                    return;
                }
                disconnect(*connection);
                if (!ok) {
                    return;
                }
                if (!mayReplaceRecipe(tr("Opening the built recipe"))) {
                    statusBar()->showMessage(tr("The built recipe is in %1").arg(path));
                    return;
                }
                if (recipeEditor_->openFile(path)) {
                    tabs_->setCurrentIndex(RecipeTab);
                }
            });
    });
}

void MainWindow::showTimeToQualityDialog()
{
    auto* dialog = new TimeToQualityDialog(workspaceDirectory_, this, store_.get());
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setRunFile(QSettings().value("timeToQuality/runFile", resources + "/runs/demo-opd-quick.yaml").toString());
    openJobDialog(dialog, RunsTab, [dialog] {
        QSettings().setValue("timeToQuality/runFile", dialog->findChild<PathPicker*>("ttqRunFile")->path());
    });
}

void MainWindow::showCompareObjectivesDialog()
{
    auto* dialog = new CompareObjectivesDialog(workspaceDirectory_, this, store_.get());
    const QString resources = QString::fromStdString(resourceDirectory());
    dialog->setRunFile(
        QSettings().value("compareObjectives/runFile", resources + "/runs/demo-opd-quick.yaml").toString());
    openJobDialog(dialog, RunsTab, [dialog] {
        QSettings().setValue("compareObjectives/runFile", dialog->findChild<PathPicker*>("objectivesRunFile")->path());
    });
}

void MainWindow::showImportLogDialog()
{
    auto* dialog = new ImportLogDialog(workspaceDirectory_, this, store_.get());
    openJobDialog(dialog, RunsTab, [] {});
    budgetBesideImportedRun(dialog);
}

void MainWindow::showFollowLogDialog()
{
    auto* dialog = new ImportLogDialog(workspaceDirectory_, this, store_.get(), ImportLogDialog::Mode::Follow);
    openJobDialog(dialog, RunsTab, [] {});
    budgetBesideImportedRun(dialog);
}

void MainWindow::budgetBesideImportedRun(ImportLogDialog* dialog)
{
    // Connected after openJobDialog's handler, so it runs after the job was queued (or refused).
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        const int job = lastQueuedJob_;
        const std::optional<std::int64_t> step = dialog->budgetStep();
        if (job == 0 || jobQueue_->cliCommand(job) != dialog->cliCommand() || dialog->budgetCalibration() == 0 || !step
            || !store_) {
            return; // no job started, or no budget chosen
        }
        pendingBudgets_.push_back(
            {store_->path(), dialog->runName().toStdString(), dialog->budgetCalibration(), *step});
        attachPendingBudgets(); // a follow continuing a run: the table shows it already
    });
}

void MainWindow::attachPendingBudgets()
{
    if (!store_ || pendingBudgets_.empty()) {
        return;
    }
    const auto attached
        = std::remove_if(pendingBudgets_.begin(), pendingBudgets_.end(), [this](const PendingBudget& pending) {
              if (pending.database != store_->path()) {
                  return true; // a job of a workspace open before this one
              }
              for (int row = 0; row < runModel_->rowCount(); ++row) {
                  const store::RunInfo* run = runModel_->runAt(row);
                  if (run && run->name == pending.runName) {
                      runPlot_->setRunBudget(run->id, pending.calibrationId, pending.step);
                      return true;
                  }
              }
              return false;
          });
    pendingBudgets_.erase(attached, pendingBudgets_.end());
}

void MainWindow::showExportDialog(const QString& target)
{
    if (!recipeEditor_->plan()) {
        showError(tr("Recipe not exported"),
            tr("The recipe must resolve for a model first: choose the model in the Recipe tab (the ignored-module "
               "lists name every module of that model)."));
        return;
    }
    auto* dialog = new ExportDialog(recipeEditor_->recipe(), *recipeEditor_->plan(), recipeEditor_->filePath(),
        recipeEditor_->modelDirectory(), this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &ExportDialog::keepEmbeddingInBf16Requested, this, [this, dialog] {
        if (!recipeEditor_->keepInBf16({{-1, "embed_lm_head"}}) || !recipeEditor_->plan()) {
            showError(tr("Cannot add the rule"), recipeEditor_->lastError());
            return;
        }
        dialog->setRecipe(recipeEditor_->recipe(), *recipeEditor_->plan());
        showStatus(tr("The embedding and lm_head are kept in BF16 in the open recipe (undo with Ctrl+Z)"));
    });
    dialog->setTarget(target);
    dialog->open();
}

void MainWindow::showSpecJobDialog(const std::string& kind)
{
    auto* dialog = new SpecJobDialog(kind, workspaceDirectory_, this, store_.get());
    if (kind == "report") {
        dialog->setValue("study", QStringLiteral("workspace"));
        dialog->setValue("out", QDir(workspaceDirectory_).filePath(QStringLiteral("report")));
    }
    // An AIMET import is a sensitivity scan; the other jobs write files and show in the Jobs tab.
    openJobDialog(dialog, kind == "import_aimet" ? SensitivityTab : JobsTab, [] {});
}

void MainWindow::showCompareRunsDialog()
{
    auto* dialog = new CompareRunsDialog(workspaceDirectory_, store_.get(), this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->open();
}

void MainWindow::openPaths(const QStringList& paths)
{
    for (const QString& path : paths) {
        switch (classify(path)) {
        case FileKind::ModelDirectory:
            tabs_->setCurrentIndex(ModelsTab);
            if (const QString error = modelPanel_->addModelDirectory(path); !error.isEmpty()) {
                showError(tr("Cannot add model"), error);
            }
            break;
        case FileKind::PromptSet:
            tabs_->setCurrentIndex(PromptSetsTab);
            if (const QString error = promptSetPanel_->addPromptSetFile(path); !error.isEmpty()) {
                showError(tr("Cannot add prompt set"), error);
            }
            break;
        case FileKind::Recipe:
            tabs_->setCurrentIndex(RecipeTab);
            if (!mayReplaceRecipe(tr("opening %1").arg(QFileInfo(path).fileName()))) {
                break;
            }
            if (!recipeEditor_->openFile(path)) {
                showError(tr("Cannot open recipe"), recipeEditor_->lastError());
            }
            break;
        case FileKind::RunFile: {
            auto* dialog = new TrainingDialog(workspaceDirectory_, this, store_.get());
            dialog->setAttribute(Qt::WA_DeleteOnClose);
            dialog->setRunFile(path);
            connect(dialog, &QDialog::accepted, this, [this, dialog] { startTraining(dialog->effectiveRunFile()); });
            dialog->open();
            break;
        }
        case FileKind::Unknown:
            showError(tr("Cannot open %1").arg(path),
                tr("expected a model directory (with config.json), a recipe or run file (.yaml, .yml, .json) or a "
                   "prompt set (.jsonl)"));
            break;
        }
    }
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls()) {
        for (const QUrl& url : event->mimeData()->urls()) {
            if (!url.isLocalFile())
                return;
        }
        event->acceptProposedAction();
    }
}

void MainWindow::dropEvent(QDropEvent* event)
{
    QStringList paths;
    for (const QUrl& url : event->mimeData()->urls()) {
        paths << url.toLocalFile();
    }
    event->acceptProposedAction();
    openPaths(paths);
}

void MainWindow::showError(const QString& title, const QString& message)
{
    lastError_ = message;
    showStatus(title + ": " + message, 10000);
    if (QGuiApplication::platformName() != QLatin1String("offscreen")) {
        auto* box = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Ok, this);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open();
    }
}

void MainWindow::rememberWorkspace(const QString& directory)
{
    QSettings settings;
    QStringList recent = settings.value("recentWorkspaces").toStringList();
    recent.removeAll(directory);
    recent.prepend(directory);
    while (recent.size() > kMaxRecentWorkspaces) {
        recent.removeLast();
    }
    settings.setValue("recentWorkspaces", recent);
    rebuildRecentMenu();
}

bool MainWindow::saveRecipe()
{
    QString path = recipeEditor_->filePath();
    if (path.isEmpty()) {
        path = QFileDialog::getSaveFileName(this, tr("Save recipe"), {}, tr("YAML (*.yaml);;JSON (*.json)"));
    }
    return !path.isEmpty() && saveRecipeTo(path);
}

bool MainWindow::saveRecipeTo(const QString& path)
{
    if (!recipeEditor_->saveFile(path)) {
        showError(tr("Recipe not saved"), recipeEditor_->lastError());
        return false;
    }
    return true;
}

bool MainWindow::mayReplaceRecipe(const QString& action)
{
    if (recipeEditor_->undoStack()->isClean()) {
        return true;
    }
    const QString name = recipeEditor_->filePath().isEmpty() ? QString::fromStdString(recipeEditor_->recipe().name)
                                                              : QFileInfo(recipeEditor_->filePath()).fileName();
    QMessageBox question(QMessageBox::Warning, tr("Unsaved recipe"),
        tr("The recipe '%1' has unsaved changes, which %2 would lose.").arg(name, action),
        QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, this);
    question.setObjectName("unsavedRecipeQuestion");
    question.setDefaultButton(QMessageBox::Save);
    switch (question.exec()) {
    case QMessageBox::Save:
        return saveRecipe();
    case QMessageBox::Discard:
        return true;
    default:
        return false;
    }
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (!mayReplaceRecipe(tr("quitting"))) {
        event->ignore();
        return;
    }
    QSettings settings;
    settings.setValue("mainWindow/geometry", saveGeometry());
    settings.setValue("mainWindow/state", saveState());
    settings.setValue("mainWindow/tab", tabs_->currentIndex());
    if (auto* browser = findChild<QSplitter*>("browserSplitter")) {
        settings.setValue("mainWindow/browserSplitter", browser->saveState());
    }
    jobRunner_->cancel();
    jobQueue_->cancelAlongside(); // a follow stops at its next poll, its run finished
    QMainWindow::closeEvent(event);
}

} // namespace mismatch::ui

#include "ui/main_window.h"

#include "core/io/recipe_export.h"

#include "core/common/input_limits.h"
#include "core/analysis/demo.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/jobs/job_file.h"
#include "core/model/config.h"
#include "core/store/analysis_store.h"
#include "ui/dialogs/about_dialog.h"
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
#include "ui/plots/plot_export.h"
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

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QUndoStack>
#include <QVBoxLayout>

#include <cmath>
#include <fstream>
#include <memory>
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
    jobRunner_ = new JobRunner(this);
    jobQueue_ = new JobQueue(jobRunner_, this);

    // Empty state: what to do when the workspace holds no runs yet.
    emptyState_ = new QWidget(this);
    emptyState_->setObjectName("emptyState");
    auto* emptyLayout = new QVBoxLayout(emptyState_);
    emptyLayout->addStretch();
    auto* emptyText = new QLabel(
        tr("<h2>No runs in this workspace yet</h2>"
           "<p>Start with the built-in demo: the arithmetic teacher/student pair and its prompt sets.<br>"
           "Click <b>Run the demo</b>, or run <code>mismatch demo</code> in a terminal on the same workspace:<br>"
           "its runs appear here live. Drop model folders, recipes and run files on this window to open them.</p>"),
        emptyState_);
    emptyText->setAlignment(Qt::AlignCenter);
    emptyText->setTextFormat(Qt::RichText);
    emptyLayout->addWidget(emptyText);
    auto* demoButton = new QPushButton(tr("Run the demo"), emptyState_);
    demoButton->setObjectName("runDemoButton");
    demoButton->setMaximumWidth(220);
    connect(demoButton, &QPushButton::clicked, this, &MainWindow::runDemo);
    emptyLayout->addWidget(demoButton, 0, Qt::AlignHCenter);
    emptyLayout->addStretch();

    runTable_ = new QTableView(this);
    runTable_->setObjectName("runTable");
    runTable_->setModel(runModel_);
    runTable_->setSelectionBehavior(QAbstractItemView::SelectRows);
    runTable_->setSelectionMode(QAbstractItemView::ExtendedSelection); // several rows: overlay them
    runTable_->setAlternatingRowColors(true);
    runTable_->verticalHeader()->hide();
    runTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    runTable_->horizontalHeader()->setSectionResizeMode(RunTableModel::Name, QHeaderView::Stretch);
    addTableExportMenu(runTable_);
    connect(runTable_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &MainWindow::onSelectionChanged);

    runPlot_ = new RunPlot(this);
    comparePlot_ = new ComparePlot(this);
    plotTabs_ = new QTabWidget(this);
    plotTabs_->setObjectName("plotTabs");
    plotTabs_->addTab(runPlot_, tr("Selected run"));
    plotTabs_->addTab(comparePlot_, tr("Overlay of selected runs"));

    auto* browser = new QSplitter(Qt::Vertical, this);
    browser->setObjectName("browserSplitter");
    browser->addWidget(runTable_);
    browser->addWidget(plotTabs_);
    browser->setStretchFactor(0, 1);
    browser->setStretchFactor(1, 2);

    stack_ = new QStackedWidget(this);
    stack_->addWidget(emptyState_);
    stack_->addWidget(browser);

    modelPanel_ = new ModelLibraryPanel(this);
    promptSetPanel_ = new PromptSetPanel(this);
    recipeEditor_ = new RecipeEditor(this);
    sensitivityView_ = new SensitivityView(this);
    budgetView_ = new BudgetView(this);
    admissionView_ = new AdmissionView(this);
    prefixShiftView_ = new PrefixShiftView(this);
    breakdownView_ = new BreakdownView(this);
    jobPanel_ = new JobQueuePanel(jobQueue_, this);
    overview_ = new OverviewView(this);

    tabs_ = new QTabWidget(this);
    tabs_->setObjectName("mainTabs");
    tabs_->setDocumentMode(true);
    tabs_->addTab(overview_, tr("&Overview"));
    tabs_->addTab(stack_, tr("&Runs"));
    tabs_->addTab(modelPanel_, tr("&Models"));
    tabs_->addTab(promptSetPanel_, tr("&Prompt Sets"));
    tabs_->addTab(recipeEditor_, tr("R&ecipe"));
    tabs_->addTab(sensitivityView_, tr("&Sensitivity"));
    tabs_->addTab(budgetView_, tr("&Budget"));
    tabs_->addTab(admissionView_, tr("&Admission"));
    tabs_->addTab(prefixShiftView_, tr("Prefix Shif&t"));
    tabs_->addTab(breakdownView_, tr("Brea&kdown"));
    tabs_->addTab(jobPanel_, tr("&Jobs"));
    setCentralWidget(tabs_);
    connect(tabs_, &QTabWidget::currentChanged, this, [this](int tab) {
        refreshAnalyses(false);
        if (tab == OverviewTab && store_) {
            overview_->refresh();
        }
    });

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
    overviewTimer_ = new QTimer(this);
    overviewTimer_->setSingleShot(true);
    overviewTimer_->setInterval(2000);
    connect(overviewTimer_, &QTimer::timeout, this, [this] {
        try {
            overview_->refresh();
        } catch (const std::exception& error) {
            onStoreError(QString::fromUtf8(error.what()));
        }
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
    connect(runModel_, &RunTableModel::refreshed, this, [this] {
        updateView();
        runPlot_->tail();
        comparePlot_->tail();
        refreshAnalyses(false);
        followNewRuns();
        // The Overview rebuilds its page: while a run streams steps, at most every two seconds.
        if (tabs_->currentIndex() == OverviewTab && !overviewTimer_->isActive()) {
            overviewTimer_->start();
        }
    });
    connect(runModel_, &RunTableModel::storeError, this, &MainWindow::onStoreError);
    connect(runModel_, &RunTableModel::storeRecovered, this, [this] {
        storeProblem_->clear();
        storeProblem_->setVisible(false);
        showStatus(tr("The workspace reads again."));
    });
    connect(overview_, &OverviewView::actionRequested, this, &MainWindow::onOverviewAction);
    connect(runPlot_, &RunPlot::openResults, this, [this](const QString& kind, std::int64_t runId) {
        if (kind == QLatin1String("admit")) {
            tabs_->setCurrentIndex(AdmissionTab);
        } else if (kind == QLatin1String("sensitivity")) {
            tabs_->setCurrentIndex(SensitivityTab);
            for (const SensitivityScanInfo& scan : AnalysisData(*store_).sensitivityScans()) {
                if (scan.runId == runId) {
                    sensitivityView_->selectScan(scan.id);
                }
            }
        } else if (kind == QLatin1String("calibrate")) {
            tabs_->setCurrentIndex(BudgetTab);
            for (const CalibrationInfo& calibration : AnalysisData(*store_).calibrations()) {
                if (calibration.runId == runId) {
                    budgetView_->selectCalibration(calibration.id);
                }
            }
        } else if (kind == QLatin1String("prefix_shift")) {
            tabs_->setCurrentIndex(PrefixShiftTab);
            for (const auto& record : store::prefixShifts(*store_)) {
                if (record.runId == runId) {
                    prefixShiftView_->selectAnalysis(record.id);
                }
            }
        } else if (kind == QLatin1String("breakdown")) {
            tabs_->setCurrentIndex(BreakdownTab);
            breakdownView_->selectRun(runId);
        } else {
            tabs_->setCurrentIndex(OverviewTab);
        }
    });
    connect(sensitivityView_, &SensitivityView::keepInBf16Requested, this, &MainWindow::keepInBf16);
    connect(sensitivityView_, &SensitivityView::buildRecipeRequested, this,
        [this](std::int64_t scanId) { showRecipeBuildDialog(scanId); });
    connect(jobPanel_, &JobQueuePanel::cancelRequested, this, [this](int id) { requestCancel(id); });
    connect(modelPanel_, &ModelLibraryPanel::modelsChanged, this, &MainWindow::updateRecipeModels);
    connect(recipeEditor_, &RecipeEditor::fileChanged, this, &MainWindow::updateRecipeTitle);
    connect(recipeEditor_->undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateRecipeTitle);

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

void MainWindow::createMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("&Open or Create Workspace..."), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Workspace directory"), workspaceDirectory_);
        if (!dir.isEmpty()) {
            openWorkspace(dir);
        }
    });
    open->setShortcut(QKeySequence::Open);
    recentMenu_ = file->addMenu(tr("Recent Workspaces"));
    rebuildRecentMenu();
    file->addSeparator();
    QAction* addModel = file->addAction(tr("Add &Model Directory..."), this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Model directory"));
        if (!dir.isEmpty())
            openPaths({dir});
    });
    addModel->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_M));
    file->addAction(tr("Add &Prompt Set..."), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, tr("Prompt set"), {}, tr("JSON Lines (*.jsonl)"));
        if (!path.isEmpty())
            openPaths({path});
    });
    file->addSeparator();
    QAction* newRecipe = file->addAction(tr("&New Recipe"), this, [this] {
        if (!mayReplaceRecipe(tr("New Recipe"))) {
            return;
        }
        quant::Recipe recipe;
        recipe.name = "untitled";
        recipeEditor_->setRecipe(recipe);
        tabs_->setCurrentIndex(RecipeTab);
    });
    newRecipe->setShortcut(QKeySequence::New);
    QAction* openRecipe = file->addAction(tr("Open &Recipe..."), this, [this] {
        const QString path
            = QFileDialog::getOpenFileName(this, tr("Open recipe"), {}, tr("Recipes (*.yaml *.yml *.json)"));
        if (!path.isEmpty())
            openPaths({path});
    });
    openRecipe->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O));
    QAction* saveRecipe = file->addAction(tr("&Save Recipe"), this, [this] { this->saveRecipe(); });
    saveRecipe->setShortcut(QKeySequence::Save);
    QAction* saveRecipeAs = file->addAction(tr("Save Recipe &As..."), this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Save recipe as"), recipeEditor_->filePath(), tr("YAML (*.yaml);;JSON (*.json)"));
        if (!path.isEmpty())
            saveRecipeTo(path);
    });
    saveRecipeAs->setShortcut(QKeySequence::SaveAs);
    QMenu* exportRecipe = file->addMenu(tr("E&xport Recipe For"));
    for (const std::string& name : io::exportTargetChoices()) {
        const char* target = name.c_str();
        // The export dialog (ui/dialogs/export_dialog.h): the config file and the ready-to-run files for the target, to copy
        // or save.
        exportRecipe->addAction(QString::fromLatin1(target) + QStringLiteral("..."), this,
            [this, target = QString::fromLatin1(target)] { showExportDialog(target); });
    }
    file->addSeparator();
    QAction* exportPlot = file->addAction(tr("&Export Plot..."), this, &MainWindow::exportCurrentPlot);
    exportPlot->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    QAction* exportTable = file->addAction(tr("Export &Table as CSV..."), this, &MainWindow::exportCurrentTable);
    exportTable->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E));
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    QAction* undo = recipeEditor_->undoStack()->createUndoAction(this, tr("&Undo"));
    undo->setShortcut(QKeySequence::Undo);
    QAction* redo = recipeEditor_->undoStack()->createRedoAction(this, tr("&Redo"));
    redo->setShortcut(QKeySequence::Redo);
    edit->addAction(undo);
    edit->addAction(redo);
    edit->addSeparator();
    QAction* copyCli = edit->addAction(tr("Copy &CLI Command"), this, &MainWindow::copyCliCommand);
    copyCli->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));

    QMenu* view = menuBar()->addMenu(tr("&View"));
    QAction* refreshAction = view->addAction(tr("&Refresh"), this, &MainWindow::refresh);
    refreshAction->setShortcut(QKeySequence::Refresh);
    view->addSeparator();
    for (int i = 0; i < tabs_->count(); ++i) {
        QString name = tabs_->tabText(i);
        name.remove(QLatin1Char('&'));
        QAction* show = view->addAction(name, this, [this, i] { tabs_->setCurrentIndex(i); });
        show->setShortcut(QKeySequence(Qt::CTRL | (Qt::Key_1 + i)));
    }

    QMenu* jobs = menuBar()->addMenu(tr("&Jobs"));
    QAction* train = jobs->addAction(tr("Start &Training Run..."), this, &MainWindow::showTrainingDialog);
    train->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_T));
    QAction* scan = jobs->addAction(tr("Start &Sensitivity Scan..."), this, &MainWindow::showSensitivityDialog);
    scan->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_L));
    QAction* calibrate = jobs->addAction(tr("Start &Calibration..."), this, &MainWindow::showCalibrationDialog);
    calibrate->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_B));
    QAction* admit = jobs->addAction(tr("Start &Admission Check..."), this, &MainWindow::showAdmissionDialog);
    admit->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_A));
    QAction* prefix = jobs->addAction(tr("Start &Prefix-Shift Analysis..."), this, &MainWindow::showPrefixShiftDialog);
    prefix->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
    jobs->addAction(tr("Start Mismatch Brea&kdown..."), this, &MainWindow::showBreakdownDialog);
    QAction* build = jobs->addAction(tr("&Build Recipe from a Scan..."), this, [this] { showRecipeBuildDialog(); });
    build->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R));
    jobs->addAction(tr("&Time to Quality..."), this, &MainWindow::showTimeToQualityDialog);
    jobs->addAction(tr("Compare &Objectives..."), this, &MainWindow::showCompareObjectivesDialog);
    QAction* import = jobs->addAction(tr("&Import Training Log..."), this, &MainWindow::showImportLogDialog);
    import->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_I));
    jobs->addAction(tr("Compare Two &Runs (Failure Rule)..."), this, &MainWindow::showCompareRunsDialog);
    // The catalogue's other jobs, each in a dialog built from its parameters (ui/dialogs/spec_job_dialog.h).
    QMenu* more = jobs->addMenu(tr("&More Jobs"));
    more->setObjectName(QStringLiteral("moreJobsMenu"));
    for (const std::string& kind : specDialogJobs()) {
        const mismatch::jobs::JobDefinition& job = *mismatch::jobs::findJob(kind);
        QAction* action
            = more->addAction(commandTitle(job) + QStringLiteral("..."), this, [this, kind] { showSpecJobDialog(kind); });
        action->setToolTip(QString::fromStdString(job.summary));
    }
    more->setToolTipsVisible(true);
    jobs->addSeparator();
    jobs->addAction(tr("R&esume Selected Run"), this, &MainWindow::resumeSelectedRun);
    jobs->addAction(tr("Export Selected Run's &Job File..."), this, &MainWindow::exportSelectedRunJobFile);
    jobs->addSeparator();
    QAction* demo = jobs->addAction(tr("Run the &Demo"), this, &MainWindow::runDemo);
    demo->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
    // Esc asks before cancelling: a stray key press must not throw away a long job.
    QAction* cancel
        = jobs->addAction(tr("&Cancel Running Job..."), this, [this] { requestCancel(jobQueue_->runningJob()); });
    cancel->setShortcut(QKeySequence(Qt::Key_Escape));

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About Mismatch Lab"), this, &MainWindow::showAbout);
    help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
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
        analysisFingerprint_ = QString::fromStdString(AnalysisData(*store_).fingerprint());
        newestRunSeen_ = 0;
        storeProblem_->clear();
        storeProblem_->setVisible(false);
        updateRecipeModels();
        workspaceLabel_->setText(tr("Workspace: %1").arg(QString::fromStdString(store_->path())));
        workspaceLabel_->setToolTip(workspaceLabel_->text());
        workspaceLabel_->setMinimumWidth(
            std::min(420, workspaceLabel_->fontMetrics().horizontalAdvance(workspaceLabel_->text()) + 8));
        rememberWorkspace(directory);
        updateView();
        followNewRuns(); // the newest run is selected, so that its plot is not empty
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

bool MainWindow::showingEmptyState() const
{
    return stack_->currentWidget() == emptyState_;
}

void MainWindow::updateView()
{
    const int runs = runModel_->rowCount();
    stack_->setCurrentIndex(runs == 0 ? 0 : 1);
    runCountLabel_->setText(tr("%n run(s)", nullptr, runs));
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

void MainWindow::followNewRuns()
{
    // A run that appears (a job from here or a headless one) is selected and scrolled to, unless the user is looking
    // at another run: then the selection stays.
    std::int64_t newest = 0;
    int newestRow = -1;
    for (int row = 0; row < runModel_->rowCount(); ++row) {
        if (runModel_->runAt(row)->id > newest) {
            newest = runModel_->runAt(row)->id;
            newestRow = row;
        }
    }
    if (newest <= newestRunSeen_ || newestRow < 0) {
        return;
    }
    const QModelIndexList selected = runTable_->selectionModel()->selectedRows();
    const bool following = selected.isEmpty()
        || (selected.size() == 1 && runModel_->runAt(selected.front().row())
            && runModel_->runAt(selected.front().row())->id == newestRunSeen_);
    newestRunSeen_ = newest;
    if (following) {
        runTable_->selectRow(newestRow);
        runTable_->scrollTo(runModel_->index(newestRow, 0));
    }
}

bool MainWindow::showRunInTable(std::int64_t runId)
{
    for (int row = 0; row < runModel_->rowCount(); ++row) {
        if (runModel_->runAt(row)->id == runId) {
            tabs_->setCurrentIndex(RunsTab);
            runTable_->selectRow(row);
            runTable_->scrollTo(runModel_->index(row, 0));
            return true;
        }
    }
    return false;
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

void MainWindow::refreshAnalyses(bool force)
{
    if (!store_) {
        return;
    }
    try {
        const QString fingerprint = QString::fromStdString(AnalysisData(*store_).fingerprint());
        if (!force && fingerprint == analysisFingerprint_) {
            return;
        }
        analysisFingerprint_ = fingerprint;
        sensitivityView_->refresh();
        budgetView_->refresh();
        admissionView_->refresh();
        prefixShiftView_->refresh();
        breakdownView_->refresh();
        overview_->refresh();
    } catch (const std::exception& error) {
        onStoreError(QString::fromUtf8(error.what()));
    }
}

void MainWindow::onSelectionChanged()
{
    const QModelIndexList rows = runTable_->selectionModel()->selectedRows();
    std::vector<std::pair<std::int64_t, QString>> selected;
    for (const QModelIndex& index : rows) {
        if (const store::RunInfo* run = runModel_->runAt(index.row())) {
            selected.emplace_back(run->id, QString::fromStdString(run->name));
        }
    }
    std::sort(selected.begin(), selected.end());
    if (selected.size() == 1) {
        runPlot_->showRun(selected.front().first, selected.front().second);
        plotTabs_->setCurrentIndex(0);
    } else if (selected.empty()) {
        runPlot_->showRun(0, {});
    } else {
        plotTabs_->setCurrentIndex(1);
    }
    comparePlot_->setRuns(selected);
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
    const int id = jobQueue_->enqueue(
        tr("Demo"), specCommandLine(workspaceDirectory_, spec), specWorkerJob(workspaceDirectory_, spec));
    jobQueue_->setJobFile(id, QString::fromStdString(jobs::jobFileText(spec)));
}

namespace {

// The one run selected in the Runs tab and the catalogue job it stored; `problem` says why there is none.
std::optional<std::pair<store::RunInfo, jobs::JobSpec>> selectedRunJob(
    const QTableView* table, const RunTableModel* model, QString* problem)
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
    } catch (const std::exception& error) {
        *problem = QString::fromStdString(error.what());
        return std::nullopt;
    }
    *problem = QObject::tr("Run %1 (%2) was not started by a job of the catalogue, or by a version before runs kept "
                           "their job, so it has no stored job.")
                   .arg(run->id)
                   .arg(QString::fromStdString(run->kind));
    return std::nullopt;
}

} // namespace

int MainWindow::resumeSelectedRun()
{
    QString problem;
    const auto selected = selectedRunJob(runTable_, runModel_, &problem);
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
    lastQueuedJob_ = jobQueue_->enqueue(tr("Resume %1 run %2").arg(QString::fromStdString(spec.kind())).arg(runId),
        command, [workspace = workspaceDirectory_.toStdString(), spec, runId](Progress& progress) {
            store::RunStore store
                = store::RunStore::open(store::databasePath(workspace), store::OpenMode::OpenExisting);
            spec.definition().resume(store, runId, progress, {});
        });
    return lastQueuedJob_;
}

void MainWindow::exportSelectedRunJobFile()
{
    QString problem;
    const auto selected = selectedRunJob(runTable_, runModel_, &problem);
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
    return jobQueue_->enqueue(
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
            lastQueuedJob_ = jobQueue_->enqueue(dialog->jobName(), dialog->cliCommand(), dialog->fieldNamedJob());
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

void MainWindow::keepInBf16(const std::vector<std::pair<std::int64_t, std::string>>& cells)
{
    if (cells.empty()) {
        return;
    }
    // Resolve the rules against the scan's model when it is registered, so that the table shows them.
    const QString model = sensitivityView_->scanModelName();
    if (!model.isEmpty()) {
        recipeEditor_->selectModel(model);
    }
    const int before = static_cast<int>(recipeEditor_->recipe().rules.size());
    if (!recipeEditor_->keepInBf16(cells)) {
        showError(tr("Cannot add the rules"), recipeEditor_->lastError());
        return;
    }
    tabs_->setCurrentIndex(RecipeTab);
    showStatus(tr("%n rule(s) keep the selected cells in BF16 (undo with Ctrl+Z)", nullptr,
        static_cast<int>(recipeEditor_->recipe().rules.size()) - before));
}

void MainWindow::onOverviewAction(int action, qint64 id, const QString& argument)
{
    switch (static_cast<OverviewView::Action>(action)) {
    case OverviewView::RunDemo:
        runDemo();
        break;
    case OverviewView::AddModel: {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Model directory"));
        if (!dir.isEmpty()) {
            openPaths({dir});
        }
        break;
    }
    case OverviewView::StartTraining:
        showTrainingDialog();
        break;
    case OverviewView::StartCalibration:
        showCalibrationDialog();
        break;
    case OverviewView::StartAdmission:
        showAdmissionDialog();
        if (auto* dialog = findChild<AdmissionDialog*>(); dialog && id != 0) {
            dialog->setCalibration(id);
        }
        break;
    case OverviewView::StartSensitivity:
        showSensitivityDialog();
        if (auto* dialog = findChild<SensitivityDialog*>();
            dialog && !argument.isEmpty() && dialog->modelDirectory().isEmpty()) {
            dialog->setModelDirectory(argument);
        }
        break;
    case OverviewView::StartPrefixShift:
        showPrefixShiftDialog();
        break;
    case OverviewView::ShowRun:
        showRunInTable(id);
        break;
    case OverviewView::ShowBudget:
        tabs_->setCurrentIndex(BudgetTab);
        budgetView_->selectCalibration(id);
        break;
    case OverviewView::ShowAdmission:
        tabs_->setCurrentIndex(AdmissionTab);
        break;
    }
}

void MainWindow::copyCliCommand()
{
    QString command;
    if (tabs_->currentIndex() == RecipeTab) {
        command = recipeEditor_->cliCommand();
    } else if (tabs_->currentIndex() == JobsTab && jobPanel_->selectedJob() != 0) {
        command = jobQueue_->cliCommand(jobPanel_->selectedJob());
    } else if (const int row = jobQueue_->model()->rowCount() - 1; row >= 0) {
        command = jobQueue_->cliCommand(jobQueue_->idAtRow(row)); // the latest job
    }
    if (command.isEmpty()) {
        showStatus(tr("No job or recipe to copy a command for"), 4000);
        return;
    }
    QGuiApplication::clipboard()->setText(command);
    showStatus(tr("Copied: %1").arg(command), 6000);
}

void MainWindow::exportCurrentPlot()
{
    QCustomPlot* plot = nullptr;
    switch (tabs_->currentIndex()) {
    case RunsTab:
        plot = plotTabs_->currentIndex() == 0 ? runPlot_->plot() : comparePlot_->plot();
        break;
    case SensitivityTab:
        plot = sensitivityView_->plot();
        break;
    case BudgetTab:
        plot = budgetView_->plot();
        break;
    case AdmissionTab:
        plot = admissionView_->plot();
        break;
    case PrefixShiftTab:
        plot = prefixShiftView_->plot();
        break;
    case BreakdownTab:
        plot = breakdownView_->plot();
        break;
    default:
        break;
    }
    if (!plot) {
        showStatus(tr("This tab has no plot to export"), 4000);
        return;
    }
    const QString path
        = QFileDialog::getSaveFileName(this, tr("Export plot"), {}, tr("PNG image (*.png);;PDF (*.pdf);;SVG (*.svg)"));
    if (path.isEmpty())
        return;
    const QString error = exportPlot(plot, path);
    if (!error.isEmpty())
        showError(tr("Export failed"), error);
}

void MainWindow::exportCurrentTable()
{
    QTableView* table = nullptr;
    switch (tabs_->currentIndex()) {
    case RunsTab:
        table = runTable_;
        break;
    case ModelsTab:
        table = modelPanel_->table();
        break;
    case PromptSetsTab:
        table = promptSetPanel_->table();
        break;
    case BudgetTab:
        table = budgetView_->table();
        break;
    case AdmissionTab:
        table = admissionView_->table();
        break;
    case BreakdownTab:
        table = breakdownView_->table();
        break;
    case JobsTab:
        table = jobPanel_->table();
        break;
    default:
        break;
    }
    if (!table) {
        showStatus(tr("This tab has no table to export"), 4000);
        return;
    }
    const QString path = QFileDialog::getSaveFileName(this, tr("Export table"), {}, tr("CSV (*.csv)"));
    if (path.isEmpty())
        return;
    const QString error = exportCsv(*table->model(), path);
    if (!error.isEmpty())
        showError(tr("Export failed"), error);
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

void MainWindow::showAbout()
{
    AboutDialog dialog(this);
    dialog.exec();
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

void MainWindow::rebuildRecentMenu()
{
    if (!recentMenu_) {
        return;
    }
    recentMenu_->clear();
    const QStringList recent = QSettings().value("recentWorkspaces").toStringList();
    for (const QString& dir : recent) {
        recentMenu_->addAction(dir, this, [this, dir] { openWorkspace(dir); });
    }
    recentMenu_->setEnabled(!recent.isEmpty());
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
    QMainWindow::closeEvent(event);
}

} // namespace mismatch::ui

#include "ui/main_window.h"

#include "core/common/input_limits.h"
#include "core/analysis/demo.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/model/config.h"
#include "ui/about_dialog.h"
#include "ui/admission_view.h"
#include "ui/analysis_data.h"
#include "ui/analysis_dialogs.h"
#include "ui/budget_view.h"
#include "ui/compare_plot.h"
#include "ui/job_queue.h"
#include "ui/job_runner.h"
#include "ui/library_panels.h"
#include "ui/plot_export.h"
#include "ui/prefix_shift_view.h"
#include "ui/recipe_editor.h"
#include "ui/run_plot.h"
#include "ui/run_table_model.h"
#include "ui/sensitivity_dialog.h"
#include "ui/sensitivity_view.h"
#include "ui/training_dialog.h"

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
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QUndoStack>
#include <QVBoxLayout>

#include <fstream>
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
    jobPanel_ = new JobQueuePanel(jobQueue_, this);

    tabs_ = new QTabWidget(this);
    tabs_->setObjectName("mainTabs");
    tabs_->setDocumentMode(true);
    tabs_->addTab(stack_, tr("&Runs"));
    tabs_->addTab(modelPanel_, tr("&Models"));
    tabs_->addTab(promptSetPanel_, tr("&Prompt Sets"));
    tabs_->addTab(recipeEditor_, tr("R&ecipe"));
    tabs_->addTab(sensitivityView_, tr("&Sensitivity"));
    tabs_->addTab(budgetView_, tr("&Budget"));
    tabs_->addTab(admissionView_, tr("&Admission"));
    tabs_->addTab(prefixShiftView_, tr("Prefix Shif&t"));
    tabs_->addTab(jobPanel_, tr("&Jobs"));
    setCentralWidget(tabs_);
    connect(tabs_, &QTabWidget::currentChanged, this, [this] { refreshAnalyses(false); });

    workspaceLabel_ = new QLabel(this);
    runCountLabel_ = new QLabel(this);
    jobProgress_ = new QProgressBar(this);
    jobProgress_->setObjectName("jobProgress");
    jobProgress_->setMinimumWidth(260);
    jobProgress_->setRange(0, 1000);
    jobProgress_->setVisible(false);
    cancelButton_ = new QPushButton(tr("Cancel"), this);
    cancelButton_->setObjectName("statusCancelButton");
    cancelButton_->setVisible(false);
    connect(cancelButton_, &QPushButton::clicked, jobRunner_, &JobRunner::cancel);
    statusBar()->addWidget(workspaceLabel_, 1);
    statusBar()->addPermanentWidget(runCountLabel_);
    statusBar()->addPermanentWidget(jobProgress_);
    statusBar()->addPermanentWidget(cancelButton_);

    connect(jobRunner_, &JobRunner::progressChanged, this, [this](double fraction, const QString& stage, double eta) {
        // The bar shows the job and the numbers; the stage text (which can be long) goes to its tooltip and to
        // the job table.
        const QString job = jobRunner_->jobName();
        jobProgress_->setValue(static_cast<int>(fraction * 1000));
        jobProgress_->setFormat(
            eta >= 0 ? tr("%1: %p% (ETA %2 s)").arg(job).arg(eta, 0, 'f', 0) : tr("%1: %p%").arg(job));
        jobProgress_->setToolTip(stage);
    });
    connect(jobQueue_, &JobQueue::jobStarted, this, [this](int, const QString& name) {
        jobProgress_->setValue(0);
        jobProgress_->setFormat(tr("%1: starting").arg(name));
        jobProgress_->setVisible(true);
        cancelButton_->setVisible(true);
    });
    connect(jobQueue_, &JobQueue::jobFinished, this,
        [this](int, const QString& name, bool ok, bool cancelled, const QString& error) {
            jobProgress_->setVisible(jobRunner_->running());
            cancelButton_->setVisible(jobRunner_->running());
            refresh();
            if (ok) {
                statusBar()->showMessage(tr("%1 finished").arg(name), 5000);
            } else if (cancelled) {
                statusBar()->showMessage(tr("%1 cancelled; what it stored is kept").arg(name), 5000);
            } else {
                showError(tr("%1 failed").arg(name), error);
            }
        });
    connect(runModel_, &RunTableModel::refreshed, this, [this] {
        updateView();
        runPlot_->tail();
        comparePlot_->tail();
        refreshAnalyses(false);
    });
    connect(modelPanel_, &ModelLibraryPanel::modelsChanged, this, &MainWindow::updateRecipeModels);
    connect(recipeEditor_, &RecipeEditor::fileChanged, this, &MainWindow::updateRecipeTitle);
    connect(recipeEditor_->undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateRecipeTitle);

    createMenus();
    QSettings settings;
    restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
    restoreState(settings.value("mainWindow/state").toByteArray());
    browser->restoreState(settings.value("mainWindow/browserSplitter").toByteArray());
    tabs_->setCurrentIndex(settings.value("mainWindow/tab", 0).toInt());
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
    QAction* saveRecipe = file->addAction(tr("&Save Recipe"), this, [this] {
        QString path = recipeEditor_->filePath();
        if (path.isEmpty()) {
            path = QFileDialog::getSaveFileName(this, tr("Save recipe"), {}, tr("YAML (*.yaml);;JSON (*.json)"));
        }
        if (!path.isEmpty() && !recipeEditor_->saveFile(path))
            showError(tr("Recipe not saved"), recipeEditor_->lastError());
    });
    saveRecipe->setShortcut(QKeySequence::Save);
    QAction* saveRecipeAs = file->addAction(tr("Save Recipe &As..."), this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Save recipe as"), recipeEditor_->filePath(), tr("YAML (*.yaml);;JSON (*.json)"));
        if (!path.isEmpty() && !recipeEditor_->saveFile(path))
            showError(tr("Recipe not saved"), recipeEditor_->lastError());
    });
    saveRecipeAs->setShortcut(QKeySequence::SaveAs);
    QMenu* exportRecipe = file->addMenu(tr("E&xport Recipe For"));
    for (const char* target : {"vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt"}) {
        exportRecipe->addAction(QString::fromLatin1(target), this, [this, target = QString::fromLatin1(target)] {
            const QString path = QFileDialog::getSaveFileName(this, tr("Export recipe for %1").arg(target));
            if (!path.isEmpty() && !recipeEditor_->exportFor(target, path)) {
                showError(tr("Recipe not exported"), recipeEditor_->lastError());
            }
        });
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
    QAction* demo = jobs->addAction(tr("Run the &Demo"), this, &MainWindow::runDemo);
    demo->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
    QAction* cancel = jobs->addAction(tr("&Cancel Running Job"), jobRunner_, &JobRunner::cancel);
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
        analysisFingerprint_ = QString::fromStdString(AnalysisData(*store_).fingerprint());
        updateRecipeModels();
        workspaceLabel_->setText(tr("Workspace: %1").arg(QString::fromStdString(store_->path())));
        rememberWorkspace(directory);
        updateView();
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
    } catch (const Error& error) {
        showError(tr("Cannot read workspace"), QString::fromUtf8(error.what()));
    }
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
    } catch (const Error& error) {
        showError(tr("Cannot read the analyses"), QString::fromUtf8(error.what()));
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
    // The job opens its own connection: SQLite connections are not shared across threads here.
    jobQueue_->enqueue(tr("Demo"), QStringLiteral("mismatch --workspace %1 demo").arg(shellQuote(workspaceDirectory_)),
        [databasePath](Progress& progress) {
            store::RunStore store = store::RunStore::open(databasePath, store::OpenMode::OpenExisting);
            analysis::DemoOptions options;
            options.resourceDirectory = resourceDirectory();
            analysis::runDemo(store, options, progress);
        });
}

int MainWindow::startTraining(const QString& runFile)
{
    if (!store_) {
        showError(tr("No workspace"), tr("Open a workspace first."));
        return 0;
    }
    TrainingDialog check(workspaceDirectory_);
    check.setRunFile(runFile);
    if (!check.runFileValid()) {
        showError(tr("Cannot start training"), check.errorText());
        return 0;
    }
    return jobQueue_->enqueue(
        tr("Train %1").arg(check.runName()), check.cliCommand(), trainingJob(workspaceDirectory_, runFile));
}

void MainWindow::showTrainingDialog()
{
    auto* dialog = new TrainingDialog(workspaceDirectory_, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setRunFile(QSettings().value("training/lastRunFile").toString());
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        QSettings().setValue("training/lastRunFile", dialog->runFile());
        lastQueuedJob_ = startTraining(dialog->runFile());
        if (lastQueuedJob_ != 0) {
            tabs_->setCurrentIndex(RunsTab);
        }
    });
    dialog->open();
}

void MainWindow::showSensitivityDialog()
{
    auto* dialog = new SensitivityDialog(workspaceDirectory_, this);
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
            lastQueuedJob_ = jobQueue_->enqueue(dialog->jobName(), dialog->cliCommand(), dialog->job());
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
    auto* dialog = new CalibrationDialog(workspaceDirectory_, this);
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

void MainWindow::showPrefixShiftDialog()
{
    auto* dialog = new PrefixShiftDialog(workspaceDirectory_, this);
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
        statusBar()->showMessage(tr("No job or recipe to copy a command for"), 4000);
        return;
    }
    QGuiApplication::clipboard()->setText(command);
    statusBar()->showMessage(tr("Copied: %1").arg(command), 6000);
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
    default:
        break;
    }
    if (!plot) {
        statusBar()->showMessage(tr("This tab has no plot to export"), 4000);
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
    case JobsTab:
        table = jobPanel_->table();
        break;
    default:
        break;
    }
    if (!table) {
        statusBar()->showMessage(tr("This tab has no table to export"), 4000);
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
            if (!recipeEditor_->openFile(path)) {
                showError(tr("Cannot open recipe"), recipeEditor_->lastError());
            }
            break;
        case FileKind::RunFile: {
            auto* dialog = new TrainingDialog(workspaceDirectory_, this);
            dialog->setAttribute(Qt::WA_DeleteOnClose);
            dialog->setRunFile(path);
            connect(dialog, &QDialog::accepted, this, [this, dialog] { startTraining(dialog->runFile()); });
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
    statusBar()->showMessage(title + ": " + message, 10000);
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

void MainWindow::closeEvent(QCloseEvent* event)
{
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

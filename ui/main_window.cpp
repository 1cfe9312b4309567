#include "ui/main_window.h"

#include "core/analysis/demo.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "ui/about_dialog.h"
#include "ui/job_runner.h"
#include "ui/run_plot.h"
#include "ui/run_table_model.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTableView>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {
constexpr int kPollIntervalMs = 500;
constexpr int kMaxRecentWorkspaces = 8;
}  // namespace

MainWindow::MainWindow(const QString& workspaceDirectory, QWidget* parent) : QMainWindow(parent)
{
    setWindowTitle(tr("Mismatch Lab"));
    setWindowIcon(QIcon(":/mismatch/icons/mismatch-lab.svg"));
    setObjectName("mainWindow");
    resize(1100, 720);

    runModel_ = new RunTableModel(this);
    jobRunner_ = new JobRunner(this);

    // Empty state: what to do when the workspace holds no runs yet.
    emptyState_ = new QWidget(this);
    emptyState_->setObjectName("emptyState");
    auto* emptyLayout = new QVBoxLayout(emptyState_);
    emptyLayout->addStretch();
    auto* emptyText = new QLabel(
        tr("<h2>No runs in this workspace yet</h2>"
           "<p>Start with the built-in demo: the arithmetic teacher/student pair and its prompt sets.<br>"
           "Click <b>Run the demo</b>, or run <code>mismatch demo</code> in a terminal on the same workspace:<br>"
           "its runs appear here live.</p>"),
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
    runTable_->setSelectionMode(QAbstractItemView::SingleSelection);
    runTable_->setAlternatingRowColors(true);
    runTable_->verticalHeader()->hide();
    runTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    runTable_->horizontalHeader()->setSectionResizeMode(RunTableModel::Name, QHeaderView::Stretch);
    connect(runTable_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &MainWindow::onSelectionChanged);

    runPlot_ = new RunPlot(this);

    auto* browser = new QSplitter(Qt::Vertical, this);
    browser->setObjectName("browserSplitter");
    browser->addWidget(runTable_);
    browser->addWidget(runPlot_);
    browser->setStretchFactor(0, 1);
    browser->setStretchFactor(1, 1);

    stack_ = new QStackedWidget(this);
    stack_->addWidget(emptyState_);
    stack_->addWidget(browser);
    setCentralWidget(stack_);

    workspaceLabel_ = new QLabel(this);
    runCountLabel_ = new QLabel(this);
    jobProgress_ = new QProgressBar(this);
    jobProgress_->setMaximumWidth(260);
    jobProgress_->setRange(0, 1000);
    jobProgress_->setVisible(false);
    cancelButton_ = new QPushButton(tr("Cancel"), this);
    cancelButton_->setVisible(false);
    connect(cancelButton_, &QPushButton::clicked, jobRunner_, &JobRunner::cancel);
    statusBar()->addWidget(workspaceLabel_, 1);
    statusBar()->addPermanentWidget(runCountLabel_);
    statusBar()->addPermanentWidget(jobProgress_);
    statusBar()->addPermanentWidget(cancelButton_);

    connect(jobRunner_, &JobRunner::progressChanged, this, [this](double fraction, const QString& stage, double eta) {
        jobProgress_->setValue(static_cast<int>(fraction * 1000));
        jobProgress_->setFormat(eta >= 0 ? tr("%1: %p% (ETA %2 s)").arg(stage).arg(eta, 0, 'f', 0)
                                         : tr("%1: %p%").arg(stage));
    });
    connect(jobRunner_, &JobRunner::finished, this,
        [this](const QString& name, bool ok, bool cancelled, const QString& error) {
            jobProgress_->setVisible(false);
            cancelButton_->setVisible(false);
            refresh();
            if (ok) {
                statusBar()->showMessage(tr("%1 finished").arg(name), 5000);
            } else if (cancelled) {
                statusBar()->showMessage(tr("%1 cancelled").arg(name), 5000);
            } else {
                showError(tr("%1 failed").arg(name), error);
            }
        });
    connect(runModel_, &RunTableModel::refreshed, this, [this] {
        updateView();
        runPlot_->tail();
    });

    createMenus();
    QSettings settings;
    restoreGeometry(settings.value("mainWindow/geometry").toByteArray());
    restoreState(settings.value("mainWindow/state").toByteArray());
    openWorkspace(workspaceDirectory);
    runModel_->setLivePolling(kPollIntervalMs);
}

MainWindow::~MainWindow()
{
    // The model and plot hold raw pointers to the store: detach them before it closes.
    runModel_->setLivePolling(0);
    runModel_->setStore(nullptr);
    runPlot_->setStore(nullptr);
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
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* view = menuBar()->addMenu(tr("&View"));
    QAction* refreshAction = view->addAction(tr("&Refresh"), this, &MainWindow::refresh);
    refreshAction->setShortcut(QKeySequence::Refresh);

    QMenu* jobs = menuBar()->addMenu(tr("&Jobs"));
    QAction* demo = jobs->addAction(tr("Run the &Demo"), this, &MainWindow::runDemo);
    demo->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
    QAction* cancel = jobs->addAction(tr("&Cancel Job"), jobRunner_, &JobRunner::cancel);
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
        store_ = std::move(store);
        workspaceDirectory_ = directory;
        runModel_->setStore(store_.get());
        runPlot_->setStore(store_.get());
        workspaceLabel_->setText(tr("Workspace: %1").arg(QString::fromStdString(store_->path())));
        rememberWorkspace(directory);
        updateView();
        return true;
    } catch (const Error& error) {
        showError(tr("Cannot open workspace"), QString::fromUtf8(error.what()));
        return false;
    }
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
    } catch (const Error& error) {
        showError(tr("Cannot read workspace"), QString::fromUtf8(error.what()));
    }
}

void MainWindow::onSelectionChanged()
{
    const QModelIndexList rows = runTable_->selectionModel()->selectedRows();
    const store::RunInfo* run = rows.isEmpty() ? nullptr : runModel_->runAt(rows.front().row());
    runPlot_->showRun(run ? run->id : 0, run ? QString::fromStdString(run->name) : QString());
}

void MainWindow::runDemo()
{
    const std::string databasePath = store_ ? store_->path() : std::string();
    if (databasePath.empty()) {
        showError(tr("No workspace"), tr("Open a workspace first."));
        return;
    }
    // The job opens its own connection: SQLite connections are not shared across threads here.
    const bool started = jobRunner_->start(tr("Demo"), [databasePath](Progress& progress) {
        store::RunStore store = store::RunStore::open(databasePath, store::OpenMode::OpenExisting);
        analysis::DemoOptions options;
        options.resourceDirectory = resourceDirectory();
        analysis::runDemo(store, options, progress);
    });
    if (!started) {
        statusBar()->showMessage(tr("A job is already running"), 4000);
        return;
    }
    jobProgress_->setValue(0);
    jobProgress_->setVisible(true);
    cancelButton_->setVisible(true);
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
    jobRunner_->cancel();
    QMainWindow::closeEvent(event);
}

}  // namespace mismatch::ui

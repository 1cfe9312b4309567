// The main window's tabs: creating the views of each tab (the Runs tab's run browser among them; each page in a
// scroll area, so that no page widens the window past a small screen), wiring them to the store's polling, to the
// run selection and to each other (an empty analysis tab's Start button to its job's dialog), and the tab-side slots
// (the selected runs' plots, the Overview's actions, keeping sensitivity cells in BF16). Which run the table follows
// is in main_window.cpp.
#include "ui/main_window.h"

#include "core/store/analysis_store.h"
#include "ui/dialogs/analysis_dialogs.h"
#include "ui/dialogs/sensitivity_dialog.h"
#include "ui/jobs/cluster_panel.h"
#include "ui/jobs/job_queue.h"
#include "ui/plots/compare_plot.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/run_plot.h"
#include "ui/views/admission_view.h"
#include "ui/views/analysis_data.h"
#include "ui/views/breakdown_view.h"
#include "ui/views/budget_view.h"
#include "ui/views/library_panels.h"
#include "ui/views/overview_view.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/views/recipe_editor.h"
#include "ui/views/run_table_model.h"
#include "ui/views/sensitivity_view.h"

#include <QFileDialog>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QResizeEvent>
#include <QScrollArea>
#include <QScrollBar>
#include <QSplitter>
#include <QStackedWidget>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>

namespace mismatch::ui {

namespace {
// What a tab's scroll area holds: the page, given the holder's whole size. Set directly, a page whose layout has
// word-wrapped labels reports a height for its width (the height its labels prefer, not their least), which
// QScrollArea takes as the page's minimum: the page scrolled when it fitted. The holder asks for the page's
// minimum size only.
class PageHolder : public QWidget {
public:
    PageHolder(QWidget* page, QWidget* parent)
        : QWidget(parent)
        , page_(page)
    {
        page_->setParent(this);
    }
    QSize minimumSizeHint() const override { return page_->minimumSizeHint(); }
    QSize sizeHint() const override { return page_->sizeHint(); }

protected:
    bool event(QEvent* event) override
    {
        if (event->type() == QEvent::LayoutRequest) {
            updateGeometry(); // the page's minimum changed: the scroll area re-reads the holder's
        }
        return QWidget::event(event);
    }
    void resizeEvent(QResizeEvent* event) override
    {
        page_->setGeometry(rect());
        QWidget::resizeEvent(event);
    }

private:
    QWidget* page_;
};

// A tab's page in a scroll area: the page takes the area's whole size when the window is large enough for it and
// scrolls when the window is smaller than the page's minimum size, so that no page's minimum widens or lengthens
// the window past a small screen (1024x700).
QScrollArea* scrollable(QWidget* page, QWidget* parent)
{
    auto* area = new QScrollArea(parent);
    area->setObjectName(page->objectName().isEmpty() ? QString() : page->objectName() + QStringLiteral("Scroll"));
    area->setFrameShape(QFrame::NoFrame);
    area->setFocusPolicy(Qt::NoFocus); // not a stop of its own in the tab order
    area->setWidgetResizable(true);
    area->setWidget(new PageHolder(page, area));
    return area;
}

// Rows of the run table shown at the window's default size, whatever the plots below would take.
constexpr int kRunRowsShown = 8;
} // namespace

QSplitter* MainWindow::createTabs()
{
    QSplitter* browser = createRunsTab();

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
    tabs_->addTab(overview_, tr("&Overview")); // a scroll area already
    tabs_->addTab(scrollable(stack_, this), tr("&Runs"));
    tabs_->addTab(scrollable(modelPanel_, this), tr("&Models"));
    tabs_->addTab(scrollable(promptSetPanel_, this), tr("&Prompt Sets"));
    tabs_->addTab(scrollable(recipeEditor_, this), tr("R&ecipe"));
    tabs_->addTab(scrollable(sensitivityView_, this), tr("&Sensitivity"));
    tabs_->addTab(scrollable(budgetView_, this), tr("&Budget"));
    tabs_->addTab(scrollable(admissionView_, this), tr("&Admission"));
    tabs_->addTab(scrollable(prefixShiftView_, this), tr("Prefix Shif&t"));
    tabs_->addTab(scrollable(breakdownView_, this), tr("Brea&kdown"));
    tabs_->addTab(scrollable(jobPanel_, this), tr("&Jobs"));
    setCentralWidget(tabs_);
    connect(tabs_, &QTabWidget::currentChanged, this, [this](int tab) {
        refreshAnalyses(false);
        if (tab == OverviewTab && store_) {
            overview_->refresh();
        }
    });
    return browser;
}

// The Runs tab: the empty state while the workspace has no runs, else the run browser (the run table over the
// plots of the selected runs).
QSplitter* MainWindow::createRunsTab()
{
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
    // The selected run's budget list in the tab bar's row, which has room for it (the plot's own row of controls has
    // none at 1024 px); it applies to the selected run only.
    plotTabs_->setCornerWidget(runPlot_->budgetControls(), Qt::TopRightCorner);
    connect(plotTabs_, &QTabWidget::currentChanged, this,
        [this](int tab) { runPlot_->budgetControls()->setEnabled(tab == plotTabs_->indexOf(runPlot_)); });

    // The run table keeps the height of its header and kRunRowsShown rows (and a sideways scroll bar) when the
    // window grows or shrinks, the plots take the rest; it gives way first when the window is too short for both.
    // Dragging the handle changes that height, and the window keeps it (mainWindow/browserSplitter).
    auto* browser = new QSplitter(Qt::Vertical, this);
    browser->setObjectName("browserSplitter");
    browser->addWidget(runTable_);
    browser->addWidget(plotTabs_);
    browser->setStretchFactor(0, 0);
    browser->setStretchFactor(1, 1);
    const int tableHeight = runTable_->horizontalHeader()->sizeHint().height()
        + kRunRowsShown * runTable_->verticalHeader()->defaultSectionSize()
        + runTable_->horizontalScrollBar()->sizeHint().height() + 2 * runTable_->frameWidth();
    browser->setSizes({tableHeight, plotTabs_->sizeHint().height()});

    stack_ = new QStackedWidget(this);
    stack_->addWidget(emptyState_);
    stack_->addWidget(browser);
    return browser;
}

void MainWindow::connectTabs()
{
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
    connect(runModel_, &RunTableModel::refreshed, this, [this] {
        updateView();
        runPlot_->tail();
        comparePlot_->tail();
        refreshAnalyses(false);
        followNewRuns();
        attachPendingBudgets();
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
    // An analysis tab with nothing to show offers the job that fills it: the same dialog as the Jobs menu's.
    connect(sensitivityView_, &SensitivityView::startRequested, this, &MainWindow::showSensitivityDialog);
    connect(budgetView_, &BudgetView::startRequested, this, &MainWindow::showCalibrationDialog);
    connect(admissionView_, &AdmissionView::startRequested, this, &MainWindow::showAdmissionDialog);
    connect(prefixShiftView_, &PrefixShiftView::startRequested, this, &MainWindow::showPrefixShiftDialog);
    connect(breakdownView_, &BreakdownView::startRequested, this, &MainWindow::showBreakdownDialog);
    connect(sensitivityView_, &SensitivityView::keepInBf16Requested, this, &MainWindow::keepInBf16);
    connect(sensitivityView_, &SensitivityView::buildRecipeRequested, this,
        [this](std::int64_t scanId) { showRecipeBuildDialog(scanId); });
    connect(jobPanel_, &JobQueuePanel::cancelRequested, this, [this](int id) { requestCancel(id); });
    // A merge of a Slurm submission's units stores runs and results: every view reads the store again.
    connect(jobPanel_->clusterPanel(), &ClusterPanel::storeChanged, this, &MainWindow::refresh);
    connect(jobPanel_->clusterPanel(), &ClusterPanel::statusMessage, this,
        [this](const QString& message) { showStatus(message); });
    connect(modelPanel_, &ModelLibraryPanel::modelsChanged, this, &MainWindow::updateRecipeModels);
    connect(recipeEditor_, &RecipeEditor::fileChanged, this, &MainWindow::updateRecipeTitle);
    connect(recipeEditor_->undoStack(), &QUndoStack::cleanChanged, this, &MainWindow::updateRecipeTitle);
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
        runPlot_->reloadBudgets(); // the calibrations its budget list offers
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

} // namespace mismatch::ui

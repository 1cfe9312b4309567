// The main window's menu bar (File, Edit, View, Jobs, Help) with its actions and shortcuts, and the slots that only
// dispatch to the current tab or a dialog: Copy CLI Command, Export Plot, Export Table, About, Recent Workspaces.
#include "ui/main_window.h"

#include "core/io/recipe_export.h"
#include "core/jobs/job_spec.h"
#include "ui/dialogs/about_dialog.h"
#include "ui/dialogs/help_dialog.h"
#include "ui/dialogs/spec_job_dialog.h"
#include "ui/jobs/job_queue.h"
#include "ui/plots/compare_plot.h"
#include "ui/plots/plot_export.h"
#include "ui/plots/run_plot.h"
#include "ui/views/admission_view.h"
#include "ui/views/breakdown_view.h"
#include "ui/views/budget_view.h"
#include "ui/views/library_panels.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/views/recipe_editor.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QFileDialog>
#include <QMenu>
#include <QMenuBar>
#include <QSettings>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QTableView>
#include <QUndoStack>

namespace mismatch::ui {

void MainWindow::createMenus()
{
    createFileMenu();
    createEditMenu();
    createViewMenu();
    createJobsMenu();
    createHelpMenu();
}

void MainWindow::createFileMenu()
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
}

void MainWindow::createEditMenu()
{
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
}

void MainWindow::createViewMenu()
{
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
}

void MainWindow::createJobsMenu()
{
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
    QAction* follow = jobs->addAction(tr("&Follow Training Log..."), this, &MainWindow::showFollowLogDialog);
    follow->setObjectName(QStringLiteral("followTrainingLogAction"));
    follow->setToolTip(tr("Keep reading a log as its trainer writes it (a cluster job on a shared file system) and "
                          "draw the run as its steps arrive"));
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
}

void MainWindow::createHelpMenu()
{
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    // The guide and the glossary (ui/dialogs/help_dialog.h), one window: opening either again raises it.
    const auto showHelp = [this](HelpDialog::Page page) {
        auto* dialog = findChild<HelpDialog*>(QStringLiteral("helpDialog"));
        if (!dialog) {
            dialog = new HelpDialog(page, this);
            dialog->setAttribute(Qt::WA_DeleteOnClose);
        }
        dialog->showPage(page);
        dialog->show();
        dialog->raise();
    };
    QAction* guide = help->addAction(tr("&Guide"), this, [showHelp] { showHelp(HelpDialog::Page::Guide); });
    guide->setObjectName(QStringLiteral("helpGuideAction"));
    guide->setShortcut(QKeySequence::HelpContents);
    QAction* glossary
        = help->addAction(tr("G&lossary"), this, [showHelp] { showHelp(HelpDialog::Page::Glossary); });
    glossary->setObjectName(QStringLiteral("helpGlossaryAction"));
    help->addSeparator();
    help->addAction(tr("&About Mismatch Lab"), this, &MainWindow::showAbout);
    help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
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

void MainWindow::showAbout()
{
    AboutDialog dialog(this);
    dialog.exec();
}

} // namespace mismatch::ui

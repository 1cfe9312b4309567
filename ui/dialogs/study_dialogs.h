#pragma once
// Dialogs for the jobs that were only in the CLI, each the twin of its command ("Copy CLI Command" runs the same
// job headless) and each calling core's own function:
//   RecipeBuildDialog        `mismatch recipe build`        analysis::buildRecipe
//   TimeToQualityDialog      `mismatch time-to-quality`     the catalogue's time_to_quality job
//   CompareObjectivesDialog  `mismatch compare-objectives`  the catalogue's compare_objectives job
//   ImportLogDialog          `mismatch import verl|tinker|csv|tensorboard`  io::importLog + store::storeExternalRun;
//                            as Follow Training Log, `... --follow`: io::followLog, alongside the job queue; its
//                            "Budget from:" (GUI only) is the budget the Runs tab draws beside the run
//   CompareRunsDialog        `mismatch compare`             the failure rule (metrics::applyFailureRule) between two
//                                                           runs' stored evaluations, shown at once (no job)
// The job dialogs' plain fields (counts, tokens, steps, fractions, flags, names) are made from their job's parameters
// in the catalogue (JobDialog::addParameterField); the pickers, lists, tables and choices of stored results are their
// own.
#include "core/store/run_store.h"
#include "ui/dialogs/job_dialog.h"

#include <QDialog>

class QDoubleSpinBox;
class QLabel;
class QTableWidget;

namespace mismatch::ui {

class RecipeBuildDialog : public JobDialog {
    Q_OBJECT
public:
    RecipeBuildDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent = nullptr);
    // A stored scan to order the cells by (0: scan the model now).
    bool setScan(std::int64_t scanId);
    void setModelDirectory(const QString& directory);
    void setPromptSet(const QString& path);
    void setFormat(const QString& weightChoice);
    void setBudget(double budget); // an explicit budget
    bool setCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step = std::nullopt);
    void setTargetFraction(double fraction);
    void setOutput(const QString& path);
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    QString outputPath() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "recipe_build" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

    std::vector<std::pair<std::string, std::string>> fieldNames() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    void updateScanFields();

    QComboBox* scan_ = nullptr;
    PathPicker* model_ = nullptr;
    PathPicker* prompts_ = nullptr;
    QComboBox* format_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    CalibrationPicker* budget_ = nullptr;
    QDoubleSpinBox* target_ = nullptr;
    QCheckBox* kvCache_ = nullptr;
    QCheckBox* keepEmbedding_ = nullptr; // leave the embedding and lm_head in BF16 (no_embedding)
    QLineEdit* output_ = nullptr;
    QLineEdit* name_ = nullptr;
    bool outputEdited_ = false;
};

class TimeToQualityDialog : public JobDialog {
    Q_OBJECT
public:
    TimeToQualityDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    void setRunFile(const QString& path);
    void setRecipe(const QString& path);
    void setStaleness(int staleness);
    void setSynchronous(bool synchronous);
    void setTargetStep(int step); // 0: the base's last evaluated step
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "time_to_quality" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;


protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* runFile_ = nullptr;
    PathPicker* recipe_ = nullptr;
    QSpinBox* staleness_ = nullptr;
    QCheckBox* synchronous_ = nullptr;
    QSpinBox* targetStep_ = nullptr;
};

class CompareObjectivesDialog : public JobDialog {
    Q_OBJECT
public:
    CompareObjectivesDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    void setRunFile(const QString& path);
    void setObjectives(const QStringList& names);
    void setNoise(const QString& sigmas);
    void setRecipes(const QString& paths);
    void setSteps(int steps); // 0: the run file's
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "compare_objectives" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QStringList objectives() const;

    PathPicker* runFile_ = nullptr;
    std::vector<QCheckBox*> objectives_;
    QLineEdit* noise_ = nullptr;
    QLineEdit* recipes_ = nullptr;
    QSpinBox* steps_ = nullptr;
    QSpinBox* rlMaxTokens_ = nullptr;
    QSpinBox* group_ = nullptr;
    QSpinBox* window_ = nullptr;
    QDoubleSpinBox* collapse_ = nullptr;
};

class ImportLogDialog : public JobDialog {
    Q_OBJECT
public:
    // Import reads the file once (the catalogue's import job); Follow keeps reading it as its trainer writes it and
    // stores each new step as it arrives (io::followLog, `mismatch import ... --follow`), until cancelled in the
    // Jobs tab. A follow may name a file that does not exist yet (it waits for it), and a run name that an import of
    // the same file from the same format has (it continues that run).
    enum class Mode { Import, Follow };
    ImportLogDialog(const QString& workspaceDirectory, QWidget* parent = nullptr,
        const store::RunStore* store = nullptr, Mode mode = Mode::Import);
    Mode mode() const { return mode_; }
    void setSource(const QString& source); // verl, tinker, csv or tensorboard
    void setFile(const QString& path);
    void setName(const QString& name);
    void setMap(const QString& entries); // "COLUMN=MEASURE; ..."
    void setPollSeconds(double seconds); // Follow: seconds between two reads of the file
    // "Budget from:": none (the default: an outside trainer's student is not known to be a calibrated one), or a
    // stored calibration's bracket at one step, which the main window draws beside the run in the Runs tab for the
    // rest of the session (RunPlot::setRunBudget). Not part of the job or its command: it only changes what is shown.
    bool setBudget(std::int64_t calibrationId, std::optional<std::int64_t> step = std::nullopt); // 0: none
    CalibrationPicker* budgetPicker() const { return budget_; }
    std::int64_t budgetCalibration() const;
    std::optional<std::int64_t> budgetStep() const;
    // The run the job stores into: the name given, else the command's default ("SOURCE FILE-NAME").
    QString runName() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's import_verl / import_tinker / import_csv / import_tensorboard job (core/jobs/model_jobs.h);
    // nullopt when following (a follow runs until it is stopped: no job file runs one).
    std::optional<jobs::JobSpec> spec() const override;
    // Follow runs alongside the job queue (JobQueue::Lane::Alongside): it waits on the trainer, not on the cores.
    bool runsAlongsideQueue() const override { return mode_ == Mode::Follow; }

    std::vector<std::pair<std::string, std::string>> fieldNames() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QStringList mapEntries() const;
    // The import job of the fields (what spec() returns when importing).
    jobs::JobSpec importSpec() const;
    // Follow: the run of that name that this follow would continue (0: none, a new run); `problem` says why the
    // name cannot be used.
    std::int64_t continuedRun(QString* problem) const;

public:
    QTableWidget* previewTable() const { return preview_; }
    QString previewSummary() const;

private:
    Mode mode_ = Mode::Import;
    QDoubleSpinBox* poll_ = nullptr;
    QComboBox* source_ = nullptr;
    PathPicker* file_ = nullptr;
    QLineEdit* name_ = nullptr;
    QLineEdit* map_ = nullptr;
    CalibrationPicker* budget_ = nullptr;
    // The mapping preview: the log read as the import would read it (nothing stored), refreshed as the fields
    // change; its table lists each logged key read, the measure and estimator it lands in and on how many steps.
    void refreshPreview();
    QTableWidget* preview_ = nullptr;
    QLabel* previewSummary_ = nullptr;
    QString previewError_;
    bool previewNotYet_ = false; // the preview's error is only that the log has no usable line yet
};

// The failure rule between a run and its baseline at one step both evaluated (as `mismatch compare`): the verdict,
// the relative quality change and the paired bootstrap interval, computed when the inputs change.
class CompareRunsDialog : public QDialog {
    Q_OBJECT
public:
    CompareRunsDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent = nullptr);
    bool setRuns(std::int64_t run, std::int64_t baseline);
    bool setStep(std::int64_t step);
    void setThreshold(double fraction);
    QString resultText() const;
    // "fail", "pass" or "" (no verdict: a problem with the inputs, shown in resultText()).
    QString verdict() const { return verdict_; }
    QString cliCommand() const;

private:
    void fillSteps();
    void compare();

    QString workspace_;
    const store::RunStore* store_;
    QComboBox* run_ = nullptr;
    QComboBox* baseline_ = nullptr;
    QComboBox* step_ = nullptr;
    QDoubleSpinBox* threshold_ = nullptr;
    QDoubleSpinBox* confidence_ = nullptr;
    QSpinBox* resamples_ = nullptr;
    QLabel* result_ = nullptr;
    QLabel* command_ = nullptr;
    QString verdict_;
};

} // namespace mismatch::ui

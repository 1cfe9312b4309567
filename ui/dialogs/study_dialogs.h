#pragma once
// Dialogs for the jobs that were only in the CLI, each the twin of its command ("Copy CLI Command" runs the same
// job headless) and each calling core's own function:
//   RecipeBuildDialog        `mismatch recipe build`        analysis::buildRecipe
//   TimeToQualityDialog      `mismatch time-to-quality`     the catalogue's time_to_quality job
//   CompareObjectivesDialog  `mismatch compare-objectives`  the catalogue's compare_objectives job
//   ImportLogDialog          `mismatch import verl|tinker|csv`  io::importLog + store::storeExternalRun
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
    ImportLogDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    void setSource(const QString& source); // verl, tinker or csv
    void setFile(const QString& path);
    void setName(const QString& name);
    void setMap(const QString& entries); // "COLUMN=MEASURE; ..."
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's import_verl / import_tinker / import_csv job (core/jobs/model_jobs.h).
    std::optional<jobs::JobSpec> spec() const override;

    std::vector<std::pair<std::string, std::string>> fieldNames() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QString runName() const;
    QStringList mapEntries() const;

public:
    QTableWidget* previewTable() const { return preview_; }
    QString previewSummary() const;

private:
    QComboBox* source_ = nullptr;
    PathPicker* file_ = nullptr;
    QLineEdit* name_ = nullptr;
    QLineEdit* map_ = nullptr;
    // The mapping preview: the log read as the import would read it (nothing stored), refreshed as the fields
    // change; its table lists each logged key read, the measure and estimator it lands in and on how many steps.
    void refreshPreview();
    QTableWidget* preview_ = nullptr;
    QLabel* previewSummary_ = nullptr;
    QString previewError_;
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

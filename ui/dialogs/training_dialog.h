#pragma once
// "Start Training Run": a form for a training run (name, student, teacher, prompts, objective, steps, batch,
// learning rate, rollout recipe, staleness, loop, noise, evaluation, seed), filled from a run file when one is
// chosen (every setting the form does not show is kept from it). Validated as you type: a problem names the field
// (or the run file, line and column); the run name is checked by core's rule (train::runNameProblem, runNameTaken:
// a name a training run of the workspace has already is refused, as `mismatch train` refuses it). Start trains the
// chosen run file as it is when the form was not changed; otherwise the form is written as a run file under
// WORKSPACE/runs/NAME.json (valid for `mismatch train`, temporary file + rename) and that file is trained. The
// headless command shown is the one that trains the same file. The job itself is trainingJob(): core's runTraining
// on its own store connection, off the GUI thread.
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "ui/jobs/job_runner.h"

#include <QDialog>

#include <optional>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace mismatch::ui {

class PathPicker;

class TrainingDialog : public QDialog {
    Q_OBJECT
public:
    TrainingDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);

    // Loads a run file into the form (its errors are shown, naming the file, line and column).
    void setRunFile(const QString& path);
    QString runFile() const;
    // True when the form (or the run file) describes a valid run that can start.
    bool runFileValid() const { return valid_; }
    QString summaryText() const;
    QString errorText() const { return error_; }
    // The headless command that trains effectiveRunFile().
    QString cliCommand() const;
    QPushButton* startButton() const { return start_; }
    QString runName() const { return runName_; }
    // The file the job trains: the chosen run file when the form is unchanged, else the one the form writes.
    QString effectiveRunFile() const;
    // True when Start writes the form as a new run file.
    bool writesRunFile() const;
    // Writes the form's run file (when writesRunFile()); false with errorText() when it cannot be written.
    bool writeRunFile();
    // The run the form describes (valid when runFileValid()).
    const std::optional<train::RunConfig>& config() const { return config_; }

    // Form fields, for tests and for filling the form from code.
    void setName(const QString& name);
    void setStudent(const QString& directory);
    void setTeacher(const QString& directory);
    void setPrompts(const QString& path);
    void setObjective(const QString& name);
    void setSteps(int steps);
    void setBatch(int promptsPerStep, int samplesPerPrompt);
    void setRecipe(const QString& path);
    void setEvaluation(int every, const QString& prompts, int count);

private:
    // Why the rollout recipe does not fit the student ("" when it does, or when there is none).
    QString recipeProblem() const;
    void validate();
    void loadIntoForm(const train::RunConfig& config);
    // The run the form describes, parsed by core as a file would be (InputError with the field's key path).
    train::RunConfig formConfig() const;

    QString workspace_;
    const store::RunStore* store_ = nullptr;
    PathPicker* file_ = nullptr;
    QLineEdit* name_ = nullptr;
    PathPicker* student_ = nullptr;
    PathPicker* teacher_ = nullptr;
    PathPicker* prompts_ = nullptr;
    QComboBox* objective_ = nullptr;
    QSpinBox* steps_ = nullptr;
    QSpinBox* promptsPerStep_ = nullptr;
    QSpinBox* samplesPerPrompt_ = nullptr;
    QDoubleSpinBox* learningRate_ = nullptr;
    PathPicker* recipe_ = nullptr;
    QSpinBox* staleness_ = nullptr;
    QCheckBox* asynchronous_ = nullptr;
    QDoubleSpinBox* noise_ = nullptr;
    QSpinBox* evaluationEvery_ = nullptr;
    PathPicker* evaluationPrompts_ = nullptr;
    QSpinBox* evaluationCount_ = nullptr;
    QSpinBox* seed_ = nullptr;
    QComboBox* device_ = nullptr; // "runDevice": where the run computes (RunConfig::device)
    QLabel* summary_ = nullptr;
    QLabel* command_ = nullptr;
    QPushButton* start_ = nullptr;
    QPushButton* copy_ = nullptr;
    bool loading_ = false;
    bool valid_ = false;
    QString error_;
    QString runName_;
    std::optional<train::RunConfig> loaded_; // the chosen run file as parsed
    std::optional<train::RunConfig> config_; // what the form describes
};

// `mismatch --workspace WORKSPACE train RUNFILE` with shell quoting.
QString trainingCliCommand(const QString& workspaceDirectory, const QString& runFile);
// The job: loads the run file, opens the workspace's store on the job's thread and trains; Progress carries
// cancel (the run is then stored as cancelled with the steps done so far).
JobWorker::Job trainingJob(const QString& workspaceDirectory, const QString& runFile);
// Shell quoting for commands shown to the user.
QString shellQuote(const QString& text);
// The id of a run named `name` in `store`, when there is one (names should be unique in a workspace).
std::optional<std::int64_t> runNamed(const store::RunStore& store, const std::string& name);

} // namespace mismatch::ui

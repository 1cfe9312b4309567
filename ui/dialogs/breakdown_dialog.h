#pragma once
// "Start Mismatch Breakdown": the twin of `mismatch breakdown` (its "Copy CLI Command" runs the same job headless).
// A student checkpoint, either a candidates file (as for the admission check) or one configuration (recipe,
// staleness with older checkpoints, noise), the prompt set, count and tokens, and the Shapley limit (the plain fields
// made from the catalogue's "breakdown" parameters). The job is core's runBreakdown; the Breakdown tab shows its
// result.
#include "ui/dialogs/job_dialog.h"

class QDoubleSpinBox;

namespace mismatch::ui {

class BreakdownDialog : public JobDialog {
    Q_OBJECT

public:
    BreakdownDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent = nullptr);
    void setModelDirectory(const QString& directory);
    void setCandidates(const QString& path); // empty: the one configuration below
    void setRecipe(const QString& path);
    void setStaleness(int steps, const QString& history = {}); // history: directories separated by ';'
    void setNoise(double sigma, int seed = 0);
    void setPromptSet(const QString& path);
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    void setShapleyMax(int sources);
    QString modelDirectory() const;
    QString candidates() const;
    QString promptSet() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "breakdown" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;
    std::vector<std::pair<std::string, std::string>> fieldNames() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* model_ = nullptr;
    PathPicker* candidates_ = nullptr;
    PathPicker* recipe_ = nullptr;
    QSpinBox* staleness_ = nullptr;
    QLineEdit* history_ = nullptr;
    QDoubleSpinBox* noise_ = nullptr;
    QSpinBox* noiseSeed_ = nullptr;
    PathPicker* prompts_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    QSpinBox* shapleyMax_ = nullptr;
};

} // namespace mismatch::ui

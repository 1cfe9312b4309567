#pragma once
// Dialogs that start the analyses from the GUI, each the twin of a CLI command (its "Copy CLI Command" runs the
// same job headless): "Start Calibration" (`mismatch calibrate`), "Start Admission Check" (`mismatch admit`) and
// "Start Prefix-Shift Analysis" (`mismatch prefix-shift`). The jobs are core's runCalibration, runAdmission and
// runPrefixShift, queued off the GUI thread; their results land in the workspace, where the Budget, Admission
// and Prefix Shift tabs show them.
#include "core/store/run_store.h"
#include "ui/job_dialog.h"

class QDoubleSpinBox;

namespace mismatch::ui {

class CalibrationDialog : public JobDialog {
    Q_OBJECT

public:
    CalibrationDialog(const QString& workspaceDirectory, QWidget* parent = nullptr);
    void setRunFile(const QString& path);
    void setQuick(bool quick);
    void setNoise(const QString& sigmas); // "0.05, 0.1"
    void setRecipes(const QString& paths); // separated by ';'
    void setStaleness(const QString& values);
    void setSteps(const QString& steps);
    void setMargin(double margin);
    void setName(const QString& name);
    QString runFile() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QLineEdit* runFile_ = nullptr;
    QLineEdit* name_ = nullptr;
    QCheckBox* quick_ = nullptr;
    QLineEdit* noise_ = nullptr;
    QLineEdit* recipes_ = nullptr;
    QLineEdit* staleness_ = nullptr;
    QLineEdit* steps_ = nullptr;
    QDoubleSpinBox* margin_ = nullptr;
};

class AdmissionDialog : public JobDialog {
    Q_OBJECT

public:
    // `store` (may be null) lists the calibrations to take the threshold from.
    AdmissionDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent = nullptr);
    void setCheckpoints(const QString& directories); // separated by ';', training order
    void setHistory(const QString& directories);
    void setCandidates(const QString& path);
    void setProbeSet(const QString& path);
    // A stored calibration (0: an explicit threshold) and its step (0: its only bracket).
    void setCalibration(std::int64_t calibrationId, std::int64_t step = 0);
    void setThreshold(double threshold);
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    QString checkpoints() const;
    QString candidates() const;
    QString probeSet() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QLineEdit* checkpoints_ = nullptr;
    QLineEdit* history_ = nullptr;
    QLineEdit* candidates_ = nullptr;
    QLineEdit* probe_ = nullptr;
    QComboBox* calibration_ = nullptr;
    QSpinBox* step_ = nullptr;
    QDoubleSpinBox* threshold_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
};

class PrefixShiftDialog : public JobDialog {
    Q_OBJECT

public:
    PrefixShiftDialog(const QString& workspaceDirectory, QWidget* parent = nullptr);
    void setModelDirectory(const QString& directory);
    void setRecipe(const QString& path); // empty: the BF16 engine (with noise)
    void setNoise(double sigma, int seed = 0);
    void setPromptSet(const QString& path);
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    void setCap(double cap);
    void setStoredPairs(int pairs);
    QString modelDirectory() const;
    QString recipe() const;
    QString promptSet() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    QLineEdit* model_ = nullptr;
    QLineEdit* recipe_ = nullptr;
    QDoubleSpinBox* noise_ = nullptr;
    QSpinBox* noiseSeed_ = nullptr;
    QLineEdit* prompts_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    QDoubleSpinBox* cap_ = nullptr;
    QSpinBox* storedPairs_ = nullptr;
};

} // namespace mismatch::ui

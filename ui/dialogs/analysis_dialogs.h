#pragma once
#include "core/analysis/protocol.h"
// Dialogs that start the analyses from the GUI, each the twin of a CLI command (its "Copy CLI Command" runs the
// same job headless): "Start Calibration" (`mismatch calibrate`), "Start Admission Check" (`mismatch admit`) and
// "Start Prefix-Shift Analysis" (`mismatch prefix-shift`). The jobs are core's runCalibration, runAdmission and
// runPrefixShift, queued off the GUI thread; their results land in the workspace, where the Budget, Admission
// and Prefix Shift tabs show them. Their plain fields (counts, tokens, seeds, sigmas, flags) are made from the job's
// parameters in the catalogue (JobDialog::addParameterField); the pickers, lists and the calibration choice are
// their own.
#include "core/store/run_store.h"
#include "ui/dialogs/job_dialog.h"

#include <optional>

class QDoubleSpinBox;

namespace mismatch::ui {

class CalibrationDialog : public JobDialog {
    Q_OBJECT

public:
    CalibrationDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    void setRunFile(const QString& path);
    void setQuick(bool quick);
    void setNoise(const QString& sigmas); // "0.05, 0.1"
    void setRecipes(const QString& paths); // separated by ';'
    void setStaleness(const QString& values);
    void setSteps(const QString& steps);
    void setMargin(double margin);
    void setName(const QString& name);
    void setReplicates(int seeds);
    void setMaxReplicates(int seeds);
    QString runFile() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "calibrate" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* runFile_ = nullptr;
    QLineEdit* name_ = nullptr;
    QCheckBox* quick_ = nullptr;
    QLineEdit* noise_ = nullptr;
    QLineEdit* recipes_ = nullptr;
    QLineEdit* staleness_ = nullptr;
    QLineEdit* steps_ = nullptr;
    QDoubleSpinBox* margin_ = nullptr;
    QSpinBox* replicates_ = nullptr;
    QSpinBox* maxReplicates_ = nullptr; // seeds an undecided configuration may grow to
};

class AdmissionDialog : public JobDialog {
    Q_OBJECT

public:
    // `store` (may be null) lists the calibrations to take the threshold from, and the registered models and prompt
    // sets.
    AdmissionDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent = nullptr);
    void setCheckpoints(const QString& directories); // separated by ';', training order
    void setHistory(const QString& directories);
    void setCandidates(const QString& path);
    // One recipe to screen instead of a candidates file (`admit --recipe`): while it is set the candidates file is
    // not used (greyed). Empty: the candidates file.
    void setRecipe(const QString& path);
    QString recipe() const;
    void setProbeSet(const QString& path);
    // A stored calibration (0: an explicit threshold) and the step of one of its brackets (default: its latest).
    // False when the workspace has no such calibration or bracket.
    bool setCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step = std::nullopt);
    void setThreshold(double threshold);
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    // With a calibration: screen with the probe set, count and tokens given here although the calibration's
    // protocol differs (the decisions are labelled "other protocol"); false (default): the calibration's protocol.
    void setOtherProtocol(bool other);
    // How many of each candidate's generations are stored token by token for the drill-down (the catalogue's
    // default, 8, unless changed; 0 stores none).
    void setStoredGenerations(int generations);
    QString checkpoints() const;
    QString candidates() const;
    QString probeSet() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "admit" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

    CalibrationPicker* calibrationPicker() const { return calibration_; }

    std::vector<std::pair<std::string, std::string>> fieldNames() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* checkpoints_ = nullptr;
    QLineEdit* history_ = nullptr;
    PathPicker* candidates_ = nullptr;
    PathPicker* recipe_ = nullptr;
    PathPicker* probe_ = nullptr;
    CalibrationPicker* calibration_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    QCheckBox* otherProtocol_ = nullptr;
    QSpinBox* storedGenerations_ = nullptr;
    // The chosen calibration's stored measurement protocol (nullopt: none chosen, or made before protocols).
    std::optional<analysis::MeasurementProtocol> calibrationProtocol() const;
    bool underCalibrationProtocol() const; // a calibration is chosen and its protocol is used
    void updateProtocolFields();
};

class PrefixShiftDialog : public JobDialog {
    Q_OBJECT

public:
    PrefixShiftDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
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
    // The catalogue's "prefix_shift" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* model_ = nullptr;
    PathPicker* recipe_ = nullptr;
    QDoubleSpinBox* noise_ = nullptr;
    QSpinBox* noiseSeed_ = nullptr;
    PathPicker* prompts_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    QDoubleSpinBox* cap_ = nullptr;
    QSpinBox* storedPairs_ = nullptr;
};

} // namespace mismatch::ui

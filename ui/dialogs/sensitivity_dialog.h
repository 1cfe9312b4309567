#pragma once
// "Start Sensitivity Scan": model, prompt set, the format each cell is quantized to, the activations, the
// measurement's size and the cells skipped (the plain fields made from the catalogue's "sensitivity" parameters);
// shows the equivalent headless command and queues the scan (core's runSensitivity, off the GUI thread). The scan's
// cells are stored as they are measured, so the heatmap fills in while it runs.
#include "ui/dialogs/job_dialog.h"

namespace mismatch::ui {

class SensitivityDialog : public JobDialog {
    Q_OBJECT

public:
    SensitivityDialog(
        const QString& workspaceDirectory, QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    // An empty path keeps the one the dialog started at (the main window passes the path used last, empty until a
    // scan was started).
    void setModelDirectory(const QString& directory);
    void setPromptSet(const QString& path);
    void setFormat(const QString& weightChoice); // "fp8_e4m3/block128", "int4/group128", ...
    void setCount(int prompts);
    void setMaxTokens(int tokens);
    QString modelDirectory() const;
    QString promptSet() const;
    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    // The catalogue's "sensitivity" job the fields make (absolute paths).
    std::optional<jobs::JobSpec> spec() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    PathPicker* model_ = nullptr;
    PathPicker* prompts_ = nullptr;
    QComboBox* format_ = nullptr;
    QComboBox* activations_ = nullptr;
    QSpinBox* count_ = nullptr;
    QSpinBox* maxTokens_ = nullptr;
    QComboBox* kvFormat_ = nullptr; // the KV cells' format (fp8_e4m3 or a vLLM per-token-head format)
    QCheckBox* noKv_ = nullptr; // skip each layer's KV-cache cell
    QCheckBox* noEmbedding_ = nullptr; // skip the embedding / lm_head cells
};

} // namespace mismatch::ui

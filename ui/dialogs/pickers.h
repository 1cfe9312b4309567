#pragma once
// Pickers for the job dialogs' inputs, so that nobody has to type a path the workspace already knows: registered
// models and prompt sets, recipes (built-in, built into the workspace, stored by the recipe builder), run files
// (built-in and those the training form wrote), candidate lists; each an editable list (a typed path is taken as
// it is) with a Browse... button. CalibrationPicker chooses a stored calibration and one of the steps it has a
// bracket at (or an explicit threshold, or none).
#include "core/store/run_store.h"

#include <QWidget>

#include <cstdint>
#include <optional>
#include <vector>

class QComboBox;
class QDoubleSpinBox;
class QToolButton;

namespace mismatch::ui {

enum class PickKind { ModelDirectory, PromptSet, Recipe, RunFile, Candidates, AnyFile };

struct PickChoice {
    QString label; // what the list shows: "arith-student (built-in)"
    QString path;
};

// What a picker of `kind` offers: entries registered in `store` (may be null), the built-in resources and the
// workspace's own files (WORKSPACE/runs, WORKSPACE/recipes), each path once.
std::vector<PickChoice> pickChoices(PickKind kind, const store::RunStore* store, const QString& workspaceDirectory);

// The entry a new dialog starts at: for a model, the demo's student (resources/models/arith-student); for a prompt
// set, its probe set (resources/prompts/arith-probe.jsonl), where the main window starts the other analysis dialogs;
// else the first entry offered (a registered one comes first). Empty for the other kinds and when nothing is offered.
QString startingChoice(PickKind kind, const std::vector<PickChoice>& choices);

class PathPicker : public QWidget {
    Q_OBJECT
public:
    PathPicker(PickKind kind, QWidget* parent = nullptr);

    void setChoices(const std::vector<PickChoice>& choices);
    // Selects startingChoice() of the entries offered (nothing changes when there is none).
    void selectStartingChoice();
    // The chosen entry's path, or the typed text (trimmed).
    QString path() const;
    // Selects the entry with this path, or shows the path as typed text.
    void setPath(const QString& path);
    QComboBox* comboBox() const { return box_; }
    QToolButton* browseButton() const { return browse_; }

signals:
    void pathChanged(const QString& path);

private:
    PickKind kind_;
    QComboBox* box_ = nullptr;
    QToolButton* browse_ = nullptr;
};

// "an explicit threshold" or a stored calibration, and the step of one of its brackets.
class CalibrationPicker : public QWidget {
    Q_OBJECT
public:
    // `allowExplicit`: the first entry is `explicitLabel` ("an explicit threshold"; then the value box is enabled).
    CalibrationPicker(
        const store::RunStore* store, bool allowExplicit, QWidget* parent = nullptr, const QString& explicitLabel = {});
    // Where a budget is optional (drawn beside an imported run): a first entry `label` ("none") that gives no
    // threshold, chosen now. For a picker made without the explicit threshold.
    void offerNone(const QString& label);

    // 0 when the explicit threshold (or none) is chosen.
    std::int64_t calibrationId() const;
    // The bracket step chosen (nullopt: explicit threshold, or a calibration without brackets).
    std::optional<std::int64_t> step() const;
    // The threshold the choice gives (the bracket's threshold, else its largest passing mismatch; the box's value for
    // an explicit threshold); nullopt when the chosen bracket has none, or none is chosen.
    std::optional<double> threshold() const;
    // Why a chosen calibration gives no threshold, as a dialog's status line says it of its "Budget from:" row ("" when
    // it gives one, or nothing needs one).
    QString thresholdProblem() const;
    double explicitThreshold() const;
    // Selects calibration `id` (0: explicit) and, when given, its bracket at `step`. False when not offered.
    bool select(std::int64_t id, std::optional<std::int64_t> step = std::nullopt);
    void setExplicitThreshold(double value);
    int stepCount() const;
    QComboBox* calibrationBox() const { return calibration_; }
    QComboBox* stepBox() const { return step_; }
    QDoubleSpinBox* thresholdBox() const { return threshold_; }

signals:
    void changed();

private:
    void fillSteps();

    const store::RunStore* store_;
    bool noneOffered_ = false;
    QComboBox* calibration_ = nullptr;
    QComboBox* step_ = nullptr;
    QDoubleSpinBox* threshold_ = nullptr;
};

} // namespace mismatch::ui

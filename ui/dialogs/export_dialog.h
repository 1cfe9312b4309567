#pragma once
// File > Export Recipe: the recipe resolved for the chosen model, as a target tool reads it and as a person runs
// it. For the chosen target (vLLM, SGLang, llm-compressor, compressed-tensors, verl, ModelOpt) and its form, every
// file `mismatch export --out DIR` writes is shown in a tab (the config file, the ready-to-run command lines,
// scripts and override blocks, README.txt), with the warnings (where the target runs something other than the
// recipe) above; "Copy" copies the shown file, "Save to Folder..." writes them all (each through a temporary file),
// and the equivalent `mismatch export` command is shown. A recipe the target cannot express shows why instead. For
// verl, a teacher turns the export into on-policy distillation (objective, top-k, TIS/MIS correction), as
// `mismatch export --to verl --teacher ...` writes it.
#include "core/io/recipe_export.h"
#include "core/quant/recipe.h"

#include <QDialog>

#include <optional>
#include <vector>

class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QDoubleSpinBox;
class QSpinBox;
class QTabWidget;

namespace mismatch::ui {

class ExportDialog : public QDialog {
    Q_OBJECT
public:
    // `recipeFile`: where the recipe is saved ("" when unsaved: the command then names RECIPE); `modelDirectory`:
    // the model it is resolved for (written into the ready-to-run commands).
    ExportDialog(const quant::Recipe& recipe, const quant::RecipePlan& plan, const QString& recipeFile,
        const QString& modelDirectory, QWidget* parent = nullptr);

    void setTarget(const QString& target); // "vllm", "sglang", ...
    void setVllmForm(const QString& form); // online | checkpoint
    void setVerlRollout(const QString& rollout); // vllm | sglang
    // verl on-policy distillation, as `--teacher T --objective O [--top-k K] [--correction C --correction-cap X]`
    // (an empty teacher: a plain rollout export). `topK` counts for opd_topk only, `cap` for tis and mis only.
    void setVerlDistillation(
        const QString& teacher, const QString& objective, int topK = 64, const QString& correction = "none", double cap = 2.0);
    // The files shown (empty when the target cannot express the recipe: errorText() says why).
    const std::vector<io::ExportFile>& files() const { return files_; }
    QString errorText() const;
    QString warningsText() const;
    QString commandText() const;
    // The file in the current tab, as "Copy" puts it on the clipboard.
    QString currentText() const;
    // Writes every file into `directory`; false with `error` set when it cannot.
    bool saveTo(const QString& directory, QString* error = nullptr) const;
    // The recipe changed (the fix below applied to the open recipe): shows the target's files for it.
    void setRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan);
    // Whether the target refuses the recipe for its quantized embedding or lm_head (the button that keeps them in
    // BF16 is shown).
    bool offersEmbeddingFix() const;
    // When the recipe is not exportable to the chosen target: the other targets that take it as it is (each a button
    // "Export for TARGET instead" that switches the target), so a refusal never dead-ends.
    QStringList alternativeTargets() const;

signals:
    // "Keep the Embedding and lm_head in BF16" was pressed: the window adds that rule to the open recipe (undoable)
    // and calls setRecipe.
    void keepEmbeddingInBf16Requested();

private:
    void refresh();
    std::optional<io::VerlDistillation> distillation() const;
    void showAlternatives(const io::ExportOptions& refused);

    quant::Recipe recipe_;
    quant::RecipePlan plan_;
    QString recipeFile_;
    QString modelDirectory_;
    std::vector<io::ExportFile> files_;
    QComboBox* target_ = nullptr;
    QComboBox* vllmForm_ = nullptr;
    QComboBox* verlRollout_ = nullptr;
    QLineEdit* teacher_ = nullptr; // verl OPD: the teacher (empty: no distillation)
    QComboBox* objective_ = nullptr;
    QSpinBox* topK_ = nullptr;
    QComboBox* correction_ = nullptr;
    QDoubleSpinBox* correctionCap_ = nullptr;
    QLabel* error_ = nullptr;
    QPushButton* keepEmbedding_ = nullptr;
    QWidget* alternatives_ = nullptr; // "Targets that take this recipe as it is:" and a button per target
    QStringList alternativeTargets_;
    QLabel* warnings_ = nullptr;
    QLabel* command_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    QPushButton* copy_ = nullptr;
    QPushButton* save_ = nullptr;
};

} // namespace mismatch::ui

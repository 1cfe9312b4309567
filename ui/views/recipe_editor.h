#pragma once
// The recipe editor. The module table shows, for the chosen model, the resolved precision of every module:
// one row per layer (weights of q, k, v, o, gate, up, down; the layer's activations; its KV cache) plus the
// embedding and lm_head. Editing a cell (or several selected cells of a column at once) appends an ordered rule
// to the recipe; the rule list, the top-level defaults and the YAML text are edited directly. Every change is
// one undoable command; after each the recipe is validated (syntax, then resolution against the model) and the
// weight memory and KV-cache capacity are summarized against BF16. Files are written to a temporary name and
// renamed.
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <QAbstractTableModel>
#include <QWidget>

#include <optional>
#include <utility>
#include <vector>

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QTableView;
class QTableWidget;
class QTabWidget;
class QUndoStack;
class QVBoxLayout;

namespace mismatch::ui {

class RecipeEditor;

// Choice strings used by the table cells and the rule list: "bf16", "fp8_e4m3/block128", "int4/group128",
// "nvfp4/group16", ...; for activations "bf16", "fp8_e4m3", "mxfp8", "mxfp4", "nvfp4"; for the KV cache "bf16",
// "fp8_e4m3/per_tensor", "fp8_e4m3/per_head".
std::vector<std::string> weightChoices();
std::vector<std::string> activationChoices();
std::vector<std::string> kvChoices();
// Parses a choice string; nullopt when it is not one of the choices.
std::optional<quant::WeightPrecision> parseWeightChoice(const std::string& text);
std::optional<quant::ActivationPrecision> parseActivationChoice(const std::string& text);
std::optional<quant::KvPrecision> parseKvChoice(const std::string& text);

class RecipeTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    // Columns 0-6: the projections' weights; then the layer's activations and its KV cache.
    static constexpr int kActivationsColumn = 7;
    static constexpr int kKvColumn = 8;
    static constexpr int kColumnCount = 9;

    explicit RecipeTableModel(RecipeEditor* editor);

    // Row 0: model.embed_tokens, rows 1..L: layers 0..L-1, row L+1: lm_head (only column 0 holds a value in the
    // first and last rows).
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role) override;

    // Layer of a row (-1 for the embedding row, -2 for lm_head).
    std::int64_t layerOfRow(int row) const;
    int rowOfLayer(std::int64_t layer) const { return static_cast<int>(layer) + 1; }
    bool isCellEditable(int row, int column) const;
    void reset();

private:
    RecipeEditor* editor_;
};

// A model the recipe can be resolved against: its name in the chooser, its directory (for CLI commands) and
// its configuration.
struct RecipeModel {
    QString name;
    QString directory;
    model::ModelConfig config;
};

class RecipeEditor : public QWidget {
    Q_OBJECT
public:
    explicit RecipeEditor(QWidget* parent = nullptr);

    // Models the recipe can be resolved against; keeps the chosen one when it is still there.
    void setModels(const std::vector<RecipeModel>& models);
    bool selectModel(const QString& name);
    const model::ModelConfig* modelConfig() const;
    // The chosen model's directory ("" when none is chosen).
    QString modelDirectory() const;

    // Replaces the recipe (clears undo history).
    void setRecipe(const quant::Recipe& recipe, const QString& filePath = {});
    const quant::Recipe& recipe() const { return recipe_; }
    // The plan of the current recipe for the chosen model, when it resolves.
    const std::optional<quant::RecipePlan>& plan() const { return plan_; }

    // Opens a recipe file; on error shows it and returns false (the current recipe stays).
    bool openFile(const QString& path);
    // Writes the recipe (YAML, or JSON for a .json name) to a temporary file and renames it over `path`. Refuses
    // (returns false, message in lastError()) a recipe with a syntax error.
    bool saveFile(const QString& path);
    // Writes the recipe as `target` ("vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt"; see
    // core/io/recipe_export.h) resolved for the chosen model, through a temporary file. False with lastError()
    // when the recipe does not resolve or the target cannot express it.
    bool exportFor(const QString& target, const QString& path);
    QString filePath() const { return filePath_; }
    QString lastError() const { return lastError_; }

    // Edits, each one undoable command.
    // Sets the cells (table rows/columns, see RecipeTableModel) to `choice`; several cells of one column become
    // one rule with a layer set pattern ("model.layers.{0-3,7}.mlp.down_proj").
    bool setCells(const std::vector<std::pair<int, int>>& cells, const QString& choice);
    void setDefaults(const QString& weights, const QString& activations, const QString& kvCache);
    void setName(const QString& name);
    // Rule edits: `field` 0 = match, 1 = weights, 2 = activations, 3 = kv_cache; empty text clears a field.
    bool setRuleField(int rule, int field, const QString& text);
    void addRule(const QString& match);
    void removeRule(int rule);
    void moveRule(int rule, int delta);
    // Parses `text` as the whole recipe and makes it current; on a syntax error shows the message (with line
    // and column) and returns false. A text that parses clears an earlier error even when it changes nothing.
    bool applyText(const QString& text);
    // Keeps sensitivity cells' modules in BF16 (layer, module group as a scan names them: q..down, kv,
    // embed_tokens, lm_head, embed_lm_head): one rule per group over its layers ("model.layers.{0,5}.mlp.down_proj"
    // with BF16 weights and activations; the layers' attention block with a BF16 KV cache), as one undoable
    // command. False (lastError()) for an unknown group.
    bool keepInBf16(const std::vector<std::pair<std::int64_t, std::string>>& cells);

    QUndoStack* undoStack() const { return undoStack_; }
    QTableView* moduleTable() const { return moduleTable_; }
    RecipeTableModel* tableModel() const { return tableModel_; }
    QTableWidget* ruleTable() const { return ruleTable_; }
    QPlainTextEdit* textEdit() const { return textEdit_; }
    QTabWidget* tabs() const { return tabs_; }
    QString validationMessage() const;
    bool syntaxValid() const { return syntaxError_.isEmpty(); }
    bool resolves() const { return plan_.has_value(); }
    QString summaryText() const;
    // What to run on a headless machine to check this recipe for the chosen model.
    QString cliCommand() const;

    // Used by the undo commands.
    void applyRecipe(const quant::Recipe& recipe);

signals:
    void recipeChanged();
    void fileChanged(const QString& path);

private:
    // The buttons the constructor builds and then connects.
    struct EditorButtons {
        QPushButton* applySelection = nullptr;
        QPushButton* addRule = nullptr;
        QPushButton* removeRule = nullptr;
        QPushButton* moveUp = nullptr;
        QPushButton* moveDown = nullptr;
        QPushButton* applyText = nullptr;
    };
    // The pieces of the constructor, top to bottom: the name/model/KV-memory row, the defaults row, the three tabs'
    // pages (the Modules page with its "Set selected cells to" row), then the connections of every control.
    void buildModelRow(QVBoxLayout* layout);
    void buildDefaultsRow(QVBoxLayout* layout);
    QWidget* buildModulesPage(EditorButtons& buttons);
    QWidget* buildRulesPage(EditorButtons& buttons);
    QWidget* buildTextPage(EditorButtons& buttons);
    void connectEdits(const EditorButtons& buttons);

    void push(const quant::Recipe& after, const QString& text);
    void revalidate();
    void refreshViews();
    void updateSummary();

    quant::Recipe recipe_;
    QString filePath_;
    // The text the recipe came from (the opened file's, or what was applied in the YAML tab) and the recipe it
    // reads as. While the recipe is that one, the YAML tab shows this text, errors carry its own lines and saving
    // writes it (its comments kept); after an edit elsewhere the text is the recipe written out again.
    std::string sourceText_;
    std::optional<quant::Recipe> sourceRecipe_;
    std::string currentText() const;
    QString lastError_;
    QString syntaxError_;
    QString modelError_;
    std::optional<quant::RecipePlan> plan_;
    std::vector<RecipeModel> models_;
    int modelIndex_ = -1;
    bool refreshing_ = false;

    QUndoStack* undoStack_ = nullptr;
    QComboBox* modelBox_ = nullptr;
    QDoubleSpinBox* memoryBox_ = nullptr;
    QLineEdit* nameEdit_ = nullptr;
    QComboBox* defaultWeights_ = nullptr;
    QComboBox* defaultActivations_ = nullptr;
    QComboBox* defaultKv_ = nullptr;
    QComboBox* setSelection_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    QTableView* moduleTable_ = nullptr;
    RecipeTableModel* tableModel_ = nullptr;
    QTableWidget* ruleTable_ = nullptr;
    QPlainTextEdit* textEdit_ = nullptr;
    QLabel* validation_ = nullptr;
    QLabel* summary_ = nullptr;
};

} // namespace mismatch::ui

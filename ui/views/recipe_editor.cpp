#include "ui/views/recipe_editor.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/input_limits.h"
#include "core/common/output_check.h"
#include "core/io/recipe_export.h"
#include "ui/views/kv_capacity_summary.h"
#include "ui/views/library_io.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTabWidget>
#include <QTableView>
#include <QTableWidget>
#include <QUndoStack>
#include <QVBoxLayout>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace mismatch::ui {

using quant::ActivationFormat;
using quant::ActivationPrecision;
using quant::Granularity;
using quant::KvCalibration;
using quant::KvFormat;
using quant::KvPrecision;
using quant::KvScales;
using quant::Recipe;
using quant::RecipeRule;
using quant::WeightFormat;
using quant::WeightPrecision;

// ---------------------------------------------------------------------------------------------------------
// Choices

namespace {

// Every weight format, in the recipe spelling's order (quant::weightFormatChoices).
std::vector<WeightFormat> weightFormats()
{
    std::vector<WeightFormat> formats;
    for (const std::string& name : quant::weightFormatChoices()) {
        formats.push_back(*quant::parseWeightFormat(name));
    }
    return formats;
}

} // namespace

std::vector<std::string> weightChoices()
{
    std::vector<std::string> choices;
    for (WeightFormat format : weightFormats()) {
        const auto granularities = quant::allowedGranularities(format);
        if (granularities.empty()) {
            choices.push_back(quant::toString(format));
        }
        for (Granularity g : granularities) {
            choices.push_back(quant::describe(WeightPrecision {format, g}));
        }
    }
    return choices;
}

std::vector<std::string> activationChoices()
{
    return quant::activationFormatChoices();
}

std::vector<std::string> kvChoices()
{
    return {"bf16", "fp8_e4m3/per_tensor", "fp8_e4m3/per_head", "fp8_e4m3/per_tensor/every_sync",
        "fp8_e4m3/per_head/every_sync", quant::toString(KvFormat::Fp8PerTokenHead),
        quant::toString(KvFormat::Int8PerTokenHead)};
}

std::optional<WeightPrecision> parseWeightChoice(const std::string& text)
{
    for (WeightFormat format : weightFormats()) {
        if (text == quant::toString(format)) {
            return WeightPrecision {format, quant::defaultGranularity(format)};
        }
        for (Granularity g : quant::allowedGranularities(format)) {
            if (text == quant::describe(WeightPrecision {format, g})) {
                return WeightPrecision {format, g};
            }
        }
    }
    return std::nullopt;
}

std::optional<ActivationPrecision> parseActivationChoice(const std::string& text)
{
    const auto format = quant::parseActivationFormat(text);
    return format ? std::optional<ActivationPrecision>(ActivationPrecision {*format}) : std::nullopt;
}

std::optional<KvPrecision> parseKvChoice(const std::string& text)
{
    if (text == "bf16") {
        return KvPrecision {};
    }
    for (KvScales scales : {KvScales::PerTensor, KvScales::PerHead}) {
        for (KvCalibration calibration : {KvCalibration::Probe, KvCalibration::EverySync}) {
            const KvPrecision precision {KvFormat::Fp8E4m3, scales, calibration};
            if (text == quant::describe(precision)) {
                return precision;
            }
        }
    }
    if (text == "fp8_e4m3") {
        return KvPrecision {KvFormat::Fp8E4m3, KvScales::PerTensor, KvCalibration::Probe};
    }
    // vLLM's dynamic formats: no scales or calibration to choose.
    for (KvFormat format : {KvFormat::Fp8PerTokenHead, KvFormat::Int8PerTokenHead}) {
        if (text == quant::toString(format)) {
            return KvPrecision {format, KvScales::None, KvCalibration::None};
        }
    }
    return std::nullopt;
}

namespace {

QStringList toQStringList(const std::vector<std::string>& items)
{
    QStringList list;
    for (const std::string& item : items) {
        list << QString::fromStdString(item);
    }
    return list;
}

// Cell colours by format family: BF16/FP16 neutral, FP8 blue, INT8 green, INT4 orange, microscaling (MXFP8, MXFP4,
// NVFP4) teal.
QColor formatColor(const std::string& text)
{
    if (text.rfind("fp8", 0) == 0)
        return QColor(0xd6, 0xe6, 0xfa);
    if (text.rfind("mxfp", 0) == 0 || text.rfind("nvfp4", 0) == 0)
        return QColor(0xcf, 0xee, 0xea);
    if (text.rfind("int8", 0) == 0)
        return QColor(0xd8, 0xf0, 0xda);
    if (text.rfind("int4", 0) == 0)
        return QColor(0xfd, 0xe2, 0xc4);
    if (text == "mixed")
        return QColor(0xf3, 0xe5, 0xf5);
    return QColor(0xf7, 0xf7, 0xf7);
}

// "{0-3,7}" for a sorted set of layers (a single layer without braces).
std::string layerSet(const std::set<std::int64_t>& layers)
{
    if (layers.size() == 1) {
        return std::to_string(*layers.begin());
    }
    std::string text = "{";
    auto it = layers.begin();
    while (it != layers.end()) {
        const std::int64_t first = *it;
        std::int64_t last = first;
        ++it;
        while (it != layers.end() && *it == last + 1) {
            last = *it;
            ++it;
        }
        if (text.size() > 1)
            text += ",";
        text += first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
    }
    return text + "}";
}

enum Field { MatchField, WeightsField, ActivationsField, KvField };

// Removes `fields` from rules whose match is exactly `match` (dropping rules left empty), then appends one rule
// setting them: the new rule is last, so it wins, and no two identical matches contradict each other.
void setRuleFieldsFor(
    Recipe& recipe, const std::string& match, std::initializer_list<Field> fields, const RecipeRule& values)
{
    auto has = [&fields](Field field) { return std::find(fields.begin(), fields.end(), field) != fields.end(); };
    std::vector<RecipeRule> kept;
    for (RecipeRule rule : recipe.rules) {
        if (rule.match == match) {
            if (has(WeightsField))
                rule.weights.reset();
            if (has(ActivationsField))
                rule.activations.reset();
            if (has(KvField))
                rule.kvCache.reset();
            if (!rule.weights && !rule.activations && !rule.kvCache) {
                continue;
            }
        }
        kept.push_back(rule);
    }
    recipe.rules = std::move(kept);
    RecipeRule rule;
    rule.match = match;
    if (has(WeightsField))
        rule.weights = values.weights;
    if (has(ActivationsField))
        rule.activations = values.activations;
    if (has(KvField))
        rule.kvCache = values.kvCache;
    recipe.rules.push_back(rule);
}

void setRuleFieldFor(Recipe& recipe, const std::string& match, Field field, const RecipeRule& values)
{
    setRuleFieldsFor(recipe, match, {field}, values);
}

class RecipeCommand : public QUndoCommand {
public:
    RecipeCommand(RecipeEditor* editor, Recipe before, Recipe after, const QString& text)
        : QUndoCommand(text)
        , editor_(editor)
        , before_(std::move(before))
        , after_(std::move(after))
    {
    }
    void undo() override { editor_->applyRecipe(before_); }
    void redo() override { editor_->applyRecipe(after_); }

private:
    RecipeEditor* editor_;
    Recipe before_;
    Recipe after_;
};

// A combo box editor with the column's choices.
class FormatDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex& index) const override
    {
        auto* box = new QComboBox(parent);
        const int column = index.column();
        box->addItems(toQStringList(column == RecipeTableModel::kActivationsColumn ? activationChoices()
                : column == RecipeTableModel::kKvColumn                            ? kvChoices()
                                                                                   : weightChoices()));
        return box;
    }
    void setEditorData(QWidget* editor, const QModelIndex& index) const override
    {
        auto* box = static_cast<QComboBox*>(editor);
        const int i = box->findText(index.data(Qt::DisplayRole).toString());
        box->setCurrentIndex(std::max(i, 0));
    }
    void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override
    {
        model->setData(index, static_cast<QComboBox*>(editor)->currentText(), Qt::EditRole);
    }
};

QString ruleDescription(const Recipe& recipe, int rule)
{
    if (rule == quant::kNoRule) {
        return QObject::tr("top-level default (or BF16)");
    }
    return QObject::tr("rule %1: %2")
        .arg(rule + 1)
        .arg(QString::fromStdString(recipe.rules[static_cast<size_t>(rule)].match));
}

} // namespace

// ---------------------------------------------------------------------------------------------------------
// Table model

RecipeTableModel::RecipeTableModel(RecipeEditor* editor)
    : QAbstractTableModel(editor)
    , editor_(editor)
{
}

void RecipeTableModel::reset()
{
    beginResetModel();
    endResetModel();
}

int RecipeTableModel::rowCount(const QModelIndex& parent) const
{
    const model::ModelConfig* config = editor_->modelConfig();
    return parent.isValid() || !config ? 0 : static_cast<int>(config->numLayers) + 2;
}

int RecipeTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : kColumnCount;
}

std::int64_t RecipeTableModel::layerOfRow(int row) const
{
    if (row == 0)
        return -1;
    if (row == rowCount() - 1)
        return -2;
    return row - 1;
}

bool RecipeTableModel::isCellEditable(int row, int column) const
{
    const std::int64_t layer = layerOfRow(row);
    return layer >= 0 || column == 0;
}

Qt::ItemFlags RecipeTableModel::flags(const QModelIndex& index) const
{
    if (!index.isValid())
        return Qt::NoItemFlags;
    if (!isCellEditable(index.row(), index.column()))
        return Qt::ItemIsEnabled;
    return Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemIsEditable;
}

QVariant RecipeTableModel::data(const QModelIndex& index, int role) const
{
    const auto& plan = editor_->plan();
    if (!index.isValid() || !isCellEditable(index.row(), index.column())) {
        return {};
    }
    if (!plan) {
        return role == Qt::DisplayRole ? QVariant(QStringLiteral("?")) : QVariant();
    }
    const std::int64_t layer = layerOfRow(index.row());
    const int column = index.column();
    std::string text;
    int rule = quant::kNoRule;
    if (layer < 0) {
        const auto& module = plan->modules.at(layer == -1 ? quant::kEmbedName : quant::kLmHeadName);
        text = quant::describe(module.weights);
        rule = module.weightsRule;
    } else if (column < kActivationsColumn) {
        const auto& module
            = plan->modules.at(quant::layerModuleName(layer, quant::projectionSuffixes()[static_cast<size_t>(column)]));
        text = quant::describe(module.weights);
        rule = module.weightsRule;
    } else if (column == kActivationsColumn) {
        std::set<std::string> formats;
        for (const std::string& suffix : quant::projectionSuffixes()) {
            const auto& module = plan->modules.at(quant::layerModuleName(layer, suffix));
            formats.insert(quant::toString(module.activations.format));
            rule = std::max(rule, module.activationsRule);
        }
        text = formats.size() == 1 ? *formats.begin() : "mixed";
    } else {
        text = quant::describe(plan->kvPerLayer[static_cast<size_t>(layer)]);
        rule = plan->kvRulePerLayer[static_cast<size_t>(layer)];
    }
    switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
        return QString::fromStdString(text);
    case Qt::BackgroundRole:
        return formatColor(text);
    case Qt::ForegroundRole:
        return QColor(0x21, 0x21, 0x21);
    case Qt::ToolTipRole:
        return tr("%1 — set by %2").arg(QString::fromStdString(text), ruleDescription(editor_->recipe(), rule));
    case Qt::FontRole:
        if (rule != quant::kNoRule) {
            QFont bold;
            bold.setBold(true); // set by a rule: stands out from the defaults
            return bold;
        }
        return {};
    default:
        return {};
    }
}

QVariant RecipeTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (role != Qt::DisplayRole) {
        return {};
    }
    if (orientation == Qt::Horizontal) {
        if (section < kActivationsColumn) {
            return QString::fromStdString(quant::projectionShortNames()[static_cast<size_t>(section)]);
        }
        return section == kActivationsColumn ? tr("activations") : tr("KV cache");
    }
    const std::int64_t layer = layerOfRow(section);
    if (layer == -1)
        return tr("embed_tokens");
    if (layer == -2)
        return tr("lm_head");
    return tr("layer %1").arg(layer);
}

bool RecipeTableModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (role != Qt::EditRole || !index.isValid()) {
        return false;
    }
    if (index.data(Qt::DisplayRole).toString() == value.toString()) {
        return false; // nothing changes: no rule
    }
    return editor_->setCells({{index.row(), index.column()}}, value.toString());
}

// ---------------------------------------------------------------------------------------------------------
// Editor

RecipeEditor::RecipeEditor(QWidget* parent)
    : QWidget(parent)
{
    setObjectName("recipeEditor");
    undoStack_ = new QUndoStack(this);
    recipe_.name = "untitled";

    auto* layout = new QVBoxLayout(this);
    EditorButtons buttons;
    buildModelRow(layout);
    buildDefaultsRow(layout);

    tabs_ = new QTabWidget(this);
    tabs_->setObjectName("recipeTabs");
    tabs_->addTab(buildModulesPage(buttons), tr("Modules"));
    tabs_->addTab(buildRulesPage(buttons), tr("Rules"));
    tabs_->addTab(buildTextPage(buttons), tr("YAML"));
    layout->addWidget(tabs_, 1);

    validation_ = new QLabel(this);
    validation_->setObjectName("recipeValidation");
    validation_->setWordWrap(true);
    validation_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(validation_);
    summary_ = new QLabel(this);
    summary_->setObjectName("recipeSummary");
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(summary_);

    connectEdits(buttons);

    revalidate();
    refreshViews();
}

void RecipeEditor::buildModelRow(QVBoxLayout* layout)
{
    auto* form = new QHBoxLayout;
    form->addWidget(new QLabel(tr("Name:"), this));
    nameEdit_ = new QLineEdit(this);
    nameEdit_->setObjectName("recipeName");
    nameEdit_->setMaximumWidth(200);
    form->addWidget(nameEdit_);
    form->addSpacing(12);
    form->addWidget(new QLabel(tr("Model:"), this));
    modelBox_ = new QComboBox(this);
    modelBox_->setObjectName("recipeModelBox");
    modelBox_->setMinimumWidth(160);
    form->addWidget(modelBox_);
    form->addSpacing(12);
    form->addWidget(new QLabel(tr("KV memory:"), this));
    memoryBox_ = new QDoubleSpinBox(this);
    memoryBox_->setObjectName("kvMemoryBox");
    memoryBox_->setRange(0.01, 4096);
    memoryBox_->setDecimals(2);
    memoryBox_->setValue(1.0);
    memoryBox_->setSuffix(tr(" GiB"));
    form->addWidget(memoryBox_);
    form->addStretch();
    layout->addLayout(form);
}

void RecipeEditor::buildDefaultsRow(QVBoxLayout* layout)
{
    auto* defaults = new QHBoxLayout;
    defaults->addWidget(new QLabel(tr("Defaults — weights:"), this));
    defaultWeights_ = new QComboBox(this);
    defaultWeights_->setObjectName("defaultWeights");
    defaultWeights_->addItems(toQStringList(weightChoices()));
    defaults->addWidget(defaultWeights_);
    defaults->addWidget(new QLabel(tr("activations:"), this));
    defaultActivations_ = new QComboBox(this);
    defaultActivations_->setObjectName("defaultActivations");
    defaultActivations_->addItems(toQStringList(activationChoices()));
    defaults->addWidget(defaultActivations_);
    defaults->addWidget(new QLabel(tr("KV cache:"), this));
    defaultKv_ = new QComboBox(this);
    defaultKv_->setObjectName("defaultKv");
    defaultKv_->addItems(toQStringList(kvChoices()));
    defaults->addWidget(defaultKv_);
    defaults->addStretch();
    layout->addLayout(defaults);
}

QWidget* RecipeEditor::buildModulesPage(EditorButtons& buttons)
{
    tableModel_ = new RecipeTableModel(this);
    moduleTable_ = new QTableView(this);
    moduleTable_->setObjectName("recipeModuleTable");
    moduleTable_->setModel(tableModel_);
    moduleTable_->setItemDelegate(new FormatDelegate(moduleTable_));
    moduleTable_->setSelectionMode(QAbstractItemView::ExtendedSelection);
    moduleTable_->setEditTriggers(
        QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed | QAbstractItemView::SelectedClicked);
    moduleTable_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    moduleTable_->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    moduleTable_->verticalHeader()->setDefaultSectionSize(22);
    auto* modulesPage = new QWidget(this);
    auto* modulesLayout = new QVBoxLayout(modulesPage);
    modulesLayout->setContentsMargins(0, 0, 0, 0);
    auto* hint = new QLabel(tr("Double-click a cell to change it, or select several and use <i>Set selected cells</i>: "
                               "each change appends a rule. <b>Bold</b>: set by a rule (hover to see which)."),
        modulesPage);
    hint->setWordWrap(true);
    modulesLayout->addWidget(hint);
    // A row of its own above the table it acts on: beside the defaults it would be wider than a 1024 px window.
    auto* selectionRow = new QHBoxLayout;
    selectionRow->addWidget(new QLabel(tr("Set selected cells to:"), modulesPage));
    setSelection_ = new QComboBox(modulesPage);
    setSelection_->setObjectName("setSelectionBox");
    setSelection_->addItems(toQStringList(weightChoices()));
    selectionRow->addWidget(setSelection_);
    buttons.applySelection = new QPushButton(tr("Apply"), modulesPage);
    buttons.applySelection->setObjectName("applySelectionButton");
    selectionRow->addWidget(buttons.applySelection);
    selectionRow->addStretch();
    modulesLayout->addLayout(selectionRow);
    modulesLayout->addWidget(moduleTable_, 1);
    return modulesPage;
}

QWidget* RecipeEditor::buildRulesPage(EditorButtons& buttons)
{
    auto* rulesPage = new QWidget(this);
    auto* rulesLayout = new QVBoxLayout(rulesPage);
    rulesLayout->setContentsMargins(0, 0, 0, 0);
    ruleTable_ = new QTableWidget(0, 4, rulesPage);
    ruleTable_->setObjectName("recipeRuleTable");
    ruleTable_->setHorizontalHeaderLabels({tr("match"), tr("weights"), tr("activations"), tr("kv_cache")});
    ruleTable_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    ruleTable_->setSelectionBehavior(QAbstractItemView::SelectRows);
    ruleTable_->setToolTip(tr("Rules apply in order; later rules win. Empty cells leave that part alone.\n"
                              "Patterns: * any characters, {0-3,7} number ranges, {q,k}_proj alternatives."));
    rulesLayout->addWidget(ruleTable_, 1);
    auto* ruleButtons = new QHBoxLayout;
    buttons.addRule = new QPushButton(tr("Add Rule"), rulesPage);
    buttons.addRule->setObjectName("addRuleButton");
    buttons.removeRule = new QPushButton(tr("Remove Rule"), rulesPage);
    buttons.removeRule->setObjectName("removeRuleButton");
    buttons.moveUp = new QPushButton(tr("Move Up"), rulesPage);
    buttons.moveDown = new QPushButton(tr("Move Down"), rulesPage);
    for (QPushButton* b : {buttons.addRule, buttons.removeRule, buttons.moveUp, buttons.moveDown})
        ruleButtons->addWidget(b);
    ruleButtons->addStretch();
    rulesLayout->addLayout(ruleButtons);
    return rulesPage;
}

QWidget* RecipeEditor::buildTextPage(EditorButtons& buttons)
{
    auto* textPage = new QWidget(this);
    auto* textLayout = new QVBoxLayout(textPage);
    textLayout->setContentsMargins(0, 0, 0, 0);
    textEdit_ = new QPlainTextEdit(textPage);
    textEdit_->setObjectName("recipeText");
    textEdit_->setFont(QFont(QStringLiteral("monospace")));
    textLayout->addWidget(textEdit_, 1);
    buttons.applyText = new QPushButton(tr("Apply Text"), textPage);
    buttons.applyText->setObjectName("applyTextButton");
    textLayout->addWidget(buttons.applyText, 0, Qt::AlignLeft);
    return textPage;
}

void RecipeEditor::connectEdits(const EditorButtons& buttons)
{
    connect(modelBox_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int index) {
        modelIndex_ = index;
        revalidate();
        refreshViews();
    });
    connect(memoryBox_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] { updateSummary(); });
    connect(nameEdit_, &QLineEdit::editingFinished, this, [this] { setName(nameEdit_->text()); });
    auto defaultsChanged = [this] {
        if (!refreshing_) {
            setDefaults(defaultWeights_->currentText(), defaultActivations_->currentText(), defaultKv_->currentText());
        }
    };
    connect(defaultWeights_, qOverload<int>(&QComboBox::activated), this, defaultsChanged);
    connect(defaultActivations_, qOverload<int>(&QComboBox::activated), this, defaultsChanged);
    connect(defaultKv_, qOverload<int>(&QComboBox::activated), this, defaultsChanged);
    connect(
        moduleTable_->selectionModel(), &QItemSelectionModel::currentChanged, this, [this](const QModelIndex& index) {
            // Offer the choices of the column the selection is in.
            const QString keep = setSelection_->currentText();
            setSelection_->clear();
            setSelection_->addItems(
                toQStringList(index.column() == RecipeTableModel::kActivationsColumn ? activationChoices()
                        : index.column() == RecipeTableModel::kKvColumn              ? kvChoices()
                                                                                     : weightChoices()));
            setSelection_->setCurrentIndex(std::max(0, setSelection_->findText(keep)));
        });
    connect(buttons.applySelection, &QPushButton::clicked, this, [this] {
        std::vector<std::pair<int, int>> cells;
        for (const QModelIndex& index : moduleTable_->selectionModel()->selectedIndexes()) {
            cells.emplace_back(index.row(), index.column());
        }
        setCells(cells, setSelection_->currentText());
    });
    connect(ruleTable_, &QTableWidget::itemChanged, this, [this](QTableWidgetItem* item) {
        if (!refreshing_) {
            setRuleField(item->row(), item->column(), item->text().trimmed());
        }
    });
    connect(buttons.addRule, &QPushButton::clicked, this, [this] { addRule(QStringLiteral("model.layers.*.mlp.*")); });
    connect(buttons.removeRule, &QPushButton::clicked, this, [this] {
        if (ruleTable_->currentRow() >= 0)
            removeRule(ruleTable_->currentRow());
    });
    connect(buttons.moveUp, &QPushButton::clicked, this, [this] {
        if (ruleTable_->currentRow() >= 0)
            moveRule(ruleTable_->currentRow(), -1);
    });
    connect(buttons.moveDown, &QPushButton::clicked, this, [this] {
        if (ruleTable_->currentRow() >= 0)
            moveRule(ruleTable_->currentRow(), +1);
    });
    connect(buttons.applyText, &QPushButton::clicked, this, [this] { applyText(textEdit_->toPlainText()); });
}

void RecipeEditor::setModels(const std::vector<RecipeModel>& models)
{
    const QString keep = modelBox_->currentText();
    models_ = models;
    {
        const QSignalBlocker block(modelBox_);
        modelBox_->clear();
        for (const RecipeModel& m : models_) {
            modelBox_->addItem(tr("%1 (%2 layers)").arg(m.name).arg(m.config.numLayers), m.name);
        }
        int index = modelBox_->findText(keep);
        modelBox_->setCurrentIndex(index >= 0 ? index : (models_.empty() ? -1 : 0));
        modelIndex_ = modelBox_->currentIndex();
    }
    revalidate();
    refreshViews();
}

bool RecipeEditor::selectModel(const QString& name)
{
    const int index = modelBox_->findData(name);
    if (index < 0) {
        return false;
    }
    modelBox_->setCurrentIndex(index);
    modelIndex_ = index;
    revalidate();
    refreshViews();
    return true;
}

const model::ModelConfig* RecipeEditor::modelConfig() const
{
    return modelIndex_ >= 0 && modelIndex_ < static_cast<int>(models_.size())
        ? &models_[static_cast<size_t>(modelIndex_)].config
        : nullptr;
}

QString RecipeEditor::modelDirectory() const
{
    return modelIndex_ >= 0 && modelIndex_ < static_cast<int>(models_.size())
        ? models_[static_cast<size_t>(modelIndex_)].directory
        : QString();
}

void RecipeEditor::setRecipe(const Recipe& recipe, const QString& filePath)
{
    undoStack_->clear();
    sourceText_.clear();
    sourceRecipe_.reset();
    filePath_ = filePath;
    applyRecipe(recipe);
    undoStack_->setClean();
    emit fileChanged(filePath_);
}

void RecipeEditor::applyRecipe(const Recipe& recipe)
{
    recipe_ = recipe;
    revalidate();
    refreshViews();
    emit recipeChanged();
}

void RecipeEditor::push(const Recipe& after, const QString& text)
{
    if (after == recipe_ && after.name == recipe_.name) {
        return;
    }
    undoStack_->push(new RecipeCommand(this, recipe_, after, text));
}

std::string RecipeEditor::currentText() const
{
    return sourceRecipe_ && *sourceRecipe_ == recipe_ ? sourceText_ : quant::recipeToYaml(recipe_);
}

bool RecipeEditor::openFile(const QString& path)
{
    try {
        const Recipe recipe = quant::loadRecipe(path.toStdString());
        const std::string text = readInputFile(path.toStdString(), limits::kConfigFile, "recipe");
        setRecipe(recipe, path);
        sourceText_ = text;
        sourceRecipe_ = recipe;
        applyRecipe(recipe); // shown and checked as the file's own text
        lastError_.clear();
        return true;
    } catch (const std::exception& error) {
        lastError_ = QString::fromUtf8(error.what());
        validation_->setText(tr("Cannot open %1: %2").arg(path, lastError_));
        validation_->setStyleSheet(QStringLiteral("color: #c62828"));
        return false;
    }
}

bool RecipeEditor::saveFile(const QString& path)
{
    lastError_.clear();
    if (!syntaxError_.isEmpty()) {
        lastError_ = tr("Not saved: the recipe has an error: %1").arg(syntaxError_);
        return false;
    }
    const bool json = QFileInfo(path).suffix().toLower() == QLatin1String("json");
    // The recipe's own text (comments kept) when it is unedited and of the file's kind, else written out again.
    const bool sourceIsJson = !sourceText_.empty() && sourceText_.find_first_not_of(" \t\r\n") != std::string::npos
        && sourceText_[sourceText_.find_first_not_of(" \t\r\n")] == '{';
    const std::string text = sourceRecipe_ && *sourceRecipe_ == recipe_ && json == sourceIsJson
        ? sourceText_
        : (json ? quant::recipeToJson(recipe_) : quant::recipeToYaml(recipe_));
    // What is written must read back as this recipe (the file is what a headless machine runs).
    try {
        if (quant::parseRecipe(text, path.toStdString()) != recipe_) {
            lastError_ = tr("Not saved: %1 would not read back as the edited recipe").arg(path);
            return false;
        }
    } catch (const std::exception& error) {
        lastError_ = tr("Not saved: %1").arg(QString::fromUtf8(error.what()));
        return false;
    }
    try {
        // Not over the chosen model's config.json, nor into its directory (issue 46); through a temporary file and
        // a rename, a device or FIFO written to rather than replaced.
        const std::string model = modelDirectory().toStdString();
        requireOutputNotInput(path.toStdString(),
            {{model.empty() ? std::string() : model + "/config.json", "model config"}}, {model}, "recipe file");
        writeFileAtomically(path.toStdString(), text);
    } catch (const std::exception& error) {
        lastError_ = tr("Not saved: %1").arg(QString::fromUtf8(error.what()));
        return false;
    }
    filePath_ = path;
    recipe_.sourceFile = path.toStdString();
    // The file's text is now the source: a YAML recipe saved as JSON is shown, and re-read, as the JSON written
    // (its YAML text parsed under a .json name read as a syntax error at the next refresh).
    sourceText_ = text;
    sourceRecipe_ = recipe_;
    undoStack_->setClean();
    emit fileChanged(filePath_);
    return true;
}

bool RecipeEditor::exportFor(const QString& target, const QString& path)
{
    lastError_.clear();
    const auto parsedTarget = io::parseExportTarget(target.toStdString());
    if (!parsedTarget) {
        lastError_ = tr("Unknown export target '%1'").arg(target);
        return false;
    }
    if (!plan_) {
        lastError_ = tr("Not exported: the recipe must resolve for a model first (%1)").arg(validationMessage());
        return false;
    }
    try {
        io::ExportOptions options;
        options.target = *parsedTarget;
        const std::string model = modelDirectory().toStdString();
        io::requireExportIsNoInput(path.toStdString(), {},
            {filePath_.toStdString(), model.empty() ? std::string() : model + "/config.json", model, ""});
        writeFileAtomically(path.toStdString(), io::exportRecipe(recipe_, *plan_, options));
        return true;
    } catch (const std::exception& error) {
        lastError_ = tr("Not exported: %1").arg(QString::fromUtf8(error.what()));
        return false;
    }
}

bool RecipeEditor::setCells(const std::vector<std::pair<int, int>>& cells, const QString& choice)
{
    const std::string text = choice.toStdString();
    // Group the cells by (column, kind of row): a column's layers become one rule with a layer set.
    std::map<int, std::set<std::int64_t>> layersByColumn;
    bool embed = false;
    bool lmHead = false;
    for (const auto& [row, column] : cells) {
        if (!tableModel_->isCellEditable(row, column)) {
            continue;
        }
        const std::int64_t layer = tableModel_->layerOfRow(row);
        if (layer == -1)
            embed = true;
        else if (layer == -2)
            lmHead = true;
        else
            layersByColumn[column].insert(layer);
    }
    // Tied embeddings are one tensor: the embedding and lm_head always get the same weight format.
    if ((embed || lmHead) && modelConfig() && modelConfig()->tieWordEmbeddings) {
        embed = lmHead = true;
    }
    Recipe after = recipe_;
    RecipeRule values;
    auto need = [&](auto parsed, const char* what) {
        if (!parsed) {
            lastError_ = tr("'%1' is not a %2 format").arg(choice, tr(what));
            validation_->setText(lastError_);
            validation_->setStyleSheet(QStringLiteral("color: #c62828"));
        }
        return parsed.has_value();
    };
    if (embed || lmHead || std::any_of(layersByColumn.begin(), layersByColumn.end(), [](const auto& entry) {
            return entry.first < RecipeTableModel::kActivationsColumn;
        })) {
        values.weights = parseWeightChoice(text);
        if (!need(values.weights, "weight"))
            return false;
    }
    if (layersByColumn.count(RecipeTableModel::kActivationsColumn)) {
        values.activations = parseActivationChoice(text);
        if (!need(values.activations, "activation"))
            return false;
    }
    if (layersByColumn.count(RecipeTableModel::kKvColumn)) {
        values.kvCache = parseKvChoice(text);
        if (!need(values.kvCache, "KV cache"))
            return false;
    }
    int changes = 0;
    if (embed) {
        setRuleFieldFor(after, quant::kEmbedName, WeightsField, values);
        ++changes;
    }
    if (lmHead) {
        setRuleFieldFor(after, quant::kLmHeadName, WeightsField, values);
        ++changes;
    }
    for (const auto& [column, layers] : layersByColumn) {
        const std::string prefix = "model.layers." + layerSet(layers) + ".";
        if (column < RecipeTableModel::kActivationsColumn) {
            setRuleFieldFor(
                after, prefix + quant::projectionSuffixes()[static_cast<size_t>(column)], WeightsField, values);
        } else if (column == RecipeTableModel::kActivationsColumn) {
            setRuleFieldFor(after, prefix + "*", ActivationsField, values);
        } else {
            setRuleFieldFor(after, prefix + "self_attn", KvField, values);
        }
        ++changes;
    }
    if (changes == 0) {
        return false;
    }
    push(after, tr("Set %n cell(s) to %1", nullptr, static_cast<int>(cells.size())).arg(choice));
    return true;
}

bool RecipeEditor::keepInBf16(const std::vector<std::pair<std::int64_t, std::string>>& cells)
{
    std::map<std::string, std::set<std::int64_t>> layersByGroup;
    bool embed = false;
    bool lmHead = false;
    const std::vector<std::string>& shortNames = quant::projectionShortNames();
    for (const auto& [layer, group] : cells) {
        if (group == "embed_tokens") {
            embed = true;
        } else if (group == "lm_head") {
            lmHead = true;
        } else if (group == "embed_lm_head") {
            embed = lmHead = true;
        } else if (layer >= 0
            && (group == "kv" || std::find(shortNames.begin(), shortNames.end(), group) != shortNames.end())) {
            layersByGroup[group].insert(layer);
        } else {
            lastError_
                = tr("no module group '%1' at layer %2 to keep in BF16").arg(QString::fromStdString(group)).arg(layer);
            return false;
        }
    }
    // Tied embeddings are one tensor: the embedding and lm_head always get the same weight format.
    if ((embed || lmHead) && modelConfig() && modelConfig()->tieWordEmbeddings) {
        embed = lmHead = true;
    }
    RecipeRule bf16;
    bf16.weights = parseWeightChoice("bf16");
    bf16.activations = parseActivationChoice("bf16");
    bf16.kvCache = parseKvChoice("bf16");
    Recipe after = recipe_;
    if (embed) {
        setRuleFieldFor(after, quant::kEmbedName, WeightsField, bf16);
    }
    if (lmHead) {
        setRuleFieldsFor(after, quant::kLmHeadName, {WeightsField, ActivationsField}, bf16);
    }
    for (const auto& [group, layers] : layersByGroup) {
        const std::string prefix = "model.layers." + layerSet(layers) + ".";
        if (group == "kv") {
            setRuleFieldFor(after, prefix + "self_attn", KvField, bf16);
        } else {
            const auto at = std::find(shortNames.begin(), shortNames.end(), group) - shortNames.begin();
            setRuleFieldsFor(after, prefix + quant::projectionSuffixes()[static_cast<size_t>(at)],
                {WeightsField, ActivationsField}, bf16);
        }
    }
    push(after, tr("Keep %n sensitivity cell(s) in BF16", nullptr, static_cast<int>(cells.size())));
    return true;
}

void RecipeEditor::setDefaults(const QString& weights, const QString& activations, const QString& kvCache)
{
    Recipe after = recipe_;
    const auto w = parseWeightChoice(weights.toStdString());
    const auto a = parseActivationChoice(activations.toStdString());
    const auto k = parseKvChoice(kvCache.toStdString());
    // An absent section means BF16: keep it absent rather than writing an explicit bf16.
    auto bf16Weights = WeightPrecision {};
    if (w && (after.weights || *w != bf16Weights))
        after.weights = *w;
    if (a && (after.activations || a->format != ActivationFormat::Bf16))
        after.activations = *a;
    if (k && (after.kvCache || k->format != KvFormat::Bf16))
        after.kvCache = *k;
    push(after, tr("Change defaults"));
}

void RecipeEditor::setName(const QString& name)
{
    if (name.toStdString() == recipe_.name) {
        return;
    }
    Recipe after = recipe_;
    after.name = name.toStdString();
    undoStack_->push(new RecipeCommand(this, recipe_, after, tr("Rename to %1").arg(name)));
}

bool RecipeEditor::setRuleField(int rule, int field, const QString& text)
{
    if (rule < 0 || rule >= static_cast<int>(recipe_.rules.size())) {
        return false;
    }
    Recipe after = recipe_;
    RecipeRule& r = after.rules[static_cast<size_t>(rule)];
    const std::string value = text.toStdString();
    QString problem;
    switch (field) {
    case MatchField:
        if (value.empty())
            problem = tr("a rule needs a match pattern");
        r.match = value; // malformed patterns are reported by validation, located in the text
        break;
    case WeightsField:
        if (value.empty())
            r.weights.reset();
        else if (auto p = parseWeightChoice(value))
            r.weights = *p;
        else
            problem = tr("'%1' is not a weight format; expected one of %2")
                          .arg(text, toQStringList(weightChoices()).join(", "));
        break;
    case ActivationsField:
        if (value.empty())
            r.activations.reset();
        else if (auto p = parseActivationChoice(value))
            r.activations = *p;
        else
            problem = tr("'%1' is not an activation format; expected one of %2")
                          .arg(text, toQStringList(activationChoices()).join(", "));
        break;
    case KvField:
        if (value.empty())
            r.kvCache.reset();
        else if (auto p = parseKvChoice(value))
            r.kvCache = *p;
        else
            problem = tr("'%1' is not a KV cache format; expected one of %2")
                          .arg(text, toQStringList(kvChoices()).join(", "));
        break;
    default:
        return false;
    }
    if (problem.isEmpty() && !r.weights && !r.activations && !r.kvCache) {
        problem = tr("a rule needs at least one of weights, activations, kv_cache (remove the rule instead)");
    }
    if (!problem.isEmpty()) {
        lastError_ = tr("Rule %1: %2").arg(rule + 1).arg(problem);
        refreshViews(); // put the cell back
        validation_->setText(lastError_);
        validation_->setStyleSheet(QStringLiteral("color: #c62828"));
        return false;
    }
    push(after, tr("Edit rule %1").arg(rule + 1));
    return true;
}

void RecipeEditor::addRule(const QString& match)
{
    Recipe after = recipe_;
    RecipeRule rule;
    rule.match = match.toStdString();
    rule.weights = WeightPrecision {};
    after.rules.push_back(rule);
    push(after, tr("Add rule"));
}

void RecipeEditor::removeRule(int rule)
{
    if (rule < 0 || rule >= static_cast<int>(recipe_.rules.size()))
        return;
    Recipe after = recipe_;
    after.rules.erase(after.rules.begin() + rule);
    push(after, tr("Remove rule %1").arg(rule + 1));
}

void RecipeEditor::moveRule(int rule, int delta)
{
    const int target = rule + delta;
    if (rule < 0 || target < 0 || rule >= static_cast<int>(recipe_.rules.size())
        || target >= static_cast<int>(recipe_.rules.size())) {
        return;
    }
    Recipe after = recipe_;
    std::swap(after.rules[static_cast<size_t>(rule)], after.rules[static_cast<size_t>(target)]);
    push(after, tr("Move rule %1").arg(rule + 1));
    ruleTable_->selectRow(target);
}

bool RecipeEditor::applyText(const QString& text)
{
    try {
        Recipe parsed
            = quant::parseRecipe(text.toStdString(), filePath_.isEmpty() ? "recipe.yaml" : filePath_.toStdString());
        const bool unchanged = parsed == recipe_ && parsed.name == recipe_.name;
        sourceText_ = text.toStdString();
        sourceRecipe_ = parsed;
        push(parsed, tr("Edit text"));
        if (unchanged) {
            refreshViews(); // nothing to undo, but the error of an earlier attempt must go
        }
        return true;
    } catch (const std::exception& error) {
        lastError_ = QString::fromUtf8(error.what());
        validation_->setText(tr("Text not applied: %1").arg(lastError_));
        validation_->setStyleSheet(QStringLiteral("color: #c62828"));
        return false;
    }
}

void RecipeEditor::revalidate()
{
    syntaxError_.clear();
    modelError_.clear();
    plan_.reset();
    // Syntax: what a file with this recipe would say (patterns, contradicting rules, ...).
    Recipe checked;
    try {
        checked = quant::parseRecipe(currentText(), filePath_.isEmpty() ? "recipe.yaml" : filePath_.toStdString());
    } catch (const std::exception& error) {
        syntaxError_ = QString::fromUtf8(error.what());
        return;
    }
    if (const model::ModelConfig* config = modelConfig()) {
        try {
            plan_ = quant::resolveRecipe(checked, *config);
        } catch (const std::exception& error) {
            modelError_ = QString::fromUtf8(error.what());
        }
    }
}

QString RecipeEditor::validationMessage() const
{
    if (!syntaxError_.isEmpty())
        return syntaxError_;
    if (!modelError_.isEmpty())
        return modelError_;
    return {};
}

void RecipeEditor::refreshViews()
{
    refreshing_ = true;
    tableModel_->reset();
    // The embedding and lm_head have one weight each: their cell spans the projection columns.
    moduleTable_->clearSpans();
    if (tableModel_->rowCount() >= 2) {
        moduleTable_->setSpan(0, 0, 1, RecipeTableModel::kActivationsColumn);
        moduleTable_->setSpan(tableModel_->rowCount() - 1, 0, 1, RecipeTableModel::kActivationsColumn);
    }
    nameEdit_->setText(QString::fromStdString(recipe_.name));
    defaultWeights_->setCurrentText(
        QString::fromStdString(quant::describe(recipe_.weights.value_or(WeightPrecision {}))));
    defaultActivations_->setCurrentText(
        QString::fromStdString(quant::toString(recipe_.activations.value_or(ActivationPrecision {}).format)));
    defaultKv_->setCurrentText(QString::fromStdString(quant::describe(recipe_.kvCache.value_or(KvPrecision {}))));

    ruleTable_->setRowCount(static_cast<int>(recipe_.rules.size()));
    for (size_t i = 0; i < recipe_.rules.size(); ++i) {
        const RecipeRule& rule = recipe_.rules[i];
        const QString cells[] = {QString::fromStdString(rule.match),
            rule.weights ? QString::fromStdString(quant::describe(*rule.weights)) : QString(),
            rule.activations ? QString::fromStdString(quant::toString(rule.activations->format)) : QString(),
            rule.kvCache ? QString::fromStdString(quant::describe(*rule.kvCache)) : QString()};
        for (int c = 0; c < 4; ++c) {
            ruleTable_->setItem(static_cast<int>(i), c, new QTableWidgetItem(cells[c]));
        }
    }
    ruleTable_->resizeColumnsToContents();
    ruleTable_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
    textEdit_->setPlainText(QString::fromStdString(currentText()));
    tabs_->setTabText(1, tr("Rules (%1)").arg(recipe_.rules.size()));

    const QString message = validationMessage();
    if (!message.isEmpty()) {
        validation_->setText(tr("⚠ %1").arg(message));
        validation_->setStyleSheet(QStringLiteral("color: #c62828"));
    } else if (!modelConfig()) {
        validation_->setText(tr("Syntax valid. Choose a model to resolve the recipe."));
        validation_->setStyleSheet(QStringLiteral("color: #2e7d32"));
    } else {
        validation_->setText(tr("✓ Valid, and resolves for %1.").arg(models_[static_cast<size_t>(modelIndex_)].name));
        validation_->setStyleSheet(QStringLiteral("color: #2e7d32"));
    }
    refreshing_ = false;
    updateSummary();
}

void RecipeEditor::updateSummary()
{
    const model::ModelConfig* config = modelConfig();
    if (!plan_ || !config) {
        summary_->setText(tr("Weight memory and KV capacity appear when the recipe resolves for a model."));
        return;
    }
    const auto memory = static_cast<std::uint64_t>(memoryBox_->value() * 1024.0 * 1024.0 * 1024.0);
    QString kv;
    try {
        const KvCapacitySummary capacity = kvCapacitySummary(*config, *plan_, memory);
        kv = tr("KV cache: %1 bytes/token (BF16 %2); %3 tokens fit %4 GiB = %5x BF16 (%6 tokens)")
                 .arg(plan_->kvBytesPerToken)
                 .arg(plan_->bf16KvBytesPerToken)
                 .arg(QLocale().toString(static_cast<qlonglong>(capacity.tokens)))
                 .arg(memoryBox_->value())
                 .arg(capacity.ratioToBf16, 0, 'f', 2)
                 .arg(QLocale().toString(static_cast<qlonglong>(capacity.bf16Tokens)));
    } catch (const std::exception& error) {
        kv = tr("KV capacity: %1").arg(QString::fromUtf8(error.what()));
    }
    summary_->setText(tr("Weights: %1 = %2% of BF16 (%3).  %4")
                          .arg(QString::fromStdString(formatBytes(static_cast<double>(plan_->weightBytes))))
                          .arg(100.0 * plan_->weightRatio(), 0, 'f', 1)
                          .arg(QString::fromStdString(formatBytes(static_cast<double>(plan_->bf16WeightBytes))))
                          .arg(kv));
}

QString RecipeEditor::summaryText() const
{
    return summary_->text();
}

QString RecipeEditor::cliCommand() const
{
    auto quote = [](const QString& s) {
        return s.contains(QRegularExpression(QStringLiteral("[^A-Za-z0-9_./=:-]")))
            ? QLatin1Char('\'') + QString(s).replace(QLatin1String("'"), QLatin1String("'\\''")) + QLatin1Char('\'')
            : s;
    };
    QString command
        = QStringLiteral("mismatch recipe check ") + quote(filePath_.isEmpty() ? tr("RECIPE.yaml") : filePath_);
    if (modelIndex_ >= 0 && !models_[static_cast<size_t>(modelIndex_)].directory.isEmpty()) {
        command += QStringLiteral(" --model ") + quote(models_[static_cast<size_t>(modelIndex_)].directory);
    }
    return command;
}

} // namespace mismatch::ui

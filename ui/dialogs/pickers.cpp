#include "ui/dialogs/pickers.h"

#include "core/common/runtime.h"
#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"

#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QToolButton>

#include <algorithm>

namespace mismatch::ui {

namespace {

QString cleanAbsolute(const QString& path)
{
    return QDir::cleanPath(QFileInfo(path).absoluteFilePath());
}

void addChoice(std::vector<PickChoice>& choices, const QString& label, const QString& path)
{
    const QString clean = cleanAbsolute(path);
    if (std::none_of(choices.begin(), choices.end(), [&](const PickChoice& c) { return c.path == clean; })) {
        choices.push_back({label, clean});
    }
}

// Files in `directory` with one of `suffixes`, as "NAME (where)".
void addFiles(
    std::vector<PickChoice>& choices, const QString& directory, const QStringList& suffixes, const QString& where)
{
    QStringList filters;
    for (const QString& suffix : suffixes) {
        filters << QStringLiteral("*.") + suffix;
    }
    const QDir dir(directory);
    for (const QString& name : dir.entryList(filters, QDir::Files, QDir::Name)) {
        addChoice(
            choices, QStringLiteral("%1 (%2)").arg(QFileInfo(name).completeBaseName(), where), dir.filePath(name));
    }
}

QString fileFilter(PickKind kind)
{
    switch (kind) {
    case PickKind::PromptSet:
        return QObject::tr("Prompt sets (*.jsonl)");
    case PickKind::Recipe:
        return QObject::tr("Recipes (*.yaml *.yml *.json)");
    case PickKind::RunFile:
        return QObject::tr("Run files (*.yaml *.yml *.json)");
    case PickKind::Candidates:
        return QObject::tr("Candidate lists (*.yaml *.yml *.json)");
    default:
        return QObject::tr("All files (*)");
    }
}

} // namespace

std::vector<PickChoice> pickChoices(PickKind kind, const store::RunStore* store, const QString& workspaceDirectory)
{
    std::vector<PickChoice> choices;
    const QString resources = QString::fromStdString(resourceDirectory());
    const QString builtIn = QObject::tr("built-in");
    try {
        switch (kind) {
        case PickKind::ModelDirectory:
            if (store) {
                for (const store::ModelRecord& model : store->listModels()) {
                    addChoice(choices, QObject::tr("%1 (registered)").arg(QString::fromStdString(model.name)),
                        QString::fromStdString(model.path));
                }
            }
            for (const QString& name : QDir(resources + "/models").entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
                if (QFileInfo::exists(resources + "/models/" + name + "/config.json")) {
                    addChoice(choices, QStringLiteral("%1 (%2)").arg(name, builtIn), resources + "/models/" + name);
                }
            }
            break;
        case PickKind::PromptSet:
            if (store) {
                for (const store::PromptSetRecord& set : store->listPromptSets()) {
                    addChoice(choices,
                        QObject::tr("%1 (registered, %2 prompts)")
                            .arg(QString::fromStdString(set.name))
                            .arg(set.promptCount),
                        QString::fromStdString(set.path));
                }
            }
            addFiles(choices, resources + "/prompts", {QStringLiteral("jsonl")}, builtIn);
            break;
        case PickKind::Recipe:
            addFiles(choices, workspaceDirectory + "/recipes", {"yaml", "yml", "json"}, QObject::tr("workspace"));
            if (store) {
                store::Statement recipes(
                    store->handle(), "SELECT name, path FROM recipes WHERE path IS NOT NULL ORDER BY id");
                while (recipes.step()) {
                    const QString path = QString::fromStdString(recipes.text(1));
                    if (QFileInfo::exists(path)) {
                        addChoice(
                            choices, QObject::tr("%1 (built)").arg(QString::fromStdString(recipes.text(0))), path);
                    }
                }
            }
            addFiles(choices, resources + "/recipes", {"yaml", "yml", "json"}, builtIn);
            break;
        case PickKind::RunFile:
            addFiles(choices, workspaceDirectory + "/runs", {"yaml", "yml", "json"}, QObject::tr("workspace"));
            addFiles(choices, resources + "/runs", {"yaml", "yml", "json"}, builtIn);
            break;
        case PickKind::Candidates:
            addFiles(choices, resources + "/candidates", {"yaml", "yml", "json"}, builtIn);
            break;
        case PickKind::AnyFile:
            break;
        }
    } catch (const std::exception&) {
        // A store that cannot be read offers what the resources have; the dialog still accepts typed paths.
    }
    return choices;
}

QString startingChoice(PickKind kind, const std::vector<PickChoice>& choices)
{
    QString preferred;
    if (kind == PickKind::ModelDirectory) {
        preferred = QStringLiteral("/models/arith-student");
    } else if (kind == PickKind::PromptSet) {
        preferred = QStringLiteral("/prompts/arith-probe.jsonl");
    } else {
        return {};
    }
    const QString path = cleanAbsolute(QString::fromStdString(resourceDirectory()) + preferred);
    const bool offered
        = std::any_of(choices.begin(), choices.end(), [&path](const PickChoice& choice) { return choice.path == path; });
    return offered ? path : choices.empty() ? QString() : choices.front().path;
}

PathPicker::PathPicker(PickKind kind, QWidget* parent)
    : QWidget(parent)
    , kind_(kind)
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    box_ = new QComboBox(this);
    box_->setEditable(true);
    box_->setInsertPolicy(QComboBox::NoInsert);
    box_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    box_->setMinimumContentsLength(40);
    box_->lineEdit()->setPlaceholderText(
        kind == PickKind::ModelDirectory ? tr("choose a model, or type its folder") : tr("choose, or type a path"));
    layout->addWidget(box_, 1);
    browse_ = new QToolButton(this);
    browse_->setText(tr("Browse..."));
    layout->addWidget(browse_);
    connect(box_, &QComboBox::editTextChanged, this, [this] { emit pathChanged(path()); });
    connect(browse_, &QToolButton::clicked, this, [this] {
        const QString start = path().isEmpty() ? QString() : QFileInfo(path()).absolutePath();
        const QString chosen = kind_ == PickKind::ModelDirectory
            ? QFileDialog::getExistingDirectory(this, tr("Model directory"), start)
            : QFileDialog::getOpenFileName(this, tr("Choose a file"), start, fileFilter(kind_));
        if (!chosen.isEmpty()) {
            setPath(chosen);
        }
    });
}

void PathPicker::setChoices(const std::vector<PickChoice>& choices)
{
    const QString keep = path();
    const QSignalBlocker block(box_);
    box_->clear();
    for (const PickChoice& choice : choices) {
        box_->addItem(choice.label, choice.path);
        box_->setItemData(box_->count() - 1, choice.path, Qt::ToolTipRole);
    }
    box_->setCurrentIndex(-1);
    box_->setEditText(QString());
    setPath(keep);
}

void PathPicker::selectStartingChoice()
{
    std::vector<PickChoice> choices;
    for (int i = 0; i < box_->count(); ++i) {
        choices.push_back({box_->itemText(i), box_->itemData(i).toString()});
    }
    if (const QString path = startingChoice(kind_, choices); !path.isEmpty()) {
        setPath(path);
    }
}

QString PathPicker::path() const
{
    const QString text = box_->currentText().trimmed();
    const int index = box_->findText(text);
    if (index >= 0 && !text.isEmpty()) {
        return box_->itemData(index).toString();
    }
    return text;
}

void PathPicker::setPath(const QString& path)
{
    const QString trimmed = path.trimmed();
    const int index = trimmed.isEmpty() ? -1 : box_->findData(cleanAbsolute(trimmed));
    if (index >= 0) {
        box_->setCurrentIndex(index);
        box_->setEditText(box_->itemText(index));
    } else {
        box_->setCurrentIndex(-1);
        box_->setEditText(trimmed);
    }
}

CalibrationPicker::CalibrationPicker(
    const store::RunStore* store, bool allowExplicit, QWidget* parent, const QString& explicitLabel)
    : QWidget(parent)
    , store_(store)
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    calibration_ = new QComboBox(this);
    calibration_->setObjectName("calibrationPickerBox");
    if (allowExplicit) {
        calibration_->addItem(
            explicitLabel.isEmpty() ? tr("an explicit threshold") : explicitLabel, QVariant::fromValue<qlonglong>(0));
    }
    if (store_) {
        try {
            for (const store::CalibrationInfo& c : store::calibrations(*store_)) {
                calibration_->addItem(tr("calibration #%1 %2").arg(c.id).arg(QString::fromStdString(c.name)),
                    QVariant::fromValue<qlonglong>(c.id));
            }
        } catch (const std::exception&) {
            // Unreadable: only the explicit threshold is offered.
        }
    }
    calibration_->setCurrentIndex(calibration_->count() - 1); // the newest calibration
    layout->addWidget(calibration_, 2);
    layout->addWidget(new QLabel(tr("at step"), this));
    step_ = new QComboBox(this);
    step_->setObjectName("calibrationPickerStep");
    layout->addWidget(step_, 1);
    threshold_ = new QDoubleSpinBox(this);
    threshold_->setObjectName("calibrationPickerThreshold");
    threshold_->setDecimals(6);
    threshold_->setRange(0.000001, 100.0);
    threshold_->setValue(0.01);
    threshold_->setSuffix(tr(" nats/token"));
    threshold_->setVisible(allowExplicit);
    layout->addWidget(threshold_, 1);
    connect(calibration_, &QComboBox::currentIndexChanged, this, [this] {
        fillSteps();
        emit changed();
    });
    connect(step_, &QComboBox::currentIndexChanged, this, &CalibrationPicker::changed);
    connect(threshold_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &CalibrationPicker::changed);
    fillSteps();
}

void CalibrationPicker::fillSteps()
{
    const QSignalBlocker block(step_);
    step_->clear();
    const std::int64_t id = calibrationId();
    threshold_->setEnabled(id == 0);
    step_->setEnabled(id != 0);
    if (id == 0 || !store_) {
        return;
    }
    try {
        const auto calibration = store::calibration(*store_, id);
        if (!calibration) {
            return;
        }
        for (const store::CalibrationBracket& b : calibration->brackets) {
            const std::optional<double> threshold = b.threshold ? b.threshold : b.largestPassing;
            step_->addItem(threshold ? tr("%1 (threshold %2)").arg(b.step).arg(*threshold, 0, 'g', 4)
                                     : tr("%1 (nothing passed: no threshold)").arg(b.step),
                QVariant::fromValue<qlonglong>(b.step));
            step_->setItemData(step_->count() - 1, threshold ? QVariant(*threshold) : QVariant(), Qt::UserRole + 1);
        }
    } catch (const std::exception&) {
        // No steps offered; the dialog says the calibration cannot be used.
    }
    step_->setCurrentIndex(step_->count() - 1); // the latest step: the budget of the most trained student
}

std::int64_t CalibrationPicker::calibrationId() const
{
    return calibration_->currentIndex() < 0 ? 0 : calibration_->currentData().toLongLong();
}

std::optional<std::int64_t> CalibrationPicker::step() const
{
    if (calibrationId() == 0 || step_->currentIndex() < 0) {
        return std::nullopt;
    }
    return step_->currentData().toLongLong();
}

void CalibrationPicker::offerNone(const QString& label)
{
    // Id 0 as the explicit threshold's entry has: every "no calibration" path stays one; threshold() tells them apart.
    Q_ASSERT(calibration_->findData(QVariant::fromValue<qlonglong>(0)) < 0); // a picker without the explicit entry
    noneOffered_ = true;
    calibration_->insertItem(0, label, QVariant::fromValue<qlonglong>(0));
    calibration_->setCurrentIndex(0); // emits changed through the box
}

std::optional<double> CalibrationPicker::threshold() const
{
    if (calibrationId() == 0) {
        return noneOffered_ ? std::nullopt : std::optional<double>(threshold_->value());
    }
    const QVariant value = step_->currentIndex() < 0 ? QVariant() : step_->currentData(Qt::UserRole + 1);
    return value.isValid() ? std::optional<double>(value.toDouble()) : std::nullopt;
}

QString CalibrationPicker::thresholdProblem() const
{
    if (calibrationId() == 0 || threshold()) {
        return {};
    }
    return stepCount() == 0
        ? tr("Budget from: calibration #%1 has no budget bracket").arg(calibrationId())
        : tr("Budget step: calibration #%1 has no passing run at step %2, so it gives no budget there")
              .arg(calibrationId())
              .arg(step().value_or(0));
}

double CalibrationPicker::explicitThreshold() const
{
    return threshold_->value();
}

bool CalibrationPicker::select(std::int64_t id, std::optional<std::int64_t> step)
{
    const int index = calibration_->findData(QVariant::fromValue<qlonglong>(id));
    if (index < 0) {
        return false;
    }
    calibration_->setCurrentIndex(index);
    fillSteps();
    if (step) {
        const int stepIndex = step_->findData(QVariant::fromValue<qlonglong>(*step));
        if (stepIndex < 0) {
            return false;
        }
        step_->setCurrentIndex(stepIndex);
    }
    emit changed();
    return true;
}

void CalibrationPicker::setExplicitThreshold(double value)
{
    threshold_->setValue(value);
}

int CalibrationPicker::stepCount() const
{
    return step_->count();
}

} // namespace mismatch::ui

#include "ui/dialogs/export_dialog.h"

#include "core/jobs/job_spec.h"

#include <QClipboard>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFontDatabase>
#include <QFormLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>

namespace mismatch::ui {

ExportDialog::ExportDialog(const quant::Recipe& recipe, const quant::RecipePlan& plan, const QString& recipeFile,
    const QString& modelDirectory, QWidget* parent)
    : QDialog(parent)
    , recipe_(recipe)
    , plan_(plan)
    , recipeFile_(recipeFile)
    , modelDirectory_(modelDirectory)
{
    setWindowTitle(tr("Export Recipe"));
    setObjectName(QStringLiteral("exportDialog"));
    resize(900, 640);
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    target_ = new QComboBox(this);
    target_->setObjectName(QStringLiteral("exportTarget"));
    for (const std::string& name : io::exportTargetChoices()) {
        target_->addItem(QString::fromStdString(name), QString::fromStdString(name));
    }
    form->addRow(tr("Target:"), target_);
    vllmForm_ = new QComboBox(this);
    vllmForm_->setObjectName(QStringLiteral("exportVllmForm"));
    vllmForm_->addItem(tr("online: vLLM quantizes the BF16 checkpoint at load time"), QStringLiteral("online"));
    vllmForm_->addItem(tr("checkpoint: the quantization_config of a checkpoint stored in FP8"), QStringLiteral("checkpoint"));
    form->addRow(tr("vLLM form:"), vllmForm_);
    verlRollout_ = new QComboBox(this);
    verlRollout_->setObjectName(QStringLiteral("exportVerlRollout"));
    verlRollout_->addItem(tr("vLLM rollout"), QStringLiteral("vllm"));
    verlRollout_->addItem(tr("SGLang rollout (can leave modules in BF16)"), QStringLiteral("sglang"));
    form->addRow(tr("verl rollout:"), verlRollout_);
    // verl's on-policy distillation (`mismatch export --to verl --teacher ...`): the objective the budget was
    // calibrated with and the rollout correction, written as verl's distillation and rollout_correction keys.
    teacher_ = new QLineEdit(this);
    teacher_->setObjectName(QStringLiteral("exportVerlTeacher"));
    teacher_->setPlaceholderText(tr("none: a plain verl rollout; a teacher directory or Hugging Face id: OPD"));
    auto* browse = new QPushButton(tr("Browse..."), this);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString directory = QFileDialog::getExistingDirectory(this, tr("Teacher model directory"));
        if (!directory.isEmpty()) {
            teacher_->setText(directory);
        }
    });
    auto* teacherRow = new QHBoxLayout;
    teacherRow->addWidget(teacher_, 1);
    teacherRow->addWidget(browse);
    form->addRow(tr("OPD teacher:"), teacherRow);
    objective_ = new QComboBox(this);
    objective_->setObjectName(QStringLiteral("exportVerlObjective"));
    for (const char* objective : {"opd_k1", "opd_k3", "opd_full_kl", "opd_topk"}) {
        objective_->addItem(QString::fromLatin1(objective), QString::fromLatin1(objective));
    }
    topK_ = new QSpinBox(this);
    topK_->setObjectName(QStringLiteral("exportVerlTopK"));
    topK_->setRange(1, 1 << 20);
    topK_->setValue(64);
    topK_->setPrefix(tr("k = "));
    auto* objectiveRow = new QHBoxLayout;
    objectiveRow->addWidget(objective_, 1);
    objectiveRow->addWidget(topK_);
    form->addRow(tr("OPD objective:"), objectiveRow);
    correction_ = new QComboBox(this);
    correction_->setObjectName(QStringLiteral("exportVerlCorrection"));
    correction_->addItem(tr("none"), QStringLiteral("none"));
    correction_->addItem(tr("TIS: truncated importance sampling"), QStringLiteral("tis"));
    correction_->addItem(tr("MIS: masked importance sampling"), QStringLiteral("mis"));
    correctionCap_ = new QDoubleSpinBox(this);
    correctionCap_->setObjectName(QStringLiteral("exportVerlCorrectionCap"));
    correctionCap_->setRange(1.01, 1e6);
    correctionCap_->setDecimals(2);
    correctionCap_->setValue(2.0);
    correctionCap_->setPrefix(tr("cap C = "));
    auto* correctionRow = new QHBoxLayout;
    correctionRow->addWidget(correction_, 1);
    correctionRow->addWidget(correctionCap_);
    form->addRow(tr("Rollout correction:"), correctionRow);
    layout->addLayout(form);
    error_ = new QLabel(this);
    error_->setObjectName(QStringLiteral("exportError"));
    error_->setWordWrap(true);
    error_->setStyleSheet(QStringLiteral("color: #c62828"));
    layout->addWidget(error_);
    // The refusal a recipe built from a default scan meets (vLLM and llm-compressor quantize linear layers only),
    // with its fix one click away instead of a dead end.
    keepEmbedding_ = new QPushButton(tr("Keep the Embedding and lm_head in BF16"), this);
    keepEmbedding_->setObjectName(QStringLiteral("exportKeepEmbeddingButton"));
    keepEmbedding_->setToolTip(tr("Adds a BF16 rule for model.embed_tokens and lm_head to the open recipe (undo with "
                                  "Ctrl+Z) and exports it again"));
    connect(keepEmbedding_, &QPushButton::clicked, this, &ExportDialog::keepEmbeddingInBf16Requested);
    layout->addWidget(keepEmbedding_, 0, Qt::AlignLeft);
    alternatives_ = new QWidget(this);
    alternatives_->setObjectName(QStringLiteral("exportAlternatives"));
    alternatives_->setLayout(new QHBoxLayout);
    alternatives_->layout()->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(alternatives_);
    warnings_ = new QLabel(this);
    warnings_->setObjectName(QStringLiteral("exportWarnings"));
    warnings_->setWordWrap(true);
    warnings_->setStyleSheet(QStringLiteral("color: #8a5a00"));
    layout->addWidget(warnings_);
    tabs_ = new QTabWidget(this);
    tabs_->setObjectName(QStringLiteral("exportFiles"));
    layout->addWidget(tabs_, 1);
    layout->addWidget(new QLabel(tr("Headless equivalent:"), this));
    command_ = new QLabel(this);
    command_->setObjectName(QStringLiteral("exportCli"));
    command_->setWordWrap(true);
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setStyleSheet(QStringLiteral("font-family: monospace; background: #f4f4f4; padding: 4px"));
    layout->addWidget(command_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    copy_ = buttons->addButton(tr("Copy"), QDialogButtonBox::ActionRole);
    copy_->setObjectName(QStringLiteral("exportCopy"));
    copy_->setToolTip(tr("Copy the file shown to the clipboard"));
    save_ = buttons->addButton(tr("Save to Folder..."), QDialogButtonBox::ActionRole);
    save_->setObjectName(QStringLiteral("exportSave"));
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(copy_, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(currentText()); });
    connect(save_, &QPushButton::clicked, this, [this] {
        const QString directory = QFileDialog::getExistingDirectory(this, tr("Save the export to a folder"));
        QString error;
        if (!directory.isEmpty() && !saveTo(directory, &error)) {
            QMessageBox::warning(this, tr("Export Recipe"), error);
        }
    });
    for (QComboBox* box : {target_, vllmForm_, verlRollout_, objective_, correction_}) {
        connect(box, &QComboBox::currentIndexChanged, this, &ExportDialog::refresh);
    }
    connect(teacher_, &QLineEdit::textChanged, this, &ExportDialog::refresh);
    connect(topK_, &QSpinBox::valueChanged, this, &ExportDialog::refresh);
    connect(correctionCap_, &QDoubleSpinBox::valueChanged, this, &ExportDialog::refresh);
    refresh();
}

void ExportDialog::setVerlDistillation(
    const QString& teacher, const QString& objective, int topK, const QString& correction, double cap)
{
    const QSignalBlocker blockers[] = {QSignalBlocker(teacher_), QSignalBlocker(objective_), QSignalBlocker(topK_),
        QSignalBlocker(correction_), QSignalBlocker(correctionCap_)};
    teacher_->setText(teacher);
    objective_->setCurrentIndex(std::max(0, objective_->findData(objective)));
    topK_->setValue(topK);
    correction_->setCurrentIndex(std::max(0, correction_->findData(correction)));
    correctionCap_->setValue(cap);
    refresh();
}

// The distillation settings when the target is verl and a teacher is named (else none: a plain rollout export).
std::optional<io::VerlDistillation> ExportDialog::distillation() const
{
    const QString teacher = teacher_->text().trimmed();
    if (target_->currentData().toString() != QLatin1String("verl") || teacher.isEmpty()) {
        return std::nullopt;
    }
    io::VerlDistillation opd;
    opd.teacherPath = teacher.toStdString();
    opd.objective = objective_->currentData().toString().toStdString();
    opd.topK = opd.objective == "opd_topk" ? topK_->value() : 0;
    opd.correction = correction_->currentData().toString().toStdString();
    opd.correctionCap = correctionCap_->value();
    return opd;
}

void ExportDialog::setTarget(const QString& target)
{
    target_->setCurrentIndex(std::max(0, target_->findData(target)));
}

void ExportDialog::setVllmForm(const QString& form)
{
    vllmForm_->setCurrentIndex(std::max(0, vllmForm_->findData(form)));
}

void ExportDialog::setVerlRollout(const QString& rollout)
{
    verlRollout_->setCurrentIndex(std::max(0, verlRollout_->findData(rollout)));
}

QString ExportDialog::errorText() const
{
    return error_->text();
}

QString ExportDialog::warningsText() const
{
    return warnings_->text();
}

QString ExportDialog::commandText() const
{
    return command_->text();
}

QString ExportDialog::currentText() const
{
    const int index = tabs_->currentIndex();
    return index >= 0 && index < static_cast<int>(files_.size())
        ? QString::fromStdString(files_[static_cast<std::size_t>(index)].text)
        : QString();
}

bool ExportDialog::saveTo(const QString& directory, QString* error) const
{
    try {
        if (files_.empty()) {
            throw std::runtime_error(errorText().toStdString());
        }
        io::ExportResult result;
        result.files = files_;
        // Not over the recipe, nor into the model directory (the model's own config.json, say): issue 46.
        std::vector<std::string> names;
        for (const io::ExportFile& file : files_) {
            names.push_back(file.name);
        }
        const std::string model = modelDirectory_.toStdString();
        io::requireExportIsNoInput(directory.toStdString(), names,
            {recipeFile_.toStdString(), model.empty() ? "" : model + "/config.json", model, ""});
        io::writeExportDirectory(directory.toStdString(), result);
    } catch (const std::exception& failure) {
        if (error) {
            *error = QString::fromUtf8(failure.what());
        }
        return false;
    }
    return true;
}

void ExportDialog::refresh()
{
    const QString target = target_->currentData().toString();
    vllmForm_->setEnabled(target == QLatin1String("vllm"));
    const bool verl = target == QLatin1String("verl");
    verlRollout_->setEnabled(verl);
    teacher_->setEnabled(verl);
    const bool distilling = verl && !teacher_->text().trimmed().isEmpty();
    objective_->setEnabled(distilling);
    topK_->setEnabled(distilling && objective_->currentData().toString() == QLatin1String("opd_topk"));
    correction_->setEnabled(distilling);
    correctionCap_->setEnabled(distilling && correction_->currentData().toString() != QLatin1String("none"));
    io::ExportOptions options;
    options.target = *io::parseExportTarget(target.toStdString()); // the list holds only the targets it names
    options.vllmForm = *io::parseVllmForm(vllmForm_->currentData().toString().toStdString());
    options.verlRollout = *io::parseVerlRollout(verlRollout_->currentData().toString().toStdString());
    options.modelPath = modelDirectory_.toStdString();
    options.distillation = distillation();
    // The same export from the command line.
    // (RECIPE, MODEL and DIR stand for what is not known here; jobs::commandLine leaves such words unquoted.)
    std::vector<std::string> words = {"export",
        recipeFile_.isEmpty() ? std::string("RECIPE") : recipeFile_.toStdString(), "--to", target.toStdString(),
        "--model", modelDirectory_.isEmpty() ? std::string("MODEL") : modelDirectory_.toStdString()};
    if (target == QLatin1String("vllm") && options.vllmForm != io::VllmForm::Online) {
        words.insert(words.end(), {"--vllm-form", io::toString(options.vllmForm)});
    }
    if (target == QLatin1String("verl") && options.verlRollout != io::VerlRollout::Vllm) {
        words.insert(words.end(), {"--rollout", io::toString(options.verlRollout)});
    }
    if (const std::optional<io::VerlDistillation>& opd = options.distillation) {
        words.insert(words.end(), {"--teacher", opd->teacherPath, "--objective", opd->objective});
        if (opd->objective == "opd_topk") {
            words.insert(words.end(), {"--top-k", std::to_string(opd->topK)});
        }
        if (opd->correction != "none") {
            words.insert(words.end(), {"--correction", opd->correction, "--correction-cap",
                QString::number(opd->correctionCap, 'g', 10).toStdString()});
        }
    }
    words.insert(words.end(), {"--out", "DIR"});
    command_->setText(QString::fromStdString(jobs::commandLine(words)));

    tabs_->clear();
    files_.clear();
    try {
        const io::ExportResult result = io::exportBundle(recipe_, plan_, options);
        files_ = result.files;
        error_->clear();
        QStringList warnings;
        for (const std::string& warning : result.warnings) {
            warnings.push_back(tr("Warning: %1").arg(QString::fromStdString(warning)));
        }
        warnings_->setText(warnings.join(QLatin1Char('\n')));
    } catch (const std::exception& failure) {
        error_->setText(tr("Not exportable to %1: %2").arg(target, QString::fromUtf8(failure.what())));
        warnings_->clear();
    }
    showAlternatives(options);
    const QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    for (const io::ExportFile& file : files_) {
        auto* view = new QPlainTextEdit(QString::fromStdString(file.text), tabs_);
        view->setReadOnly(true);
        view->setFont(mono);
        view->setLineWrapMode(QPlainTextEdit::NoWrap);
        tabs_->addTab(view, QString::fromStdString(file.name));
    }
    copy_->setEnabled(!files_.empty());
    save_->setEnabled(!files_.empty());
    error_->setVisible(!error_->text().isEmpty());
    keepEmbedding_->setVisible(offersEmbeddingFix());
    warnings_->setVisible(!warnings_->text().isEmpty());
}

void ExportDialog::showAlternatives(const io::ExportOptions& refused)
{
    alternativeTargets_.clear();
    QLayout* row = alternatives_->layout();
    while (QLayoutItem* item = row->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    if (!files_.empty()) {
        alternatives_->hide();
        return;
    }
    // Every other target, with its default form, on the same recipe and model: cheap (text only).
    for (const std::string& name : io::exportTargetChoices()) {
        io::ExportOptions options = refused;
        options.target = *io::parseExportTarget(name);
        options.vllmForm = io::VllmForm::Online;
        options.verlRollout = io::VerlRollout::Vllm;
        if (options.target == refused.target) {
            continue;
        }
        try {
            io::exportBundle(recipe_, plan_, options);
            alternativeTargets_.push_back(QString::fromStdString(name));
        } catch (const std::exception&) {
            // not this one either
        }
    }
    if (alternativeTargets_.isEmpty()) {
        alternatives_->hide();
        return;
    }
    row->addWidget(new QLabel(tr("Targets that take this recipe as it is:"), alternatives_));
    for (const QString& name : alternativeTargets_) {
        auto* button = new QPushButton(tr("Export for %1 instead").arg(name), alternatives_);
        button->setObjectName(QStringLiteral("exportAlternative_%1").arg(name));
        connect(button, &QPushButton::clicked, this, [this, name] { setTarget(name); });
        row->addWidget(button);
    }
    static_cast<QHBoxLayout*>(row)->addStretch(1);
    alternatives_->show();
}

QStringList ExportDialog::alternativeTargets() const
{
    return alternativeTargets_;
}

bool ExportDialog::offersEmbeddingFix() const
{
    const QString error = error_->text();
    return !error.isEmpty()
        && (error.contains(QString::fromStdString(quant::kEmbedName)) || error.contains(QString::fromStdString(quant::kLmHeadName)));
}

void ExportDialog::setRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan)
{
    recipe_ = recipe;
    plan_ = plan;
    refresh();
}

} // namespace mismatch::ui

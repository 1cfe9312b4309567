#include "ui/sensitivity_dialog.h"

#include "core/analysis/sensitivity.h"
#include "core/store/run_store.h"
#include "ui/recipe_editor.h"
#include "ui/training_dialog.h"

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace mismatch::ui {

SensitivityDialog::SensitivityDialog(const QString& workspaceDirectory, QWidget* parent)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
{
    setWindowTitle(tr("Start Sensitivity Scan"));
    setObjectName("sensitivityDialog");
    resize(620, 360);
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    model_ = new QLineEdit(this);
    model_->setObjectName("scanModelEdit");
    form->addRow(tr("Model directory:"), model_);
    prompts_ = new QLineEdit(this);
    prompts_->setObjectName("scanPromptsEdit");
    form->addRow(tr("Prompt set (JSONL):"), prompts_);
    format_ = new QComboBox(this);
    format_->setObjectName("scanFormatBox");
    for (const std::string& choice : weightChoices()) {
        if (choice != "bf16")
            format_->addItem(QString::fromStdString(choice));
    }
    format_->setCurrentText(QStringLiteral("fp8_e4m3/block128"));
    form->addRow(tr("Quantize each cell's weights to:"), format_);
    activations_ = new QComboBox(this);
    for (const std::string& choice : activationChoices())
        activations_->addItem(QString::fromStdString(choice));
    form->addRow(tr("... and its input activations to:"), activations_);
    count_ = new QSpinBox(this);
    count_->setRange(0, 1000000);
    count_->setValue(64);
    count_->setSpecialValueText(tr("all"));
    form->addRow(tr("Prompts (first N):"), count_);
    maxTokens_ = new QSpinBox(this);
    maxTokens_->setRange(1, 100000);
    maxTokens_->setValue(16);
    form->addRow(tr("Generated tokens per prompt:"), maxTokens_);
    kvCells_ = new QCheckBox(tr("also each layer's KV cache (fp8_e4m3, per tensor)"), this);
    kvCells_->setChecked(true);
    form->addRow(QString(), kvCells_);
    embeddingCells_ = new QCheckBox(tr("also the embedding / lm_head"), this);
    embeddingCells_->setChecked(true);
    form->addRow(QString(), embeddingCells_);
    layout->addLayout(form);
    status_ = new QLabel(this);
    status_->setObjectName("scanStatus");
    status_->setWordWrap(true);
    layout->addWidget(status_);
    layout->addWidget(new QLabel(tr("Headless equivalent:"), this));
    command_ = new QLabel(this);
    command_->setObjectName("scanCli");
    command_->setWordWrap(true);
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setStyleSheet(QStringLiteral("font-family: monospace; background: #f4f4f4; padding: 4px"));
    layout->addWidget(command_);
    auto* buttons = new QDialogButtonBox(this);
    auto* copy = buttons->addButton(tr("Copy CLI Command"), QDialogButtonBox::ActionRole);
    start_ = buttons->addButton(tr("Start"), QDialogButtonBox::AcceptRole);
    start_->setObjectName("startScanButton");
    buttons->addButton(QDialogButtonBox::Cancel);
    layout->addWidget(buttons);
    connect(copy, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(cliCommand()); });
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    for (QLineEdit* edit : {model_, prompts_})
        connect(edit, &QLineEdit::textChanged, this, &SensitivityDialog::validate);
    for (QComboBox* box : {format_, activations_})
        connect(box, &QComboBox::currentTextChanged, this, &SensitivityDialog::validate);
    for (QSpinBox* box : {count_, maxTokens_})
        connect(box, qOverload<int>(&QSpinBox::valueChanged), this, &SensitivityDialog::validate);
    for (QCheckBox* box : {kvCells_, embeddingCells_})
        connect(box, &QCheckBox::toggled, this, &SensitivityDialog::validate);
    validate();
}

void SensitivityDialog::setModelDirectory(const QString& directory)
{
    model_->setText(directory);
}
void SensitivityDialog::setPromptSet(const QString& path)
{
    prompts_->setText(path);
}
void SensitivityDialog::setFormat(const QString& weightChoice)
{
    format_->setCurrentText(weightChoice);
}
QString SensitivityDialog::modelDirectory() const
{
    return model_->text().trimmed();
}
QString SensitivityDialog::promptSet() const
{
    return prompts_->text().trimmed();
}
void SensitivityDialog::setCount(int prompts)
{
    count_->setValue(prompts);
}
void SensitivityDialog::setMaxTokens(int tokens)
{
    maxTokens_->setValue(tokens);
}

QString SensitivityDialog::jobName() const
{
    return tr("Sensitivity %1 (%2)").arg(QFileInfo(model_->text().trimmed()).fileName(), format_->currentText());
}

QString SensitivityDialog::cliCommand() const
{
    // The CLI writes a granularity after a colon: fp8_e4m3:block128.
    QString format = format_->currentText();
    format.replace(QLatin1Char('/'), QLatin1Char(':'));
    QString command
        = QStringLiteral("mismatch --workspace %1 sensitivity %2 --format %3 --prompts %4 --activations %5 "
                         "--count %6 --max-tokens %7")
              .arg(shellQuote(workspace_), shellQuote(QFileInfo(model_->text().trimmed()).absoluteFilePath()), format,
                  shellQuote(QFileInfo(prompts_->text().trimmed()).absoluteFilePath()), activations_->currentText())
              .arg(count_->value())
              .arg(maxTokens_->value());
    if (!kvCells_->isChecked())
        command += QStringLiteral(" --no-kv");
    if (!embeddingCells_->isChecked())
        command += QStringLiteral(" --no-embedding");
    return command;
}

void SensitivityDialog::validate()
{
    error_.clear();
    const QString model = model_->text().trimmed();
    const QString prompts = prompts_->text().trimmed();
    if (model.isEmpty() || !QFileInfo::exists(QDir(model).filePath("config.json"))) {
        error_ = tr("Model directory: expected a folder holding config.json and the checkpoint (got '%1')").arg(model);
    } else if (prompts.isEmpty() || !QFileInfo(prompts).isFile()) {
        error_ = tr("Prompt set: expected a JSON Lines file (got '%1')").arg(prompts);
    }
    status_->setText(error_.isEmpty()
            ? tr("Ready: the BF16 unit first, then one cell at a time; cells are stored as they "
                 "are measured.")
            : error_);
    status_->setStyleSheet(error_.isEmpty() ? QString() : QStringLiteral("color: #c62828"));
    start_->setEnabled(error_.isEmpty());
    command_->setText(error_.isEmpty() ? cliCommand() : QString());
}

JobWorker::Job SensitivityDialog::job() const
{
    analysis::SensitivityOptions options;
    options.modelDirectory = model_->text().trimmed().toStdString();
    options.promptSetPath = prompts_->text().trimmed().toStdString();
    options.count = count_->value();
    options.settings.maxNewTokens = maxTokens_->value();
    options.weights = *parseWeightChoice(format_->currentText().toStdString());
    options.activations = *parseActivationChoice(activations_->currentText().toStdString());
    options.kvCells = kvCells_->isChecked();
    options.embeddingCells = embeddingCells_->isChecked();
    return [workspace = workspace_.toStdString(), options](Progress& progress) {
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::CreateOrOpen);
        analysis::runSensitivity(store, options, progress);
    };
}

} // namespace mismatch::ui

#include "ui/dialogs/sensitivity_dialog.h"

#include "core/analysis/sensitivity.h"
#include "core/store/run_store.h"
#include "ui/views/recipe_editor.h"
#include "ui/dialogs/training_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QSpinBox>

namespace mismatch::ui {

SensitivityDialog::SensitivityDialog(const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, tr("Start Sensitivity Scan"), QStringLiteral("sensitivityDialog"), parent, store)
{
    setOpeningWidth(680);
    QFormLayout* form = this->form();
    model_ = addPicker(PickKind::ModelDirectory, tr("Model directory:"), QStringLiteral("scanModelEdit"));
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("scanPromptsEdit"));
    // A first scan starts ready, as the other analysis dialogs do: the workspace's demo student (registered or
    // built-in) on its probe set.
    model_->selectStartingChoice();
    prompts_->selectStartingChoice();
    format_ = new QComboBox(this);
    format_->setObjectName("scanFormatBox");
    for (const std::string& choice : weightChoices()) {
        if (choice != "bf16")
            format_->addItem(QString::fromStdString(choice));
    }
    format_->setCurrentText(QStringLiteral("fp8_e4m3/block128"));
    form->addRow(tr("Quantize each cell's weights to:"), format_);
    // The plain fields are the catalogue's: its labels, help texts, ranges and choices.
    const jobs::JobDefinition& job = catalogueJob("sensitivity");
    activations_ = addParameterField<QComboBox>(job, "activations", QStringLiteral("scanActivationsBox"));
    // A scan from the GUI starts small so that it is quick: 64 prompts of 16 tokens, where the job's defaults (the
    // CLI's) are every prompt and 64 tokens; the spec then gives both.
    count_ = addParameterField<QSpinBox>(
        job, "count", QStringLiteral("scanCountBox"), FieldOptions().start(64).special(tr("all")));
    maxTokens_
        = addParameterField<QSpinBox>(job, "max_tokens", QStringLiteral("scanMaxTokensBox"), FieldOptions().start(16));
    kvFormat_ = addParameterField<QComboBox>(job, "kv_format", QStringLiteral("scanKvFormatBox"));
    noKv_ = addParameterField<QCheckBox>(job, "no_kv", QStringLiteral("scanNoKvBox"));
    // Without KV cells the KV format has nothing to quantize.
    connect(noKv_, &QCheckBox::toggled, kvFormat_, [this](bool off) { kvFormat_->setEnabled(!off); });
    noEmbedding_ = addParameterField<QCheckBox>(job, "no_embedding", QStringLiteral("scanNoEmbeddingBox"));
    watch(format_);
    addDeviceField();
    finishLayout(QStringLiteral("scanStatus"), QStringLiteral("scanCli"), QStringLiteral("startScanButton"));
}

void SensitivityDialog::setModelDirectory(const QString& directory)
{
    if (!directory.trimmed().isEmpty()) {
        model_->setPath(directory);
    }
}
void SensitivityDialog::setPromptSet(const QString& path)
{
    if (!path.trimmed().isEmpty()) {
        prompts_->setPath(path);
    }
}
void SensitivityDialog::setFormat(const QString& weightChoice)
{
    format_->setCurrentText(weightChoice);
}
QString SensitivityDialog::modelDirectory() const
{
    return model_->path();
}
QString SensitivityDialog::promptSet() const
{
    return prompts_->path();
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
    return tr("Sensitivity %1 (%2)").arg(QFileInfo(modelDirectory()).fileName(), format_->currentText());
}

QString SensitivityDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> SensitivityDialog::spec() const
{
    jobs::JobSpec spec("sensitivity");
    spec.set("model", absolutePath(modelDirectory()).toStdString());
    // The CLI and job files write a granularity after a colon: fp8_e4m3:block128.
    spec.set("format", format_->currentText().replace(QLatin1Char('/'), QLatin1Char(':')).toStdString());
    spec.set("prompts", absolutePath(promptSet()).toStdString());
    setParameters(spec, {"activations", "count", "max_tokens", "kv_format", "no_kv", "no_embedding"});
    setDevice(spec);
    return spec;
}

QString SensitivityDialog::check() const
{
    const QString model = modelDirectory();
    const QString prompts = promptSet();
    if (model.isEmpty() || !QFileInfo::exists(QDir(model).filePath("config.json"))) {
        return tr("Model directory: expected a folder holding config.json and the checkpoint (got '%1')").arg(model);
    }
    if (prompts.isEmpty() || !QFileInfo(prompts).isFile()) {
        return tr("Prompt set: expected a JSON Lines file (got '%1')").arg(prompts);
    }
    return specError(*spec());
}

QString SensitivityDialog::readyText() const
{
    return tr("Ready: the BF16 unit first, then one cell at a time; cells are stored as they are measured.");
}

JobWorker::Job SensitivityDialog::job() const
{
    return specJob(*spec());
}

} // namespace mismatch::ui

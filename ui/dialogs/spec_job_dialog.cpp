#include "ui/dialogs/spec_job_dialog.h"

#include "core/common/error.h"

#include <QFormLayout>
#include <QLabel>

namespace mismatch::ui {

SpecJobDialog::SpecJobDialog(
    const std::string& kind, const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, QString(), QStringLiteral("specJobDialog_%1").arg(QString::fromStdString(kind)),
          parent, store)
    , definition_(&jobs::JobSpec(kind).definition())
{
    setWindowTitle(tr("Job: mismatch %1").arg(commandTitle(*definition_)));
    setOpeningWidth(720);
    QFormLayout* form = this->form();
    auto* summary = new QLabel(QString::fromStdString(definition_->summary), this);
    summary->setWordWrap(true);
    summary->setObjectName(QStringLiteral("specJobSummary"));
    form->addRow(summary);
    // Numbers typed, as every other value: an empty field is the default (or "not given"), and a typed value that is
    // not of the type or out of range is named by the job's own checks.
    for (const jobs::Parameter& parameter : definition_->parameters) {
        addParameterField(*definition_, parameter.name,
            QStringLiteral("field_%1").arg(QString::fromStdString(parameter.name)), FieldOptions().numbersAsText());
    }
    finishLayout(QStringLiteral("specJobStatus"), QStringLiteral("specJobCli"), QStringLiteral("specJobStart"));
}

QWidget* SpecJobDialog::field(const std::string& parameter) const
{
    return parameterField(parameter);
}

void SpecJobDialog::setValue(const std::string& parameter, const QString& text)
{
    QWidget* widget = field(parameter);
    if (!widget) {
        throw InputError(definition_->kind, parameter, "the job has no such parameter");
    }
    setFieldText(widget, text);
}

jobs::JobSpec SpecJobDialog::readSpec(QString* error) const
{
    jobs::JobSpec spec(*definition_);
    for (const ParameterField& field : parameterFields()) {
        setParameter(spec, *field.parameter, field.widget, error);
    }
    return spec;
}

std::optional<jobs::JobSpec> SpecJobDialog::spec() const
{
    return readSpec(nullptr);
}

QString SpecJobDialog::check() const
{
    QString error;
    const jobs::JobSpec spec = readSpec(&error);
    return error.isEmpty() ? specError(spec) : error;
}

QString SpecJobDialog::readyText() const
{
    return tr("Ready: %1.").arg(QString::fromStdString(definition_->summary));
}

QString SpecJobDialog::jobName() const
{
    return commandTitle(*definition_);
}

QString SpecJobDialog::cliCommand() const
{
    return specCommand(*spec());
}

JobWorker::Job SpecJobDialog::job() const
{
    return specJob(*spec());
}

QString commandTitle(const jobs::JobDefinition& job)
{
    QStringList words;
    for (const std::string& word : job.command) {
        words.push_back(QString::fromStdString(word));
    }
    return words.join(QLatin1Char(' '));
}

std::vector<std::string> specDialogJobs()
{
    return {"generate", "logits", "quantize", "zoo_build", "zoo_shape", "import_aimet", "report"};
}

} // namespace mismatch::ui

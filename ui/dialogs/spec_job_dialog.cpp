#include "ui/dialogs/spec_job_dialog.h"

#include "core/common/error.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>

namespace mismatch::ui {

namespace {

// Output paths are typed (the job creates them); inputs get a picker of the kind the name says.
bool isOutput(const jobs::Parameter& parameter)
{
    return parameter.name == "out" || parameter.name == "directory";
}

PickKind pickKind(const jobs::Parameter& parameter)
{
    if (parameter.name == "model" || parameter.name == "staleness_from") return PickKind::ModelDirectory;
    if (parameter.name == "prompts") return PickKind::PromptSet;
    if (parameter.name == "recipe") return PickKind::Recipe;
    if (parameter.name == "run_file") return PickKind::RunFile;
    if (parameter.name == "candidates") return PickKind::Candidates;
    return PickKind::AnyFile;
}

// What an empty field means, shown as its placeholder.
QString placeholder(const jobs::Parameter& parameter)
{
    if (!parameter.defaultValue.is_null()) {
        const std::string text = jobs::valueText(parameter.defaultValue);
        return QObject::tr("default: %1").arg(text.empty() ? QObject::tr("none") : QString::fromStdString(text));
    }
    QString hint = parameter.required ? QObject::tr("required") : QObject::tr("not given");
    if (parameter.type == jobs::ParameterType::PathList || parameter.type == jobs::ParameterType::TextList) {
        hint += QObject::tr("; items separated by ';'");
    } else if (jobs::isList(parameter.type)) {
        hint += QObject::tr("; items separated by ','");
    }
    return hint;
}

// The items of a list field: paths and texts may hold commas, so they are separated by ';'; numbers and choices
// by ',' as on the command line.
QStringList listItems(const jobs::Parameter& parameter, const QString& text)
{
    if (parameter.type == jobs::ParameterType::PathList || parameter.type == jobs::ParameterType::TextList) {
        return splitPaths(text);
    }
    QStringList items;
    for (const QString& item : text.split(QLatin1Char(','))) {
        if (!item.trimmed().isEmpty()) {
            items.push_back(item.trimmed());
        }
    }
    return items;
}

} // namespace

SpecJobDialog::SpecJobDialog(
    const std::string& kind, const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, QString(), QStringLiteral("specJobDialog_%1").arg(QString::fromStdString(kind)),
          parent, store)
    , definition_(&jobs::JobSpec(kind).definition())
{
    setWindowTitle(tr("Job: mismatch %1").arg(commandTitle(*definition_)));
    resize(720, 200 + 34 * static_cast<int>(definition_->parameters.size()));
    QFormLayout* form = this->form();
    auto* summary = new QLabel(QString::fromStdString(definition_->summary), this);
    summary->setWordWrap(true);
    summary->setObjectName(QStringLiteral("specJobSummary"));
    form->addRow(summary);
    for (const jobs::Parameter& parameter : definition_->parameters) {
        const QString label = QString::fromStdString(parameter.label) + (parameter.required ? tr(" *:") : tr(":"));
        const QString help = QString::fromStdString(parameter.help);
        const QString objectName = QStringLiteral("field_%1").arg(QString::fromStdString(parameter.name));
        QWidget* widget = nullptr;
        if (parameter.type == jobs::ParameterType::Flag) {
            auto* box = new QCheckBox(this);
            box->setChecked(parameter.defaultValue.is_boolean() && parameter.defaultValue.get<bool>());
            watch(box);
            form->addRow(label, box);
            widget = box;
        } else if (parameter.type == jobs::ParameterType::Choice) {
            auto* box = new QComboBox(this);
            if (parameter.defaultValue.is_null()) {
                box->addItem(parameter.required ? tr("(choose)") : tr("(not given)"), QString());
            }
            for (const std::string& value : parameter.choices) {
                box->addItem(QString::fromStdString(value), QString::fromStdString(value));
            }
            if (parameter.defaultValue.is_string()) {
                box->setCurrentIndex(std::max(0, box->findData(QString::fromStdString(parameter.defaultValue))));
            }
            watch(box);
            form->addRow(label, box);
            widget = box;
        } else if (parameter.type == jobs::ParameterType::Path && !isOutput(parameter)) {
            PathPicker* picker = addPicker(pickKind(parameter), label, objectName);
            picker->comboBox()->setToolTip(help);
            widget = picker;
        } else {
            auto* edit = new QLineEdit(this);
            edit->setPlaceholderText(placeholder(parameter));
            watch(edit);
            form->addRow(label, edit);
            widget = edit;
        }
        widget->setObjectName(objectName);
        widget->setToolTip(help);
        fields_[parameter.name] = widget;
    }
    finishLayout(QStringLiteral("specJobStatus"), QStringLiteral("specJobCli"), QStringLiteral("specJobStart"));
}

QWidget* SpecJobDialog::field(const std::string& parameter) const
{
    const auto found = fields_.find(parameter);
    return found == fields_.end() ? nullptr : found->second;
}

void SpecJobDialog::setValue(const std::string& parameter, const QString& text)
{
    QWidget* widget = field(parameter);
    if (!widget) {
        throw InputError(definition_->kind, parameter, "the job has no such parameter");
    }
    if (auto* box = qobject_cast<QCheckBox*>(widget)) {
        box->setChecked(text == QLatin1String("true"));
    } else if (auto* combo = qobject_cast<QComboBox*>(widget)) {
        combo->setCurrentIndex(std::max(0, combo->findData(text)));
    } else if (auto* picker = qobject_cast<PathPicker*>(widget)) {
        picker->setPath(text);
    } else if (auto* edit = qobject_cast<QLineEdit*>(widget)) {
        edit->setText(text);
    }
}

QString SpecJobDialog::text(const jobs::Parameter& parameter) const
{
    QWidget* widget = field(parameter.name);
    if (auto* box = qobject_cast<QCheckBox*>(widget)) {
        return box->isChecked() ? QStringLiteral("true") : QStringLiteral("false");
    }
    if (auto* combo = qobject_cast<QComboBox*>(widget)) {
        return combo->currentData().toString();
    }
    if (auto* picker = qobject_cast<PathPicker*>(widget)) {
        return picker->path();
    }
    if (auto* edit = qobject_cast<QLineEdit*>(widget)) {
        return edit->text().trimmed();
    }
    return {};
}

jobs::JobSpec SpecJobDialog::readSpec(QString* error) const
{
    jobs::JobSpec spec(*definition_);
    for (const jobs::Parameter& parameter : definition_->parameters) {
        const QString value = text(parameter);
        if (value.isEmpty()) {
            continue; // the default, or not given
        }
        const auto parse = [&](const QString& item) -> std::optional<nlohmann::json> {
            // Paths as the command line names them: absolute, so the job runs the same from anywhere.
            const bool path = jobs::elementType(parameter.type) == jobs::ParameterType::Path;
            std::string problem;
            auto parsed = jobs::parseValue(parameter, (path ? absolutePath(item) : item).toStdString(), &problem);
            if (!parsed && error && error->isEmpty()) {
                *error = QStringLiteral("%1: %2").arg(
                    QString::fromStdString(parameter.label), QString::fromStdString(problem));
            }
            return parsed;
        };
        if (jobs::isList(parameter.type)) {
            nlohmann::json list = nlohmann::json::array();
            for (const QString& item : listItems(parameter, value)) {
                if (const auto parsed = parse(item)) {
                    list.push_back(*parsed);
                }
            }
            spec.set(parameter.name, list);
        } else if (const auto parsed = parse(value)) {
            spec.set(parameter.name, *parsed);
        }
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

#include "ui/dialogs/job_dialog.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/jobs/job_file.h"
#include "ui/dialogs/submit_dialog.h"
#include "ui/dialogs/training_dialog.h"

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QRegularExpression>
#include <QResizeEvent>
#include <QShowEvent>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>

namespace mismatch::ui {

JobDialog::JobDialog(const QString& workspaceDirectory, const QString& title, const QString& objectName,
    QWidget* parent, const store::RunStore* store)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
    , store_(store)
{
    setWindowTitle(title);
    setObjectName(objectName);
    auto* layout = new QVBoxLayout(this);
    form_ = new QFormLayout;
    layout->addLayout(form_);
}

void JobDialog::finishLayout(const QString& statusName, const QString& commandName, const QString& startName)
{
    auto* layout = qobject_cast<QVBoxLayout*>(this->layout());
    status_ = new QLabel(this);
    status_->setObjectName(statusName);
    status_->setWordWrap(true);
    layout->addWidget(status_);
    layout->addWidget(new QLabel(tr("Headless equivalent:"), this));
    command_ = new QLabel(this);
    command_->setObjectName(commandName);
    command_->setWordWrap(true);
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setStyleSheet(QStringLiteral("font-family: monospace; background: #f4f4f4; padding: 4px"));
    layout->addWidget(command_);
    auto* buttons = new QDialogButtonBox(this);
    auto* copy = buttons->addButton(tr("Copy CLI Command"), QDialogButtonBox::ActionRole);
    if (spec()) {
        auto* exportButton = buttons->addButton(tr("Export Job File..."), QDialogButtonBox::ActionRole);
        exportButton->setObjectName(QStringLiteral("exportJobFileButton"));
        connect(exportButton, &QPushButton::clicked, this, [this] {
            const QString path = QFileDialog::getSaveFileName(this, tr("Export Job File"),
                QDir(workspace_).filePath(QStringLiteral("%1.job.yaml").arg(QString::fromStdString(spec()->kind()))),
                tr("Job files (*.yaml *.yml)"));
            QString error;
            if (!path.isEmpty() && !exportJobFile(path, &error)) {
                QMessageBox::warning(this, tr("Export Job File"), error);
            }
        });
        // The same job file, handed to a Slurm cluster (its independent units one sbatch job each).
        auto* submitButton = buttons->addButton(tr("Submit to Slurm..."), QDialogButtonBox::ActionRole);
        submitButton->setObjectName(QStringLiteral("submitToSlurmButton"));
        connect(submitButton, &QPushButton::clicked, this, &JobDialog::showSubmitDialog);
    }
    start_ = buttons->addButton(tr("Start"), QDialogButtonBox::AcceptRole);
    start_->setObjectName(startName);
    buttons->addButton(QDialogButtonBox::Cancel);
    layout->addWidget(buttons);
    connect(copy, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(cliCommand()); });
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    validate();
    const int width = std::max(openingWidth_, minimumSizeHint().width());
    resize(width, contentsHeight(width));
}

SubmitDialog* JobDialog::showSubmitDialog()
{
    if (!valid()) {
        QMessageBox::information(this, tr("Submit to Slurm"), tr("The form is not complete: %1").arg(errorText()));
        return nullptr;
    }
    try {
        auto* dialog = new SubmitDialog(workspace_, QString::fromStdString(jobs::jobFileText(*spec())),
            SubmitDialog::Source::Text, this, tr("this form's job"));
        dialog->setAttribute(Qt::WA_DeleteOnClose);
        dialog->open();
        return dialog;
    } catch (const std::exception& error) {
        QMessageBox::warning(this, tr("Submit to Slurm"), QString::fromUtf8(error.what()));
        return nullptr;
    }
}

void JobDialog::addBelowForm(QWidget* widget, int stretch)
{
    auto* layout = qobject_cast<QVBoxLayout*>(this->layout());
    layout->insertWidget(layout->indexOf(form_) + 1, widget, stretch);
}

int JobDialog::contentsHeight(int width) const
{
    const QLayout* contents = layout();
    return contents->hasHeightForWidth() ? contents->totalHeightForWidth(width) : contents->totalSizeHint().height();
}

void JobDialog::keepContentsHeight()
{
    const QLayout* contents = layout();
    if (!contents || !contents->hasHeightForWidth()) {
        return; // no wrapped line: the layout's own minimum holds every row
    }
    const int least = contents->totalMinimumHeightForWidth(width());
    if (minimumHeight() != least) {
        setMinimumHeight(least); // grows the dialog when it is shorter
    }
}

bool JobDialog::event(QEvent* event)
{
    const bool handled = QDialog::event(event);
    if (event->type() == QEvent::LayoutRequest) {
        keepContentsHeight(); // a text changed: its lines at this width may have too
    }
    return handled;
}

void JobDialog::resizeEvent(QResizeEvent* event)
{
    QDialog::resizeEvent(event);
    if (event->size().width() != event->oldSize().width()) {
        keepContentsHeight(); // narrower: more lines
    }
}

void JobDialog::showEvent(QShowEvent* event)
{
    if (!shown_ && !event->spontaneous()) {
        // Polished now (the style's margins and fonts): the height the contents want, before the dialog is placed.
        shown_ = true;
        resize(width(), contentsHeight(width()));
    }
    keepContentsHeight();
    QDialog::showEvent(event);
}

QString JobDialog::statusText() const
{
    return status_ ? status_->text() : QString();
}

void JobDialog::watch(QLineEdit* edit)
{
    connect(edit, &QLineEdit::textChanged, this, &JobDialog::validate);
}

void JobDialog::watch(QComboBox* box)
{
    connect(box, &QComboBox::currentTextChanged, this, &JobDialog::validate);
}

void JobDialog::watch(QSpinBox* box)
{
    connect(box, qOverload<int>(&QSpinBox::valueChanged), this, &JobDialog::validate);
}

void JobDialog::watch(QDoubleSpinBox* box)
{
    connect(box, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &JobDialog::validate);
}

void JobDialog::watch(QCheckBox* box)
{
    connect(box, &QCheckBox::toggled, this, &JobDialog::validate);
}

void JobDialog::watch(PathPicker* picker)
{
    connect(picker, &PathPicker::pathChanged, this, &JobDialog::validate);
}

void JobDialog::watch(CalibrationPicker* picker)
{
    connect(picker, &CalibrationPicker::changed, this, &JobDialog::validate);
}

PathPicker* JobDialog::addPicker(PickKind kind, const QString& label, const QString& objectName)
{
    auto* picker = new PathPicker(kind, this);
    picker->setObjectName(objectName);
    picker->setChoices(pickChoices(kind, store_, workspace_));
    form_->addRow(label, picker);
    watch(picker);
    return picker;
}

QWidget* JobDialog::addParameterField(
    const jobs::JobDefinition& job, const std::string& name, const QString& objectName, const FieldOptions& options)
{
    const jobs::Parameter& parameter = jobParameter(job, name);
    const QString help = QString::fromStdString(parameter.help);
    QWidget* field = nullptr;
    if (isPickedPath(parameter)) {
        PathPicker* picker = addPicker(pickKind(parameter), fieldLabel(parameter), objectName);
        picker->comboBox()->setToolTip(help);
        if (options.start().is_string()) {
            picker->setPath(QString::fromStdString(options.start().get<std::string>()));
        }
        field = picker;
    } else {
        field = createParameterWidget(parameter, options, this);
        form_->addRow(fieldLabel(parameter), field);
        if (auto* box = qobject_cast<QCheckBox*>(field)) {
            watch(box);
        } else if (auto* box = qobject_cast<QComboBox*>(field)) {
            watch(box);
        } else if (auto* box = qobject_cast<QSpinBox*>(field)) {
            watch(box);
        } else if (auto* box = qobject_cast<QDoubleSpinBox*>(field)) {
            watch(box);
        } else if (auto* edit = qobject_cast<QLineEdit*>(field)) {
            watch(edit);
        }
    }
    field->setObjectName(objectName);
    field->setToolTip(help);
    parameterFields_.push_back({&parameter, field});
    return field;
}

QWidget* JobDialog::parameterField(const std::string& parameter) const
{
    for (const ParameterField& field : parameterFields_) {
        if (field.parameter->name == parameter) {
            return field.widget;
        }
    }
    return nullptr;
}

void JobDialog::setParameters(jobs::JobSpec& spec, std::initializer_list<std::string> parameters) const
{
    for (const std::string& name : parameters) {
        const auto field = std::find_if(parameterFields_.begin(), parameterFields_.end(),
            [&name](const ParameterField& f) { return f.parameter->name == name; });
        if (field == parameterFields_.end()) {
            // A programmer error (the dialog made no field of this parameter), found by the dialog's first spec().
            throw Error("the dialog has no field of parameter '" + name + "'");
        }
        setParameter(spec, *field->parameter, field->widget);
    }
}

QComboBox* JobDialog::addDeviceField(bool runFileDefault)
{
    device_ = deviceComboBox(this, QStringLiteral("deviceField"), runFileDefault);
    device_->setToolTip(tr("Where the models compute: the CPU or a CUDA device that this build's LibTorch sees"));
    form_->addRow(tr("Device:"), device_);
    watch(device_);
    return device_;
}

void JobDialog::setDevice(jobs::JobSpec& spec) const
{
    if (!device_) {
        return;
    }
    const QString name = device_->currentData().toString();
    if (!name.isEmpty()) {
        spec.set("device", name.toStdString());
    }
}

JobWorker::Job JobDialog::fieldNamedJob() const
{
    return [job = job(), names = fieldNames()](Progress& progress) {
        try {
            job(progress);
        } catch (const CancelledError&) {
            throw;
        } catch (const std::exception& error) {
            const std::string message = error.what();
            const std::string named = nameFields(message, names);
            if (named == message) {
                throw;
            }
            throw Error(named);
        }
    };
}

bool JobDialog::exportJobFile(const QString& path, QString* error) const
{
    const std::optional<jobs::JobSpec> job = spec();
    try {
        if (!job) {
            throw Error("this dialog's job has no job file");
        }
        jobs::writeJobFile(path.toStdString(), *job);
    } catch (const std::exception& failure) {
        if (error) {
            *error = QString::fromUtf8(failure.what());
        }
        return false;
    }
    return true;
}

QString specCommandLine(const QString& workspaceDirectory, const jobs::JobSpec& spec)
{
    std::vector<std::string> arguments = {"--workspace", workspaceDirectory.toStdString()};
    const std::vector<std::string> job = spec.toArguments();
    arguments.insert(arguments.end(), job.begin(), job.end());
    return QString::fromStdString(jobs::commandLine(arguments));
}

QString JobDialog::specCommand(const jobs::JobSpec& spec) const
{
    return specCommandLine(workspace_, spec);
}

JobWorker::Job specWorkerJob(const QString& workspaceDirectory, const jobs::JobSpec& spec)
{
    return [workspace = workspaceDirectory.toStdString(), spec](Progress& progress) {
        // SQLite connections stay on the thread that opened them: the job has its own. Checkpoints go under the
        // workspace (the store's directory).
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::CreateOrOpen);
        spec.run(store, progress);
    };
}

JobWorker::Job JobDialog::specJob(const jobs::JobSpec& spec) const
{
    return specWorkerJob(workspace_, spec);
}

QString JobDialog::specError(const jobs::JobSpec& spec) const
{
    std::vector<jobs::ParameterError> errors = spec.validate();
    if (errors.empty()) {
        errors = spec.checkInputs();
    }
    if (errors.empty()) {
        return {};
    }
    const auto label = [&spec](const std::string& parameter) {
        const jobs::Parameter* p = spec.definition().parameter(parameter);
        return p ? p->label : parameter;
    };
    return QString::fromStdString(jobs::describeErrors({errors.front()}, label));
}

void JobDialog::validate()
{
    if (!status_) {
        return; // still building the form
    }
    error_ = check();
    status_->setText(error_.isEmpty() ? readyText() : error_);
    status_->setStyleSheet(error_.isEmpty() ? QString() : QStringLiteral("color: #c62828"));
    start_->setEnabled(error_.isEmpty());
    command_->setText(error_.isEmpty() ? cliCommand() : QString());
}

namespace {

QStringList listItems(const QString& text)
{
    return text.split(QRegularExpression(QStringLiteral("[,\\s]+")), Qt::SkipEmptyParts);
}

} // namespace

std::optional<std::vector<double>> parseNumberList(const QString& text, QString* error)
{
    std::vector<double> values;
    for (const QString& item : listItems(text)) {
        bool ok = false;
        const double value = item.toDouble(&ok);
        if (!ok) {
            if (error) {
                *error = QObject::tr("'%1' is not a number").arg(item);
            }
            return std::nullopt;
        }
        values.push_back(value);
    }
    return values;
}

std::optional<std::vector<std::int64_t>> parseIntegerList(const QString& text, QString* error)
{
    std::vector<std::int64_t> values;
    for (const QString& item : listItems(text)) {
        bool ok = false;
        const qlonglong value = item.toLongLong(&ok);
        if (!ok) {
            if (error) {
                *error = QObject::tr("'%1' is not a whole number").arg(item);
            }
            return std::nullopt;
        }
        values.push_back(value);
    }
    return values;
}

QString absolutePath(const QString& path)
{
    return path.trimmed().isEmpty() ? QString() : QFileInfo(path.trimmed()).absoluteFilePath();
}

bool isModelDirectory(const QString& directory)
{
    return !directory.isEmpty() && QFileInfo::exists(QDir(directory).filePath("config.json"));
}

QComboBox* deviceComboBox(QWidget* parent, const QString& objectName, bool runFileDefault)
{
    auto* box = new QComboBox(parent);
    box->setObjectName(objectName);
    if (runFileDefault) {
        box->addItem(QObject::tr("As the run file says"), QString());
    }
    const std::vector<std::string> names = availableDevices();
    const std::vector<std::string> descriptions = deviceDescriptions();
    for (std::size_t i = 0; i < names.size(); ++i) {
        box->addItem(QString::fromStdString(descriptions[i]), QString::fromStdString(names[i]));
    }
    return box;
}

QSpinBox* spinBox(QWidget* parent, int low, int high, int value, const QString& special)
{
    auto* box = new QSpinBox(parent);
    box->setRange(low, high);
    box->setValue(value);
    if (!special.isEmpty()) {
        box->setSpecialValueText(special);
    }
    return box;
}

QString commaList(const std::vector<double>& values)
{
    QStringList items;
    for (double v : values) {
        items << QString::number(v, 'g', 12);
    }
    return items.join(QLatin1Char(','));
}

QString commaList(const std::vector<std::int64_t>& values)
{
    QStringList items;
    for (std::int64_t v : values) {
        items << QString::number(v);
    }
    return items.join(QLatin1Char(','));
}

std::string nameFields(std::string message, const std::vector<std::pair<std::string, std::string>>& names)
{
    for (const auto& [flag, field] : names) {
        // InputError writes "SOURCE:FLAG: DETAIL" for a flag given as its location; the field alone says it.
        for (const std::string& prefix : {std::string("admit:"), std::string("recipe build:"), std::string()}) {
            const std::string located = prefix + flag + ":";
            for (std::size_t at = message.find(located); at != std::string::npos; at = message.find(located, at)) {
                message.replace(at, located.size(), field + ":");
                at += field.size() + 1;
            }
        }
        for (std::size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at)) {
            message.replace(at, flag.size(), "\"" + field + "\"");
            at += field.size() + 2;
        }
    }
    return message;
}

QStringList splitPaths(const QString& text)
{
    QStringList paths;
    for (const QString& item : text.split(QLatin1Char(';'), Qt::SkipEmptyParts)) {
        if (!item.trimmed().isEmpty()) {
            paths << item.trimmed();
        }
    }
    return paths;
}

} // namespace mismatch::ui

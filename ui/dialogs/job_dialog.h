#pragma once
// The frame every "Start ..." job dialog shares: a form for the job's inputs; a status line saying what is wrong
// (in red; Start disabled) or what the job will do; the equivalent headless command (shown, and copied by "Copy
// CLI Command", so that a headless machine reproduces the job exactly); Start and Cancel. A subclass builds its
// form rows in form() (the plain ones from its job's parameters with addParameterField, so that they say what the
// catalogue says), watches its fields, implements check(), cliCommand(), jobName() and job(), and calls
// finishLayout() at the end of its constructor. The dialog sizes to its contents: it opens at the width its subclass
// asks for (setOpeningWidth) and the height its rows need at that width, and stays at least that tall when a wrapped
// line (the status, the command, a preview's summary) takes more lines, so that no row is drawn over another.
#include "core/common/error.h"
#include "core/jobs/job_spec.h"
#include "core/store/run_store.h"
#include "ui/dialogs/parameter_fields.h"
#include "ui/dialogs/pickers.h"
#include "ui/jobs/job_runner.h"

#include <QDialog>
#include <QStringList>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;

namespace mismatch::ui {

class SubmitDialog;

class JobDialog : public QDialog {
    Q_OBJECT

public:
    bool valid() const { return error_.isEmpty(); }
    QString errorText() const { return error_; }
    QPushButton* startButton() const { return start_; }
    QString statusText() const;
    // The headless command that runs the same job (an absolute path for every file).
    virtual QString cliCommand() const = 0;
    virtual QString jobName() const = 0;
    // The job for the job queue (runs off the GUI thread; opens the workspace itself).
    virtual JobWorker::Job job() const = 0;
    // Whether the job runs alongside the job queue instead of in it (JobQueue::Lane::Alongside): a job that waits on
    // outside input for as long as it runs (a followed training log).
    virtual bool runsAlongsideQueue() const { return false; }
    // job(), with any error it ends with that names a command-line flag rewritten to name this dialog's field
    // (fieldNames()): the GUI shows "Calibration step", never "--step".
    JobWorker::Job fieldNamedJob() const;
    // The command-line flags (as core's messages write them, longest first where one contains another) and the
    // field of this dialog each one is.
    virtual std::vector<std::pair<std::string, std::string>> fieldNames() const { return {}; }
    // The dialog's job as a catalogue spec (core/jobs/job_spec.h), for the dialogs whose job is in the catalogue:
    // their command is spec().toArguments(), their job spec().run(), and they offer "Export Job File..." (a job
    // file `mismatch run` runs). nullopt for the others.
    virtual std::optional<jobs::JobSpec> spec() const { return std::nullopt; }
    // Writes spec() as a job file (temporary file + rename); false with `error` set when it cannot.
    bool exportJobFile(const QString& path, QString* error = nullptr) const;
    // "Submit to Slurm..." (dialogs with spec()): spec()'s job file in the submit dialog (ui/dialogs/submit_dialog.h),
    // open and deleted when closed; nullptr, with the reason shown, while the form has a problem.
    SubmitDialog* showSubmitDialog();
    // The fields made from the job's parameters (addParameterField), in form order: tests check that each shows its
    // parameter's label, help and range.
    const std::vector<ParameterField>& parameterFields() const { return parameterFields_; }
    // The field made from a parameter (nullptr when there is none).
    QWidget* parameterField(const std::string& parameter) const;

protected:
    JobDialog(const QString& workspaceDirectory, const QString& title, const QString& objectName,
        QWidget* parent = nullptr, const store::RunStore* store = nullptr);
    // A picker row of `kind` (choices from the store and the resources), watched for changes.
    PathPicker* addPicker(PickKind kind, const QString& label, const QString& objectName);
    // A form row made from the parameter `parameter` of the catalogue's `job` (ui/dialogs/parameter_fields.h):
    // labelled with its GUI label, its help text as the tooltip, the widget of its type (a picker for an input path),
    // watched, and listed in parameterFields(). Error when the job has no such parameter.
    QWidget* addParameterField(const jobs::JobDefinition& job, const std::string& parameter, const QString& objectName,
        const FieldOptions& options = {});
    // The same, as the widget its type makes (a QSpinBox for an Integer, ...); Error when it makes another kind (a
    // programmer error, found when the dialog is first built).
    template <typename Widget>
    Widget* addParameterField(const jobs::JobDefinition& job, const std::string& parameter, const QString& objectName,
        const FieldOptions& options = {})
    {
        auto* widget = qobject_cast<Widget*>(addParameterField(job, parameter, objectName, options));
        if (!widget) {
            throw Error("the field of parameter '" + parameter + "' is not a " + Widget::staticMetaObject.className());
        }
        return widget;
    }
    // Writes the fields of these parameters into `spec` under their names (ui::setParameter: a field at the
    // default leaves the parameter unset); Error for a parameter the dialog made no field of.
    void setParameters(jobs::JobSpec& spec, std::initializer_list<std::string> parameters) const;
    QFormLayout* form() const { return form_; }
    // A "Device" row (object name "deviceField") listing the devices this build and machine compute on
    // (common/device.h: "cpu", "cuda:0 (NVIDIA H200, sm_90, 141 GiB)", ...), watched. `runFileDefault`: a first
    // entry that leaves the choice to the run file (train, calibrate), selected at first; else cpu is.
    QComboBox* addDeviceField(bool runFileDefault = false);
    // The chosen device as spec's "device" parameter (left unset for the run file's entry); nothing without the row.
    void setDevice(jobs::JobSpec& spec) const;
    // Status line, command and buttons under the form (object names for tests and style); calls validate() and
    // sizes the dialog to its contents.
    void finishLayout(const QString& statusName, const QString& commandName, const QString& startName);
    // The width the dialog opens at (at least what its rows need); its height is what its contents need at that width.
    void setOpeningWidth(int width) { openingWidth_ = width; }
    // Puts `widget` between the form and the status line (a preview table), taking `stretch` of the height the dialog
    // has beyond what its contents need.
    void addBelowForm(QWidget* widget, int stretch = 1);
    bool event(QEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void showEvent(QShowEvent* event) override;
    // The first problem with the inputs (naming the field and what is expected), or an empty string.
    virtual QString check() const = 0;
    // What the job will do, shown when check() finds nothing.
    virtual QString readyText() const = 0;
    // Re-validates whenever the field changes.
    void watch(QLineEdit* edit);
    void watch(QComboBox* box);
    void watch(QSpinBox* box);
    void watch(QDoubleSpinBox* box);
    void watch(QCheckBox* box);
    void watch(PathPicker* picker);
    void watch(CalibrationPicker* picker);
    void validate();
    // For a dialog with spec(): the command `mismatch --workspace W` + spec.toArguments(), shell-quoted.
    QString specCommand(const jobs::JobSpec& spec) const;
    // For a dialog with spec(): the job that runs spec on the workspace (JobSpec::run).
    JobWorker::Job specJob(const jobs::JobSpec& spec) const;
    // The first problem spec.validate() finds, named with the field label of its parameter (never a CLI flag);
    // empty when there is none.
    QString specError(const jobs::JobSpec& spec) const;

    QString workspace_;
    const store::RunStore* store_ = nullptr; // the GUI's connection, for the pickers (may be null)

private:
    // The height the contents want at `width` (wrapped lines at that width, tables at their size hint).
    int contentsHeight(int width) const;
    // Keeps the dialog at least as tall as its contents need at its width. Qt gives a window the minimum height of its
    // layout with every wrapped label on one line: a status or summary wrapped to more lines than that would have the
    // rows below it drawn over the ones above (the import dialog's "Ready: ..." line over its preview table).
    void keepContentsHeight();

    int openingWidth_ = 0;
    bool shown_ = false; // sized to its polished contents when first shown
    QFormLayout* form_ = nullptr;
    std::vector<ParameterField> parameterFields_;
    QComboBox* device_ = nullptr;
    QLabel* status_ = nullptr;
    QLabel* command_ = nullptr;
    QPushButton* start_ = nullptr;
    QString error_;
};

// "0.05, 0.1 0.2" -> {0.05, 0.1, 0.2}; nullopt (with `error` naming the item) for anything that is not a list of
// numbers. Empty text is an empty list.
std::optional<std::vector<double>> parseNumberList(const QString& text, QString* error);
std::optional<std::vector<std::int64_t>> parseIntegerList(const QString& text, QString* error);
// Items separated by ';' (paths may hold commas), trimmed, empty ones dropped.
QStringList splitPaths(const QString& text);
// The absolute form of a typed path ("" for an empty one).
QString absolutePath(const QString& path);
// A folder holding config.json (a model checkpoint).
bool isModelDirectory(const QString& directory);
// `mismatch --workspace W` + spec.toArguments(), shell-quoted (jobs::commandLine): the command a dialog shows.
QString specCommandLine(const QString& workspaceDirectory, const jobs::JobSpec& spec);
// The job that runs `spec` on the workspace (JobSpec::run) with its own store connection.
JobWorker::Job specWorkerJob(const QString& workspaceDirectory, const jobs::JobSpec& spec);
// A spin box over [low, high] at `value`; `special` is shown for `low` ("all", "never").
QSpinBox* spinBox(QWidget* parent, int low, int high, int value, const QString& special = {});
// A list of the devices this build and machine compute on (common/device.h): each item shows its description
// ("cuda:0 (NVIDIA H200, sm_90, 141 GiB)") and holds its name ("cuda:0") as data; `runFileDefault` puts first an
// item with empty data that leaves the choice to the run file.
QComboBox* deviceComboBox(QWidget* parent, const QString& objectName, bool runFileDefault = false);
// "0.05,0.1" and "20,40": lists in the form the CLI's comma-delimited options read.
QString commaList(const std::vector<double>& values);
QString commaList(const std::vector<std::int64_t>& values);
// The first problem loading something (`load` throws; an InputError names the file, line and column), prefixed by
// the field's name; empty when it loads.
template <typename Load> QString loadError(const QString& field, Load&& load)
{
    try {
        load();
    } catch (const std::exception& error) {
        return field + QStringLiteral(": ") + QString::fromUtf8(error.what());
    }
    return {};
}

// `message` with each flag of `names` replaced by its field name ("admit:--step: ..." -> "Calibration step: ...").
std::string nameFields(std::string message, const std::vector<std::pair<std::string, std::string>>& names);

} // namespace mismatch::ui

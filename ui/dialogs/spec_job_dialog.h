#pragma once
// A job dialog built from a catalogue job's parameter list (core/jobs/job_spec.h), for the jobs without a dialog
// of their own (generate, logits, quantize, the zoo, the AIMET import, the report): one form row per parameter, made
// as every dialog makes a field from a parameter (ui/dialogs/parameter_fields.h), labelled with its GUI label and
// with its help text as the tooltip. Paths get a picker (models, prompt sets, recipes and run files list what the
// workspace and the resources hold), choices a list, flags a check box, numbers and lists a text field whose
// placeholder shows the default (empty: the default, or "not given"). The spec it builds is checked by the job's
// own validate() and checkInputs(), with each problem named by its field label; its command is
// spec().toArguments(), its job spec().run(), and it exports the job file.
#include "ui/dialogs/job_dialog.h"

class QWidget;

namespace mismatch::ui {

class SpecJobDialog : public JobDialog {
    Q_OBJECT
public:
    // InputError for a kind that is not in the catalogue.
    SpecJobDialog(const std::string& kind, const QString& workspaceDirectory, QWidget* parent = nullptr,
        const store::RunStore* store = nullptr);

    // Sets a field from its text form (what a user types: "8", "0.05,0.1", "a.jsonl;b.jsonl"; "true"/"false" for a
    // flag; a choice's value); InputError for a parameter the job does not have.
    void setValue(const std::string& parameter, const QString& text);
    // The field of a parameter (nullptr when there is none): tests and screenshots.
    QWidget* field(const std::string& parameter) const;

    QString cliCommand() const override;
    QString jobName() const override;
    JobWorker::Job job() const override;
    std::optional<jobs::JobSpec> spec() const override;

protected:
    QString check() const override;
    QString readyText() const override;

private:
    // The spec from the fields; the first field whose text is not of its type in `error` ("Label: expected ...").
    jobs::JobSpec readSpec(QString* error) const;

    const jobs::JobDefinition* definition_;
};

// The job's subcommand path as typed after `mismatch` ("recipe build", "zoo shape").
QString commandTitle(const jobs::JobDefinition& job);
// The catalogue jobs that have no dialog of their own, in the Jobs menu's order ("generate", "logits", ...).
std::vector<std::string> specDialogJobs();

} // namespace mismatch::ui

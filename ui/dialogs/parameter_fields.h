#pragma once
// Form fields made from a catalogue job's parameters (core/jobs/job_spec.h), so that a dialog's field says what the
// job's definition says: the row label is the parameter's GUI label, the tooltip its help text, a spin box offers the
// parameter's range and starts at its default, a list offers the parameter's choices, and the value goes into a
// JobSpec under the parameter's name. One set of rules for the dialogs written by hand (JobDialog::addParameterField,
// for their plain fields) and the dialog built from a whole definition (SpecJobDialog):
//   Flag      a check box
//   Choice    a list of the choices (first "(not given)", or "(choose)" for a required one, when there is no default)
//   Integer   a spin box over the range (low + 1 for an exclusive low; clamped to int) at the default
//   Number    a spin box over the range (rounded inwards to the dialog's decimals) at the default
//   Path      an input: a picker of the kind its name says (JobDialog::addParameterField); an output: typed
//   Text, lists, and numbers with numbersAsText: a line edit whose empty text is the default (or "not given"), which
//             the placeholder says; list items separated by ';' (paths, texts) or ',' (numbers, choices)
#include "core/jobs/job_spec.h"
#include "ui/dialogs/pickers.h"

#include <QString>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

class QWidget;

namespace mismatch::ui {

// How a dialog wants a parameter's field, where the definition alone does not say (LibTorch-style setters:
// FieldOptions().start(64).special(tr("all"))).
class FieldOptions {
public:
    // The value the field starts at instead of the default: for a parameter without one, or where a dialog starts
    // elsewhere on purpose (a GUI job kept small; the dialog says why). null: the default.
    FieldOptions& start(nlohmann::json value)
    {
        start_ = std::move(value);
        return *this;
    }
    const nlohmann::json& start() const { return start_; }
    // Integer: the text shown for the lowest value of the range ("all" for a count whose 0 means every prompt).
    FieldOptions& special(QString text)
    {
        special_ = std::move(text);
        return *this;
    }
    const QString& special() const { return special_; }
    // Integer without a default: an entry one below the range, shown as this text ("the run file's"), that leaves
    // the parameter not given.
    FieldOptions& notGiven(QString text)
    {
        notGiven_ = std::move(text);
        return *this;
    }
    const QString& notGiven() const { return notGiven_; }
    // Number: the spin box's decimals and step.
    FieldOptions& decimals(int decimals, double step)
    {
        decimals_ = decimals;
        step_ = step;
        return *this;
    }
    int decimals() const { return decimals_; }
    double step() const { return step_; }
    // Text and lists: the placeholder, instead of the one saying what an empty field means.
    FieldOptions& placeholder(QString text)
    {
        placeholder_ = std::move(text);
        return *this;
    }
    const QString& placeholder() const { return placeholder_; }
    // Integer and Number as a line edit (empty: the default) whose text the job's validate() checks: the generic
    // dialog, where any text can be typed and a wrong one is named.
    FieldOptions& numbersAsText(bool typed = true)
    {
        numbersAsText_ = typed;
        return *this;
    }
    bool numbersAsText() const { return numbersAsText_; }

private:
    nlohmann::json start_;
    QString special_;
    QString notGiven_;
    int decimals_ = 2;
    double step_ = 0.1;
    QString placeholder_;
    bool numbersAsText_ = false;
};

// A field a dialog made from a parameter.
struct ParameterField {
    const jobs::Parameter* parameter = nullptr; // in the catalogue (lives as long as the program)
    QWidget* widget = nullptr;
};

// The catalogue's job `kind` (InputError when there is none).
const jobs::JobDefinition& catalogueJob(const std::string& kind);
// The parameter `name` of `job`; Error naming both when there is none (a dialog asking for a parameter that the
// catalogue does not have).
const jobs::Parameter& jobParameter(const jobs::JobDefinition& job, const std::string& name);
// The row label of a parameter's field: "Generated tokens per prompt:" (" *:" for a required parameter).
QString fieldLabel(const jobs::Parameter& parameter);
// Whether the parameter's field is a picker (an input path), and of which kind (by the parameter's name).
bool isPickedPath(const jobs::Parameter& parameter);
PickKind pickKind(const jobs::Parameter& parameter);
// The values a spin box of an Integer parameter offers: [low (+1 when exclusive), high], clamped to int.
std::pair<int, int> integerRange(const jobs::Parameter& parameter);
// The field of a parameter that is not a picker (!isPickedPath), with the help text as its tooltip, at the default or
// options.start().
QWidget* createParameterWidget(const jobs::Parameter& parameter, const FieldOptions& options, QWidget* parent);
// The field's value as the parameter's JSON value: null for an empty field or the not-given entry (the default, or
// not given); paths absolute (so the job runs the same from anywhere); for a list the items that are of the type. The
// first text that is not of the type goes into `error` ("Label: expected ..."), unless it already holds one.
nlohmann::json parameterValue(const jobs::Parameter& parameter, const QWidget* field, QString* error = nullptr);
// Writes parameterValue() into `spec` under the parameter's name; a null value or the default unsets it, so the spec
// gives only what the command line would spell out.
void setParameter(
    jobs::JobSpec& spec, const jobs::Parameter& parameter, const QWidget* field, QString* error = nullptr);
// Sets a field from a value's text form: "true"/"false" for a check box, a choice's value, a path, a number, the
// text of a line edit ("" for a spin box: its lowest entry).
void setFieldText(QWidget* field, const QString& text);

} // namespace mismatch::ui

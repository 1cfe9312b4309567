#pragma once
// The frame every "Start ..." job dialog shares: a form for the job's inputs; a status line saying what is wrong
// (in red; Start disabled) or what the job will do; the equivalent headless command (shown, and copied by "Copy
// CLI Command", so that a headless machine reproduces the job exactly); Start and Cancel. A subclass builds its
// form rows in form(), watches its fields, implements check(), cliCommand(), jobName() and job(), and calls
// finishLayout() at the end of its constructor.
#include "ui/job_runner.h"

#include <QDialog>
#include <QStringList>

#include <cstdint>
#include <optional>
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

protected:
    JobDialog(const QString& workspaceDirectory, const QString& title, const QString& objectName,
        QWidget* parent = nullptr);
    QFormLayout* form() const { return form_; }
    // Status line, command and buttons under the form (object names for tests and style); calls validate().
    void finishLayout(const QString& statusName, const QString& commandName, const QString& startName);
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
    void validate();

    QString workspace_;

private:
    QFormLayout* form_ = nullptr;
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

} // namespace mismatch::ui

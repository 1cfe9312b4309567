#pragma once
// "Submit to Slurm..." (issue 43): a job's job file handed to a Slurm cluster through jobs::cluster::submit, one
// sbatch job per independent unit (core/jobs/cluster.h). The dialog shows the job and its units, and asks for the
// cluster profile (a YAML file, empty for the default), the submission directory (WORKSPACE/cluster/KIND-N unless
// another is chosen) and whether to submit or only write the scripts (a dry run). A job file given as text (a queued
// job's, a job dialog's) is written to the submission directory first, named as the directory (KIND-N.yaml, so that
// the submission's name is its directory's); a job file on disk is submitted where it is (its relative paths are
// relative to it) and names the default directory (WORKSPACE/cluster/STEM-N, as `mismatch submit` does). Submit shows
// what was written and the Slurm job ids, or the error. Without sbatch on PATH the dialog says so and only a dry run is
// possible.
#include "core/jobs/cluster.h"

#include <QDialog>

#include <optional>

class QCheckBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;

namespace mismatch::ui {

class SubmitDialog : public QDialog {
    Q_OBJECT
public:
    enum class Source {
        Text, // `jobFile` is a job file's text
        File, // `jobFile` is the path of a job or study file
    };

    // `description` says where a job file given as text comes from ("the selected job", the default).
    SubmitDialog(const QString& workspaceDirectory, const QString& jobFile, Source source, QWidget* parent = nullptr,
        const QString& description = {});

    void setProfilePath(const QString& path);
    QString profilePath() const;
    void setDryRun(bool dryRun);
    bool dryRun() const;
    // The directory typed ("" : the default).
    void setDirectory(const QString& directory);
    // Where the submission goes: the typed directory, else defaultDirectory().
    QString directory() const;
    // WORKSPACE/cluster/KIND-N (a job file on disk: STEM-N) with N the first number whose directory does not exist.
    QString defaultDirectory() const;
    // Whether sbatch is on PATH (without it only a dry run is possible).
    bool canSubmit() const { return !sbatch_.isEmpty(); }

    // The first problem with the inputs (naming the field), or "".
    QString errorText() const { return error_; }
    QString statusText() const;
    QString resultText() const;
    QPushButton* submitButton() const { return submit_; }
    // Writes the job file (when given as text) and submits it (or, in a dry run, writes the scripts); false with
    // the error in resultText() when it fails.
    bool submit();
    // What the last successful submit() did.
    const std::optional<jobs::cluster::Submission>& submission() const { return submission_; }

signals:
    // A submission was written to `directory` (submitted, or its scripts written in a dry run).
    void submitted(const QString& directory);

private:
    void createForm(const QString& source);
    void readJob();
    void validate();
    QString check() const;
    QString readyText() const;
    // After a submission to `directory`: the field shows it, Submit is disabled until an input changes.
    void keepDirectory(const QString& directory);
    // submit() failed with `error`: what was written (a submission sbatch refused is listed, and resumable).
    void showFailure(const QString& directory, const QString& error);
    // Browse buttons.
    void chooseProfile();
    void chooseDirectory();

    QString workspace_;
    QString jobText_; // the job file's text when given as text
    QString jobPath_; // the job file's path when given as a file
    QString kind_; // the job's kind, "study" for a study file
    QString jobProblem_; // why the job file cannot be split into units
    int unitCount_ = 0;
    int stageCount_ = 0;
    QString sbatch_; // sbatch's path, "" when not on PATH
    QString error_;
    bool done_ = false; // submitted to directory(): Submit stays disabled until an input changes
    std::optional<jobs::cluster::Submission> submission_;
    QLabel* job_ = nullptr;
    QLineEdit* profile_ = nullptr;
    QLineEdit* directory_ = nullptr;
    QCheckBox* dryRun_ = nullptr;
    QLabel* sbatchNote_ = nullptr;
    QLabel* status_ = nullptr;
    QPlainTextEdit* result_ = nullptr;
    QPushButton* submit_ = nullptr;
};

} // namespace mismatch::ui

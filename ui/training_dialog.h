#pragma once
// "Start Training Run": pick a run file (OPD or RL), see what it will do (validated as you type; errors name
// the file, line and column), copy the equivalent headless command, and queue it. The job itself is
// trainingJob(): core's runTraining on its own store connection, off the GUI thread.
#include "ui/job_runner.h"

#include <QDialog>

class QLabel;
class QLineEdit;
class QPushButton;

namespace mismatch::ui {

class TrainingDialog : public QDialog {
    Q_OBJECT
public:
    TrainingDialog(const QString& workspaceDirectory, QWidget* parent = nullptr);

    void setRunFile(const QString& path);
    QString runFile() const;
    // True when the run file parses and validates.
    bool runFileValid() const { return valid_; }
    QString summaryText() const;
    QString errorText() const { return error_; }
    QString cliCommand() const;
    QPushButton* startButton() const { return start_; }
    QString runName() const { return runName_; }

private:
    void validate();

    QString workspace_;
    QLineEdit* path_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* command_ = nullptr;
    QPushButton* start_ = nullptr;
    QPushButton* copy_ = nullptr;
    bool valid_ = false;
    QString error_;
    QString runName_;
};

// `mismatch --workspace WORKSPACE train RUNFILE` with shell quoting.
QString trainingCliCommand(const QString& workspaceDirectory, const QString& runFile);
// The job: loads the run file, opens the workspace's store on the job's thread and trains; Progress carries
// cancel (the run is then stored as cancelled with the steps done so far).
JobWorker::Job trainingJob(const QString& workspaceDirectory, const QString& runFile);
// Shell quoting for commands shown to the user.
QString shellQuote(const QString& text);

} // namespace mismatch::ui

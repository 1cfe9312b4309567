#include "ui/dialogs/submit_dialog.h"

#include "core/common/error.h"
#include "core/jobs/job_file.h"
#include "ui/jobs/cluster_panel.h"

#include <QCheckBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalBlocker>
#include <QStandardPaths>
#include <QVBoxLayout>

#include <algorithm>

namespace mismatch::ui {

namespace cluster = jobs::cluster;

namespace {
constexpr int kOpeningWidth = 680;

// A line edit with a Browse... button after it, as one form field.
QWidget* withBrowse(QLineEdit* edit, QPushButton* browse, QWidget* parent)
{
    auto* field = new QWidget(parent);
    auto* layout = new QHBoxLayout(field);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(edit, 1);
    layout->addWidget(browse);
    return field;
}
} // namespace

SubmitDialog::SubmitDialog(const QString& workspaceDirectory, const QString& jobFile, Source source, QWidget* parent,
    const QString& description)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
    , sbatch_(QStandardPaths::findExecutable(QStringLiteral("sbatch")))
{
    setWindowTitle(tr("Submit to Slurm"));
    setObjectName("submitDialog");
    if (source == Source::Text) {
        jobText_ = jobFile;
    } else {
        jobPath_ = QFileInfo(jobFile).absoluteFilePath();
    }
    readJob();
    createForm(source == Source::File ? jobPath_ : description.isEmpty() ? tr("the selected job") : description);
    validate();
    const int width = std::max(kOpeningWidth, minimumSizeHint().width());
    resize(width, layout()->hasHeightForWidth() ? layout()->totalHeightForWidth(width) : sizeHint().height());
}

void SubmitDialog::readJob()
{
    try {
        // A job file given as text holds absolute paths (a dialog's spec); it is read as if it were in the
        // workspace's cluster directory, where it will be written.
        const jobs::JobFile file = jobPath_.isEmpty()
            ? jobs::parseJobFile(jobText_.toStdString(), QDir(workspace_).filePath("cluster/job.yaml").toStdString())
            : jobs::loadJobFile(jobPath_.toStdString());
        kind_ = file.study || file.steps.empty() ? QStringLiteral("study")
                                                 : QString::fromStdString(file.steps.front().spec.kind());
        const cluster::UnitPlan plan = cluster::splitUnits(file);
        unitCount_ = static_cast<int>(plan.units.size());
        for (const cluster::Unit& unit : plan.units) {
            stageCount_ = std::max(stageCount_, static_cast<int>(unit.stage));
        }
        if (!plan.kind.empty()) {
            kind_ = QString::fromStdString(plan.kind);
        }
    } catch (const std::exception& error) {
        jobProblem_ = tr("Job file: %1").arg(QString::fromUtf8(error.what()));
        if (kind_.isEmpty()) {
            kind_ = QStringLiteral("job");
        }
    }
}

void SubmitDialog::createForm(const QString& source)
{
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    job_ = new QLabel(this);
    job_->setObjectName("submitJob");
    job_->setWordWrap(true);
    QString units = tr("%n unit(s), one Slurm job each", nullptr, unitCount_);
    if (stageCount_ > 1) {
        units += tr(", in %1 stages").arg(stageCount_);
    }
    job_->setText(
        jobProblem_.isEmpty() ? tr("%1 (%2): %3").arg(kind_, source, units) : tr("%1 (%2)").arg(kind_, source));
    form->addRow(tr("Job:"), job_);

    profile_ = new QLineEdit(this);
    profile_->setObjectName("submitProfile");
    profile_->setPlaceholderText(tr("default: the partition's defaults, 1 CPU per unit, no GPU"));
    profile_->setToolTip(tr("A cluster profile (YAML): partition, account, time, gpus, cpus, memory, requeue, extra "
                            "sbatch options, setup lines (module load ...) and the mismatch program on the nodes. "
                            "Empty: the default profile."));
    auto* browseProfile = new QPushButton(tr("Browse..."), this);
    browseProfile->setObjectName("submitProfileBrowse");
    form->addRow(tr("Cluster profile:"), withBrowse(profile_, browseProfile, this));

    directory_ = new QLineEdit(this);
    directory_->setObjectName("submitDirectory");
    directory_->setToolTip(tr("Where the units' job files, the sbatch scripts, the shards and Slurm's logs go: a "
                              "directory on the file system the cluster's nodes share. Empty: the one shown."));
    auto* browseDirectory = new QPushButton(tr("Browse..."), this);
    browseDirectory->setObjectName("submitDirectoryBrowse");
    form->addRow(tr("Submission directory:"), withBrowse(directory_, browseDirectory, this));

    dryRun_ = new QCheckBox(tr("Dry run (write the scripts, submit nothing)"), this);
    dryRun_->setObjectName("submitDryRun");
    dryRun_->setChecked(!canSubmit());
    form->addRow(QString(), dryRun_);
    layout->addLayout(form);

    sbatchNote_ = new QLabel(this);
    sbatchNote_->setObjectName("submitSbatchNote");
    sbatchNote_->setWordWrap(true);
    if (canSubmit()) {
        sbatchNote_->setText(tr("Slurm: %1").arg(sbatch_));
        sbatchNote_->setStyleSheet(QStringLiteral("color: #616161"));
    } else {
        sbatchNote_->setText(tr("sbatch is not on this machine's PATH: nothing can be submitted from here. A dry run "
                                "writes the submission and its scripts; Resume in the Jobs tab, on a machine of "
                                "the cluster, submits them."));
        sbatchNote_->setStyleSheet(QStringLiteral("color: #b26a00"));
    }
    layout->addWidget(sbatchNote_);
    status_ = new QLabel(this);
    status_->setObjectName("submitStatus");
    status_->setWordWrap(true);
    layout->addWidget(status_);
    result_ = new QPlainTextEdit(this);
    result_->setObjectName("submitResult");
    result_->setReadOnly(true);
    result_->setLineWrapMode(QPlainTextEdit::WidgetWidth); // long paths and sbatch's messages wrap
    result_->setPlaceholderText(tr("What was written and the Slurm job ids appear here."));
    result_->setStyleSheet(QStringLiteral("font-family: monospace"));
    result_->setMinimumHeight(8 * fontMetrics().lineSpacing());
    layout->addWidget(result_, 1);

    auto* buttons = new QDialogButtonBox(this);
    submit_ = buttons->addButton(tr("Submit"), QDialogButtonBox::ActionRole);
    submit_->setObjectName("submitButton");
    submit_->setDefault(true);
    buttons->addButton(QDialogButtonBox::Close);
    layout->addWidget(buttons);

    const auto changed = [this] {
        done_ = false;
        validate();
    };
    connect(profile_, &QLineEdit::textChanged, this, changed);
    connect(directory_, &QLineEdit::textChanged, this, changed);
    connect(dryRun_, &QCheckBox::toggled, this, changed);
    connect(browseProfile, &QPushButton::clicked, this, &SubmitDialog::chooseProfile);
    connect(browseDirectory, &QPushButton::clicked, this, &SubmitDialog::chooseDirectory);
    connect(submit_, &QPushButton::clicked, this, &SubmitDialog::submit);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

void SubmitDialog::chooseProfile()
{
    const QString path = QFileDialog::getOpenFileName(this, tr("Cluster Profile"),
        profile_->text().isEmpty() ? workspace_ : QFileInfo(profile_->text()).absolutePath(),
        tr("Cluster profiles (*.yaml *.yml)"));
    if (!path.isEmpty()) {
        profile_->setText(path);
    }
}

void SubmitDialog::chooseDirectory()
{
    const QString path = QFileDialog::getExistingDirectory(this, tr("Submission Directory"),
        directory_->text().isEmpty() ? QDir(workspace_).filePath(QStringLiteral("cluster")) : directory_->text());
    if (!path.isEmpty()) {
        directory_->setText(path);
    }
}

void SubmitDialog::setProfilePath(const QString& path)
{
    profile_->setText(path);
}

QString SubmitDialog::profilePath() const
{
    return profile_->text().trimmed();
}

void SubmitDialog::setDryRun(bool dryRun)
{
    dryRun_->setChecked(dryRun);
}

bool SubmitDialog::dryRun() const
{
    return dryRun_->isChecked();
}

void SubmitDialog::setDirectory(const QString& directory)
{
    directory_->setText(directory);
}

QString SubmitDialog::directory() const
{
    const QString typed = directory_->text().trimmed();
    return typed.isEmpty() ? defaultDirectory() : QDir::cleanPath(QFileInfo(typed).absoluteFilePath());
}

QString SubmitDialog::defaultDirectory() const
{
    // As jobs::cluster::submit names it: the job file's name (here the job's kind for a job given as text), "-N".
    QString name = jobPath_.isEmpty() ? kind_ : QFileInfo(jobPath_).completeBaseName();
    name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9_-]")), QStringLiteral("_"));
    const QDir clusterDirectory(QDir(workspace_).filePath(QStringLiteral("cluster")));
    for (int n = 1;; ++n) {
        const QString candidate = clusterDirectory.filePath(QStringLiteral("%1-%2").arg(name).arg(n));
        if (!QFileInfo::exists(candidate)) {
            return QDir::cleanPath(QFileInfo(candidate).absoluteFilePath());
        }
    }
}

QString SubmitDialog::statusText() const
{
    return status_->text();
}

QString SubmitDialog::resultText() const
{
    return result_->toPlainText();
}

QString SubmitDialog::check() const
{
    if (!jobProblem_.isEmpty()) {
        return jobProblem_;
    }
    if (!profilePath().isEmpty()) {
        try {
            cluster::loadProfile(profilePath().toStdString());
        } catch (const std::exception& error) {
            return tr("Cluster profile: %1").arg(QString::fromUtf8(error.what()));
        }
    }
    const QFileInfo target(directory());
    if (target.exists() && !target.isDir()) {
        return tr("Submission directory: %1 is a file, not a directory").arg(target.filePath());
    }
    if (QFileInfo::exists(QDir(target.filePath()).filePath(QStringLiteral("submission.json")))) {
        return tr("Submission directory: %1 already holds a submission (listed in the Jobs tab); choose another "
                  "directory, or leave the field empty for a new one")
            .arg(target.filePath());
    }
    if (!dryRun() && !canSubmit()) {
        return tr("sbatch is not on this machine's PATH: tick Dry run to write the scripts without submitting them");
    }
    return {};
}

QString SubmitDialog::readyText() const
{
    const QString profile = profilePath().isEmpty() ? tr("the default profile") : QFileInfo(profilePath()).fileName();
    if (dryRun()) {
        return tr("Ready: writes the job's %n unit(s) and their sbatch scripts to %1 (with %2); submits nothing.",
            nullptr, unitCount_)
            .arg(directory(), profile);
    }
    return tr("Ready: submits the job's %n unit(s) to Slurm with %1, from %2.", nullptr, unitCount_)
        .arg(profile, directory());
}

void SubmitDialog::validate()
{
    directory_->setPlaceholderText(defaultDirectory());
    submit_->setText(dryRun() ? tr("Write Scripts") : tr("Submit"));
    if (done_) {
        return; // the result stays shown until an input changes
    }
    error_ = check();
    status_->setText(error_.isEmpty() ? readyText() : error_);
    status_->setStyleSheet(error_.isEmpty() ? QString() : QStringLiteral("color: #c62828"));
    submit_->setEnabled(error_.isEmpty());
}

void SubmitDialog::keepDirectory(const QString& directory)
{
    // The field names where the submission went (the default would now name the next one); Submit stays disabled
    // until an input changes.
    const QSignalBlocker blocker(directory_);
    directory_->setText(directory);
    done_ = true;
    submit_->setEnabled(false);
}

void SubmitDialog::showFailure(const QString& directory, const QString& error)
{
    const bool written = QFileInfo::exists(QDir(directory).filePath(QStringLiteral("submission.json")));
    if (!written) {
        result_->setPlainText(tr("Nothing was submitted:\n%1").arg(error));
        status_->setText(tr("The submission failed (below)."));
        status_->setStyleSheet(QStringLiteral("color: #c62828"));
        return;
    }
    // sbatch refused after the submission was written: it is listed in the Jobs tab, where Resume submits it.
    result_->setPlainText(tr("The submission is written to %1, but Slurm did not take it:\n%2\n\nResume in the Jobs "
                             "tab submits it once Slurm does.")
                              .arg(directory, error));
    status_->setText(tr("Slurm refused the submission (below); it is listed in the Jobs tab."));
    status_->setStyleSheet(QStringLiteral("color: #c62828"));
    keepDirectory(directory);
    emit submitted(directory);
}

bool SubmitDialog::submit()
{
    validate();
    if (done_ || !error_.isEmpty()) {
        return false;
    }
    const QString target = directory();
    const bool dry = dryRun();
    QString jobFile = jobPath_;
    QGuiApplication::setOverrideCursor(Qt::WaitCursor);
    try {
        if (!QDir().mkpath(target)) {
            throw Error("cannot create the directory " + target.toStdString());
        }
        if (jobFile.isEmpty()) {
            // Named as its directory: the submission's name (the job file's name) is the directory's.
            jobFile = QDir(target).filePath(QFileInfo(target).fileName() + QStringLiteral(".yaml"));
            jobs::writeJobFileText(jobFile.toStdString(), jobText_.toStdString());
        }
        cluster::SubmitOptions options;
        options.jobFile = jobFile.toStdString();
        options.workspace = workspace_.toStdString();
        options.directory = target.toStdString();
        options.profile
            = profilePath().isEmpty() ? cluster::defaultProfile() : cluster::loadProfile(profilePath().toStdString());
        options.dryRun = dry;
        submission_ = cluster::submit(options);
    } catch (const std::exception& error) {
        QGuiApplication::restoreOverrideCursor();
        submission_.reset();
        showFailure(target, QString::fromUtf8(error.what()));
        return false;
    }
    QGuiApplication::restoreOverrideCursor();
    const QString written = submission_->directory.empty() ? target : QString::fromStdString(submission_->directory);
    QStringList lines;
    lines << (dry ? tr("Written to %1:").arg(written) : tr("Submitted to Slurm from %1:").arg(written));
    lines << tr("Job file %1").arg(jobFile);
    lines << describeSubmission(*submission_);
    result_->setPlainText(lines.join(QLatin1Char('\n')));
    keepDirectory(written);
    status_->setText(dry ? tr("Scripts written; nothing was submitted. The submission is listed in the Jobs tab.")
                         : tr("Submitted. The Jobs tab lists the submission and its units' state."));
    status_->setStyleSheet(QStringLiteral("color: #2e7d32"));
    emit submitted(written);
    return true;
}

} // namespace mismatch::ui

#include "ui/training_dialog.h"

#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"

#include <QClipboard>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QVBoxLayout>

namespace mismatch::ui {

QString shellQuote(const QString& text)
{
    static const QRegularExpression unsafe(QStringLiteral("[^A-Za-z0-9_./=:@%+-]"));
    if (!text.isEmpty() && !text.contains(unsafe)) {
        return text;
    }
    return QLatin1Char('\'') + QString(text).replace(QLatin1String("'"), QLatin1String("'\\''")) + QLatin1Char('\'');
}

QString trainingCliCommand(const QString& workspaceDirectory, const QString& runFile)
{
    return QStringLiteral("mismatch --workspace %1 train %2")
        .arg(shellQuote(workspaceDirectory), shellQuote(QFileInfo(runFile).absoluteFilePath()));
}

JobWorker::Job trainingJob(const QString& workspaceDirectory, const QString& runFile)
{
    return [workspace = workspaceDirectory.toStdString(), file = runFile.toStdString()](Progress& progress) {
        const train::RunConfig config = train::loadRunConfig(file);
        // SQLite connections stay on the thread that opened them: the job has its own.
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::CreateOrOpen);
        train::TrainOptions options;
        options.workspaceDirectory = workspace;
        train::runTraining(config, store, progress, options);
    };
}

TrainingDialog::TrainingDialog(const QString& workspaceDirectory, QWidget* parent)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
{
    setWindowTitle(tr("Start Training Run"));
    setObjectName("trainingDialog");
    resize(640, 320);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(new QLabel(tr("Run file (YAML or JSON: student, teacher, prompts, objective, rollout "
                                    "configuration, steps, evaluation):"),
        this));
    auto* row = new QHBoxLayout;
    path_ = new QLineEdit(this);
    path_->setObjectName("runFileEdit");
    row->addWidget(path_, 1);
    auto* browse = new QPushButton(tr("Browse..."), this);
    row->addWidget(browse);
    layout->addLayout(row);
    summary_ = new QLabel(this);
    summary_->setObjectName("runFileSummary");
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    summary_->setMinimumHeight(120);
    summary_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
    summary_->setTextFormat(Qt::RichText);
    layout->addWidget(summary_, 1);
    layout->addWidget(new QLabel(tr("Headless equivalent:"), this));
    command_ = new QLabel(this);
    command_->setObjectName("trainingCli");
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setWordWrap(true);
    command_->setStyleSheet(QStringLiteral("font-family: monospace; background: #f4f4f4; padding: 4px"));
    layout->addWidget(command_);
    auto* buttons = new QDialogButtonBox(this);
    copy_ = buttons->addButton(tr("Copy CLI Command"), QDialogButtonBox::ActionRole);
    copy_->setObjectName("copyCliButton");
    start_ = buttons->addButton(tr("Start"), QDialogButtonBox::AcceptRole);
    start_->setObjectName("startTrainingButton");
    buttons->addButton(QDialogButtonBox::Cancel);
    layout->addWidget(buttons);

    connect(browse, &QPushButton::clicked, this, [this] {
        const QString file
            = QFileDialog::getOpenFileName(this, tr("Run file"), path_->text(), tr("Run files (*.yaml *.yml *.json)"));
        if (!file.isEmpty())
            setRunFile(file);
    });
    connect(path_, &QLineEdit::textChanged, this, &TrainingDialog::validate);
    connect(copy_, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(cliCommand()); });
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    validate();
}

void TrainingDialog::setRunFile(const QString& path)
{
    path_->setText(path);
}

QString TrainingDialog::runFile() const
{
    return path_->text().trimmed();
}

QString TrainingDialog::summaryText() const
{
    return summary_->text();
}

QString TrainingDialog::cliCommand() const
{
    return trainingCliCommand(workspace_, runFile());
}

void TrainingDialog::validate()
{
    valid_ = false;
    error_.clear();
    runName_.clear();
    const QString file = runFile();
    if (file.isEmpty()) {
        summary_->setText(tr("Choose a run file, e.g. resources/runs/demo-opd-quick.yaml."));
        summary_->setStyleSheet({});
    } else {
        try {
            const train::RunConfig config = train::loadRunConfig(file.toStdString());
            valid_ = true;
            runName_ = QString::fromStdString(config.name);
            const auto& r = config.rollout;
            summary_->setText(
                tr("<b>%1</b>: %2, %3 steps of %4 prompts x %5 samples<br>student %6<br>teacher %7<br>"
                   "rollouts: %8, staleness %9, %10, noise sigma %11<br>evaluation every %12 steps")
                    .arg(runName_.toHtmlEscaped(), QString::fromStdString(train::toString(config.objective.kind)))
                    .arg(config.steps)
                    .arg(config.batch.promptsPerStep)
                    .arg(config.batch.samplesPerPrompt)
                    .arg(QString::fromStdString(config.student).toHtmlEscaped(),
                        config.teacher.empty() ? tr("(none)") : QString::fromStdString(config.teacher).toHtmlEscaped(),
                        r.recipe.empty() ? tr("BF16 engine") : QString::fromStdString(r.recipe).toHtmlEscaped())
                    .arg(r.staleness)
                    .arg(r.asynchronous ? tr("asynchronous") : tr("synchronous"))
                    .arg(r.noise.sigma)
                    .arg(config.evaluation.every));
            summary_->setStyleSheet({});
        } catch (const std::exception& error) {
            error_ = QString::fromUtf8(error.what());
            summary_->setText(error_.toHtmlEscaped().replace(QLatin1String("\n"), QLatin1String("<br>")));
            summary_->setStyleSheet(QStringLiteral("color: #c62828"));
        }
    }
    start_->setEnabled(valid_);
    copy_->setEnabled(valid_);
    command_->setText(valid_ ? cliCommand() : QString());
}

} // namespace mismatch::ui

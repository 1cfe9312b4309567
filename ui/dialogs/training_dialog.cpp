#include "ui/dialogs/training_dialog.h"

#include "core/common/device.h"
#include "core/common/file_io.h"
#include "core/common/output_check.h"
#include "core/common/shell_quote.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "ui/dialogs/job_dialog.h"
#include "ui/dialogs/pickers.h"

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {

// Absolute and clean: the form's paths are compared with the chosen run file's.
QString cleanAbsolute(const QString& path)
{
    return path.trimmed().isEmpty() ? QString() : QDir::cleanPath(absolutePath(path));
}

} // namespace

QString shellQuote(const QString& text)
{
    return QString::fromStdString(mismatch::shellQuote(text.toStdString()));
}

// The catalogue's "train" job on the run file (absolute path): the command is its toArguments(), the job its run.
jobs::JobSpec trainingSpec(const QString& runFile)
{
    jobs::JobSpec spec("train");
    spec.set("run_file", QFileInfo(runFile).absoluteFilePath().toStdString());
    return spec;
}

QString trainingCliCommand(const QString& workspaceDirectory, const QString& runFile)
{
    return specCommandLine(workspaceDirectory, trainingSpec(runFile));
}

JobWorker::Job trainingJob(const QString& workspaceDirectory, const QString& runFile)
{
    return specWorkerJob(workspaceDirectory, trainingSpec(runFile));
}

std::optional<std::int64_t> runNamed(const store::RunStore& store, const std::string& name)
{
    for (const store::RunInfo& run : store.listRuns()) {
        if (run.name == name) {
            return run.id;
        }
    }
    return std::nullopt;
}

TrainingDialog::TrainingDialog(const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
    , store_(store)
{
    setWindowTitle(tr("Start Training Run"));
    setObjectName("trainingDialog");
    resize(760, 640);
    auto* layout = new QVBoxLayout(this);
    auto* fileForm = new QFormLayout;
    file_ = new PathPicker(PickKind::RunFile, this);
    file_->setObjectName("runFileEdit");
    file_->setChoices(pickChoices(PickKind::RunFile, store_, workspace_));
    fileForm->addRow(tr("Start from run file:"), file_);
    layout->addLayout(fileForm);
    layout->addWidget(
        new QLabel(tr("The run (the run file's settings; what the form does not show is kept from it):"), this));

    auto* form = new QFormLayout;
    name_ = new QLineEdit(this);
    name_->setObjectName("runNameEdit");
    form->addRow(tr("Run name:"), name_);
    student_ = new PathPicker(PickKind::ModelDirectory, this);
    student_->setObjectName("runStudent");
    form->addRow(tr("Student:"), student_);
    teacher_ = new PathPicker(PickKind::ModelDirectory, this);
    teacher_->setObjectName("runTeacher");
    form->addRow(tr("Teacher:"), teacher_);
    prompts_ = new PathPicker(PickKind::PromptSet, this);
    prompts_->setObjectName("runPrompts");
    form->addRow(tr("Training prompts:"), prompts_);
    objective_ = new QComboBox(this);
    objective_->setObjectName("runObjective");
    for (const char* name : {"opd_full_kl", "opd_k1", "opd_k3", "reinforce", "grpo"}) {
        objective_->addItem(QString::fromLatin1(name));
    }
    form->addRow(tr("Objective:"), objective_);
    auto* batch = new QHBoxLayout;
    steps_ = spinBox(this, 1, 10000000, 100);
    steps_->setObjectName("runSteps");
    promptsPerStep_ = spinBox(this, 1, 100000, 8);
    samplesPerPrompt_ = spinBox(this, 1, 1024, 1);
    batch->addWidget(steps_);
    batch->addWidget(new QLabel(tr("steps of"), this));
    batch->addWidget(promptsPerStep_);
    batch->addWidget(new QLabel(tr("prompts x"), this));
    batch->addWidget(samplesPerPrompt_);
    batch->addWidget(new QLabel(tr("samples"), this));
    batch->addStretch(1);
    form->addRow(tr("Training:"), batch);
    learningRate_ = new QDoubleSpinBox(this);
    learningRate_->setDecimals(7);
    learningRate_->setRange(0.0000001, 10.0);
    learningRate_->setSingleStep(0.0001);
    learningRate_->setValue(1e-4);
    form->addRow(tr("Learning rate:"), learningRate_);
    recipe_ = new PathPicker(PickKind::Recipe, this);
    recipe_->setObjectName("runRecipe");
    recipe_->setToolTip(tr("the rollout engine's precision recipe (empty: everything BF16)"));
    form->addRow(tr("Rollout recipe:"), recipe_);
    auto* rollout = new QHBoxLayout;
    staleness_ = spinBox(this, 0, 1000, 0);
    asynchronous_ = new QCheckBox(tr("asynchronous loop"), this);
    noise_ = new QDoubleSpinBox(this);
    noise_->setDecimals(4);
    noise_->setRange(0.0, 10.0);
    noise_->setSingleStep(0.01);
    rollout->addWidget(new QLabel(tr("staleness"), this));
    rollout->addWidget(staleness_);
    rollout->addWidget(asynchronous_);
    rollout->addWidget(new QLabel(tr("weight noise sigma"), this));
    rollout->addWidget(noise_);
    rollout->addStretch(1);
    form->addRow(tr("Rollouts:"), rollout);
    auto* evaluation = new QHBoxLayout;
    evaluationEvery_ = spinBox(this, 0, 1000000, 0);
    evaluationEvery_->setSpecialValueText(tr("never"));
    evaluationPrompts_ = new PathPicker(PickKind::PromptSet, this);
    evaluationPrompts_->setObjectName("runEvaluationPrompts");
    evaluationCount_ = spinBox(this, 0, 10000000, 0);
    evaluationCount_->setSpecialValueText(tr("all"));
    evaluation->addWidget(new QLabel(tr("every"), this));
    evaluation->addWidget(evaluationEvery_);
    evaluation->addWidget(new QLabel(tr("steps on"), this));
    evaluation->addWidget(evaluationPrompts_, 1);
    evaluation->addWidget(new QLabel(tr("first"), this));
    evaluation->addWidget(evaluationCount_);
    form->addRow(tr("Evaluation:"), evaluation);
    seed_ = spinBox(this, 0, 2147483647, 0);
    form->addRow(tr("Seed:"), seed_);
    device_ = deviceComboBox(this, QStringLiteral("runDevice"));
    device_->setToolTip(tr("Where the student, teacher, rollout engine and optimizer compute"));
    form->addRow(tr("Device:"), device_);
    layout->addLayout(form);
    for (PathPicker* picker : {student_, teacher_, prompts_, recipe_, evaluationPrompts_}) {
        picker->setChoices(pickChoices(picker == recipe_   ? PickKind::Recipe
                : picker == student_ || picker == teacher_ ? PickKind::ModelDirectory
                                                           : PickKind::PromptSet,
            store_, workspace_));
        connect(picker, &PathPicker::pathChanged, this, &TrainingDialog::validate);
    }

    summary_ = new QLabel(this);
    summary_->setObjectName("runFileSummary");
    summary_->setWordWrap(true);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    summary_->setMinimumHeight(90);
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

    connect(file_, &PathPicker::pathChanged, this, [this](const QString& path) { setRunFile(path); });
    connect(name_, &QLineEdit::textChanged, this, &TrainingDialog::validate);
    connect(objective_, &QComboBox::currentTextChanged, this, &TrainingDialog::validate);
    connect(device_, &QComboBox::currentTextChanged, this, &TrainingDialog::validate);
    for (QSpinBox* box :
        {steps_, promptsPerStep_, samplesPerPrompt_, staleness_, evaluationEvery_, evaluationCount_, seed_}) {
        connect(box, qOverload<int>(&QSpinBox::valueChanged), this, &TrainingDialog::validate);
    }
    for (QDoubleSpinBox* box : {learningRate_, noise_}) {
        connect(box, qOverload<double>(&QDoubleSpinBox::valueChanged), this, &TrainingDialog::validate);
    }
    connect(asynchronous_, &QCheckBox::toggled, this, &TrainingDialog::validate);
    connect(copy_, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(cliCommand()); });
    connect(buttons, &QDialogButtonBox::accepted, this, [this] {
        if (valid_ && (!writesRunFile() || writeRunFile())) {
            accept();
        }
    });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    validate();
}

void TrainingDialog::setRunFile(const QString& path)
{
    if (file_->path() != path.trimmed()) {
        const QSignalBlocker block(file_);
        file_->setPath(path);
    }
    loaded_.reset();
    error_.clear();
    const QString file = runFile();
    if (!file.isEmpty()) {
        try {
            loaded_ = train::loadRunConfig(file.toStdString());
            loadIntoForm(*loaded_);
        } catch (const std::exception& error) {
            error_ = QString::fromUtf8(error.what());
        }
    }
    validate();
}

QString TrainingDialog::runFile() const
{
    return file_->path();
}

QString TrainingDialog::summaryText() const
{
    return summary_->text();
}

void TrainingDialog::loadIntoForm(const train::RunConfig& config)
{
    loading_ = true;
    name_->setText(QString::fromStdString(config.name));
    student_->setPath(QString::fromStdString(config.student));
    teacher_->setPath(QString::fromStdString(config.teacher));
    prompts_->setPath(QString::fromStdString(config.prompts));
    if (objective_->findText(QString::fromStdString(train::toString(config.objective.kind))) < 0) {
        objective_->addItem(QString::fromStdString(train::toString(config.objective.kind))); // opd_topk
    }
    objective_->setCurrentText(QString::fromStdString(train::toString(config.objective.kind)));
    steps_->setValue(static_cast<int>(config.steps));
    promptsPerStep_->setValue(static_cast<int>(config.batch.promptsPerStep));
    samplesPerPrompt_->setValue(static_cast<int>(config.batch.samplesPerPrompt));
    learningRate_->setValue(config.optimizer.learningRate);
    recipe_->setPath(QString::fromStdString(config.rollout.recipe));
    staleness_->setValue(static_cast<int>(config.rollout.staleness));
    asynchronous_->setChecked(config.rollout.asynchronous);
    noise_->setValue(config.rollout.noise.sigma);
    evaluationEvery_->setValue(static_cast<int>(config.evaluation.every));
    evaluationPrompts_->setPath(QString::fromStdString(config.evaluation.prompts));
    evaluationCount_->setValue(static_cast<int>(config.evaluation.count));
    seed_->setValue(static_cast<int>(std::min<std::uint64_t>(config.seed, 2147483647)));
    int device = device_->findData(QString::fromStdString(config.device));
    if (device < 0) {
        // A run file written for another machine: shown as it is; starting it here is refused (formConfig).
        device_->addItem(tr("%1 (not on this machine)").arg(QString::fromStdString(config.device)),
            QString::fromStdString(config.device));
        device = device_->count() - 1;
    }
    device_->setCurrentIndex(device);
    loading_ = false;
}

train::RunConfig TrainingDialog::formConfig() const
{
    train::RunConfig config = loaded_.value_or(train::RunConfig {});
    config.name = name_->text().trimmed().toStdString();
    config.student = cleanAbsolute(student_->path()).toStdString();
    config.teacher = cleanAbsolute(teacher_->path()).toStdString();
    config.prompts = cleanAbsolute(prompts_->path()).toStdString();
    const auto objective = train::objectiveFromString(objective_->currentText().toStdString());
    if (objective && *objective != config.objective.kind) {
        config.objective.kind = *objective;
        config.objective.topK = 0;
    }
    config.steps = steps_->value();
    config.batch.promptsPerStep = promptsPerStep_->value();
    config.batch.samplesPerPrompt = samplesPerPrompt_->value();
    config.optimizer.learningRate = learningRate_->value();
    config.rollout.recipe = cleanAbsolute(recipe_->path()).toStdString();
    config.rollout.staleness = staleness_->value();
    config.rollout.asynchronous = asynchronous_->isChecked();
    config.rollout.noise.sigma = noise_->value();
    config.evaluation.every = evaluationEvery_->value();
    config.evaluation.prompts = cleanAbsolute(evaluationPrompts_->path()).toStdString();
    config.evaluation.count = evaluationCount_->value();
    if (static_cast<std::uint64_t>(seed_->value()) != std::min<std::uint64_t>(config.seed, 2147483647)) {
        config.seed = static_cast<std::uint64_t>(seed_->value());
    }
    config.device = device_->currentData().toString().toStdString();
    // Parsed by core as a file: every rule of a run file applies (paths, ranges, the cross-field rules).
    const QString file = workspace_ + "/runs/" + name_->text().trimmed() + ".json";
    // A device this machine has; named by the run file it came from, else by the field.
    const bool fromFile = loaded_ && loaded_->device == config.device;
    parseDevice(config.device, fromFile ? runFile().toStdString() : std::string("Device field"), "device");
    return train::parseRunConfig(
        train::runConfigToJson(config), file.toStdString(), (workspace_ + "/runs").toStdString());
}

void TrainingDialog::validate()
{
    if (loading_) {
        return;
    }
    valid_ = false;
    runName_.clear();
    config_.reset();
    QString problem;
    const QString file = runFile();
    const QString name = name_->text().trimmed();
    // Run names follow core's rule (train::runNameProblem, runNameTaken), which `mismatch train` applies too.
    const std::string nameProblem = train::runNameProblem(name.toStdString());
    if (!file.isEmpty() && !loaded_) {
        problem = error_.isEmpty() ? tr("Run file: cannot read '%1'").arg(file) : error_;
    } else if (!nameProblem.empty()) {
        problem = tr("Run name: %1").arg(QString::fromStdString(nameProblem));
    } else if (!isModelDirectory(student_->path())) {
        problem = tr("Student: expected a model folder holding config.json (got '%1')").arg(student_->path());
    } else if (train::usesTeacher(train::objectiveFromString(objective_->currentText().toStdString())
                                      .value_or(train::Objective::OpdFullKl))
        && !isModelDirectory(teacher_->path())) {
        problem = tr("Teacher: the %1 objective distills from a teacher; expected a model folder holding config.json "
                     "(got '%2')")
                      .arg(objective_->currentText(), teacher_->path());
    } else if (!teacher_->path().isEmpty() && !isModelDirectory(teacher_->path())) {
        problem = tr("Teacher: expected a model folder holding config.json (got '%1')").arg(teacher_->path());
    } else if (!QFileInfo(prompts_->path()).isFile()) {
        problem = tr("Training prompts: expected a JSON Lines prompt set (got '%1')").arg(prompts_->path());
    } else if (!recipe_->path().isEmpty() && !QFileInfo(recipe_->path()).isFile()) {
        problem = tr("Rollout recipe: no such file '%1' (leave it empty for the BF16 engine)").arg(recipe_->path());
    } else if (const QString failure = recipeProblem(); !failure.isEmpty()) {
        problem = failure;
    } else if (evaluationEvery_->value() > 0 && !QFileInfo(evaluationPrompts_->path()).isFile()) {
        problem = tr("Evaluation: evaluating every %1 steps needs a held-out prompt set (got '%2')")
                      .arg(evaluationEvery_->value())
                      .arg(evaluationPrompts_->path());
    } else if (store_) {
        try {
            if (const std::string taken = train::runNameTaken(*store_, name.toStdString()); !taken.empty()) {
                problem = tr("Run name: %1").arg(QString::fromStdString(taken));
            }
        } catch (const std::exception& error) {
            problem = tr("Run name: the workspace's runs cannot be read (%1)").arg(QString::fromUtf8(error.what()));
        }
    }
    if (problem.isEmpty()) {
        try {
            config_ = formConfig();
        } catch (const std::exception& error) {
            problem = tr("Run: %1").arg(QString::fromUtf8(error.what()));
        }
    }
    error_ = problem.isEmpty() ? QString() : (loaded_ || file.isEmpty() ? problem : error_);
    if (!problem.isEmpty()) {
        error_ = problem;
        summary_->setText(problem.toHtmlEscaped().replace(QLatin1String("\n"), QLatin1String("<br>")));
        summary_->setStyleSheet(QStringLiteral("color: #c62828"));
    } else {
        valid_ = true;
        const train::RunConfig& c = *config_;
        runName_ = QString::fromStdString(c.name);
        const auto& r = c.rollout;
        QString text = tr("<b>%1</b>: %2, %3 steps of %4 prompts x %5 samples<br>student %6<br>teacher %7<br>"
                          "rollouts: %8, staleness %9, %10, noise sigma %11<br>evaluation every %12 steps")
                           .arg(runName_.toHtmlEscaped(), QString::fromStdString(train::toString(c.objective.kind)))
                           .arg(c.steps)
                           .arg(c.batch.promptsPerStep)
                           .arg(c.batch.samplesPerPrompt)
                           .arg(QString::fromStdString(c.student).toHtmlEscaped(),
                               c.teacher.empty() ? tr("(none)") : QString::fromStdString(c.teacher).toHtmlEscaped(),
                               r.recipe.empty() ? tr("BF16 engine") : QString::fromStdString(r.recipe).toHtmlEscaped())
                           .arg(r.staleness)
                           .arg(r.asynchronous ? tr("asynchronous") : tr("synchronous"))
                           .arg(r.noise.sigma)
                           .arg(c.evaluation.every);
        text += writesRunFile()
            ? tr("<br><i>Start writes the form as %1 and trains it.</i>").arg(effectiveRunFile().toHtmlEscaped())
            : tr("<br><i>Start trains %1 as it is.</i>").arg(runFile().toHtmlEscaped());
        summary_->setText(text);
        summary_->setStyleSheet({});
    }
    start_->setEnabled(valid_);
    copy_->setEnabled(valid_);
    command_->setText(valid_ ? cliCommand() : QString());
}

bool TrainingDialog::writesRunFile() const
{
    return config_ && (!loaded_ || *config_ != *loaded_);
}

QString TrainingDialog::effectiveRunFile() const
{
    if (!writesRunFile()) {
        return runFile();
    }
    return QDir::cleanPath(workspace_ + "/runs/" + runName_ + ".json");
}

bool TrainingDialog::writeRunFile()
{
    if (!valid_ || !writesRunFile()) {
        return valid_;
    }
    const QString path = effectiveRunFile();
    try {
        // Not over a file the run reads, nor into its models' directories (issue 46).
        const train::RunConfig& run = *config_;
        requireOutputNotInput(path.toStdString(),
            {{run.prompts, "training prompt set"}, {run.evaluation.prompts, "held-out prompt set"},
                {run.rollout.recipe, "rollout recipe"}},
            {run.student, run.teacher}, "run file");
        QDir().mkpath(QFileInfo(path).absolutePath());
        writeFileAtomically(path.toStdString(), train::runConfigToJson(*config_) + "\n");
        // What was written must read back as the form's run.
        if (train::loadRunConfig(path.toStdString()) != *config_) {
            error_ = tr("Run file %1 was written but does not read back as the form's run").arg(path);
            return false;
        }
    } catch (const std::exception& error) {
        error_ = tr("Run file %1 cannot be written: %2").arg(path, QString::fromUtf8(error.what()));
        summary_->setText(error_.toHtmlEscaped());
        summary_->setStyleSheet(QStringLiteral("color: #c62828"));
        return false;
    }
    return true;
}

QString TrainingDialog::cliCommand() const
{
    return trainingCliCommand(workspace_, effectiveRunFile());
}

void TrainingDialog::setName(const QString& name)
{
    name_->setText(name);
}
void TrainingDialog::setStudent(const QString& directory)
{
    student_->setPath(directory);
}
void TrainingDialog::setTeacher(const QString& directory)
{
    teacher_->setPath(directory);
}
void TrainingDialog::setPrompts(const QString& path)
{
    prompts_->setPath(path);
}
void TrainingDialog::setObjective(const QString& name)
{
    objective_->setCurrentText(name);
}
void TrainingDialog::setSteps(int steps)
{
    steps_->setValue(steps);
}
void TrainingDialog::setBatch(int promptsPerStep, int samplesPerPrompt)
{
    promptsPerStep_->setValue(promptsPerStep);
    samplesPerPrompt_->setValue(samplesPerPrompt);
}
QString TrainingDialog::recipeProblem() const
{
    if (recipe_->path().isEmpty()) {
        return {};
    }
    // The recipe must fit the student before Start is enabled (a recipe written for another model, such as the
    // 4-layer fp8-keep-edges on a 2-layer student, would otherwise fail after Start).
    try {
        const quant::Recipe recipe = quant::loadRecipe(recipe_->path().toStdString());
        quant::resolveRecipe(recipe, model::loadConfig((QDir(student_->path()).filePath("config.json")).toStdString()));
    } catch (const std::exception& error) {
        return tr("Rollout recipe: %1").arg(QString::fromUtf8(error.what()));
    }
    return {};
}

void TrainingDialog::setRecipe(const QString& path)
{
    recipe_->setPath(path);
}
void TrainingDialog::setEvaluation(int every, const QString& prompts, int count)
{
    evaluationEvery_->setValue(every);
    evaluationPrompts_->setPath(prompts);
    evaluationCount_->setValue(count);
}

} // namespace mismatch::ui

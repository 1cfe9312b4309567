#include "ui/dialogs/study_dialogs.h"

#include "core/analysis/compare_objectives.h"
#include "core/analysis/compare_runs.h"
#include "core/analysis/recipe_builder.h"
#include "core/analysis/time_to_quality.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/io/import_follow.h"
#include "core/io/import_log.h"
#include "core/jobs/model_jobs.h"
#include "core/metrics/bootstrap.h"
#include "core/quant/recipe.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/import_store.h"
#include "core/train/run_config.h"
#include "ui/views/analysis_data.h"
#include "ui/views/recipe_editor.h"
#include "ui/dialogs/training_dialog.h"

#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDeadlineTimer>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QHeaderView>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <set>

namespace mismatch::ui {

namespace {

QString absolute(const QString& path)
{
    return absolutePath(path);
}

// "a; b" -> the recipe paths, each checked to load.
QString recipesProblem(const QString& field, const QStringList& recipes)
{
    for (const QString& recipe : recipes) {
        if (const QString problem = loadError(field, [&] { quant::loadRecipe(recipe.toStdString()); });
            !problem.isEmpty()) {
            return problem;
        }
    }
    return {};
}

QString runFileProblem(const QString& field, const QString& path)
{
    if (path.isEmpty() || !QFileInfo(path).isFile()) {
        return QObject::tr("%1: expected a run file (YAML or JSON; got '%2')").arg(field, path);
    }
    return loadError(field, [&] { train::loadRunConfig(path.toStdString()); });
}

} // namespace

// ---- recipe build -------------------------------------------------------------------------------------------

RecipeBuildDialog::RecipeBuildDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent)
    : JobDialog(workspaceDirectory, tr("Build Recipe"), QStringLiteral("recipeBuildDialog"), parent, store)
{
    setOpeningWidth(760);
    QFormLayout* form = this->form();
    scan_ = new QComboBox(this);
    scan_->setObjectName("recipeBuildScan");
    scan_->addItem(tr("scan the model now"), QVariant::fromValue<qlonglong>(0));
    if (store_) {
        try {
            for (const SensitivityScanInfo& scan : AnalysisData(*store_).sensitivityScans()) {
                if (scan.status != "finished") {
                    continue; // a partial scan does not order every cell
                }
                scan_->addItem(
                    tr("scan #%1 %2%3")
                        .arg(scan.id)
                        .arg(QString::fromStdString(scan.format),
                            scan.modelName.empty() ? QString()
                                                   : tr(" on %1").arg(QString::fromStdString(scan.modelName))),
                    QVariant::fromValue<qlonglong>(scan.id));
            }
        } catch (const std::exception&) {
            // Only "scan now" is offered.
        }
    }
    scan_->setCurrentIndex(scan_->count() - 1);
    form->addRow(tr("Cells ordered by:"), scan_);
    model_ = addPicker(PickKind::ModelDirectory, tr("Model directory:"), QStringLiteral("recipeBuildModel"));
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("recipeBuildPrompts"));
    format_ = new QComboBox(this);
    for (const std::string& choice : weightChoices()) {
        if (choice != "bf16") {
            format_->addItem(QString::fromStdString(choice));
        }
    }
    format_->setCurrentText(QStringLiteral("fp8_e4m3/block128"));
    form->addRow(tr("Quantize to:"), format_);
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("recipe_build");
    // A build from the GUI scans 64 prompts of 16 tokens, where the job's defaults (the CLI's) are every prompt and
    // 64 tokens, so that it is quick; the spec then gives both.
    count_ = addParameterField<QSpinBox>(
        job, "count", QStringLiteral("recipeBuildCount"), FieldOptions().start(64).special(tr("all")));
    maxTokens_ = addParameterField<QSpinBox>(
        job, "max_tokens", QStringLiteral("recipeBuildMaxTokens"), FieldOptions().start(16));
    budget_ = new CalibrationPicker(store_, true, this, tr("an explicit budget"));
    budget_->setObjectName("recipeBuildBudget");
    form->addRow(tr("Budget from:"), budget_);
    target_ = addParameterField<QDoubleSpinBox>(
        job, "target_fraction", QStringLiteral("recipeBuildTarget"), FieldOptions().decimals(2, 0.05));
    kvCache_ = addParameterField<QCheckBox>(job, "kv_cache", QStringLiteral("recipeBuildKvCache"));
    keepEmbedding_ = addParameterField<QCheckBox>(job, "no_embedding", QStringLiteral("recipeBuildKeepEmbedding"));
    output_ = new QLineEdit(this);
    output_->setObjectName("recipeBuildOutput");
    form->addRow(tr("Recipe file to write:"), output_);
    name_ = addParameterField<QLineEdit>(
        job, "name", QStringLiteral("recipeBuildName"), FieldOptions().placeholder(tr("default: built-<format>")));
    connect(scan_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
        updateScanFields();
        validate();
    });
    connect(format_, &QComboBox::currentTextChanged, this, [this] { updateScanFields(); });
    connect(output_, &QLineEdit::textEdited, this, [this] { outputEdited_ = true; });
    watch(format_);
    watch(budget_);
    watch(output_);
    updateScanFields();
    addDeviceField();
    finishLayout(QStringLiteral("recipeBuildStatus"), QStringLiteral("recipeBuildCli"),
        QStringLiteral("startRecipeBuildButton"));
}

void RecipeBuildDialog::updateScanFields()
{
    const bool scanNow = scan_->currentData().toLongLong() == 0;
    for (QWidget* field : std::initializer_list<QWidget*> {model_, prompts_, format_, count_, maxTokens_}) {
        field->setEnabled(scanNow);
    }
    if (!outputEdited_) {
        const QString stem = scanNow ? QStringLiteral("built-%1").arg(format_->currentText().replace('/', '-'))
                                     : QStringLiteral("built-from-scan-%1").arg(scan_->currentData().toLongLong());
        const QSignalBlocker block(output_);
        output_->setText(QDir::cleanPath(workspace_ + "/recipes/" + stem + ".yaml"));
    }
}

bool RecipeBuildDialog::setScan(std::int64_t scanId)
{
    const int index = scan_->findData(QVariant::fromValue<qlonglong>(scanId));
    if (index < 0) {
        return false;
    }
    scan_->setCurrentIndex(index);
    return true;
}
void RecipeBuildDialog::setModelDirectory(const QString& directory)
{
    model_->setPath(directory);
}
void RecipeBuildDialog::setPromptSet(const QString& path)
{
    prompts_->setPath(path);
}
void RecipeBuildDialog::setFormat(const QString& weightChoice)
{
    format_->setCurrentText(weightChoice);
}
void RecipeBuildDialog::setBudget(double budget)
{
    budget_->select(0);
    budget_->setExplicitThreshold(budget);
}
bool RecipeBuildDialog::setCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step)
{
    return budget_->select(calibrationId, step);
}
void RecipeBuildDialog::setTargetFraction(double fraction)
{
    target_->setValue(fraction);
}
void RecipeBuildDialog::setOutput(const QString& path)
{
    outputEdited_ = true;
    output_->setText(path);
}
void RecipeBuildDialog::setCount(int prompts)
{
    count_->setValue(prompts);
}
void RecipeBuildDialog::setMaxTokens(int tokens)
{
    maxTokens_->setValue(tokens);
}
QString RecipeBuildDialog::outputPath() const
{
    return absolute(output_->text());
}

std::vector<std::pair<std::string, std::string>> RecipeBuildDialog::fieldNames() const
{
    return {{"--budget X (nats per token) or --calibration ID", "a budget"}, {"--calibration", "Budget from"},
        {"--budget", "Budget from"}, {"--step", "Budget step"}, {"--format", "Quantize to"},
        {"--prompts", "Prompt set"}, {"--out", "Recipe file to write"}};
}

QString RecipeBuildDialog::check() const
{
    if (scan_->currentData().toLongLong() == 0) {
        if (!isModelDirectory(model_->path())) {
            return tr("Model directory: expected a folder holding config.json and the checkpoint (got '%1')")
                .arg(model_->path());
        }
        if (prompts_->path().isEmpty() || !QFileInfo(prompts_->path()).isFile()) {
            return tr("Prompt set: expected a JSON Lines file (got '%1')").arg(prompts_->path());
        }
    }
    if (const QString problem = budget_->thresholdProblem(); !problem.isEmpty()) {
        return problem;
    }
    const QString out = output_->text().trimmed();
    const QString suffix = QFileInfo(out).suffix().toLower();
    if (out.isEmpty()
        || (suffix != QLatin1String("yaml") && suffix != QLatin1String("yml") && suffix != QLatin1String("json"))) {
        return tr("Recipe file to write: expected a .yaml, .yml or .json path (got '%1')").arg(out);
    }
    return specError(*spec());
}

QString RecipeBuildDialog::readyText() const
{
    return tr("Ready: everything quantized first, then the most sensitive cells kept in BF16 one at a time until the "
              "measured mismatch is at most %1 x %2 nats/token; the recipe is written to %3 and opened in the "
              "recipe editor.")
        .arg(target_->value())
        .arg(budget_->threshold().value_or(0.0), 0, 'g', 4)
        .arg(outputPath());
}

QString RecipeBuildDialog::jobName() const
{
    return tr("Recipe build %1").arg(QFileInfo(outputPath()).completeBaseName());
}

QString RecipeBuildDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> RecipeBuildDialog::spec() const
{
    jobs::JobSpec spec("recipe_build");
    const qlonglong scan = scan_->currentData().toLongLong();
    if (scan == 0) {
        spec.set("model", absolute(model_->path()).toStdString());
        // The CLI and job files write a granularity after a colon: fp8_e4m3:block128.
        spec.set("format", format_->currentText().replace(QLatin1Char('/'), QLatin1Char(':')).toStdString());
        spec.set("prompts", absolute(prompts_->path()).toStdString());
        setParameters(spec, {"count", "max_tokens"});
    } else {
        spec.set("scan", scan);
    }
    if (const std::int64_t calibration = budget_->calibrationId(); calibration != 0) {
        spec.set("calibration", calibration);
        if (const auto step = budget_->step()) {
            spec.set("step", *step);
        }
    } else {
        spec.set("budget", budget_->explicitThreshold());
    }
    setParameters(spec, {"target_fraction", "kv_cache", "no_embedding"});
    spec.set("out", outputPath().toStdString());
    setParameters(spec, {"name"});
    setDevice(spec);
    return spec;
}

JobWorker::Job RecipeBuildDialog::job() const
{
    return specJob(*spec());
}

// ---- time to quality ----------------------------------------------------------------------------------------

TimeToQualityDialog::TimeToQualityDialog(
    const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, tr("Time to Quality"), QStringLiteral("timeToQualityDialog"), parent, store)
{
    setOpeningWidth(700);
    runFile_ = addPicker(PickKind::RunFile, tr("Base run file:"), QStringLiteral("ttqRunFile"));
    recipe_ = addPicker(PickKind::Recipe, tr("Candidate's recipe:"), QStringLiteral("ttqRecipe"));
    recipe_->setToolTip(tr("empty: the BF16 engine"));
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("time_to_quality");
    staleness_ = addParameterField<QSpinBox>(job, "staleness", QStringLiteral("ttqStaleness"));
    synchronous_ = addParameterField<QCheckBox>(job, "synchronous", QStringLiteral("ttqSynchronous"));
    targetStep_ = addParameterField<QSpinBox>(
        job, "target_step", QStringLiteral("ttqTargetStep"), FieldOptions().notGiven(tr("the last evaluated step")));
    addDeviceField(/*runFileDefault=*/true);
    finishLayout(QStringLiteral("ttqStatus"), QStringLiteral("ttqCli"), QStringLiteral("startTtqButton"));
}

void TimeToQualityDialog::setRunFile(const QString& path)
{
    runFile_->setPath(path);
}
void TimeToQualityDialog::setRecipe(const QString& path)
{
    recipe_->setPath(path);
}
void TimeToQualityDialog::setStaleness(int staleness)
{
    staleness_->setValue(staleness);
}
void TimeToQualityDialog::setSynchronous(bool synchronous)
{
    synchronous_->setChecked(synchronous);
}
void TimeToQualityDialog::setTargetStep(int step)
{
    targetStep_->setValue(step);
}

QString TimeToQualityDialog::check() const
{
    if (const QString problem = runFileProblem(tr("Base run file"), runFile_->path()); !problem.isEmpty()) {
        return problem;
    }
    if (!recipe_->path().isEmpty()) {
        if (const QString problem = recipesProblem(tr("Candidate's recipe"), {recipe_->path()}); !problem.isEmpty()) {
            return problem;
        }
    }
    return specError(*spec());
}

QString TimeToQualityDialog::readyText() const
{
    return tr("Ready: the synchronous BF16 run, then the candidate (%1, staleness %2); both appear in the Runs tab.")
        .arg(synchronous_->isChecked() ? tr("synchronous") : tr("asynchronous"))
        .arg(staleness_->value());
}

QString TimeToQualityDialog::jobName() const
{
    return tr("Time to quality of %1")
        .arg(recipe_->path().isEmpty() ? tr("BF16") : QFileInfo(recipe_->path()).completeBaseName());
}

QString TimeToQualityDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> TimeToQualityDialog::spec() const
{
    jobs::JobSpec spec("time_to_quality");
    spec.set("run_file", absolute(runFile_->path()).toStdString());
    if (!recipe_->path().isEmpty()) {
        spec.set("recipe", absolute(recipe_->path()).toStdString());
    }
    setParameters(spec, {"staleness", "synchronous", "target_step"});
    setDevice(spec);
    return spec;
}

JobWorker::Job TimeToQualityDialog::job() const
{
    return specJob(*spec());
}

// ---- compare objectives -------------------------------------------------------------------------------------

CompareObjectivesDialog::CompareObjectivesDialog(
    const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, tr("Compare Objectives"), QStringLiteral("compareObjectivesDialog"), parent, store)
{
    setOpeningWidth(720);
    QFormLayout* form = this->form();
    runFile_ = addPicker(PickKind::RunFile, tr("Base run file:"), QStringLiteral("objectivesRunFile"));
    auto* objectives = new QHBoxLayout;
    for (const char* name : {"opd_full_kl", "opd_k1", "opd_k3", "reinforce", "grpo"}) {
        auto* box = new QCheckBox(QString::fromLatin1(name), this);
        box->setChecked(
            QByteArray(name) == "opd_full_kl" || QByteArray(name) == "reinforce" || QByteArray(name) == "grpo");
        objectives->addWidget(box);
        objectives_.push_back(box);
        watch(box);
    }
    objectives->addStretch(1);
    form->addRow(tr("Objectives:"), objectives);
    noise_ = new QLineEdit(this);
    noise_->setPlaceholderText(tr("default 0.1, 0.3, 1.0 (without recipes)"));
    form->addRow(tr("Noise sigmas of the sweep:"), noise_);
    recipes_ = new QLineEdit(this);
    recipes_->setPlaceholderText(tr("recipe files, separated by ';'"));
    form->addRow(tr("Recipes of the sweep:"), recipes_);
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("compare_objectives");
    steps_ = addParameterField<QSpinBox>(
        job, "run_steps", QStringLiteral("objectivesSteps"), FieldOptions().notGiven(tr("the run file's")));
    rlMaxTokens_ = addParameterField<QSpinBox>(job, "rl_max_tokens", QStringLiteral("objectivesRlMaxTokens"));
    group_ = addParameterField<QSpinBox>(job, "group", QStringLiteral("objectivesGroup"));
    window_ = addParameterField<QSpinBox>(
        job, "window", QStringLiteral("objectivesWindow"), FieldOptions().notGiven(tr("the last quarter")));
    collapse_ = addParameterField<QDoubleSpinBox>(
        job, "collapse", QStringLiteral("objectivesCollapse"), FieldOptions().decimals(2, 0.05));
    addDeviceField(/*runFileDefault=*/true);
    for (QLineEdit* edit : {noise_, recipes_})
        watch(edit);
    finishLayout(
        QStringLiteral("objectivesStatus"), QStringLiteral("objectivesCli"), QStringLiteral("startObjectivesButton"));
}

void CompareObjectivesDialog::setRunFile(const QString& path)
{
    runFile_->setPath(path);
}
void CompareObjectivesDialog::setObjectives(const QStringList& names)
{
    for (QCheckBox* box : objectives_) {
        box->setChecked(names.contains(box->text()));
    }
}
void CompareObjectivesDialog::setNoise(const QString& sigmas)
{
    noise_->setText(sigmas);
}
void CompareObjectivesDialog::setRecipes(const QString& paths)
{
    recipes_->setText(paths);
}
void CompareObjectivesDialog::setSteps(int steps)
{
    steps_->setValue(steps);
}

QStringList CompareObjectivesDialog::objectives() const
{
    QStringList names;
    for (const QCheckBox* box : objectives_) {
        if (box->isChecked()) {
            names << box->text();
        }
    }
    return names;
}

QString CompareObjectivesDialog::check() const
{
    // What the spec cannot say: a field whose text is not a list, a file that is not there or does not load.
    if (const QString problem = runFileProblem(tr("Base run file"), runFile_->path()); !problem.isEmpty()) {
        return problem;
    }
    QString error;
    if (!parseNumberList(noise_->text(), &error)) {
        return tr("Noise sigmas of the sweep: %1; expected numbers above 0 separated by commas").arg(error);
    }
    if (const QString problem = recipesProblem(tr("Recipes of the sweep"), splitPaths(recipes_->text()));
        !problem.isEmpty()) {
        return problem;
    }
    return specError(*spec());
}

QString CompareObjectivesDialog::readyText() const
{
    return tr("Ready: %1 trained with the BF16 engine and every sweep configuration, one run after the other.")
        .arg(objectives().join(QStringLiteral(", ")));
}

QString CompareObjectivesDialog::jobName() const
{
    return tr("Compare objectives (%1)").arg(objectives().join(QStringLiteral(", ")));
}

QString CompareObjectivesDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> CompareObjectivesDialog::spec() const
{
    jobs::JobSpec spec("compare_objectives");
    spec.set("run_file", absolute(runFile_->path()).toStdString());
    nlohmann::json names = nlohmann::json::array();
    for (const QString& name : objectives()) {
        names.push_back(name.toStdString());
    }
    // No objective chosen is an empty list, which validate() names ("Objectives: required"), not the default.
    spec.set("objectives", names.empty() ? nlohmann::json::array({}) : names);
    spec.set("noise", parseNumberList(noise_->text(), nullptr).value_or(std::vector<double> {}));
    nlohmann::json recipes = nlohmann::json::array();
    for (const QString& recipe : splitPaths(recipes_->text())) {
        recipes.push_back(absolute(recipe).toStdString());
    }
    spec.set("recipes", recipes);
    setParameters(spec, {"run_steps", "rl_max_tokens", "group", "window", "collapse"});
    setDevice(spec);
    return spec;
}

JobWorker::Job CompareObjectivesDialog::job() const
{
    return specJob(*spec());
}

// ---- log import ---------------------------------------------------------------------------------------------

ImportLogDialog::ImportLogDialog(
    const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store, Mode mode)
    : JobDialog(workspaceDirectory, mode == Mode::Follow ? tr("Follow Training Log") : tr("Import Training Log"),
          mode == Mode::Follow ? QStringLiteral("followLogDialog") : QStringLiteral("importLogDialog"), parent, store)
    , mode_(mode)
{
    setOpeningWidth(680);
    QFormLayout* form = this->form();
    source_ = new QComboBox(this);
    source_->setObjectName("importSource");
    source_->addItem(tr("verl (file logger JSONL)"), QStringLiteral("verl"));
    source_->addItem(tr("Tinker (metrics.jsonl)"), QStringLiteral("tinker"));
    source_->addItem(tr("CSV"), QStringLiteral("csv"));
    source_->addItem(tr("TensorBoard (events.out.tfevents.*)"), QStringLiteral("tensorboard"));
    form->addRow(tr("Log format:"), source_);
    file_ = addPicker(PickKind::AnyFile, tr("Log file:"), QStringLiteral("importFile"));
    // The run name is the import jobs' "name" parameter (the same in each format's job).
    name_ = addParameterField<QLineEdit>(catalogueJob("import_" + source_->currentData().toString().toStdString()),
        "name", QStringLiteral("importName"), FieldOptions().placeholder(tr("default: <format> <file name>")));
    map_ = new QLineEdit(this);
    map_->setObjectName("importMap");
    map_->setPlaceholderText(tr("COLUMN=MEASURE; ... (optional; CSV: COLUMN=step names the step column)"));
    form->addRow(tr("Column mapping:"), map_);
    if (mode_ == Mode::Follow) {
        // `--poll SECONDS` of `mismatch import ... --follow` (app/cli/cli_import.cpp), with its range.
        poll_ = new QDoubleSpinBox(this);
        poll_->setObjectName(QStringLiteral("followPoll"));
        poll_->setRange(0.05, 3600.0);
        poll_->setDecimals(2);
        poll_->setValue(1.0);
        poll_->setSuffix(tr(" s"));
        poll_->setToolTip(tr("Seconds between two reads of the file; each read stores the new steps in one "
                             "transaction, and the Runs tab draws them"));
        form->addRow(tr("Read the file every:"), poll_);
        watch(poll_);
    }
    budget_ = new CalibrationPicker(store_, false, this);
    budget_->offerNone(tr("none"));
    budget_->setObjectName(mode_ == Mode::Follow ? QStringLiteral("followBudget") : QStringLiteral("importBudget"));
    budget_->setToolTip(tr("A calibration's budget (its bracket's admission threshold at one step, nats/token) drawn "
                           "beside the run on its mismatch axis in the Runs tab, for this session; it can be changed "
                           "there. The budget is on the screen statistic; the run's steps are its training-step "
                           "estimates."));
    form->addRow(tr("Budget from:"), budget_);
    watch(budget_);
    // The format and the mapping re-validate through refreshPreview (the preview's reading is part of the check); the
    // run name, a parameter field, is watched by addParameterField.
    previewSummary_ = new QLabel(this);
    previewSummary_->setObjectName(QStringLiteral("importPreviewSummary"));
    previewSummary_->setWordWrap(true);
    form->addRow(tr("Preview:"), previewSummary_);
    preview_ = new QTableWidget(0, 4, this);
    preview_->setObjectName(QStringLiteral("importPreview"));
    preview_->setHorizontalHeaderLabels({tr("Logged key"), tr("Measure"), tr("Steps"), tr("Estimator")});
    preview_->horizontalHeader()->setStretchLastSection(true);
    preview_->verticalHeader()->setVisible(false);
    preview_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    preview_->setMinimumHeight(160); // the header and a few rows
    // In the dialog's layout under the form, taking the height the dialog has beyond its rows: the status line below
    // it moves down as the preview's summary wraps to more lines.
    addBelowForm(preview_, 1);
    connect(source_, &QComboBox::currentTextChanged, this, &ImportLogDialog::refreshPreview);
    connect(file_, &PathPicker::pathChanged, this, &ImportLogDialog::refreshPreview);
    connect(map_, &QLineEdit::textChanged, this, &ImportLogDialog::refreshPreview);
    if (mode_ == Mode::Follow) {
        finishLayout(QStringLiteral("followStatus"), QStringLiteral("followCli"), QStringLiteral("startFollowButton"));
    } else {
        finishLayout(QStringLiteral("importStatus"), QStringLiteral("importCli"), QStringLiteral("startImportButton"));
    }
    refreshPreview();
}

// Files up to this size are read for the preview as the fields change (larger logs are read only by the job).
constexpr qint64 kPreviewBytes = 16 << 20;

QString ImportLogDialog::previewSummary() const
{
    return previewSummary_->text();
}

void ImportLogDialog::refreshPreview()
{
    preview_->setRowCount(0);
    previewError_.clear();
    previewNotYet_ = false;
    const QFileInfo info(file_->path());
    if (file_->path().isEmpty() || !info.isFile()) {
        previewSummary_->setText(mode_ == Mode::Follow && !file_->path().isEmpty()
                ? tr("the file does not exist yet: the follow waits for it")
                : tr("choose a log file"));
        validate();
        return;
    }
    if (info.size() > kPreviewBytes) {
        previewSummary_->setText(tr("not previewed (the file is over %1 MiB; the import reads it when started)")
                                     .arg(kPreviewBytes >> 20));
        validate();
        return;
    }
    const jobs::JobSpec job = importSpec();
    if (!specError(job).isEmpty()) {
        previewSummary_->setText(tr("-")); // the mapping's own problem is the status line's
        validate();
        return;
    }
    try {
        // Read as the job reads it (jobs::prepareImport), nothing stored.
        const io::ImportedLog log = std::move(*jobs::prepareImport(job).log);
        for (const io::MappedMetric& metric : log.metrics) {
            const int row = preview_->rowCount();
            preview_->insertRow(row);
            preview_->setItem(row, 0, new QTableWidgetItem(QString::fromStdString(metric.key)));
            preview_->setItem(row, 1,
                new QTableWidgetItem(QString::fromStdString(metric.measure) + (metric.userMapped ? tr(" (--map)") : QString())));
            preview_->setItem(row, 2, new QTableWidgetItem(QString::number(metric.steps)));
            preview_->setItem(row, 3, new QTableWidgetItem(QString::fromStdString(metric.estimator)));
            preview_->item(row, 3)->setToolTip(QString::fromStdString(metric.estimator));
        }
        preview_->resizeColumnsToContents();
        QString summary = tr("%1 steps from %2 lines (%3 merged); %4 lines skipped, %5 values dropped, %6 replaced")
                              .arg(log.steps.size())
                              .arg(log.linesRead)
                              .arg(log.linesMerged)
                              .arg(log.skipped.size())
                              .arg(log.dropped.size())
                              .arg(log.conflicts.size());
        if (!log.unmappedKeys.empty()) {
            QStringList keys;
            for (std::size_t i = 0; i < log.unmappedKeys.size() && i < 6; ++i) {
                keys.push_back(QString::fromStdString(log.unmappedKeys[i]));
            }
            summary += tr("; not read (map them with Column mapping): %1%2")
                           .arg(keys.join(QStringLiteral(", ")), log.unmappedKeys.size() > 6 ? tr(", ...") : QString());
        }
        for (const std::string& note : log.notes) {
            summary += QStringLiteral("; ") + QString::fromStdString(note);
        }
        previewSummary_->setText(summary);
    } catch (const std::exception& error) {
        // Named in this dialog's words ("Column mapping", not "--map").
        previewError_ = tr("Log file: %1").arg(QString::fromStdString(nameFields(error.what(), fieldNames())));
        // A followed log may have no usable line yet (io::importLog's "no usable line"): the follow reads what the
        // trainer writes next. Any other problem (a CSV header without a step column, ...) stops a follow too.
        const auto* input = dynamic_cast<const InputError*>(&error);
        previewNotYet_ = input && input->detail().rfind("no usable line", 0) == 0;
        previewSummary_->setText(mode_ == Mode::Follow && previewNotYet_
                ? tr("nothing usable yet; the follow reads what the trainer writes next")
                : tr("nothing would be imported"));
    }
    validate();
}

void ImportLogDialog::setSource(const QString& source)
{
    source_->setCurrentIndex(std::max(0, source_->findData(source)));
}
void ImportLogDialog::setFile(const QString& path)
{
    file_->setPath(path);
}
void ImportLogDialog::setName(const QString& name)
{
    name_->setText(name);
}
void ImportLogDialog::setMap(const QString& entries)
{
    map_->setText(entries);
}
void ImportLogDialog::setPollSeconds(double seconds)
{
    if (poll_) {
        poll_->setValue(seconds);
    }
}

bool ImportLogDialog::setBudget(std::int64_t calibrationId, std::optional<std::int64_t> step)
{
    return budget_->select(calibrationId, step);
}

std::int64_t ImportLogDialog::budgetCalibration() const
{
    return budget_->calibrationId();
}

std::optional<std::int64_t> ImportLogDialog::budgetStep() const
{
    return budget_->step();
}

QString ImportLogDialog::runName() const
{
    // The command's own default (app/cli/cli_import.cpp): the source and the file's name.
    return name_->text().trimmed().isEmpty()
        ? source_->currentData().toString() + QLatin1Char(' ') + QFileInfo(file_->path()).fileName()
        : name_->text().trimmed();
}

QStringList ImportLogDialog::mapEntries() const
{
    return splitPaths(map_->text());
}

jobs::JobSpec ImportLogDialog::importSpec() const
{
    // The catalogue's import job of the chosen format (core/jobs/model_jobs.h): the file as the command line names
    // it (absolute), so that the stored run records the same file.
    jobs::JobSpec spec("import_" + source_->currentData().toString().toStdString());
    spec.set("file", absolutePath(file_->path()).toStdString());
    setParameters(spec, {"name"});
    nlohmann::json map = nlohmann::json::array();
    for (const QString& entry : mapEntries()) {
        map.push_back(entry.toStdString());
    }
    spec.set("map", map);
    return spec;
}

std::optional<jobs::JobSpec> ImportLogDialog::spec() const
{
    if (mode_ == Mode::Follow) {
        return std::nullopt;
    }
    return importSpec();
}

std::vector<std::pair<std::string, std::string>> ImportLogDialog::fieldNames() const
{
    // The definition's labels, which the fields show.
    const jobs::JobDefinition& job = catalogueJob("import_" + source_->currentData().toString().toStdString());
    return {{"--map", jobParameter(job, "map").label}, {"--name", jobParameter(job, "name").label}};
}

std::int64_t ImportLogDialog::continuedRun(QString* problem) const
{
    if (!store_) {
        return 0;
    }
    try {
        const auto id = runNamed(*store_, runName().toStdString());
        if (!id) {
            return 0;
        }
        // As io::followLog decides: a run that imported the same file (absolute) from the same format is continued.
        const auto run = store_->run(*id);
        const auto external = store::externalRun(*store_, *id);
        const nlohmann::json config = nlohmann::json::parse(run ? run->configJson : std::string(), nullptr, false);
        const std::string file = absolutePath(file_->path()).toStdString();
        if (mode_ == Mode::Follow && external && external->source == source_->currentData().toString().toStdString()
            && config.is_object() && config.value("file", std::string()) == file) {
            return *id;
        }
        *problem = mode_ == Mode::Follow
            ? tr("Run name: '%1' is already used by run %2, which is not an import of this file in this format; "
                 "choose another name")
                  .arg(runName())
                  .arg(*id)
            : tr("Run name: '%1' is already used by run %2 in this workspace; choose another name")
                  .arg(runName())
                  .arg(*id);
    } catch (const std::exception&) {
        // The import itself reports a store it cannot write.
    }
    return 0;
}

QString ImportLogDialog::check() const
{
    const QFileInfo info(file_->path());
    if (mode_ == Mode::Follow) {
        // The file may come later (a cluster job that has not started writing): its directory must be there.
        if (file_->path().isEmpty() || (info.exists() && !info.isFile()) || !info.absoluteDir().exists()) {
            return tr("Log file: expected a %1 log file, or its path in an existing directory (got '%2')")
                .arg(source_->currentText(), file_->path());
        }
    } else if (file_->path().isEmpty() || !info.isFile()) {
        return tr("Log file: expected a %1 log file (got '%2')").arg(source_->currentText(), file_->path());
    }
    // The job's own checks (each mapping entry, a column or measure mapped twice), named by field.
    if (const QString error = specError(importSpec()); !error.isEmpty()) {
        return error;
    }
    // What reading the file found (no usable line, a CSV without a step column, ...), from the preview; a followed
    // log may have no usable line yet, which the preview shows without refusing.
    if (!previewError_.isEmpty() && !(mode_ == Mode::Follow && previewNotYet_)) {
        return previewError_;
    }
    if (const QString problem = budget_->thresholdProblem(); !problem.isEmpty()) {
        return problem;
    }
    QString problem;
    continuedRun(&problem);
    return problem;
}

QString ImportLogDialog::readyText() const
{
    const QString budget = budget_->calibrationId() == 0
        ? QString()
        : tr(" The Runs tab draws it beside the budget of calibration #%1 at step %2 (%3 nats/token).")
              .arg(budget_->calibrationId())
              .arg(budget_->step().value_or(0))
              .arg(budget_->threshold().value_or(0.0), 0, 'g', 4);
    if (mode_ == Mode::Follow) {
        QString problem;
        const std::int64_t continued = continuedRun(&problem);
        return tr("Ready: reads the log every %1 s as its trainer writes it and stores each new step into run \"%2\" "
                  "(kind external)%3, drawn live in the Runs tab; truncation and rotation are followed. It runs "
                  "alongside the job queue until you cancel it in the Jobs tab.")
                   .arg(poll_->value())
                   .arg(runName(),
                       continued != 0 ? tr(", continuing run %1 (its stored steps are kept)").arg(continued)
                                      : QString())
            + budget;
    }
    return tr("Ready: the log's steps become run \"%1\" (kind external) in one transaction; lines that cannot be used "
              "are skipped and reported.")
               .arg(runName())
        + budget;
}

QString ImportLogDialog::jobName() const
{
    return mode_ == Mode::Follow ? tr("Follow %1").arg(runName()) : tr("Import %1").arg(runName());
}

QString ImportLogDialog::cliCommand() const
{
    const QString command = specCommand(importSpec());
    if (mode_ == Mode::Import) {
        return command;
    }
    return command + QStringLiteral(" --follow --poll ") + QString::number(poll_->value());
}

JobWorker::Job ImportLogDialog::job() const
{
    const jobs::JobSpec spec = importSpec();
    if (mode_ == Mode::Import) {
        return specJob(spec);
    }
    io::FollowOptions options;
    options.import.map = spec.strings("map");
    options.name = spec.given("name") ? spec.text("name") : std::string();
    options.pollSeconds = poll_->value();
    io::LogSource source = io::LogSource::Verl;
    for (const io::LogSource candidate : io::logSources()) {
        if (io::toString(candidate) == source_->currentData().toString().toStdString()) {
            source = candidate;
        }
    }
    return [workspace = workspace_.toStdString(), source, file = spec.text("file"), options](
               Progress& progress) mutable {
        // SQLite connections stay on the thread that opened them: the job has its own.
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::CreateOrOpen);
        options.wait = [&progress](double seconds) {
            // In slices, so that Cancel in the Jobs tab stops the follow within a tenth of a second.
            QDeadlineTimer deadline(static_cast<qint64>(seconds * 1000.0));
            while (!progress.cancelled() && !deadline.hasExpired()) {
                QThread::msleep(50);
            }
        };
        io::followLog(store, source, file, options, progress);
    };
}

// ---- compare two runs ---------------------------------------------------------------------------------------

CompareRunsDialog::CompareRunsDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent)
    : QDialog(parent)
    , workspace_(workspaceDirectory)
    , store_(store)
{
    setWindowTitle(tr("Compare Two Runs (Failure Rule)"));
    setObjectName("compareRunsDialog");
    resize(680, 420);
    auto* layout = new QVBoxLayout(this);
    auto* form = new QFormLayout;
    run_ = new QComboBox(this);
    run_->setObjectName("compareRun");
    baseline_ = new QComboBox(this);
    baseline_->setObjectName("compareBaseline");
    if (store_) {
        try {
            for (const store::RunInfo& run : store_->listRuns()) {
                if (store::evaluations(*store_, run.id).empty()) {
                    continue; // the rule compares evaluations
                }
                const QString label = QStringLiteral("#%1 %2").arg(run.id).arg(QString::fromStdString(run.name));
                run_->addItem(label, QVariant::fromValue<qlonglong>(run.id));
                baseline_->addItem(label, QVariant::fromValue<qlonglong>(run.id));
            }
        } catch (const std::exception&) {
        }
    }
    form->addRow(tr("Run:"), run_);
    form->addRow(tr("Baseline (the BF16-engine run):"), baseline_);
    step_ = new QComboBox(this);
    step_->setObjectName("compareStep");
    form->addRow(tr("Evaluated step (both runs):"), step_);
    threshold_ = new QDoubleSpinBox(this);
    threshold_->setRange(0.001, 10.0);
    threshold_->setDecimals(3);
    threshold_->setValue(0.2);
    form->addRow(tr("Fails at a relative quality rise of:"), threshold_);
    confidence_ = new QDoubleSpinBox(this);
    confidence_->setRange(0.5, 0.999);
    confidence_->setDecimals(3);
    confidence_->setValue(0.95);
    form->addRow(tr("Interval confidence:"), confidence_);
    resamples_ = spinBox(this, 1, 10000000, 10000);
    form->addRow(tr("Bootstrap resamples:"), resamples_);
    layout->addLayout(form);
    result_ = new QLabel(this);
    result_->setObjectName("compareResult");
    result_->setWordWrap(true);
    result_->setTextFormat(Qt::RichText);
    result_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(result_, 1);
    layout->addWidget(new QLabel(tr("Headless equivalent:"), this));
    command_ = new QLabel(this);
    command_->setWordWrap(true);
    command_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    command_->setStyleSheet(QStringLiteral("font-family: monospace; background: #f4f4f4; padding: 4px"));
    layout->addWidget(command_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    auto* copy = buttons->addButton(tr("Copy CLI Command"), QDialogButtonBox::ActionRole);
    connect(copy, &QPushButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(cliCommand()); });
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
    if (baseline_->count() > 1) {
        run_->setCurrentIndex(run_->count() - 1);
        baseline_->setCurrentIndex(0);
    }
    connect(run_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { fillSteps(); });
    connect(baseline_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { fillSteps(); });
    connect(step_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] { compare(); });
    connect(threshold_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] { compare(); });
    connect(confidence_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] { compare(); });
    connect(resamples_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { compare(); });
    fillSteps();
}

bool CompareRunsDialog::setRuns(std::int64_t run, std::int64_t baseline)
{
    const int a = run_->findData(QVariant::fromValue<qlonglong>(run));
    const int b = baseline_->findData(QVariant::fromValue<qlonglong>(baseline));
    if (a < 0 || b < 0) {
        return false;
    }
    {
        const QSignalBlocker blockRun(run_);
        const QSignalBlocker blockBaseline(baseline_);
        run_->setCurrentIndex(a);
        baseline_->setCurrentIndex(b);
    }
    fillSteps();
    return true;
}

bool CompareRunsDialog::setStep(std::int64_t step)
{
    const int index = step_->findData(QVariant::fromValue<qlonglong>(step));
    if (index < 0) {
        return false;
    }
    step_->setCurrentIndex(index);
    compare();
    return true;
}

void CompareRunsDialog::setThreshold(double fraction)
{
    threshold_->setValue(fraction);
}

void CompareRunsDialog::fillSteps()
{
    const QSignalBlocker block(step_);
    step_->clear();
    if (store_ && run_->currentIndex() >= 0 && baseline_->currentIndex() >= 0) {
        try {
            std::set<std::int64_t> baseSteps;
            for (const auto& e : store::evaluations(*store_, baseline_->currentData().toLongLong())) {
                baseSteps.insert(e.step);
            }
            for (const auto& e : store::evaluations(*store_, run_->currentData().toLongLong())) {
                if (baseSteps.count(e.step)) {
                    step_->addItem(QString::number(e.step), QVariant::fromValue<qlonglong>(e.step));
                }
            }
        } catch (const std::exception&) {
        }
    }
    step_->setCurrentIndex(step_->count() - 1);
    compare();
}

void CompareRunsDialog::compare()
{
    verdict_.clear();
    command_->setText(cliCommand());
    if (run_->count() == 0) {
        result_->setText(tr("No run in this workspace has an evaluation: the failure rule compares the held-out "
                            "evaluations of two runs at one step."));
        return;
    }
    if (step_->currentIndex() < 0) {
        result_->setText(tr("<span style=\"color:#c62828\">Evaluated step: the two runs have no evaluated step in "
                            "common.</span>"));
        return;
    }
    try {
        const std::int64_t step = step_->currentData().toLongLong();
        const auto run = store::evaluationAt(*store_, run_->currentData().toLongLong(), step);
        const auto base = store::evaluationAt(*store_, baseline_->currentData().toLongLong(), step);
        if (!run || !base) {
            throw Error("an evaluation at step " + std::to_string(step) + " is missing");
        }
        metrics::FailureRuleOptions options;
        options.relativeThreshold = threshold_->value();
        options.bootstrap.confidence = confidence_->value();
        options.bootstrap.resamples = resamples_->value();
        const metrics::FailureVerdict v = analysis::compareEvaluations(*run, *base, options);
        verdict_ = QString::fromLatin1(metrics::verdictName(v.verdict));
        const bool undecided = v.verdict == metrics::Verdict::Undecided;
        result_->setText(tr("<p><b style=\"color:%1\">%2</b> at step %3 (%4 paired problems)</p>"
                            "<p>Q_run %5, Q_base %6 nats/token: relative change %7 [%14, %15] against the line %8 "
                            "(fail: the interval at or above it; pass: below; undecided: it contains it)<br>"
                            "paired interval of mean(q_run - q_base): %9 [%10, %11], %12% confidence (%13)</p>")
                             .arg(v.failed() ? QStringLiteral("#c62828")
                                     : undecided ? QStringLiteral("#ef8a17")
                                                 : QStringLiteral("#2e7d32"),
                                 v.failed() ? tr("FAIL") : undecided ? tr("UNDECIDED") : tr("pass"))
                             .arg(step)
                             .arg(run->problems.size())
                             .arg(v.qualityRun, 0, 'g', 6)
                             .arg(v.qualityBase, 0, 'g', 6)
                             .arg(QString::asprintf("%+.2f%%", 100.0 * v.relativeChange))
                             .arg(QString::asprintf("%+g%%", 100.0 * threshold_->value()))
                             .arg(v.difference.estimate, 0, 'g', 4)
                             .arg(v.difference.low, 0, 'g', 4)
                             .arg(v.difference.high, 0, 'g', 4)
                             .arg(confidence_->value() * 100.0, 0, 'g', 3)
                             .arg(v.difference.low > 0.0 ? tr("above zero") : tr("not above zero"))
                             .arg(QString::asprintf("%+.2f%%", 100.0 * v.change.low))
                             .arg(QString::asprintf("%+.2f%%", 100.0 * v.change.high)));
    } catch (const std::exception& error) {
        result_->setText(
            tr("<span style=\"color:#c62828\">%1</span>").arg(QString::fromUtf8(error.what()).toHtmlEscaped()));
    }
}

QString CompareRunsDialog::resultText() const
{
    return result_->text();
}

QString CompareRunsDialog::cliCommand() const
{
    if (run_->currentIndex() < 0 || baseline_->currentIndex() < 0 || step_->currentIndex() < 0) {
        return {};
    }
    return QStringLiteral(
        "mismatch --workspace %1 compare %2 %3 --step %4 --threshold %5 --confidence %6 --resamples %7")
        .arg(shellQuote(workspace_))
        .arg(run_->currentData().toLongLong())
        .arg(baseline_->currentData().toLongLong())
        .arg(step_->currentData().toLongLong())
        .arg(QString::number(threshold_->value(), 'g', 12), QString::number(confidence_->value(), 'g', 12))
        .arg(resamples_->value());
}

} // namespace mismatch::ui

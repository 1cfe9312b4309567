#include "ui/dialogs/analysis_dialogs.h"

#include "core/analysis/admission.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/calibration_presets.h"
#include "core/analysis/prefix_shift.h"
#include "core/common/error.h"
#include "core/quant/recipe.h"
#include "core/store/analysis_store.h"
#include "core/train/run_config.h"
#include "ui/dialogs/training_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QSpinBox>

#include <algorithm>

namespace mismatch::ui {

namespace {

QString absolute(const QString& path)
{
    return absolutePath(path);
}

} // namespace

// ---- calibration --------------------------------------------------------------------------------------------

CalibrationDialog::CalibrationDialog(const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, tr("Start Calibration"), QStringLiteral("calibrationDialog"), parent, store)
{
    setOpeningWidth(720);
    QFormLayout* form = this->form();
    runFile_ = addPicker(PickKind::RunFile, tr("Base run file:"), QStringLiteral("calibrationRunFileEdit"));
    runFile_->setToolTip(tr("the student's standard run file (YAML or JSON)"));
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("calibrate");
    name_ = addParameterField<QLineEdit>(job, "name", QStringLiteral("calibrationName"),
        FieldOptions().placeholder(tr("default: <run name>-calibration")));
    quick_ = addParameterField<QCheckBox>(job, "quick", QStringLiteral("calibrationQuickBox"));
    noise_ = new QLineEdit(commaList(analysis::defaultNoiseSigmas()), this);
    noise_->setObjectName("calibrationNoiseEdit");
    form->addRow(tr("Noise sigmas (relative to RMS):"), noise_);
    recipes_ = new QLineEdit(this);
    recipes_->setPlaceholderText(tr("recipe files, separated by ';'"));
    auto* recipeRow = new QHBoxLayout;
    recipeRow->addWidget(recipes_, 1);
    auto* addRecipe = new QComboBox(this);
    addRecipe->setObjectName("calibrationAddRecipe");
    addRecipe->addItem(tr("Add a recipe..."));
    for (const PickChoice& choice : pickChoices(PickKind::Recipe, store_, workspace_)) {
        addRecipe->addItem(choice.label, choice.path);
    }
    recipeRow->addWidget(addRecipe);
    connect(addRecipe, qOverload<int>(&QComboBox::activated), this, [this, addRecipe](int index) {
        if (index > 0) {
            const QString current = recipes_->text().trimmed();
            recipes_->setText(current.isEmpty()
                    ? addRecipe->itemData(index).toString()
                    : current + QStringLiteral("; ") + addRecipe->itemData(index).toString());
        }
        addRecipe->setCurrentIndex(0);
    });
    form->addRow(tr("Recipes in the sweep:"), recipeRow);
    staleness_ = new QLineEdit(this);
    staleness_->setPlaceholderText(tr("e.g. 1, 2"));
    form->addRow(tr("Staleness values in the sweep:"), staleness_);
    steps_ = new QLineEdit(this);
    steps_->setPlaceholderText(tr("default: half-way and the last step"));
    form->addRow(tr("Failure rule at steps:"), steps_);
    margin_ = addParameterField<QDoubleSpinBox>(
        job, "margin", QStringLiteral("calibrationMargin"), FieldOptions().decimals(2, 0.05));
    replicates_ = addParameterField<QSpinBox>(job, "replicates", QStringLiteral("calibrationReplicates"));
    // The command's own maximum is 4, or the starting seeds when more (the parameter has no default): the field
    // starts at 4, and spec() gives it only when it is something else.
    maxReplicates_ = addParameterField<QSpinBox>(job, "max_replicates", QStringLiteral("calibrationMaxReplicates"),
        FieldOptions().start(analysis::CalibrationOptions {}.maxReplicates));
    // The maximum is never below the starting seeds.
    connect(replicates_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int seeds) {
        maxReplicates_->setMinimum(seeds);
    });
    for (QLineEdit* edit : {noise_, recipes_, staleness_, steps_})
        watch(edit);
    addDeviceField(true);
    finishLayout(QStringLiteral("calibrationStatus"), QStringLiteral("calibrationCli"),
        QStringLiteral("startCalibrationButton"));
}

void CalibrationDialog::setRunFile(const QString& path)
{
    runFile_->setPath(path);
}
void CalibrationDialog::setQuick(bool quick)
{
    quick_->setChecked(quick);
}
void CalibrationDialog::setNoise(const QString& sigmas)
{
    noise_->setText(sigmas);
}
void CalibrationDialog::setRecipes(const QString& paths)
{
    recipes_->setText(paths);
}
void CalibrationDialog::setStaleness(const QString& values)
{
    staleness_->setText(values);
}
void CalibrationDialog::setSteps(const QString& steps)
{
    steps_->setText(steps);
}
void CalibrationDialog::setMargin(double margin)
{
    margin_->setValue(margin);
}
void CalibrationDialog::setReplicates(int seeds)
{
    replicates_->setValue(seeds);
}
void CalibrationDialog::setMaxReplicates(int seeds)
{
    maxReplicates_->setValue(seeds);
}
void CalibrationDialog::setName(const QString& name)
{
    name_->setText(name);
}
QString CalibrationDialog::runFile() const
{
    return runFile_->path();
}

QString CalibrationDialog::check() const
{
    // What the spec cannot say: a field whose text is not a list, a file that is not there or does not load.
    const QString run = runFile();
    if (run.isEmpty() || !QFileInfo(run).isFile()) {
        return tr("Base run file: expected a run file (YAML) of the student's standard run (got '%1')").arg(run);
    }
    QString error;
    if (!parseNumberList(noise_->text(), &error)) {
        return tr("Noise sigmas: %1; expected numbers above 0 separated by commas").arg(error);
    }
    if (!parseIntegerList(staleness_->text(), &error)) {
        return tr("Staleness values: %1; expected whole numbers of at least 1 separated by commas").arg(error);
    }
    if (!parseIntegerList(steps_->text(), &error)) {
        return tr("Failure rule at steps: %1; expected training steps separated by commas").arg(error);
    }
    for (const QString& recipe : splitPaths(recipes_->text())) {
        if (const QString failure = loadError(tr("Recipe"), [&] { quant::loadRecipe(recipe.toStdString()); });
            !failure.isEmpty()) {
            return failure;
        }
    }
    // Ranges and the checks across fields (the run file's objective and evaluation set, rule steps the run
    // evaluates): the catalogue's, named by field label.
    return specError(*spec());
}

QString CalibrationDialog::readyText() const
{
    const int entries = static_cast<int>(parseNumberList(noise_->text(), nullptr).value_or(std::vector<double> {}).size()
        + splitPaths(recipes_->text()).size()
        + parseIntegerList(staleness_->text(), nullptr).value_or(std::vector<std::int64_t> {}).size());
    const int configurations = 1 + (entries == 0 ? static_cast<int>(analysis::defaultNoiseSigmas().size()) : entries);
    const int seeds = replicates_->value();
    const int most = maxReplicates_->value();
    return tr("Ready: %1 training runs one after the other (the BF16-engine baseline and %2 sweep configuration(s), "
              "%3 seed(s) each, and %3 more of the baseline for the null comparison)%4; runs appear in the Runs tab as "
              "they train and the budget in the Budget tab at the end.")
        .arg((configurations + 1) * seeds)
        .arg(configurations - 1)
        .arg(seeds)
        .arg(most > seeds ? tr(", then more seeds for undecided points, up to %1 each (%2 runs at most)")
                                .arg(most)
                                .arg((configurations + 1) * most)
                          : QString());
}

QString CalibrationDialog::jobName() const
{
    return tr("Calibration of %1%2").arg(QFileInfo(runFile()).completeBaseName(), quick_->isChecked() ? tr(" (quick)") : QString());
}

QString CalibrationDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> CalibrationDialog::spec() const
{
    jobs::JobSpec spec("calibrate");
    // Absolute paths, so that the stored inputs are the same whichever front-end ran it.
    spec.set("run_file", absolute(runFile()).toStdString());
    setParameters(spec, {"name", "quick"});
    spec.set("noise", parseNumberList(noise_->text(), nullptr).value_or(std::vector<double> {}));
    nlohmann::json recipes = nlohmann::json::array();
    for (const QString& recipe : splitPaths(recipes_->text())) {
        recipes.push_back(absolute(recipe).toStdString());
    }
    spec.set("recipes", recipes);
    spec.set("staleness", parseIntegerList(staleness_->text(), nullptr).value_or(std::vector<std::int64_t> {}));
    spec.set("rule_steps", parseIntegerList(steps_->text(), nullptr).value_or(std::vector<std::int64_t> {}));
    setParameters(spec, {"margin", "replicates"});
    // Given only when it is not what the command would choose anyway (the default, or the starting seeds above it).
    if (maxReplicates_->value()
        != std::max(replicates_->value(), static_cast<int>(analysis::CalibrationOptions {}.maxReplicates))) {
        setParameters(spec, {"max_replicates"});
    }
    setDevice(spec);
    return spec;
}

JobWorker::Job CalibrationDialog::job() const
{
    return specJob(*spec());
}

// ---- admission check ----------------------------------------------------------------------------------------

AdmissionDialog::AdmissionDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent)
    : JobDialog(workspaceDirectory, tr("Start Admission Check"), QStringLiteral("admissionDialog"), parent, store)
{
    setOpeningWidth(760);
    QFormLayout* form = this->form();
    checkpoints_
        = addPicker(PickKind::ModelDirectory, tr("Student checkpoint(s):"), QStringLiteral("admissionCheckpointsEdit"));
    checkpoints_->setToolTip(tr("model directories in training order; type several separated by ';'"));
    history_ = new QLineEdit(this);
    history_->setPlaceholderText(tr("older checkpoints, oldest first, for candidates with staleness (optional)"));
    form->addRow(tr("Older checkpoints:"), history_);
    candidates_ = addPicker(PickKind::Candidates, tr("Candidates file:"), QStringLiteral("admissionCandidatesEdit"));
    candidates_->setToolTip(tr("YAML list of {name, recipe, staleness, noise, noise_seed}"));
    // Or one recipe as the only candidate (a recipe just built or edited), as `admit --recipe` takes it.
    recipe_ = addPicker(PickKind::Recipe, tr("... or one recipe:"), QStringLiteral("admissionRecipeEdit"));
    recipe_->setPath(QString());
    recipe_->setToolTip(tr("screen this recipe as the only candidate instead of the candidates file"));
    connect(recipe_, &PathPicker::pathChanged, this,
        [this](const QString& path) { candidates_->setEnabled(path.trimmed().isEmpty()); });
    probe_ = addPicker(PickKind::PromptSet, tr("Probe prompt set (JSONL):"), QStringLiteral("admissionProbeEdit"));
    calibration_ = new CalibrationPicker(store_, true, this);
    calibration_->setObjectName("admissionCalibration");
    form->addRow(tr("Threshold from:"), calibration_);
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("admit");
    // The parameters have no default (unset: the calibration's protocol; without a calibration the command takes
    // every prompt and 64 tokens). The fields start at 64 prompts of 64 tokens, so that a screen from the GUI is
    // quick; under a calibration's protocol they show the protocol's.
    count_ = addParameterField<QSpinBox>(
        job, "count", QStringLiteral("admissionCount"), FieldOptions().start(64).special(tr("all")));
    maxTokens_ = addParameterField<QSpinBox>(
        job, "max_tokens", QStringLiteral("admissionMaxTokens"), FieldOptions().start(64));
    // Checked: the probe set, count and tokens here although the calibration's protocol differs.
    otherProtocol_
        = addParameterField<QCheckBox>(job, "allow_protocol_mismatch", QStringLiteral("admissionOtherProtocol"));
    connect(otherProtocol_, &QCheckBox::toggled, this, [this] { updateProtocolFields(); });
    connect(calibration_, &CalibrationPicker::changed, this, [this] { updateProtocolFields(); });
    storedGenerations_ = addParameterField<QSpinBox>(
        job, "store_generations", QStringLiteral("admissionStoredGenerations"), FieldOptions().special(tr("none")));
    watch(history_);
    watch(calibration_);
    addDeviceField();
    finishLayout(QStringLiteral("admissionStatus"), QStringLiteral("admissionCli"),
        QStringLiteral("startAdmissionButton"));
    updateProtocolFields();
}

std::optional<analysis::MeasurementProtocol> AdmissionDialog::calibrationProtocol() const
{
    const std::int64_t id = calibration_->calibrationId();
    if (id == 0 || store_ == nullptr) {
        return std::nullopt;
    }
    try {
        const auto calibration = store::calibration(*store_, id);
        return calibration ? analysis::storedProtocol(calibration->info.configJson, store_->path())
                           : std::nullopt;
    } catch (const std::exception&) {
        return std::nullopt; // an unreadable protocol: screened as "no protocol", which check() explains
    }
}

bool AdmissionDialog::underCalibrationProtocol() const
{
    return calibration_->calibrationId() != 0 && !otherProtocol_->isChecked();
}

// Under the calibration's protocol the probe set, count and tokens are the protocol's: shown, not editable.
void AdmissionDialog::updateProtocolFields()
{
    const bool own = underCalibrationProtocol();
    if (own) {
        if (const auto protocol = calibrationProtocol()) {
            probe_->setPath(QString::fromStdString(protocol->prompts));
            count_->setValue(static_cast<int>(protocol->count));
            maxTokens_->setValue(static_cast<int>(protocol->maxTokens));
        }
    }
    otherProtocol_->setEnabled(calibration_->calibrationId() != 0);
    for (QWidget* field : std::initializer_list<QWidget*> {probe_, count_, maxTokens_}) {
        field->setEnabled(!own);
    }
}
void AdmissionDialog::setOtherProtocol(bool other)
{
    otherProtocol_->setChecked(other);
}
void AdmissionDialog::setStoredGenerations(int generations)
{
    storedGenerations_->setValue(generations);
}

void AdmissionDialog::setCheckpoints(const QString& directories)
{
    checkpoints_->setPath(directories);
}
void AdmissionDialog::setHistory(const QString& directories)
{
    history_->setText(directories);
}
void AdmissionDialog::setCandidates(const QString& path)
{
    candidates_->setPath(path);
}

void AdmissionDialog::setRecipe(const QString& path)
{
    recipe_->setPath(path);
    candidates_->setEnabled(path.trimmed().isEmpty());
}

QString AdmissionDialog::recipe() const
{
    return recipe_->path().trimmed();
}
void AdmissionDialog::setProbeSet(const QString& path)
{
    probe_->setPath(path);
}
bool AdmissionDialog::setCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step)
{
    return calibration_->select(calibrationId, step);
}
void AdmissionDialog::setThreshold(double threshold)
{
    calibration_->select(0);
    calibration_->setExplicitThreshold(threshold);
}
void AdmissionDialog::setCount(int prompts)
{
    count_->setValue(prompts);
}
void AdmissionDialog::setMaxTokens(int tokens)
{
    maxTokens_->setValue(tokens);
}
QString AdmissionDialog::checkpoints() const
{
    return checkpoints_->path();
}
QString AdmissionDialog::candidates() const
{
    return candidates_->path();
}
QString AdmissionDialog::probeSet() const
{
    return probe_->path();
}

std::vector<std::pair<std::string, std::string>> AdmissionDialog::fieldNames() const
{
    return {{"--calibration ID or --threshold X", "a calibration or an explicit threshold"},
        {"--history DIR, oldest first", "Older checkpoints, oldest first"}, {"--calibration", "Threshold from"},
        {"--threshold", "Explicit threshold"}, {"--history", "Older checkpoints"}, {"--step", "Calibration step"},
        {"STUDENT", "Student checkpoint(s)"}};
}

QString AdmissionDialog::check() const
{
    const QStringList students = splitPaths(checkpoints());
    if (students.isEmpty()) {
        return tr("Student checkpoint(s): expected at least one model directory");
    }
    for (const QStringList& group : {students, splitPaths(history_->text())}) {
        for (const QString& directory : group) {
            if (!isModelDirectory(directory)) {
                return tr("Checkpoint '%1': expected a folder holding config.json and the checkpoint").arg(directory);
            }
        }
    }
    if (!recipe().isEmpty()) {
        if (!QFileInfo(recipe()).isFile()) {
            return tr("... or one recipe: expected a recipe file (got '%1')").arg(recipe());
        }
    } else {
        if (candidates().isEmpty() || !QFileInfo(candidates()).isFile()) {
            return tr("Candidates file: expected a YAML list of candidates, or choose one recipe (got '%1')")
                .arg(candidates());
        }
        if (const QString error
            = loadError(tr("Candidates file"), [&] { analysis::loadCandidates(candidates().toStdString()); });
            !error.isEmpty()) {
            return error;
        }
    }
    if (underCalibrationProtocol() && !calibrationProtocol()) {
        return tr("Threshold from: calibration #%1 stores no measurement protocol (made before protocols were "
                  "recorded), so a screen cannot be measured on its scale; tick \"%2\" to compare anyway, labelled")
            .arg(calibration_->calibrationId())
            .arg(QString::fromStdString(jobParameter(catalogueJob("admit"), "allow_protocol_mismatch").label));
    }
    if (probeSet().isEmpty() || !QFileInfo(probeSet()).isFile()) {
        return tr("Probe prompt set: expected a JSON Lines file (got '%1')").arg(probeSet());
    }
    if (const std::int64_t id = calibration_->calibrationId(); id != 0) {
        if (calibration_->stepCount() == 0) {
            return tr("Threshold from: calibration #%1 has no budget bracket; choose another calibration or an "
                      "explicit threshold")
                .arg(id);
        }
        if (!calibration_->threshold()) {
            return tr("Calibration step: calibration #%1 has no passing run at step %2, so it gives no threshold "
                      "there; choose another step")
                .arg(id)
                .arg(calibration_->step().value_or(0));
        }
    }
    return specError(*spec());
}

QString AdmissionDialog::readyText() const
{
    return calibration_->calibrationId() == 0
        ? tr("Ready: each candidate against %1 nats/token; decisions are stored as they are made.")
              .arg(calibration_->explicitThreshold(), 0, 'g', 6)
        : tr("Ready: each candidate against %1 nats/token, the threshold of %2 at step %3; decisions are stored as "
             "they are made.")
              .arg(calibration_->threshold().value_or(0.0), 0, 'g', 4)
              .arg(calibration_->calibrationBox()->currentText())
              .arg(calibration_->step().value_or(0));
}

QString AdmissionDialog::jobName() const
{
    return tr("Admission check of %1").arg(QFileInfo(candidates()).completeBaseName());
}

QString AdmissionDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> AdmissionDialog::spec() const
{
    const auto absoluteList = [](const QString& text) {
        nlohmann::json paths = nlohmann::json::array();
        for (const QString& path : splitPaths(text)) {
            paths.push_back(absolute(path).toStdString());
        }
        return paths;
    };
    jobs::JobSpec spec("admit");
    // Absolute paths, so that the stored inputs are the same whichever front-end ran it.
    spec.set("students", absoluteList(checkpoints()));
    spec.set("history", absoluteList(history_->text()));
    if (recipe().isEmpty()) {
        spec.set("candidates", absolute(candidates()).toStdString());
    } else {
        spec.set("recipe", absolute(recipe()).toStdString());
    }
    if (const std::int64_t calibration = calibration_->calibrationId(); calibration != 0) {
        spec.set("calibration", calibration);
        if (const auto step = calibration_->step()) {
            spec.set("step", nlohmann::json::array({*step}));
        }
    } else {
        spec.set("threshold", calibration_->explicitThreshold());
    }
    // Under the calibration's protocol the probe set, count and sampling are the protocol's (nothing given);
    // otherwise the fields here, allowed and labelled when a calibration is chosen.
    if (!underCalibrationProtocol()) {
        spec.set("prompts", absolute(probeSet()).toStdString());
        setParameters(spec, {"count", "max_tokens"});
        if (calibration_->calibrationId() != 0) {
            setParameters(spec, {"allow_protocol_mismatch"}); // checked: this is another protocol
        }
    }
    // Given only when changed: the command line then stays the plain one for the default.
    setParameters(spec, {"store_generations"});
    setDevice(spec);
    return spec;
}

JobWorker::Job AdmissionDialog::job() const
{
    return specJob(*spec());
}

// ---- prefix shift -------------------------------------------------------------------------------------------

PrefixShiftDialog::PrefixShiftDialog(const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(
        workspaceDirectory, tr("Start Prefix-Shift Analysis"), QStringLiteral("prefixShiftDialog"), parent, store)
{
    setOpeningWidth(700);
    model_ = addPicker(PickKind::ModelDirectory, tr("Model directory:"), QStringLiteral("prefixModelEdit"));
    recipe_ = addPicker(PickKind::Recipe, tr("Recipe:"), QStringLiteral("prefixRecipeEdit"));
    recipe_->setToolTip(tr("the configuration's recipe file (empty: the BF16 engine)"));
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("prefix_shift");
    noise_ = addParameterField<QDoubleSpinBox>(
        job, "noise", QStringLiteral("prefixNoise"), FieldOptions().decimals(4, 0.01));
    noiseSeed_ = addParameterField<QSpinBox>(job, "noise_seed", QStringLiteral("prefixNoiseSeed"));
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("prefixPromptsEdit"));
    // The analysis from the GUI starts at 64 prompts, where the job's default (the CLI's) is every prompt, so that it
    // is quick; the spec then gives the count.
    count_ = addParameterField<QSpinBox>(
        job, "count", QStringLiteral("prefixCount"), FieldOptions().start(64).special(tr("all")));
    maxTokens_ = addParameterField<QSpinBox>(job, "max_tokens", QStringLiteral("prefixMaxTokens"));
    cap_ = addParameterField<QDoubleSpinBox>(job, "cap", QStringLiteral("prefixCap"), FieldOptions().decimals(2, 0.5));
    storedPairs_ = addParameterField<QSpinBox>(job, "store_pairs", QStringLiteral("prefixStoredPairs"));
    addDeviceField();
    finishLayout(QStringLiteral("prefixStatus"), QStringLiteral("prefixCli"), QStringLiteral("startPrefixButton"));
}

void PrefixShiftDialog::setModelDirectory(const QString& directory)
{
    model_->setPath(directory);
}
void PrefixShiftDialog::setRecipe(const QString& path)
{
    recipe_->setPath(path);
}
void PrefixShiftDialog::setNoise(double sigma, int seed)
{
    noise_->setValue(sigma);
    noiseSeed_->setValue(seed);
}
void PrefixShiftDialog::setPromptSet(const QString& path)
{
    prompts_->setPath(path);
}
void PrefixShiftDialog::setCount(int prompts)
{
    count_->setValue(prompts);
}
void PrefixShiftDialog::setMaxTokens(int tokens)
{
    maxTokens_->setValue(tokens);
}
void PrefixShiftDialog::setCap(double cap)
{
    cap_->setValue(cap);
}
void PrefixShiftDialog::setStoredPairs(int pairs)
{
    storedPairs_->setValue(pairs);
}
QString PrefixShiftDialog::modelDirectory() const
{
    return model_->path();
}
QString PrefixShiftDialog::recipe() const
{
    return recipe_->path();
}
QString PrefixShiftDialog::promptSet() const
{
    return prompts_->path();
}

QString PrefixShiftDialog::check() const
{
    if (!isModelDirectory(modelDirectory())) {
        return tr("Model directory: expected a folder holding config.json and the checkpoint (got '%1')")
            .arg(modelDirectory());
    }
    const QString recipe = this->recipe();
    if (!recipe.isEmpty()) {
        if (const QString error = loadError(tr("Recipe"), [&] { quant::loadRecipe(recipe.toStdString()); });
            !error.isEmpty()) {
            return error;
        }
    }
    if (promptSet().isEmpty() || !QFileInfo(promptSet()).isFile()) {
        return tr("Prompt set: expected a JSON Lines file (got '%1')").arg(promptSet());
    }
    return specError(*spec());
}

QString PrefixShiftDialog::readyText() const
{
    return recipe().isEmpty() && noise_->value() == 0.0
        ? tr("Ready, but this configuration is the BF16 engine itself: its prefix shift is zero by construction.")
        : tr("Ready: generations of the configuration and of the BF16 engine on the same prompts and seeds.");
}

QString PrefixShiftDialog::jobName() const
{
    const QString recipe = this->recipe();
    return tr("Prefix shift of %1").arg(recipe.isEmpty() ? tr("BF16 + noise %1").arg(noise_->value())
                                                         : QFileInfo(recipe).completeBaseName());
}

QString PrefixShiftDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> PrefixShiftDialog::spec() const
{
    jobs::JobSpec spec("prefix_shift");
    spec.set("model", absolute(modelDirectory()).toStdString());
    if (!recipe().isEmpty()) {
        spec.set("recipe", absolute(recipe()).toStdString());
    }
    setParameters(spec, {"noise"});
    if (noise_->value() > 0.0) {
        setParameters(spec, {"noise_seed"});
    }
    spec.set("prompts", absolute(promptSet()).toStdString());
    setParameters(spec, {"cap", "store_pairs", "count", "max_tokens"});
    setDevice(spec);
    return spec;
}

JobWorker::Job PrefixShiftDialog::job() const
{
    return specJob(*spec());
}

} // namespace mismatch::ui

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

QSpinBox* countBox(QWidget* parent, int value)
{
    return spinBox(parent, 0, 1000000, value, QObject::tr("all"));
}

QSpinBox* tokensBox(QWidget* parent, int value)
{
    return spinBox(parent, 1, 100000, value);
}

} // namespace

// ---- calibration --------------------------------------------------------------------------------------------

CalibrationDialog::CalibrationDialog(const QString& workspaceDirectory, QWidget* parent, const store::RunStore* store)
    : JobDialog(workspaceDirectory, tr("Start Calibration"), QStringLiteral("calibrationDialog"), parent, store)
{
    resize(720, 440);
    QFormLayout* form = this->form();
    runFile_ = addPicker(PickKind::RunFile, tr("Base run file:"), QStringLiteral("calibrationRunFileEdit"));
    runFile_->setToolTip(tr("the student's standard run file (YAML or JSON)"));
    name_ = new QLineEdit(this);
    name_->setPlaceholderText(tr("default: <run name>-calibration"));
    form->addRow(tr("Calibration name:"), name_);
    quick_ = new QCheckBox(
        tr("Quick: at most 40 steps of at most 16 prompts, evaluated half-way and at the end on at most 128 problems"),
        this);
    quick_->setObjectName("calibrationQuickBox");
    form->addRow(QString(), quick_);
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
    margin_ = new QDoubleSpinBox(this);
    margin_->setRange(0.0, 0.99);
    margin_->setSingleStep(0.05);
    margin_->setDecimals(2);
    form->addRow(tr("Threshold margin (threshold = largest passing x (1 - margin)):"), margin_);
    replicates_ = new QSpinBox(this);
    replicates_->setObjectName("calibrationReplicates");
    replicates_->setRange(1, 16);
    replicates_->setValue(static_cast<int>(analysis::CalibrationOptions {}.replicates));
    replicates_->setToolTip(tr("training seeds per configuration; the null comparison trains the baseline with as "
                               "many more, and the failure rule's interval covers seed variance"));
    form->addRow(tr("Seeds per configuration:"), replicates_);
    watch(replicates_);
    maxReplicates_ = new QSpinBox(this);
    maxReplicates_->setObjectName("calibrationMaxReplicates");
    maxReplicates_->setRange(1, 16);
    maxReplicates_->setValue(static_cast<int>(analysis::CalibrationOptions {}.maxReplicates));
    maxReplicates_->setToolTip(tr("after each round, every configuration with an undecided point gets one more seed "
                                  "(the baseline and the null group too) until none is undecided or they have this "
                                  "many; equal to the seeds per configuration: no seeds are added"));
    form->addRow(tr("Most seeds for undecided points:"), maxReplicates_);
    watch(maxReplicates_);
    // The maximum is never below the starting seeds.
    connect(replicates_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int seeds) {
        maxReplicates_->setMinimum(seeds);
    });
    for (QLineEdit* edit : {name_, noise_, recipes_, staleness_, steps_})
        watch(edit);
    watch(quick_);
    watch(margin_);
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
    if (!name_->text().trimmed().isEmpty()) {
        spec.set("name", name_->text().trimmed().toStdString());
    }
    spec.set("quick", quick_->isChecked());
    spec.set("noise", parseNumberList(noise_->text(), nullptr).value_or(std::vector<double> {}));
    nlohmann::json recipes = nlohmann::json::array();
    for (const QString& recipe : splitPaths(recipes_->text())) {
        recipes.push_back(absolute(recipe).toStdString());
    }
    spec.set("recipes", recipes);
    spec.set("staleness", parseIntegerList(staleness_->text(), nullptr).value_or(std::vector<std::int64_t> {}));
    spec.set("rule_steps", parseIntegerList(steps_->text(), nullptr).value_or(std::vector<std::int64_t> {}));
    spec.set("margin", margin_->value());
    spec.set("replicates", replicates_->value());
    // Given only when it is not what the command would choose anyway (the default, or the starting seeds above it).
    if (maxReplicates_->value()
        != std::max(replicates_->value(), static_cast<int>(analysis::CalibrationOptions {}.maxReplicates))) {
        spec.set("max_replicates", maxReplicates_->value());
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
    resize(760, 460);
    QFormLayout* form = this->form();
    checkpoints_
        = addPicker(PickKind::ModelDirectory, tr("Student checkpoint(s):"), QStringLiteral("admissionCheckpointsEdit"));
    checkpoints_->setToolTip(tr("model directories in training order; type several separated by ';'"));
    history_ = new QLineEdit(this);
    history_->setPlaceholderText(tr("older checkpoints, oldest first, for candidates with staleness (optional)"));
    form->addRow(tr("Older checkpoints:"), history_);
    candidates_ = addPicker(PickKind::Candidates, tr("Candidates file:"), QStringLiteral("admissionCandidatesEdit"));
    candidates_->setToolTip(tr("YAML list of {name, recipe, staleness, noise, noise_seed}"));
    probe_ = addPicker(PickKind::PromptSet, tr("Probe prompt set (JSONL):"), QStringLiteral("admissionProbeEdit"));
    calibration_ = new CalibrationPicker(store_, true, this);
    calibration_->setObjectName("admissionCalibration");
    form->addRow(tr("Threshold from:"), calibration_);
    count_ = countBox(this, 64);
    form->addRow(tr("Probe prompts (first N):"), count_);
    maxTokens_ = tokensBox(this, 64);
    form->addRow(tr("Generated tokens per prompt:"), maxTokens_);
    otherProtocol_ = new QCheckBox(tr("Screen with this probe set, count and tokens although the calibration's "
                                      "protocol differs (decisions labelled \"other protocol\")"),
        this);
    otherProtocol_->setObjectName("admissionOtherProtocol");
    form->addRow(QString(), otherProtocol_);
    connect(otherProtocol_, &QCheckBox::toggled, this, [this] { updateProtocolFields(); });
    connect(calibration_, &CalibrationPicker::changed, this, [this] { updateProtocolFields(); });
    // The catalogue's parameter gives the default, range and tooltip, so the field says what --store-generations
    // says.
    const jobs::Parameter& stored = *jobs::findJob("admit")->parameter("store_generations");
    storedGenerations_
        = spinBox(this, static_cast<int>(stored.low.value_or(0)), 100000, stored.defaultValue.get<int>(), tr("none"));
    storedGenerations_->setObjectName("admissionStoredGenerations");
    storedGenerations_->setToolTip(QString::fromStdString(stored.help));
    form->addRow(tr("%1:").arg(QString::fromStdString(stored.label)), storedGenerations_);
    watch(otherProtocol_);
    watch(history_);
    watch(calibration_);
    for (QSpinBox* box : {count_, maxTokens_, storedGenerations_})
        watch(box);
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
    if (candidates().isEmpty() || !QFileInfo(candidates()).isFile()) {
        return tr("Candidates file: expected a YAML list of candidates (got '%1')").arg(candidates());
    }
    if (const QString error = loadError(tr("Candidates file"), [&] { analysis::loadCandidates(candidates().toStdString()); });
        !error.isEmpty()) {
        return error;
    }
    if (underCalibrationProtocol() && !calibrationProtocol()) {
        return tr("Threshold from: calibration #%1 stores no measurement protocol (made before protocols were "
                  "recorded), so a screen cannot be measured on its scale; tick \"Screen with this probe set\" to "
                  "compare anyway, labelled")
            .arg(calibration_->calibrationId());
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
    spec.set("candidates", absolute(candidates()).toStdString());
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
        spec.set("count", count_->value());
        spec.set("max_tokens", maxTokens_->value());
        if (calibration_->calibrationId() != 0) {
            spec.set("allow_protocol_mismatch", true);
        }
    }
    // Given only when changed: the command line then stays the plain one for the default.
    if (storedGenerations_->value() != spec.definition().parameter("store_generations")->defaultValue.get<int>()) {
        spec.set("store_generations", storedGenerations_->value());
    }
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
    resize(700, 440);
    QFormLayout* form = this->form();
    model_ = addPicker(PickKind::ModelDirectory, tr("Model directory:"), QStringLiteral("prefixModelEdit"));
    recipe_ = addPicker(PickKind::Recipe, tr("Recipe:"), QStringLiteral("prefixRecipeEdit"));
    recipe_->setToolTip(tr("the configuration's recipe file (empty: the BF16 engine)"));
    noise_ = new QDoubleSpinBox(this);
    noise_->setDecimals(4);
    noise_->setRange(0.0, 10.0);
    noise_->setSingleStep(0.01);
    form->addRow(tr("Weight noise sigma (relative to RMS):"), noise_);
    noiseSeed_ = new QSpinBox(this);
    noiseSeed_->setRange(0, 1000000000);
    form->addRow(tr("Noise seed:"), noiseSeed_);
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("prefixPromptsEdit"));
    count_ = countBox(this, 64);
    form->addRow(tr("Prompts (first N):"), count_);
    maxTokens_ = tokensBox(this, 64);
    form->addRow(tr("Generated tokens per prompt:"), maxTokens_);
    cap_ = new QDoubleSpinBox(this);
    cap_->setRange(1.0, 1000.0);
    cap_->setValue(2.0);
    form->addRow(tr("TIS / MIS cap C:"), cap_);
    storedPairs_ = new QSpinBox(this);
    storedPairs_->setRange(0, 100000);
    storedPairs_->setValue(16);
    form->addRow(tr("Pairs stored token by token (for the viewer):"), storedPairs_);
    for (QDoubleSpinBox* box : {noise_, cap_})
        watch(box);
    for (QSpinBox* box : {noiseSeed_, count_, maxTokens_, storedPairs_})
        watch(box);
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
    spec.set("noise", noise_->value());
    if (noise_->value() > 0.0) {
        spec.set("noise_seed", noiseSeed_->value());
    }
    spec.set("prompts", absolute(promptSet()).toStdString());
    spec.set("cap", cap_->value());
    spec.set("store_pairs", storedPairs_->value());
    spec.set("count", count_->value());
    spec.set("max_tokens", maxTokens_->value());
    setDevice(spec);
    return spec;
}

JobWorker::Job PrefixShiftDialog::job() const
{
    return specJob(*spec());
}

} // namespace mismatch::ui

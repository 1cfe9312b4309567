#include "ui/dialogs/breakdown_dialog.h"

#include "core/analysis/admission.h"
#include "core/jobs/analysis_jobs.h"
#include "core/quant/recipe.h"
#include "ui/dialogs/training_dialog.h"

#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QLineEdit>
#include <QSpinBox>

namespace mismatch::ui {

BreakdownDialog::BreakdownDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent)
    : JobDialog(workspaceDirectory, tr("Start Mismatch Breakdown"), QStringLiteral("breakdownDialog"), parent, store)
{
    setOpeningWidth(720);
    QFormLayout* form = this->form();
    model_ = addPicker(PickKind::ModelDirectory, tr("Student checkpoint:"), QStringLiteral("breakdownModelEdit"));
    candidates_ = addPicker(PickKind::Candidates, tr("Candidates file:"), QStringLiteral("breakdownCandidatesEdit"));
    candidates_->setToolTip(tr("a YAML list of candidates, as for the admission check (empty: the one configuration "
                               "below)"));
    recipe_ = addPicker(PickKind::Recipe, tr("Recipe (one configuration):"), QStringLiteral("breakdownRecipeEdit"));
    recipe_->setToolTip(tr("the configuration's recipe file (empty: BF16 weights, activations and KV cache)"));
    // The plain fields are the catalogue's: its labels, help texts and ranges.
    const jobs::JobDefinition& job = catalogueJob("breakdown");
    staleness_ = addParameterField<QSpinBox>(job, "staleness", QStringLiteral("breakdownStaleness"));
    history_ = new QLineEdit(this);
    history_->setObjectName("breakdownHistory");
    history_->setPlaceholderText(tr("older checkpoints, oldest first, separated by ';' (for staleness)"));
    form->addRow(tr("Older checkpoints:"), history_);
    watch(history_);
    noise_ = addParameterField<QDoubleSpinBox>(
        job, "noise", QStringLiteral("breakdownNoise"), FieldOptions().decimals(4, 0.01));
    noiseSeed_ = addParameterField<QSpinBox>(job, "noise_seed", QStringLiteral("breakdownNoiseSeed"));
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("breakdownPromptsEdit"));
    // A breakdown from the GUI starts at 64 prompts, where the job's default (the CLI's) is every prompt, so that it
    // is quick; the spec then gives the count.
    count_ = addParameterField<QSpinBox>(
        job, "count", QStringLiteral("breakdownCount"), FieldOptions().start(64).special(tr("all")));
    maxTokens_ = addParameterField<QSpinBox>(job, "max_tokens", QStringLiteral("breakdownMaxTokens"));
    shapleyMax_ = addParameterField<QSpinBox>(job, "shapley_max", QStringLiteral("breakdownShapleyMax"));
    addDeviceField();
    finishLayout(
        QStringLiteral("breakdownStatus"), QStringLiteral("breakdownCli"), QStringLiteral("startBreakdownButton"));
}

void BreakdownDialog::setModelDirectory(const QString& directory)
{
    model_->setPath(directory);
}
void BreakdownDialog::setCandidates(const QString& path)
{
    candidates_->setPath(path);
}
void BreakdownDialog::setRecipe(const QString& path)
{
    recipe_->setPath(path);
}
void BreakdownDialog::setStaleness(int steps, const QString& history)
{
    staleness_->setValue(steps);
    history_->setText(history);
}
void BreakdownDialog::setNoise(double sigma, int seed)
{
    noise_->setValue(sigma);
    noiseSeed_->setValue(seed);
}
void BreakdownDialog::setPromptSet(const QString& path)
{
    prompts_->setPath(path);
}
void BreakdownDialog::setCount(int prompts)
{
    count_->setValue(prompts);
}
void BreakdownDialog::setMaxTokens(int tokens)
{
    maxTokens_->setValue(tokens);
}
void BreakdownDialog::setShapleyMax(int sources)
{
    shapleyMax_->setValue(sources);
}
QString BreakdownDialog::modelDirectory() const
{
    return model_->path();
}
QString BreakdownDialog::candidates() const
{
    return candidates_->path();
}
QString BreakdownDialog::promptSet() const
{
    return prompts_->path();
}

std::vector<std::pair<std::string, std::string>> BreakdownDialog::fieldNames() const
{
    // The definition's labels, which the fields made from parameters show (longest flag first where one holds another).
    const auto label = [](const char* parameter) { return jobParameter(catalogueJob("breakdown"), parameter).label; };
    return {{"--noise-modules", label("noise_modules")}, {"--noise-seed", label("noise_seed")},
        {"--candidates", "Candidates file"}, {"--shapley-max", label("shapley_max")},
        {"--staleness", label("staleness")}, {"--history", "Older checkpoints"}, {"--noise", label("noise")}};
}

QString BreakdownDialog::check() const
{
    if (!isModelDirectory(modelDirectory())) {
        return tr("Student checkpoint: expected a folder holding config.json and the checkpoint (got '%1')")
            .arg(modelDirectory());
    }
    if (!candidates().isEmpty()) {
        if (const QString error
            = loadError(tr("Candidates file"), [&] { analysis::loadCandidates(absolutePath(candidates()).toStdString()); });
            !error.isEmpty()) {
            return error;
        }
    } else if (!recipe_->path().isEmpty()) {
        if (const QString error = loadError(tr("Recipe"), [&] { quant::loadRecipe(recipe_->path().toStdString()); });
            !error.isEmpty()) {
            return error;
        }
    }
    for (const QString& directory : splitPaths(history_->text())) {
        if (!isModelDirectory(directory)) {
            return tr("Older checkpoints: '%1' is not a folder holding config.json").arg(directory);
        }
    }
    if (staleness_->value() > 0 && splitPaths(history_->text()).isEmpty()) {
        return tr("Older checkpoints: staleness %1 needs the checkpoint %1 optimizer steps older")
            .arg(staleness_->value());
    }
    if (promptSet().isEmpty() || !QFileInfo(promptSet()).isFile()) {
        return tr("Prompt set: expected a JSON Lines file (got '%1')").arg(promptSet());
    }
    // The catalogue's checks (a candidates file with one configuration's recipe, staleness or noise, say), named by
    // field label.
    return specError(*spec());
}

QString BreakdownDialog::readyText() const
{
    if (candidates().isEmpty() && recipe_->path().isEmpty() && staleness_->value() == 0 && noise_->value() == 0.0) {
        return tr("Ready, but this configuration is the BF16 engine itself: it has no source to split.");
    }
    return tr("Ready: each source switched on and off on the same prompts and seeds (add-one-in, leave-one-out, "
              "Shapley up to %1 sources).")
        .arg(shapleyMax_->value());
}

QString BreakdownDialog::jobName() const
{
    if (!candidates().isEmpty()) {
        return tr("Breakdown of %1").arg(QFileInfo(candidates()).completeBaseName());
    }
    return tr("Breakdown of %1")
        .arg(recipe_->path().isEmpty() ? tr("BF16") : QFileInfo(recipe_->path()).completeBaseName());
}

QString BreakdownDialog::cliCommand() const
{
    return specCommand(*spec());
}

std::optional<jobs::JobSpec> BreakdownDialog::spec() const
{
    jobs::JobSpec spec("breakdown");
    // Absolute paths, so that the stored inputs are the same whichever front-end ran it.
    spec.set("model", absolutePath(modelDirectory()).toStdString());
    if (!candidates().isEmpty()) {
        spec.set("candidates", absolutePath(candidates()).toStdString());
    }
    // One configuration: only what the user set (a candidates file excludes them).
    if (!recipe_->path().isEmpty()) {
        spec.set("recipe", absolutePath(recipe_->path()).toStdString());
    }
    // A field at its default is not given (a candidates file excludes them).
    setParameters(spec, {"staleness", "noise"});
    if (noise_->value() > 0.0) {
        setParameters(spec, {"noise_seed"});
    }
    nlohmann::json history = nlohmann::json::array();
    for (const QString& directory : splitPaths(history_->text())) {
        history.push_back(absolutePath(directory).toStdString());
    }
    spec.set("history", history);
    spec.set("prompts", absolutePath(promptSet()).toStdString());
    setParameters(spec, {"count", "max_tokens", "shapley_max"});
    setDevice(spec);
    return spec;
}

JobWorker::Job BreakdownDialog::job() const
{
    return specJob(*spec());
}

} // namespace mismatch::ui

#include "ui/breakdown_dialog.h"

#include "core/analysis/admission.h"
#include "core/analysis/breakdown.h"
#include "core/quant/recipe.h"
#include "ui/training_dialog.h"

#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QLineEdit>
#include <QSpinBox>

namespace mismatch::ui {

BreakdownDialog::BreakdownDialog(const QString& workspaceDirectory, const store::RunStore* store, QWidget* parent)
    : JobDialog(workspaceDirectory, tr("Start Mismatch Breakdown"), QStringLiteral("breakdownDialog"), parent, store)
{
    resize(720, 500);
    QFormLayout* form = this->form();
    model_ = addPicker(PickKind::ModelDirectory, tr("Student checkpoint:"), QStringLiteral("breakdownModelEdit"));
    candidates_ = addPicker(PickKind::Candidates, tr("Candidates file:"), QStringLiteral("breakdownCandidatesEdit"));
    candidates_->setToolTip(tr("a YAML list of candidates, as for the admission check (empty: the one configuration "
                               "below)"));
    recipe_ = addPicker(PickKind::Recipe, tr("Recipe (one configuration):"), QStringLiteral("breakdownRecipeEdit"));
    recipe_->setToolTip(tr("the configuration's recipe file (empty: BF16 weights, activations and KV cache)"));
    staleness_ = spinBox(this, 0, 1000000, 0);
    staleness_->setObjectName("breakdownStaleness");
    form->addRow(tr("Staleness k (optimizer steps):"), staleness_);
    history_ = new QLineEdit(this);
    history_->setObjectName("breakdownHistory");
    history_->setPlaceholderText(tr("older checkpoints, oldest first, separated by ';' (for staleness)"));
    form->addRow(tr("Older checkpoints:"), history_);
    noise_ = new QDoubleSpinBox(this);
    noise_->setObjectName("breakdownNoise");
    noise_->setDecimals(4);
    noise_->setRange(0.0, 10.0);
    noise_->setSingleStep(0.01);
    form->addRow(tr("Weight noise sigma (relative to RMS):"), noise_);
    noiseSeed_ = spinBox(this, 0, 1000000000, 0);
    form->addRow(tr("Noise seed:"), noiseSeed_);
    prompts_ = addPicker(PickKind::PromptSet, tr("Prompt set (JSONL):"), QStringLiteral("breakdownPromptsEdit"));
    count_ = spinBox(this, 0, 1000000, 64, tr("all"));
    form->addRow(tr("Prompts (first N):"), count_);
    maxTokens_ = spinBox(this, 1, 100000, 64);
    form->addRow(tr("Generated tokens per prompt:"), maxTokens_);
    shapleyMax_ = spinBox(this, 0, analysis::kMismatchSourceCount, 4);
    shapleyMax_->setToolTip(tr("Shapley parts for a candidate with at most this many sources (2^n measurements)"));
    form->addRow(tr("Shapley up to sources:"), shapleyMax_);
    watch(noise_);
    for (QSpinBox* box : {staleness_, noiseSeed_, count_, maxTokens_, shapleyMax_}) {
        watch(box);
    }
    watch(history_);
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
    return {{"--noise-modules", "Noise modules"}, {"--candidates", "Candidates file"},
        {"--shapley-max", "Shapley up to sources"}, {"--staleness", "Staleness k"}, {"--history", "Older checkpoints"},
        {"--noise", "Weight noise sigma"}};
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
        if (!recipe_->path().isEmpty() || staleness_->value() > 0 || noise_->value() > 0.0) {
            return tr("Recipe, staleness and noise describe one configuration: leave them empty with a candidates "
                      "file");
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
    return {};
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
    QString command = QStringLiteral("mismatch --workspace %1 breakdown %2")
                          .arg(shellQuote(workspace_), shellQuote(absolutePath(modelDirectory())));
    if (!candidates().isEmpty()) {
        command += QStringLiteral(" --candidates ") + shellQuote(absolutePath(candidates()));
    } else {
        if (!recipe_->path().isEmpty()) {
            command += QStringLiteral(" --recipe ") + shellQuote(absolutePath(recipe_->path()));
        }
        if (staleness_->value() > 0) {
            command += QStringLiteral(" --staleness %1").arg(staleness_->value());
        }
        if (noise_->value() > 0.0) {
            command += QStringLiteral(" --noise %1 --noise-seed %2")
                           .arg(QString::number(noise_->value(), 'g', 12))
                           .arg(noiseSeed_->value());
        }
    }
    for (const QString& directory : splitPaths(history_->text())) {
        command += QStringLiteral(" --history ") + shellQuote(absolutePath(directory));
    }
    command += QStringLiteral(" --prompts %1 --count %2 --max-tokens %3 --shapley-max %4")
                   .arg(shellQuote(absolutePath(promptSet())))
                   .arg(count_->value())
                   .arg(maxTokens_->value())
                   .arg(shapleyMax_->value());
    return command;
}

JobWorker::Job BreakdownDialog::job() const
{
    analysis::BreakdownOptions options;
    options.modelDirectory = absolutePath(modelDirectory()).toStdString();
    for (const QString& directory : splitPaths(history_->text())) {
        options.history.push_back(absolutePath(directory).toStdString());
    }
    options.promptSetPath = absolutePath(promptSet()).toStdString();
    options.count = count_->value();
    options.settings.maxNewTokens = maxTokens_->value();
    options.shapleyMaxSources = shapleyMax_->value();
    if (!candidates().isEmpty()) {
        options.candidates = analysis::loadCandidates(absolutePath(candidates()).toStdString());
    } else {
        analysis::Candidate candidate;
        candidate.recipePath = recipe_->path().isEmpty() ? std::string() : absolutePath(recipe_->path()).toStdString();
        candidate.staleness = staleness_->value();
        candidate.noise = noise_->value();
        candidate.noiseSeed = static_cast<std::uint64_t>(noiseSeed_->value());
        // The CLI's default name (cli_breakdown.cpp): the recipe's file stem, else "bf16".
        candidate.name = recipe_->path().isEmpty() ? std::string("bf16")
                                                   : QFileInfo(recipe_->path()).completeBaseName().toStdString();
        options.candidates.push_back(candidate);
    }
    return [workspace = workspace_.toStdString(), options](Progress& progress) {
        store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::CreateOrOpen);
        analysis::runBreakdown(store, options, progress);
    };
}

} // namespace mismatch::ui

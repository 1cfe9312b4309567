#include "core/analysis/recipe_builder.h"


#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/output_check.h"
#include "core/engine/paged_kv_cache.h"
#include "core/quant/formats.h"
#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The options a stored scan was made with (sensitivityConfigJson), so that the builder measures the same way.
SensitivityOptions scanOptions(const store::SensitivityScanInfo& scan, const std::string& storePath)
{
    const std::string source = storePath + " (sensitivity scan " + std::to_string(scan.id) + " config_json)";
    return parseSensitivityConfig(scan.configJson, source);
}

void addRecipeRow(store::RunStore& store, const std::string& name, const std::string& path, const std::string& content,
    std::int64_t& id)
{
    store::Transaction transaction(store.handle());
    store::Statement insert(store.handle(), "INSERT INTO recipes (name, path, content) VALUES (?, ?, ?)");
    insert.bind(1, name).bind(2, path).bind(3, content);
    insert.run();
    id = sqlite3_last_insert_rowid(store.handle());
    transaction.commit();
}

} // namespace

std::string cellLabel(std::int64_t layer, const std::string& group)
{
    return layer == store::kNoLayer ? group : "layer " + std::to_string(layer) + " " + group;
}

quant::Recipe recipeForCells(const std::vector<SensitivityCellSpec>& cells, const std::vector<bool>& quantized,
    const quant::WeightPrecision& weights, const quant::ActivationPrecision& activations,
    const std::optional<quant::KvPrecision>& kv, const std::string& name)
{
    quant::Recipe recipe;
    recipe.name = name;
    recipe.weights = weights;
    recipe.activations = activations;
    if (kv) {
        recipe.kvCache = *kv;
    }
    const quant::WeightPrecision bf16Weights {quant::WeightFormat::Bf16, quant::Granularity::None};
    const quant::ActivationPrecision bf16Activations {quant::ActivationFormat::Bf16};
    for (std::size_t c = 0; c < cells.size(); ++c) {
        const SensitivityCellSpec& cell = cells[c];
        for (const std::string& module : cell.modules) {
            quant::RecipeRule rule;
            rule.match = module;
            if (cell.group == "kv") {
                if (!kv || quantized[c]) {
                    continue; // the top-level kv_cache (or BF16 without one) already says it
                }
                rule.kvCache = quant::KvPrecision {};
            } else if (cell.layer == store::kNoLayer) {
                if (!quantized[c]) {
                    continue; // the embedding and lm_head are BF16 unless a rule names them
                }
                rule.weights = weights;
                if (module != quant::kEmbedName) {
                    rule.activations = activations;
                }
            } else {
                if (quantized[c]) {
                    continue; // the top-level defaults quantize every projection
                }
                rule.weights = bf16Weights;
                rule.activations = bf16Activations;
            }
            recipe.rules.push_back(std::move(rule));
        }
    }
    return recipe;
}

BudgetChoice budgetForModel(const store::RunStore& store, std::int64_t calibrationId,
    std::optional<std::int64_t> step, const std::string& modelDirectory)
{
    const auto calibration = store::calibration(store, calibrationId);
    if (!calibration) {
        throw StoreError(store.path(), "has no calibration with id " + std::to_string(calibrationId));
    }
    BudgetChoice choice;
    choice.modelStep = train::checkpointOptimizerSteps(modelDirectory);
    const store::BracketChoice bracket
        = store::chooseBracket(*calibration, choice.modelStep, step, "a model at optimizer step");
    if (!bracket.step) {
        throw InputError("recipe_build", "model",
            modelDirectory + " is at optimizer step " + std::to_string(choice.modelStep)
                + ", before every bracket of calibration " + std::to_string(calibrationId) + " (steps " + bracket.steps
                + "): build for a checkpoint of a calibrated step, or choose a bracket explicitly (--step)");
    }
    choice.step = *bracket.step;
    choice.note = bracket.note;
    choice.budget = store::admissionThreshold(store, calibrationId, choice.step);
    return choice;
}

namespace {

// Refuses options the builder cannot use; returns whether the recipe file is JSON (else YAML).
bool checkBuildOptions(const RecipeBuildOptions& options)
{
    if (!(options.budget > 0.0) || !std::isfinite(options.budget)) {
        throw InputError("recipe build", "budget", "must be a positive number of nats per token");
    }
    if (!(options.targetFraction > 0.0 && options.targetFraction <= 1.0)) {
        throw InputError("recipe build", "--target-fraction", "must be in (0, 1]");
    }
    if (options.outPath.empty()) {
        throw InputError("recipe build", "--out", "an output recipe file is needed");
    }
    const std::string extension = fs::path(options.outPath).extension().string();
    const bool json = extension == ".json";
    if (!json && extension != ".yaml" && extension != ".yml") {
        throw InputError(options.outPath, "", "the recipe file must end in .yaml, .yml or .json");
    }
    return json;
}

void applyBudgetProtocol(const RecipeBuildOptions& options, SensitivityOptions& settings)
{
    if (options.protocol) {
        settings.promptSetPath = options.protocol->prompts;
        settings.count = options.protocol->count;
        settings.settings = applyProtocol(*options.protocol, settings.settings);
    }
}

// The sensitivity scan the builder orders its cells by, and the settings every measurement of the builder uses.
struct ScanInputs {
    SensitivityOptions settings;
    std::vector<store::SensitivityCell> cells;
};

// The sensitivity order: a stored scan, or a scan measured now (stored too). With a budget's protocol, a new
// scan and every measurement of the builder use it; a stored scan's own protocol only orders the cells.
// Fills the result's scan id, format and protocols.
ScanInputs sensitivityOrder(
    store::RunStore& store, const RecipeBuildOptions& options, Progress& progress, RecipeBuildResult& result)
{
    ScanInputs scanInputs;
    SensitivityOptions& scanSettings = scanInputs.settings;
    scanSettings = options.scan;
    if (!options.scanId) {
        applyBudgetProtocol(options, scanSettings);
    }
    if (options.scanId) {
        const auto scan = store::sensitivityScan(store, *options.scanId);
        if (!scan) {
            throw StoreError(store.path(), "has no sensitivity scan with id " + std::to_string(*options.scanId));
        }
        if (scan->info.status != "finished") {
            throw StoreError(store.path(),
                "sensitivity scan " + std::to_string(*options.scanId) + " is " + scan->info.status
                    + " (not finished): run `mismatch sensitivity` again");
        }
        scanSettings = scanOptions(scan->info, store.path());
        scanInputs.cells = scan->cells;
        result.scanId = scan->info.id;
        progress.update(0.0, "loading scan");
    } else {
        Progress slice = progress.child(0.0, 0.5, "sensitivity scan");
        const SensitivityResult scan = runSensitivity(store, scanSettings, slice);
        scanInputs.cells = scan.cells;
        result.scanId = scan.scanId;
    }
    result.format = scanFormat(scanSettings.weights, scanSettings.activations);
    result.scanProtocol = settingsProtocol(scanSettings.promptSetPath, scanSettings.count, scanSettings.settings);
    applyBudgetProtocol(options, scanSettings);
    result.protocol = settingsProtocol(scanSettings.promptSetPath, scanSettings.count, scanSettings.settings);
    if (options.protocol) {
        result.scanProtocolDifferences = protocolDifferences(result.scanProtocol, *options.protocol, "budget");
    }
    return scanInputs;
}

// The cells of the recipe and the order in which they are kept in BF16 (most added mismatch first).
struct RecipeCells {
    std::vector<SensitivityCellSpec> cells;
    std::vector<std::size_t> order;
};

// The cells of the recipe: the scanned ones, KV cells only when the KV cache starts quantized.
RecipeCells recipeCells(const model::ModelConfig& config, const std::vector<store::SensitivityCell>& scanCells,
    const RecipeBuildOptions& options, const std::string& storePath, std::int64_t scanId)
{
    RecipeCells result;
    std::vector<SensitivityCellSpec>& cells = result.cells;
    std::vector<double> added;
    {
        std::map<std::pair<std::int64_t, std::string>, double> addedByCell;
        for (const auto& cell : scanCells) {
            addedByCell[{cell.layer, cell.moduleGroup}] = cell.addedMismatch;
        }
        for (const auto& spec : sensitivityCells(config, true, true)) {
            const auto found = addedByCell.find({spec.layer, spec.group});
            if ((spec.group == "kv" && !options.quantizeKv)
                || (spec.layer == store::kNoLayer && options.keepEmbeddingBf16)) {
                continue;
            }
            if (found == addedByCell.end()) {
                if (spec.layer != store::kNoLayer) {
                    throw StoreError(storePath,
                        "sensitivity scan " + std::to_string(scanId) + " has no cell for "
                            + cellLabel(spec.layer, spec.group)
                            + (spec.group == "kv" ? " (scan again with KV cells to build a recipe with an FP8 KV cache)"
                                                  : " (is it a scan of this model?)"));
                }
                continue; // a scan without embedding cells leaves the embedding and lm_head BF16
            }
            cells.push_back(spec);
            added.push_back(found->second);
        }
    }
    std::vector<std::size_t>& order = result.order;
    order.resize(cells.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return added[a] > added[b]; });
    return result;
}

// What every measurement of the builder shares: the FP32 trainer, the engine weights, the prompts and settings.
struct MeasurementInputs {
    const model::Transformer& trainer;
    const model::TransformerWeights& weights;
    const PromptRequests& requests;
    const engine::SamplingOptions& sampling;
    const MeasureSettings& settings;
};

// The mismatch of the engine for `written` with `kept` cells in BF16, over [begin, end] of `progress`.
engine::MismatchMeasurement measureRecipe(const MeasurementInputs& inputs, const quant::Recipe& written,
    std::size_t kept, double begin, double end, Progress& progress)
{
    EngineConfiguration configuration;
    configuration.recipe = written;
    engine::MismatchMeasurement measured;
    {
        Progress slice = progress.child(begin, end,
            kept == 0 ? std::string("everything quantized")
                      : "kept " + std::to_string(kept) + " cell" + (kept == 1 ? "" : "s") + " in BF16");
        measured = measureConfiguration(inputs.trainer, inputs.weights, configuration, inputs.requests,
            inputs.sampling, inputs.settings, &slice);
    }
    return measured;
}

// The step with `kept` cells in BF16: into the result and the run's step metrics.
void recordStep(store::RunStore& store, RecipeBuildResult& result, std::size_t kept,
    const engine::MismatchMeasurement& measured, const metrics::BootstrapOptions& bootstrap,
    std::chrono::steady_clock::time_point started)
{
    RecipeBuildStep step;
    step.keptCell = kept == 0 ? std::string() : result.bf16Cells.back();
    step.mismatch = measured.kl;
    step.interval = klInterval(measured, bootstrap);
    result.steps.push_back(step);
    store::StepMetrics metrics;
    metrics.step = static_cast<std::int64_t>(kept);
    metrics.mismatchKl = measured.kl;
    metrics.k1 = measured.k1;
    metrics.k3 = measured.k3;
    if (result.bf16Unit > 0.0) {
        metrics.bf16Multiple = measured.kl / result.bf16Unit;
    }
    metrics.wallTimeSeconds = secondsSince(started);
    metrics.extrasJson = nlohmann::json {{"kept_cell", step.keptCell}, {"ci_low", step.interval.low},
        {"ci_high", step.interval.high},
        {"target",
            result.target}}.dump();
    store.appendSteps(result.runId, {metrics});
    result.mismatch = measured.kl;
    result.interval = step.interval;
}

// The built recipe's quantized cells, weight bytes and KV capacity (within `kvMemoryBytes`), into the result.
void describeBuiltRecipe(RecipeBuildResult& result, const RecipeCells& recipeCells, const std::vector<bool>& quantized,
    const quant::Recipe& written, const model::ModelConfig& config, std::uint64_t kvMemoryBytes)
{
    const std::vector<SensitivityCellSpec>& cells = recipeCells.cells;
    for (std::size_t c = 0; c < cells.size(); ++c) {
        if (quantized[c]) {
            result.quantizedCells.push_back(cellLabel(cells[c].layer, cells[c].group));
        }
    }
    const quant::RecipePlan plan = quant::resolveRecipe(written, config);
    result.weightBytes = plan.weightBytes;
    result.bf16WeightBytes = plan.bf16WeightBytes;
    const engine::KvCapacity capacity = engine::kvCapacity(config, &plan, kvMemoryBytes);
    result.kvTokens = capacity.tokens;
    result.bf16KvTokens = capacity.bf16Tokens;
    result.kvCapacityRatio = capacity.ratioToBf16;
}

} // namespace

RecipeBuildResult buildRecipe(store::RunStore& store, const RecipeBuildOptions& options, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
    const bool json = checkBuildOptions(options);
    requireOutputNotInput(options.outPath,
        {{options.scan.promptSetPath, "prompt set"}, {store.path(), "workspace database"}},
        {options.scan.modelDirectory}, "recipe file"); // issue 46: before any work

    RecipeBuildResult result;
    result.budget = options.budget;
    result.budgetNote = options.budgetNote;
    result.target = options.budget * options.targetFraction;
    result.kvMemoryBytes = options.kvMemoryBytes;
    result.outPath = options.outPath;

    const ScanInputs scan = sensitivityOrder(store, options, progress, result);
    const SensitivityOptions& scanSettings = scan.settings;

    checkAnalysisMemory("the recipe builder", {scanSettings.modelDirectory}, {nullptr}, scanSettings.settings);
    const ModelDirectory model = loadModelDirectory(scanSettings.modelDirectory, scanSettings.settings.device);
    const PromptRequests requests = promptRequests(scanSettings.promptSetPath, *model.tokenizer, scanSettings.count);
    requirePromptsFit(requests, model.config, scanSettings.settings.maxNewTokens);
    const engine::SamplingOptions sampling = samplingOptions(scanSettings.settings, model.config, *model.tokenizer);
    const model::Transformer trainer(model.config, model.weights);
    const MeasurementInputs inputs {trainer, model.weights, requests, sampling, scanSettings.settings};

    const RecipeCells recipeCellsInOrder = recipeCells(model.config, scan.cells, options, store.path(), result.scanId);
    const std::vector<SensitivityCellSpec>& cells = recipeCellsInOrder.cells;
    const std::vector<std::size_t>& order = recipeCellsInOrder.order;

    const std::string name
        = options.name.empty() ? "built-" + quant::toString(scanSettings.weights.format) : options.name;
    const std::optional<quant::KvPrecision> kv
        = options.quantizeKv ? std::optional<quant::KvPrecision>(scanSettings.kv) : std::nullopt;
    nlohmann::json config = {{"scan_id", result.scanId}, {"format", result.format}, {"budget", options.budget},
        {"target_fraction", options.targetFraction}, {"quantize_kv", options.quantizeKv}, {"out", options.outPath},
        {"model", scanSettings.modelDirectory}, {"prompts", scanSettings.promptSetPath},
        {"protocol", protocolToJson(result.protocol)},
        {"protocol_source", options.protocol ? "the budget's calibration" : "the scan's settings"},
        {"scan_protocol_differs", result.scanProtocolDifferences}, {"budget_note", options.budgetNote}};
    result.runId = store.beginRun({"recipe build " + name, "recipe_build", config.dump(), std::nullopt});

    store::recordRunOutcome(store, result.runId, [&] {
        std::vector<bool> quantized(cells.size(), true);
        std::string text;
        quant::Recipe written;
        const double stepsTotal = static_cast<double>(cells.size() + 1);
        const double progressBase = options.scanId ? 0.0 : 0.5;
        // Unit of the BF16 multiples: measured once here (same prompts and seeds).
        {
            Progress slice
                = progress.child(progressBase, progressBase + (1.0 - progressBase) / (stepsTotal + 1.0), "BF16 unit");
            result.bf16Unit = measureConfiguration(
                trainer, model.weights, EngineConfiguration {}, requests, sampling, scanSettings.settings, &slice)
                                  .kl;
        }
        std::size_t kept = 0;
        while (true) {
            progress.checkCancelled();
            const quant::Recipe recipe
                = recipeForCells(cells, quantized, scanSettings.weights, scanSettings.activations, kv, name);
            // Measure exactly what the file will hold: the text parsed back.
            text = json ? quant::recipeToJson(recipe) : quant::recipeToYaml(recipe);
            written = quant::parseRecipe(text, options.outPath);
            const double begin
                = progressBase + (1.0 - progressBase) * static_cast<double>(kept + 1) / (stepsTotal + 1.0);
            const double end = progressBase + (1.0 - progressBase) * static_cast<double>(kept + 2) / (stepsTotal + 1.0);
            const engine::MismatchMeasurement measured = measureRecipe(inputs, written, kept, begin, end, progress);
            recordStep(store, result, kept, measured, scanSettings.settings.bootstrap, started);
            if (measured.kl <= result.target) {
                break;
            }
            if (kept == order.size()) {
                throw Error("recipe build: the target " + std::to_string(result.target) + " nats/token ("
                    + std::to_string(options.targetFraction) + " x budget " + std::to_string(options.budget)
                    + ") is not reached even with every cell in BF16 (measured " + std::to_string(measured.kl)
                    + " nats/token; the BF16 unit is " + std::to_string(result.bf16Unit) + "); no recipe was written");
            }
            const std::size_t next = order[kept];
            quantized[next] = false;
            result.bf16Cells.push_back(cellLabel(cells[next].layer, cells[next].group));
            ++kept;
        }
        describeBuiltRecipe(result, recipeCellsInOrder, quantized, written, model.config, options.kvMemoryBytes);
        result.recipeText = text;
        writeFileAtomically(options.outPath, text);
        addRecipeRow(store, name, fs::absolute(options.outPath).string(), text, result.recipeId);
    });
    store.finishRun(result.runId, store::RunStatus::Finished);
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace mismatch::analysis

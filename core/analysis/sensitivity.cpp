#include "core/analysis/sensitivity.h"

#include "core/common/error.h"
#include "core/quant/formats.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

std::vector<SensitivityCellSpec> sensitivityCells(const model::ModelConfig& config, bool kvCells, bool embeddingCells)
{
    std::vector<SensitivityCellSpec> cells;
    const auto& suffixes = quant::projectionSuffixes();
    const auto& shortNames = quant::projectionShortNames();
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        for (std::size_t g = 0; g < suffixes.size(); ++g) {
            cells.push_back({layer, shortNames[g], {quant::layerModuleName(layer, suffixes[g])}});
        }
        if (kvCells) {
            cells.push_back({layer, "kv", {quant::attentionName(layer)}});
        }
    }
    if (embeddingCells) {
        if (config.tieWordEmbeddings) {
            cells.push_back({store::kNoLayer, "embed_lm_head", {quant::kEmbedName, quant::kLmHeadName}});
        } else {
            cells.push_back({store::kNoLayer, "embed_tokens", {quant::kEmbedName}});
            cells.push_back({store::kNoLayer, "lm_head", {quant::kLmHeadName}});
        }
    }
    return cells;
}

quant::Recipe cellRecipe(const SensitivityCellSpec& cell, const quant::WeightPrecision& weights,
    const quant::ActivationPrecision& activations, const quant::KvPrecision& kv)
{
    quant::Recipe recipe;
    recipe.name = "sensitivity-" + (cell.layer == store::kNoLayer ? std::string() : std::to_string(cell.layer) + "-")
        + cell.group;
    for (const std::string& module : cell.modules) {
        quant::RecipeRule rule;
        rule.match = module;
        if (cell.group == "kv") {
            rule.kvCache = kv;
        } else {
            rule.weights = weights;
            // The embedding is a lookup: it has no input activations to round.
            if (module != quant::kEmbedName) {
                rule.activations = activations;
            }
        }
        recipe.rules.push_back(std::move(rule));
    }
    return recipe;
}

std::string scanFormat(const quant::WeightPrecision& weights, const quant::ActivationPrecision& activations)
{
    return quant::describe(weights) + (activations.format == quant::ActivationFormat::Fp8E4m3 ? " a8" : "");
}

std::string sensitivityConfigJson(const SensitivityOptions& options)
{
    const MeasureSettings& s = options.settings;
    return nlohmann::json {{"model", std::filesystem::absolute(options.modelDirectory).string()},
        {"prompts", std::filesystem::absolute(options.promptSetPath).string()}, {"count", options.count},
        {"weights",
            {{"format", quant::toString(options.weights.format)},
                {"granularity", quant::toString(options.weights.granularity)}}},
        {"activations", quant::toString(options.activations.format)}, {"kv_cells", options.kvCells},
        {"kv", {{"format", quant::toString(options.kv.format)}, {"scales", quant::toString(options.kv.scales)}}},
        {"embedding_cells", options.embeddingCells},
        {"sampling",
            {{"temperature", s.temperature}, {"top_p", s.topP}, {"top_k", s.topK}, {"max_tokens", s.maxNewTokens},
                {"seed", s.seed}}},
        {"bootstrap",
            {{"resamples", s.bootstrap.resamples}, {"confidence", s.bootstrap.confidence}, {"seed", s.bootstrap.seed}}}}
        .dump();
}

SensitivityResult runSensitivity(store::RunStore& store, const SensitivityOptions& options, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
    progress.update(0.0, "loading model and prompts");
    const ModelDirectory model = loadModelDirectory(options.modelDirectory);
    const PromptRequests requests = promptRequests(options.promptSetPath, *model.tokenizer, options.count);
    const engine::SamplingOptions sampling = samplingOptions(options.settings, model.config, *model.tokenizer);
    const std::vector<SensitivityCellSpec> cells
        = sensitivityCells(model.config, options.kvCells, options.embeddingCells);
    // Every cell's recipe resolves before anything is measured or stored (a format the model cannot take, e.g.
    // int4 with fp8 activations, is reported at once).
    for (const auto& cell : cells) {
        quant::resolveRecipe(cellRecipe(cell, options.weights, options.activations, options.kv), model.config);
    }
    const model::Transformer trainer(model.config, model.weights);

    SensitivityResult result;
    result.format = scanFormat(options.weights, options.activations);
    result.layers = model.config.numLayers;
    const std::string configJson = sensitivityConfigJson(options);
    result.runId = store.beginRun({"sensitivity " + result.format, "sensitivity", configJson, std::nullopt});
    store::recordRunOutcome(store, result.runId, [&] {
        const double parts = static_cast<double>(cells.size() + 1);
        engine::MismatchMeasurement unit;
        {
            ProgressSlice slice(&progress, 0.0, 1.0 / parts, "BF16 unit");
            unit = measureConfiguration(
                trainer, model.weights, EngineConfiguration {}, requests, sampling, options.settings, slice.get());
        }
        result.bf16Unit = unit.kl;
        result.bf16UnitInterval = klInterval(unit, options.settings.bootstrap);
        result.unitTokens = unit.tokens;
        store::SensitivityScanInfo scan;
        scan.runId = result.runId;
        scan.format = result.format;
        scan.bf16Unit = unit.kl;
        scan.configJson = configJson;
        result.scanId = store::addSensitivityScan(store, scan);

        for (std::size_t c = 0; c < cells.size(); ++c) {
            progress.checkCancelled();
            const SensitivityCellSpec& spec = cells[c];
            const auto cellStarted = std::chrono::steady_clock::now();
            EngineConfiguration configuration;
            configuration.recipe = cellRecipe(spec, options.weights, options.activations, options.kv);
            const std::string label
                = spec.layer == store::kNoLayer ? spec.group : "layer " + std::to_string(spec.layer) + " " + spec.group;
            engine::MismatchMeasurement measured;
            {
                ProgressSlice slice(
                    &progress, static_cast<double>(c + 1) / parts, static_cast<double>(c + 2) / parts, label);
                measured = measureConfiguration(
                    trainer, model.weights, configuration, requests, sampling, options.settings, slice.get());
            }
            const metrics::Interval own = klInterval(measured, options.settings.bootstrap);
            const metrics::Interval added = pairedRatioDifference(measured.promptKlSums, measured.promptTokens,
                unit.promptKlSums, unit.promptTokens, options.settings.bootstrap);
            store::SensitivityCell cell;
            cell.layer = spec.layer;
            cell.moduleGroup = spec.group;
            cell.mismatch = measured.kl;
            cell.addedMismatch = measured.kl - unit.kl;
            cell.ciLow = added.low;
            cell.ciHigh = added.high;
            cell.mismatchCiLow = own.low;
            cell.mismatchCiHigh = own.high;
            cell.tokens = measured.tokens;
            cell.seconds = secondsSince(cellStarted);
            store::addSensitivityCell(store, result.scanId, cell);
            result.cells.push_back(cell);
        }
    });
    store.finishRun(result.runId, store::RunStatus::Finished);
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace mismatch::analysis

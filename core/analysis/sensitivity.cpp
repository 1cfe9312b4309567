#include "core/analysis/sensitivity.h"

#include "core/analysis/protocol.h"

#include "core/analysis/job_resume.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/quant/formats.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>

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
                {"seed", s.seed}, {"kv_scale_fit", toString(s.kvScales)}, {"kv_first_batch", s.kvFirstBatch}}},
        {"protocol", protocolToJson(settingsProtocol(options.promptSetPath, options.count, s))},
        {"engine", {{"batch", s.batchSize}, {"kv_cache_bytes", s.kvCacheBytes}, {"device", deviceName(s.device)}}},
        {"bootstrap",
            {{"resamples", s.bootstrap.resamples}, {"confidence", s.bootstrap.confidence}, {"seed", s.bootstrap.seed}}}}
        .dump();
}

namespace {

template <typename T, typename Parse>
T parseEnum(const nlohmann::json& value, Parse parse, const std::string& source, const std::string& key)
{
    if (!value.is_string()) {
        throw InputError(source, key, "expected a string");
    }
    const auto parsed = parse(value.get<std::string>());
    if (!parsed) {
        throw InputError(source, key, "unknown value '" + value.get<std::string>() + "'");
    }
    return *parsed;
}

} // namespace

SensitivityOptions parseSensitivityConfig(const std::string& configJson, const std::string& source)
{
    SensitivityOptions options;
    try {
        const nlohmann::json j = nlohmann::json::parse(configJson);
        options.modelDirectory = j.at("model").get<std::string>();
        options.promptSetPath = j.at("prompts").get<std::string>();
        options.count = j.at("count").get<std::int64_t>();
        options.weights.format = parseEnum<quant::WeightFormat>(
            j.at("weights").at("format"), [](const std::string& s) { return quant::parseWeightFormat(s); }, source,
            "weights.format");
        const std::string granularity = j.at("weights").at("granularity").get<std::string>();
        options.weights.granularity = granularity == "none"
            ? quant::Granularity::None
            : parseEnum<quant::Granularity>(
                j.at("weights").at("granularity"), [](const std::string& s) { return quant::parseGranularity(s); },
                source, "weights.granularity");
        options.activations.format = parseEnum<quant::ActivationFormat>(
            j.at("activations"), [](const std::string& s) { return quant::parseActivationFormat(s); }, source,
            "activations");
        options.kvCells = j.at("kv_cells").get<bool>();
        options.kv.format = parseEnum<quant::KvFormat>(
            j.at("kv").at("format"), [](const std::string& s) { return quant::parseKvFormat(s); }, source, "kv.format");
        const std::string scales = j.at("kv").at("scales").get<std::string>();
        options.kv.scales = scales == "none"
            ? quant::KvScales::None
            : parseEnum<quant::KvScales>(
                j.at("kv").at("scales"), [](const std::string& s) { return quant::parseKvScales(s); }, source,
                "kv.scales");
        options.embeddingCells = j.at("embedding_cells").get<bool>();
        const nlohmann::json& s = j.at("sampling");
        options.settings.temperature = s.at("temperature").get<double>();
        options.settings.topP = s.at("top_p").get<double>();
        options.settings.topK = s.at("top_k").get<std::int64_t>();
        options.settings.maxNewTokens = s.at("max_tokens").get<std::int64_t>();
        options.settings.seed = s.at("seed").get<std::uint64_t>();
        // Scans stored before the KV-scale fit was recorded fitted on every prompt measured.
        options.settings.kvScales = s.value("kv_scale_fit", toString(KvScalePolicy::FittedPerMeasurement))
                == toString(KvScalePolicy::FrozenFirstBatch)
            ? KvScalePolicy::FrozenFirstBatch
            : KvScalePolicy::FittedPerMeasurement;
        options.settings.kvFirstBatch = s.value("kv_first_batch", std::int64_t {0});
        if (j.contains("engine")) { // scans stored before the engine settings were recorded used the defaults
            options.settings.batchSize = j.at("engine").at("batch").get<std::int64_t>();
            options.settings.kvCacheBytes = j.at("engine").at("kv_cache_bytes").get<std::uint64_t>();
            options.settings.device = resumeDevice(j.at("engine").value("device", std::string("cpu")));
        }
        const nlohmann::json& b = j.at("bootstrap");
        options.settings.bootstrap.resamples = b.at("resamples").get<int>();
        options.settings.bootstrap.confidence = b.at("confidence").get<double>();
        options.settings.bootstrap.seed = b.at("seed").get<std::uint64_t>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError(source, "", std::string("is not a sensitivity scan's settings: ") + error.what());
    }
    return options;
}

namespace {

// A fresh scan (resumeRunId empty) or the continuation of a stored one (its config_json text kept as stored).
SensitivityResult measureScan(store::RunStore& store, const SensitivityOptions& options, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::string& storedConfigJson,
    const std::function<void(std::int64_t)>& onRunStarted)
{
    const auto started = std::chrono::steady_clock::now();
    // Each cell quantizes one module: its engine holds about what the BF16 engine holds.
    checkAnalysisMemory("the sensitivity scan", {options.modelDirectory}, {nullptr}, options.settings);
    progress.update(0.0, "loading model and prompts");
    const ModelDirectory model = loadModelDirectory(options.modelDirectory, options.settings.device);
    const PromptRequests requests = promptRequests(options.promptSetPath, *model.tokenizer, options.count);
    requirePromptsFit(requests, model.config, options.settings.maxNewTokens);
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
    std::string configJson = storedConfigJson;
    if (resumeRunId) {
        result.runId = *resumeRunId;
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max()); // running again; it has no steps
    } else {
        nlohmann::json config = nlohmann::json::parse(sensitivityConfigJson(options));
        std::vector<std::string> inputs = modelFiles(options.modelDirectory);
        inputs.push_back(options.promptSetPath);
        config["inputs"] = fileDigests(inputs);
        configJson = config.dump();
        result.runId = store.beginRun({"sensitivity " + result.format, "sensitivity", configJson, std::nullopt});
    }
    if (onRunStarted) {
        onRunStarted(result.runId);
    }
    store::recordRunOutcome(store, result.runId, [&] {
        const double parts = static_cast<double>(cells.size() + 1);
        engine::MismatchMeasurement unit;
        {
            Progress slice = progress.child(0.0, 1.0 / parts, "BF16 unit");
            unit = measureConfiguration(
                trainer, model.weights, EngineConfiguration {}, requests, sampling, options.settings, &slice);
        }
        result.bf16Unit = unit.kl;
        result.bf16UnitInterval = klInterval(unit, options.settings.bootstrap);
        result.unitTokens = unit.tokens;
        // A resumed scan: its scan row (when the unit was stored before the interruption) and its whole cells.
        std::map<std::pair<std::int64_t, std::string>, store::SensitivityCell> storedCells;
        std::optional<std::int64_t> storedScan;
        if (resumeRunId) {
            for (const auto& info : store::sensitivityScans(store)) {
                if (info.runId == result.runId) {
                    if (storedScan) {
                        throw StoreError(store.path(),
                            "run " + std::to_string(result.runId) + " has more than one sensitivity scan");
                    }
                    storedScan = info.id;
                    if (info.bf16Unit != unit.kl) {
                        throw Error("sensitivity run " + std::to_string(result.runId)
                            + ": the BF16 unit measured again differs from the stored one ("
                            + std::to_string(unit.kl) + " vs " + std::to_string(info.bf16Unit.value_or(0.0))
                            + " nats/token); the measurement is not reproducible here, so the scan cannot be resumed");
                    }
                }
            }
            if (storedScan) {
                const auto stored = store::sensitivityScan(store, *storedScan);
                for (const auto& cell : stored->cells) {
                    storedCells.emplace(std::make_pair(cell.layer, cell.moduleGroup), cell);
                }
            }
        }
        if (storedScan) {
            result.scanId = *storedScan;
        } else {
            store::SensitivityScanInfo scan;
            scan.runId = result.runId;
            scan.format = result.format;
            scan.bf16Unit = unit.kl;
            scan.configJson = configJson;
            result.scanId = store::addSensitivityScan(store, scan);
        }

        for (std::size_t c = 0; c < cells.size(); ++c) {
            progress.checkCancelled();
            const SensitivityCellSpec& spec = cells[c];
            const auto done = storedCells.find({spec.layer, spec.group});
            if (done != storedCells.end()) {
                result.cells.push_back(done->second);
                continue;
            }
            const auto cellStarted = std::chrono::steady_clock::now();
            EngineConfiguration configuration;
            configuration.recipe = cellRecipe(spec, options.weights, options.activations, options.kv);
            const std::string label
                = spec.layer == store::kNoLayer ? spec.group : "layer " + std::to_string(spec.layer) + " " + spec.group;
            engine::MismatchMeasurement measured;
            {
                Progress slice
                    = progress.child(static_cast<double>(c + 1) / parts, static_cast<double>(c + 2) / parts, label);
                measured = measureConfiguration(
                    trainer, model.weights, configuration, requests, sampling, options.settings, &slice);
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
        store.finishRun(result.runId, store::RunStatus::Finished);
    });
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace

SensitivityResult runSensitivity(store::RunStore& store, const SensitivityOptions& options, Progress& progress)
{
    return measureScan(store, options, progress, std::nullopt, "", options.onRunStarted);
}

SensitivityResult resumeSensitivity(
    store::RunStore& store, std::int64_t runId, const SensitivityOptions& options, Progress& progress)
{
    const ResumableRun run = resumableRun(store, runId, "sensitivity");
    checkInputsUnchanged(run.config.contains("inputs") ? run.config.at("inputs") : nlohmann::json(), runId,
        "sensitivity");
    checkRecordUnchanged(run.config, nlohmann::json::parse(sensitivityConfigJson(options)), {"inputs"}, runId,
        "sensitivity");
    return measureScan(store, options, progress, runId, run.info.configJson, options.onRunStarted);
}

} // namespace mismatch::analysis

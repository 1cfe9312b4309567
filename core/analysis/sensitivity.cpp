#include "core/analysis/sensitivity.h"

#include "core/analysis/protocol.h"

#include "core/analysis/job_resume.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/model/config.h"
#include "core/quant/formats.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Sorted, each once: `--layers 1,0` and `--layers 0,1,1` are the same unit.
std::vector<std::int64_t> normalizedLayers(std::vector<std::int64_t> layers)
{
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    return layers;
}

std::string layerText(std::int64_t layer)
{
    return layer == store::kNoLayer ? std::string("-1 (embedding / lm_head)") : std::to_string(layer);
}

// The model's config.json alone (what the cells depend on), read before the weights (assembling: instead of them),
// as checkAnalysisMemory reads it first.
model::ModelConfig scanModelConfig(const std::string& directory)
{
    return model::loadConfig((std::filesystem::path(directory) / "config.json").string());
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

std::vector<SensitivityCellSpec> scanCells(const model::ModelConfig& config, const SensitivityOptions& options)
{
    std::vector<SensitivityCellSpec> cells = sensitivityCells(config, options.kvCells, options.embeddingCells);
    if (options.layers.empty()) {
        return cells;
    }
    for (const std::int64_t layer : options.layers) {
        if (layer < store::kNoLayer || layer >= config.numLayers) {
            throw InputError("sensitivity", "layers",
                "layer " + std::to_string(layer) + " is not a layer of the model: it has "
                    + std::to_string(config.numLayers) + " layers (0.." + std::to_string(config.numLayers - 1)
                    + "), and -1 names the embedding / lm_head cells");
        }
    }
    const std::vector<std::int64_t> layers = normalizedLayers(options.layers);
    cells.erase(std::remove_if(cells.begin(), cells.end(),
                    [&layers](const SensitivityCellSpec& cell) {
                        return !std::binary_search(layers.begin(), layers.end(), cell.layer);
                    }),
        cells.end());
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
    if (activations.format == quant::ActivationFormat::Bf16) {
        return quant::describe(weights);
    }
    // fp8_e4m3 and mxfp8 activations are 8-bit, mxfp4 and nvfp4 ones 4-bit.
    return quant::describe(weights) + (quant::bytesPerElement(activations.format) < 1.0 ? " a4" : " a8");
}

std::string sensitivityConfigJson(const SensitivityOptions& options)
{
    const MeasureSettings& s = options.settings;
    nlohmann::json record {{"model", std::filesystem::absolute(options.modelDirectory).string()},
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
            {{"resamples", s.bootstrap.resamples}, {"confidence", s.bootstrap.confidence},
                {"seed", s.bootstrap.seed}}}};
    // Only a unit has it, so the record of a scan of every cell is what it was before units existed.
    if (!options.layers.empty()) {
        record["layers"] = normalizedLayers(options.layers);
    }
    return record.dump();
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
        // Only fp8_e4m3 is calibrated; the per-token-head formats compute their scales at each cache write.
        options.kv.calibration
            = options.kv.format == quant::KvFormat::Fp8E4m3 ? quant::KvCalibration::Probe : quant::KvCalibration::None;
        if (options.kv.format != quant::KvFormat::Fp8E4m3) {
            options.kv.scales = quant::KvScales::None;
        }
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
        options.layers = j.value("layers", std::vector<std::int64_t> {});
    } catch (const nlohmann::json::exception& error) {
        throw InputError(source, "", "is not a sensitivity scan's settings: " + jsonErrorDetail(error));
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
    // The layers asked for are checked before the weights are read.
    const std::vector<SensitivityCellSpec> cells = scanCells(scanModelConfig(options.modelDirectory), options);
    // Each cell quantizes one module: its engine holds about what the BF16 engine holds.
    checkAnalysisMemory("the sensitivity scan", {options.modelDirectory}, {nullptr}, options.settings);
    progress.update(0.0, "loading model and prompts");
    const ModelDirectory model = loadModelDirectory(options.modelDirectory, options.settings.device);
    const PromptRequests requests = promptRequests(options.promptSetPath, *model.tokenizer, options.count);
    requirePromptsFit(requests, model.config, options.settings.maxNewTokens);
    const engine::SamplingOptions sampling = samplingOptions(options.settings, model.config, *model.tokenizer);
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
        std::string name = "sensitivity " + result.format;
        const std::vector<std::int64_t> layers = normalizedLayers(options.layers); // a unit's share
        for (std::size_t i = 0; i < layers.size(); ++i) {
            name += (i == 0 ? " layers " : ",") + std::to_string(layers[i]);
        }
        result.runId = store.beginRun({name, "sensitivity", configJson, std::nullopt});
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
            if (!options.layers.empty()) {
                // A unit: the scan assembled from it measures no BF16 unit, and the cells' paired intervals do not
                // give the unit's own, so it is kept here with the scan.
                nlohmann::json withUnit = nlohmann::json::parse(configJson);
                withUnit["bf16_unit"]
                    = {{"estimate", result.bf16UnitInterval.estimate}, {"low", result.bf16UnitInterval.low},
                        {"high", result.bf16UnitInterval.high}, {"confidence", result.bf16UnitInterval.confidence},
                        {"resamples", result.bf16UnitInterval.resamples}, {"tokens", result.unitTokens}};
                scan.configJson = withUnit.dump();
            }
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

// What an assembly takes from the unit scans of its request.
struct UnitScans {
    nlohmann::json runs = nlohmann::json::array(); // {"run_id", "layers"} of each unit scan, as stored
    std::int64_t unitRun = 0; // the unit scan whose BF16 unit the others must equal
    std::optional<double> bf16Unit;
    nlohmann::json bf16UnitInterval; // its scan row's "bf16_unit" ({"estimate", ..., "tokens"})
    std::vector<std::pair<std::int64_t, nlohmann::json>> inputs; // each unit run's input digests
    // Each cell and the unit run it was taken from.
    std::map<std::pair<std::int64_t, std::string>, std::pair<store::SensitivityCell, std::int64_t>> cells;
};

// Everything but `seconds` (wall-clock): a cell in two units was measured twice from the same seeds.
bool sameMeasurement(const store::SensitivityCell& a, const store::SensitivityCell& b)
{
    return a.mismatch == b.mismatch && a.addedMismatch == b.addedMismatch && a.ciLow == b.ciLow && a.ciHigh == b.ciHigh
        && a.mismatchCiLow == b.mismatchCiLow && a.mismatchCiHigh == b.mismatchCiHigh && a.tokens == b.tokens;
}

// The finished unit scans in `store` whose record is `record` but for their layers and input digests. InputError
// naming "from_units" when two of them disagree (another BF16 unit, another number for one cell): they were not
// measured alike, and no single-process scan has both.
UnitScans unitScans(const store::RunStore& store, const nlohmann::json& record)
{
    UnitScans units;
    for (const store::SensitivityScanInfo& info : store::sensitivityScans(store)) {
        if (info.status != "finished" || !info.runId) {
            continue;
        }
        const auto run = store.run(*info.runId);
        if (!run || run->kind != "sensitivity") {
            continue;
        }
        nlohmann::json config = nlohmann::json::parse(run->configJson, nullptr, false);
        if (!config.is_object() || !config.contains("layers")) {
            continue; // not a unit (a scan of every cell, an assembled one)
        }
        const nlohmann::json layers = config.at("layers");
        const nlohmann::json inputs = config.contains("inputs") ? config.at("inputs") : nlohmann::json();
        config.erase("layers");
        config.erase("inputs");
        if (config != record) {
            continue; // a unit of another scan
        }
        const std::string where = "unit scan run " + std::to_string(run->id);
        const auto scan = store::sensitivityScan(store, info.id);
        const nlohmann::json scanConfig = nlohmann::json::parse(scan->info.configJson, nullptr, false);
        if (!info.bf16Unit || !scanConfig.is_object() || !scanConfig.contains("bf16_unit")) {
            throw InputError("sensitivity", "from_units",
                where + " kept no BF16 unit interval with its scan (scan " + std::to_string(info.id)
                    + "); measure that unit again");
        }
        if (!units.bf16Unit) {
            units.unitRun = run->id;
            units.bf16Unit = info.bf16Unit;
            units.bf16UnitInterval = scanConfig.at("bf16_unit");
        } else if (*info.bf16Unit != *units.bf16Unit || scanConfig.at("bf16_unit") != units.bf16UnitInterval) {
            throw InputError("sensitivity", "from_units",
                where + " measured another BF16 unit than unit scan run " + std::to_string(units.unitRun) + " ("
                    + scanConfig.at("bf16_unit").dump() + " vs " + units.bf16UnitInterval.dump()
                    + "): the units were not measured alike (another build or device?), so no scan has both");
        }
        for (const store::SensitivityCell& cell : scan->cells) {
            const auto [found, added]
                = units.cells.emplace(std::make_pair(cell.layer, cell.moduleGroup), std::make_pair(cell, run->id));
            if (!added && !sameMeasurement(found->second.first, cell)) {
                throw InputError("sensitivity", "from_units",
                    "the cell " + cell.moduleGroup + " of layer " + std::to_string(cell.layer) + " differs between "
                        + where + " and unit scan run " + std::to_string(found->second.second)
                        + ": the units were not measured alike, so no scan has both");
            }
        }
        units.runs.push_back({{"run_id", run->id}, {"layers", layers}});
        units.inputs.emplace_back(run->id, inputs);
    }
    return units;
}

// InputError naming the first file whose digest now differs from the one unit scan `runId` stored (or that only one
// of the two has): the unit's cells are not of these inputs.
void checkUnitInputs(const nlohmann::json& stored, const nlohmann::json& now, std::int64_t runId)
{
    if (stored == now) {
        return;
    }
    const std::string unit = "unit scan run " + std::to_string(runId);
    for (const auto& item : now.items()) {
        if (!stored.is_object() || !stored.contains(item.key()) || stored.at(item.key()) != item.value()) {
            throw InputError(item.key(), "",
                "changed since " + unit + " measured it (or the unit did not read it): the unit's cells are not "
                    + "of this file; measure the unit again");
        }
    }
    for (const auto& item : stored.items()) {
        if (!now.contains(item.key())) {
            throw InputError(item.key(), "", "was an input of " + unit + " and is no longer one of the model's files");
        }
    }
}

// The scan assembled from the unit scans in `store` (fromUnits, see sensitivity.h "Units"): a fresh one, or the
// continuation of stored run `resumeRunId` (its config_json text kept as stored), which the assembly's one
// transaction left without a scan.
SensitivityResult assembleScan(store::RunStore& store, const SensitivityOptions& options, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::string& storedConfigJson,
    const std::function<void(std::int64_t)>& onRunStarted)
{
    const auto started = std::chrono::steady_clock::now();
    if (!options.layers.empty()) {
        throw InputError("sensitivity", "from_units",
            "assembles the cells of every layer from the unit scans; it cannot be given with layers");
    }
    progress.update(0.0, "finding the unit scans");
    const model::ModelConfig modelConfig = scanModelConfig(options.modelDirectory);
    const std::vector<SensitivityCellSpec> cells
        = sensitivityCells(modelConfig, options.kvCells, options.embeddingCells);
    const nlohmann::json record = nlohmann::json::parse(sensitivityConfigJson(options));
    const UnitScans units = unitScans(store, record);
    // Refused before anything is stored: the assembly runs once every unit is merged.
    std::set<std::int64_t> missing;
    for (const SensitivityCellSpec& cell : cells) {
        if (units.cells.count({cell.layer, cell.group}) == 0) {
            missing.insert(cell.layer);
        }
    }
    if (!missing.empty()) {
        std::string names;
        for (const std::int64_t layer : missing) { // -1 first
            names += (names.empty() ? "" : ", ") + layerText(layer);
        }
        throw InputError("sensitivity", "from_units",
            "no finished unit scan of this scan in the workspace has the cells of layer"
                + std::string(missing.size() > 1 ? "s " : " ") + names + " (" + std::to_string(units.runs.size())
                + " unit scan(s) found): run those units (sensitivity --layers) and merge their shards first "
                  "(mismatch store merge)");
    }
    std::vector<std::string> inputs = modelFiles(options.modelDirectory);
    inputs.push_back(options.promptSetPath);
    const nlohmann::json digests = fileDigests(inputs);
    for (const auto& [runId, stored] : units.inputs) {
        checkUnitInputs(stored, digests, runId);
    }

    SensitivityResult result;
    result.format = scanFormat(options.weights, options.activations);
    result.layers = modelConfig.numLayers;
    result.bf16Unit = *units.bf16Unit;
    try {
        const nlohmann::json& unit = units.bf16UnitInterval;
        result.bf16UnitInterval = {unit.at("estimate").get<double>(), unit.at("low").get<double>(),
            unit.at("high").get<double>(), unit.at("confidence").get<double>(), unit.at("resamples").get<int>()};
        result.unitTokens = unit.at("tokens").get<std::int64_t>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError("sensitivity", "from_units",
            "unit scan run " + std::to_string(units.unitRun)
                + " kept a malformed BF16 unit: " + jsonErrorDetail(error));
    }
    std::string configJson = storedConfigJson;
    if (resumeRunId) {
        result.runId = *resumeRunId;
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max());
    } else {
        // The record and inputs of the single-process scan, and where its cells come from.
        nlohmann::json config = record;
        config["inputs"] = digests;
        config["assembled_from"] = units.runs;
        configJson = config.dump();
        result.runId = store.beginRun({"sensitivity " + result.format, "sensitivity", configJson, std::nullopt});
    }
    if (onRunStarted) {
        onRunStarted(result.runId);
    }
    store::recordRunOutcome(store, result.runId, [&] {
        progress.checkCancelled();
        // One transaction: the scan with every cell or, on any error, none (a resume assembles it again).
        store::Transaction transaction(store.handle());
        store::SensitivityScanInfo scan;
        scan.runId = result.runId;
        scan.format = result.format;
        scan.bf16Unit = result.bf16Unit;
        scan.configJson = configJson;
        result.scanId = store::addSensitivityScan(store, scan);
        for (const SensitivityCellSpec& spec : cells) {
            const store::SensitivityCell& cell = units.cells.at({spec.layer, spec.group}).first;
            store::addSensitivityCell(store, result.scanId, cell);
            result.cells.push_back(cell);
        }
        store.finishRun(result.runId, store::RunStatus::Finished);
        transaction.commit();
    });
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace

SensitivityResult runSensitivity(store::RunStore& store, const SensitivityOptions& options, Progress& progress)
{
    if (options.fromUnits) {
        return assembleScan(store, options, progress, std::nullopt, "", options.onRunStarted);
    }
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
    if (options.fromUnits) {
        return assembleScan(store, options, progress, runId, run.info.configJson, options.onRunStarted);
    }
    return measureScan(store, options, progress, runId, run.info.configJson, options.onRunStarted);
}

} // namespace mismatch::analysis

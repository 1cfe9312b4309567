#include "core/jobs/analysis_jobs.h"

#include "core/jobs/experiment_jobs.h"
#include "core/jobs/model_jobs.h"
#include "core/jobs/training_jobs.h"
#include "core/jobs/parameter_builders.h"
#include "core/jobs/report_job.h"
#include "core/jobs/stored_specs.h"

#include "core/analysis/calibrate.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/common/byte_size.h"
#include "core/model/memory_check.h"
#include "core/quant/formats.h"
#include "core/quant/recipe.h"
#include "core/store/analysis_store.h"

#include <filesystem>
#include <sstream>

namespace mismatch::jobs {

namespace {

// The sampling / measurement parameters the analyses share (the options of `addAnalysisOptions` before the
// catalogue). `fromProtocol`: the parameters that set the measurement protocol have no default, so that an unset
// one is taken from a calibration's protocol (admit).
std::vector<Parameter> analysisParameters(bool fromProtocol)
{
    const auto protocolDefault = [fromProtocol](nlohmann::json value) {
        return fromProtocol ? nlohmann::json() : value;
    };
    const std::string fromCalibration = fromProtocol ? " (default: the calibration's protocol, else " : " (";
    const auto help = [&](const std::string& text, const std::string& defaultText) {
        return fromProtocol ? text + fromCalibration + defaultText + ")" : text;
    };
    return {
        ranged(param("count", ParameterType::Integer, "--count", "Prompts (first N)",
                   help("Use the first N prompts of the set (0: all)", "0"), protocolDefault(0)),
            0),
        ranged(param("max_tokens", ParameterType::Integer, "--max-tokens", "Generated tokens per prompt",
                   help("Generated tokens per prompt at most", "64"), protocolDefault(64)),
            0, true),
        ranged(param("seed", ParameterType::Integer, "--seed", "Sampling seed",
                   help("Sampling seed (combined with each prompt's id)", "0"), protocolDefault(0)),
            0),
        ranged(param("temperature", ParameterType::Number, "--temperature", "Temperature",
                   help("Sampling temperature (0: greedy)", "1"), protocolDefault(1.0)),
            0),
        ranged(param("top_p", ParameterType::Number, "--top-p", "Top p",
                   help("Nucleus sampling threshold in (0, 1]", "1"), protocolDefault(1.0)),
            0, true, 1.0),
        ranged(param("top_k", ParameterType::Integer, "--top-k", "Top k",
                   help("Keep the K most probable tokens (0: off)", "0"), protocolDefault(0)),
            0),
        choice(param("kv_scale_fit", ParameterType::Choice, "--kv-scale-fit", "KV-scale fit",
                   help("FP8 KV-cache scales: fitted_per_measurement (on every prompt measured) or frozen_first_batch "
                        "(the engine's own prefill of the first --kv-first-batch prompts, as a training run's first "
                        "step)",
                       "fitted_per_measurement"),
                   protocolDefault("fitted_per_measurement")),
            {"fitted_per_measurement", "frozen_first_batch"}),
        ranged(param("kv_first_batch", ParameterType::Integer, "--kv-first-batch", "KV first batch",
                   help("Prompts of the first batch that frozen_first_batch fits the KV scales on", "32"),
                   protocolDefault(32)),
            0, true),
        ranged(param("batch", ParameterType::Integer, "--batch", "Batch", "Prompts generated and scored together", 16),
            0, true),
        ranged(param("resamples", ParameterType::Integer, "--resamples", "Bootstrap resamples",
                   "Bootstrap resamples (prompts resampled)", 10000),
            1, false, 10000000),
        ranged(param("confidence", ParameterType::Number, "--confidence", "Confidence", "Bootstrap interval confidence",
                   0.95),
            0.5, false, 0.999999),
        ranged(param("bootstrap_seed", ParameterType::Integer, "--bootstrap-seed", "Bootstrap seed", "Bootstrap seed",
                   20261108),
            0),
        param("kv_memory", ParameterType::Text, "--kv-memory", "KV-cache memory",
            "Memory of each engine's paged KV cache (256MiB, 1GiB, ...)", "256MiB"),
        deviceParameter("cpu"),
    };
}

const char* const kProtocolParameters[]
    = {"count", "max_tokens", "seed", "temperature", "top_p", "top_k", "kv_scale_fit", "kv_first_batch"};

analysis::KvScalePolicy kvScalePolicy(const std::string& text)
{
    return text == "frozen_first_batch" ? analysis::KvScalePolicy::FrozenFirstBatch
                                        : analysis::KvScalePolicy::FittedPerMeasurement;
}

// The measurement settings of a spec: every given parameter over `s` (by default the defaults of MeasureSettings).
analysis::MeasureSettings measureSettings(const JobSpec& spec, analysis::MeasureSettings s = {})
{
    if (spec.given("max_tokens")) {
        s.maxNewTokens = spec.integer("max_tokens");
    }
    if (spec.given("seed")) {
        s.seed = static_cast<std::uint64_t>(spec.integer("seed"));
    }
    if (spec.given("temperature")) {
        s.temperature = spec.number("temperature");
    }
    if (spec.given("top_p")) {
        s.topP = spec.number("top_p");
    }
    if (spec.given("top_k")) {
        s.topK = spec.integer("top_k");
    }
    if (spec.given("kv_scale_fit")) {
        s.kvScales = kvScalePolicy(spec.text("kv_scale_fit"));
    }
    if (spec.given("kv_first_batch")) {
        s.kvFirstBatch = spec.integer("kv_first_batch");
    }
    s.batchSize = spec.integer("batch");
    s.bootstrap.resamples = static_cast<int>(spec.integer("resamples"));
    s.bootstrap.confidence = spec.number("confidence");
    s.bootstrap.seed = static_cast<std::uint64_t>(spec.integer("bootstrap_seed"));
    s.kvCacheBytes = parseByteSize(spec.text("kv_memory"), "kv_memory"); // checked by checkByteSize
    s.device = parseDevice(spec.text("device"), "device", ""); // one of the choices: available here
    return s;
}

// A parameter's value as core parses it, as a ParameterError (core's InputError names the parameter).
template <typename Parse> void checkParsed(std::vector<ParameterError>& errors, const std::string& name, Parse&& parse)
{
    try {
        parse();
    } catch (const InputError& error) {
        errors.push_back({name, error.detail()});
    }
}

// A memory size ("256MiB"); `allocated`: memory the job allocates, which must fit the machine.
void checkByteSize(std::vector<ParameterError>& errors, const JobSpec& spec, const std::string& name, bool allocated)
{
    const std::string text = spec.text(name);
    std::uint64_t bytes = 0;
    try {
        bytes = parseByteSize(text, name);
    } catch (const InputError& error) {
        errors.push_back({name, error.detail()});
        return;
    }
    if (allocated) {
        try {
            model::checkRequestFits(text, bytes);
        } catch (const InputError& error) {
            errors.push_back({name, text + " " + error.detail()});
        }
    }
}

quant::ActivationPrecision activationPrecision(const JobSpec& spec)
{
    quant::ActivationPrecision activations;
    activations.format = *quant::parseActivationFormat(spec.text("activations"));
    return activations;
}

Parameter formatParameter(const std::string& help)
{
    return param("format", ParameterType::Text, "--format,-f", "Quantize each cell's weights to", help);
}

Parameter activationsParameter(const std::string& help)
{
    return choice(param("activations", ParameterType::Choice, "--activations", "... and its input activations to",
                      help, "bf16"),
        quant::activationFormatChoices());
}

Parameter kvScalesParameter(const std::string& help)
{
    return choice(param("kv_scales", ParameterType::Choice, "--kv-scales", "KV-cache scales", help, "per_tensor"),
        {"per_tensor", "per_head"});
}

Parameter kvFormatParameter(const std::string& help)
{
    return choice(param("kv_format", ParameterType::Choice, "--kv-format", "KV-cache format", help, "fp8_e4m3"),
        {"fp8_e4m3", "fp8_per_token_head", "int8_per_token_head"});
}

// The KV precision of a scan's KV cells or a built recipe's KV cache: fp8_e4m3 with kv_scales (calibrated on the
// probe prompts), or one of vLLM's per-token-head formats, which take neither scales nor calibration.
quant::KvPrecision kvPrecision(const JobSpec& spec)
{
    quant::KvPrecision kv;
    kv.format = *quant::parseKvFormat(spec.text("kv_format"));
    if (kv.format == quant::KvFormat::Fp8E4m3) {
        kv.scales = *quant::parseKvScales(spec.text("kv_scales"));
        kv.calibration = quant::KvCalibration::Probe;
    }
    return kv;
}

// kv_scales belongs to fp8_e4m3: with a per-token-head kv_format it would be ignored, so it is refused.
void checkKvScales(std::vector<ParameterError>& errors, const JobSpec& spec)
{
    if (spec.isSet("kv_scales") && spec.text("kv_format") != "fp8_e4m3") {
        errors.push_back({"kv_scales",
            "only the fp8_e4m3 KV format takes scales; " + spec.text("kv_format")
                + " computes one per token and KV head at each cache write"});
    }
}

Parameter modelParameter(const std::string& help)
{
    return param("model", ParameterType::Path, "MODEL", "Model directory", help);
}

// The check of the analyses whose only check across parameters is the engine memory's size.
std::vector<ParameterError> checkKvMemory(const JobSpec& spec)
{
    std::vector<ParameterError> errors;
    checkByteSize(errors, spec, "kv_memory", true);
    return errors;
}

Parameter promptsParameter(const std::string& label, const std::string& help)
{
    return param("prompts", ParameterType::Path, "--prompts,-p", label, help);
}

// One rollout configuration's weight noise (admit's single candidate, prefix shift's configuration).
std::vector<Parameter> noiseParameters(const std::string& noiseHelp)
{
    return {noiseSigmaRange(param("noise", ParameterType::Number, "--noise", "Weight noise sigma (relative to RMS)",
                                noiseHelp, 0.0),
                false),
        ranged(param("noise_seed", ParameterType::Integer, "--noise-seed", "Noise seed", "Seed of the weight noise", 0),
            0),
        param("noise_modules", ParameterType::Text, "--noise-modules", "Noisy modules",
            "Recipe pattern of the noisy modules", "*")};
}

void checkFormat(std::vector<ParameterError>& errors, const JobSpec& spec)
{
    if (spec.given("format")) {
        checkParsed(errors, "format", [&] { analysis::parseWeightPrecision(spec.text("format"), "format"); });
    }
}

} // namespace

// ---------------------------------------------------------------------------------------------------- sensitivity

analysis::SensitivityOptions sensitivityOptions(const JobSpec& spec)
{
    analysis::SensitivityOptions options;
    options.modelDirectory = spec.text("model");
    options.promptSetPath = spec.text("prompts");
    options.count = spec.integer("count");
    options.settings = measureSettings(spec);
    options.weights = analysis::parseWeightPrecision(spec.text("format"), "format");
    options.activations = activationPrecision(spec);
    options.kv = kvPrecision(spec);
    options.kvCells = !spec.flag("no_kv");
    options.embeddingCells = !spec.flag("no_embedding");
    options.layers = spec.integers("layers");
    options.fromUnits = spec.flag("from_units");
    return options;
}

JobDefinition sensitivityJob()
{
    JobDefinition job = definition("sensitivity", {"sensitivity"},
        "Layer sensitivity: the mismatch each cell adds over the BF16 unit when only it is quantized");
    job.parameters = {
        required(modelParameter("Model directory (the FP32 trainer and the engine's weights)")),
        required(formatParameter("Weight format of a quantized cell: fp8_e4m3[:block128|channel|tensor], "
                                 "fp8_e5m2[:...], int8, int4, mxfp8, mxfp4, nvfp4, fp16, bf16")),
        required(promptsParameter("Prompt set (JSONL)", "Prompt set (JSONL)")),
        activationsParameter("Input activations of a quantized projection: bf16 | fp8_e4m3 | mxfp8 | mxfp4 | nvfp4 "
                             "(a microscaling format with weights of the same format)"),
        kvFormatParameter("Format of the KV cells: fp8_e4m3 (calibrated scales) | fp8_per_token_head | "
                          "int8_per_token_head (vLLM's dynamic formats: a scale per token and KV head)"),
        kvScalesParameter("Scales of the fp8_e4m3 KV cells: per_tensor | per_head"),
        param("no_kv", ParameterType::Flag, "--no-kv", "Skip each layer's KV-cache cell",
            "Skip the KV-cache-only cells", false),
        param("no_embedding", ParameterType::Flag, "--no-embedding", "Skip the embedding / lm_head cells",
            "Skip the embedding / lm_head cells", false),
        // Scale-out (core/jobs/cluster.h): each unit scans some layers in its own shard, the merged workspace
        // assembles them.
        ranged(param("layers", ParameterType::IntegerList, "--layers", "Layers only",
                   "Scan only the cells of these layers (-1: the embedding / lm_head cells; default: every layer): "
                   "how a cluster unit (mismatch submit) scans its share"),
            -1),
        param("from_units", ParameterType::Flag, "--from-units", "Assemble from the unit scans",
            "Assemble the scan from the finished unit scans (--layers) merged into this workspace; measures nothing",
            false),
    };
    job.parameters.back().excludes = {"layers"};
    const auto shared = analysisParameters(false);
    job.parameters.insert(job.parameters.end(), shared.begin(), shared.end());
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        checkFormat(errors, spec);
        checkKvScales(errors, spec);
        checkByteSize(errors, spec, "kv_memory", true);
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>& onRunStarted) {
        analysis::SensitivityOptions options = sensitivityOptions(spec);
        options.onRunStarted = onRunStarted;
        return analysis::toJson(analysis::runSensitivity(store, options, progress), options);
    };
    job.resultFields = {"scan_id", "run_id", "format", "kv_format", "layers", "bf16_unit", "bf16_unit_tokens", "cells",
        "seconds"};
    job.runKind = "sensitivity";
    job.resume = [](store::RunStore& store, std::int64_t runId, Progress& progress,
                     const std::function<void(std::int64_t)>& onRunStarted) {
        analysis::SensitivityOptions options = sensitivityOptions(storedSpec(store, runId, "sensitivity"));
        options.onRunStarted = onRunStarted;
        return analysis::toJson(analysis::resumeSensitivity(store, runId, options, progress), options);
    };
    return job;
}

// --------------------------------------------------------------------------------------------------- recipe build

std::string budgetSource(const JobSpec& spec)
{
    return spec.given("calibration") ? "calibration " + std::to_string(spec.integer("calibration")) : "budget";
}

analysis::RecipeBuildOptions recipeBuildOptions(const JobSpec& spec, const store::RunStore& store)
{
    analysis::RecipeBuildOptions options;
    if (spec.given("scan")) {
        options.scanId = spec.integer("scan");
    } else {
        options.scan.modelDirectory = spec.text("model");
        options.scan.promptSetPath = spec.text("prompts");
        options.scan.count = spec.integer("count");
        options.scan.settings = measureSettings(spec);
        options.scan.weights = analysis::parseWeightPrecision(spec.text("format"), "format");
        options.scan.activations = activationPrecision(spec);
        options.scan.kvCells = spec.flag("kv_cache");
        options.scan.embeddingCells = !spec.flag("no_embedding");
    }
    options.scan.kv = kvPrecision(spec);
    options.quantizeKv = spec.flag("kv_cache");
    options.keepEmbeddingBf16 = spec.flag("no_embedding");
    options.targetFraction = spec.number("target_fraction");
    options.outPath = spec.text("out");
    options.name = spec.text("name");
    options.kvMemoryBytes = parseByteSize(spec.text("capacity_memory"), "capacity_memory");
    if (spec.given("calibration")) {
        const std::int64_t id = spec.integer("calibration");
        const std::optional<std::int64_t> step
            = spec.given("step") ? std::optional<std::int64_t>(spec.integer("step")) : std::nullopt;
        // The bracket of the model's optimizer step, as `admit` chooses one for a checkpoint.
        std::string modelDirectory = options.scan.modelDirectory;
        if (options.scanId) {
            const auto scan = store::sensitivityScan(store, *options.scanId);
            if (!scan) {
                throw StoreError(store.path(), "has no sensitivity scan with id " + std::to_string(*options.scanId));
            }
            modelDirectory = analysis::parseSensitivityConfig(scan->info.configJson,
                store.path() + " (sensitivity scan " + std::to_string(*options.scanId) + " config_json)")
                                 .modelDirectory;
        }
        const analysis::BudgetChoice choice = analysis::budgetForModel(store, id, step, modelDirectory);
        options.budget = choice.budget;
        options.budgetNote = choice.note;
        // The recipes are measured under the budget's protocol, so that they compare with its threshold.
        const auto stored = store::calibration(store, id);
        options.protocol = stored ? analysis::storedProtocol(stored->info.configJson, store.path()) : std::nullopt;
    } else {
        options.budget = spec.number("budget");
    }
    return options;
}

JobDefinition recipeBuildJob()
{
    JobDefinition job = definition("recipe_build", {"recipe", "build"},
        "Build a recipe: keep the most sensitive cells in BF16 until the measured mismatch is at most "
        "target_fraction x the budget; write it");
    Parameter budget = ranged(
        param("budget", ParameterType::Number, "--budget", "Budget (nats/token)", "Mismatch budget, nats per token"), 0,
        true);
    budget.excludes = {"calibration"};
    Parameter step = param("step", ParameterType::Integer, "--step", "Calibration step",
        "Training step of the calibration's bracket (when it has several)");
    step.needs = {"calibration"};
    job.parameters = {
        modelParameter("Model directory (ignored with --scan: the scan's model is used)"),
        formatParameter("Weight format: fp8_e4m3[:block128|channel|tensor], fp8_e5m2[:...], int8, int4, mxfp8, "
                        "mxfp4, nvfp4, fp16 (without --scan)"),
        promptsParameter("Prompt set (JSONL)", "Prompt set (JSONL) the mismatch is measured on (without --scan)"),
        activationsParameter("Activations of quantized projections: bf16 | fp8_e4m3 | mxfp8 | mxfp4 | nvfp4 (a "
                             "microscaling format with weights of the same format)"),
        kvFormatParameter("Format of the KV cache (with --kv-cache): fp8_e4m3 | fp8_per_token_head | "
                          "int8_per_token_head"),
        kvScalesParameter("Scales of the fp8_e4m3 KV cache: per_tensor | per_head"),
        budget,
        param("calibration", ParameterType::Integer, "--calibration", "Calibration",
            "Take the budget from a stored calibration's admission threshold"),
        step,
        ranged(param("target_fraction", ParameterType::Number, "--target-fraction", "Target fraction of the budget",
                   "Target: measured mismatch <= this x budget", 0.5),
            0, true, 1.0),
        param("scan", ParameterType::Integer, "--scan", "Sensitivity scan",
            "Order cells by this stored sensitivity scan (else scan now)"),
        param("kv_cache", ParameterType::Flag, "--kv-cache", "Quantize the KV cache",
            "Also quantize the KV cache (to --kv-format) and keep sensitive layers' KV in BF16", false),
        param("no_embedding", ParameterType::Flag, "--no-embedding", "Leave the embedding / lm_head in BF16",
            "Leave the embedding and lm_head in BF16 (a stored scan's embedding cells are not used either): vLLM and "
            "llm-compressor exports quantize linear layers only",
            false),
        required(param("out", ParameterType::Path, "--out,-o", "Recipe file", "Recipe file to write (.yaml, .yml or .json)")),
        param("name", ParameterType::Text, "--name", "Recipe name", "Recipe name (default built-<format>)"),
        param("capacity_memory", ParameterType::Text, "--capacity-memory", "Capacity memory",
            "KV memory for the capacity report", "8GiB"),
    };
    const auto shared = analysisParameters(false);
    job.parameters.insert(job.parameters.end(), shared.begin(), shared.end());
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        if (!spec.given("scan")) {
            for (const char* name : {"model", "format", "prompts"}) {
                if (!spec.given(name)) {
                    errors.push_back({name, "needed without 'scan' (to scan the model first)"});
                }
            }
        }
        if (!spec.given("budget") && !spec.given("calibration")) {
            errors.push_back({"budget", "give 'budget' (nats per token) or 'calibration'"});
        }
        checkFormat(errors, spec);
        checkKvScales(errors, spec);
        checkByteSize(errors, spec, "kv_memory", true);
        checkByteSize(errors, spec, "capacity_memory", false);
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        const analysis::RecipeBuildOptions options = recipeBuildOptions(spec, store);
        // The recipe's folder is made (a job file or a dialog may name a new one).
        const std::filesystem::path folder = std::filesystem::absolute(options.outPath).parent_path();
        std::filesystem::create_directories(folder);
        return analysis::toJson(analysis::buildRecipe(store, options, progress), options, budgetSource(spec));
    };
    job.resultFields = {"recipe_file", "recipe_id", "run_id", "scan_id", "format", "budget", "budget_source", "target",
        "target_fraction", "bf16_unit", "mismatch", "bf16_cells", "quantized_cells", "steps", "weight_bytes",
        "bf16_weight_bytes", "weight_ratio", "kv_memory_bytes", "kv_tokens", "bf16_kv_tokens", "kv_capacity_ratio",
        "seconds", "protocol", "scan_protocol_differs"};
    job.runKind = "recipe_build";
    return job;
}

// ---------------------------------------------------------------------------------------------------------- admit

std::vector<analysis::Candidate> candidatesOf(const JobSpec& spec)
{
    if (spec.given("candidates")) {
        return analysis::loadCandidates(spec.text("candidates"));
    }
    analysis::Candidate candidate;
    candidate.recipePath = spec.text("recipe");
    candidate.staleness = spec.integer("staleness");
    candidate.noise = spec.number("noise");
    candidate.noiseSeed = static_cast<std::uint64_t>(spec.integer("noise_seed"));
    candidate.noiseModules = spec.text("noise_modules");
    if (spec.given("name")) {
        candidate.name = spec.text("name");
    } else {
        // Named after everything that makes it differ from the BF16 engine, as the shipped candidates are
        // ("bf16+noise-0.05"), so that a stored decision does not call a noisy or stale engine "bf16".
        candidate.name
            = candidate.recipePath.empty() ? "bf16" : std::filesystem::path(candidate.recipePath).stem().string();
        if (candidate.staleness > 0) {
            candidate.name += "+stale-" + std::to_string(candidate.staleness);
        }
        if (candidate.noise > 0.0) {
            std::ostringstream sigma;
            sigma << candidate.noise; // shortest form at 6 significant digits: 0.05, 1e-05
            candidate.name += "+noise-" + sigma.str();
        }
    }
    return {candidate};
}

namespace {

// The candidate parameters admit and breakdown share: a candidates file, or one configuration (recipe, staleness,
// noise, name) that excludes it.
std::vector<Parameter> candidateParameters()
{
    const auto oneCandidate = [](Parameter p) {
        p.excludes = {"candidates"};
        return p;
    };
    std::vector<Parameter> parameters = {
        param("candidates", ParameterType::Path, "--candidates,-c", "Candidates file",
            "YAML list of candidates {name, recipe, staleness, noise, noise_seed, noise_modules}"),
        oneCandidate(param("recipe", ParameterType::Path, "--recipe,-r", "Recipe",
            "One candidate's recipe (default: the BF16 engine)")),
        oneCandidate(ranged(param("staleness", ParameterType::Integer, "--staleness", "Staleness",
                                "One candidate's staleness k in optimizer steps: the engine uses the checkpoint k "
                                "steps older (see --history)",
                                0),
            0)),
    };
    for (const Parameter& noise : noiseParameters("One candidate's weight noise sigma (relative to RMS)")) {
        parameters.push_back(oneCandidate(noise));
    }
    parameters.push_back(oneCandidate(param("name", ParameterType::Text, "--name", "Candidate name",
        "One candidate's name (default: the recipe file's name, or bf16, then +stale-K and +noise-SIGMA where given)")));
    return parameters;
}

Parameter historyParameter()
{
    return param("history", ParameterType::PathList, "--history", "Older checkpoints",
        "Older checkpoints of the same student (oldest first), used only as stale engine weights");
}

} // namespace

analysis::AdmissionOptions admissionOptions(const JobSpec& spec, const store::RunStore& store)
{
    analysis::AdmissionOptions options;
    options.checkpoints = spec.strings("students");
    options.history = spec.strings("history");
    options.probePath = spec.text("prompts");
    options.count = spec.integer("count");
    options.settings = measureSettings(spec);
    options.measureUnit = !spec.flag("no_unit");
    options.storedGenerations = spec.integer("store_generations");
    options.candidates = candidatesOf(spec);
    if (!spec.given("calibration")) {
        options.threshold = spec.number("threshold");
        return options;
    }
    options.calibrationId = spec.integer("calibration");
    options.steps = spec.integers("step");
    options.allowProtocolMismatch = spec.flag("allow_protocol_mismatch");
    bool protocolGiven = spec.given("prompts");
    for (const char* name : kProtocolParameters) {
        protocolGiven = protocolGiven || spec.given(name);
    }
    if (!protocolGiven) {
        return options; // measured under the calibration's protocol
    }
    // Options that set the protocol are laid over the calibration's; core compares the result with it and refuses a
    // difference unless allow_protocol_mismatch.
    options.protocolFromCalibration = false;
    const auto stored = store::calibration(store, *options.calibrationId);
    const auto protocol = stored ? analysis::storedProtocol(stored->info.configJson, store.path()) : std::nullopt;
    if (protocol) {
        options.settings = measureSettings(spec, analysis::applyProtocol(*protocol, options.settings));
        options.probePath = spec.given("prompts") ? spec.text("prompts") : protocol->prompts;
        options.count = spec.given("count") ? spec.integer("count") : protocol->count;
    }
    return options;
}

JobDefinition admitJob()
{
    JobDefinition job = definition("admit", {"admit"},
        "Admission check: screen candidate rollout configurations at student checkpoints against a budget");
    Parameter step = param("step", ParameterType::IntegerList, "--step", "Calibration step",
        "Calibration step(s) of the bracket: one for all checkpoints or one per checkpoint (default: each "
        "checkpoint's own optimizer step, else the nearest earlier bracket)");
    step.needs = {"calibration"};
    Parameter allow = param("allow_protocol_mismatch", ParameterType::Flag, "--allow-protocol-mismatch",
        "Screen under another protocol",
        "Screen under probe/sampling/KV options that differ from the calibration's protocol anyway; the decisions are "
        "labelled as measured under another protocol",
        false);
    allow.needs = {"calibration"};
    Parameter threshold = ranged(param("threshold", ParameterType::Number, "--threshold", "Threshold (nats/token)",
                                     "Explicit threshold, nats per token"),
        0, true);
    threshold.excludes = {"calibration"};
    job.parameters = {
        required(param("students", ParameterType::PathList, "STUDENT", "Student checkpoints",
            "Student checkpoint directories to screen, in training order (each is the FP32 trainer of its decisions)")),
    };
    const std::vector<Parameter> candidates = candidateParameters();
    job.parameters.insert(job.parameters.end(), candidates.begin(), candidates.end());
    job.parameters.insert(job.parameters.end(),
        {
            historyParameter(),
            promptsParameter("Probe prompt set",
                "Probe prompt set (JSONL); with --calibration the calibration's protocol names it"),
            param("calibration", ParameterType::Integer, "--calibration", "Calibration",
                "Stored calibration whose budget bracket gives the threshold; the screen is measured under its "
                "protocol"),
            step,
            allow,
            threshold,
            param("no_unit", ParameterType::Flag, "--no-unit", "Skip the BF16 unit",
                "Skip the BF16 unit per checkpoint (no BF16 multiples)", false),
            ranged(param("store_generations", ParameterType::Integer, "--store-generations",
                       "Generations stored token by token",
                       "Each candidate's generations on the first N prompts stored token by token with per-token KL, "
                       "mu(y), pi(y), entropies and top-5 (the token drill-down; about 400 bytes a token)",
                       8),
                0),
        });
    const auto shared = analysisParameters(true);
    job.parameters.insert(job.parameters.end(), shared.begin(), shared.end());
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        if (!spec.given("prompts") && !spec.given("calibration")) {
            errors.push_back({"prompts", "give the probe prompt set (or 'calibration', whose protocol names it)"});
        }
        if (!spec.given("calibration") && !spec.given("threshold")) {
            errors.push_back({"threshold", "give 'calibration' or 'threshold'"});
        }
        checkByteSize(errors, spec, "kv_memory", true);
        checkNoiseSettings(errors, spec);
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>& onRunStarted) {
        analysis::AdmissionOptions options = admissionOptions(spec, store);
        options.onRunStarted = onRunStarted;
        return analysis::toJson(analysis::runAdmission(store, options, progress));
    };
    job.resultFields = {"run_id", "decisions", "admitted", "protocol", "protocol_differs", "calibration_flags", "seconds"};
    job.runKind = "admit";
    job.resume = [](store::RunStore& store, std::int64_t runId, Progress& progress,
                     const std::function<void(std::int64_t)>& onRunStarted) {
        analysis::AdmissionOptions options = admissionOptions(storedSpec(store, runId, "admit"), store);
        options.onRunStarted = onRunStarted;
        return analysis::toJson(analysis::resumeAdmission(store, runId, options, progress));
    };
    return job;
}

// --------------------------------------------------------------------------------------------------- prefix shift

analysis::PrefixShiftOptions prefixShiftOptions(const JobSpec& spec)
{
    analysis::PrefixShiftOptions options;
    options.modelDirectory = spec.text("model");
    options.promptSetPath = spec.text("prompts");
    options.count = spec.integer("count");
    options.settings = measureSettings(spec);
    if (spec.given("recipe") && !spec.text("recipe").empty()) {
        options.configuration.recipe = quant::loadRecipe(spec.text("recipe"));
        options.recipePath = spec.text("recipe");
    }
    options.configuration.noise = spec.number("noise");
    options.configuration.noiseSeed = static_cast<std::uint64_t>(spec.integer("noise_seed"));
    options.configuration.noiseModules = spec.text("noise_modules");
    options.cap = spec.number("cap");
    options.storedPairs = spec.integer("store_pairs");
    return options;
}

JobDefinition prefixShiftJob()
{
    JobDefinition job = definition("prefix_shift", {"prefix-shift"},
        "Split a configuration's mismatch into its per-token and prefix-shift parts");
    job.parameters = {
        required(modelParameter("Model directory (the FP32 trainer and the engines' weights)")),
        param("recipe", ParameterType::Path, "--recipe,-r", "Recipe",
            "The configuration's recipe (default: BF16, e.g. with --noise)"),
        required(promptsParameter("Prompt set (JSONL)", "Prompt set (JSONL)")),
        ranged(param("cap", ParameterType::Number, "--cap", "TIS / MIS cap",
                   "Cap C > 1 of TIS (min(w, C)) and MIS (keep w in [1/C, C])", 2.0),
            1.0, true, 1e9), // C = 1: MIS keeps only w = 1 exactly and TIS never up-weights; training needs C > 1 too
        ranged(param("store_pairs", ParameterType::Integer, "--store-pairs", "Pairs stored token by token",
                   "Paired generations stored token by token (for the viewer)", 16),
            0),
    };
    const auto noise = noiseParameters("Weight noise sigma relative to each tensor's RMS");
    job.parameters.insert(job.parameters.begin() + 2, noise.begin(), noise.end());
    const auto shared = analysisParameters(false);
    job.parameters.insert(job.parameters.end(), shared.begin(), shared.end());
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors = checkKvMemory(spec);
        checkNoiseSettings(errors, spec);
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        return analysis::toJson(analysis::runPrefixShift(store, prefixShiftOptions(spec), progress));
    };
    job.resultFields = {"analysis_id", "run_id", "total", "per_token", "prefix_shift", "bf16_unit", "own_tokens",
        "reference_tokens", "pairs", "diverged", "divergence_histogram", "median_divergence", "by_position",
        "corrections", "estimators", "seconds"};
    job.runKind = "prefix_shift";
    return job;
}

// ------------------------------------------------------------------------------------------------------ breakdown

analysis::BreakdownOptions breakdownOptions(const JobSpec& spec)
{
    analysis::BreakdownOptions options;
    options.modelDirectory = spec.text("model");
    options.history = spec.strings("history");
    options.promptSetPath = spec.text("prompts");
    options.count = spec.integer("count");
    options.settings = measureSettings(spec);
    options.shapleyMaxSources = spec.integer("shapley_max");
    options.candidates = candidatesOf(spec);
    return options;
}

JobDefinition breakdownJob()
{
    JobDefinition job = definition("breakdown", {"breakdown"},
        "Where a configuration's mismatch comes from: each source switched on and off on the same prompts and seeds");
    job.parameters = {required(modelParameter("Student checkpoint (the FP32 trainer and the engines' fresh weights)"))};
    const std::vector<Parameter> candidates = candidateParameters();
    job.parameters.insert(job.parameters.end(), candidates.begin(), candidates.end());
    job.parameters.insert(job.parameters.end(),
        {
            historyParameter(),
            required(promptsParameter("Prompt set", "Prompt set (JSONL)")),
            ranged(param("shapley_max", ParameterType::Integer, "--shapley-max", "Shapley up to sources",
                       "Shapley parts for a candidate with at most this many sources (2^n measurements)", 4),
                0, false, 6),
        });
    const auto shared = analysisParameters(false);
    job.parameters.insert(job.parameters.end(), shared.begin(), shared.end());
    job.check = checkKvMemory;
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        return analysis::toJson(analysis::runBreakdown(store, breakdownOptions(spec), progress));
    };
    job.resultFields = {"run_id", "measurements", "seconds", "candidates"};
    job.runKind = "breakdown";
    return job;
}

const std::vector<JobDefinition>& catalogue()
{
    static const std::vector<JobDefinition> jobs = [] {
        std::vector<JobDefinition> all = {sensitivityJob(), recipeBuildJob(), admitJob(), prefixShiftJob(),
            breakdownJob(), trainJob(), calibrateJob(), timeToQualityJob(), compareObjectivesJob(), demoJob(),
            reportJob(), generateJob(), logitsJob(), quantizeJob(), zooBuildJob(), zooShapeJob()};
        for (const io::LogSource source : io::logSources()) {
            all.push_back(importLogJob(source));
        }
        all.push_back(importAimetJob());
        return all;
    }();
    return jobs;
}

} // namespace mismatch::jobs

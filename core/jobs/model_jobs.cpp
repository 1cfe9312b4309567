#include "core/jobs/model_jobs.h"

#include "core/jobs/parameter_builders.h"

#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/engine/engine.h"
#include "core/model/memory_check.h"
#include "core/quant/formats.h"

#include <algorithm>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace mismatch::jobs {

namespace {

// A memory size the job allocates ("1GiB"): parsed, and fitting the machine.
void checkAllocatedSize(std::vector<ParameterError>& errors, const JobSpec& spec, const std::string& name)
{
    const std::string text = spec.text(name);
    try {
        model::checkRequestFits(text, parseByteSize(text, name));
    } catch (const InputError& error) {
        errors.push_back({name, text + " " + error.detail()}); // "1TiB asks for ... but only ... is available"
    }
}

// A memory size that is only a limit ("1GiB").
void checkSize(std::vector<ParameterError>& errors, const JobSpec& spec, const std::string& name)
{
    try {
        parseByteSize(spec.text(name), name);
    } catch (const InputError& error) {
        errors.push_back({name, error.detail()});
    }
}

// An output file parameter that names the same file as an input parameter (it would be overwritten).
void checkOutputIsNoInput(std::vector<ParameterError>& errors, const JobSpec& spec, const std::string& out,
    const std::vector<std::string>& inputs)
{
    for (const std::string& input : inputs) {
        std::error_code error;
        if (spec.given(input) && !spec.text(input).empty() && fs::equivalent(spec.text(out), spec.text(input), error)) {
            errors.push_back(
                {out, "names the same file as '" + input + "' (it would be overwritten); write the output elsewhere"});
        }
    }
}

} // namespace

// ------------------------------------------------------------------------------------------------------- generate

analysis::GenerateOptions generateOptions(const JobSpec& spec)
{
    analysis::GenerateOptions options;
    options.modelDirectory = spec.text("model");
    options.recipe = spec.text("recipe");
    options.precision = spec.text("precision");
    options.prompts = spec.text("prompts");
    options.stalenessFrom = spec.text("staleness_from");
    options.noise = spec.number("noise");
    options.noiseSeed = static_cast<std::uint64_t>(spec.integer("noise_seed"));
    options.noiseModules = spec.text("noise_modules");
    options.sampling.temperature = spec.number("temperature");
    options.sampling.topP = spec.number("top_p");
    options.sampling.topK = spec.integer("top_k");
    options.sampling.maxNewTokens = spec.integer("max_tokens");
    options.sampling.seed = static_cast<std::uint64_t>(spec.integer("seed"));
    options.sampling.stopStrings = spec.strings("stop");
    options.sampling.topLogProbs = spec.integer("top_logprobs");
    options.sampling.ignoreEos = spec.flag("ignore_eos");
    options.kvCacheBytes = parseByteSize(spec.text("kv_memory"), "kv_memory");
    options.kvMemorySource = "kv_memory " + spec.text("kv_memory");
    options.blockSize = spec.integer("block_size");
    options.maxBatch = spec.integer("max_batch");
    options.device = parseDevice(spec.text("device"), "device", ""); // one of the choices: available here
    return options;
}

nlohmann::json generateResultJson(const analysis::GenerateFileResult& r)
{
    return {{"model", r.modelDirectory}, {"weights", r.generated.weightSource},
        {"precision", r.generated.precisionName}, {"noise", r.noise}, {"prompts", r.generated.results.size()},
        {"generated_tokens", r.generatedTokens}, {"waves", r.waves}, {"finish_reasons", r.finishReasons},
        {"rejected", r.rejected}, {"out", r.out}, {"kv_capacity_tokens", r.generated.kvCapacityTokens},
        {"seconds", r.seconds}};
}

JobDefinition generateJob()
{
    JobDefinition job = definition("generate", {"generate"},
        "Generate responses with the emulated rollout engine (paged KV cache, precision recipe, staleness, noise) "
        "and write tokens and per-token log-probabilities of the engine's sampling distribution as JSON Lines");
    Parameter precision = choice(param("precision", ParameterType::Choice, "--precision", "Engine precision",
                                     "Engine precision without a recipe (default bf16)"),
        {"fp32", "bf16"});
    precision.excludes = {"recipe"};
    job.parameters = {
        required(param("model", ParameterType::Path, "--model,-m", "Model directory",
            "Model directory (config.json, safetensors, tokenizer.json)")),
        required(param("prompts", ParameterType::Path, "--prompts,-p", "Prompt set",
            "Prompt set (JSON Lines: id, prompt, answer)")),
        required(
            param("out", ParameterType::Path, "--out,-o", "Output file", "Output JSON Lines, one line per prompt")),
        param("recipe", ParameterType::Path, "--recipe,-r", "Recipe",
            "Precision recipe (YAML or JSON); FP8 KV scales are calibrated on the prompts"),
        precision,
        param("staleness_from", ParameterType::Path, "--staleness-from", "Older checkpoint",
            "Run the engine on this older checkpoint of the same model (weights k steps old)"),
        noiseSigmaRange(param("noise", ParameterType::Number, "--noise", "Weight noise sigma (relative to RMS)",
                            "Gaussian weight noise, relative to each tensor's RMS", 0.0),
            false),
        ranged(param("noise_seed", ParameterType::Integer, "--noise-seed", "Noise seed", "Seed of the weight noise", 0),
            0),
        param("noise_modules", ParameterType::Text, "--noise-modules", "Noisy modules",
            "Modules that get noise (recipe match pattern, e.g. \"model.layers.{0-3}.mlp.*\"; default all)", "*"),
        ranged(param("temperature", ParameterType::Number, "--temperature,-t", "Temperature",
                   "Sampling temperature (0: greedy)", 1.0),
            0),
        ranged(param("top_p", ParameterType::Number, "--top-p", "Top p", "Nucleus sampling mass in (0, 1]", 1.0), 0,
            true, 1.0),
        ranged(
            param("top_k", ParameterType::Integer, "--top-k", "Top k", "Keep the K most probable tokens (0: off)", 0),
            0),
        ranged(param("max_tokens", ParameterType::Integer, "--max-tokens", "Generated tokens per prompt",
                   "Maximum new tokens per prompt", 128),
            0, true),
        ranged(param("seed", ParameterType::Integer, "--seed", "Sampling seed",
                   "Sampling seed (combined with each prompt id)", 0),
            0),
        param("stop", ParameterType::TextList, "--stop", "Stop strings", "Stop string (repeatable)"),
        ranged(param("top_logprobs", ParameterType::Integer, "--top-logprobs", "Top log-probabilities per position",
                   "Also write the K most probable tokens per position", 0),
            0),
        param("ignore_eos", ParameterType::Flag, "--ignore-eos", "Ignore EOS", "Do not stop at the model's EOS token",
            false),
        param("kv_memory", ParameterType::Text, "--kv-memory", "KV-cache memory",
            "Memory of the paged KV cache (e.g. 1GiB, 512MiB, 1e9)", "1GiB"),
        ranged(param("block_size", ParameterType::Integer, "--block-size", "KV-cache block size",
                   "Tokens per KV-cache block", 16),
            0, true),
        ranged(param("max_batch", ParameterType::Integer, "--max-batch", "Sequences per wave",
                   "Sequences per wave (0: as many as the cache holds)", 0),
            0),
        deviceParameter("cpu"),
    };
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        checkAllocatedSize(errors, spec, "kv_memory");
        checkNoiseSettings(errors, spec);
        return errors;
    };
    job.checkInputs = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        checkOutputIsNoInput(errors, spec, "out", {"prompts", "recipe"});
        return errors;
    };
    job.run = [](store::RunStore&, const JobSpec& spec, Progress& progress, const std::function<void(std::int64_t)>&) {
        const analysis::GenerateFileResult r
            = analysis::generateToFile(generateOptions(spec), spec.text("out"), progress);
        // The file holds every other prompt; the job still fails so that a study stops.
        engine::throwIfRejected(r.generated.results);
        return generateResultJson(r);
    };
    job.resultFields = {"model", "weights", "precision", "noise", "prompts", "generated_tokens", "waves",
        "finish_reasons", "rejected", "out", "kv_capacity_tokens", "seconds"};
    return job;
}

// --------------------------------------------------------------------------------------------------------- logits

analysis::ReferenceLogitsOptions logitsOptions(const JobSpec& spec)
{
    analysis::ReferenceLogitsOptions options;
    options.includeAnswer = spec.flag("with_answer");
    options.bf16 = spec.flag("bf16");
    return options;
}

nlohmann::json logitsResultJson(const analysis::ReferenceLogitsFile& r)
{
    return {
        {"out", r.out}, {"prompts", r.prompts}, {"positions", r.positions}, {"precision", r.bf16 ? "bf16" : "fp32"}};
}

JobDefinition logitsJob()
{
    JobDefinition job = definition("logits", {"logits"},
        "Write the reference (trainer) log-probabilities of every position of a prompt set to a safetensors "
        "file: log_probs.i [T_i, vocab] and input_ids.i [T_i] per prompt, prompt ids in the metadata");
    job.parameters = {
        required(param("model", ParameterType::Path, "--model", "Model directory",
            "Model directory (config.json, model.safetensors, tokenizer.json)")),
        required(
            param("prompts", ParameterType::Path, "--prompts", "Prompt set", "Prompt set (JSONL: id, prompt, answer)")),
        required(param("out", ParameterType::Path, "--out", "Output file", "Output safetensors file")),
        param("with_answer", ParameterType::Flag, "--with-answer", "Score prompt + answer",
            "Score prompt + answer instead of the prompt alone", false),
        param("bf16", ParameterType::Flag, "--bf16", "BF16 forward", "Run the forward in BF16 instead of FP32", false),
    };
    job.run = [](store::RunStore&, const JobSpec& spec, Progress& progress, const std::function<void(std::int64_t)>&) {
        return logitsResultJson(analysis::writeReferenceLogits(
            spec.text("model"), spec.text("prompts"), spec.text("out"), logitsOptions(spec), progress));
    };
    job.resultFields = {"out", "prompts", "positions", "precision"};
    return job;
}

// ------------------------------------------------------------------------------------------------------- quantize

quant::QuantizeFileOptions quantizeOptions(const JobSpec& spec)
{
    quant::QuantizeFileOptions options;
    options.format = *quant::parseWeightFormat(spec.text("format")); // a choice of weightFormatChoices()
    options.granularity = spec.given("granularity") ? *quant::parseGranularity(spec.text("granularity"))
                                                    : quant::defaultGranularity(options.format);
    options.keepDtype = spec.flag("keep_dtype");
    return options;
}

QuantizeReport quantizeFile(const JobSpec& spec, Progress& progress)
{
    QuantizeReport report;
    report.input = spec.text("input");
    report.output = spec.text("output");
    report.options = quantizeOptions(spec);
    report.tensors = quant::quantizeSafetensorsFile(report.input, report.output, report.options, progress);
    for (const quant::TensorQuantizeResult& r : report.tensors) {
        report.inputBytes += r.inputBytes;
        report.formatBytes += r.formatBytes;
        ++(r.quantized ? report.quantized : report.copied);
    }
    return report;
}

nlohmann::json quantizeResultJson(const QuantizeReport& report)
{
    nlohmann::json tensors = nlohmann::json::array();
    for (const quant::TensorQuantizeResult& r : report.tensors) {
        nlohmann::json entry = {{"name", r.name}, {"shape", r.shape}, {"input_dtype", r.inputDtype},
            {"output_dtype", r.outputDtype}, {"quantized", r.quantized}, {"relative_rms_error", r.relativeRmsError},
            {"max_abs_error", r.maxAbsError}, {"input_bytes", r.inputBytes}, {"format_bytes", r.formatBytes}};
        if (!r.note.empty()) {
            entry["note"] = r.note;
        }
        tensors.push_back(entry);
    }
    return {{"input", report.input}, {"output", report.output}, {"format", quant::toString(report.options.format)},
        {"granularity", quant::toString(report.options.granularity)}, {"keep_dtype", report.options.keepDtype},
        {"tensors", tensors}, {"quantized", report.quantized}, {"copied", report.copied},
        {"input_bytes", report.inputBytes}, {"format_bytes", report.formatBytes}};
}

JobDefinition quantizeJob()
{
    JobDefinition job = definition("quantize", {"quantize"},
        "Fake-quantize every 2-D tensor of a safetensors file to a weight format (bit-exact CPU emulation) and "
        "report each tensor's error; other tensors (norms, biases) are copied unchanged");
    job.parameters = {
        required(choice(param("format", ParameterType::Choice, "--format,-f", "Weight format", "Weight format"),
            quant::weightFormatChoices())),
        choice(param("granularity", ParameterType::Choice, "--granularity,-g", "Scale granularity",
                   "Scale granularity (default: block128 for fp8, channel for int8, group128 for int4, group32 for "
                   "mxfp8/mxfp4, group16 for nvfp4; none for bf16/fp16)"),
            quant::granularityChoices()),
        param("keep_dtype", ParameterType::Flag, "--keep-dtype", "Keep the input dtype",
            "Write quantized tensors in their input dtype instead of float32", false),
        required(param("input", ParameterType::Path, "IN", "Input file", "Input .safetensors file")),
        required(param(
            "output", ParameterType::Path, "OUT", "Output file", "Output .safetensors file (fake-quantized values)")),
    };
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        const quant::WeightFormat format = *quant::parseWeightFormat(spec.text("format"));
        if (spec.given("granularity")
            && !quant::isSupported(format, *quant::parseGranularity(spec.text("granularity")))) {
            std::string allowed;
            for (quant::Granularity g : quant::allowedGranularities(format)) {
                allowed += (allowed.empty() ? "" : ", ") + quant::toString(g);
            }
            errors.push_back({"granularity",
                allowed.empty() ? spec.text("format") + " has no scales and takes no granularity"
                                : spec.text("format") + " takes " + allowed + ", not " + spec.text("granularity")});
        }
        return errors;
    };
    job.run = [](store::RunStore&, const JobSpec& spec, Progress& progress, const std::function<void(std::int64_t)>&) {
        return quantizeResultJson(quantizeFile(spec, progress));
    };
    job.resultFields = {"input", "output", "format", "granularity", "keep_dtype", "tensors", "quantized", "copied",
        "input_bytes", "format_bytes"};
    return job;
}

// ------------------------------------------------------------------------------------------------------------ zoo

train::ZooOptions zooBuildOptions(const JobSpec& spec)
{
    train::ZooOptions options = train::defaultZooOptions(resourceDirectory());
    if (spec.given("out")) {
        options.outputDirectory = spec.text("out");
    }
    if (spec.given("prompts")) {
        options.promptDirectory = spec.text("prompts");
    }
    std::vector<train::ZooModelSpec> selected;
    for (train::ZooModelSpec model : options.models) {
        if (model.name == "arith-teacher" && spec.given("teacher_steps")) {
            model.steps = spec.integer("teacher_steps");
        }
        if (model.name == "arith-student" && spec.given("student_steps")) {
            model.steps = spec.integer("student_steps");
        }
        if (!spec.given("only") || spec.text("only") == model.name) {
            selected.push_back(model);
        }
    }
    options.models = selected;
    return options;
}

nlohmann::json zooModelJson(const train::ZooModelReport& r)
{
    return {{"name", r.name}, {"directory", r.directory}, {"parameters", r.parameters}, {"steps", r.steps},
        {"final_loss", r.finalLoss}, {"heldout_accuracy", r.heldoutAccuracy}, {"heldout_evaluated", r.evaluated},
        {"train_seconds", r.trainSeconds}};
}

JobDefinition zooBuildJob()
{
    JobDefinition job = definition("zoo_build", {"zoo", "build"},
        "Train arith-teacher and arith-student on the arith task and write them (config.json, model.safetensors, "
        "tokenizer.json, training.json) under --out (default: the resource directory's models/)");
    job.parameters = {
        param("out", ParameterType::Path, "--out", "Output directory", "Output directory for the model directories"),
        param("prompts", ParameterType::Path, "--prompts", "Prompt directory",
            "Directory holding arith-heldout.jsonl and arith-probe.jsonl"),
        choice(param("only", ParameterType::Choice, "--only", "Only this model",
                   "Build only this model (arith-teacher or arith-student)"),
            {"arith-teacher", "arith-student"}),
        ranged(param("teacher_steps", ParameterType::Integer, "--teacher-steps", "Teacher steps",
                   "Override the teacher's optimizer steps"),
            0, true),
        ranged(param("student_steps", ParameterType::Integer, "--student-steps", "Student steps",
                   "Override the student's optimizer steps"),
            0, true),
    };
    job.run = [](store::RunStore&, const JobSpec& spec, Progress& progress, const std::function<void(std::int64_t)>&) {
        nlohmann::json models = nlohmann::json::array();
        for (const train::ZooModelReport& report : train::buildZoo(zooBuildOptions(spec), progress)) {
            models.push_back(zooModelJson(report));
        }
        return JobResult {{"models", models}};
    };
    job.resultFields = {"models"};
    return job;
}

train::ZooShapeOptions zooShapeOptions(const JobSpec& spec)
{
    train::ZooShapeOptions options;
    options.seed = static_cast<std::uint64_t>(spec.integer("seed"));
    options.maxShardBytes = parseByteSize(spec.text("max_shard_size"), "max_shard_size");
    options.tokenizerPath = spec.text("tokenizer");
    return options;
}

nlohmann::json zooShapeResultJson(const train::ModelShape& shape, const train::ZooShapeReport& report)
{
    return {{"shape", report.name}, {"of", shape.huggingFaceName}, {"directory", report.directory},
        {"parameters", report.parameters}, {"bytes", report.bytes}, {"shards", report.shards},
        {"tokenizer", report.tokenizer}, {"random_weights", true}, {"seconds", report.seconds}};
}

JobDefinition zooShapeJob()
{
    std::string names;
    for (const train::ModelShape& shape : train::modelShapes()) {
        names += (names.empty() ? "" : ", ") + shape.name;
    }
    JobDefinition job = definition("zoo_shape", {"zoo", "shape"},
        "Write a checkpoint with RANDOM weights and the exact shape of a real model (" + names
            + "): config.json, sharded BF16 safetensors with model.safetensors.index.json, tokenizer.json (a "
              "byte-level one with the model's special tokens at their real ids, or --tokenizer FILE) and "
              "zoo_shape.json. For measuring speed, memory and capacity without downloading weights; the text it "
              "generates means nothing");
    job.parameters = {
        required(param("shape", ParameterType::Text, "NAME", "Model shape", "Model shape: " + names)),
        required(param("directory", ParameterType::Path, "DIR", "Output directory",
            "Output directory (new, empty, or an earlier zoo shape output)")),
        ranged(param("seed", ParameterType::Integer, "--seed", "Seed", "Seed of the random weights",
                   static_cast<std::int64_t>(train::ZooShapeOptions().seed)),
            0),
        param("max_shard_size", ParameterType::Text, "--max-shard-size", "Shard size",
            "BF16 bytes per safetensors shard (1GiB, 512MiB, 5GB, ...)", "1GiB"),
        param("tokenizer", ParameterType::Path, "--tokenizer", "Tokenizer",
            "A real tokenizer.json to copy (checked to load and to fit the vocabulary)"),
    };
    job.check = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        try {
            train::modelShape(spec.text("shape"));
        } catch (const InputError& error) {
            errors.push_back({"shape", spec.text("shape") + ": " + error.detail()});
        }
        checkSize(errors, spec, "max_shard_size");
        return errors;
    };
    job.run = [](store::RunStore&, const JobSpec& spec, Progress& progress, const std::function<void(std::int64_t)>&) {
        const train::ModelShape& shape = train::modelShape(spec.text("shape"));
        return zooShapeResultJson(
            shape, train::writeModelShape(shape, spec.text("directory"), zooShapeOptions(spec), progress));
    };
    job.resultFields
        = {"shape", "of", "directory", "parameters", "bytes", "shards", "tokenizer", "random_weights", "seconds"};
    return job;
}

// --------------------------------------------------------------------------------------------------------- import

namespace {

io::LogSource logSource(const std::string& kind)
{
    for (const io::LogSource source : io::logSources()) {
        if (kind == "import_" + io::toString(source)) {
            return source;
        }
    }
    return io::LogSource::Verl;
}

std::string absolutePath(const std::string& file)
{
    std::error_code ec;
    const auto path = fs::absolute(file, ec);
    return ec ? file : path.lexically_normal().string();
}

Parameter importNameParameter()
{
    return param("name", ParameterType::Text, "--name", "Run name", "Run name (default: the source and the file name)");
}

} // namespace

std::pair<std::int64_t, std::int64_t> stepRange(const io::ImportedLog& log)
{
    std::int64_t first = log.steps.front().step;
    std::int64_t last = first;
    for (const store::StepMetrics& step : log.steps) {
        first = std::min(first, step.step);
        last = std::max(last, step.step);
    }
    return {first, last};
}

std::string mapEntriesProblem(io::LogSource source, const std::vector<std::string>& entries)
{
    std::map<std::string, std::string> columns;
    std::map<std::string, std::string> measures;
    for (const std::string& entry : entries) {
        if (const std::string problem = io::checkMapEntry(entry); !problem.empty()) {
            return entry + ": " + problem;
        }
        const auto equals = entry.rfind('=');
        const std::string column = entry.substr(0, equals);
        const std::string measure = entry.substr(equals + 1);
        if (measure == "step" && source != io::LogSource::Csv) {
            return entry + ": only a CSV file takes a step column (" + io::toString(source)
                + " lines hold their step under \"step\")";
        }
        if (!columns.emplace(column, entry).second) {
            return entry + ": the column " + column + " is mapped twice";
        }
        if (const auto previous = measures.find(measure); previous != measures.end()) {
            return entry + ": " + measure + " is already mapped by " + previous->second
                + " (a measure takes one column)";
        }
        measures.emplace(measure, entry);
    }
    return "";
}

PreparedImport prepareImport(const JobSpec& spec)
{
    PreparedImport prepared;
    const std::string file = spec.text("file");
    prepared.run.file = file;
    if (spec.kind() == "import_aimet") {
        io::AimetImportOptions options;
        if (spec.given("analysis")) {
            options.analysis = io::parseAimetAnalysis(spec.text("analysis")); // a choice of its spellings
        }
        if (spec.given("reference_score")) {
            options.referenceScore = spec.number("reference_score");
        }
        options.lowerIsBetter = spec.flag("lower_is_better");
        options.scheme = spec.text("scheme");
        prepared.aimet = io::importAimetSensitivity(file, options);
        prepared.run.source = "aimet";
        prepared.run.estimatorJson = prepared.aimet->estimatorJson;
        prepared.run.configJson = prepared.aimet->configJson;
    } else {
        const io::LogSource source = logSource(spec.kind());
        io::LogImportOptions options;
        options.map = spec.strings("map");
        prepared.log = io::importLog(source, file, options);
        prepared.run.source = io::toString(source);
        prepared.run.estimatorJson = prepared.log->estimatorJson();
        prepared.run.configJson = prepared.log->runConfigJson(absolutePath(file), options.map);
    }
    prepared.run.name = spec.given("name") && !spec.text("name").empty()
        ? spec.text("name")
        : prepared.run.source + " " + fs::path(file).filename().string();
    return prepared;
}

ImportReport storeImport(store::RunStore& store, PreparedImport prepared)
{
    ImportReport report;
    if (prepared.aimet) {
        store::ExternalScanSpec scan;
        scan.format = prepared.aimet->format;
        scan.configJson = prepared.aimet->configJson;
        for (const io::AimetCell& cell : prepared.aimet->cells) {
            scan.cells.push_back({cell.layer, cell.moduleGroup, cell.value, cell.sensitivity});
        }
        report.ids = store::storeExternalRun(store, prepared.run, {}, scan);
    } else {
        report.ids = store::storeExternalRun(store, prepared.run, prepared.log->steps);
    }
    report.prepared = std::move(prepared);
    report.workspace = store.path();
    return report;
}

nlohmann::json importResultJson(const ImportReport& report)
{
    const store::ExternalRunSpec& run = report.prepared.run;
    if (const auto& imported = report.prepared.aimet) {
        const auto config = nlohmann::json::parse(imported->configJson);
        nlohmann::json skipped = nlohmann::json::array();
        for (const auto& s : imported->skipped) {
            skipped.push_back({{"name", s.name}, {"reason", s.reason}});
        }
        nlohmann::json cells = nlohmann::json::array();
        for (const auto& c : imported->cells) {
            cells.push_back({{"name", c.name}, {"layer", c.layer}, {"module_group", c.moduleGroup}, {"value", c.value},
                {"sensitivity", c.sensitivity}});
        }
        return {{"run_id", report.ids.runId}, {"scan_id", *report.ids.scanId}, {"name", run.name}, {"kind", "external"},
            {"source", "aimet"}, {"file", run.file}, {"workspace", report.workspace},
            {"analysis", io::toString(imported->analysis)}, {"format", imported->format}, {"unit", config["unit"]},
            {"reference", {{"value", imported->reference}, {"kind", imported->referenceKind}}},
            {"entries_read", imported->entriesRead}, {"cells_stored", imported->cells.size()},
            {"entries_skipped", imported->skipped.size()}, {"skipped", skipped}, {"cells", cells}};
    }
    const io::ImportedLog& log = *report.prepared.log;
    const auto [firstStep, lastStep] = stepRange(log);
    nlohmann::json skipped = nlohmann::json::array();
    for (const auto& s : log.skipped) {
        skipped.push_back({{"line", s.line}, {"reason", s.reason}});
    }
    nlohmann::json metrics = nlohmann::json::array();
    for (const auto& m : log.metrics) {
        metrics.push_back({{"key", m.key}, {"measure", m.measure}, {"estimator", m.estimator}, {"unit", m.unit},
            {"user_mapped", m.userMapped}, {"steps", m.steps}});
    }
    nlohmann::json dropped = nlohmann::json::array();
    for (const auto& d : log.dropped) {
        dropped.push_back({{"line", d.line}, {"key", d.key}, {"reason", d.reason}});
    }
    nlohmann::json conflicts = nlohmann::json::array();
    for (const auto& c : log.conflicts) {
        conflicts.push_back({{"step", c.step}, {"key", c.key}, {"first_line", c.firstLine},
            {"first_value", c.firstValue}, {"line", c.line}, {"value", c.value}});
    }
    nlohmann::json out = {{"run_id", report.ids.runId}, {"name", run.name}, {"kind", "external"},
        {"source", run.source}, {"file", run.file}, {"workspace", report.workspace}, {"lines_read", log.linesRead},
        {"steps_imported", log.steps.size()}, {"lines_skipped", log.skipped.size()}, {"skipped", skipped},
        {"lines_merged", log.linesMerged}, {"dropped_values", dropped}, {"conflicts", conflicts},
        {"first_step", firstStep}, {"last_step", lastStep}, {"metrics", metrics}, {"unmapped_keys", log.unmappedKeys}};
    if (log.tinkerConfig) {
        out["tinker_config"] = nlohmann::json::parse(log.tinkerConfig->json());
    } else if (!log.tinkerConfigProblem.empty()) {
        out["tinker_config_problem"] = log.tinkerConfigProblem;
    }
    if (!log.notes.empty()) {
        out["notes"] = log.notes; // what was not read and why (several verl data sources' accuracies)
    }
    return out;
}

namespace {

// Every measure --map accepts, in the import table's order ("mismatch_kl, k1, ...").
std::string measureNames()
{
    std::string names;
    for (const io::ImportMeasure& measure : io::importMeasures()) {
        if (measure.name != "step") {
            names += (names.empty() ? "" : ", ") + measure.name;
        }
    }
    return names;
}

} // namespace

JobDefinition importLogJob(io::LogSource source)
{
    const std::string name = io::toString(source);
    const std::string summary = source == io::LogSource::Verl
        ? "verl file logger JSONL (lines {\"step\": N, \"data\": {...}}): rollout_corr/kl -> k1, rollout_corr/k3_kl -> "
          "k3, training/rollout_probs_diff_* -> prob_diff_* (a probability difference, not a KL)"
        : source == io::LogSource::Tinker
        ? "Tinker metrics.jsonl (lines {\"step\": N, ...}): optim/kl_sample_train_v1 -> k1, optim/kl_sample_train_v2 "
          "-> k2; num_substeps and async_config of the config.json beside it are recorded with the run"
        : source == io::LogSource::Csv
        ? "CSV with a header row and a step column; columns named like a measure or a verl/Tinker key are read, "
          "others with --map"
        : "TensorBoard event file (events.out.tfevents.*) of verl's or NeMo-RL's tensorboard logger: scalar tags as "
          "verl's keys, and NeMo-RL's train/token_mult_prob_error -> mult_prob_error, train/gen_kl_error -> gen_kl, "
          "train/policy_kl_error -> policy_kl (records with a bad CRC are skipped and reported)";
    JobDefinition job = definition("import_" + name, {"import", name}, summary);
    job.parameters = {
        required(param("file", ParameterType::Path, "FILE", "Log file", "The log file")),
        importNameParameter(),
        param("map", ParameterType::TextList, "--map", "Column mapping",
            "Read COLUMN (a logged key or CSV column) as MEASURE: " + measureNames()
                + ", step (CSV), or extra:NAME; replaces the built-in source of that measure"),
    };
    job.check = [source](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        if (const std::string problem = mapEntriesProblem(source, spec.strings("map")); !problem.empty()) {
            errors.push_back({"map", problem});
        }
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress&, const std::function<void(std::int64_t)>&) {
        return importResultJson(storeImport(store, prepareImport(spec)));
    };
    job.resultFields = {"run_id", "name", "kind", "source", "file", "workspace", "lines_read", "steps_imported",
        "lines_skipped", "skipped", "lines_merged", "dropped_values", "conflicts", "first_step", "last_step", "metrics",
        "unmapped_keys", "tinker_config", "tinker_config_problem", "notes"};
    return job;
}

JobDefinition importAimetJob()
{
    JobDefinition job = definition("import_aimet", {"import", "aimet"},
        "AIMET QuantAnalyzer per-layer JSON (per_layer_quant_enabled/disabled.json eval scores or "
        "per_layer_mse_loss.json) as a layers x module-groups sensitivity scan, in AIMET's unit (not nats)");
    job.parameters = {
        required(param("file", ParameterType::Path, "FILE", "QuantAnalyzer file", "The QuantAnalyzer JSON file")),
        importNameParameter(),
        choice(param("analysis", ParameterType::Choice, "--analysis", "Analysis",
                   "Which QuantAnalyzer result the file holds (default: from the file name)"),
            {"enabled", "disabled", "mse"}),
        param("reference_score", ParameterType::Number, "--reference-score", "Reference score",
            "enabled: the float model's eval score; disabled: the fully quantized model's (default: the best or worst "
            "layer in the file)"),
        param("lower_is_better", ParameterType::Flag, "--lower-is-better", "Lower is better",
            "The eval score is a loss or perplexity", false),
        param("scheme", ParameterType::Text, "--scheme", "Scheme",
            "What AIMET simulated, e.g. \"int8 w8a8\" (the scan's format)"),
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress&, const std::function<void(std::int64_t)>&) {
        return importResultJson(storeImport(store, prepareImport(spec)));
    };
    job.resultFields = {"run_id", "scan_id", "name", "kind", "source", "file", "workspace", "analysis", "format",
        "unit", "reference", "entries_read", "cells_stored", "entries_skipped", "skipped", "cells"};
    return job;
}

} // namespace mismatch::jobs

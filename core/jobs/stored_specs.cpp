#include "core/jobs/stored_specs.h"

#include "core/analysis/job_resume.h"
#include "core/analysis/sensitivity.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/message_text.h"
#include "core/quant/formats.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace mismatch::jobs {

namespace {

using analysis::storedOption;

// The record's engine settings (scans and checks stored before they were recorded used the defaults).
void setEngine(JobSpec& spec, const nlohmann::json& engine, const std::string& source)
{
    spec.set("batch", storedOption<std::int64_t>(engine, "batch", source));
    spec.set("kv_memory", std::to_string(storedOption<std::uint64_t>(engine, "kv_cache_bytes", source)) + "B");
    spec.set("device", engine.value("device", std::string("cpu")));
}

void setBootstrap(JobSpec& spec, const nlohmann::json& bootstrap, const std::string& source)
{
    spec.set("resamples", storedOption<std::int64_t>(bootstrap, "resamples", source));
    spec.set("confidence", storedOption<double>(bootstrap, "confidence", source));
    spec.set("bootstrap_seed", storedOption<std::int64_t>(bootstrap, "seed", source));
}

JobSpec sensitivitySpec(const store::RunInfo& run, const std::string& source)
{
    const analysis::SensitivityOptions o = analysis::parseSensitivityConfig(run.configJson, source);
    JobSpec spec("sensitivity");
    spec.set("model", o.modelDirectory).set("prompts", o.promptSetPath).set("count", o.count);
    spec.set("format",
        quant::toString(o.weights.format)
            + (o.weights.granularity == quant::Granularity::None ? "" : ":" + quant::toString(o.weights.granularity)));
    spec.set("activations", quant::toString(o.activations.format));
    spec.set("kv_format", quant::toString(o.kv.format));
    if (o.kv.format == quant::KvFormat::Fp8E4m3) {
        spec.set("kv_scales", quant::toString(o.kv.scales)); // the other formats take none
    }
    spec.set("no_kv", !o.kvCells).set("no_embedding", !o.embeddingCells);
    const analysis::MeasureSettings& s = o.settings;
    spec.set("max_tokens", s.maxNewTokens).set("seed", static_cast<std::int64_t>(s.seed));
    spec.set("temperature", s.temperature).set("top_p", s.topP).set("top_k", s.topK);
    spec.set("kv_scale_fit", analysis::toString(s.kvScales)).set("kv_first_batch", s.kvFirstBatch);
    const nlohmann::json record = nlohmann::json::parse(run.configJson);
    if (record.contains("engine")) {
        setEngine(spec, record.at("engine"), source);
    }
    setBootstrap(spec, record.at("bootstrap"), source);
    return spec;
}

// The candidates file a stored candidate was read from ("FILE:line L, column C"); empty for a command-line one.
std::string candidatesFileOf(const std::string& candidateSource)
{
    const auto colon = candidateSource.rfind(":line ");
    return colon == std::string::npos ? std::string() : candidateSource.substr(0, colon);
}

JobSpec admitSpec(const store::RunInfo& run, const std::string& source)
{
    const nlohmann::json c = nlohmann::json::parse(run.configJson);
    JobSpec spec("admit");
    spec.set("students", storedOption<std::vector<std::string>>(c, "checkpoints", source));
    spec.set("history", storedOption<std::vector<std::string>>(c, "history", source));
    spec.set("no_unit", !storedOption<bool>(c, "measure_unit", source));
    if (c.contains("store_generations")) {
        spec.set("store_generations", storedOption<std::int64_t>(c, "store_generations", source));
    }
    const bool fromCalibration = c.contains("calibration_id");
    if (fromCalibration) {
        spec.set("calibration", storedOption<std::int64_t>(c, "calibration_id", source));
        spec.set("step", storedOption<std::vector<std::int64_t>>(c, "steps", source));
        spec.set("allow_protocol_mismatch", storedOption<bool>(c, "allow_protocol_mismatch", source));
    } else {
        spec.set("threshold", storedOption<double>(c, "threshold", source));
    }
    // The measured protocol: given explicitly unless it was the calibration's own (then the calibration gives it
    // again, as when the check started).
    const bool ownProtocol = !fromCalibration || !storedOption<nlohmann::json>(c, "protocol_differs", source).empty();
    if (ownProtocol) {
        spec.set("prompts", storedOption<std::string>(c, "probe", source));
        spec.set("count", storedOption<std::int64_t>(c, "count", source));
        spec.set("max_tokens", storedOption<std::int64_t>(c, "max_tokens", source));
        spec.set("seed", storedOption<std::int64_t>(c, "seed", source));
        spec.set("temperature", storedOption<double>(c, "temperature", source));
        spec.set("top_p", storedOption<double>(c, "top_p", source));
        spec.set("top_k", storedOption<std::int64_t>(c, "top_k", source));
        spec.set("kv_scale_fit", storedOption<std::string>(c, "kv_scales", source));
        spec.set("kv_first_batch", storedOption<std::int64_t>(c, "kv_first_batch", source));
    }
    setEngine(spec, storedOption<nlohmann::json>(c, "engine", source), source);
    setBootstrap(spec, storedOption<nlohmann::json>(c, "bootstrap", source), source);
    const nlohmann::json candidates = storedOption<nlohmann::json>(c, "candidate_list", source);
    const std::string file
        = candidates.empty() ? std::string() : candidatesFileOf(candidates.at(0).value("source", std::string()));
    if (!file.empty()) {
        spec.set("candidates", file);
    } else if (candidates.size() == 1) {
        const nlohmann::json& one = candidates.at(0);
        if (!one.value("recipe", std::string()).empty()) {
            spec.set("recipe", one.at("recipe"));
        }
        spec.set("staleness", storedOption<std::int64_t>(one, "staleness", source));
        spec.set("noise", storedOption<double>(one, "noise", source));
        spec.set("noise_seed", storedOption<std::int64_t>(one, "noise_seed", source));
        spec.set("noise_modules", storedOption<std::string>(one, "noise_modules", source));
        spec.set("name", storedOption<std::string>(one, "name", source));
    } else {
        throw InputError(source, "candidate_list",
            "holds " + std::to_string(candidates.size())
                + " candidates that name no candidates file; the run cannot be resumed as a job: start a new check");
    }
    return spec;
}

JobSpec calibrateSpec(const store::RunStore& store, const store::RunInfo& run, const std::string& source)
{
    const nlohmann::json c = nlohmann::json::parse(run.configJson);
    JobSpec spec("calibrate");
    // The base run as the calibration used it (a quick sweep's cuts applied), written where the spec can name it.
    const fs::path workspace = fs::path(store.path()).parent_path();
    const fs::path runFile = workspace / "migrated" / ("calibrate-run-" + std::to_string(run.id) + "-base.json");
    if (!fs::exists(runFile)) {
        fs::create_directories(runFile.parent_path());
        writeFileAtomically(runFile.string(), storedOption<nlohmann::json>(c, "base", source).dump(2) + "\n");
    }
    spec.set("run_file", runFile.string()).set("name", run.name);
    spec.set("noise", storedOption<std::vector<double>>(c, "noise_sigmas", source));
    spec.set("recipes", storedOption<std::vector<std::string>>(c, "recipes", source));
    spec.set("staleness", storedOption<std::vector<std::int64_t>>(c, "staleness", source));
    spec.set("rule_steps", storedOption<std::vector<std::int64_t>>(c, "steps", source));
    spec.set("threshold", storedOption<double>(c, "relative_threshold", source));
    spec.set("confidence", storedOption<double>(c, "confidence", source));
    spec.set("resamples", storedOption<std::int64_t>(c, "resamples", source));
    spec.set("bootstrap_seed", storedOption<std::int64_t>(c, "bootstrap_seed", source));
    spec.set("margin", storedOption<double>(c, "margin", source));
    // Calibrations started before these settings existed flagged at half the line and kept their seed count.
    spec.set("noise_floor_fraction", c.value("noise_floor_fraction", 0.5));
    spec.set("replicates", storedOption<std::int64_t>(c, "replicates", source));
    spec.set("max_replicates",
        c.contains("max_replicates") ? storedOption<std::int64_t>(c, "max_replicates", source)
                                     : storedOption<std::int64_t>(c, "replicates", source));
    spec.set("probe_count", storedOption<std::int64_t>(c, "probe_count", source));
    if (c.value("unit_every", std::int64_t {1}) != 1) {
        throw InputError(source, "unit_every",
            "is " + c.at("unit_every").dump() + ", a setting the calibrate job has no parameter for; the run cannot be "
            "resumed as a job: start a new calibration");
    }
    return spec;
}

std::string notACatalogueRun(const store::RunInfo& run)
{
    return "the " + run.kind + " run '" + run.name + "' has no stored job: it was not started by a job of the "
        "catalogue (or by a version before runs kept their job)";
}

} // namespace

JobSpec migratedSpec(const store::RunStore& store, const store::RunInfo& run)
{
    const std::string source = store.path() + " (" + run.kind + " run " + std::to_string(run.id) + " config_json)";
    try {
        if (run.kind == "sensitivity") {
            return sensitivitySpec(run, source);
        }
        if (run.kind == "admit") {
            return admitSpec(run, source);
        }
        if (run.kind == "calibrate") {
            return calibrateSpec(store, run, source);
        }
    } catch (const nlohmann::json::exception& error) {
        throw InputError(store.path(), "run " + std::to_string(run.id),
            notACatalogueRun(run) + "; its record cannot be read as one: " + jsonErrorDetail(error));
    } catch (const InputError& error) {
        throw InputError(store.path(), "run " + std::to_string(run.id), notACatalogueRun(run) + "; its record cannot be read as one: " + error.what());
    }
    throw InputError(store.path(), "run " + std::to_string(run.id),
        notACatalogueRun(run)
            + (run.kind == "train" ? " (a training run of a calibration continues with the calibration's resume)"
                                   : std::string()));
}

JobSpec storedSpec(store::RunStore& store, std::int64_t runId, const std::string& resumableKind)
{
    if (!resumableKind.empty()) {
        analysis::resumableRun(store, runId, resumableKind);
    }
    const std::optional<store::RunInfo> run = store.run(runId);
    if (!run) {
        throw InputError(store.path(), "run " + std::to_string(runId), "the workspace has no such run");
    }
    if (std::optional<JobSpec> spec = JobSpec::ofRun(*run)) {
        return *spec;
    }
    const JobSpec spec = migratedSpec(store, *run);
    const std::vector<ParameterError> errors = spec.validate();
    if (!errors.empty()) {
        throw InputError(store.path(), "run " + std::to_string(runId),
            "its record gives no valid " + spec.kind() + " job: "
                + describeErrors(errors, [](const std::string& name) { return name; }));
    }
    store.setRunJob(runId, spec.toJson().dump());
    return spec;
}

JobResult resumeRun(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::function<void(std::int64_t)>& onRunStarted)
{
    const JobSpec spec = storedSpec(store, runId);
    if (!spec.definition().resume) {
        throw InputError(store.path(), "run " + std::to_string(runId),
            "a " + spec.kind() + " job cannot be resumed; run it again: " + commandLine(spec.toArguments()));
    }
    return spec.definition().resume(store, runId, progress, onRunStarted);
}

} // namespace mismatch::jobs

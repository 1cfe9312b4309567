#include "core/common/device.h"
#include "core/jobs/training_jobs.h"

#include "core/analysis/calibration_presets.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/jobs/parameter_builders.h"
#include "core/jobs/stored_specs.h"
#include "core/metrics/bootstrap.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"

#include <filesystem>

namespace mismatch::jobs {

namespace {

// The JobResults of a calibration and of a training run (run and resume return the same; the CLI's --json prints
// the same JSON, core/analysis/result_json.h).
JobResult trainingResult(const store::RunStore& store, const train::TrainResult& r)
{
    return analysis::toJson(r, store.run(r.runId), std::filesystem::path(store.path()).parent_path().string());
}

// A calibration's result; a unit's (--unit) is its run, the unit and its one training run.
JobResult calibrationResult(
    const analysis::CalibrationResult& result, const analysis::CalibrationOptions& options, const nlohmann::json& command)
{
    if (!options.unit) {
        return analysis::toJson(result, options, command);
    }
    return {{"run_id", result.runId}, {"name", options.name}, {"unit", analysis::toString(*options.unit)},
        {"sweep_run_id", result.runs.empty() ? nlohmann::json(nullptr) : nlohmann::json(result.runs.front().runId)},
        {"command", command}, {"wall_seconds", result.wallSeconds}};
}

} // namespace

nlohmann::json storedCommand(const store::RunStore& store, std::int64_t runId)
{
    const auto run = store.run(runId);
    const std::optional<JobSpec> spec = run ? JobSpec::ofRun(*run) : std::nullopt;
    return spec ? nlohmann::json(commandLine(spec->toArguments())) : nlohmann::json(nullptr);
}

std::string calibrationRunFile(const JobSpec& spec)
{
    return spec.given("run_file") ? spec.text("run_file")
                                  : (std::filesystem::path(resourceDirectory()) / "runs" / "demo-opd.yaml").string();
}

analysis::CalibrationOptions calibrationOptions(const JobSpec& spec)
{
    analysis::CalibrationOptions options;
    options.base = train::loadRunConfig(calibrationRunFile(spec));
    if (spec.given("device")) {
        options.base.device = canonicalDevice(spec.text("device"), "device", ""); // every run of the sweep
    }
    const bool quick = spec.flag("quick");
    options.name = spec.text("name").empty() ? options.base.name + "-calibration" + (quick ? "-quick" : "")
                                             : spec.text("name");
    if (quick) {
        analysis::applyQuickCalibration(options.base);
    }
    options.noiseSigmas = spec.numbers("noise");
    options.recipes = spec.strings("recipes");
    options.staleness = spec.integers("staleness");
    options.steps = spec.integers("rule_steps");
    if (options.noiseSigmas.empty() && options.recipes.empty() && options.staleness.empty()) {
        options.noiseSigmas = analysis::defaultNoiseSigmas();
    }
    if (options.steps.empty()) {
        options.steps = analysis::defaultCalibrationSteps(options.base);
    }
    options.rule.relativeThreshold = spec.number("threshold");
    options.rule.bootstrap.confidence = spec.number("confidence");
    options.rule.bootstrap.resamples = static_cast<int>(spec.integer("resamples"));
    options.rule.bootstrap.seed = static_cast<std::uint64_t>(spec.integer("bootstrap_seed"));
    options.margin = spec.number("margin");
    options.noiseFloorFraction = spec.number("noise_floor_fraction");
    options.replicates = spec.integer("replicates");
    // Not given: the default, or the starting seeds when more are asked for than it.
    options.maxReplicates = spec.given("max_replicates") ? spec.integer("max_replicates")
                                                         : std::max(options.maxReplicates, options.replicates);
    options.probeCount = spec.integer("probe_count");
    if (spec.given("unit")) {
        options.unit = analysis::parseCalibrationUnit(spec.text("unit"));
    }
    options.fromUnits = spec.flag("from_units");
    return options;
}

JobDefinition calibrateJob()
{
    JobDefinition job = definition("calibrate", {"calibrate"},
        "Calibrate a student's mismatch budget from a sweep of training runs (noise, recipes, staleness) against the "
        "BF16-engine baseline, with seed replicates and a null comparison");
    const analysis::CalibrationOptions defaults;
    const metrics::FailureRuleOptions rule;
    job.parameters = {
        param("run_file", ParameterType::Path, "RUN_FILE", "Base run file",
            "The student's standard run file (default: the demo pair's demo-opd.yaml)"),
        param("name", ParameterType::Text, "--name", "Calibration name",
            "Calibration name (default: <run name>-calibration)"),
        param("quick", ParameterType::Flag, "--quick", "Quick sweep",
            "Short sweep: the run cut to 40 steps of at most 16 prompts, evaluated at 20 and 40 on 128 held-out "
            "problems",
            false),
        noiseSigmaRange(param("noise", ParameterType::NumberList, "--noise", "Noise sigmas (relative to RMS)",
                            "Noise sigmas, relative to each tensor's RMS (default 0.05,0.1,0.2,0.4 when no recipe or "
                            "staleness is given)"),
            true),
        param("recipes", ParameterType::PathList, "--recipe", "Recipes in the sweep",
            "Recipe files to include in the sweep"),
        ranged(param("staleness", ParameterType::IntegerList, "--staleness", "Staleness values in the sweep",
                   "Staleness values (optimizer steps, >= 1) to include in the sweep"),
            1),
        ranged(param("rule_steps", ParameterType::IntegerList, "--steps", "Failure rule at steps",
                   "Steps to apply the failure rule at (default: half-way and the last); each must be an evaluated "
                   "step of the run"),
            1),
        ranged(param("threshold", ParameterType::Number, "--threshold", "Failure threshold (relative Q rise)",
                   "Relative quality rise that fails", rule.relativeThreshold),
            0, true, 10.0),
        ranged(param("confidence", ParameterType::Number, "--confidence", "Confidence",
                   "Bootstrap interval confidence", rule.bootstrap.confidence),
            0.5, false, 0.9999),
        ranged(param("resamples", ParameterType::Integer, "--resamples", "Bootstrap resamples", "Bootstrap resamples",
                   rule.bootstrap.resamples),
            100, false, 1000000),
        ranged(param("bootstrap_seed", ParameterType::Integer, "--seed", "Bootstrap seed", "Bootstrap seed",
                   static_cast<std::int64_t>(rule.bootstrap.seed)),
            0),
        ranged(param("margin", ParameterType::Number, "--margin", "Threshold margin",
                   "Admission threshold = largest passing x (1 - margin)", defaults.margin),
            0, false, 0.99),
        ranged(param("noise_floor_fraction", ParameterType::Number, "--noise-floor-fraction", "Noise floor flag",
                   "Flag the calibration when the null comparison's interval half-width exceeds this fraction of "
                   "the failure line",
                   defaults.noiseFloorFraction),
            0, true, 1.0),
        ranged(param("replicates", ParameterType::Integer, "--replicates", "Seeds per configuration",
                   "Seeds each configuration starts with; the null comparison trains the baseline with as many more",
                   defaults.replicates),
            1, false, 16),
        ranged(param("max_replicates", ParameterType::Integer, "--max-replicates", "Most seeds per configuration",
                   "Seeds an undecided configuration may grow to: after each round, every configuration with an "
                   "undecided point gets one more seed (the baseline and the null group too) until none is "
                   "undecided or they have this many; equal to --replicates: no seeds are added (default: "
                       + std::to_string(defaults.maxReplicates) + ", or --replicates when that is larger)"),
            1, false, 16),
        ranged(param("probe_count", ParameterType::Integer, "--probe-count", "Screening prompts",
                   "Prompts of the screening protocol stored with the budget (from the run's training set)",
                   defaults.probeCount),
            1, false, 1000000),
        deviceParameter(nullptr, "; not given: the base run file's device"),
        param("unit", ParameterType::Text, "--unit", "Only the unit",
            "Scale-out: train only this sweep run, LABEL/rN (a configuration of the sweep and its seed: "
            "'baseline/r0', 'noise 0.1/r1', 'null/r4'), and measure its screens, as a calibrate_unit run; what a "
            "cluster node runs (mismatch submit)"),
        param("from_units", ParameterType::Flag, "--from-units", "Decide from the merged units",
            "Scale-out: the decision step; adopt the finished units merged into this workspace (their runs and "
            "screens) and decide; trains nothing, refused while a unit it needs is missing",
            false),
    };
    job.parameters.back().excludes = {"unit"};
    // Across parameters: what core checks before it stores anything (the base run file's objective and
    // evaluation set, rule steps the run evaluates), named by parameter; a run file that cannot be read names it.
    job.checkInputs = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        try {
            analysis::checkCalibrationOptions(calibrationOptions(spec));
        } catch (const InputError& error) {
            if (error.file() == "calibrate") {
                errors.push_back({error.location() == "sweep" ? std::string() : error.location(), error.detail()});
            } else {
                errors.push_back({"run_file", error.what()});
            }
        } catch (const std::exception& error) {
            errors.push_back({"run_file", error.what()});
        }
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>& onRunStarted) {
        analysis::CalibrationOptions options = calibrationOptions(spec);
        options.onRunStarted = onRunStarted;
        return calibrationResult(analysis::runCalibration(store, options, progress), options,
            commandLine(spec.toArguments()));
    };
    job.runKindOf = [](const JobSpec& spec) { return spec.given("unit") ? "calibrate_unit" : "calibrate"; };
    job.resultFields = {"calibration_id", "run_id", "name", "student", "command", "provenance", "base", "replicates",
        "relative_threshold", "confidence", "resamples", "max_replicates", "protocol", "flags", "runs", "points",
        "replicate_points", "null_comparisons", "brackets", "wall_seconds", "rule", "mismatch_statistic",
        "stopping_rule", "unit", "sweep_run_id"};
    job.runKind = "calibrate";
    job.resume = [](store::RunStore& store, std::int64_t runId, Progress& progress,
                     const std::function<void(std::int64_t)>& onRunStarted) {
        const auto run = store.run(runId);
        const bool unit = run && run->kind == "calibrate_unit";
        analysis::CalibrationOptions options
            = calibrationOptions(storedSpec(store, runId, unit ? "calibrate_unit" : "calibrate"));
        options.onRunStarted = onRunStarted;
        if (!unit) {
            options.name = run->name; // a unit's run is named after its calibration and the unit
        }
        return calibrationResult(
            analysis::resumeCalibration(store, runId, options, progress), options, storedCommand(store, runId));
    };
    return job;
}

JobDefinition trainJob()
{
    JobDefinition job = definition("train", {"train"},
        "Train a student with a run file (OPD, REINFORCE or GRPO with the rollout engine in the loop)");
    job.parameters = {
        required(param("run_file", ParameterType::Path, "RUN_FILE", "Run file", "Run file (YAML or JSON)")),
        ranged(param("stop_after", ParameterType::Integer, "--stop-after", "Stop after steps",
                   "Stop after this many steps of this invocation, leaving the run resumable (0: run to the end)", 0),
            0),
        deviceParameter(nullptr, "; not given: the run file's device"),
    };
    // The run file's own checks (models, prompt sets, recipes and every field), named by the file and field.
    job.checkInputs = [](const JobSpec& spec) {
        std::vector<ParameterError> errors;
        try {
            train::loadRunConfig(spec.text("run_file"));
        } catch (const std::exception& error) {
            errors.push_back({"run_file", error.what()});
        }
        return errors;
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        train::TrainOptions options;
        options.stopAfterSteps = spec.integer("stop_after");
        train::RunConfig config = train::loadRunConfig(spec.text("run_file"));
        if (spec.given("device")) {
            config.device = canonicalDevice(spec.text("device"), "device", "");
        }
        return trainingResult(store, train::runTraining(config, store, progress, options));
    };
    job.resultFields = {"run_id", "name", "status", "steps_stored", "resumed_from_step", "final_quality",
        "final_accuracy", "wall_seconds", "last_checkpoint", "workspace"};
    job.runKind = "train";
    job.resume = [](store::RunStore& store, std::int64_t runId, Progress& progress,
                     const std::function<void(std::int64_t)>&) {
        return trainingResult(store, train::resumeTraining(runId, store, progress));
    };
    return job;
}

} // namespace mismatch::jobs

#include "core/jobs/experiment_jobs.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/runtime.h"
#include "core/jobs/parameter_builders.h"
#include "core/train/run_config.h"

#include <filesystem>

namespace mismatch::jobs {

namespace {

// The base run file of a spec: its run_file, else the demo pair's quick run.
std::string quickRunFile(const JobSpec& spec)
{
    return spec.given("run_file")
        ? spec.text("run_file")
        : (std::filesystem::path(resourceDirectory()) / "runs" / "demo-opd-quick.yaml").string();
}

Parameter runFileParameter()
{
    return param("run_file", ParameterType::Path, "RUN_FILE", "Base run file",
        "Base run file (default: the demo pair's demo-opd-quick.yaml)");
}

// The device of every run a study trains: --device when given, else the base run file's.
void applyDevice(const JobSpec& spec, train::RunConfig& base)
{
    if (spec.given("device")) {
        base.device = canonicalDevice(spec.text("device"), "device", "");
    }
}

// A run file that cannot be read is the run_file parameter's problem (the message names the file and field).
std::vector<ParameterError> checkRunFile(const JobSpec& spec)
{
    try {
        train::loadRunConfig(quickRunFile(spec));
    } catch (const std::exception& error) {
        return {{"run_file", error.what()}};
    }
    return {};
}

} // namespace

analysis::TimeToQualityOptions timeToQualityOptions(const JobSpec& spec)
{
    analysis::TimeToQualityOptions options;
    options.base = train::loadRunConfig(quickRunFile(spec));
    applyDevice(spec, options.base);
    options.recipe = spec.text("recipe");
    options.staleness = spec.integer("staleness");
    options.asynchronous = !spec.flag("synchronous");
    if (spec.given("target_step")) {
        options.targetStep = spec.integer("target_step");
    }
    return options;
}

JobDefinition timeToQualityJob()
{
    JobDefinition job = definition("time_to_quality", {"time-to-quality"},
        "Wall time to a target quality: the synchronous BF16 run against a candidate (recipe, staleness, "
        "asynchronous loop), both trained now; the target is the BF16 run's quality at the target step");
    const analysis::TimeToQualityOptions defaults;
    job.parameters = {
        runFileParameter(),
        param("recipe", ParameterType::Path, "--recipe", "Candidate's recipe", "The candidate's recipe (default: BF16)"),
        ranged(param("staleness", ParameterType::Integer, "--staleness", "Candidate's staleness",
                   "The candidate's staleness (optimizer steps)", defaults.staleness),
            0),
        param("synchronous", ParameterType::Flag, "--synchronous", "Synchronous candidate",
            "Run the candidate with the synchronous loop", false),
        ranged(param("target_step", ParameterType::Integer, "--target-step", "Target step",
                   "Evaluated step of the BF16 run whose Q is the target (default: the last)"),
            0, true),
        deviceParameter(nullptr, "; not given: the base run file's device"),
    };
    // The run file, then what core refuses before it stores anything (a target step the run does not evaluate),
    // named by parameter.
    job.checkInputs = [](const JobSpec& spec) -> std::vector<ParameterError> {
        analysis::TimeToQualityOptions options;
        try {
            options = timeToQualityOptions(spec); // reads the run file once
        } catch (const std::exception& error) {
            return {{"run_file", error.what()}};
        }
        try {
            analysis::checkTimeToQualityOptions(options);
        } catch (const InputError& error) {
            return {error.file() == "time-to-quality" ? ParameterError {error.location(), error.detail()}
                                                      : ParameterError {"run_file", error.what()}};
        }
        return {};
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        const analysis::TimeToQualityResult r = analysis::runTimeToQuality(store, timeToQualityOptions(spec), progress);
        return JobResult(analysis::timeToQualityJson(r));
    };
    job.resultFields = {"run_id", "target_quality", "target_step", "baseline", "candidate", "speedup"};
    job.runKind = "time_to_quality";
    return job;
}

analysis::CompareObjectivesOptions compareObjectivesOptions(const JobSpec& spec)
{
    analysis::CompareObjectivesOptions options;
    options.base = train::loadRunConfig(quickRunFile(spec));
    applyDevice(spec, options.base);
    if (spec.given("run_steps")) {
        options.base.steps = spec.integer("run_steps");
    }
    options.objectives.clear();
    for (const std::string& name : spec.strings("objectives")) {
        options.objectives.push_back(*train::objectiveFromString(name));
    }
    options.noiseSigmas = spec.numbers("noise");
    options.recipes = spec.strings("recipes");
    if (options.noiseSigmas.empty() && options.recipes.empty()) {
        options.noiseSigmas = {0.1, 0.3, 1.0};
    }
    options.rlMaxTokens = spec.integer("rl_max_tokens");
    options.samplesPerPrompt = spec.integer("group");
    options.window = spec.integer("window");
    options.collapse = spec.number("collapse");
    return options;
}

JobDefinition compareObjectivesJob()
{
    JobDefinition job = definition("compare_objectives", {"compare-objectives"},
        "OPD, REINFORCE and GRPO trained under the same engine configurations: where each breaks, in BF16 units "
        "(OPD by the failure rule, RL by reward collapse against its own BF16 run; the rules are printed)");
    const analysis::CompareObjectivesOptions defaults;
    job.parameters = {
        runFileParameter(),
        required(choice(param("objectives", ParameterType::ChoiceList, "--objectives", "Objectives",
                            "Objectives to compare", nlohmann::json {"opd_full_kl", "reinforce", "grpo"}),
            {"opd_full_kl", "opd_k1", "opd_k3", "reinforce", "grpo"})),
        noiseSigmaRange(param("noise", ParameterType::NumberList, "--noise", "Noise sigmas of the sweep",
                            "Noise sigmas of the sweep, relative to each tensor's RMS (default 0.1,0.3,1.0 without "
                            "--recipe)"),
            true),
        param("recipes", ParameterType::PathList, "--recipe", "Recipes of the sweep", "Recipes of the sweep"),
        ranged(param("run_steps", ParameterType::Integer, "--steps", "Steps of every run",
                   "Steps of every run (default: the run file's)"),
            0, true),
        ranged(param("rl_max_tokens", ParameterType::Integer, "--rl-max-tokens", "RL response length (tokens)",
                   "RL response length (whole answers earn rewards)", 40),
            0, true),
        ranged(param("group", ParameterType::Integer, "--group", "GRPO samples per prompt", "GRPO samples per prompt",
                   defaults.samplesPerPrompt),
            2, false, 64),
        ranged(param("window", ParameterType::Integer, "--window", "RL reward window (steps)",
                   "RL steps averaged for the reward (default: the last quarter)"),
            0, true),
        ranged(param("collapse", ParameterType::Number, "--collapse", "Reward collapse",
                   "RL breaks below (1 - collapse) x its BF16 reward", defaults.collapse),
            0.01, false, 0.99),
        deviceParameter(nullptr, "; not given: the base run file's device"),
    };
    job.checkInputs = checkRunFile;
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        return JobResult(analysis::toJson(analysis::runCompareObjectives(store, compareObjectivesOptions(spec), progress)));
    };
    job.resultFields = {"run_id", "rows", "breaks", "wall_seconds"};
    job.runKind = "compare_objectives";
    return job;
}

analysis::DemoOptions demoOptions(const JobSpec& spec)
{
    analysis::DemoOptions options;
    options.resourceDirectory = resourceDirectory();
    if (spec.given("count")) {
        options.probeCount = spec.integer("count");
    }
    return options;
}

JobDefinition demoJob()
{
    JobDefinition job = definition("demo", {"demo"},
        "Headless demo: register the built-in demo models and prompt sets, screen the shipped candidate rollout "
        "configurations against the demo student's shipped mismatch budget (admission check), and print the "
        "decisions with their intervals");
    job.parameters = {
        ranged(param("count", ParameterType::Integer, "--count", "Probe prompts",
                   "Probe prompts the admission check generates on (default: the calibration protocol's; another "
                   "count is labelled as another protocol)"),
            2, false, static_cast<double>(limits::kMaxDemoProbeCount)), // analysis::checkDemoOptions's bound
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        return JobResult(analysis::toJson(analysis::runDemo(store, demoOptions(spec), progress), store.path()));
    };
    job.resultFields = {"workspace", "models", "prompt_sets", "calibration_id", "calibration_command",
        "calibration_step", "admission", "runs", "schema_version"};
    job.runKind = "demo";
    return job;
}

} // namespace mismatch::jobs

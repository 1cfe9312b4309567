// mismatch calibrate [RUN_FILE]: the student's mismatch budget from a sweep of training runs (core/analysis/calibrate.h).
// mismatch calibrate --resume RUN: continue a killed, cancelled or failed calibration.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/calibration_presets.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/train/run_config.h"

#include <filesystem>
#include <map>
#include <sstream>
#include <ostream>

namespace fs = std::filesystem;

namespace mismatch::cli {

namespace {

struct CalibrateArguments {
    std::string runFile;
    std::string name;
    bool quick = false;
    std::vector<double> noise;
    std::vector<std::string> recipes;
    std::vector<std::int64_t> staleness;
    std::vector<std::int64_t> steps;
    double threshold = 0.20;
    double confidence = 0.95;
    int resamples = 10000;
    std::uint64_t seed = metrics::BootstrapOptions {}.seed;
    double margin = 0.0;
    std::int64_t resume = 0;
};

std::string optionalNumber(const std::optional<double>& value, int precision = 4)
{
    return value ? formatNumber(*value, precision) : "-";
}

void printCalibration(const Context& context, const CalibrateArguments& a, const analysis::CalibrationOptions& options,
    const analysis::CalibrationResult& result);

void calibrate(const Context& context, const CalibrateArguments& a)
{
    if (a.resume > 0) {
        store::RunStore store = context.openStore(store::OpenMode::OpenExisting);
        analysis::CalibrationOptions options = analysis::storedCalibrationOptions(store, a.resume);
        TerminalProgress bar(*context.err);
        CancelOnInterrupt interrupt(bar.progress());
        const analysis::CalibrationResult result = analysis::resumeCalibration(store, a.resume, bar.progress(),
            context.workspaceDirectory(), [&bar](std::int64_t runId) {
                bar.note("calibrate run " + std::to_string(runId) + " (continue it after an interruption with "
                    "`mismatch calibrate --resume " + std::to_string(runId) + "`)");
            });
        bar.finish();
        CalibrateArguments stored = a;
        stored.threshold = options.rule.relativeThreshold;
        stored.confidence = options.rule.bootstrap.confidence;
        printCalibration(context, stored, options, result);
        return;
    }
    const std::string runFile = a.runFile.empty()
        ? (fs::path(resourceDirectory()) / "runs" / "demo-opd.yaml").string()
        : a.runFile;
    analysis::CalibrationOptions options;
    options.base = train::loadRunConfig(runFile);
    options.name = a.name.empty() ? options.base.name + "-calibration" + (a.quick ? "-quick" : "") : a.name;
    options.noiseSigmas = a.noise;
    options.recipes = a.recipes;
    options.staleness = a.staleness;
    options.steps = a.steps;
    if (a.quick) {
        analysis::applyQuickCalibration(options.base);
    }
    if (options.noiseSigmas.empty() && options.recipes.empty() && options.staleness.empty()) {
        options.noiseSigmas = analysis::defaultNoiseSigmas();
    }
    if (options.steps.empty()) {
        options.steps = analysis::defaultCalibrationSteps(options.base);
    }
    options.rule.relativeThreshold = a.threshold;
    options.rule.bootstrap.confidence = a.confidence;
    options.rule.bootstrap.resamples = a.resamples;
    options.rule.bootstrap.seed = a.seed;
    options.margin = a.margin;
    options.workspaceDirectory = context.workspaceDirectory();

    store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
    TerminalProgress bar(*context.err);
    CancelOnInterrupt interrupt(bar.progress());
    options.onRunStarted = [&bar](std::int64_t runId) {
        bar.note("calibrate run " + std::to_string(runId) + " (continue it after an interruption with "
            "`mismatch calibrate --resume " + std::to_string(runId) + "`)");
    };
    const analysis::CalibrationResult result = analysis::runCalibration(store, options, bar.progress());
    bar.finish();
    printCalibration(context, a, options, result);
}

void printCalibration(const Context& context, const CalibrateArguments& a, const analysis::CalibrationOptions& options,
    const analysis::CalibrationResult& result)
{
    std::map<std::int64_t, std::string> labels;
    for (const auto& run : result.runs) {
        labels[run.runId] = run.label;
    }
    if (context.json) {
        nlohmann::json points = nlohmann::json::array();
        for (const auto& p : result.points) {
            points.push_back({{"run_id", p.runId}, {"label", labels[p.runId]}, {"step", p.step},
                {"mismatch", p.mismatch},
                {"bf16_multiple", result.bf16Unit > 0 ? nlohmann::json(p.mismatch / result.bf16Unit) : nlohmann::json(nullptr)},
                {"quality", p.quality}, {"relative_change", p.relativeChange ? nlohmann::json(*p.relativeChange) : nlohmann::json(nullptr)},
                {"ci_low", p.ciLow ? nlohmann::json(*p.ciLow) : nlohmann::json(nullptr)},
                {"ci_high", p.ciHigh ? nlohmann::json(*p.ciHigh) : nlohmann::json(nullptr)}, {"failed", p.failed}});
        }
        nlohmann::json brackets = nlohmann::json::array();
        for (const auto& b : result.brackets) {
            const auto value = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
            brackets.push_back({{"step", b.step}, {"largest_passing", value(b.largestPassing)},
                {"smallest_failing", value(b.smallestFailing)}, {"threshold", value(b.threshold)}});
        }
        nlohmann::json runs = nlohmann::json::array();
        for (const auto& run : result.runs) {
            runs.push_back({{"label", run.label}, {"run_id", run.runId}, {"wall_seconds", run.wallSeconds}});
        }
        // The command that reproduces this calibration (what a shipped calibration file records).
        std::string command = "mismatch calibrate";
        if (!a.runFile.empty()) {
            command += " " + a.runFile;
        }
        if (a.quick) {
            command += " --quick";
        }
        const auto list = [](const auto& values) {
            std::string text;
            for (const auto& v : values) {
                std::ostringstream item;
                item << v;
                text += (text.empty() ? "" : ",") + item.str();
            }
            return text;
        };
        if (!a.noise.empty()) {
            command += " --noise " + list(a.noise);
        }
        for (const auto& recipe : a.recipes) {
            command += " --recipe " + recipe;
        }
        if (!a.staleness.empty()) {
            command += " --staleness " + list(a.staleness);
        }
        if (!a.steps.empty()) {
            command += " --steps " + list(a.steps);
        }
        if (!a.name.empty()) {
            command += " --name " + a.name;
        }
        // The student relative to the resource directory when it is a built-in model (portable shipped files).
        const fs::path relative = fs::path(options.base.student).lexically_relative(fs::path(resourceDirectory()));
        const bool builtIn = !relative.empty() && relative.begin()->string() != "..";
        context.printJson({{"calibration_id", result.calibrationId}, {"run_id", result.runId}, {"name", options.name},
            {"student", options.base.student},
            {"student_in_resources", builtIn ? nlohmann::json(relative.string()) : nlohmann::json(nullptr)},
            {"command", a.resume > 0 ? nlohmann::json(nullptr) : nlohmann::json(command)}, {"base", nlohmann::json::parse(train::runConfigToJson(options.base))}, {"bf16_unit", result.bf16Unit}, {"runs", runs}, {"points", points},
            {"brackets", brackets}, {"wall_seconds", result.wallSeconds},
            {"rule", "fail when (Q_run - Q_base) / Q_base >= " + formatNumber(a.threshold) + " and the "
                    + formatNumber(100 * a.confidence) + "% paired bootstrap interval of mean_i (q_i_run - q_i_base) lies above zero"}});
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : result.points) {
        rows.push_back({std::to_string(p.step), labels[p.runId], formatNumber(p.mismatch),
            result.bf16Unit > 0 ? formatNumber(p.mismatch / result.bf16Unit, 3) + "x" : "-", formatNumber(p.quality),
            p.relativeChange ? formatNumber(100.0 * *p.relativeChange, 3) + "%" : "-",
            p.ciLow ? "[" + formatNumber(*p.ciLow, 3) + ", " + formatNumber(*p.ciHigh, 3) + "]" : "-",
            labels[p.runId] == "baseline" ? "baseline" : (p.failed ? "FAIL" : "pass")});
    }
    *context.out << "calibration " << result.calibrationId << " (" << options.name << ") of " << options.base.student
                 << "\nBF16 unit " << formatNumber(result.bf16Unit) << " nats/token; mismatch = mean step KL(mu||pi) up "
                 << "to the step, nats/token\n\n"
                 << formatTable({"step", "run", "mismatch", "x BF16", "Q", "dQ/Q", "interval of mean dq", "verdict"}, rows);
    rows.clear();
    for (const auto& b : result.brackets) {
        rows.push_back({std::to_string(b.step), optionalNumber(b.largestPassing), optionalNumber(b.smallestFailing),
            optionalNumber(b.threshold)});
    }
    *context.out << "\nbudget brackets (nats/token):\n"
                 << formatTable({"step", "largest passing", "smallest failing", "admission threshold"}, rows)
                 << "wall time " << formatDuration(result.wallSeconds) << "\n";
}

void registerCalibrateCommand(CLI::App& app, Context& context)
{
    auto a = std::make_shared<CalibrateArguments>();
    CLI::App* command = app.add_subcommand("calibrate",
        "Calibrate a student's mismatch budget: training runs at increasing mismatch (noise, recipes, staleness) "
        "plus the BF16-engine baseline, the failure rule at chosen steps, and the budget bracket per step. The run id "
        "is printed at the start; an interrupted calibration continues with `mismatch calibrate --resume RUN`");
    command->add_option("RUN_FILE", a->runFile, "The student's standard run (default: the demo pair's demo-opd.yaml)")
        ->check(CLI::ExistingFile);
    command->add_option("--name", a->name, "Calibration name (default: <run name>-calibration)");
    command->add_flag("--quick", a->quick,
        "Short sweep: the run cut to 40 steps of at most 16 prompts, evaluated at 20 and 40 on 128 held-out problems");
    command->add_option("--noise", a->noise, "Noise sigmas, relative to each tensor's RMS (default 0.05,0.1,0.2,0.4 "
                                             "when no recipe or staleness is given)")
        ->delimiter(',');
    command->add_option("--recipe", a->recipes, "Recipe files to include in the sweep")->check(CLI::ExistingFile);
    command->add_option("--staleness", a->staleness, "Staleness values to include in the sweep")->delimiter(',');
    command->add_option("--steps", a->steps, "Steps to apply the failure rule at (default: half-way and the last)")
        ->delimiter(',');
    command->add_option("--threshold", a->threshold, "Relative quality rise that fails (default 0.20)")
        ->check(between(0.0, 10.0));
    command->add_option("--confidence", a->confidence, "Bootstrap interval confidence (default 0.95)")
        ->check(between(0.5, 0.9999));
    command->add_option("--resamples", a->resamples, "Bootstrap resamples (default 10000)")->check(between(100, 1000000));
    command->add_option("--seed", a->seed, "Bootstrap seed");
    command->add_option("--margin", a->margin, "Admission threshold = largest passing x (1 - margin)")
        ->check(between(0.0, 0.99));
    auto* resume = command
                       ->add_option("--resume", a->resume,
                           "Continue calibrate run RUN (the run id printed when it started) after a kill, Ctrl-C or "
                           "failure: finished sweep runs are kept, the interrupted one continues from its newest "
                           "checkpoint, then the rest")
                       ->type_name("RUN");
    for (CLI::Option* option : command->get_options()) {
        if (option != resume && option->get_name() != "--help" && !option->get_name().empty()) {
            option->excludes(resume);
        }
    }
    command->callback([&context, a] { calibrate(context, *a); });
}

const CommandRegistration registration(88, registerCalibrateCommand);

} // namespace

} // namespace mismatch::cli

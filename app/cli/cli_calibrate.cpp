// mismatch calibrate [RUN_FILE]: the student's mismatch budget from a sweep of training runs (core/analysis/calibrate.h).
// mismatch calibrate --resume RUN: continue a killed, cancelled or failed calibration.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/calibration_presets.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/jobs/stored_specs.h"
#include "core/jobs/training_jobs.h"
#include "core/train/run_config.h"

#include <map>
#include <sstream>
#include <ostream>

namespace mismatch::cli {

namespace {

std::string optionalNumber(const std::optional<double>& value, int precision = 4)
{
    return value ? formatNumber(*value, precision) : "-";
}

// `command`: the reproducing command line (a resumed calibration's stored job's; null when the run keeps none).
void printCalibration(const Context& context, const nlohmann::json& command, const analysis::CalibrationOptions& options,
    const analysis::CalibrationResult& result);

std::optional<double> multiple(const store::CalibrationPoint& p)
{
    return p.bf16Unit && *p.bf16Unit > 0.0 ? std::optional<double>(p.mismatch / *p.bf16Unit) : std::nullopt;
}

std::string protocolText(const analysis::MeasurementProtocol& p)
{
    return "prompts " + p.prompts + " (first " + std::to_string(p.count) + "), max_tokens " + std::to_string(p.maxTokens)
        + ", temperature " + formatNumber(p.temperature) + ", top_p " + formatNumber(p.topP) + ", top_k "
        + std::to_string(p.topK) + ", seed " + std::to_string(p.seed) + " per prompt, KV scales "
        + analysis::toString(p.kvScales)
        + (p.kvScales == analysis::KvScalePolicy::FrozenFirstBatch ? " (" + std::to_string(p.kvFirstBatch) + " prompts)"
                                                                   : std::string())
        + ", BF16 unit at the screened weights";
}

void printCalibration(const Context& context, const nlohmann::json& command, const analysis::CalibrationOptions& options,
    const analysis::CalibrationResult& result)
{
    const std::string rule = analysis::calibrationRuleText(options.rule, result.replicates, result.maxReplicates);
    if (context.json) {
        context.printJson(analysis::toJson(result, options, command));
        return;
    }
    std::ostream& out = *context.out;
    out << "calibration " << result.calibrationId << " (" << options.name << ") of " << options.base.student << ", "
        << result.replicates << " seed(s) per configuration"
        << (result.maxReplicates > result.replicates
                   ? " to start, up to " + std::to_string(result.maxReplicates) + " for undecided points"
                   : std::string())
        << "\n"
        << "mismatch = the screen statistic: admit's measurement of the configuration on each seed's checkpoint at the "
           "step, under the protocol below (seed mean), nats/token; training mean = the mean step KL(mu||pi) of the "
           "training run over steps 1..step, beside it; x BF16 = mismatch over the BF16 unit of the same checkpoints "
           "under the same protocol\n";
    if (result.flags.empty()) {
        out << "not flagged: the null comparison does not fail, the noise floor is within its share of the line, "
               "the sweep is monotone and no undecided point lies inside a bracket at any step\n";
    } else {
        out << "FLAGGED (do not use this budget without reading why):\n";
        for (const auto& flag : result.flags) {
            out << "  " << analysis::flagText(flag) << "\n";
        }
    }
    out << "\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& p : result.points) {
        const auto x = multiple(p);
        rows.push_back({std::to_string(p.step), p.label, std::to_string(p.replicates), formatNumber(p.mismatch),
            optionalNumber(p.trainingMismatch), x ? formatNumber(*x, 3) + "x" : "-", formatNumber(p.quality),
            p.accuracy ? formatNumber(100.0 * *p.accuracy, 3) + "%" : "-",
            p.relativeChange ? formatNumber(100.0 * *p.relativeChange, 3) + "%" : "-",
            p.changeLow ? "[" + formatNumber(100.0 * *p.changeLow, 3) + "%, " + formatNumber(100.0 * *p.changeHigh, 3) + "%]"
                        : "-",
            p.label == "baseline" ? "baseline" : (p.failed() ? "FAIL" : p.undecided() ? "UNDECIDED" : "pass")});
    }
    out << formatTable({"step", "configuration", "seeds", "mismatch", "training mean", "x BF16", "Q", "accuracy", "dQ/Q",
                           "interval of dQ/Q (problems+seeds)", "verdict"},
        rows);
    out << "verdict: FAIL when the whole interval of dQ/Q is at or above the "
        << formatNumber(100.0 * options.rule.relativeThreshold, 3)
        << "% line, pass when below it, UNDECIDED when it contains the line (no bracket rests on it)\n";
    rows.clear();
    for (const auto& n : result.nullComparisons) {
        rows.push_back({std::to_string(n.step), formatNumber(100.0 * n.relativeChange, 3) + "%",
            "[" + formatNumber(100.0 * n.change.low, 3) + "%, " + formatNumber(100.0 * n.change.high, 3) + "%]",
            n.verdict == metrics::Verdict::Fail ? "FAIL" : n.verdict == metrics::Verdict::Undecided ? "UNDECIDED" : "pass",
            "+-" + formatNumber(100.0 * n.noiseFloor, 3) + "%"});
    }
    std::int64_t nullSeeds = 0;
    for (const auto& run : result.runs) {
        nullSeeds += run.label == "null" ? 1 : 0;
    }
    out << "\nnull comparison (the BF16 baseline against itself with " << nullSeeds << " other seed(s)); "
        << "noise floor: half the width of its interval:\n"
        << formatTable({"step", "dQ/Q", "interval of dQ/Q", "verdict", "noise floor"}, rows);
    rows.clear();
    for (const auto& b : result.brackets) {
        rows.push_back({std::to_string(b.step), optionalNumber(b.largestPassing), optionalNumber(b.smallestFailing),
            optionalNumber(b.threshold)});
    }
    out << "\nbudget brackets (nats/token):\n"
        << formatTable({"step", "largest passing", "smallest failing", "admission threshold"}, rows)
        << "rule: " << rule << "\nprotocol for screens against this budget: " << protocolText(result.protocol)
        << "\nwall time " << formatDuration(result.wallSeconds) << "\n";
}

void registerCalibrateCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("calibrate",
        "Calibrate a student's mismatch budget: training runs at increasing mismatch (noise, recipes, staleness) "
        "plus the BF16-engine baseline, the failure rule at chosen steps, and the budget bracket per step. The run id "
        "is printed at the start; an interrupted calibration continues with `mismatch calibrate --resume RUN`");
    // The options are the catalogue job's parameters (core/jobs/training_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("calibrate"));
    job->option("run_file")->check(CLI::ExistingFile);
    job->option("recipes")->check(CLI::ExistingFile);
    auto resume = std::make_shared<std::int64_t>(0);
    CLI::Option* resumeOption = command
                                    ->add_option("--resume", *resume,
                                        "Continue calibrate run RUN (the run id printed when it started) after a "
                                        "kill, Ctrl-C or failure: finished sweep runs are kept, the interrupted one "
                                        "continues from its newest checkpoint, then the rest")
                                    ->type_name("RUN")
                                    ->transform(runId());
    for (CLI::Option* option : command->get_options()) {
        if (option != resumeOption && option->get_name() != "--help" && !option->get_name().empty()) {
            option->excludes(resumeOption);
        }
    }
    command->callback([&context, job, resume, resumeOption] {
        const auto started = [](TerminalProgress& bar) {
            return [&bar](std::int64_t runId) {
                bar.note("calibrate run " + std::to_string(runId) + " (continue it after an interruption with "
                    "`mismatch calibrate --resume " + std::to_string(runId) + "`)");
            };
        };
        if (resumeOption->count() > 0) {
            store::RunStore store = context.openStore(store::OpenMode::OpenExisting);
            analysis::CalibrationOptions options
                = jobs::calibrationOptions(jobs::storedSpec(store, *resume, "calibrate"));
            options.name = store.run(*resume)->name;
            TerminalProgress bar(*context.err);
            options.onRunStarted = started(bar);
            const analysis::CalibrationResult result = analysis::resumeCalibration(
                store, *resume, options, bar.progress(), context.workspaceDirectory());
            bar.finish();
            printCalibration(context, jobs::storedCommand(store, *resume), options, result);
            return;
        }
        const jobs::JobSpec spec = job->checkedSpec();
        analysis::CalibrationOptions options = jobs::calibrationOptions(spec);
        options.workspaceDirectory = context.workspaceDirectory();
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        options.onRunStarted = started(bar);
        const analysis::CalibrationResult result = analysis::runCalibration(store, options, bar.progress());
        bar.finish();
        if (options.unit) {
            // A unit (scale-out) stores one training run and its screens; the calibration is its decision step's.
            const nlohmann::json unit = {{"run_id", result.runId}, {"name", options.name},
                {"unit", analysis::toString(*options.unit)},
                {"sweep_run_id", result.runs.empty() ? nlohmann::json() : nlohmann::json(result.runs.front().runId)},
                {"command", jobs::commandLine(spec.toArguments())}, {"wall_seconds", result.wallSeconds}};
            if (context.json) {
                context.printJson(unit);
            } else {
                *context.out << "calibration unit " << unit["unit"].get<std::string>() << " of " << options.name
                             << ": run " << result.runId << ", training run " << unit["sweep_run_id"].dump()
                             << " with its screens; decide with `mismatch calibrate ... --from-units` once merged\n";
            }
            return;
        }
        printCalibration(context, jobs::commandLine(spec.toArguments()), options, result);
    });
}

const CommandRegistration registration(88, registerCalibrateCommand);

} // namespace

} // namespace mismatch::cli

// mismatch admit STUDENT... (--candidates FILE | [--recipe R] [--staleness K] [--noise SIGMA]) --prompts PROBE
//                (--calibration ID [--step S]... | --threshold X) [--history DIR...]
// mismatch admit --resume RUN: continue a killed, cancelled or failed check (its stored options).
// The admission check: each candidate rollout configuration at each student checkpoint, mismatch with a bootstrap
// interval over the probe prompts against the threshold: admit, reject or borderline. Decisions are results, not
// errors: every verdict exits 0 (read `decision` from --json to gate a script).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/admission.h"
#include "core/common/error.h"

#include <filesystem>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct AdmitArguments {
    std::vector<std::string> checkpoints;
    std::vector<std::string> history;
    std::string candidates;
    std::string recipe;
    std::string name;
    std::int64_t staleness = 0;
    double noise = 0.0;
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
    std::string prompts;
    std::int64_t calibration = 0;
    std::vector<std::int64_t> steps;
    double threshold = 0.0;
    bool noUnit = false;
    std::int64_t resume = 0;
    AnalysisArguments analysis;
};

void registerAdmitCommand(CLI::App& app, Context& context)
{
    auto a = std::make_shared<AdmitArguments>();
    CLI::App* command = app.add_subcommand("admit",
        "Admission check: screen candidate rollout configurations (recipe, staleness, noise) at student checkpoints "
        "against a budget: mismatch with a bootstrap interval over probe prompts, then admit (interval below the "
        "threshold), reject (above) or borderline; every decision is stored");
    auto* students = command
                         ->add_option("STUDENT", a->checkpoints,
                             "Student checkpoint directories to screen, in training order (each is the FP32 trainer "
                             "of its decisions)")
                         ->type_name("DIR...");
    auto* candidates = command->add_option("--candidates,-c", a->candidates,
        "YAML list of candidates {name, recipe, staleness, noise, noise_seed, noise_modules}");
    auto* recipe = command->add_option("--recipe,-r", a->recipe, "One candidate's recipe (default: the BF16 engine)");
    auto* staleness = command->add_option("--staleness", a->staleness,
        "One candidate's staleness k: the engine uses the checkpoint k places earlier (see --history)");
    staleness->check(atLeast(0));
    auto* noise = command->add_option("--noise", a->noise, "One candidate's weight noise sigma (relative to RMS)");
    noise->check(atLeast(0));
    auto* noiseSeed = command->add_option("--noise-seed", a->noiseSeed, "Seed of the weight noise");
    auto* noiseModules = command->add_option("--noise-modules", a->noiseModules, "Recipe pattern of the noisy modules");
    auto* name = command->add_option("--name", a->name, "One candidate's name (default from the recipe)");
    for (auto* option : {recipe, staleness, noise, noiseSeed, noiseModules, name}) {
        option->excludes(candidates);
    }
    command
        ->add_option("--history", a->history,
            "Older checkpoints of the same student (oldest first), used only as stale engine weights")
        ->type_name("DIR...");
    auto* probe = command->add_option("--prompts,-p", a->prompts, "Probe prompt set (JSONL)")->type_name("PROBE");
    auto* calibration = command->add_option(
        "--calibration", a->calibration, "Stored calibration whose budget bracket gives the threshold");
    command
        ->add_option(
            "--step", a->steps, "Calibration step(s) of the bracket: one for all checkpoints or one per checkpoint")
        ->needs(calibration);
    auto* threshold = command->add_option("--threshold", a->threshold, "Explicit threshold, nats per token")
                          ->check(greaterThan(0));
    threshold->excludes(calibration);
    command->add_flag("--no-unit", a->noUnit, "Skip the BF16 unit per checkpoint (no BF16 multiples)");
    auto* resume = command
                       ->add_option("--resume", a->resume,
                           "Continue admit run RUN (the run id printed when it started) after a kill, Ctrl-C or "
                           "failure: its stored options and inputs, only the decisions not stored yet are made")
                       ->type_name("RUN");
    for (auto* option : {students, probe, candidates, recipe, calibration, threshold}) {
        option->excludes(resume);
    }
    addAnalysisOptions(command, a->analysis);
    command->callback([&context, a, candidates, calibration, threshold, students, probe, resume] {
        const bool resuming = resume->count() > 0;
        analysis::AdmissionOptions options;
        if (!resuming) {
            if (students->count() == 0 || probe->count() == 0) {
                throw CLI::RequiredError("STUDENT and --prompts (or --resume RUN)");
            }
            options.checkpoints = a->checkpoints;
            options.history = a->history;
            options.probePath = a->prompts;
            options.count = a->analysis.count;
            options.settings = resolveSettings(a->analysis);
            options.measureUnit = !a->noUnit;
            if (candidates->count() > 0) {
                options.candidates = analysis::loadCandidates(a->candidates);
            } else {
                analysis::Candidate candidate;
                candidate.recipePath = a->recipe;
                candidate.staleness = a->staleness;
                candidate.noise = a->noise;
                candidate.noiseSeed = a->noiseSeed;
                candidate.noiseModules = a->noiseModules;
                candidate.name = !a->name.empty() ? a->name
                    : a->recipe.empty()           ? std::string("bf16")
                                                  : std::filesystem::path(a->recipe).stem().string();
                options.candidates.push_back(candidate);
            }
            if (calibration->count() > 0) {
                options.calibrationId = a->calibration;
                options.steps = a->steps;
            } else if (threshold->count() > 0) {
                options.threshold = a->threshold;
            } else {
                throw InputError("admit", "threshold", "give --calibration ID or --threshold X");
            }
        }
        store::RunStore store
            = context.openStore(resuming ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        CancelOnInterrupt interrupt(bar.progress());
        const auto started = [&bar](std::int64_t runId) {
            bar.note("admit run " + std::to_string(runId) + " (continue it after an interruption with "
                "`mismatch admit --resume " + std::to_string(runId) + "`)");
        };
        analysis::AdmissionResult result;
        if (resuming) {
            result = analysis::resumeAdmission(store, a->resume, bar.progress(), started);
        } else {
            options.onRunStarted = started;
            result = analysis::runAdmission(store, options, bar.progress());
        }
        bar.finish();
        if (context.json) {
            nlohmann::json rows = nlohmann::json::array();
            for (const auto& row : result.rows) {
                rows.push_back({{"candidate", row.candidate}, {"checkpoint", row.checkpoint},
                    {"engine_weights", row.engineWeights}, {"decision", analysis::toString(row.verdict)},
                    {"mismatch", intervalJson(row.interval)}, {"threshold", row.threshold}, {"k1", row.k1},
                    {"k3", row.k3}, {"tokens", row.tokens},
                    {"bf16_unit", row.bf16Unit ? nlohmann::json(*row.bf16Unit) : nlohmann::json()},
                    {"bf16_multiple",
                        row.bf16Unit && *row.bf16Unit > 0.0 ? nlohmann::json(row.mismatch / *row.bf16Unit)
                                                            : nlohmann::json()},
                    {"seconds", row.seconds}, {"decision_id", row.decisionId}});
            }
            context.printJson({{"run_id", result.runId}, {"decisions", rows}, {"seconds", result.seconds},
                {"rule",
                    "admit when the interval's high end < threshold, reject when its low end > threshold, "
                    "borderline otherwise"}});
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (const auto& row : result.rows) {
            rows.push_back(
                {row.candidate, std::filesystem::path(row.checkpoint).filename().string(), intervalText(row.interval),
                    row.bf16Unit && *row.bf16Unit > 0.0 ? formatNumber(row.mismatch / *row.bf16Unit, 3) + "x"
                                                        : std::string("-"),
                    formatNumber(row.threshold, 4), analysis::toString(row.verdict), formatDuration(row.seconds)});
        }
        std::ostream& out = *context.out;
        out << formatTable(
            {"candidate", "checkpoint", "mismatch [95%] nats/token", "x BF16", "threshold", "decision", "time"}, rows)
            << "\nadmit: interval below the threshold; reject: above; borderline: straddles it\n"
            << result.rows.size() << " decision(s) stored (run " << result.runId << "), total time "
            << formatDuration(result.seconds) << "\n";
    });
}

const CommandRegistration registration(74, registerAdmitCommand);

} // namespace

} // namespace mismatch::cli

// mismatch admit STUDENT... (--candidates FILE | [--recipe R] [--staleness K] [--noise SIGMA])
//                (--calibration ID [--step S]... | --threshold X --prompts PROBE) [--history DIR...]
// mismatch admit --resume RUN: continue a killed, cancelled or failed check (its stored options).
// The admission check: each candidate rollout configuration at each student checkpoint, mismatch with a bootstrap
// interval over the probe prompts against the threshold: admit, reject or borderline. Decisions are results, not
// errors: every verdict exits 0 (read `decision` from --json to gate a script).
#include "app/cli/admission_output.h"
#include "app/cli/analysis_options.h"
#include "app/cli/candidate_options.h"
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
    CandidateArguments candidates;
    std::string prompts;
    std::int64_t calibration = 0;
    std::vector<std::int64_t> steps;
    double threshold = 0.0;
    bool noUnit = false;
    bool allowProtocolMismatch = false;
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
    addCandidateOptions(command, a->candidates);
    auto* candidates = a->candidates.candidatesOption;
    auto* recipe = a->candidates.recipeOption;
    command
        ->add_option("--history", a->history,
            "Older checkpoints of the same student (oldest first), used only as stale engine weights")
        ->type_name("DIR...");
    auto* probe = command
                      ->add_option("--prompts,-p", a->prompts,
                          "Probe prompt set (JSONL); with --calibration the calibration's protocol names it")
                      ->type_name("PROBE");
    auto* calibration = command->add_option("--calibration", a->calibration,
        "Stored calibration whose budget bracket gives the threshold; the screen is measured under its protocol");
    command
        ->add_option("--step", a->steps,
            "Calibration step(s) of the bracket: one for all checkpoints or one per checkpoint (default: each "
            "checkpoint's own optimizer step, else the nearest earlier bracket)")
        ->needs(calibration);
    command
        ->add_flag("--allow-protocol-mismatch", a->allowProtocolMismatch,
            "Screen under probe/sampling/KV options that differ from the calibration's protocol anyway; the "
            "decisions are labelled as measured under another protocol")
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
    command->callback([&context, a, calibration, threshold, students, probe, resume] {
        const bool resuming = resume->count() > 0;
        analysis::AdmissionOptions options;
        std::optional<store::RunStore> opened;
        if (!resuming) {
            if (students->count() == 0) {
                throw CLI::RequiredError("STUDENT (or --resume RUN)");
            }
            if (probe->count() == 0 && calibration->count() == 0) {
                throw CLI::RequiredError("--prompts PROBE (or --calibration ID, whose protocol names the probe set)");
            }
            options.checkpoints = a->checkpoints;
            options.history = a->history;
            options.probePath = a->prompts;
            options.count = a->analysis.count;
            options.settings = resolveSettings(a->analysis);
            options.measureUnit = !a->noUnit;
            options.candidates = resolveCandidates(a->candidates);
            if (calibration->count() > 0) {
                options.calibrationId = a->calibration;
                options.steps = a->steps;
                options.allowProtocolMismatch = a->allowProtocolMismatch;
                // Options that set the protocol are laid over the calibration's; core compares the result with
                // it and refuses a difference unless --allow-protocol-mismatch.
                if (probe->count() > 0 || protocolOptionGiven(a->analysis)) {
                    options.protocolFromCalibration = false;
                    opened.emplace(context.openStore(store::OpenMode::OpenExisting));
                    const auto stored = store::calibration(*opened, a->calibration);
                    const auto protocol = stored ? analysis::storedProtocol(stored->info.configJson, opened->path())
                                                 : std::nullopt;
                    if (protocol) {
                        options.settings = settingsOver(*protocol, a->analysis);
                        options.probePath = probe->count() > 0 ? a->prompts : protocol->prompts;
                        options.count = a->analysis.protocolOptions.front()->count() > 0 ? a->analysis.count
                                                                                          : protocol->count;
                    }
                }
            } else if (threshold->count() > 0) {
                options.threshold = a->threshold;
            } else {
                throw InputError("admit", "threshold", "give --calibration ID or --threshold X");
            }
        }
        if (!opened) {
            opened.emplace(
                context.openStore(resuming ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen));
        }
        store::RunStore& store = *opened;
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
            context.printJson(admissionJson(result));
            return;
        }
        printAdmission(*context.out, result);
    });
}

const CommandRegistration registration(74, registerAdmitCommand);

} // namespace

} // namespace mismatch::cli

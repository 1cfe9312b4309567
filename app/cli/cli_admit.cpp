// mismatch admit STUDENT... (--candidates FILE | [--recipe R] [--staleness K] [--noise SIGMA])
//                (--calibration ID [--step S]... | --threshold X --prompts PROBE) [--history DIR...]
// mismatch admit --resume RUN: continue a killed, cancelled or failed check (its stored job spec).
// The admission check: each candidate rollout configuration at each student checkpoint, mismatch with a bootstrap
// interval over the probe prompts against the threshold: admit, reject or borderline. Decisions are results, not
// errors: every verdict exits 0 (read `decision` from --json to gate a script).
#include "app/cli/admission_output.h"
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/admission.h"
#include "core/common/error.h"
#include "core/jobs/analysis_jobs.h"
#include "core/jobs/stored_specs.h"

#include <filesystem>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void registerAdmitCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("admit",
        "Admission check: screen candidate rollout configurations (recipe, staleness, noise) at student checkpoints "
        "against a budget: mismatch with a bootstrap interval over probe prompts, then admit (interval below the "
        "threshold), reject (above) or borderline; every decision is stored");
    // The options are the catalogue job's parameters (core/jobs/analysis_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("admit"));
    auto resume = std::make_shared<std::int64_t>(0);
    auto* resumeOption = command
                       ->add_option("--resume", *resume,
                           "Continue admit run RUN (the run id printed when it started) after a kill, Ctrl-C or "
                           "failure: its stored job spec and inputs, only the decisions not stored yet are made")
                       ->type_name("RUN")
                       ->transform(runId());
    for (const char* name : {"students", "prompts", "candidates", "recipe", "calibration", "threshold"}) {
        job->option(name)->excludes(resumeOption);
    }
    command->callback([&context, job, resume, resumeOption] {
        const bool resuming = resumeOption->count() > 0;
        analysis::AdmissionOptions options;
        std::optional<store::RunStore> opened;
        if (!resuming) {
            const jobs::JobSpec spec = job->spec();
            // A calibration's protocol is read from the workspace, which must then exist.
            opened.emplace(context.openStore(
                spec.given("calibration") ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen));
            options = jobs::admissionOptions(spec, *opened);
            jobs::expectJobRun(*opened, spec);
        }
        if (!opened) {
            opened.emplace(
                context.openStore(resuming ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen));
        }
        store::RunStore& store = *opened;
        TerminalProgress bar(*context.err);
        const auto started = [&bar](std::int64_t runId) {
            bar.note("admit run " + std::to_string(runId) + " (continue it after an interruption with "
                "`mismatch admit --resume " + std::to_string(runId) + "`)");
        };
        analysis::AdmissionResult result;
        if (resuming) {
            analysis::AdmissionOptions stored = jobs::admissionOptions(jobs::storedSpec(store, *resume, "admit"), store);
            stored.onRunStarted = started;
            result = analysis::resumeAdmission(store, *resume, stored, bar.progress());
        } else {
            options.onRunStarted = started;
            result = analysis::runAdmission(store, options, bar.progress());
        }
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(result));
            return;
        }
        printAdmission(*context.out, result);
    });
}

const CommandRegistration registration(74, registerAdmitCommand);

} // namespace

} // namespace mismatch::cli

// mismatch time-to-quality [RUN_FILE] --recipe R --staleness K: synchronous BF16 against a candidate rollout
// configuration, both trained in one invocation (core/analysis/time_to_quality.h).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/time_to_quality.h"
#include "core/jobs/experiment_jobs.h"

#include <ostream>

namespace mismatch::cli {

namespace {

void registerTimeToQuality(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("time-to-quality",
        "Wall time to a target quality: the synchronous BF16 run against a candidate (recipe, staleness, "
        "asynchronous loop), both trained now; the target is the BF16 run's quality at --target-step");
    // The options are the catalogue job's parameters (core/jobs/experiment_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("time_to_quality"));
    job->option("run_file")->check(CLI::ExistingFile);
    job->option("recipe")->check(CLI::ExistingFile);
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        const analysis::TimeToQualityOptions options = jobs::timeToQualityOptions(spec);
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        const analysis::TimeToQualityResult r = analysis::runTimeToQuality(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::timeToQualityJson(r));
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (const auto* run : {&r.baseline, &r.candidate}) {
            rows.push_back({run->label, std::to_string(run->runId),
                run->reached.reached ? "step " + std::to_string(run->reached.step) : "not reached",
                run->reached.reached ? formatDuration(run->reached.wallSeconds) : "-",
                run->reached.bestQuality ? formatNumber(*run->reached.bestQuality) : "-", formatDuration(run->totalSeconds)});
        }
        *context.out << "target quality Q <= " << formatNumber(r.targetQuality) << " nats/token (the BF16 run at step "
                     << r.targetStep << ")\n"
                     << formatTable({"run", "id", "reached at", "time to quality", "best Q", "run time"}, rows)
                     << "speedup: " << (r.speedup ? formatNumber(*r.speedup, 3) + "x" : std::string("- (not reached)"))
                     << "\n";
    });
}

const CommandRegistration registration(89, registerTimeToQuality);

} // namespace

} // namespace mismatch::cli

// mismatch time-to-quality [RUN_FILE] --recipe R --staleness K: synchronous BF16 against a candidate rollout
// configuration, both trained in one invocation (core/analysis/time_to_quality.h).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/time_to_quality.h"
#include "core/common/runtime.h"

#include <filesystem>
#include <ostream>

namespace fs = std::filesystem;

namespace mismatch::cli {

namespace {

void registerTimeToQuality(CLI::App& app, Context& context)
{
    struct Arguments {
        std::string runFile;
        analysis::TimeToQualityOptions options;
        std::int64_t targetStep = 0;
        bool synchronous = false;
    };
    auto a = std::make_shared<Arguments>();
    CLI::App* command = app.add_subcommand("time-to-quality",
        "Wall time to a target quality: the synchronous BF16 run against a candidate (recipe, staleness, "
        "asynchronous loop), both trained now; the target is the BF16 run's quality at --target-step");
    command->add_option("RUN_FILE", a->runFile, "Base run file (default: the demo pair's demo-opd-quick.yaml)")
        ->check(CLI::ExistingFile);
    command->add_option("--recipe", a->options.recipe, "The candidate's recipe (default: BF16)")->check(CLI::ExistingFile);
    command->add_option("--staleness", a->options.staleness, "The candidate's staleness (default 1)")
        ->check(atLeast(0));
    command->add_flag("--synchronous", a->synchronous, "Run the candidate with the synchronous loop");
    command->add_option("--target-step", a->targetStep, "Evaluated step of the BF16 run whose Q is the target (default: last)")
        ->check(greaterThan(0));
    command->callback([&context, a] {
        const std::string runFile = a->runFile.empty()
            ? (fs::path(resourceDirectory()) / "runs" / "demo-opd-quick.yaml").string()
            : a->runFile;
        analysis::TimeToQualityOptions options = a->options;
        options.base = train::loadRunConfig(runFile);
        options.asynchronous = !a->synchronous;
        if (a->targetStep > 0) {
            options.targetStep = a->targetStep;
        }
        options.workspaceDirectory = context.workspaceDirectory();
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
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

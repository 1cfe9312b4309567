// mismatch compare-objectives [RUN_FILE]: OPD, REINFORCE and GRPO under the same engine configurations, and where
// each breaks in BF16 units (core/analysis/compare_objectives.h).
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/compare_objectives.h"
#include "core/jobs/experiment_jobs.h"

#include <ostream>

namespace mismatch::cli {

namespace {

std::string optionalText(const std::optional<double>& value, int precision = 4, const std::string& suffix = "")
{
    return value ? formatNumber(*value, precision) + suffix : "-";
}

void registerCompareObjectives(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("compare-objectives",
        "OPD, REINFORCE and GRPO trained under the same engine configurations: where each breaks, in BF16 units "
        "(OPD by the failure rule, RL by reward collapse against its own BF16 run; the rules are printed)");
    // The options are the catalogue job's parameters (core/jobs/experiment_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("compare_objectives"));
    job->option("run_file")->check(CLI::ExistingFile);
    job->option("recipes")->check(CLI::ExistingFile);
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        const analysis::CompareObjectivesOptions options = jobs::compareObjectivesOptions(spec);
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        const analysis::CompareObjectivesResult r = analysis::runCompareObjectives(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(r));
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (const auto& row : r.rows) {
            rows.push_back({train::toString(row.objective), row.configuration, std::to_string(row.runId),
                formatNumber(row.mismatch), formatNumber(row.bf16Multiple, 3) + "x", optionalText(row.quality),
                row.relativeChange ? formatNumber(100.0 * *row.relativeChange, 3) + "%" : "-", optionalText(row.reward, 3),
                analysis::toString(row.verdict)});
        }
        *context.out << formatTable({"objective", "engine", "run", "mismatch", "x BF16", "Q", "dQ/Q", "reward", "verdict"}, rows)
                     << "\n";
        rows.clear();
        for (const auto& b : r.breaks) {
            rows.push_back({train::toString(b.objective), optionalText(b.largestHolding, 3, "x"),
                optionalText(b.smallestBreaking, 3, "x")});
        }
        *context.out << "where each breaks (BF16 multiples):\n"
                     << formatTable({"objective", "largest holding", "smallest breaking"}, rows);
        for (const auto& b : r.breaks) {
            *context.out << "  " << train::toString(b.objective) << ": " << b.rule << "\n";
        }
        *context.out << "wall time " << formatDuration(r.wallSeconds) << "\n";
    });
}

const CommandRegistration registration(90, registerCompareObjectives);

} // namespace

} // namespace mismatch::cli

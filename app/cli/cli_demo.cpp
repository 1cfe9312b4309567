// mismatch demo: the headless main job on the built-in demo resources.
#include "app/cli/admission_output.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "core/analysis/demo.h"
#include "app/cli/terminal_progress.h"
#include "core/jobs/experiment_jobs.h"

#include <ostream>

namespace mismatch::cli {

namespace {
void registerDemoCommand(CLI::App& app, Context& context)
{
    CLI::App* demo = app.add_subcommand("demo",
        "Headless demo: register the built-in demo models and prompt sets, screen the shipped candidate rollout "
        "configurations against the demo student's shipped mismatch budget (admission check), and print the "
        "decisions with their intervals");
    // The options are the catalogue job's parameters (core/jobs/experiment_jobs.h).
    auto job = std::make_shared<JobOptions>(demo, *jobs::findJob("demo"));
    demo->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        const analysis::DemoOptions options = jobs::demoOptions(spec);
        analysis::checkDemoOptions(options); // before the workspace is opened (or created)
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        const analysis::DemoReport report = analysis::runDemo(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(report, store.path()));
            return;
        }
        *context.out << "Mismatch Lab demo: workspace " << store.path() << "\n\n";
        std::vector<std::vector<std::string>> modelRows;
        for (const auto& m : report.models) {
            modelRows.push_back({m.name, m.architecture, std::to_string(m.parameterCount), m.path});
        }
        *context.out << "Built-in models (" << report.models.size() << ")\n"
                     << formatTable({"name", "architecture", "parameters", "path"}, modelRows) << "\n";
        std::vector<std::vector<std::string>> setRows;
        for (const auto& p : report.promptSets) {
            setRows.push_back({p.name, std::to_string(p.promptCount), p.path});
        }
        *context.out << "Built-in prompt sets (" << report.promptSets.size() << ")\n"
                     << formatTable({"name", "prompts", "path"}, setRows) << "\n";
        if (report.admission) {
            const double threshold = report.admission->rows.empty() ? 0.0 : report.admission->rows.front().threshold;
            *context.out << "Admission check of the shipped candidates on arith-student (" << report.admission->rows.size()
                         << " candidates, " << formatDuration(report.admission->seconds) << ")\n"
                         << "budget: the shipped calibration (" << report.calibrationCommand << ") at step "
                         << report.calibrationStep << ", admission threshold " << formatNumber(threshold)
                         << " nats/token; 95% bootstrap intervals over the probe prompts\n";
            printAdmission(*context.out, *report.admission);
            *context.out << "\n";
        }
        printSummary(context, report.summary);
    });
}

const CommandRegistration registration(0, registerDemoCommand);
}  // namespace

}  // namespace mismatch::cli

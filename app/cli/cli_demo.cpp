// mismatch demo: the headless main job on the built-in demo resources.
#include "app/cli/admission_output.h"
#include "app/cli/context.h"
#include "core/analysis/demo.h"
#include "app/cli/terminal_progress.h"
#include "core/common/runtime.h"

#include <ostream>

namespace mismatch::cli {

namespace {
void registerDemoCommand(CLI::App& app, Context& context)
{
    CLI::App* demo = app.add_subcommand("demo",
        "Headless demo: register the built-in demo models and prompt sets, screen the shipped candidate rollout "
        "configurations against the demo student's shipped mismatch budget (admission check), and print the "
        "decisions with their intervals");
    auto count = std::make_shared<std::int64_t>(0);
    auto* countOption = demo->add_option("--count", *count,
                                "Probe prompts the admission check generates on (default: the calibration protocol's; "
                                "another count is labelled as another protocol)")
                            ->check(between(2, 100000))
                            ->type_name("N");
    demo->callback([&context, count, countOption] {
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        analysis::DemoOptions options;
        options.resourceDirectory = resourceDirectory();
        if (countOption->count() > 0) {
            options.probeCount = *count;
        }
        const analysis::DemoReport report = analysis::runDemo(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json models = nlohmann::json::array();
            for (const auto& m : report.models) {
                models.push_back({{"id", m.id}, {"name", m.name}, {"path", m.path}, {"architecture", m.architecture},
                    {"parameters", m.parameterCount}});
            }
            nlohmann::json sets = nlohmann::json::array();
            for (const auto& p : report.promptSets) {
                sets.push_back({{"id", p.id}, {"name", p.name}, {"path", p.path}, {"prompts", p.promptCount}});
            }
            const nlohmann::json admission = report.admission ? analysis::toJson(*report.admission) : nlohmann::json();
            context.printJson({{"workspace", store.path()}, {"models", models}, {"prompt_sets", sets},
                {"calibration_id", report.calibrationId ? nlohmann::json(*report.calibrationId) : nlohmann::json(nullptr)},
                {"calibration_command", report.calibrationCommand}, {"calibration_step", report.calibrationStep},
                {"admission", admission}, {"runs", report.summary.runs},
                {"schema_version", report.summary.schemaVersion}});
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

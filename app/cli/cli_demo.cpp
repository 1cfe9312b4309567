// mismatch demo: the headless main job on the built-in demo resources.
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
        "Headless demo: create the workspace, register the built-in demo models and prompt sets, and print what "
        "the workspace holds");
    demo->callback([&context] {
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        analysis::DemoOptions options;
        options.resourceDirectory = resourceDirectory();
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
            context.printJson({{"workspace", store.path()}, {"models", models}, {"prompt_sets", sets},
                {"runs", report.summary.runs}, {"schema_version", report.summary.schemaVersion}});
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
        printSummary(context, report.summary);
    });
}

const CommandRegistration registration(0, registerDemoCommand);
}  // namespace

}  // namespace mismatch::cli

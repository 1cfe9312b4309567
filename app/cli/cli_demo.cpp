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
        "Headless demo: register the built-in demo models and prompt sets, screen the shipped candidate rollout "
        "configurations against the demo student's shipped mismatch budget (admission check), and print the "
        "decisions with their intervals");
    auto count = std::make_shared<std::int64_t>(128);
    demo->add_option("--count", *count, "Probe prompts the admission check generates on (default 128, all)")
        ->check(between(2, 100000))
        ->type_name("N");
    demo->callback([&context, count] {
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        analysis::DemoOptions options;
        options.resourceDirectory = resourceDirectory();
        options.probeCount = *count;
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
            nlohmann::json decisions = nlohmann::json::array();
            if (report.admission) {
                for (const auto& row : report.admission->rows) {
                    decisions.push_back({{"candidate", row.candidate}, {"mismatch", row.mismatch},
                        {"ci_low", row.interval.low}, {"ci_high", row.interval.high},
                        {"confidence", row.interval.confidence}, {"threshold", row.threshold},
                        {"bf16_multiple", row.bf16Unit && *row.bf16Unit > 0 ? nlohmann::json(row.mismatch / *row.bf16Unit)
                                                                            : nlohmann::json(nullptr)},
                        {"verdict", analysis::toString(row.verdict)}, {"seconds", row.seconds},
                        {"decision_id", row.decisionId}});
                }
            }
            context.printJson({{"workspace", store.path()}, {"models", models}, {"prompt_sets", sets},
                {"calibration_id", report.calibrationId ? nlohmann::json(*report.calibrationId) : nlohmann::json(nullptr)},
                {"calibration_command", report.calibrationCommand}, {"calibration_step", report.calibrationStep},
                {"decisions", decisions}, {"runs", report.summary.runs},
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
            std::vector<std::vector<std::string>> rows;
            double threshold = 0.0;
            for (const auto& row : report.admission->rows) {
                threshold = row.threshold;
                rows.push_back({row.candidate, formatNumber(row.mismatch),
                    "[" + formatNumber(row.interval.low) + ", " + formatNumber(row.interval.high) + "]",
                    row.bf16Unit && *row.bf16Unit > 0 ? formatNumber(row.mismatch / *row.bf16Unit, 3) + "x" : "-",
                    analysis::toString(row.verdict), formatNumber(row.seconds, 2) + " s"});
            }
            *context.out << "Admission check of the shipped candidates on arith-student (" << report.admission->rows.size()
                         << " candidates, " << formatDuration(report.admission->seconds) << ")\n"
                         << "budget: the shipped calibration (" << report.calibrationCommand << ") at step "
                         << report.calibrationStep << ", admission threshold " << formatNumber(threshold)
                         << " nats/token; 95% bootstrap intervals over the probe prompts\n"
                         << formatTable({"candidate", "mismatch", "95% interval", "x BF16", "decision", "time"}, rows)
                         << "\n";
        }
        printSummary(context, report.summary);
    });
}

const CommandRegistration registration(0, registerDemoCommand);
}  // namespace

}  // namespace mismatch::cli

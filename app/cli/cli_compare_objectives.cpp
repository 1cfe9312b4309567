// mismatch compare-objectives [RUN_FILE]: OPD, REINFORCE and GRPO under the same engine configurations, and where
// each breaks in BF16 units (core/analysis/compare_objectives.h).
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/compare_objectives.h"
#include "core/common/error.h"
#include "core/common/runtime.h"

#include <filesystem>
#include <ostream>

namespace fs = std::filesystem;

namespace mismatch::cli {

namespace {

std::string optionalText(const std::optional<double>& value, int precision = 4, const std::string& suffix = "")
{
    return value ? formatNumber(*value, precision) + suffix : "-";
}

void registerCompareObjectives(CLI::App& app, Context& context)
{
    struct Arguments {
        std::string runFile;
        std::vector<std::string> objectives;
        std::int64_t steps = 0;
        analysis::CompareObjectivesOptions options;
    };
    auto a = std::make_shared<Arguments>();
    a->options.rlMaxTokens = 40;
    CLI::App* command = app.add_subcommand("compare-objectives",
        "OPD, REINFORCE and GRPO trained under the same engine configurations: where each breaks, in BF16 units "
        "(OPD by the failure rule, RL by reward collapse against its own BF16 run; the rules are printed)");
    command->add_option("RUN_FILE", a->runFile, "Base run file (default: the demo pair's demo-opd-quick.yaml)")
        ->check(CLI::ExistingFile);
    command->add_option("--objectives", a->objectives, "Objectives to compare (default opd_full_kl,reinforce,grpo)")
        ->delimiter(',')
        ->check(CLI::IsMember({"opd_full_kl", "opd_k1", "opd_k3", "reinforce", "grpo"}));
    command->add_option("--noise", a->options.noiseSigmas, "Noise sigmas of the sweep (default 0.1,0.3,1.0 without --recipe)")
        ->delimiter(',');
    command->add_option("--recipe", a->options.recipes, "Recipes of the sweep")->check(CLI::ExistingFile);
    command->add_option("--steps", a->steps, "Steps of every run (default: the run file's)")->check(greaterThan(0));
    command->add_option("--rl-max-tokens", a->options.rlMaxTokens, "RL response length (default 40: whole answers)")
        ->check(greaterThan(0));
    command->add_option("--group", a->options.samplesPerPrompt, "GRPO samples per prompt (default 4)")
        ->check(between(2, 64));
    command->add_option("--window", a->options.window, "RL steps averaged for the reward (default: the last quarter)")
        ->check(greaterThan(0));
    command->add_option("--collapse", a->options.collapse, "RL breaks below (1 - collapse) x its BF16 reward (default 0.5)")
        ->check(between(0.01, 0.99));
    command->callback([&context, a] {
        analysis::CompareObjectivesOptions options = a->options;
        options.base = train::loadRunConfig(a->runFile.empty()
                ? (fs::path(resourceDirectory()) / "runs" / "demo-opd-quick.yaml").string()
                : a->runFile);
        if (a->steps > 0) {
            options.base.steps = a->steps;
        }
        if (!a->objectives.empty()) {
            options.objectives.clear();
            for (const auto& name : a->objectives) {
                options.objectives.push_back(*train::objectiveFromString(name));
            }
        }
        if (options.noiseSigmas.empty() && options.recipes.empty()) {
            options.noiseSigmas = {0.1, 0.3, 1.0};
        }
        options.workspaceDirectory = context.workspaceDirectory();
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        const analysis::CompareObjectivesResult r = analysis::runCompareObjectives(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json rows = nlohmann::json::array();
            for (const auto& row : r.rows) {
                const auto optional = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
                rows.push_back({{"objective", train::toString(row.objective)}, {"configuration", row.configuration},
                    {"run_id", row.runId}, {"mismatch", row.mismatch}, {"bf16_multiple", row.bf16Multiple},
                    {"quality", optional(row.quality)}, {"relative_change", optional(row.relativeChange)},
                    {"reward", optional(row.reward)}, {"verdict", analysis::toString(row.verdict)}});
            }
            nlohmann::json breaks = nlohmann::json::array();
            for (const auto& b : r.breaks) {
                const auto optional = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
                breaks.push_back({{"objective", train::toString(b.objective)}, {"largest_holding_bf16_multiple", optional(b.largestHolding)},
                    {"smallest_breaking_bf16_multiple", optional(b.smallestBreaking)}, {"rule", b.rule}});
            }
            context.printJson({{"run_id", r.runId}, {"rows", rows}, {"breaks", breaks}, {"wall_seconds", r.wallSeconds}});
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

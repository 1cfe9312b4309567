// mismatch recipe build MODEL --format F --prompts SET (--budget X | --calibration ID [--step S])
//                          [--target-fraction 0.5] [--scan ID] [--kv-cache] --out FILE
// The recipe builder: from everything quantized, keep the most sensitive cells in BF16 until the measured mismatch
// is at most the target fraction of the budget; verify by measurement; report memory and KV capacity; write the
// recipe (a subcommand of `mismatch recipe`, registered after it).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/recipe_builder.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/jobs/analysis_jobs.h"
#include "core/common/byte_size.h"
#include "core/quant/formats.h"
#include "core/store/analysis_store.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>

namespace mismatch::cli {

namespace {

std::string mebibytes(std::int64_t bytes)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.3f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return text;
}

void registerRecipeBuildCommand(CLI::App& app, Context& context)
{
    CLI::App* recipe = app.get_subcommand("recipe");
    recipe->description("Check precision recipes (YAML or JSON) and build one from a sensitivity scan");
    CLI::App* command = recipe->add_subcommand("build",
        "Build a recipe: start from every cell quantized, keep the most sensitive cells (by a sensitivity scan) in "
        "BF16 until the measured mismatch is at most --target-fraction x the budget; write it and report its weight "
        "memory and KV capacity against BF16");
    // The options are the catalogue job's parameters (core/jobs/analysis_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("recipe_build"));
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->spec();
        store::RunStore store = context.openStore();
        const analysis::RecipeBuildOptions options = jobs::recipeBuildOptions(spec, store);
        jobs::expectJobRun(store, spec);
        const std::string budgetSource = jobs::budgetSource(spec);
        TerminalProgress bar(*context.err);
        const analysis::RecipeBuildResult r = analysis::buildRecipe(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(r, options, budgetSource));
            return;
        }
        std::ostream& out = *context.out;
        out << "recipe " << r.outPath << " written (run " << r.runId << ", scan " << r.scanId << ", " << r.format
            << ")\n"
            << "budget " << formatNumber(r.budget, 4) << " nats/token (" << budgetSource << "), target "
            << formatNumber(r.target, 4) << " = " << formatNumber(options.targetFraction, 3) << " x budget\n\n";
        std::vector<std::vector<std::string>> rows;
        for (std::size_t i = 0; i < r.steps.size(); ++i) {
            rows.push_back({std::to_string(i), i == 0 ? std::string("(everything quantized)") : r.steps[i].keptCell,
                intervalText(r.steps[i].interval),
                r.bf16Unit > 0.0 ? formatNumber(r.steps[i].mismatch / r.bf16Unit, 3) + "x" : std::string("-")});
        }
        out << formatTable({"step", "kept in BF16", "mismatch [95%] nats/token", "x BF16"}, rows) << "\n";
        out << formatTable({"result", "recipe", "bf16", "ratio"},
            {{"measured mismatch", intervalText(r.interval), formatNumber(r.bf16Unit, 4) + " (unit)",
                 r.bf16Unit > 0.0 ? formatNumber(r.mismatch / r.bf16Unit, 3) + "x" : std::string("-")},
                {"weight memory", mebibytes(r.weightBytes), mebibytes(r.bf16WeightBytes),
                    formatNumber(static_cast<double>(r.weightBytes) / static_cast<double>(r.bf16WeightBytes), 4) + "x"},
                {"kv tokens in " + formatByteSize(r.kvMemoryBytes), std::to_string(r.kvTokens),
                    std::to_string(r.bf16KvTokens), formatNumber(r.kvCapacityRatio, 4) + "x"}})
            << "\n"
            << "kept in BF16: "
            << (r.bf16Cells.empty() ? std::string("nothing") : std::to_string(r.bf16Cells.size()) + " cell(s)")
            << "; quantized: " << r.quantizedCells.size() << " cell(s); time " << formatDuration(r.seconds) << "\n";
        if (options.protocol) {
            out << "measured under the budget's protocol (" << budgetSource << ")\n";
        }
        if (!r.budgetNote.empty()) {
            out << "note: " << r.budgetNote << "\n";
        }
        if (!r.scanProtocolDifferences.empty()) {
            out << "note: the ordering scan was measured under another protocol (it only orders the cells):\n";
            for (const std::string& difference : r.scanProtocolDifferences) {
                out << "  " << difference << "\n";
            }
        }
    });
}

const CommandRegistration registration(73, registerRecipeBuildCommand);

} // namespace

} // namespace mismatch::cli

// mismatch recipe build MODEL --format F --prompts SET (--budget X | --calibration ID [--step S])
//                          [--target-fraction 0.5] [--scan ID] [--kv-cache] --out FILE
// The recipe builder: from everything quantized, keep the most sensitive cells in BF16 until the measured mismatch
// is at most the target fraction of the budget; verify by measurement; report memory and KV capacity; write the
// recipe (a subcommand of `mismatch recipe`, registered after it).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/calibrate.h"
#include "core/analysis/recipe_builder.h"
#include "core/common/error.h"
#include "core/common/byte_size.h"
#include "core/quant/formats.h"
#include "core/store/analysis_store.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <ostream>

namespace mismatch::cli {

namespace {

struct RecipeBuildArguments {
    std::string model;
    std::string format;
    std::string activations = "bf16";
    std::string kvScales = "per_tensor";
    std::string prompts;
    double budget = 0.0;
    std::int64_t calibration = 0;
    std::int64_t step = 0;
    std::int64_t scan = 0;
    double targetFraction = 0.5;
    bool kvCache = false;
    bool noEmbedding = false;
    std::string out;
    std::string name;
    std::string capacityMemory = "8GiB";
    AnalysisArguments analysis;
};

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
    auto a = std::make_shared<RecipeBuildArguments>();
    CLI::App* command = recipe->add_subcommand("build",
        "Build a recipe: start from every cell quantized, keep the most sensitive cells (by a sensitivity scan) in "
        "BF16 until the measured mismatch is at most --target-fraction x the budget; write it and report its weight "
        "memory and KV capacity against BF16");
    command->add_option("MODEL", a->model, "Model directory (ignored with --scan: the scan's model is used)")
        ->type_name("DIR");
    command->add_option("--format,-f", a->format,
        "Weight format: fp8_e4m3[:block128|channel|tensor], fp8_e5m2[:...], int8, int4, fp16 (without --scan)");
    command->add_option("--prompts,-p", a->prompts, "Prompt set (JSONL) the mismatch is measured on (without --scan)")
        ->type_name("SET");
    command->add_option("--activations", a->activations, "Activations of quantized projections: bf16 | fp8_e4m3")
        ->capture_default_str();
    command->add_option("--kv-scales", a->kvScales, "Scales of the fp8_e4m3 KV cache: per_tensor | per_head")
        ->capture_default_str();
    auto* budget
        = command->add_option("--budget", a->budget, "Mismatch budget, nats per token")->check(greaterThan(0));
    auto* calibration = command->add_option(
        "--calibration", a->calibration, "Take the budget from a stored calibration's admission threshold");
    auto* step
        = command->add_option("--step", a->step, "Training step of the calibration's bracket (when it has several)")
              ->needs(calibration);
    budget->excludes(calibration);
    command->add_option("--target-fraction", a->targetFraction, "Target: measured mismatch <= this x budget")
        ->check(between(1e-9, 1.0))
        ->capture_default_str();
    auto* scan = command->add_option("--scan", a->scan, "Order cells by this stored sensitivity scan (else scan now)");
    command->add_flag(
        "--kv-cache", a->kvCache, "Also quantize the KV cache (fp8_e4m3) and keep sensitive layers' KV in BF16");
    command->add_flag("--no-embedding", a->noEmbedding, "Leave the embedding and lm_head in BF16 (when scanning now)");
    command->add_option("--out,-o", a->out, "Recipe file to write (.yaml, .yml or .json)")
        ->required()
        ->type_name("FILE");
    command->add_option("--name", a->name, "Recipe name (default built-<format>)");
    command->add_option("--capacity-memory", a->capacityMemory, "KV memory for the capacity report")
        ->capture_default_str();
    addAnalysisOptions(command, a->analysis);
    command->callback([&context, a, scan, calibration, step] {
        analysis::RecipeBuildOptions options;
        if (scan->count() > 0) {
            options.scanId = a->scan;
        } else {
            if (a->model.empty() || a->format.empty() || a->prompts.empty()) {
                throw InputError("recipe build", "arguments",
                    "without --scan, MODEL, --format and --prompts are needed (to scan the model first)");
            }
            options.scan.modelDirectory = a->model;
            options.scan.promptSetPath = a->prompts;
            options.scan.count = a->analysis.count;
            options.scan.settings = resolveSettings(a->analysis);
            options.scan.weights = analysis::parseWeightPrecision(a->format, "--format");
            const auto activations = quant::parseActivationFormat(a->activations);
            if (!activations) {
                throw InputError("--activations", "", "expected bf16 or fp8_e4m3, got '" + a->activations + "'");
            }
            options.scan.activations.format = *activations;
            options.scan.kvCells = a->kvCache;
            options.scan.embeddingCells = !a->noEmbedding;
        }
        const auto scales = quant::parseKvScales(a->kvScales);
        if (!scales) {
            throw InputError("--kv-scales", "", "expected per_tensor or per_head, got '" + a->kvScales + "'");
        }
        options.scan.kv.scales = *scales;
        options.quantizeKv = a->kvCache;
        options.targetFraction = a->targetFraction;
        options.outPath = a->out;
        options.name = a->name;
        options.kvMemoryBytes = parseByteSize(a->capacityMemory, "--capacity-memory");
        store::RunStore store = context.openStore();
        std::string budgetSource = "--budget";
        if (calibration->count() > 0) {
            const std::optional<std::int64_t> bracketStep
                = step->count() > 0 ? std::optional<std::int64_t>(a->step) : std::nullopt;
            options.budget = store::admissionThreshold(store, a->calibration, bracketStep);
            budgetSource = "calibration " + std::to_string(a->calibration);
            // The recipes are measured under the budget's protocol, so that they compare with its threshold.
            const auto stored = store::calibration(store, a->calibration);
            options.protocol = analysis::storedProtocol(stored->info.configJson, store.path());
        } else if (a->budget > 0.0) {
            options.budget = a->budget;
        } else {
            throw InputError("recipe build", "budget", "give --budget X (nats per token) or --calibration ID");
        }
        TerminalProgress bar(*context.err);
        const analysis::RecipeBuildResult r = analysis::buildRecipe(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json steps = nlohmann::json::array();
            for (std::size_t i = 0; i < r.steps.size(); ++i) {
                steps.push_back({{"step", i}, {"kept_in_bf16", r.steps[i].keptCell}, {"mismatch", r.steps[i].mismatch},
                    {"interval", analysis::toJson(r.steps[i].interval)}});
            }
            context.printJson({{"recipe_file", r.outPath}, {"recipe_id", r.recipeId}, {"run_id", r.runId},
                {"scan_id", r.scanId}, {"format", r.format}, {"budget", r.budget}, {"budget_source", budgetSource},
                {"target", r.target}, {"target_fraction", options.targetFraction}, {"bf16_unit", r.bf16Unit},
                {"mismatch", analysis::toJson(r.interval)}, {"bf16_cells", r.bf16Cells},
                {"quantized_cells", r.quantizedCells}, {"steps", steps}, {"weight_bytes", r.weightBytes},
                {"bf16_weight_bytes", r.bf16WeightBytes},
                {"weight_ratio",
                    r.bf16WeightBytes ? static_cast<double>(r.weightBytes) / static_cast<double>(r.bf16WeightBytes)
                                      : 0.0},
                {"kv_memory_bytes", r.kvMemoryBytes}, {"kv_tokens", r.kvTokens}, {"bf16_kv_tokens", r.bf16KvTokens},
                {"kv_capacity_ratio", r.kvCapacityRatio}, {"seconds", r.seconds},
                {"protocol", analysis::protocolToJson(r.protocol)},
                {"scan_protocol_differs", r.scanProtocolDifferences}});
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

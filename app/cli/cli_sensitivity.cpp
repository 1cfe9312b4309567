// mismatch sensitivity MODEL --format F --prompts SET [--activations A] [--kv-scales S] [--no-kv] [--no-embedding]
//                   [--count N --max-tokens T --seed S ...]
// mismatch sensitivity --resume RUN: continue a killed, cancelled or failed scan (its stored options).
// Layer sensitivity: the mismatch added over the BF16 unit when only one cell (layer x module group, the KV cache
// of one layer, the embedding / lm_head) is quantized; stored as a scan in the workspace.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/sensitivity.h"
#include "core/common/error.h"
#include "core/quant/formats.h"

#include <map>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct SensitivityArguments {
    std::string model;
    std::string format;
    std::string activations = "bf16";
    std::string kvScales = "per_tensor";
    std::string prompts;
    bool noKv = false;
    bool noEmbedding = false;
    std::int64_t resume = 0;
    AnalysisArguments analysis;
};

analysis::SensitivityOptions sensitivityOptions(const SensitivityArguments& a)
{
    analysis::SensitivityOptions options;
    options.modelDirectory = a.model;
    options.promptSetPath = a.prompts;
    options.count = a.analysis.count;
    options.settings = resolveSettings(a.analysis);
    options.weights = analysis::parseWeightPrecision(a.format, "--format");
    const auto activations = quant::parseActivationFormat(a.activations);
    if (!activations) {
        throw InputError("--activations", "", "expected bf16 or fp8_e4m3, got '" + a.activations + "'");
    }
    options.activations.format = *activations;
    const auto scales = quant::parseKvScales(a.kvScales);
    if (!scales) {
        throw InputError("--kv-scales", "", "expected per_tensor or per_head, got '" + a.kvScales + "'");
    }
    options.kv.scales = *scales;
    options.kvCells = !a.noKv;
    options.embeddingCells = !a.noEmbedding;
    return options;
}

nlohmann::json cellJson(const store::SensitivityCell& cell, double unit)
{
    return {{"layer", cell.layer}, {"group", cell.moduleGroup}, {"mismatch", cell.mismatch},
        {"added_mismatch", cell.addedMismatch},
        {"added_interval", {{"low", cell.ciLow.value_or(0.0)}, {"high", cell.ciHigh.value_or(0.0)}}},
        {"mismatch_interval", {{"low", cell.mismatchCiLow.value_or(0.0)}, {"high", cell.mismatchCiHigh.value_or(0.0)}}},
        {"bf16_multiple", unit > 0.0 ? nlohmann::json(cell.mismatch / unit) : nlohmann::json()},
        {"tokens", cell.tokens.value_or(0)}, {"seconds", cell.seconds.value_or(0.0)}};
}

void printResult(const Context& context, const analysis::SensitivityResult& r, const analysis::SensitivityOptions& o)
{
    if (context.json) {
        nlohmann::json cells = nlohmann::json::array();
        for (const auto& cell : r.cells) {
            cells.push_back(cellJson(cell, r.bf16Unit));
        }
        context.printJson({{"scan_id", r.scanId}, {"run_id", r.runId}, {"format", r.format},
            {"kv_format", quant::describe(o.kv)}, {"layers", r.layers}, {"bf16_unit", analysis::toJson(r.bf16UnitInterval)},
            {"bf16_unit_tokens", r.unitTokens}, {"cells", cells}, {"seconds", r.seconds},
            {"units", "nats per token; added = cell mismatch - BF16 unit"}});
        return;
    }
    std::ostream& out = *context.out;
    out << "sensitivity scan " << r.scanId << " (run " << r.runId << "): " << r.format << " weights";
    if (o.kvCells) {
        out << ", kv cells " << quant::describe(o.kv);
    }
    out << "\nBF16 unit " << intervalText(r.bf16UnitInterval) << " nats/token (" << r.unitTokens << " tokens)\n\n";
    // Layers x groups: added mismatch (nats/token) and its paired 95% interval.
    std::map<std::pair<std::int64_t, std::string>, const store::SensitivityCell*> byCell;
    for (const auto& cell : r.cells) {
        byCell[{cell.layer, cell.moduleGroup}] = &cell;
    }
    std::vector<std::string> groups = {"q", "k", "v", "o", "gate", "up", "down"};
    if (o.kvCells) {
        groups.push_back("kv");
    }
    std::vector<std::string> header = {"layer"};
    header.insert(header.end(), groups.begin(), groups.end());
    std::vector<std::vector<std::string>> rows;
    for (std::int64_t layer = 0; layer < r.layers; ++layer) {
        std::vector<std::string> row = {std::to_string(layer)};
        for (const auto& group : groups) {
            const auto found = byCell.find({layer, group});
            row.push_back(found == byCell.end() ? "-" : formatNumber(found->second->addedMismatch, 3));
        }
        rows.push_back(row);
    }
    out << "added mismatch over the BF16 unit (nats/token)\n" << formatTable(header, rows) << "\n";
    std::vector<std::vector<std::string>> detail;
    for (const auto& cell : r.cells) {
        detail.push_back({cell.layer < 0 ? std::string("-") : std::to_string(cell.layer), cell.moduleGroup,
            formatNumber(cell.mismatch, 4),
            formatNumber(cell.addedMismatch, 4) + " [" + formatNumber(cell.ciLow.value_or(0.0), 3) + ", "
                + formatNumber(cell.ciHigh.value_or(0.0), 3) + "]",
            r.bf16Unit > 0.0 ? formatNumber(cell.mismatch / r.bf16Unit, 3) + "x" : std::string("-")});
    }
    out << formatTable({"layer", "cell", "mismatch", "added [95% paired]", "x BF16"}, detail) << "\n"
        << "time " << formatDuration(r.seconds) << "\n";
}

void registerSensitivityCommand(CLI::App& app, Context& context)
{
    auto a = std::make_shared<SensitivityArguments>();
    CLI::App* command = app.add_subcommand("sensitivity",
        "Layer sensitivity: the mismatch each cell (layer x q/k/v/o/gate/up/down, each layer's KV cache, the "
        "embedding/lm_head) adds over the BF16 unit when only it is quantized; stored as a scan, cell by cell. The run "
        "id is printed at the start; an interrupted scan continues with `mismatch sensitivity --resume RUN`");
    auto* model = command->add_option("MODEL", a->model, "Model directory (the FP32 trainer and the engine's weights)")
                      ->type_name("DIR");
    auto* format = command->add_option("--format,-f", a->format,
        "Weight format of a quantized cell: fp8_e4m3[:block128|channel|tensor], fp8_e5m2[:...], int8, int4, "
        "fp16, bf16");
    auto* prompts = command->add_option("--prompts,-p", a->prompts, "Prompt set (JSONL)")->type_name("SET");
    auto* resume = command
                       ->add_option("--resume", a->resume,
                           "Continue scan run RUN (the run id printed when it started) after a kill, Ctrl-C or "
                           "failure: its stored options and inputs, only the cells not stored yet are measured")
                       ->type_name("RUN");
    for (auto* option : {model, format, prompts}) {
        option->excludes(resume);
    }
    command->add_option("--activations", a->activations, "Input activations of a quantized projection: bf16 | fp8_e4m3")
        ->capture_default_str();
    command->add_option("--kv-scales", a->kvScales, "Scales of the fp8_e4m3 KV cells: per_tensor | per_head")
        ->capture_default_str();
    command->add_flag("--no-kv", a->noKv, "Skip the KV-cache-only cells");
    command->add_flag("--no-embedding", a->noEmbedding, "Skip the embedding / lm_head cells");
    addAnalysisOptions(command, a->analysis);
    command->callback([&context, a, model, format, prompts, resume] {
        const bool resuming = resume->count() > 0;
        if (!resuming && (model->count() == 0 || format->count() == 0 || prompts->count() == 0)) {
            throw CLI::RequiredError("MODEL, --format and --prompts (or --resume RUN)");
        }
        store::RunStore store = context.openStore(resuming ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        const auto started = [&bar](std::int64_t runId) {
            bar.note("sensitivity run " + std::to_string(runId) + " (continue it after an interruption with "
                "`mismatch sensitivity --resume " + std::to_string(runId) + "`)");
        };
        analysis::SensitivityOptions options;
        analysis::SensitivityResult result;
        if (resuming) {
            result = analysis::resumeSensitivity(store, a->resume, bar.progress(), started);
            options = analysis::parseSensitivityConfig(store.run(result.runId)->configJson, store.path());
        } else {
            options = sensitivityOptions(*a);
            options.onRunStarted = started;
            result = analysis::runSensitivity(store, options, bar.progress());
        }
        bar.finish();
        printResult(context, result, options);
    });
}

const CommandRegistration registration(72, registerSensitivityCommand);

} // namespace

} // namespace mismatch::cli

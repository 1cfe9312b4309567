// mismatch sensitivity MODEL --format F --prompts SET [--activations A] [--kv-format K] [--kv-scales S] [--no-kv]
//                   [--no-embedding] [--layers L,... | --from-units] [--count N --max-tokens T --seed S ...]
// mismatch sensitivity --resume RUN: continue a killed, cancelled or failed scan (its stored job spec).
// --layers scans a cluster unit's share (-1: the embedding / lm_head cells); --from-units assembles the scan from
// the finished units merged into the workspace (core/analysis/sensitivity.h "Units").
// Layer sensitivity: the mismatch added over the BF16 unit when only one cell (layer x module group, the KV cache
// of one layer, the embedding / lm_head) is quantized; stored as a scan in the workspace.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/result_json.h"
#include "core/analysis/sensitivity.h"
#include "core/common/error.h"
#include "core/jobs/analysis_jobs.h"
#include "core/jobs/stored_specs.h"
#include "core/quant/formats.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <ostream>

namespace mismatch::cli {

namespace {

void printResult(const Context& context, const analysis::SensitivityResult& r, const analysis::SensitivityOptions& o)
{
    if (context.json) {
        context.printJson(analysis::toJson(r, o));
        return;
    }
    std::ostream& out = *context.out;
    out << "sensitivity scan " << r.scanId << " (run " << r.runId << "): " << r.format << " weights";
    if (o.kvCells) {
        out << ", kv cells " << quant::describe(o.kv);
    }
    // A unit's share (--layers): only its layers have rows below, -1 being the embedding / lm_head cells.
    std::vector<std::int64_t> layers = o.layers;
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    if (!layers.empty()) {
        out << "; layers";
        for (std::size_t i = 0; i < layers.size(); ++i) {
            out << (i == 0 ? " " : ", ") << layers[i];
        }
        out << " of " << r.layers;
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
        if (!layers.empty() && !std::binary_search(layers.begin(), layers.end(), layer)) {
            continue;
        }
        std::vector<std::string> row = {std::to_string(layer)};
        for (const auto& group : groups) {
            const auto found = byCell.find({layer, group});
            row.push_back(found == byCell.end() ? "-" : formatNumber(found->second->addedMismatch, 3));
        }
        rows.push_back(row);
    }
    if (!rows.empty()) { // a unit of the embedding / lm_head cells alone has none
        out << "added mismatch over the BF16 unit (nats/token)\n" << formatTable(header, rows) << "\n";
    }
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
    CLI::App* command = app.add_subcommand("sensitivity",
        "Layer sensitivity: the mismatch each cell (layer x q/k/v/o/gate/up/down, each layer's KV cache, the "
        "embedding/lm_head) adds over the BF16 unit when only it is quantized; stored as a scan, cell by cell. The run "
        "id is printed at the start; an interrupted scan continues with `mismatch sensitivity --resume RUN`");
    // The options are the catalogue job's parameters (core/jobs/analysis_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("sensitivity"));
    auto resume = std::make_shared<std::int64_t>(0);
    auto* resumeOption = command
                       ->add_option("--resume", *resume,
                           "Continue scan run RUN (the run id printed when it started) after a kill, Ctrl-C or "
                           "failure: its stored job spec and inputs, only the cells not stored yet are measured")
                       ->type_name("RUN")
                       ->transform(runId());
    for (const char* name : {"model", "format", "prompts", "layers", "from_units"}) {
        job->option(name)->excludes(resumeOption);
    }
    command->callback([&context, job, resume, resumeOption] {
        const bool resuming = resumeOption->count() > 0;
        // The spec is read (and checked) before the workspace is opened: a bad option changes nothing.
        const std::optional<jobs::JobSpec> spec = resuming ? std::nullopt : std::optional<jobs::JobSpec>(job->spec());
        store::RunStore store = context.openStore(resuming ? store::OpenMode::OpenExisting : store::OpenMode::CreateOrOpen);
        TerminalProgress bar(*context.err);
        const auto started = [&bar](std::int64_t runId) {
            bar.note("sensitivity run " + std::to_string(runId) + " (continue it after an interruption with "
                "`mismatch sensitivity --resume " + std::to_string(runId) + "`)");
        };
        analysis::SensitivityOptions options;
        analysis::SensitivityResult result;
        if (resuming) {
            options = jobs::sensitivityOptions(jobs::storedSpec(store, *resume, "sensitivity"));
            options.onRunStarted = started;
            result = analysis::resumeSensitivity(store, *resume, options, bar.progress());
        } else {
            options = jobs::sensitivityOptions(*spec);
            options.onRunStarted = started;
            jobs::expectJobRun(store, *spec);
            result = analysis::runSensitivity(store, options, bar.progress());
        }
        bar.finish();
        printResult(context, result, options);
    });
}

const CommandRegistration registration(72, registerSensitivityCommand);

} // namespace

} // namespace mismatch::cli

// mismatch zoo build: trains the built-in demo pair from scratch (seeded, reproducible).
// mismatch zoo shape NAME DIR: a random-weight checkpoint with a real model's exact shape (core/train/zoo_shape.h).
// The options are the catalogue jobs "zoo_build" and "zoo_shape"'s parameters (core/jobs/model_jobs.h). Ctrl-C
// cancels (exit 130): a build leaves no half model, a shape leaves its record marked incomplete (redone in place).
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/common/byte_size.h"
#include "core/jobs/model_jobs.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void registerZooCommands(CLI::App& app, Context& context)
{
    CLI::App* zoo = app.add_subcommand("zoo", "Build the built-in demo models, or random-weight checkpoints of real shapes");
    zoo->require_subcommand(1);

    const jobs::JobDefinition& buildJob = *jobs::findJob("zoo_build");
    CLI::App* build = zoo->add_subcommand("build", buildJob.summary);
    auto buildOptions = std::make_shared<JobOptions>(build, buildJob);
    build->callback([&context, buildOptions] {
        const jobs::JobSpec spec = buildOptions->checkedSpec();
        TerminalProgress bar(*context.err);
        const auto reports = train::buildZoo(jobs::zooBuildOptions(spec), bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json list = nlohmann::json::array();
            for (const auto& r : reports) {
                list.push_back(jobs::zooModelJson(r));
            }
            context.printJson(list);
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (const auto& r : reports) {
            rows.push_back({r.name, std::to_string(r.parameters), std::to_string(r.steps), formatNumber(r.finalLoss),
                formatNumber(100.0 * r.heldoutAccuracy, 4) + "%", formatDuration(r.trainSeconds), r.directory});
        }
        *context.out << formatTable({"model", "parameters", "steps", "final loss", "held-out accuracy", "train time", "directory"}, rows);
    });

    const jobs::JobDefinition& shapeJob = *jobs::findJob("zoo_shape");
    CLI::App* shape = zoo->add_subcommand("shape", shapeJob.summary);
    auto shapeOptions = std::make_shared<JobOptions>(shape, shapeJob);
    shape->callback([&context, shapeOptions] {
        const jobs::JobSpec spec = shapeOptions->checkedSpec();
        const train::ModelShape& selected = train::modelShape(spec.text("shape"));
        TerminalProgress bar(*context.err);
        const train::ZooShapeReport report
            = train::writeModelShape(selected, spec.text("directory"), jobs::zooShapeOptions(spec), bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(jobs::zooShapeResultJson(selected, report));
            return;
        }
        *context.out << formatTable({"shape", "of", "parameters", "bf16 bytes", "shards", "tokenizer", "time", "directory"},
            {{report.name, selected.huggingFaceName, std::to_string(report.parameters), formatByteSize(report.bytes),
                std::to_string(report.shards.size()), report.tokenizer, formatDuration(report.seconds),
                report.directory}});
        *context.out << "random weights: for speed, memory and capacity measurements only\n";
    });
}

const CommandRegistration registration(50, registerZooCommands);

}  // namespace

}  // namespace mismatch::cli

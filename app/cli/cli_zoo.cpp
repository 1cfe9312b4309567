// mismatch zoo build: trains the built-in demo pair from scratch (seeded, reproducible).
// mismatch zoo shape NAME DIR: a random-weight checkpoint with a real model's exact shape (core/train/zoo_shape.h).
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/common/runtime.h"
#include "core/common/byte_size.h"
#include "core/model/memory_check.h"
#include "core/train/zoo.h"
#include "core/train/zoo_shape.h"

#include <ostream>

namespace mismatch::cli {

namespace {

void registerZooCommands(CLI::App& app, Context& context)
{
    CLI::App* zoo = app.add_subcommand("zoo", "Build the built-in demo models, or random-weight checkpoints of real shapes");
    zoo->require_subcommand(1);
    CLI::App* build = zoo->add_subcommand("build",
        "Train arith-teacher and arith-student on the arith task and write them (config.json, model.safetensors, "
        "tokenizer.json, training.json) under --out (default: the resource directory's models/)");
    auto out = std::make_shared<std::string>();
    auto prompts = std::make_shared<std::string>();
    auto only = std::make_shared<std::string>();
    auto teacherSteps = std::make_shared<std::int64_t>(0);
    auto studentSteps = std::make_shared<std::int64_t>(0);
    build->add_option("--out", *out, "Output directory for the model directories")->type_name("DIR");
    build->add_option("--prompts", *prompts, "Directory holding arith-heldout.jsonl and arith-probe.jsonl")
        ->type_name("DIR");
    build->add_option("--only", *only, "Build only this model (arith-teacher or arith-student)")
        ->check(CLI::IsMember({"arith-teacher", "arith-student"}));
    build->add_option("--teacher-steps", *teacherSteps, "Override the teacher's optimizer steps")->check(greaterThan(0));
    build->add_option("--student-steps", *studentSteps, "Override the student's optimizer steps")->check(greaterThan(0));
    build->callback([&context, out, prompts, only, teacherSteps, studentSteps] {
        train::ZooOptions options = train::defaultZooOptions(resourceDirectory());
        if (!out->empty()) {
            options.outputDirectory = *out;
        }
        if (!prompts->empty()) {
            options.promptDirectory = *prompts;
        }
        std::vector<train::ZooModelSpec> selected;
        for (auto spec : options.models) {
            if (spec.name == "arith-teacher" && *teacherSteps > 0) spec.steps = *teacherSteps;
            if (spec.name == "arith-student" && *studentSteps > 0) spec.steps = *studentSteps;
            if (only->empty() || *only == spec.name) selected.push_back(spec);
        }
        options.models = selected;
        TerminalProgress bar(*context.err);
        const auto reports = train::buildZoo(options, bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json list = nlohmann::json::array();
            for (const auto& r : reports) {
                list.push_back({{"name", r.name}, {"directory", r.directory}, {"parameters", r.parameters},
                    {"steps", r.steps}, {"final_loss", r.finalLoss}, {"heldout_accuracy", r.heldoutAccuracy},
                    {"heldout_evaluated", r.evaluated}, {"train_seconds", r.trainSeconds}});
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

    std::string shapeNames;
    for (const train::ModelShape& shape : train::modelShapes()) {
        shapeNames += (shapeNames.empty() ? "" : ", ") + shape.name;
    }
    CLI::App* shape = zoo->add_subcommand("shape",
        "Write a checkpoint with RANDOM weights and the exact shape of a real model (" + shapeNames
            + "): config.json, sharded BF16 safetensors with model.safetensors.index.json, tokenizer.json (a "
              "byte-level one with the model's special tokens at their real ids, or --tokenizer FILE) and "
              "zoo_shape.json. For measuring speed, memory and capacity without downloading weights; the text it "
              "generates means nothing");
    auto shapeName = std::make_shared<std::string>();
    auto directory = std::make_shared<std::string>();
    auto shapeOptions = std::make_shared<train::ZooShapeOptions>();
    auto shardSize = std::make_shared<std::string>("1GiB");
    shape->add_option("NAME", *shapeName, "Model shape: " + shapeNames)->required();
    shape->add_option("DIR", *directory, "Output directory (new, empty, or an earlier zoo shape output)")->required();
    shape->add_option("--seed", shapeOptions->seed, "Seed of the random weights")->capture_default_str();
    shape->add_option("--max-shard-size", *shardSize, "BF16 bytes per safetensors shard (1GiB, 512MiB, 5GB, ...)")
        ->capture_default_str();
    shape->add_option("--tokenizer", shapeOptions->tokenizerPath,
            "A real tokenizer.json to copy (checked to load and to fit the vocabulary)")
        ->type_name("FILE");
    shape->callback([&context, shapeName, directory, shapeOptions, shardSize] {
        const train::ModelShape& selected = train::modelShape(*shapeName);
        train::ZooShapeOptions options = *shapeOptions;
        options.maxShardBytes = parseByteSize(*shardSize, "--max-shard-size");
        TerminalProgress bar(*context.err);
        const train::ZooShapeReport report = train::writeModelShape(selected, *directory, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson({{"shape", report.name}, {"of", selected.huggingFaceName}, {"directory", report.directory},
                {"parameters", report.parameters}, {"bytes", report.bytes}, {"shards", report.shards},
                {"tokenizer", report.tokenizer}, {"random_weights", true}, {"seconds", report.seconds}});
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

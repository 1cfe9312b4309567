// mismatch zoo build: trains the built-in demo pair from scratch (seeded, reproducible).
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/common/runtime.h"
#include "core/train/zoo.h"

#include <ostream>

namespace mismatch::cli {

namespace {

void registerZooCommands(CLI::App& app, Context& context)
{
    CLI::App* zoo = app.add_subcommand("zoo", "Build the built-in demo models");
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
}

const CommandRegistration registration(50, registerZooCommands);

}  // namespace

}  // namespace mismatch::cli

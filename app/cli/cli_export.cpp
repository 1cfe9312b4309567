// mismatch export RECIPE --to vllm|llm-compressor|compressed-tensors|verl|modelopt --model DIR [--out FILE]
//                 [--staleness K]
#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/io/recipe_export.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <filesystem>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct ExportCommandOptions {
    std::string recipePath;
    std::string target;
    std::string modelPath; // a model directory or its config.json
    std::string outPath; // empty: stdout
    std::int64_t staleness = 0;
};

void registerExportCommand(CLI::App& app, Context& context)
{
    auto options = std::make_shared<ExportCommandOptions>();
    CLI::App* command = app.add_subcommand("export",
        "Export a precision recipe, resolved against a model, as the configuration an outside tool reads: vLLM fp8 "
        "quantization config and engine arguments (JSON), llm-compressor recipe (YAML), compressed-tensors "
        "quantization_config (JSON), verl rollout overrides (YAML) or ModelOpt hf_quant_config.json. Modules left "
        "in BF16 are listed as ignored; a recipe feature the target cannot express is an error");
    command->add_option("RECIPE", options->recipePath, "Recipe file (.yaml, .yml or .json)")
        ->required()
        ->type_name("FILE");
    command->add_option("--to", options->target, "Target tool")
        ->required()
        ->check(CLI::IsMember(io::exportTargetChoices()));
    command
        ->add_option("--model,-m", options->modelPath,
            "Model directory holding config.json (or the config.json). Required: the ignored-layer lists name every "
            "module of this model, so a default model would silently export the wrong list")
        ->required()
        ->type_name("DIR");
    command->add_option("--out,-o", options->outPath, "Write to FILE (through a temporary file) instead of stdout")
        ->type_name("FILE");
    command->add_option("--staleness", options->staleness,
        "Asynchronous rollout weight staleness k in optimizer steps (verl only; 0: synchronous)");
    command->callback([&context, options] {
        namespace fs = std::filesystem;
        io::ExportOptions exportOptions;
        exportOptions.target = *io::parseExportTarget(options->target); // CLI::IsMember checked the spelling
        exportOptions.staleness = options->staleness;
        const quant::Recipe recipe = quant::loadRecipe(options->recipePath);
        const std::string configPath = fs::is_directory(options->modelPath)
            ? (fs::path(options->modelPath) / "config.json").string()
            : options->modelPath;
        const model::ModelConfig config = model::loadConfig(configPath);
        const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
        const std::string text = io::exportRecipe(recipe, plan, exportOptions);
        if (!options->outPath.empty()) {
            writeFileAtomically(options->outPath, text);
        }
        if (context.json) {
            context.printJson({{"recipe_file", recipe.sourceFile}, {"model_config", configPath},
                {"target", options->target}, {"format", io::fileExtension(exportOptions.target)},
                {"out", options->outPath.empty() ? nlohmann::json() : nlohmann::json(options->outPath)},
                {"text", text}});
        } else if (options->outPath.empty()) {
            *context.out << text;
        } else {
            *context.out << "wrote " << options->outPath << " (" << options->target << ", "
                         << io::fileExtension(exportOptions.target) << ")\n";
        }
    });
}

const CommandRegistration registration(70, registerExportCommand);
} // namespace

} // namespace mismatch::cli

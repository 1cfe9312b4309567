// mismatch recipe import FILE [--out RECIPE] [--name NAME] [--model DIR]
#include "app/cli/context.h"
#include "core/common/file_io.h"
#include "core/common/output_check.h"
#include "core/io/recipe_export.h"
#include "core/io/recipe_import.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct RecipeImportOptions {
    std::string path;
    std::string outPath; // empty: stdout
    std::string name;
    std::string modelPath; // optional: resolve the recipe for this model
};

void registerRecipeImportCommand(CLI::App& app, Context& context)
{
    CLI::App* recipe = app.get_subcommand("recipe");
    auto options = std::make_shared<RecipeImportOptions>();
    CLI::App* command = recipe->add_subcommand("import",
        "Build a precision recipe from what a checkpoint or engine already runs: a compressed-tensors config.json "
        "(quantization_config), a ModelOpt hf_quant_config.json (or config.json with quant_method modelopt), vLLM "
        "engine arguments (JSON or YAML; mismatch export's vllm.json too) or a verl config "
        "(actor_rollout_ref.rollout). What a recipe cannot say is an error naming the file and the key");
    command->add_option("FILE", options->path, "The quantization description (JSON or YAML)")
        ->required()
        ->type_name("FILE");
    command
        ->add_option("--out,-o", options->outPath,
            "Write the recipe to RECIPE (.json: JSON, else YAML) through a temporary file instead of stdout")
        ->type_name("RECIPE");
    command->add_option("--name", options->name, "The recipe's name (default: the file's stem)");
    command
        ->add_option("--model,-m", options->modelPath,
            "Also resolve the recipe for this model (directory or config.json): every module name it gives must exist")
        ->type_name("DIR");
    command->callback([&context, options] {
        namespace fs = std::filesystem;
        const bool modelIsDirectory = !options->modelPath.empty() && fs::is_directory(options->modelPath);
        const std::string configPath
            = modelIsDirectory ? (fs::path(options->modelPath) / "config.json").string() : options->modelPath;
        // Issue 46: `recipe import F --out F` (or --out inside the model read) would destroy an input.
        requireOutputNotInput(options->outPath, {{options->path, "imported file"}, {configPath, "model config"}},
            {modelIsDirectory ? options->modelPath : std::string(),
                fs::is_directory(options->path) ? options->path : std::string()},
            "recipe file");
        const io::ImportedRecipe imported = io::importRecipe(options->path, options->name);
        if (!options->modelPath.empty()) {
            quant::resolveRecipe(imported.recipe, model::loadConfig(configPath));
        }
        const bool json = fs::path(options->outPath).extension() == ".json";
        const std::string text = json ? quant::recipeToJson(imported.recipe) : quant::recipeToYaml(imported.recipe);
        if (!options->outPath.empty()) {
            writeFileAtomically(options->outPath, text);
        }
        if (context.json) {
            context.printJson({{"file", options->path}, {"source", imported.source},
                {"recipe", nlohmann::json::parse(quant::recipeToJson(imported.recipe))}, {"notes", imported.notes},
                {"out", options->outPath.empty() ? nlohmann::json() : nlohmann::json(options->outPath)}});
            return;
        }
        for (const std::string& note : imported.notes) {
            *context.err << "note: " << note << "\n";
        }
        if (options->outPath.empty()) {
            *context.out << text;
        } else {
            *context.out << "wrote " << options->outPath << " (recipe from " << imported.source << " " << options->path
                         << ")\n";
        }
    });
}

const CommandRegistration registration(74, registerRecipeImportCommand);
} // namespace

} // namespace mismatch::cli

// fuzz_recipe: precision recipe text (YAML or JSON; the first byte picks the file name: .json, .yaml or none,
// which makes parseRecipe guess) through parseRecipe, the writers (recipeToYaml / recipeToJson must parse back to
// an equal recipe) and resolveRecipe against the demo student (2 layers) and a 28-layer Qwen3 configuration.
#include "tests/fuzz/fuzz_target.h"

#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

namespace {

mismatch::model::ModelConfig qwen3Like()
{
    mismatch::model::ModelConfig config;
    config.architecture = mismatch::model::Architecture::Qwen3;
    config.vocabSize = 151936;
    config.hiddenSize = 1024;
    config.intermediateSize = 3072;
    config.numLayers = 28;
    config.numHeads = 16;
    config.numKeyValueHeads = 8;
    config.headDim = 128;
    config.qkNorm = true;
    config.tieWordEmbeddings = true;
    config.torchDtype = "bfloat16";
    return config;
}

} // namespace

MISMATCH_FUZZ_TARGET(recipe)
{
    static const mismatch::model::ModelConfig demo
        = mismatch::model::loadConfig(std::string(MISMATCH_RESOURCE_DIR) + "/models/arith-student/config.json");
    static const mismatch::model::ModelConfig large = qwen3Like();
    if (size == 0) {
        return 0;
    }
    static const char* const names[] = {"recipe.json", "recipe.yaml", "recipe"};
    const std::string fileName = names[data[0] % 3];
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    mismatch::quant::Recipe recipe;
    try {
        recipe = mismatch::quant::parseRecipe(text, fileName);
    } catch (const mismatch::InputError&) {
        return 0;
    }
    fuzz::check(mismatch::quant::parseRecipe(mismatch::quant::recipeToYaml(recipe), "again.yaml") == recipe,
        "parseRecipe(recipeToYaml(r)) == r");
    fuzz::check(mismatch::quant::parseRecipe(mismatch::quant::recipeToJson(recipe), "again.json") == recipe,
        "parseRecipe(recipeToJson(r)) == r");
    for (const mismatch::model::ModelConfig* config : {&demo, &large}) {
        try {
            mismatch::quant::resolveRecipe(recipe, *config);
        } catch (const mismatch::InputError&) {
        }
    }
    return 0;
}

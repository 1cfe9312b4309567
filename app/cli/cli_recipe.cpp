// mismatch recipe check RECIPE [--model DIR]
#include "app/cli/context.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct RecipeCheckOptions {
    std::string recipePath;
    std::string modelPath; // a model directory or its config.json; empty: syntax only
};

std::string configPathFor(const std::string& modelPath)
{
    namespace fs = std::filesystem;
    return fs::is_directory(modelPath) ? (fs::path(modelPath) / "config.json").string() : modelPath;
}

nlohmann::json ruleJson(int rule)
{
    return rule == quant::kNoRule ? nlohmann::json() : nlohmann::json(rule);
}

nlohmann::json weightsJson(const quant::WeightPrecision& weights)
{
    nlohmann::json j = {{"format", quant::toString(weights.format)}};
    j["granularity"] = weights.granularity == quant::Granularity::None
        ? nlohmann::json()
        : nlohmann::json(quant::toString(weights.granularity));
    return j;
}

nlohmann::json planJson(const quant::Recipe& recipe, const quant::RecipePlan& plan, const std::string& configPath)
{
    nlohmann::json modules = nlohmann::json::object();
    for (const auto& [name, module] : plan.modules) {
        modules[name] = {{"weights", weightsJson(module.weights)},
            {"activations", {{"format", quant::toString(module.activations.format)}}},
            {"weights_rule", ruleJson(module.weightsRule)}, {"activations_rule", ruleJson(module.activationsRule)}};
    }
    nlohmann::json kv = nlohmann::json::array();
    for (size_t layer = 0; layer < plan.kvPerLayer.size(); ++layer) {
        const quant::KvPrecision& p = plan.kvPerLayer[layer];
        kv.push_back({{"layer", layer}, {"format", quant::toString(p.format)},
            {"scales",
                p.scales == quant::KvScales::None ? nlohmann::json() : nlohmann::json(quant::toString(p.scales))},
            {"calibration",
                p.calibration == quant::KvCalibration::None ? nlohmann::json()
                                                            : nlohmann::json(quant::toString(p.calibration))},
            {"rule", ruleJson(plan.kvRulePerLayer[layer])}});
    }
    nlohmann::json memory = nlohmann::json::object();
    for (const auto& [name, m] : plan.memory) {
        memory[name]
            = {{"rows", m.rows}, {"columns", m.columns}, {"value_bytes", m.valueBytes}, {"scale_bytes", m.scaleBytes},
                {"bias_bytes", m.biasBytes}, {"bytes", m.bytes()}, {"bf16_bytes", m.bf16Bytes}};
    }
    return {{"recipe_file", recipe.sourceFile}, {"recipe", nlohmann::json::parse(quant::recipeToJson(recipe))},
        {"model_config", configPath}, {"layers", plan.numLayers}, {"modules", modules}, {"kv_cache", kv},
        {"weight_memory", memory}, {"weight_bytes", plan.weightBytes}, {"bf16_weight_bytes", plan.bf16WeightBytes},
        {"weight_ratio", plan.weightRatio()}, {"kv_bytes_per_token", plan.kvBytesPerToken},
        {"bf16_kv_bytes_per_token", plan.bf16KvBytesPerToken}, {"kv_bytes_ratio", plan.kvBytesRatio()},
        {"kv_capacity_ratio", plan.kvCapacityRatio()}, {"kv_scale_bytes", plan.kvScaleBytes}};
}

// Table cells, shortened so that a layer's seven projections and its KV cache fit one terminal line; the legend
// under the table spells the abbreviations out.
std::string shortFormat(const std::string& format)
{
    return format.rfind("fp8_", 0) == 0 ? format.substr(4) : format;
}

std::string cell(const quant::ModulePrecision& module)
{
    // The microscaling formats' blocks are the format's own (group32, group16): no suffix.
    static const std::map<quant::Granularity, std::string> granularity
        = {{quant::Granularity::None, ""}, {quant::Granularity::Tensor, "/t"}, {quant::Granularity::Channel, "/ch"},
            {quant::Granularity::Block128, "/b128"}, {quant::Granularity::Group128, "/g128"},
            {quant::Granularity::Group32, ""}, {quant::Granularity::Group16, ""}};
    std::string text = shortFormat(quant::toString(module.weights.format)) + granularity.at(module.weights.granularity);
    if (module.activations.format == quant::ActivationFormat::Fp8E4m3) {
        text += " a8";
    } else if (quant::isMicroscaling(module.activations.format)) {
        // Activations in the weights' own microscaling format (the only pairing recipes accept): 4 or 8 bits.
        text += quant::bytesPerElement(module.activations.format) < 1.0 ? " a4" : " a8";
    }
    return text;
}

std::string cell(const quant::KvPrecision& kv)
{
    if (quant::isPerTokenHead(kv.format)) {
        return kv.format == quant::KvFormat::Fp8PerTokenHead ? "e4m3/tok" : "int8/tok";
    }
    std::string text = shortFormat(quant::toString(kv.format));
    if (kv.scales == quant::KvScales::PerTensor) {
        text += "/t";
    } else if (kv.scales == quant::KvScales::PerHead) {
        text += "/head";
    }
    if (kv.calibration == quant::KvCalibration::EverySync) {
        text += " sync";
    }
    return text;
}

std::string mebibytes(std::int64_t bytes)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return text;
}

void printPlan(const Context& context, const quant::Recipe& recipe, const quant::RecipePlan& plan,
    const model::ModelConfig& config, const std::string& configPath)
{
    std::ostream& out = *context.out;
    out << "recipe  " << (recipe.name.empty() ? std::string("(unnamed)") : recipe.name) << "  " << recipe.sourceFile
        << "\n"
        << "model   " << configPath << "  (" << model::toString(config.architecture) << ", " << config.numLayers
        << " layers, " << config.numKeyValueHeads << " kv heads x " << config.headDim << ")\n\n";

    std::vector<std::string> header = {"layer"};
    for (const std::string& name : quant::projectionShortNames()) {
        header.push_back(name);
    }
    header.push_back("kv cache");
    std::vector<std::vector<std::string>> rows;
    for (std::int64_t layer = 0; layer < plan.numLayers; ++layer) {
        std::vector<std::string> row = {std::to_string(layer)};
        for (const std::string& suffix : quant::projectionSuffixes()) {
            row.push_back(cell(plan.modules.at(quant::layerModuleName(layer, suffix))));
        }
        row.push_back(cell(plan.kvPerLayer[static_cast<size_t>(layer)]));
        rows.push_back(row);
    }
    out << formatTable(header, rows);
    out << "\n"
        << formatTable({"module", "weights"},
               {{"embed_tokens", cell(plan.modules.at(quant::kEmbedName))},
                   {"lm_head",
                       cell(plan.modules.at(quant::kLmHeadName))
                           + (config.tieWordEmbeddings ? "  (tied to embed_tokens)" : "")}});
    out << "\ne4m3, e5m2: fp8_e4m3, fp8_e5m2; scales per /t tensor, /ch channel, /b128 128x128 block, /g128 128-group, "
           "/head KV head,\n/tok token and KV head (fp8_per_token_head, int8_per_token_head: computed at each "
           "cache write);\na8: fp8_e4m3 activations (dynamic, per token); on mxfp8, mxfp4, nvfp4 weights a8 / a4: "
           "activations in that format (dynamic block scales); sync: KV scales re-measured at every weight sync\n\n";

    const std::vector<std::vector<std::string>> summary = {
        {"weights", std::to_string(plan.weightBytes) + " B (" + mebibytes(plan.weightBytes) + ")",
            std::to_string(plan.bf16WeightBytes) + " B (" + mebibytes(plan.bf16WeightBytes) + ")",
            formatNumber(plan.weightRatio(), 4) + "x"},
        {"kv cache per token", std::to_string(plan.kvBytesPerToken) + " B",
            std::to_string(plan.bf16KvBytesPerToken) + " B",
            formatNumber(plan.kvBytesRatio(), 4) + "x (" + formatNumber(plan.kvCapacityRatio(), 4) + "x tokens)"},
        {"kv scales (fixed)", std::to_string(plan.kvScaleBytes) + " B", "0 B", "-"},
    };
    out << formatTable({"memory", "recipe", "bf16", "ratio"}, summary);
}

void printSyntaxOnly(const Context& context, const quant::Recipe& recipe)
{
    if (context.json) {
        context.printJson({{"recipe_file", recipe.sourceFile}, {"valid", true},
            {"recipe", nlohmann::json::parse(quant::recipeToJson(recipe))}});
        return;
    }
    auto orBf16
        = [](const auto& optional, auto describeFn) { return optional ? describeFn(*optional) : std::string("bf16"); };
    *context.out << "recipe " << recipe.sourceFile << " is valid (syntax only; pass --model DIR to resolve it)\n"
                 << "name         " << (recipe.name.empty() ? std::string("(unnamed)") : recipe.name) << "\n"
                 << "weights      "
                 << orBf16(recipe.weights, [](const quant::WeightPrecision& p) { return quant::describe(p); }) << "\n"
                 << "activations  "
                 << orBf16(recipe.activations,
                        [](const quant::ActivationPrecision& p) { return quant::toString(p.format); })
                 << "\n"
                 << "kv cache     "
                 << orBf16(recipe.kvCache, [](const quant::KvPrecision& p) { return quant::describe(p); }) << "\n"
                 << "rules        " << recipe.rules.size() << "\n";
}

void registerRecipeCommands(CLI::App& app, Context& context)
{
    CLI::App* recipeCommand = app.add_subcommand("recipe", "Check precision recipes (YAML or JSON)");
    recipeCommand->require_subcommand(1);

    auto options = std::make_shared<RecipeCheckOptions>();
    CLI::App* check = recipeCommand->add_subcommand("check",
        "Validate a recipe; with --model, resolve it for that model and print the per-module plan, the weight "
        "memory and the KV-cache bytes per token against BF16");
    check->add_option("RECIPE", options->recipePath, "Recipe file (.yaml, .yml or .json)")
        ->required()
        ->type_name("FILE");
    check->add_option("--model,-m", options->modelPath, "Model directory holding config.json (or the config.json)")
        ->type_name("DIR");
    check->callback([&context, options] {
        const quant::Recipe recipe = quant::loadRecipe(options->recipePath);
        if (options->modelPath.empty()) {
            printSyntaxOnly(context, recipe);
            return;
        }
        const std::string configPath = configPathFor(options->modelPath);
        const model::ModelConfig config = model::loadConfig(configPath);
        const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
        if (context.json) {
            context.printJson(planJson(recipe, plan, configPath));
        } else {
            printPlan(context, recipe, plan, config, configPath);
        }
    });
}

const CommandRegistration registration(40, registerRecipeCommands);
} // namespace

} // namespace mismatch::cli

// mismatch kv-capacity --model DIR [--recipe R] --memory SIZE [--block-size N]
// KV-cache tokens that fit a memory budget under a recipe's KV formats, as the engine's paged cache allocates
// them (scale storage counted), with the ratio to an all-BF16 cache.
#include "app/cli/context.h"
#include "core/common/byte_size.h"
#include "core/engine/paged_kv_cache.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>

namespace mismatch::cli {

namespace {

struct KvCapacityArguments {
    std::string modelDirectory;
    std::string recipe;
    std::string memory;
    std::int64_t blockSize = 16;
};

std::string ratioText(double ratio)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.4fx", ratio);
    return text;
}

void runKvCapacity(const Context& context, const KvCapacityArguments& arguments)
{
    // A directory or its config.json: the shapes are all that is needed (no weights are read).
    std::filesystem::path configPath(arguments.modelDirectory);
    if (std::filesystem::is_directory(configPath)) {
        configPath /= "config.json";
    }
    const model::ModelConfig config = model::loadConfig(configPath.string());
    std::optional<quant::RecipePlan> plan;
    if (!arguments.recipe.empty()) {
        plan = quant::resolveRecipe(quant::loadRecipe(arguments.recipe), config);
    }
    const std::uint64_t memory = parseByteSize(arguments.memory, "--memory");
    const engine::KvCapacity capacity
        = engine::kvCapacity(config, plan ? &*plan : nullptr, memory, arguments.blockSize);

    if (context.json) {
        nlohmann::json layers = nlohmann::json::array();
        for (std::size_t layer = 0; layer < capacity.layerBytesPerToken.size(); ++layer) {
            layers.push_back({{"layer", layer}, {"format", capacity.layerFormats[layer]},
                {"bytes_per_token", capacity.layerBytesPerToken[layer]}});
        }
        context.printJson(
            {{"model", configPath.string()}, {"recipe", arguments.recipe.empty() ? "bf16" : arguments.recipe},
                {"memory_bytes", capacity.memoryBytes}, {"block_size", capacity.blockSize}, {"blocks", capacity.blocks},
                {"tokens", capacity.tokens}, {"bytes_per_token", capacity.bytesPerToken},
                {"scale_bytes", capacity.scaleBytes}, {"layers", layers}, {"bf16_blocks", capacity.bf16Blocks},
                {"bf16_tokens", capacity.bf16Tokens}, {"ratio_to_bf16", capacity.ratioToBf16}});
        return;
    }
    std::vector<std::vector<std::string>> layerRows;
    for (std::size_t layer = 0; layer < capacity.layerBytesPerToken.size(); ++layer) {
        layerRows.push_back(
            {std::to_string(layer), capacity.layerFormats[layer], std::to_string(capacity.layerBytesPerToken[layer])});
    }
    *context.out << formatTable({"layer", "kv format", "bytes/token"}, layerRows) << "\n"
                 << formatTable({"kv capacity", ""},
                        {{"model", configPath.string()},
                            {"recipe", arguments.recipe.empty() ? std::string("(all bf16)") : arguments.recipe},
                            {"memory", formatByteSize(memory) + " (" + std::to_string(memory) + " bytes)"},
                            {"block size", std::to_string(capacity.blockSize) + " tokens"},
                            {"bytes per token", std::to_string(capacity.bytesPerToken)},
                            {"scale bytes", std::to_string(capacity.scaleBytes) + " (fixed, float32)"},
                            {"blocks", std::to_string(capacity.blocks)}, {"tokens", std::to_string(capacity.tokens)},
                            {"bf16 tokens", std::to_string(capacity.bf16Tokens)},
                            {"ratio to bf16", ratioText(capacity.ratioToBf16)}});
}

void registerKvCapacityCommand(CLI::App& app, Context& context)
{
    auto arguments = std::make_shared<KvCapacityArguments>();
    CLI::App* command = app.add_subcommand("kv-capacity",
        "KV-cache tokens that fit a memory budget under a recipe's KV formats (scales counted), as the engine's "
        "paged cache allocates them, and the ratio to an all-BF16 cache");
    command
        ->add_option(
            "--model,-m", arguments->modelDirectory, "Model directory or its config.json (weights are not read)")
        ->required()
        ->type_name("DIR");
    command->add_option("--recipe,-r", arguments->recipe, "Precision recipe (default: everything bf16)")
        ->type_name("R");
    command->add_option("--memory", arguments->memory, "KV-cache memory: 8GiB, 512MiB, 1e9, ...")
        ->required()
        ->type_name("SIZE");
    command->add_option("--block-size", arguments->blockSize, "Tokens per block")
        ->check(greaterThan(0))
        ->capture_default_str();
    command->callback([&context, arguments] { runKvCapacity(context, *arguments); });
}

const CommandRegistration registration(46, registerKvCapacityCommand);

} // namespace

} // namespace mismatch::cli

// mismatch model info DIR
#include "app/cli/context.h"
#include "core/model/model_files.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

std::string mebibytes(std::uint64_t bytes)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return text;
}

void printModelInfo(const Context& context, const model::ModelFiles& files)
{
    const model::ModelConfig& c = files.config;
    const model::CheckpointStats stats = model::checkpointStats(files.checkpoint);
    std::string dtypes;
    nlohmann::json dtypeJson = nlohmann::json::object();
    for (const auto& [dtype, count] : stats.parametersByDtype) {
        dtypes += (dtypes.empty() ? "" : ", ") + model::toString(dtype);
        dtypeJson[model::toString(dtype)] = count;
    }
    const double mib = static_cast<double>(stats.bytes) / (1024.0 * 1024.0);

    if (context.json) {
        nlohmann::json rope = nullptr;
        if (c.ropeScaling.type != "none") {
            rope = {{"type", c.ropeScaling.type}, {"factor", c.ropeScaling.factor},
                {"low_freq_factor", c.ropeScaling.lowFreqFactor}, {"high_freq_factor", c.ropeScaling.highFreqFactor},
                {"original_max_position_embeddings", c.ropeScaling.originalMaxPositionEmbeddings}};
        }
        context.printJson({{"path", files.directory}, {"architecture", model::toString(c.architecture)},
            {"layers", c.numLayers}, {"hidden_size", c.hiddenSize}, {"intermediate_size", c.intermediateSize},
            {"heads", c.numHeads}, {"kv_heads", c.numKeyValueHeads}, {"head_dim", c.headDim},
            {"vocab_size", c.vocabSize}, {"tie_word_embeddings", c.tieWordEmbeddings},
            {"attention_bias", c.attentionBias}, {"qk_norm", c.qkNorm}, {"rope_theta", c.ropeTheta},
            {"rope_scaling", rope}, {"max_position_embeddings", c.maxPositionEmbeddings}, {"torch_dtype", c.torchDtype},
            {"parameters", stats.parameterCount}, {"tensors", stats.tensorCount}, {"dtypes", dtypeJson},
            {"bytes", stats.bytes}, {"mib", mib}, {"files", stats.files}});
        return;
    }
    const std::string heads = std::to_string(c.numHeads) + " / " + std::to_string(c.numKeyValueHeads);
    std::vector<std::vector<std::string>> rows = {
        {"path", files.directory},
        {"architecture", model::toString(c.architecture)},
        {"layers", std::to_string(c.numLayers)},
        {"hidden size", std::to_string(c.hiddenSize)},
        {"intermediate size", std::to_string(c.intermediateSize)},
        {"heads / kv heads", heads},
        {"head dim", std::to_string(c.headDim)},
        {"vocab size", std::to_string(c.vocabSize)},
        {"tied embeddings", c.tieWordEmbeddings ? "yes" : "no"},
        {"qkv bias", c.attentionBias ? "yes" : "no"},
        {"q/k norm", c.qkNorm ? "yes" : "no"},
        {"rope",
            "theta " + formatNumber(c.ropeTheta, 10)
                + (c.ropeScaling.type == "none"
                        ? ""
                        : ", " + c.ropeScaling.type + " x" + formatNumber(c.ropeScaling.factor, 4))},
        {"parameters", std::to_string(stats.parameterCount)},
        {"tensors", std::to_string(stats.tensorCount) + " in " + std::to_string(stats.files.size()) + " file(s)"},
        {"dtypes", dtypes.empty() ? "-" : dtypes},
        {"memory", std::to_string(stats.bytes) + " bytes (" + mebibytes(stats.bytes) + " MiB)"},
    };
    *context.out << formatTable({"property", "value"}, rows);
}

void registerModelCommands(CLI::App& app, Context& context)
{
    CLI::App* modelCommand = app.add_subcommand("model", "Inspect Hugging Face style model directories");
    modelCommand->require_subcommand(1);

    CLI::App* info = modelCommand->add_subcommand("info",
        "Check a model directory (config.json against the safetensors checkpoint) and print its shape, parameter "
        "count, dtypes and memory");
    auto directory = std::make_shared<std::string>();
    info->add_option("DIR", *directory,
            "Model directory: config.json plus model.safetensors or shards with "
            "model.safetensors.index.json")
        ->required()
        ->type_name("DIR");
    info->callback([&context, directory] { printModelInfo(context, model::openModelDirectory(*directory)); });
}

const CommandRegistration registration(20, registerModelCommands);
} // namespace

} // namespace mismatch::cli

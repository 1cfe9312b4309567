// mismatch quantize --format F [--granularity G] [--keep-dtype] IN.safetensors OUT.safetensors
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/quant/quantize.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct QuantizeArguments {
    std::string format;
    std::string granularity;
    bool keepDtype = false;
    std::string input;
    std::string output;
};

std::string shapeText(const std::vector<std::int64_t>& shape)
{
    std::string text;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        text += (i ? "x" : "") + std::to_string(shape[i]);
    }
    return text.empty() ? "scalar" : text;
}

std::string scientific(double value)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.3e", value);
    return text;
}

std::string joined(const std::vector<std::string>& names)
{
    std::string text;
    for (const auto& name : names) {
        text += (text.empty() ? "" : ", ") + name;
    }
    return text;
}

void runQuantize(const Context& context, const QuantizeArguments& arguments)
{
    quant::QuantizeFileOptions options;
    options.format = *quant::parseWeightFormat(arguments.format); // CLI::IsMember checked the spelling
    options.granularity = arguments.granularity.empty() ? quant::defaultGranularity(options.format)
                                                        : *quant::parseGranularity(arguments.granularity);
    if (!quant::isSupported(options.format, options.granularity)) {
        std::vector<std::string> allowed;
        for (quant::Granularity g : quant::allowedGranularities(options.format)) {
            allowed.push_back(quant::toString(g));
        }
        throw CLI::ValidationError("--granularity",
            allowed.empty() ? arguments.format + " has no scales and takes no granularity"
                            : arguments.format + " takes " + joined(allowed) + ", not " + arguments.granularity);
    }
    options.keepDtype = arguments.keepDtype;

    TerminalProgress bar(*context.err);
    const std::vector<quant::TensorQuantizeResult> results
        = quant::quantizeSafetensorsFile(arguments.input, arguments.output, options, bar.progress());
    bar.finish();

    std::uint64_t inputBytes = 0;
    std::uint64_t formatBytes = 0;
    int quantizedCount = 0;
    for (const auto& r : results) {
        inputBytes += r.inputBytes;
        formatBytes += r.formatBytes;
        quantizedCount += r.quantized ? 1 : 0;
    }
    if (context.json) {
        nlohmann::json tensors = nlohmann::json::array();
        for (const auto& r : results) {
            nlohmann::json entry = {{"name", r.name}, {"shape", r.shape}, {"input_dtype", r.inputDtype},
                {"output_dtype", r.outputDtype}, {"quantized", r.quantized}, {"relative_rms_error", r.relativeRmsError},
                {"max_abs_error", r.maxAbsError}, {"input_bytes", r.inputBytes}, {"format_bytes", r.formatBytes}};
            if (!r.note.empty()) {
                entry["note"] = r.note;
            }
            tensors.push_back(entry);
        }
        context.printJson({{"input", arguments.input}, {"output", arguments.output},
            {"format", quant::toString(options.format)}, {"granularity", quant::toString(options.granularity)},
            {"keep_dtype", options.keepDtype}, {"tensors", tensors}, {"quantized", quantizedCount},
            {"copied", static_cast<int>(results.size()) - quantizedCount}, {"input_bytes", inputBytes},
            {"format_bytes", formatBytes}});
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : results) {
        rows.push_back({r.name, shapeText(r.shape), r.inputDtype + " -> " + r.outputDtype,
            r.quantized ? "quantized" : "copied (" + r.note.substr(0, r.note.find(',')) + ")",
            r.quantized ? scientific(r.relativeRmsError) : "-", r.quantized ? scientific(r.maxAbsError) : "-",
            std::to_string(r.formatBytes)});
    }
    *context.out << quant::toString(options.format) << " (" << quant::toString(options.granularity) << ") "
                 << arguments.input << " -> " << arguments.output << "\n"
                 << formatTable(
                        {"tensor", "shape", "dtype", "action", "rel rms err", "max abs err", "format bytes"}, rows)
                 << quantizedCount << " quantized, " << results.size() - static_cast<std::size_t>(quantizedCount)
                 << " copied; storage in the format " << formatBytes << " bytes (input file " << inputBytes
                 << " bytes)\n";
}

void registerQuantizeCommand(CLI::App& app, Context& context)
{
    auto arguments = std::make_shared<QuantizeArguments>();
    CLI::App* quantize = app.add_subcommand("quantize",
        "Fake-quantize every 2-D tensor of a safetensors file to a weight format (bit-exact CPU emulation) and "
        "report each tensor's error; other tensors (norms, biases) are copied unchanged");
    quantize->add_option("--format,-f", arguments->format, "Weight format")
        ->required()
        ->check(CLI::IsMember(quant::weightFormatChoices()));
    quantize
        ->add_option("--granularity,-g", arguments->granularity,
            "Scale granularity (default: block128 for fp8, channel for int8, group128 for int4; none for bf16/fp16)")
        ->check(CLI::IsMember(quant::granularityChoices()));
    quantize->add_flag(
        "--keep-dtype", arguments->keepDtype, "Write quantized tensors in their input dtype instead of float32");
    quantize->add_option("IN", arguments->input, "Input .safetensors file")->required()->type_name("IN");
    quantize->add_option("OUT", arguments->output, "Output .safetensors file (fake-quantized values)")
        ->required()
        ->type_name("OUT");
    quantize->callback([&context, arguments] { runQuantize(context, *arguments); });
}

const CommandRegistration registration(41, registerQuantizeCommand);
} // namespace

} // namespace mismatch::cli

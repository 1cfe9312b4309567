#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <system_error>

// Export: llm-compressor and compressed-tensors.
// The shared view and checks: export_internal.h, export_view.cpp.

namespace mismatch::io::exporting {

// compressed-tensors QuantizationArgs of a recipe's weights and activations.
Json weightArgs(const quant::WeightPrecision& weights)
{
    if (quant::isMicroscaling(weights.format)) {
        return microscalingWeightArgs(weights.format);
    }
    Json args = Json::object();
    const bool fp8 = weights.format == WeightFormat::Fp8E4m3;
    args["num_bits"] = weights.format == WeightFormat::Int4 ? 4 : 8;
    args["type"] = fp8 ? "float" : "int";
    args["symmetric"] = true; // all recipe scales are symmetric
    args["dynamic"] = false;
    switch (weights.granularity) {
    case Granularity::Tensor:
        args["strategy"] = "tensor";
        break;
    case Granularity::Channel:
        args["strategy"] = "channel";
        break;
    case Granularity::Block128:
        args["strategy"] = "block";
        args["block_structure"] = {128, 128};
        break;
    case Granularity::Group128:
        args["strategy"] = "group";
        args["group_size"] = 128;
        break;
    case Granularity::Group32:
    case Granularity::Group16:
        // Microscaling weights: microscalingWeightArgs, above.
    case Granularity::None:
        break;
    }
    return args;
}

Json activationArgs(const Scheme& scheme)
{
    if (scheme.activations == ActivationFormat::Bf16) {
        return nullptr;
    }
    if (quant::isMicroscaling(scheme.activations)) {
        return microscalingActivationArgs(scheme.activations);
    }
    Json args = Json::object();
    args["num_bits"] = 8;
    args["type"] = "float";
    args["symmetric"] = true;
    args["dynamic"] = true;
    if (scheme.weights.granularity == Granularity::Block128) {
        // Block weights pair with per-token groups of 128 (see the header).
        args["strategy"] = "group";
        args["group_size"] = 128;
    } else {
        args["strategy"] = "token";
    }
    return args;
}

// llm-compressor's preset scheme with exactly these arguments, or "" when none matches.
std::string presetName(const Scheme& s)
{
    if (isMicroscaling(s)) {
        return microscalingPreset(s);
    }
    if (s.weights.format == WeightFormat::Fp8E4m3 && s.activations == ActivationFormat::Fp8E4m3) {
        if (s.weights.granularity == Granularity::Channel) {
            return "FP8_DYNAMIC";
        }
        if (s.weights.granularity == Granularity::Block128) {
            return "FP8_BLOCK";
        }
    }
    if (s.weights.format == WeightFormat::Int4 && s.weights.granularity == Granularity::Group128
        && s.activations == ActivationFormat::Bf16) {
        return "W4A16";
    }
    return "";
}

// The compressed-tensors checkpoint format of one scheme (compressed_tensors/config/base.py CompressionFormat):
// FP8 weights with FP8 inputs are float-quantized; FP8 weights alone are naive-quantized (the float compressor
// expects quantized input activations); integer weights are pack-quantized; the microscaling formats have their own
// (export_microscaling.cpp).
std::string compressedFormat(const Scheme& scheme)
{
    if (isMicroscaling(scheme)) {
        return microscalingCompressedFormat(scheme);
    }
    if (scheme.weights.format == WeightFormat::Fp8E4m3) {
        return scheme.activations == ActivationFormat::Fp8E4m3 ? "float-quantized" : "naive-quantized";
    }
    return "pack-quantized";
}

CompressedSettings compressedSettings(const ExportView& view)
{
    checkCommon(view);
    if (!view.anythingQuantized() && !view.kvQuantized()) {
        view.fail(view.recipe->weightsLocation, "an all-bf16 recipe",
            "the target describes quantized checkpoints and this recipe quantizes nothing (run the model unquantized)");
    }
    CompressedSettings settings;
    for (const Scheme& scheme : view.schemeOrder) {
        const std::vector<std::string>& modules = view.schemes.at(scheme);
        if (scheme.weights.format != WeightFormat::Fp8E4m3 && !isMicroscaling(scheme)
            && scheme.activations != ActivationFormat::Bf16) {
            view.fail(view.activationsWhere(modules.front()), describe(scheme) + " on " + modules.front(),
                "compressed-tensors has no compressor for integer weights with float activations");
        }
        const std::string format = compressedFormat(scheme);
        // Several formats in one checkpoint: the mixed-precision format, each group naming its own.
        settings.format = settings.format.empty() || settings.format == format ? format : "mixed-precision";
        // One scheme covers every linear module not ignored; with several each names its modules.
        settings.groups.push_back(
            {scheme, view.schemeOrder.size() == 1 ? std::vector<std::string> {"Linear"} : modules, format});
    }
    if (settings.format.empty()) {
        // KV cache only: "dense", as llm-compressor writes it. compressed-tensors' infer_model_format
        // (src/compressed_tensors/compressors/format.py) gives the attention modules, which carry the KV scheme as
        // input_activations and no weights, the dense format (every other compressor needs weights), leaves dense
        // modules out of the set and flattens an empty set to dense. vLLM reads `format` only to choose the schemes
        // of config_groups (compressed_tensors.py), which a KV-only checkpoint has none of.
        settings.format = "dense";
    }
    const UniformKv kv = uniformKv(view, false,
        "kv_cache_scheme applies to every attention layer; compressed-tensors has no per-layer KV-cache setting", true,
        "", kCheckpointPerTokenHeadReason);
    if (kv.fp8) {
        Json args = Json::object();
        args["num_bits"] = 8;
        args["type"] = "float";
        args["symmetric"] = true;
        args["dynamic"] = false;
        args["strategy"] = kv.scales == KvScales::PerHead ? "attn_head" : "tensor";
        settings.kvScheme = args;
    }
    for (const CompressedGroup& group : settings.groups) {
        if (group.scheme.activations == ActivationFormat::Fp8E4m3) {
            warnActivationGroups(view, group.scheme, "vLLM's compressed-tensors loader");
        }
        if (isMicroscaling(group.scheme)) {
            warnMicroscalingCheckpoint(view, group.scheme);
        }
        settings.calibratesActivations
            = settings.calibratesActivations || group.scheme.activations == ActivationFormat::Nvfp4;
    }
    return settings;
}

Json compressedTensorsConfig(const ExportView& view, const CompressedSettings& settings)
{
    const bool mixed = settings.format == "mixed-precision";
    Json config = Json::object();
    config["quant_method"] = "compressed-tensors";
    config["format"] = settings.format;
    config["quantization_status"] = "compressed";
    Json groups = Json::object();
    for (size_t i = 0; i < settings.groups.size(); ++i) {
        const CompressedGroup& group = settings.groups[i];
        Json entry = Json::object();
        entry["targets"] = group.targets;
        entry["weights"] = weightArgs(group.scheme.weights);
        entry["input_activations"] = activationArgs(group.scheme);
        entry["output_activations"] = nullptr;
        if (mixed) {
            entry["format"] = group.format;
        }
        groups["group_" + std::to_string(i)] = entry;
    }
    config["config_groups"] = groups;
    // With no weight groups nothing is quantized to be ignored (a KV-cache-only checkpoint).
    config["ignore"] = settings.groups.empty() ? std::vector<std::string>() : view.ignored;
    config["kv_cache_scheme"] = settings.kvScheme;
    return config;
}

std::string exportCompressedTensors(const ExportView& view)
{
    Json out = Json::object();
    out["quantization_config"] = compressedTensorsConfig(view, compressedSettings(view));
    return out.dump(2) + "\n";
}

std::string exportLlmCompressor(const ExportView& view)
{
    const CompressedSettings settings = compressedSettings(view);
    std::ostringstream out;
    out << "# llm-compressor recipe for precision recipe " << view.recipeName() << "\n"
        << "quant_stage:\n"
        << "  quant_modifiers:\n"
        << "    QuantizationModifier:\n";
    const std::string indent = "      ";
    const bool preset = settings.groups.size() == 1 && !presetName(settings.groups[0].scheme).empty();
    if (preset) {
        out << indent << "targets: [Linear]\n" << indent << "scheme: " << presetName(settings.groups[0].scheme) << "\n";
    } else if (!settings.groups.empty()) {
        out << indent << "config_groups:\n";
        for (size_t i = 0; i < settings.groups.size(); ++i) {
            const CompressedGroup& group = settings.groups[i];
            out << indent << "  group_" << i << ":\n";
            out << indent << "    targets: " << yamlScalar(Json(group.targets)) << "\n";
            out << indent << "    weights: " << yamlScalar(weightArgs(group.scheme.weights)) << "\n";
            out << indent << "    input_activations: " << yamlScalar(activationArgs(group.scheme)) << "\n";
        }
    }
    if (!settings.groups.empty()) {
        out << indent << "ignore: " << yamlScalar(Json(view.ignored)) << "\n";
    }
    if (!settings.kvScheme.is_null()) {
        out << indent << "kv_cache_scheme: " << yamlScalar(settings.kvScheme) << "\n";
    }
    return out.str();
}

} // namespace mismatch::io::exporting

#include "core/io/recipe_export.h"

#include "core/common/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <system_error>
#include <tuple>

namespace mismatch::io {

namespace {

using quant::ActivationFormat;
using quant::Granularity;
using quant::KvFormat;
using quant::KvScales;
using quant::WeightFormat;
using Json = nlohmann::ordered_json;

// What one quantized linear module asks of the engine: its weight format with scale granularity and whether its
// inputs are FP8. Modules with bf16 weights and bf16 activations are "ignored" by every target.
struct Scheme {
    quant::WeightPrecision weights;
    ActivationFormat activations = ActivationFormat::Bf16;

    bool operator<(const Scheme& other) const
    {
        return std::make_tuple(weights.format, weights.granularity, activations)
            < std::make_tuple(other.weights.format, other.weights.granularity, other.activations);
    }
    bool operator==(const Scheme& other) const { return !(*this < other) && !(other < *this); }
};

std::string describe(const Scheme& scheme)
{
    return quant::describe(scheme.weights) + " weights with " + quant::toString(scheme.activations) + " activations";
}

// The recipe as the exporters see it: linear modules in model order (layer by layer, projections in table order,
// then lm_head), grouped by scheme; the BF16 ones; the KV cache per layer.
struct ExportView {
    const quant::Recipe* recipe = nullptr;
    const quant::RecipePlan* plan = nullptr;
    ExportTarget target = ExportTarget::Vllm;
    std::vector<std::string> linearModules; // model order
    std::map<Scheme, std::vector<std::string>> schemes; // quantized modules by scheme, model order within each
    std::vector<Scheme> schemeOrder; // schemes in order of first appearance
    std::vector<std::string> ignored; // bf16 linear modules, model order

    const quant::ModulePrecision& module(const std::string& name) const { return plan->modules.at(name); }

    // Where a module's weights (or activations) were decided: the rule's section or the recipe's top-level one.
    const quant::SourceLocation& weightsWhere(const std::string& name) const
    {
        const int rule = module(name).weightsRule;
        return rule == quant::kNoRule ? recipe->weightsLocation
                                      : recipe->rules[static_cast<size_t>(rule)].weightsLocation;
    }
    const quant::SourceLocation& activationsWhere(const std::string& name) const
    {
        const int rule = module(name).activationsRule;
        return rule == quant::kNoRule ? recipe->activationsLocation
                                      : recipe->rules[static_cast<size_t>(rule)].activationsLocation;
    }
    const quant::SourceLocation& kvWhere(size_t layer) const
    {
        const int rule = plan->kvRulePerLayer[layer];
        return rule == quant::kNoRule ? recipe->kvCacheLocation
                                      : recipe->rules[static_cast<size_t>(rule)].kvCacheLocation;
    }

    [[noreturn]] void fail(
        const quant::SourceLocation& where, const std::string& feature, const std::string& reason) const
    {
        quant::throwRecipeError(
            *recipe, where, feature + " cannot be exported --to " + toString(target) + ": " + reason);
    }

    bool anythingQuantized() const { return !schemes.empty(); }
    bool kvQuantized() const
    {
        for (const quant::KvPrecision& kv : plan->kvPerLayer) {
            if (kv.format != KvFormat::Bf16) {
                return true;
            }
        }
        return false;
    }
};

ExportView makeView(const quant::Recipe& recipe, const quant::RecipePlan& plan, ExportTarget target)
{
    ExportView view;
    view.recipe = &recipe;
    view.plan = &plan;
    view.target = target;
    for (std::int64_t layer = 0; layer < plan.numLayers; ++layer) {
        for (const std::string& suffix : quant::projectionSuffixes()) {
            view.linearModules.push_back(quant::layerModuleName(layer, suffix));
        }
    }
    view.linearModules.push_back(quant::kLmHeadName);
    for (const std::string& name : view.linearModules) {
        const quant::ModulePrecision& precision = plan.modules.at(name);
        const Scheme scheme {precision.weights, precision.activations.format};
        if (scheme.weights.format == WeightFormat::Bf16 && scheme.activations == ActivationFormat::Bf16) {
            view.ignored.push_back(name);
            continue;
        }
        if (view.schemes.find(scheme) == view.schemes.end()) {
            view.schemeOrder.push_back(scheme);
        }
        view.schemes[scheme].push_back(name);
    }
    return view;
}

// vLLM fuses q/k/v into qkv_proj and gate/up into gate_up_proj, and a fused layer has one scheme. Every target's
// checkpoint or settings end in vLLM's loaders, which refuse a fused group whose shards differ: the fp8 and
// ModelOpt configs through vllm/model_executor/layers/quantization/utils/quant_utils.py is_layer_skipped ("some but
// not all shards ... are quantized"), compressed-tensors through compressed_tensors/utils.py should_ignore_layer
// and find_matched_target ("vLLM requires all to use the same scheme"). So every target runs this check.
void checkFusedShards(const ExportView& view)
{
    const std::vector<std::vector<std::string>> fused
        = {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}, {"mlp.gate_proj", "mlp.up_proj"}};
    for (std::int64_t layer = 0; layer < view.plan->numLayers; ++layer) {
        for (const std::vector<std::string>& group : fused) {
            const std::string first = quant::layerModuleName(layer, group.front());
            for (const std::string& suffix : group) {
                const std::string name = quant::layerModuleName(layer, suffix);
                const quant::ModulePrecision& a = view.module(first);
                const quant::ModulePrecision& b = view.module(name);
                if (a.weights != b.weights || a.activations != b.activations) {
                    view.fail(view.weightsWhere(name),
                        "different formats on " + first + " (" + describe(Scheme {a.weights, a.activations.format})
                            + ") and " + name + " (" + describe(Scheme {b.weights, b.activations.format}) + ")",
                        "vLLM loads them as one fused layer (qkv_proj or gate_up_proj) with one format; its fp8, "
                        "compressed-tensors and ModelOpt loaders refuse different schemes within a fused group");
                }
            }
        }
    }
}

// Checks every target shares: what none of them can say.
void checkCommon(const ExportView& view)
{
    const quant::ModulePrecision& embed = view.module(quant::kEmbedName);
    if (embed.weights.format != WeightFormat::Bf16) {
        const int rule = embed.weightsRule;
        view.fail(rule == quant::kNoRule ? view.recipe->weightsLocation
                                         : view.recipe->rules[static_cast<size_t>(rule)].weightsLocation,
            quant::describe(embed.weights) + " weights on model.embed_tokens",
            "the target quantizes linear layers only; the embedding stays in the checkpoint dtype");
    }
    for (const std::string& name : view.linearModules) {
        const quant::ModulePrecision& precision = view.module(name);
        if (precision.weights.format == WeightFormat::Fp16) {
            view.fail(view.weightsWhere(name), "fp16 weights on " + name,
                "modules the target leaves unquantized keep the checkpoint dtype (bf16); fp16 cannot be chosen per "
                "module");
        }
        if (precision.weights.format == WeightFormat::Fp8E5m2) {
            view.fail(view.weightsWhere(name), "fp8_e5m2 weights on " + name, "the target's FP8 weights are e4m3 only");
        }
        if (precision.weights.format == WeightFormat::Bf16 && precision.activations.format != ActivationFormat::Bf16) {
            view.fail(view.activationsWhere(name), "fp8 activations on " + name + " (whose weights are bf16)",
                "the target quantizes activations only as part of a quantized layer's scheme");
        }
    }
    checkFusedShards(view);
    for (size_t layer = 0; layer < view.plan->kvPerLayer.size(); ++layer) {
        if (view.plan->kvPerLayer[layer].calibration == quant::KvCalibration::EverySync) {
            view.fail(view.kvWhere(layer), "KV-cache calibration every_sync (layer " + std::to_string(layer) + ")",
                "the target computes KV scales once (at load or calibration) and has no setting to re-measure them at "
                "every weight sync");
        }
    }
}

// The KV cache of a target with one setting for the whole model.
struct UniformKv {
    bool fp8 = false;
    KvScales scales = KvScales::None;
    std::vector<std::int64_t> bf16Layers; // bf16 layers when others are fp8
};

UniformKv uniformKv(const ExportView& view, bool perLayerExceptions, const std::string& perLayerReason, bool perHead,
    const std::string& perHeadReason)
{
    UniformKv kv;
    const std::vector<quant::KvPrecision>& layers = view.plan->kvPerLayer;
    std::optional<size_t> firstFp8;
    for (size_t layer = 0; layer < layers.size(); ++layer) {
        if (layers[layer].format != KvFormat::Fp8E4m3) {
            continue;
        }
        if (!perHead && layers[layer].scales == KvScales::PerHead) {
            view.fail(
                view.kvWhere(layer), "per_head KV-cache scales (layer " + std::to_string(layer) + ")", perHeadReason);
        }
        if (!firstFp8) {
            firstFp8 = layer;
            kv.fp8 = true;
            kv.scales = layers[layer].scales;
        } else if (layers[layer].scales != kv.scales) {
            view.fail(view.kvWhere(layer),
                "KV-cache scales " + quant::toString(layers[layer].scales) + " on layer " + std::to_string(layer)
                    + " and " + quant::toString(kv.scales) + " on layer " + std::to_string(*firstFp8),
                "the target has one KV-cache scheme for every layer");
        }
    }
    if (!kv.fp8) {
        return kv;
    }
    for (size_t layer = 0; layer < layers.size(); ++layer) {
        if (layers[layer].format == KvFormat::Bf16) {
            if (!perLayerExceptions) {
                view.fail(view.kvWhere(layer),
                    "a bf16 KV cache on layer " + std::to_string(layer) + " while layer " + std::to_string(*firstFp8)
                        + " is fp8_e4m3",
                    perLayerReason);
            }
            kv.bf16Layers.push_back(static_cast<std::int64_t>(layer));
        }
    }
    return kv;
}

// The one scheme of a single-scheme target (vLLM, verl, ModelOpt), or nullopt when nothing is quantized.
std::optional<Scheme> singleScheme(const ExportView& view, const std::string& reason)
{
    if (view.schemeOrder.empty()) {
        return std::nullopt;
    }
    if (view.schemeOrder.size() > 1) {
        const Scheme& first = view.schemeOrder[0];
        const Scheme& second = view.schemeOrder[1];
        const std::string& firstModule = view.schemes.at(first).front();
        const std::string& secondModule = view.schemes.at(second).front();
        view.fail(view.weightsWhere(secondModule),
            "mixed weight formats across layers (" + describe(first) + " on " + firstModule + ", " + describe(second)
                + " on " + secondModule + ")",
            reason);
    }
    return view.schemeOrder[0];
}

void checkLmHeadUnquantized(const ExportView& view, const std::string& reason)
{
    const quant::ModulePrecision& head = view.module(quant::kLmHeadName);
    if (head.weights.format != WeightFormat::Bf16) {
        view.fail(view.weightsWhere(quant::kLmHeadName), quant::describe(head.weights) + " weights on lm_head", reason);
    }
}

// The vLLM-side checks and settings that the vllm and verl exports share.
struct VllmSettings {
    std::optional<Scheme> scheme;
    UniformKv kv;
};

void checkVllmScheme(const ExportView& view, const Scheme& scheme, bool blockOnly)
{
    const std::string& example = view.schemes.at(scheme).front();
    if (scheme.weights.format == WeightFormat::Int8 || scheme.weights.format == WeightFormat::Int4) {
        view.fail(view.weightsWhere(example), quant::describe(scheme.weights) + " weights on " + example,
            blockOnly ? "verl's rollout quantization is fp8 (128x128 blocks) only"
                      : "vLLM's fp8 quantization config has fp8_e4m3 weights only (export --to compressed-tensors "
                        "for integer weights)");
    }
    if (scheme.activations != ActivationFormat::Fp8E4m3) {
        view.fail(view.activationsWhere(example), "weight-only fp8 (" + describe(scheme) + ") on " + example,
            "vLLM's fp8 method quantizes the activations of every quantized layer (dynamic); bf16 activations need "
            "--to compressed-tensors");
    }
    if (blockOnly && scheme.weights.granularity != Granularity::Block128) {
        view.fail(view.weightsWhere(example),
            quant::toString(scheme.weights.granularity) + " granularity of fp8 weights on " + example,
            "verl's fp8 rollout quantizes weights in 128x128 blocks only");
    }
    if (scheme.weights.granularity == Granularity::Channel) {
        view.fail(view.weightsWhere(example), "channel granularity of fp8 weights on " + example,
            "vLLM's fp8 config has per-tensor or 128x128-block weight scales only (export --to compressed-tensors "
            "for per-channel scales)");
    }
}

VllmSettings vllmSettings(const ExportView& view, bool verl)
{
    checkCommon(view);
    VllmSettings settings;
    checkLmHeadUnquantized(view,
        verl ? std::string("verl's fp8 rollout quantizes the decoder layers' linear modules, not lm_head")
             : std::string("vLLM's fp8 config quantizes linear layers; lm_head is not one of them"));
    if (verl && view.anythingQuantized()) {
        for (const std::string& name : view.ignored) {
            if (name != quant::kLmHeadName) {
                view.fail(view.weightsWhere(name), "bf16 weights on " + name + " while other modules are quantized",
                    "verl's actor_rollout_ref.rollout.quantization has no list of layers to leave unquantized");
            }
        }
    }
    settings.scheme = singleScheme(view,
        verl ? "verl's rollout quantization applies one scheme to every layer"
             : "vLLM's fp8 config has one scheme for every quantized layer (export --to compressed-tensors for "
               "several)");
    if (settings.scheme) {
        checkVllmScheme(view, *settings.scheme, verl);
    }
    settings.kv = uniformKv(view, true, "", false,
        "vLLM's kv_cache_dtype engine argument has per-tensor scales only (per-head scales need a checkpoint "
        "calibrated by llm-compressor: export --to llm-compressor)");
    return settings;
}

Json vllmEngineArgs(const VllmSettings& settings)
{
    Json args = Json::object();
    if (settings.scheme) {
        args["quantization"] = "fp8";
    }
    args["kv_cache_dtype"] = settings.kv.fp8 ? "fp8_e4m3" : "auto";
    // No calculate_kv_scales: current vLLM removed it (vllm-project/vllm PR #49389, after the deprecation in PR
    // #37201); FP8 KV scales now come from the checkpoint when it has them, else 1.0
    // (docs/features/quantization/quantized_kvcache.md, vllm/config/cache.py CacheConfig).
    if (settings.kv.fp8 && !settings.kv.bf16Layers.empty()) {
        // kv_cache_dtype_skip_layers is a list of strings: layer indices ('0', '2') or attention types
        // ('sliding_window') (vllm/config/cache.py CacheConfig, docs/features/quantization/quantized_kvcache.md).
        Json layers = Json::array();
        for (const std::int64_t layer : settings.kv.bf16Layers) {
            layers.push_back(std::to_string(layer));
        }
        args["kv_cache_dtype_skip_layers"] = layers;
    }
    return args;
}

std::string exportVllm(const ExportView& view)
{
    const VllmSettings settings = vllmSettings(view, false);
    Json out = Json::object();
    if (settings.scheme) {
        Json config = Json::object();
        config["quant_method"] = "fp8";
        config["activation_scheme"] = "dynamic";
        if (settings.scheme->weights.granularity == Granularity::Block128) {
            config["weight_block_size"] = {128, 128};
        }
        config["ignored_layers"] = view.ignored;
        out["quantization_config"] = config;
    } else {
        out["quantization_config"] = nullptr;
    }
    out["engine_args"] = vllmEngineArgs(settings);
    return out.dump(2) + "\n";
}

std::string yamlScalar(const Json& value)
{
    if (value.is_null()) {
        return "null";
    }
    if (value.is_boolean()) {
        return value.get<bool>() ? "true" : "false";
    }
    if (value.is_number()) {
        return value.dump();
    }
    if (value.is_string()) {
        const std::string text = value.get<std::string>();
        // Quote what YAML would read as something other than this string.
        const bool plain = !text.empty() && text.find_first_of(":#{}[],&*!|>'\"%@`") == std::string::npos
            && text != "null" && text != "true" && text != "false"
            && text.find_first_not_of("0123456789.-") != std::string::npos;
        return plain ? text : value.dump();
    }
    // A flow sequence or mapping of scalars.
    std::string text;
    if (value.is_array()) {
        text = "[";
        for (size_t i = 0; i < value.size(); ++i) {
            text += (i ? ", " : "") + yamlScalar(value[i]);
        }
        return text + "]";
    }
    text = "{";
    bool first = true;
    for (const auto& [key, item] : value.items()) {
        text += (first ? "" : ", ") + key + ": " + yamlScalar(item);
        first = false;
    }
    return text + "}";
}

std::string exportVerl(const ExportView& view, const ExportOptions& options)
{
    if (options.staleness < 0) {
        throw InputError(
            view.recipe->sourceFile, "", "--staleness must be 0 or more, got " + std::to_string(options.staleness));
    }
    if (options.staleness > 0) {
        view.fail(quant::SourceLocation {}, "weight staleness k = " + std::to_string(options.staleness),
            "verl's asynchronous trainer bounds staleness with async_training.staleness_threshold, a fraction of "
            "stale samples, and trigger_parameter_sync_step; neither is confirmed to mean \"weights exactly k "
            "optimizer steps old\", so no key is written (export with --staleness 0 and set them by hand)");
    }
    const VllmSettings settings = vllmSettings(view, true);
    const std::string prefix = "actor_rollout_ref.rollout.";
    std::ostringstream out;
    out << "# verl config overrides (Hydra dotted keys) for recipe "
        << (view.recipe->name.empty() ? std::string("(unnamed)") : view.recipe->name) << ".\n"
        << "# Pass each as key=value; keys under engine_kwargs.vllm are vLLM engine arguments (new keys: prefix +).\n";
    out << prefix << "name: vllm\n";
    out << prefix << "quantization: " << (settings.scheme ? "fp8" : "null") << "\n";
    const Json engine = vllmEngineArgs(settings);
    for (const auto& [key, value] : engine.items()) {
        if (key == "quantization") {
            continue; // verl's own quantization key above sets it
        }
        out << prefix << "engine_kwargs.vllm." << key << ": " << yamlScalar(value) << "\n";
    }
    return out.str();
}

// compressed-tensors QuantizationArgs of a recipe's weights and activations.
Json weightArgs(const quant::WeightPrecision& weights)
{
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

struct CompressedGroup {
    Scheme scheme;
    std::vector<std::string> targets;
};

struct CompressedSettings {
    std::vector<CompressedGroup> groups;
    std::string format; // compressed-tensors checkpoint format
    Json kvScheme; // null: bf16 KV cache
};

CompressedSettings compressedSettings(const ExportView& view)
{
    checkCommon(view);
    if (!view.anythingQuantized() && !view.kvQuantized()) {
        view.fail(view.recipe->weightsLocation, "an all-bf16 recipe",
            "the target describes quantized checkpoints and this recipe quantizes nothing (run the model unquantized)");
    }
    CompressedSettings settings;
    std::string formatModule;
    for (const Scheme& scheme : view.schemeOrder) {
        const std::vector<std::string>& modules = view.schemes.at(scheme);
        const bool floatWeights = scheme.weights.format == WeightFormat::Fp8E4m3;
        if (!floatWeights && scheme.activations != ActivationFormat::Bf16) {
            view.fail(view.activationsWhere(modules.front()), describe(scheme) + " on " + modules.front(),
                "compressed-tensors has no compressor for integer weights with float activations");
        }
        const std::string format = floatWeights ? "float-quantized" : "pack-quantized";
        if (!settings.format.empty() && format != settings.format) {
            view.fail(view.weightsWhere(modules.front()),
                "mixed checkpoint formats (" + settings.format + " for " + formatModule + ", " + format + " for "
                    + modules.front() + ")",
                "one compressed-tensors checkpoint is written in one format");
        }
        if (settings.format.empty()) {
            formatModule = modules.front();
        }
        settings.format = format;
        // One scheme covers every linear module not ignored; with several each names its modules.
        settings.groups.push_back(
            {scheme, view.schemeOrder.size() == 1 ? std::vector<std::string> {"Linear"} : modules});
    }
    if (settings.format.empty()) {
        settings.format = "float-quantized"; // KV cache only: the FP8 scales are its only quantized tensors
    }
    const UniformKv kv = uniformKv(view, false,
        "kv_cache_scheme applies to every attention layer; compressed-tensors has no per-layer KV-cache setting", true,
        "");
    if (kv.fp8) {
        Json args = Json::object();
        args["num_bits"] = 8;
        args["type"] = "float";
        args["symmetric"] = true;
        args["dynamic"] = false;
        args["strategy"] = kv.scales == KvScales::PerHead ? "attn_head" : "tensor";
        settings.kvScheme = args;
    }
    return settings;
}

std::string exportCompressedTensors(const ExportView& view)
{
    const CompressedSettings settings = compressedSettings(view);
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
        groups["group_" + std::to_string(i)] = entry;
    }
    config["config_groups"] = groups;
    // With no weight groups nothing is quantized to be ignored (a KV-cache-only checkpoint).
    config["ignore"] = settings.groups.empty() ? std::vector<std::string>() : view.ignored;
    config["kv_cache_scheme"] = settings.kvScheme;
    Json out = Json::object();
    out["quantization_config"] = config;
    return out.dump(2) + "\n";
}

std::string exportLlmCompressor(const ExportView& view)
{
    const CompressedSettings settings = compressedSettings(view);
    std::ostringstream out;
    out << "# llm-compressor recipe for precision recipe "
        << (view.recipe->name.empty() ? std::string("(unnamed)") : view.recipe->name) << "\n"
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

std::string exportModelOpt(const ExportView& view)
{
    checkCommon(view);
    if (!view.anythingQuantized() && !view.kvQuantized()) {
        view.fail(view.recipe->weightsLocation, "an all-bf16 recipe",
            "hf_quant_config.json describes a quantized checkpoint and this recipe quantizes nothing");
    }
    const std::optional<Scheme> scheme
        = singleScheme(view, "hf_quant_config.json has one quant_algo for every quantized layer");
    Json quantization = Json::object();
    quantization["quant_algo"] = nullptr;
    bool int4 = false;
    if (scheme) {
        const std::string& example = view.schemes.at(*scheme).front();
        const WeightFormat format = scheme->weights.format;
        const Granularity granularity = scheme->weights.granularity;
        const bool fp8Inputs = scheme->activations == ActivationFormat::Fp8E4m3;
        if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Channel && fp8Inputs) {
            quantization["quant_algo"] = "FP8_PER_CHANNEL_PER_TOKEN";
        } else if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Block128 && !fp8Inputs) {
            quantization["quant_algo"] = "FP8_PB_WO";
        } else if (format == WeightFormat::Int4 && !fp8Inputs) {
            quantization["quant_algo"] = "W4A16_AWQ";
            int4 = true;
        } else if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Tensor && fp8Inputs) {
            view.fail(view.activationsWhere(example), describe(*scheme) + " on " + example,
                "ModelOpt's FP8 quant_algo uses static per-tensor activation scales, not the recipe's dynamic "
                "per-token ones (per-channel weights export as FP8_PER_CHANNEL_PER_TOKEN)");
        } else {
            view.fail(view.weightsWhere(example), describe(*scheme) + " on " + example,
                "no ModelOpt quant_algo has this combination (FP8_PER_CHANNEL_PER_TOKEN: fp8 channel weights with "
                "fp8 activations; FP8_PB_WO: fp8 block128 weights with bf16 activations; W4A16_AWQ: int4 group128 "
                "weights with bf16 activations)");
        }
    }
    const UniformKv kv = uniformKv(view, false,
        "kv_cache_quant_algo applies to every attention layer; hf_quant_config.json has no per-layer KV-cache "
        "setting",
        false, "ModelOpt's FP8 KV cache has per-tensor scales only");
    quantization["kv_cache_quant_algo"] = kv.fp8 ? Json("FP8") : Json(nullptr);
    if (int4) {
        // The recipe's INT4 is symmetric with 128-element groups and no AWQ pre-quantization scale.
        quantization["group_size"] = 128;
        quantization["has_zero_point"] = false;
        quantization["pre_quant_scale"] = false;
    }
    quantization["exclude_modules"] = view.ignored;
    Json out = Json::object();
    // Consumers (vLLM, TensorRT-LLM) recognize the file by this producer name; the version says who wrote it.
    out["producer"] = {{"name", "modelopt"}, {"version", "mismatch-lab-export"}};
    out["quantization"] = quantization;
    return out.dump(2) + "\n";
}

} // namespace

std::string toString(ExportTarget target)
{
    switch (target) {
    case ExportTarget::Vllm:
        return "vllm";
    case ExportTarget::LlmCompressor:
        return "llm-compressor";
    case ExportTarget::CompressedTensors:
        return "compressed-tensors";
    case ExportTarget::Verl:
        return "verl";
    case ExportTarget::ModelOpt:
        return "modelopt";
    }
    return "unknown";
}

std::vector<std::string> exportTargetChoices()
{
    return {"vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt"};
}

std::optional<ExportTarget> parseExportTarget(std::string_view name)
{
    for (ExportTarget target : {ExportTarget::Vllm, ExportTarget::LlmCompressor, ExportTarget::CompressedTensors,
             ExportTarget::Verl, ExportTarget::ModelOpt}) {
        if (toString(target) == name) {
            return target;
        }
    }
    return std::nullopt;
}

std::string fileExtension(ExportTarget target)
{
    return target == ExportTarget::LlmCompressor || target == ExportTarget::Verl ? "yaml" : "json";
}

std::string exportRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options)
{
    const ExportView view = makeView(recipe, plan, options.target);
    if (options.staleness != 0 && options.target != ExportTarget::Verl) {
        throw InputError(recipe.sourceFile, "",
            "--staleness applies to --to verl only (" + toString(options.target)
                + " configures the rollout engine, not the training loop)");
    }
    switch (options.target) {
    case ExportTarget::Vllm:
        return exportVllm(view);
    case ExportTarget::LlmCompressor:
        return exportLlmCompressor(view);
    case ExportTarget::CompressedTensors:
        return exportCompressedTensors(view);
    case ExportTarget::Verl:
        return exportVerl(view, options);
    case ExportTarget::ModelOpt:
        return exportModelOpt(view);
    }
    return "";
}

} // namespace mismatch::io

#include "core/io/recipe_export.h"

#include "core/common/file_io.h"

#include "core/common/error.h"
#include "core/common/shell_quote.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <initializer_list>
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
    ExportOptions options;
    std::vector<std::string>* warnings = nullptr; // what the export says beside its text
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

    void warn(const std::string& text) const { warnings->push_back(text); }
    std::string recipeName() const { return recipe->name.empty() ? std::string("(unnamed)") : recipe->name; }

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

ExportView makeView(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options,
    std::vector<std::string>& warnings)
{
    ExportView view;
    view.recipe = &recipe;
    view.plan = &plan;
    view.target = options.target;
    view.options = options;
    view.warnings = &warnings;
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

// ---------------------------------------------------------------------------------------------------------------
// vLLM, verl and SGLang: engines that quantize a BF16 checkpoint themselves (or load an FP8 one).

// A vLLM release as (major, minor); nullopt for the current release.
std::optional<std::pair<int, int>> parseVllmVersion(const std::string& text)
{
    if (text.empty() || text == "current") {
        return std::nullopt;
    }
    std::string digits = text;
    if (digits.front() == 'v') {
        digits.erase(0, 1);
    }
    int major = -1;
    int minor = -1;
    size_t position = 0;
    auto number = [&](int& out) {
        const size_t start = position;
        while (position < digits.size() && position - start < 6 && digits[position] >= '0'
            && digits[position] <= '9') {
            ++position;
        }
        if (position == start) {
            return false;
        }
        out = std::stoi(digits.substr(start, position - start));
        return true;
    };
    bool ok = number(major) && position < digits.size() && digits[position] == '.';
    if (ok) {
        ++position;
        ok = number(minor);
    }
    // An optional patch level and local suffix (0.22.1, 0.22.1rc1) do not change the keys.
    if (ok && position < digits.size() && digits[position] != '.') {
        ok = false;
    }
    if (!ok) {
        throw InputError("--target-version", "",
            "expected a vLLM release such as 0.21 or 0.22.1 (or current), got '" + text + "'");
    }
    return std::make_pair(major, minor);
}

// Whether the export is for a vLLM with the online quantization frontend (the current release does).
bool hasOnlineFrontend(const ExportOptions& options)
{
    const auto version = parseVllmVersion(options.targetVersion);
    return !version || *version >= std::make_pair(0, 22);
}

// The vLLM-side checks and settings that the vllm, verl and sglang exports share.
struct EngineSettings {
    std::optional<Scheme> scheme;
    UniformKv kv;
};

// How a target quantizes a BF16 (or FP8) checkpoint: what it accepts.
struct EngineRules {
    std::string name; // for messages: "vLLM's online fp8", ...
    bool ignoreList = true; // takes a list of modules to leave in BF16
    std::string noIgnoreReason;
    bool tensor = true; // fp8 weights with one scale per tensor
    bool channel = false; // one scale per output channel
    bool block = true; // 128x128 blocks
    std::string granularityReason;
    bool kvExceptions = true; // BF16 KV cache on some layers
    std::string kvExceptionReason;
};

EngineSettings engineSettings(const ExportView& view, const EngineRules& rules)
{
    checkCommon(view);
    EngineSettings settings;
    checkLmHeadUnquantized(view, rules.name + " quantizes the decoder layers' linear modules, not lm_head");
    if (!rules.ignoreList && view.anythingQuantized()) {
        for (const std::string& name : view.ignored) {
            if (name != quant::kLmHeadName) {
                view.fail(view.weightsWhere(name), "bf16 weights on " + name + " while other modules are quantized",
                    rules.noIgnoreReason);
            }
        }
    }
    settings.scheme = singleScheme(view,
        rules.name + " applies one scheme to every quantized layer (export --to compressed-tensors or --to modelopt "
                     "for several)");
    if (settings.scheme) {
        const Scheme& scheme = *settings.scheme;
        const std::string& example = view.schemes.at(scheme).front();
        if (scheme.weights.format == WeightFormat::Int8 || scheme.weights.format == WeightFormat::Int4) {
            view.fail(view.weightsWhere(example), quant::describe(scheme.weights) + " weights on " + example,
                rules.name + " quantizes weights to fp8_e4m3 only (export --to compressed-tensors for integer "
                             "weights)");
        }
        if (scheme.activations != ActivationFormat::Fp8E4m3) {
            view.fail(view.activationsWhere(example), "weight-only fp8 (" + describe(scheme) + ") on " + example,
                rules.name + " quantizes the activations of every quantized layer (dynamic); bf16 activations "
                             "need --to compressed-tensors (naive-quantized)");
        }
        const Granularity granularity = scheme.weights.granularity;
        if ((granularity == Granularity::Tensor && !rules.tensor) || (granularity == Granularity::Channel && !rules.channel)
            || (granularity == Granularity::Block128 && !rules.block)) {
            view.fail(view.weightsWhere(example),
                quant::toString(granularity) + " granularity of fp8 weights on " + example, rules.granularityReason);
        }
    }
    settings.kv = uniformKv(view, rules.kvExceptions, rules.kvExceptionReason, false,
        rules.name + "'s kv_cache_dtype has per-tensor scales only (per-head scales need a checkpoint calibrated by "
                     "llm-compressor: export --to llm-compressor)");
    return settings;
}

// What an FP8 KV cache in an engine runs with: the checkpoint's k/v scales, else 1.0.
void warnKvScales(const ExportView& view, const EngineSettings& settings, const std::string& engine, bool checkpoint)
{
    if (!settings.kv.fp8) {
        return;
    }
    view.warn(engine + "'s FP8 KV cache takes its k/v scales from the checkpoint and uses 1.0 where it has none ("
        + (checkpoint ? std::string("this FP8 checkpoint must carry the recipe's calibrated per-tensor scales")
                      : std::string("a BF16 checkpoint has none, so the recipe's calibrated per-tensor scales are "
                                    "not used"))
        + "; vLLM docs/features/quantization/quantized_kvcache.md). Calibrate them into the checkpoint with --to "
          "llm-compressor to run what the recipe measured");
}

void warnActivationGroups(const ExportView& view, const Scheme& scheme, const std::string& engine)
{
    if (scheme.weights.granularity == Granularity::Block128) {
        view.warn(engine + " quantizes the activations of 128x128-block FP8 weights per token in groups of 128 "
                           "channels (1x128), where the recipe has one scale per token");
    }
}

// vLLM's engine arguments for the KV cache: kv_cache_dtype and kv_cache_dtype_skip_layers (strings).
void kvEngineArgs(const UniformKv& kv, Json& args)
{
    args["kv_cache_dtype"] = kv.fp8 ? "fp8_e4m3" : "auto";
    // No calculate_kv_scales: current vLLM removed it (vllm-project/vllm PR #49389, after the deprecation in PR
    // #37201); FP8 KV scales now come from the checkpoint when it has them, else 1.0
    // (docs/features/quantization/quantized_kvcache.md, vllm/config/cache.py CacheConfig).
    if (kv.fp8 && !kv.bf16Layers.empty()) {
        // kv_cache_dtype_skip_layers is a list of strings: layer indices ('0', '2') or attention types
        // ('sliding_window') (vllm/config/cache.py CacheConfig, docs/features/quantization/quantized_kvcache.md).
        Json layers = Json::array();
        for (const std::int64_t layer : kv.bf16Layers) {
            layers.push_back(std::to_string(layer));
        }
        args["kv_cache_dtype_skip_layers"] = layers;
    }
}

// vLLM's online shorthand for a scheme (vllm/config/quantization.py _ONLINE_SHORTHANDS).
std::string vllmOnlineScheme(const Scheme& scheme)
{
    switch (scheme.weights.granularity) {
    case Granularity::Tensor:
        return "fp8_per_tensor";
    case Granularity::Channel:
        return "fp8_per_channel";
    default:
        return "fp8_per_block";
    }
}

struct VllmExport {
    Json engineArgs; // what `vllm serve` and LLM(...) take
    Json checkpointConfig; // checkpoint form: the config.json quantization_config; else null
};

VllmExport vllmExport(const ExportView& view)
{
    const ExportOptions& options = view.options;
    const bool online = options.vllmForm == VllmForm::Online;
    const bool frontend = hasOnlineFrontend(options);
    EngineRules rules;
    if (!online) {
        rules.name = "vLLM's fp8 checkpoint config";
        rules.channel = false;
        rules.granularityReason = "vLLM's fp8 config has per-tensor or 128x128-block weight scales only (export "
                                  "--to compressed-tensors for per-channel scales)";
    } else if (frontend) {
        rules.name = "vLLM's online quantization";
        rules.channel = true;
    } else {
        rules.name = "vLLM's online fp8 (before " + std::string(kVllmOnlineFrontendRelease) + ")";
        rules.ignoreList = false;
        rules.noIgnoreReason = "online fp8 quantization before vLLM " + std::string(kVllmOnlineFrontendRelease)
            + " has no list of layers to leave unquantized (--target-version current has quantization_config.ignore)";
        rules.block = false;
        rules.granularityReason = "online fp8 quantization before vLLM " + std::string(kVllmOnlineFrontendRelease)
            + " has per-tensor weight scales only (fp8_per_block arrived with the online frontend)";
    }
    const EngineSettings settings = engineSettings(view, rules);
    VllmExport out;
    out.engineArgs = Json::object();
    out.checkpointConfig = nullptr;
    if (settings.scheme) {
        const Scheme& scheme = *settings.scheme;
        if (online && frontend) {
            // docs/features/quantization/online.md: --quantization with a scheme shorthand, and
            // quantization_config.ignore with the unfused shard names.
            out.engineArgs["quantization"] = vllmOnlineScheme(scheme);
            out.engineArgs["quantization_config"] = {{"ignore", view.ignored}};
            if (scheme.weights.granularity == Granularity::Tensor) {
                view.warn("vLLM's fp8_per_tensor scales activations per tensor except on GPUs where it uses one "
                          "scale per token (Ada, Hopper; docs/features/quantization/online.md); the recipe has one "
                          "scale per token");
            }
        } else {
            out.engineArgs["quantization"] = "fp8";
        }
        if (!online) {
            Json config = Json::object();
            config["quant_method"] = "fp8";
            config["activation_scheme"] = "dynamic";
            if (scheme.weights.granularity == Granularity::Block128) {
                config["weight_block_size"] = {128, 128};
            }
            config["ignored_layers"] = view.ignored;
            out.checkpointConfig = config;
        }
        warnActivationGroups(view, scheme, "vLLM");
    }
    kvEngineArgs(settings.kv, out.engineArgs);
    warnKvScales(view, settings, "vLLM", !online);
    return out;
}

std::string vllmFormText(const ExportOptions& options)
{
    if (options.vllmForm == VllmForm::Checkpoint) {
        return "checkpoint: describes a checkpoint whose weights are already stored in FP8 with their scales "
               "(quantization_config belongs in that checkpoint's config.json); it does not apply to a BF16 model";
    }
    return hasOnlineFrontend(options)
        ? "online: vLLM quantizes the BF16 checkpoint's weights to FP8 at load time "
          "(docs/features/quantization/online.md)"
        : "online (vLLM before " + std::string(kVllmOnlineFrontendRelease)
            + "): quantization fp8 quantizes the BF16 checkpoint's weights to FP8 at load time";
}

std::string exportVllm(const ExportView& view)
{
    const VllmExport settings = vllmExport(view);
    Json out = Json::object();
    out["form"] = vllmFormText(view.options);
    out["vllm_version"] = view.options.targetVersion.empty() ? std::string("current") : view.options.targetVersion;
    if (view.options.vllmForm == VllmForm::Checkpoint) {
        out["quantization_config"] = settings.checkpointConfig;
    }
    out["engine_args"] = settings.engineArgs;
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

// A value as Hydra's override grammar reads it: JSON strings stay quoted inside lists ("0" is a string).
std::string hydraValue(const Json& value)
{
    if (value.is_array()) {
        std::string text = "[";
        for (size_t i = 0; i < value.size(); ++i) {
            text += (i ? "," : "") + value[i].dump();
        }
        return text + "]";
    }
    if (value.is_string()) {
        return value.get<std::string>();
    }
    return value.dump();
}

// SGLang's comma-separated SGLANG_FP8_IGNORED_LAYERS.
std::string sglangIgnored(const std::vector<std::string>& modules)
{
    std::string text;
    for (const std::string& name : modules) {
        text += (text.empty() ? "" : ",") + name;
    }
    return text;
}

struct VerlExport {
    std::string rollout; // "vllm" or "sglang"
    Json quantization; // "fp8" or null
    Json engineKwargs; // under engine_kwargs.<rollout>
    std::string ignoredLayers; // SGLang rollout: SGLANG_FP8_IGNORED_LAYERS, "" when none
};

VerlExport verlExport(const ExportView& view)
{
    const ExportOptions& options = view.options;
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
    const bool sglang = options.verlRollout == VerlRollout::Sglang;
    EngineRules rules;
    rules.name = sglang ? "verl's fp8 rollout (SGLang)" : "verl's fp8 rollout (vLLM)";
    rules.tensor = false;
    rules.granularityReason = "verl's fp8 rollout quantizes weights in 128x128 blocks only";
    if (!sglang) {
        rules.ignoreList = false;
        rules.noIgnoreReason = "verl's vLLM rollout quantization has no list of layers to leave unquantized (the "
                               "SGLang rollout has: --rollout sglang)";
    } else {
        rules.kvExceptions = false;
        rules.kvExceptionReason = "SGLang's kv_cache_dtype applies to every layer; it has no per-layer exceptions";
    }
    const EngineSettings settings = engineSettings(view, rules);
    VerlExport out;
    out.rollout = sglang ? "sglang" : "vllm";
    out.quantization = settings.scheme ? Json("fp8") : Json(nullptr);
    out.engineKwargs = Json::object();
    kvEngineArgs(settings.kv, out.engineKwargs);
    if (sglang && settings.scheme && !view.ignored.empty()) {
        out.ignoredLayers = sglangIgnored(view.ignored);
    }
    if (settings.scheme) {
        warnActivationGroups(view, *settings.scheme, "verl's fp8 rollout");
    }
    warnKvScales(view, settings, sglang ? "SGLang" : "vLLM", false);
    return out;
}

std::string exportVerl(const ExportView& view)
{
    const VerlExport settings = verlExport(view);
    std::ostringstream out;
    out << "# verl rollout configuration for precision recipe " << view.recipeName() << " (" << settings.rollout
        << " rollout).\n"
        << "# Merge into the trainer config, or pass verl_overrides.txt's lines on the command line.\n";
    if (!settings.ignoredLayers.empty()) {
        out << "# The SGLang rollout leaves these modules in BF16 when its workers start with\n"
            << "# SGLANG_FP8_IGNORED_LAYERS=" << settings.ignoredLayers << "\n";
    }
    out << "actor_rollout_ref:\n"
        << "  rollout:\n"
        << "    name: " << settings.rollout << "\n"
        << "    quantization: " << yamlScalar(settings.quantization) << "\n"
        << "    engine_kwargs:\n"
        << "      " << settings.rollout << ":\n";
    for (const auto& [key, value] : settings.engineKwargs.items()) {
        out << "        " << key << ": " << yamlScalar(value) << "\n";
    }
    return out.str();
}

// verl's Hydra command-line overrides: `++` where the key may or may not be in verl's defaults (quantization),
// `+` under engine_kwargs.<engine>, whose default is {} (verl/trainer/config rollout engine_kwargs).
std::vector<std::string> verlOverrideLines(const VerlExport& settings)
{
    const std::string prefix = "actor_rollout_ref.rollout.";
    std::vector<std::string> lines;
    lines.push_back(prefix + "name=" + settings.rollout);
    lines.push_back("++" + prefix + "quantization=" + hydraValue(settings.quantization));
    for (const auto& [key, value] : settings.engineKwargs.items()) {
        lines.push_back(
            shellQuote("+" + prefix + "engine_kwargs." + settings.rollout + "." + key + "=" + hydraValue(value)));
    }
    return lines;
}

struct SglangExport {
    Json serverArgs;
    std::string ignoredLayers;
};

SglangExport sglangExport(const ExportView& view)
{
    EngineRules rules;
    rules.name = "SGLang's online fp8";
    rules.block = false;
    rules.granularityReason = "SGLang's --quantization fp8 quantizes a BF16 checkpoint with one scale per weight "
                              "tensor (128x128 blocks need an FP8 checkpoint, or verl's rollout: --to verl --rollout "
                              "sglang)";
    rules.kvExceptions = false;
    rules.kvExceptionReason = "SGLang's kv_cache_dtype applies to every layer; it has no per-layer exceptions";
    const EngineSettings settings = engineSettings(view, rules);
    SglangExport out;
    out.serverArgs = Json::object();
    if (settings.scheme) {
        out.serverArgs["quantization"] = "fp8";
        if (!view.ignored.empty()) {
            out.ignoredLayers = sglangIgnored(view.ignored);
        }
    }
    out.serverArgs["kv_cache_dtype"] = settings.kv.fp8 ? "fp8_e4m3" : "auto";
    warnKvScales(view, settings, "SGLang", false);
    return out;
}

std::string exportSglang(const ExportView& view)
{
    const SglangExport settings = sglangExport(view);
    Json out = Json::object();
    out["form"] = "online: SGLang quantizes the BF16 checkpoint's weights to FP8 at load time "
                  "(docs/backend/quantization.md, Online Quantization)";
    Json env = Json::object();
    if (!settings.ignoredLayers.empty()) {
        env["SGLANG_FP8_IGNORED_LAYERS"] = settings.ignoredLayers;
    }
    out["env"] = env;
    out["server_args"] = settings.serverArgs;
    return out.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------------------------
// llm-compressor and compressed-tensors.

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

// The compressed-tensors checkpoint format of one scheme (compressed_tensors/config/base.py CompressionFormat):
// FP8 weights with FP8 inputs are float-quantized; FP8 weights alone are naive-quantized (the float compressor
// expects quantized input activations); integer weights are pack-quantized.
std::string compressedFormat(const Scheme& scheme)
{
    if (scheme.weights.format == WeightFormat::Fp8E4m3) {
        return scheme.activations == ActivationFormat::Fp8E4m3 ? "float-quantized" : "naive-quantized";
    }
    return "pack-quantized";
}

struct CompressedGroup {
    Scheme scheme;
    std::vector<std::string> targets;
    std::string format;
};

struct CompressedSettings {
    std::vector<CompressedGroup> groups;
    std::string format; // the checkpoint's format: one group format, or mixed-precision
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
    for (const Scheme& scheme : view.schemeOrder) {
        const std::vector<std::string>& modules = view.schemes.at(scheme);
        if (scheme.weights.format != WeightFormat::Fp8E4m3 && scheme.activations != ActivationFormat::Bf16) {
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
    for (const CompressedGroup& group : settings.groups) {
        if (group.scheme.activations == ActivationFormat::Fp8E4m3) {
            warnActivationGroups(view, group.scheme, "vLLM's compressed-tensors loader");
        }
    }
    return settings;
}

std::string exportCompressedTensors(const ExportView& view)
{
    const CompressedSettings settings = compressedSettings(view);
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
    Json out = Json::object();
    out["quantization_config"] = config;
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

// ---------------------------------------------------------------------------------------------------------------
// ModelOpt.

struct ModelOptExport {
    Json quantization; // hf_quant_config.json's "quantization"
    Json configFragment; // config.json's quantization_config
};

// The quant_algo of one scheme, with its per-layer extras (group_size); warnings for what vLLM runs differently.
Json modelOptAlgo(const ExportView& view, const Scheme& scheme)
{
    const std::string& example = view.schemes.at(scheme).front();
    const WeightFormat format = scheme.weights.format;
    const Granularity granularity = scheme.weights.granularity;
    const bool fp8Inputs = scheme.activations == ActivationFormat::Fp8E4m3;
    Json algo = Json::object();
    if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Channel && fp8Inputs) {
        algo["quant_algo"] = "FP8_PER_CHANNEL_PER_TOKEN";
    } else if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Block128) {
        // vllm/model_executor/layers/quantization/modelopt.py ModelOptFp8PbWoLinearMethod: block FP8 weights run
        // as an FP8 GEMM with dynamic activations in 1x128 groups, whatever "WO" says.
        algo["quant_algo"] = "FP8_PB_WO";
        if (!fp8Inputs) {
            view.warn("FP8_PB_WO on " + example + " and the modules sharing its scheme: vLLM runs FP8_PB_WO with FP8 "
                "activations (dynamic, per token in groups of 128; vllm/model_executor/layers/quantization/modelopt.py) "
                "where the recipe keeps them in bf16, so vLLM's mismatch is not the recipe's");
        } else {
            warnActivationGroups(view, scheme, "vLLM's FP8_PB_WO");
        }
    } else if (format == WeightFormat::Int4 && granularity == Granularity::Group128 && !fp8Inputs) {
        algo["quant_algo"] = "W4A16_AWQ";
        algo["group_size"] = 128;
        view.warn("W4A16_AWQ (on " + example + " and the modules sharing its scheme) is TensorRT-LLM's quant_algo; "
                  "vLLM's ModelOpt loader does not list it (vllm/model_executor/layers/quantization/modelopt.py "
                  "QUANT_ALGOS), so this checkpoint runs in TensorRT-LLM, not vLLM");
    } else if (format == WeightFormat::Fp8E4m3 && granularity == Granularity::Tensor && fp8Inputs) {
        view.fail(view.activationsWhere(example), describe(scheme) + " on " + example,
            "ModelOpt's FP8 quant_algo uses static per-tensor activation scales, not the recipe's dynamic per-token "
            "ones (per-channel weights export as FP8_PER_CHANNEL_PER_TOKEN)");
    } else {
        view.fail(view.weightsWhere(example), describe(scheme) + " on " + example,
            "no ModelOpt quant_algo has this combination (FP8_PER_CHANNEL_PER_TOKEN: fp8 channel weights with fp8 "
            "activations; FP8_PB_WO: fp8 block128 weights; W4A16_AWQ: int4 group128 weights with bf16 activations)");
    }
    return algo;
}

ModelOptExport modelOptExport(const ExportView& view)
{
    checkCommon(view);
    if (!view.anythingQuantized() && !view.kvQuantized()) {
        view.fail(view.recipe->weightsLocation, "an all-bf16 recipe",
            "hf_quant_config.json describes a quantized checkpoint and this recipe quantizes nothing");
    }
    std::map<Scheme, Json> algos;
    for (const Scheme& scheme : view.schemeOrder) {
        algos[scheme] = modelOptAlgo(view, scheme);
    }
    const UniformKv kv = uniformKv(view, false,
        "kv_cache_quant_algo applies to every attention layer; hf_quant_config.json has no per-layer KV-cache "
        "setting",
        false, "ModelOpt's FP8 KV cache has per-tensor scales only");
    Json quantization = Json::object();
    Json quantizedLayers = nullptr;
    if (view.schemeOrder.empty()) {
        quantization["quant_algo"] = nullptr;
    } else if (view.schemeOrder.size() == 1) {
        const Json& algo = algos.at(view.schemeOrder.front());
        quantization["quant_algo"] = algo["quant_algo"];
    } else {
        // Several schemes: MIXED_PRECISION with each quantized module's own quant_algo
        // (vllm/model_executor/layers/quantization/modelopt.py ModelOptMixedPrecisionConfig, quantized_layers).
        quantization["quant_algo"] = "MIXED_PRECISION";
        quantizedLayers = Json::object();
        for (const std::string& name : view.linearModules) {
            const quant::ModulePrecision& precision = view.module(name);
            const Scheme scheme {precision.weights, precision.activations.format};
            const auto found = algos.find(scheme);
            if (found != algos.end()) {
                quantizedLayers[name] = found->second;
            }
        }
    }
    quantization["kv_cache_quant_algo"] = kv.fp8 ? Json("FP8") : Json(nullptr);
    const bool awqOnly = view.schemeOrder.size() == 1 && algos.at(view.schemeOrder.front()).contains("group_size");
    if (awqOnly) {
        // The recipe's INT4 is symmetric with 128-element groups and no AWQ pre-quantization scale.
        quantization["group_size"] = 128;
        quantization["has_zero_point"] = false;
        quantization["pre_quant_scale"] = false;
    }
    quantization["exclude_modules"] = view.ignored;
    if (!quantizedLayers.is_null()) {
        quantization["quantized_layers"] = quantizedLayers;
    }
    ModelOptExport out;
    out.quantization = quantization;
    // config.json's form, which vLLM reads when hf_quant_config.json is absent: the same keys flat beside
    // quant_method modelopt, with `ignore` for exclude_modules (modelopt.py ModelOptQuantConfigBase.from_config).
    Json fragment = Json::object();
    fragment["quant_method"] = "modelopt";
    fragment["producer"] = {{"name", "modelopt"}, {"version", "mismatch-lab-export"}};
    fragment["quant_algo"] = quantization["quant_algo"];
    fragment["kv_cache_quant_algo"] = quantization["kv_cache_quant_algo"];
    if (awqOnly) {
        fragment["group_size"] = 128;
    }
    fragment["ignore"] = view.ignored;
    if (!quantizedLayers.is_null()) {
        fragment["quantized_layers"] = quantizedLayers;
    }
    out.configFragment = Json::object({{"quantization_config", fragment}});
    return out;
}

std::string exportModelOpt(const ExportView& view)
{
    const ModelOptExport settings = modelOptExport(view);
    Json out = Json::object();
    // Consumers (vLLM, TensorRT-LLM) recognize the file by this producer name; the version says who wrote it.
    out["producer"] = {{"name", "modelopt"}, {"version", "mismatch-lab-export"}};
    out["quantization"] = settings.quantization;
    return out.dump(2) + "\n";
}

// ---------------------------------------------------------------------------------------------------------------
// Ready to run.

std::string modelPath(const ExportOptions& options)
{
    return options.modelPath.empty() ? std::string("MODEL") : options.modelPath;
}

// A Python string literal.
std::string pyString(const std::string& text)
{
    return Json(text).dump();
}

// A JSON value as a Python literal (null/true/false spelt the Python way).
std::string pyValue(const Json& value)
{
    if (value.is_null()) {
        return "None";
    }
    if (value.is_boolean()) {
        return value.get<bool>() ? "True" : "False";
    }
    if (value.is_array()) {
        std::string text = "[";
        for (size_t i = 0; i < value.size(); ++i) {
            text += (i ? ", " : "") + pyValue(value[i]);
        }
        return text + "]";
    }
    if (value.is_object()) {
        std::string text = "{";
        bool first = true;
        for (const auto& [key, item] : value.items()) {
            text += (first ? "" : ", ") + pyString(key) + ": " + pyValue(item);
            first = false;
        }
        return text + "}";
    }
    return value.dump();
}

// `vllm serve` arguments: --name-with-dashes VALUE; lists as separate words (nargs), objects as JSON.
std::string vllmServeCommand(const ExportOptions& options, const Json& engineArgs)
{
    std::string text = "vllm serve " + shellQuote(modelPath(options));
    for (const auto& [key, value] : engineArgs.items()) {
        std::string flag = "--" + key;
        for (char& c : flag) {
            c = c == '_' ? '-' : c;
        }
        text += " \\\n    " + flag;
        if (value.is_array()) {
            for (const Json& item : value) {
                text += " " + shellQuote(item.is_string() ? item.get<std::string>() : item.dump());
            }
        } else if (value.is_object()) {
            text += " " + shellQuote(value.dump());
        } else {
            text += " " + shellQuote(value.is_string() ? value.get<std::string>() : value.dump());
        }
    }
    return text + "\n";
}

std::string vllmPythonCall(const ExportOptions& options, const Json& engineArgs)
{
    std::string text = "from vllm import LLM\n\nllm = LLM(\n    model=" + pyString(modelPath(options)) + ",\n";
    for (const auto& [key, value] : engineArgs.items()) {
        text += "    " + key + "=" + pyValue(value) + ",\n";
    }
    return text + ")\n";
}

// The llm-compressor oneshot script that writes a compressed-tensors checkpoint from the recipe file beside it.
// Calibration data only when the recipe has static scales to measure (the KV cache's); FP8 dynamic, FP8 and
// integer weight-only schemes quantize the weights alone.
std::string oneshotScript(const ExportView& view, const CompressedSettings& settings)
{
    const bool calibrate = !settings.kvScheme.is_null();
    std::ostringstream out;
    out << "# llm-compressor one-shot quantization for precision recipe " << view.recipeName()
        << " (written by mismatch export).\n"
        << "# Writes a compressed-tensors checkpoint (config.json quantization_config as in compressed-tensors.json)\n"
        << "# that vLLM loads as it is: vllm serve SAVE_DIR\n"
        << "from pathlib import Path\n\n";
    if (calibrate) {
        out << "from datasets import load_dataset\n";
    }
    out << "from llmcompressor import oneshot\n"
        << "from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        << "MODEL_ID = " << pyString(modelPath(view.options)) << "\n"
        << "RECIPE = str(Path(__file__).with_name(\"llm-compressor.yaml\"))\n"
        << "SAVE_DIR = MODEL_ID.rstrip(\"/\").split(\"/\")[-1] + " << pyString("-" + view.recipeName()) << "\n\n"
        << "model = AutoModelForCausalLM.from_pretrained(MODEL_ID, torch_dtype=\"auto\")\n"
        << "tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)\n\n";
    if (calibrate) {
        out << "# The KV cache's scales are static: measured on calibration text. Prefer prompts of your own rollouts.\n"
            << "NUM_CALIBRATION_SAMPLES = 512\n"
            << "MAX_SEQUENCE_LENGTH = 2048\n"
            << "ds = load_dataset(\"HuggingFaceH4/ultrachat_200k\", split=f\"train_sft[:{NUM_CALIBRATION_SAMPLES}]\")\n"
            << "ds = ds.shuffle(seed=42)\n\n\n"
            << "def tokenize(example):\n"
            << "    text = tokenizer.apply_chat_template(example[\"messages\"], tokenize=False)\n"
            << "    return tokenizer(text, padding=False, max_length=MAX_SEQUENCE_LENGTH, truncation=True,\n"
            << "                     add_special_tokens=False)\n\n\n"
            << "ds = ds.map(tokenize, remove_columns=ds.column_names)\n"
            << "oneshot(model=model, dataset=ds, recipe=RECIPE, max_seq_length=MAX_SEQUENCE_LENGTH,\n"
            << "        num_calibration_samples=NUM_CALIBRATION_SAMPLES)\n";
    } else {
        out << "# Dynamic activation scales and weight-only schemes need no calibration data.\n"
            << "oneshot(model=model, recipe=RECIPE)\n";
    }
    out << "\nmodel.save_pretrained(SAVE_DIR, save_compressed=True)\n"
        << "tokenizer.save_pretrained(SAVE_DIR)\n";
    return out.str();
}

std::string readme(const ExportView& view, const ExportResult& result,
    const std::vector<std::pair<std::string, std::string>>& described)
{
    std::ostringstream out;
    out << "Precision recipe " << view.recipeName() << " (" << view.recipe->sourceFile << ") exported --to "
        << toString(view.target) << " by mismatch export, for the model at " << modelPath(view.options) << ".\n\n"
        << "Files:\n";
    for (const auto& [name, what] : described) {
        out << "  " << name << "\n      " << what << "\n";
    }
    out << "\n";
    if (result.warnings.empty()) {
        out << "Warnings: none; the target runs the recipe as written.\n";
    } else {
        out << "Warnings (where the target runs something other than the recipe):\n";
        for (const std::string& warning : result.warnings) {
            out << "  - " << warning << "\n";
        }
    }
    return out.str();
}

void addFiles(const ExportView& view, ExportResult& result)
{
    std::vector<std::pair<std::string, std::string>> described;
    auto add = [&](const std::string& name, const std::string& text, const std::string& what) {
        result.files.push_back({name, text});
        described.emplace_back(name, what);
    };
    const ExportOptions& options = view.options;
    std::vector<std::string> ignoredWarnings; // bundle helpers re-derive settings; their warnings are known
    ExportView quiet = view;
    quiet.warnings = &ignoredWarnings;
    switch (view.target) {
    case ExportTarget::Vllm: {
        add(result.configName, result.text, "the engine arguments (" + vllmFormText(options) + ")");
        const VllmExport settings = vllmExport(quiet);
        add("vllm_serve.sh", "#!/bin/sh\n" + vllmServeCommand(options, settings.engineArgs),
            "the `vllm serve` command line");
        add("vllm_llm.py", vllmPythonCall(options, settings.engineArgs), "the matching Python LLM(...) call");
        if (options.vllmForm == VllmForm::Checkpoint) {
            add("config_quantization_config.json", Json::object({{"quantization_config", settings.checkpointConfig}}).dump(2) + "\n",
                "the quantization_config to put into the FP8 checkpoint's config.json");
        }
        break;
    }
    case ExportTarget::Sglang: {
        add(result.configName, result.text, "the launch_server arguments and environment");
        const SglangExport settings = sglangExport(quiet);
        std::string command = "#!/bin/sh\n";
        if (!settings.ignoredLayers.empty()) {
            command += "export SGLANG_FP8_IGNORED_LAYERS=" + shellQuote(settings.ignoredLayers) + "\n";
        }
        command += "python3 -m sglang.launch_server --model-path " + shellQuote(modelPath(options));
        for (const auto& [key, value] : settings.serverArgs.items()) {
            std::string flag = "--" + key;
            for (char& c : flag) {
                c = c == '_' ? '-' : c;
            }
            command += " \\\n    " + flag + " " + shellQuote(value.get<std::string>());
        }
        add("sglang_launch.sh", command + "\n", "the SGLang launch command with its environment");
        break;
    }
    case ExportTarget::Verl: {
        add(result.configName, result.text, "the rollout section of verl's trainer config (YAML form)");
        const VerlExport settings = verlExport(quiet);
        std::string lines = "# Append to the verl trainer command (python3 -m verl.trainer.main_ppo ...), one per line.\n";
        for (const std::string& line : verlOverrideLines(settings)) {
            lines += "    " + line + " \\\n";
        }
        add("verl_overrides.txt", lines, "the same settings as Hydra command-line overrides, shell-quoted");
        if (!settings.ignoredLayers.empty()) {
            add("verl_env.sh",
                "# The SGLang rollout workers read it: export it where they start (before `ray start` on every node).\n"
                "export SGLANG_FP8_IGNORED_LAYERS="
                    + shellQuote(settings.ignoredLayers) + "\n",
                "the environment the SGLang rollout needs to leave the recipe's BF16 modules unquantized");
        }
        break;
    }
    case ExportTarget::LlmCompressor:
    case ExportTarget::CompressedTensors: {
        const CompressedSettings settings = compressedSettings(quiet);
        if (view.target == ExportTarget::CompressedTensors) {
            add(result.configName, result.text, "the quantization_config the quantized checkpoint's config.json holds");
            add("llm-compressor.yaml", exportLlmCompressor(quiet), "the llm-compressor recipe that writes it");
        } else {
            add(result.configName, result.text, "the llm-compressor recipe");
        }
        add("llm_compressor_oneshot.py", oneshotScript(view, settings),
            "the llm-compressor oneshot script: loads the model, " + std::string(settings.kvScheme.is_null()
                ? "quantizes it (no calibration data needed)"
                : "calibrates the static KV-cache scales on a dataset")
                + " and saves it with save_pretrained(..., save_compressed=True)");
        break;
    }
    case ExportTarget::ModelOpt: {
        add(result.configName, result.text, "ModelOpt's hf_quant_config.json for the quantized checkpoint");
        const ModelOptExport settings = modelOptExport(quiet);
        add("config_quantization_config.json", settings.configFragment.dump(2) + "\n",
            "the quantization_config fragment of the checkpoint's config.json (quant_method modelopt)");
        break;
    }
    }
    add("README.txt", "", "this file");
    result.files.back().text = readme(view, result, described);
}

std::string configFileName(ExportTarget target)
{
    return target == ExportTarget::ModelOpt ? std::string("hf_quant_config.json")
                                            : toString(target) + "." + fileExtension(target);
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
    case ExportTarget::Sglang:
        return "sglang";
    }
    return "unknown";
}

std::vector<std::string> exportTargetChoices()
{
    return {"vllm", "sglang", "llm-compressor", "compressed-tensors", "verl", "modelopt"};
}

namespace {

// The value of `values` whose toString is `name`.
template <typename Enum>
std::optional<Enum> parseByName(std::string_view name, std::initializer_list<Enum> values)
{
    for (Enum value : values) {
        if (toString(value) == name) {
            return value;
        }
    }
    return std::nullopt;
}

} // namespace

std::optional<ExportTarget> parseExportTarget(std::string_view name)
{
    return parseByName(name, {ExportTarget::Vllm, ExportTarget::LlmCompressor, ExportTarget::CompressedTensors,
                                 ExportTarget::Verl, ExportTarget::ModelOpt, ExportTarget::Sglang});
}

std::string fileExtension(ExportTarget target)
{
    return target == ExportTarget::LlmCompressor || target == ExportTarget::Verl ? "yaml" : "json";
}

std::string toString(VllmForm form)
{
    return form == VllmForm::Online ? "online" : "checkpoint";
}

std::optional<VllmForm> parseVllmForm(std::string_view name)
{
    return parseByName(name, {VllmForm::Online, VllmForm::Checkpoint});
}

std::string toString(VerlRollout rollout)
{
    return rollout == VerlRollout::Vllm ? "vllm" : "sglang";
}

std::optional<VerlRollout> parseVerlRollout(std::string_view name)
{
    return parseByName(name, {VerlRollout::Vllm, VerlRollout::Sglang});
}

ExportResult exportBundle(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options)
{
    ExportResult result;
    const ExportView view = makeView(recipe, plan, options, result.warnings);
    auto onlyFor = [&](bool given, ExportTarget target, const std::string& option, const std::string& why) {
        if (given && options.target != target) {
            throw InputError(recipe.sourceFile, "",
                option + " applies to --to " + toString(target) + " only (" + why + ")");
        }
    };
    onlyFor(options.staleness != 0, ExportTarget::Verl, "--staleness",
        toString(options.target) + " configures the rollout engine, not the training loop");
    onlyFor(options.vllmForm != VllmForm::Online, ExportTarget::Vllm, "--vllm-form", "vLLM's own engine arguments");
    onlyFor(options.verlRollout != VerlRollout::Vllm, ExportTarget::Verl, "--rollout", "verl's rollout engine");
    onlyFor(!options.targetVersion.empty() && options.targetVersion != "current", ExportTarget::Vllm,
        "--target-version", "the vLLM release whose keys the export writes");
    parseVllmVersion(options.targetVersion); // a malformed version is an error for every target
    result.configName = configFileName(options.target);
    switch (options.target) {
    case ExportTarget::Vllm:
        result.text = exportVllm(view);
        break;
    case ExportTarget::LlmCompressor:
        result.text = exportLlmCompressor(view);
        break;
    case ExportTarget::CompressedTensors:
        result.text = exportCompressedTensors(view);
        break;
    case ExportTarget::Verl:
        result.text = exportVerl(view);
        break;
    case ExportTarget::ModelOpt:
        result.text = exportModelOpt(view);
        break;
    case ExportTarget::Sglang:
        result.text = exportSglang(view);
        break;
    }
    addFiles(view, result);
    return result;
}

std::string exportRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options)
{
    return exportBundle(recipe, plan, options).text;
}

void writeExportDirectory(const std::string& directory, const ExportResult& result)
{
    namespace fs = std::filesystem;
    std::error_code error;
    fs::create_directories(directory, error);
    if (error || !fs::is_directory(directory)) {
        throw InputError(directory, "", "cannot create the export directory" + (error ? ": " + error.message() : ""));
    }
    for (const ExportFile& file : result.files) {
        writeFileAtomically((fs::path(directory) / file.name).string(), file.text);
    }
}

} // namespace mismatch::io

#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <system_error>

// Export: the recipe as the exporters see it (ExportView) and the checks every target makes.

namespace mismatch::io::exporting {

std::string describe(const Scheme& scheme)
{
    return quant::describe(scheme.weights) + " weights with " + quant::toString(scheme.activations) + " activations";
}

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
        // The microscaling formats (mxfp8, mxfp4, nvfp4) are each target's to write or refuse
        // (export_microscaling.cpp); their activations come only with weights of their format
        // (quant::isSupportedPair), so a BF16 layer below has none.
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

UniformKv uniformKv(const ExportView& view, bool perLayerExceptions, const std::string& perLayerReason, bool perHead,
    const std::string& perHeadReason, const std::string& perTokenHeadReason)
{
    UniformKv kv;
    const std::vector<quant::KvPrecision>& layers = view.plan->kvPerLayer;
    std::optional<size_t> first;
    for (size_t layer = 0; layer < layers.size(); ++layer) {
        const quant::KvPrecision& precision = layers[layer];
        if (precision.format == KvFormat::Bf16) {
            continue;
        }
        if (quant::isPerTokenHead(precision.format) && !perTokenHeadReason.empty()) {
            view.fail(view.kvWhere(layer),
                quant::toString(precision.format) + " KV cache (layer " + std::to_string(layer) + ")",
                perTokenHeadReason);
        }
        if (!perHead && precision.scales == KvScales::PerHead) {
            view.fail(
                view.kvWhere(layer), "per_head KV-cache scales (layer " + std::to_string(layer) + ")", perHeadReason);
        }
        if (!first) {
            first = layer;
            kv.format = precision.format;
            kv.fp8 = precision.format == KvFormat::Fp8E4m3;
            kv.scales = precision.scales;
            kv.firstLayer = static_cast<std::int64_t>(layer);
        } else if (precision.format != kv.format) {
            view.fail(view.kvWhere(layer),
                "KV-cache format " + quant::toString(precision.format) + " on layer " + std::to_string(layer) + " and "
                    + quant::toString(kv.format) + " on layer " + std::to_string(*first),
                "the target has one KV-cache scheme for every layer");
        } else if (precision.scales != kv.scales) {
            view.fail(view.kvWhere(layer),
                "KV-cache scales " + quant::toString(precision.scales) + " on layer " + std::to_string(layer) + " and "
                    + quant::toString(kv.scales) + " on layer " + std::to_string(*first),
                "the target has one KV-cache scheme for every layer");
        }
    }
    if (!first) {
        return kv;
    }
    for (size_t layer = 0; layer < layers.size(); ++layer) {
        if (layers[layer].format == KvFormat::Bf16) {
            if (!perLayerExceptions) {
                view.fail(view.kvWhere(layer),
                    "a bf16 KV cache on layer " + std::to_string(layer) + " while layer " + std::to_string(*first)
                        + " is " + quant::toString(kv.format),
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

} // namespace mismatch::io::exporting

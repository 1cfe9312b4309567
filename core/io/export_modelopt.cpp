#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <system_error>

// Export: ModelOpt.
// The shared view and checks: export_internal.h, export_view.cpp.

namespace mismatch::io::exporting {

// The quant_algo of one scheme, with its per-layer extras (group_size); warnings for what vLLM runs differently.
Json modelOptAlgo(const ExportView& view, const Scheme& scheme)
{
    if (isMicroscaling(scheme)) {
        return microscalingModelOptAlgo(view, scheme);
    }
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

// MIXED_PRECISION: the quant_algos vLLM's mixed-precision ModelOpt loader builds a linear layer for
// (vllm/model_executor/layers/quantization/modelopt.py at commit 00155cdecca722d98e34234c3d172725b7720b7d,
// ModelOptMixedPrecisionConfig.get_quant_method: FP8, NVFP4, W4A16_NVFP4). Any other per-layer quant_algo falls
// through to UnquantizedLinearMethod: the layer is built unquantized and its FP8 or INT4 tensors are not read as
// such. Later vLLM main also dispatches FP8_PB_WO and MXFP8 (issue 44, third-party reports); both are warned all
// the same, since releases before that do not. FP8_PER_CHANNEL_PER_TOKEN and W4A16_AWQ are dispatched by none.
void warnMixedDispatch(const ExportView& view, const std::map<Scheme, Json>& algos)
{
    static const std::set<std::string> dispatched = {"FP8", "NVFP4", "W4A16_NVFP4"};
    for (const Scheme& scheme : view.schemeOrder) {
        const std::string algo = algos.at(scheme)["quant_algo"].get<std::string>();
        if (dispatched.count(algo) != 0) {
            continue;
        }
        const std::vector<std::string>& modules = view.schemes.at(scheme);
        view.warn("MIXED_PRECISION: vLLM's mixed-precision ModelOpt loader builds FP8, NVFP4 and W4A16_NVFP4 layers "
                  "from quantized_layers and any other quant_algo as an unquantized layer "
                  "(vllm/model_executor/layers/quantization/modelopt.py ModelOptMixedPrecisionConfig.get_quant_method"
            + (algo == "FP8_PB_WO" || algo == "MXFP8" ? "; only later vLLM adds " + algo : std::string()) + "): " + algo
            + " on " + modules.front() + " and the " + std::to_string(modules.size() - 1)
            + " other modules sharing its scheme do not run quantized in vLLM");
    }
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
        false, "ModelOpt's FP8 KV cache has per-tensor scales only", kCheckpointPerTokenHeadReason);
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
    if (!quantizedLayers.is_null()) {
        warnMixedDispatch(view, algos);
    }
    quantization["kv_cache_quant_algo"] = kv.fp8 ? Json("FP8") : Json(nullptr);
    // One scheme with groups (W4A16_AWQ, NVFP4, W4A16_NVFP4, MXFP8): its group_size beside quant_algo, as ModelOpt
    // flattens a single format (modelopt/torch/export/quant_utils.py process_layer_quant_config).
    const Json* single = view.schemeOrder.size() == 1 ? &algos.at(view.schemeOrder.front()) : nullptr;
    const bool grouped = single != nullptr && single->contains("group_size");
    const bool awqOnly = grouped && single->at("quant_algo") == "W4A16_AWQ";
    if (grouped) {
        quantization["group_size"] = single->at("group_size");
    }
    if (awqOnly) {
        // The recipe's INT4 is symmetric with 128-element groups and no AWQ pre-quantization scale.
        quantization["has_zero_point"] = false;
        quantization["pre_quant_scale"] = false;
    }
    quantization["exclude_modules"] = view.ignored;
    if (!quantizedLayers.is_null()) {
        quantization["quantized_layers"] = quantizedLayers;
    }
    ModelOptExport out;
    out.quantization = quantization;
    // config.json's form, which vLLM prefers to hf_quant_config.json: the keys flat beside quant_method modelopt,
    // with `ignore` for exclude_modules and the KV cache as kv_cache_scheme, a compressed-tensors-style mapping, as
    // ModelOpt writes config.json (modelopt/torch/export/convert_hf_config.py convert_hf_quant_config_format: FP8
    // -> {"dynamic": false, "num_bits": 8, "type": "float"}). vLLM reads kv_cache_scheme there, never
    // kv_cache_quant_algo (modelopt.py ModelOptQuantConfigBase.from_config, the compressed-tensors-style branch),
    // so a kv_cache_quant_algo in config.json would leave the KV cache in BF16.
    Json fragment = Json::object();
    fragment["quant_method"] = "modelopt";
    fragment["producer"] = {{"name", "modelopt"}, {"version", "mismatch-lab-export"}};
    fragment["quant_algo"] = quantization["quant_algo"];
    if (kv.fp8) {
        fragment["kv_cache_scheme"] = {{"dynamic", false}, {"num_bits", 8}, {"type", "float"}};
    }
    if (grouped) {
        fragment["group_size"] = single->at("group_size");
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

} // namespace mismatch::io::exporting

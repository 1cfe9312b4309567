#include "core/io/export_internal.h"

#include "core/common/error.h"

#include <string>

// Export: the microscaling formats (mxfp8, mxfp4, nvfp4; core/quant/microscaling.h) in every target that can say
// them, and the warnings of what the engines run otherwise than the emulation. The shared view and checks:
// export_internal.h, export_view.cpp.
//
// Sources (facts only):
//   compressed-tensors (vllm-project/compressed-tensors ac8e2ba82f4e0d5eaa40069f8fc642738f124cd4):
//     src/compressed_tensors/quantization/quant_scheme.py PRESET_SCHEMES: NVFP4A16 and NVFP4 (weights num_bits 4,
//     type float, strategy tensor_group, group_size 16, scale_dtype float8_e4m3fn; NVFP4's input_activations the
//     same with dynamic "local" and observer static_minmax), MXFP4A16 and MXFP4 (num_bits 4, float, strategy group,
//     group_size 32, scale_dtype uint8; MXFP4's input_activations the same with dynamic true), MXFP8A16 and MXFP8
//     (num_bits 8, the same groups of 32). quant_args.py: dynamic "local" makes only the local (block) scales
//     dynamic and needs strategy tensor_group; scale_dtype is written as str(torch dtype), "torch.uint8".
//     config/base.py CompressionFormat: nvfp4-pack-quantized, mxfp4-pack-quantized, mxfp8-quantized.
//     compressors/{nvfp4,mxfp4,mxfp8}/base.py can_compress pick the format from the weights alone (FP4 with
//     group_size 16, FP4 with group_size 32, FP8 with group_size 32 and scale_dtype uint8), so a weight-only
//     scheme has its format too.
//   llm-compressor (vllm-project/llm-compressor ab1ba3effcafc15746cd6d6ca24cba3f7bd7a582): examples/
//     quantization_w4a4_fp4/llama3_example.py (scheme NVFP4 with a calibration dataset: "calibrate a global_scale
//     for activations"), quantization_w4a16_fp4/nvfp4/llama3_example.py (NVFP4A16, oneshot without data),
//     quantization_w4a4_mxfp4/llama3_mxfp4.py (MXFP4, without data), quantization_w8a8_mxfp8/
//     qwen3_example_w8a8_mxfp8.py and qwen3_example_w8a16_mxfp8.py (MXFP8, MXFP8A16, without data).
//     src/llmcompressor/modifiers/quantization/quantization/mixin.py links the weight observers of Q/K/V and
//     gate/up "for shared global_scale".
//   ModelOpt (NVIDIA/Model-Optimizer a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73): modelopt/torch/export/
//     quant_utils.py process_layer_quant_config ({"quant_algo": "NVFP4" | "W4A16_NVFP4" | "MXFP8", "group_size":
//     the block size}; one format is flattened beside kv_cache_quant_algo, before exclude_modules),
//     get_quantization_format (MXFP4 is "mxfp4", passed through without a group_size), preprocess_linear_fusion
//     (fused shards share an amax); modelopt_recipes/configs/ptq/presets/model/mxfp8.yaml (weights and inputs),
//     nvfp4.yaml (W4A4), w4a16_nvfp4.yaml (weights only).
//   vLLM (vllm-project/vllm): vllm/model_executor/layers/quantization/modelopt.py
//     (00155cdecca722d98e34234c3d172725b7720b7d): QUANT_ALGOS has NVFP4, W4A16_NVFP4 and MXFP8, no MXFP4; NVFP4
//     needs group_size, kv_cache_quant_algo and exclude_modules in hf_quant_config.json, MXFP8 kv_cache_quant_algo
//     and exclude_modules; ModelOptNvFp4LinearMethod quantizes the activations with the checkpoint's calibrated
//     input_scale and runs a fused layer with the largest weight_scale_2 of its shards. vllm/config/quantization.py
//     and docs/features/quantization/online.md (00b64d17c045a946e3a047d189beac1437161919): the online shorthands
//     mxfp8 (weights and activations MXFP8: w8a8 on SM 100+, a w8a16 fallback on other GPUs) and mxfp4
//     ("activation quantization depends on the linear_backend picked"); nvfp4_per_token quantizes MoE experts only
//     ("linear stays unquantized"), so linear layers have no online NVFP4. compressed_tensors/schemes/
//     compressed_tensors_w4a4_mxfp4.py (0c4f7c61d03f35ec3e550419b36f88d6d63fc477) and compressed_tensors_w8a8_mxfp8.py
//     (109f2f21300015a1342c4b000205f5911eb66983: "Activations are dynamically quantized to MXFP8 at runtime") take
//     the mxfp4-pack-quantized and MXFP8 checkpoints, their kernels deciding the activations; compressed_tensors.py
//     (be696453ee1bf3b7a2f652cc457b340d5a20c88c) _get_scheme_from_parts runs an NVFP4 W4A4 layer as
//     CompressedTensorsW4A16Fp4 where CUTLASS FP4 is missing.
//   SGLang (sgl-project/sglang): python/sglang/srt/server_args.py (001067fffe33427bee0ed2f007fb7551a1d76b44)
//     QUANTIZATION_CHOICES: mxfp8 ("MOE + linear online quantization"), mxfp4 ("MOE-only"), nvfp4_online;
//     python/sglang/srt/layers/quantization/fp8.py (00563d368df9673403eacead4adf45ef77ef0ca9): mxfp8 is Fp8Config
//     with use_mxfp8 (weight_block_size [1, 32], SGLANG_FP8_IGNORED_LAYERS read as for fp8, get_min_capability 100
//     on CUDA), its Fp8LinearMethod running w8a8_mxfp8_linear.

namespace mismatch::io::exporting {

bool isMicroscaling(const Scheme& scheme)
{
    return quant::isMicroscaling(scheme.weights.format);
}

namespace {

// "NVFP4", "MXFP4", "MXFP8": the upstream spelling of a microscaling format.
std::string upperName(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Nvfp4:
        return "NVFP4";
    case WeightFormat::Mxfp4:
        return "MXFP4";
    default:
        return "MXFP8";
    }
}

// The compressed-tensors arguments every microscaling tensor shares: symmetric float elements in groups along the
// input dimension, with E4M3 scales under a per-tensor global scale (NVFP4: tensor_group) or E8M0 scales (MX:
// group, stored as uint8).
Json microscalingArgs(int bits, bool nvfp4, const Json& dynamic)
{
    Json args = Json::object();
    args["num_bits"] = bits;
    args["type"] = "float";
    args["symmetric"] = true;
    args["dynamic"] = dynamic;
    args["strategy"] = nvfp4 ? "tensor_group" : "group";
    args["group_size"] = nvfp4 ? 16 : 32;
    args["scale_dtype"] = nvfp4 ? "torch.float8_e4m3fn" : "torch.uint8";
    return args;
}

const std::string& exampleModule(const ExportView& view, const Scheme& scheme)
{
    return view.schemes.at(scheme).front();
}

std::string onModules(const ExportView& view, const Scheme& scheme)
{
    return "on " + exampleModule(view, scheme) + " and the modules sharing its scheme";
}

// NVFP4 W4A4 checkpoints: the activations' global scale is calibrated, the emulation's is each token's.
void warnNvfp4ActivationScale(const ExportView& view, const Scheme& scheme)
{
    view.warn("NVFP4 activations " + onModules(view, scheme)
        + ": vLLM scales them with the checkpoint's per-tensor input global scale, calibrated once (input_scale = "
          "amax / 2688 over the calibration data: vllm/model_executor/layers/quantization/modelopt.py "
          "ModelOptNvFp4LinearMethod; llm-compressor's NVFP4 and ModelOpt calibrate it on a dataset), where the "
          "engine takes each token's own amax (core/quant/microscaling.h): a token beyond the calibrated range "
          "saturates in vLLM and not in the recipe's measurement");
}

// compressed-tensors NVFP4 W4A4 layers on GPUs without an NVFP4 GEMM.
void warnNvfp4Fallback(const ExportView& view, const Scheme& scheme)
{
    view.warn("NVFP4 W4A4 " + onModules(view, scheme)
        + ": where CUTLASS has no NVFP4 GEMM (GPUs before Blackwell) vLLM runs an NVFP4 compressed-tensors layer as "
          "W4A16, its activations in bf16 (vllm/model_executor/layers/quantization/compressed_tensors/"
          "compressed_tensors.py _get_scheme_from_parts: CompressedTensorsW4A16Fp4)");
}

// NVFP4 weights: a fused layer has one per-tensor scale in the checkpoint and in vLLM, the emulation one per shard.
void warnNvfp4FusedScale(const ExportView& view, const Scheme& scheme)
{
    view.warn("NVFP4 weights " + onModules(view, scheme)
        + ": vLLM runs a fused layer (qkv_proj, gate_up_proj) with one per-tensor weight scale, the largest of its "
          "shards' weight_scale_2 (vllm/model_executor/layers/quantization/modelopt.py), and llm-compressor and "
          "ModelOpt give the shards of a fused group a shared global scale (llm-compressor "
          "modifiers/quantization/quantization/mixin.py; ModelOpt export/quant_utils.py preprocess_linear_fusion), "
          "where the engine quantizes each projection with its own (core/quant/microscaling.h): a shard whose amax is "
          "below its group's gets other block scales in the checkpoint");
}

// MX formats: vLLM's kernel, not the checkpoint or the shorthand, decides the activations.
void warnMxKernel(const ExportView& view, const Scheme& scheme)
{
    const std::string activations = quant::toString(scheme.activations);
    if (scheme.weights.format == WeightFormat::Mxfp4) {
        view.warn("MXFP4 " + onModules(view, scheme)
            + ": vLLM's MXFP4 linear backend is chosen per platform and decides the activations, MXFP4 in some "
              "backends and bf16 in others (docs/features/quantization/online.md, the mxfp4 scheme; --linear-backend "
              "pins one), where the recipe has "
            + activations + " activations");
        return;
    }
    if (scheme.activations == ActivationFormat::Mxfp8) {
        view.warn("MXFP8 W8A8 " + onModules(view, scheme)
            + ": vLLM's MXFP8 linear kernels quantize the activations to MXFP8 on SM 100+ (Blackwell) GPUs and fall "
              "back to W8A16, activations in bf16, on others (docs/features/quantization/online.md, the mxfp8 scheme)");
        return;
    }
    view.warn("weight-only MXFP8 " + onModules(view, scheme)
        + ": vLLM chooses its MXFP8 linear kernel by the weights and quantizes the activations to MXFP8 on SM 100+ "
          "(Blackwell) GPUs (compressed_tensors/schemes/compressed_tensors_w8a8_mxfp8.py: \"Activations are "
          "dynamically quantized to MXFP8 at runtime\"; a w8a16 fallback on others: "
          "docs/features/quantization/online.md), where the recipe keeps them in bf16");
}

// MX formats: the scale rule of the emulation is OCP's; ModelOpt, FlashInfer and vLLM's fallbacks differ.
void warnMxScaleRule(const ExportView& view, const Scheme& scheme)
{
    view.warn("MX block scales " + onModules(view, scheme)
        + ": the engine emulates the OCP Microscaling rule (2^(floor(log2 amax) - emax of the element), elements "
          "clamped to the largest normal); ModelOpt and FlashInfer round the scale up instead (2^ceil(log2(amax / "
          "largest normal))) and vLLM's fallbacks have rules of their own (core/quant/microscaling.h), so a block "
          "whose largest element would pass the largest normal is quantized differently where they compute the "
          "scales");
}

// The compressed-tensors quantization_config of the checkpoint the vLLM checkpoint form describes: the recipe's
// schemes. The KV cache is said by the engine arguments (kv_cache_dtype), as in the FP8 checkpoint form; the
// checkpoint llm_compressor_oneshot.py writes carries its calibrated scales.
Json microscalingCheckpointConfig(const ExportView& view)
{
    quant::RecipePlan weightsOnly = *view.plan;
    for (quant::KvPrecision& kv : weightsOnly.kvPerLayer) {
        kv = quant::KvPrecision {};
    }
    ExportView checkpoint = view;
    checkpoint.plan = &weightsOnly;
    return compressedTensorsConfig(checkpoint, compressedSettings(checkpoint));
}

} // namespace

Json microscalingWeightArgs(WeightFormat format)
{
    return microscalingArgs(format == WeightFormat::Mxfp8 ? 8 : 4, format == WeightFormat::Nvfp4, Json(false));
}

Json microscalingActivationArgs(ActivationFormat format)
{
    if (format == ActivationFormat::Nvfp4) {
        // Block scales computed per token at run time, the per-tensor global scale calibrated over the data.
        Json args = microscalingArgs(4, true, Json("local"));
        args["observer"] = "static_minmax";
        return args;
    }
    return microscalingArgs(format == ActivationFormat::Mxfp8 ? 8 : 4, false, Json(true));
}

std::string microscalingPreset(const Scheme& scheme)
{
    // quant::isSupportedPair: the activations are bf16 (weight-only, "A16") or of the weights' own format.
    const std::string name = upperName(scheme.weights.format);
    return scheme.activations == ActivationFormat::Bf16 ? name + "A16" : name;
}

std::string microscalingCompressedFormat(const Scheme& scheme)
{
    switch (scheme.weights.format) {
    case WeightFormat::Nvfp4:
        return "nvfp4-pack-quantized";
    case WeightFormat::Mxfp4:
        return "mxfp4-pack-quantized";
    default:
        return "mxfp8-quantized";
    }
}

void warnMicroscalingCheckpoint(const ExportView& view, const Scheme& scheme)
{
    if (scheme.weights.format == WeightFormat::Nvfp4) {
        if (scheme.activations == ActivationFormat::Nvfp4) {
            warnNvfp4ActivationScale(view, scheme);
            if (view.target != ExportTarget::ModelOpt) {
                warnNvfp4Fallback(view, scheme);
            }
        }
        warnNvfp4FusedScale(view, scheme);
        return;
    }
    warnMxKernel(view, scheme);
    warnMxScaleRule(view, scheme);
}

Json microscalingModelOptAlgo(const ExportView& view, const Scheme& scheme)
{
    const std::string& example = exampleModule(view, scheme);
    const WeightFormat format = scheme.weights.format;
    if (format == WeightFormat::Mxfp4) {
        view.fail(view.weightsWhere(example), describe(scheme) + " on " + example,
            "vLLM's ModelOpt loader has no MXFP4 quant_algo (vllm/model_executor/layers/quantization/modelopt.py "
            "QUANT_ALGOS: FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION); "
            "export --to compressed-tensors for an mxfp4-pack-quantized checkpoint");
    }
    if (format == WeightFormat::Mxfp8 && scheme.activations == ActivationFormat::Bf16) {
        view.fail(view.activationsWhere(example), describe(scheme) + " on " + example,
            "ModelOpt's MXFP8 quantizes weights and inputs (modelopt_recipes/configs/ptq/presets/model/mxfp8.yaml) "
            "and ModelOpt has no MXFP8 weight-only quant_algo; export --to compressed-tensors for MXFP8A16");
    }
    Json algo = Json::object();
    if (format == WeightFormat::Nvfp4) {
        algo["quant_algo"] = scheme.activations == ActivationFormat::Nvfp4 ? "NVFP4" : "W4A16_NVFP4";
        algo["group_size"] = 16;
    } else {
        algo["quant_algo"] = "MXFP8";
        algo["group_size"] = 32;
    }
    warnMicroscalingCheckpoint(view, scheme);
    return algo;
}

void vllmMicroscaling(const ExportView& view, const Scheme& scheme, VllmExport& out)
{
    if (view.options.vllmForm == VllmForm::Checkpoint) {
        out.checkpointConfig = microscalingCheckpointConfig(view);
        return;
    }
    const std::string& example = exampleModule(view, scheme);
    const WeightFormat format = scheme.weights.format;
    if (format == WeightFormat::Nvfp4) {
        view.fail(view.weightsWhere(example), describe(scheme) + " on " + example,
            "vLLM's online quantization has no NVFP4 scheme for linear layers (vllm/config/quantization.py "
            "_ONLINE_SHORTHANDS: nvfp4_per_token quantizes MoE experts only and leaves linear layers unquantized); "
            "--vllm-form checkpoint writes the compressed-tensors config of an NVFP4 checkpoint (--to modelopt for "
            "ModelOpt's)");
    }
    const bool mxfp8 = format == WeightFormat::Mxfp8;
    const std::string release = mxfp8 ? kVllmOnlineMxfp8Release : kVllmOnlineMxfp4Release;
    const std::string shorthand = mxfp8 ? "mxfp8" : "mxfp4";
    if (!atLeast(view.options, release.c_str())) {
        view.fail(view.weightsWhere(example), describe(scheme) + " on " + example,
            "vLLM's online " + shorthand + " with quantization_config.ignore is written for vLLM " + release
                + " and later ("
                + (mxfp8 ? "docs.vllm.ai/en/v0.20.0/features/quantization/online/ lists fp8_per_tensor and "
                           "fp8_per_block only"
                         : "it came with vllm-project/vllm PR #49347, merged in July 2026")
                + "); --target-version " + view.options.targetVersion + " is before it (--vllm-form checkpoint "
                + "writes the compressed-tensors config of an " + upperName(format) + " checkpoint)");
    }
    // docs/features/quantization/online.md: --quantization with the shorthand, quantization_config.ignore with the
    // unfused shard names, as for the FP8 shorthands.
    out.engineArgs["quantization"] = shorthand;
    out.engineArgs["quantization_config"] = {{"ignore", view.ignored}};
    warnMxKernel(view, scheme);
    warnMxScaleRule(view, scheme);
}

std::string vllmFormText(const ExportView& view)
{
    if (view.schemeOrder.size() != 1 || !isMicroscaling(view.schemeOrder.front())) {
        return vllmFormText(view.options);
    }
    const std::string name = upperName(view.schemeOrder.front().weights.format);
    if (view.options.vllmForm == VllmForm::Checkpoint) {
        return "checkpoint: describes a compressed-tensors checkpoint whose weights are already stored in " + name
            + " with their scales (quantization_config belongs in that checkpoint's config.json; vLLM reads the "
              "method from it, so the engine arguments name none); it does not apply to a BF16 model";
    }
    return "online: vLLM quantizes the BF16 checkpoint's weights to " + name
        + " at load time (docs/features/quantization/online.md)";
}

std::string vllmCheckpointKind(const ExportView& view)
{
    if (view.schemeOrder.size() != 1 || !isMicroscaling(view.schemeOrder.front())) {
        return "FP8";
    }
    return upperName(view.schemeOrder.front().weights.format);
}

void sglangMicroscaling(const ExportView& view, const Scheme& scheme, SglangExport& out)
{
    const std::string& example = exampleModule(view, scheme);
    if (scheme.weights.format != WeightFormat::Mxfp8) {
        view.fail(view.weightsWhere(example), describe(scheme) + " on " + example,
            "this export writes SGLang's online fp8 and mxfp8 only: SGLang's --quantization mxfp4 quantizes MoE "
            "experts only (sgl-project/sglang python/sglang/srt/server_args.py QUANTIZATION_CHOICES) and its "
            "nvfp4_online (Blackwell only) is not written; serve a checkpoint of the recipe (--to compressed-tensors "
            "or --to modelopt)");
    }
    if (scheme.activations != ActivationFormat::Mxfp8) {
        view.fail(view.activationsWhere(example), "weight-only mxfp8 (" + describe(scheme) + ") on " + example,
            "SGLang's mxfp8 quantizes the activations of every quantized layer to MXFP8 "
            "(python/sglang/srt/layers/quantization/fp8.py Fp8LinearMethod, w8a8_mxfp8_linear); bf16 activations "
            "need a checkpoint (--to compressed-tensors: MXFP8A16)");
    }
    out.serverArgs["quantization"] = "mxfp8";
    view.warn("SGLang's mxfp8 needs compute capability 10.0 (Blackwell) on NVIDIA GPUs "
              "(python/sglang/srt/layers/quantization/fp8.py Fp8Config.get_min_capability)");
    warnMxScaleRule(view, scheme);
}

} // namespace mismatch::io::exporting

#pragma once
// The exporters' shared view of a recipe and the functions one target's file uses from another's
// (core/io/recipe_export.cpp is the public entry; each target is in its own file: export_engines.cpp for vLLM, verl
// and SGLang, export_compressed.cpp for llm-compressor and compressed-tensors, export_modelopt.cpp, and
// export_files.cpp for the ready-to-run files). Internal to core/io.
#include "core/io/recipe_export.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace mismatch::io::exporting {

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

// The KV cache of a target with one setting for the whole model.
struct UniformKv {
    KvFormat format = KvFormat::Bf16; // the format of every quantized layer (bf16: none is quantized)
    bool fp8 = false; // format is fp8_e4m3 (calibrated scales)
    KvScales scales = KvScales::None;
    std::int64_t firstLayer = -1; // the first quantized layer (-1: none)
    std::vector<std::int64_t> bf16Layers; // bf16 layers when others are quantized
};

struct VllmExport {
    Json engineArgs; // what `vllm serve` and LLM(...) take
    Json checkpointConfig; // checkpoint form: the config.json quantization_config; else null
};

struct VerlExport {
    std::string rollout; // "vllm" or "sglang"
    Json quantization; // "fp8" or null
    Json engineKwargs; // under engine_kwargs.<rollout>
    std::string ignoredLayers; // SGLang rollout: SGLANG_FP8_IGNORED_LAYERS, "" when none
};

// How a Hydra command-line override sets a key of verl's trainer config: `key=v` sets a key verl's config schema
// declares, `+key=v` adds one it does not declare (Hydra refuses `+` on a key that exists), `++key=v` adds or
// replaces.
enum class HydraOverride { Set, Add, AddOrReplace };

// One key of verl's trainer config that the verl export writes: its dotted path, its value and its override.
struct VerlKey {
    std::string path;
    Json value;
    HydraOverride how = HydraOverride::Set;
};

// verl's distillation loss for one of the run file's OPD objectives (verl/workers/config/distillation.py
// DistillationLossConfig, verl/trainer/distillation/losses.py).
struct VerlLoss {
    std::string lossMode; // distillation_loss.loss_mode
    bool usePolicyGradient = true; // the loss as the negative reward of verl's policy-gradient loss, else
                                   // backpropagated
    std::int64_t topK = 0; // distillation_loss.topk for a top-k loss mode; 0: not written
    std::string computes; // what verl computes, in words, for the files' comments
};

struct SglangExport {
    Json serverArgs;
    std::string ignoredLayers;
    Json kvScalesFile; // the --quantization-param-path file of the calibrated KV scales; null when none
};

// Why a checkpoint format (compressed-tensors and llm-compressor's kv_cache_scheme, ModelOpt's kv_cache_quant_algo)
// cannot carry vLLM's per-token-head KV formats: it describes scales calibrated into the checkpoint, and vLLM reads
// them as static per-tensor or per-head scales (vllm/model_executor/layers/quantization/compressed_tensors/
// compressed_tensors.py CompressedTensorsKVCacheMethod; modelopt.py), while per-token-head scales exist only at run
// time, chosen by --kv-cache-dtype.
inline constexpr const char* kCheckpointPerTokenHeadReason
    = "a checkpoint's KV-cache scheme holds scales calibrated into the checkpoint, which vLLM loads as static "
      "per-tensor or per-head scales; per-token-head scales are computed by the engine at each cache write and are "
      "chosen by vLLM's --kv-cache-dtype alone (export --to vllm)";

// The file name of SGLang's KV scale file in the export directory (server_args.quantization_param_path).
inline constexpr const char* kSglangKvScalesFile = "sglang_kv_scales.json";

struct CompressedGroup {
    Scheme scheme;
    std::vector<std::string> targets;
    std::string format;
};

struct CompressedSettings {
    std::vector<CompressedGroup> groups;
    std::string format; // the checkpoint's format: one group format, or mixed-precision
    Json kvScheme; // null: bf16 KV cache
    // A group has NVFP4 activations, whose per-tensor global scale llm-compressor calibrates on a dataset
    // (compressed-tensors' NVFP4 preset: input_activations dynamic "local", observer static_minmax).
    bool calibratesActivations = false;
};

struct ModelOptExport {
    Json quantization; // hf_quant_config.json's "quantization"
    Json configFragment; // config.json's quantization_config
};

std::string describe(const Scheme& scheme);
ExportView makeView(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options,
    std::vector<std::string>& warnings);
void checkFusedShards(const ExportView& view);
void checkCommon(const ExportView& view);
// The one KV-cache setting of a target, or an error (view.fail) for what it cannot say: bf16 layers beside quantized
// ones without perLayerExceptions, per-head fp8_e4m3 scales without perHead, a per-token-head format
// (fp8_per_token_head, int8_per_token_head) when perTokenHeadReason is not empty (it says why), two formats or
// scale modes on different layers.
UniformKv uniformKv(const ExportView& view, bool perLayerExceptions, const std::string& perLayerReason, bool perHead,
    const std::string& perHeadReason, const std::string& perTokenHeadReason);
std::optional<Scheme> singleScheme(const ExportView& view, const std::string& reason);
void checkLmHeadUnquantized(const ExportView& view, const std::string& reason);
std::optional<std::pair<int, int>> parseVllmVersion(const std::string& text);
// Whether the export is for a vLLM at or after `release` ("0.20"); the current release is after every one.
bool atLeast(const ExportOptions& options, const char* release);
bool hasOnlineFrontend(const ExportOptions& options);
void warnActivationGroups(const ExportView& view, const Scheme& scheme, const std::string& engine);
// vLLM's engine arguments of a KV cache: kv_cache_dtype (fp8_e4m3 or auto) and kv_cache_dtype_skip_layers.
void kvEngineArgs(const UniformKv& kv, Json& args);
VllmExport vllmExport(const ExportView& view);
std::string vllmFormText(const ExportOptions& options);
std::string exportVllm(const ExportView& view);
std::string yamlScalar(const Json& value);
VerlExport verlExport(const ExportView& view);
std::string exportVerl(const ExportView& view);
std::vector<std::string> verlOverrideLines(const VerlExport& settings);
std::vector<VerlKey> verlRolloutKeys(const VerlExport& settings);
std::string hydraValue(const Json& value);
std::string verlOverride(const VerlKey& key);
VerlLoss verlLoss(const ExportView& view);
std::vector<VerlKey> verlOpdKeys(const ExportView& view, const VerlExport& rollout, const VerlLoss& loss);
std::string exportVerlOpd(const ExportView& view);
Json sglangKvScalesFile(const ExportView& view, const CalibratedKvScales& scales);
SglangExport sglangExport(const ExportView& view);
std::string exportSglang(const ExportView& view);
CompressedSettings compressedSettings(const ExportView& view);
// The checkpoint's quantization_config (the object exportCompressedTensors writes under that key).
Json compressedTensorsConfig(const ExportView& view, const CompressedSettings& settings);
std::string exportCompressedTensors(const ExportView& view);
std::string exportLlmCompressor(const ExportView& view);
ModelOptExport modelOptExport(const ExportView& view);
std::string exportModelOpt(const ExportView& view);
// The microscaling formats (mxfp8, mxfp4, nvfp4) in each target: export_microscaling.cpp, where the upstream
// sources are cited.
bool isMicroscaling(const Scheme& scheme);
// compressed-tensors QuantizationArgs of microscaling weights and activations, as compressed-tensors' presets
// spell them (NVFP4, NVFP4A16, MXFP4, MXFP4A16, MXFP8, MXFP8A16).
Json microscalingWeightArgs(WeightFormat format);
Json microscalingActivationArgs(ActivationFormat format);
// llm-compressor's preset scheme name and the compressed-tensors checkpoint format of a microscaling scheme.
std::string microscalingPreset(const Scheme& scheme);
std::string microscalingCompressedFormat(const Scheme& scheme);
// ModelOpt's quant_algo with its group_size, or an error for what ModelOpt cannot say; warns.
Json microscalingModelOptAlgo(const ExportView& view, const Scheme& scheme);
// What vLLM runs otherwise than the recipe for a checkpoint of this scheme (compressed-tensors or ModelOpt).
void warnMicroscalingCheckpoint(const ExportView& view, const Scheme& scheme);
// vLLM's forms of a microscaling scheme: the online shorthand (mxfp8, mxfp4; NVFP4 has none for linear layers) or
// the compressed-tensors quantization_config of the checkpoint form.
void vllmMicroscaling(const ExportView& view, const Scheme& scheme, VllmExport& out);
// The vllm export's `form` text: the FP8 one (vllmFormText(options)) or the microscaling one.
std::string vllmFormText(const ExportView& view);
// What the vLLM checkpoint form's files call the checkpoint: "FP8", or the microscaling format ("NVFP4", ...).
std::string vllmCheckpointKind(const ExportView& view);
// SGLang's online mxfp8 (MXFP8 weights and activations), or an error for the other microscaling schemes.
void sglangMicroscaling(const ExportView& view, const Scheme& scheme, SglangExport& out);

// The model path written into the ready-to-run commands: ExportOptions::modelPath, else the placeholder MODEL.
std::string modelPath(const ExportOptions& options);
void addFiles(const ExportView& view, ExportResult& result);
std::string configFileName(ExportTarget target);

} // namespace mismatch::io::exporting

#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <system_error>

// Export: vLLM, verl and SGLang: engines that quantize a BF16 checkpoint themselves (or load an FP8 one).
// The shared view and checks: export_internal.h, export_view.cpp.

namespace mismatch::io::exporting {

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

// Whether the export is for a vLLM at or after `release` ("0.20"); the current release is after every one.
bool atLeast(const ExportOptions& options, const char* release)
{
    const auto version = parseVllmVersion(options.targetVersion);
    return !version || *version >= *parseVllmVersion(release);
}

// Whether the export is for a vLLM with the online quantization frontend (kVllmOnlineFrontendRelease and later).
bool hasOnlineFrontend(const ExportOptions& options)
{
    return atLeast(options, kVllmOnlineFrontendRelease);
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
    // Why the target cannot take the per-token-head KV formats; empty: it takes them (vLLM's kv_cache_dtype).
    std::string perTokenHeadReason = "this export writes a kv_cache_dtype for bf16 and fp8_e4m3 only (vLLM takes "
                                     "the per-token-head formats as its kv_cache_dtype: export --to vllm)";
    // Why the target cannot take the microscaling formats (mxfp8, mxfp4, nvfp4); empty: the caller writes them
    // (vllmMicroscaling, sglangMicroscaling: export_microscaling.cpp), and the FP8 rules below do not apply.
    std::string microscalingReason = "the target quantizes weights to fp8_e4m3 only";
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
    if (settings.scheme && isMicroscaling(*settings.scheme)) {
        const std::string& example = view.schemes.at(*settings.scheme).front();
        if (!rules.microscalingReason.empty()) {
            view.fail(view.weightsWhere(example), quant::describe(settings.scheme->weights) + " weights on " + example,
                rules.microscalingReason);
        }
    } else if (settings.scheme) {
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
        rules.name
            + "'s kv_cache_dtype has per-tensor scales only (per-head scales need a checkpoint calibrated by "
              "llm-compressor: export --to llm-compressor)",
        rules.perTokenHeadReason);
    return settings;
}

// Where an engine takes FP8 KV scales from, besides the checkpoint.
enum class KvScaleSource { Checkpoint, FP8Checkpoint, SglangParamFile };

// What an FP8 KV cache in an engine runs with: the checkpoint's k/v scales (or, for SGLang, those of a
// --quantization-param-path file), else 1.0.
void warnKvScales(const ExportView& view, const EngineSettings& settings, const std::string& engine, KvScaleSource source)
{
    if (!settings.kv.fp8) {
        return;
    }
    if (source == KvScaleSource::SglangParamFile) {
        // sgl-project/sglang docs/advanced_features/quantized_kv_cache.md, "Scaling Factors": from the checkpoint
        // or a --quantization-param-path JSON, else 1.0.
        view.warn("SGLang's FP8 KV cache takes its k/v scales from the checkpoint or from the JSON file given to "
                  "--quantization-param-path, and uses 1.0 where it has none (SGLang "
                  "docs/advanced_features/quantized_kv_cache.md, Scaling Factors); this export was given no "
                  "calibrated scales, so it writes no such file and the recipe's calibrated per-tensor scales are "
                  "not used (`mismatch export --to sglang --kv-probe PROMPTS` calibrates them and writes the file)");
        return;
    }
    const bool checkpoint = source == KvScaleSource::FP8Checkpoint;
    view.warn(engine + "'s FP8 KV cache takes its k/v scales from the checkpoint and uses 1.0 where it has none ("
        + (checkpoint ? "this " + vllmCheckpointKind(view)
                    + " checkpoint must carry the recipe's calibrated per-tensor scales"
                      : std::string("a BF16 checkpoint has none, so the recipe's calibrated per-tensor scales are "
                                    "not used"))
        + "; vLLM docs/features/quantization/quantized_kvcache.md). "
        + (checkpoint ? std::string("llm_compressor_oneshot.py calibrates them into the checkpoint it writes")
                      : std::string("Calibrate them into the checkpoint with --to llm-compressor to run what the "
                                    "recipe measured")));
}

void warnActivationGroups(const ExportView& view, const Scheme& scheme, const std::string& engine)
{
    if (scheme.weights.granularity == Granularity::Block128) {
        view.warn(engine + " quantizes the activations of 128x128-block FP8 weights per token in groups of 128 "
                           "channels (1x128), where the recipe has one scale per token");
    }
}

// vLLM's engine arguments for the KV cache: kv_cache_dtype and kv_cache_dtype_skip_layers (strings). The recipe's
// KV formats are spelled as vLLM's CacheDType values (vllm/config/cache.py): fp8_e4m3, fp8_per_token_head,
// int8_per_token_head.
void kvEngineArgs(const UniformKv& kv, Json& args)
{
    args["kv_cache_dtype"] = kv.format == KvFormat::Bf16 ? std::string("auto") : quant::toString(kv.format);
    // No calculate_kv_scales: current vLLM removed it (vllm-project/vllm PR #49389, after the deprecation in PR
    // #37201); FP8 KV scales now come from the checkpoint when it has them, else 1.0
    // (docs/features/quantization/quantized_kvcache.md, vllm/config/cache.py CacheConfig).
    if (kv.format != KvFormat::Bf16 && !kv.bf16Layers.empty()) {
        // kv_cache_dtype_skip_layers is a list of strings: layer indices ('0', '2') or attention types
        // ('sliding_window') (vllm/config/cache.py CacheConfig, docs/features/quantization/quantized_kvcache.md).
        Json layers = Json::array();
        for (const std::int64_t layer : kv.bf16Layers) {
            layers.push_back(std::to_string(layer));
        }
        args["kv_cache_dtype_skip_layers"] = layers;
    }
}

// vLLM's per-token-head KV formats: refused for a release before kVllmPerTokenHeadKvRelease, and said where vLLM
// computes them otherwise than the emulation. vllm/v1/attention/ops/triton_reshape_and_cache_flash.py
// _reshape_cache_per_token_head writes them (the Triton attention backend's cache write, PR #38378), dividing in
// float32 with Triton's division, which compiles to PTX div.full.f32 (within 2 ulp) where the emulation divides
// exactly (core/quant/quantize.h quantizePerTokenHead).
void checkPerTokenHeadKv(const ExportView& view, const UniformKv& kv)
{
    if (!quant::isPerTokenHead(kv.format)) {
        return;
    }
    const std::string name = quant::toString(kv.format);
    if (!atLeast(view.options, kVllmPerTokenHeadKvRelease)) {
        view.fail(view.kvWhere(static_cast<size_t>(kv.firstLayer)),
            name + " KV cache (layer " + std::to_string(kv.firstLayer) + ")",
            "kv_cache_dtype " + name
                + " came with vllm-project/vllm PR #38378 (merged in April 2026); --target-version "
                + view.options.targetVersion + " is before " + kVllmPerTokenHeadKvRelease);
    }
    view.warn("vLLM computes " + name + " scales (amax / " + (kv.format == KvFormat::Fp8PerTokenHead ? "448" : "127")
        + " per token and KV head) in its Triton attention backend's cache write, whose float32 divisions are PTX "
          "div.full.f32 (within 2 ulp): a scale can differ from the emulation's in its last bit, and a code, rarely, "
          "by one step");
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

EngineRules vllmRules(const ExportOptions& options)
{
    const std::string frontend = kVllmOnlineFrontendRelease;
    EngineRules rules;
    rules.perTokenHeadReason.clear(); // kv_cache_dtype fp8_per_token_head / int8_per_token_head (vllmExport checks
                                      // the release)
    rules.microscalingReason.clear(); // vllmMicroscaling: online mxfp8 / mxfp4, the compressed-tensors checkpoint
    if (options.vllmForm == VllmForm::Checkpoint) {
        rules.name = "vLLM's fp8 checkpoint config";
        rules.channel = false;
        rules.granularityReason = "vLLM's fp8 config has per-tensor or 128x128-block weight scales only (export "
                                  "--to compressed-tensors for per-channel scales)";
    } else if (hasOnlineFrontend(options)) {
        // docs.vllm.ai/en/v0.20.0/features/quantization/online/: fp8_per_tensor and fp8_per_block; the
        // fp8_per_channel shorthand came with vllm-project/vllm PR #44132 (kVllmPerChannelShorthandRelease).
        rules.name = "vLLM's online quantization";
        rules.channel = atLeast(options, kVllmPerChannelShorthandRelease);
        rules.granularityReason = "vLLM's online quantization before " + std::string(kVllmPerChannelShorthandRelease)
            + " has fp8_per_tensor and fp8_per_block only (fp8_per_channel came with vllm-project/vllm PR #44132; "
              "export --to compressed-tensors for a per-channel checkpoint)";
    } else {
        rules.name = "vLLM's online fp8 (before " + frontend + ")";
        rules.ignoreList = false;
        rules.noIgnoreReason = "online fp8 quantization before vLLM " + frontend
            + " has no list of layers to leave unquantized (--target-version " + frontend
            + " or later has quantization_config.ignore)";
        rules.block = false;
        rules.granularityReason = "online fp8 quantization before vLLM " + frontend
            + " has per-tensor weight scales only (fp8_per_block arrived with the online frontend)";
    }
    return rules;
}

VllmExport vllmExport(const ExportView& view)
{
    const ExportOptions& options = view.options;
    const bool online = options.vllmForm == VllmForm::Online;
    const bool frontend = hasOnlineFrontend(options);
    const EngineSettings settings = engineSettings(view, vllmRules(options));
    VllmExport out;
    out.engineArgs = Json::object();
    out.checkpointConfig = nullptr;
    if (settings.scheme) {
        const Scheme& scheme = *settings.scheme;
        if (isMicroscaling(scheme)) {
            vllmMicroscaling(view, scheme, out);
        } else if (online && frontend) {
            // docs/features/quantization/online.md: --quantization with a scheme shorthand, and
            // quantization_config.ignore with the unfused shard names.
            out.engineArgs["quantization"] = vllmOnlineScheme(scheme);
            out.engineArgs["quantization_config"] = {{"ignore", view.ignored}};
            if (scheme.weights.granularity == Granularity::Tensor) {
                view.warn("vLLM's fp8_per_tensor scales activations per tensor except on GPUs where it uses one "
                          "scale per token (Ada, Hopper; docs/features/quantization/online.md); the recipe has one "
                          "scale per token");
            }
        } else if (online) {
            out.engineArgs["quantization"] = "fp8";
        } else {
            // The checkpoint form names no quantization: vLLM reads the method from the checkpoint's config.json,
            // and a --quantization that differs from it (fp8 against the compressed-tensors checkpoint the
            // llm-compressor script writes) is refused at load.
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
    checkPerTokenHeadKv(view, settings.kv);
    kvEngineArgs(settings.kv, out.engineArgs);
    warnKvScales(view, settings, "vLLM", online ? KvScaleSource::Checkpoint : KvScaleSource::FP8Checkpoint);
    return out;
}

std::string vllmFormText(const ExportOptions& options)
{
    if (options.vllmForm == VllmForm::Checkpoint) {
        return "checkpoint: describes a checkpoint whose weights are already stored in FP8 with their scales "
               "(quantization_config belongs in that checkpoint's config.json; vLLM reads the method from it, so the "
               "engine arguments name none); it does not apply to a BF16 model";
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
    out["form"] = vllmFormText(view);
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

// A string as Hydra's override grammar reads it: bare when it is a word of the characters the grammar takes
// unquoted and starts with a letter, `/`, `.` or `_` (so that it reads as neither a number nor, once checked, null or
// a boolean); an interpolation `${a.b}` bare, so that it is resolved; anything else (a path with a space, a comma
// or brackets, which Hydra reads as a list or a sweep) single-quoted, its quotes escaped.
std::string hydraString(const std::string& text)
{
    const bool interpolation
        = text.size() > 3 && text.compare(0, 2, "${") == 0 && text.find('}') == text.size() - 1;
    std::string lower = text;
    for (char& c : lower) {
        c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
    const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const bool word = !text.empty() && text.find_first_not_of(letters + "0123456789_/+.@%:-") == std::string::npos
        && (letters + "/._").find(text.front()) != std::string::npos
        && lower != "null" && lower != "true" && lower != "false" && lower != "nan" && lower != "inf";
    if (interpolation || word) {
        return text;
    }
    std::string quoted = "'";
    for (const char c : text) {
        quoted += c == '\'' ? std::string("\\'") : std::string(1, c);
    }
    return quoted + "'";
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
        return hydraString(value.get<std::string>());
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
    // verl-project/verl 1dda039b9c6311889a9c9a26040677e1254814f9: verl/trainer/config/rollout/rollout.yaml
    // ("quantization ... currently support fp8 and torchao"); docs/low_precision/nvfp4_qat.md (NVFP4 W4A16 comes
    // with quantization-aware training, actor...qat, which fake-quantizes the trainer's weights too).
    rules.microscalingReason
        = "verl's rollout quantization is fp8 (or torchao: verl/trainer/config/rollout/rollout.yaml); its NVFP4 "
          "W4A16 rollout comes with quantization-aware training (docs/low_precision/nvfp4_qat.md), which also "
          "fake-quantizes the trainer's weights: another intervention than the recipe's rollout quantization. Serve "
          "a checkpoint of the recipe: export --to vllm --vllm-form checkpoint, --to compressed-tensors or --to "
          "modelopt";
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
    warnKvScales(view, settings, sglang ? "SGLang" : "vLLM", KvScaleSource::Checkpoint);
    return out;
}

std::string exportVerl(const ExportView& view)
{
    const VerlExport settings = verlExport(view);
    std::ostringstream out;
    out << "# verl rollout configuration for precision recipe " << view.recipeName() << " (" << settings.rollout
        << " rollout).\n"
        << "# Merge into the trainer config, or pass verl_overrides.txt's lines on the command line.\n"
        << "# FP8 rollout: verl-project/verl docs/low_precision/fp8.md (128x128-block weights, vLLM and SGLang).\n";
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

// The rollout section's keys: `++` on quantization (declared by current verl's rollout.yaml as null, absent from
// older releases: added or replaced, whichever the release needs), `+` under engine_kwargs.<engine>, whose default is
// {} (verl/trainer/config/rollout/rollout.yaml engine_kwargs), so that every engine argument is a key verl's
// schema does not declare.
std::vector<VerlKey> verlRolloutKeys(const VerlExport& settings)
{
    const std::string prefix = "actor_rollout_ref.rollout.";
    std::vector<VerlKey> keys;
    keys.push_back({prefix + "name", settings.rollout, HydraOverride::Set});
    keys.push_back({prefix + "quantization", settings.quantization, HydraOverride::AddOrReplace});
    for (const auto& [key, value] : settings.engineKwargs.items()) {
        keys.push_back({prefix + "engine_kwargs." + settings.rollout + "." + key, value, HydraOverride::Add});
    }
    return keys;
}

// One Hydra command-line override as a shell word.
std::string verlOverride(const VerlKey& key)
{
    const char* mark = key.how == HydraOverride::Set ? "" : key.how == HydraOverride::Add ? "+" : "++";
    return shellQuote(mark + key.path + "=" + hydraValue(key.value));
}

std::vector<std::string> verlOverrideLines(const VerlExport& settings)
{
    std::vector<std::string> lines;
    for (const VerlKey& key : verlRolloutKeys(settings)) {
        lines.push_back(verlOverride(key));
    }
    return lines;
}

// SGLang's --quantization-param-path file of the recipe's calibrated scales, as
// python/sglang/srt/model_loader/weight_utils.py kv_cache_scales_loader reads it (QuantParamSchema): model_type (the
// model's; null or another refuses the file), kv_cache.dtype "float8_e4m3fn", kv_cache.scaling_factor with one
// entry per tensor-parallel rank (exactly tp_size of them) mapping every layer index (exactly num_hidden_layers) to
// one float. The model applies that one scale to both keys and values (models/qwen2.py, models/llama.py
// load_kv_cache_scales: k_scale = v_scale = scaling_factor), so each layer gets the larger of the recipe's two:
// neither tensor saturates, and the other is rounded on a coarser grid than the recipe measured (warned).
// A malformed file is not an error in SGLang: it logs and falls back to 1.0, so this one is checked here.
Json sglangKvScalesFile(const ExportView& view, const CalibratedKvScales& scales)
{
    const std::string what = "calibrated KV scales";
    const std::int64_t layers = view.plan->numLayers;
    if (static_cast<std::int64_t>(scales.perLayer.size()) != layers) {
        throw InputError(what, "", "has " + std::to_string(scales.perLayer.size()) + " layers, the model "
                + std::to_string(layers));
    }
    if (scales.modelType.empty()) {
        throw InputError(what, "model_type", "is empty; SGLang refuses a scale file whose model_type is not the "
                                             "model's");
    }
    if (view.options.tensorParallelSize < 1 || view.options.tensorParallelSize > 4096) {
        throw InputError(what, "tensor parallel size",
            "must be 1 to 4096, got " + std::to_string(view.options.tensorParallelSize));
    }
    Json perLayer = Json::object();
    std::vector<std::int64_t> merged;
    for (std::int64_t layer = 0; layer < layers; ++layer) {
        const auto& pair = scales.perLayer[static_cast<size_t>(layer)];
        const std::string where = "layer " + std::to_string(layer);
        if (!pair) {
            throw InputError(what, where, "has no scales; SGLang's file needs one for every layer");
        }
        for (const double value : {pair->first, pair->second}) {
            if (!std::isfinite(value) || value <= 0.0) {
                throw InputError(what, where, "a scale must be finite and above 0");
            }
        }
        if (pair->first != pair->second) {
            merged.push_back(layer);
        }
        perLayer[std::to_string(layer)] = std::max(pair->first, pair->second);
    }
    if (!merged.empty()) {
        view.warn("SGLang applies one KV scale per layer to both keys and values (python/sglang/srt/models/qwen2.py "
                  "load_kv_cache_scales): sglang_kv_scales.json holds the larger of the recipe's two calibrated "
                  "scales, so on " + std::to_string(merged.size()) + " of " + std::to_string(layers)
            + " layers the other tensor is rounded on a coarser grid than the recipe measured");
    }
    Json ranks = Json::object();
    for (std::int64_t rank = 0; rank < view.options.tensorParallelSize; ++rank) {
        ranks[std::to_string(rank)] = perLayer; // a per-tensor scale holds for every rank's share of the heads
    }
    Json file = Json::object();
    file["model_type"] = scales.modelType;
    file["kv_cache"] = {{"dtype", "float8_e4m3fn"}, {"scaling_factor", ranks}};
    return file;
}

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
    rules.perTokenHeadReason = "SGLang's --kv-cache-dtype has no per-token-head format (sgl-project/sglang "
                               "python/sglang/srt/server_args.py: auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, "
                               "fp4_e2m1); vLLM has it: export --to vllm";
    rules.microscalingReason.clear(); // sglangMicroscaling: online mxfp8
    const EngineSettings settings = engineSettings(view, rules);
    SglangExport out;
    out.serverArgs = Json::object();
    out.kvScalesFile = nullptr;
    if (settings.scheme) {
        if (isMicroscaling(*settings.scheme)) {
            sglangMicroscaling(view, *settings.scheme, out);
        } else {
            out.serverArgs["quantization"] = "fp8";
        }
        // SGLang's mxfp8 is its fp8 config with MX blocks, which reads the same variable
        // (python/sglang/srt/layers/quantization/fp8.py Fp8Config).
        if (!view.ignored.empty()) {
            out.ignoredLayers = sglangIgnored(view.ignored);
        }
    }
    // Exactly "fp8_e4m3": SGLang's model_runner.py loads --quantization-param-path only for that kv_cache_dtype.
    out.serverArgs["kv_cache_dtype"] = settings.kv.fp8 ? "fp8_e4m3" : "auto";
    if (settings.kv.fp8 && view.options.kvScales) {
        out.kvScalesFile = sglangKvScalesFile(view, *view.options.kvScales);
        out.serverArgs["quantization_param_path"] = kSglangKvScalesFile;
    } else if (view.options.kvScales) {
        view.warn("calibrated KV scales were given, but the recipe's KV cache is bf16: no scale file is written");
    } else {
        warnKvScales(view, settings, "SGLang", KvScaleSource::SglangParamFile);
    }
    return out;
}

std::string exportSglang(const ExportView& view)
{
    const SglangExport settings = sglangExport(view);
    Json out = Json::object();
    out["form"] = settings.serverArgs.value("quantization", "") == "mxfp8"
        ? "online: SGLang quantizes the BF16 checkpoint's weights and activations to MXFP8 at load time "
          "(python/sglang/srt/server_args.py QUANTIZATION_CHOICES: mxfp8, MoE and linear online quantization)"
        : "online: SGLang quantizes the BF16 checkpoint's weights to FP8 at load time "
          "(docs/advanced_features/quantization.md, Online Quantization)";
    Json env = Json::object();
    if (!settings.ignoredLayers.empty()) {
        env["SGLANG_FP8_IGNORED_LAYERS"] = settings.ignoredLayers;
    }
    out["env"] = env;
    out["server_args"] = settings.serverArgs;
    return out.dump(2) + "\n";
}

} // namespace mismatch::io::exporting

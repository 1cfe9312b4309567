#pragma once
// Exports a precision recipe, resolved against a model, to the configuration an outside rollout or quantization
// tool consumes, so that the recipe that passed the admission check runs unchanged in a large headless run, plus
// the text a person pastes to run it (exportBundle):
//
//   vllm               JSON. Default form "online": vLLM quantizes the BF16 checkpoint to FP8 at load time
//                      (engine arguments quantization fp8_per_tensor | fp8_per_block | fp8_per_channel and
//                      quantization_config {ignore: [...]}; docs/features/quantization/online.md,
//                      vllm/config/quantization.py). --vllm-form checkpoint: the fp8 `quantization_config` of a
//                      checkpoint already stored in FP8 (quant_method fp8, weight_block_size, ignored_layers),
//                      labelled as such; its engine arguments name no quantization (vLLM reads the method from the
//                      checkpoint) and its vllm_serve.sh serves the FP8 checkpoint that the llm-compressor script
//                      beside it writes, never the BF16 model. A target version before 0.20 gets the older online
//                      form (quantization fp8: per-tensor weights, no ignore list); fp8_per_channel needs 0.23.
//                      Microscaling recipes: online quantization mxfp8 (from 0.21) or mxfp4 (from 0.29); NVFP4 has
//                      no online form for linear layers, and the checkpoint form of every microscaling recipe is
//                      the compressed-tensors quantization_config that llm-compressor writes (NVFP4, NVFP4A16,
//                      MXFP4, MXFP4A16, MXFP8, MXFP8A16).
//                      Ready to run: `vllm serve` command line and the Python LLM(...) call.
//   sglang             JSON: launch_server arguments (quantization fp8: online per-tensor FP8 of the BF16
//                      checkpoint, or mxfp8: online MXFP8 weights and activations; kv_cache_dtype;
//                      quantization_param_path when calibrated KV scales are given) and the environment
//                      (SGLANG_FP8_IGNORED_LAYERS). Ready to run: the launch command with its environment and, with
//                      calibrated KV scales, sglang_kv_scales.json (the per-TP-rank, per-layer JSON SGLang's
//                      --quantization-param-path reads).
//   llm-compressor     YAML: a recipe with one QuantizationModifier (targets, scheme or config_groups, ignore,
//                      kv_cache_scheme). Ready to run: a oneshot Python script (calibration data when the recipe
//                      needs static scales) that saves a compressed checkpoint.
//   compressed-tensors JSON: the checkpoint's `quantization_config` (quant_method compressed-tensors, format,
//                      config_groups, ignore, kv_cache_scheme); FP8 weight-only is naive-quantized, NVFP4, MXFP4
//                      and MXFP8 are nvfp4-pack-quantized, mxfp4-pack-quantized and mxfp8-quantized (weight-only
//                      or with activations of their format), several checkpoint formats are `mixed-precision` with
//                      a format per group. Ready to run: the
//                      llm-compressor recipe and oneshot script that write such a checkpoint.
//   verl               YAML: the rollout section (actor_rollout_ref.rollout name, quantization and engine
//                      arguments under engine_kwargs.vllm or engine_kwargs.sglang). Ready to run: Hydra override
//                      lines (+ for keys absent from verl's defaults) and, for the SGLang rollout, its environment.
//                      With a teacher (ExportOptions::distillation): verl's on-policy distillation, the rollout
//                      section with the student, the teacher, the distillation loss of the objective the budget was
//                      calibrated with and the rollout correction; ready to run: verl_opd.sh, the whole
//                      `python3 -m verl.trainer.main_ppo` command.
//   (llm-compressor and compressed-tensors also carry vllm_serve.sh, serving the checkpoint their oneshot script
//   saves, with the FP8 KV cache switched on where the recipe has one.)
//   modelopt           JSON: NVIDIA ModelOpt's hf_quant_config.json (producer, quantization.quant_algo or
//                      MIXED_PRECISION with quantized_layers, kv_cache_quant_algo, exclude_modules; NVFP4,
//                      W4A16_NVFP4 and MXFP8 with their group_size). Ready to
//                      run: the `quantization_config: {quant_method: modelopt, ...}` fragment of config.json (with
//                      kv_cache_scheme and ignore, as ModelOpt writes config.json).
//
// Modules the recipe leaves in BF16 are listed by their full names (ignore / ignored_layers / exclude_modules /
// SGLANG_FP8_IGNORED_LAYERS). Every target refuses different formats within a group vLLM fuses (q/k/v, gate/up of
// one layer). A recipe feature a target cannot express is an InputError located in the recipe that names the
// feature, the module or layer it applies to and the target (`cannot be exported --to vllm: ...`); nothing is
// dropped. Where the target runs something close to but not exactly the recipe, or relies on scales it may not
// have (an FP8 KV cache without checkpoint scales runs with 1.0), the export says so in `warnings`.
//
// One deliberate approximation: every FP8 engine quantizes the activations of 128x128-block FP8 weights per token
// in groups of 128 channels (DeepSeek-style 1x128), where the recipe's fp8_e4m3 activations are one scale per
// token. Block recipes export to those engines' block scheme (llm-compressor FP8_BLOCK, vLLM fp8_per_block and
// weight_block_size, verl's fp8 rollout, ModelOpt FP8_PB_WO) rather than being refused, with a warning.
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mismatch::io {

enum class ExportTarget { Vllm, LlmCompressor, CompressedTensors, Verl, ModelOpt, Sglang };

// "vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt", "sglang".
std::string toString(ExportTarget target);
std::optional<ExportTarget> parseExportTarget(std::string_view name);
std::vector<std::string> exportTargetChoices();
// "json" or "yaml": the file format the target reads.
std::string fileExtension(ExportTarget target);

// vLLM: quantize the BF16 checkpoint at load time (online) or describe an FP8 checkpoint (checkpoint).
enum class VllmForm { Online, Checkpoint };
std::string toString(VllmForm form);
std::optional<VllmForm> parseVllmForm(std::string_view name);

// verl: the rollout engine.
enum class VerlRollout { Vllm, Sglang };
std::string toString(VerlRollout rollout);
std::optional<VerlRollout> parseVerlRollout(std::string_view name);

// The first vLLM release whose versioned documentation describes the online quantization frontend
// (--quantization fp8_per_tensor|fp8_per_block, quantization_config.ignore; added by vllm-project/vllm PR #38138,
// March 2026, documented by PR #39736; docs.vllm.ai/en/v0.20.0/features/quantization/online/). Below it the older
// form (quantization fp8) is written.
inline constexpr const char* kVllmOnlineFrontendRelease = "0.20";
// The release the fp8_per_channel shorthand is written for: it came later, with vllm-project/vllm PR #44132 (merged
// in June 2026, after v0.22.0 was released); 0.23 is the first minor release after that merge (not read from a
// release's own source).
inline constexpr const char* kVllmPerChannelShorthandRelease = "0.23";
// The release the per-token-head KV formats (kv_cache_dtype fp8_per_token_head, int8_per_token_head) are written for:
// they came with vllm-project/vllm PR #38378, merged on 2 April 2026, the day before v0.19.0 was published from its
// release branch; 0.20 is the first minor release cut after that merge (not read from a release's own source).
inline constexpr const char* kVllmPerTokenHeadKvRelease = "0.20";
// The release the online MXFP8 shorthand (--quantization mxfp8 with quantization_config.ignore: MXFP8 weights and
// activations) is written for: docs.vllm.ai/en/v0.20.0/features/quantization/online/ lists fp8_per_tensor and
// fp8_per_block only, and the stable documentation of a later release, whose OnlineQuantScheme has MXFP8 but no
// fp8_per_channel yet (0.23), lists mxfp8 (vllm-project/vllm PR #35448 added the method); 0.21 is the first minor
// release after 0.20 (not read from a release's own source).
inline constexpr const char* kVllmOnlineMxfp8Release = "0.21";
// The release the online MXFP4 shorthand (--quantization mxfp4) is written for: it came with vllm-project/vllm PR
// #49347 (merged in July 2026) and docs.vllm.ai/en/v0.29.0/features/quantization/online/ is the first versioned page
// found to list it (earlier releases not checked).
inline constexpr const char* kVllmOnlineMxfp4Release = "0.29";

// FP8 KV-cache scales calibrated for a recipe, per layer: the scale of the keys and of the values (amax / 448 over
// the probe prompts, one per tensor: engine::calibrateKvScales). SGLang's export writes them as the JSON its
// --quantization-param-path reads.
struct CalibratedKvScales {
    // The model's Hugging Face model_type ("llama", "qwen2", "qwen3"): SGLang refuses a scale file whose model_type
    // differs from the model's.
    std::string modelType;
    // One entry per layer: {key scale, value scale}; nullopt for a layer without an FP8 KV cache.
    std::vector<std::optional<std::pair<double, double>>> perLayer;
};

// verl on-policy distillation: what the OPD command needs beside the student's rollout. The objective and the
// correction are spelt as a run file spells them (core/train/run_config.h; io sits below train, so they are plain
// names here): the loss and correction the budget was calibrated with.
struct VerlDistillation {
    std::string teacherPath; // the teacher model (a directory or a Hugging Face id), as written into the command
    std::string objective; // opd_full_kl | opd_k1 | opd_k3 | opd_topk
    std::int64_t topK = 0; // opd_topk only: its k (>= 1); 0 for the others
    std::string correction = "none"; // none | tis | mis
    double correctionCap = 2.0; // tis and mis: the cap C (> 1)
};

struct ExportOptions {
    ExportTarget target = ExportTarget::Vllm;
    // Weight staleness k of an asynchronous rollout (optimizer steps). 0: synchronous. Only verl takes a rollout
    // schedule, and no verl key with the meaning "weights exactly k steps old" is confirmed, so k > 0 is refused.
    std::int64_t staleness = 0;
    VllmForm vllmForm = VllmForm::Online; // --to vllm only
    VerlRollout verlRollout = VerlRollout::Vllm; // --to verl only
    // The vLLM release the vllm export is for ("0.21", "0.22.1"); empty or "current": the current release.
    std::string targetVersion;
    // The model path written into the ready-to-run commands; empty: the placeholder MODEL.
    std::string modelPath;
    // --to sglang: the recipe's calibrated per-tensor FP8 KV scales; without them SGLang runs an FP8 KV cache with
    // scales of 1.0 (and the export warns).
    std::optional<CalibratedKvScales> kvScales;
    // --to sglang with kvScales: the tensor-parallel size the scale file is written for (SGLang checks that it has
    // exactly one entry per rank).
    std::int64_t tensorParallelSize = 1;
    // --to verl: on-policy distillation with this teacher, objective and correction; nullopt: the rollout section
    // alone (what a training command of one's own merges in).
    std::optional<VerlDistillation> distillation;
};

struct ExportFile {
    std::string name; // file name within the export directory
    std::string text;
};

struct ExportResult {
    std::string configName; // the config file's name: "vllm.json", "hf_quant_config.json", ...
    std::string text; // the config file
    std::vector<std::string> warnings; // where the target runs something other than the recipe, or may
    std::vector<ExportFile> files; // the config file, the ready-to-run files and README.txt, in that order
};

// The target's config file for `recipe` resolved as `plan` (from quant::resolveRecipe on the same recipe), the
// ready-to-run files and the warnings. Throws InputError for a feature the target cannot express or an option the
// target does not take.
ExportResult exportBundle(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options);
// exportBundle(...).text.
std::string exportRecipe(const quant::Recipe& recipe, const quant::RecipePlan& plan, const ExportOptions& options);

// The per-tensor scales of an engine's KV-scale table (engine::KvScaleTable's keys and values per layer, from
// engine::calibrateKvScales of an engine running the recipe; an undefined tensor: no FP8 KV cache there) for
// ExportOptions::kvScales, with the model_type of `config`. Per-head scales are not per-tensor: InputError. (The
// tensors, not the table: io sits beside the engine, not above it.)
CalibratedKvScales calibratedKvScales(
    const model::ModelConfig& config, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values);

// Writes every file of `result` into `directory` (created with its parents when missing), each through
// writeFileAtomically. Throws InputError naming the path that cannot be written.
void writeExportDirectory(const std::string& directory, const ExportResult& result);

// What an export reads, for requireExportIsNoInput (empty: not read).
struct ExportInputs {
    std::string recipe; // the recipe file
    std::string modelConfig; // the model's config.json (or a config file given alone)
    std::string modelDirectory; // the model directory whose files are read
    std::string kvProbe; // the KV probe prompt set
};
// Issue 46: InputError (requireOutputNotInput, naming both) when `out` (the export's file or directory) or any of
// `files` inside the directory `out` would be the recipe, the model config or the probe prompt set the export
// read, or lie inside the model directory. The command line and the GUI's export dialog both check with it.
void requireExportIsNoInput(const std::string& out, const std::vector<std::string>& files, const ExportInputs& inputs);

} // namespace mismatch::io

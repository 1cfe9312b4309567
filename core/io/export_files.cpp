#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <system_error>

// Export: the ready-to-run files (serve commands, Python calls, oneshot scripts, README.txt) of every target.
// The shared view and checks: export_internal.h, export_view.cpp.

namespace mismatch::io::exporting {

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

// `vllm serve` arguments: --name-with-dashes VALUE; lists as separate words (nargs), objects as JSON. `model` is
// the model argument as shell text (already quoted).
std::string vllmServeCommand(const std::string& model, const Json& engineArgs)
{
    std::string text = "vllm serve " + model;
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

// The LLM(...) call; `model` is the model argument as Python text (a literal or a variable), `preamble` what comes
// between the import and the call.
std::string vllmPythonCall(const std::string& model, const Json& engineArgs, const std::string& preamble = "")
{
    std::string text = "from vllm import LLM\n\n" + preamble + "llm = LLM(\n    model=" + model + ",\n";
    for (const auto& [key, value] : engineArgs.items()) {
        text += "    " + key + "=" + pyValue(value) + ",\n";
    }
    return text + ")\n";
}

// The directory llm_compressor_oneshot.py saves into, relative to where it runs: its
// SAVE_DIR = MODEL_ID.rstrip("/").split("/")[-1] + "-<recipe name>".
std::string oneshotSaveDir(const ExportView& view)
{
    std::string name = modelPath(view.options);
    while (!name.empty() && name.back() == '/') {
        name.pop_back();
    }
    const size_t slash = name.rfind('/');
    if (slash != std::string::npos) {
        name = name.substr(slash + 1);
    }
    return name + "-" + view.recipeName();
}

// What llm_compressor_oneshot.py calibrates on its dataset: the static scales of the KV cache and the per-tensor
// global scales of NVFP4 activations (compressed-tensors' NVFP4 preset: dynamic "local", observer static_minmax;
// llm-compressor examples/quantization_w4a4_fp4/llama3_example.py "calibrate a global_scale for activations").
// Empty: nothing, the weights alone are quantized (FP8 dynamic, MXFP8, MXFP4 and weight-only schemes).
std::string calibratedScales(const CompressedSettings& settings)
{
    const bool kv = !settings.kvScheme.is_null();
    if (kv && settings.calibratesActivations) {
        return "the KV cache's scales and the NVFP4 activations' global scales";
    }
    if (kv) {
        return "the KV cache's scales";
    }
    return settings.calibratesActivations ? "the NVFP4 activations' global scales" : "";
}

// The README's words for what the oneshot script does with data.
std::string calibrationText(const CompressedSettings& settings)
{
    if (!settings.calibratesActivations) {
        return settings.kvScheme.is_null() ? "no calibration data needed"
                                           : "calibrating the static KV-cache scales on a dataset";
    }
    return "calibrating " + calibratedScales(settings) + " on a dataset";
}

// The README's words for what the oneshot script does before it saves.
std::string oneshotDoes(const CompressedSettings& settings)
{
    if (!settings.calibratesActivations) {
        return settings.kvScheme.is_null() ? "quantizes it (no calibration data needed)"
                                           : "calibrates the static KV-cache scales on a dataset";
    }
    return "calibrates " + calibratedScales(settings) + " on a dataset";
}

// The llm-compressor oneshot script that writes a compressed-tensors checkpoint from the recipe file beside it.
// Calibration data only when the recipe has static scales to measure (calibratedScales); FP8 dynamic, FP8 and
// integer weight-only schemes quantize the weights alone.
std::string oneshotScript(const ExportView& view, const CompressedSettings& settings)
{
    const bool calibrate = !calibratedScales(settings).empty();
    std::ostringstream out;
    out << "# llm-compressor one-shot quantization for precision recipe " << view.recipeName()
        << " (written by mismatch export).\n"
        << "# Writes a compressed-tensors checkpoint (its config.json's quantization_config is what\n"
        << "# `mismatch export --to compressed-tensors` writes) that vLLM loads as it is: vllm serve SAVE_DIR\n"
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
        const std::string what = calibratedScales(settings);
        out << "# " << static_cast<char>(what[0] - 'a' + 'A') << what.substr(1)
            << " are static: measured on calibration text. Prefer prompts of your own rollouts.\n"
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

// SGLang's launch command with its environment. The KV scale file is found beside the script, wherever it runs.
std::string sglangLaunchScript(const ExportOptions& options, const SglangExport& settings)
{
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
        const std::string text = value.get<std::string>();
        command += " \\\n    " + flag + " "
            + (key == "quantization_param_path" ? "\"$(dirname \"$0\")/" + text + "\"" : shellQuote(text));
    }
    if (options.kvScales && options.tensorParallelSize > 1) {
        // The scale file holds one entry per tensor-parallel rank; SGLang started with another --tp-size finds a
        // count that differs and falls back to scales of 1.0 (weight_utils.py kv_cache_scales_loader).
        command += " \\\n    --tp-size " + std::to_string(options.tensorParallelSize);
    }
    return command + "\n";
}

using AddFile = std::function<void(const std::string&, const std::string&, const std::string&)>;

// The first lines of a vllm_serve.sh that serves a quantized checkpoint, never the BF16 model: vLLM reads the
// checkpoint's quantization from its config.json, so the command names none. `checkpoint` names it in words.
std::string checkpointServeHead(const ExportView& view, const std::string& checkpoint)
{
    return "#!/bin/sh\n# Serves the " + checkpoint + " of precision recipe " + view.recipeName()
        + ", never the BF16 model at " + modelPath(view.options)
        + ":\n# vLLM reads the checkpoint's quantization from its config.json (so no --quantization here).\n";
}

// The lines that take the checkpoint llm_compressor_oneshot.py (beside the script) saves, oneshotSaveDir, or the
// directory given as the first argument. `contents` says what the oneshot script writes, `another` what else the
// argument may name.
std::string oneshotCheckpointLines(const ExportView& view, const std::string& contents, const std::string& another)
{
    const std::string saveDir = oneshotSaveDir(view);
    return "# Make it first: python3 llm_compressor_oneshot.py (beside this file) writes it to ./" + saveDir + "\n# ("
        + contents + "); run this from\n# the same directory, or pass " + another + " as the first argument.\n"
        + "CHECKPOINT=${1:-" + shellQuote(saveDir) + "}\n";
}

// vllm_serve.sh of the llm-compressor and compressed-tensors exports: the compressed-tensors checkpoint their oneshot
// script saves. vLLM switches its FP8 KV cache on, and uses the checkpoint's calibrated k/v scales, only when asked
// for it: "When running the model you must specify kv_cache_dtype="fp8" in order to enable the kv cache quantization
// and use the scales" (vllm-project/vllm docs/features/quantization/quantized_kvcache.md,
// 11cdd70b3ac3e412db8a84569f227b40a6a5c023, its llm-compressor example); fp8_e4m3 is the same on CUDA. Per-head
// scales run on its Flash Attention backend only (the same page, current version), which the export warns.
std::string compressedServeScript(const ExportView& view, const CompressedSettings& settings)
{
    const bool fp8Kv = !settings.kvScheme.is_null();
    UniformKv kv; // kv_cache_scheme covers every layer: compressed-tensors has no per-layer exceptions
    kv.fp8 = fp8Kv;
    kv.format = fp8Kv ? KvFormat::Fp8E4m3 : KvFormat::Bf16;
    Json args = Json::object();
    kvEngineArgs(kv, args);
    std::string text = checkpointServeHead(view, "compressed-tensors checkpoint")
        + oneshotCheckpointLines(view,
            "a compressed-tensors checkpoint of the recipe's scheme"
                + std::string(fp8Kv ? ", KV-cache scales calibrated" : ""),
            "the directory it was saved to");
    if (fp8Kv) {
        text += "# --kv-cache-dtype fp8_e4m3: vLLM runs the FP8 KV cache, with the checkpoint's calibrated scales,\n"
                "# only when asked (vllm-project/vllm docs/features/quantization/quantized_kvcache.md).\n";
        if (settings.kvScheme["strategy"] == "attn_head") {
            text += "# Per-attention-head KV-cache scales: vLLM runs them on its Flash Attention backend only.\n";
        }
    }
    return text + vllmServeCommand("\"$CHECKPOINT\"", args);
}

// vLLM's checkpoint form serves the FP8 checkpoint, never the BF16 model (whose --quantization fp8 would be vLLM's
// older online per-tensor FP8 without the recipe's ignore list). llm-compressor writes a checkpoint of the recipe's
// scheme, a compressed-tensors one that vLLM loads as it is, its KV-cache scales calibrated; the bundle carries
// that recipe and its oneshot script, and the serve command takes the directory the script saves into. A recipe
// llm-compressor cannot write needs the checkpoint's directory as the first argument. A recipe that quantizes
// nothing is served as the BF16 model it is.
void addVllmCheckpointFiles(const ExportView& view, const ExportView& quiet, const AddFile& add)
{
    const ExportOptions& options = view.options;
    const Json args = vllmExport(quiet).engineArgs; // no quantization: the checkpoint names its method
    // A per-token-head KV cache is chosen when vLLM starts (kv_cache_dtype, in `args`) and has no scales to calibrate:
    // the checkpoint llm-compressor writes leaves those layers' KV cache out.
    quant::RecipePlan checkpointPlan = *quiet.plan;
    for (quant::KvPrecision& kv : checkpointPlan.kvPerLayer) {
        if (quant::isPerTokenHead(kv.format)) {
            kv = quant::KvPrecision {};
        }
    }
    ExportView asCheckpoint = quiet;
    asCheckpoint.plan = &checkpointPlan;
    if (!view.anythingQuantized() && !asCheckpoint.kvQuantized()) {
        add("vllm_serve.sh", "#!/bin/sh\n" + vllmServeCommand(shellQuote(modelPath(options)), args),
            view.kvQuantized()
                ? "the `vllm serve` command line (the recipe puts nothing into a checkpoint: the BF16 model as it is, "
                  "with its per-token-head KV cache)"
                : "the `vllm serve` command line (the recipe quantizes nothing: the BF16 model as it is)");
        add("vllm_llm.py", vllmPythonCall(pyString(modelPath(options)), args), "the matching Python LLM(...) call");
        return;
    }
    asCheckpoint.target = ExportTarget::CompressedTensors;
    std::optional<CompressedSettings> compressed;
    std::string why;
    try {
        compressed = compressedSettings(asCheckpoint);
    } catch (const InputError& error) {
        why = error.detail();
    }
    const std::string saveDir = oneshotSaveDir(view);
    const std::string kind = vllmCheckpointKind(view); // FP8, or NVFP4, MXFP4, MXFP8
    std::ostringstream serve;
    serve << checkpointServeHead(view, kind + " checkpoint");
    std::string python = "import sys\n\n";
    std::string preamble;
    if (compressed) {
        serve << oneshotCheckpointLines(view,
            "a compressed-tensors checkpoint of the recipe's scheme, KV-cache scales calibrated",
            "another " + kind
                + " checkpoint of this recipe (its config.json holding\n"
                  "# config_quantization_config.json's quantization_config)");
        preamble = "# The " + kind
            + " checkpoint llm_compressor_oneshot.py writes, or the first argument (see "
              "vllm_serve.sh); never the BF16 model.\nCHECKPOINT = sys.argv[1] if len(sys.argv) > 1 else "
            + pyString(saveDir) + "\n\n";
    } else {
        serve << "# llm-compressor cannot write this recipe (" << why << "):\n"
              << "# make the " << kind << " checkpoint with another tool, put config_quantization_config.json's "
              << "quantization_config\n"
              << "# into its config.json and pass its directory as the first argument.\n"
              << "CHECKPOINT=${1:?usage: vllm_serve.sh " << kind << "_CHECKPOINT_DIR}\n";
        preamble = "# An " + kind
            + " checkpoint of this recipe (see vllm_serve.sh); never the BF16 model.\nCHECKPOINT = sys.argv[1]\n\n";
    }
    add("vllm_serve.sh", serve.str() + vllmServeCommand("\"$CHECKPOINT\"", args),
        "the `vllm serve` command line of the " + kind + " checkpoint (not the BF16 model)");
    add("vllm_llm.py", python + vllmPythonCall("CHECKPOINT", args, preamble), "the matching Python LLM(...) call");
    if (compressed) {
        add("llm-compressor.yaml", exportLlmCompressor(asCheckpoint),
            "the llm-compressor recipe of the " + kind + " checkpoint");
        add("llm_compressor_oneshot.py", oneshotScript(view, *compressed),
            "the llm-compressor oneshot script that writes the " + kind + " checkpoint vllm_serve.sh serves ("
                + calibrationText(*compressed) + ")");
    }
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

// verl_opd.sh: the whole on-policy distillation command with every key of verl.yaml as an override (`keys`), the data
// and the teacher's resource pool from the environment (verl's defaults have no data of ours and a teacher pool of 0
// nodes), further overrides from the script's arguments.
std::string verlOpdScript(const ExportView& view, const VerlExport& rollout, const std::vector<VerlKey>& keys)
{
    std::ostringstream out;
    out << "#!/bin/sh\n"
        << "# verl on-policy distillation of the student at " << modelPath(view.options) << " from the teacher at "
        << view.options.distillation->teacherPath << ",\n"
        << "# the student's rollouts under precision recipe " << view.recipeName()
        << " (written by mismatch export; the keys of verl.yaml).\n"
        << "# TRAIN_FILES, VAL_FILES: verl's RL data, parquet files as its examples/data_preprocess scripts\n"
        << "# write them (one path, or a list such as \"['a.parquet','b.parquet']\").\n"
        << "# TEACHER_GPUS_PER_NODE, TEACHER_NNODES: verl's distillation resource pool, the GPUs that serve the\n"
        << "# teacher; each teacher replica takes verl's default tensor parallelism (2), which must divide the pool\n"
        << "# (for one GPU pass distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=1).\n"
        << "# More overrides follow as arguments (data.train_batch_size, trainer.n_gpus_per_node, ...).\n"
        << "set -eu\n"
        << "TRAIN_FILES=${TRAIN_FILES:?set TRAIN_FILES to the training parquet file or files}\n"
        << "VAL_FILES=${VAL_FILES:-$TRAIN_FILES}\n"
        << "TEACHER_GPUS_PER_NODE=${TEACHER_GPUS_PER_NODE:?set TEACHER_GPUS_PER_NODE to the GPUs per node that "
           "serve the teacher}\n"
        << "TEACHER_NNODES=${TEACHER_NNODES:-1}\n";
    if (!rollout.ignoredLayers.empty()) {
        out << "# The SGLang rollout workers read it (a Ray cluster started beforehand needs it where `ray start` ran: "
               "verl_env.sh).\n"
            << "export SGLANG_FP8_IGNORED_LAYERS=" << shellQuote(rollout.ignoredLayers) << "\n";
    }
    out << "python3 -m verl.trainer.main_ppo \\\n"
        << "    data.train_files=\"$TRAIN_FILES\" \\\n"
        << "    data.val_files=\"$VAL_FILES\" \\\n"
        << "    distillation.n_gpus_per_node=\"$TEACHER_GPUS_PER_NODE\" \\\n"
        << "    distillation.nnodes=\"$TEACHER_NNODES\" \\\n";
    for (const VerlKey& key : keys) {
        out << "    " << verlOverride(key) << " \\\n";
    }
    out << "    \"$@\"\n";
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
        add(result.configName, result.text, "the engine arguments (" + vllmFormText(view) + ")");
        const VllmExport settings = vllmExport(quiet);
        if (options.vllmForm == VllmForm::Checkpoint) {
            addVllmCheckpointFiles(view, quiet, add);
            add("config_quantization_config.json",
                Json::object({{"quantization_config", settings.checkpointConfig}}).dump(2) + "\n",
                "the quantization_config to put into the " + vllmCheckpointKind(view) + " checkpoint's config.json");
        } else {
            add("vllm_serve.sh", "#!/bin/sh\n" + vllmServeCommand(shellQuote(modelPath(options)), settings.engineArgs),
                "the `vllm serve` command line");
            add("vllm_llm.py", vllmPythonCall(pyString(modelPath(options)), settings.engineArgs),
                "the matching Python LLM(...) call");
        }
        break;
    }
    case ExportTarget::Sglang: {
        add(result.configName, result.text, "the launch_server arguments and environment");
        const SglangExport settings = sglangExport(quiet);
        add("sglang_launch.sh", sglangLaunchScript(options, settings), "the SGLang launch command with its environment");
        if (!settings.kvScalesFile.is_null()) {
            add(kSglangKvScalesFile, settings.kvScalesFile.dump(2) + "\n",
                "the recipe's calibrated FP8 KV-cache scales per tensor-parallel rank and layer, which "
                "sglang_launch.sh passes with --quantization-param-path");
        }
        break;
    }
    case ExportTarget::Verl: {
        const bool opd = options.distillation.has_value();
        add(result.configName, result.text,
            opd ? "verl's trainer config for on-policy distillation (YAML form): the student's rollout under the "
                  "recipe, the teacher, the distillation loss of objective " + options.distillation->objective
                    + " and the rollout correction"
                : "the rollout section of verl's trainer config (YAML form)");
        const VerlExport settings = verlExport(quiet);
        std::vector<std::string> overrides;
        std::vector<VerlKey> opdKeys;
        if (opd) {
            opdKeys = verlOpdKeys(quiet, settings, verlLoss(quiet));
            for (const VerlKey& key : opdKeys) {
                overrides.push_back(verlOverride(key));
            }
        } else {
            overrides = verlOverrideLines(settings);
        }
        std::string lines = "# Append to the verl trainer command (python3 -m verl.trainer.main_ppo ...), one per line.\n";
        for (const std::string& line : overrides) {
            lines += "    " + line + " \\\n";
        }
        add("verl_overrides.txt", lines, "the same settings as Hydra command-line overrides, shell-quoted");
        if (opd) {
            add("verl_opd.sh", verlOpdScript(view, settings, opdKeys),
                "the whole on-policy distillation command (python3 -m verl.trainer.main_ppo with every override; the "
                "data and the teacher's GPUs from TRAIN_FILES, VAL_FILES, TEACHER_GPUS_PER_NODE and TEACHER_NNODES, "
                "further overrides as its arguments)");
        }
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
            "the llm-compressor oneshot script: loads the model, " + oneshotDoes(settings)
                + " and saves it with save_pretrained(..., save_compressed=True)");
        add("vllm_serve.sh", compressedServeScript(view, settings),
            "the `vllm serve` command line of the checkpoint llm_compressor_oneshot.py saves ("
                + oneshotSaveDir(view) + ", or the directory given as its first argument)"
                + (settings.kvScheme.is_null() ? std::string("")
                                               : std::string(", its FP8 KV cache switched on with --kv-cache-dtype")));
        if (!settings.kvScheme.is_null() && settings.kvScheme["strategy"] == "attn_head") {
            view.warn("vLLM runs a checkpoint's per-attention-head KV-cache scales only with its Flash Attention "
                      "backend (vllm-project/vllm docs/features/quantization/quantized_kvcache.md); vllm_serve.sh "
                      "needs that backend for this recipe");
        }
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

} // namespace mismatch::io::exporting

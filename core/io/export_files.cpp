#include "core/io/export_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"

#include <filesystem>
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

} // namespace mismatch::io::exporting

#include "core/io/recipe_export.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/output_check.h"
#include "core/io/export_internal.h"

#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <system_error>

namespace mismatch::io {

using namespace exporting;

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
    onlyFor(options.kvScales.has_value(), ExportTarget::Sglang, "calibrated KV scales (ExportOptions::kvScales)",
        "SGLang alone takes FP8 KV scales outside a checkpoint, as a --quantization-param-path file; calibrate them "
        "into a checkpoint with --to llm-compressor for the others");
    onlyFor(options.tensorParallelSize != 1, ExportTarget::Sglang, "a tensor-parallel size",
        "the ranks of SGLang's KV scale file");
    onlyFor(options.distillation.has_value(), ExportTarget::Verl, "--teacher",
        "verl's on-policy distillation trainer; the other targets serve or quantize the student alone");
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
        result.text = options.distillation ? exportVerlOpd(view) : exportVerl(view);
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

namespace {

// The Hugging Face model_type of an architecture (what its config.json says; core/model/config.cpp writes the same).
std::string hfModelType(model::Architecture architecture)
{
    switch (architecture) {
    case model::Architecture::Llama:
        return "llama";
    case model::Architecture::Qwen2:
        return "qwen2";
    case model::Architecture::Qwen3:
        return "qwen3";
    }
    return "";
}

} // namespace

CalibratedKvScales calibratedKvScales(
    const model::ModelConfig& config, const std::vector<at::Tensor>& keyScales, const std::vector<at::Tensor>& valueScales)
{
    CalibratedKvScales out;
    out.modelType = hfModelType(config.architecture);
    for (size_t layer = 0; layer < keyScales.size(); ++layer) {
        const at::Tensor& keys = keyScales[layer];
        const at::Tensor& values = layer < valueScales.size() ? valueScales[layer] : at::Tensor();
        if (!keys.defined() || !values.defined()) {
            out.perLayer.emplace_back(std::nullopt);
            continue;
        }
        if (keys.numel() != 1 || values.numel() != 1) {
            throw InputError("calibrated KV scales", "layer " + std::to_string(layer),
                "has per-head scales (" + std::to_string(keys.numel())
                    + " per tensor); the export takes one scale per tensor");
        }
        out.perLayer.emplace_back(std::make_pair(
            keys.to(at::kDouble).item<double>(), values.to(at::kDouble).item<double>()));
    }
    return out;
}

void requireExportIsNoInput(const std::string& out, const std::vector<std::string>& files, const ExportInputs& inputs)
{
    const std::vector<NamedInput> named
        = {{inputs.recipe, "recipe"}, {inputs.modelConfig, "model config"}, {inputs.kvProbe, "KV probe prompt set"}};
    requireOutputNotInput(out, named, {inputs.modelDirectory}, "export");
    for (const std::string& name : files) {
        requireOutputNotInput((std::filesystem::path(out) / name).string(), named, {inputs.modelDirectory}, "export file");
    }
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

#include "core/analysis/kv_scale_export.h"

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/engine/engine_model.h"
#include "core/model/config.h"

#include <filesystem>
#include <utility>
#include <vector>

namespace mismatch::analysis {

void requirePerTensorFp8Kv(const quant::Recipe& recipe, const quant::RecipePlan& plan, const KvScaleProbe& probe)
{
    bool anyFp8 = false;
    for (std::size_t layer = 0; layer < plan.kvPerLayer.size(); ++layer) {
        const quant::KvPrecision& kv = plan.kvPerLayer[layer];
        if (quant::isPerTokenHead(kv.format)) {
            throw InputError(recipe.sourceFile, "kv_cache",
                probe.what + " calibrates FP8 KV scales, but the recipe gives layer " + std::to_string(layer) + " "
                    + quant::toString(kv.format)
                    + ", whose scales the engine computes from each token when it writes it to the cache: there are "
                      "no scales to calibrate or export (only vLLM runs it: export --to vllm)");
        }
        if (kv.format != quant::KvFormat::Fp8E4m3) {
            continue;
        }
        anyFp8 = true;
        if (kv.scales == quant::KvScales::PerHead) {
            throw InputError(recipe.sourceFile, "kv_cache",
                probe.what + " calibrates one FP8 KV scale per tensor, but the recipe gives layer "
                    + std::to_string(layer) + " per-head scales (SGLang's --quantization-param-path file holds one "
                    + "scale per layer; per-head scales need a checkpoint calibrated by llm-compressor: export --to "
                    + "llm-compressor)");
        }
    }
    if (!anyFp8) {
        throw InputError(recipe.sourceFile, "kv_cache",
            probe.what + " calibrates FP8 KV-cache scales, but the recipe's KV cache is not FP8 on any layer: there "
                         "are no scales to calibrate");
    }
}

io::CalibratedKvScales calibrateExportKvScales(
    const ModelDirectory& model, const quant::Recipe& recipe, const KvScaleProbe& probe)
{
    requirePerTensorFp8Kv(recipe, quant::resolveRecipe(recipe, model.config), probe);
    if (probe.promptSet.empty()) {
        throw InputError(probe.what, "", "names no prompt set to calibrate the KV scales on");
    }
    const PromptRequests requests = promptRequests(probe.promptSet, *model.tokenizer, probe.count);
    if (requests.requests.empty()) {
        throw InputError(probe.promptSet, "", "has no prompts to calibrate the KV scales on (" + probe.what + ")");
    }
    requirePromptsFit(requests, model.config, /*maxNewTokens=*/0);
    // The screens' engine for the recipe, its scales fitted on every probe prompt (what a measurement under the
    // fitted_per_measurement policy installs before generating).
    MeasureSettings settings;
    settings.kvScales = KvScalePolicy::FittedPerMeasurement;
    EngineConfiguration configuration;
    configuration.recipe = recipe;
    const auto built = buildEngine(model.config, model.weights, configuration, requests.prompts(), settings);
    const engine::KvScaleTable& scales = built->model().kvQuantizer().scales();
    return io::calibratedKvScales(model.config, scales.keys, scales.values);
}

io::CalibratedKvScales calibrateExportKvScales(const std::string& modelDirectory, const quant::Recipe& recipe,
    const KvScaleProbe& probe, const at::Device& device)
{
    // The recipe before the weights: a recipe without per-tensor FP8 KV scales is refused without loading them.
    const model::ModelConfig config
        = model::loadConfig((std::filesystem::path(modelDirectory) / "config.json").string());
    requirePerTensorFp8Kv(recipe, quant::resolveRecipe(recipe, config), probe);
    return calibrateExportKvScales(loadModelDirectory(modelDirectory, device), recipe, probe);
}

} // namespace mismatch::analysis

#pragma once
// The calibrated FP8 KV-cache scales an export hands to SGLang (io::ExportOptions::kvScales, written as
// sglang_kv_scales.json for --quantization-param-path): the engine that runs the recipe, built as the screens build it
// (buildEngine, rollout_measure.h), calibrates them on probe prompts exactly as a measurement under the
// fitted_per_measurement KV-scale policy does (EngineModel::calibrateKvScales on the prompts in the set's order:
// a BF16 forward over them, amax / 448 per layer for K and for V; engine/engine_model.h), and
// io::calibratedKvScales converts them. Front-ends: `mismatch export --to sglang --kv-probe PROMPTS` and the GUI's
// export dialog.
#include "core/analysis/rollout_measure.h"
#include "core/io/recipe_export.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mismatch::analysis {

// Prompts a KV-scale probe takes by default: 0, every prompt of the set. That is the admission check's default
// (--count 0 with --kv-scale-fit fitted_per_measurement, core/jobs/analysis_jobs.cpp analysisParameters): its
// screens fit FP8 KV scales on every prompt they measure, so an export probed with the same set and the default
// count carries the scales an uncalibrated admission check measured the recipe with.
inline constexpr std::int64_t kDefaultKvProbeCount = 0;

struct KvScaleProbe {
    std::string promptSet; // a prompt set (JSONL, io/prompt_set.h)
    std::int64_t count = kDefaultKvProbeCount; // first N prompts; 0: all
    // The option or field that named the probe, for error messages ("--kv-probe"; the GUI's field label).
    std::string what = "KV-scale probe";
};

// InputError naming probe.what and the recipe unless `plan` (resolved from `recipe`) has an FP8 KV cache whose
// scales are per tensor: a recipe without one has no scales to calibrate, per-head scales are not the single
// per-tensor scale SGLang's file holds, and a per-token-head layer (fp8_per_token_head, int8_per_token_head) has no
// scales to export at all: they are computed from each token at every cache write.
void requirePerTensorFp8Kv(const quant::Recipe& recipe, const quant::RecipePlan& plan, const KvScaleProbe& probe);

// The recipe's calibrated per-tensor KV scales on `model` (loadModelDirectory): the first probe.count prompts of
// probe.promptSet, tokenized as every analysis tokenizes them (promptRequests: the set's template, special tokens),
// each checked against the model's context; the engine for the recipe (buildEngine, KV scales fitted per
// measurement, on model.weights' device) calibrates on them, and io::calibratedKvScales reads its scales with the
// model's model_type. InputError as requirePerTensorFp8Kv, for an empty probe set, or a prompt the model cannot take.
io::CalibratedKvScales calibrateExportKvScales(
    const ModelDirectory& model, const quant::Recipe& recipe, const KvScaleProbe& probe);
// The same after loading the model directory (config.json, tokenizer.json, weights as stored) onto `device`. The
// recipe is checked (requirePerTensorFp8Kv) before the weights are loaded.
io::CalibratedKvScales calibrateExportKvScales(const std::string& modelDirectory, const quant::Recipe& recipe,
    const KvScaleProbe& probe, const at::Device& device = at::Device(at::kCPU));

} // namespace mismatch::analysis

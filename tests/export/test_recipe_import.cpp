// Tests of `mismatch recipe import`: a recipe built back from each quantization description the export writes
// (round trip: export, import, and the imported recipe resolves to the same per-module formats and KV cache as the
// original for the demo model), from real-shaped checkpoint files written here by hand after the sources below, and
// the inputs a recipe cannot express or that are malformed, each an error naming the file and the key.
//
// Sources the hand-written fixtures follow (facts only):
//   compressed-tensors config.json: compressed_tensors/config/base.py CompressionFormat; QuantizationArgs
//     (num_bits, type, symmetric, strategy, block_structure, group_size, dynamic); llm-compressor writes
//     quantization_config with config_groups, ignore, kv_cache_scheme, format, quantization_status, version.
//   ModelOpt: vllm/model_executor/layers/quantization/modelopt.py (00155cdecca722d98e34234c3d172725b7720b7d:
//     hf_quant_config.json {producer, quantization: {quant_algo, kv_cache_quant_algo, exclude_modules,
//     quantized_layers}}; config.json's flat form with ignore and kv_cache_scheme; quant_algo upper-cased before
//     matching). NVIDIA/Model-Optimizer (a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73) writes a per-layer FP8_PB_WO as
//     "fp8_pb_wo" (modelopt/torch/export/model_config.py QUANTIZATION_FP8_PB_WO, quant_utils.py
//     process_layer_quant_config) and config.json's FP8 KV cache as kv_cache_scheme (convert_hf_config.py).
//   vLLM engine arguments: docs/features/quantization/online.md, quantized_kvcache.md (kv_cache_dtype,
//     kv_cache_dtype_skip_layers with indices or sliding_window).
//   verl: verl-project/verl docs/low_precision/fp8.md (actor_rollout_ref.rollout.quantization), engine_kwargs.vllm
//     pass-through.
//   Microscaling: vllm-project/compressed-tensors (ac8e2ba82f4e0d5eaa40069f8fc642738f124cd4)
//     src/compressed_tensors/quantization/quant_scheme.py presets NVFP4, NVFP4A16, MXFP4, MXFP4A16, MXFP8, MXFP8A16
//     and quant_args.py (the fields QuantizationArgs serializes: num_bits, type, symmetric, group_size, strategy,
//     block_structure, dynamic, actorder, scale_dtype as str(dtype), zp_dtype null when symmetric, observer,
//     observer_kwargs); config/base.py CompressionFormat (nvfp4-pack-quantized, mxfp4-pack-quantized,
//     mxfp8-quantized). NVIDIA/Model-Optimizer (a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73) quant_utils.py
//     get_quant_config / process_layer_quant_config ({"quant_algo": "NVFP4", "kv_cache_quant_algo": ...,
//     "group_size": 16, "exclude_modules": [...]}; MXFP4 passed through as "mxfp4"); vLLM
//     vllm/config/quantization.py (00b64d17c045a946e3a047d189beac1437161919: online mxfp8, mxfp4).
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/common/error.h"
#include "core/io/recipe_export.h"
#include "core/io/recipe_import.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace mismatch;

namespace {

const std::string kSourceDir = MISMATCH_SOURCE_DIR;

std::string demoModel()
{
    return kSourceDir + "/resources/models/arith-teacher";
}

model::ModelConfig demoConfig()
{
    return model::loadConfig(demoModel() + "/config.json");
}

std::string readFile(const std::string& path)
{
    std::ifstream stream(path, std::ios::binary);
    std::ostringstream text;
    text << stream.rdbuf();
    return text.str();
}

// Whether two plans give every module the same weights and activations and every layer the same KV cache.
std::string planDifference(const quant::RecipePlan& a, const quant::RecipePlan& b)
{
    for (const auto& [name, module] : a.modules) {
        const quant::ModulePrecision& other = b.modules.at(name);
        if (module.weights != other.weights || module.activations != other.activations) {
            return name + ": " + quant::describe(module.weights) + "/" + quant::toString(module.activations.format)
                + " vs " + quant::describe(other.weights) + "/" + quant::toString(other.activations.format);
        }
    }
    for (size_t layer = 0; layer < a.kvPerLayer.size(); ++layer) {
        if (a.kvPerLayer[layer] != b.kvPerLayer[layer]) {
            return "KV layer " + std::to_string(layer) + ": " + quant::describe(a.kvPerLayer[layer]) + " vs "
                + quant::describe(b.kvPerLayer[layer]);
        }
    }
    return "";
}

std::string importError(const std::string& text, const std::string& file = "hostile.json")
{
    try {
        io::importRecipeText(text, file);
    } catch (const InputError& error) {
        return error.what();
    }
    return "";
}

} // namespace

class TestRecipeImport : public QObject {
    Q_OBJECT

private slots:
    void roundTrip_data();
    void roundTrip();
    void realShapedFiles();
    void notExpressible_data();
    void notExpressible();
    void hostileInputs();
    void cli();
    void modelOptAsModelOptWritesIt();
};

void TestRecipeImport::roundTrip_data()
{
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("target");
    QTest::addColumn<QString>("variant");
    const std::string shipped = kSourceDir + "/resources/recipes/";
    const std::string fixture = kSourceDir + "/tests/export/";
    struct Row {
        std::string recipe;
        const char* target;
        const char* variant;
    };
    // Every export the import reads whose meaning it keeps. Not here: FP8_PB_WO of weight-only recipes (vLLM
    // runs FP8 activations: the import reads that), the SGLang rollout's ignored layers (an environment variable).
    const std::vector<Row> rows = {
        {shipped + "bf16.yaml", "vllm", ""},
        {shipped + "fp8-w8a8-block.yaml", "vllm", ""},
        {shipped + "fp8-per-tensor.yaml", "vllm", ""},
        {fixture + "keep-edges-3layer.yaml", "vllm", ""},
        {fixture + "keep-edges-3layer.yaml", "vllm", "checkpoint"},
        {fixture + "fp8-per-token-head-kv-3layer.yaml", "vllm", ""},
        {fixture + "int8-per-token-head-kv-3layer.yaml", "vllm", ""},
        {fixture + "int8-per-token-head-kv-3layer.yaml", "vllm", "0.20"},
        {shipped + "fp8-w8a8-block.yaml", "vllm", "checkpoint"},
        {shipped + "fp8-per-tensor.yaml", "vllm", "0.21"},
        {shipped + "fp8-per-tensor.yaml", "vllm", "0.19"},
        {shipped + "bf16.yaml", "verl", ""},
        {shipped + "fp8-w8a8-block.yaml", "verl", ""},
        {shipped + "fp8-kv.yaml", "compressed-tensors", ""},
        {shipped + "fp8-w8a8-block.yaml", "compressed-tensors", ""},
        {shipped + "int4-weights.yaml", "compressed-tensors", ""},
        {shipped + "fp8-per-tensor.yaml", "compressed-tensors", ""},
        {fixture + "keep-edges-3layer.yaml", "compressed-tensors", ""},
        {fixture + "weight-only-fp8-3layer.yaml", "compressed-tensors", ""},
        {fixture + "mixed-3layer.yaml", "compressed-tensors", ""},
        {shipped + "int4-weights.yaml", "modelopt", ""},
        {shipped + "fp8-w8a8-block.yaml", "modelopt", ""},
        {fixture + "keep-edges-3layer.yaml", "modelopt", ""},
        {fixture + "mixed-3layer.yaml", "modelopt", ""},
        // The microscaling formats (export_microscaling.cpp). Not here: vLLM's online mxfp4 of a weight-only recipe
        // (the shorthand asks for MXFP4 activations: the import reads that).
        {fixture + "nvfp4-3layer.yaml", "compressed-tensors", ""},
        {fixture + "nvfp4-weight-only-3layer.yaml", "compressed-tensors", ""},
        {fixture + "mxfp4-3layer.yaml", "compressed-tensors", ""},
        {fixture + "mxfp8-3layer.yaml", "compressed-tensors", ""},
        {fixture + "mixed-microscaling-3layer.yaml", "compressed-tensors", ""},
        {fixture + "nvfp4-3layer.yaml", "modelopt", ""},
        {fixture + "nvfp4-weight-only-3layer.yaml", "modelopt", ""},
        {fixture + "mxfp8-3layer.yaml", "modelopt", ""},
        {fixture + "mixed-microscaling-3layer.yaml", "modelopt", ""},
        {fixture + "mxfp8-3layer.yaml", "vllm", ""},
        {fixture + "mxfp4-3layer.yaml", "vllm", ""},
        {fixture + "nvfp4-3layer.yaml", "vllm", "checkpoint"},
        {fixture + "nvfp4-weight-only-3layer.yaml", "vllm", "checkpoint"},
        {fixture + "mxfp8-3layer.yaml", "vllm", "checkpoint"},
    };
    for (const Row& row : rows) {
        const std::string name = row.recipe.substr(row.recipe.rfind('/') + 1) + " via " + row.target
            + (std::string(row.variant).empty() ? "" : std::string(" ") + row.variant);
        QTest::newRow(name.c_str()) << QString::fromStdString(row.recipe) << row.target << row.variant;
    }
}

void TestRecipeImport::roundTrip()
{
    QFETCH(QString, recipe);
    QFETCH(QString, target);
    QFETCH(QString, variant);
    const quant::Recipe original = quant::loadRecipe(recipe.toStdString());
    const quant::RecipePlan originalPlan = quant::resolveRecipe(original, demoConfig());
    io::ExportOptions options;
    options.target = *io::parseExportTarget(target.toStdString());
    if (variant == "checkpoint") {
        options.vllmForm = io::VllmForm::Checkpoint;
    } else if (!variant.isEmpty()) {
        options.targetVersion = variant.toStdString();
    }
    const io::ExportResult exported = io::exportBundle(original, originalPlan, options);
    const std::string file = "exported." + io::fileExtension(options.target);
    const io::ImportedRecipe imported = io::importRecipeText(exported.text, file);
    QCOMPARE(imported.source, target == "verl" ? std::string("verl") : target.toStdString());
    const quant::RecipePlan importedPlan = quant::resolveRecipe(imported.recipe, demoConfig());
    const std::string difference = planDifference(originalPlan, importedPlan);
    QVERIFY2(difference.empty(), (difference + "\n" + exported.text + "\n" + quant::recipeToYaml(imported.recipe)).c_str());
    // ModelOpt's config.json fragment reads the same as hf_quant_config.json.
    if (options.target == io::ExportTarget::ModelOpt) {
        const io::ImportedRecipe flat = io::importRecipeText(exported.files[1].text, "config.json");
        QVERIFY(planDifference(originalPlan, quant::resolveRecipe(flat.recipe, demoConfig())).empty());
    }
}

// Long: one real-shaped file per upstream writer (llm-compressor, ModelOpt, vLLM, verl), each read and checked in turn.
void TestRecipeImport::realShapedFiles()
{
    using nlohmann::json;
    // A checkpoint's whole config.json as llm-compressor writes it: the model's own keys beside quantization_config
    // (FP8_DYNAMIC: per-channel FP8 weights, dynamic per-token activations, lm_head ignored).
    json config = json::parse(readFile(demoModel() + "/config.json"));
    config["quantization_config"] = json::parse(R"({
        "config_groups": {"group_0": {
            "input_activations": {"actorder": null, "block_structure": null, "dynamic": true, "group_size": null,
                "num_bits": 8, "observer": null, "observer_kwargs": {}, "strategy": "token", "symmetric": true,
                "type": "float"},
            "output_activations": null, "targets": ["Linear"],
            "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": null,
                "num_bits": 8, "observer": "minmax", "observer_kwargs": {}, "strategy": "channel", "symmetric": true,
                "type": "float"}}},
        "format": "float-quantized", "global_compression_ratio": null, "ignore": ["lm_head"],
        "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
        "sparsity_config": {}, "transform_config": {}, "version": "0.12.2"})");
    const io::ImportedRecipe ct = io::importRecipeText(config.dump(2), "checkpoint/config.json");
    QCOMPARE(ct.source, std::string("compressed-tensors"));
    QVERIFY(ct.recipe.weights.has_value());
    QVERIFY(ct.recipe.weights->format == quant::WeightFormat::Fp8E4m3);
    QVERIFY(ct.recipe.weights->granularity == quant::Granularity::Channel);
    QVERIFY(ct.recipe.activations->format == quant::ActivationFormat::Fp8E4m3);
    QVERIFY(ct.recipe.rules.empty()); // lm_head is BF16 by the recipe's own default
    QCOMPARE(ct.recipe.name, std::string("config"));

    // An FP8 checkpoint's config.json (quant_method fp8 with 128x128 blocks): vLLM's fp8 method.
    json fp8 = json::parse(readFile(demoModel() + "/config.json"));
    fp8["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"fmt", "e4m3"},
        {"weight_block_size", json::array({128, 128})}, {"ignored_layers", json::array({"model.layers.0.mlp.down_proj"})}};
    const io::ImportedRecipe block = io::importRecipeText(fp8.dump(), "fp8/config.json", "block");
    QCOMPARE(block.source, std::string("vllm"));
    QVERIFY(block.recipe.weights->granularity == quant::Granularity::Block128);
    QCOMPARE(block.recipe.rules.size(), size_t(1));
    QCOMPARE(block.recipe.rules[0].match, std::string("model.layers.0.mlp.down_proj"));
    QVERIFY(block.recipe.rules[0].weights->format == quant::WeightFormat::Bf16);
    QCOMPARE(block.recipe.name, std::string("block"));

    // vllm serve --config YAML, dashes in the keys; an FP8 KV cache with layer 0 skipped.
    const io::ImportedRecipe serve = io::importRecipeText("quantization: fp8_per_channel\n"
                                                          "kv-cache-dtype: fp8\n"
                                                          "kv-cache-dtype-skip-layers: ['0']\n"
                                                          "max-model-len: 4096\n",
        "serve.yaml");
    QCOMPARE(serve.source, std::string("vllm"));
    QVERIFY(serve.recipe.weights->granularity == quant::Granularity::Channel);
    QVERIFY(serve.recipe.kvCache->format == quant::KvFormat::Fp8E4m3);
    QCOMPARE(serve.recipe.rules.size(), size_t(1));
    QCOMPARE(serve.recipe.rules[0].match, std::string("model.layers.0.self_attn"));
    QVERIFY(serve.recipe.rules[0].kvCache->format == quant::KvFormat::Bf16);

    // A verl trainer config with the rollout among other sections, as dotted Hydra overrides.
    const io::ImportedRecipe verl = io::importRecipeText("trainer.total_epochs: 15\n"
                                                         "actor_rollout_ref.rollout.name: vllm\n"
                                                         "++actor_rollout_ref.rollout.quantization: fp8\n"
                                                         "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype: "
                                                         "fp8_e4m3\n",
        "overrides.yaml");
    QCOMPARE(verl.source, std::string("verl"));
    QVERIFY(verl.recipe.weights->granularity == quant::Granularity::Block128);
    QVERIFY(verl.recipe.kvCache->scales == quant::KvScales::PerTensor);

    // ModelOpt's FP8_PB_WO is read as vLLM runs it, with FP8 activations, and the import says so.
    const io::ImportedRecipe pbwo = io::importRecipeText(
        R"({"producer": {"name": "modelopt", "version": "0.37.0"}, "quantization": {"quant_algo": "FP8_PB_WO",
            "kv_cache_quant_algo": null, "exclude_modules": ["lm_head", "model.layers.0*"]}})",
        "hf_quant_config.json");
    QVERIFY(pbwo.recipe.activations->format == quant::ActivationFormat::Fp8E4m3);
    QCOMPARE(pbwo.recipe.rules.size(), size_t(1));
    QCOMPARE(pbwo.recipe.rules[0].match, std::string("model.layers.0*"));
    QVERIFY(!pbwo.notes.empty() && pbwo.notes[0].find("as vLLM runs it") != std::string::npos);
    const quant::RecipePlan plan = quant::resolveRecipe(pbwo.recipe, demoConfig());
    QVERIFY(plan.modules.at("model.layers.0.mlp.up_proj").weights.format == quant::WeightFormat::Bf16);
    QVERIFY(plan.modules.at("model.layers.1.mlp.up_proj").weights.granularity == quant::Granularity::Block128);

    // An NVFP4 checkpoint's quantization_config as llm-compressor writes it: compressed-tensors' NVFP4 preset with
    // every field QuantizationArgs serializes (quant_args.py; scale_dtype "torch.float8_e4m3fn", zp_dtype null when
    // symmetric), format nvfp4-pack-quantized.
    json nvfp4 = json::parse(readFile(demoModel() + "/config.json"));
    nvfp4["quantization_config"] = json::parse(R"({
        "config_groups": {"group_0": {
            "format": "nvfp4-pack-quantized",
            "input_activations": {"actorder": null, "block_structure": null, "dynamic": "local", "group_size": 16,
                "num_bits": 4, "observer": "static_minmax", "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn",
                "strategy": "tensor_group", "symmetric": true, "type": "float", "zp_dtype": null},
            "output_activations": null, "targets": ["Linear"],
            "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 16, "num_bits": 4,
                "observer": "memoryless_minmax", "observer_kwargs": {}, "scale_dtype": "torch.float8_e4m3fn",
                "strategy": "tensor_group", "symmetric": true, "type": "float", "zp_dtype": null}}},
        "format": "nvfp4-pack-quantized", "global_compression_ratio": null, "ignore": ["lm_head"],
        "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed",
        "sparsity_config": {}, "transform_config": {}, "version": "0.14.0"})");
    const io::ImportedRecipe w4a4 = io::importRecipeText(nvfp4.dump(2), "nvfp4/config.json");
    QCOMPARE(w4a4.source, std::string("compressed-tensors"));
    QVERIFY(w4a4.recipe.weights->format == quant::WeightFormat::Nvfp4);
    QVERIFY(w4a4.recipe.weights->granularity == quant::Granularity::Group16);
    QVERIFY(w4a4.recipe.activations->format == quant::ActivationFormat::Nvfp4);
    QVERIFY(w4a4.recipe.rules.empty());
    bool noted = false;
    for (const std::string& note : w4a4.notes) {
        noted = noted || note.find("NVFP4 activations read as the recipe's") != std::string::npos;
    }
    QVERIFY(noted);

    // MXFP4A16 (weights only: groups of 32, scale_dtype torch.uint8) and MXFP8 W8A8 of the same shape.
    const io::ImportedRecipe mxfp4 = io::importRecipeText(R"({"quantization_config": {
        "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
            "weights": {"dynamic": false, "group_size": 32, "num_bits": 4, "scale_dtype": "torch.uint8",
                "strategy": "group", "symmetric": true, "type": "float", "zp_dtype": null}}}}})",
        "mxfp4a16/config.json");
    QVERIFY(mxfp4.recipe.weights->format == quant::WeightFormat::Mxfp4);
    QVERIFY(mxfp4.recipe.weights->granularity == quant::Granularity::Group32);
    QVERIFY(mxfp4.recipe.activations->format == quant::ActivationFormat::Bf16);
    const io::ImportedRecipe mxfp8 = io::importRecipeText(R"({"quantization_config": {
        "quant_method": "compressed-tensors", "format": "mxfp8-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"],
            "input_activations": {"dynamic": true, "group_size": 32, "num_bits": 8, "scale_dtype": "torch.uint8",
                "strategy": "group", "symmetric": true, "type": "float"},
            "weights": {"dynamic": false, "group_size": 32, "num_bits": 8, "scale_dtype": "torch.uint8",
                "strategy": "group", "symmetric": true, "type": "float"}}}}})",
        "mxfp8/config.json");
    QVERIFY(mxfp8.recipe.weights->format == quant::WeightFormat::Mxfp8);
    QVERIFY(mxfp8.recipe.activations->format == quant::ActivationFormat::Mxfp8);

    // ModelOpt's NVFP4 hf_quant_config.json as get_quant_config writes it (quant_algo, kv_cache_quant_algo, then the
    // flattened group_size and exclude_modules), and W4A16_NVFP4 in MIXED_PRECISION beside MXFP8.
    const io::ImportedRecipe modelopt = io::importRecipeText(
        R"({"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": {"quant_algo": "NVFP4",
            "kv_cache_quant_algo": null, "group_size": 16,
            "exclude_modules": ["lm_head", "model.layers.2.mlp.down_proj"]}})",
        "hf_quant_config.json");
    QVERIFY(modelopt.recipe.weights->format == quant::WeightFormat::Nvfp4);
    QVERIFY(modelopt.recipe.activations->format == quant::ActivationFormat::Nvfp4);
    const quant::RecipePlan nvfp4Plan = quant::resolveRecipe(modelopt.recipe, demoConfig());
    QVERIFY(nvfp4Plan.modules.at("model.layers.2.mlp.down_proj").weights.format == quant::WeightFormat::Bf16);
    QVERIFY(nvfp4Plan.modules.at("model.layers.2.mlp.up_proj").activations.format == quant::ActivationFormat::Nvfp4);
    const io::ImportedRecipe mixedModelOpt = io::importRecipeText(
        R"({"quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": null, "quantized_layers": {
            "model.layers.0.mlp.gate_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
            "model.layers.0.mlp.up_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
            "model.layers.1.mlp.down_proj": {"quant_algo": "MXFP8", "group_size": 32}}}})",
        "hf_quant_config.json");
    const quant::RecipePlan mixedPlan = quant::resolveRecipe(mixedModelOpt.recipe, demoConfig());
    QVERIFY(mixedPlan.modules.at("model.layers.0.mlp.up_proj").weights.format == quant::WeightFormat::Nvfp4);
    QVERIFY(mixedPlan.modules.at("model.layers.0.mlp.up_proj").activations.format == quant::ActivationFormat::Bf16);
    QVERIFY(mixedPlan.modules.at("model.layers.1.mlp.down_proj").activations.format == quant::ActivationFormat::Mxfp8);
    QVERIFY(mixedPlan.modules.at("model.layers.1.mlp.up_proj").weights.format == quant::WeightFormat::Bf16);

    // vLLM's online shorthands (vllm/config/quantization.py _ONLINE_SHORTHANDS): mxfp8 is MXFP8 weights and
    // activations.
    const io::ImportedRecipe online = io::importRecipeText("quantization: mxfp8\n", "serve.yaml");
    QCOMPARE(online.source, std::string("vllm"));
    QVERIFY(online.recipe.weights->format == quant::WeightFormat::Mxfp8);
    QVERIFY(online.recipe.activations->format == quant::ActivationFormat::Mxfp8);
}

void TestRecipeImport::notExpressible_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("place");
    QTest::addColumn<QString>("detail");
    const char* ct = R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": %1, "input_activations": %2}},
        "ignore": %3, "kv_cache_scheme": %4}})";
    const QString fp8Channel = R"({"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": "channel"})";
    const QString token = R"({"num_bits": 8, "type": "float", "symmetric": true, "dynamic": true, "strategy": "token"})";
    auto ctRow = [&](const char* name, const QString& weights, const QString& inputs, const QString& ignore,
                     const QString& kv, const char* place, const char* detail) {
        QTest::newRow(name) << QString(ct).arg(weights, inputs, ignore, kv) << place << detail;
    };
    ctRow("static activations", fp8Channel,
        R"({"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": "tensor"})", "[]", "null",
        "quantization_config.config_groups.group_0.input_activations.dynamic", "static activation scales");
    ctRow("asymmetric int4",
        R"({"num_bits": 4, "type": "int", "symmetric": false, "strategy": "group", "group_size": 128})", "null", "[]",
        "null", "quantization_config.config_groups.group_0.weights.symmetric", "asymmetric");
    ctRow("int4 group 32", R"({"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32})",
        "null", "[]", "null", "quantization_config.config_groups.group_0.weights.group_size", "128 elements");
    ctRow("64x64 blocks",
        R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "block", "block_structure": [64, 64]})",
        token, "[]", "null", "quantization_config.config_groups.group_0.weights.block_structure", "128x128");
    ctRow("fp4 groups of 64",
        R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "group", "group_size": 64})", "null", "[]",
        "null", "quantization_config.config_groups.group_0.weights", "num_bits 4, type float, strategy group");
    ctRow("fp8 groups of 32 with float scales",
        R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32,
            "scale_dtype": "torch.float32"})",
        "null", "[]", "null", "quantization_config.config_groups.group_0.weights.scale_dtype", "E8M0");
    ctRow("nvfp4 weights with fp8 inputs",
        R"({"num_bits": 4, "type": "float", "symmetric": true, "strategy": "tensor_group", "group_size": 16})", token,
        "[]", "null", "quantization_config.config_groups.group_0.input_activations",
        "the recipe gives nvfp4 weights bf16 activations or nvfp4 ones");
    ctRow("mxfp8 static inputs",
        R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32})",
        R"({"num_bits": 8, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32,
            "dynamic": false})",
        "[]", "null", "quantization_config.config_groups.group_0.input_activations.dynamic",
        "static activation scales");
    ctRow("regex ignore", fp8Channel, token, R"(["lm_head", "re:.*gate_proj"])", "null",
        "quantization_config.ignore[1]", "regular expression");
    ctRow("ignore not a list", fp8Channel, token, R"("lm_head")", "null", "quantization_config.ignore",
        "expected a list of module names, got a string");
    ctRow("kv per channel", fp8Channel, token, "[]",
        R"({"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": "channel"})",
        "quantization_config.kv_cache_scheme.strategy", "per tensor or per attention head");
    ctRow("weights a string", R"("fp8")", token, "[]", "null", "quantization_config.config_groups.group_0.weights",
        "expected a mapping, got a string");
    QTest::newRow("two Linear groups")
        << QString(R"({"quant_method": "compressed-tensors", "config_groups": {
            "a": {"targets": ["Linear"], "weights": %1}, "b": {"targets": ["Linear"], "weights": %1}}})").arg(fp8Channel)
        << "config_groups.b.targets[0]" << "a second scheme for every linear module (the first is at config_groups.a.targets[0])";
    QTest::newRow("modelopt FP8 static")
        << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "exclude_modules": []}})"
        << "quantization.quant_algo" << "static per-tensor activation scales";
    QTest::newRow("modelopt MXFP4")
        << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "mxfp4", "exclude_modules": []}})"
        << "quantization.quant_algo"
        << "'MXFP4' has no recipe form";
    QTest::newRow("modelopt NVFP4 groups of 32")
        << R"({"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 32}})"
        << "quantization.group_size"
        << "the recipe's NVFP4 groups are 16 elements";
    QTest::newRow("modelopt AWQ pre_quant_scale")
        << R"({"quantization": {"quant_algo": "W4A16_AWQ", "group_size": 128, "pre_quant_scale": true}})"
        << "quantization.pre_quant_scale" << "without an AWQ pre-quantization scale";
    QTest::newRow("modelopt mixed layer W4A8_NVFP4_FP8")
        << R"({"quantization": {"quant_algo": "MIXED_PRECISION", "quantized_layers": {
            "model.layers.0.mlp.up_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
            "model.layers.1.mlp.up_proj": {"quant_algo": "W4A8_NVFP4_FP8", "group_size": 16}}}})"
        << "quantization.quantized_layers.model.layers.1.mlp.up_proj.quant_algo"
        << "'W4A8_NVFP4_FP8' has no recipe form";
    QTest::newRow("modelopt fp8 kv alternative")
        << R"({"quantization": {"quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "kv_cache_quant_algo": "NVFP4"}})"
        << "quantization.kv_cache_quant_algo" << "the recipe's KV cache is bf16 or FP8";
    QTest::newRow("vllm sliding_window")
        << R"({"engine_args": {"kv_cache_dtype": "fp8", "kv_cache_dtype_skip_layers": ["0", "sliding_window"]}})"
        << "engine_args.kv_cache_dtype_skip_layers[1]" << "sliding_window depend on the model";
    QTest::newRow("vllm e5m2 kv")
        << R"({"kv_cache_dtype": "fp8_e5m2"})"
        << "kv_cache_dtype"
        << "the recipe's KV cache is bf16 (auto), fp8_e4m3, fp8_per_token_head or int8_per_token_head";
    QTest::newRow("vllm awq") << R"({"quantization": "awq"})" << "quantization" << "'awq' has no recipe form";
    QTest::newRow("vllm online nvfp4") << R"({"quantization": "nvfp4_per_token"})"
                                       << "quantization"
                                       << "'nvfp4_per_token' has no recipe form";
    QTest::newRow("vllm checkpoint form with a quantization")
        << R"({"engine_args": {"quantization": "mxfp8"}, "quantization_config": {"quant_method": "compressed-tensors",
            "format": "mxfp8-quantized", "config_groups": {"group_0": {"targets": ["Linear"], "weights":
            {"num_bits": 8, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32}}}}})"
        << "engine_args.quantization"
        << "a quantization method beside a checkpoint's quantization_config";
    QTest::newRow("vllm static fp8 checkpoint")
        << R"({"quantization_config": {"quant_method": "fp8", "activation_scheme": "static"}})"
        << "quantization_config.activation_scheme" << "static activation scales";
    QTest::newRow("vllm per-kind override")
        << R"({"quantization": "fp8_per_tensor", "quantization_config": {"linear": {"weight": "fp8_per_block_static"}}})"
        << "quantization_config.linear" << "only ignore is read";
    QTest::newRow("vllm ignore without quantization") << R"({"quantization_config": {"ignore": ["lm_head"]}})"
                                                      << "quantization_config.ignore" << "nothing is quantized";
    QTest::newRow("verl int8 rollout")
        << "actor_rollout_ref:\n  rollout:\n    quantization: experts_int8\n"
        << "actor_rollout_ref.rollout.quantization" << "'experts_int8'";
    QTest::newRow("gptq") << R"({"quantization_config": {"quant_method": "gptq", "bits": 4}})"
                          << "quantization_config.quant_method" << "'gptq' is not read";
    QTest::newRow("not a description") << R"({"architectures": ["Qwen2ForCausalLM"]})" << ""
                                       << "not a quantization description";
    QTest::newRow("a list") << "[1, 2]" << "" << "expected a mapping";
}

void TestRecipeImport::notExpressible()
{
    QFETCH(QString, text);
    QFETCH(QString, place);
    QFETCH(QString, detail);
    const std::string file = text.startsWith("actor") ? "verl.yaml" : "described.json";
    const std::string message = importError(text.toStdString(), file);
    QVERIFY2(!message.empty(), "the import succeeded");
    const std::string prefix = file + (place.isEmpty() ? "" : ":" + place.toStdString()) + ": ";
    QVERIFY2(message.rfind(prefix, 0) == 0, (message + "\n  expected to start with: " + prefix).c_str());
    QVERIFY2(message.find(detail.toStdString()) != std::string::npos, message.c_str());
}

void TestRecipeImport::hostileInputs()
{
    // Malformed and adversarial text: each an InputError naming the file, never a crash or an endless parse.
    const std::string deep = std::string(200, '[') + std::string(200, ']');
    QVERIFY(importError(deep).find("nested deeper than 64 levels") != std::string::npos);
    std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'j'; ++c) {
        bomb += std::string(1, c) + ": &" + c + " [*" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *"
            + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1)
            + ", *" + char(c - 1) + ", *" + char(c - 1) + "]\n";
    }
    const std::string laughs = importError(bomb, "laughs.yaml");
    QVERIFY2(laughs.rfind("laughs.yaml:", 0) == 0, laughs.c_str());
    QVERIFY2(laughs.find("alias") != std::string::npos || laughs.find("nodes") != std::string::npos, laughs.c_str());
    QVERIFY(importError(std::string("{\"quantization\": \"fp8\xff\"}")).find("not valid UTF-8") != std::string::npos);
    QVERIFY(importError("{\"kv_cache_dtype\": 1e999}").rfind("hostile.json", 0) == 0);
    QVERIFY(importError("key: [unclosed", "broken.yaml").rfind("broken.yaml:", 0) == 0);
    QVERIFY(importError("").rfind("hostile.json", 0) == 0);
    QVERIFY(importError("null").find("expected a mapping") != std::string::npos);
    // Wrong types where names and numbers belong.
    QVERIFY(importError(R"({"kv_cache_dtype": "fp8", "kv_cache_dtype_skip_layers": "0"})")
                .find("kv_cache_dtype_skip_layers: expected a list of layer indices, got a string")
        != std::string::npos);
    QVERIFY(importError(R"({"kv_cache_dtype": "fp8", "kv_cache_dtype_skip_layers": ["99999999999"]})")
                .find("is not a layer index")
        != std::string::npos);
    QVERIFY(importError(R"({"quantization": ["fp8"]})").find("quantization: expected a string, got a list")
        != std::string::npos);
    // More rules than a recipe may have: refused with the count.
    nlohmann::json many = {{"quant_method", "compressed-tensors"}, {"config_groups", nlohmann::json::object()}};
    std::vector<std::string> targets;
    for (int i = 0; i < 5000; ++i) {
        targets.push_back("model.layers." + std::to_string(i) + ".mlp.up_proj");
    }
    many["config_groups"]["g"] = {{"targets", targets},
        {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", true}}}};
    QVERIFY(importError(many.dump()).find("5000 rules, over the limit of 4096") != std::string::npos);
    // A file that does not exist, and a directory, through the file reader.
    bool threw = false;
    try {
        io::importRecipe(kSourceDir + "/no-such-file.json");
    } catch (const InputError& error) {
        threw = std::string(error.what()).find("no-such-file.json") != std::string::npos;
    }
    QVERIFY(threw);
    threw = false;
    try {
        io::importRecipe(kSourceDir + "/tests");
    } catch (const InputError& error) {
        threw = true;
    }
    QVERIFY(threw);
}

void TestRecipeImport::cli()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string exported = (dir.path() + "/mixed").toStdString();
    const test::CliResult out = test::runCli({"export", kSourceDir + "/tests/export/mixed-3layer.yaml", "--to",
        "compressed-tensors", "--model", demoModel(), "--out", exported});
    QVERIFY2(out.code == 0, out.err.c_str());
    const std::string recipe = (dir.path() + "/imported.yaml").toStdString();
    const test::CliResult imported = test::runCli({"recipe", "import", exported + "/compressed-tensors.json", "--out",
        recipe, "--name", "from-checkpoint", "--model", demoModel()});
    QVERIFY2(imported.code == 0, imported.err.c_str());
    QVERIFY2(imported.out.find("wrote " + recipe) != std::string::npos, imported.out.c_str());
    const quant::Recipe back = quant::loadRecipe(recipe);
    QCOMPARE(back.name, std::string("from-checkpoint"));
    const quant::Recipe original = quant::loadRecipe(kSourceDir + "/tests/export/mixed-3layer.yaml");
    QVERIFY(planDifference(quant::resolveRecipe(original, demoConfig()), quant::resolveRecipe(back, demoConfig()))
                .empty());
    // The written recipe is checked like any other.
    QCOMPARE(test::runCli({"recipe", "check", recipe, "--model", demoModel()}).code, 0);
    // --json: the source, the recipe and the notes.
    const test::CliResult json = test::runCli({"--json", "recipe", "import", exported + "/compressed-tensors.json"});
    QVERIFY2(json.code == 0, json.err.c_str());
    QCOMPARE(nlohmann::json::parse(json.out)["source"].get<std::string>(), std::string("compressed-tensors"));
    // A module name the model lacks is refused with --model (the recipe names modules of another model).
    const std::string other = (dir.path() + "/other.json").toStdString();
    std::ofstream(other) << R"({"quantization": "fp8_per_block", "quantization_config": {"ignore": ["model.layers.7.mlp.up_proj"]}})";
    const test::CliResult wrong = test::runCli({"recipe", "import", other, "--model", demoModel()});
    QVERIFY(wrong.code != 0);
    QVERIFY2(wrong.err.find("3 layers") != std::string::npos, wrong.err.c_str());
    // An error names the file and the key.
    std::ofstream(other) << R"({"quantization": "fp8_per_block", "quantization_config": {"ignore": ["re:.*"]}})";
    const test::CliResult regex = test::runCli({"recipe", "import", other});
    QVERIFY(regex.code != 0);
    QVERIFY2(regex.err.find(other + ":quantization_config.ignore[0]:") != std::string::npos, regex.err.c_str());
}

void TestRecipeImport::modelOptAsModelOptWritesIt()
{
    // ModelOpt writes a per-layer FP8_PB_WO in lower case ("fp8_pb_wo": modelopt/torch/export/model_config.py
    // QUANTIZATION_FP8_PB_WO, passed through by quant_utils.py process_layer_quant_config, NVIDIA/Model-Optimizer
    // a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73); vLLM upper-cases quant_algo before matching it
    // (vllm/model_executor/layers/quantization/modelopt.py 00155cdecca722d98e34234c3d172725b7720b7d, from_config and
    // _resolve_quant_algo), so the import does too.
    const io::ImportedRecipe mixed = io::importRecipeText(
        R"({"producer": {"name": "modelopt", "version": "0.39.0"}, "quantization": {"quant_algo": "MIXED_PRECISION",
            "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"], "quantized_layers": {
            "model.layers.0.self_attn.q_proj": {"quant_algo": "fp8_pb_wo"},
            "model.layers.0.self_attn.k_proj": {"quant_algo": "fp8_pb_wo"},
            "model.layers.0.self_attn.v_proj": {"quant_algo": "fp8_pb_wo"}}}})",
        "hf_quant_config.json");
    QCOMPARE(mixed.source, std::string("modelopt"));
    const quant::RecipePlan mixedPlan = quant::resolveRecipe(mixed.recipe, demoConfig());
    QVERIFY(mixedPlan.modules.at("model.layers.0.self_attn.k_proj").weights.granularity == quant::Granularity::Block128);
    QVERIFY(mixedPlan.kvPerLayer[0].format == quant::KvFormat::Fp8E4m3);
    const io::ImportedRecipe single = io::importRecipeText(
        R"({"quantization": {"quant_algo": "fp8_pb_wo", "kv_cache_quant_algo": "fp8", "exclude_modules": ["lm_head"]}})",
        "hf_quant_config.json");
    QVERIFY(single.recipe.weights->granularity == quant::Granularity::Block128);
    QVERIFY(single.recipe.kvCache->format == quant::KvFormat::Fp8E4m3);

    // config.json's form, as ModelOpt's convert_hf_quant_config_format writes it (convert_hf_config.py): the FP8 KV
    // cache is kv_cache_scheme {"dynamic": false, "num_bits": 8, "type": "float"}, which vLLM reads there
    // (ModelOptQuantConfigBase.from_config: type float and num_bits 8 -> FP8). It used to be read as BF16.
    const io::ImportedRecipe config = io::importRecipeText(
        R"({"quantization_config": {"config_groups": {}, "ignore": ["lm_head"], "quant_algo": "FP8_PB_WO",
            "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
            "producer": {"name": "modelopt", "version": "0.39.0"}, "quant_method": "modelopt"}})",
        "config.json");
    QCOMPARE(config.source, std::string("modelopt"));
    QVERIFY(config.recipe.kvCache && config.recipe.kvCache->format == quant::KvFormat::Fp8E4m3);
    QVERIFY(config.recipe.kvCache->scales == quant::KvScales::PerTensor);
    bool noted = false;
    for (const std::string& note : config.notes) {
        noted = noted || note.find("quantization_config.kv_cache_scheme: read as vLLM reads") != std::string::npos;
    }
    QVERIFY(noted);
    // kv_cache_quant_algo is hf_quant_config.json's key: vLLM does not read it from config.json, so the KV cache
    // there is BF16, and the import says so.
    const io::ImportedRecipe legacy = io::importRecipeText(
        R"({"quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8_PB_WO", "kv_cache_quant_algo": "FP8",
            "ignore": ["lm_head"]}})",
        "config.json");
    QVERIFY(!legacy.recipe.kvCache || legacy.recipe.kvCache->format == quant::KvFormat::Bf16);
    noted = false;
    for (const std::string& note : legacy.notes) {
        noted = noted || note.find("kv_cache_quant_algo: vLLM reads the KV cache of ModelOpt's config.json from "
                                   "kv_cache_scheme") != std::string::npos;
    }
    QVERIFY(noted);
}

MISMATCH_TEST_GUILESS_MAIN(TestRecipeImport)
#include "test_recipe_import.moc"

// Tests of `mismatch export`: every shipped recipe exported to every target that can express it, compared byte for
// byte with golden files that were written once by the tool and reviewed line by line against each target's
// documented keys; the facts a reviewer checked are also asserted independently below (ignored-module lists and
// scheme keys derived by hand from the recipe text and the 3-layer demo model); and every feature a target cannot
// express is an error naming the feature and the target.
//
// Sources the golden files were re-reviewed against (facts only):
//   vLLM engine arguments: vllm-project/vllm vllm/config/cache.py CacheConfig and
//     docs/features/quantization/quantized_kvcache.md: kv_cache_dtype fp8_e4m3; kv_cache_dtype_skip_layers is a
//     list of strings, layer indices ('0', '2') or attention types ('sliding_window'). calculate_kv_scales was
//     deprecated (vllm-project/vllm PR #37201) and removed (PR #49389): FP8 KV scales come from the checkpoint,
//     else 1.0, so no export writes it.
//   Fused shards: vllm/model_executor/layers/quantization/utils/quant_utils.py is_layer_skipped (fp8, ModelOpt)
//     and compressed_tensors/utils.py should_ignore_layer refuse q/k/v or gate/up shards with different schemes;
//     every target's checkpoint is loaded that way, so the refusal is tested for every target.
//   vLLM online quantization: vllm-project/vllm docs/features/quantization/online.md (--quantization
//     fp8_per_tensor | fp8_per_block, quantization_config.ignore with unfused shard names; the CLI takes
//     --quantization-config JSON) and vllm/config/quantization.py (_ONLINE_SHORTHANDS: fp8_per_channel is
//     per-channel weights with dynamic per-token activations; QuantizationConfigArgs.ignore). The frontend came
//     with PR #38138; the versioned docs of 0.22.0 describe it, so --target-version below 0.22 writes `fp8`.
//   vLLM fp8 checkpoint config: vllm/model_executor/layers/quantization/fp8.py Fp8Config (quant_method fp8,
//     activation_scheme, weight_block_size, ignored_layers).
//   SGLang: sgl-project/sglang docs/backend/quantization.md (Online Quantization: --quantization fp8 on a BF16
//     checkpoint) and its environment registry (SGLANG_FP8_IGNORED_LAYERS = EnvStr, comma-separated module names;
//     verl PR #6915 documents it for the SGLang FP8 rollout).
//   verl: verl docs/advance/fp8.md (actor_rollout_ref.rollout.quantization, 128x128-block FP8 rollout for vLLM and
//     SGLang); engine_kwargs.vllm / engine_kwargs.sglang default to {} in verl/trainer/config, so overrides of
//     their keys need Hydra's `+`.
//   compressed-tensors: src/compressed_tensors/config/base.py CompressionFormat (float-quantized,
//     naive-quantized, pack-quantized, mixed-precision); a mixed-precision config names each group's format
//     (as sglang's compressed_tensors tests build it: "format": "mixed-precision" with per-group "format").
//   ModelOpt: vllm/model_executor/layers/quantization/modelopt.py (QUANT_ALGOS FP8, FP8_PER_CHANNEL_PER_TOKEN,
//     FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION with quantized_layers; ModelOptFp8PbWoLinearMethod
//     runs FP8_PB_WO with dynamic 1x128 activations; from_config reads config.json's flat form with `ignore`).
//     W4A16_AWQ is TensorRT-LLM's (tensorrt_llm QuantAlgo), not in vLLM's list.
//   llm-compressor oneshot: vLLM docs/features/quantization/quantized_kvcache.md (oneshot(model, dataset, recipe,
//     max_seq_length, num_calibration_samples); save_pretrained(save_dir, save_compressed=True)).
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/io/recipe_export.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "tests/common/test_main.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using namespace mismatch;

namespace {

const QString kSourceDir = QStringLiteral(MISMATCH_SOURCE_DIR);

std::string shippedRecipe(const std::string& name)
{
    return (kSourceDir + "/resources/recipes/").toStdString() + name;
}

std::string fixture(const std::string& name)
{
    return (kSourceDir + "/tests/export/").toStdString() + name;
}

std::string demoModel()
{
    return (kSourceDir + "/resources/models/arith-teacher").toStdString();
}

std::string readFile(const std::string& path)
{
    std::ifstream stream(path, std::ios::binary);
    std::ostringstream text;
    text << stream.rdbuf();
    return text.str();
}

using test::CliResult;
using test::runCli;

// Exports `recipePath` against the demo model in-process; the error text when it throws.
std::string exportError(const std::string& recipePath, const io::ExportOptions& options)
{
    const quant::Recipe recipe = quant::loadRecipe(recipePath);
    const model::ModelConfig config = model::loadConfig(demoModel() + "/config.json");
    const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
    try {
        io::exportRecipe(recipe, plan, options);
    } catch (const InputError& error) {
        return error.what();
    }
    return "";
}

std::string exportError(const std::string& recipePath, io::ExportTarget target, std::int64_t staleness = 0)
{
    io::ExportOptions options;
    options.target = target;
    options.staleness = staleness;
    return exportError(recipePath, options);
}

io::ExportResult exportResult(const std::string& recipePath, const io::ExportOptions& options)
{
    const quant::Recipe recipe = quant::loadRecipe(recipePath);
    const model::ModelConfig config = model::loadConfig(demoModel() + "/config.json");
    return io::exportBundle(recipe, quant::resolveRecipe(recipe, config), options);
}

std::string exportText(const std::string& recipePath, const io::ExportOptions& options)
{
    return exportResult(recipePath, options).text;
}

std::string exportText(const std::string& recipePath, io::ExportTarget target)
{
    io::ExportOptions options;
    options.target = target;
    return exportText(recipePath, options);
}

// Whether one of `warnings` contains `part`.
bool warns(const std::vector<std::string>& warnings, const std::string& part)
{
    for (const std::string& warning : warnings) {
        if (warning.find(part) != std::string::npos) {
            return true;
        }
    }
    return false;
}

// The seven projections of one layer, by hand.
std::vector<std::string> layerModules(int layer)
{
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    return {prefix + "self_attn.q_proj", prefix + "self_attn.k_proj", prefix + "self_attn.v_proj",
        prefix + "self_attn.o_proj", prefix + "mlp.gate_proj", prefix + "mlp.up_proj", prefix + "mlp.down_proj"};
}

// keep-edges-3layer.yaml leaves layer 0, layer 2's down_proj and lm_head in BF16.
std::vector<std::string> keepEdgesIgnored()
{
    std::vector<std::string> names = layerModules(0);
    names.push_back("model.layers.2.mlp.down_proj");
    names.push_back("lm_head");
    return names;
}

} // namespace

class TestExport : public QObject {
    Q_OBJECT

private:
    QTemporaryDir temporary_;

    std::string writeRecipe(const std::string& name, const std::string& text)
    {
        const std::string path = (temporary_.path() + "/").toStdString() + name;
        std::ofstream(path) << text;
        return path;
    }

private slots:
    void initTestCase();
    void targetNames();
    void goldenFiles_data();
    void goldenFiles();
    void goldenFactsByHand();
    void vllmPerLayerKvExceptions();
    void noExportWritesCalculateKvScales();
    void severalSchemesForLlmCompressor();
    void mixedPrecisionByHand();
    void warningsSayWhatRunsDifferently();
    void optionsOnlyForTheirTarget();
    void readyToRunDirectory();
    void notExpressible_data();
    void notExpressible();
    void errorsAreLocatedInTheRecipe();
    void shippedKeepEdgesNeedsFourLayers();
    void shippedKeepEdgesOnFourLayers();
    void cliStdoutAndJson();
    void atomicWriteLeavesNoTemporary();
};

void TestExport::initTestCase()
{
    QVERIFY(temporary_.isValid());
}

void TestExport::targetNames()
{
    for (const std::string& name : io::exportTargetChoices()) {
        const auto target = io::parseExportTarget(name);
        QVERIFY(target.has_value());
        QCOMPARE(io::toString(*target), name);
    }
    QVERIFY(!io::parseExportTarget("tensorrt-llm").has_value());
    QCOMPARE(io::fileExtension(io::ExportTarget::Sglang), std::string("json"));
    QCOMPARE(io::fileExtension(io::ExportTarget::Vllm), std::string("json"));
    QCOMPARE(io::fileExtension(io::ExportTarget::LlmCompressor), std::string("yaml"));
    QCOMPARE(io::fileExtension(io::ExportTarget::CompressedTensors), std::string("json"));
    QCOMPARE(io::fileExtension(io::ExportTarget::Verl), std::string("yaml"));
    QCOMPARE(io::fileExtension(io::ExportTarget::ModelOpt), std::string("json"));
}

void TestExport::goldenFiles_data()
{
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<QString>("target");
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("golden");
    struct Row {
        const char* recipe; // shipped name, or tests/export fixture when prefixed with "fixture:"
        const char* target;
        QStringList args; // further `mismatch export` options
        const char* variant; // golden file name part for the options ("" without)
    };
    // Every (recipe, target, form) that the target can express; the others are in notExpressible. The comment of
    // each group names the source the keys of its golden files were reviewed against (see the top of this file).
    const std::vector<Row> rows = {
        // vLLM online form (docs/features/quantization/online.md; vllm/config/quantization.py _ONLINE_SHORTHANDS,
        // QuantizationConfigArgs.ignore; vllm/config/cache.py CacheConfig for the KV keys).
        {"bf16.yaml", "vllm", {}, ""},
        {"fp8-w8a8-block.yaml", "vllm", {}, ""},
        {"fp8-per-tensor.yaml", "vllm", {}, ""},
        {"fixture:keep-edges-3layer.yaml", "vllm", {}, ""},
        // vLLM FP8-checkpoint form (vllm/model_executor/layers/quantization/fp8.py Fp8Config keys).
        {"fp8-w8a8-block.yaml", "vllm", {"--vllm-form", "checkpoint"}, "checkpoint"},
        {"fixture:keep-edges-3layer.yaml", "vllm", {"--vllm-form", "checkpoint"}, "checkpoint"},
        // vLLM before the online frontend: quantization fp8 (the fp8 docs' "Online Dynamic Quantization", seen in the
        // 0.5.2 and 0.6.3 docs: --quantization fp8 on a BF16 checkpoint, per-tensor scales).
        {"fp8-per-tensor.yaml", "vllm", {"--target-version", "0.21"}, "0.21"},
        // SGLang (docs/backend/quantization.md Online Quantization; SGLANG_FP8_IGNORED_LAYERS).
        {"bf16.yaml", "sglang", {}, ""},
        {"fp8-per-tensor.yaml", "sglang", {}, ""},
        // verl (docs/advance/fp8.md; engine_kwargs.vllm / engine_kwargs.sglang).
        {"bf16.yaml", "verl", {}, ""},
        {"fp8-w8a8-block.yaml", "verl", {}, ""},
        {"fixture:keep-edges-3layer.yaml", "verl", {"--rollout", "sglang"}, "sglang"},
        // llm-compressor (QuantizationModifier preset schemes, config_groups) and compressed-tensors
        // (compressed_tensors/config/base.py CompressionFormat; QuantizationArgs).
        {"fp8-kv.yaml", "llm-compressor", {}, ""},
        {"fp8-kv.yaml", "compressed-tensors", {}, ""},
        {"fp8-w8a8-block.yaml", "llm-compressor", {}, ""},
        {"fp8-w8a8-block.yaml", "compressed-tensors", {}, ""},
        {"int4-weights.yaml", "llm-compressor", {}, ""},
        {"int4-weights.yaml", "compressed-tensors", {}, ""},
        {"fp8-per-tensor.yaml", "llm-compressor", {}, ""},
        {"fp8-per-tensor.yaml", "compressed-tensors", {}, ""},
        {"fixture:keep-edges-3layer.yaml", "llm-compressor", {}, ""},
        {"fixture:keep-edges-3layer.yaml", "compressed-tensors", {}, ""},
        {"fixture:weight-only-fp8-3layer.yaml", "llm-compressor", {}, ""},
        {"fixture:weight-only-fp8-3layer.yaml", "compressed-tensors", {}, ""}, // naive-quantized
        {"fixture:mixed-3layer.yaml", "llm-compressor", {}, ""},
        {"fixture:mixed-3layer.yaml", "compressed-tensors", {}, ""}, // mixed-precision
        // ModelOpt (vllm/model_executor/layers/quantization/modelopt.py QUANT_ALGOS, ModelOptMixedPrecisionConfig).
        {"int4-weights.yaml", "modelopt", {}, ""},
        {"fp8-w8a8-block.yaml", "modelopt", {}, ""}, // FP8_PB_WO
        {"fixture:keep-edges-3layer.yaml", "modelopt", {}, ""},
        {"fixture:mixed-3layer.yaml", "modelopt", {}, ""}, // MIXED_PRECISION
    };
    for (const Row& row : rows) {
        const std::string recipe = row.recipe;
        const bool isFixture = recipe.rfind("fixture:", 0) == 0;
        const std::string file = isFixture ? recipe.substr(8) : recipe;
        const std::string stem = file.substr(0, file.size() - 5);
        const auto target = io::parseExportTarget(row.target);
        const std::string variant = std::string(row.variant).empty() ? "" : std::string(".") + row.variant;
        const std::string golden = stem + "." + row.target + variant + "." + io::fileExtension(*target);
        QTest::newRow(golden.c_str()) << QString::fromStdString(isFixture ? fixture(file) : shippedRecipe(file))
                                      << row.target << row.args << QString::fromStdString(golden);
    }
}

void TestExport::goldenFiles()
{
    QFETCH(QString, recipe);
    QFETCH(QString, target);
    QFETCH(QStringList, args);
    QFETCH(QString, golden);
    const std::string out = (temporary_.path() + "/" + golden).toStdString();
    std::vector<std::string> arguments
        = {"export", recipe.toStdString(), "--to", target.toStdString(), "--model", demoModel(), "--out", out};
    for (const QString& arg : args) {
        arguments.push_back(arg.toStdString());
    }
    const CliResult result = runCli(arguments);
    QVERIFY2(result.code == 0, result.err.c_str());
    const std::string expected = readFile(fixture("golden/" + golden.toStdString()));
    QVERIFY2(!expected.empty(), ("missing golden file " + golden.toStdString()).c_str());
    const std::string actual = readFile(out);
    if (actual != expected) {
        qWarning("%s", ("export differs from the golden file:\n" + actual).c_str());
    }
    QVERIFY(actual == expected);
}

// What the golden files were reviewed for, asserted from the recipe text and the demo model by hand.
void TestExport::goldenFactsByHand()
{
    using nlohmann::json;
    // keep-edges-3layer to vLLM (online): fp8_per_block, layer 0 + layer 2's down_proj + lm_head ignored by their
    // unfused names; FP8 KV cache in every layer (per-tensor scales, measured once).
    const json vllm = json::parse(exportText(fixture("keep-edges-3layer.yaml"), io::ExportTarget::Vllm));
    QVERIFY(!vllm.contains("quantization_config")); // online: the checkpoint has none
    QCOMPARE(vllm["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_block"));
    QCOMPARE(vllm["engine_args"]["quantization_config"]["ignore"].get<std::vector<std::string>>(), keepEdgesIgnored());
    QCOMPARE(vllm["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    QVERIFY(!vllm["engine_args"].contains("kv_cache_dtype_skip_layers"));

    // The same as an FP8 checkpoint's config: fp8 with 128x128 blocks, dynamic activations, ignored_layers.
    io::ExportOptions checkpoint;
    checkpoint.target = io::ExportTarget::Vllm;
    checkpoint.vllmForm = io::VllmForm::Checkpoint;
    const json fp8Checkpoint = json::parse(exportText(fixture("keep-edges-3layer.yaml"), checkpoint));
    QVERIFY(fp8Checkpoint["form"].get<std::string>().find("already stored in FP8") != std::string::npos);
    QCOMPARE(fp8Checkpoint["quantization_config"]["quant_method"].get<std::string>(), std::string("fp8"));
    QCOMPARE(fp8Checkpoint["quantization_config"]["activation_scheme"].get<std::string>(), std::string("dynamic"));
    QCOMPARE(fp8Checkpoint["quantization_config"]["weight_block_size"], json({128, 128}));
    QCOMPARE(fp8Checkpoint["quantization_config"]["ignored_layers"].get<std::vector<std::string>>(),
        keepEdgesIgnored());
    QCOMPARE(fp8Checkpoint["engine_args"]["quantization"].get<std::string>(), std::string("fp8"));

    // fp8-per-tensor to vLLM: fp8_per_tensor, only lm_head ignored; before 0.22 plain `fp8` and no ignore list.
    const json perTensor = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Vllm));
    QCOMPARE(perTensor["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_tensor"));
    QCOMPARE(perTensor["engine_args"]["quantization_config"]["ignore"], json({"lm_head"}));
    io::ExportOptions legacy;
    legacy.target = io::ExportTarget::Vllm;
    legacy.targetVersion = "0.21.2";
    const json old = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), legacy));
    QCOMPARE(old["engine_args"]["quantization"].get<std::string>(), std::string("fp8"));
    QVERIFY(!old["engine_args"].contains("quantization_config"));
    // A channel recipe is vLLM's fp8_per_channel shorthand (per-channel weights, dynamic per-token activations).
    const std::string channel = writeRecipe("channel.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: channel}\n"
        "activations: {format: fp8_e4m3}\n");
    QCOMPARE(json::parse(exportText(channel, io::ExportTarget::Vllm))["engine_args"]["quantization"],
        json("fp8_per_channel"));

    // bf16 to vLLM: nothing quantized, KV cache in the model dtype.
    const json bf16 = json::parse(exportText(shippedRecipe("bf16.yaml"), io::ExportTarget::Vllm));
    QCOMPARE(bf16["engine_args"], json({{"kv_cache_dtype", "auto"}}));

    // fp8-per-tensor to SGLang: online fp8, lm_head left in BF16 through the environment, FP8 KV cache.
    const json sglang = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Sglang));
    QCOMPARE(sglang["server_args"]["quantization"].get<std::string>(), std::string("fp8"));
    QCOMPARE(sglang["server_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    QCOMPARE(sglang["env"]["SGLANG_FP8_IGNORED_LAYERS"].get<std::string>(), std::string("lm_head"));

    // int4-weights to compressed-tensors: W4A16 = 4-bit symmetric int, groups of 128, no activation quantization,
    // packed format.
    const json int4 = json::parse(exportText(shippedRecipe("int4-weights.yaml"), io::ExportTarget::CompressedTensors));
    const json& config = int4["quantization_config"];
    QCOMPARE(config["quant_method"].get<std::string>(), std::string("compressed-tensors"));
    QCOMPARE(config["format"].get<std::string>(), std::string("pack-quantized"));
    const json& weights = config["config_groups"]["group_0"]["weights"];
    QCOMPARE(weights["num_bits"].get<int>(), 4);
    QCOMPARE(weights["type"].get<std::string>(), std::string("int"));
    QCOMPARE(weights["strategy"].get<std::string>(), std::string("group"));
    QCOMPARE(weights["group_size"].get<int>(), 128);
    QVERIFY(config["config_groups"]["group_0"]["input_activations"].is_null());
    QCOMPARE(config["config_groups"]["group_0"]["targets"], json({"Linear"}));
    QCOMPARE(config["ignore"], json({"lm_head"}));
    QVERIFY(config["kv_cache_scheme"].is_null());

    // fp8-kv to compressed-tensors: no weight groups, KV cache 8-bit float with one scale per attention head.
    const json kv = json::parse(exportText(shippedRecipe("fp8-kv.yaml"), io::ExportTarget::CompressedTensors));
    QVERIFY(kv["quantization_config"]["config_groups"].empty());
    QVERIFY(kv["quantization_config"]["ignore"].empty());
    QCOMPARE(kv["quantization_config"]["kv_cache_scheme"]["strategy"].get<std::string>(), std::string("attn_head"));
    QCOMPARE(kv["quantization_config"]["kv_cache_scheme"]["num_bits"].get<int>(), 8);
    QCOMPARE(kv["quantization_config"]["kv_cache_scheme"]["type"].get<std::string>(), std::string("float"));

    // int4-weights to ModelOpt: W4A16_AWQ, 128-element groups, nothing on the KV cache, lm_head excluded.
    const json modelopt = json::parse(exportText(shippedRecipe("int4-weights.yaml"), io::ExportTarget::ModelOpt));
    QCOMPARE(modelopt["producer"]["name"].get<std::string>(), std::string("modelopt"));
    QCOMPARE(modelopt["quantization"]["quant_algo"].get<std::string>(), std::string("W4A16_AWQ"));
    QCOMPARE(modelopt["quantization"]["group_size"].get<int>(), 128);
    QVERIFY(modelopt["quantization"]["kv_cache_quant_algo"].is_null());
    QCOMPARE(modelopt["quantization"]["exclude_modules"], json({"lm_head"}));

    // The llm-compressor recipes name the preset schemes that match exactly, else explicit config_groups.
    const std::string block = exportText(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::LlmCompressor);
    QVERIFY(block.find("scheme: FP8_BLOCK\n") != std::string::npos);
    QVERIFY(block.find("targets: [Linear]\n") != std::string::npos);
    QVERIFY(block.find("ignore: [lm_head]\n") != std::string::npos);
    const std::string tensor = exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::LlmCompressor);
    QVERIFY(tensor.find("\n      scheme:") == std::string::npos); // FP8 preset has static activations: no preset fits
    QVERIFY(tensor.find("strategy: tensor") != std::string::npos);
    QVERIFY(tensor.find("strategy: token") != std::string::npos);
    QVERIFY(tensor.find("kv_cache_scheme: {num_bits: 8, type: float") != std::string::npos);

    // verl: the block recipe turns fp8 rollout on; KV stays in the model dtype; nested YAML under
    // actor_rollout_ref.rollout.
    const std::string verl = exportText(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::Verl);
    QVERIFY(verl.find("actor_rollout_ref:\n  rollout:\n    name: vllm\n    quantization: fp8\n") != std::string::npos);
    QVERIFY(verl.find("    engine_kwargs:\n      vllm:\n        kv_cache_dtype: auto\n") != std::string::npos);
}

void TestExport::vllmPerLayerKvExceptions()
{
    const std::string path = writeRecipe("kv-edges.yaml",
        "version: 1\n"
        "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
        "rules:\n"
        "  - match: \"model.layers.{0,2}.self_attn\"\n"
        "    kv_cache: {format: bf16}\n");
    const nlohmann::json vllm = nlohmann::json::parse(exportText(path, io::ExportTarget::Vllm));
    QCOMPARE(vllm["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    // Strings, as vLLM's CacheConfig declares them (list[str]: '0', '2' or 'sliding_window').
    QCOMPARE(vllm["engine_args"]["kv_cache_dtype_skip_layers"], nlohmann::json({"0", "2"}));
    QVERIFY(vllm["engine_args"]["kv_cache_dtype_skip_layers"][0].is_string());
    QVERIFY(!vllm.contains("quantization_config")); // online form: nothing quantized, no quantization key
    QVERIFY(!vllm["engine_args"].contains("quantization"));
    QVERIFY(!vllm["engine_args"].contains("calculate_kv_scales"));
}

void TestExport::noExportWritesCalculateKvScales()
{
    // Current vLLM rejects calculate_kv_scales (removed in vllm-project/vllm PR #49389); no vllm or verl export
    // may contain it, whatever the recipe's KV cache. Every recipe below quantizes the KV cache, so each export
    // is one that used to write the key.
    std::vector<std::string> recipes = {shippedRecipe("fp8-per-tensor.yaml"), fixture("keep-edges-3layer.yaml"),
        writeRecipe("kv-skip.yaml",
            "version: 1\n"
            "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
            "rules:\n"
            "  - match: \"model.layers.1.self_attn\"\n"
            "    kv_cache: {format: bf16}\n"),
        writeRecipe("block-kv.yaml",
            "version: 1\n"
            "weights: {format: fp8_e4m3, granularity: block128}\n"
            "activations: {format: fp8_e4m3}\n"
            "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n")};
    // Every form of the engines that run the KV cache: vLLM online and checkpoint, verl (both rollouts), SGLang.
    std::vector<io::ExportOptions> forms(5);
    forms[0].target = io::ExportTarget::Vllm;
    forms[1].target = io::ExportTarget::Vllm;
    forms[1].vllmForm = io::VllmForm::Checkpoint;
    forms[2].target = io::ExportTarget::Verl;
    forms[3].target = io::ExportTarget::Verl;
    forms[3].verlRollout = io::VerlRollout::Sglang;
    forms[4].target = io::ExportTarget::Sglang;
    int exported = 0;
    for (const std::string& recipe : recipes) {
        for (const io::ExportOptions& options : forms) {
            if (!exportError(recipe, options).empty()) {
                continue; // a recipe the target refuses (tested in notExpressible)
            }
            const io::ExportResult result = exportResult(recipe, options);
            QVERIFY2(result.text.find("fp8_e4m3") != std::string::npos, result.text.c_str()); // the KV cache
            for (const io::ExportFile& file : result.files) { // the ready-to-run files too
                QVERIFY2(file.text.find("calculate_kv_scales") == std::string::npos, file.text.c_str());
            }
            // No export can set the KV scales: each says that 1.0 is used without checkpoint scales.
            QVERIFY(warns(result.warnings, "uses 1.0 where it has none"));
            ++exported;
        }
    }
    // vllm online: all four recipes; vllm checkpoint: all four; verl (vLLM rollout): kv-skip.yaml and block-kv.yaml
    // (it refuses per-tensor weights and BF16 layers); verl (SGLang rollout): keep-edges-3layer.yaml and
    // block-kv.yaml (no per-layer KV exceptions, no per-tensor weights); SGLang: fp8-per-tensor.yaml (no blocks, no
    // per-layer KV exceptions).
    QCOMPARE(exported, 4 + 4 + 2 + 2 + 1);
    // The skip list is strings in both: vLLM's JSON and verl's YAML (quoted, so that YAML does not read integers).
    const std::string vllm = exportText(recipes[2], io::ExportTarget::Vllm);
    QVERIFY2(vllm.find("\"kv_cache_dtype_skip_layers\": [\n      \"1\"\n    ]") != std::string::npos, vllm.c_str());
    const std::string verl = exportText(recipes[2], io::ExportTarget::Verl);
    QVERIFY2(verl.find("        kv_cache_dtype_skip_layers: [\"1\"]\n") != std::string::npos, verl.c_str());
}

void TestExport::severalSchemesForLlmCompressor()
{
    // Layers 0-1 block-FP8, layer 2 per-channel FP8: two config groups naming their modules.
    const std::string path = writeRecipe("two-schemes.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: block128}\n"
        "activations: {format: fp8_e4m3}\n"
        "rules:\n"
        "  - match: \"model.layers.2.*\"\n"
        "    weights: {format: fp8_e4m3, granularity: channel}\n");
    const nlohmann::json config
        = nlohmann::json::parse(exportText(path, io::ExportTarget::CompressedTensors))["quantization_config"];
    QCOMPARE(config["config_groups"].size(), size_t(2));
    std::vector<std::string> first = layerModules(0);
    const std::vector<std::string> layer1 = layerModules(1);
    first.insert(first.end(), layer1.begin(), layer1.end());
    QCOMPARE(config["config_groups"]["group_0"]["targets"].get<std::vector<std::string>>(), first);
    QCOMPARE(config["config_groups"]["group_0"]["weights"]["strategy"].get<std::string>(), std::string("block"));
    QCOMPARE(config["config_groups"]["group_1"]["targets"].get<std::vector<std::string>>(), layerModules(2));
    QCOMPARE(config["config_groups"]["group_1"]["weights"]["strategy"].get<std::string>(), std::string("channel"));
    QCOMPARE(
        config["config_groups"]["group_1"]["input_activations"]["strategy"].get<std::string>(), std::string("token"));
    // Both groups are float-quantized: one checkpoint format, no per-group format.
    QCOMPARE(config["format"].get<std::string>(), std::string("float-quantized"));
    QVERIFY(!config["config_groups"]["group_0"].contains("format"));
}

void TestExport::mixedPrecisionByHand()
{
    using nlohmann::json;
    // mixed-3layer.yaml: layers 0-1 block FP8 with FP8 inputs, layer 2 INT4 weight-only, lm_head BF16.
    std::vector<std::string> fp8Modules = layerModules(0);
    const std::vector<std::string> layer1 = layerModules(1);
    fp8Modules.insert(fp8Modules.end(), layer1.begin(), layer1.end());
    const json ct = json::parse(exportText(fixture("mixed-3layer.yaml"), io::ExportTarget::CompressedTensors));
    const json& config = ct["quantization_config"];
    QCOMPARE(config["format"].get<std::string>(), std::string("mixed-precision"));
    QCOMPARE(config["config_groups"]["group_0"]["format"].get<std::string>(), std::string("float-quantized"));
    QCOMPARE(config["config_groups"]["group_0"]["targets"].get<std::vector<std::string>>(), fp8Modules);
    QCOMPARE(config["config_groups"]["group_1"]["format"].get<std::string>(), std::string("pack-quantized"));
    QCOMPARE(config["config_groups"]["group_1"]["targets"].get<std::vector<std::string>>(), layerModules(2));
    QCOMPARE(config["config_groups"]["group_1"]["weights"]["num_bits"].get<int>(), 4);
    QVERIFY(config["config_groups"]["group_1"]["input_activations"].is_null());
    QCOMPARE(config["ignore"], json({"lm_head"}));

    // ModelOpt: MIXED_PRECISION, each quantized module with its own quant_algo, W4A16_AWQ with its group size.
    io::ExportOptions options;
    options.target = io::ExportTarget::ModelOpt;
    const io::ExportResult result = exportResult(fixture("mixed-3layer.yaml"), options);
    const json modelopt = json::parse(result.text);
    QCOMPARE(modelopt["quantization"]["quant_algo"].get<std::string>(), std::string("MIXED_PRECISION"));
    const json& layers = modelopt["quantization"]["quantized_layers"];
    QCOMPARE(layers.size(), size_t(21));
    for (const std::string& name : fp8Modules) {
        QCOMPARE(layers[name], json({{"quant_algo", "FP8_PB_WO"}}));
    }
    for (const std::string& name : layerModules(2)) {
        QCOMPARE(layers[name], json({{"quant_algo", "W4A16_AWQ"}, {"group_size", 128}}));
    }
    QVERIFY(!layers.contains("lm_head"));
    QCOMPARE(modelopt["quantization"]["exclude_modules"], json({"lm_head"}));
    QCOMPARE(modelopt["quantization"]["kv_cache_quant_algo"].get<std::string>(), std::string("FP8"));
    // W4A16_AWQ is TensorRT-LLM's: the export says so.
    QVERIFY(warns(result.warnings, "W4A16_AWQ (on model.layers.2.self_attn.q_proj"));
    QVERIFY(warns(result.warnings, "TensorRT-LLM"));
    // The config.json fragment: quant_method modelopt, the same algorithm and layers, `ignore` for the excluded.
    const io::ExportFile* fragment = nullptr;
    for (const io::ExportFile& file : result.files) {
        fragment = file.name == "config_quantization_config.json" ? &file : fragment;
    }
    QVERIFY(fragment != nullptr);
    const json flat = json::parse(fragment->text)["quantization_config"];
    QCOMPARE(flat["quant_method"].get<std::string>(), std::string("modelopt"));
    QCOMPARE(flat["quant_algo"].get<std::string>(), std::string("MIXED_PRECISION"));
    QCOMPARE(flat["ignore"], json({"lm_head"}));
    QCOMPARE(flat["quantized_layers"], layers);
}

void TestExport::warningsSayWhatRunsDifferently()
{
    // Block-FP8 weight-only to ModelOpt: FP8_PB_WO, which vLLM runs with FP8 activations.
    const std::string blockWeightOnly = writeRecipe("block-weight-only.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: block128}\n"
        "activations: {format: bf16}\n");
    io::ExportOptions modelopt;
    modelopt.target = io::ExportTarget::ModelOpt;
    const io::ExportResult pbwo = exportResult(blockWeightOnly, modelopt);
    QCOMPARE(nlohmann::json::parse(pbwo.text)["quantization"]["quant_algo"].get<std::string>(),
        std::string("FP8_PB_WO"));
    QVERIFY(warns(pbwo.warnings, "vLLM runs FP8_PB_WO with FP8 activations"));
    // The same recipe to compressed-tensors is exact: naive-quantized weight-only, no warning.
    io::ExportOptions ct;
    ct.target = io::ExportTarget::CompressedTensors;
    const io::ExportResult naive = exportResult(blockWeightOnly, ct);
    QCOMPARE(nlohmann::json::parse(naive.text)["quantization_config"]["format"].get<std::string>(),
        std::string("naive-quantized"));
    QVERIFY(naive.warnings.empty());
    // vLLM online per-tensor: the activation scale granularity differs by GPU.
    io::ExportOptions vllm;
    vllm.target = io::ExportTarget::Vllm;
    const io::ExportResult perTensor = exportResult(shippedRecipe("fp8-per-tensor.yaml"), vllm);
    QVERIFY(warns(perTensor.warnings, "fp8_per_tensor scales activations per tensor"));
    QVERIFY(warns(perTensor.warnings, "uses 1.0 where it has none"));
    // A BF16 recipe runs as written everywhere it exports.
    QVERIFY(exportResult(shippedRecipe("bf16.yaml"), vllm).warnings.empty());
    // The CLI prints warnings on stderr and keeps stdout the config file alone.
    const CliResult cli
        = runCli({"export", shippedRecipe("fp8-per-tensor.yaml"), "--to", "vllm", "--model", demoModel()});
    QVERIFY2(cli.code == 0, cli.err.c_str());
    QVERIFY(cli.err.find("warning: vLLM's fp8_per_tensor") != std::string::npos);
    QCOMPARE(cli.out, readFile(fixture("golden/fp8-per-tensor.vllm.json")));
}

void TestExport::optionsOnlyForTheirTarget()
{
    io::ExportOptions form;
    form.target = io::ExportTarget::Verl;
    form.vllmForm = io::VllmForm::Checkpoint;
    QVERIFY(exportError(shippedRecipe("fp8-w8a8-block.yaml"), form).find("--vllm-form applies to --to vllm only")
        != std::string::npos);
    io::ExportOptions rollout;
    rollout.target = io::ExportTarget::Vllm;
    rollout.verlRollout = io::VerlRollout::Sglang;
    QVERIFY(exportError(shippedRecipe("fp8-w8a8-block.yaml"), rollout).find("--rollout applies to --to verl only")
        != std::string::npos);
    io::ExportOptions version;
    version.target = io::ExportTarget::ModelOpt;
    version.targetVersion = "0.21";
    QVERIFY(exportError(shippedRecipe("int4-weights.yaml"), version).find("--target-version applies to --to vllm")
        != std::string::npos);
    for (const char* bad : {"0", "zero.1", "0.22x", "1234567.1", "0.", ".22"}) {
        io::ExportOptions malformed;
        malformed.target = io::ExportTarget::Vllm;
        malformed.targetVersion = bad;
        const std::string message = exportError(shippedRecipe("fp8-w8a8-block.yaml"), malformed);
        QVERIFY2(message.find("expected a vLLM release such as 0.21") != std::string::npos, (message + bad).c_str());
    }
    // "v0.22.1", "0.22.1rc1"-style patch levels and "current" are releases with the online frontend.
    for (const char* good : {"current", "v0.22.1", "0.22", "1.0", "0.22.1rc1"}) {
        io::ExportOptions current;
        current.target = io::ExportTarget::Vllm;
        current.targetVersion = good;
        const nlohmann::json parsed = nlohmann::json::parse(exportText(shippedRecipe("fp8-w8a8-block.yaml"), current));
        QCOMPARE(parsed["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_block"));
    }
}

void TestExport::readyToRunDirectory()
{
    // keep-edges-3layer to vLLM: the config file, vllm serve, the LLM(...) call and a README.txt, nothing else
    // (every file through a temporary file and a rename, so no .tmp is left).
    const QString dir = temporary_.path() + "/ready/vllm";
    const CliResult vllm = runCli({"export", fixture("keep-edges-3layer.yaml"), "--to", "vllm", "--model",
        demoModel(), "--out", dir.toStdString()});
    QVERIFY2(vllm.code == 0, vllm.err.c_str());
    QCOMPARE(QDir(dir).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "vllm.json", "vllm_llm.py", "vllm_serve.sh"}));
    QCOMPARE(readFile((dir + "/vllm.json").toStdString()), readFile(fixture("golden/keep-edges-3layer.vllm.json")));
    const std::string serve = readFile((dir + "/vllm_serve.sh").toStdString());
    QVERIFY2(serve.find("vllm serve " + demoModel() + " \\\n    --quantization fp8_per_block") != std::string::npos,
        serve.c_str());
    QVERIFY2(serve.find("--quantization-config '{\"ignore\":[\"model.layers.0.self_attn.q_proj\",") != std::string::npos,
        serve.c_str());
    QVERIFY2(serve.find("--kv-cache-dtype fp8_e4m3\n") != std::string::npos, serve.c_str());
    const std::string llm = readFile((dir + "/vllm_llm.py").toStdString());
    QVERIFY2(llm.find("from vllm import LLM\n") != std::string::npos, llm.c_str());
    QVERIFY2(llm.find("    quantization=\"fp8_per_block\",\n") != std::string::npos, llm.c_str());
    QVERIFY2(llm.find("    quantization_config={\"ignore\": [\"model.layers.0.self_attn.q_proj\", ") != std::string::npos,
        llm.c_str());
    QVERIFY2(llm.find("    kv_cache_dtype=\"fp8_e4m3\",\n)") != std::string::npos, llm.c_str());
    const std::string readme = readFile((dir + "/README.txt").toStdString());
    QVERIFY2(readme.find("vllm_serve.sh") != std::string::npos, readme.c_str());
    QVERIFY2(readme.find("uses 1.0 where it has none") != std::string::npos, readme.c_str()); // the warnings

    // A KV-cache skip list becomes space-separated words on the command line (nargs), a list in Python.
    const std::string kvSkip = writeRecipe("ready-kv-skip.yaml",
        "version: 1\n"
        "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
        "rules:\n"
        "  - match: \"model.layers.{0,2}.self_attn\"\n"
        "    kv_cache: {format: bf16}\n");
    const QString skipDir = temporary_.path() + "/ready/skip";
    QCOMPARE(runCli({"export", kvSkip, "--to", "vllm", "--model", demoModel(), "--out", skipDir.toStdString()}).code, 0);
    QVERIFY(readFile((skipDir + "/vllm_serve.sh").toStdString()).find("--kv-cache-dtype-skip-layers 0 2\n")
        != std::string::npos);
    QVERIFY(readFile((skipDir + "/vllm_llm.py").toStdString()).find("kv_cache_dtype_skip_layers=[\"0\", \"2\"],")
        != std::string::npos);

    // verl with the SGLang rollout: YAML, Hydra overrides (+ under engine_kwargs) and the environment.
    const QString verlDir = temporary_.path() + "/ready/verl";
    QCOMPARE(runCli({"export", fixture("keep-edges-3layer.yaml"), "--to", "verl", "--rollout", "sglang", "--model",
                 demoModel(), "--out", verlDir.toStdString()})
                 .code,
        0);
    QCOMPARE(QDir(verlDir).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "verl.yaml", "verl_env.sh", "verl_overrides.txt"}));
    const std::string overrides = readFile((verlDir + "/verl_overrides.txt").toStdString());
    QVERIFY2(overrides.find("    actor_rollout_ref.rollout.name=sglang \\\n") != std::string::npos, overrides.c_str());
    QVERIFY2(overrides.find("    ++actor_rollout_ref.rollout.quantization=fp8 \\\n") != std::string::npos,
        overrides.c_str());
    QVERIFY2(overrides.find("    +actor_rollout_ref.rollout.engine_kwargs.sglang.kv_cache_dtype=fp8_e4m3 \\\n")
            != std::string::npos,
        overrides.c_str());
    const std::string env = readFile((verlDir + "/verl_env.sh").toStdString());
    std::string ignored;
    for (const std::string& name : keepEdgesIgnored()) {
        ignored += (ignored.empty() ? "" : ",") + name;
    }
    QVERIFY2(env.find("export SGLANG_FP8_IGNORED_LAYERS=" + ignored + "\n") != std::string::npos, env.c_str());

    // llm-compressor: the oneshot script calibrates only when the recipe has static scales (an FP8 KV cache).
    const QString withKv = temporary_.path() + "/ready/ct-kv";
    QCOMPARE(runCli({"export", fixture("keep-edges-3layer.yaml"), "--to", "compressed-tensors", "--model", demoModel(),
                 "--out", withKv.toStdString()})
                 .code,
        0);
    QCOMPARE(QDir(withKv).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "compressed-tensors.json", "llm-compressor.yaml", "llm_compressor_oneshot.py"}));
    QCOMPARE(readFile((withKv + "/llm-compressor.yaml").toStdString()),
        readFile(fixture("golden/keep-edges-3layer.llm-compressor.yaml")));
    const std::string calibrated = readFile((withKv + "/llm_compressor_oneshot.py").toStdString());
    QVERIFY(calibrated.find("load_dataset(") != std::string::npos);
    QVERIFY(calibrated.find("oneshot(model=model, dataset=ds, recipe=RECIPE") != std::string::npos);
    QVERIFY(calibrated.find("model.save_pretrained(SAVE_DIR, save_compressed=True)\n") != std::string::npos);
    QVERIFY(calibrated.find("MODEL_ID = \"" + demoModel() + "\"\n") != std::string::npos);
    const QString noKv = temporary_.path() + "/ready/lc";
    QCOMPARE(runCli({"export", shippedRecipe("int4-weights.yaml"), "--to", "llm-compressor", "--model", demoModel(),
                 "--out", noKv.toStdString()})
                 .code,
        0);
    const std::string plain = readFile((noKv + "/llm_compressor_oneshot.py").toStdString());
    QVERIFY(plain.find("load_dataset") == std::string::npos);
    QVERIFY(plain.find("oneshot(model=model, recipe=RECIPE)\n") != std::string::npos);

    // ModelOpt: hf_quant_config.json and the config.json fragment.
    const QString modeloptDir = temporary_.path() + "/ready/modelopt";
    QCOMPARE(runCli({"export", shippedRecipe("int4-weights.yaml"), "--to", "modelopt", "--model", demoModel(), "--out",
                 modeloptDir.toStdString()})
                 .code,
        0);
    QCOMPARE(QDir(modeloptDir).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "config_quantization_config.json", "hf_quant_config.json"}));
    const nlohmann::json fragment
        = nlohmann::json::parse(readFile((modeloptDir + "/config_quantization_config.json").toStdString()));
    QCOMPARE(fragment["quantization_config"]["quant_method"].get<std::string>(), std::string("modelopt"));
    QCOMPARE(fragment["quantization_config"]["quant_algo"].get<std::string>(), std::string("W4A16_AWQ"));
    QCOMPARE(fragment["quantization_config"]["ignore"], nlohmann::json({"lm_head"}));

    // SGLang: the launch command with its environment.
    const QString sglangDir = temporary_.path() + "/ready/sglang";
    QCOMPARE(runCli({"export", shippedRecipe("fp8-per-tensor.yaml"), "--to", "sglang", "--model", demoModel(), "--out",
                 sglangDir.toStdString()})
                 .code,
        0);
    const std::string launch = readFile((sglangDir + "/sglang_launch.sh").toStdString());
    QVERIFY2(launch.find("export SGLANG_FP8_IGNORED_LAYERS=lm_head\npython3 -m sglang.launch_server --model-path "
                         + demoModel() + " \\\n    --quantization fp8 \\\n    --kv-cache-dtype fp8_e4m3\n")
            != std::string::npos,
        launch.c_str());

    // A refused export writes nothing; a directory that cannot be created is an error naming it.
    const QString refused = temporary_.path() + "/ready/refused";
    QVERIFY(runCli({"export", shippedRecipe("int4-weights.yaml"), "--to", "vllm", "--model", demoModel(), "--out",
                refused.toStdString()})
                .code
        != 0);
    QVERIFY(!QFileInfo::exists(refused));
    std::ofstream(temporary_.path().toStdString() + "/ready/a-file") << "x";
    const CliResult blocked = runCli({"export", shippedRecipe("bf16.yaml"), "--to", "vllm", "--model", demoModel(),
        "--out", temporary_.path().toStdString() + "/ready/a-file/sub"});
    QVERIFY(blocked.code != 0);
    QVERIFY2(blocked.err.find("a-file/sub") != std::string::npos, blocked.err.c_str());
}

void TestExport::notExpressible_data()
{
    QTest::addColumn<QString>("recipeText"); // "shipped:NAME", "fixture:NAME" or the text of a recipe
    QTest::addColumn<QString>("target");
    QTest::addColumn<int>("staleness");
    QTest::addColumn<QString>("variant"); // "", "checkpoint" (vLLM form), "sglang" (verl rollout) or a vLLM version
    QTest::addColumn<QStringList>("expected"); // substrings of the message

    auto row = [](const char* name, const char* recipe, const char* target, QStringList expected, int staleness = 0,
                   const char* variant = "") {
        expected << QStringLiteral("cannot be exported --to ") + target;
        QTest::newRow(name) << recipe << target << staleness << QString(variant) << expected;
    };
    const char* mixed = "version: 1\n"
                        "weights: {format: fp8_e4m3, granularity: block128}\n"
                        "activations: {format: fp8_e4m3}\n"
                        "rules:\n"
                        "  - match: \"model.layers.2.*\"\n"
                        "    weights: {format: fp8_e4m3, granularity: tensor}\n";
    const char* e5m2 = "version: 1\n"
                       "weights: {format: fp8_e5m2, granularity: tensor}\n"
                       "activations: {format: fp8_e4m3}\n";
    const char* channel = "version: 1\n"
                          "weights: {format: fp8_e4m3, granularity: channel}\n"
                          "activations: {format: fp8_e4m3}\n";
    const char* kvException = "version: 1\n"
                              "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
                              "rules:\n"
                              "  - match: \"model.layers.1.self_attn\"\n"
                              "    kv_cache: {format: bf16}\n";
    const char* everySync = "version: 1\n"
                            "kv_cache: {format: fp8_e4m3, scales: per_tensor, calibration: every_sync}\n";
    const char* weightOnly = "version: 1\n"
                             "weights: {format: fp8_e4m3, granularity: tensor}\n"
                             "activations: {format: bf16}\n";
    const char* splitQkv = "version: 1\n"
                           "weights: {format: fp8_e4m3, granularity: block128}\n"
                           "activations: {format: fp8_e4m3}\n"
                           "rules:\n"
                           "  - match: \"model.layers.1.self_attn.k_proj\"\n"
                           "    weights: {format: bf16}\n"
                           "    activations: {format: bf16}\n";
    const char* fp16 = "version: 1\n"
                       "rules:\n"
                       "  - match: \"model.layers.1.mlp.up_proj\"\n"
                       "    weights: {format: fp16}\n";
    const char* embedding = "version: 1\n"
                            "rules:\n"
                            "  - match: \"{model.embed_tokens,lm_head}\"\n"
                            "    weights: {format: int8}\n";

    // Shipped recipes a target cannot take.
    row("fp8-kv per_head to vllm", "shipped:fp8-kv.yaml", "vllm", {"per_head KV-cache scales (layer 0)"});
    row("fp8-kv per_head to verl", "shipped:fp8-kv.yaml", "verl", {"per_head KV-cache scales (layer 0)"});
    row("fp8-kv per_head to modelopt", "shipped:fp8-kv.yaml", "modelopt", {"per_head KV-cache scales (layer 0)"});
    row("fp8-kv per_head to sglang", "shipped:fp8-kv.yaml", "sglang", {"per_head KV-cache scales (layer 0)"});
    row("int4 to vllm", "shipped:int4-weights.yaml", "vllm",
        {"int4/group128 weights on model.layers.0.self_attn.q_proj", "quantizes weights to fp8_e4m3 only"});
    row("int4 to sglang", "shipped:int4-weights.yaml", "sglang", {"int4/group128 weights", "fp8_e4m3 only"});
    row("int4 to verl", "shipped:int4-weights.yaml", "verl", {"int4/group128 weights", "fp8_e4m3 only"});
    row("block to sglang", "shipped:fp8-w8a8-block.yaml", "sglang",
        {"block128 granularity of fp8 weights", "one scale per weight tensor", "--to verl --rollout sglang"});
    row("block to vllm 0.21", "shipped:fp8-w8a8-block.yaml", "vllm",
        {"block128 granularity of fp8 weights", "before vLLM 0.22 has per-tensor weight scales only"}, 0, "0.21");
    row("ignored layers to vllm 0.21", "fixture:keep-edges-3layer.yaml", "vllm",
        {"bf16 weights on model.layers.0.self_attn.q_proj", "no list of layers to leave unquantized"}, 0, "0.21.5");
    row("per-tensor to verl", "shipped:fp8-per-tensor.yaml", "verl",
        {"tensor granularity of fp8 weights", "128x128 blocks only"});
    row("per-tensor to modelopt", "shipped:fp8-per-tensor.yaml", "modelopt",
        {"fp8_e4m3/tensor weights", "static per-tensor activation scales"});
    row("bf16 to llm-compressor", "shipped:bf16.yaml", "llm-compressor", {"an all-bf16 recipe"});
    row("bf16 to compressed-tensors", "shipped:bf16.yaml", "compressed-tensors", {"an all-bf16 recipe"});
    row("bf16 to modelopt", "shipped:bf16.yaml", "modelopt", {"an all-bf16 recipe"});
    row("keep-edges to verl", "fixture:keep-edges-3layer.yaml", "verl",
        {"bf16 weights on model.layers.0.self_attn.q_proj", "no list of layers to leave unquantized",
            "--rollout sglang"});
    row("keep-edges to sglang", "fixture:keep-edges-3layer.yaml", "sglang", {"block128 granularity"});
    row("staleness to verl sglang rollout", "shipped:fp8-w8a8-block.yaml", "verl",
        {"weight staleness k = 1"}, 1, "sglang");

    // Features no shipped recipe has.
    for (const char* target : {"vllm", "verl", "sglang"}) {
        row((std::string("mixed formats to ") + target).c_str(), mixed, target,
            {"mixed weight formats across layers", "model.layers.0.self_attn.q_proj",
                "fp8_e4m3/tensor weights with fp8_e4m3 activations on model.layers.2.self_attn.q_proj",
                "--to compressed-tensors or --to modelopt for several"});
    }
    // ModelOpt writes several schemes as MIXED_PRECISION, but has no quant_algo for the per-tensor one.
    row("mixed formats to modelopt", mixed, "modelopt",
        {"fp8_e4m3/tensor weights with fp8_e4m3 activations on model.layers.2.self_attn.q_proj",
            "static per-tensor activation scales"});
    for (const std::string& name : io::exportTargetChoices()) {
        const char* target = name.c_str();
        row((std::string("e5m2 to ") + target).c_str(), e5m2, target,
            {"fp8_e5m2 weights on model.layers.0.self_attn.q_proj", "e4m3 only"});
        row((std::string("every_sync to ") + target).c_str(), everySync, target,
            {"KV-cache calibration every_sync (layer 0)"});
        row((std::string("fp16 to ") + target).c_str(), fp16, target, {"fp16 weights on model.layers.1.mlp.up_proj"});
        row((std::string("embedding to ") + target).c_str(), embedding, target,
            {"int8/channel weights on model.embed_tokens"});
    }
    row("channel to vllm checkpoint", channel, "vllm", {"channel granularity of fp8 weights", "per-tensor or 128x128-block"},
        0, "checkpoint");
    row("channel to vllm 0.21", channel, "vllm", {"channel granularity of fp8 weights", "per-tensor weight scales only"},
        0, "0.21");
    row("channel to sglang", channel, "sglang", {"channel granularity of fp8 weights"});
    for (const char* target : {"llm-compressor", "compressed-tensors", "modelopt"}) {
        row((std::string("kv exception to ") + target).c_str(), kvException, target,
            {"a bf16 KV cache on layer 1 while layer 0 is fp8_e4m3", "no per-layer KV-cache setting"});
    }
    row("kv exception to sglang", kvException, "sglang",
        {"a bf16 KV cache on layer 1 while layer 0 is fp8_e4m3", "no per-layer exceptions"});
    row("kv exception to verl sglang rollout", kvException, "verl",
        {"a bf16 KV cache on layer 1 while layer 0 is fp8_e4m3", "no per-layer exceptions"}, 0, "sglang");
    row("weight-only fp8 to vllm", weightOnly, "vllm", {"weight-only fp8", "bf16 activations need", "naive-quantized"});
    row("weight-only fp8 to sglang", weightOnly, "sglang", {"weight-only fp8"});
    row("weight-only tensor fp8 to modelopt", weightOnly, "modelopt", {"no ModelOpt quant_algo"});
    // vLLM's fp8, compressed-tensors and ModelOpt loaders all refuse a fused group with different schemes.
    const char* splitGateUp = "version: 1\n"
                              "weights: {format: fp8_e4m3, granularity: block128}\n"
                              "activations: {format: fp8_e4m3}\n"
                              "rules:\n"
                              "  - match: \"model.layers.2.mlp.up_proj\"\n"
                              "    weights: {format: fp8_e4m3, granularity: channel}\n";
    for (const std::string& name : io::exportTargetChoices()) {
        const char* target = name.c_str();
        row((std::string("split qkv to ") + target).c_str(), splitQkv, target,
            {"different formats on model.layers.1.self_attn.q_proj", "and model.layers.1.self_attn.k_proj",
                "one fused layer", "refuse different schemes within a fused group"});
        row((std::string("split gate-up to ") + target).c_str(), splitGateUp, target,
            {"different formats on model.layers.2.mlp.gate_proj", "and model.layers.2.mlp.up_proj (fp8_e4m3/channel",
                "one fused layer"});
    }
    row("staleness to verl", "shipped:fp8-w8a8-block.yaml", "verl",
        {"weight staleness k = 2", "async_training.staleness_threshold"}, 2);
}

void TestExport::notExpressible()
{
    QFETCH(QString, recipeText);
    QFETCH(QString, target);
    QFETCH(int, staleness);
    QFETCH(QString, variant);
    QFETCH(QStringList, expected);
    std::string path;
    const std::string text = recipeText.toStdString();
    if (text.rfind("shipped:", 0) == 0) {
        path = shippedRecipe(text.substr(8));
    } else if (text.rfind("fixture:", 0) == 0) {
        path = fixture(text.substr(8));
    } else {
        path = writeRecipe(QTest::currentDataTag() + std::string(".yaml"), text);
    }
    io::ExportOptions options;
    options.target = *io::parseExportTarget(target.toStdString());
    options.staleness = staleness;
    if (variant == "checkpoint") {
        options.vllmForm = io::VllmForm::Checkpoint;
    } else if (variant == "sglang") {
        options.verlRollout = io::VerlRollout::Sglang;
    } else if (!variant.isEmpty()) {
        options.targetVersion = variant.toStdString();
    }
    const std::string message = exportError(path, options);
    QVERIFY2(!message.empty(), "the export succeeded");
    QVERIFY2(message.rfind(path, 0) == 0, message.c_str()); // "FILE:LOCATION: DETAIL"
    for (const QString& part : expected) {
        QVERIFY2(message.find(part.toStdString()) != std::string::npos,
            (message + "\n  lacks: " + part.toStdString()).c_str());
    }
}

void TestExport::errorsAreLocatedInTheRecipe()
{
    // fp8-per-tensor.yaml's `weights:` is on line 5 of the file; the verl error about its granularity points there.
    const std::string message = exportError(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Verl);
    QVERIFY2(message.find("line 5") != std::string::npos, message.c_str());
    // keep-edges-3layer.yaml's first rule's `weights:` is on line 12.
    const std::string rule = exportError(fixture("keep-edges-3layer.yaml"), io::ExportTarget::Verl);
    QVERIFY2(rule.find("line 12") != std::string::npos, rule.c_str());
    // --staleness is the rollout loop's, which only verl configures.
    const std::string staleness = exportError(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::Vllm, 1);
    QVERIFY2(staleness.find("--staleness applies to --to verl only") != std::string::npos, staleness.c_str());
}

void TestExport::shippedKeepEdgesNeedsFourLayers()
{
    // The shipped fp8-keep-edges.yaml names layer 3; the demo model has layers 0-2, so resolution refuses it before
    // any export (for every target alike).
    for (const std::string& target : io::exportTargetChoices()) {
        const CliResult result
            = runCli({"export", shippedRecipe("fp8-keep-edges.yaml"), "--to", target, "--model", demoModel()});
        QVERIFY(result.code != 0);
        QVERIFY2(result.err.find("3 layers") != std::string::npos, result.err.c_str());
        QVERIFY(result.out.empty());
    }
}

void TestExport::shippedKeepEdgesOnFourLayers()
{
    // The demo model's configuration with a fourth layer, which the shipped recipe was written for. Its layer-3
    // down_proj keeps BF16 weights but still takes FP8 inputs (the rule sets weights only); no target quantizes the
    // inputs of a layer it leaves unquantized, so every export refuses it and says which module.
    nlohmann::json config = nlohmann::json::parse(readFile(demoModel() + "/config.json"));
    config["num_hidden_layers"] = 4;
    QVERIFY(QDir().mkpath(temporary_.path() + "/four-layers"));
    const std::string configPath = (temporary_.path() + "/four-layers/config.json").toStdString();
    std::ofstream(configPath) << config.dump(2);
    for (const std::string& target : io::exportTargetChoices()) {
        const CliResult result
            = runCli({"export", shippedRecipe("fp8-keep-edges.yaml"), "--to", target, "--model", configPath});
        QVERIFY(result.code != 0);
        QVERIFY2(result.err.find("fp8 activations on model.layers.3.mlp.down_proj (whose weights are bf16) cannot be "
                                 "exported --to "
                     + target)
                != std::string::npos,
            result.err.c_str());
    }
}

void TestExport::cliStdoutAndJson()
{
    const CliResult plain
        = runCli({"export", shippedRecipe("fp8-w8a8-block.yaml"), "--to", "vllm", "--model", demoModel()});
    QVERIFY2(plain.code == 0, plain.err.c_str());
    QCOMPARE(plain.out, readFile(fixture("golden/fp8-w8a8-block.vllm.json")));

    const CliResult json = runCli(
        {"--json", "export", shippedRecipe("int4-weights.yaml"), "--to", "llm-compressor", "--model", demoModel()});
    QVERIFY2(json.code == 0, json.err.c_str());
    const nlohmann::json parsed = nlohmann::json::parse(json.out);
    QCOMPARE(parsed["target"].get<std::string>(), std::string("llm-compressor"));
    QCOMPARE(parsed["format"].get<std::string>(), std::string("yaml"));
    QCOMPARE(parsed["text"].get<std::string>(), readFile(fixture("golden/int4-weights.llm-compressor.yaml")));

    const CliResult unknown
        = runCli({"export", shippedRecipe("bf16.yaml"), "--to", "tensorrt-llm", "--model", demoModel()});
    QVERIFY(unknown.code != 0);
    const CliResult noModel = runCli({"export", shippedRecipe("bf16.yaml"), "--to", "vllm"});
    QVERIFY(noModel.code != 0);
    QVERIFY2(noModel.err.find("--model") != std::string::npos, noModel.err.c_str());
}

void TestExport::atomicWriteLeavesNoTemporary()
{
    const std::string out = (temporary_.path() + "/atomic/out.json").toStdString();
    QVERIFY(QDir().mkpath(temporary_.path() + "/atomic"));
    // An existing file is replaced whole.
    std::ofstream(out) << "old contents that are longer than nothing";
    writeFileAtomically(out, "new\n");
    QCOMPARE(readFile(out), std::string("new\n"));
    QCOMPARE(QDir(temporary_.path() + "/atomic").entryList(QDir::Files), QStringList({"out.json"}));
    // A directory that does not exist: an InputError naming the path, nothing created.
    const std::string missing = (temporary_.path() + "/no-such-dir/out.json").toStdString();
    bool threw = false;
    try {
        writeFileAtomically(missing, "x");
    } catch (const InputError& error) {
        threw = true;
        QVERIFY(std::string(error.what()).find(missing) != std::string::npos);
    }
    QVERIFY(threw);
    QVERIFY(!QFile::exists(QString::fromStdString(missing)));
}

MISMATCH_TEST_GUILESS_MAIN(TestExport)
#include "test_export.moc"

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
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/io/recipe_export.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <QDir>
#include <QFile>
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
std::string exportError(const std::string& recipePath, io::ExportTarget target, std::int64_t staleness = 0)
{
    const quant::Recipe recipe = quant::loadRecipe(recipePath);
    const model::ModelConfig config = model::loadConfig(demoModel() + "/config.json");
    const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
    try {
        io::exportRecipe(recipe, plan, {target, staleness});
    } catch (const InputError& error) {
        return error.what();
    }
    return "";
}

std::string exportText(const std::string& recipePath, io::ExportTarget target)
{
    const quant::Recipe recipe = quant::loadRecipe(recipePath);
    const model::ModelConfig config = model::loadConfig(demoModel() + "/config.json");
    return io::exportRecipe(recipe, quant::resolveRecipe(recipe, config), {target, 0});
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
    QVERIFY(!io::parseExportTarget("sglang").has_value());
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
    QTest::addColumn<QString>("golden");
    struct Row {
        const char* recipe; // shipped name, or tests/export fixture when prefixed with "fixture:"
        const char* target;
    };
    // Every (recipe, target) pair that the target can express; the others are in notExpressible.
    const std::vector<Row> rows = {
        {"bf16.yaml", "vllm"},
        {"bf16.yaml", "verl"},
        {"fp8-kv.yaml", "llm-compressor"},
        {"fp8-kv.yaml", "compressed-tensors"},
        {"fp8-w8a8-block.yaml", "vllm"},
        {"fp8-w8a8-block.yaml", "verl"},
        {"fp8-w8a8-block.yaml", "llm-compressor"},
        {"fp8-w8a8-block.yaml", "compressed-tensors"},
        {"int4-weights.yaml", "llm-compressor"},
        {"int4-weights.yaml", "compressed-tensors"},
        {"int4-weights.yaml", "modelopt"},
        {"fp8-per-tensor.yaml", "vllm"},
        {"fp8-per-tensor.yaml", "llm-compressor"},
        {"fp8-per-tensor.yaml", "compressed-tensors"},
        {"fixture:keep-edges-3layer.yaml", "vllm"},
        {"fixture:keep-edges-3layer.yaml", "llm-compressor"},
        {"fixture:keep-edges-3layer.yaml", "compressed-tensors"},
    };
    for (const Row& row : rows) {
        const std::string recipe = row.recipe;
        const bool isFixture = recipe.rfind("fixture:", 0) == 0;
        const std::string file = isFixture ? recipe.substr(8) : recipe;
        const std::string stem = file.substr(0, file.size() - 5);
        const auto target = io::parseExportTarget(row.target);
        const std::string golden = stem + "." + row.target + "." + io::fileExtension(*target);
        QTest::newRow(golden.c_str()) << QString::fromStdString(isFixture ? fixture(file) : shippedRecipe(file))
                                      << row.target << QString::fromStdString(golden);
    }
}

void TestExport::goldenFiles()
{
    QFETCH(QString, recipe);
    QFETCH(QString, target);
    QFETCH(QString, golden);
    const std::string out = (temporary_.path() + "/" + golden).toStdString();
    const CliResult result
        = runCli({"export", recipe.toStdString(), "--to", target.toStdString(), "--model", demoModel(), "--out", out});
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
    // keep-edges-3layer to vLLM: fp8 with 128x128 blocks, dynamic activations, layer 0 + layer 2's down_proj +
    // lm_head ignored; FP8 KV cache in every layer (per-tensor scales, measured once).
    const json vllm = json::parse(exportText(fixture("keep-edges-3layer.yaml"), io::ExportTarget::Vllm));
    QCOMPARE(vllm["quantization_config"]["quant_method"].get<std::string>(), std::string("fp8"));
    QCOMPARE(vllm["quantization_config"]["activation_scheme"].get<std::string>(), std::string("dynamic"));
    QCOMPARE(vllm["quantization_config"]["weight_block_size"], json({128, 128}));
    QCOMPARE(vllm["quantization_config"]["ignored_layers"].get<std::vector<std::string>>(), keepEdgesIgnored());
    QCOMPARE(vllm["engine_args"]["quantization"].get<std::string>(), std::string("fp8"));
    QCOMPARE(vllm["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    QVERIFY(!vllm["engine_args"].contains("kv_cache_dtype_skip_layers"));

    // fp8-per-tensor to vLLM: no weight_block_size (per-tensor scales), only lm_head ignored.
    const json perTensor = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Vllm));
    QVERIFY(!perTensor["quantization_config"].contains("weight_block_size"));
    QCOMPARE(perTensor["quantization_config"]["ignored_layers"], json({"lm_head"}));

    // bf16 to vLLM: nothing quantized, KV cache in the model dtype.
    const json bf16 = json::parse(exportText(shippedRecipe("bf16.yaml"), io::ExportTarget::Vllm));
    QVERIFY(bf16["quantization_config"].is_null());
    QCOMPARE(bf16["engine_args"], json({{"kv_cache_dtype", "auto"}}));

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

    // verl: the block recipe turns fp8 rollout on; KV stays in the model dtype.
    const std::string verl = exportText(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::Verl);
    QVERIFY(verl.find("actor_rollout_ref.rollout.quantization: fp8\n") != std::string::npos);
    QVERIFY(verl.find("actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype: auto\n") != std::string::npos);
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
    QVERIFY(vllm["quantization_config"].is_null());
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
    int exported = 0;
    for (const std::string& recipe : recipes) {
        for (const io::ExportTarget target : {io::ExportTarget::Vllm, io::ExportTarget::Verl}) {
            if (!exportError(recipe, target).empty()) {
                continue; // a recipe the target refuses (tested in notExpressible)
            }
            const std::string text = exportText(recipe, target);
            QVERIFY2(text.find("fp8_e4m3") != std::string::npos, text.c_str()); // the KV cache is exported
            QVERIFY2(text.find("calculate_kv_scales") == std::string::npos, text.c_str());
            ++exported;
        }
    }
    // vllm: all four recipes; verl: kv-skip.yaml and block-kv.yaml (it refuses per-tensor weights and BF16 layers).
    QCOMPARE(exported, 6);
    // The skip list is strings in both: vLLM's JSON and verl's YAML (quoted, so that YAML does not read integers).
    const std::string vllm = exportText(recipes[2], io::ExportTarget::Vllm);
    QVERIFY2(vllm.find("\"kv_cache_dtype_skip_layers\": [\n      \"1\"\n    ]") != std::string::npos, vllm.c_str());
    const std::string verl = exportText(recipes[2], io::ExportTarget::Verl);
    QVERIFY2(verl.find("actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype_skip_layers: [\"1\"]\n")
            != std::string::npos,
        verl.c_str());
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
}

void TestExport::notExpressible_data()
{
    QTest::addColumn<QString>("recipeText"); // "shipped:NAME", "fixture:NAME" or the text of a recipe
    QTest::addColumn<QString>("target");
    QTest::addColumn<int>("staleness");
    QTest::addColumn<QStringList>("expected"); // substrings of the message

    auto row = [](const char* name, const char* recipe, const char* target, QStringList expected, int staleness = 0) {
        expected << QStringLiteral("cannot be exported --to ") + target;
        QTest::newRow(name) << recipe << target << staleness << expected;
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
    row("block w8a8 to modelopt", "shipped:fp8-w8a8-block.yaml", "modelopt",
        {"fp8_e4m3/block128 weights with fp8_e4m3 activations", "no ModelOpt quant_algo"});
    row("int4 to vllm", "shipped:int4-weights.yaml", "vllm",
        {"int4/group128 weights on model.layers.0.self_attn.q_proj", "fp8_e4m3 weights only"});
    row("int4 to verl", "shipped:int4-weights.yaml", "verl", {"int4/group128 weights", "fp8 (128x128 blocks) only"});
    row("per-tensor to verl", "shipped:fp8-per-tensor.yaml", "verl",
        {"tensor granularity of fp8 weights", "128x128 blocks only"});
    row("per-tensor to modelopt", "shipped:fp8-per-tensor.yaml", "modelopt",
        {"fp8_e4m3/tensor weights", "static per-tensor activation scales"});
    row("bf16 to llm-compressor", "shipped:bf16.yaml", "llm-compressor", {"an all-bf16 recipe"});
    row("bf16 to compressed-tensors", "shipped:bf16.yaml", "compressed-tensors", {"an all-bf16 recipe"});
    row("bf16 to modelopt", "shipped:bf16.yaml", "modelopt", {"an all-bf16 recipe"});
    row("keep-edges to verl", "fixture:keep-edges-3layer.yaml", "verl",
        {"bf16 weights on model.layers.0.self_attn.q_proj", "no list of layers to leave unquantized"});
    row("keep-edges to modelopt", "fixture:keep-edges-3layer.yaml", "modelopt", {"no ModelOpt quant_algo"});

    // Features no shipped recipe has.
    for (const char* target : {"vllm", "verl", "modelopt"}) {
        row((std::string("mixed formats to ") + target).c_str(), mixed, target,
            {"mixed weight formats across layers", "model.layers.0.self_attn.q_proj",
                "fp8_e4m3/tensor weights with fp8_e4m3 activations on model.layers.2.self_attn.q_proj"});
    }
    for (const char* target : {"vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt"}) {
        row((std::string("e5m2 to ") + target).c_str(), e5m2, target,
            {"fp8_e5m2 weights on model.layers.0.self_attn.q_proj", "e4m3 only"});
        row((std::string("every_sync to ") + target).c_str(), everySync, target,
            {"KV-cache calibration every_sync (layer 0)"});
        row((std::string("fp16 to ") + target).c_str(), fp16, target, {"fp16 weights on model.layers.1.mlp.up_proj"});
        row((std::string("embedding to ") + target).c_str(), embedding, target,
            {"int8/channel weights on model.embed_tokens"});
    }
    row("channel to vllm", channel, "vllm", {"channel granularity of fp8 weights", "per-tensor or 128x128-block"});
    for (const char* target : {"llm-compressor", "compressed-tensors", "modelopt"}) {
        row((std::string("kv exception to ") + target).c_str(), kvException, target,
            {"a bf16 KV cache on layer 1 while layer 0 is fp8_e4m3", "no per-layer KV-cache setting"});
    }
    row("weight-only fp8 to vllm", weightOnly, "vllm", {"weight-only fp8", "bf16 activations need"});
    // vLLM's fp8, compressed-tensors and ModelOpt loaders all refuse a fused group with different schemes.
    const char* splitGateUp = "version: 1\n"
                              "weights: {format: fp8_e4m3, granularity: block128}\n"
                              "activations: {format: fp8_e4m3}\n"
                              "rules:\n"
                              "  - match: \"model.layers.2.mlp.up_proj\"\n"
                              "    weights: {format: fp8_e4m3, granularity: channel}\n";
    for (const char* target : {"vllm", "llm-compressor", "compressed-tensors", "verl", "modelopt"}) {
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
    const std::string message = exportError(path, *io::parseExportTarget(target.toStdString()), staleness);
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

    const CliResult unknown = runCli({"export", shippedRecipe("bf16.yaml"), "--to", "sglang", "--model", demoModel()});
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

QTEST_GUILESS_MAIN(TestExport)
#include "test_export.moc"

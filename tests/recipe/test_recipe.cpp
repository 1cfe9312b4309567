// Tests of precision recipes: pattern matching, rule order, defaults, located errors, YAML/JSON parity and
// round trips, resolution against model configurations, memory accounting and the `recipe check` command.
// Every expected value below is derived by hand from the recipe text or the configuration (the arithmetic is
// written next to it), never copied from the code's output.
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/common/error.h"
#include "core/common/yaml_scalar.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "tests/common/test_main.h"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <sstream>

using namespace mismatch;
using namespace mismatch::quant;

namespace {

const QString kSourceDir = QStringLiteral(MISMATCH_SOURCE_DIR);

std::string fixture(const char* name)
{
    return (kSourceDir + "/tests/recipe/" + name).toStdString();
}

// The 4-layer Qwen2-like model the shipped recipes are checked against.
model::ModelConfig smallConfig(bool tied = false)
{
    model::ModelConfig c;
    c.architecture = model::Architecture::Qwen2;
    c.numLayers = 4;
    c.hiddenSize = 256;
    c.numHeads = 4;
    c.numKeyValueHeads = 2;
    c.headDim = 64;
    c.intermediateSize = 704;
    c.vocabSize = 258;
    c.attentionBias = true; // Qwen2: q/k/v biases, no o_proj bias
    c.outputBias = false;
    c.tieWordEmbeddings = tied;
    return c;
}

// Qwen2-7B's shape: 28 layers, 4 KV heads of 128.
model::ModelConfig config28()
{
    model::ModelConfig c;
    c.architecture = model::Architecture::Qwen2;
    c.numLayers = 28;
    c.hiddenSize = 3584;
    c.numHeads = 28;
    c.numKeyValueHeads = 4;
    c.headDim = 128;
    c.intermediateSize = 18944;
    c.vocabSize = 152064;
    c.attentionBias = true;
    return c;
}

std::string text(const ModulePrecision& module)
{
    return describe(module.weights) + " " + toString(module.activations.format);
}

using test::CliResult;
using test::runCli;

} // namespace

class TestRecipe : public QObject {
    Q_OBJECT

private slots:
    void patternMatching_data();
    void patternMatching();
    void malformedPatterns_data();
    void malformedPatterns();
    void laterRulesWin();
    void defaultsApplyToProjectionsOnly();
    void emptyRecipeIsAllBf16();
    void kvOnlyRecipe();
    void perTokenHeadKvRecipe();
    void specExampleOn28Layers_data();
    void specExampleOn28Layers();
    void errors_data();
    void errors();
    void ruleCountLimit();
    void yamlListLimit();
    void yamlJsonParity();
    void roundTrip_data();
    void roundTrip();
    void equalityIgnoresOnlyProvenance();
    void memory_data();
    void memory();
    void memoryTotals();
    void tiedEmbeddingCountedOnce();
    void shippedRecipesValidate_data();
    void shippedRecipesValidate();
    void cliCheck();
};

void TestRecipe::patternMatching_data()
{
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("expected");

    const QString up = "model.layers.%1.mlp.up_proj";
    QTest::newRow("range low") << "model.layers.{0-3}.mlp.up_proj" << up.arg(0) << true;
    QTest::newRow("range high") << "model.layers.{0-3}.mlp.up_proj" << up.arg(3) << true;
    QTest::newRow("range above") << "model.layers.{0-3}.mlp.up_proj" << up.arg(4) << false;
    QTest::newRow("range vs two digits") << "model.layers.{0-3}.mlp.up_proj" << up.arg(12) << false;
    QTest::newRow("range two-digit ends") << "model.layers.{10-12}.mlp.up_proj" << up.arg(11) << true;
    QTest::newRow("range two-digit below") << "model.layers.{10-12}.mlp.up_proj" << up.arg(1) << false;
    QTest::newRow("list first") << "model.layers.{0,27}.self_attn"
                                << "model.layers.0.self_attn" << true;
    QTest::newRow("list second") << "model.layers.{0,27}.self_attn"
                                 << "model.layers.27.self_attn" << true;
    QTest::newRow("list between") << "model.layers.{0,27}.self_attn"
                                  << "model.layers.2.self_attn" << false;
    QTest::newRow("list longer number") << "model.layers.{0,27}.self_attn"
                                        << "model.layers.270.self_attn" << false;
    QTest::newRow("list with spaces") << "model.layers.{0, 27}.self_attn"
                                      << "model.layers.27.self_attn" << true;
    QTest::newRow("range and number") << "model.layers.{0-1,5}.*"
                                      << "model.layers.5.mlp.down_proj" << true;
    QTest::newRow("range and number, outside") << "model.layers.{0-1,5}.*"
                                               << "model.layers.3.mlp.down_proj" << false;
    QTest::newRow("range then star, attention") << "model.layers.{0-1}.*"
                                                << "model.layers.1.self_attn" << true;
    QTest::newRow("range then star, not 10") << "model.layers.{0-1}.*"
                                             << "model.layers.10.mlp.up_proj" << false;
    QTest::newRow("no leading zeros") << "model.layers.{7}.mlp.up_proj"
                                      << "model.layers.07.mlp.up_proj" << false;
    QTest::newRow("star crosses dots") << "model.layers.*.mlp.down_proj"
                                       << "model.layers.13.mlp.down_proj" << true;
    QTest::newRow("star, other module") << "model.layers.*.mlp.down_proj"
                                        << "model.layers.13.mlp.up_proj" << false;
    QTest::newRow("star alone, lm_head") << "*"
                                         << "lm_head" << true;
    QTest::newRow("star alone, embedding") << "*"
                                           << "model.embed_tokens" << true;
    QTest::newRow("leading star") << "*.self_attn"
                                  << "model.layers.3.self_attn" << true;
    QTest::newRow("leading star, projection") << "*.self_attn"
                                              << "model.layers.3.self_attn.q_proj" << false;
    QTest::newRow("alternation") << "model.layers.3.self_attn.{q,k}_proj"
                                 << "model.layers.3.self_attn.k_proj" << true;
    QTest::newRow("alternation, other") << "model.layers.3.self_attn.{q,k}_proj"
                                        << "model.layers.3.self_attn.v_proj" << false;
    QTest::newRow("alternation of paths") << "model.layers.{0-3}.{self_attn.o,mlp.down}_proj"
                                          << "model.layers.2.mlp.down_proj" << true;
    QTest::newRow("two groups") << "model.layers.{1-2}.mlp.{gate,up}_proj"
                                << "model.layers.2.mlp.gate_proj" << true;
    QTest::newRow("exact") << "lm_head"
                           << "lm_head" << true;
    QTest::newRow("exact is whole name") << "lm_head"
                                         << "model.lm_head" << false;
    QTest::newRow("exact prefix is not enough") << "model.layers.1.mlp"
                                                << "model.layers.1.mlp.up_proj" << false;
    QTest::newRow("dot is literal") << "model.layers.1.mlp.up_proj"
                                    << "model.layers.1xmlp.up_proj" << false;
}

void TestRecipe::patternMatching()
{
    QFETCH(QString, pattern);
    QFETCH(QString, name);
    QFETCH(bool, expected);
    const ModulePattern compiled = ModulePattern::compile(pattern.toStdString());
    QCOMPARE(compiled.matches(name.toStdString()), expected);
}

void TestRecipe::malformedPatterns_data()
{
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("reason");
    QTest::newRow("reversed range") << "model.layers.{5-2}.mlp.*"
                                    << "range 5-2";
    QTest::newRow("empty braces") << "model.layers.{}.mlp.*"
                                  << "empty alternative";
    QTest::newRow("empty item") << "model.layers.{0,,2}.mlp.*"
                                << "empty alternative";
    QTest::newRow("unclosed") << "model.layers.{0-3.mlp.*"
                              << "is not closed";
    QTest::newRow("nested") << "model.layers.{0{1}}.mlp.*"
                            << "is not closed";
    QTest::newRow("stray close") << "model.layers.3}.mlp.*"
                                 << "closes no";
    QTest::newRow("star in braces") << "model.layers.{*}.mlp"
                                    << "'*' inside";
    QTest::newRow("empty") << ""
                           << "empty pattern";
}

void TestRecipe::malformedPatterns()
{
    QFETCH(QString, pattern);
    QFETCH(QString, reason);
    try {
        ModulePattern::compile(pattern.toStdString());
        QFAIL("no error");
    } catch (const std::invalid_argument& error) {
        QVERIFY2(QString(error.what()).contains(reason), error.what());
    }
}

void TestRecipe::laterRulesWin()
{
    const Recipe recipe = parseRecipe(R"(version: 1
rules:
  - match: "model.layers.*.mlp.*"
    weights: {format: int8}
  - match: "model.layers.{1-2}.mlp.{gate,up}_proj"
    weights: {format: fp8_e5m2}
  - match: "model.layers.2.*"
    weights: {format: bf16}
)",
        "order.yaml");
    const RecipePlan plan = resolveRecipe(recipe, smallConfig());
    auto module = [&plan](const char* name) { return plan.modules.at(name); };
    QCOMPARE(describe(module("model.layers.0.mlp.down_proj").weights), std::string("int8/channel"));
    QCOMPARE(module("model.layers.0.mlp.down_proj").weightsRule, 0);
    QCOMPARE(describe(module("model.layers.1.mlp.gate_proj").weights), std::string("fp8_e5m2/block128"));
    QCOMPARE(module("model.layers.1.mlp.gate_proj").weightsRule, 1);
    QCOMPARE(describe(module("model.layers.1.mlp.down_proj").weights), std::string("int8/channel"));
    QCOMPARE(describe(module("model.layers.2.mlp.up_proj").weights), std::string("bf16"));
    QCOMPARE(module("model.layers.2.mlp.up_proj").weightsRule, 2);
    QCOMPARE(module("model.layers.2.self_attn.q_proj").weightsRule, 2);
    QCOMPARE(describe(module("model.layers.3.self_attn.q_proj").weights), std::string("bf16"));
    QCOMPARE(module("model.layers.3.self_attn.q_proj").weightsRule, kNoRule);
    QCOMPARE(describe(module("model.layers.3.mlp.up_proj").weights), std::string("int8/channel"));
}

void TestRecipe::defaultsApplyToProjectionsOnly()
{
    const Recipe recipe
        = parseRecipe("version: 1\nweights: {format: fp8_e4m3}\nactivations: {format: fp8_e4m3}\n", "defaults.yaml");
    QVERIFY(recipe.weights.has_value());
    // fp8 without a granularity gets block128 (documented default).
    QCOMPARE(toString(recipe.weights->granularity), std::string("block128"));
    const RecipePlan plan = resolveRecipe(recipe, smallConfig());
    // 4 layers x 7 projections + embedding + lm_head.
    QCOMPARE(plan.modules.size(), size_t(30));
    for (std::int64_t layer = 0; layer < 4; ++layer) {
        for (const std::string& suffix : projectionSuffixes()) {
            QCOMPARE(text(plan.modules.at(layerModuleName(layer, suffix))), std::string("fp8_e4m3/block128 fp8_e4m3"));
        }
        QCOMPARE(describe(plan.kvPerLayer[static_cast<size_t>(layer)]), std::string("bf16"));
    }
    QCOMPARE(text(plan.modules.at(kEmbedName)), std::string("bf16 bf16"));
    QCOMPARE(text(plan.modules.at(kLmHeadName)), std::string("bf16 bf16"));
}

void TestRecipe::emptyRecipeIsAllBf16()
{
    const RecipePlan plan = resolveRecipe(parseRecipe("version: 1\n", "empty.yaml"), smallConfig());
    for (const auto& [name, module] : plan.modules) {
        QVERIFY2(text(module) == "bf16 bf16", name.c_str());
    }
    QCOMPARE(plan.weightBytes, plan.bf16WeightBytes);
    QCOMPARE(plan.kvBytesPerToken, plan.bf16KvBytesPerToken);
    QCOMPARE(plan.kvScaleBytes, std::int64_t(0));
}

void TestRecipe::kvOnlyRecipe()
{
    const Recipe recipe = loadRecipe((kSourceDir + "/resources/recipes/fp8-kv.yaml").toStdString());
    QVERIFY(!recipe.weights && !recipe.activations && recipe.rules.empty());
    QVERIFY(recipe.kvCache.has_value());
    QCOMPARE(toString(recipe.kvCache->calibration), std::string("probe"));
    const RecipePlan plan = resolveRecipe(recipe, smallConfig());
    for (const auto& [name, module] : plan.modules) {
        QVERIFY2(text(module) == "bf16 bf16", name.c_str());
    }
    for (const KvPrecision& kv : plan.kvPerLayer) {
        QCOMPARE(describe(kv), std::string("fp8_e4m3/per_head"));
    }
    // Per layer and token: 2 (K, V) * 2 kv heads * 64 = 256 elements: 512 B in BF16, 256 B in FP8; 4 layers.
    QCOMPARE(plan.bf16KvBytesPerToken, std::int64_t(2048));
    QCOMPARE(plan.kvBytesPerToken, std::int64_t(1024));
    QCOMPARE(plan.kvCapacityRatio(), 2.0);
    // Per-head float32 scales: 4 layers * 2 (K, V) * 2 heads * 4 B.
    QCOMPARE(plan.kvScaleBytes, std::int64_t(64));
}

// vLLM's dynamic KV formats (vllm-project/vllm vllm/config/cache.py CacheDType: "fp8_per_token_head",
// "int8_per_token_head") are recipe formats of the same name with no scales or calibration; their float32 scales, one
// per token and KV head for K and V (vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes), count per token.
void TestRecipe::perTokenHeadKvRecipe()
{
    const Recipe recipe = parseRecipe("version: 1\n"
                                      "kv_cache: {format: fp8_per_token_head}\n"
                                      "rules:\n"
                                      "  - match: \"model.layers.3.self_attn\"\n"
                                      "    kv_cache: {format: int8_per_token_head}\n",
        "r.yaml");
    QVERIFY(recipe.kvCache.has_value());
    QVERIFY(recipe.kvCache->scales == KvScales::None);
    QVERIFY(recipe.kvCache->calibration == KvCalibration::None);
    const RecipePlan plan = resolveRecipe(recipe, smallConfig());
    for (std::size_t layer = 0; layer < 3; ++layer) {
        QCOMPARE(describe(plan.kvPerLayer[layer]), std::string("fp8_per_token_head"));
    }
    QCOMPARE(describe(plan.kvPerLayer[3]), std::string("int8_per_token_head"));
    // Per layer and token: 2 (K, V) * 2 kv heads * 64 = 256 one-byte codes plus 2 * 2 float32 scales = 16 B; 4
    // layers. No fixed scales.
    QCOMPARE(plan.kvBytesPerToken, std::int64_t(4 * (256 + 16)));
    QCOMPARE(plan.bf16KvBytesPerToken, std::int64_t(2048));
    QCOMPARE(plan.kvScaleBytes, std::int64_t(0));
    // Written back as it was given: the format alone.
    const std::string yaml = recipeToYaml(recipe);
    QVERIFY2(yaml.find("kv_cache: {format: fp8_per_token_head}") != std::string::npos, yaml.c_str());
    QVERIFY(parseRecipe(yaml, "round.yaml") == recipe);
    QVERIFY(parseRecipe(recipeToJson(recipe), "round.json") == recipe);
}

void TestRecipe::specExampleOn28Layers_data()
{
    QTest::addColumn<QString>("module");
    QTest::addColumn<QString>("expected"); // "WEIGHTS ACTIVATIONS"
    QTest::addColumn<int>("weightsRule");
    // Rule 0 ({0-1}.*) keeps layers 0-1 BF16; rule 1 only the weights of 27's down_proj (its inputs stay FP8,
    // from the top-level default); rule 3 lm_head BF16 (it would be BF16 anyway: defaults skip it).
    QTest::newRow("L0 q") << "model.layers.0.self_attn.q_proj"
                          << "bf16 bf16" << 0;
    QTest::newRow("L1 down") << "model.layers.1.mlp.down_proj"
                             << "bf16 bf16" << 0;
    QTest::newRow("L2 k") << "model.layers.2.self_attn.k_proj"
                          << "fp8_e4m3/block128 fp8_e4m3" << kNoRule;
    QTest::newRow("L14 gate") << "model.layers.14.mlp.gate_proj"
                              << "fp8_e4m3/block128 fp8_e4m3" << kNoRule;
    QTest::newRow("L27 down") << "model.layers.27.mlp.down_proj"
                              << "bf16 fp8_e4m3" << 1;
    QTest::newRow("L27 up") << "model.layers.27.mlp.up_proj"
                            << "fp8_e4m3/block128 fp8_e4m3" << kNoRule;
    QTest::newRow("L27 o") << "model.layers.27.self_attn.o_proj"
                           << "fp8_e4m3/block128 fp8_e4m3" << kNoRule;
    QTest::newRow("embedding") << "model.embed_tokens"
                               << "bf16 bf16" << kNoRule;
    QTest::newRow("lm_head") << "lm_head"
                             << "bf16 bf16" << 3;
}

void TestRecipe::specExampleOn28Layers()
{
    QFETCH(QString, module);
    QFETCH(QString, expected);
    QFETCH(int, weightsRule);
    const RecipePlan plan = resolveRecipe(loadRecipe(fixture("spec-example.yaml")), config28());
    QCOMPARE(QString::fromStdString(text(plan.modules.at(module.toStdString()))), expected);
    QCOMPARE(plan.modules.at(module.toStdString()).weightsRule, weightsRule);

    // KV: rule 2 keeps layers 0 and 27 BF16; the rest take the top-level fp8 per-head default.
    QCOMPARE(plan.kvPerLayer.size(), size_t(28));
    for (size_t layer = 0; layer < 28; ++layer) {
        const bool edge = layer == 0 || layer == 27;
        QCOMPARE(describe(plan.kvPerLayer[layer]), std::string(edge ? "bf16" : "fp8_e4m3/per_head"));
        QCOMPARE(plan.kvRulePerLayer[layer], edge ? 2 : kNoRule);
    }
    // Per layer and token 2 * 4 heads * 128 = 1024 elements. BF16: 28 * 2048 = 57344 B; recipe: 2 * 2048 +
    // 26 * 1024 = 30720 B; capacity 57344 / 30720 = 1.8667x. Scales: 26 layers * 2 * 4 heads * 4 B = 832 B.
    QCOMPARE(plan.bf16KvBytesPerToken, std::int64_t(57344));
    QCOMPARE(plan.kvBytesPerToken, std::int64_t(30720));
    QVERIFY(qAbs(plan.kvCapacityRatio() - 57344.0 / 30720.0) < 1e-12);
    QCOMPARE(plan.kvScaleBytes, std::int64_t(832));
}

// Long: a table, one row per malformed recipe and the message it must give; rows are read one at a time.
void TestRecipe::errors_data()
{
    // model: 0 syntax only, 1 the 4-layer config, 2 the same with tied embeddings.
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<int>("model");
    QTest::addColumn<QString>("location");
    QTest::addColumn<QString>("detail");

    QTest::newRow("unknown top-level key") << "r.yaml"
                                           << "version: 1\nnmae: x\n"
                                           << 0 << "line 2, column 1"
                                           << "unknown key 'nmae'";
    // "weights: {format: fp8_e4m3, " is 28 characters.
    QTest::newRow("unknown key in weights")
        << "r.yaml"
        << "version: 1\nweights: {format: fp8_e4m3, granularty: tensor}\n"
        << 0 << "line 2, column 29"
        << "weights.granularty: unknown key 'granularty' in weights (expected one of: format, granularity)";
    QTest::newRow("unknown key in rule") << "r.yaml"
                                         << "version: 1\nrules:\n  - match: lm_head\n    weight: {format: bf16}\n"
                                         << 0 << "line 4, column 5"
                                         << "unknown key 'weight'";
    QTest::newRow("duplicate key") << "r.yaml"
                                   << "version: 1\nkv_cache: {format: bf16}\nkv_cache: {format: bf16}\n"
                                   << 0 << "line 3, column 1"
                                   << "duplicate key 'kv_cache' (first given at line 2, column 1)";
    QTest::newRow("weights not a mapping") << "r.yaml"
                                           << "version: 1\nweights: fp8_e4m3\n"
                                           << 0 << "line 2, column 10"
                                           << "weights: expected a mapping, got a string";
    QTest::newRow("weights empty") << "r.yaml"
                                   << "version: 1\nweights:\nrules: []\n"
                                   << 0 << "line 2, column 1"
                                   << "expected a mapping, got nothing (null)";
    QTest::newRow("rules not a list") << "r.yaml"
                                      << "version: 1\nrules:\n  match: lm_head\n"
                                      << 0 << "line 3, column 3"
                                      << "expected a list of rules, got a mapping";
    QTest::newRow("name not a string") << "r.yaml"
                                       << "version: 1\nname: 12\n"
                                       << 0 << "line 2, column 7"
                                       << "expected a string, got an integer";
    QTest::newRow("version quoted") << "r.yaml"
                                    << "version: \"1\"\n"
                                    << 0 << "line 1, column 10"
                                    << "expected an integer, got a string";
    QTest::newRow("unsupported version") << "r.yaml"
                                         << "version: 2\n"
                                         << 0 << "line 1, column 10"
                                         << "unsupported recipe version 2 (this build reads version 1)";
    QTest::newRow("missing version") << "r.yaml"
                                     << "name: x\n"
                                     << 0 << "line 1, column 1"
                                     << "missing required key 'version'";
    QTest::newRow("empty file") << "r.yaml"
                                << "" << 0 << "line 1, column 1"
                                << "empty recipe";
    // "    weights: {format: " is 22 characters.
    QTest::newRow("unknown weight format")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: lm_head\n    weights: {format: fp9}\n"
        << 0 << "line 4, column 23"
        << "rules[0].weights.format: unknown weight format 'fp9' (valid: bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4, "
           "mxfp8, mxfp4, nvfp4)";
    QTest::newRow("unknown activation format") << "r.yaml"
                                               << "version: 1\nactivations: {format: int8}\n"
                                               << 0 << "line 2, column 23"
                                               << "unknown activation format 'int8' (valid: bf16, fp8_e4m3, mxfp8, "
                                                  "mxfp4, nvfp4)";
    QTest::newRow("unknown kv format") << "r.yaml"
                                       << "version: 1\nkv_cache: {format: fp8_e5m2}\n"
                                       << 0 << "line 2, column 20"
                                       << "unknown kv_cache format 'fp8_e5m2' (valid: bf16, fp8_e4m3, fp8_per_token_head, int8_per_token_head)";
    QTest::newRow("unknown kv scales") << "r.yaml"
                                       << "version: 1\nkv_cache: {format: fp8_e4m3, scales: per_row}\n"
                                       << 0 << "line 2, column 38"
                                       << "unknown kv_cache scales 'per_row' (valid: per_tensor, per_head)";
    // "weights: {format: bf16, " is 24 characters.
    QTest::newRow("granularity for bf16") << "r.yaml"
                                          << "version: 1\nweights: {format: bf16, granularity: channel}\n"
                                          << 0 << "line 2, column 25"
                                          << "bf16 has no scales and takes no granularity";
    // "weights: {format: int4, granularity: " is 37 characters.
    QTest::newRow("int4 with channel") << "r.yaml"
                                       << "version: 1\nweights: {format: int4, granularity: channel}\n"
                                       << 0 << "line 2, column 38"
                                       << "int4 takes granularity group128 only, not channel";
    // "weights: {format: nvfp4, granularity: " is 38 characters: the microscaling blocks are the format's own.
    QTest::newRow("nvfp4 with group32") << "r.yaml"
                                        << "version: 1\nweights: {format: nvfp4, granularity: group32}\n"
                                        << 0 << "line 2, column 39"
                                        << "nvfp4 takes granularity group16 only, not group32";
    QTest::newRow("int8 with tensor") << "r.yaml"
                                      << "version: 1\nweights: {format: int8, granularity: tensor}\n"
                                      << 0 << "line 2, column 38"
                                      << "int8 takes granularity channel only, not tensor";
    QTest::newRow("unknown granularity") << "r.yaml"
                                         << "version: 1\nweights: {format: fp8_e4m3, granularity: row}\n"
                                         << 0 << "line 2, column 42"
                                         << "unknown granularity 'row' (valid: tensor, channel, block128, group128, "
                                            "group32, group16)";
    // "kv_cache: {format: bf16, " is 25 characters.
    QTest::newRow("scales on bf16 kv") << "r.yaml"
                                       << "version: 1\nkv_cache: {format: bf16, scales: per_head}\n"
                                       << 0 << "line 2, column 26"
                                       << "bf16 has no scales, so 'scales' does not apply";
    // "kv_cache: {format: fp8_per_token_head, " is 39 characters, "kv_cache: {format: int8_per_token_head, " 40.
    QTest::newRow("scales on fp8_per_token_head")
        << "r.yaml"
        << "version: 1\nkv_cache: {format: fp8_per_token_head, scales: per_head}\n"
        << 0 << "line 2, column 40"
        << "computes one scale per token and KV head";
    QTest::newRow("calibration on int8_per_token_head")
        << "r.yaml"
        << "version: 1\nkv_cache: {format: int8_per_token_head, calibration: probe}\n"
        << 0 << "line 2, column 41"
        << "'calibration' does not apply (only fp8_e4m3 takes it)";
    QTest::newRow("rule without match") << "r.yaml"
                                        << "version: 1\nrules:\n  - weights: {format: bf16}\n"
                                        << 0 << "line 3, column 5"
                                        << "missing required key 'match'";
    QTest::newRow("rule sets nothing") << "r.yaml"
                                       << "version: 1\nrules:\n  - match: lm_head\n"
                                       << 0 << "line 3, column 5"
                                       << "sets nothing";
    // "  - match: " is 11 characters; a quoted value's column is its opening quote.
    QTest::newRow("reversed range")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: \"model.layers.{5-2}.mlp.*\"\n    weights: {format: bf16}\n"
        << 0 << "line 3, column 12"
        << "range 5-2 in \"model.layers.{5-2}.mlp.*\" is reversed (write 2-5)";
    QTest::newRow("contradicting rules")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: lm_head\n    weights: {format: bf16}\n"
           "  - match: model.layers.0.mlp.up_proj\n    weights: {format: int8}\n"
           "  - match: lm_head\n    weights: {format: fp8_e4m3}\n"
        << 0 << "line 8, column 5"
        << "contradicts rules[0] at line 4, column 5: both match \"lm_head\" but set weights to bf16 and "
           "fp8_e4m3/block128";
    QTest::newRow("contradicting weights through the embed alias")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: embed_tokens\n    weights: {format: bf16}\n"
           "  - match: model.embed_tokens\n    weights: {format: fp16}\n"
        << 0 << "line 6, column 5"
        << "contradicts rules[0] at line 4, column 5";
    QTest::newRow("malformed yaml") << "r.yaml"
                                    << "version: 1\nrules: [\n"
                                    << 0 << "line 3, column 1"
                                    << "malformed YAML";

    // Model checks (4 layers).
    QTest::newRow("layer 27 in a 4-layer model")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: model.layers.27.mlp.down_proj\n    weights: {format: bf16}\n"
        << 1 << "line 3, column 12"
        << "names no module of this model (the model has 4 layers, 0-3;";
    QTest::newRow("one list item out of range")
        << "r.yaml"
        << "version: 1\nkv_cache: {format: fp8_e4m3}\nrules:\n  - match: \"model.layers.{0,27}.self_attn\"\n"
           "    kv_cache: {format: bf16}\n"
        << 1 << "line 4, column 12"
        << "27 in {0,27} of match \"model.layers.{0,27}.self_attn\" names no module of this model (the model has 4 "
           "layers, 0-3)";
    QTest::newRow("range end out of range")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: model.layers.{0-5}.mlp.up_proj\n    weights: {format: int8}\n"
        << 1 << "line 3, column 12"
        << "the end of 0-5 in {0-5}";
    QTest::newRow("misspelled module")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: model.layers.*.mlp.down_prj\n    weights: {format: int8}\n"
        << 1 << "line 3, column 12"
        << "names no module of this model";
    QTest::newRow("kv_cache on linear modules")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: model.layers.*.mlp.down_proj\n    kv_cache: {format: fp8_e4m3}\n"
        << 1 << "line 4, column 5"
        << "kv_cache given, but match \"model.layers.*.mlp.down_proj\" names only weight modules";
    QTest::newRow("weights on attention blocks")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: model.layers.{0-1}.self_attn\n    weights: {format: fp8_e4m3}\n"
        << 1 << "line 4, column 5"
        << "weights given, but match";
    QTest::newRow("activations on the embedding")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: embed_tokens\n    activations: {format: fp8_e4m3}\n"
        << 1 << "line 4, column 5"
        << "activations given, but match \"embed_tokens\" names no linear module";
    QTest::newRow("W4A8, rule weights after default activations")
        << "r.yaml"
        << "version: 1\nactivations: {format: fp8_e4m3}\nrules:\n  - match: model.layers.{0-3}.mlp.*\n"
           "    weights: {format: int4}\n"
        << 1 << "line 5, column 5"
        << "model.layers.0.mlp.gate_proj gets int4 weights (line 5, column 5) with fp8_e4m3 activations (line 2, "
           "column 1): W4A8 is not supported";
    QTest::newRow("W4A8, rule activations after default weights")
        << "r.yaml"
        << "version: 1\nweights: {format: int4}\nrules:\n  - match: model.layers.2.*\n"
           "    activations: {format: fp8_e4m3}\n"
        << 1 << "line 5, column 5"
        << "model.layers.2.self_attn.q_proj gets int4 weights (line 2, column 1) with fp8_e4m3 activations";
    // The microscaling pairs (quant::isSupportedPair): W4A4 or W4A16 for nvfp4, never with fp8 activations, and nvfp4
    // activations only on nvfp4 weights; reported where the later decision was written.
    QTest::newRow("nvfp4 weights with fp8 activations")
        << "r.yaml"
        << "version: 1\nweights: {format: nvfp4}\nactivations: {format: fp8_e4m3}\n"
        << 1 << "line 3, column 1"
        << "model.layers.0.self_attn.q_proj gets nvfp4 weights (line 2, column 1) with fp8_e4m3 activations (line 3, "
           "column 1): nvfp4 weights take bf16 activations (weight-only) or nvfp4 activations";
    QTest::newRow("nvfp4 activations left on bf16 weights")
        << "r.yaml"
        << "version: 1\nweights: {format: nvfp4}\nactivations: {format: nvfp4}\nrules:\n  - match: model.layers.1.mlp.*\n"
           "    weights: {format: bf16}\n"
        << 1 << "line 6, column 5"
        << "model.layers.1.mlp.gate_proj gets bf16 weights (line 6, column 5) with nvfp4 activations (line 3, column "
           "1): nvfp4 activations need nvfp4 weights";
    QTest::newRow("mxfp8 activations on mxfp4 weights")
        << "r.yaml"
        << "version: 1\nweights: {format: mxfp4}\nrules:\n  - match: lm_head\n    activations: {format: mxfp8}\n"
        << 1 << "line 5, column 5"
        << "with mxfp8 activations (line 5, column 5): mxfp8 activations need mxfp8 weights";
    QTest::newRow("tied embedding in two formats")
        << "r.yaml"
        << "version: 1\nrules:\n  - match: lm_head\n    weights: {format: fp8_e4m3}\n"
        << 2 << "line 4, column 5"
        << "the model ties lm_head to model.embed_tokens";

    // JSON: location is the key path, then line and column.
    // Line 2 is ` "weights": {"format": "fp9"}}`: the value's quote is at column 24.
    QTest::newRow("json unknown format") << "r.json"
                                         << "{\"version\": 1,\n \"weights\": {\"format\": \"fp9\"}}\n"
                                         << 0 << "weights.format, line 2, column 24"
                                         << "unknown weight format 'fp9'";
    QTest::newRow("json wrong type") << "r.json"
                                     << "{\"version\": 1, \"name\": 7}" << 0 << "name, line 1, column 24"
                                     << "expected a string, got an integer";
    QTest::newRow("json rule out of range")
        << "r.json"
        << "{\"version\": 1,\n \"rules\": [\n  {\"match\": \"model.layers.9.mlp.up_proj\", \"weights\": {\"format\": "
           "\"int8\"}}]}\n"
        << 1 << "rules[0].match, line 3, column 13"
        << "the model has 4 layers";
    // The trailing comma: nlohmann stops at the '}' that starts line 4.
    QTest::newRow("json malformed") << "r.json"
                                    << "{\n  \"version\": 1,\n  \"name\": \"x\",\n}\n"
                                    << 0 << "line 4, column 1"
                                    << "malformed JSON: syntax error";
    QTest::newRow("json detected by content") << "recipe"
                                              << "{\"version\": 3}" << 0 << "version, line 1, column 13"
                                              << "unsupported recipe version 3";
}

void TestRecipe::errors()
{
    QFETCH(QString, file);
    QFETCH(QString, recipe);
    QFETCH(int, model);
    QFETCH(QString, location);
    QFETCH(QString, detail);
    try {
        const Recipe parsed = parseRecipe(recipe.toStdString(), file.toStdString());
        QVERIFY2(model != 0, "parsed without error");
        resolveRecipe(parsed, smallConfig(model == 2));
        QFAIL("resolved without error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), file);
        QCOMPARE(QString::fromStdString(error.location()), location);
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
}

void TestRecipe::ruleCountLimit()
{
    const std::string rule = "  - {match: lm_head, weights: {format: bf16}}\n"; // one line per rule
    const auto yamlRules = [&rule](std::size_t count) {
        std::string text = "version: 1\nrules:\n";
        for (std::size_t i = 0; i < count; ++i) {
            text += rule;
        }
        return text;
    };
    // At the limit: accepted, every rule kept.
    QCOMPARE(parseRecipe(yamlRules(Recipe::kMaxRules), "r.yaml").rules.size(), Recipe::kMaxRules);
    // One past it: refused at the first rule past the limit (line 3 holds rule 1, so rule 4097 is on line 4099),
    // while scanning, so the position is that rule's and not the list's.
    try {
        parseRecipe(yamlRules(Recipe::kMaxRules + 1), "r.yaml");
        QFAIL("4097 rules accepted");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.location()), QString("line 4099, column 5"));
        QVERIFY2(QString::fromStdString(error.detail()).startsWith("rules: more than 4096 rules, over the limit of 4096"),
            error.what());
    }
    // A JSON recipe is counted after parsing (JSON parses fast), and the message gives the count.
    nlohmann::json json = {{"version", 1}, {"rules", nlohmann::json::array()}};
    for (std::size_t i = 0; i < Recipe::kMaxRules + 3; ++i) {
        json["rules"].push_back({{"match", "lm_head"}, {"weights", {{"format", "bf16"}}}});
    }
    try {
        parseRecipe(json.dump(), "r.json");
        QFAIL("4099 JSON rules accepted");
    } catch (const InputError& error) {
        QVERIFY2(QString::fromStdString(error.detail()).contains("4099 rules, over the limit of 4096"), error.what());
    }
}

void TestRecipe::yamlListLimit()
{
    const std::vector<io::YamlListLimit> limit {{"a", 3, "more than 3 items"}};
    QCOMPARE(io::loadYaml("a: [1, 2, 3]\n", "f.yaml", limit)["a"].size(), size_t(3));
    QCOMPARE(io::loadYaml("a: 7\nb: [1, 2, 3, 4, 5]\n", "f.yaml", limit)["b"].size(), size_t(5)); // another key
    QCOMPARE(io::loadYaml("b: {a: [1, 2, 3, 4]}\n", "f.yaml", limit)["b"]["a"].size(), size_t(4)); // not top level
    QCOMPARE(io::loadYaml("- a\n- [1, 2, 3, 4]\n", "f.yaml", limit).size(), size_t(2)); // a key's value only
    // Items of any kind count, nested collections as one item each; the fourth is where it stops.
    const std::pair<const char*, const char*> refused[] = {
        {"a: [1, 2, 3, 4]\n", "line 1, column 14"},
        {"a:\n  - x\n  - [1, 2]\n  - {k: v}\n  - ~\n", "line 5, column 5"},
        {"x: &n 1\na: [1, 2, 3, *n]\n", "line 2, column 14"},
    };
    for (const auto& [text, location] : refused) {
        try {
            io::loadYaml(text, "f.yaml", limit);
            QFAIL(text);
        } catch (const InputError& error) {
            QCOMPARE(QString::fromStdString(error.file()), QString("f.yaml"));
            QCOMPARE(QString::fromStdString(error.location()), QString(location));
            QCOMPARE(QString::fromStdString(error.detail()), QString("a: more than 3 items"));
        }
    }
}

void TestRecipe::yamlJsonParity()
{
    const Recipe yaml = loadRecipe(fixture("spec-example.yaml"));
    const Recipe json = loadRecipe(fixture("spec-example.json"));
    QVERIFY(!yaml.fromJson);
    QVERIFY(json.fromJson);
    QVERIFY(yaml == json);
    QCOMPARE(yaml.rules.size(), size_t(4));
    QCOMPARE(yaml.name, std::string("fp8-keep-edges"));
    // Rule locations: YAML rule 1 is the item on line 10 ("  - match: ..."), JSON rule 1 the object on line 9.
    QCOMPARE(yaml.rules[1].location.line, 10);
    QCOMPARE(yaml.rules[1].location.column, 5);
    QCOMPARE(yaml.rules[1].weightsLocation.line, 11);
    QCOMPARE(json.rules[1].location.line, 9);
    QCOMPARE(json.rules[1].location.column, 5);
    QCOMPARE(json.rules[1].location.keyPath, std::string("rules[1]"));
    // Resolve to the same plan.
    const RecipePlan a = resolveRecipe(yaml, config28());
    const RecipePlan b = resolveRecipe(json, config28());
    for (const auto& [name, module] : a.modules) {
        QCOMPARE(text(b.modules.at(name)), text(module));
    }
    QCOMPARE(a.kvBytesPerToken, b.kvBytesPerToken);
    QCOMPARE(a.weightBytes, b.weightBytes);
}

void TestRecipe::roundTrip_data()
{
    QTest::addColumn<QString>("path");
    QTest::newRow("spec example yaml") << QString::fromStdString(fixture("spec-example.yaml"));
    QTest::newRow("spec example json") << QString::fromStdString(fixture("spec-example.json"));
    QTest::newRow("mixed") << QString::fromStdString(fixture("mixed-small.yaml"));
    for (const QString& name : QDir(kSourceDir + "/resources/recipes").entryList({"*.yaml"}, QDir::Files)) {
        QTest::newRow(qPrintable(name)) << kSourceDir + "/resources/recipes/" + name;
    }
}

void TestRecipe::roundTrip()
{
    QFETCH(QString, path);
    const Recipe original = loadRecipe(path.toStdString());
    const std::string yaml = recipeToYaml(original);
    const std::string json = recipeToJson(original);
    const Recipe fromYaml = parseRecipe(yaml, "round.yaml");
    const Recipe fromJson = parseRecipe(json, "round.json");
    QVERIFY2(fromYaml == original, yaml.c_str());
    QVERIFY2(fromJson == original, json.c_str());
    // Writing is stable: a second trip gives the same text.
    QCOMPARE(recipeToYaml(fromYaml), yaml);
    QCOMPARE(recipeToJson(fromJson), json);
    // Content detection without an extension picks the right parser.
    QVERIFY(parseRecipe(json, "noext").fromJson);
    QVERIFY(!parseRecipe(yaml, "noext").fromJson);
}

void TestRecipe::equalityIgnoresOnlyProvenance()
{
    const Recipe a = loadRecipe(fixture("spec-example.yaml"));
    Recipe b = parseRecipe(recipeToYaml(a), "elsewhere.yaml");
    QVERIFY(a == b);
    b.sourceFile = "other.json";
    b.fromJson = true;
    b.rules[0].location.line = 999;
    b.rules[0].matchLocation.column = 999;
    b.weightsLocation.line = 999;
    QVERIFY(a == b);
    b.rules[3].weights->granularity = Granularity::Tensor;
    QVERIFY(a != b);
    b = a;
    b.kvCache->scales = KvScales::PerTensor;
    QVERIFY(a != b);
    b = a;
    b.rules[2].match = "model.layers.{0,26}.self_attn";
    QVERIFY(a != b);
    // Names that YAML would read as other types survive the trip.
    b = a;
    b.name = "true";
    QVERIFY(parseRecipe(recipeToYaml(b), "n.yaml") == b);
    b.name = "1";
    QVERIFY(parseRecipe(recipeToYaml(b), "n.yaml") == b);
}

void TestRecipe::memory_data()
{
    // mixed-small.yaml on the 4-layer config (hidden 256, q 4*64 = 256, kv 2*64 = 128, intermediate 704,
    // vocab 258). Weight shapes are [out, in]; scales are float32; q/k/v carry bf16 biases (Qwen2).
    QTest::addColumn<QString>("module");
    QTest::addColumn<qint64>("valueBytes");
    QTest::addColumn<qint64>("scaleBytes");
    QTest::addColumn<qint64>("biasBytes");
    // fp8 block128 [256, 256]: 65536 B; 2 * 2 blocks * 4 B; bias 256 * 2 B.
    QTest::newRow("L0 q fp8 block128") << "model.layers.0.self_attn.q_proj" << qint64(65536) << qint64(16)
                                       << qint64(512);
    // fp8_e5m2 tensor [128, 256]: 32768 B; one scale; bias 128 * 2.
    QTest::newRow("L0 k fp8 tensor") << "model.layers.0.self_attn.k_proj" << qint64(32768) << qint64(4) << qint64(256);
    // fp8 channel (top-level default) [128, 256]: 128 scales.
    QTest::newRow("L0 v fp8 channel") << "model.layers.0.self_attn.v_proj" << qint64(32768) << qint64(512)
                                      << qint64(256);
    // o_proj [256, 256], no bias in Qwen2.
    QTest::newRow("L0 o fp8 channel") << "model.layers.0.self_attn.o_proj" << qint64(65536) << qint64(1024)
                                      << qint64(0);
    // int4 group128 [256, 704]: 256 rows * 352 B; 256 * ceil(704/128) = 256 * 6 scales.
    QTest::newRow("L1 down int4") << "model.layers.1.mlp.down_proj" << qint64(90112) << qint64(6144) << qint64(0);
    // int8 channel [704, 256]: 180224 B; 704 scales.
    QTest::newRow("L1 up int8") << "model.layers.1.mlp.up_proj" << qint64(180224) << qint64(2816) << qint64(0);
    // fp16 [704, 256]: 2 B each, no scales.
    QTest::newRow("L2 gate fp16") << "model.layers.2.mlp.gate_proj" << qint64(360448) << qint64(0) << qint64(0);
    // lm_head fp8 block128 [258, 256]: ceil(258/128) = 3 by 2 blocks.
    QTest::newRow("lm_head fp8 block128") << "lm_head" << qint64(66048) << qint64(24) << qint64(0);
    // Embedding stays bf16: 258 * 256 * 2.
    QTest::newRow("embedding bf16") << "model.embed_tokens" << qint64(132096) << qint64(0) << qint64(0);
    QTest::newRow("norm") << "model.layers.3.input_layernorm" << qint64(512) << qint64(0) << qint64(0);
}

void TestRecipe::memory()
{
    QFETCH(QString, module);
    QFETCH(qint64, valueBytes);
    QFETCH(qint64, scaleBytes);
    QFETCH(qint64, biasBytes);
    const RecipePlan plan = resolveRecipe(loadRecipe(fixture("mixed-small.yaml")), smallConfig());
    const WeightMemory& memory = plan.memory.at(module.toStdString());
    QCOMPARE(qint64(memory.valueBytes), valueBytes);
    QCOMPARE(qint64(memory.scaleBytes), scaleBytes);
    QCOMPARE(qint64(memory.biasBytes), biasBytes);
}

void TestRecipe::memoryTotals()
{
    const RecipePlan plan = resolveRecipe(loadRecipe(fixture("mixed-small.yaml")), smallConfig());
    // BF16 per layer: q 65536+256 bias, k 32768+128, v 32768+128, o 65536, gate/up/down 3 * 180224, two norms
    // 2 * 256 = 738304 parameters = 1476608 B. Model: 4 layers + embedding and lm_head 2 * 66048 + norm 256 =
    // 3085568 parameters = 6171136 B.
    QCOMPARE(plan.bf16WeightBytes, std::int64_t(6171136));
    // Recipe. An fp8-channel layer: q 65536+1024+512, k 32768+512+256, v the same, o 65536+1024,
    // gate/up 180224+2816 each, down 180224+1024, norms 1024 = 749056 B (layer 3).
    // Layer 0: q 65536+16+512 (1008 less), k 32768+4+256 (508 less) = 747540 B.
    // Layer 1: down int4 90112+6144 instead of 181248 (up int8 costs what fp8 channel does) = 664064 B.
    // Layer 2: fp16 = BF16 size = 1476608 B.
    // Embedding 132096, lm_head 66048+24, model.norm 512.
    // Sum: 747540 + 664064 + 1476608 + 749056 + 132096 + 66072 + 512 = 3835948 B.
    QCOMPARE(plan.weightBytes, std::int64_t(3835948));
    QVERIFY(qAbs(plan.weightRatio() - 3835948.0 / 6171136.0) < 1e-12);
    // KV: every layer fp8 (256 B per token and layer), BF16 512 B. Scales: layers 0-2 per tensor 2 * 4 B,
    // layer 3 per head 2 * 2 * 4 B: 24 + 16.
    QCOMPARE(plan.kvBytesPerToken, std::int64_t(1024));
    QCOMPARE(plan.bf16KvBytesPerToken, std::int64_t(2048));
    QCOMPARE(plan.kvScaleBytes, std::int64_t(40));
    QCOMPARE(toString(plan.kvPerLayer[3].calibration), std::string("every_sync"));
    QCOMPARE(toString(plan.kvPerLayer[2].calibration), std::string("probe"));

    // The memory map holds exactly the stored tensors: 4 * (7 + 2 norms) + embedding + lm_head + norm.
    QCOMPARE(plan.memory.size(), size_t(39));
}

void TestRecipe::tiedEmbeddingCountedOnce()
{
    const Recipe recipe = parseRecipe("version: 1\nrules:\n  - match: \"*\"\n    weights: {format: int8}\n", "t.yaml");
    const RecipePlan untied = resolveRecipe(recipe, smallConfig(false));
    const RecipePlan tied = resolveRecipe(recipe, smallConfig(true));
    QVERIFY(untied.memory.count(kLmHeadName) == 1);
    QVERIFY(tied.memory.count(kLmHeadName) == 0);
    QCOMPARE(describe(tied.modules.at(kLmHeadName).weights), describe(tied.modules.at(kEmbedName).weights));
    // The tied model saves one int8 [258, 256] table with 258 float32 row scales: 66048 + 1032 B; in BF16
    // 132096 B.
    QCOMPARE(untied.weightBytes - tied.weightBytes, std::int64_t(66048 + 1032));
    QCOMPARE(untied.bf16WeightBytes - tied.bf16WeightBytes, std::int64_t(132096));
    QCOMPARE(tied.bf16WeightBytes, std::int64_t(6171136 - 132096));
}

void TestRecipe::shippedRecipesValidate_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("lmHead"); // "WEIGHTS ACTIVATIONS"
    QTest::addColumn<QString>("layer1UpProj");
    QTest::addColumn<QString>("layer0Kv");
    QTest::addColumn<QString>("layer2Kv");
    QTest::newRow("bf16") << "bf16.yaml"
                          << "bf16 bf16"
                          << "bf16 bf16"
                          << "bf16"
                          << "bf16";
    QTest::newRow("fp8-kv") << "fp8-kv.yaml"
                            << "bf16 bf16"
                            << "bf16 bf16"
                            << "fp8_e4m3/per_head"
                            << "fp8_e4m3/per_head";
    QTest::newRow("fp8-w8a8-block") << "fp8-w8a8-block.yaml"
                                    << "bf16 bf16"
                                    << "fp8_e4m3/block128 fp8_e4m3"
                                    << "bf16"
                                    << "bf16";
    QTest::newRow("fp8-keep-edges") << "fp8-keep-edges.yaml"
                                    << "bf16 bf16"
                                    << "fp8_e4m3/block128 fp8_e4m3"
                                    << "bf16"
                                    << "fp8_e4m3/per_head";
    QTest::newRow("int4-weights") << "int4-weights.yaml"
                                  << "bf16 bf16"
                                  << "int4/group128 bf16"
                                  << "bf16"
                                  << "bf16";
    QTest::newRow("fp8-per-tensor") << "fp8-per-tensor.yaml"
                                    << "bf16 bf16"
                                    << "fp8_e4m3/tensor fp8_e4m3"
                                    << "fp8_e4m3/per_tensor"
                                    << "fp8_e4m3/per_tensor";
}

void TestRecipe::shippedRecipesValidate()
{
    QFETCH(QString, name);
    QFETCH(QString, lmHead);
    QFETCH(QString, layer1UpProj);
    QFETCH(QString, layer0Kv);
    QFETCH(QString, layer2Kv);
    // Every file in resources/recipes has a row here.
    QCOMPARE(QDir(kSourceDir + "/resources/recipes").entryList({"*.yaml", "*.json"}, QDir::Files).size(), 6);
    const Recipe recipe = loadRecipe((kSourceDir + "/resources/recipes/" + name).toStdString());
    const RecipePlan plan = resolveRecipe(recipe, smallConfig());
    QCOMPARE(QString::fromStdString(text(plan.modules.at(kLmHeadName))), lmHead);
    QCOMPARE(QString::fromStdString(text(plan.modules.at("model.layers.1.mlp.up_proj"))), layer1UpProj);
    QCOMPARE(QString::fromStdString(describe(plan.kvPerLayer[0])), layer0Kv);
    QCOMPARE(QString::fromStdString(describe(plan.kvPerLayer[2])), layer2Kv);
    // Also on tied embeddings (none of them gives the embedding and lm_head different formats).
    resolveRecipe(recipe, smallConfig(true));
}

void TestRecipe::cliCheck()
{
    QTemporaryDir directory;
    QVERIFY(directory.isValid());
    // The 4-layer config as a Hugging Face config.json, written by hand.
    QFile config(directory.filePath("config.json"));
    QVERIFY(config.open(QIODevice::WriteOnly));
    config.write(R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 256,
  "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 258, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "hidden_act": "silu"})");
    config.close();
    const std::string modelDir = directory.path().toStdString();
    const std::string keepEdges = (kSourceDir + "/resources/recipes/fp8-keep-edges.yaml").toStdString();

    CliResult table = runCli({"recipe", "check", keepEdges, "--model", modelDir});
    QVERIFY2(table.code == 0, table.err.c_str());
    QVERIFY2(table.out.find("e4m3/b128 a8") != std::string::npos, table.out.c_str());
    QVERIFY2(table.out.find("kv cache per token") != std::string::npos, table.out.c_str());

    CliResult json = runCli({"--json", "recipe", "check", keepEdges, "--model", modelDir});
    QVERIFY2(json.code == 0, json.err.c_str());
    const nlohmann::json plan = nlohmann::json::parse(json.out);
    QCOMPARE(plan["layers"].get<int>(), 4);
    QCOMPARE(
        plan["modules"]["model.layers.0.mlp.up_proj"]["weights"]["format"].get<std::string>(), std::string("bf16"));
    QCOMPARE(plan["modules"]["model.layers.1.mlp.up_proj"]["weights"]["granularity"].get<std::string>(),
        std::string("block128"));
    QCOMPARE(plan["modules"]["model.layers.3.mlp.down_proj"]["weights_rule"].get<int>(), 1);
    QCOMPARE(plan["kv_cache"][0]["format"].get<std::string>(), std::string("bf16"));
    QCOMPARE(plan["kv_cache"][1]["scales"].get<std::string>(), std::string("per_head"));
    // KV: layers 0 and 3 BF16 (512 B per token each), layers 1-2 fp8 (256 B).
    QCOMPARE(plan["kv_bytes_per_token"].get<std::int64_t>(), std::int64_t(1536));
    QCOMPARE(plan["bf16_kv_bytes_per_token"].get<std::int64_t>(), std::int64_t(2048));

    // Syntax only, without a model.
    CliResult syntax = runCli({"recipe", "check", fixture("spec-example.yaml")});
    QVERIFY2(syntax.code == 0, syntax.err.c_str());
    QVERIFY2(syntax.out.find("is valid") != std::string::npos, syntax.out.c_str());

    // The spec's 28-layer example against the 4-layer model: rule 1 (line 10) names layer 27.
    CliResult error = runCli({"recipe", "check", fixture("spec-example.yaml"), "--model", modelDir});
    QCOMPARE(error.code, 1);
    QVERIFY2(error.err.find("spec-example.yaml:line 10, column 12: rules[1].match:") != std::string::npos,
        error.err.c_str());
    QVERIFY2(error.err.find("the model has 4 layers") != std::string::npos, error.err.c_str());
}

MISMATCH_TEST_MAIN(TestRecipe)
#include "test_recipe.moc"

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
//     with PR #38138 (March 2026: fp8_per_tensor, fp8_per_block, quantization_config.ignore) and is documented from
//     docs.vllm.ai/en/v0.20.0/features/quantization/online/, so --target-version below 0.20 writes `fp8`;
//     fp8_per_channel came later with PR #44132 (merged June 2026, after v0.22.0), written from 0.23.
//   vLLM fp8 checkpoint config: vllm/model_executor/layers/quantization/fp8.py Fp8Config (quant_method fp8,
//     activation_scheme, weight_block_size, ignored_layers). vLLM reads a checkpoint's method from its config.json,
//     so the checkpoint form's engine arguments name no quantization, and its vllm_serve.sh serves the FP8
//     checkpoint (the one its llm-compressor oneshot script writes), never the BF16 model.
//   SGLang: sgl-project/sglang docs/advanced_features/quantization.md (0f4513c2f46be5ae1e0d9bf0a8f7b5471a8b3d16;
//     formerly docs/backend/quantization.md; Online Quantization: --quantization fp8 on a BF16 checkpoint) and its
//     environment registry (SGLANG_FP8_IGNORED_LAYERS = EnvStr, comma-separated module names; verl PR #6915
//     documents it for the SGLang FP8 rollout). KV scales: docs/advanced_features/quantized_kv_cache.md "Scaling
//     Factors" (03cd2ec4af85b66be8ef025238bc73c165416bdb) and the loader, see sglangKvScaleFile below.
//   verl: verl-project/verl docs/low_precision/fp8.md (1dda039b9c6311889a9c9a26040677e1254814f9; formerly
//     docs/advance/fp8.md: actor_rollout_ref.rollout.quantization, 128x128-block FP8 rollout for vLLM and SGLang);
//     engine_kwargs.vllm / engine_kwargs.sglang default to {} in verl/trainer/config, so overrides of their keys
//     need Hydra's `+`.
//   compressed-tensors: src/compressed_tensors/config/base.py CompressionFormat (float-quantized,
//     naive-quantized, pack-quantized, mixed-precision, dense); a mixed-precision config names each group's format
//     (as sglang's compressed_tensors tests build it: "format": "mixed-precision" with per-group "format"). A
//     KV-cache-only checkpoint is "dense" (compressors/format.py infer_model_format, see kvOnlyCheckpointIsDense).
//   ModelOpt: vllm/model_executor/layers/quantization/modelopt.py (00155cdecca722d98e34234c3d172725b7720b7d:
//     QUANT_ALGOS FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, W4A16_NVFP4, MXFP8, MIXED_PRECISION with
//     quantized_layers; ModelOptFp8PbWoLinearMethod runs FP8_PB_WO with dynamic 1x128 activations; from_config reads
//     config.json's flat form with `ignore` and kv_cache_scheme; the mixed loader builds FP8, NVFP4 and
//     W4A16_NVFP4 layers only). W4A16_AWQ is TensorRT-LLM's (tensorrt_llm QuantAlgo), not in vLLM's list.
//     NVIDIA/Model-Optimizer modelopt/torch/export/convert_hf_config.py convert_hf_quant_config_format
//     (a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73) writes config.json's KV cache as kv_cache_scheme.
//   llm-compressor oneshot: vLLM docs/features/quantization/quantized_kvcache.md (oneshot(model, dataset, recipe,
//     max_seq_length, num_calibration_samples); save_pretrained(save_dir, save_compressed=True)).
//   vLLM's per-token-head KV formats: vllm/config/cache.py (002f10e0cfa1373a19a0d2756598a34b700d20e5: CacheDType has
//     "int8_per_token_head" and "fp8_per_token_head"; the CLI is --kv-cache-dtype), added by vllm-project/vllm PR
//     #38378 (merged 2 April 2026, so written from 0.20, the first minor release cut after it); their scales are
//     computed in vllm/v1/attention/ops/triton_reshape_and_cache_flash.py _reshape_cache_per_token_head (float32
//     divisions, which Triton compiles to PTX div.full.f32: the export warns) and kept beside the cache
//     (vllm/v1/kv_cache_interface.py 001cabc1be16a59a70d720ed61a13b678c060a18, AttentionSpec.page_size_bytes). No
//     checkpoint format carries them: vLLM's compressed-tensors KV method loads static per-tensor or per-head scales
//     (compressed_tensors.py CompressedTensorsKVCacheMethod.validate_kv_cache_scheme). SGLang's --kv-cache-dtype
//     choices are auto, fp8_e5m2, fp8_e4m3, bf16, bfloat16, fp4_e2m1 (sgl-project/sglang
//     python/sglang/srt/server_args.py, 469c63e54e7d94591617ef9590c6aa26d54dc1bb): no per-token-head format.
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/analysis/rollout_measure.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/engine/engine_model.h"
#include "core/io/recipe_export.h"
#include "core/io/recipe_import.h"
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
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
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

// The file `name` of an export bundle, or nullptr.
const io::ExportFile* bundleFile(const io::ExportResult& result, const std::string& name)
{
    for (const io::ExportFile& file : result.files) {
        if (file.name == name) {
            return &file;
        }
    }
    return nullptr;
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

// mxfp8-3layer.yaml leaves layer 0's attention projections and lm_head in BF16.
std::vector<std::string> mxfp8Ignored()
{
    std::vector<std::string> names = layerModules(0);
    names.resize(4); // q_proj, k_proj, v_proj, o_proj
    names.push_back("lm_head");
    return names;
}

// verl's trainer config schema at verl-project/verl 1dda039b9c6311889a9c9a26040677e1254814f9, transcribed by hand:
// the keys an on-policy distillation export may set plainly (or with Hydra's ++), each from the file that declares
// it (verl/trainer/config/ppo_trainer.yaml's defaults merge these files into _generated_ppo_trainer.yaml).
const std::set<std::string> kVerlSchemaKeys = {
    // verl/trainer/config/data/legacy_data.yaml (data@data)
    "data.train_files", "data.val_files",
    // verl/trainer/config/ppo_trainer.yaml (algorithm: AlgoConfig)
    "algorithm.adv_estimator",
    // verl/trainer/config/algorithm/rollout_correction.yaml (algorithm@algorithm.rollout_correction;
    // verl/trainer/config/algorithm.py RolloutCorrectionConfig)
    "algorithm.rollout_correction.rollout_is", "algorithm.rollout_correction.rollout_is_threshold",
    "algorithm.rollout_correction.rollout_rs", "algorithm.rollout_correction.rollout_rs_threshold",
    "algorithm.rollout_correction.bypass_mode",
    // verl/trainer/config/model/hf_model.yaml (model@actor_rollout_ref.model)
    "actor_rollout_ref.model.path",
    // verl/trainer/config/actor/actor.yaml (actor@actor_rollout_ref.actor)
    "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.actor.ppo_epochs",
    // verl/trainer/config/rollout/rollout.yaml (rollout@actor_rollout_ref.rollout; quantization: null)
    "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.quantization",
    "actor_rollout_ref.rollout.calculate_log_probs",
    // verl/trainer/config/distillation/distillation.yaml (distillation@distillation) and
    // verl/workers/config/distillation.py (DistillationConfig, DistillationTeacherModelConfig, DistillationLossConfig)
    "distillation.enabled", "distillation.n_gpus_per_node", "distillation.nnodes",
    "distillation.teacher_models.teacher_model.model_path", "distillation.teacher_models.teacher_model.inference.name",
    "distillation.distillation_loss.loss_mode", "distillation.distillation_loss.topk",
    "distillation.distillation_loss.use_task_rewards", "distillation.distillation_loss.use_policy_gradient",
    "distillation.distillation_loss.loss_max_clamp", "distillation.distillation_loss.log_prob_min_clamp",
};

// Mappings verl's schema declares empty, whose keys are the engine's own arguments, which Hydra adds with `+`:
// rollout.yaml's engine_kwargs {vllm: {}, sglang: {}}. The arguments: vLLM vllm/config/cache.py CacheConfig
// (kv_cache_dtype, kv_cache_dtype_skip_layers); SGLang python/sglang/srt/server_args.py (kv_cache_dtype).
const std::map<std::string, std::set<std::string>> kVerlOpenMappings = {
    {"actor_rollout_ref.rollout.engine_kwargs.vllm", {"kv_cache_dtype", "kv_cache_dtype_skip_layers"}},
    {"actor_rollout_ref.rollout.engine_kwargs.sglang", {"kv_cache_dtype"}},
};

// "" when verl's schema takes `key` set with the Hydra override `prefix` ("", "+" or "++"; nullptr: a key of the
// YAML form, which merges into the config), else what is wrong.
std::string verlSchemaProblem(const std::string& key, const char* prefix)
{
    if (kVerlSchemaKeys.count(key)) {
        return !prefix || std::string(prefix) != "+" ? "" : key + " is declared by verl's schema: Hydra refuses +";
    }
    for (const auto& [mapping, arguments] : kVerlOpenMappings) {
        if (key.rfind(mapping + ".", 0) == 0) {
            if (!arguments.count(key.substr(mapping.size() + 1))) {
                return key + " is not an argument of that engine";
            }
            return !prefix || std::string(prefix) == "+" ? "" : key + " is not declared by verl's schema: it needs +";
        }
    }
    return key + " is not a key of verl's schema";
}

// A shell word as the shell passes it on: '...' literal, "..." without its quotes, \x as x.
std::string shellUnquote(const std::string& word)
{
    std::string out;
    for (size_t i = 0; i < word.size(); ++i) {
        if (word[i] == '\'' || word[i] == '"') {
            const size_t end = word.find(word[i], i + 1);
            out += word.substr(i + 1, end - i - 1);
            i = end;
        } else if (word[i] == '\\' && i + 1 < word.size()) {
            out += word[++i];
        } else {
            out += word[i];
        }
    }
    return out;
}

struct ParsedOverride {
    std::string prefix; // "", "+" or "++"
    std::string key;
    std::string value;
};

// The Hydra overrides of verl_overrides.txt or of verl_opd.sh's command: the lines `    WORD \` (the last, "$@",
// has no backslash).
std::vector<ParsedOverride> hydraOverrides(const std::string& text)
{
    std::vector<ParsedOverride> overrides;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.rfind("    ", 0) != 0 || line.size() < 7 || line.compare(line.size() - 2, 2, " \\") != 0) {
            continue;
        }
        const std::string word = shellUnquote(line.substr(4, line.size() - 6));
        const size_t plus = word.find_first_not_of('+');
        const size_t equals = word.find('=');
        overrides.push_back({word.substr(0, plus), word.substr(plus, equals - plus), word.substr(equals + 1)});
    }
    return overrides;
}

// The leaves of a YAML mapping by dotted path.
void yamlLeaves(const YAML::Node& node, const std::string& prefix, std::map<std::string, YAML::Node>& out)
{
    for (const auto& entry : node) {
        const std::string path = prefix + entry.first.as<std::string>();
        if (entry.second.IsMap()) {
            yamlLeaves(entry.second, path + ".", out);
        } else {
            out[path] = entry.second;
        }
    }
}

std::map<std::string, YAML::Node> yamlLeaves(const std::string& text)
{
    std::map<std::string, YAML::Node> out;
    yamlLeaves(YAML::Load(text), "", out);
    return out;
}

io::ExportOptions opdOptions(const std::string& objective, std::int64_t topK = 0,
    const std::string& correction = "none", double cap = 2.0, io::VerlRollout rollout = io::VerlRollout::Vllm)
{
    io::ExportOptions options;
    options.target = io::ExportTarget::Verl;
    options.verlRollout = rollout;
    options.modelPath = demoModel();
    io::VerlDistillation opd;
    opd.teacherPath = "/teachers/arith teacher";
    opd.objective = objective;
    opd.topK = topK;
    opd.correction = correction;
    opd.correctionCap = cap;
    options.distillation = opd;
    return options;
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
    void vllmCheckpointServesTheFp8Checkpoint();
    void sglangKvScaleFile();
    void sglangKvScalesFromProbe();
    void sglangAndVerlDocPaths();
    void modelOptConfigJsonKvCacheScheme();
    void modelOptMixedWarnsWhatVllmDoesNotDispatch();
    void kvOnlyCheckpointIsDense();
    void verlOpdKeysAreInVerlsSchema();
    void verlOpdLossFollowsObjective_data();
    void verlOpdLossFollowsObjective();
    void verlOpdCorrection();
    void verlOpdRefusals();
    void compressedCheckpointServe();
    void vllmPerTokenHeadKvCache();
    void microscalingCompressedTensorsByHand();
    void microscalingModelOptByHand();
    void microscalingVllmForms();
    void microscalingSglangMxfp8();
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
        {"fp8-per-tensor.yaml", "vllm", {"--target-version", "0.19"}, "0.19"},
        // 0.21 has the online frontend (docs.vllm.ai/en/v0.20.0/features/quantization/online/, PR #38138).
        {"fp8-per-tensor.yaml", "vllm", {"--target-version", "0.21"}, "0.21"},
        // SGLang (docs/advanced_features/quantization.md Online Quantization; SGLANG_FP8_IGNORED_LAYERS).
        {"bf16.yaml", "sglang", {}, ""},
        {"fp8-per-tensor.yaml", "sglang", {}, ""},
        // verl (verl-project/verl docs/low_precision/fp8.md; engine_kwargs.vllm / engine_kwargs.sglang).
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
    // vLLM reads the method from the checkpoint's config.json; a --quantization naming another method (fp8 against
    // the compressed-tensors checkpoint llm-compressor writes) is refused at load, so none is written.
    QVERIFY(!fp8Checkpoint["engine_args"].contains("quantization"));
    QCOMPARE(fp8Checkpoint["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));

    // fp8-per-tensor to vLLM: fp8_per_tensor, only lm_head ignored; before 0.20 plain `fp8` and no ignore list
    // (the online frontend is documented from docs.vllm.ai/en/v0.20.0/features/quantization/online/).
    const json perTensor = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Vllm));
    QCOMPARE(perTensor["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_tensor"));
    QCOMPARE(perTensor["engine_args"]["quantization_config"]["ignore"], json({"lm_head"}));
    io::ExportOptions legacy;
    legacy.target = io::ExportTarget::Vllm;
    legacy.targetVersion = "0.19.2";
    const json old = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), legacy));
    QCOMPARE(old["engine_args"]["quantization"].get<std::string>(), std::string("fp8"));
    QVERIFY(!old["engine_args"].contains("quantization_config"));
    for (const char* frontend : {"0.20", "0.21.2"}) {
        io::ExportOptions release;
        release.target = io::ExportTarget::Vllm;
        release.targetVersion = frontend;
        const json online = json::parse(exportText(shippedRecipe("fp8-per-tensor.yaml"), release));
        QCOMPARE(online["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_tensor"));
        QCOMPARE(online["engine_args"]["quantization_config"]["ignore"], json({"lm_head"}));
    }
    // A channel recipe is vLLM's fp8_per_channel shorthand (per-channel weights, dynamic per-token activations).
    const std::string channel = writeRecipe("channel.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: channel}\n"
        "activations: {format: fp8_e4m3}\n");
    QCOMPARE(json::parse(exportText(channel, io::ExportTarget::Vllm))["engine_args"]["quantization"],
        json("fp8_per_channel"));
    io::ExportOptions perChannelRelease;
    perChannelRelease.target = io::ExportTarget::Vllm;
    perChannelRelease.targetVersion = io::kVllmPerChannelShorthandRelease;
    QCOMPARE(json::parse(exportText(channel, perChannelRelease))["engine_args"]["quantization"], json("fp8_per_channel"));

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
    // "v0.22.1", "0.22.1rc1"-style patch levels and "current" are releases with the online frontend; it is
    // documented from 0.20 (docs.vllm.ai/en/v0.20.0/features/quantization/online/).
    for (const char* good : {"current", "v0.22.1", "0.22", "1.0", "0.22.1rc1", "0.20", "0.21.3"}) {
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
        QStringList({"README.txt", "compressed-tensors.json", "llm-compressor.yaml", "llm_compressor_oneshot.py",
            "vllm_serve.sh"}));
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

// Long: one row per refusal of every target (a table; splitting it by target would scatter one list of rules).
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
    row("block to vllm 0.19", "shipped:fp8-w8a8-block.yaml", "vllm",
        {"block128 granularity of fp8 weights", "before vLLM 0.20 has per-tensor weight scales only"}, 0, "0.19");
    row("ignored layers to vllm 0.19", "fixture:keep-edges-3layer.yaml", "vllm",
        {"bf16 weights on model.layers.0.self_attn.q_proj", "no list of layers to leave unquantized"}, 0, "0.19.5");
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
    row("channel to vllm 0.19", channel, "vllm", {"channel granularity of fp8 weights", "per-tensor weight scales only"},
        0, "0.19");
    // 0.20-0.22 have the online frontend but not its fp8_per_channel shorthand (vllm-project/vllm PR #44132).
    for (const char* release : {"0.20", "0.21", "0.22.1"}) {
        row((std::string("channel to vllm ") + release).c_str(), channel, "vllm",
            {"channel granularity of fp8 weights", "fp8_per_tensor and fp8_per_block only", "PR #44132"}, 0, release);
    }
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
    // vLLM's per-token-head KV formats: only vLLM's kv_cache_dtype says them, from 0.20 (PR #38378).
    const char* fp8TokenHead = "fixture:fp8-per-token-head-kv-3layer.yaml";
    const char* int8TokenHead = "fixture:int8-per-token-head-kv-3layer.yaml";
    // KV only: SGLang's online fp8 and vLLM before 0.20 would refuse the fixture's block-FP8 weights first.
    const char* fp8TokenHeadKvOnly = "version: 1\n"
                                     "kv_cache: {format: fp8_per_token_head}\n";
    row("fp8_per_token_head to sglang", fp8TokenHeadKvOnly, "sglang",
        {"fp8_per_token_head KV cache (layer 0)", "no per-token-head format", "server_args.py", "export --to vllm"});
    row("int8_per_token_head to verl", int8TokenHead, "verl", {"int8_per_token_head KV cache (layer 1)", "--to vllm"});
    row("fp8_per_token_head to verl sglang rollout", fp8TokenHead, "verl", {"fp8_per_token_head KV cache (layer 0)"}, 0,
        "sglang");
    for (const char* target : {"llm-compressor", "compressed-tensors", "modelopt"}) {
        row((std::string("int8_per_token_head to ") + target).c_str(), int8TokenHead, target,
            {"int8_per_token_head KV cache (layer 1)", "calibrated into the checkpoint", "export --to vllm"});
    }
    for (const char* release : {"0.19", "0.18.1"}) {
        row((std::string("fp8_per_token_head to vllm ") + release).c_str(), fp8TokenHeadKvOnly, "vllm",
            {"fp8_per_token_head KV cache (layer 0)", "PR #38378",
                "--target-version " + QString(release) + " is before 0.20"},
            0, release);
    }
    row("fp8_e4m3 beside int8_per_token_head to vllm",
        "version: 1\n"
        "kv_cache: {format: fp8_e4m3}\n"
        "rules:\n"
        "  - match: \"model.layers.2.self_attn\"\n"
        "    kv_cache: {format: int8_per_token_head}\n",
        "vllm", {"KV-cache format int8_per_token_head on layer 2 and fp8_e4m3 on layer 0", "one KV-cache scheme"});

    // The microscaling formats where a target has no form for them (export_microscaling.cpp cites the sources).
    const char* nvfp4WeightOnly = "fixture:nvfp4-weight-only-3layer.yaml";
    const char* mxfp4 = "fixture:mxfp4-3layer.yaml";
    const char* mxfp8 = "fixture:mxfp8-3layer.yaml";
    const char* mxfp8WeightOnly = "version: 1\n"
                                  "weights: {format: mxfp8}\n"
                                  "activations: {format: bf16}\n";
    // vLLM's online shorthands have no NVFP4 for linear layers (vllm/config/quantization.py _ONLINE_SHORTHANDS:
    // nvfp4_per_token is MoE-only); mxfp8 and mxfp4 from their releases.
    row("nvfp4 online to vllm", nvfp4WeightOnly, "vllm",
        {"nvfp4/group16 weights with bf16 activations on model.layers.0.self_attn.q_proj",
            "no NVFP4 scheme for linear layers", "nvfp4_per_token", "--vllm-form checkpoint"});
    row("mxfp8 online to vllm 0.20", mxfp8, "vllm",
        {"vLLM's online mxfp8 with quantization_config.ignore is written for vLLM 0.21 and later",
            "--target-version 0.20 is before it"},
        0, "0.20");
    row("mxfp4 online to vllm 0.28", mxfp4, "vllm",
        {"vLLM's online mxfp4 with quantization_config.ignore is written for vLLM 0.29 and later", "PR #49347",
            "--target-version 0.28.1 is before it"},
        0, "0.28.1");
    row("mixed microscaling to vllm checkpoint", "fixture:mixed-microscaling-3layer.yaml", "vllm",
        {"mixed weight formats across layers", "--to compressed-tensors or --to modelopt for several"}, 0,
        "checkpoint");
    // ModelOpt: no MXFP4 quant_algo in vLLM's loader; its MXFP8 quantizes inputs.
    row("mxfp4 to modelopt", mxfp4, "modelopt",
        {"mxfp4/group32 weights with mxfp4 activations on model.layers.0.self_attn.q_proj", "no MXFP4 quant_algo",
            "QUANT_ALGOS", "--to compressed-tensors"});
    row("weight-only mxfp8 to modelopt", mxfp8WeightOnly, "modelopt",
        {"mxfp8/group32 weights with bf16 activations", "quantizes weights and inputs", "MXFP8A16"});
    // SGLang: online mxfp8 only (server_args.py: mxfp4 MoE-only), and that with MXFP8 activations.
    row("nvfp4 to sglang", nvfp4WeightOnly, "sglang", {"nvfp4/group16 weights", "MoE experts only", "server_args.py"});
    row("mxfp4 to sglang", mxfp4, "sglang", {"mxfp4/group32 weights", "SGLang's online fp8 and mxfp8 only"});
    row("weight-only mxfp8 to sglang", mxfp8WeightOnly, "sglang", {"weight-only mxfp8", "w8a8_mxfp8_linear"});
    // verl: fp8 (or torchao) rollout quantization; NVFP4 comes with QAT (docs/low_precision/nvfp4_qat.md).
    row("nvfp4 to verl", nvfp4WeightOnly, "verl",
        {"nvfp4/group16 weights on model.layers.0.self_attn.q_proj", "fp8 (or torchao", "nvfp4_qat.md"});
    row("mxfp4 to verl sglang rollout", mxfp4, "verl", {"mxfp4/group32 weights", "quantization-aware training"}, 0,
        "sglang");
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

void TestExport::vllmCheckpointServesTheFp8Checkpoint()
{
    // The checkpoint form used to serve the BF16 --model with --quantization fp8, which is vLLM's older online
    // per-tensor FP8 without the ignore list: not the recipe. vLLM reads a checkpoint's method from its config.json
    // (vllm/model_executor/layers/quantization/fp8.py Fp8Config for quant_method fp8, compressed_tensors.py
    // CompressedTensorsConfig for llm-compressor's checkpoints), so the command serves the FP8 checkpoint and names
    // no --quantization. llm-compressor makes it: oneshot(model, dataset, recipe, ...) and
    // save_pretrained(SAVE_DIR, save_compressed=True) (vLLM docs/features/quantization/quantized_kvcache.md).
    const QString dir = temporary_.path() + "/ready/vllm-checkpoint";
    const CliResult cli = runCli({"export", fixture("keep-edges-3layer.yaml"), "--to", "vllm", "--vllm-form",
        "checkpoint", "--model", demoModel(), "--out", dir.toStdString()});
    QVERIFY2(cli.code == 0, cli.err.c_str());
    QCOMPARE(QDir(dir).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "config_quantization_config.json", "llm-compressor.yaml", "llm_compressor_oneshot.py",
            "vllm.json", "vllm_llm.py", "vllm_serve.sh"}));
    // The directory the oneshot script saves into: the model directory's name and the recipe's.
    const std::string saveDir = "arith-teacher-keep-edges-3layer";
    const std::string serve = readFile((dir + "/vllm_serve.sh").toStdString());
    QVERIFY2(serve.find("CHECKPOINT=${1:-" + saveDir + "}\n") != std::string::npos, serve.c_str());
    QVERIFY2(serve.find("vllm serve \"$CHECKPOINT\" \\\n    --kv-cache-dtype fp8_e4m3\n") != std::string::npos,
        serve.c_str());
    QVERIFY2(serve.find("python3 llm_compressor_oneshot.py") != std::string::npos, serve.c_str());
    QVERIFY2(serve.find("    --quantization") == std::string::npos, serve.c_str()); // no flag, only the comment
    QVERIFY2(serve.find("vllm serve " + demoModel()) == std::string::npos, serve.c_str()); // never the BF16 model
    const std::string oneshot = readFile((dir + "/llm_compressor_oneshot.py").toStdString());
    QVERIFY(oneshot.find("MODEL_ID = \"" + demoModel() + "\"\n") != std::string::npos);
    QVERIFY(oneshot.find("SAVE_DIR = MODEL_ID.rstrip(\"/\").split(\"/\")[-1] + \"-keep-edges-3layer\"\n")
        != std::string::npos);
    QVERIFY(oneshot.find("load_dataset(") != std::string::npos); // the FP8 KV scales are calibrated
    QVERIFY(oneshot.find("model.save_pretrained(SAVE_DIR, save_compressed=True)\n") != std::string::npos);
    QCOMPARE(readFile((dir + "/llm-compressor.yaml").toStdString()),
        readFile(fixture("golden/keep-edges-3layer.llm-compressor.yaml")));
    const std::string llm = readFile((dir + "/vllm_llm.py").toStdString());
    QVERIFY2(llm.find("CHECKPOINT = sys.argv[1] if len(sys.argv) > 1 else \"" + saveDir + "\"\n") != std::string::npos,
        llm.c_str());
    QVERIFY2(llm.find("    model=CHECKPOINT,\n") != std::string::npos, llm.c_str());
    QVERIFY2(llm.find("quantization=") == std::string::npos, llm.c_str());

    // A recipe llm-compressor cannot write (a BF16 KV cache on one layer): the command needs the checkpoint's
    // directory and still never names the BF16 model.
    const std::string kvSkip = writeRecipe("checkpoint-kv-skip.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: block128}\n"
        "activations: {format: fp8_e4m3}\n"
        "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
        "rules:\n"
        "  - match: \"model.layers.1.self_attn\"\n"
        "    kv_cache: {format: bf16}\n");
    io::ExportOptions checkpoint;
    checkpoint.target = io::ExportTarget::Vllm;
    checkpoint.vllmForm = io::VllmForm::Checkpoint;
    checkpoint.modelPath = demoModel();
    const io::ExportResult skip = exportResult(kvSkip, checkpoint);
    QVERIFY(bundleFile(skip, "llm_compressor_oneshot.py") == nullptr);
    const std::string needsArgument = bundleFile(skip, "vllm_serve.sh")->text;
    QVERIFY2(needsArgument.find("CHECKPOINT=${1:?usage: vllm_serve.sh FP8_CHECKPOINT_DIR}\n") != std::string::npos,
        needsArgument.c_str());
    QVERIFY2(needsArgument.find("llm-compressor cannot write this recipe (") != std::string::npos
            && needsArgument.find("a bf16 KV cache on layer 1 while layer 0 is fp8_e4m3 cannot be exported --to "
                                  "compressed-tensors")
                != std::string::npos,
        needsArgument.c_str());
    QVERIFY2(needsArgument.find("--kv-cache-dtype-skip-layers 1\n") != std::string::npos, needsArgument.c_str());
    QVERIFY(needsArgument.find("vllm serve " + demoModel()) == std::string::npos);
    // A recipe that quantizes nothing: the BF16 model as it is, without --quantization.
    const io::ExportResult bf16 = exportResult(shippedRecipe("bf16.yaml"), checkpoint);
    QCOMPARE(bundleFile(bf16, "vllm_serve.sh")->text,
        "#!/bin/sh\nvllm serve " + demoModel() + " \\\n    --kv-cache-dtype auto\n");
}

void TestExport::sglangKvScaleFile()
{
    // SGLang takes calibrated KV scales as a JSON file: docs/advanced_features/quantized_kv_cache.md "Scaling
    // Factors" (sgl-project/sglang 03cd2ec4af85b66be8ef025238bc73c165416bdb): {"kv_cache": {"dtype":
    // "float8_e4m3fn", "scaling_factor": {TP rank: {layer: scale}}}}. Its loader,
    // python/sglang/srt/model_loader/weight_utils.py kv_cache_scales_loader (00b08c497f0735678e084ae5e3dd88ca06b46627),
    // validates QuantParamSchema: model_type (Optional[str] without a default: required, and equal to the model's
    // config model_type), kv_cache.dtype == "float8_e4m3fn", scaling_factor Dict[int, Dict[int, float]] with exactly
    // tp_size ranks and exactly num_hidden_layers layers per rank; a file that fails is logged and 1.0 is used.
    // python/sglang/srt/models/qwen2.py (0005b7e1e2523e7ed40a5f6a43a62e2306e95c55) load_kv_cache_scales sets
    // k_scale = v_scale = the layer's factor; python/sglang/srt/model_executor/model_runner.py
    // (0005834cdb2a5b7472789ccbf0d3361b5cf853b8) loads the file only with kv_cache_dtype "fp8_e4m3".
    using nlohmann::json;
    const quant::Recipe recipe = quant::loadRecipe(shippedRecipe("fp8-per-tensor.yaml"));
    const model::ModelConfig config = model::loadConfig(demoModel() + "/config.json");
    const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
    // The recipe's calibrated scales as the engine measures them (per tensor, K and V of every layer).
    engine::KvScaleTable table;
    const std::vector<std::pair<float, float>> measured = {{0.5f, 0.25f}, {0.125f, 0.125f}, {0.0625f, 2.0f}};
    for (const auto& [key, value] : measured) {
        table.keys.push_back(at::full({1}, key, at::kFloat));
        table.values.push_back(at::full({1}, value, at::kFloat));
    }
    const io::CalibratedKvScales scales = io::calibratedKvScales(config, table.keys, table.values);
    const std::string modelType = json::parse(readFile(demoModel() + "/config.json"))["model_type"].get<std::string>();
    QCOMPARE(scales.modelType, modelType);
    io::ExportOptions options;
    options.target = io::ExportTarget::Sglang;
    options.modelPath = demoModel();
    options.kvScales = scales;
    const io::ExportResult result = io::exportBundle(recipe, plan, options);
    const io::ExportFile* file = bundleFile(result, "sglang_kv_scales.json");
    QVERIFY(file != nullptr);
    const json scaleFile = json::parse(file->text);
    QCOMPARE(scaleFile.size(), size_t(2)); // model_type and kv_cache, nothing the schema does not read
    QCOMPARE(scaleFile["model_type"].get<std::string>(), modelType);
    QCOMPARE(scaleFile["kv_cache"].size(), size_t(2));
    QCOMPARE(scaleFile["kv_cache"]["dtype"].get<std::string>(), std::string("float8_e4m3fn"));
    const json& ranks = scaleFile["kv_cache"]["scaling_factor"];
    QCOMPARE(ranks.size(), size_t(1)); // tp_size 1
    const json& layers = ranks["0"];
    QCOMPARE(static_cast<std::int64_t>(layers.size()), config.numLayers); // exactly num_hidden_layers
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const json& factor = layers[std::to_string(layer)]; // int keys as JSON strings, read by pydantic as int
        QVERIFY(factor.is_number_float());
        // One scale for K and V: the larger of the two, so that neither saturates.
        const auto& [key, value] = measured[static_cast<size_t>(layer)];
        QCOMPARE(factor.get<double>(), static_cast<double>(std::max(key, value)));
    }
    QVERIFY(warns(result.warnings, "on 2 of 3 layers the other tensor is rounded on a coarser grid"));
    QVERIFY(!warns(result.warnings, "uses 1.0 where it has none"));
    // sglang.json and the launch command pass the file, found beside the script.
    const json server = json::parse(result.text)["server_args"];
    QCOMPARE(server["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    QCOMPARE(server["quantization_param_path"].get<std::string>(), std::string("sglang_kv_scales.json"));
    const std::string launch = bundleFile(result, "sglang_launch.sh")->text;
    QVERIFY2(launch.find(" \\\n    --quantization-param-path \"$(dirname \"$0\")/sglang_kv_scales.json\"")
            != std::string::npos,
        launch.c_str());
    // Tensor parallelism: one identical entry per rank (a per-tensor scale holds for every rank's heads).
    options.tensorParallelSize = 2;
    const json twoRanks = json::parse(bundleFile(io::exportBundle(recipe, plan, options), "sglang_kv_scales.json")->text);
    QCOMPARE(twoRanks["kv_cache"]["scaling_factor"].size(), size_t(2));
    QCOMPARE(twoRanks["kv_cache"]["scaling_factor"]["1"], twoRanks["kv_cache"]["scaling_factor"]["0"]);
    // ... and SGLang launched with as many ranks (another --tp-size would not match the file's entries).
    const std::string twoRankLaunch = bundleFile(io::exportBundle(recipe, plan, options), "sglang_launch.sh")->text;
    QVERIFY2(twoRankLaunch.find(" \\\n    --tp-size 2\n") != std::string::npos, twoRankLaunch.c_str());
    QVERIFY(launch.find("--tp-size") == std::string::npos); // one rank: SGLang's default
    options.tensorParallelSize = 1;
    // Without scales: no file, and the warning says that SGLang then uses 1.0.
    io::ExportOptions none = options;
    none.kvScales.reset();
    const io::ExportResult plain = io::exportBundle(recipe, plan, none);
    QVERIFY(bundleFile(plain, "sglang_kv_scales.json") == nullptr);
    QVERIFY(warns(plain.warnings, "--quantization-param-path, and uses 1.0 where it has none"));
    // A file SGLang would reject (and silently replace by 1.0) is refused here.
    auto refused = [&](io::CalibratedKvScales bad, const std::string& part) {
        io::ExportOptions withBad = options;
        withBad.kvScales = std::move(bad);
        try {
            io::exportBundle(recipe, plan, withBad);
        } catch (const InputError& error) {
            return std::string(error.what()).find(part) != std::string::npos;
        }
        return false;
    };
    io::CalibratedKvScales short_ = scales;
    short_.perLayer.pop_back();
    QVERIFY(refused(short_, "has 2 layers, the model 3"));
    io::CalibratedKvScales zero = scales;
    zero.perLayer[1] = std::make_pair(0.0, 0.5);
    QVERIFY(refused(zero, "layer 1: a scale must be finite and above 0"));
    io::CalibratedKvScales untyped = scales;
    untyped.modelType.clear();
    QVERIFY(refused(untyped, "model_type"));
    // Per-head scales are not SGLang's (one per tensor).
    engine::KvScaleTable perHead = table;
    perHead.keys[0] = at::full({2}, 0.5f, at::kFloat);
    perHead.values[0] = at::full({2}, 0.5f, at::kFloat);
    bool threw = false;
    try {
        io::calibratedKvScales(config, perHead.keys, perHead.values);
    } catch (const InputError& error) {
        threw = std::string(error.what()).find("per-head scales") != std::string::npos;
    }
    QVERIFY(threw);
    // Only SGLang takes scales outside a checkpoint.
    io::ExportOptions vllm;
    vllm.target = io::ExportTarget::Vllm;
    vllm.kvScales = scales;
    QVERIFY(exportError(shippedRecipe("fp8-per-tensor.yaml"), vllm).find("applies to --to sglang only")
        != std::string::npos);
}

void TestExport::sglangKvScalesFromProbe()
{
    // `mismatch export --to sglang --kv-probe PROMPTS` calibrates the recipe's per-tensor FP8 KV scales on the probe
    // prompts and writes SGLang's --quantization-param-path file. Its structure is the one sglangKvScaleFile above
    // checks against SGLang (docs/advanced_features/quantized_kv_cache.md "Scaling Factors", sgl-project/sglang
    // 03cd2ec4af85b66be8ef025238bc73c165416bdb; python/sglang/srt/model_loader/weight_utils.py kv_cache_scales_loader,
    // 00b08c497f0735678e084ae5e3dd88ca06b46627, QuantParamSchema): model_type equal to the model's, kv_cache.dtype
    // "float8_e4m3fn", kv_cache.scaling_factor with exactly tp_size ranks, each mapping exactly num_hidden_layers
    // layer indices to a float.
    using nlohmann::json;
    const std::string student = (kSourceDir + "/resources/models/arith-student").toStdString();
    const std::string probe = (kSourceDir + "/resources/prompts/arith-probe.jsonl").toStdString();
    const std::string recipePath = shippedRecipe("fp8-per-tensor.yaml"); // kv_cache fp8_e4m3, scales per_tensor
    const std::string count = "6";
    const std::string out = (temporary_.path() + "/kv-probe").toStdString();
    const CliResult cli = runCli({"export", recipePath, "--to", "sglang", "--model", student, "--kv-probe", probe,
        "--kv-probe-count", count, "--out", out});
    QVERIFY2(cli.code == 0, cli.err.c_str());
    QVERIFY2(cli.out.find("sglang_kv_scales.json") != std::string::npos, cli.out.c_str());
    QVERIFY(QFileInfo::exists(QString::fromStdString(out + "/sglang_kv_scales.json")));
    const json file = json::parse(readFile(out + "/sglang_kv_scales.json"));
    const json modelConfig = json::parse(readFile(student + "/config.json"));
    QCOMPARE(file.size(), size_t(2));
    QCOMPARE(file["model_type"].get<std::string>(), modelConfig["model_type"].get<std::string>());
    QCOMPARE(file["kv_cache"].size(), size_t(2));
    QCOMPARE(file["kv_cache"]["dtype"].get<std::string>(), std::string("float8_e4m3fn"));
    const json& ranks = file["kv_cache"]["scaling_factor"];
    QCOMPARE(ranks.size(), size_t(1)); // --tensor-parallel defaults to 1
    const auto layers = modelConfig["num_hidden_layers"].get<std::int64_t>();
    QCOMPARE(static_cast<std::int64_t>(ranks["0"].size()), layers);

    // The same scales computed here through the engine API the export goes through: the student's weights as
    // stored, the probe's first `count` prompts tokenized as every analysis does, the engine running the recipe,
    // its KV scales calibrated on those prompts in order.
    const analysis::ModelDirectory model = analysis::loadModelDirectory(student);
    const analysis::PromptRequests requests = analysis::promptRequests(probe, *model.tokenizer, std::stoll(count));
    QCOMPARE(requests.requests.size(), size_t(6));
    const quant::Recipe recipe = quant::loadRecipe(recipePath);
    engine::EngineModel engineModel(model.config, model.weights, quant::resolveRecipe(recipe, model.config));
    engineModel.calibrateKvScales(requests.prompts());
    const engine::KvScaleTable& table = engineModel.kvQuantizer().scales();
    QCOMPARE(static_cast<std::int64_t>(table.keys.size()), layers);
    for (std::int64_t layer = 0; layer < layers; ++layer) {
        const json& factor = ranks["0"][std::to_string(layer)];
        QVERIFY(factor.is_number_float());
        const auto index = static_cast<size_t>(layer);
        QCOMPARE(table.keys[index].numel(), std::int64_t(1)); // per tensor
        // SGLang applies one scale to K and V: the larger of the two (sglangKvScaleFile). Exactly: same computation.
        const double expected = std::max(table.keys[index].to(at::kDouble).item<double>(),
            table.values[index].to(at::kDouble).item<double>());
        QVERIFY(expected > 0.0);
        // == rather than QCOMPARE, whose comparison of doubles is fuzzy.
        QVERIFY2(factor.get<double>() == expected,
            (std::to_string(factor.get<double>()) + " != " + std::to_string(expected)).c_str());
    }
    // sglang.json and the launch command use the file.
    QCOMPARE(json::parse(readFile(out + "/sglang.json"))["server_args"]["quantization_param_path"].get<std::string>(),
        std::string("sglang_kv_scales.json"));
    QVERIFY(readFile(out + "/sglang_launch.sh").find("--quantization-param-path") != std::string::npos);
    QVERIFY(!warns({cli.err}, "uses 1.0 where it has none"));

    // --tensor-parallel 2: one identical entry per rank (--json carries the files).
    const CliResult twoRanks = runCli({"--json", "export", recipePath, "--to", "sglang", "--model", student,
        "--kv-probe", probe, "--kv-probe-count", count, "--tensor-parallel", "2"});
    QVERIFY2(twoRanks.code == 0, twoRanks.err.c_str());
    const json twoRankOutput = json::parse(twoRanks.out);
    json twoRankFile;
    for (const json& entry : twoRankOutput["files"]) {
        if (entry["name"] == "sglang_kv_scales.json") {
            twoRankFile = json::parse(entry["text"].get<std::string>());
        }
    }
    QCOMPARE(twoRankFile["kv_cache"]["scaling_factor"].size(), size_t(2));
    QCOMPARE(twoRankFile["kv_cache"]["scaling_factor"]["0"], ranks["0"]);
    QCOMPARE(twoRankFile["kv_cache"]["scaling_factor"]["1"], ranks["0"]);

    // Refused, naming the option: another target, a recipe without an FP8 KV cache, per-head scales, the count or
    // TP size without a probe, a probe whose file would go nowhere.
    const auto refusal = [&](std::vector<std::string> arguments, const std::string& part) {
        const CliResult result = runCli(arguments);
        return result.code != 0 && result.err.find(part) != std::string::npos ? std::string() : result.err;
    };
    const std::string dir = (temporary_.path() + "/kv-probe-refused").toStdString();
    QCOMPARE(refusal({"export", recipePath, "--to", "vllm", "--model", student, "--kv-probe", probe},
                 "--kv-probe: applies to --to sglang only"),
        std::string());
    QCOMPARE(refusal({"export", shippedRecipe("bf16.yaml"), "--to", "sglang", "--model", student, "--kv-probe", probe,
                     "--out", dir},
                 "--kv-probe calibrates FP8 KV-cache scales, but the recipe's KV cache is not FP8 on any layer"),
        std::string());
    QCOMPARE(refusal({"export", shippedRecipe("fp8-kv.yaml"), "--to", "sglang", "--model", student, "--kv-probe",
                     probe, "--out", dir},
                 "per-head scales"),
        std::string());
    QCOMPARE(refusal({"export", recipePath, "--to", "sglang", "--model", student, "--tensor-parallel", "2"},
                 "--tensor-parallel: needs --kv-probe"),
        std::string());
    QCOMPARE(refusal({"export", recipePath, "--to", "modelopt", "--model", student, "--kv-probe-count", "4"},
                 "--kv-probe-count: applies to --to sglang only"),
        std::string());
    QCOMPARE(refusal({"export", recipePath, "--to", "sglang", "--model", student, "--kv-probe", probe},
                 "--kv-probe: writes sglang_kv_scales.json beside"),
        std::string());
    QVERIFY(!QFileInfo::exists(QString::fromStdString(dir)));
}

void TestExport::sglangAndVerlDocPaths()
{
    // sgl-project/sglang moved the quantization page to docs/advanced_features/quantization.md
    // (0f4513c2f46be5ae1e0d9bf0a8f7b5471a8b3d16; docs/backend/quantization.md is an older path) and the verl
    // repository is verl-project/verl, whose FP8 page is docs/low_precision/fp8.md
    // (1dda039b9c6311889a9c9a26040677e1254814f9; docs/advance/fp8.md is gone).
    const std::string sglang = exportText(shippedRecipe("fp8-per-tensor.yaml"), io::ExportTarget::Sglang);
    QVERIFY2(sglang.find("(docs/advanced_features/quantization.md, Online Quantization)") != std::string::npos,
        sglang.c_str());
    QVERIFY(sglang.find("docs/backend/") == std::string::npos);
    const std::string verl = exportText(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::Verl);
    QVERIFY2(verl.find("# FP8 rollout: verl-project/verl docs/low_precision/fp8.md") != std::string::npos, verl.c_str());
    const std::string page = readFile((kSourceDir + "/docs/exporting-and-importing.md").toStdString());
    QVERIFY(page.find("docs/low_precision/fp8.md") != std::string::npos);
    QVERIFY(page.find("docs/advance/fp8.md") == std::string::npos);
    QVERIFY(page.find("docs/backend/quantization.md") == std::string::npos);
}

void TestExport::modelOptConfigJsonKvCacheScheme()
{
    // NVIDIA/Model-Optimizer modelopt/torch/export/convert_hf_config.py convert_hf_quant_config_format
    // (a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73) writes config.json's quantization_config with
    // kv_cache_scheme = {"dynamic": false, "num_bits": 8, "type": "float"} for an FP8 KV cache, and no
    // kv_cache_quant_algo. vLLM's vllm/model_executor/layers/quantization/modelopt.py
    // (00155cdecca722d98e34234c3d172725b7720b7d) ModelOptQuantConfigBase.from_config reads that form's KV cache from
    // kv_cache_scheme only (type float, num_bits 8 -> FP8); a kv_cache_quant_algo there would be dropped.
    using nlohmann::json;
    io::ExportOptions options;
    options.target = io::ExportTarget::ModelOpt;
    const io::ExportResult fp8Kv = exportResult(fixture("keep-edges-3layer.yaml"), options);
    const json fragment = json::parse(bundleFile(fp8Kv, "config_quantization_config.json")->text)["quantization_config"];
    QCOMPARE(fragment["kv_cache_scheme"], json({{"dynamic", false}, {"num_bits", 8}, {"type", "float"}}));
    QVERIFY(!fragment.contains("kv_cache_quant_algo"));
    QCOMPARE(fragment["quant_method"].get<std::string>(), std::string("modelopt"));
    // hf_quant_config.json keeps its own key, which vLLM reads there.
    QCOMPARE(json::parse(fp8Kv.text)["quantization"]["kv_cache_quant_algo"].get<std::string>(), std::string("FP8"));
    // The fragment reads back with its FP8 KV cache.
    const io::ImportedRecipe back = io::importRecipeText(bundleFile(fp8Kv, "config_quantization_config.json")->text,
        "config.json");
    QVERIFY(back.recipe.kvCache && back.recipe.kvCache->format == quant::KvFormat::Fp8E4m3);
    // No FP8 KV cache: no kv_cache_scheme.
    const io::ExportResult noKv = exportResult(shippedRecipe("int4-weights.yaml"), options);
    const json plain = json::parse(bundleFile(noKv, "config_quantization_config.json")->text)["quantization_config"];
    QVERIFY(!plain.contains("kv_cache_scheme"));
    QVERIFY(!plain.contains("kv_cache_quant_algo"));
}

void TestExport::modelOptMixedWarnsWhatVllmDoesNotDispatch()
{
    // vllm/model_executor/layers/quantization/modelopt.py (00155cdecca722d98e34234c3d172725b7720b7d)
    // ModelOptMixedPrecisionConfig.get_quant_method builds FP8, NVFP4 and W4A16_NVFP4 linear layers from
    // quantized_layers; any other quant_algo returns UnquantizedLinearMethod. Every per-layer algorithm the export
    // writes that it does not dispatch (FP8_PB_WO, FP8_PER_CHANNEL_PER_TOKEN, W4A16_AWQ) is warned.
    io::ExportOptions options;
    options.target = io::ExportTarget::ModelOpt;
    const io::ExportResult mixed = exportResult(fixture("mixed-3layer.yaml"), options);
    QVERIFY(warns(mixed.warnings, "MIXED_PRECISION: vLLM's mixed-precision ModelOpt loader builds FP8, NVFP4 and "
                                  "W4A16_NVFP4 layers"));
    QVERIFY(warns(mixed.warnings, "FP8_PB_WO on model.layers.0.self_attn.q_proj and the 13 other modules"));
    QVERIFY(warns(mixed.warnings, "W4A16_AWQ on model.layers.2.self_attn.q_proj and the 6 other modules"));
    const std::string channelAndBlock = writeRecipe("channel-and-block.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: channel}\n"
        "activations: {format: fp8_e4m3}\n"
        "rules:\n"
        "  - match: \"model.layers.2.*\"\n"
        "    weights: {format: fp8_e4m3, granularity: block128}\n");
    const io::ExportResult pcpt = exportResult(channelAndBlock, options);
    QCOMPARE(nlohmann::json::parse(pcpt.text)["quantization"]["quant_algo"].get<std::string>(),
        std::string("MIXED_PRECISION"));
    QVERIFY(warns(pcpt.warnings,
        "FP8_PER_CHANNEL_PER_TOKEN on model.layers.0.self_attn.q_proj and the 13 other modules sharing its scheme do "
        "not run quantized in vLLM"));
    // One scheme is not MIXED_PRECISION: ModelOptFp8Config dispatches FP8_PB_WO itself.
    const io::ExportResult single = exportResult(fixture("keep-edges-3layer.yaml"), options);
    QVERIFY(!warns(single.warnings, "MIXED_PRECISION"));
}

void TestExport::kvOnlyCheckpointIsDense()
{
    // The format of a KV-cache-only checkpoint. llm-compressor saves through compressed-tensors'
    // ModelCompressor.from_pretrained_model, which sets format = infer_model_format(model)
    // (vllm-project/compressed-tensors src/compressed_tensors/compressors/format.py,
    // ac8e2ba82f4e0d5eaa40069f8fc642738f124cd4): the attention modules carry the KV scheme as input_activations
    // with no weights (quantization/lifecycle/apply.py _apply_kv_cache_scheme), every compressor but dense needs
    // weights (its can_compress), dense modules are left out and an empty set flattens to "dense". vLLM reads
    // `format` only for the schemes of config_groups (compressed_tensors.py _quantization_scheme_map_from_config),
    // which a KV-only checkpoint has none of, so "dense" is what the checkpoint carries and what vLLM loads.
    const nlohmann::json kv
        = nlohmann::json::parse(exportText(shippedRecipe("fp8-kv.yaml"), io::ExportTarget::CompressedTensors));
    QCOMPARE(kv["quantization_config"]["format"].get<std::string>(), std::string("dense"));
    QVERIFY(kv["quantization_config"]["config_groups"].empty());
    // A checkpoint with quantized weights keeps its weight format.
    const nlohmann::json block
        = nlohmann::json::parse(exportText(shippedRecipe("fp8-w8a8-block.yaml"), io::ExportTarget::CompressedTensors));
    QCOMPARE(block["quantization_config"]["format"].get<std::string>(), std::string("float-quantized"));
}

void TestExport::verlOpdKeysAreInVerlsSchema()
{
    // Every key of every verl on-policy distillation export (the YAML form, verl_overrides.txt and verl_opd.sh's
    // command) is one verl's schema declares (kVerlSchemaKeys: set plainly or with ++) or an engine argument under an
    // engine_kwargs mapping the schema declares empty (kVerlOpenMappings: added with +); none is unknown.
    // The check refuses what it must, so that the loop below can fail.
    QVERIFY(!verlSchemaProblem("distillation.distillation_loss.loss_modes", "").empty()); // misspelt
    QVERIFY(!verlSchemaProblem("distillation.enabled", "+").empty()); // + on a declared key
    QVERIFY(!verlSchemaProblem("actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype", "").empty());
    QVERIFY(!verlSchemaProblem("actor_rollout_ref.rollout.engine_kwargs.vllm.calculate_kv_scales", "+").empty());
    QVERIFY(!verlSchemaProblem("distillation.teacher_model.model_path", nullptr).empty());
    QVERIFY(verlSchemaProblem("actor_rollout_ref.rollout.quantization", "++").empty());

    const std::string kvSkip = writeRecipe("opd-kv-skip.yaml",
        "version: 1\n"
        "weights: {format: fp8_e4m3, granularity: block128}\n"
        "activations: {format: fp8_e4m3}\n"
        "kv_cache: {format: fp8_e4m3, scales: per_tensor}\n"
        "rules:\n"
        "  - match: \"model.layers.1.self_attn\"\n"
        "    kv_cache: {format: bf16}\n");
    const std::vector<std::pair<std::string, io::VerlRollout>> recipes = {
        {shippedRecipe("fp8-w8a8-block.yaml"), io::VerlRollout::Vllm},
        {shippedRecipe("bf16.yaml"), io::VerlRollout::Vllm}, {kvSkip, io::VerlRollout::Vllm},
        {fixture("keep-edges-3layer.yaml"), io::VerlRollout::Sglang}};
    const std::vector<std::pair<std::string, std::int64_t>> objectives
        = {{"opd_full_kl", 0}, {"opd_k1", 0}, {"opd_k3", 0}, {"opd_topk", 8}};
    int checked = 0;
    for (const auto& [recipe, rollout] : recipes) {
        for (const auto& [objective, topK] : objectives) {
            for (const char* correction : {"none", "tis", "mis"}) {
                const io::ExportResult result
                    = exportResult(recipe, opdOptions(objective, topK, correction, 2.0, rollout));
                const std::string what = recipe + " " + objective + " " + correction + ": ";
                QCOMPARE(result.configName, std::string("verl.yaml"));
                std::set<std::string> yamlKeys;
                for (const auto& [key, node] : yamlLeaves(result.text)) {
                    const std::string problem = verlSchemaProblem(key, nullptr);
                    QVERIFY2(problem.empty(), (what + "verl.yaml: " + problem).c_str());
                    yamlKeys.insert(key);
                }
                std::set<std::string> listed;
                for (const ParsedOverride& entry : hydraOverrides(bundleFile(result, "verl_overrides.txt")->text)) {
                    const std::string problem = verlSchemaProblem(entry.key, entry.prefix.c_str());
                    QVERIFY2(problem.empty(), (what + "verl_overrides.txt: " + problem).c_str());
                    listed.insert(entry.key);
                }
                QCOMPARE(listed, yamlKeys); // the same settings in both forms
                const io::ExportFile* script = bundleFile(result, "verl_opd.sh");
                QVERIFY2(script != nullptr, what.c_str());
                QVERIFY(script->text.find("\npython3 -m verl.trainer.main_ppo \\\n") != std::string::npos);
                QVERIFY(script->text.find("\n    \"$@\"\n") != std::string::npos);
                std::set<std::string> command;
                for (const ParsedOverride& entry : hydraOverrides(script->text)) {
                    const std::string problem = verlSchemaProblem(entry.key, entry.prefix.c_str());
                    QVERIFY2(problem.empty(), (what + "verl_opd.sh: " + problem).c_str());
                    command.insert(entry.key);
                }
                // The command adds the data and the teacher's resource pool (verl's default pool has 0 nodes).
                std::set<std::string> expected = yamlKeys;
                expected.insert({"data.train_files", "data.val_files", "distillation.n_gpus_per_node",
                    "distillation.nnodes"});
                QCOMPARE(command, expected);
                ++checked;
            }
        }
    }
    QCOMPARE(checked, 4 * 4 * 3);

    // The command line: --teacher and --objective write the same bundle, verl_opd.sh among its files.
    const QString dir = temporary_.path() + "/ready/verl-opd";
    const CliResult cli = runCli({"export", fixture("keep-edges-3layer.yaml"), "--to", "verl", "--rollout", "sglang",
        "--model", demoModel(), "--teacher", "/teachers/arith", "--objective", "opd_k3", "--correction", "mis",
        "--correction-cap", "3", "--out", dir.toStdString()});
    QVERIFY2(cli.code == 0, cli.err.c_str());
    QCOMPARE(QDir(dir).entryList(QDir::Files, QDir::Name),
        QStringList({"README.txt", "verl.yaml", "verl_env.sh", "verl_opd.sh", "verl_overrides.txt"}));
    const std::string script = readFile((dir + "/verl_opd.sh").toStdString());
    QVERIFY2(script.find("    distillation.teacher_models.teacher_model.model_path=/teachers/arith \\\n")
            != std::string::npos,
        script.c_str());
    QVERIFY2(script.find("    actor_rollout_ref.model.path=" + demoModel() + " \\\n") != std::string::npos,
        script.c_str());
    // The SGLang rollout's BF16 modules reach its workers through the environment the command starts with.
    QVERIFY2(script.find("\nexport SGLANG_FP8_IGNORED_LAYERS=model.layers.0.self_attn.q_proj,") != std::string::npos,
        script.c_str());
}

void TestExport::verlOpdLossFollowsObjective_data()
{
    QTest::addColumn<QString>("objective");
    QTest::addColumn<qint64>("topK");
    QTest::addColumn<QString>("lossMode");
    QTest::addColumn<bool>("policyGradient");
    QTest::addColumn<QString>("warning"); // "" when verl computes the objective's own gradient
    // The run file's objectives (core/train/objectives.h) against verl's (verl-project/verl
    // 1dda039b9c6311889a9c9a26040677e1254814f9):
    // opd_k1, l = sg[log p_s(y) - log p_t(y)] log p_s(y): verl's loss_mode k1 = logprob - ref_logprob with the
    // student's and the teacher's log-probabilities (core_algos.py kl_penalty_forward; losses.py
    // compute_distillation_loss_reverse_kl_estimator), as the negative advantage of the policy-gradient loss
    // (losses.py distillation_loss, use_policy_gradient); k1 without it is refused by DistillationLossConfig.
    QTest::newRow("opd_k1") << "opd_k1" << qint64(0) << "k1" << true << "";
    // opd_k3, l = sg[rho - 1 - log rho] log p_s(y), rho = p_t(y) / p_s(y): k3 is ratio - kl - 1 with
    // kl = ref_logprob - logprob, so ratio = p_t(y) / p_s(y) = rho; as a reward, the policy-gradient form.
    QTest::newRow("opd_k3") << "opd_k3" << qint64(0) << "k3" << true << "";
    // opd_full_kl: verl has no full-vocabulary KL (kl_penalty_forward "full" raises NotImplementedError); k1 as a
    // reward has the same expected gradient (core/train/objectives.h), written with a warning.
    QTest::newRow("opd_full_kl") << "opd_full_kl" << qint64(0) << "k1" << true
                                 << "verl has no full-vocabulary reverse KL loss";
    // opd_topk (reverse KL over the student's top-k, renormalised) has no verl mode: forward_kl_topk
    // (fsdp/losses.py compute_forward_kl_topk: the forward KL over the teacher's top-k) is the one top-k mode,
    // written with its k and a warning, backpropagated (the docstring's recommendation for it).
    QTest::newRow("opd_topk") << "opd_topk" << qint64(16) << "forward_kl_topk" << false
                              << "verl has no loss mode for opd_topk";
}

void TestExport::verlOpdLossFollowsObjective()
{
    QFETCH(QString, objective);
    QFETCH(qint64, topK);
    QFETCH(QString, lossMode);
    QFETCH(bool, policyGradient);
    QFETCH(QString, warning);
    const io::ExportResult result
        = exportResult(shippedRecipe("fp8-w8a8-block.yaml"), opdOptions(objective.toStdString(), topK));
    const std::map<std::string, YAML::Node> yaml = yamlLeaves(result.text);
    const std::string loss = "distillation.distillation_loss.";
    QCOMPARE(yaml.at(loss + "loss_mode").as<std::string>(), lossMode.toStdString());
    QCOMPARE(yaml.at(loss + "use_policy_gradient").as<bool>(), policyGradient);
    QCOMPARE(yaml.count(loss + "topk"), size_t(topK > 0 ? 1 : 0)); // the estimator modes read no top-k
    if (topK > 0) {
        QCOMPARE(yaml.at(loss + "topk").as<long long>(), static_cast<long long>(topK));
    }
    // Distillation alone, unclamped, from this teacher on the student's engine; GRPO so that no critic is built.
    QCOMPARE(yaml.at(loss + "use_task_rewards").as<bool>(), false);
    QVERIFY(yaml.at(loss + "loss_max_clamp").IsNull());
    QVERIFY(yaml.at(loss + "log_prob_min_clamp").IsNull());
    QCOMPARE(yaml.at("distillation.enabled").as<bool>(), true);
    QCOMPARE(yaml.at("distillation.teacher_models.teacher_model.model_path").as<std::string>(),
        std::string("/teachers/arith teacher"));
    QCOMPARE(yaml.at("distillation.teacher_models.teacher_model.inference.name").as<std::string>(),
        std::string("vllm"));
    QCOMPARE(yaml.at("actor_rollout_ref.model.path").as<std::string>(), demoModel());
    QCOMPARE(yaml.at("actor_rollout_ref.rollout.quantization").as<std::string>(), std::string("fp8"));
    QCOMPARE(yaml.at("algorithm.adv_estimator").as<std::string>(), std::string("grpo"));
    // One optimizer step per batch: the mini-batch is the batch, one epoch.
    QCOMPARE(yaml.at("actor_rollout_ref.actor.ppo_mini_batch_size").as<std::string>(),
        std::string("${data.train_batch_size}"));
    QCOMPARE(yaml.at("actor_rollout_ref.actor.ppo_epochs").as<int>(), 1);
    // The command line says the same; the teacher's path, which has a space, is one Hydra string.
    const std::string overrides = bundleFile(result, "verl_overrides.txt")->text;
    QVERIFY2(overrides.find("    distillation.distillation_loss.loss_mode=" + lossMode.toStdString() + " \\\n")
            != std::string::npos,
        overrides.c_str());
    QVERIFY2(overrides.find(std::string("    distillation.distillation_loss.use_policy_gradient=")
                 + (policyGradient ? "true" : "false") + " \\\n")
            != std::string::npos,
        overrides.c_str());
    bool teacherFound = false;
    for (const ParsedOverride& entry : hydraOverrides(overrides)) {
        if (entry.key == "distillation.teacher_models.teacher_model.model_path") {
            QCOMPARE(entry.value, std::string("'/teachers/arith teacher'"));
            teacherFound = true;
        }
    }
    QVERIFY(teacherFound);
    QVERIFY2(result.text.find("# Objective " + objective.toStdString()) != std::string::npos, result.text.c_str());
    if (warning.isEmpty()) {
        QVERIFY(!warns(result.warnings, "verl has no"));
    } else {
        QVERIFY(warns(result.warnings, warning.toStdString()));
    }
}

void TestExport::verlOpdCorrection()
{
    // The run file's corrections (core/train/objectives.h) on w = pi_old(y) / mu(y): TIS weighs a token's loss by
    // min(w, C), MIS drops the tokens with w outside [1/C, C] from the loss and from the token mean. verl's
    // algorithm.rollout_correction in decoupled mode (bypass_mode false: pi_old recomputed by the trainer) uses
    // log r = old_log_prob - rollout_log_prob (verl/trainer/ppo/rollout_corr_helper.py
    // compute_rollout_correction_and_rejection_mask): rollout_is token with a float threshold clamps the weights at
    // it (TIS); rollout_rs token_k1 removes from response_mask the tokens whose -log r lies outside
    // [log lower, log upper], one float threshold C giving upper C and lower 1/C (_parse_rollout_rs_thresholds).
    const std::string recipe = shippedRecipe("fp8-w8a8-block.yaml");
    const std::string prefix = "algorithm.rollout_correction.";
    const auto none = yamlLeaves(exportResult(recipe, opdOptions("opd_k3")).text);
    QVERIFY(none.at(prefix + "rollout_is").IsNull());
    QVERIFY(none.at(prefix + "rollout_rs").IsNull());
    QCOMPARE(none.at(prefix + "bypass_mode").as<bool>(), false);
    // The rollout engine's log-probabilities, which every correction and verl's rollout_corr/* metrics need
    // (docs/algo/rollout_corr.md: "REQUIRED: Enable log prob calculation").
    QCOMPARE(none.at("actor_rollout_ref.rollout.calculate_log_probs").as<bool>(), true);

    const auto tis = yamlLeaves(exportResult(recipe, opdOptions("opd_k3", 0, "tis", 2.5)).text);
    QCOMPARE(tis.at(prefix + "rollout_is").as<std::string>(), std::string("token"));
    QCOMPARE(tis.at(prefix + "rollout_is_threshold").as<double>(), 2.5);
    QVERIFY(tis.at(prefix + "rollout_rs").IsNull());
    QCOMPARE(tis.at(prefix + "bypass_mode").as<bool>(), false);

    const double cap = 3.0;
    const auto mis = yamlLeaves(exportResult(recipe, opdOptions("opd_k1", 0, "mis", cap)).text);
    QVERIFY(mis.at(prefix + "rollout_is").IsNull());
    QCOMPARE(mis.at(prefix + "rollout_rs").as<std::string>(), std::string("token_k1"));
    QCOMPARE(mis.at(prefix + "rollout_rs_threshold").as<double>(), cap);
    // verl's keep rule for that threshold, in float64, against MIS's on a grid of ratios around both bounds: the
    // same tokens (the sign of -log r and the reciprocal lower bound cancel).
    for (double logRatio = -2.0; logRatio <= 2.0; logRatio += 1.0 / 64.0) {
        const double r = std::exp(logRatio);
        const bool verlKeeps = -std::log(r) >= std::log(1.0 / cap) && -std::log(r) <= std::log(cap);
        const bool misKeeps = r >= 1.0 / cap && r <= cap;
        QCOMPARE(verlKeeps, misKeeps);
    }

    // verl weighs only its policy-gradient loss (losses.py distillation_loss passes rollout_is_weights to the
    // policy loss alone): forward_kl_topk, backpropagated, runs without the TIS cap, and the export says so.
    const io::ExportResult topkTis = exportResult(recipe, opdOptions("opd_topk", 4, "tis", 2.0));
    QVERIFY(warns(topkTis.warnings, "the TIS cap is not applied"));
    QVERIFY(!warns(exportResult(recipe, opdOptions("opd_k3", 0, "tis", 2.0)).warnings, "TIS cap"));
    QVERIFY(!warns(exportResult(recipe, opdOptions("opd_topk", 4, "mis", 2.0)).warnings, "TIS cap"));
}

void TestExport::verlOpdRefusals()
{
    const std::string recipe = shippedRecipe("fp8-w8a8-block.yaml");
    const std::vector<std::pair<io::ExportOptions, std::string>> refused = {
        {opdOptions("reinforce"), "--objective: reinforce learns from a task reward"},
        {opdOptions("grpo"), "grpo learns from a task reward"},
        {opdOptions("opd_kl"), "expected the objective the budget was calibrated with"},
        {opdOptions("opd_topk"), "--top-k: opd_topk needs its k"},
        {opdOptions("opd_k3", 4), "only opd_topk takes a k"},
        {opdOptions("opd_k3", 0, "tis", 1.0), "--correction-cap: tis needs a cap above 1"},
        {opdOptions("opd_k3", 0, "mis", std::nan("")), "mis needs a cap above 1"},
        {opdOptions("opd_k3", 0, "is"), "expected none, tis or mis"},
    };
    for (const auto& [options, part] : refused) {
        const std::string message = exportError(recipe, options);
        QVERIFY2(message.find(part) != std::string::npos, (message + "\n  lacks: " + part).c_str());
    }
    io::ExportOptions noTeacher = opdOptions("opd_k3");
    noTeacher.distillation->teacherPath.clear();
    QVERIFY(exportError(recipe, noTeacher).find("needs the teacher model's path") != std::string::npos);
    io::ExportOptions vllm = opdOptions("opd_k3");
    vllm.target = io::ExportTarget::Vllm;
    QVERIFY(exportError(recipe, vllm).find("--teacher applies to --to verl only") != std::string::npos);
    // What the rollout export refuses, the OPD export refuses too.
    QVERIFY(exportError(shippedRecipe("fp8-per-tensor.yaml"), opdOptions("opd_k3")).find("128x128 blocks only")
        != std::string::npos);
    io::ExportOptions stale = opdOptions("opd_k3");
    stale.staleness = 1;
    QVERIFY(exportError(recipe, stale).find("weight staleness k = 1") != std::string::npos);

    // The command line: the loss and correction options need --teacher, and --teacher needs the objective.
    const std::vector<std::string> base = {"export", recipe, "--to", "verl", "--model", demoModel()};
    const std::vector<std::pair<std::vector<std::string>, std::string>> cli = {
        {{"--objective", "opd_k3"}, "--objective: needs --teacher"},
        {{"--correction", "tis"}, "--correction: needs --teacher"},
        {{"--teacher", "/teachers/arith"}, "--teacher: needs --objective"},
        {{"--teacher", "/teachers/arith", "--objective", "opd_k3", "--correction-cap", "3"},
            "--correction-cap: needs --correction tis or mis"},
    };
    for (const auto& [extra, part] : cli) {
        std::vector<std::string> arguments = base;
        arguments.insert(arguments.end(), extra.begin(), extra.end());
        const CliResult result = runCli(arguments);
        QVERIFY(result.code != 0);
        QVERIFY2(result.err.find(part) != std::string::npos, (result.err + "\n  lacks: " + part).c_str());
    }
}

void TestExport::compressedCheckpointServe()
{
    // llm-compressor and compressed-tensors carry the serve command of the checkpoint their oneshot script saves:
    // SAVE_DIR = MODEL_ID.rstrip("/").split("/")[-1] + "-<recipe name>", run from the bundle's directory (the demo
    // model's directory is arith-teacher). vLLM reads a compressed-tensors checkpoint's method from its config.json,
    // and switches the FP8 KV cache on, using the checkpoint's calibrated scales, only when told: "When running the
    // model you must specify kv_cache_dtype="fp8" in order to enable the kv cache quantization and use the scales"
    // (vllm-project/vllm docs/features/quantization/quantized_kvcache.md,
    // 11cdd70b3ac3e412db8a84569f227b40a6a5c023; fp8 is fp8_e4m3 on CUDA). Per-attention-head scales run on the Flash
    // Attention backend only (the same page, current version).
    for (const io::ExportTarget target : {io::ExportTarget::LlmCompressor, io::ExportTarget::CompressedTensors}) {
        io::ExportOptions options;
        options.target = target;
        options.modelPath = demoModel();
        const io::ExportResult kv = exportResult(fixture("keep-edges-3layer.yaml"), options);
        const io::ExportFile* serve = bundleFile(kv, "vllm_serve.sh");
        QVERIFY(serve != nullptr);
        const std::string& text = serve->text;
        QVERIFY2(text.rfind("#!/bin/sh\n", 0) == 0, text.c_str());
        QVERIFY2(text.find("CHECKPOINT=${1:-arith-teacher-keep-edges-3layer}\n") != std::string::npos, text.c_str());
        QVERIFY2(text.find("vllm serve \"$CHECKPOINT\" \\\n    --kv-cache-dtype fp8_e4m3\n") != std::string::npos,
            text.c_str());
        QVERIFY2(text.find("    --quantization") == std::string::npos, text.c_str()); // the checkpoint names it
        QVERIFY2(text.find("vllm serve " + demoModel()) == std::string::npos, text.c_str()); // never the BF16 model
        // The oneshot script beside it saves where the command looks.
        QVERIFY(bundleFile(kv, "llm_compressor_oneshot.py")->text.find(
                    "SAVE_DIR = MODEL_ID.rstrip(\"/\").split(\"/\")[-1] + \"-keep-edges-3layer\"\n")
            != std::string::npos);
        QVERIFY(!warns(kv.warnings, "Flash Attention"));

        // No FP8 KV cache: the cache in the model's dtype.
        const io::ExportResult int4 = exportResult(shippedRecipe("int4-weights.yaml"), options);
        const std::string plain = bundleFile(int4, "vllm_serve.sh")->text;
        QVERIFY2(plain.find("CHECKPOINT=${1:-arith-teacher-int4-weights}\n") != std::string::npos, plain.c_str());
        QVERIFY2(plain.find("vllm serve \"$CHECKPOINT\" \\\n    --kv-cache-dtype auto\n") != std::string::npos,
            plain.c_str());
        QVERIFY(plain.find("fp8") == std::string::npos);

        // Per-head KV scales: FP8 KV cache on, and a warning naming the backend that runs them.
        const io::ExportResult perHead = exportResult(shippedRecipe("fp8-kv.yaml"), options);
        QVERIFY(bundleFile(perHead, "vllm_serve.sh")->text.find("    --kv-cache-dtype fp8_e4m3\n")
            != std::string::npos);
        QVERIFY(warns(perHead.warnings, "per-attention-head KV-cache scales only with its Flash Attention backend"));
    }
}

// vLLM's per-token-head KV formats (see the sources above: vllm/config/cache.py CacheDType, PR #38378) are written as
// the engine argument kv_cache_dtype of the same name, with kv_cache_dtype_skip_layers for BF16 layers, from 0.20 on,
// with no warning about checkpoint scales (there are none to take) but one about the kernel's approximate division.
void TestExport::vllmPerTokenHeadKvCache()
{
    io::ExportOptions options;
    options.target = io::ExportTarget::Vllm;
    const io::ExportResult fp8 = exportResult(fixture("fp8-per-token-head-kv-3layer.yaml"), options);
    const nlohmann::json fp8Json = nlohmann::json::parse(fp8.text);
    QCOMPARE(fp8Json["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_per_token_head"));
    QVERIFY(!fp8Json["engine_args"].contains("kv_cache_dtype_skip_layers"));
    QVERIFY(!fp8Json["engine_args"].contains("calculate_kv_scales"));
    QCOMPARE(fp8Json["engine_args"]["quantization"].get<std::string>(), std::string("fp8_per_block"));
    QVERIFY(!warns(fp8.warnings, "takes its k/v scales from the checkpoint"));
    QVERIFY(warns(fp8.warnings, "fp8_per_token_head scales (amax / 448 per token and KV head)"));
    QVERIFY(warns(fp8.warnings, "div.full.f32"));
    // The ready-to-run command line carries it as vLLM's CLI spells it.
    const io::ExportFile* serve = bundleFile(fp8, "vllm_serve.sh");
    QVERIFY(serve != nullptr);
    QVERIFY2(
        serve->text.find(" \\\n    --kv-cache-dtype fp8_per_token_head") != std::string::npos, serve->text.c_str());

    for (const char* release : {"0.20", "0.21.1", "current"}) {
        options.targetVersion = release;
        const io::ExportResult int8 = exportResult(fixture("int8-per-token-head-kv-3layer.yaml"), options);
        const nlohmann::json int8Json = nlohmann::json::parse(int8.text);
        QCOMPARE(int8Json["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("int8_per_token_head"));
        // Layer 0's BF16 KV cache, as a string index (CacheConfig.kv_cache_dtype_skip_layers: list[str]).
        QCOMPARE(int8Json["engine_args"]["kv_cache_dtype_skip_layers"], nlohmann::json({"0"}));
        QVERIFY(warns(int8.warnings, "int8_per_token_head scales (amax / 127 per token and KV head)"));
    }
    // The checkpoint form passes it among the engine arguments too; the checkpoint llm-compressor writes holds the
    // weights only (no KV scales to calibrate), and a recipe whose only quantization is such a KV cache serves the
    // BF16 model.
    options.targetVersion.clear();
    options.vllmForm = io::VllmForm::Checkpoint;
    const io::ExportResult checkpoint = exportResult(fixture("fp8-per-token-head-kv-3layer.yaml"), options);
    QCOMPARE(nlohmann::json::parse(checkpoint.text)["engine_args"]["kv_cache_dtype"].get<std::string>(),
        std::string("fp8_per_token_head"));
    const io::ExportFile* recipeFile = bundleFile(checkpoint, "llm-compressor.yaml");
    QVERIFY(recipeFile != nullptr && bundleFile(checkpoint, "llm_compressor_oneshot.py") != nullptr);
    QVERIFY2(recipeFile->text.find("kv_cache_scheme") == std::string::npos, recipeFile->text.c_str());
    QVERIFY(bundleFile(checkpoint, "vllm_serve.sh")->text.find("--kv-cache-dtype fp8_per_token_head")
        != std::string::npos);
    const io::ExportResult kvOnly = exportResult(fixture("int8-per-token-head-kv-3layer.yaml"), options);
    const std::string kvOnlyServe = bundleFile(kvOnly, "vllm_serve.sh")->text;
    QVERIFY2(kvOnlyServe.find("CHECKPOINT") == std::string::npos, kvOnlyServe.c_str());
    QVERIFY2(kvOnlyServe.find("--kv-cache-dtype int8_per_token_head") != std::string::npos, kvOnlyServe.c_str());
    QVERIFY(bundleFile(kvOnly, "llm_compressor_oneshot.py") == nullptr);
}

void TestExport::microscalingCompressedTensorsByHand()
{
    using nlohmann::json;
    // compressed-tensors' preset arguments, transcribed from vllm-project/compressed-tensors
    // (ac8e2ba82f4e0d5eaa40069f8fc642738f124cd4) src/compressed_tensors/quantization/quant_scheme.py: NVFP4A16 and
    // NVFP4's weights (num_bits 4, type float, strategy tensor_group, symmetric, dynamic false, group_size 16,
    // scale_dtype FP8_E4M3_DATA.dtype), NVFP4's input_activations (the same with dynamic DynamicType.LOCAL, observer
    // static_minmax), MXFP4A16 / MXFP4 (num_bits 4, strategy group, group_size 32, scale_dtype torch.uint8; MXFP4's
    // input_activations dynamic True) and MXFP8A16 / MXFP8 (num_bits 8, the same). quant_args.py writes a dtype as
    // str(dtype) ("torch.uint8", "torch.float8_e4m3fn") and DynamicType.LOCAL as "local".
    const json nvfp4Weights = {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"dynamic", false},
        {"strategy", "tensor_group"}, {"group_size", 16}, {"scale_dtype", "torch.float8_e4m3fn"}};
    const json nvfp4Inputs
        = {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"dynamic", "local"}, {"strategy", "tensor_group"},
            {"group_size", 16}, {"scale_dtype", "torch.float8_e4m3fn"}, {"observer", "static_minmax"}};
    const json mxfp4Weights = {{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"dynamic", false},
        {"strategy", "group"}, {"group_size", 32}, {"scale_dtype", "torch.uint8"}};
    json mxfp4Inputs = mxfp4Weights;
    mxfp4Inputs["dynamic"] = true;
    json mxfp8Weights = mxfp4Weights;
    mxfp8Weights["num_bits"] = 8;
    json mxfp8Inputs = mxfp8Weights;
    mxfp8Inputs["dynamic"] = true;
    // The checkpoint format of each (config/base.py CompressionFormat; compressors/nvfp4, mxfp4, mxfp8 can_compress
    // match the weights alone, so the weight-only presets have it too) and llm-compressor's scheme name (the
    // PRESET_SCHEMES key; llm-compressor examples/quantization_w4a4_fp4, quantization_w4a16_fp4/nvfp4,
    // quantization_w4a4_mxfp4 and quantization_w8a8_mxfp8 pass scheme="NVFP4", "NVFP4A16", "MXFP4", "MXFP8").
    struct Case {
        const char* fixture;
        const char* format;
        json weights;
        json inputs;
        const char* scheme;
        std::vector<std::string> ignore;
        bool calibrates; // llm_compressor_oneshot.py loads calibration data
    };
    const std::vector<Case> cases = {
        {"nvfp4-3layer.yaml", "nvfp4-pack-quantized", nvfp4Weights, nvfp4Inputs, "NVFP4",
            {"model.layers.2.mlp.down_proj", "lm_head"}, true},
        {"nvfp4-weight-only-3layer.yaml", "nvfp4-pack-quantized", nvfp4Weights, nullptr, "NVFP4A16", {"lm_head"},
            false},
        {"mxfp4-3layer.yaml", "mxfp4-pack-quantized", mxfp4Weights, mxfp4Inputs, "MXFP4", {"lm_head"}, false},
        {"mxfp8-3layer.yaml", "mxfp8-quantized", mxfp8Weights, mxfp8Inputs, "MXFP8", mxfp8Ignored(), true},
    };
    for (const Case& c : cases) {
        io::ExportOptions options;
        options.target = io::ExportTarget::CompressedTensors;
        options.modelPath = demoModel();
        const io::ExportResult result = exportResult(fixture(c.fixture), options);
        const json config = json::parse(result.text)["quantization_config"];
        QCOMPARE(config["quant_method"].get<std::string>(), std::string("compressed-tensors"));
        QCOMPARE(config["format"].get<std::string>(), std::string(c.format));
        QCOMPARE(config["config_groups"].size(), size_t(1));
        const json& group = config["config_groups"]["group_0"];
        QCOMPARE(group["targets"], json({"Linear"}));
        QVERIFY2(group["weights"] == c.weights, (std::string(c.fixture) + ": " + group["weights"].dump()).c_str());
        QVERIFY2(group["input_activations"] == c.inputs,
            (std::string(c.fixture) + ": " + group["input_activations"].dump()).c_str());
        QCOMPARE(config["ignore"].get<std::vector<std::string>>(), c.ignore);
        // The llm-compressor recipe names the preset.
        const std::string recipe = bundleFile(result, "llm-compressor.yaml")->text;
        QVERIFY2(
            recipe.find("      targets: [Linear]\n      scheme: " + std::string(c.scheme) + "\n") != std::string::npos,
            recipe.c_str());
        // NVFP4's activations take a calibrated global scale (llm-compressor examples/quantization_w4a4_fp4/
        // llama3_example.py calibrates on a dataset; the NVFP4A16, MXFP4 and MXFP8 examples call oneshot without
        // one); the MXFP8 fixture's FP8 KV cache is calibrated too.
        const std::string oneshot = bundleFile(result, "llm_compressor_oneshot.py")->text;
        QCOMPARE(oneshot.find("load_dataset(") != std::string::npos, c.calibrates);
    }
    // The scale the oneshot script calibrates is named.
    io::ExportOptions llmCompressor;
    llmCompressor.target = io::ExportTarget::LlmCompressor;
    const io::ExportResult nvfp4 = exportResult(fixture("nvfp4-3layer.yaml"), llmCompressor);
    QVERIFY(bundleFile(nvfp4, "llm_compressor_oneshot.py")
                ->text.find("# The NVFP4 activations' global scales are static: measured on calibration text.")
        != std::string::npos);
    QVERIFY(bundleFile(nvfp4, "llm_compressor_oneshot.py")->text.find("KV cache") == std::string::npos);
    // What vLLM runs otherwise: the calibrated NVFP4 input scale, the W4A16 fallback, the fused global scale
    // (vllm/model_executor/layers/quantization/modelopt.py 00155cdecca722d98e34234c3d172725b7720b7d;
    // compressed_tensors.py be696453ee1bf3b7a2f652cc457b340d5a20c88c _get_scheme_from_parts).
    QVERIFY(warns(nvfp4.warnings, "NVFP4 activations on model.layers.0.self_attn.q_proj"));
    QVERIFY(warns(nvfp4.warnings, "per-tensor input global scale, calibrated once"));
    QVERIFY(warns(nvfp4.warnings, "runs an NVFP4 compressed-tensors layer as W4A16"));
    QVERIFY(warns(nvfp4.warnings, "the largest of its shards' weight_scale_2"));
    const io::ExportResult mxfp8 = exportResult(fixture("mxfp8-3layer.yaml"), llmCompressor);
    QVERIFY(bundleFile(mxfp8, "llm_compressor_oneshot.py")
                ->text.find("# The KV cache's scales are static: measured on calibration text.")
        != std::string::npos);
    QVERIFY(warns(mxfp8.warnings, "MXFP8 W8A8 on model.layers.0.mlp.gate_proj"));
    QVERIFY(warns(mxfp8.warnings, "fall back to W8A16"));
    QVERIFY(warns(mxfp8.warnings, "MX block scales"));
    QVERIFY(!warns(mxfp8.warnings, "NVFP4"));

    // Two microscaling schemes: mixed-precision, each group with its format; llm-compressor's config_groups carry
    // scale_dtype, by which compressed-tensors infers the MXFP8 format (compressors/mxfp8/base.py can_compress).
    std::vector<std::string> nvfp4Modules = layerModules(0);
    const std::vector<std::string> layer1 = layerModules(1);
    nvfp4Modules.insert(nvfp4Modules.end(), layer1.begin(), layer1.end());
    const json mixed
        = json::parse(exportText(fixture("mixed-microscaling-3layer.yaml"), io::ExportTarget::CompressedTensors));
    const json& mixedConfig = mixed["quantization_config"];
    QCOMPARE(mixedConfig["format"].get<std::string>(), std::string("mixed-precision"));
    QCOMPARE(mixedConfig["config_groups"]["group_0"]["format"].get<std::string>(), std::string("nvfp4-pack-quantized"));
    QCOMPARE(mixedConfig["config_groups"]["group_0"]["targets"].get<std::vector<std::string>>(), nvfp4Modules);
    QVERIFY(mixedConfig["config_groups"]["group_0"]["input_activations"] == nvfp4Inputs);
    QCOMPARE(mixedConfig["config_groups"]["group_1"]["format"].get<std::string>(), std::string("mxfp8-quantized"));
    QCOMPARE(mixedConfig["config_groups"]["group_1"]["targets"].get<std::vector<std::string>>(), layerModules(2));
    QVERIFY(mixedConfig["config_groups"]["group_1"]["weights"] == mxfp8Weights);
    QCOMPARE(mixedConfig["ignore"], json({"lm_head"}));
    const YAML::Node groups = YAML::Load(exportText(fixture("mixed-microscaling-3layer.yaml"),
        io::ExportTarget::LlmCompressor))["quant_stage"]["quant_modifiers"]["QuantizationModifier"]["config_groups"];
    QCOMPARE(groups["group_0"]["weights"]["strategy"].as<std::string>(), std::string("tensor_group"));
    QCOMPARE(groups["group_0"]["input_activations"]["dynamic"].as<std::string>(), std::string("local"));
    QCOMPARE(groups["group_1"]["weights"]["scale_dtype"].as<std::string>(), std::string("torch.uint8"));
    QCOMPARE(groups["group_1"]["weights"]["group_size"].as<int>(), 32);
    QCOMPARE(groups["group_1"]["input_activations"]["dynamic"].as<bool>(), true);
}

void TestExport::microscalingModelOptByHand()
{
    using nlohmann::json;
    // NVIDIA/Model-Optimizer (a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73) modelopt/torch/export/quant_utils.py
    // process_layer_quant_config writes {"quant_algo": "NVFP4" | "W4A16_NVFP4" | "MXFP8", "group_size": the block
    // size} and flattens a single format beside kv_cache_quant_algo. vLLM's ModelOpt loader
    // (vllm/model_executor/layers/quantization/modelopt.py 00155cdecca722d98e34234c3d172725b7720b7d) refuses an
    // NVFP4 hf_quant_config.json without group_size, kv_cache_quant_algo and exclude_modules, and an MXFP8 one
    // without kv_cache_quant_algo and exclude_modules (_from_config required_fields); from config.json it reads
    // group_size flat beside quant_algo.
    struct Case {
        const char* fixture;
        const char* algo;
        int groupSize;
        json kv; // kv_cache_quant_algo
        std::vector<std::string> exclude;
    };
    const std::vector<Case> cases = {
        {"nvfp4-3layer.yaml", "NVFP4", 16, nullptr, {"model.layers.2.mlp.down_proj", "lm_head"}},
        {"nvfp4-weight-only-3layer.yaml", "W4A16_NVFP4", 16, nullptr, {"lm_head"}},
        {"mxfp8-3layer.yaml", "MXFP8", 32, "FP8", mxfp8Ignored()},
    };
    for (const Case& c : cases) {
        io::ExportOptions options;
        options.target = io::ExportTarget::ModelOpt;
        const io::ExportResult result = exportResult(fixture(c.fixture), options);
        const json quantization = json::parse(result.text)["quantization"];
        QCOMPARE(quantization["quant_algo"].get<std::string>(), std::string(c.algo));
        QCOMPARE(quantization["group_size"].get<int>(), c.groupSize);
        QVERIFY(quantization.contains("kv_cache_quant_algo"));
        QCOMPARE(quantization["kv_cache_quant_algo"], c.kv);
        QCOMPARE(quantization["exclude_modules"].get<std::vector<std::string>>(), c.exclude);
        QVERIFY(!quantization.contains("quantized_layers"));
        QVERIFY(!quantization.contains("has_zero_point")); // AWQ's, not these formats'
        const json flat
            = json::parse(bundleFile(result, "config_quantization_config.json")->text)["quantization_config"];
        QCOMPARE(flat["quant_method"].get<std::string>(), std::string("modelopt"));
        QCOMPARE(flat["quant_algo"].get<std::string>(), std::string(c.algo));
        QCOMPARE(flat["group_size"].get<int>(), c.groupSize);
        QCOMPARE(flat["ignore"].get<std::vector<std::string>>(), c.exclude);
    }
    io::ExportOptions modelopt;
    modelopt.target = io::ExportTarget::ModelOpt;
    const io::ExportResult nvfp4 = exportResult(fixture("nvfp4-3layer.yaml"), modelopt);
    QVERIFY(warns(nvfp4.warnings, "NVFP4 activations on model.layers.0.self_attn.q_proj"));
    QVERIFY(warns(nvfp4.warnings, "the largest of its shards' weight_scale_2"));
    QVERIFY(!warns(nvfp4.warnings, "compressed-tensors layer as W4A16")); // compressed-tensors' fallback only
    const io::ExportResult weightOnly = exportResult(fixture("nvfp4-weight-only-3layer.yaml"), modelopt);
    QVERIFY(!warns(weightOnly.warnings, "NVFP4 activations"));

    // MIXED_PRECISION: each module with its quant_algo and group_size. vLLM's mixed loader at 00155cd builds FP8,
    // NVFP4 and W4A16_NVFP4 layers (ModelOptMixedPrecisionConfig.get_quant_method): MXFP8 is warned.
    const io::ExportResult mixed = exportResult(fixture("mixed-microscaling-3layer.yaml"), modelopt);
    const json quantization = json::parse(mixed.text)["quantization"];
    QCOMPARE(quantization["quant_algo"].get<std::string>(), std::string("MIXED_PRECISION"));
    QVERIFY(!quantization.contains("group_size"));
    const json& layers = quantization["quantized_layers"];
    QCOMPARE(layers.size(), size_t(21));
    for (const int layer : {0, 1}) {
        for (const std::string& name : layerModules(layer)) {
            QCOMPARE(layers[name], json({{"quant_algo", "NVFP4"}, {"group_size", 16}}));
        }
    }
    for (const std::string& name : layerModules(2)) {
        QCOMPARE(layers[name], json({{"quant_algo", "MXFP8"}, {"group_size", 32}}));
    }
    QVERIFY(warns(mixed.warnings,
        "only later vLLM adds MXFP8): MXFP8 on model.layers.2.self_attn.q_proj and the 6 "
        "other modules"));
    QVERIFY(!warns(mixed.warnings, "NVFP4 on model.layers.0.self_attn.q_proj and the"));
}

void TestExport::microscalingVllmForms()
{
    using nlohmann::json;
    // Online: vllm/config/quantization.py and docs/features/quantization/online.md
    // (vllm-project/vllm 00b64d17c045a946e3a047d189beac1437161919): `--quantization mxfp8` (MXFP8 weights and
    // activations) and `mxfp4`, with quantization_config.ignore naming the unfused shards.
    io::ExportOptions online;
    online.target = io::ExportTarget::Vllm;
    online.modelPath = demoModel();
    const io::ExportResult mxfp8 = exportResult(fixture("mxfp8-3layer.yaml"), online);
    const json mxfp8Json = json::parse(mxfp8.text);
    QVERIFY(!mxfp8Json.contains("quantization_config"));
    QVERIFY(mxfp8Json["form"].get<std::string>().find("to MXFP8 at load time") != std::string::npos);
    QCOMPARE(mxfp8Json["engine_args"]["quantization"].get<std::string>(), std::string("mxfp8"));
    QCOMPARE(mxfp8Json["engine_args"]["quantization_config"]["ignore"].get<std::vector<std::string>>(), mxfp8Ignored());
    QCOMPARE(mxfp8Json["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    QVERIFY(warns(mxfp8.warnings, "fall back to W8A16"));
    QVERIFY(bundleFile(mxfp8, "vllm_serve.sh")->text.find("    --quantization mxfp8 \\\n") != std::string::npos);
    for (const char* release : {io::kVllmOnlineMxfp8Release, "0.22.1"}) {
        online.targetVersion = release;
        QCOMPARE(json::parse(exportText(fixture("mxfp8-3layer.yaml"), online))["engine_args"]["quantization"],
            json("mxfp8"));
    }
    online.targetVersion.clear();
    const io::ExportResult mxfp4 = exportResult(fixture("mxfp4-3layer.yaml"), online);
    const json mxfp4Json = json::parse(mxfp4.text);
    QCOMPARE(mxfp4Json["engine_args"]["quantization"].get<std::string>(), std::string("mxfp4"));
    QCOMPARE(mxfp4Json["engine_args"]["quantization_config"]["ignore"], json({"lm_head"}));
    QCOMPARE(mxfp4Json["engine_args"]["kv_cache_dtype"].get<std::string>(), std::string("auto"));
    QVERIFY(warns(mxfp4.warnings, "MXFP4 in some backends and bf16 in others"));
    online.targetVersion = io::kVllmOnlineMxfp4Release;
    QCOMPARE(
        json::parse(exportText(fixture("mxfp4-3layer.yaml"), online))["engine_args"]["quantization"], json("mxfp4"));

    // Checkpoint form: the compressed-tensors quantization_config llm-compressor writes for the recipe (what
    // --to compressed-tensors writes, less the KV cache, which the engine arguments carry), served by the
    // checkpoint llm_compressor_oneshot.py saves; the engine arguments name no quantization.
    io::ExportOptions checkpoint;
    checkpoint.target = io::ExportTarget::Vllm;
    checkpoint.vllmForm = io::VllmForm::Checkpoint;
    checkpoint.modelPath = demoModel();
    const io::ExportResult nvfp4 = exportResult(fixture("nvfp4-3layer.yaml"), checkpoint);
    const json nvfp4Json = json::parse(nvfp4.text);
    QVERIFY(nvfp4Json["form"].get<std::string>().find("compressed-tensors checkpoint whose weights are already "
                                                      "stored in NVFP4")
        != std::string::npos);
    const json compressed = json::parse(
        exportText(fixture("nvfp4-3layer.yaml"), io::ExportTarget::CompressedTensors))["quantization_config"];
    QCOMPARE(nvfp4Json["quantization_config"], compressed);
    QCOMPARE(nvfp4Json["quantization_config"]["format"].get<std::string>(), std::string("nvfp4-pack-quantized"));
    QCOMPARE(nvfp4Json["engine_args"], json({{"kv_cache_dtype", "auto"}}));
    QVERIFY(warns(nvfp4.warnings, "per-tensor input global scale, calibrated once"));
    QCOMPARE(
        json::parse(bundleFile(nvfp4, "config_quantization_config.json")->text)["quantization_config"], compressed);
    const std::string serve = bundleFile(nvfp4, "vllm_serve.sh")->text;
    QVERIFY2(serve.find("# Serves the NVFP4 checkpoint of precision recipe nvfp4-3layer") != std::string::npos,
        serve.c_str());
    QVERIFY2(serve.find("CHECKPOINT=${1:-arith-teacher-nvfp4-3layer}\n") != std::string::npos, serve.c_str());
    QVERIFY2(serve.find("    --quantization") == std::string::npos, serve.c_str());
    QVERIFY(bundleFile(nvfp4, "llm-compressor.yaml")->text.find("scheme: NVFP4\n") != std::string::npos);
    QVERIFY(bundleFile(nvfp4, "llm_compressor_oneshot.py")->text.find("load_dataset(") != std::string::npos);

    const io::ExportResult mxfp8Checkpoint = exportResult(fixture("mxfp8-3layer.yaml"), checkpoint);
    const json mxfp8CheckpointJson = json::parse(mxfp8Checkpoint.text);
    json mxfp8Compressed = json::parse(
        exportText(fixture("mxfp8-3layer.yaml"), io::ExportTarget::CompressedTensors))["quantization_config"];
    QVERIFY(!mxfp8Compressed["kv_cache_scheme"].is_null()); // the checkpoint llm-compressor writes calibrates it
    mxfp8Compressed["kv_cache_scheme"] = nullptr;
    QCOMPARE(mxfp8CheckpointJson["quantization_config"], mxfp8Compressed);
    QCOMPARE(mxfp8CheckpointJson["engine_args"], json({{"kv_cache_dtype", "fp8_e4m3"}}));
    QVERIFY(warns(mxfp8Checkpoint.warnings, "this MXFP8 checkpoint must carry the recipe's calibrated per-tensor"));
    QVERIFY(bundleFile(mxfp8Checkpoint, "llm-compressor.yaml")->text.find("kv_cache_scheme:") != std::string::npos);
}

void TestExport::microscalingSglangMxfp8()
{
    using nlohmann::json;
    // sgl-project/sglang python/sglang/srt/server_args.py (001067fffe33427bee0ed2f007fb7551a1d76b44):
    // --quantization mxfp8 is "MOE + linear online quantization"; python/sglang/srt/layers/quantization/fp8.py
    // (00563d368df9673403eacead4adf45ef77ef0ca9): it is Fp8Config with use_mxfp8, which adds the modules of
    // SGLANG_FP8_IGNORED_LAYERS to its ignored layers and needs compute capability 100 on CUDA.
    io::ExportOptions options;
    options.target = io::ExportTarget::Sglang;
    options.modelPath = demoModel();
    const io::ExportResult result = exportResult(fixture("mxfp8-3layer.yaml"), options);
    const json sglang = json::parse(result.text);
    QCOMPARE(sglang["server_args"]["quantization"].get<std::string>(), std::string("mxfp8"));
    QCOMPARE(sglang["server_args"]["kv_cache_dtype"].get<std::string>(), std::string("fp8_e4m3"));
    std::string ignored;
    for (const std::string& name : mxfp8Ignored()) {
        ignored += (ignored.empty() ? "" : ",") + name;
    }
    QCOMPARE(sglang["env"]["SGLANG_FP8_IGNORED_LAYERS"].get<std::string>(), ignored);
    QVERIFY(sglang["form"].get<std::string>().find("to MXFP8 at load time") != std::string::npos);
    QVERIFY(warns(result.warnings, "compute capability 10.0"));
    const std::string launch = bundleFile(result, "sglang_launch.sh")->text;
    QVERIFY2(launch.find("export SGLANG_FP8_IGNORED_LAYERS=") != std::string::npos, launch.c_str());
    QVERIFY2(launch.find("    --quantization mxfp8 \\\n") != std::string::npos, launch.c_str());
}

MISMATCH_TEST_GUILESS_MAIN(TestExport)
#include "test_export.moc"

// The emulated rollout engine: module rounding against float64 references, the paged KV cache against the dense
// cache and full recomputation, capacity accounting against hand computation, sampling semantics against float64
// loops, seeds, waves, rejection, staleness, noise, and the mismatch invariants (FP32 engine = trainer, BF16 small,
// FP8 larger, per-head KV scales beat per-tensor on an outlier head).
#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/common/device.h"
#include "core/engine/engine.h"
#include "core/engine/engine_model.h"
#include "core/engine/measure.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/engine/module_names.h"
#include "core/engine/paged_kv_cache.h"
#include "core/engine/sampling.h"
#include "core/io/char_tokenizer_json.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/fp8_cpu_gemm.h"
#include "core/quant/quantize.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "tests/common/engine_held_bytes.h"
#include "tests/common/number_format_reference.h"
#include "tests/common/per_token_head_reference.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/statfs.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

using namespace mismatch;
using namespace mismatch::engine;
using model::ModelConfig;
using model::TransformerWeights;

Q_DECLARE_METATYPE(mismatch::engine::EngineKernels)

namespace {

// FP32 engine vs FP32 trainer on the same prefixes: the cached decode sums in another order than the full
// forward (float32, ~1e-7 relative per operation), nothing more.
constexpr double kFp32LogProbTolerance = 1e-4;
constexpr double kFp32MismatchBound = 1e-6; // nats per token
// Paged cache vs dense cache on the same float32 forward: identical arithmetic on the attended positions.
constexpr double kPagedVsDenseTolerance = 1e-5;
// KvBlockPool::attend against float64 on the same stored keys and values: float32 dot products of D terms, a
// float32 softmax and a float32 sum of S weighted values, each within a few float32 ulps per term; with scores of
// order 10 and values of order 1 the output's error stays below 64 eps32 (S + D) (tests use S, D <= 32).
constexpr double kAttendEps32 = 1.1920929e-07;
// Cached decode vs full recomputation in a rounding engine: a float32 sum in another order can move a value
// across a bf16 rounding boundary (one bf16 ulp, 2^-8 relative) somewhere in the network; log-probabilities
// then move by a few 1e-3 at most on this model. A cache bug moves them by O(1).
constexpr double kRoundedCacheTolerance = 5e-2;
// The tensor sampler against the host loops on the same logits: both compute log mu in float64, the tensor form
// with its sums in another order (a reduction tree); over V <= 1000 terms each sum differs by at most ~V eps64
// relative (~1e-13), and log mu by that much.
constexpr double kTensorSamplingTolerance = 1e-12;
// Module output of the engine vs a float64 reference of the same formula: one bf16 ulp (2^-8 relative) for the
// final rounding taken from a float32 vs a float64 sum.
constexpr double kBf16Ulp = 1.0 / 256.0;
// Test weights: peaked enough that distributions are far from uniform.
constexpr double kTestStddev = 0.15;

ModelConfig tinyConfig()
{
    ModelConfig config;
    config.architecture = model::Architecture::Qwen2;
    config.vocabSize = io::kDemoVocabularySize; // the demo byte tokenizer's 258 ids
    config.hiddenSize = 32;
    config.intermediateSize = 64;
    config.numLayers = 2;
    config.numHeads = 4;
    config.numKeyValueHeads = 2;
    config.headDim = 8;
    config.attentionBias = true;
    config.tieWordEmbeddings = true;
    config.eosTokenIds = {io::kDemoEndOfTextId};
    return config;
}

TransformerWeights tinyWeights(const ModelConfig& config, std::uint64_t seed)
{
    return model::randomWeights(config, seed, kTestStddev);
}

std::vector<GenerationRequest> randomRequests(
    std::size_t count, std::uint64_t seed, std::int64_t minLength = 3, std::int64_t maxLength = 9)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    std::vector<GenerationRequest> requests;
    for (std::size_t i = 0; i < count; ++i) {
        const std::int64_t length
            = at::randint(minLength, maxLength + 1, {1}, generator, at::TensorOptions().dtype(at::kLong))
                  .item<std::int64_t>();
        const at::Tensor ids = at::randint(0, 256, {length}, generator, at::TensorOptions().dtype(at::kLong));
        GenerationRequest request;
        const auto access = ids.accessor<std::int64_t, 1>();
        for (std::int64_t t = 0; t < length; ++t) {
            request.prompt.push_back(access[t]);
        }
        request.seed = 1000 + i;
        requests.push_back(request);
    }
    return requests;
}

quant::RecipePlan planFor(const std::string& yaml, const ModelConfig& config)
{
    return quant::resolveRecipe(quant::parseRecipe(yaml, "test-recipe.yaml"), config);
}

const char* kFp8Recipe = "version: 1\n"
                         "weights: {format: fp8_e4m3, granularity: channel}\n"
                         "activations: {format: fp8_e4m3}\n"
                         "kv_cache: {format: fp8_e4m3, scales: per_head}\n";

std::vector<std::vector<std::int64_t>> promptsOf(const std::vector<GenerationRequest>& requests)
{
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& request : requests) {
        prompts.push_back(request.prompt);
    }
    return prompts;
}

std::vector<std::vector<std::int64_t>> tokensOf(const std::vector<GenerationResult>& results)
{
    std::vector<std::vector<std::int64_t>> tokens;
    for (const auto& result : results) {
        tokens.push_back(result.tokens);
    }
    return tokens;
}

// max |a - b| over entries where both are finite; -inf must match -inf.
double maxFiniteDifference(const at::Tensor& a, const at::Tensor& b)
{
    const at::Tensor x = a.to(at::kDouble);
    const at::Tensor y = b.to(at::kDouble);
    const at::Tensor finite = x.isfinite().logical_and(y.isfinite());
    if (!finite.all().item<bool>()) {
        // Infinite entries (top-k/top-p cuts) must agree.
        if (!at::equal(x.isfinite(), y.isfinite())) {
            return std::numeric_limits<double>::infinity();
        }
    }
    return at::where(finite, (x - y).abs(), at::zeros_like(x)).max().item<double>();
}

QString reasonText(FinishReason reason)
{
    return QString::fromStdString(toString(reason));
}

// Exposes the protected module seams for direct checks.
class ExposedEngineModel : public EngineModel {
public:
    using EngineModel::EngineModel;
    at::Tensor callLinear(
        const std::string& module, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) const
    {
        return linear(module, x, weight, bias);
    }
};

// Makes KV head 0 of every layer an outlier without changing the function: its k_proj/v_proj rows (and biases)
// are multiplied by `factor`, the q_proj rows of the query heads reading it by 1 / factor (q.k unchanged; RoPE
// is linear per head), and the o_proj columns of those heads by 1 / factor (their output unchanged).
TransformerWeights withOutlierKvHead(const ModelConfig& config, const TransformerWeights& weights, double factor)
{
    TransformerWeights out = weights.clone();
    const std::int64_t groups = config.numHeads / config.numKeyValueHeads;
    const std::int64_t headDim = config.headDim;
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
        for (const char* name : {"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"}) {
            out.get(prefix + name).narrow(0, 0, headDim).mul_(factor);
        }
        for (const char* name : {"q_proj.weight", "q_proj.bias"}) {
            out.get(prefix + name).narrow(0, 0, groups * headDim).div_(factor);
        }
        out.get(prefix + "o_proj.weight").narrow(1, 0, groups * headDim).div_(factor);
    }
    return out;
}

// Records the keys and values the forward hands to the cache (no past) and, like the BF16 engine's cache, lets
// attention read them rounded to bf16.
class RecordingKvCache : public model::KvCache {
public:
    std::int64_t length() const override { return 0; }
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override
    {
        recordedKeys[layer] = keys.clone();
        recordedValues[layer] = values.clone();
        return {roundBf16(keys), roundBf16(values)};
    }
    void advance(std::int64_t) override { }
    std::map<std::int64_t, at::Tensor> recordedKeys;
    std::map<std::int64_t, at::Tensor> recordedValues;
};

// A dense cache whose keys and values are round-tripped through vLLM's per-token-head format as the test's reference
// defines it (tests/common/per_token_head_reference.h, from vllm-project/vllm
// vllm/v1/attention/ops/triton_reshape_and_cache_flash.py _reshape_cache_per_token_head), after rounding them to
// bf16 with LibTorch's cast: vLLM writes the keys and values in the model's dtype.
class ReferenceTokenHeadKvCache : public model::KvCache {
public:
    ReferenceTokenHeadKvCache(std::int64_t numLayers, bool fp8)
        : dense_(numLayers)
        , fp8_(fp8)
    {
    }
    std::int64_t length() const override { return dense_.length(); }
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override
    {
        return dense_.append(layer, roundTrip(keys), roundTrip(values));
    }
    void advance(std::int64_t tokens) override { dense_.advance(tokens); }

private:
    at::Tensor roundTrip(const at::Tensor& kv) const
    {
        const at::Tensor bf16 = kv.to(at::kBFloat16).to(at::kFloat).contiguous(); // [B, kvHeads, T, headDim]
        const std::vector<float> x(bf16.data_ptr<float>(), bf16.data_ptr<float>() + bf16.numel());
        const test::PerTokenHeadReference rounded = test::referencePerTokenHead(x, kv.size(3), fp8_);
        return at::from_blob(const_cast<float*>(rounded.out.data()), kv.sizes(), at::kFloat).clone();
    }

    model::DenseKvCache dense_;
    bool fp8_;
};

// Whether two log mu rows have the same kept set (-infinity at the same ids) and finite values within `tolerance`.
bool sameDistribution(const std::vector<double>& a, const double* b, double tolerance)
{
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (std::isinf(a[i]) || std::isinf(b[i])) {
            if (a[i] != b[i]) {
                return false;
            }
        } else if (!(std::abs(a[i] - b[i]) <= tolerance)) {
            return false;
        }
    }
    return true;
}

// Sampling at a temperature with top-p that keeps what a mismatch measurement needs: every position's full log mu
// and the logits it was drawn from; EOS ignored.
SamplingOptions keepingDistributions(std::int64_t maxNewTokens, double temperature, double topP, std::uint64_t seed)
{
    SamplingOptions sampling;
    sampling.maxNewTokens = maxNewTokens;
    sampling.ignoreEos = true;
    sampling.temperature = temperature;
    sampling.topP = topP;
    sampling.seed = seed;
    sampling.fullDistributions = true;
    sampling.keepLogits = true;
    return sampling;
}

// Forces the tensor sampler on the CPU for the scope (it runs there only on other devices otherwise).
struct TensorSamplingOnCpu {
    TensorSamplingOnCpu() { setTensorSamplingOnCpu(true); }
    ~TensorSamplingOnCpu() { setTensorSamplingOnCpu(false); }
};

} // namespace

class TestEngine : public QObject {
    Q_OBJECT

private slots:
    void initTestCase() { at::manual_seed(0); }

    // ---- rounding and modules ----
    void bf16FastRoundingEqualsReference();
    void moduleLinearMatchesFloat64Reference_data();
    void moduleLinearMatchesFloat64Reference();
    void fp8ProductsThroughBf16Dots_data();
    void fp8ProductsThroughBf16Dots();
    void microscalingModulesMatchReference_data();
    void microscalingModulesMatchReference();
    void weightsQuantizedOncePerSync();
    void fp32EngineReproducesTrainer();

    // ---- KV cache ----
    void pagedCacheEqualsDenseCache();
    void cachedDecodingEqualsRecomputation_data();
    void cachedDecodingEqualsRecomputation();
    void allocatorNeverCorruptsAnotherSequence();
    void capacityMatchesHandComputation();
    void capacityQwen7bShape();
    void kvScalesCalibratedAndFrozen();
    void perTokenHeadKvCacheEqualsReferenceRoundTrip_data();
    void perTokenHeadKvCacheEqualsReferenceRoundTrip();
    void perTokenHeadCapacityCountsTokenScales();

    // ---- generation ----
    void samplingDistributionSemantics();
    void samplingFrequenciesFollowDistribution();
    void greedyAndTopKOne();
    void seedsDecideTokens();
    void keptLogitsGiveTheSampledDistributions();
    void tensorSamplingMatchesTheHostLoops();
    void tensorSamplingInTheEngine();
    void seedsIndependentOfBatchComposition();
    void stopsOnEosAndMaxTokens();
    void stopsOnStopString();
    void tooLargeRequestRejectedOthersComplete();
    void waitingRequestsRunInLaterWaves();
    void badInputIsInputError();

    // ---- mismatch ----
    void engineSharesStoredBf16Weights();
    void memoryPlanCountsWhatTheEngineHolds();
    void memoryPlanCountsTheDeviceLayout();
    void compactKvStorageReadsBackExactly();
    void pagedAttentionMatchesFloat64Reference();
    void bf16GemmProbeCatchesPartialRounding();
    void bf16KernelsAgreeWithFloat32Kernels();

    void bf16MismatchSmallAndPositive();
    void fp8MismatchLargerThanBf16();
    void microscalingMismatchOrdersByPrecision();
    void perHeadKvScalesBeatPerTensorOnOutlierHead();
    void stalenessPicksSnapshot();
    void noiseSeededAndScalesWithSigma();
    void noiseThatOverflowsIsRefusedNamingTheTensor();
    void engineNamesTheTensorOfANonFiniteWeight();
    void noiseInPlaceIsTheCopysNoiseAndGivesTheWeightsBack();
    void measurementWithNoiseInPlaceIsTheCopys();
    void noisyCopyBytesCountWhatIsNotNoisedInPlace();
    void byteSizes();
};

// ---------------------------------------------------------------------------------------------------------------

void TestEngine::bf16FastRoundingEqualsReference()
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(11);
    // Magnitudes from 2^-140 (bf16 subnormals) to 2^120, plus ties and exact values.
    const at::Tensor mantissa = at::randn({20000}, generator);
    const at::Tensor exponent = at::randint(-140, 120, {20000}, generator, at::TensorOptions().dtype(at::kFloat));
    at::Tensor values = mantissa * at::pow(2.0, exponent);
    values = at::cat({values, at::tensor({1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, -0.0f, 0.0f, 3.0e38f})});
    const at::Tensor fast = roundBf16(values);
    const at::Tensor reference = quant::roundToBFloat16(values);
    QVERIFY(at::equal(fast, reference));
    QVERIFY(!at::equal(fast, values)); // it does round
}

void TestEngine::moduleLinearMatchesFloat64Reference_data()
{
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<bool>("fp8Activations");
    QTest::newRow("bf16") << QString() << false;
    QTest::newRow("fp8-channel-fp8-activations") << QString(kFp8Recipe) << true;
    QTest::newRow("int8-bf16-activations") << QString("version: 1\nweights: {format: int8}\n") << false;
}

void TestEngine::moduleLinearMatchesFloat64Reference()
{
    QFETCH(QString, recipe);
    QFETCH(bool, fp8Activations);
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 21);
    std::optional<quant::RecipePlan> plan;
    if (!recipe.isEmpty()) {
        plan = planFor(recipe.toStdString(), config);
    }
    const ExposedEngineModel engine(config, weights, plan);
    const std::string module = "model.layers.1.self_attn.q_proj";
    const at::Tensor weight = weights.get(module + ".weight");
    const at::Tensor bias = weights.get(module + ".bias");
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(22);
    const at::Tensor x = at::randn({3, 5, config.hiddenSize}, generator);

    const at::Tensor out = engine.callLinear(module, x, weight, bias);

    // Reference: the module's formats from the quant module, product and sum in float64.
    const quant::ModulePrecision precision = plan ? plan->modules.at(module) : quant::ModulePrecision {};
    const at::Tensor xq = fp8Activations ? quant::fakeQuantizeActivations(x, quant::ActivationFormat::Fp8E4m3)
                                         : quant::roundToBFloat16(x);
    const at::Tensor wq
        = quant::fakeQuantize(weight, precision.weights.format, precision.weights.granularity).to(at::kDouble);
    const at::Tensor bq = quant::roundToBFloat16(bias).to(at::kDouble);
    const at::Tensor reference = at::matmul(xq.to(at::kDouble), wq.t()) + bq;
    const double scale = reference.abs().max().item<double>();
    const double difference = (out.to(at::kDouble) - reference).abs().max().item<double>();
    QVERIFY2(difference <= kBf16Ulp * scale, qPrintable(QString("difference %1, scale %2").arg(difference).arg(scale)));
    // The output is bf16: rounding it again changes nothing.
    QVERIFY(at::equal(roundBf16(out), out));
    // And the engine really rounds: the plain FP32 module differs.
    const at::Tensor plain = at::linear(x, weight, bias);
    QVERIFY((out - plain).abs().max().item<double>() > 1e-4 * scale);
}

void TestEngine::fp8ProductsThroughBf16Dots_data()
{
    QTest::addColumn<QString>("recipe");
    QTest::addColumn<bool>("fp8Activations");
    QTest::newRow("fp8-block128-fp8-activations")
        << QString("version: 1\nweights: {format: fp8_e4m3, granularity: block128}\nactivations: {format: fp8_e4m3}\n")
        << true;
    QTest::newRow("fp8-channel-fp8-activations") << QString(kFp8Recipe) << true;
    QTest::newRow("fp8-tensor-bf16-activations")
        << QString("version: 1\nweights: {format: fp8_e4m3, granularity: tensor}\n") << false;
}

// A product with FP8 weights of over 128 Ki elements (model::widenedWhole is false) and BFloat16 kernels runs
// through quant::fp8Bf16Product where the CPU has AVX512-BF16, decode-sized or not: the definition's value (float64
// of the fake-quantized operands) within one bf16 ulp of the output's scale, and each output within one bf16 ulp of
// the Float32 kernels' (both round float32 sums of the same exact products, differently ordered and scaled).
void TestEngine::fp8ProductsThroughBf16Dots()
{
    QFETCH(QString, recipe);
    QFETCH(bool, fp8Activations);
    if (!quant::fp8Bf16ProductAvailable()) {
        QSKIP("no AVX512-BF16 on this CPU: FP8 products use the Float32 kernels (tested elsewhere)");
    }
    ModelConfig config = tinyConfig();
    config.hiddenSize = 256;
    config.intermediateSize = 640; // down_proj 256 x 640: 160 Ki elements, over widenedWhole's 128 Ki
    config.headDim = 64;
    const TransformerWeights weights = tinyWeights(config, 23);
    const quant::RecipePlan plan = planFor(recipe.toStdString(), config);
    EngineOptions bf16Kernels;
    bf16Kernels.kernels = EngineKernels::BFloat16;
    EngineOptions float32Kernels;
    float32Kernels.kernels = EngineKernels::Float32;
    const ExposedEngineModel viaDots(config, weights, plan, bf16Kernels);
    const ExposedEngineModel viaFloat32(config, weights, plan, float32Kernels);
    const std::string module = "model.layers.0.mlp.down_proj";
    const at::Tensor weight = weights.get(module + ".weight");
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(24);
    // A decode step's rows (5, odd: the kernel pairs rows) and a prefill's (3 x 13 = 39, over the 32 rows of the
    // Float32 kernels' fused decode path); mixed magnitudes per row (2^-3 .. 2^3).
    for (const std::int64_t length : {1, 13}) {
        const std::int64_t batch = length == 1 ? 5 : 3;
        const at::Tensor x = at::randn({batch, length, config.intermediateSize}, generator)
            * at::pow(2.0, at::randint(-3, 4, {batch, length, 1}, generator).to(at::kFloat));

        const std::int64_t before = bf16DotFp8LinearCalls();
        const at::Tensor out = viaDots.callLinear(module, x, weight, at::Tensor());
        QCOMPARE(bf16DotFp8LinearCalls(), before + 1);
        const at::Tensor other = viaFloat32.callLinear(module, x, weight, at::Tensor());
        QCOMPARE(bf16DotFp8LinearCalls(), before + 1); // Float32 kernels never take it

        const quant::ModulePrecision& precision = plan.modules.at(module);
        const at::Tensor xq = fp8Activations ? quant::fakeQuantizeActivations(x, quant::ActivationFormat::Fp8E4m3)
                                             : quant::roundToBFloat16(x);
        const at::Tensor wq
            = quant::fakeQuantize(weight, precision.weights.format, precision.weights.granularity).to(at::kDouble);
        const at::Tensor reference = at::matmul(xq.to(at::kDouble), wq.t());
        // Per row: the rows' magnitudes differ by up to 2^6, so each is held to its own scale.
        const at::Tensor rowScale = std::get<0>(reference.abs().max(-1, true));
        const double worst = ((out.to(at::kDouble) - reference).abs() / rowScale).max().item<double>();
        QVERIFY2(worst <= kBf16Ulp, qPrintable(QString("difference %1 of the row's scale").arg(worst)));
        QVERIFY(at::equal(roundBf16(out), out)); // bf16 outputs, as every module writes
        const at::Tensor ulp = at::pow(2.0, at::floor(at::log2(other.abs().clamp_min(1e-30))) - 7.0);
        QVERIFY(((out - other).abs() <= ulp).all().item<bool>());
    }
}

void TestEngine::microscalingModulesMatchReference_data()
{
    QTest::addColumn<QString>("format");
    QTest::addColumn<bool>("quantizedActivations");
    // W4A4 and W4A16 (ModelOpt's W4A16_NVFP4) NVFP4, W4A4 MXFP4, W8A8 MXFP8.
    QTest::newRow("nvfp4 W4A4") << QString("nvfp4") << true;
    QTest::newRow("nvfp4 W4A16") << QString("nvfp4") << false;
    QTest::newRow("mxfp4 W4A4") << QString("mxfp4") << true;
    QTest::newRow("mxfp8 W8A8") << QString("mxfp8") << true;
}

// Every linear module of a model under a microscaling recipe (the tied embedding and lm_head included) against the
// float32 model's module on the reference-dequantized operands: weights and activations quantized by
// tests/common/number_format_reference.h (float64 loops written from ModelOpt's nvfp4_tensor.py, vLLM's
// nvfp4_emulation_utils.py and the OCP MX v1.0 specification), bf16 activations by LibTorch's cast, the product and
// the bf16 bias in float64. The engine multiplies exactly these operands in float32 and rounds the result to bf16, so
// each output may differ from the float64 value by the float32 sums' error, at most (K + 2) * 2^-24 times the sum of
// the magnitudes of its K products and the bias (the standard bound for a float32 dot product, doubled here for a
// BLAS that blocks its sums), plus the final rounding, half a bf16 ulp: at most 2^-8 of the value, so 2^-8 of the
// row's largest output. A wrong block, scale or element rounding moves an output by a grid step of its operands (2^-3
// to 2^-1 relative for E2M1, 2^-4 for E4M3): far outside it.
void TestEngine::microscalingModulesMatchReference()
{
    QFETCH(QString, format);
    QFETCH(bool, quantizedActivations);
    const std::string name = format.toStdString();
    const std::string activations = quantizedActivations ? name : "bf16";
    const ModelConfig config = tinyConfig(); // inputs of 32 and 64: whole blocks of 16 and 32
    const TransformerWeights weights = tinyWeights(config, 27);
    const quant::RecipePlan plan = planFor("version: 1\nweights: {format: " + name + "}\nactivations: {format: "
            + activations + "}\nrules:\n  - {match: '{embed_tokens,lm_head}', weights: {format: " + name
            + "}, activations: {format: " + activations + "}}\n",
        config);
    const ExposedEngineModel engine(config, weights, plan);
    const quant::WeightFormat weightFormat = *quant::parseWeightFormat(name);
    const quant::ActivationFormat activationFormat = *quant::parseActivationFormat(activations);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(28);
    for (const std::string& module : model::moduleNames(config)) {
        const at::Tensor weight = weights.get(weightTensorName(config, module)).to(at::kFloat).contiguous();
        const std::vector<float> weightValues(weight.data_ptr<float>(), weight.data_ptr<float>() + weight.numel());
        const at::Tensor wq = at::tensor(test::microscalingWeightReference(weightFormat, weightValues))
                                  .reshape(weight.sizes());
        // The engine keeps the weight as codes and block factors that dequantize to the reference, bit for bit.
        QVERIFY2(at::equal(engine.engineWeight(module), wq), module.c_str());
        if (module == "embed_tokens") {
            continue; // a lookup: no product
        }
        const std::int64_t in = weight.size(1);
        // Tokens of mixed magnitudes (a factor 2^-3 .. 2^3 each), so that per-token scales differ.
        const at::Tensor x = at::randn({2, 5, in}, generator)
            * at::pow(2.0, at::randint(-3, 4, {2, 5, 1}, generator).to(at::kFloat));
        const std::string biasName = module + ".bias";
        const at::Tensor bias = weights.contains(biasName) ? weights.get(biasName) : at::Tensor();
        const at::Tensor out = engine.callLinear(module, x, weight, bias);

        const at::Tensor flat = x.reshape({-1, in}).contiguous();
        const std::vector<float> xValues(flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
        const at::Tensor xq = quantizedActivations
            ? at::tensor(test::microscalingActivationReference(activationFormat, xValues, in)).reshape({-1, in})
            : flat.to(at::kBFloat16).to(at::kFloat);
        at::Tensor reference = at::matmul(xq.to(at::kDouble), wq.to(at::kDouble).t());
        if (bias.defined()) {
            reference = reference + bias.to(at::kBFloat16).to(at::kDouble);
        }
        const at::Tensor got = out.reshape({-1, weight.size(0)}).to(at::kDouble);
        const at::Tensor rowScale = std::get<0>(reference.abs().max(-1, true));
        at::Tensor magnitudes = at::matmul(xq.abs().to(at::kDouble), wq.abs().to(at::kDouble).t());
        if (bias.defined()) {
            magnitudes = magnitudes + bias.to(at::kBFloat16).to(at::kDouble).abs();
        }
        const at::Tensor allowed = kBf16Ulp * rowScale + 2.0 * static_cast<double>(in + 2) * std::ldexp(1.0, -24) * magnitudes;
        const double worst = ((got - reference).abs() / allowed).max().item<double>();
        QVERIFY2(worst <= 1.0, qPrintable(QString("%1: difference %2 of the allowed one").arg(module.c_str()).arg(worst)));
        QVERIFY(at::equal(roundBf16(out), out)); // bf16 outputs, as every module writes
        if (quantizedActivations) {
            // The activations really are quantized: the product of the bf16 activations is another one.
            at::Tensor unquantized = at::matmul(flat.to(at::kBFloat16).to(at::kDouble), wq.to(at::kDouble).t());
            if (bias.defined()) {
                unquantized = unquantized + bias.to(at::kBFloat16).to(at::kDouble);
            }
            const double apart = ((got - unquantized).abs() / rowScale).max().item<double>();
            QVERIFY2(apart > 4.0 * kBf16Ulp, qPrintable(QString("%1: %2 from the bf16 product").arg(module.c_str()).arg(apart)));
        }
    }
}

void TestEngine::microscalingMismatchOrdersByPrecision()
{
    // On the same prompts the 4-bit formats (NVFP4 W4A4) add more mismatch than MXFP8 W8A8, which adds more than the
    // BF16 engine: each halving of the element's bits multiplies the rounding error (E2M1 steps are 2^-1 to 2^-2 of
    // a value, E4M3 ones 2^-3, bf16 ones 2^-8).
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 195);
    const model::Transformer trainer(config, weights);
    const std::vector<GenerationRequest> requests = randomRequests(8, 196);
    MismatchOptions options;
    options.sampling.maxNewTokens = 16;
    options.sampling.ignoreEos = true;
    Engine bf16(config, weights);
    Engine mxfp8(config, weights, planFor("version: 1\nweights: {format: mxfp8}\nactivations: {format: mxfp8}\n", config));
    Engine nvfp4(config, weights, planFor("version: 1\nweights: {format: nvfp4}\nactivations: {format: nvfp4}\n", config));
    const double bf16Kl = measureMismatch(trainer, bf16, requests, options).kl;
    const double mxfp8Kl = measureMismatch(trainer, mxfp8, requests, options).kl;
    const double nvfp4Kl = measureMismatch(trainer, nvfp4, requests, options).kl;
    QVERIFY2(mxfp8Kl > 2.0 * bf16Kl && nvfp4Kl > 2.0 * mxfp8Kl,
        qPrintable(QString("nvfp4 %1, mxfp8 %2, bf16 %3").arg(nvfp4Kl).arg(mxfp8Kl).arg(bf16Kl)));
}

void TestEngine::weightsQuantizedOncePerSync()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights first = tinyWeights(config, 31);
    const TransformerWeights second = tinyWeights(config, 32);
    EngineModel engine(config, first, planFor(kFp8Recipe, config));
    const std::string module = "model.layers.0.mlp.down_proj";
    const at::Tensor expectedFirst
        = quant::fakeQuantize(first.get(module + ".weight"), quant::WeightFormat::Fp8E4m3, quant::Granularity::Channel);
    QVERIFY(at::equal(engine.engineWeight(module), expectedFirst));
    // Precomputed and kept as FP8 codes (1 byte an element): a forward reads them, it does not quantize again.
    const at::Tensor codes = engine.storedWeight(module).codes();
    QCOMPARE(codes.scalar_type(), at::kByte);
    const at::NoGradGuard noGrad;
    engine.forward(at::randint(0, 256, {1, 4}, at::kLong), at::ones({1, 4}, at::kLong));
    QVERIFY(engine.storedWeight(module).codes().is_same(codes));
    // The embedding stays BF16 in this recipe (top-level defaults cover the per-layer projections only).
    QVERIFY(
        at::equal(engine.engineWeight("embed_tokens"), quant::roundToBFloat16(first.get("model.embed_tokens.weight"))));

    const at::Tensor ids = at::randint(0, 256, {2, 6}, at::kLong);
    const at::Tensor mask = at::ones({2, 6}, at::kLong);
    engine.syncWeights(second);
    QCOMPARE(engine.syncCount(), std::int64_t(1));
    QVERIFY(at::equal(engine.engineWeight(module),
        quant::fakeQuantize(
            second.get(module + ".weight"), quant::WeightFormat::Fp8E4m3, quant::Granularity::Channel)));
    const at::Tensor synced = engine.forward(ids, mask);
    // Transformer::setWeights bypasses the sync; the engine notices and still computes the right function.
    EngineModel viaBase(config, first, planFor(kFp8Recipe, config));
    static_cast<model::Transformer&>(viaBase).setWeights(second);
    QVERIFY(at::equal(viaBase.forward(ids, mask), synced));
}

void TestEngine::fp32EngineReproducesTrainer()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 41);
    const model::Transformer trainer(config, weights);
    EngineOptions options;
    options.precision = EnginePrecision::Fp32;
    Engine engine(config, weights, std::nullopt, options);
    const std::vector<GenerationRequest> requests = randomRequests(6, 42);
    SamplingOptions sampling;
    sampling.maxNewTokens = 12;
    sampling.ignoreEos = true;
    sampling.fullDistributions = true;
    const std::vector<GenerationResult> results = engine.generate(requests, sampling);
    const std::vector<at::Tensor> trainerScores = scoreSequences(trainer, promptsOf(requests), tokensOf(results));
    for (std::size_t i = 0; i < results.size(); ++i) {
        QCOMPARE(results[i].distributions.size(0), std::int64_t(sampling.maxNewTokens));
        QVERIFY(maxFiniteDifference(results[i].distributions, trainerScores[i]) < kFp32LogProbTolerance);
        for (std::size_t t = 0; t < results[i].tokens.size(); ++t) {
            const double trainerLogProb
                = trainerScores[i][static_cast<std::int64_t>(t)][results[i].tokens[t]].item<double>();
            QVERIFY(std::abs(results[i].logProbs[t] - trainerLogProb) < kFp32LogProbTolerance);
        }
    }
    MismatchOptions mismatchOptions;
    mismatchOptions.sampling = sampling;
    const MismatchMeasurement measurement = measureMismatch(trainer, engine, requests, mismatchOptions);
    QCOMPARE(measurement.tokens, std::int64_t(6 * 12));
    QVERIFY(measurement.kl < kFp32MismatchBound);
    QVERIFY(std::abs(measurement.k1) < kFp32MismatchBound * 100);
}

// ---------------------------------------------------------------------------------------------------------------
// KV cache

void TestEngine::pagedCacheEqualsDenseCache()
{
    const ModelConfig config = tinyConfig();
    const model::Transformer transformer(config, tinyWeights(config, 51));
    const std::vector<GenerationRequest> requests = randomRequests(3, 52, 2, 11);
    auto [ids, mask] = leftPaddedBatch(promptsOf(requests));
    const std::int64_t steps = 20; // crosses block boundaries (block size 4 below)
    const at::Tensor next = at::randint(0, 256, {3, steps}, at::kLong);

    model::DenseKvCache dense(config.numLayers);
    KvBlockPool pool(kvCacheLayout(config, nullptr), 1 << 20, 4);
    PagedKvCache paged(pool, nullptr);
    for (std::size_t row = 0; row < requests.size(); ++row) {
        const auto sequence = pool.allocator().allocate(static_cast<std::int64_t>(requests[row].prompt.size()) + steps);
        QVERIFY(sequence.has_value());
        paged.addRow(*sequence, ids.size(1) - static_cast<std::int64_t>(requests[row].prompt.size()));
    }
    const at::NoGradGuard noGrad;
    at::Tensor denseOut = transformer.forward(ids, mask, at::Tensor(), &dense);
    at::Tensor pagedOut = transformer.forward(ids, mask, at::Tensor(), &paged);
    // Real positions only: padded positions are meaningless (and the dense cache stores pad keys).
    const at::Tensor real = mask.ne(0).unsqueeze(-1);
    QVERIFY(at::where(real, (denseOut - pagedOut).abs(), at::zeros_like(denseOut)).max().item<double>()
        < kPagedVsDenseTolerance);
    for (std::int64_t step = 0; step < steps; ++step) {
        mask = at::cat({mask, at::ones({3, 1}, at::kLong)}, 1);
        const at::Tensor token = next.narrow(1, step, 1);
        denseOut = transformer.forward(token, mask, at::Tensor(), &dense);
        pagedOut = transformer.forward(token, mask, at::Tensor(), &paged);
        QVERIFY((denseOut - pagedOut).abs().max().item<double>() < kPagedVsDenseTolerance);
    }
    // Padding takes no blocks: each row holds ceil((prompt + steps) / 4) blocks.
    std::int64_t expectedBlocks = 0;
    for (const auto& request : requests) {
        expectedBlocks += (static_cast<std::int64_t>(request.prompt.size()) + steps + 3) / 4;
    }
    QCOMPARE(pool.allocator().usedBlocks(), expectedBlocks);
    // Dropping a row releases its blocks; the others continue unchanged.
    paged.keepRows({0, 2});
    QCOMPARE(pool.allocator().usedBlocks(),
        expectedBlocks - (static_cast<std::int64_t>(requests[1].prompt.size()) + steps + 3) / 4);
}

void TestEngine::cachedDecodingEqualsRecomputation_data()
{
    QTest::addColumn<QString>("precision");
    QTest::addColumn<EngineKernels>("kernels");
    QTest::newRow("fp32") << "fp32" << EngineKernels::Auto;
    QTest::newRow("bf16") << "bf16" << EngineKernels::Float32;
    QTest::newRow("fp8-recipe") << "fp8" << EngineKernels::Float32;
    // LibTorch's BF16 GEMM (oneDNN where the CPU has BF16 dot products, a float32-accumulating fallback on AVX2):
    // the teacher-forced pass multiplies [B x T] rows at once, decoding [B] rows, so the kernels may block the
    // products differently; the bound is the same as for the Float32 kernels.
    QTest::newRow("bf16-bf16-kernels") << "bf16" << EngineKernels::BFloat16;
    QTest::newRow("fp8-recipe-bf16-kernels") << "fp8" << EngineKernels::BFloat16;
}

void TestEngine::cachedDecodingEqualsRecomputation()
{
    QFETCH(QString, precision);
    QFETCH(EngineKernels, kernels);
    if (kernels == EngineKernels::BFloat16 && !bf16KernelsRoundOnce({32, 64})) {
        QSKIP("LibTorch's BF16 GEMM on this CPU rounds more than once (bf16KernelsRoundOnce): engines use Float32 "
              "kernels here");
    }
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 61);
    EngineOptions options;
    options.kvBlockSize = 4;
    options.kernels = kernels;
    options.precision = precision == "fp32" ? EnginePrecision::Fp32 : EnginePrecision::Bf16Reference;
    std::optional<quant::RecipePlan> plan;
    if (precision == "fp8") {
        plan = planFor(kFp8Recipe, config);
    }
    Engine engine(config, weights, plan, options);
    const std::vector<GenerationRequest> requests = randomRequests(4, 62);
    if (precision == "fp8") {
        engine.model().calibrateKvScales(promptsOf(randomRequests(8, 63)));
    }
    SamplingOptions sampling;
    sampling.maxNewTokens = 16;
    sampling.ignoreEos = true;
    sampling.fullDistributions = true;
    const std::vector<GenerationResult> results = engine.generate(requests, sampling);
    // Full recomputation of every prefix with the same engine (same rounding of K and V, no reuse).
    const std::vector<at::Tensor> recomputed = scoreSequences(engine.model(), promptsOf(requests), tokensOf(results));
    // The plain reference (no KV rounding) as a sanity bound: rounding engines must differ from it.
    double largest = 0.0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        largest = std::max(largest, maxFiniteDifference(results[i].distributions, recomputed[i]));
    }
    const double tolerance = precision == "fp32" ? kFp32LogProbTolerance : kRoundedCacheTolerance;
    QVERIFY2(largest < tolerance, qPrintable(QString("max |log mu difference| %1").arg(largest)));
}

void TestEngine::allocatorNeverCorruptsAnotherSequence()
{
    const ModelConfig config = tinyConfig();
    const KvCacheLayout layout = kvCacheLayout(config, nullptr);
    // Room for exactly 3 blocks of 4 tokens.
    const std::uint64_t memory = static_cast<std::uint64_t>(3 * 4 * layout.bytesPerToken());
    KvBlockPool pool(layout, memory, 4);
    QCOMPARE(pool.allocator().totalBlocks(), std::int64_t(3));
    const auto first = pool.allocator().allocate(6); // 2 blocks
    QVERIFY(first.has_value());
    PagedKvCache cache(pool, nullptr);
    cache.addRow(*first, 0);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(71);
    const at::Tensor keys = at::randn({1, config.numKeyValueHeads, 6, config.headDim}, generator);
    const at::Tensor values = at::randn({1, config.numKeyValueHeads, 6, config.headDim}, generator);
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const auto [k, v] = cache.append(layer, keys, values);
        QVERIFY(at::equal(k, keys));
        QVERIFY(at::equal(v, values));
    }
    cache.advance(6);
    // A sequence of 5 tokens needs 2 blocks; 1 is free: refused, nothing taken.
    QVERIFY(!pool.allocator().allocate(5).has_value());
    QCOMPARE(pool.allocator().freeBlocks(), std::int64_t(1));
    // Writing past the reservation (2 blocks = 8 tokens) is refused before anything is written.
    const at::Tensor more = at::randn({1, config.numKeyValueHeads, 3, config.headDim}, generator);
    QVERIFY_EXCEPTION_THROWN(cache.append(0, more, more), ResourceError);
    // A neighbour writes its own block; the first sequence reads back unchanged.
    const auto second = pool.allocator().allocate(4);
    QVERIFY(second.has_value());
    {
        PagedKvCache neighbour(pool, nullptr);
        neighbour.addRow(*second, 0);
        const at::Tensor other = at::randn({1, config.numKeyValueHeads, 4, config.headDim}, generator) * 100.0;
        for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
            neighbour.append(layer, other, other);
        }
        neighbour.advance(4);
    }
    QCOMPARE(pool.allocator().freeBlocks(), std::int64_t(1)); // the neighbour's destructor released its block
    const at::Tensor one = at::randn({1, config.numKeyValueHeads, 1, config.headDim}, generator);
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        const auto [k, v] = cache.append(layer, one, one);
        QVERIFY(at::equal(k.narrow(2, 0, 6), keys));
        QVERIFY(at::equal(v.narrow(2, 0, 6), values));
        QVERIFY(at::equal(k.narrow(2, 6, 1), one));
    }
}

void TestEngine::capacityMatchesHandComputation()
{
    const ModelConfig config = tinyConfig(); // 2 layers, 2 KV heads, head dim 8
    const quant::RecipePlan plan = planFor("version: 1\n"
                                           "kv_cache: {format: fp8_e4m3, scales: per_head}\n"
                                           "rules:\n"
                                           "  - match: \"model.layers.0.self_attn\"\n"
                                           "    kv_cache: {format: bf16}\n",
        config);
    // Layer 0 bf16: 2 * 2 * 8 * 2 = 64 bytes per token; layer 1 fp8: 2 * 2 * 8 * 1 = 32.
    // Scales: layer 1 per head, K and V: 2 * 2 float32 = 16 bytes. Block of 16 tokens: 16 * 96 = 1536 bytes.
    const std::int64_t scaleBytes = 16;
    const std::int64_t blockBytes = 1536;
    const KvCapacity exact = kvCapacity(config, &plan, scaleBytes + 5 * blockBytes, 16);
    QCOMPARE(exact.layerBytesPerToken, (std::vector<std::int64_t> {64, 32}));
    QCOMPARE(exact.bytesPerToken, std::int64_t(96));
    QCOMPARE(exact.scaleBytes, scaleBytes);
    QCOMPARE(exact.blocks, std::int64_t(5));
    QCOMPARE(exact.tokens, std::int64_t(80));
    // One byte less: the scales come off first, so only 4 blocks fit.
    QCOMPARE(kvCapacity(config, &plan, scaleBytes + 5 * blockBytes - 1, 16).blocks, std::int64_t(4));
    // BF16: 128 bytes per token, 2048 per block, no scales: 7696 bytes hold 3 blocks.
    QCOMPARE(exact.bf16Blocks, std::int64_t((scaleBytes + 5 * blockBytes) / 2048));
    QCOMPARE(exact.ratioToBf16, 80.0 / 48.0);
    // Per tensor: 2 scales per FP8 layer.
    const quant::RecipePlan perTensor
        = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_tensor}\n", config);
    const KvCapacity tensorCapacity = kvCapacity(config, &perTensor, 1000000, 8);
    QCOMPARE(tensorCapacity.scaleBytes, std::int64_t(2 * 2 * 4));
    QCOMPARE(tensorCapacity.blocks, std::int64_t((1000000 - 16) / (8 * 64)));
    // The engine's own allocator agrees with kvCapacity for its recipe.
    EngineOptions options;
    options.kvCacheBytes = 1000000;
    options.kvBlockSize = 8;
    const Engine engine(config, tinyWeights(config, 81), perTensor, options);
    QCOMPARE(engine.allocator().totalBlocks(), tensorCapacity.blocks);
    // The FP32 engine stores float32: 4 bytes per element.
    options.precision = EnginePrecision::Fp32;
    const Engine fp32(config, tinyWeights(config, 81), std::nullopt, options);
    QCOMPARE(fp32.allocator().layout().bytesPerToken(), std::int64_t(2 * 2 * 2 * 8 * 4));
    QVERIFY_EXCEPTION_THROWN(kvCapacity(config, &plan, 1000, 0), InputError);
}

void TestEngine::capacityQwen7bShape()
{
    ModelConfig config;
    config.vocabSize = 152064;
    config.hiddenSize = 3584;
    config.intermediateSize = 18944;
    config.numLayers = 28;
    config.numHeads = 28;
    config.numKeyValueHeads = 4;
    config.headDim = 128;
    config.attentionBias = true;
    const quant::RecipePlan plan = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n", config);
    const std::uint64_t memory = 8ull << 30;
    const KvCapacity capacity = kvCapacity(config, &plan, memory, 16);
    // BF16: 28 * 2 * 4 * 128 * 2 = 57344 bytes per token; FP8 28672 plus 28 * 2 * 4 * 4 = 896 scale bytes.
    QCOMPARE(capacity.bytesPerToken, std::int64_t(28672));
    QCOMPARE(capacity.scaleBytes, std::int64_t(896));
    QCOMPARE(capacity.bf16Tokens, std::int64_t(memory / (57344 * 16)) * 16);
    QCOMPARE(capacity.tokens, std::int64_t((memory - 896) / (28672 * 16)) * 16);
    QVERIFY(capacity.ratioToBf16 >= 1.93);
}

void TestEngine::perTokenHeadKvCacheEqualsReferenceRoundTrip_data()
{
    QTest::addColumn<bool>("fp8");
    QTest::newRow("fp8_per_token_head") << true;
    QTest::newRow("int8_per_token_head") << false;
}

// The engine under a per-token-head KV format computes what the same model computes on keys and values round-tripped
// by the reference: the paged cache's prefill and its in-place decoding attention, and forwardQuantized.
void TestEngine::perTokenHeadKvCacheEqualsReferenceRoundTrip()
{
    QFETCH(bool, fp8);
    const ModelConfig config = tinyConfig();
    const quant::RecipePlan plan = planFor(
        std::string("version: 1\nkv_cache: {format: ") + (fp8 ? "fp8_per_token_head" : "int8_per_token_head") + "}\n",
        config);
    EngineOptions options;
    options.kvBlockSize = 4;
    options.kernels = EngineKernels::Float32;
    EngineModel model(config, tinyWeights(config, fp8 ? 91 : 92), plan, options);
    const std::vector<GenerationRequest> requests = randomRequests(3, 93, 2, 11);
    auto [ids, mask] = leftPaddedBatch(promptsOf(requests));
    const std::int64_t steps = 10; // crosses block boundaries (block size 4)
    const at::Tensor next = at::randint(0, 256, {3, steps}, at::kLong);

    ReferenceTokenHeadKvCache reference(config.numLayers, fp8);
    KvBlockPool pool(kvCacheLayout(model), 1 << 20, 4, kvStorage(model));
    PagedKvCache paged(pool, &model.kvQuantizer());
    for (std::size_t row = 0; row < requests.size(); ++row) {
        const auto sequence = pool.allocator().allocate(static_cast<std::int64_t>(requests[row].prompt.size()) + steps);
        QVERIFY(sequence.has_value());
        paged.addRow(*sequence, ids.size(1) - static_cast<std::int64_t>(requests[row].prompt.size()));
    }
    const at::NoGradGuard noGrad;
    const at::Tensor real = mask.ne(0).unsqueeze(-1);
    const auto realDifference = [&](const at::Tensor& a, const at::Tensor& b) {
        return at::where(real, (a - b).abs(), at::zeros_like(a)).max().item<double>();
    };
    at::Tensor expected = model.forward(ids, mask, at::Tensor(), &reference);
    // The quantizer's dense path quantizes exactly as the reference: the same values, the same arithmetic.
    QVERIFY(at::equal(model.forwardQuantized(ids, mask), expected));
    at::Tensor got = model.forward(ids, mask, at::Tensor(), &paged);
    QVERIFY2(realDifference(got, expected) < kPagedVsDenseTolerance,
        qPrintable(QString::number(realDifference(got, expected))));
    // The rounding matters: the same forward on bf16 keys and values (no per-token-head quantization) is far off.
    RecordingKvCache bf16Only;
    QVERIFY(realDifference(model.forward(ids, mask, at::Tensor(), &bf16Only), expected) > 10 * kPagedVsDenseTolerance);
    for (std::int64_t step = 0; step < steps; ++step) {
        mask = at::cat({mask, at::ones({3, 1}, at::kLong)}, 1);
        const at::Tensor token = next.narrow(1, step, 1);
        expected = model.forward(token, mask, at::Tensor(), &reference);
        got = model.forward(token, mask, at::Tensor(), &paged);
        const double difference = (got - expected).abs().max().item<double>();
        QVERIFY2(difference < kPagedVsDenseTolerance, qPrintable(QString("step %1: %2").arg(step).arg(difference)));
    }
    // What the cache stores: a one-byte code per element and a float32 scale per slot and KV head, for K and V.
    QCOMPARE(pool.storageBytes(),
        static_cast<std::uint64_t>(
            2 * config.numLayers * pool.storageSlots() * config.numKeyValueHeads * (config.headDim + 4)));
}

void TestEngine::perTokenHeadCapacityCountsTokenScales()
{
    const ModelConfig config = tinyConfig(); // 2 layers, 2 KV heads, head dim 8
    const quant::RecipePlan plan = planFor("version: 1\n"
                                           "kv_cache: {format: int8_per_token_head}\n"
                                           "rules:\n"
                                           "  - match: \"model.layers.0.self_attn\"\n"
                                           "    kv_cache: {format: bf16}\n",
        config);
    // Layer 0 bf16: 2 * 2 * 8 * 2 = 64 bytes per token; layer 1 int8: 2 * 2 * 8 * 1 = 32 plus a float32 scale per
    // token, KV head and K or V, 2 * 2 * 4 = 16 (vllm-project/vllm vllm/v1/kv_cache_interface.py
    // AttentionSpec.page_size_bytes adds 2 * block_size * num_kv_heads * 4 to a page). No fixed scales. A block of
    // 16 tokens: 16 * 112 = 1792 bytes.
    const std::int64_t blockBytes = 1792;
    const KvCapacity exact = kvCapacity(config, &plan, 5 * blockBytes, 16);
    QCOMPARE(exact.layerBytesPerToken, (std::vector<std::int64_t> {64, 48}));
    QCOMPARE(exact.bytesPerToken, std::int64_t(112));
    QCOMPARE(exact.scaleBytes, std::int64_t(0));
    QCOMPARE(exact.blocks, std::int64_t(5));
    QCOMPARE(exact.tokens, std::int64_t(80));
    QCOMPARE(exact.layerFormats, (std::vector<std::string> {"bf16", "int8_per_token_head"}));
    QCOMPARE(kvCapacity(config, &plan, 5 * blockBytes - 1, 16).blocks, std::int64_t(4));
    QCOMPARE(plan.kvBytesPerToken, std::int64_t(112));
    QCOMPARE(plan.kvScaleBytes, std::int64_t(0));
    // The engine's own allocator agrees.
    EngineOptions options;
    options.kvCacheBytes = 5 * blockBytes;
    options.kvBlockSize = 16;
    const Engine engine(config, tinyWeights(config, 81), plan, options);
    QCOMPARE(engine.allocator().totalBlocks(), std::int64_t(5));
    // A Qwen2.5-7B shape (28 layers, 4 KV heads, head dim 128) with fp8_per_token_head everywhere:
    // 28 * 2 * 4 * (128 + 4) = 29568 bytes per token against BF16's 57344.
    ModelConfig qwen = config;
    qwen.numLayers = 28;
    qwen.numHeads = 28;
    qwen.numKeyValueHeads = 4;
    qwen.headDim = 128;
    qwen.hiddenSize = 3584;
    const quant::RecipePlan fp8 = planFor("version: 1\nkv_cache: {format: fp8_per_token_head}\n", qwen);
    const std::uint64_t memory = 8ull << 30;
    const KvCapacity capacity = kvCapacity(qwen, &fp8, memory, 16);
    QCOMPARE(capacity.bytesPerToken, std::int64_t(29568));
    QCOMPARE(capacity.tokens, std::int64_t(memory / (29568 * 16)) * 16);
    QCOMPARE(capacity.bf16Tokens, std::int64_t(memory / (57344 * 16)) * 16);
    QVERIFY(capacity.ratioToBf16 >= 1.93);
}

void TestEngine::kvScalesCalibratedAndFrozen()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 91);
    const quant::RecipePlan plan = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n", config);
    EngineModel engine(config, weights, plan);
    const std::vector<std::vector<std::int64_t>> probes = promptsOf(randomRequests(5, 92));
    // One probe per forward: the same forwards as the reference below, so the scales must agree exactly.
    const KvScaleTable table = calibrateKvScales(engine, probes, /*batchSize=*/1);

    // Reference: amax per KV head over each probe's tokens, one probe at a time (no padding), BF16 engine.
    EngineOptions bf16Options;
    bf16Options.precision = EnginePrecision::Bf16Reference;
    const EngineModel bf16(config, weights, std::nullopt, bf16Options);
    const at::NoGradGuard noGrad;
    std::vector<std::vector<double>> keyAmax(2, std::vector<double>(2, 0.0));
    std::vector<std::vector<double>> valueAmax(2, std::vector<double>(2, 0.0));
    for (const auto& probe : probes) {
        RecordingKvCache recorder;
        const at::Tensor ids = at::tensor(probe, at::kLong).unsqueeze(0);
        bf16.forward(ids, at::ones_like(ids), at::Tensor(), &recorder);
        for (std::int64_t layer = 0; layer < 2; ++layer) {
            for (std::int64_t head = 0; head < 2; ++head) {
                const at::Tensor k = roundBf16(recorder.recordedKeys[layer])[0][head];
                const at::Tensor v = roundBf16(recorder.recordedValues[layer])[0][head];
                keyAmax[layer][head] = std::max(keyAmax[layer][head], k.abs().max().item<double>());
                valueAmax[layer][head] = std::max(valueAmax[layer][head], v.abs().max().item<double>());
            }
        }
    }
    for (std::int64_t layer = 0; layer < 2; ++layer) {
        for (std::int64_t head = 0; head < 2; ++head) {
            // scale = amax / 448, one float32 division; padding in the batched calibration changes nothing.
            QCOMPARE(table.keys[layer][head].item<float>(), static_cast<float>(keyAmax[layer][head]) / 448.0f);
            QCOMPARE(table.values[layer][head].item<float>(), static_cast<float>(valueAmax[layer][head]) / 448.0f);
        }
    }

    // Batched (left padded) calibration: padding never enters the amax; the batched float32 sums may move a
    // bf16-rounded value by one bf16 ulp (2^-8 relative).
    const KvScaleTable batched = calibrateKvScales(engine, probes, /*batchSize=*/3);
    for (std::int64_t layer = 0; layer < 2; ++layer) {
        QVERIFY(((batched.keys[layer] - table.keys[layer]).abs() <= kBf16Ulp * table.keys[layer]).all().item<bool>());
        QVERIFY(
            ((batched.values[layer] - table.values[layer]).abs() <= kBf16Ulp * table.values[layer]).all().item<bool>());
    }

    // A scale measured in a prefill ignores padding positions, however large their keys.
    {
        quant::KvPrecision fp8;
        fp8.format = quant::KvFormat::Fp8E4m3;
        fp8.scales = quant::KvScales::PerHead;
        KvQuantizer quantizer({fp8}, 2, true);
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(97);
        at::Tensor keys = at::randn({2, 2, 5, 8}, generator);
        const at::Tensor real = at::ones({2, 5}, at::kBool);
        real[1].narrow(0, 0, 2).fill_(false); // row 1: two left-padding positions
        const at::Tensor realKeys = keys[1].narrow(1, 2, 3);
        keys[1].narrow(1, 0, 2).fill_(1.0e4);
        quantizer.quantize(0, keys, keys, real);
        for (std::int64_t head = 0; head < 2; ++head) {
            const float amax
                = std::max(keys[0][head].abs().max().item<float>(), realKeys[head].abs().max().item<float>());
            QCOMPARE(quantizer.scales().keys[0][head].item<float>(), amax / 448.0f);
        }
    }

    // Without calibration: measured at the first prefill, then frozen.
    Engine fresh(config, weights, plan);
    QVERIFY(!fresh.model().kvQuantizer().hasScales(0));
    SamplingOptions sampling;
    sampling.maxNewTokens = 3;
    fresh.generate(randomRequests(2, 93), sampling);
    QVERIFY(fresh.model().kvQuantizer().hasScales(1));
    const at::Tensor frozen = fresh.model().kvQuantizer().scales().keys[1].clone();
    fresh.generate(randomRequests(3, 94), sampling);
    QVERIFY(at::equal(fresh.model().kvQuantizer().scales().keys[1], frozen));
    // probe calibration survives a weight sync...
    fresh.syncWeights(tinyWeights(config, 95));
    QVERIFY(at::equal(fresh.model().kvQuantizer().scales().keys[1], frozen));
    // ...every_sync re-measures (here: calibrated on the remembered probe prompts at once).
    const quant::RecipePlan everySync
        = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head, calibration: every_sync}\n", config);
    Engine syncing(config, weights, everySync);
    syncing.model().calibrateKvScales(probes);
    QVERIFY(at::equal(syncing.model().kvQuantizer().scales().keys[1], table.keys[1]));
    const TransformerWeights next = tinyWeights(config, 96);
    syncing.syncWeights(next);
    EngineModel nextModel(config, next, everySync);
    const KvScaleTable nextTable = calibrateKvScales(nextModel, probes);
    QVERIFY(at::equal(syncing.model().kvQuantizer().scales().keys[1], nextTable.keys[1]));
    QVERIFY(!at::equal(nextTable.keys[1], table.keys[1]));
}

// ---------------------------------------------------------------------------------------------------------------
// Sampling

void TestEngine::samplingDistributionSemantics()
{
    // Independent float64 reference on a hand-made row with a tie.
    const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 3.0f, 1.0f, -1.0f};
    const auto reference = [&](double temperature, std::vector<int> kept) {
        double normalizer = 0.0;
        for (int v : kept) {
            normalizer += std::exp(logits[static_cast<std::size_t>(v)] / temperature);
        }
        std::vector<double> out(logits.size(), -std::numeric_limits<double>::infinity());
        for (int v : kept) {
            out[static_cast<std::size_t>(v)] = logits[static_cast<std::size_t>(v)] / temperature - std::log(normalizer);
        }
        return out;
    };
    const auto close = [](const std::vector<double>& a, const std::vector<double>& b) {
        return sameDistribution(a, b.data(), 1e-12);
    };
    SamplingOptions options;
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {0, 1, 2, 3, 4, 5})));
    options.temperature = 0.5;
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(0.5, {0, 1, 2, 3, 4, 5})));
    options.temperature = 1.0;
    options.topK = 3; // 3.0, 2.0, then the tie 1.0 at ids 1 and 4: the lower id wins
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3, 0, 1})));
    options.topK = 0;
    // Probabilities at T=1: e^3, e^2, e^1, e^1, e^.5, e^-1 over 34.93: 0.575, 0.2115, 0.0778, 0.0778, 0.0472,
    // 0.0105.
    options.topP = 0.5; // the top token alone reaches 0.575 >= 0.5
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3})));
    options.topP = 0.78; // 0.575 + 0.2115 = 0.7865 >= 0.78
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3, 0})));
    options.topP = 0.8; // needs one of the tied 0.0778s: id 1 (lower id first)
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3, 0, 1})));
    options.topK = 2; // top-k first, then top-p renormalized over the two: 0.731, 0.269
    options.topP = 0.7;
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3})));
    options.topP = 0.75;
    QVERIFY(close(samplingLogProbs(logits.data(), 6, options), reference(1.0, {3, 0})));

    // top log-probs: the most probable kept tokens in order, ties by lower id.
    SamplingOptions topOptions;
    topOptions.topLogProbs = 4;
    metrics::SplitMix64 generator(5);
    const SampledToken token
        = sampleToken(logits.data(), samplingLogProbs(logits.data(), 6, topOptions), topOptions, generator);
    QCOMPARE(token.top.size(), std::size_t(4));
    QCOMPARE(token.top[0].id, std::int64_t(3));
    QCOMPARE(token.top[1].id, std::int64_t(0));
    QCOMPARE(token.top[2].id, std::int64_t(1));
    QCOMPARE(token.top[3].id, std::int64_t(4));

    // Non-finite logits have no distribution: an error, not a silent token.
    const std::vector<float> withNan = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
    QVERIFY_EXCEPTION_THROWN(samplingLogProbs(withNan.data(), 3, SamplingOptions {}), Error);
    const std::vector<float> withInf = {0.0f, std::numeric_limits<float>::infinity(), 1.0f};
    QVERIFY_EXCEPTION_THROWN(samplingLogProbs(withInf.data(), 3, SamplingOptions {}), Error);
}

void TestEngine::samplingFrequenciesFollowDistribution()
{
    const std::vector<float> logits = {0.3f, -0.2f, 1.1f, 0.0f, 0.7f};
    SamplingOptions options;
    options.temperature = 0.8;
    options.topP = 0.9;
    const std::vector<double> logMu = samplingLogProbs(logits.data(), 5, options);
    metrics::SplitMix64 generator(17);
    const int draws = 200000;
    std::vector<int> counts(5, 0);
    for (int i = 0; i < draws; ++i) {
        const SampledToken token = sampleToken(logits.data(), logMu, options, generator);
        ++counts[static_cast<std::size_t>(token.id)];
        QVERIFY(token.logProb == logMu[static_cast<std::size_t>(token.id)]);
    }
    for (std::size_t v = 0; v < 5; ++v) {
        const double p = std::exp(logMu[v]);
        const double sd = std::sqrt(p * (1 - p) / draws);
        // 5 standard deviations: a false failure has probability ~1e-6.
        QVERIFY2(std::abs(counts[v] / static_cast<double>(draws) - p) <= 5 * sd + 1e-12,
            qPrintable(QString("token %1: %2 vs %3").arg(v).arg(counts[v] / double(draws)).arg(p)));
    }
    QCOMPARE(counts[1], 0); // cut by top-p (the least probable token)
}

void TestEngine::greedyAndTopKOne()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 101);
    Engine engine(config, weights);
    const std::vector<GenerationRequest> requests = randomRequests(3, 102);
    SamplingOptions greedy;
    greedy.greedy = true;
    greedy.maxNewTokens = 8;
    greedy.ignoreEos = true;
    const std::vector<GenerationResult> greedyResults = engine.generate(requests, greedy);
    // Every greedy token is the argmax of the recomputed engine logits at its prefix.
    const std::vector<at::Tensor> recomputed
        = scoreSequences(engine.model(), promptsOf(requests), tokensOf(greedyResults));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        for (std::size_t t = 0; t < greedyResults[i].tokens.size(); ++t) {
            QCOMPARE(
                recomputed[i][static_cast<std::int64_t>(t)].argmax().item<std::int64_t>(), greedyResults[i].tokens[t]);
        }
    }
    // temperature 0 is greedy; top-k 1 samples the argmax whatever the seed and reports log mu = 0.
    SamplingOptions zero = greedy;
    zero.greedy = false;
    zero.temperature = 0.0;
    QCOMPARE(tokensOf(engine.generate(requests, zero)), tokensOf(greedyResults));
    SamplingOptions topOne = greedy;
    topOne.greedy = false;
    topOne.topK = 1;
    topOne.seed = 12345;
    const std::vector<GenerationResult> topOneResults = engine.generate(requests, topOne);
    QCOMPARE(tokensOf(topOneResults), tokensOf(greedyResults));
    for (const auto& result : topOneResults) {
        for (double logProb : result.logProbs) {
            QCOMPARE(logProb, 0.0);
        }
    }
}

void TestEngine::keptLogitsGiveTheSampledDistributions()
{
    // The logits a generation keeps (what a mismatch measurement stores between generating and scoring) give back
    // log mu exactly as the engine sampled with it: bf16 for the BF16 and recipe engines (their lm_head writes
    // bf16, so nothing is lost), float32 for the FP32 engine; at temperature 0.7 with top-p, where log mu is not a
    // plain log_softmax. The float32 log mu the engine returns is the rounding of the float64 one.
    const ModelConfig config = tinyConfig();
    const std::vector<GenerationRequest> requests = randomRequests(3, 131, 2, 9);
    const SamplingOptions sampling = keepingDistributions(7, 0.7, 0.9, 3);
    struct Case {
        const char* name;
        std::optional<quant::RecipePlan> plan;
        EnginePrecision precision;
        at::ScalarType logitType;
    };
    const std::vector<Case> cases = {{"bf16", std::nullopt, EnginePrecision::Bf16Reference, at::kBFloat16},
        {"fp8", planFor(kFp8Recipe, config), EnginePrecision::Recipe, at::kBFloat16},
        {"fp32", std::nullopt, EnginePrecision::Fp32, at::kFloat}};
    for (const Case& c : cases) {
        EngineOptions options;
        options.precision = c.precision;
        Engine engine(config, tinyWeights(config, 132), c.plan, options);
        const std::vector<GenerationResult> results = engine.generate(requests, sampling);
        for (const GenerationResult& result : results) {
            QCOMPARE(result.logits.scalar_type(), c.logitType);
            QCOMPARE(result.logits.size(0), static_cast<std::int64_t>(result.tokens.size()));
            const at::Tensor logMu = logMuRows(result.logits, sampling);
            QCOMPARE(logMu.scalar_type(), at::kDouble);
            QVERIFY2(at::equal(logMu.to(at::kFloat), result.distributions), c.name);
            for (std::size_t t = 0; t < result.tokens.size(); ++t) {
                QCOMPARE(logMu[static_cast<std::int64_t>(t)][result.tokens[t]].item<double>(), result.logProbs[t]);
            }
        }
    }
    // Rows that stop early keep their own rows only: one that stops within the first half of its allowance gives
    // the rest of its [maxNewTokens, vocab] buffer back (its logits hold exactly its rows).
    Engine engine(config, tinyWeights(config, 132));
    SamplingOptions free = keepingDistributions(12, 0.7, 0.9, 5);
    const std::vector<GenerationResult> unstopped = engine.generate(requests, free);
    SamplingOptions stopping = free;
    stopping.ignoreEos = false;
    stopping.stopTokenIds = {unstopped[0].tokens[1]};
    const std::vector<GenerationResult> stopped = engine.generate(requests, stopping);
    QVERIFY(stopped[0].tokens.size() <= 2);
    for (const GenerationResult& result : stopped) {
        QCOMPARE(result.logits.size(0), static_cast<std::int64_t>(result.tokens.size()));
        QVERIFY(at::equal(logMuRows(result.logits, stopping).to(at::kFloat), result.distributions));
    }
    const at::Tensor& early = stopped[0].logits;
    QCOMPARE(static_cast<std::int64_t>(early.storage().nbytes()), early.numel() * 2);
}

void TestEngine::tensorSamplingMatchesTheHostLoops()
{
    // The GPU's sampler (tensor operations over the batch) against the per-row float64 loops, on the CPU, on the
    // same logits and the same draws: bf16-rounded random logits (ties among them), and rows with deliberate
    // ties at the top-k boundary.
    const std::int64_t rows = 6;
    const std::int64_t vocab = 1000;
    at::manual_seed(141);
    at::Tensor logits = (at::randn({rows, vocab}) * 3.0).to(at::kBFloat16).to(at::kFloat);
    logits[1].narrow(0, 0, 40).fill_(30.0); // 40 tied maxima (randn * 3 stays far below): top-k 10 keeps ids 0-9
    logits[2].narrow(0, 500, 3).fill_(20.0); // nearly all the mass on three tied ids
    const auto options = [](double temperature, double topP, std::int64_t topK, bool greedy) {
        SamplingOptions o;
        o.temperature = temperature;
        o.topP = topP;
        o.topK = topK;
        o.greedy = greedy;
        o.topLogProbs = 5;
        return o;
    };
    const std::vector<SamplingOptions> cases = {options(1.0, 1.0, 0, false), options(0.7, 0.9, 0, false),
        options(1.0, 1.0, 10, false), options(1.3, 0.8, 50, false), options(1.0, 0.95, 0, true),
        options(0.0, 1.0, 0, false)};
    for (std::size_t c = 0; c < cases.size(); ++c) {
        const SamplingOptions& sampling = cases[c];
        std::vector<metrics::SplitMix64> generators;
        std::vector<double> uniforms;
        for (std::int64_t r = 0; r < rows; ++r) {
            generators.emplace_back(1000 * c + static_cast<std::uint64_t>(r));
            metrics::SplitMix64 copy = generators.back();
            uniforms.push_back(copy.uniform());
        }
        const SampledRows tensor = sampleRows(logits, uniforms, sampling);
        QCOMPARE(tensor.logMu.scalar_type(), at::kDouble);
        const at::Tensor logMuRowsTensor = samplingLogProbsRows(logits.to(at::kBFloat16), sampling);
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::string where = "case " + std::to_string(c) + " row " + std::to_string(r);
            const float* row = logits[r].data_ptr<float>();
            const std::vector<double> logMu = samplingLogProbs(row, vocab, sampling);
            const SampledToken host = sampleToken(row, logMu, sampling, generators[static_cast<std::size_t>(r)]);
            QVERIFY2(sameDistribution(logMu, tensor.logMu[r].contiguous().data_ptr<double>(), kTensorSamplingTolerance),
                where.c_str());
            QVERIFY2(sameDistribution(logMu, logMuRowsTensor[r].contiguous().data_ptr<double>(),
                         kTensorSamplingTolerance),
                (where + " (bf16 logits)").c_str());
            const SampledToken& device = tensor.tokens[static_cast<std::size_t>(r)];
            QVERIFY2(device.id == host.id,
                (where + ": token " + std::to_string(device.id) + " vs " + std::to_string(host.id)).c_str());
            QVERIFY2(std::abs(device.logProb - host.logProb) <= kTensorSamplingTolerance, where.c_str());
            QVERIFY2(device.top.size() == host.top.size(), where.c_str());
            for (std::size_t i = 0; i < host.top.size(); ++i) {
                QVERIFY2(device.top[i].id == host.top[i].id, where.c_str());
                // float32 roundings of float64 values ~1e-13 apart: the same float or one ulp apart.
                QVERIFY2(std::abs(device.top[i].logProb - host.top[i].logProb)
                        <= std::abs(host.top[i].logProb) * 1.2e-7f + 1e-30f,
                    where.c_str());
            }
        }
    }
    // The ties: top-k 10 on row 1 keeps ids 0-9 (lower ids first among the 40 equal maxima).
    const at::Tensor kept = samplingLogProbsRows(logits, options(1.0, 1.0, 10, false))[1].isfinite();
    QCOMPARE(kept.sum().item<std::int64_t>(), std::int64_t(10));
    QVERIFY(kept.narrow(0, 0, 10).all().item<bool>());
    // Non-finite logits: the host's errors.
    at::Tensor broken = logits.clone();
    broken[3][7] = std::numeric_limits<float>::quiet_NaN();
    QVERIFY_EXCEPTION_THROWN(sampleRows(broken, std::vector<double>(rows, 0.5), SamplingOptions {}), Error);
    try {
        samplingLogProbsRows(broken, SamplingOptions {});
        QFAIL("a NaN logit was sampled from");
    } catch (const Error& error) {
        QVERIFY2(std::string(error.what()).find("token id 7") != std::string::npos, error.what());
    }
    broken[3][7] = std::numeric_limits<float>::infinity();
    QVERIFY_EXCEPTION_THROWN(samplingLogProbsRows(broken, SamplingOptions {}), Error);
}

void TestEngine::tensorSamplingInTheEngine()
{
    // A whole generation with the tensor sampler forced on the CPU against the host loops: the same tokens (one
    // draw per row per step from the same generators), log mu within kTensorSamplingTolerance, and the kept logits
    // giving back the distributions through logMuRows on either path.
    const ModelConfig config = tinyConfig();
    const std::vector<GenerationRequest> requests = randomRequests(4, 151, 2, 9);
    SamplingOptions sampling = keepingDistributions(9, 0.8, 0.9, 4);
    sampling.topK = 20;
    sampling.topLogProbs = 3;
    Engine engine(config, tinyWeights(config, 152));
    const std::vector<GenerationResult> host = engine.generate(requests, sampling);
    std::vector<GenerationResult> tensor;
    at::Tensor tensorLogMu;
    {
        const TensorSamplingOnCpu forced;
        tensor = engine.generate(requests, sampling);
        tensorLogMu = logMuRows(tensor[0].logits, sampling);
    }
    QCOMPARE(tokensOf(tensor), tokensOf(host));
    for (std::size_t i = 0; i < host.size(); ++i) {
        QVERIFY(at::equal(tensor[i].logits, host[i].logits));
        for (std::size_t t = 0; t < host[i].tokens.size(); ++t) {
            QVERIFY(std::abs(tensor[i].logProbs[t] - host[i].logProbs[t]) <= kTensorSamplingTolerance);
        }
        // The float32 distributions: roundings of float64 values ~1e-13 apart (one float ulp at most).
        const at::Tensor finite = host[i].distributions.isfinite();
        QVERIFY(at::equal(finite, tensor[i].distributions.isfinite()));
        QVERIFY(at::allclose(tensor[i].distributions.masked_fill(finite.logical_not(), 0.0),
            host[i].distributions.masked_fill(finite.logical_not(), 0.0), 1.2e-7, 1e-30));
    }
    const at::Tensor hostLogMu = logMuRows(host[0].logits, sampling);
    for (std::int64_t t = 0; t < hostLogMu.size(0); ++t) {
        const at::Tensor row = hostLogMu[t].contiguous();
        const std::vector<double> expected(row.data_ptr<double>(), row.data_ptr<double>() + row.numel());
        QVERIFY(sameDistribution(expected, tensorLogMu[t].contiguous().data_ptr<double>(), kTensorSamplingTolerance));
    }
}

void TestEngine::seedsDecideTokens()
{
    const ModelConfig config = tinyConfig();
    Engine engine(config, tinyWeights(config, 111));
    const std::vector<GenerationRequest> requests = randomRequests(4, 112);
    SamplingOptions sampling;
    sampling.maxNewTokens = 12;
    sampling.ignoreEos = true;
    sampling.seed = 7;
    const auto first = tokensOf(engine.generate(requests, sampling));
    QCOMPARE(tokensOf(engine.generate(requests, sampling)), first);
    sampling.seed = 8;
    QVERIFY(tokensOf(engine.generate(requests, sampling)) != first);
    // A different request seed changes that request only.
    sampling.seed = 7;
    std::vector<GenerationRequest> changed = requests;
    changed[2].seed += 1;
    const auto changedTokens = tokensOf(engine.generate(changed, sampling));
    QCOMPARE(changedTokens[0], first[0]);
    QCOMPARE(changedTokens[1], first[1]);
    QVERIFY(changedTokens[2] != first[2]);
    QCOMPARE(changedTokens[3], first[3]);
}

void TestEngine::seedsIndependentOfBatchComposition()
{
    const ModelConfig config = tinyConfig();
    Engine engine(config, tinyWeights(config, 121));
    const std::vector<GenerationRequest> requests = randomRequests(5, 122, 2, 14);
    SamplingOptions sampling;
    sampling.maxNewTokens = 10;
    sampling.seed = 3;
    const auto together = tokensOf(engine.generate(requests, sampling));
    for (std::size_t i = 0; i < requests.size(); ++i) {
        QCOMPARE(tokensOf(engine.generate({requests[i]}, sampling))[0], together[i]);
    }
    // Reversed order, other neighbours.
    std::vector<GenerationRequest> reversed(requests.rbegin(), requests.rend());
    auto reversedTokens = tokensOf(engine.generate(reversed, sampling));
    std::reverse(reversedTokens.begin(), reversedTokens.end());
    QCOMPARE(reversedTokens, together);
}

void TestEngine::stopsOnEosAndMaxTokens()
{
    ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 131);
    const std::vector<GenerationRequest> requests = randomRequests(3, 132);
    SamplingOptions sampling;
    sampling.greedy = true;
    sampling.maxNewTokens = 6;
    sampling.ignoreEos = true;
    Engine engine(config, weights);
    const std::vector<GenerationResult> free = engine.generate(requests, sampling);
    for (const auto& result : free) {
        QCOMPARE(reasonText(result.finishReason), reasonText(FinishReason::Length));
        QCOMPARE(result.tokens.size(), std::size_t(6));
    }
    // Make request 0's third greedy token the EOS id: it stops there, keeping the EOS token.
    const std::int64_t eos = free[0].tokens[2];
    config.eosTokenIds = {eos};
    Engine stopping(config, weights);
    sampling.ignoreEos = false;
    const std::vector<GenerationResult> stopped = stopping.generate(requests, sampling);
    const std::size_t firstEos = static_cast<std::size_t>(
        std::find(free[0].tokens.begin(), free[0].tokens.end(), eos) - free[0].tokens.begin());
    QCOMPARE(reasonText(stopped[0].finishReason), reasonText(FinishReason::Eos));
    QCOMPARE(
        stopped[0].tokens, std::vector<std::int64_t>(free[0].tokens.begin(), free[0].tokens.begin() + firstEos + 1));
    QCOMPARE(stopped[0].logProbs.size(), stopped[0].tokens.size());
    // ignoreEos runs to the limit; an explicit stop id works as well.
    sampling.ignoreEos = true;
    sampling.stopTokenIds = {free[1].tokens[0]};
    const std::vector<GenerationResult> explicitStop = stopping.generate(requests, sampling);
    const auto stopAt = std::find(free[0].tokens.begin(), free[0].tokens.end(), free[1].tokens[0]);
    QCOMPARE(reasonText(explicitStop[0].finishReason),
        reasonText(stopAt == free[0].tokens.end() ? FinishReason::Length : FinishReason::Eos));
    QCOMPARE(reasonText(explicitStop[1].finishReason), reasonText(FinishReason::Eos));
    QCOMPARE(explicitStop[1].tokens.size(), std::size_t(1));
}

void TestEngine::stopsOnStopString()
{
    const ModelConfig config = tinyConfig();
    const model::Tokenizer tokenizer = model::Tokenizer::fromJson(io::demoTokenizerJson(), "demo tokenizer.json");
    Engine engine(config, tinyWeights(config, 141));
    engine.setTokenizer(&tokenizer);
    const std::vector<GenerationRequest> requests = randomRequests(2, 142);
    SamplingOptions sampling;
    sampling.greedy = true;
    sampling.maxNewTokens = 10;
    sampling.ignoreEos = true;
    const std::vector<GenerationResult> free = engine.generate(requests, sampling);
    QCOMPARE(free[0].text, tokenizer.decode(free[0].tokens, /*skipSpecialTokens=*/true));
    // Stop at the text of tokens 3..4 of request 0 (byte tokens: one byte each unless special).
    const std::string stop = tokenizer.decode({free[0].tokens[3], free[0].tokens[4]});
    if (stop.size() != 2 || tokenizer.isSpecial(free[0].tokens[3]) || tokenizer.isSpecial(free[0].tokens[4])) {
        QSKIP("greedy tokens include special tokens; the byte-level check needs plain bytes");
    }
    sampling.stopStrings = {stop};
    const std::vector<GenerationResult> stopped = engine.generate(requests, sampling);
    const std::string freeText = free[0].text;
    const std::size_t at = freeText.find(stop);
    QCOMPARE(reasonText(stopped[0].finishReason), reasonText(FinishReason::StopString));
    QCOMPARE(stopped[0].text, freeText.substr(0, at));
    QCOMPARE(stopped[0].tokens.size(), at + stop.size());
    // Without a tokenizer, stop strings are bad input.
    Engine blind(config, tinyWeights(config, 141));
    QVERIFY_EXCEPTION_THROWN(blind.generate(requests, sampling), InputError);
}

void TestEngine::tooLargeRequestRejectedOthersComplete()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 151);
    EngineOptions options;
    options.kvBlockSize = 4;
    // 10 blocks of 4 tokens (bf16: 128 bytes per token).
    options.kvCacheBytes = 10 * 4 * 128;
    Engine engine(config, weights, std::nullopt, options);
    std::vector<GenerationRequest> requests = randomRequests(3, 152);
    requests[1].prompt.assign(40, 65); // 40 + 8 tokens > 40 capacity
    SamplingOptions sampling;
    sampling.maxNewTokens = 8;
    sampling.ignoreEos = true;
    const std::vector<GenerationResult> results = engine.generate(requests, sampling);
    QCOMPARE(reasonText(results[1].finishReason), reasonText(FinishReason::Rejected));
    QVERIFY(results[1].error.has_value());
    QVERIFY(results[1].tokens.empty());
    const std::string message = results[1].error->what();
    QVERIFY2(message.find("needs 48 tokens") != std::string::npos, message.c_str());
    QVERIFY2(message.find("holds 40 tokens") != std::string::npos, message.c_str());
    QVERIFY_EXCEPTION_THROWN(throwIfRejected(results), ResourceError);
    // The others complete exactly as they do without the oversized neighbour.
    const std::vector<GenerationResult> alone = engine.generate({requests[0], requests[2]}, sampling);
    QCOMPARE(results[0].tokens, alone[0].tokens);
    QCOMPARE(results[2].tokens, alone[1].tokens);
    QCOMPARE(reasonText(results[0].finishReason), reasonText(FinishReason::Length));
    // measureMismatch needs every request: it throws the ResourceError.
    const model::Transformer trainer(config, weights);
    MismatchOptions mismatchOptions;
    mismatchOptions.sampling = sampling;
    QVERIFY_EXCEPTION_THROWN(measureMismatch(trainer, engine, requests, mismatchOptions), ResourceError);
}

void TestEngine::waitingRequestsRunInLaterWaves()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 161);
    std::vector<GenerationRequest> requests = randomRequests(5, 162);
    for (auto& request : requests) {
        request.prompt.resize(6, 70); // 6 + 10 = 16 tokens = 4 blocks of 4 each
    }
    SamplingOptions sampling;
    sampling.maxNewTokens = 10;
    sampling.ignoreEos = true;
    EngineOptions small;
    small.kvBlockSize = 4;
    small.kvCacheBytes = 9 * 4 * 128; // 9 blocks: two requests per wave
    Engine tight(config, weights, std::nullopt, small);
    Engine roomy(config, weights);
    Progress progress;
    const std::vector<GenerationResult> waves = tight.generate(requests, sampling, &progress);
    const std::vector<GenerationResult> together = roomy.generate(requests, sampling);
    const std::vector<std::int64_t> expectedWaves = {0, 0, 1, 1, 2};
    for (std::size_t i = 0; i < requests.size(); ++i) {
        QCOMPARE(waves[i].wave, expectedWaves[i]);
        QCOMPARE(together[i].wave, std::int64_t(0));
        QCOMPARE(waves[i].tokens, together[i].tokens);
    }
    QCOMPARE(progress.fraction(), 1.0);
    // maxBatchSize caps a wave as well.
    EngineOptions capped;
    capped.maxBatchSize = 3;
    Engine cappedEngine(config, weights, std::nullopt, capped);
    const std::vector<GenerationResult> cappedResults = cappedEngine.generate(requests, sampling);
    QCOMPARE(cappedResults[2].wave, std::int64_t(0));
    QCOMPARE(cappedResults[3].wave, std::int64_t(1));
    // Cancellation stops between decode steps.
    Progress cancelled;
    cancelled.cancel();
    QVERIFY_EXCEPTION_THROWN(roomy.generate(requests, sampling, &cancelled), CancelledError);
}

void TestEngine::badInputIsInputError()
{
    const ModelConfig config = tinyConfig();
    Engine engine(config, tinyWeights(config, 171));
    SamplingOptions sampling;
    QVERIFY_EXCEPTION_THROWN(engine.generate({GenerationRequest {}}, sampling), InputError);
    QVERIFY_EXCEPTION_THROWN(engine.generate({GenerationRequest {{1, 2, 999}, 0, {}}}, sampling), InputError);
    for (auto change :
        std::vector<std::function<void(SamplingOptions&)>> {[](SamplingOptions& s) { s.temperature = -1; },
            [](SamplingOptions& s) { s.topP = 0; }, [](SamplingOptions& s) { s.topP = 1.5; },
            [](SamplingOptions& s) { s.topK = -2; }, [](SamplingOptions& s) { s.maxNewTokens = 0; }}) {
        SamplingOptions bad;
        change(bad);
        QVERIFY_EXCEPTION_THROWN(engine.generate({GenerationRequest {{1, 2}, 0, {}}}, bad), InputError);
    }
    const model::Transformer trainer(config, tinyWeights(config, 171));
    QVERIFY_EXCEPTION_THROWN(scoreSequences(trainer, {{1, 2}}, {}), InputError);
    EngineOptions badBlocks;
    badBlocks.kvBlockSize = 0;
    QVERIFY_EXCEPTION_THROWN(Engine(config, tinyWeights(config, 171), std::nullopt, badBlocks), InputError);
}

// ---------------------------------------------------------------------------------------------------------------
// Memory and kernels

// The memory plan (memory_plan.h) estimates from shapes alone what a job holds in weights: the checkpoint as stored
// plus engineExtraBytes. Here each engine is built for real and what it holds is measured from its tensors'
// storage: the bytes of the weights as loaded plus the engine's weightBytes() (every tensor it owns or shares,
// each storage once) minus the storage it shares with the loaded weights. The estimate leaves out the engine's
// float32 bias copies (4 bytes an element; small), which are added here from the checkpoint's bias tensors.
void TestEngine::memoryPlanCountsWhatTheEngineHolds()
{
    ModelConfig config = tinyConfig();
    config.tieWordEmbeddings = false; // both lm_head and the embedding, then tied below
    const char* recipes[] = {nullptr, kFp8Recipe,
        "version: 1\nweights: {format: fp8_e4m3, granularity: block128}\nactivations: {format: fp8_e4m3}\n",
        "version: 1\nweights: {format: fp8_e4m3, granularity: tensor}\nkv_cache: {format: fp8_e4m3}\n",
        "version: 1\nweights: {format: int4, granularity: group128}\n",
        "version: 1\nweights: {format: fp16}\n",
        "version: 1\nweights: {format: int8, granularity: channel}\nrules:\n"
        "  - {match: 'model.layers.0.*', weights: {format: bf16}}\n",
        // The microscaling formats: E2M1 / E4M3 codes one a byte and a float32 factor per block of 16 or 32.
        "version: 1\nweights: {format: nvfp4}\nactivations: {format: nvfp4}\n",
        "version: 1\nweights: {format: mxfp8}\nrules:\n  - {match: '{embed_tokens,lm_head}', weights: {format: mxfp4}}\n"};
    for (const bool tied : {false, true}) {
        config.tieWordEmbeddings = tied;
        for (const model::DType dtype : {model::DType::F32, model::DType::BF16}) {
            QTemporaryDir dir;
            QVERIFY(dir.isValid());
            model::saveWeights(dir.path().toStdString(), tinyWeights(config, 181), dtype);
            const engine::StoredWeights stored = engine::storedWeights(dir.path().toStdString());
            const TransformerWeights loaded
                = model::loadWeights(dir.path().toStdString(), config, model::LoadPrecision::Stored);
            const test::GivenWeights given = test::givenWeights(loaded);
            QVERIFY(stored.dtype == dtype);
            QCOMPARE(stored.bytes, given.bytes);
            QCOMPARE(stored.parameters, given.parameters);
            for (const char* recipe : recipes) {
                const std::optional<quant::RecipePlan> plan
                    = recipe ? std::optional<quant::RecipePlan>(planFor(recipe, config)) : std::nullopt;
                EngineModel engine(config, loaded, plan);
                const std::uint64_t held = given.bytes + test::heldBeyondGiven(given, engine);
                const std::uint64_t estimate = stored.bytes
                    + engine::engineExtraBytes(config, plan ? &*plan : nullptr, stored.dtype) + given.floatBiasBytes;
                QVERIFY2(held == estimate,
                    qPrintable(QStringLiteral("tied %1, stored %2, recipe %3: held %4 bytes, estimated %5")
                                   .arg(tied)
                                   .arg(dtype == model::DType::F32 ? "f32" : "bf16")
                                   .arg(recipe ? recipe : "bf16 engine")
                                   .arg(held)
                                   .arg(estimate)));
                // With weight noise the engine is given noisy copies in the dtype it reads each tensor in
                // (buildEngine): bf16 for bf16 modules (their view), float32 for the modules a recipe quantizes,
                // whose BF16 view it then makes itself.
                for (const char* pattern : {"*", "model.layers.0.*"}) {
                    const TransformerWeights noisy = engine::addWeightNoise(
                        loaded, 0.1, 7, pattern, engine::engineNoiseDtype(config, plan ? &*plan : nullptr));
                    const test::GivenWeights noisyGiven = test::givenWeights(noisy);
                    EngineModel noisyEngine(config, noisy, plan);
                    const std::uint64_t beyond = test::heldBeyondGiven(noisyGiven, noisyEngine);
                    const std::uint64_t planned = engine::engineExtraBytes(config, plan ? &*plan : nullptr,
                                                      stored.dtype, at::Device(at::kCPU), engine::EngineKernels::Auto,
                                                      engine::noisyTensorDtypes(config, plan ? &*plan : nullptr, pattern))
                        + noisyGiven.floatBiasBytes;
                    QVERIFY2(beyond == planned,
                        qPrintable(QStringLiteral("noise on %1, tied %2, stored %3, recipe %4: held %5, planned %6")
                                       .arg(pattern)
                                       .arg(tied)
                                       .arg(dtype == model::DType::F32 ? "f32" : "bf16")
                                       .arg(recipe ? recipe : "bf16 engine")
                                       .arg(beyond)
                                       .arg(planned)));
                }
            }
        }
    }
    // A training run's trainer: FP32 master weights, gradients and two AdamW moments (16 bytes a parameter) plus
    // k + 1 FP32 snapshots for staleness k.
    QCOMPARE(engine::trainerBytes(1000, 0), std::uint64_t(16000 + 4000));
    QCOMPARE(engine::trainerBytes(1000, 2), std::uint64_t(16000 + 12000));
}

// On a CUDA device an engine keeps, per module: for the native FP8 GEMM (e4m3 weights and activations, not the
// embedding) its e4m3 codes (1 byte) and float32 scales; under BFloat16 kernels, for a bf16 module with bf16
// activations, the given tensor when it is bf16, else a bf16 copy (2 bytes); otherwise its float32 rounded weight
// (4 bytes); a copy once for a tied tensor. The plan is shape arithmetic, so it is checked here on the tiny model's
// shapes counted by hand; tests/gpu/test_gpu_parity checks it against engines built on a device.
void TestEngine::memoryPlanCountsTheDeviceLayout()
{
    ModelConfig config = tinyConfig();
    // Elements: embedding (and an untied lm_head) 258 x 32 = 8256. Per layer q 32x32, k 16x32, v 16x32, o 32x32,
    // gate 64x32, up 64x32, down 32x64: 9216 elements in 256 rows of 7 matrices, each within one 128 x 128 block;
    // two layers 18432 elements, 512 rows, 14 blocks. The recipes leave the embedding and lm_head bf16 with bf16
    // activations (their default).
    constexpr std::uint64_t embedding = 8256;
    constexpr std::uint64_t layers = 18432;
    constexpr std::uint64_t rows = 512;
    constexpr std::uint64_t blocks = 14;
    const at::Device gpu(at::kCUDA, 0);
    const char* w8a8Block = "version: 1\nweights: {format: fp8_e4m3, granularity: block128}\n"
                            "activations: {format: fp8_e4m3}\n";
    const char* w8Bf16Activations = "version: 1\nweights: {format: fp8_e4m3, granularity: tensor}\n";
    const char* int4 = "version: 1\nweights: {format: int4, granularity: group128}\n";
#if defined(MISMATCH_HAVE_CUDA)
    const bool kernels = true;
#else
    const bool kernels = false; // every module emulated in float32
#endif
    for (const bool tied : {true, false}) {
        config.tieWordEmbeddings = tied;
        const quant::RecipePlan channel = planFor(kFp8Recipe, config);
        const quant::RecipePlan block = planFor(w8a8Block, config);
        const quant::RecipePlan weightsOnly = planFor(w8Bf16Activations, config);
        const quant::RecipePlan int4Plan = planFor(int4, config);
        const std::uint64_t edgeElements = embedding * (tied ? 1 : 2);
        for (const model::DType stored : {model::DType::BF16, model::DType::F32}) {
            for (const engine::EngineKernels chosen : {engine::EngineKernels::Float32, engine::EngineKernels::BFloat16}) {
                const bool bf16 = chosen == engine::EngineKernels::BFloat16;
                const QString where = QStringLiteral("tied %1, stored bf16 %2, %3")
                                          .arg(tied)
                                          .arg(stored == model::DType::BF16)
                                          .arg(QString::fromStdString(engine::toString(chosen)));
                // A bf16 module: float32 copy, or under BFloat16 kernels the stored bf16 tensor or a bf16 copy.
                const std::uint64_t perBf16Element = bf16 ? (stored == model::DType::BF16 ? 0 : 2) : 4;
                const std::uint64_t edges = perBf16Element * edgeElements;
                const auto bytes = [&](const quant::RecipePlan* plan) {
                    return engine::engineExtraBytes(config, plan, stored, gpu, chosen);
                };
                QVERIFY2(bytes(nullptr) == edges + perBf16Element * layers, qPrintable(where));
                // FP8 W8A8: native where the build has the kernels, else emulated in float32.
                QVERIFY2(bytes(&channel) == edges + (kernels ? layers + 4 * rows : 4 * layers), qPrintable(where));
                QVERIFY2(bytes(&block) == edges + (kernels ? layers + 4 * blocks : 4 * layers), qPrintable(where));
                // FP8 weights with bf16 activations are emulated (no mixed GEMM), as are int4 weights.
                QVERIFY2(bytes(&weightsOnly) == edges + 4 * layers, qPrintable(where));
                QVERIFY2(bytes(&int4Plan) == edges + 4 * layers, qPrintable(where));
                // During one product: the block-128 codes' float32 weight, dequantized per call, of the largest
                // module (gate, up or down: 64 x 32 = 2048 elements); the channel recipe's shapes (multiples of
                // 16) take the FP8 tensor cores and need none; nothing kept as codes elsewhere, nor on the CPU.
                const auto temporary = [&](const quant::RecipePlan* plan, const at::Device& device) {
                    return engine::engineProductTemporaryBytes(config, plan, device, chosen);
                };
                QVERIFY2(temporary(&block, gpu) == (kernels ? 4u * 2048u : 0u), qPrintable(where));
                QVERIFY2(temporary(&channel, gpu) == 0, qPrintable(where));
                QVERIFY2(temporary(&weightsOnly, gpu) == 0 && temporary(&int4Plan, gpu) == 0, qPrintable(where));
                QVERIFY2(temporary(nullptr, gpu) == 0, qPrintable(where));
                QVERIFY2(temporary(&block, at::Device(at::kCPU)) == 0, qPrintable(where));
            }
        }
    }
    // Auto on a device this machine does not have: the float32 layout (the BF16 GEMM cannot be checked there).
    const std::vector<std::string> usable = availableDevices();
    if (!std::getenv("MISMATCH_ENGINE_KERNELS") && std::find(usable.begin(), usable.end(), "cuda:0") == usable.end()) {
        QVERIFY(engine::engineKernels(engine::EngineKernels::Auto, gpu, config) == engine::EngineKernels::Float32);
        QCOMPARE(engine::engineExtraBytes(config, nullptr, model::DType::BF16, gpu),
            engine::engineExtraBytes(config, nullptr, model::DType::BF16, gpu, engine::EngineKernels::Float32));
    }
}

void TestEngine::engineSharesStoredBf16Weights()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights given = tinyWeights(config, 171).to(at::kBFloat16); // a BF16 checkpoint, as stored
    std::uint64_t givenBytes = 0;
    std::uint64_t biasBytes = 0; // the engine keeps its biases bf16-rounded in float32 (4 bytes an element)
    for (const auto& [name, tensor] : given.named()) {
        givenBytes += tensor.nbytes();
        biasBytes += name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0 ? 4 * tensor.numel() : 0;
    }
    const std::string module = "model.layers.1.mlp.up_proj";
    EngineModel bf16(config, given);
    // The BF16 engine multiplies the checkpoint's own tensors: no copy, no extra weight memory.
    QVERIFY(bf16.storedWeight(module).values().is_same(given.get(module + ".weight")));
    QVERIFY(bf16.weights().get(module + ".weight").is_same(given.get(module + ".weight")));
    QCOMPARE(bf16.weightBytes(), givenBytes + biasBytes);
    // An FP8 engine adds only its codes (1 byte an element) and scales; the BF16 view stays shared.
    const quant::RecipePlan plan = planFor(kFp8Recipe, config);
    EngineModel fp8(config, given, plan);
    QVERIFY(fp8.weights().get(module + ".weight").is_same(given.get(module + ".weight")));
    std::uint64_t codes = 0;
    for (const std::string& name : model::moduleNames(config)) {
        codes += fp8.storedWeight(name).codes().defined() ? fp8.storedWeight(name).storageBytes() : 0;
    }
    QVERIFY(codes > 0);
    QCOMPARE(fp8.weightBytes(), givenBytes + biasBytes + codes);
    // Given float32 weights, the engine keeps their BF16 view (half the bytes), not the float32 tensors.
    const TransformerWeights wide = tinyWeights(config, 172);
    EngineModel fromWide(config, wide);
    QCOMPARE(fromWide.weights().get(module + ".weight").scalar_type(), at::kBFloat16);
    QVERIFY(at::equal(fromWide.weights().get(module + ".weight").to(at::kFloat),
        quant::roundToBFloat16(wide.get(module + ".weight"))));
    QCOMPARE(fromWide.weights().get("model.norm.weight").scalar_type(), at::kFloat); // norms as given
    // The same forward whichever way the weights came: rounded to bf16 either way.
    const at::Tensor ids = at::randint(0, 256, {2, 5}, at::kLong);
    const at::Tensor mask = at::ones({2, 5}, at::kLong);
    const at::NoGradGuard noGrad;
    TransformerWeights roundedNorms = wide.to(at::kBFloat16);
    for (const auto& [name, tensor] : wide.named()) {
        if (tensor.dim() == 1) {
            roundedNorms.set(name, tensor); // norms and biases as given in both
        }
    }
    EngineModel fromMixed(config, roundedNorms);
    QVERIFY(at::equal(fromWide.forwardQuantized(ids, mask), fromMixed.forwardQuantized(ids, mask)));
}

void TestEngine::compactKvStorageReadsBackExactly()
{
    // Keys and values written through the quantizer into compact storage (bf16 bits, fp8 codes) read back as
    // exactly the float32 values the quantizer rounded to, the same as a float32 pool holds them.
    const ModelConfig config = tinyConfig();
    const quant::RecipePlan plan = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n"
                                           "rules:\n  - match: model.layers.0.self_attn\n"
                                           "    kv_cache: {format: bf16}\n",
        config);
    KvQuantizer quantizer(plan.kvPerLayer, config.numKeyValueHeads, true);
    const KvCacheLayout layout = kvCacheLayout(config, &plan);
    KvBlockPool compact(layout, 1 << 20, 4, {KvStorage::BFloat16, KvStorage::Fp8Codes});
    KvBlockPool wide(layout, 1 << 20, 4);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(173);
    for (KvBlockPool* pool : {&compact, &wide}) {
        QVERIFY(pool->allocator().allocate(12).has_value());
    }
    const at::Tensor slotIds = at::arange(1, 11, at::kLong);
    for (std::int64_t layer = 0; layer < 2; ++layer) {
        const at::Tensor keys = 3.0 * at::randn({1, config.numKeyValueHeads, 10, config.headDim}, generator);
        const at::Tensor values = at::randn({1, config.numKeyValueHeads, 10, config.headDim}, generator);
        const auto [k, v] = quantizer.quantize(layer, keys, values, at::ones({1, 10}, at::kBool));
        const at::Tensor keyScales = quantizer.isFp8(layer) ? quantizer.scales().keys[layer] : at::Tensor();
        const at::Tensor valueScales = quantizer.isFp8(layer) ? quantizer.scales().values[layer] : at::Tensor();
        const auto rows = [](const at::Tensor& kv) { return kv[0].permute({1, 0, 2}).contiguous(); }; // [T, H, D]
        for (KvBlockPool* pool : {&compact, &wide}) {
            pool->write(layer, slotIds, rows(k), rows(v), keyScales, valueScales);
            const auto [readKeys, readValues] = pool->read(layer, slotIds.view({1, 10}), keyScales, valueScales);
            QVERIFY(at::equal(readKeys.contiguous().view(at::kInt), k.contiguous().view(at::kInt)));
            QVERIFY(at::equal(readValues.contiguous().view(at::kInt), v.contiguous().view(at::kInt)));
        }
    }
    // bf16 layer 2 bytes an element, fp8 layer 1, float32 4 (slot 0 plus the blocks in use, keys and values).
    const std::uint64_t slotsHeld = static_cast<std::uint64_t>(compact.storageSlots());
    const std::uint64_t elements = slotsHeld * static_cast<std::uint64_t>(config.numKeyValueHeads * config.headDim);
    QCOMPARE(compact.storageBytes(), 2 * elements * 2 + 2 * elements * 1);
    QCOMPARE(wide.storageBytes(), 2 * 2 * elements * 4);
}

void TestEngine::pagedAttentionMatchesFloat64Reference()
{
    // One query per row attending over keys and values stored in each storage kind (float32, bf16 bits, fp8 codes
    // with per-tensor and per-head scales), padding positions (0, masked) included: the in-place kernel against a
    // float64 softmax attention over the values read() returns.
    const ModelConfig config = tinyConfig(); // 4 heads over 2 KV heads
    const quant::RecipePlan plan = planFor("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n"
                                           "rules:\n  - match: model.layers.0.self_attn\n"
                                           "    kv_cache: {format: fp8_e4m3, scales: per_tensor}\n",
        config);
    const std::int64_t kvHeads = config.numKeyValueHeads;
    const std::int64_t heads = config.numHeads;
    const std::int64_t headDim = config.headDim;
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(4711);
    struct Case {
        std::vector<KvStorage> storage;
        bool quantize;
    };
    const std::vector<Case> cases = {{{KvStorage::Float32, KvStorage::Float32}, false},
        {{KvStorage::BFloat16, KvStorage::BFloat16}, false}, {{KvStorage::Fp8Codes, KvStorage::Fp8Codes}, true}};
    for (const Case& c : cases) {
        KvQuantizer quantizer(plan.kvPerLayer, kvHeads, true);
        KvBlockPool pool(kvCacheLayout(config, &plan), 1 << 20, 4, c.storage);
        const std::int64_t batch = 3;
        const std::int64_t length = 13;
        for (std::int64_t b = 0; b < batch; ++b) {
            QVERIFY(pool.allocator().allocate(length).has_value());
        }
        // Row b's positions: its blocks in order; row 1 starts with two padding positions (slot 0).
        at::Tensor positions = at::zeros({batch, length}, at::kLong);
        for (std::int64_t b = 0; b < batch; ++b) {
            const auto& table = pool.allocator().blockTable(b);
            for (std::int64_t t = b == 1 ? 2 : 0; t < length; ++t) {
                positions[b][t] = 1 + table[static_cast<std::size_t>(t / 4)] * 4 + t % 4;
            }
        }
        const at::Tensor bias = at::where(positions.gt(0), at::zeros({batch, length}),
            at::full({batch, length}, -std::numeric_limits<float>::infinity()))
                                    .view({batch, 1, 1, length});
        for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
            at::Tensor keys = 2.0 * at::randn({1, kvHeads, batch * length, headDim}, generator);
            at::Tensor values = at::randn({1, kvHeads, batch * length, headDim}, generator);
            at::Tensor keyScales;
            at::Tensor valueScales;
            if (c.quantize) {
                std::tie(keys, values) = quantizer.quantize(layer, keys, values, at::ones({1, batch * length}, at::kBool));
                keyScales = quantizer.scales().keys[static_cast<std::size_t>(layer)];
                valueScales = quantizer.scales().values[static_cast<std::size_t>(layer)];
            } else if (c.storage[0] == KvStorage::BFloat16) {
                keys = roundBf16(keys);
                values = roundBf16(values);
            }
            const at::Tensor real = positions.reshape({-1}).gt(0).nonzero().reshape({-1});
            const auto rows = [&](const at::Tensor& kv) {
                return kv[0].permute({1, 0, 2}).index_select(0, real).contiguous(); // [N, KV, D]
            };
            pool.write(layer, positions.reshape({-1}).index_select(0, real), rows(keys), rows(values), keyScales, valueScales);
            const at::Tensor q = 3.0 * at::randn({batch, heads, 1, headDim}, generator);
            const at::Tensor out = pool.attend(layer, positions, q, bias, keyScales, valueScales);
            QCOMPARE(out.sizes(), (at::IntArrayRef {batch, 1, heads * headDim}));
            // Float64 reference over what read() returns (exactly the stored values).
            const auto [k, v] = pool.read(layer, positions, keyScales, valueScales); // [B, KV, S, D]
            const at::Tensor kd = k.to(at::kDouble);
            const at::Tensor vd = v.to(at::kDouble);
            const at::Tensor qd = q.to(at::kDouble);
            double worst = 0.0;
            for (std::int64_t b = 0; b < batch; ++b) {
                for (std::int64_t h = 0; h < heads; ++h) {
                    const std::int64_t kvHead = h / (heads / kvHeads);
                    std::vector<double> p(static_cast<std::size_t>(length));
                    double maximum = -std::numeric_limits<double>::infinity();
                    for (std::int64_t s = 0; s < length; ++s) {
                        double dot = 0.0;
                        for (std::int64_t d = 0; d < headDim; ++d) {
                            dot += qd[b][h][0][d].item<double>() * kd[b][kvHead][s][d].item<double>();
                        }
                        p[static_cast<std::size_t>(s)] = positions[b][s].item<std::int64_t>() > 0
                            ? dot / std::sqrt(static_cast<double>(headDim))
                            : -std::numeric_limits<double>::infinity();
                        maximum = std::max(maximum, p[static_cast<std::size_t>(s)]);
                    }
                    double sum = 0.0;
                    for (double& value : p) {
                        value = std::exp(value - maximum);
                        sum += value;
                    }
                    for (std::int64_t d = 0; d < headDim; ++d) {
                        double expected = 0.0;
                        for (std::int64_t s = 0; s < length; ++s) {
                            expected += p[static_cast<std::size_t>(s)] / sum * vd[b][kvHead][s][d].item<double>();
                        }
                        worst = std::max(worst, std::abs(out[b][0][h * headDim + d].item<double>() - expected));
                    }
                }
            }
            const double bound = 64.0 * kAttendEps32 * static_cast<double>(length + headDim);
            QVERIFY2(worst < bound, qPrintable(QString("storage %1 layer %2: error %3 over the bound %4")
                                                   .arg(static_cast<int>(c.storage[0]))
                                                   .arg(layer)
                                                   .arg(worst)
                                                   .arg(bound)));
        }
    }
}

void TestEngine::bf16GemmProbeCatchesPartialRounding()
{
    // One rounding of a float32 sum (what the engine defines) passes the probe; a GEMM that rounds its partial
    // sums to bf16 every 128 products (a blocked kernel accumulating in its output type) must not.
    const Bf16Gemm once = [](const at::Tensor& x, const at::Tensor& w) {
        return at::matmul(x.to(at::kFloat), w.to(at::kFloat).t()).to(at::kBFloat16);
    };
    QVERIFY(bf16GemmRoundsOnce(once, {32, 64}));
    const Bf16Gemm partial = [](const at::Tensor& x, const at::Tensor& w) {
        at::Tensor sum = at::zeros({x.size(0), w.size(0)}, at::kFloat);
        for (std::int64_t begin = 0; begin < x.size(1); begin += 128) {
            const std::int64_t count = std::min<std::int64_t>(128, x.size(1) - begin);
            sum = (sum + at::matmul(x.narrow(1, begin, count).to(at::kFloat), w.narrow(1, begin, count).to(at::kFloat).t()))
                      .to(at::kBFloat16)
                      .to(at::kFloat);
        }
        return sum;
    };
    QVERIFY(!bf16GemmRoundsOnce(partial, {32, 64}));
}

void TestEngine::bf16KernelsAgreeWithFloat32Kernels()
{
    if (!bf16KernelsRoundOnce({32, 64})) {
        QSKIP("LibTorch's BF16 GEMM on this CPU rounds more than once (bf16KernelsRoundOnce): engines use Float32 "
              "kernels here");
    }
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 174);
    EngineOptions bf16Kernels;
    bf16Kernels.kernels = EngineKernels::BFloat16;
    EngineOptions float32Kernels;
    float32Kernels.kernels = EngineKernels::Float32;
    const ExposedEngineModel viaBf16(config, weights, std::nullopt, bf16Kernels);
    const ExposedEngineModel viaFloat32(config, weights, std::nullopt, float32Kernels);
    QVERIFY(viaBf16.kernels() == EngineKernels::BFloat16);
    QVERIFY(viaFloat32.kernels() == EngineKernels::Float32);
    // One module: both are one rounding of a float32 sum of the same exact products, in different orders, so an
    // output differs by at most one bf16 ulp (when the two sums fall on either side of a rounding boundary).
    const std::string module = "model.layers.0.mlp.down_proj";
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(175);
    const at::Tensor x = at::randn({3, 7, config.intermediateSize}, generator);
    const at::Tensor weight = viaFloat32.weights().get(module + ".weight");
    const at::Tensor a = viaBf16.callLinear(module, x, weight, at::Tensor());
    const at::Tensor b = viaFloat32.callLinear(module, x, weight, at::Tensor());
    const at::Tensor ulp = at::pow(2.0, at::floor(at::log2(b.abs().clamp_min(1e-30))) - 7.0);
    QVERIFY(((a - b).abs() <= ulp).all().item<bool>());
    // Whole engines: their mismatch to each other on the same tokens is far below the BF16 unit (which comes from
    // rounding every module output, where the kernels flip only the rare roundings that sit on a boundary).
    Engine engine(config, weights, std::nullopt, bf16Kernels);
    const model::Transformer trainer(config, weights);
    const std::vector<GenerationRequest> requests = randomRequests(6, 176);
    SamplingOptions sampling;
    sampling.maxNewTokens = 12;
    sampling.ignoreEos = true;
    sampling.fullDistributions = true;
    const std::vector<GenerationResult> results = engine.generate(requests, sampling);
    EngineModel other(config, weights, std::nullopt, float32Kernels);
    const auto viaOther = scoreSequences(other, promptsOf(requests), tokensOf(results));
    const auto viaTrainer = scoreSequences(trainer, promptsOf(requests), tokensOf(results));
    double between = 0.0;
    double unit = 0.0;
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const at::Tensor mu = results[i].distributions.to(at::kDouble);
        between += (mu.exp() * (mu - viaOther[i].to(at::kDouble))).sum().item<double>();
        unit += (mu.exp() * (mu - viaTrainer[i].to(at::kDouble))).sum().item<double>();
        tokens += mu.size(0);
    }
    QVERIFY2(between / tokens < unit / tokens,
        qPrintable(QString("between kernels %1, BF16 unit %2").arg(between / tokens).arg(unit / tokens)));
}

// ---------------------------------------------------------------------------------------------------------------
// Mismatch

void TestEngine::bf16MismatchSmallAndPositive()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 181);
    const model::Transformer trainer(config, weights);
    Engine engine(config, weights);
    MismatchOptions options;
    options.sampling.maxNewTokens = 16;
    options.sampling.ignoreEos = true;
    options.batchSize = 4;
    const MismatchMeasurement measurement = measureMismatch(trainer, engine, randomRequests(8, 182), options);
    QCOMPARE(measurement.tokens, std::int64_t(8 * 16));
    QCOMPARE(measurement.promptTokens.size(), std::size_t(8));
    QVERIFY2(measurement.kl > 0.0 && measurement.kl < 1e-2, qPrintable(QString::number(measurement.kl)));
    QVERIFY(measurement.k3 >= 0.0);
    double sum = 0.0;
    for (double value : measurement.promptKlSums) {
        sum += value;
    }
    QVERIFY(std::abs(sum / static_cast<double>(measurement.tokens) - measurement.kl) < 1e-12);
}

void TestEngine::fp8MismatchLargerThanBf16()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 191);
    const model::Transformer trainer(config, weights);
    const std::vector<GenerationRequest> requests = randomRequests(8, 192);
    MismatchOptions options;
    options.sampling.maxNewTokens = 16;
    options.sampling.ignoreEos = true;
    Engine bf16(config, weights);
    Engine fp8(config, weights, planFor(kFp8Recipe, config));
    fp8.model().calibrateKvScales(promptsOf(randomRequests(8, 193)));
    const double bf16Kl = measureMismatch(trainer, bf16, requests, options).kl;
    const double fp8Kl = measureMismatch(trainer, fp8, requests, options).kl;
    QVERIFY2(fp8Kl > 2.0 * bf16Kl, qPrintable(QString("fp8 %1, bf16 %2").arg(fp8Kl).arg(bf16Kl)));
}

void TestEngine::perHeadKvScalesBeatPerTensorOnOutlierHead()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights base = tinyWeights(config, 201);
    // 2^15: the normal head's values fall ~2^15 below the outlier's, into FP8's subnormals under one shared scale.
    const TransformerWeights weights = withOutlierKvHead(config, base, 32768.0);
    const model::Transformer trainer(config, weights);
    // The rescaling preserves the function (up to float32 rounding).
    {
        const at::NoGradGuard noGrad;
        const at::Tensor ids = at::randint(0, 256, {2, 7}, at::kLong);
        const at::Tensor mask = at::ones({2, 7}, at::kLong);
        const model::Transformer original(config, base);
        QVERIFY((original.forward(ids, mask) - trainer.forward(ids, mask)).abs().max().item<double>() < 1e-3);
    }
    const std::vector<GenerationRequest> requests = randomRequests(8, 202);
    const std::vector<std::vector<std::int64_t>> probes = promptsOf(randomRequests(8, 203));
    MismatchOptions options;
    options.sampling.maxNewTokens = 16;
    options.sampling.ignoreEos = true;
    const auto measure = [&](const char* scales) {
        Engine engine(config, weights,
            planFor(std::string("version: 1\nkv_cache: {format: fp8_e4m3, scales: ") + scales + "}\n", config));
        engine.model().calibrateKvScales(probes);
        return measureMismatch(trainer, engine, requests, options).kl;
    };
    const double perTensor = measure("per_tensor");
    const double perHead = measure("per_head");
    QVERIFY2(perHead < 0.5 * perTensor, qPrintable(QString("per head %1, per tensor %2").arg(perHead).arg(perTensor)));
}

void TestEngine::stalenessPicksSnapshot()
{
    const ModelConfig config = tinyConfig();
    WeightHistory history(2);
    std::vector<TransformerWeights> synced;
    for (std::uint64_t step = 0; step < 5; ++step) {
        synced.push_back(tinyWeights(config, 300 + step));
        history.push(synced.back());
        // Until k + 1 syncs, the oldest; then the one pushed k syncs ago.
        const std::size_t expected = step < 2 ? 0 : static_cast<std::size_t>(step - 2);
        QVERIFY(at::equal(
            history.stale().get("model.embed_tokens.weight"), synced[expected].get("model.embed_tokens.weight")));
    }
    QCOMPARE(history.size(), std::int64_t(3));
    QVERIFY(at::equal(history.at(0).get("model.norm.weight"), synced[4].get("model.norm.weight")));
    QVERIFY(at::equal(history.at(99).get("model.norm.weight"), synced[2].get("model.norm.weight")));
    // Snapshots are copies: an in-place optimizer update of the live weights does not reach them.
    synced[4].get("model.norm.weight").add_(1.0);
    QVERIFY(!at::equal(history.at(0).get("model.norm.weight"), synced[4].get("model.norm.weight")));
    // Staleness 0 is the newest weights.
    WeightHistory fresh(0);
    fresh.push(synced[0]);
    fresh.push(synced[1]);
    QVERIFY(at::equal(fresh.stale().get("model.norm.weight"), synced[1].get("model.norm.weight")));
    QVERIFY_EXCEPTION_THROWN(WeightHistory(-1), InputError);
}

void TestEngine::noiseSeededAndScalesWithSigma()
{
    ModelConfig config = tinyConfig();
    config.intermediateSize = 512; // a large tensor for the statistics
    const TransformerWeights weights = tinyWeights(config, 401);
    const std::string name = "model.layers.0.mlp.up_proj.weight";
    const TransformerWeights a = addWeightNoise(weights, 0.1, 7);
    const TransformerWeights b = addWeightNoise(weights, 0.1, 7);
    const TransformerWeights c = addWeightNoise(weights, 0.1, 8);
    const TransformerWeights doubled = addWeightNoise(weights, 0.2, 7);
    for (const auto& [tensorName, tensor] : weights.named()) {
        QVERIFY(at::equal(a.get(tensorName), b.get(tensorName)));
        QVERIFY(!at::equal(a.get(tensorName), c.get(tensorName)));
        QVERIFY(!at::equal(a.get(tensorName), tensor));
    }
    const at::Tensor w = weights.get(name).to(at::kDouble);
    const double rms = w.pow(2).mean().sqrt().item<double>();
    const at::Tensor n = (a.get(name).to(at::kDouble) - w) / (0.1 * rms);
    const double count = static_cast<double>(n.numel()); // 16384
    // N(0, 1): mean within 5 / sqrt(count), variance within 5 * sqrt(2 / count).
    QVERIFY(std::abs(n.mean().item<double>()) < 5.0 / std::sqrt(count));
    QVERIFY(std::abs(n.pow(2).mean().item<double>() - 1.0) < 5.0 * std::sqrt(2.0 / count));
    // Twice sigma, the same draws: twice the perturbation (float32 storage rounding aside).
    const at::Tensor deltaA = a.get(name).to(at::kDouble) - w;
    const at::Tensor deltaDoubled = doubled.get(name).to(at::kDouble) - w;
    QVERIFY((deltaDoubled - 2.0 * deltaA).abs().max().item<double>() < 1e-6 * w.abs().max().item<double>() * 10);
    // A tensor's noise depends on (seed, name) only: filtering other modules leaves it unchanged.
    const TransformerWeights filtered = addWeightNoise(weights, 0.1, 7, "model.layers.{0}.mlp.*");
    QVERIFY(at::equal(filtered.get(name), a.get(name)));
    QVERIFY(
        at::equal(filtered.get("model.layers.1.mlp.up_proj.weight"), weights.get("model.layers.1.mlp.up_proj.weight")));
    QVERIFY(at::equal(filtered.get("model.embed_tokens.weight"), weights.get("model.embed_tokens.weight")));
    // sigma 0 copies.
    const TransformerWeights zero = addWeightNoise(weights, 0.0, 7);
    QVERIFY(at::equal(zero.get(name), weights.get(name)));
    QVERIFY_EXCEPTION_THROWN(addWeightNoise(weights, -0.1, 7), InputError);
    QVERIFY_EXCEPTION_THROWN(addWeightNoise(weights, 0.1, 7, "model.layers.{3-1}.*"), InputError);
}

void TestEngine::noiseThatOverflowsIsRefusedNamingTheTensor()
{
    const ModelConfig config = tinyConfig();
    TransformerWeights weights = tinyWeights(config, 403);
    const std::string name = "model.layers.1.mlp.up_proj.weight";
    // Finite weights with an RMS of 1e37: noise of sigma 100 has a standard deviation of 1e39, past float32's
    // largest value (FLT_MAX, about 3.4e38) for nearly every element.
    const at::Tensor w = weights.get(name);
    weights.set(name, w * (1e37 / w.to(at::kDouble).pow(2).mean().sqrt().item<double>()));
    QVERIFY(at::isfinite(weights.get(name)).all().item<bool>());
    try {
        addWeightNoise(weights, 100.0, 7);
        QFAIL("noise that overflows float32 was accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.location(), std::string("noise sigma"));
        QVERIFY2(error.detail().find(name) != std::string::npos, error.what());
        QVERIFY2(error.detail().find("overflow float32") != std::string::npos, error.what());
    }
    // The same sigma on weights of an ordinary RMS is accepted; past the bound no weights are.
    const TransformerWeights ordinary = tinyWeights(config, 403);
    QVERIFY(at::isfinite(addWeightNoise(ordinary, 100.0, 7).get(name)).all().item<bool>());
    try {
        addWeightNoise(ordinary, 1e39, 7);
        QFAIL("a noise sigma of 1e39 was accepted");
    } catch (const InputError& error) {
        QVERIFY2(error.detail().find("<= 100") != std::string::npos, error.what());
        QVERIFY2(error.detail().find("1e+39") != std::string::npos, error.what());
    }
}

void TestEngine::engineNamesTheTensorOfANonFiniteWeight()
{
    const ModelConfig config = tinyConfig();
    TransformerWeights weights = tinyWeights(config, 405);
    const std::string name = "model.layers.1.mlp.down_proj.weight";
    at::Tensor broken = weights.get(name).clone();
    broken[2][3] = std::numeric_limits<float>::infinity();
    weights.set(name, broken);
    try {
        EngineModel model(config, weights);
        QFAIL("an engine was built on an infinite weight");
    } catch (const InputError& error) {
        // Not "<input>:element [2, 3]": the tensor and the element.
        QCOMPARE(error.file(), std::string("engine weights"));
        QCOMPARE(error.location(), name + " element [2, 3]");
        QVERIFY2(error.detail().find("inf") != std::string::npos, error.what());
    }
}

namespace {

bool sameWeights(const TransformerWeights& a, const TransformerWeights& b)
{
    for (const std::string& name : a.names()) {
        if (!b.contains(name) || a.get(name).scalar_type() != b.get(name).scalar_type()
            || !at::equal(a.get(name), b.get(name))) {
            return false;
        }
    }
    return a.size() == b.size();
}

} // namespace

void TestEngine::noiseInPlaceIsTheCopysNoiseAndGivesTheWeightsBack()
{
    const ModelConfig config = tinyConfig();
    // Stored in bf16, as a BF16 checkpoint is loaded for the analyses: the BF16 engine reads its linear weights and
    // embedding as stored (noise in place) and its norms and biases in float32 (noisy copies).
    const TransformerWeights weights = tinyWeights(config, 411).to(at::kBFloat16);
    const TransformerWeights original = weights.clone();
    const NoiseDtype dtypes = engineNoiseDtype(config, nullptr);
    const TransformerWeights copy = addWeightNoise(weights, 0.1, 9, "*", dtypes);
    // The spill goes to the build tree, on a disk (the system's temporary directory may be a tmpfs, which is refused).
    QTemporaryDir directory(QDir::currentPath() + "/spill-XXXXXX");
    QVERIFY(directory.isValid());
    std::string why;
    auto inPlace = InPlaceWeightNoise::create(weights, 0.1, 9, "*", dtypes, directory.path().toStdString(), &why);
    QVERIFY2(inPlace, why.c_str());
    std::uint64_t inPlaceBytes = 0;
    std::set<std::string> inPlaceNames;
    for (const auto& [name, tensor] : weights.named()) {
        if (dtypes(name, tensor) == at::kBFloat16) {
            inPlaceBytes += static_cast<std::uint64_t>(tensor.numel()) * 2;
            inPlaceNames.insert(name);
        }
    }
    QVERIFY(inPlaceNames.count("model.embed_tokens.weight") && inPlaceNames.count("model.layers.1.mlp.down_proj.weight"));
    QVERIFY(!inPlaceNames.count("model.norm.weight") && !inPlaceNames.count("model.layers.0.self_attn.q_proj.bias"));
    QCOMPARE(inPlace->bytes(), inPlaceBytes);
    QVERIFY(sameWeights(weights, original)); // starts clean
    for (int round = 0; round < 3; ++round) { // the first noisy() computes; the later ones read the spill back
        inPlace->noisy();
        inPlace->noisy(); // a no-op when noisy
        QVERIFY(sameWeights(inPlace->engineWeights(), copy));
        for (const std::string& name : inPlaceNames) {
            QVERIFY(at::equal(weights.get(name), copy.get(name))); // the shared storage itself
            QCOMPARE(weights.get(name).data_ptr(), inPlace->engineWeights().get(name).data_ptr());
        }
        inPlace->clean();
        QVERIFY(sameWeights(weights, original));
    }
    inPlace->noisy();
    inPlace.reset(); // destroyed while noisy: the clean values come back
    QVERIFY(sameWeights(weights, original));

    // Two names sharing one storage (a checkpoint's tied lm_head kept beside the embedding): each gets its own noise
    // as addWeightNoise gives it, so only the first is noised in place and the other is a copy.
    TransformerWeights aliased = weights;
    aliased.set("lm_head.weight", weights.get("model.embed_tokens.weight").view({-1}).view(
                                       weights.get("model.embed_tokens.weight").sizes()));
    // (Noise in the stored dtype everywhere, so that only the sharing keeps lm_head from going in place.)
    const NoiseDtype asStored;
    const TransformerWeights aliasedCopy = addWeightNoise(aliased, 0.1, 9, "*", asStored);
    {
        auto sharing
            = InPlaceWeightNoise::create(aliased, 0.1, 9, "*", asStored, directory.path().toStdString(), &why);
        QVERIFY2(sharing, why.c_str());
        std::uint64_t allBytes = 0;
        for (const auto& [name, tensor] : weights.named()) {
            allBytes += static_cast<std::uint64_t>(tensor.numel()) * 2;
        }
        QCOMPARE(sharing->bytes(), allBytes); // every tensor but lm_head
        sharing->noisy();
        QVERIFY(sameWeights(sharing->engineWeights(), aliasedCopy));
        QVERIFY(!at::equal(sharing->engineWeights().get("lm_head.weight"),
            sharing->engineWeights().get("model.embed_tokens.weight")));
    }
    QVERIFY(sameWeights(weights, original));

    // Nothing in place when the engine reads every tensor in another dtype than stored (the FP32 engine), or where
    // the spill would stay in memory; bad sigma and patterns are refused as addWeightNoise refuses them.
    QVERIFY(!InPlaceWeightNoise::create(
        weights, 0.1, 9, "*", engineNoiseDtype(config, nullptr, true), directory.path().toStdString(), &why));
    QVERIFY2(why.find("dtype") != std::string::npos, why.c_str());
    struct statfs system {};
    if (::statfs("/dev/shm", &system) == 0 && system.f_type == 0x01021994) {
        QVERIFY(!InPlaceWeightNoise::create(weights, 0.1, 9, "*", dtypes, "/dev/shm", &why));
        QVERIFY2(why.find("memory") != std::string::npos, why.c_str());
    }
    QVERIFY_EXCEPTION_THROWN(
        InPlaceWeightNoise::create(weights, -0.1, 9, "*", dtypes, directory.path().toStdString()), InputError);
    QVERIFY_EXCEPTION_THROWN(InPlaceWeightNoise::create(weights, 0.1, 9, "model.layers.{3-1}.*", dtypes,
                                 directory.path().toStdString()),
        InputError);
    QVERIFY(sameWeights(weights, original));
}

void TestEngine::measurementWithNoiseInPlaceIsTheCopys()
{
    const ModelConfig config = tinyConfig();
    const TransformerWeights weights = tinyWeights(config, 421).to(at::kBFloat16);
    const TransformerWeights original = weights.clone();
    const model::Transformer trainer(config, weights);
    const std::vector<GenerationRequest> requests = randomRequests(6, 422);
    MismatchOptions options;
    options.sampling.maxNewTokens = 12;
    options.sampling.ignoreEos = true;
    options.batchSize = 2; // three chunks: the weights switch six times
    options.keepTokenValues = true;
    const NoiseDtype dtypes = engineNoiseDtype(config, nullptr);
    Engine copyEngine(config, addWeightNoise(weights, 0.2, 5, "*", dtypes));
    const MismatchMeasurement expected = measureMismatch(trainer, copyEngine, requests, options);

    QTemporaryDir directory(QDir::currentPath() + "/spill-XXXXXX"); // on a disk, as above
    QVERIFY(directory.isValid());
    auto inPlace = InPlaceWeightNoise::create(weights, 0.2, 5, "*", dtypes, directory.path().toStdString());
    QVERIFY(inPlace);
    inPlace->noisy();
    Engine inPlaceEngine(config, inPlace->engineWeights());
    int switches = 0;
    options.beforeGenerating = [&] {
        inPlace->noisy();
        ++switches;
    };
    options.beforeScoring = [&] {
        inPlace->clean();
        ++switches;
    };
    const MismatchMeasurement got = measureMismatch(trainer, inPlaceEngine, requests, options);
    inPlace->clean();
    QCOMPARE(switches, 6);
    // The same path on the same values: bit for bit (the trainer scored the clean weights, the engine generated on
    // the noisy ones; a switch missed either way would change the KL).
    QCOMPARE(got.promptKlSums, expected.promptKlSums);
    QCOMPARE(got.tokenValues.kl, expected.tokenValues.kl);
    QCOMPARE(got.tokens, expected.tokens);
    for (std::size_t i = 0; i < requests.size(); ++i) {
        QCOMPARE(got.generations[i].tokens, expected.generations[i].tokens);
    }
    QVERIFY(got.kl > 0.0);
    QVERIFY(sameWeights(weights, original));
}

void TestEngine::noisyCopyBytesCountWhatIsNotNoisedInPlace()
{
    // Counted by hand for tinyConfig (hidden 32, intermediate 64, 2 layers, 4 heads and 2 KV heads of 8, vocabulary
    // 258, attention biases, tied embeddings). Per layer: q 32x32, k 16x32, v 16x32, o 32x32, gate and up 64x32,
    // down 32x64 = 9216 weights the BF16 engine reads in bf16; biases 32 + 16 + 16 and two norms of 32 it reads in
    // float32. Embedding 258 x 32 = 8256 (bf16), final norm 32 (float32).
    const ModelConfig config = tinyConfig();
    const std::uint64_t bf16Elements = 8256 + 2 * 9216; // 26688
    const std::uint64_t floatElements = 2 * (64 + 64) + 32; // 288
    QCOMPARE(noisyCopyBytes(config, nullptr, "*", at::kBFloat16, false), 2 * bf16Elements + 4 * floatElements);
    QCOMPARE(noisyCopyBytes(config, nullptr, "*", at::kBFloat16, true), 4 * floatElements);
    // A float32 checkpoint: the bf16 noisy values cannot go in place, the float32 ones can.
    QCOMPARE(noisyCopyBytes(config, nullptr, "*", at::kFloat, true), 2 * bf16Elements);
    // Layer 0's MLP only: gate, up and down, 6144 weights.
    QCOMPARE(noisyCopyBytes(config, nullptr, "model.layers.{0}.mlp.*", at::kBFloat16, false), std::uint64_t(2 * 6144));
    QCOMPARE(noisyCopyBytes(config, nullptr, "model.layers.{0}.mlp.*", at::kBFloat16, true), std::uint64_t(0));
    // A recipe quantizing every projection to FP8 wants their noisy values in float32: copies, in place or not; the
    // embedding (tied lm_head) too when the recipe quantizes either of its modules.
    const quant::RecipePlan plan = planFor(kFp8Recipe, config);
    QVERIFY(plan.modules.at("model.layers.1.mlp.down_proj").weights.format == quant::WeightFormat::Fp8E4m3);
    const bool embeddingBf16 = plan.modules.at(quant::kEmbedName).weights.format == quant::WeightFormat::Bf16
        && plan.modules.at("lm_head").weights.format == quant::WeightFormat::Bf16;
    const std::uint64_t embedding = embeddingBf16 ? 0 : 4 * 8256;
    QCOMPARE(noisyCopyBytes(config, &plan, "*", at::kBFloat16, true), 4 * (2 * 9216) + embedding + 4 * floatElements);
    QVERIFY_EXCEPTION_THROWN(noisyCopyBytes(config, nullptr, "model.layers.{3-1}.*", at::kBFloat16, true), InputError);
}

void TestEngine::byteSizes()
{
    QCOMPARE(parseByteSize("8GiB"), std::uint64_t(8) << 30);
    QCOMPARE(parseByteSize("512MiB"), std::uint64_t(512) << 20);
    QCOMPARE(parseByteSize("1e9"), std::uint64_t(1000000000));
    QCOMPARE(parseByteSize("1.5 gib"), std::uint64_t(3) << 29);
    QCOMPARE(parseByteSize("2GB"), std::uint64_t(2000000000));
    QCOMPARE(parseByteSize("4096"), std::uint64_t(4096));
    QCOMPARE(parseByteSize("100 B"), std::uint64_t(100));
    for (const char* bad : {"", "GiB", "8G", "-1GiB", "8 parsecs", "1e30"}) {
        QVERIFY_EXCEPTION_THROWN(parseByteSize(bad), InputError);
    }
    QCOMPARE(formatByteSize(std::uint64_t(8) << 30), std::string("8 GiB"));
    QCOMPARE(formatByteSize(1536), std::string("1.50 KiB"));
}

MISMATCH_TEST_MAIN(TestEngine)
#include "test_engine.moc"

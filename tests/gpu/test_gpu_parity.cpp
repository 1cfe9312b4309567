// Whole jobs on a CUDA device against the same jobs on the CPU, on the demo pair (label gpu; exit 77 = skipped
// when there is no CUDA device or this LibTorch has no CUDA). The weights are the same; the device computes the
// same function with another accumulation order (and, for FP8 GEMMs, Hopper's FP8 tensor-core accumulation), so
// bf16 and FP8 roundings flip here and there and the flips propagate. Tolerances are stated against the quantity
// the tool reports, each with its reason:
//   engine (BF16 engine, FP8 W8A8 recipe): teacher-forced on the CPU engine's tokens, the mean KL between the CPU
//     and the GPU engine's distributions must stay under half the engine's own mismatch against the FP32 trainer
//     (kDeviceShareOfOwnMismatch): the device may not change what a measurement reports by as much as the
//     measurement itself. Tokens sampled on both are reported (the same seeded draws; they part where a flip
//     moves a draw across a token boundary, after which the sequences differ).
//   training step (FP32 student, OPD full-vocabulary KL; its forward on the GPU is the fused KL kernel): loss and
//     every gradient tensor in float32 on both, so
//     relative differences of 1e-4 (loss) and 1e-3 (gradients, relative L2 per tensor) leave ~100x room over
//     float32 accumulation-order differences (~1e-6 per product through 2 layers) and catch any wrong op (O(1)).
//   admission check (BF16 and FP8 W8A8 candidates, a threshold between their CPU mismatches): the same verdicts,
//     and each mismatch within the two measurements' bootstrap half-widths of each other (two estimates of one
//     quantity on partly different samples).
//   sensitivity scan (FP8 cells of every projection): each cell's mismatch within the two cells' bootstrap
//     half-widths of each other.
//   FP8 KV rounding (KvQuantizer, dense cache and prefill): bit for bit the host codec (same codes, same decode).
//   a training run end to end on the device (2 steps, rollouts, AdamW, evaluation): completes with finite metrics.
#include "core/analysis/admission.h"
#include "core/analysis/rollout_measure.h"
#include "core/analysis/sensitivity.h"
#include "core/common/device.h"
#include "core/common/runtime.h"
#include "core/engine/engine.h"
#include "core/engine/memory_plan.h"
#include "core/engine/paged_kv_cache.h"
#include "core/model/memory_check.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/store/run_store.h"
#include "core/train/objectives.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"
#include "cuda/device.h"
#include "tests/common/engine_held_bytes.h"
#include "tests/gpu/check.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace mismatch;
using mismatch::testing::check;

namespace {

constexpr double kDeviceShareOfOwnMismatch = 0.5;
constexpr double kLossRelativeTolerance = 1e-4;
constexpr double kGradientRelativeTolerance = 1e-3;

const at::Device kGpu(at::kCUDA, 0);

std::string resource(const std::string& relative)
{
    return (std::filesystem::path(resourceDirectory()) / relative).string();
}

std::string fixed(double value, int digits = 6)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    return text;
}

// Mean over every row of KL(p || q), p and q lists of [T, V] log-probabilities (float64 sums).
double meanKl(const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& q)
{
    double sum = 0.0;
    std::int64_t rows = 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
        if (p[i].size(0) == 0) {
            continue;
        }
        const at::Tensor lp = p[i].to(at::kCPU).to(at::kDouble);
        const at::Tensor lq = q[i].to(at::kCPU).to(at::kDouble);
        sum += (lp.exp() * (lp - lq)).sum().item<double>();
        rows += lp.size(0);
    }
    return rows ? sum / static_cast<double>(rows) : 0.0;
}

// What an engine on the device holds beyond the weights it was given (its storage not shared with them) against
// the memory plan's count for that device (engine/memory_plan.h), plus the float32 bias copies the plan leaves out:
// equal to the byte, as on the CPU (test_engine).
void checkDeviceMemoryPlan(const std::string& label, const model::ModelConfig& config,
    const model::TransformerWeights& given, const analysis::EngineConfiguration& configuration,
    const engine::EngineModel& engineModel, engine::EngineKernels kernels = engine::EngineKernels::Auto)
{
    const test::GivenWeights givenFacts = test::givenWeights(given);
    model::DType stored = model::DType::BF16;
    for (const auto& [name, tensor] : given.named()) {
        stored = tensor.scalar_type() == at::kFloat ? model::DType::F32 : stored;
    }
    const std::uint64_t held = test::heldBeyondGiven(givenFacts, engineModel);
    std::optional<quant::RecipePlan> plan;
    if (configuration.recipe) {
        plan = quant::resolveRecipe(*configuration.recipe, config);
    }
    const std::uint64_t planned
        = engine::engineExtraBytes(config, plan ? &*plan : nullptr, stored, kGpu, kernels) + givenFacts.floatBiasBytes;
    check(held == planned, label + ": the engine holds on the device what the memory plan counts",
        std::to_string(held) + " bytes held, " + std::to_string(planned) + " planned; "
            + engine::toString(engineModel.kernels()) + " kernels");
}

// The same for both device layouts, each engine built with its kernels chosen explicitly.
void checkDeviceMemoryPlans(const std::string& label, const model::ModelConfig& config,
    const model::TransformerWeights& given, const analysis::EngineConfiguration& configuration)
{
    std::optional<quant::RecipePlan> plan;
    if (configuration.recipe) {
        plan = quant::resolveRecipe(*configuration.recipe, config);
    }
    for (const engine::EngineKernels kernels : {engine::EngineKernels::Float32, engine::EngineKernels::BFloat16}) {
        engine::EngineOptions options;
        options.precision = engine::EnginePrecision::Bf16Reference;
        options.kernels = kernels;
        const engine::EngineModel engineModel(config, given, plan, options);
        checkDeviceMemoryPlan(label + ", " + engine::toString(kernels) + " kernels", config, given, configuration,
            engineModel, kernels);
    }
}

void testEngine(const std::string& recipeFile)
{
    const std::string label = recipeFile.empty() ? std::string("BF16 engine") : "recipe " + recipeFile;
    const analysis::ModelDirectory model = analysis::loadModelDirectory(resource("models/arith-student"));
    const analysis::PromptRequests requests
        = analysis::promptRequests(resource("prompts/arith-heldout.jsonl"), *model.tokenizer, 32);
    analysis::MeasureSettings settings;
    settings.maxNewTokens = 32;
    settings.seed = 11;
    analysis::EngineConfiguration configuration;
    if (!recipeFile.empty()) {
        // A recipe of tests/gpu (this test's own) or of the built-in ones in resources/recipes.
        const std::string own = std::string(MISMATCH_SOURCE_DIR) + "/tests/gpu/" + recipeFile;
        const std::string path = std::filesystem::exists(own) ? own : resource("recipes/" + recipeFile);
        configuration.recipe = quant::loadRecipe(path);
    }
    const engine::SamplingOptions sampling = analysis::samplingOptions(settings, model.config, *model.tokenizer);
    auto cpuEngine = analysis::buildEngine(model.config, model.weights, configuration, requests.prompts(), settings);
    const model::TransformerWeights gpuWeights = onDevice(model.weights, kGpu);
    auto gpuEngine = analysis::buildEngine(model.config, gpuWeights, configuration, requests.prompts(), settings);
    checkDeviceMemoryPlan(label, model.config, gpuWeights, configuration, gpuEngine->model());
    checkDeviceMemoryPlans(label, model.config, gpuWeights, configuration);
    const auto cpuGenerated = cpuEngine->generate(requests.requests, sampling);
    const std::int64_t attentionBefore = engine::deviceKvAttentionCalls();
    const std::int64_t appendBefore = engine::deviceKvAppendCalls();
    const std::int64_t activationsBefore = engine::deviceFp8ActivationRoundings();
    const std::int64_t nativeBefore = engine::nativeFp8LinearCalls();
    const std::int64_t dequantizedBefore = engine::deviceDequantizedFp8LinearCalls();
    const auto gpuGenerated = gpuEngine->generate(requests.requests, sampling);
    const std::int64_t attended = engine::deviceKvAttentionCalls() - attentionBefore;
    const std::int64_t appended = engine::deviceKvAppendCalls() - appendBefore;
    check(attended > 0, label + ": decoding steps attend through the CUDA decode-attention kernel",
        std::to_string(attended) + " layer-steps; " + std::to_string(appended) + " FP8 KV appends through the kernel");
    if (recipeFile == "fp8-kv.yaml") {
        check(appended > 0, label + ": FP8 KV appends through the CUDA append kernel", std::to_string(appended));
    }
    if (recipeFile == "fp8-w8a8-block.yaml") {
        // Block-128 weights never take the FP8 tensor cores: the exact dequantized operands, in float32.
        const std::int64_t native = engine::nativeFp8LinearCalls() - nativeBefore;
        const std::int64_t dequantized = engine::deviceDequantizedFp8LinearCalls() - dequantizedBefore;
        check(native == 0 && dequantized > 0,
            label + ": block-128 products multiply the exact dequantized operands on the device",
            std::to_string(dequantized) + " dequantized, " + std::to_string(native) + " native calls");
    }
    if (recipeFile == "fp8-e5m2-w8a8.yaml") {
        const std::int64_t rounded = engine::deviceFp8ActivationRoundings() - activationsBefore;
        check(rounded > 0, label + ": emulated FP8 products round their activations on the device",
            std::to_string(rounded) + " linear calls");
    }

    std::int64_t same = 0;
    std::int64_t total = 0;
    std::int64_t identical = 0;
    bool finite = true;
    for (std::size_t i = 0; i < cpuGenerated.size(); ++i) {
        const auto& a = cpuGenerated[i].tokens;
        const auto& b = gpuGenerated[i].tokens;
        identical += a == b ? 1 : 0;
        std::size_t t = 0;
        while (t < a.size() && t < b.size() && a[t] == b[t]) {
            ++t;
        }
        same += static_cast<std::int64_t>(t);
        total += static_cast<std::int64_t>(a.size());
        for (const double lp : gpuGenerated[i].logProbs) {
            finite = finite && std::isfinite(lp) && lp <= 0.0;
        }
    }
    check(finite && gpuGenerated.size() == cpuGenerated.size(), label + ": GPU generation completes, finite log-probs",
        std::to_string(identical) + " of " + std::to_string(cpuGenerated.size())
            + " responses identical to the CPU's, " + std::to_string(same) + " of " + std::to_string(total)
            + " CPU tokens before the first difference");

    std::vector<std::vector<std::int64_t>> prompts = requests.prompts();
    std::vector<std::vector<std::int64_t>> responses;
    for (const auto& generation : cpuGenerated) {
        responses.push_back(generation.tokens);
    }
    const auto cpuRows = engine::scoreSequences(cpuEngine->model(), prompts, responses);
    const auto gpuRows = engine::scoreSequences(gpuEngine->model(), prompts, responses);
    const model::Transformer trainer(model.config, model.weights);
    const auto trainerRows = engine::scoreSequences(trainer, prompts, responses);
    const double own = meanKl(cpuRows, trainerRows);
    const double device = meanKl(cpuRows, gpuRows);
    check(device <= kDeviceShareOfOwnMismatch * own,
        label + ": KL(CPU engine || GPU engine) <= " + fixed(kDeviceShareOfOwnMismatch) + " x KL(CPU engine || FP32)",
        "device " + fixed(device) + " nats/token, own mismatch " + fixed(own) + " (ratio " + fixed(device / own, 3)
            + ")");
}

// The FP8 KV rounding of a dense cache and of a prefill's own keys and values (KvQuantizer::quantize), on the GPU
// against the host codec: bit for bit (the same codes and scales; the same float32 decode), per tensor and per
// head, with scales measured by the first call (from the same real tokens on both) and then reused.
void testKvRounding()
{
    const std::int64_t kvHeads = 4;
    for (const quant::KvScales mode : {quant::KvScales::PerTensor, quant::KvScales::PerHead}) {
        const quant::KvPrecision precision {quant::KvFormat::Fp8E4m3, mode, quant::KvCalibration::None};
        engine::KvQuantizer cpu({precision, precision}, kvHeads, true);
        engine::KvQuantizer gpu({precision, precision}, kvHeads, true);
        const std::int64_t before = engine::deviceKvRoundings();
        bool identical = true;
        for (int call = 0; call < 2; ++call) {
            at::Tensor keys = at::randn({3, kvHeads, 7, 64}) * (call == 0 ? 2.0 : 5.0); // the second call saturates
            keys.select(1, 2).mul_(8.0); // one head spans a larger range
            const at::Tensor values = at::randn({3, kvHeads, 7, 64});
            at::Tensor real = at::ones({3, 7}, at::kBool);
            real.narrow(1, 0, 2).select(0, 0).fill_(false); // left padding in row 0
            for (std::int64_t layer = 0; layer < 2; ++layer) {
                const auto [k, v] = cpu.quantize(layer, keys, values, real);
                const auto [gk, gv] = gpu.quantize(layer, keys.to(kGpu), values.to(kGpu), real.to(kGpu));
                identical = identical && gk.is_cuda() && at::equal(gk.to(at::kCPU), k) && at::equal(gv.to(at::kCPU), v)
                    && at::equal(gpu.scales().keys[layer], cpu.scales().keys[layer]);
            }
        }
        const std::string name = mode == quant::KvScales::PerHead ? "per head" : "per tensor";
        check(identical, "FP8 KV rounding on the GPU = the host codec bit for bit, " + name,
            std::to_string(engine::deviceKvRoundings() - before) + " device roundings");
        check(engine::deviceKvRoundings() - before == 4, "FP8 KV rounding, " + name + ": every GPU call rounds on the device");
    }
}

void testTrainingStep()
{
    const std::string studentDirectory = resource("models/arith-student");
    const std::string teacherDirectory = resource("models/arith-teacher");
    const model::ModelConfig config = model::loadConfig(studentDirectory + "/config.json");
    const model::ModelConfig teacherConfig = model::loadConfig(teacherDirectory + "/config.json");
    const model::TransformerWeights student = model::loadWeights(studentDirectory, config);
    const model::TransformerWeights teacher
        = model::loadWeights(teacherDirectory, teacherConfig, model::LoadPrecision::Stored);
    const at::Tensor ids = at::randint(0, config.vocabSize, {6, 28}, at::kLong);
    at::Tensor mask = at::ones({6, 28}, at::kLong);
    mask.narrow(1, 0, 5).narrow(0, 0, 2).zero_(); // two left-padded rows

    struct Step {
        double loss = 0.0;
        std::vector<at::Tensor> gradients;
        bool fused = false; // the loss's forward went through the fused KL kernel
    };
    const auto step = [&](const at::Device& device) {
        model::TransformerWeights weights = onDevice(student.clone(), device);
        std::vector<at::Tensor> parameters = weights.parameters();
        const model::Transformer network(config, weights);
        const model::Transformer teacherNetwork(teacherConfig, onDevice(teacher, device));
        at::Tensor teacherLogProbs;
        {
            const at::NoGradGuard noGrad;
            teacherLogProbs = at::log_softmax(teacherNetwork.forward(ids, mask).to(at::kFloat), -1)
                                  .reshape({-1, config.vocabSize});
        }
        const at::Tensor logits = network.forward(ids, mask).reshape({-1, config.vocabSize});
        const at::Tensor real = mask.reshape({-1}).ne(0).to(device);
        const train::ObjectiveResult result = train::opdFullKl(logits, teacherLogProbs, real);
        result.loss.backward();
        Step out;
        out.fused = train::opdFullKlUsesFusedKernel(logits);
        out.loss = result.loss.item<double>();
        for (const at::Tensor& parameter : parameters) {
            out.gradients.push_back(parameter.grad().to(at::kCPU).to(at::kDouble));
        }
        return out;
    };
    const Step cpu = step(at::Device(at::kCPU));
    const Step gpu = step(kGpu);
    check(gpu.fused && !cpu.fused, "training step: the GPU's OPD loss forward runs through the fused KL kernel",
        std::string("GPU ") + (gpu.fused ? "fused" : "ATen") + ", CPU " + (cpu.fused ? "fused" : "ATen"));
    const double lossDifference = std::abs(gpu.loss - cpu.loss) / std::abs(cpu.loss);
    check(lossDifference <= kLossRelativeTolerance, "training step: OPD loss, GPU vs CPU (float32)",
        "CPU " + fixed(cpu.loss, 9) + ", GPU " + fixed(gpu.loss, 9) + ", relative " + fixed(lossDifference, 3));
    double worst = 0.0;
    for (std::size_t i = 0; i < cpu.gradients.size(); ++i) {
        const double norm = cpu.gradients[i].norm().item<double>();
        const double difference = (gpu.gradients[i] - cpu.gradients[i]).norm().item<double>();
        worst = std::max(worst, norm > 0.0 ? difference / norm : difference);
    }
    check(worst <= kGradientRelativeTolerance, "training step: every gradient tensor, GPU vs CPU (relative L2)",
        "worst " + fixed(worst, 3) + " over " + std::to_string(cpu.gradients.size()) + " tensors");
}

// The measurement settings both analyses use, on `device`.
analysis::MeasureSettings settingsOn(const std::string& device, std::int64_t maxNewTokens, std::uint64_t seed)
{
    analysis::MeasureSettings settings;
    settings.maxNewTokens = maxNewTokens;
    settings.seed = seed;
    settings.bootstrap.resamples = 2000;
    settings.device = parseDevice(device, "test", "device");
    return settings;
}

double halfWidth(const metrics::Interval& interval)
{
    return 0.5 * (interval.high - interval.low);
}

void testAdmission(const std::filesystem::path& work)
{
    const auto admit = [&](const std::string& device, double threshold) {
        store::RunStore store = store::RunStore::open((work / ("admission-" + device + ".db")).string());
        analysis::AdmissionOptions options;
        options.checkpoints = {resource("models/arith-student")};
        analysis::Candidate bf16;
        bf16.name = "bf16";
        analysis::Candidate fp8;
        fp8.name = "fp8-w8a8-block";
        fp8.recipePath = resource("recipes/fp8-w8a8-block.yaml");
        options.candidates = {bf16, fp8};
        options.probePath = resource("prompts/arith-probe.jsonl");
        options.count = 32;
        options.settings = settingsOn(device, 32, 5);
        options.threshold = threshold;
        options.storedGenerations = 0;
        Progress progress;
        return analysis::runAdmission(store, options, progress);
    };
    const analysis::AdmissionResult first = admit("cpu", 1.0);
    const double bf16Cpu = first.rows.at(0).mismatch;
    const double fp8Cpu = first.rows.at(1).mismatch;
    // Between the two CPU mismatches (geometric mean): one verdict each side when they are apart.
    const double threshold = std::sqrt(bf16Cpu * fp8Cpu);
    const analysis::AdmissionResult cpu = admit("cpu", threshold);
    const analysis::AdmissionResult gpu = admit("cuda:0", threshold);
    for (std::size_t i = 0; i < cpu.rows.size(); ++i) {
        const analysis::AdmissionRow& a = cpu.rows[i];
        const analysis::AdmissionRow& b = gpu.rows.at(i);
        const double allowed = halfWidth(a.interval) + halfWidth(b.interval);
        check(a.verdict == b.verdict && std::abs(a.mismatch - b.mismatch) <= allowed,
            "admission " + a.candidate + " at threshold " + fixed(threshold, 4) + ": same verdict, mismatch within the "
                + "two half-widths",
            "CPU " + analysis::toString(a.verdict) + " " + fixed(a.mismatch, 4) + " [" + fixed(a.interval.low, 4) + ", "
                + fixed(a.interval.high, 4) + "], GPU " + analysis::toString(b.verdict) + " " + fixed(b.mismatch, 4)
                + " [" + fixed(b.interval.low, 4) + ", " + fixed(b.interval.high, 4) + "]; " + fixed(a.seconds, 3)
                + " s vs " + fixed(b.seconds, 3) + " s");
    }
}

void testSensitivity(const std::filesystem::path& work)
{
    const auto scan = [&](const std::string& device) {
        store::RunStore store = store::RunStore::open((work / ("sensitivity-" + device + ".db")).string());
        analysis::SensitivityOptions options;
        options.modelDirectory = resource("models/arith-student");
        options.promptSetPath = resource("prompts/arith-probe.jsonl");
        options.count = 16;
        options.settings = settingsOn(device, 16, 9);
        options.weights = analysis::parseWeightPrecision("fp8_e4m3", "test");
        options.kvCells = false;
        options.embeddingCells = false;
        Progress progress;
        return analysis::runSensitivity(store, options, progress);
    };
    const analysis::SensitivityResult cpu = scan("cpu");
    const analysis::SensitivityResult gpu = scan("cuda:0");
    check(cpu.cells.size() == gpu.cells.size() && !cpu.cells.empty(), "sensitivity: the same cells",
        std::to_string(cpu.cells.size()) + " cells");
    int outside = 0;
    double worst = 0.0;
    std::string worstCell;
    for (std::size_t i = 0; i < std::min(cpu.cells.size(), gpu.cells.size()); ++i) {
        const store::SensitivityCell& a = cpu.cells[i];
        const store::SensitivityCell& b = gpu.cells[i];
        const double allowed = 0.5 * (a.mismatchCiHigh.value_or(a.mismatch) - a.mismatchCiLow.value_or(a.mismatch))
            + 0.5 * (b.mismatchCiHigh.value_or(b.mismatch) - b.mismatchCiLow.value_or(b.mismatch));
        const double ratio = allowed > 0.0 ? std::abs(a.mismatch - b.mismatch) / allowed : 0.0;
        outside += ratio > 1.0 ? 1 : 0;
        if (ratio >= worst) {
            worst = ratio;
            worstCell = "layer " + std::to_string(a.layer) + " " + a.moduleGroup + ": CPU " + fixed(a.mismatch, 4)
                + ", GPU " + fixed(b.mismatch, 4);
        }
    }
    check(outside == 0, "sensitivity: every cell's mismatch within the two half-widths",
        std::to_string(outside) + " outside; closest to its bound: " + worstCell + " (" + fixed(worst, 3)
            + " of the bound); BF16 unit CPU " + fixed(cpu.bf16Unit, 4) + ", GPU " + fixed(gpu.bf16Unit, 4) + "; "
            + fixed(cpu.seconds, 3) + " s vs " + fixed(gpu.seconds, 3) + " s");
}

void testTrainingRun(const std::filesystem::path& work)
{
    train::RunConfig config = train::loadRunConfig(resource("runs/demo-opd-quick.yaml"));
    config.name = "gpu-parity-run";
    config.steps = 2;
    config.evaluation.every = 0;
    config.evaluation.count = 16;
    config.checkpoint.every = 2;
    config.device = "cuda:0";
    store::RunStore store = store::RunStore::open((work / "train.db").string());
    Progress progress;
    const auto start = std::chrono::steady_clock::now();
    const train::TrainResult result = train::runTraining(config, store, progress);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto steps = store.stepsAfter(result.runId);
    bool finite = !steps.empty();
    for (const auto& metrics : steps) {
        finite = finite && metrics.loss && std::isfinite(*metrics.loss) && metrics.mismatchKl
            && std::isfinite(*metrics.mismatchKl);
    }
    check(result.stepsStored == 2 && finite, "a training run on cuda:0 (2 steps, rollouts, AdamW, evaluation)",
        std::to_string(result.stepsStored) + " steps, final Q " + fixed(result.finalQuality.value_or(NAN), 4) + ", "
            + fixed(seconds, 3) + " s");
}

// Memory LibTorch's caching allocator keeps for a freed tensor counts as used by cudaMemGetInfo until it is
// released; the device memory check releases it first (model::availableDeviceMemory).
void testCachedMemoryRelease()
{
    if (std::getenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES") || std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING")) {
        // A set limit replaces the device query; without caching there is nothing to release.
        std::printf("cached memory release: not checked (MISMATCH_DEVICE_MEMORY_LIMIT_BYTES or "
                    "PYTORCH_NO_CUDA_MEMORY_CACHING is set)\n");
        return;
    }
    constexpr std::int64_t kElements = std::int64_t(1) << 28; // 1 GiB of float32
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    cuda::releaseCachedMemory();
    const std::optional<std::size_t> before = cuda::freeMemoryBytes(0);
    {
        at::Tensor block = at::empty({kElements}, at::TensorOptions().dtype(at::kFloat).device(kGpu));
        block.fill_(1.0F);
    }
    const std::optional<std::size_t> cached = cuda::freeMemoryBytes(0);
    const bool released = cuda::releaseCachedMemory();
    const std::optional<std::size_t> after = cuda::freeMemoryBytes(0);
    const auto gib = [&](const std::optional<std::size_t>& a, const std::optional<std::size_t>& b) {
        return a && b ? (static_cast<double>(*a) - static_cast<double>(*b)) / kGiB : NAN;
    };
    const std::optional<model::AvailableMemory> available = model::availableDeviceMemory(kGpu);
    check(released && gib(before, cached) >= 0.9 && gib(after, cached) >= 0.9 && available
            && available->source.find("released") != std::string::npos,
        "a freed tensor's cached block is given back before a device memory check",
        "free before " + fixed(gib(before, cached), 3) + " GiB above the cached state, after release "
            + fixed(gib(after, cached), 3) + " GiB; the check's source: " + (available ? available->source : "none"));
}

} // namespace

int main()
{
    if (availableDevices().size() < 2) {
        std::printf("SKIP: no CUDA device (%zu visible to the runtime) or a LibTorch without CUDA\n",
            cuda::devices().size());
        return testing::kSkipped;
    }
    initializeRuntime();
    const std::uint64_t seed = testing::testSeed();
    at::manual_seed(static_cast<std::int64_t>(seed));
    const std::filesystem::path work = std::filesystem::temp_directory_path() / ("gpu-parity-" + std::to_string(seed));
    std::filesystem::remove_all(work);
    std::filesystem::create_directories(work);
    testing::run("engine, BF16", [] { testEngine(""); });
    testing::run("engine, FP8 W8A8 block-128", [] { testEngine("fp8-w8a8-block.yaml"); });
    testing::run("engine, FP8 KV cache", [] { testEngine("fp8-kv.yaml"); });
    testing::run("engine, FP8 e5m2 W8A8 (emulated product)", [] { testEngine("fp8-e5m2-w8a8.yaml"); });
    testing::run("engine, NVFP4 W4A4", [] { testEngine("nvfp4-w4a4.yaml"); });
    testing::run("engine, NVFP4 weight-only (W4A16)", [] { testEngine("nvfp4-w4a16.yaml"); });
    testing::run("engine, MXFP4 W4A4", [] { testEngine("mxfp4-w4a4.yaml"); });
    testing::run("engine, MXFP8 W8A8", [] { testEngine("mxfp8-w8a8.yaml"); });
    testing::run("engine, int8 per-token-head KV cache", [] { testEngine("int8-per-token-head-kv.yaml"); });
    testing::run("FP8 KV rounding", testKvRounding);
    testing::run("training step", testTrainingStep);
    testing::run("admission", [&] { testAdmission(work); });
    testing::run("sensitivity", [&] { testSensitivity(work); });
    testing::run("training run", [&] { testTrainingRun(work); });
    testing::run("cached memory release", testCachedMemoryRelease);
    std::filesystem::remove_all(work);
    return testing::failures();
}

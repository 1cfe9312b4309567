// Device benchmark (run by tests/gpu/run_on_device.sh; exit 77 without a CUDA device). Writes one JSON file and
// prints a table. Every speed is a ratio against a baseline measured in the same run:
//   gemm          FP8 e4m3 cuBLASLt GEMM vs BF16 cuBLASLt, TFLOP/s, 7B-like weight shapes, 512..8192 tokens
//   fused_kl      the fused one-pass KL/k1/k3 kernel vs the unfused LibTorch version (log_softmax twice, then
//                 sums), GB/s of logits read against the measured device-to-device copy bandwidth
//   kv_capacity   engine::kvCapacity on a 7B-shaped config, FP8 (per-head) vs BF16 KV cache
//   decode        a synthetic 7B-shaped decode step (32 layers of QKV/O/gate-up/down GEMMs and paged decode
//                 attention; no norms or RoPE), BF16 weights + BF16 KV vs FP8 weights/activations + FP8 KV
// Timing: synchronize, run `iterations` times, synchronize; median of `repeats` such batches; warm-up first.
// Inputs rotate over several copies so that the L2 cache (60 MB on H200) does not hold them between calls.
#include "core/engine/paged_kv_cache.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/train/zoo.h"
#include "cuda/device.h"
#include "cuda/fp8_ops.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

using namespace mismatch;
using nlohmann::json;

namespace {

const at::TensorOptions kCuda = at::TensorOptions().device(at::kCUDA);

struct Settings {
    std::string out = "gpu-bench.json";
    bool quick = false; // small sizes: a smoke run of every section
    std::string timeToQualityJson; // a JSON file from run_on_device.sh to embed, if any
};

// Median milliseconds per call of `body` (called with the call index, for rotating inputs).
double medianMs(const at::Tensor& device, const std::function<void(int)>& body, int iterations, int repeats = 5)
{
    for (int i = 0; i < 3; ++i) {
        body(i);
    }
    cuda::synchronize(device);
    std::vector<double> times;
    int call = 0;
    for (int r = 0; r < repeats; ++r) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iterations; ++i) {
            body(call++);
        }
        cuda::synchronize(device);
        const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
        times.push_back(elapsed.count() / iterations);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

// Device-to-device copy bandwidth, bytes read plus written per second: the memory-bound ceiling.
double copyBandwidthGBs(bool quick)
{
    const std::int64_t bytes = quick ? (256ll << 20) : (4ll << 30);
    const at::Tensor source = at::empty({bytes}, kCuda.dtype(at::kByte)).random_(0, 255);
    at::Tensor target = at::empty_like(source);
    const double ms = medianMs(source, [&](int) { target.copy_(source); }, quick ? 5 : 10);
    return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

json benchGemm(bool quick)
{
    struct Shape {
        const char* name;
        std::int64_t n; // weight rows (output features)
        std::int64_t k; // input features
    };
    const std::vector<Shape> shapes = quick ? std::vector<Shape> {{"4096x4096", 1024, 1024}}
                                            : std::vector<Shape> {{"4096x4096", 4096, 4096},
                                                  {"4096x11008 (up)", 11008, 4096}, {"11008x4096 (down)", 4096, 11008}};
    const std::vector<std::int64_t> tokenCounts
        = quick ? std::vector<std::int64_t> {512} : std::vector<std::int64_t> {512, 1024, 2048, 4096, 8192};
    constexpr int kCopies = 3;
    json rows = json::array();
    for (const Shape& shape : shapes) {
        std::vector<at::Tensor> weightsBf16;
        std::vector<cuda::Fp8Tensor> weightsTensor;
        std::vector<cuda::Fp8Tensor> weightsChannel;
        for (int c = 0; c < kCopies; ++c) {
            const at::Tensor w = at::randn({shape.n, shape.k}, kCuda.dtype(at::kBFloat16)) * 0.02;
            weightsBf16.push_back(w);
            weightsTensor.push_back(cuda::quantizeFp8(w, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Tensor));
            weightsChannel.push_back(cuda::quantizeFp8(w, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row));
        }
        for (const std::int64_t tokens : tokenCounts) {
            const at::Tensor x = at::randn({tokens, shape.k}, kCuda.dtype(at::kBFloat16));
            const cuda::Fp8Tensor xTensor = cuda::quantizeFp8(x, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Tensor);
            const cuda::Fp8Tensor xToken = cuda::quantizeFp8(x, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row);
            const double flops = 2.0 * static_cast<double>(tokens) * static_cast<double>(shape.n) * static_cast<double>(shape.k);
            const int iterations = quick ? 3 : 10;
            const double bf16Ms = medianMs(x, [&](int i) { cuda::bf16Gemm(x, weightsBf16[static_cast<std::size_t>(i % kCopies)]); }, iterations);
            std::string scalarPath;
            const double fp8Ms = medianMs(x, [&](int i) {
                scalarPath = cuda::toString(cuda::fp8Gemm(xTensor, weightsTensor[static_cast<std::size_t>(i % kCopies)]).path);
            }, iterations);
            std::string rowPath;
            const double fp8RowMs = medianMs(x, [&](int i) {
                rowPath = cuda::toString(cuda::fp8Gemm(xToken, weightsChannel[static_cast<std::size_t>(i % kCopies)]).path);
            }, iterations);
            // The engine's full FP8 linear: per-token activation quantization included.
            const double fp8WithQuantizeMs = medianMs(x, [&](int i) {
                const cuda::Fp8Tensor q = cuda::quantizeFp8(x, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row);
                cuda::fp8Gemm(q, weightsChannel[static_cast<std::size_t>(i % kCopies)]);
            }, iterations);
            rows.push_back({{"shape", shape.name}, {"n", shape.n}, {"k", shape.k}, {"tokens", tokens},
                {"bf16_tflops", flops / (bf16Ms * 1e-3) / 1e12}, {"fp8_tensor_scales_tflops", flops / (fp8Ms * 1e-3) / 1e12},
                {"fp8_tensor_scales_path", scalarPath}, {"fp8_row_scales_tflops", flops / (fp8RowMs * 1e-3) / 1e12},
                {"fp8_row_scales_path", rowPath},
                {"fp8_row_scales_with_activation_quantize_tflops", flops / (fp8WithQuantizeMs * 1e-3) / 1e12},
                {"speedup_fp8_tensor_scales", bf16Ms / fp8Ms}, {"speedup_fp8_row_scales", bf16Ms / fp8RowMs},
                {"speedup_fp8_with_quantize", bf16Ms / fp8WithQuantizeMs}});
        }
    }
    return rows;
}

json benchFusedKl(bool quick, double bandwidthGBs)
{
    const std::int64_t rows = quick ? 64 : 512;
    const std::int64_t vocab = 152064;
    json result = json::array();
    for (const auto dtype : {at::kBFloat16, at::kFloat}) {
        constexpr int kCopies = 2;
        std::vector<at::Tensor> engine;
        std::vector<at::Tensor> trainer;
        for (int c = 0; c < kCopies; ++c) {
            const at::Tensor a = at::randn({rows, vocab}, kCuda.dtype(at::kFloat)) * 3.0;
            engine.push_back(a.to(dtype));
            trainer.push_back((a + at::randn({rows, vocab}, kCuda.dtype(at::kFloat)) * 0.5).to(dtype));
        }
        const at::Tensor sampled = at::randint(0, vocab, {rows}, kCuda.dtype(at::kLong));
        const int iterations = quick ? 3 : 10;
        const double fusedMs = medianMs(sampled, [&](int i) {
            cuda::fusedMismatch(engine[static_cast<std::size_t>(i % kCopies)], trainer[static_cast<std::size_t>(i % kCopies)], sampled);
        }, iterations);
        const double unfusedMs = medianMs(sampled, [&](int i) {
            const at::Tensor logMu = at::log_softmax(engine[static_cast<std::size_t>(i % kCopies)].to(at::kFloat), -1);
            const at::Tensor logPi = at::log_softmax(trainer[static_cast<std::size_t>(i % kCopies)].to(at::kFloat), -1);
            const at::Tensor kl = (logMu.exp() * (logMu - logPi)).sum(-1);
            const at::Tensor k1 = (logMu - logPi).gather(1, sampled.view({-1, 1})).view({-1});
            const at::Tensor k3 = at::expm1(-k1) + k1;
            (void)kl;
            (void)k3;
        }, iterations);
        // The fewest bytes: both logit matrices read once (outputs are negligible).
        const double bytes = 2.0 * static_cast<double>(rows) * static_cast<double>(vocab) * static_cast<double>(engine[0].element_size());
        const double fusedGBs = bytes / (fusedMs * 1e-3) / 1e9;
        const double unfusedGBs = bytes / (unfusedMs * 1e-3) / 1e9;
        result.push_back({{"dtype", c10::toString(dtype)}, {"rows", rows}, {"vocab", vocab}, {"fused_ms", fusedMs},
            {"unfused_ms", unfusedMs}, {"fused_gbs", fusedGBs}, {"unfused_gbs", unfusedGBs},
            {"speedup", unfusedMs / fusedMs}, {"fused_fraction_of_copy_bandwidth", fusedGBs / bandwidthGBs},
            {"unfused_fraction_of_copy_bandwidth", unfusedGBs / bandwidthGBs}});
    }
    return result;
}

model::ModelConfig sevenBConfig()
{
    model::ModelConfig config = train::demoModelConfig(4096, 32, 32, 32, 11008);
    config.vocabSize = 32000;
    return config;
}

json benchKvCapacity()
{
    const model::ModelConfig config = sevenBConfig();
    const quant::RecipePlan plan = quant::resolveRecipe(
        quant::parseRecipe("version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n", "fp8-kv-per-head.yaml"), config);
    const std::uint64_t memory = 40ull << 30;
    const engine::KvCapacity capacity = engine::kvCapacity(config, &plan, memory, 16);
    return {{"config", "7B-shaped: 32 layers, 32 KV heads, head dim 128"}, {"memory_bytes", memory},
        {"fp8_tokens", capacity.tokens}, {"bf16_tokens", capacity.bf16Tokens}, {"ratio_to_bf16", capacity.ratioToBf16},
        {"scale_bytes", capacity.scaleBytes}};
}

// One synthetic decode step of a 7B-shaped model for `batch` sequences at context `context`.
json benchDecode(bool quick)
{
    const std::int64_t layers = quick ? 2 : 32;
    const std::int64_t hidden = quick ? 1024 : 4096;
    const std::int64_t intermediate = quick ? 2816 : 11008;
    const std::int64_t heads = hidden / 128;
    const std::int64_t headDim = 128;
    const std::int64_t batch = quick ? 8 : 32;
    const std::int64_t context = quick ? 256 : 1024;
    const std::int64_t steps = quick ? 3 : 16;
    const std::int64_t slots = batch * (context + steps + 8);
    struct Layer {
        at::Tensor qkv, o, gateUp, down; // bf16 [out, in]
        cuda::Fp8Tensor qkv8, o8, gateUp8, down8; // per-channel e4m3
        at::Tensor keyCache, valueCache; // bf16 or e4m3 codes [slots, heads, headDim]
        at::Tensor keyScales, valueScales;
    };
    json result;
    for (const bool fp8 : {false, true}) {
        std::vector<Layer> model(static_cast<std::size_t>(layers));
        for (Layer& layer : model) {
            const auto weight = [&](std::int64_t out, std::int64_t in) {
                return at::randn({out, in}, kCuda.dtype(at::kBFloat16)) * 0.02;
            };
            layer.qkv = weight(3 * hidden, hidden);
            layer.o = weight(hidden, hidden);
            layer.gateUp = weight(2 * intermediate, hidden);
            layer.down = weight(hidden, intermediate);
            if (fp8) {
                const auto q = [](const at::Tensor& w) { return cuda::quantizeFp8(w, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row); };
                layer.qkv8 = q(layer.qkv);
                layer.o8 = q(layer.o);
                layer.gateUp8 = q(layer.gateUp);
                layer.down8 = q(layer.down);
                layer.qkv = layer.o = layer.gateUp = layer.down = at::Tensor(); // only the FP8 copy stays resident
                layer.keyScales = at::full({heads}, 0.01, kCuda.dtype(at::kFloat));
                layer.valueScales = at::full({heads}, 0.01, kCuda.dtype(at::kFloat));
                layer.keyCache = at::randint(0, 120, {slots, heads, headDim}, kCuda.dtype(at::kByte));
                layer.valueCache = at::randint(0, 120, {slots, heads, headDim}, kCuda.dtype(at::kByte));
            } else {
                layer.keyCache = at::randn({slots, heads, headDim}, kCuda.dtype(at::kBFloat16));
                layer.valueCache = at::randn({slots, heads, headDim}, kCuda.dtype(at::kBFloat16));
            }
        }
        const at::Tensor slotTable = at::arange(slots, kCuda.dtype(at::kLong)).view({batch, -1});
        at::Tensor lengths = at::full({batch}, context, kCuda.dtype(at::kLong));
        at::Tensor x = at::randn({batch, hidden}, kCuda.dtype(at::kBFloat16));
        const auto linear = [&](const at::Tensor& input, const at::Tensor& w, const cuda::Fp8Tensor& w8) {
            if (!fp8) {
                return cuda::bf16Gemm(input, w);
            }
            const cuda::Fp8Tensor q = cuda::quantizeFp8(input, cuda::Fp8Kind::E4M3, cuda::Fp8Scaling::Row);
            return cuda::fp8Gemm(q, w8).output;
        };
        std::int64_t position = context;
        const auto step = [&](int) {
            const at::Tensor newSlots = slotTable.select(1, position % slotTable.size(1)).contiguous();
            at::Tensor h = x;
            for (Layer& layer : model) {
                const at::Tensor qkv = linear(h, layer.qkv, layer.qkv8); // [batch, 3 hidden]
                const at::Tensor q = qkv.narrow(1, 0, hidden).to(at::kFloat).view({batch, heads, headDim});
                const at::Tensor k = qkv.narrow(1, hidden, hidden).reshape({batch, heads, headDim});
                const at::Tensor v = qkv.narrow(1, 2 * hidden, hidden).reshape({batch, heads, headDim});
                if (fp8) {
                    cuda::appendKvFp8(layer.keyCache, layer.keyScales, k, newSlots);
                    cuda::appendKvFp8(layer.valueCache, layer.valueScales, v, newSlots);
                } else {
                    layer.keyCache.index_copy_(0, newSlots, k);
                    layer.valueCache.index_copy_(0, newSlots, v);
                }
                const at::Tensor attention = cuda::decodeAttention(q, {layer.keyCache, layer.keyScales},
                    {layer.valueCache, layer.valueScales}, slotTable, lengths, 1.0f / std::sqrt(128.0f));
                h = linear(attention.view({batch, hidden}).to(at::kBFloat16), layer.o, layer.o8);
                const at::Tensor gateUp = linear(h, layer.gateUp, layer.gateUp8);
                const at::Tensor mlp = at::silu(gateUp.narrow(1, 0, intermediate)) * gateUp.narrow(1, intermediate, intermediate);
                h = linear(mlp.contiguous(), layer.down, layer.down8);
            }
        };
        const double ms = medianMs(x, step, static_cast<int>(steps), 3);
        const std::string key = fp8 ? "fp8" : "bf16";
        result[key + "_step_ms"] = ms;
        result[key + "_tokens_per_s"] = static_cast<double>(batch) / (ms * 1e-3);
        model.clear();
    }
    result["speedup"] = result["fp8_tokens_per_s"].get<double>() / result["bf16_tokens_per_s"].get<double>();
    result["setup"] = "synthetic " + std::to_string(layers) + "-layer decode step, hidden " + std::to_string(hidden)
        + ", intermediate " + std::to_string(intermediate) + ", batch " + std::to_string(batch) + ", context "
        + std::to_string(context) + "; GEMMs + paged decode attention + KV append, no norms/RoPE/lm_head";
    return result;
}

Settings parseArguments(int argc, char** argv)
{
    Settings settings;
    for (int i = 1; i < argc; ++i) {
        const std::string argument = argv[i];
        if (argument == "--out" && i + 1 < argc) {
            settings.out = argv[++i];
        } else if (argument == "--quick") {
            settings.quick = true;
        } else if (argument == "--time-to-quality" && i + 1 < argc) {
            settings.timeToQualityJson = argv[++i];
        } else {
            std::fprintf(stderr, "usage: bench_gpu [--out FILE] [--quick] [--time-to-quality FILE]\n");
            std::exit(2);
        }
    }
    return settings;
}

} // namespace

int main(int argc, char** argv)
{
    const Settings settings = parseArguments(argc, argv);
    if (!cuda::available()) {
        std::printf("SKIP: no CUDA device or a LibTorch without CUDA\n");
        return 77;
    }
    const std::vector<cuda::DeviceInfo> devices = cuda::devices();
    at::manual_seed(20261129);
    json report;
    report["device"] = devices[0].name;
    report["compute_capability"] = std::to_string(devices[0].computeMajor) + "." + std::to_string(devices[0].computeMinor);
    report["cuda_runtime"] = cuda::runtimeVersion();
    report["quick"] = settings.quick;
    const auto section = [](const char* name) { std::fprintf(stderr, "bench_gpu: %s\n", name); };
    section("copy bandwidth");
    const double bandwidth = copyBandwidthGBs(settings.quick);
    report["copy_bandwidth_gbs"] = bandwidth;
    section("gemm");
    report["gemm"] = benchGemm(settings.quick);
    section("fused kl");
    report["fused_kl"] = benchFusedKl(settings.quick, bandwidth);
    section("kv capacity");
    report["kv_capacity"] = benchKvCapacity();
    section("decode");
    report["decode"] = benchDecode(settings.quick);
    if (!settings.timeToQualityJson.empty()) {
        std::ifstream in(settings.timeToQualityJson);
        try {
            report["time_to_quality"] = json::parse(in);
        } catch (const std::exception& error) {
            report["time_to_quality"] = {{"skipped", std::string("unreadable: ") + error.what()}};
        }
    }
    std::ofstream(settings.out) << report.dump(2) << "\n";

    // The table, last.
    std::printf("\n%-20s %7s %10s %10s %10s %8s %8s\n", "GEMM shape", "tokens", "BF16 TF/s", "FP8 TF/s", "FP8row TF/s",
        "xBF16", "xBF16row");
    for (const json& row : report["gemm"]) {
        std::printf("%-20s %7lld %10.1f %10.1f %10.1f %8.2f %8.2f\n", row["shape"].get<std::string>().c_str(),
            static_cast<long long>(row["tokens"].get<std::int64_t>()), row["bf16_tflops"].get<double>(),
            row["fp8_tensor_scales_tflops"].get<double>(), row["fp8_row_scales_tflops"].get<double>(),
            row["speedup_fp8_tensor_scales"].get<double>(), row["speedup_fp8_row_scales"].get<double>());
    }
    std::printf("GEMM paths: tensor scales %s, row scales %s\n",
        report["gemm"][0]["fp8_tensor_scales_path"].get<std::string>().c_str(),
        report["gemm"][0]["fp8_row_scales_path"].get<std::string>().c_str());
    std::printf("copy bandwidth (read+write): %.0f GB/s\n", bandwidth);
    for (const json& row : report["fused_kl"]) {
        std::printf("fused KL %-9s V=%lld: fused %.0f GB/s (%.0f%% of copy), unfused %.0f GB/s, speedup %.2fx\n",
            row["dtype"].get<std::string>().c_str(), static_cast<long long>(row["vocab"].get<std::int64_t>()),
            row["fused_gbs"].get<double>(), 100.0 * row["fused_fraction_of_copy_bandwidth"].get<double>(),
            row["unfused_gbs"].get<double>(), row["speedup"].get<double>());
    }
    std::printf("KV capacity 7B, 40 GiB: FP8 per-head %lld tokens, BF16 %lld, ratio %.3fx\n",
        static_cast<long long>(report["kv_capacity"]["fp8_tokens"].get<std::int64_t>()),
        static_cast<long long>(report["kv_capacity"]["bf16_tokens"].get<std::int64_t>()),
        report["kv_capacity"]["ratio_to_bf16"].get<double>());
    std::printf("decode (%s): BF16 %.0f tok/s, FP8 %.0f tok/s, speedup %.2fx\n",
        report["decode"]["setup"].get<std::string>().c_str(), report["decode"]["bf16_tokens_per_s"].get<double>(),
        report["decode"]["fp8_tokens_per_s"].get<double>(), report["decode"]["speedup"].get<double>());
    if (report.contains("time_to_quality")) {
        const json& ttq = report["time_to_quality"];
        const auto reached = [](const json& side) {
            return side.contains("reached") && side["reached"].is_object()
                ? std::to_string(side["reached"]["wall_seconds"].get<double>()) + " s (step "
                    + std::to_string(side["reached"]["step"].get<std::int64_t>()) + ")"
                : std::string("not reached");
        };
        if (ttq.contains("skipped")) {
            std::printf("time to quality: skipped (%s)\n", ttq["skipped"].get<std::string>().c_str());
        } else if (ttq.contains("target_quality")) {
            std::printf("time to quality (target Q %.4f): BF16 sync %s, FP8 async %s, speedup %s\n",
                ttq["target_quality"].get<double>(), reached(ttq["baseline"]).c_str(), reached(ttq["candidate"]).c_str(),
                ttq["speedup"].is_number() ? (std::to_string(ttq["speedup"].get<double>()) + "x").c_str() : "n/a");
        }
    }
    std::printf("JSON: %s\n", settings.out.c_str());
    return 0;
}

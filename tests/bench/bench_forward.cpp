// Reference forward throughput (tokens/s) in FP32 and BF16 on one batch, with the BF16/FP32 ratio measured in the
// same run. Prints a table and writes a JSON result.
//
//   bench_forward [--model DIR] [--json PATH] [--batch N] [--tokens N] [--iterations N]
//
// Without --model it uses resources/models/arith-teacher when present, else random weights of a similar size
// (hidden 256, 4 layers, 4 heads, 2 KV heads, intermediate 704, vocabulary 258).
#include "core/common/runtime.h"
#include "core/model/config.h"
#include "core/model/transformer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

using namespace mismatch;
using namespace mismatch::model;

namespace {

struct Arguments {
    std::string modelDir;
    std::string jsonPath = "bench_forward.json";
    std::int64_t batch = 32;
    std::int64_t tokens = 64;
    int iterations = 5;
};

Arguments parseArguments(int argc, char** argv)
{
    Arguments arguments;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::cerr << "bench_forward: " << flag << " needs a value\n";
                std::exit(2);
            }
            return argv[++i];
        };
        if (flag == "--model") {
            arguments.modelDir = value();
        } else if (flag == "--json") {
            arguments.jsonPath = value();
        } else if (flag == "--batch") {
            arguments.batch = std::stoll(value());
        } else if (flag == "--tokens") {
            arguments.tokens = std::stoll(value());
        } else if (flag == "--iterations") {
            arguments.iterations = std::max(1, std::stoi(value()));
        } else {
            std::cerr << "usage: bench_forward [--model DIR] [--json PATH] [--batch N] [--tokens N] [--iterations N]\n";
            std::exit(flag == "--help" || flag == "-h" ? 0 : 2);
        }
    }
    return arguments;
}

ModelConfig randomConfig()
{
    ModelConfig config;
    config.architecture = Architecture::Qwen2;
    config.vocabSize = 258;
    config.hiddenSize = 256;
    config.intermediateSize = 704;
    config.numLayers = 4;
    config.numHeads = 4;
    config.numKeyValueHeads = 2;
    config.headDim = 64;
    config.attentionBias = true;
    config.tieWordEmbeddings = true;
    return config;
}

struct Result {
    std::string compute;
    double medianSeconds = 0.0;
    double tokensPerSecond = 0.0;
};

Result measure(
    const Transformer& model, const at::Tensor& ids, const at::Tensor& mask, at::ScalarType compute, int iterations)
{
    ForwardOptions options;
    options.compute = compute;
    options.logProbs = true; // what the trainer and the mismatch measure consume
    at::NoGradGuard noGrad;
    model.forward(ids, mask, options); // warm-up: allocator, thread pool, first-touch
    std::vector<double> seconds;
    for (int i = 0; i < iterations; ++i) {
        const auto start = std::chrono::steady_clock::now();
        const at::Tensor out = model.forward(ids, mask, options);
        const auto stop = std::chrono::steady_clock::now();
        seconds.push_back(std::chrono::duration<double>(stop - start).count());
    }
    std::sort(seconds.begin(), seconds.end());
    Result result;
    result.compute = compute == at::kBFloat16 ? "bf16" : "fp32";
    result.medianSeconds = seconds[seconds.size() / 2];
    result.tokensPerSecond = static_cast<double>(ids.numel()) / result.medianSeconds;
    return result;
}

} // namespace

int main(int argc, char** argv)
{
    prepareProcessEnvironment(argv);
    const Arguments arguments = parseArguments(argc, argv);
    initializeRuntime(0); // one LibTorch thread per core

    std::string modelDir = arguments.modelDir;
    if (modelDir.empty()) {
        const std::string bundled = resourceDirectory() + "/models/arith-teacher";
        if (std::filesystem::exists(bundled + "/config.json")) {
            modelDir = bundled;
        }
    }
    ModelConfig config;
    TransformerWeights weights;
    std::string modelName;
    try {
        if (modelDir.empty()) {
            config = randomConfig();
            weights = randomWeights(config, 1);
            modelName = "random (hidden 256, 4 layers, 4 heads, 2 kv heads, intermediate 704, vocab 258)";
        } else {
            config = loadConfig(modelDir + "/config.json");
            weights = loadWeights(modelDir, config);
            modelName = modelDir;
        }
    } catch (const std::exception& error) {
        std::cerr << "bench_forward: " << error.what() << "\n";
        return 1;
    }
    const Transformer fp32Model(config, weights);
    // A BF16 engine stores its weights in bf16, so the BF16 row does not pay a per-call conversion.
    const Transformer bf16Model(config, weights.to(at::kBFloat16));

    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(7);
    const at::Tensor ids = at::randint(
        0, config.vocabSize, {arguments.batch, arguments.tokens}, generator, at::TensorOptions().dtype(at::kLong));
    const at::Tensor mask = at::ones({arguments.batch, arguments.tokens}, at::kLong);

    const Result fp32 = measure(fp32Model, ids, mask, at::kFloat, arguments.iterations);
    const Result bf16 = measure(bf16Model, ids, mask, at::kBFloat16, arguments.iterations);

    const RuntimeInfo runtime = runtimeInfo();
    const int threads = runtime.threads;
    std::printf("model: %s (%lld parameters), threads %d, batch %lld x %lld tokens, %d iterations (median)\n",
        modelName.c_str(), static_cast<long long>(weights.numel()), threads, static_cast<long long>(arguments.batch),
        static_cast<long long>(arguments.tokens), arguments.iterations);
    std::printf("%-8s %12s %14s %10s\n", "compute", "median s", "tokens/s", "vs fp32");
    nlohmann::json results = nlohmann::json::array();
    for (const Result& result : {fp32, bf16}) {
        const double ratio = result.tokensPerSecond / fp32.tokensPerSecond;
        std::printf(
            "%-8s %12.4f %14.0f %9.2fx\n", result.compute.c_str(), result.medianSeconds, result.tokensPerSecond, ratio);
        results.push_back({{"compute", result.compute}, {"median_seconds", result.medianSeconds},
            {"tokens_per_second", result.tokensPerSecond}, {"ratio_to_fp32", ratio}});
    }
    const nlohmann::json report {{"benchmark", "forward"}, {"model", modelName}, {"parameters", weights.numel()},
        {"threads", threads}, {"batch", arguments.batch}, {"tokens", arguments.tokens},
        {"iterations", arguments.iterations}, {"torch", runtime.torchVersion}, {"results", results}};
    std::ofstream out(arguments.jsonPath);
    out << report.dump(2) << "\n";
    if (!out) {
        std::cerr << "bench_forward: cannot write " << arguments.jsonPath << "\n";
        return 1;
    }
    std::printf("wrote %s\n", arguments.jsonPath.c_str());
    return 0;
}

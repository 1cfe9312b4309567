// The engine at a real model's shape (a `mismatch zoo shape` checkpoint, Qwen3-0.6B by default: random weights,
// the exact shapes), side by side with an eager PyTorch implementation of the same forward, in one run:
//   1. the machine: FP32 and BF16 matmul GFLOP/s through LibTorch (a prefill-shaped and a decode-shaped product)
//      and copy GB/s (bytes read + written);
//   2. the engine, one child process per recipe (peak RSS is per process): bf16, fp8-w8a8-block, fp8-kv and the
//      FP32 engine, greedy, --batch prompts of --prompt-tokens random tokens, --new-tokens each: load seconds, time
//      to first token (process start -> first sampled token: loading, conversion, KV-scale calibration, prefill),
//      prefill and decode tokens/s, peak RSS;
//   3. the eager baseline (tests/bench/eager_baseline.py on Debian's python3-torch, BF16 and FP32, 2 threads, one
//      process each; skipped with a message when no python3 with torch is found): the same workload;
//   4. the admission check of six candidates (tests/bench/shape-candidates.yaml) at --admission-prompts probe
//      prompts x --admission-tokens tokens, each candidate's first --admission-store-generations generations stored
//      for the token drill-down as `admit` does (default: its default), in a child process: wall time, peak RSS, the
//      KV-cache storage it allocated, and RSS against the BF16 weight bytes; on a CUDA device also the device memory
//      each child reserved (free memory at its start minus at its end).
// Ratios: engine BF16 decode tokens/s over eager BF16 and over eager FP32 (on a CPU without fast BF16 kernels the
// FP32 baseline is the faster one), FP8 W8A8 and FP8 KV time over BF16, fp8-kv peak RSS over bf16. Prints a table
// and writes JSON.
//
//   bench_model_shape [--model DIR | --shape NAME] [--work DIR] [--json PATH] [--batch 8] [--prompt-tokens 32]
//                     [--new-tokens 128] [--threads N] [--admission-prompts 32] [--admission-tokens 64]
//                     [--admission-store-generations 8] [--admission-batch 16]
//                     [--skip-admission] [--skip-baseline] [--skip-engines] [--baseline-seconds 90]
//                     [--python PATH] [--device cpu|cuda:N]   (engines, admission check and eager baseline on that device)
//
// Without --model the checkpoint is written (once; about a minute) under --work (default: bench-shapes/ next to
// this executable). The machine is usually shared: load from other processes hits every part, so read the ratios,
// which are measured in the same run, and note the load average printed with them.
#include "core/analysis/admission.h"
#include "core/common/device.h"
#include "core/common/progress.h"
#include "core/common/runtime.h"
#include "core/common/shell_quote.h"
#include "core/engine/engine.h"
#include "core/engine/paged_kv_cache.h"
#include "core/model/config.h"
#include "core/model/memory_check.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/store/run_store.h"
#include "core/train/zoo_shape.h"
#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/device.h"
#endif

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace mismatch;
namespace fs = std::filesystem;

namespace {

const auto processStart = std::chrono::steady_clock::now();

struct Arguments {
    std::string modelDir;
    std::string shape = "qwen3-0.6b";
    std::string workDir;
    std::string jsonPath = "bench_model_shape.json";
    std::int64_t batch = 8;
    std::int64_t promptTokens = 32;
    std::int64_t newTokens = 128;
    int threads = 0;
    std::int64_t admissionPrompts = 32;
    std::int64_t admissionTokens = 64;
    std::int64_t admissionStoreGenerations = analysis::AdmissionOptions {}.storedGenerations; // `admit`'s default
    std::int64_t admissionBatch = analysis::MeasureSettings {}.batchSize; // `admit --batch`'s default
    bool skipAdmission = false;
    bool skipBaseline = false;
    bool skipEngines = false; // the admission check alone (a 7-8B shape on a GPU, where the engines take long)
    double baselineSeconds = 90.0; // decode time budget of each eager run
    std::string python;
    // Child modes (the parent runs itself once per measurement).
    std::string child; // "engine" or "admission"
    std::string recipe; // engine child: bf16, fp8-w8a8-block, fp8-kv, fp32
    std::string device = "cpu"; // where the engines, the admission check and the eager baseline compute
};

[[noreturn]] void usage(int code)
{
    std::cerr << "usage: bench_model_shape [--model DIR | --shape NAME] [--work DIR] [--json PATH] [--batch N] "
                 "[--prompt-tokens N] [--new-tokens N] [--threads N] [--admission-prompts N] [--admission-tokens N] "
                 "[--admission-store-generations N] [--admission-batch N] "
                 "[--skip-admission] [--skip-baseline] [--skip-engines] [--baseline-seconds S] [--python PATH] [--device cpu|cuda:N]\n";
    std::exit(code);
}

Arguments parseArguments(int argc, char** argv)
{
    Arguments a;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "--skip-admission") {
            a.skipAdmission = true;
            continue;
        }
        if (flag == "--skip-baseline") {
            a.skipBaseline = true;
            continue;
        }
        if (flag == "--skip-engines") {
            a.skipEngines = true;
            continue;
        }
        if (flag == "--help" || flag == "-h") {
            usage(0);
        }
        if (i + 1 >= argc) {
            std::cerr << "bench_model_shape: " << flag << " needs a value\n";
            usage(2);
        }
        const std::string value = argv[++i];
        const auto integer = [&]() -> std::int64_t {
            try {
                return std::max<std::int64_t>(1, std::stoll(value));
            } catch (const std::exception&) {
                std::cerr << "bench_model_shape: " << flag << " expects an integer, got '" << value << "'\n";
                std::exit(2);
            }
        };
        if (flag == "--model") {
            a.modelDir = value;
        } else if (flag == "--shape") {
            a.shape = value;
        } else if (flag == "--work") {
            a.workDir = value;
        } else if (flag == "--json") {
            a.jsonPath = value;
        } else if (flag == "--batch") {
            a.batch = integer();
        } else if (flag == "--prompt-tokens") {
            a.promptTokens = integer();
        } else if (flag == "--new-tokens") {
            a.newTokens = integer();
        } else if (flag == "--threads") {
            a.threads = static_cast<int>(integer());
        } else if (flag == "--admission-prompts") {
            a.admissionPrompts = integer();
        } else if (flag == "--admission-tokens") {
            a.admissionTokens = integer();
        } else if (flag == "--admission-batch") {
            a.admissionBatch = integer();
        } else if (flag == "--admission-store-generations") {
            try {
                a.admissionStoreGenerations = std::max<std::int64_t>(0, std::stoll(value)); // 0: none stored
            } catch (const std::exception&) {
                std::cerr << "bench_model_shape: " << flag << " expects a whole number, got '" << value << "'\n";
                usage(2);
            }
        } else if (flag == "--baseline-seconds") {
            a.baselineSeconds = static_cast<double>(integer());
        } else if (flag == "--python") {
            a.python = value;
        } else if (flag == "--child") {
            a.child = value;
        } else if (flag == "--recipe") {
            a.recipe = value;
        } else if (flag == "--device") {
            a.device = value;
        } else {
            std::cerr << "bench_model_shape: unknown option " << flag << "\n";
            usage(2);
        }
    }
    return a;
}

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::uint64_t peakRssBytes()
{
    rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

// Device memory a child's job reserved on a CUDA device: free memory at its start minus free memory at its end.
// LibTorch's caching allocator keeps the blocks it reserved until they are released (the child releases nothing),
// so at the end this is about the job's peak reservation: what the memory plan's device check is about. -1 off a
// CUDA device or in a build without the cuda/ kernels.
class DeviceMemoryProbe {
public:
    explicit DeviceMemoryProbe(const std::string& device)
    {
#if defined(MISMATCH_HAVE_CUDA)
        const at::Device parsed = parseDevice(device, "bench_model_shape", "--device");
        if (parsed.is_cuda()) {
            index_ = parsed.has_index() ? parsed.index() : 0;
            cuda::releaseCachedMemory();
            start_ = cuda::freeMemoryBytes(index_);
        }
#else
        (void)device;
#endif
    }
    double reservedBytes() const
    {
#if defined(MISMATCH_HAVE_CUDA)
        if (start_) {
            if (const auto now = cuda::freeMemoryBytes(index_)) {
                return static_cast<double>(*start_) - static_cast<double>(*now);
            }
        }
#endif
        return -1.0;
    }

private:
    int index_ = 0;
    std::optional<std::size_t> start_;
};

std::string loadAverage()
{
    std::ifstream in("/proc/loadavg");
    std::string one, five, fifteen;
    in >> one >> five >> fifteen;
    return one + " " + five + " " + fifteen;
}

// Runs a command, returns its exit status; stdout and stderr go to the terminal.
int run(const std::string& command)
{
    std::fflush(stdout);
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

nlohmann::json readJson(const std::string& path)
{
    std::ifstream in(path);
    if (!in) {
        return nlohmann::json();
    }
    try {
        return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception&) {
        return nlohmann::json();
    }
}

void writeJson(const std::string& path, const nlohmann::json& value)
{
    std::ofstream out(path);
    out << value.dump(2) << "\n";
}

std::vector<engine::GenerationRequest> benchRequests(std::int64_t batch, std::int64_t promptTokens)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(7);
    const at::Tensor ids = at::randint(0, 256, {batch, promptTokens}, generator, at::TensorOptions().dtype(at::kLong));
    std::vector<engine::GenerationRequest> requests;
    for (std::int64_t row = 0; row < batch; ++row) {
        engine::GenerationRequest request;
        for (std::int64_t t = 0; t < promptTokens; ++t) {
            request.prompt.push_back(ids[row][t].item<std::int64_t>());
        }
        request.seed = static_cast<std::uint64_t>(row);
        requests.push_back(request);
    }
    return requests;
}

// ---------------------------------------------------------------------------------------------------------------
// Children

int engineChild(const Arguments& a)
{
    const DeviceMemoryProbe deviceMemory(a.device);
    const model::ModelConfig config = model::loadConfig(a.modelDir + "/config.json");
    const auto loadStart = std::chrono::steady_clock::now();
    model::TransformerWeights weights = onDevice(model::loadWeights(a.modelDir, config, model::LoadPrecision::Stored),
        parseDevice(a.device, "bench_model_shape", "--device"));
    const double loadSeconds = secondsSince(loadStart);

    std::optional<quant::RecipePlan> plan;
    engine::EngineOptions options;
    options.kvCacheBytes = 4ull << 30; // every request in one wave; storage grows with use
    if (a.recipe == "fp32") {
        options.precision = engine::EnginePrecision::Fp32;
    } else if (a.recipe != "bf16") {
        const std::string path = resourceDirectory() + "/recipes/" + a.recipe + ".yaml";
        plan = quant::resolveRecipe(quant::loadRecipe(path), config);
    }
    const std::vector<engine::GenerationRequest> requests = benchRequests(a.batch, a.promptTokens);
    const auto buildStart = std::chrono::steady_clock::now();
    engine::Engine engine(config, std::move(weights), plan, options);
    std::vector<std::vector<std::int64_t>> probes;
    for (const auto& request : requests) {
        probes.push_back(request.prompt);
    }
    engine.model().calibrateKvScales(probes); // what an analysis does (FP8 KV recipes only)
    const double buildSeconds = secondsSince(buildStart);

    engine::SamplingOptions sampling;
    sampling.greedy = true;
    sampling.ignoreEos = true;
    sampling.maxNewTokens = a.newTokens;
    std::optional<std::chrono::steady_clock::time_point> firstToken;
    Progress progress([&](double fraction, const std::string&) {
        if (!firstToken && fraction > 0.0) {
            firstToken = std::chrono::steady_clock::now();
        }
    });
    const auto generateStart = std::chrono::steady_clock::now();
    const std::vector<engine::GenerationResult> results = engine.generate(requests, sampling, &progress);
    const auto end = std::chrono::steady_clock::now();
    const double prefillSeconds = std::chrono::duration<double>(*firstToken - generateStart).count();
    const double decodeSeconds = std::chrono::duration<double>(end - *firstToken).count();
    std::int64_t tokens = 0;
    for (const auto& result : results) {
        tokens += static_cast<std::int64_t>(result.tokens.size());
    }
    const double decodeTokens = static_cast<double>(tokens - a.batch);
    writeJson(a.jsonPath,
        {{"recipe", a.recipe}, {"load_seconds", loadSeconds}, {"build_seconds", buildSeconds},
            {"time_to_first_token_seconds", std::chrono::duration<double>(*firstToken - processStart).count()},
            {"prefill_seconds", prefillSeconds},
            {"prefill_tokens_per_second", static_cast<double>(a.batch * a.promptTokens) / prefillSeconds},
            {"decode_seconds", decodeSeconds}, {"decode_tokens_per_second", decodeTokens / decodeSeconds},
            {"generate_seconds", std::chrono::duration<double>(end - generateStart).count()},
            {"generated_tokens", tokens}, {"peak_rss_bytes", peakRssBytes()},
            {"kv_storage_bytes", engine::peakKvStorageBytes()}, {"device_reserved_bytes", deviceMemory.reservedBytes()}});
    return 0;
}

int admissionChild(const Arguments& a)
{
    const fs::path scratch = fs::path(a.workDir) / ("admission-" + std::to_string(::getpid()));
    fs::remove_all(scratch);
    fs::create_directories(scratch);
    analysis::AdmissionOptions options;
    options.checkpoints = {a.modelDir};
    options.candidates
        = analysis::loadCandidates(resourceDirectory() + "/../tests/bench/shape-candidates.yaml");
    options.probePath = resourceDirectory() + "/prompts/arith-probe.jsonl";
    options.count = a.admissionPrompts;
    options.settings.maxNewTokens = a.admissionTokens;
    options.storedGenerations = a.admissionStoreGenerations;
    options.settings.batchSize = a.admissionBatch;
    options.threshold = 0.05;
    options.settings.device = parseDevice(a.device, "bench_model_shape", "--device");
    const DeviceMemoryProbe deviceMemory(a.device);
    const auto start = std::chrono::steady_clock::now();
    analysis::AdmissionResult result;
    {
        store::RunStore store = store::RunStore::open(store::databasePath(scratch.string()));
        Progress progress;
        result = analysis::runAdmission(store, options, progress);
    }
    const double seconds = secondsSince(start);
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : result.rows) {
        rows.push_back({{"candidate", row.candidate}, {"mismatch", row.mismatch}, {"low", row.interval.low},
            {"high", row.interval.high}, {"bf16_unit", row.bf16Unit ? *row.bf16Unit : 0.0},
            {"decision", analysis::toString(row.verdict)}, {"seconds", row.seconds}, {"tokens", row.tokens}});
    }
    fs::remove_all(scratch);
    writeJson(a.jsonPath,
        {{"seconds", seconds}, {"peak_rss_bytes", peakRssBytes()}, {"kv_storage_bytes", engine::peakKvStorageBytes()},
            {"device_reserved_bytes", deviceMemory.reservedBytes()}, {"candidates", options.candidates.size()}, {"prompts", a.admissionPrompts},
            {"max_tokens", a.admissionTokens}, {"stored_generations", a.admissionStoreGenerations}, {"batch", options.settings.batchSize}, {"rows", rows}});
    return 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Parent

struct MatmulRate {
    double fp32 = 0.0;
    double bf16 = 0.0;
};

double gflops(std::int64_t m, std::int64_t k, std::int64_t n, at::ScalarType dtype)
{
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(3);
    const at::Tensor a = at::randn({m, k}, generator).to(dtype);
    const at::Tensor b = at::randn({n, k}, generator).to(dtype);
    at::linear(a, b); // warm-up
    int repeats = 0;
    const auto start = std::chrono::steady_clock::now();
    do {
        at::linear(a, b);
        ++repeats;
    } while (secondsSince(start) < 1.0);
    return 2.0 * static_cast<double>(m * k * n) * repeats / secondsSince(start) / 1e9;
}

double copyGigabytesPerSecond()
{
    const std::int64_t elements = 64ll << 20; // 256 MiB of float32
    const at::Tensor source = at::ones({elements}, at::kFloat);
    at::Tensor target = at::empty({elements}, at::kFloat);
    target.copy_(source);
    int repeats = 0;
    const auto start = std::chrono::steady_clock::now();
    do {
        target.copy_(source);
        ++repeats;
    } while (secondsSince(start) < 1.0);
    return 2.0 * 4.0 * static_cast<double>(elements) * repeats / secondsSince(start) / 1e9;
}

std::string findPython(const std::string& given)
{
    std::vector<std::string> candidates;
    if (!given.empty()) {
        candidates.push_back(given);
    }
    candidates.insert(candidates.end(), {"/usr/bin/python3", "python3"});
    for (const std::string& python : candidates) {
        if (run(shellQuote(python) + " -c 'import torch' > /dev/null 2>&1") == 0) {
            return python;
        }
    }
    return {};
}

std::string gib(double bytes)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return text;
}

double number(const nlohmann::json& object, const char* key)
{
    return object.is_object() && object.contains(key) && object[key].is_number() ? object[key].get<double>() : 0.0;
}

} // namespace

// Long: the benchmark's script read in the order it runs (options, each case timed against its baseline in the
// same run, the printed table, the JSON file); every case is a few lines of one table.
int main(int argc, char** argv)
{
    prepareProcessEnvironment(argv);
    Arguments a = parseArguments(argc, argv);
    initializeRuntime(a.threads);
    const at::NoGradGuard noGrad;
    try {
        if (a.child == "engine") {
            return engineChild(a);
        }
        if (a.child == "admission") {
            return admissionChild(a);
        }
    } catch (const std::exception& error) {
        std::cerr << "bench_model_shape (" << a.child << " " << a.recipe << "): " << error.what() << "\n";
        return 1;
    }

    const fs::path self = fs::canonical("/proc/self/exe");
    if (a.workDir.empty()) {
        a.workDir = (self.parent_path() / "bench-shapes").string();
    }
    fs::create_directories(a.workDir);
    if (a.modelDir.empty()) {
        const train::ModelShape& shape = train::modelShape(a.shape);
        a.modelDir = (fs::path(a.workDir) / shape.name).string();
        const nlohmann::json record = readJson(a.modelDir + "/zoo_shape.json");
        if (!record.is_object() || !record.value("complete", false)) {
            std::cerr << "bench_model_shape: writing the " << shape.name << " shape to " << a.modelDir << "\n";
            Progress progress;
            train::writeModelShape(shape, a.modelDir, train::ZooShapeOptions {}, progress);
        }
    }
    const model::ModelConfig config = model::loadConfig(a.modelDir + "/config.json");
    const double weightBytes = 2.0 * static_cast<double>(config.parameterCount());
    const RuntimeInfo runtime = runtimeInfo();
    std::cerr << "bench_model_shape: " << a.modelDir << ", load average " << loadAverage() << "\n";

    // 1. The machine.
    const double fp32Prefill = gflops(256, 1024, 4096, at::kFloat);
    const double fp32Decode = gflops(8, 1024, 4096, at::kFloat);
    const double bf16Prefill = gflops(256, 1024, 4096, at::kBFloat16);
    const double bf16Decode = gflops(8, 1024, 4096, at::kBFloat16);
    const double copyRate = copyGigabytesPerSecond();

    // 2. The engine, one process per recipe.
    const std::string common = " --model " + shellQuote(a.modelDir) + " --work " + shellQuote(a.workDir) + " --batch "
        + std::to_string(a.batch) + " --prompt-tokens " + std::to_string(a.promptTokens) + " --new-tokens "
        + std::to_string(a.newTokens) + " --threads " + std::to_string(runtime.threads) + " --device "
        + shellQuote(a.device);
    const std::string temporary = (fs::path(a.workDir) / ("result-" + std::to_string(::getpid()))).string();
    nlohmann::json engines = nlohmann::json::object();
    const std::vector<std::string> recipes = a.skipEngines ? std::vector<std::string> {}
                                                           : std::vector<std::string> {"bf16", "fp8-w8a8-block", "fp8-kv", "fp32"};
    for (const std::string& recipe : recipes) {
        std::cerr << "bench_model_shape: engine " << recipe << "\n";
        const std::string json = temporary + "-" + recipe + ".json";
        fs::remove(json);
        const int status
            = run(shellQuote(self.string()) + " --child engine --recipe " + recipe + common + " --json " + json);
        engines[recipe] = status == 0 ? readJson(json) : nlohmann::json {{"error", "exit " + std::to_string(status)}};
        fs::remove(json);
        // As each finishes, so that a run cut short (a device's time limit) still shows what was measured.
        if (engines[recipe].contains("decode_tokens_per_second")) {
            std::printf("engine %s on %s: load %.2f s, TTFT %.2f s, prefill %.1f tok/s, decode %.2f tok/s\n",
                recipe.c_str(), a.device.c_str(), engines[recipe].value("load_seconds", 0.0),
                engines[recipe].value("time_to_first_token_seconds", 0.0),
                engines[recipe].value("prefill_tokens_per_second", 0.0),
                engines[recipe].value("decode_tokens_per_second", 0.0));
            std::fflush(stdout);
        }
    }

    // 3. The eager baseline.
    nlohmann::json eager = nlohmann::json::object();
    std::string eagerNote;
    const std::string script = resourceDirectory() + "/../tests/bench/eager_baseline.py";
    const std::string python = a.skipBaseline ? std::string() : findPython(a.python);
    if (a.skipBaseline) {
        eagerNote = "skipped (--skip-baseline)";
    } else if (python.empty()) {
        eagerNote = "skipped: no python3 with torch (apt-get install python3-torch)";
    } else {
        for (const std::string dtype : {"bf16", "fp32"}) {
            std::cerr << "bench_model_shape: eager PyTorch " << dtype << " (" << python << ")\n";
            const std::string json = temporary + "-eager-" + dtype + ".json";
            fs::remove(json);
            const int status = run(shellQuote(python) + " " + shellQuote(script) + " --model "
                + shellQuote(a.modelDir) + " --dtype " + dtype + " --batch " + std::to_string(a.batch)
                + " --prompt-tokens " + std::to_string(a.promptTokens) + " --new-tokens "
                + std::to_string(a.newTokens) + " --threads " + std::to_string(runtime.threads)
                + " --max-decode-seconds " + std::to_string(a.baselineSeconds) + " --device " + shellQuote(a.device)
                + " --json " + json + " > /dev/null");
            eager[dtype] = status == 0 ? readJson(json) : nlohmann::json {{"error", "exit " + std::to_string(status)}};
            fs::remove(json);
            if (eager[dtype].contains("decode_tokens_per_second")) {
                std::printf("eager PyTorch %s on %s: TTFT %.2f s, prefill %.1f tok/s, decode %.2f tok/s\n",
                    dtype.c_str(), a.device.c_str(), eager[dtype].value("time_to_first_token_seconds", 0.0),
                    eager[dtype].value("prefill_tokens_per_second", 0.0),
                    eager[dtype].value("decode_tokens_per_second", 0.0));
                std::fflush(stdout);
            }
        }
    }

    // 4. Admission.
    nlohmann::json admission;
    if (!a.skipAdmission) {
        std::cerr << "bench_model_shape: admission check, six candidates\n";
        const std::string json = temporary + "-admission.json";
        fs::remove(json);
        const int status = run(shellQuote(self.string()) + " --child admission" + common + " --admission-prompts "
            + std::to_string(a.admissionPrompts) + " --admission-tokens " + std::to_string(a.admissionTokens)
            + " --admission-store-generations " + std::to_string(a.admissionStoreGenerations)
            + " --admission-batch " + std::to_string(a.admissionBatch)
            + " --json " + json);
        admission = status == 0 ? readJson(json) : nlohmann::json {{"error", "exit " + std::to_string(status)}};
        fs::remove(json);
    }

    // Table.
    std::printf("model: %s (%lld parameters, BF16 weights %s), threads %d, load average %s\n", a.modelDir.c_str(),
        static_cast<long long>(config.parameterCount()), gib(weightBytes).c_str(), runtime.threads,
        loadAverage().c_str());
    std::printf("machine: matmul fp32 %.1f GFLOP/s (256x1024x4096), %.1f (8x1024x4096); bf16 %.1f, %.1f; copy %.1f "
                "GB/s (read + write)\n",
        fp32Prefill, fp32Decode, bf16Prefill, bf16Decode, copyRate);
    std::printf("workload: %lld prompts x %lld tokens, %lld new tokens, greedy\n", static_cast<long long>(a.batch),
        static_cast<long long>(a.promptTokens), static_cast<long long>(a.newTokens));
    std::printf("%-22s %9s %9s %12s %12s %10s %11s\n", "run", "load s", "TTFT s", "prefill t/s", "decode t/s",
        "decode s", "peak RSS");
    const auto row = [](const std::string& name, const nlohmann::json& r) {
        if (!r.is_object() || r.contains("error")) {
            std::printf("%-22s %s\n", name.c_str(), r.is_object() ? r["error"].get<std::string>().c_str() : "missing");
            return;
        }
        std::printf("%-22s %9.2f %9.2f %12.1f %12.2f %10.2f %11s", name.c_str(), number(r, "load_seconds"),
            number(r, "time_to_first_token_seconds"), number(r, "prefill_tokens_per_second"),
            number(r, "decode_tokens_per_second"), number(r, "decode_seconds"), gib(number(r, "peak_rss_bytes")).c_str());
        if (number(r, "device_reserved_bytes") > 0) {
            std::printf("  (device %s)", gib(number(r, "device_reserved_bytes")).c_str());
        }
        std::printf("\n");
    };
    for (const auto& [name, r] : engines.items()) {
        row("engine " + name, r);
    }
    for (const auto& [name, r] : eager.items()) {
        row("eager pytorch " + name, r);
    }
    if (!eagerNote.empty()) {
        std::printf("eager pytorch: %s\n", eagerNote.c_str());
    }

    nlohmann::json ratios = nlohmann::json::object();
    const double engineDecode = number(engines["bf16"], "decode_tokens_per_second");
    const double bf16DecodeSeconds = number(engines["bf16"], "decode_seconds");
    if (number(eager["bf16"], "decode_tokens_per_second") > 0 && engineDecode > 0) {
        ratios["decode_bf16_vs_eager_bf16"] = engineDecode / number(eager["bf16"], "decode_tokens_per_second");
    }
    if (number(eager["fp32"], "decode_tokens_per_second") > 0 && engineDecode > 0) {
        ratios["decode_bf16_vs_eager_fp32"] = engineDecode / number(eager["fp32"], "decode_tokens_per_second");
    }
    if (bf16DecodeSeconds > 0) {
        ratios["fp8_w8a8_decode_time_vs_bf16"] = number(engines["fp8-w8a8-block"], "decode_seconds") / bf16DecodeSeconds;
        ratios["fp8_kv_decode_time_vs_bf16"] = number(engines["fp8-kv"], "decode_seconds") / bf16DecodeSeconds;
        ratios["fp32_decode_time_vs_bf16"] = number(engines["fp32"], "decode_seconds") / bf16DecodeSeconds;
    }
    if (number(engines["bf16"], "peak_rss_bytes") > 0) {
        ratios["fp8_kv_peak_rss_vs_bf16"]
            = number(engines["fp8-kv"], "peak_rss_bytes") / number(engines["bf16"], "peak_rss_bytes");
        ratios["bf16_peak_rss_vs_weights"] = number(engines["bf16"], "peak_rss_bytes") / weightBytes;
    }
    ratios["bf16_time_to_first_token_seconds"] = number(engines["bf16"], "time_to_first_token_seconds");
    for (const auto& [key, value] : ratios.items()) {
        std::printf("%-36s %8.3f\n", key.c_str(), value.get<double>());
    }
    if (admission.is_object() && !admission.contains("error")) {
        const double rss = number(admission, "peak_rss_bytes");
        const double kv = number(admission, "kv_storage_bytes");
        ratios["admission_rss_vs_weights"] = rss / weightBytes;
        ratios["admission_rss_less_kv_vs_weights"] = (rss - kv) / weightBytes;
        std::printf("admission: %zu candidates + BF16 unit, %lld prompts x %lld tokens: %.1f s, peak RSS %s (%.2fx the "
                    "BF16 weights; %.2fx after the %s of KV storage)\n",
            admission["rows"].size(), static_cast<long long>(a.admissionPrompts),
            static_cast<long long>(a.admissionTokens), number(admission, "seconds"), gib(rss).c_str(),
            rss / weightBytes, (rss - kv) / weightBytes, gib(kv).c_str());
        if (number(admission, "device_reserved_bytes") > 0) {
            std::printf("admission: device memory reserved %s (%.2fx the BF16 weights)\n",
                gib(number(admission, "device_reserved_bytes")).c_str(),
                number(admission, "device_reserved_bytes") / weightBytes);
        }
        for (const auto& r : admission["rows"]) {
            std::printf("  %-18s mismatch %.3g [%.3g, %.3g]  %.0fx BF16  %s  %.1f s\n",
                r["candidate"].get<std::string>().c_str(), number(r, "mismatch"), number(r, "low"),
                number(r, "high"), number(r, "bf16_unit") > 0 ? number(r, "mismatch") / number(r, "bf16_unit") : 0.0,
                r["decision"].get<std::string>().c_str(), number(r, "seconds"));
        }
    } else if (!a.skipAdmission) {
        std::printf("admission: failed (%s)\n", admission.is_object() ? admission.value("error", "").c_str() : "?");
    }

    const nlohmann::json report = {{"benchmark", "bench_model_shape"}, {"model", a.modelDir},
        {"parameters", config.parameterCount()}, {"bf16_weight_bytes", weightBytes}, {"threads", runtime.threads},
        {"device", a.device},
        {"torch", runtime.torchVersion}, {"load_average", loadAverage()}, {"batch", a.batch},
        {"prompt_tokens", a.promptTokens}, {"new_tokens", a.newTokens},
        {"machine",
            {{"matmul_fp32_gflops_256x1024x4096", fp32Prefill}, {"matmul_fp32_gflops_8x1024x4096", fp32Decode},
                {"matmul_bf16_gflops_256x1024x4096", bf16Prefill}, {"matmul_bf16_gflops_8x1024x4096", bf16Decode},
                {"copy_gigabytes_per_second", copyRate}}},
        {"engine", engines}, {"eager_pytorch", eager}, {"eager_note", eagerNote}, {"admission", admission},
        {"ratios", ratios}};
    writeJson(a.jsonPath, report);
    std::printf("wrote %s\n", a.jsonPath.c_str());
    return 0;
}

// Training-loop benchmark: optimizer steps per second of OPD on the demo pair (BF16 engine, full-vocabulary
// reverse KL) with the synchronous loop (rollout, then train) against the asynchronous loop (a rollout thread
// generates the next batches with weights k steps old while the trainer trains) for k = 1 and 2, plus the
// synchronous loop at the same staleness (the same arithmetic without the overlap, so the ratio isolates the
// overlap). Every configuration runs the same number of steps in a fresh workspace; the configurations
// alternate --repeats times and medians are reported, so that load from other processes hits all alike.
// The ratio is against the synchronous k = 0 loop measured in the same run.
// Second, the OPD full-KL loss at a real vocabulary (Qwen3's 151,936 tokens, --loss-tokens positions, float32):
// forward and backward of train::opdFullKl (its own backward, row groups, the statistics included) against autograd
// through the definition (log_softmax, exp, product, sum; no statistics) measured in the same run, each in a child
// process of its own for its wall time and its peak RSS above the inputs. Prints tables and writes JSON.
//
//   bench_train [--json PATH] [--steps N] [--prompts N] [--repeats N] [--threads N] [--loss-tokens N]
#include "core/common/progress.h"
#include "core/common/runtime.h"
#include "core/common/shell_quote.h"
#include "core/train/objectives.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"

#include <ATen/ATen.h>
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

#include <sys/resource.h>
#include <unistd.h>

using namespace mismatch;
namespace fs = std::filesystem;

namespace {

struct Arguments {
    std::string jsonPath = "bench_train.json";
    int steps = 8;
    int prompts = 16;
    int repeats = 2;
    int threads = 0;
    int lossTokens = 512;
    std::string lossChild; // internal: "fused" or "definition", run one loss measurement and print its JSON
};

int positive(const char* flag, const char* value)
{
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    if (!value[0] || *end || parsed < 0) {
        std::cerr << "bench_train: " << flag << " expects a non-negative integer, got '" << value << "'\n";
        std::exit(2);
    }
    return static_cast<int>(parsed);
}

Arguments parseArguments(int argc, char** argv)
{
    Arguments a;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) {
            std::cerr << "bench_train: " << flag << " needs a value\n";
            std::exit(2);
        }
        const char* value = argv[++i];
        if (flag == "--json") {
            a.jsonPath = value;
        } else if (flag == "--steps") {
            a.steps = std::max(1, positive("--steps", value));
        } else if (flag == "--prompts") {
            a.prompts = std::max(1, positive("--prompts", value));
        } else if (flag == "--repeats") {
            a.repeats = std::max(1, positive("--repeats", value));
        } else if (flag == "--threads") {
            a.threads = positive("--threads", value);
        } else if (flag == "--loss-tokens") {
            a.lossTokens = positive("--loss-tokens", value);
        } else if (flag == "--loss-child") {
            a.lossChild = value;
        } else {
            std::cerr << "bench_train: unknown option " << flag
                      << " (expected --json, --steps, --prompts, --repeats, --threads, --loss-tokens)\n";
            std::exit(2);
        }
    }
    return a;
}

struct Loop {
    const char* label;
    int staleness;
    bool asynchronous;
    std::vector<double> seconds;
};

// Resident set now (VmRSS), bytes.
std::uint64_t residentBytes()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stoull(line.substr(6)) * 1024;
        }
    }
    return 0;
}

// One loss measurement (a child process): forward and backward at `tokens` x 151,936, printing one JSON line.
int lossChild(const std::string& variant, int tokens)
{
    constexpr std::int64_t kVocabulary = 151936;
    if (variant != "fused" && variant != "definition") {
        std::cerr << "bench_train: --loss-child expects fused or definition, got '" << variant << "'\n";
        return 2;
    }
    at::manual_seed(5);
    // In place, so that making the inputs never holds more than one [tokens, vocab] temporary beside them (the peak
    // reported is the process's, above the inputs: the loss's own must exceed that temporary, which it does).
    const at::Tensor logits = at::randn({tokens, kVocabulary}).mul_(2.0).requires_grad_(true);
    const at::Tensor teacher = at::log_softmax(at::randn({tokens, kVocabulary}).mul_(2.0), -1);
    const at::Tensor real = at::ones({tokens}, at::kBool);
    const std::uint64_t inputs = residentBytes();
    const auto start = std::chrono::steady_clock::now();
    double loss = 0.0;
    if (variant == "fused") {
        const train::ObjectiveResult result = train::opdFullKl(logits, teacher, real);
        result.loss.backward();
        loss = result.loss.item<double>();
    } else {
        const at::Tensor logP = at::log_softmax(logits, -1);
        const at::Tensor value = (logP.exp() * (logP - teacher)).sum(-1).mean();
        value.backward();
        loss = value.item<double>();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    struct rusage usage {};
    ::getrusage(RUSAGE_SELF, &usage);
    const auto peak = static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
    std::cout << nlohmann::json {{"variant", variant}, {"seconds", seconds}, {"loss", loss},
                     {"peak_above_inputs_bytes", peak > inputs ? peak - inputs : 0}, {"inputs_rss_bytes", inputs}}
                     .dump()
              << std::endl;
    return 0;
}

// Runs this program as a loss child and reads its JSON line (an object with "error" when it failed).
nlohmann::json runLossChild(const std::string& variant, const Arguments& a)
{
    const std::string command = shellQuote(fs::canonical("/proc/self/exe").string()) + " --loss-child " + variant
        + " --loss-tokens " + std::to_string(a.lossTokens) + " --threads " + std::to_string(a.threads);
    std::FILE* pipe = ::popen(command.c_str(), "r");
    std::string output;
    char buffer[4096];
    while (pipe && std::fgets(buffer, sizeof buffer, pipe)) {
        output += buffer;
    }
    const int status = pipe ? ::pclose(pipe) : -1;
    const std::size_t line = output.rfind('{');
    if (status != 0 || line == std::string::npos) {
        return {{"variant", variant}, {"error", "the child exited with status " + std::to_string(status)}};
    }
    return nlohmann::json::parse(output.substr(line));
}

} // namespace

int main(int argc, char** argv)
{
    prepareProcessEnvironment(argv);
    const Arguments a = parseArguments(argc, argv);
    initializeRuntime(a.threads);
    if (!a.lossChild.empty()) {
        return lossChild(a.lossChild, a.lossTokens);
    }
    const fs::path resources(resourceDirectory());
    if (!fs::exists(resources / "models/arith-student/config.json")) {
        std::cerr << "bench_train: the demo pair is missing under " << resources << "\n";
        return 1;
    }
    std::vector<Loop> loops = {{"sync k=0", 0, false, {}}, {"sync k=1", 1, false, {}}, {"async k=1", 1, true, {}},
        {"sync k=2", 2, false, {}}, {"async k=2", 2, true, {}}};
    const fs::path scratch = fs::temp_directory_path() / ("bench_train-" + std::to_string(::getpid()));
    for (int repeat = 0; repeat < a.repeats; ++repeat) {
        for (Loop& loop : loops) {
            fs::remove_all(scratch);
            fs::create_directories(scratch);
            const std::string text = "name: bench\nstudent: " + (resources / "models/arith-student").string()
                + "\nteacher: " + (resources / "models/arith-teacher").string() + "\nprompts: "
                + (resources / "prompts/arith-train.jsonl").string()
                + "\nobjective: opd_full_kl\nrollout:\n  staleness: " + std::to_string(loop.staleness)
                + "\n  asynchronous: " + (loop.asynchronous ? "true" : "false")
                + "\n  sampling: {temperature: 1.0, max_tokens: 16, seed: 1}\n"
                  "optimizer: {learning_rate: 3.0e-3, warmup_steps: 2}\nbatch: {prompts_per_step: "
                + std::to_string(a.prompts) + "}\nsteps: " + std::to_string(a.steps) + "\nseed: 3\n";
            const train::RunConfig config = train::parseRunConfig(text, "bench_train", scratch.string());
            store::RunStore store = store::RunStore::open(store::databasePath(scratch.string()));
            Progress progress;
            const auto start = std::chrono::steady_clock::now();
            train::runTraining(config, store, progress);
            loop.seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
    }
    fs::remove_all(scratch);

    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
    };
    const double baseline = a.steps / median(loops.front().seconds);
    nlohmann::json results = nlohmann::json::array();
    std::printf("%-10s %12s %14s %10s\n", "loop", "steps/s", "s per step", "vs sync");
    for (const Loop& loop : loops) {
        const double rate = a.steps / median(loop.seconds);
        std::printf("%-10s %12.3f %14.3f %9.2fx\n", loop.label, rate, 1.0 / rate, rate / baseline);
        results.push_back({{"loop", loop.label}, {"staleness", loop.staleness}, {"asynchronous", loop.asynchronous},
            {"steps_per_second", rate}, {"ratio_to_sync", rate / baseline}, {"seconds", loop.seconds}});
    }

    // The OPD loss at a real vocabulary, each variant in its own process.
    const nlohmann::json fused = runLossChild("fused", a);
    const nlohmann::json definition = runLossChild("definition", a);
    nlohmann::json loss = {{"tokens", a.lossTokens}, {"vocabulary", 151936}, {"fused", fused}, {"definition", definition}};
    std::printf("\nOPD full-KL loss, forward + backward, %d tokens x 151,936, float32\n", a.lossTokens);
    std::printf("%-34s %10s %22s\n", "variant", "seconds", "peak above inputs GB");
    const auto row = [](const char* label, const nlohmann::json& r) {
        if (r.contains("error")) {
            std::printf("%-34s %s\n", label, r["error"].get<std::string>().c_str());
            return;
        }
        std::printf("%-34s %10.2f %22.2f\n", label, r["seconds"].get<double>(),
            static_cast<double>(r["peak_above_inputs_bytes"].get<std::uint64_t>()) / 1e9);
    };
    row("train::opdFullKl (own backward)", fused);
    row("autograd through the definition", definition);
    if (!fused.contains("error") && !definition.contains("error")) {
        loss["time_ratio"] = fused["seconds"].get<double>() / definition["seconds"].get<double>();
        loss["memory_ratio"] = static_cast<double>(fused["peak_above_inputs_bytes"].get<std::uint64_t>())
            / static_cast<double>(std::max<std::uint64_t>(1, definition["peak_above_inputs_bytes"].get<std::uint64_t>()));
        std::printf("ratios against the definition: time %.2fx, memory above the inputs %.2fx\n",
            loss["time_ratio"].get<double>(), loss["memory_ratio"].get<double>());
    }
    const nlohmann::json out = {{"benchmark", "bench_train"}, {"model", "arith-student <- arith-teacher"},
        {"steps", a.steps}, {"prompts_per_step", a.prompts}, {"repeats", a.repeats}, {"threads", runtimeInfo().threads},
        {"note", "each run includes loading the models and the step-0 setup, the same for every loop"},
        {"loops", results}, {"opd_loss_real_vocabulary", loss}};
    std::ofstream(a.jsonPath) << out.dump(2) << "\n";
    return 0;
}

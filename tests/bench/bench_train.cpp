// Training-loop benchmark: optimizer steps per second of OPD on the demo pair (BF16 engine, full-vocabulary
// reverse KL) with the synchronous loop (rollout, then train) against the asynchronous loop (a rollout thread
// generates the next batches with weights k steps old while the trainer trains) for k = 1 and 2, plus the
// synchronous loop at the same staleness (the same arithmetic without the overlap, so the ratio isolates the
// overlap). Every configuration runs the same number of steps in a fresh workspace; the configurations
// alternate --repeats times and medians are reported, so that load from other processes hits all alike.
// The ratio is against the synchronous k = 0 loop measured in the same run. Prints a table and writes JSON.
//
//   bench_train [--json PATH] [--steps N] [--prompts N] [--repeats N] [--threads N]
#include "core/common/progress.h"
#include "core/common/runtime.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"

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
        } else {
            std::cerr << "bench_train: unknown option " << flag
                      << " (expected --json, --steps, --prompts, --repeats, --threads)\n";
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

} // namespace

int main(int argc, char** argv)
{
    prepareProcessEnvironment(argv);
    const Arguments a = parseArguments(argc, argv);
    initializeRuntime(a.threads);
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
    const nlohmann::json out = {{"benchmark", "bench_train"}, {"model", "arith-student <- arith-teacher"},
        {"steps", a.steps}, {"prompts_per_step", a.prompts}, {"repeats", a.repeats}, {"threads", runtimeInfo().threads},
        {"note", "each run includes loading the models and the step-0 setup, the same for every loop"},
        {"loops", results}};
    std::ofstream(a.jsonPath) << out.dump(2) << "\n";
    return 0;
}

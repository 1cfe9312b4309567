// Test helper: one writer process appending steps to a run, as a headless training run does.
// usage: store_writer DB STEPS BATCH SLEEP_MS
// Step s of the run stores mismatch_kl = stepValue(s); prints "run ID" once the run exists, then "committed N"
// after each committed batch, so that the parent can kill it at a known point.
#include "core/store/run_store.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

using namespace mismatch::store;

static double stepValue(long long step)
{
    return 0.001 * static_cast<double>(step) + 0.5;
}

int main(int argc, char** argv)
{
    if (argc != 5) {
        std::fprintf(stderr, "usage: store_writer DB STEPS BATCH SLEEP_MS\n");
        return 2;
    }
    const long long steps = std::atoll(argv[2]);
    const long long batch = std::atoll(argv[3]);
    const int sleepMs = std::atoi(argv[4]);
    RunStore store = RunStore::open(argv[1]);
    const auto runId = store.beginRun({"writer", "train", "{\"writer\":true}", std::nullopt});
    std::printf("run %lld\n", static_cast<long long>(runId));
    std::fflush(stdout);
    for (long long first = 0; first < steps; first += batch) {
        std::vector<StepMetrics> metrics;
        for (long long s = first; s < std::min(steps, first + batch); ++s) {
            StepMetrics m;
            m.step = s;
            m.mismatchKl = stepValue(s);
            m.loss = 1.0 / (1.0 + static_cast<double>(s));
            m.extrasJson = "{\"step\":" + std::to_string(s) + "}";
            metrics.push_back(m);
        }
        store.appendSteps(runId, metrics);
        std::printf("committed %lld\n", std::min(steps, first + batch));
        std::fflush(stdout);
        if (sleepMs > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(sleepMs));
        }
    }
    store.finishRun(runId, RunStatus::Finished);
    return 0;
}

#pragma once
// Options shared by the analysis commands (sensitivity, recipe build, admit, prefix-shift): prompt count,
// sampling, bootstrap and engine memory, plus Ctrl-C as a cancel of the running job.
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace mismatch::cli {

struct AnalysisArguments {
    std::int64_t count = 0;
    analysis::MeasureSettings settings;
    std::string kvMemory = "256MiB";
};

// Adds --count, --max-tokens, --seed, --temperature, --top-p, --top-k, --batch, --resamples, --confidence,
// --bootstrap-seed and --kv-memory to `command`.
void addAnalysisOptions(CLI::App* command, AnalysisArguments& arguments);
// The settings with --kv-memory parsed (InputError for a malformed size).
analysis::MeasureSettings resolveSettings(const AnalysisArguments& arguments);

// While alive, SIGINT cancels `progress` (the job stops at its next boundary, stores what it finished and marks
// its run cancelled; the command exits 130) instead of killing the process.
class CancelOnInterrupt {
public:
    explicit CancelOnInterrupt(Progress& progress);
    ~CancelOnInterrupt();
    CancelOnInterrupt(const CancelOnInterrupt&) = delete;
    CancelOnInterrupt& operator=(const CancelOnInterrupt&) = delete;

private:
    void (*previous_)(int);
};

nlohmann::json intervalJson(const metrics::Interval& interval);
// "0.0123 [0.0101, 0.0150]"
std::string intervalText(const metrics::Interval& interval, int precision = 4);

} // namespace mismatch::cli

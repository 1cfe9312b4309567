#pragma once
// What the analysis commands share: Ctrl-C as a cancel of the running job, and the interval's JSON and text. (Their
// sampling, bootstrap and engine-memory options are the catalogue's parameters: core/jobs/analysis_jobs.h.)
#include "core/analysis/protocol.h"
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace mismatch::cli {

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

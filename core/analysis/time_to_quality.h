#pragma once
// Time to quality (`mismatch time-to-quality`, spec "Time to quality"): the synchronous BF16-engine run of a base
// run file against a candidate rollout configuration (a recipe, staleness, asynchronous loop), both trained in
// one invocation; the target is the baseline's quality Q at a chosen evaluated step, and each run's time to it is
// the wall time of the first evaluated step whose Q is at or below the target (train::timeToQuality). Speedup =
// baseline time / candidate time. On the CPU the FP8 formats are emulated (slower than BF16), so the speedup
// measured there says what the loop and staleness buy, not what FP8 hardware buys.
#include "core/common/progress.h"
#include "core/store/run_store.h"
#include "core/train/quality.h"
#include "core/train/run_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace mismatch::analysis {

struct TimeToQualityOptions {
    train::RunConfig base; // its rollout settings are replaced by the two configurations below
    std::string recipe; // the candidate's recipe (empty: BF16)
    std::int64_t staleness = 1; // the candidate's staleness
    bool asynchronous = true; // the candidate's loop
    std::optional<std::int64_t> targetStep; // evaluated step of the baseline whose Q is the target (default: last)
    std::string workspaceDirectory;
};

struct TimeToQualityRun {
    std::string label;
    std::int64_t runId = 0;
    train::TimeToQuality reached;
    double totalSeconds = 0.0; // the whole run
};

struct TimeToQualityResult {
    std::int64_t runId = 0; // the analysis' own run (kind "time_to_quality"; its config_json holds the result)
    double targetQuality = 0.0;
    std::int64_t targetStep = 0;
    TimeToQualityRun baseline;
    TimeToQualityRun candidate;
    std::optional<double> speedup; // baseline seconds / candidate seconds, when both reached the target and the
                                   // candidate after step 0 (a run already there before training has none)
};

// What runTimeToQuality refuses before it stores anything: InputError(the run file, "evaluation", ...) for a base
// without a teacher or evaluation set; InputError("time-to-quality", PARAMETER, ...) naming the job's parameter
// ("target_step", "staleness") for a target step the base does not evaluate or a negative staleness.
void checkTimeToQualityOptions(const TimeToQualityOptions& options);

// checkTimeToQualityOptions first. Progress over both runs.
// Stored as a run of kind "time_to_quality" (the two training runs are ordinary runs); cancelled or failed, that
// run is marked so and its training runs keep their whole steps.
TimeToQualityResult runTimeToQuality(store::RunStore& store, const TimeToQualityOptions& options, Progress& progress);

// The result as `mismatch time-to-quality --json` prints it and the analysis run stores it ("result").
nlohmann::json timeToQualityJson(const TimeToQualityResult& result);

} // namespace mismatch::analysis

#pragma once
// The spec's failure rule between two runs' evaluations at one step: `mismatch compare`, the GUI's comparison
// dialog and compare-objectives use it; calibrate pairs its replicates with the same pairing
// (store::qualitiesInOrderOf, which refuses evaluations of different problems in either direction).
#include "core/metrics/bootstrap.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <string>

namespace mismatch::analysis {

// The failure rule on `run` against `baseline`, their problems paired by id in the baseline's order (the
// bootstrap draws indices, so a fixed order makes the interval depend only on the pairs and the seed). Error when
// the two evaluated different problems (either way; counts and an example of each side named) or when Q_base is
// not positive (the relative change is undefined).
metrics::FailureVerdict compareEvaluations(
    const store::Evaluation& run, const store::Evaluation& baseline, const metrics::FailureRuleOptions& options);

struct RunComparison {
    store::RunInfo run;
    store::RunInfo baseline;
    store::Evaluation runEvaluation;
    store::Evaluation baseEvaluation;
    metrics::FailureVerdict verdict;
    std::size_t problems = 0;         // paired problems
};

// compareEvaluations on two stored runs' evaluations at `step`. StoreError for an unknown run, or a run without an
// evaluation at `step` (its evaluated steps listed).
RunComparison compareRuns(const store::RunStore& store, std::int64_t runId, std::int64_t baselineId, std::int64_t step,
    const metrics::FailureRuleOptions& options);

// "run 7 (opd-fp8)"
std::string runLabel(const store::RunInfo& run);

}  // namespace mismatch::analysis

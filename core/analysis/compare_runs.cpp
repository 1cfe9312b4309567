#include "core/analysis/compare_runs.h"

#include "core/common/error.h"

#include <cstdio>

namespace mismatch::analysis {

namespace {

store::RunInfo requireRun(const store::RunStore& store, std::int64_t id)
{
    auto run = store.run(id);
    if (!run) {
        throw StoreError(store.path(), "has no run with id " + std::to_string(id) + " (see `mismatch store runs`)");
    }
    return *run;
}

store::Evaluation requireEvaluation(const store::RunStore& store, const store::RunInfo& run, std::int64_t step)
{
    auto evaluation = store::evaluationAt(store, run.id, step);
    if (evaluation) {
        return *evaluation;
    }
    const auto all = store::evaluations(store, run.id);
    std::string steps;
    for (const auto& summary : all) {
        steps += (steps.empty() ? "" : ", ") + std::to_string(summary.step);
    }
    throw StoreError(store.path(),
        runLabel(run) + " has no evaluation at step " + std::to_string(step)
            + (all.empty() ? " (it has no evaluations)" : " (evaluated steps: " + steps + ")"));
}

}  // namespace

std::string runLabel(const store::RunInfo& run)
{
    return "run " + std::to_string(run.id) + " (" + run.name + ")";
}

metrics::FailureVerdict compareEvaluations(
    const store::Evaluation& run, const store::Evaluation& baseline, const metrics::FailureRuleOptions& options)
{
    const std::vector<double> qRun = store::qualitiesInOrderOf(run, baseline);
    const std::vector<double> qBase = store::qualitiesInOrderOf(baseline, baseline);
    const double qualityBase = baseline.summary.quality;
    if (!(qualityBase > 0.0)) {
        char value[32];
        std::snprintf(value, sizeof value, "%.6g", qualityBase);
        throw Error("run " + std::to_string(baseline.summary.runId) + " has quality Q_base = " + value + " at step "
            + std::to_string(baseline.summary.step) + ": the relative change (Q_run - Q_base) / Q_base is undefined");
    }
    return metrics::applyFailureRule(qRun, qBase, options);
}

RunComparison compareRuns(const store::RunStore& store, std::int64_t runId, std::int64_t baselineId, std::int64_t step,
    const metrics::FailureRuleOptions& options)
{
    RunComparison c;
    c.run = requireRun(store, runId);
    c.baseline = requireRun(store, baselineId);
    c.runEvaluation = requireEvaluation(store, c.run, step);
    c.baseEvaluation = requireEvaluation(store, c.baseline, step);
    c.verdict = compareEvaluations(c.runEvaluation, c.baseEvaluation, options);
    c.problems = c.baseEvaluation.problems.size();
    return c;
}

}  // namespace mismatch::analysis

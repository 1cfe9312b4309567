#include "core/analysis/time_to_quality.h"

#include "core/common/error.h"
#include "core/store/evaluation_store.h"
#include "core/train/trainer.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace mismatch::analysis {

void checkTimeToQualityOptions(const TimeToQualityOptions& options)
{
    const train::RunConfig& base = options.base;
    const std::string source = base.sourceFile.empty() ? "time-to-quality" : base.sourceFile;
    if (base.evaluation.prompts.empty() || base.teacher.empty()) {
        throw InputError(source, "evaluation", "time to quality needs evaluation.prompts and a teacher (quality is "
                                               "the student's KL to the teacher)");
    }
    const std::int64_t targetStep = options.targetStep.value_or(base.steps);
    const bool evaluated = targetStep == base.steps
        || (base.evaluation.every > 0 && targetStep > 0 && targetStep < base.steps && targetStep % base.evaluation.every == 0);
    if (!evaluated) {
        throw InputError("time-to-quality", "target_step",
            "step " + std::to_string(targetStep) + " is not evaluated by the run " + source + " (every "
                + std::to_string(base.evaluation.every) + " steps and at the last, " + std::to_string(base.steps) + ")");
    }
    if (options.staleness < 0) {
        throw InputError("time-to-quality", "staleness", "must be >= 0, got " + std::to_string(options.staleness));
    }
}

TimeToQualityResult runTimeToQuality(store::RunStore& store, const TimeToQualityOptions& options, Progress& progress)
{
    checkTimeToQualityOptions(options);
    const train::RunConfig& base = options.base;
    const std::int64_t targetStep = options.targetStep.value_or(base.steps);
    train::RunConfig baseline = base;
    baseline.name = base.name + "/ttq-sync-bf16";
    baseline.rollout.recipe.clear();
    baseline.rollout.noise.sigma = 0.0;
    baseline.rollout.staleness = 0;
    baseline.rollout.asynchronous = false;
    train::RunConfig candidate = baseline;
    candidate.rollout.recipe = options.recipe.empty() ? std::string() : fs::absolute(options.recipe).string();
    candidate.rollout.staleness = options.staleness;
    candidate.rollout.asynchronous = options.asynchronous;
    candidate.name = base.name + "/ttq-" + (options.asynchronous ? "async" : "sync") + "-k"
        + std::to_string(options.staleness) + (options.recipe.empty() ? "" : "-" + fs::path(options.recipe).stem().string());

    TimeToQualityResult result;
    result.targetStep = targetStep;
    nlohmann::json record = {{"run_file", base.sourceFile}, {"base", base.name},
        {"recipe", candidate.rollout.recipe}, {"staleness", options.staleness},
        {"asynchronous", options.asynchronous}, {"target_step", targetStep}};
    result.runId = store.beginRun({"time-to-quality " + base.name, "time_to_quality", record.dump(), std::nullopt});
    return store::recordRunOutcome(store, result.runId, [&] {
        train::TrainOptions trainOptions;
        trainOptions.workspaceDirectory = options.workspaceDirectory;
        const auto train = [&](const train::RunConfig& config, double offset, const std::string& label) {
            Progress runProgress = progress.child(offset, offset + 0.5, label);
            progress.checkCancelled();
            return train::runTraining(config, store, runProgress, trainOptions);
        };
        const train::TrainResult first = train(baseline, 0.0, "sync BF16");
        const auto target = store::evaluationAt(store, first.runId, targetStep);
        if (!target) {
            throw StoreError(store.path(), "the baseline run has no evaluation at step " + std::to_string(targetStep));
        }
        result.targetQuality = target->summary.quality;
        const train::TrainResult second = train(candidate, 0.5, "candidate");
        result.baseline = {"sync BF16", first.runId, train::timeToQuality(store, first.runId, result.targetQuality), first.wallSeconds};
        result.candidate = {candidate.name.substr(base.name.size() + 5), second.runId,
            train::timeToQuality(store, second.runId, result.targetQuality), second.wallSeconds};
        if (result.baseline.reached.reached && result.candidate.reached.reached && result.candidate.reached.step > 0
            && result.candidate.reached.wallSeconds > 0.0) {
            result.speedup = result.baseline.reached.wallSeconds / result.candidate.reached.wallSeconds;
        }
        record["result"] = timeToQualityJson(result);
        store.setRunConfig(result.runId, record.dump());
        store.finishRun(result.runId, store::RunStatus::Finished);
        progress.update(1.0, "time to quality");
        return result;
    });
}

namespace {

nlohmann::json runJson(const TimeToQualityRun& run)
{
    const auto reached = [&run](auto value) { return run.reached.reached ? nlohmann::json(value) : nlohmann::json(nullptr); };
    return {{"label", run.label}, {"run_id", run.runId}, {"reached", run.reached.reached},
        {"step", reached(run.reached.step)}, {"seconds", reached(run.reached.wallSeconds)},
        {"quality", reached(run.reached.quality)},
        {"best_quality", run.reached.bestQuality ? nlohmann::json(*run.reached.bestQuality) : nlohmann::json(nullptr)},
        {"total_seconds", run.totalSeconds}};
}

} // namespace

nlohmann::json timeToQualityJson(const TimeToQualityResult& result)
{
    return {{"run_id", result.runId}, {"target_quality", result.targetQuality}, {"target_step", result.targetStep},
        {"baseline", runJson(result.baseline)}, {"candidate", runJson(result.candidate)},
        {"speedup", result.speedup ? nlohmann::json(*result.speedup) : nlohmann::json(nullptr)}};
}

} // namespace mismatch::analysis

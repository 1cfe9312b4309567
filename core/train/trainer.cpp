// Training: the loop (Session::run) and the public entry (runTraining, resumeTraining, recordTrainingRun). Each
// step's rollouts come from the rollout thread through the staleness queue (asynchronous) or are produced in the
// loop; the step is trained, stored, evaluated and checkpointed on the schedule. trainer_internal.h lists the files
// that hold the rest.
#include "core/train/trainer.h"

#include "core/train/trainer_internal.h"

#include "core/common/error.h"
#include "core/common/random.h"
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/store/analysis_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/quality.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

namespace fs = std::filesystem;

namespace mismatch::train {

using namespace detail;

namespace detail {

// Every evaluation.every steps and the last step (the evaluation before training, step 0, is separate).
bool Session::evaluatesAt(std::int64_t step) const
{
    return step == config_.steps || (config_.evaluation.every > 0 && step % config_.evaluation.every == 0);
}

bool Session::keepsRollouts(std::int64_t step) const
{
    return step == 1 || evaluatesAt(step);
}

void Session::evaluate(store::RunStore& store, std::int64_t runId, std::int64_t step,
    const model::Transformer& student, Progress& progress, const TrainOptions& options, TrainResult& result)
{
    if (!evalSet_ || !teacher_) {
        return;
    }
    progress.setStage("evaluating step " + std::to_string(step));
    QualityOptions quality;
    quality.count = config_.evaluation.count;
    quality.maxTokens = config_.evaluation.maxTokens;
    quality.temperature = config_.rollout.sampling.temperature;
    quality.seed = mixSeed(config_.seed, 0x6576616cull);
    at::NoGradGuard noGrad;
    const QualityResult evaluation = evaluateQuality(student, *teacher_, *evalSet_, quality, *tokenizer_);
    if (!evalSetId_) {
        store::PromptSetRecord record;
        record.name = evalSet_->name;
        record.path = fs::absolute(config_.evaluation.prompts).string();
        record.promptCount = static_cast<std::int64_t>(evalSet_->prompts.size());
        evalSetId_ = store.addPromptSet(record);
    }
    store::addEvaluation(store, runId, step, evalSetId_, evaluation.problems);
    result.finalQuality = evaluation.quality;
    result.finalAccuracy = evaluation.accuracy;
    if (options.onEvaluation) {
        store::EvaluationSummary summary;
        summary.runId = runId;
        summary.step = step;
        summary.promptSetId = evalSetId_;
        summary.quality = evaluation.quality;
        summary.accuracy = evaluation.accuracy;
        summary.problemCount = static_cast<std::int64_t>(evaluation.problems.size());
        options.onEvaluation(summary);
    }
}

TrainResult Session::run(store::RunStore& store, std::int64_t runId, Progress& progress, const TrainOptions& options,
    std::int64_t resumedFrom)
{
    TrainResult result;
    result.runId = runId;
    result.resumedFromStep = resumedFrom;
    const Clock::time_point start = Clock::now();
    const double wallOffset = resumedFrom > 0 ? restoredWallSeconds_ : 0.0;
    Bf16Unit bf16Unit = resumedFrom > 0 ? restoredBf16Unit_ : Bf16Unit {};

    std::vector<at::Tensor> parameters = weights_.parameters();
    AdamWOptions adamOptions;
    adamOptions.learningRate = config_.optimizer.learningRate;
    adamOptions.beta1 = config_.optimizer.beta1;
    adamOptions.beta2 = config_.optimizer.beta2;
    adamOptions.weightDecay = config_.optimizer.weightDecay;
    AdamW optimizer(parameters, adamOptions);
    if (resumedFrom > 0) {
        optimizer.loadState(optimizerState_);
    }
    model::Transformer student(modelConfig_, weights_);
    versions_.publish(resumedFrom, weights_.clone());

    if (resumedFrom == 0) {
        evaluate(store, runId, 0, student, progress, options, result);
    }

    std::atomic<bool> stop{false};
    std::unique_ptr<RolloutQueue> queue;
    std::thread producer;
    std::unique_ptr<engine::Engine> rolloutEngine = makeRolloutEngine(versions_.snapshot().at(resumedFrom));
    std::int64_t syncedVersion = -1;
    const std::int64_t first = resumedFrom + 1;
    const std::int64_t last = options.stopAfterSteps > 0
        ? std::min(config_.steps, resumedFrom + options.stopAfterSteps)
        : config_.steps;
    if (config_.rollout.asynchronous && first <= last) {
        queue = std::make_unique<RolloutQueue>(static_cast<std::size_t>(config_.rollout.staleness));
        producer = std::thread([this, &stop, &queue, &rolloutEngine, &syncedVersion, first, last] {
            at::set_num_threads(threads_);
            try {
                for (std::int64_t step = first; step <= last && !stop.load(); ++step) {
                    std::optional<model::TransformerWeights> weights = versions_.wait(rolloutVersion(step), stop);
                    if (!weights) {
                        return;
                    }
                    if (!queue->push(produce(step, *rolloutEngine, syncedVersion, *weights))) {
                        return;
                    }
                }
            } catch (...) {
                queue->fail(std::current_exception());
            }
        });
    }
    const auto stopProducer = [&] {
        if (producer.joinable()) {
            stop.store(true);
            versions_.wake();
            queue->close();
            producer.join();
        }
    };

    try {
        for (std::int64_t step = first; step <= last; ++step) {
            progress.checkCancelled();
            Rollout rollout;
            if (queue) {
                rollout = queue->pop();
            } else {
                const auto weights = versions_.snapshot();
                rollout = produce(step, *rolloutEngine, syncedVersion, weights.at(rolloutVersion(step)));
            }
            std::vector<store::StoredGeneration> kept;
            const store::StepMetrics metrics = trainStep(
                rollout, optimizer, parameters, student, bf16Unit, wallOffset, start, keepsRollouts(step) ? &kept : nullptr);
            // The later steps roll out with versions from step - k on (step s with s - 1 - k) and measure the BF16
            // unit at version step: the k + 1 versions step - k .. step are all that is kept (engine::trainerBytes
            // counts them), the oldest forgotten before the newest is made.
            versions_.prune(step - config_.rollout.staleness);
            versions_.publish(step, weights_.clone());
            {
                // The step and its kept rollouts together: a kill leaves both or neither.
                store::Transaction transaction(store.handle());
                store.appendSteps(runId, {metrics});
                if (!kept.empty()) {
                    store::addStepGenerations(store, runId, step, kept);
                }
                transaction.commit();
            }
            ++result.stepsStored;
            if (options.onStep) {
                options.onStep(metrics);
            }
            char stage[160];
            std::snprintf(stage, sizeof stage, "step %lld/%lld  loss %.4g  mismatch %.3g", static_cast<long long>(step),
                static_cast<long long>(config_.steps), metrics.loss.value_or(0.0), metrics.mismatchKl.value_or(0.0));
            progress.update(static_cast<double>(step) / static_cast<double>(config_.steps), stage);
            const bool lastStep = step == config_.steps;
            if (evaluatesAt(step)) {
                evaluate(store, runId, step, student, progress, options, result);
            }
            if (lastStep || (config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0)
                || std::find(options.checkpointSteps.begin(), options.checkpointSteps.end(), step)
                    != options.checkpointSteps.end()) {
                saveCheckpoint(runId, step, optimizer, bf16Unit, metrics.wallTimeSeconds.value_or(0.0), result);
            }
        }
    } catch (...) {
        stopProducer();
        throw;
    }
    stopProducer();
    result.wallSeconds = secondsSince(start);
    const auto info = store.run(runId);
    result.stepsStored = info ? info->stepCount : result.stepsStored;
    return result;
}

} // namespace detail

namespace {

TrainResult runSession(Session& session, store::RunStore& store, std::int64_t runId, Progress& progress,
    const TrainOptions& options, std::int64_t resumedFrom)
{
    TrainResult result = store::recordRunOutcome(store, runId, [&] {
        TrainResult outcome = session.run(store, runId, progress, options, resumedFrom);
        const auto info = store.run(runId);
        if (info && info->lastStep.value_or(0) >= session.config().steps) {
            store.finishRun(runId, store::RunStatus::Finished);
        }
        return outcome;
    });
    store.releaseRunLock(runId); // stopped early (--stop-after): another process may resume it now
    return result;
}

std::string workspaceOf(const store::RunStore& store, const TrainOptions& options)
{
    return workspaceDirectoryOf(store, options.workspaceDirectory);
}

// A new run's name must not be a training run's of the workspace already (runNameTaken: one rule for the CLI, job
// files and the GUI).
void refuseTakenName(const RunConfig& config, const store::RunStore& store)
{
    if (const std::string taken = runNameTaken(store, config.name); !taken.empty()) {
        const std::string file = config.sourceFile.empty() ? std::string("run configuration") : config.sourceFile;
        throw InputError(file, "name", taken);
    }
}

} // namespace

std::int64_t recordTrainingRun(const RunConfig& config, store::RunStore& store,
    const std::function<void(std::int64_t runId)>& alsoInTransaction)
{
    // What runTraining records, from the files alone (no weights are loaded).
    const model::ModelFiles files = model::openModelDirectory(config.student);
    store::ModelRecord model;
    model.name = fs::path(config.student).filename().string();
    model.path = fs::absolute(config.student).string();
    model.architecture = model::toString(files.config.architecture);
    model.parameterCount = model::checkpointStats(files.checkpoint).parameterCount;
    model.configJson = nlohmann::json::parse(model::configToJson(files.config)).dump();
    store::RunSpec spec;
    spec.name = config.name;
    spec.kind = "train";
    spec.configJson = runConfigToJson(config);
    spec.modelId = store.addModel(model);
    store::Transaction transaction(store.handle());
    const std::int64_t runId = store.beginRun(spec);
    if (alsoInTransaction) {
        alsoInTransaction(runId);
    }
    transaction.commit();
    return runId;
}

TrainResult runTraining(const RunConfig& config, store::RunStore& store, Progress& progress, const TrainOptions& options)
{
    refuseTakenName(config, store); // before anything is loaded
    progress.update(0.0, "loading models");
    Session session(config, workspaceOf(store, options));
    store::ModelRecord model;
    model.name = fs::path(config.student).filename().string();
    model.path = fs::absolute(config.student).string();
    model.architecture = model::toString(session.modelConfig().architecture);
    model.parameterCount = session.parameterCount();
    model.configJson = nlohmann::json::parse(model::configToJson(session.modelConfig())).dump();
    store::RunSpec spec;
    spec.name = config.name;
    spec.kind = "train";
    spec.configJson = runConfigToJson(config);
    spec.modelId = store.addModel(model);
    // Checked again in the transaction that records the run: another process may have begun one of this name while
    // the models loaded.
    store::Transaction transaction(store.handle());
    refuseTakenName(config, store);
    const std::int64_t runId = store.beginRun(spec);
    transaction.commit();
    return runSession(session, store, runId, progress, options, 0);
}

TrainResult resumeTraining(std::int64_t runId, store::RunStore& store, Progress& progress, const TrainOptions& options)
{
    const auto info = store.run(runId);
    if (!info) {
        throw StoreError(store.path(), "has no run with id " + std::to_string(runId) + " (see `mismatch store runs`)");
    }
    if (info->kind != "train") {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " (" + info->name + ") is a '" + info->kind
            + "' run, not a training run");
    }
    if (info->status == store::RunStatus::Finished) {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " (" + info->name
            + ") has finished; there is nothing to resume");
    }
    const RunConfig config = parseRunConfig(info->configJson,
        store.path() + " (run " + std::to_string(runId) + " configuration)", fs::path(store.path()).parent_path().string());
    progress.update(0.0, "loading models");
    const std::string workspace = workspaceOf(store, options);
    Session session(config, workspace);
    const std::string directory = checkpointDirectory(workspace, runId);
    std::int64_t resumedFrom = 0;
    if (const auto checkpoint = newestCheckpoint(directory)) {
        resumedFrom = session.loadCheckpoint(*checkpoint);
    }
    // Unfinished checkpoint writes of the killed process.
    std::error_code ec;
    if (fs::is_directory(directory, ec)) {
        for (const auto& entry : fs::directory_iterator(directory, ec)) {
            if (entry.path().extension() == ".tmp") {
                fs::remove_all(entry.path(), ec);
            }
        }
    }
    // Steps and evaluations after the checkpoint are computed again (identically: every draw is a function of
    // the seed and the step); a run without a checkpoint starts over, its step-0 evaluation included.
    store.reopenRun(runId, resumedFrom > 0 ? resumedFrom : -1);
    return runSession(session, store, runId, progress, options, resumedFrom);
}

} // namespace mismatch::train

#pragma once
// Training runs (`mismatch train RUN.yaml`): the student learns with one of the objectives of objectives.h while
// the rollout engine, under the run's rollout configuration (recipe, staleness, noise, sampling), produces the
// batches. Every step's measures go to the workspace store as the run goes, so the GUI watches it live.
//
// One optimizer step s = 1..steps:
//   1. rollout: the engine generates samples_per_prompt responses for each of prompts_per_step training prompts
//      (chosen by a seeded shuffle of the prompt set, a function of (seed, s) only) with the weights of version
//      max(0, s - 1 - k) (version v = the trainer's weights after v optimizer steps; k = rollout.staleness),
//      plus the run's weight noise, rounded as the recipe says (BF16 engine without a recipe). It returns the
//      tokens, log mu of each and the full distributions mu.
//   2. the teacher (OPD objectives) scores the same prefixes: full [T, vocab] log-probabilities, FP32.
//   3. the student (FP32 master weights, version s - 1) runs teacher-forced on the same sequences with
//      gradients; the objective's loss is backpropagated, gradients clipped, AdamW steps.
//   4. measures of the step, stored in one transaction: mismatch KL(mu || pi_theta) over the full vocabulary,
//      k1 and k3 on the sampled tokens (token means over the batch, pi_theta = the student before this step's
//      update, at the rollout temperature), the multiple of the BF16 unit, loss, reward and accuracy of the
//      rollouts (exact-match answers), student entropy, staleness of the batch, rollout and training tokens
//      per second, wall time since the run started. At step 1, every evaluation step (below) and the last step,
//      the same transaction keeps the batch's first 4 sequences token by token (store::addStepGenerations:
//      per-token KL(mu || pi_theta), mu(y), pi(y), both entropies and top-5) for the token drill-down.
// The BF16 unit is the plain BF16 engine's mismatch (bf16 everywhere, the trainer's current weights, no noise,
// no staleness) on the same step's prompts and seeds. A run whose rollouts are that engine is its own unit at
// every step (the BF16 multiple is exactly 1); any other run measures it at step 1 and at every multiple of
// evaluation.bf16_unit_every (0: step 1 only), and the steps in between use the latest unit. Each step's extras
// record the unit, whether it was measured then, and the step it was measured at ("bf16_unit_step").
//
// Synchronous and asynchronous loops compute the same function: in the asynchronous loop a rollout thread
// generates (and has the teacher score) batch s as soon as weight version max(0, s - 1 - k) is published,
// through a bounded queue of at most max(1, k) batches, while the trainer trains step s - 1; so for a given
// seed the two loops give identical results (k = 0 included, which then cannot overlap).
//
// Evaluation every evaluation.every steps (and at step 0 before training and at the last step): the FP32
// student generates one response per held-out prompt (rollout sampling settings, a fixed evaluation seed), the
// teacher scores its prefixes; per problem q_i = mean over the response tokens of KL(pi_student || teacher),
// and exact-match correctness; stored with store::addEvaluation.
//
// Checkpoints every checkpoint.every steps and at the end: under
// <workspace>/checkpoints/run-<id>/step-<s>/ the student (model.safetensors, FP32, with config.json and
// tokenizer.json so the directory is a model directory), the optimizer state (optimizer.safetensors), the
// engine's weight history for staleness (history.safetensors) and state.json; written to a temporary
// directory and renamed. A run killed at any moment resumes from its last checkpoint: the steps and
// evaluations stored after it are deleted in one transaction and computed again, and because every random
// draw is a function of (seed, step), the resumed run stores exactly what an uninterrupted run would have.
#include "core/common/progress.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace mismatch::train {

struct TrainOptions {
    // The directory that holds checkpoints/ (default: the directory of the store's database file).
    std::string workspaceDirectory;
    // Called on the training thread after each step / evaluation is stored (front-ends: progress text).
    std::function<void(const store::StepMetrics&)> onStep;
    std::function<void(const store::EvaluationSummary&)> onEvaluation;
    // Stop after this many steps of this invocation have been stored, leaving the run "running" and
    // resumable (tests and benchmarks); 0: run to the end.
    std::int64_t stopAfterSteps = 0;
    // Also save a checkpoint at these steps (besides checkpoint.every and the last step): a calibration's rule
    // steps, whose checkpoints its points are measured on.
    std::vector<std::int64_t> checkpointSteps;
};

struct TrainResult {
    std::int64_t runId = 0;
    std::int64_t stepsStored = 0; // steps of the run in the store at the end
    std::int64_t resumedFromStep = 0; // the checkpoint step a resumed run continued from (0: fresh)
    std::optional<double> finalQuality; // the last evaluation's Q (nats per token), if any
    std::optional<double> finalAccuracy;
    double wallSeconds = 0.0; // this invocation
    std::string lastCheckpoint; // directory of the newest checkpoint
};

// Runs a training run from step 1: records a run of kind "train" (config_json = runConfigToJson(config)),
// trains, evaluates, checkpoints and finishes it (Finished; Cancelled when progress is cancelled, after
// storing what was done; Failed with the message for any other error, which is rethrown). Progress fraction =
// steps done / steps, stage text "step S/N". Throws InputError for unreadable models, prompt sets or recipes, and
// InputError(the run file, "name", runNameTaken's sentence) before anything is loaded or stored when a training run of
// the workspace has the run's name already (run_config.h: run names).
TrainResult runTraining(const RunConfig& config, store::RunStore& store, Progress& progress,
    const TrainOptions& options = {});

// Continues run `runId` (kind "train", status Running, Failed or Cancelled) from its newest checkpoint, with
// the configuration stored in the run. StoreError for an unknown or finished run; Error when it has no
// checkpoint (then it starts again from step 1 after deleting its steps, which is also exact).
TrainResult resumeTraining(std::int64_t runId, store::RunStore& store, Progress& progress,
    const TrainOptions& options = {});

// Records a training run of `config` (its model and a run of kind "train", status running) without training it;
// resumeTraining(id) then trains it from step 1, exactly as runTraining would. `alsoInTransaction`, when given,
// runs with the new id inside the transaction that records the run (a calibration links its sweep runs so, and a
// kill can never leave a sweep run it does not know of).
std::int64_t recordTrainingRun(const RunConfig& config, store::RunStore& store,
    const std::function<void(std::int64_t runId)>& alsoInTransaction = {});

// The optimizer step of a student checkpoint: state.json's "optimizer_steps" (written with every checkpoint), or 0
// for a model directory without state.json (a student before training). InputError naming state.json when it is
// malformed.
std::int64_t checkpointOptimizerSteps(const std::string& directory);

// Where run `runId`'s checkpoints live.
std::string checkpointDirectory(const std::string& workspaceDirectory, std::int64_t runId);
// The directory that holds checkpoints/: `workspaceDirectory`, or the store's directory when it is empty (as
// training uses it; TrainOptions::workspaceDirectory).
std::string workspaceDirectoryOf(const store::RunStore& store, const std::string& workspaceDirectory);
// The checkpoint of run `runId` at `step` (checkpointDirectory/step-%08d) in workspaceDirectoryOf(store,
// workspaceDirectory).
std::string stepCheckpoint(
    const store::RunStore& store, const std::string& workspaceDirectory, std::int64_t runId, std::int64_t step);

} // namespace mismatch::train

#pragma once
// Evaluations of a run's student checkpoints on a held-out prompt set: per problem i the quality q_i (mean over
// the response's tokens of KL(pi_student || teacher), nats per token) and exact-match correctness; per
// evaluation the quality Q = mean_i q_i and the accuracy = mean_i correct. Stored in the `evaluations` and
// `evaluation_problems` tables; one evaluation per (run, step).
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::store {

struct ProblemQuality {
    std::string problemId; // the prompt set's id; pairs problems across runs
    double quality = 0.0; // q_i, nats per token
    bool correct = false; // exact-match answer
};

struct EvaluationSummary {
    std::int64_t id = 0;
    std::int64_t runId = 0;
    std::int64_t step = 0;
    std::optional<std::int64_t> promptSetId;
    double quality = 0.0; // Q = mean q_i, nats per token
    double accuracy = 0.0; // fraction of problems answered correctly
    std::int64_t problemCount = 0;
    std::string createdAt; // ISO 8601 UTC
};

struct Evaluation {
    EvaluationSummary summary;
    std::vector<ProblemQuality> problems; // in the order they were added (problem_index)
};

// Stores one evaluation and its problems in one transaction; Q and accuracy are computed here. Throws
// StoreError (writing nothing) for an unknown run, a (run, step) already evaluated, an empty problem list, an
// empty or repeated problem id, or a quality that is not finite.
std::int64_t addEvaluation(RunStore& store, std::int64_t runId, std::int64_t step,
    std::optional<std::int64_t> promptSetId, const std::vector<ProblemQuality>& problems);

// A run's evaluations, by step.
std::vector<EvaluationSummary> evaluations(const RunStore& store, std::int64_t runId);

// q_i of `evaluation` in the order of `order`'s problems, paired by problem id (for the failure rule's paired
// bootstrap): the one pairing rule of compare, calibrate and compare-objectives. Error unless both evaluated
// exactly the same problems, checked both ways: how many of each side's problems the other lacks, with an example.
std::vector<double> qualitiesInOrderOf(const Evaluation& evaluation, const Evaluation& order);
// The evaluation of a run at `step` with its problems, or nullopt when there is none.
std::optional<Evaluation> evaluationAt(const RunStore& store, std::int64_t runId, std::int64_t step);

} // namespace mismatch::store

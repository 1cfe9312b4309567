#pragma once
// Quality of a student checkpoint (spec "Measures"): on a held-out prompt set the FP32 student generates one
// response per prompt (fixed seed), the teacher scores the same prefixes, and per problem
//   q_i = mean over the response's tokens of KL(pi_student(.|h) || teacher(.|h))   (full vocabulary, nats)
// plus exact-match correctness of the answer (io::verifyAnswer against the prompt's reference answer).
// Q = mean_i q_i, lower is better. And time to quality: wall time until a stored run first reaches a quality.
#include "core/common/progress.h"
#include "core/io/prompt_set.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace mismatch::train {

struct QualityOptions {
    std::int64_t count = 0; // the first `count` prompts of the set; 0: all
    std::int64_t maxTokens = 64; // new tokens per response
    double temperature = 1.0; // student sampling temperature (0: greedy); q_i uses the plain distributions
    std::uint64_t seed = 0x5eed; // generation seed (per prompt: its index)
    std::int64_t batchSize = 64; // prompts per generation/scoring chunk
};

struct QualityResult {
    std::vector<store::ProblemQuality> problems; // in prompt order
    double quality = 0.0; // Q = mean q_i
    double accuracy = 0.0; // fraction correct
    std::int64_t tokens = 0; // response tokens scored
};

// Prompts are rendered through the set's template and encoded with `tokenizer` (the student's). Empty
// responses (an immediate end of text) count as q_i = 0 and are scored for correctness as they are.
// InputError when the set (after `count`) is empty or the vocabularies differ; Error for a non-finite q_i.
// Progress: fraction of prompts, cancellable per chunk.
QualityResult evaluateQuality(const model::Transformer& student, const model::Transformer& teacher,
    const io::PromptSet& prompts, const QualityOptions& options, const model::Tokenizer& tokenizer,
    Progress* progress = nullptr);

struct TimeToQuality {
    bool reached = false;
    std::int64_t step = 0; // the first evaluated step with Q <= target (when reached)
    double quality = 0.0; // its Q
    double wallSeconds = 0.0; // wall_time_s of that step's metrics (0 for step 0)
    std::int64_t evaluations = 0; // evaluations the run has
    std::optional<double> bestQuality; // lowest Q seen
};

// Reads run `runId`'s evaluations and step metrics. StoreError for an unknown run.
TimeToQuality timeToQuality(const store::RunStore& store, std::int64_t runId, double targetQuality);

} // namespace mismatch::train

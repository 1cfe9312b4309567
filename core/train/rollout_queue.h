#pragma once
// The staleness queue between the asynchronous rollout thread and the trainer (trainer.h "Synchronous and
// asynchronous loops"): the weight versions the rollout side may still need, and a bounded queue of one step's
// rollouts each. Internal to core/train (the trainer's files).
#include "core/engine/engine.h"
#include "core/model/transformer.h"

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

namespace mismatch::train::detail {

// One step's rollouts as the engine produced them, with the teacher's scores of the same prefixes.
struct Rollout {
    std::int64_t step = 0;
    std::int64_t version = 0; // weight version the engine generated with
    std::vector<engine::GenerationRequest> requests; // one per sequence (prompt-major, samples contiguous)
    std::vector<std::size_t> promptIndex; // per sequence: index into the training set
    std::vector<engine::GenerationResult> generations; // with full distributions log mu
    std::vector<at::Tensor> teacherLogProbs; // per sequence [T, vocab] (OPD objectives only)
    double rolloutSeconds = 0.0;
    double teacherSeconds = 0.0;
    std::int64_t tokens = 0;
};

// Weight versions the rollout side may need: version v = the student after v optimizer steps (detached).
class WeightVersions {
public:
    void publish(std::int64_t version, model::TransformerWeights weights);
    // Waits until `version` is published (or `stop` is set: nullopt).
    std::optional<model::TransformerWeights> wait(std::int64_t version, const std::atomic<bool>& stop);
    void wake() { changed_.notify_all(); }
    // Forgets versions older than `oldest`.
    void prune(std::int64_t oldest);
    std::map<std::int64_t, model::TransformerWeights> snapshot() const;

private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::map<std::int64_t, model::TransformerWeights> versions_;
    std::int64_t newest_ = -1;
};

// Bounded queue of rollouts between the rollout thread and the trainer.
class RolloutQueue {
public:
    explicit RolloutQueue(std::size_t capacity) : capacity_(std::max<std::size_t>(1, capacity)) {}
    // False when the queue was closed (the trainer stopped).
    bool push(Rollout rollout);
    void fail(std::exception_ptr error);
    // The next rollout; rethrows the producer's error.
    Rollout pop();
    void close();

private:
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Rollout> items_;
    std::size_t capacity_;
    bool closed_ = false;
    std::exception_ptr error_;
};

} // namespace mismatch::train::detail

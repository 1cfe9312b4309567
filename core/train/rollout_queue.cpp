// The staleness queue between the rollout thread and the trainer: WeightVersions and RolloutQueue (rollout_queue.h).
#include "core/train/rollout_queue.h"

#include "core/common/error.h"

#include <algorithm>

namespace mismatch::train::detail {

void WeightVersions::publish(std::int64_t version, model::TransformerWeights weights)
{
    {
        std::lock_guard<std::mutex> lock(mutex_);
        versions_[version] = std::move(weights);
        newest_ = std::max(newest_, version);
    }
    changed_.notify_all();
}

std::optional<model::TransformerWeights> WeightVersions::wait(std::int64_t version, const std::atomic<bool>& stop)
{
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return stop.load() || versions_.count(version) != 0; });
    if (stop.load() && versions_.count(version) == 0) {
        return std::nullopt;
    }
    return versions_.at(version);
}

void WeightVersions::prune(std::int64_t oldest)
{
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = versions_.begin(); it != versions_.end() && it->first < oldest;) {
        it = versions_.erase(it);
    }
}

std::map<std::int64_t, model::TransformerWeights> WeightVersions::snapshot() const
{
    std::lock_guard<std::mutex> lock(mutex_);
    return versions_;
}

bool RolloutQueue::push(Rollout rollout)
{
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) {
        return false;
    }
    items_.push_back(std::move(rollout));
    changed_.notify_all();
    return true;
}

void RolloutQueue::fail(std::exception_ptr error)
{
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    changed_.notify_all();
}

Rollout RolloutQueue::pop()
{
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !items_.empty() || error_ || closed_; });
    if (!items_.empty()) {
        Rollout rollout = std::move(items_.front());
        items_.pop_front();
        changed_.notify_all();
        return rollout;
    }
    if (error_) {
        std::rethrow_exception(error_);
    }
    throw CancelledError("the rollout queue was closed");
}

void RolloutQueue::close()
{
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    changed_.notify_all();
}

} // namespace mismatch::train::detail

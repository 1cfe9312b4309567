#include "core/common/progress.h"

#include "core/common/error.h"

#include <algorithm>

namespace mismatch {

// cancel() is called from the CLI's SIGINT handler.
static_assert(std::atomic<bool>::is_always_lock_free, "Progress::cancel must be async-signal-safe");

Progress::Progress(Listener listener, std::shared_ptr<std::atomic<bool>> cancelled)
    : cancelled_(std::move(cancelled)), listener_(std::move(listener))
{
}

Progress Progress::child(double begin, double end, const std::string& label)
{
    return Progress(
        [this, begin, end, label](double fraction, const std::string& stage) {
            update(begin + (end - begin) * fraction, label.empty() ? stage : label + ": " + stage);
        },
        cancelled_);
}

void Progress::checkCancelled() const
{
    if (cancelled()) {
        throw CancelledError(stage());
    }
}

void Progress::setStage(const std::string& stage)
{
    {
        std::lock_guard<std::mutex> lock(stageMutex_);
        stage_ = stage;
    }
    notify();
}

void Progress::setFraction(double fraction)
{
    fraction_.store(std::clamp(fraction, 0.0, 1.0));
    notify();
}

void Progress::update(double fraction, const std::string& stage)
{
    {
        std::lock_guard<std::mutex> lock(stageMutex_);
        stage_ = stage;
    }
    fraction_.store(std::clamp(fraction, 0.0, 1.0));
    notify();
}

std::string Progress::stage() const
{
    std::lock_guard<std::mutex> lock(stageMutex_);
    return stage_;
}

double Progress::elapsedSeconds() const
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::etaSeconds() const
{
    const double f = fraction();
    if (f <= 1e-6) {
        return -1.0;
    }
    return elapsedSeconds() * (1.0 - f) / f;
}

void Progress::notify()
{
    if (listener_) {
        listener_(fraction(), stage());
    }
}

}  // namespace mismatch

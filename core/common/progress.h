#pragma once
// Progress and cancellation for long jobs. Core checks it at natural boundaries (a step, a batch, a cell)
// and never sleeps, prints or exits; front-ends read it (CLI progress bar, GUI worker signals).
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace mismatch {

class Progress {
public:
    // Called from the job's thread after every update; must be cheap and thread-safe on the listener side.
    using Listener = std::function<void(double fraction, const std::string& stage)>;

    Progress() = default;
    explicit Progress(Listener listener) : listener_(std::move(listener)) {}
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }
    // Throws CancelledError when cancel() was called; jobs call it at their boundaries.
    void checkCancelled() const;

    void setStage(const std::string& stage);
    void setFraction(double fraction);  // clamped to [0, 1]
    void update(double fraction, const std::string& stage);

    double fraction() const { return fraction_.load(); }
    std::string stage() const;
    // Seconds since construction.
    double elapsedSeconds() const;
    // Estimated seconds left from the elapsed time and fraction; negative when unknown.
    double etaSeconds() const;

private:
    void notify();

    std::atomic<bool> cancelled_{false};
    std::atomic<double> fraction_{0.0};
    mutable std::mutex stageMutex_;
    std::string stage_;
    Listener listener_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace mismatch

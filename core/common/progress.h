#pragma once
// Progress and cancellation for long jobs. Core checks it at natural boundaries (a step, a batch, a cell)
// and never sleeps, prints or exits; front-ends read it (CLI progress bar, GUI worker signals).
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
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

    // A progress for a part of this job (e.g. one training run of a sweep): its fraction f shows here as
    // begin + (end - begin) * f, its stage as "label: stage" (the stage alone when label is empty), and it shares
    // this progress's cancel flag, so a cancel of either is seen by both. This progress must outlive the child.
    Progress child(double begin, double end, const std::string& label);

    // Safe to call from a signal handler (one lock-free atomic store).
    void cancel() { cancelled_->store(true); }
    bool cancelled() const { return cancelled_->load(); }
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
    Progress(Listener listener, std::shared_ptr<std::atomic<bool>> cancelled);
    void notify();

    // Shared by a progress and its children (see child()).
    std::shared_ptr<std::atomic<bool>> cancelled_ = std::make_shared<std::atomic<bool>>(false);
    std::atomic<double> fraction_{0.0};
    mutable std::mutex stageMutex_;
    std::string stage_;
    Listener listener_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace mismatch

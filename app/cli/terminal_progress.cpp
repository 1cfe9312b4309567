#include "app/cli/terminal_progress.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <unistd.h>

namespace mismatch::cli {

namespace {
constexpr int kBarWidth = 28;
constexpr auto kRedrawInterval = std::chrono::milliseconds(100);

// The progress that SIGINT cancels: the newest live TerminalProgress's.
std::atomic<Progress*> interruptTarget {nullptr};

extern "C" void cancelOnInterrupt(int)
{
    if (Progress* progress = interruptTarget.load()) {
        progress->cancel();
    }
}
}  // namespace

std::string formatDuration(double seconds)
{
    if (seconds < 0 || !std::isfinite(seconds)) {
        return "--";
    }
    const long total = static_cast<long>(std::lround(seconds));
    std::ostringstream text;
    if (total >= 3600) {
        text << total / 3600 << "h" << std::setw(2) << std::setfill('0') << (total % 3600) / 60 << "m";
    } else if (total >= 60) {
        text << total / 60 << "m" << std::setw(2) << std::setfill('0') << total % 60 << "s";
    } else {
        text << total << "s";
    }
    return text.str();
}

TerminalProgress::TerminalProgress(std::ostream& err, bool enabled)
    : err_(err), enabled_(enabled), terminal_(::isatty(STDERR_FILENO) == 1 && &err == &std::cerr)
{
    progress_ = std::make_unique<Progress>([this](double fraction, const std::string& stage) { draw(fraction, stage, false); });
    previousTarget_ = interruptTarget.exchange(progress_.get());
    previousHandler_ = std::signal(SIGINT, cancelOnInterrupt);
}

TerminalProgress::~TerminalProgress()
{
    if (terminateHandled_) {
        std::signal(SIGTERM, previousTerminateHandler_ == SIG_ERR ? SIG_DFL : previousTerminateHandler_);
    }
    std::signal(SIGINT, previousHandler_ == SIG_ERR ? SIG_DFL : previousHandler_);
    interruptTarget.store(previousTarget_);
    finish();
}

void TerminalProgress::cancelOnTerminate()
{
    if (!terminateHandled_) {
        terminateHandled_ = true;
        previousTerminateHandler_ = std::signal(SIGTERM, cancelOnInterrupt);
    }
}

void TerminalProgress::setDetail(const std::string& detail)
{
    std::lock_guard<std::mutex> lock(mutex_);
    detail_ = detail;
}

void TerminalProgress::draw(double fraction, const std::string& stage, bool force)
{
    if (!enabled_) {
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (!terminal_) {
        // Not a terminal: one line per stage change keeps logs readable.
        if (stage != lastStage_) {
            err_ << "[" << std::setw(3) << static_cast<int>(fraction * 100) << "%] " << stage << "\n";
            lastStage_ = stage;
        }
        return;
    }
    if (!force && drawn_ && now - lastDraw_ < kRedrawInterval && fraction < 1.0) {
        return;
    }
    lastDraw_ = now;
    drawn_ = true;
    const int filled = static_cast<int>(fraction * kBarWidth);
    std::ostringstream line;
    line << "\r[" << std::string(static_cast<size_t>(filled), '#') << std::string(static_cast<size_t>(kBarWidth - filled), ' ')
         << "] " << std::setw(3) << static_cast<int>(fraction * 100) << "% " << stage
         << "  elapsed " << formatDuration(progress_->elapsedSeconds()) << "  ETA "
         << formatDuration(progress_->etaSeconds());
    if (!detail_.empty()) {
        line << "  " << detail_;
    }
    line << "\x1b[K";
    err_ << line.str() << std::flush;
}

void TerminalProgress::note(const std::string& line)
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (terminal_ && drawn_) {
        err_ << "\r\x1b[K";
        drawn_ = false;
    }
    err_ << line << "\n" << std::flush;
}

void TerminalProgress::finish()
{
    std::lock_guard<std::mutex> lock(mutex_);
    if (enabled_ && terminal_ && drawn_) {
        err_ << "\n" << std::flush;
        drawn_ = false;
    }
}

}  // namespace mismatch::cli

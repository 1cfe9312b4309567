#pragma once
// The CLI's view of a job's Progress: a one-line bar on stderr, redrawn at most 10 times a second when stderr
// is a terminal; one line per stage otherwise (logs, CI). It also owns the CLI's Ctrl-C: while a TerminalProgress
// is alive, SIGINT cancels its Progress instead of killing the process, so every job command stops at the job's
// next boundary, keeps only whole results (a stored job marks its run cancelled and stays resumable; a job that
// writes a file writes nothing) and exits 130 (CancelledError, see cli.cpp).
#include "core/common/progress.h"

#include <chrono>
#include <csignal>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>

namespace mismatch::cli {

class TerminalProgress {
public:
    // `enabled` false prints nothing (e.g. --quiet); Ctrl-C still cancels.
    TerminalProgress(std::ostream& err, bool enabled = true);
    ~TerminalProgress();
    TerminalProgress(const TerminalProgress&) = delete;
    TerminalProgress& operator=(const TerminalProgress&) = delete;

    // The Progress object to hand to the job; its updates draw the bar.
    Progress& progress() { return *progress_; }
    // Extra text after the bar (loss, mismatch, ...), set by the job's caller between steps.
    void setDetail(const std::string& detail);
    // Ends the bar line.
    void finish();
    // A line of its own on stderr (e.g. "run 7 started"), printed even with the bar disabled; the bar is redrawn
    // below it.
    void note(const std::string& line);
    // SIGTERM cancels the Progress too (as Ctrl-C does) while this lives: for a job whose normal end is being told
    // to stop (`mismatch import ... --follow`, stopped by a batch system or a script).
    void cancelOnTerminate();

private:
    void draw(double fraction, const std::string& stage, bool force);

    std::ostream& err_;
    bool enabled_;
    bool terminal_;
    std::unique_ptr<Progress> progress_;
    std::mutex mutex_;
    std::string detail_;
    std::string lastStage_;
    std::chrono::steady_clock::time_point lastDraw_{};
    bool drawn_ = false;
    // What SIGINT did before this one (restored by the destructor; nested bars restore each other's).
    Progress* previousTarget_ = nullptr;
    void (*previousHandler_)(int) = SIG_DFL;
    bool terminateHandled_ = false;
    void (*previousTerminateHandler_)(int) = SIG_DFL;
};

std::string formatDuration(double seconds);

}  // namespace mismatch::cli

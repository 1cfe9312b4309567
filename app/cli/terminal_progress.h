#pragma once
// The CLI's view of a job's Progress: a one-line bar on stderr, redrawn at most 10 times a second when stderr
// is a terminal; one line per stage otherwise (logs, CI).
#include "core/common/progress.h"

#include <chrono>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>

namespace mismatch::cli {

class TerminalProgress {
public:
    // `enabled` false prints nothing (e.g. --quiet).
    TerminalProgress(std::ostream& err, bool enabled = true);
    ~TerminalProgress();

    // The Progress object to hand to the job; its updates draw the bar.
    Progress& progress() { return *progress_; }
    // Extra text after the bar (loss, mismatch, ...), set by the job's caller between steps.
    void setDetail(const std::string& detail);
    // Ends the bar line.
    void finish();
    // A line of its own on stderr (e.g. "run 7 started"), printed even with the bar disabled; the bar is redrawn
    // below it.
    void note(const std::string& line);

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
};

std::string formatDuration(double seconds);

}  // namespace mismatch::cli

#pragma once
// What the analysis commands share: the interval's text. (Their sampling, bootstrap and engine-memory options
// are the catalogue's parameters: core/jobs/analysis_jobs.h; Ctrl-C is the progress display's, terminal_progress.h.)
#include "core/analysis/protocol.h"
#include "core/analysis/rollout_measure.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace mismatch::cli {

// "0.0123 [0.0101, 0.0150]"
std::string intervalText(const metrics::Interval& interval, int precision = 4);

} // namespace mismatch::cli

#pragma once
// What the analysis commands print alike: the interval's text and the estimator table. Their options are the
// catalogue jobs' parameters (core/jobs/analysis_jobs.h); Ctrl-C is the progress display's (terminal_progress.h).
#include "core/metrics/bootstrap.h"
#include "core/metrics/estimators.h"

#include <string>

namespace mismatch::cli {

// The sampled-token estimators beside the full KL: estimator, token mean, Pearson and Spearman correlation with the
// per-token full KL (a table, as formatTable writes it), then the mismatch by the chosen token's probability and by
// the trainer's entropy (tokens, mean KL and share of the summed KL per bin).
std::string estimatorTable(const metrics::EstimatorComparison& comparison);
// "0.0123 [0.0101, 0.0150]"
std::string intervalText(const metrics::Interval& interval, int precision = 4);

} // namespace mismatch::cli

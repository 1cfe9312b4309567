#pragma once
// What the analysis commands share: the interval's text and the estimator table; and, for the one analysis not yet
// in the job catalogue (breakdown), its sampling, bootstrap and engine-memory options (the catalogue's jobs take
// them as parameters: core/jobs/analysis_jobs.h). Ctrl-C is the progress display's (terminal_progress.h).
#include "core/analysis/protocol.h"
#include "core/analysis/rollout_measure.h"
#include "core/metrics/estimators.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace mismatch::cli {

struct AnalysisArguments {
    std::int64_t count = 0;
    analysis::MeasureSettings settings;
    std::string kvMemory = "256MiB";
    std::string kvScaleFit = "fitted_per_measurement";
    // The options that set the measurement protocol (count, sampling, seed, KV-scale policy), filled by
    // addAnalysisOptions: given on the command line, they override a calibration's protocol.
    std::vector<CLI::Option*> protocolOptions;
};

// Adds --count, --max-tokens, --seed, --temperature, --top-p, --top-k, --kv-scale-fit, --kv-first-batch, --batch,
// --resamples, --confidence, --bootstrap-seed and --kv-memory to `command`.
void addAnalysisOptions(CLI::App* command, AnalysisArguments& arguments);
// The settings with --kv-memory and --kv-scale-fit parsed (InputError for a malformed value).
analysis::MeasureSettings resolveSettings(const AnalysisArguments& arguments);
// Whether any protocol option (see protocolOptions) was given.
bool protocolOptionGiven(const AnalysisArguments& arguments);
// `protocol`'s settings with the protocol options that were given on the command line applied over them (the
// engine memory, batch and bootstrap options always come from the command line).
analysis::MeasureSettings settingsOver(const analysis::MeasurementProtocol& protocol, const AnalysisArguments& arguments);

// The sampled-token estimators beside the full KL: estimator, token mean, Pearson and Spearman correlation with the
// per-token full KL (a table, as formatTable writes it), then the mismatch by the chosen token's probability and by
// the trainer's entropy (tokens, mean KL and share of the summed KL per bin).
std::string estimatorTable(const metrics::EstimatorComparison& comparison);
// "0.0123 [0.0101, 0.0150]"
std::string intervalText(const metrics::Interval& interval, int precision = 4);

} // namespace mismatch::cli

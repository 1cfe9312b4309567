#pragma once
// Per-step metric logs of outside trainers, read onto the mismatch scale: verl's file logger JSONL, Tinker's
// metrics.jsonl and generic CSV. Every logged key that is read becomes one measure of store::StepMetrics with the
// estimator it was computed by, because outside trainers log sampled-token estimators (k1, k3, k2) and
// probability differences rather than the full-vocabulary KL(mu || pi) that local runs measure:
//
//   source key (where it comes from)                    measure          estimator
//   verl  rollout_corr/kl                               k1               mean over response tokens of log mu(y) - log pi(y)
//   verl  rollout_corr/k3_kl                            k3               mean of r - 1 - log r, r = pi(y) / mu(y)
//   verl  training/rollout_probs_diff_{mean,max,std}    prob_diff_*      |mu(y) - pi(y)| (a probability difference, not a KL)
//   tinker optim/kl_sample_train_v1                     k1               mean of log mu(y) - log pi(y)
//   tinker optim/kl_sample_train_v2                     k2               mean of (log mu(y) - log pi(y))^2 / 2
//
// (mu: the rollout engine / sampler, pi: the trainer, y: the sampled token.) knownKeys() holds the whole table.
// Measures that are not StepMetrics columns (prob_diff_*, k2, chi2_token, ...) go to StepMetrics::extrasJson
// under the measure's name; their estimator is recorded with the run (estimatorJson), never in mismatch_kl.
//
// A line that cannot be used (bad JSON, no step, a negative or fractional step, a step already read, a mapped
// value that is not a number, NaN or infinite, wrong CSV field count) is skipped and reported with its line
// number; the other lines are kept. A file with no usable line is an InputError naming the file.
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::io {

enum class LogSource { Verl, Tinker, Csv };
std::string toString(LogSource source); // "verl", "tinker", "csv"

// A measure an imported value can land in.
struct ImportMeasure {
    std::string name; // "k1", "reward", "prob_diff_mean", "step"
    bool column = false; // a typed StepMetrics column (else a key of extrasJson)
    bool integer = false; // staleness and step take integers
    std::string unit; // "nats/token", "probability", ...
    std::string defaultEstimator; // what a value mapped here by --map is taken to be
};
// Every measure name --map accepts, in table order. Besides these, "extra:NAME" keeps a column in extrasJson
// under NAME as logged (estimator "as logged").
const std::vector<ImportMeasure>& importMeasures();
const ImportMeasure* findImportMeasure(const std::string& name);
// Checks one --map entry "COLUMN=MEASURE"; returns an empty string when valid, else what is wrong.
std::string checkMapEntry(const std::string& entry);

// A logged key that is read without --map.
struct KnownKey {
    LogSource source;
    std::string key;
    std::string measure;
    std::string estimator;
};
// The built-in mapping, per source (CSV accepts the verl and Tinker keys and the measure names as headers).
std::vector<KnownKey> knownKeys(LogSource source);

struct LogImportOptions {
    // COLUMN=MEASURE entries (--map); they add to and override the built-in mapping. `COLUMN=step` names the step
    // column of a CSV file.
    std::vector<std::string> map;
};

struct SkippedLine {
    std::int64_t line = 0; // 1-based line number in the file
    std::string reason;
};

// One mapping in use: a logged key, the measure it was read into, its estimator and on how many kept steps it
// had a value.
struct MappedMetric {
    std::string key;
    std::string measure;
    std::string estimator;
    std::string unit;
    bool userMapped = false;
    std::int64_t steps = 0;
};

struct ImportedLog {
    std::string file;
    LogSource source = LogSource::Verl;
    std::vector<store::StepMetrics> steps; // in file order
    std::int64_t linesRead = 0; // non-blank lines holding data (the CSV header not counted)
    std::vector<SkippedLine> skipped; // in line order
    std::vector<MappedMetric> metrics; // in table order
    std::vector<std::string> unmappedKeys; // logged keys read by no mapping, sorted

    // {"measure": {"key", "estimator", "unit", "user_mapped", "steps"}, ...}: the run's estimator record.
    std::string estimatorJson() const;
};

// JSON text with the bare tokens NaN, Infinity and -Infinity that Python's json module writes (outside strings)
// replaced by strings that start with kNonFiniteMark and hold the token, so that a parser reads the text and the
// caller can reject such a value by name.
inline constexpr char kNonFiniteMark = '\x01';
std::string markNonFiniteTokens(const std::string& jsonText);

// Reads a log file. Throws InputError for an unreadable file, a --map entry naming no column of a CSV header,
// a CSV without a step column, or a file with no usable line (naming the file and the first skipped lines).
ImportedLog importLog(LogSource source, const std::string& path, const LogImportOptions& options = {});

} // namespace mismatch::io

#pragma once
// Per-step metric logs of outside trainers, read onto the mismatch scale: verl's file logger JSONL, Tinker's
// metrics.jsonl, generic CSV and TensorBoard event files (verl's, NeMo-RL's). Every logged key that is read becomes
// one measure of store::StepMetrics with the estimator it was computed by, because outside trainers log
// sampled-token estimators (k1, k3, k2) and probability differences rather than the full-vocabulary KL(mu || pi)
// that local runs measure:
//
//   source key (where it comes from)                    measure          estimator
//   verl  rollout_corr/kl                               k1               mean over response tokens of log mu(y) - log pi(y)
//   verl  rollout_corr/k3_kl                            k3               mean of r - 1 - log r, r = pi(y) / mu(y)
//   verl  training/rollout_probs_diff_{mean,max,std}    prob_diff_*      |mu(y) - pi(y)| (a probability difference, not a KL)
//   verl  actor/distillation/loss                       loss             verl's distillation loss (its loss_mode is not logged)
//   verl  val-core/<data source>/acc/mean@<N>           accuracy         the source's acc, mean over N responses per problem
//   tinker optim/kl_sample_train_v1                     k1               mean of log mu(y) - log pi(y)
//   tinker optim/kl_sample_train_v2                     k2               mean of (log mu(y) - log pi(y))^2 / 2
//   tinker teacher_kl                                   teacher_kl       mean of log mu(y) - log teacher(y) (mu: the sampler)
//   tinker <evaluator>/env/all/correct                  accuracy         fraction of the test set's episodes correct
//   nemo-rl train/token_mult_prob_error                 mult_prob_error  mean of exp(|log mu(y) - log pi(y)|)
//
// (mu: the rollout engine / sampler, pi: the trainer, y: the sampled token; the whole table is in import_log.cpp and
// docs/exporting-and-importing.md.) knownKeys() holds the table but the key patterns, which knownKeyPatterns()
// holds: families of keys named after what they were measured on (verl's validation metrics after the data source,
// val-core/<data source>/<var>/<metric>; Tinker's after the dataset, the environment tag or the evaluator) or after
// an option of the run (verl's rejection-sampling statistics, rollout_corr/rollout_rs_<option>_<statistic>). A
// pattern's measure is read without --map from the one logged key that matches it, when no other key fills the
// measure; otherwise every matching key is stored under its own name (the pattern's series: accuracy/openai/gsm8k),
// and when several keys left the measure empty `notes` names them and the --map entry that picks one. A --map entry
// for the pattern's measure always wins.
// Measures that are not StepMetrics columns (prob_diff_*, k2, chi2_token, ...) go to StepMetrics::extrasJson
// under the measure's name; their estimator is recorded with the run (estimatorJson), never in mismatch_kl.
//
// Lines that share a step are merged into one step (Tinker's asynchronous trainer logs its evaluation on a line
// of its own with the step of the next training line): a key on a later line replaces the same key of an earlier
// one, and every replaced value that differs is listed in `conflicts`. A mapped value that cannot be used (not a
// number, NaN or infinite, JSON null: verl's file logger writes NaN and infinities as null, or a fraction for an
// integer measure) is dropped alone and listed in `dropped` with its line and key; the rest of its line is kept.
// A line is skipped, and reported with its line number, when it has no usable step (bad JSON, no step, a negative
// or fractional step, a wrong CSV field count) or no usable mapped value (the reason then names each dropped
// value). A file with no usable line is an InputError naming the file.
//
// Tinker writes the run's configuration to config.json beside metrics.jsonl; when it is there, its num_substeps
// and async_config are read (bounded like every configuration file) into `tinkerConfig`: with several optimizer
// substeps per batch or asynchronous sampling, pi(y) in kl_sample_train_* comes from weights that moved after
// the sampler's, so those values include policy drift on top of the engine mismatch.
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::io {

// TensorBoard: an event file (events.out.tfevents.*) of verl's or NeMo-RL's tensorboard logger
// (core/io/tensorboard_events.h); its "lines" are the file's records (1-based record numbers).
enum class LogSource { Verl, Tinker, Csv, TensorBoard };
std::string toString(LogSource source); // "verl", "tinker", "csv", "tensorboard"
// Every log source, in the order the CLI and the catalogue list them.
const std::vector<LogSource>& logSources();

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

// A family of logged keys that name what they were measured on, or an option of the run. In `key`, <N> stands for
// one or more digits, <option> and <statistic> for one word of their vocabulary (verl's rollout_rs options and the
// statistics verl logs of each: import_log_patterns.cpp), and any other <name> for non-empty text, slashes allowed
// (verl's data sources hold them); a pattern has at most one such text placeholder.
struct KnownKeyPattern {
    LogSource source;
    std::string key; // "val-core/<data source>/acc/mean@<N>"
    std::string measure; // read from the one key that matches; "" for a family whose every key is its own series
    std::string series; // the extras name of each matching key not read into `measure`: "accuracy/<data source>"
    std::string estimator; // an <option> or <statistic> is replaced by its word's description, the others by the text
};
// The key patterns, per source like knownKeys (an event file takes verl's; a CSV header takes verl's and Tinker's).
std::vector<KnownKeyPattern> knownKeyPatterns(LogSource source);
// What `key` is under `pattern`: its series name and estimator with the placeholders replaced, and the unit of the
// value ("" for the measure's own unit; a rollout_rs statistic's is "nats" or "fraction"). nullopt when the key does
// not match.
struct KeyPatternMatch {
    std::string series;
    std::string estimator;
    std::string unit;
};
std::optional<KeyPatternMatch> matchKeyPattern(const KnownKeyPattern& pattern, const std::string& key);

struct LogImportOptions {
    // COLUMN=MEASURE entries (--map); they add to and override the built-in mapping. `COLUMN=step` names the step
    // column of a CSV file.
    std::vector<std::string> map;
};

struct SkippedLine {
    std::int64_t line = 0; // 1-based line number in the file
    std::string reason;
};

// One mapped value dropped from a line that was kept.
struct DroppedValue {
    std::int64_t line = 0;
    std::string key;
    std::string reason; // "is NaN, not a finite number"
};

// A key logged with different values on two lines of one step; the later value is kept.
struct StepConflict {
    std::int64_t step = 0;
    std::string key;
    std::int64_t firstLine = 0;
    double firstValue = 0.0;
    std::int64_t line = 0;
    double value = 0.0; // the value kept
};

// What a Tinker run's config.json says about how kl_sample_train_* was measured.
struct TinkerRunConfig {
    std::string file; // the config.json read
    std::optional<std::int64_t> numSubsteps; // nullopt: the file has no num_substeps
    bool asyncRecorded = false; // the file has an async_config key (null: synchronous training)
    std::optional<std::int64_t> maxStepsOffPolicy; // async_config.max_steps_off_policy when async_config is set
    std::optional<std::int64_t> groupsPerBatch;
    std::optional<std::int64_t> pipelineDepth; // null in the file (Tinker's default) stays nullopt

    // More than one optimizer substep, or asynchronous sampling that may lag (max_steps_off_policy > 0).
    bool includesPolicyDrift() const;
    std::string json() const; // {"file", "num_substeps", "async_config", "kl_sample_train_includes_policy_drift"}
};

// One mapping in use: a logged key, the measure it was read into (or, for a key of a pattern stored under its own
// name, that series name: "accuracy/openai/gsm8k"), its estimator and on how many kept steps it had a value.
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
    std::vector<DroppedValue> dropped; // values dropped from kept lines, in line order
    std::vector<StepConflict> conflicts; // in line order of the replacing line
    std::int64_t linesMerged = 0; // kept lines whose step an earlier line already had
    std::vector<MappedMetric> metrics; // in table order
    std::vector<std::string> unmappedKeys; // logged keys read by no mapping, sorted
    // What the reader chose not to read, and how to read it: a key pattern matched by several keys ("accuracy not
    // read: 2 logged keys match val-core/<data source>/acc/mean@<N> (...), ...; pick one with --map KEY=accuracy").
    std::vector<std::string> notes;
    std::optional<TinkerRunConfig> tinkerConfig; // Tinker, with a usable config.json beside the log
    std::string tinkerConfigProblem; // Tinker: why the config.json beside the log was not used (located), or ""

    // {"measure": {"key", "estimator", "unit", "user_mapped", "steps"}, ...}: the run's estimator record.
    std::string estimatorJson() const;
    // The imported run's config_json: {"source", "file", "map", "estimators", "import": {counts, "notes" when any},
    // "tinker_config": {...} when read}. `absoluteFile` is the log as stored.
    std::string runConfigJson(const std::string& absoluteFile, const std::vector<std::string>& map) const;
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

#pragma once
// What the log importers share (core/io/import_log.cpp is the public entry: the measures and known-key tables, the
// --map mappings and the dispatch; import_log_patterns.cpp the key patterns and the mappings they make). Each source
// reads its file in its own file: import_log_jsonl.cpp (verl's file logger and Tinker's metrics.jsonl),
// import_log_tinker.cpp (Tinker's config.json), import_log_csv.cpp (W&B and other CSV exports),
// import_log_tensorboard.cpp (event files); import_log_reader.cpp merges every source's records into steps;
// import_follow.cpp reads the same records from a file that is still being written. Internal to core/io.
#include "core/io/import_log.h"
#include "core/io/tensorboard_events.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mismatch::io::importing {

using nlohmann::json;

std::string trim(const std::string& text);

// Where a value read from a line lands.
struct Mapping {
    std::string key;
    const ImportMeasure* measure = nullptr; // nullptr: extra:NAME, or a series of a pattern without a measure
    std::string extraName; // the extrasJson key when the measure is not a column, or the series name
    std::string estimator;
    bool userMapped = false;
    // A key of a pattern stored under its own name (extraName: "accuracy/openai/gsm8k"), beside `measure` when the
    // pattern has one; `unit`, when set, replaces the measure's.
    bool series = false;
    std::string unit;
    std::int64_t steps = 0;

    std::string measureName() const
    {
        if (series) {
            return extraName;
        }
        return measure ? measure->name : "extra:" + extraName;
    }
};

struct MapEntry {
    std::string key;
    std::string measure;
};

Mapping makeMapping(const std::string& key, const std::string& measureName, const std::string& estimator, bool user);

// The value of one key on one line.
struct Value {
    enum Kind { Missing, Null, Number, NonFinite, NotNumber } kind = Missing; // Missing: an empty CSV field
    double number = 0.0;
    std::string text; // NonFinite: the literal; NotNumber: what it is
};

void setMeasure(store::StepMetrics& m, json& extras, const Mapping& mapping, double value);

// One record of a log as its source's parser read it (a JSON line, a CSV row, an event file's record): its step and
// key-value pairs, or why it is skipped.
struct ParsedLine {
    std::int64_t line = 0; // 1-based line (or record) number in the file
    std::string skipReason; // not empty: the record is skipped
    bool dataLine = true; // counted in ImportedLog::linesRead (an event file's framing problems are not)
    Value step;
    std::vector<std::pair<std::string, Value>> values;
};

// Collects one log's records into steps (import_log_reader.cpp), whatever their source.
class LogReader {
public:
    LogReader(LogSource source, std::string path) : source_(source), path_(std::move(path))
    {
        result_.file = path_;
        result_.source = source;
    }

    ImportedLog& result() { return result_; }
    const std::string& path() const { return path_; }

    // Mappings for key-value sources (verl, Tinker): the built-in table, where --map replaces the built-in source
    // of a measure and adds its own keys.
    void setMappings(std::vector<Mapping> mappings)
    {
        mappings_ = std::move(mappings);
        byKey_.clear();
        for (size_t i = 0; i < mappings_.size(); ++i) {
            byKey_[mappings_[i].key] = i;
        }
    }
    std::vector<Mapping>& mappings() { return mappings_; }

    // Adds a mapping after the others (a key pattern decided while a followed log grows); lines already read keep
    // what they were read as.
    void addMapping(Mapping mapping)
    {
        byKey_[mapping.key] = mappings_.size();
        mappings_.push_back(std::move(mapping));
    }

    void skip(std::int64_t line, std::string reason) { result_.skipped.push_back({line, std::move(reason)}); }

    // Reads one record (its step value and key -> value pairs) into its step, merging it with earlier lines of
    // the same step, or reports why it cannot be used.
    void record(std::int64_t line, const Value& stepRaw, const std::vector<std::pair<std::string, Value>>& values);
    // A parsed record: counted as a data line when it is one, then skipped with its reason or recorded.
    void feed(const ParsedLine& line);

    // For a reader fed while its file grows (io/import_follow.h): the steps that the records fed since the last call
    // added or changed, each with every value read for it so far, in order of first appearance.
    std::vector<store::StepMetrics> takeChangedSteps();
    // The mappings that have a value on some step (or were mapped with --map), with their step counts so far.
    std::vector<MappedMetric> mappedMetrics() const;
    // Logged keys read by no mapping so far, sorted.
    std::vector<std::string> unmappedKeys() const { return {unmapped_.begin(), unmapped_.end()}; }

    ImportedLog finish();

private:
    // One step's values so far: mapping index -> (value, line it came from).
    struct PendingStep {
        std::int64_t step = 0;
        std::map<size_t, std::pair<double, std::int64_t>> values;
        bool changed = false; // since the last takeChangedSteps()
    };
    store::StepMetrics stepMetrics(const PendingStep& pending) const;

    LogSource source_;
    std::string path_;
    ImportedLog result_;
    std::vector<Mapping> mappings_;
    std::unordered_map<std::string, size_t> byKey_;
    std::vector<PendingStep> steps_; // in order of first appearance
    std::vector<size_t> changed_; // indices into steps_ changed since the last takeChangedSteps(), in that order
    std::map<std::int64_t, size_t> stepIndex_;
    std::set<std::string> unmapped_;
};

// The log's text, without a UTF-8 byte order mark (bounded by limits::kImportFile).
std::string readWholeFile(const std::string& path);
std::vector<std::string> splitLines(const std::string& content);

// The --map entries, checked: InputError for a malformed entry, a column mapped twice or a measure taken twice.
std::vector<MapEntry> parseMapEntries(const LogImportOptions& options);
// Built-in mappings of a key-value source with the --map entries applied.
std::vector<Mapping> keyValueMappings(LogSource source, const std::vector<MapEntry>& entries);

// Every key pattern of every source, in table order (import_log_patterns.cpp).
const std::vector<KnownKeyPattern>& allKeyPatterns();
// The literal text that every key of `pattern` holds (its longest stretch between placeholders), so that a reader
// can skip the lines that cannot hold one.
std::string patternLiteral(const KnownKeyPattern& pattern);

// The mappings knownKeyPatterns(source) adds to a log holding `loggedKeys`. The keys considered are the logged keys
// that match a pattern and that no mapping in `mappedKeys` reads. Per measure of the patterns: one such key, when
// the measure is not in `takenMeasures` (a --map entry or a built-in key the log holds fills it), is read as the
// measure; otherwise each is stored as its series, and when several left the measure empty a line in `notes` names
// them and the --map entry that picks one. Each key of a pattern without a measure is stored as its series. A series
// name that a measure or `takenMeasures` (an extra:NAME as NAME) already uses is replaced by the key. With
// `nameSource` each estimator ends with " (verl key)" or " (tinker key)" (a CSV header).
std::vector<Mapping> patternMappings(LogSource source, const std::vector<std::string>& loggedKeys,
    const std::set<std::string>& mappedKeys, const std::set<std::string>& takenMeasures, bool nameSource,
    std::vector<std::string>& notes);
// For a key-value source whose log holds `loggedKeys`: adds the key patterns' mappings to `mappings` (those of
// keyValueMappings). A measure is taken by a --map entry, or by a built-in key that the log holds.
void addPatternMappings(LogSource source, const std::set<std::string>& loggedKeys, std::vector<Mapping>& mappings,
    std::vector<std::string>& notes);

// Tinker's config.json beside `logPath` (import_log_tinker.cpp).
std::optional<TinkerRunConfig> readTinkerConfig(const std::string& logPath, std::string& problem);
// What the run's config.json says about policy drift, added to the estimator of a kl_sample_train_* metric
// (nothing for other keys, or without num_substeps and async_config in the configuration).
void noteTinkerPolicyDrift(const std::optional<TinkerRunConfig>& config, MappedMetric& metric);

// One non-blank line of a verl or Tinker JSON-lines log (trimmed), numbered `lineNumber` (import_log_jsonl.cpp).
ParsedLine parseJsonLine(LogSource source, std::int64_t lineNumber, const std::string& text);

// A CSV file's header read into the columns each value lands in (import_log_csv.cpp).
struct CsvLayout {
    std::vector<std::string> header; // trimmed column names
    size_t stepColumn = 0;
    std::vector<Mapping> mappings; // the mapped columns' mappings, in column order
};
// The header row `text` (line `lineNumber` of `path`) with the --map entries applied: InputError naming the line for
// a bad header, a --map entry naming no column, or no step column. Notes on key patterns go to `notes`.
CsvLayout csvLayout(const std::string& path, std::int64_t lineNumber, const std::string& text,
    const std::vector<MapEntry>& entries, std::vector<std::string>& notes);
// One data row (not blank) of a CSV file with that header.
ParsedLine csvRecord(const CsvLayout& layout, std::int64_t lineNumber, const std::string& text);

// The records of an event file's bytes as parsed (import_log_tensorboard.cpp), in record order: each record's scalars
// as one record, and each problem as a skipped one ("byte OFFSET: reason"). Record numbers and byte offsets are
// counted from `recordsBefore` and `bytesBefore` (where the bytes start in the file). `withEnd`: the problem that
// ended the reading at an incomplete last record is included (a whole file; a followed file leaves it for its next
// read).
std::vector<ParsedLine> tensorBoardRecords(
    const TensorBoardEvents& events, std::int64_t recordsBefore, std::uint64_t bytesBefore, bool withEnd);

// One reader per source (importLog dispatches).
ImportedLog importJsonLines(LogSource source, const std::string& path, const LogImportOptions& options); // verl, Tinker
ImportedLog importCsv(const std::string& path, const LogImportOptions& options);
ImportedLog importTensorBoard(const std::string& path, const LogImportOptions& options);

} // namespace mismatch::io::importing

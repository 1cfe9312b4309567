// Following a log as it grows (import_follow.h): the file between polls (the open file, where the last read ended,
// its first bytes), one LogReader per version of the file, and the batches stored into the run.
#include "core/io/import_follow.h"

#include "core/io/import_log_internal.h"
#include "core/io/tensorboard_events.h"

#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/store/import_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace mismatch::io {

using namespace importing;

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kFingerprintBytes = 64; // the file's first bytes, compared at every poll
constexpr std::size_t kListed = 5; // skipped lines, dropped values or conflicts named in one message

// The typed step columns by the names the import's measures give them (ImportMeasure::name); staleness, an
// integer, apart.
struct Column {
    const char* name;
    std::optional<double> store::StepMetrics::*field;
};
const Column kColumns[] = {{"mismatch_kl", &store::StepMetrics::mismatchKl}, {"k1", &store::StepMetrics::k1},
    {"k3", &store::StepMetrics::k3}, {"bf16_multiple", &store::StepMetrics::bf16Multiple},
    {"loss", &store::StepMetrics::loss}, {"reward", &store::StepMetrics::reward},
    {"accuracy", &store::StepMetrics::accuracy}, {"entropy", &store::StepMetrics::entropy},
    {"rollout_tokens_per_s", &store::StepMetrics::rolloutTokensPerSecond},
    {"train_tokens_per_s", &store::StepMetrics::trainTokensPerSecond},
    {"wall_time_s", &store::StepMetrics::wallTimeSeconds}};

// A step's values by the name each is stored under (a column's measure name, or its key in extras_json).
json measuresOf(const store::StepMetrics& step)
{
    json measures = json::parse(step.extrasJson.empty() ? std::string("{}") : step.extrasJson, nullptr, false);
    if (!measures.is_object()) {
        measures = json::object(); // not what an import writes (a hand-edited row): nothing of it to keep
    }
    for (const Column& column : kColumns) {
        if (const std::optional<double>& value = step.*column.field) {
            measures[column.name] = *value;
        }
    }
    if (step.staleness) {
        measures["staleness"] = *step.staleness;
    }
    return measures;
}

// The inverse of measuresOf.
store::StepMetrics stepOf(std::int64_t step, const json& measures)
{
    store::StepMetrics metrics;
    metrics.step = step;
    json extras = json::object();
    for (const auto& item : measures.items()) {
        const std::string& name = item.key(); // a named reference: C++17 lambdas cannot capture structured bindings
        const json& value = item.value();
        const auto column = std::find_if(
            std::begin(kColumns), std::end(kColumns), [&name](const Column& c) { return name == c.name; });
        if (column != std::end(kColumns) && value.is_number()) {
            metrics.*column->field = value.get<double>();
        } else if (name == "staleness" && value.is_number_integer()) {
            metrics.staleness = value.get<std::int64_t>();
        } else {
            extras[name] = value;
        }
    }
    metrics.extrasJson = extras.dump();
    return metrics;
}

// The name a measure's values are stored under: extra:NAME keeps NAME in extras_json.
std::string storedName(const std::string& measure)
{
    return measure.rfind("extra:", 0) == 0 ? measure.substr(6) : measure;
}

std::string absolutePath(const std::string& file)
{
    std::error_code error;
    const fs::path path = fs::absolute(file, error);
    return error ? file : path.lexically_normal().string();
}

std::string systemReason(int error)
{
    return std::strerror(error);
}

// "steps 3 to 7" / "step 3".
std::string stepRange(std::int64_t first, std::int64_t last)
{
    return first == last ? "step " + std::to_string(first)
                         : "steps " + std::to_string(first) + " to " + std::to_string(last);
}

// "steps 1, 2, 5 to 9": consecutive runs of a sorted list joined.
std::string stepList(const std::vector<std::int64_t>& steps)
{
    std::string text;
    for (std::size_t i = 0; i < steps.size();) {
        std::size_t j = i;
        while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) {
            ++j;
        }
        text += (text.empty() ? "" : ", ") + std::to_string(steps[i])
            + (j > i ? " to " + std::to_string(steps[j]) : std::string());
        i = j + 1;
    }
    return (steps.size() == 1 ? "step " : "steps ") + text;
}

// Follows one file into one run (followLog's state between polls).
class Follower {
public:
    Follower(store::RunStore& store, LogSource source, const std::string& path, const FollowOptions& options,
        Progress& progress, FollowResult& result)
        : store_(store)
        , source_(source)
        , path_(path)
        , options_(options)
        , progress_(progress)
        , result_(result)
        , limit_(limitBytes(limits::kImportFile))
    {
    }
    ~Follower() { closeFile(); }
    Follower(const Follower&) = delete;
    Follower& operator=(const Follower&) = delete;

    // The --map entries, the run to continue (when one of the name imported this file) and Tinker's config.json.
    void prepare();
    // Reads what the file holds beyond the last read, and stores it; true when the file grew (or was replaced).
    bool poll();
    // At the end: the last line without its newline when the file did not grow during the last poll (`settled`),
    // then the last version's counts.
    void finish(bool settled);
    std::int64_t runId() const { return runId_; }

private:
    struct Read {
        std::uint64_t bytes = 0; // consumed
        bool more = false; // the file holds more than this read took
    };

    void say(const std::string& message);
    bool openFile();
    void closeFile();
    // A new version of the file (the first, after a truncation or after a rotation): read from its start.
    void startVersion();
    // The version read so far is over: its counts join the totals.
    void endVersion();
    // Reads from offset_ to the file's end (at most the import limit): whole lines or records; `toEnd` takes a last
    // line without its newline too (or reports an incomplete last record).
    Read readAvailable(bool toEnd);
    void readText(const std::string& bytes, bool toEnd, Read& read);
    void readEvents(const std::string& bytes, bool toEnd, Read& read);
    // Adds the key patterns' mappings that the keys logged so far decide.
    void updatePatternMappings(const std::vector<ParsedLine>& records);
    void feed(const std::vector<ParsedLine>& records);
    // Stores the steps the records fed since the last call added or changed, in one transaction.
    void storeChanged();
    void reportLines();
    void refreshMetrics();
    store::ExternalRunSpec runSpec() const;

    store::RunStore& store_;
    LogSource source_;
    std::string path_;
    const FollowOptions& options_;
    Progress& progress_;
    FollowResult& result_;
    std::uint64_t limit_;
    std::string absoluteFile_;
    std::vector<MapEntry> entries_;

    // The file.
    int fd_ = -1;
    dev_t device_ = 0;
    ino_t inode_ = 0;
    std::uint64_t offset_ = 0; // where the next read starts: after the last whole line or record
    std::string fingerprint_; // the first bytes read (at most kFingerprintBytes)
    bool waitingReported_ = false;
    bool stuck_ = false; // an event file whose framing broke: nothing more is read until it is truncated or replaced

    // The version of the file being read.
    std::unique_ptr<LogReader> reader_;
    std::int64_t lines_ = 0; // lines (or records) of this version read
    std::optional<CsvLayout> csv_;
    std::set<std::int64_t> versionSteps_; // steps this version logged that are stored
    std::size_t skippedReported_ = 0; // of reader_'s skipped lines, dropped values and conflicts, those reported
    std::size_t droppedReported_ = 0;
    std::size_t conflictsReported_ = 0;
    std::int64_t linesBefore_ = 0; // lines read and merged in earlier versions
    std::int64_t mergedBefore_ = 0;
    std::set<std::string> unmappedBefore_;

    // The log's mappings (verl, Tinker, event files; a CSV file's come from its header) and what decides them.
    std::vector<Mapping> mappings_;
    std::set<std::string> loggedKeys_;

    // The run.
    std::int64_t runId_ = 0;
    std::string name_;
    std::set<std::int64_t> stored_; // its steps
    std::map<std::string, std::int64_t> stepsWith_; // stored name of a measure -> the run's steps that have it
    std::vector<MappedMetric> metrics_; // its estimator record, in the order the measures were first read
};

void Follower::say(const std::string& message)
{
    result_.messages.push_back(message);
    progress_.setStage(message);
    if (options_.onMessage) {
        options_.onMessage(message);
    }
}

void Follower::prepare()
{
    absoluteFile_ = absolutePath(path_);
    entries_ = parseMapEntries(options_.import);
    if (source_ != LogSource::Csv) {
        mappings_ = keyValueMappings(source_, entries_);
    }
    name_ = options_.name.empty() ? toString(source_) + " " + fs::path(path_).filename().string() : options_.name;
    result_.name = name_;
    result_.file = path_;
    result_.source = source_;
    result_.log.file = path_;
    result_.log.source = source_;

    std::vector<store::RunInfo> named;
    for (store::RunInfo& run : store_.listRuns()) {
        if (run.name == name_) {
            named.push_back(std::move(run));
        }
    }
    if (named.size() > 1) {
        std::string ids;
        for (const store::RunInfo& run : named) {
            ids += (ids.empty() ? "" : ", ") + std::to_string(run.id);
        }
        throw InputError("--name", name_, "names runs " + ids + "; give a name no run has, or the name of one import of "
                + path_ + " to continue it");
    }
    if (named.size() == 1) {
        const store::RunInfo& run = named.front();
        const auto external = store::externalRun(store_, run.id);
        const json config = json::parse(run.configJson, nullptr, false);
        const bool sameFile = config.is_object() && config.contains("file") && config["file"].is_string()
            && config["file"].get<std::string>() == absoluteFile_;
        if (!external || external->source != toString(source_) || !sameFile) {
            throw InputError("--name", name_, "is run " + std::to_string(run.id) + " (kind " + run.kind
                    + "), not an import of " + absoluteFile_ + " from " + toString(source_)
                    + "; give another name (a follow continues only a run that imported the same file)");
        }
        store_.reopenRun(run.id, std::numeric_limits<std::int64_t>::max()); // its writer lock; deletes nothing
        runId_ = run.id;
        result_.runId = run.id;
        result_.resumed = true;
        for (const store::StepMetrics& step : store_.stepsAfter(run.id)) {
            stored_.insert(step.step);
            const json measures = measuresOf(step); // items() refers to it: it must outlive the loop
            for (const auto& measure : measures.items()) {
                ++stepsWith_[measure.key()];
            }
        }
        // The measures it has stored keep their record; this follow's reading adds to it.
        const json record = json::parse(external->estimatorJson, nullptr, false);
        if (record.is_object()) {
            for (const auto& [measure, entry] : record.items()) {
                if (entry.is_object()) {
                    MappedMetric metric;
                    metric.measure = measure;
                    metric.key = entry.value("key", std::string());
                    metric.estimator = entry.value("estimator", std::string());
                    metric.unit = entry.value("unit", std::string());
                    metric.userMapped = entry.value("user_mapped", false);
                    metrics_.push_back(std::move(metric));
                }
            }
        }
        say("continuing run " + std::to_string(run.id) + " \"" + name_ + "\": its " + std::to_string(stored_.size())
            + " stored steps are kept; " + path_ + " is read from its start (steps logged again merge into them)");
    }
    if (source_ == LogSource::Tinker) {
        result_.log.tinkerConfig = readTinkerConfig(path_, result_.log.tinkerConfigProblem);
    }
    std::ostringstream every;
    every << options_.pollSeconds;
    say("following " + path_ + " (" + toString(source_) + ") into run \"" + name_ + "\", reading it every " + every.str()
        + " s");
}

bool Follower::openFile()
{
    const PathKind kind = pathKind(path_);
    if (kind == PathKind::Missing) {
        if (!waitingReported_) {
            waitingReported_ = true;
            say("waiting for " + path_ + " to appear");
        }
        return false;
    }
    requireRegularFile(path_, "log file"); // a directory, FIFO or device is an error, not something to wait for
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            return false; // gone again between the two looks: the next poll waits for it
        }
        throw InputError(path_, "", "cannot open the log file: " + systemReason(errno));
    }
    struct stat status {};
    if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
        ::close(fd);
        throw InputError(path_, "", "is not a regular file (a log file to follow must be one)");
    }
    fd_ = fd;
    device_ = status.st_dev;
    inode_ = status.st_ino;
    waitingReported_ = false;
    startVersion();
    return true;
}

void Follower::closeFile()
{
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
}

void Follower::startVersion()
{
    offset_ = 0;
    fingerprint_.clear();
    stuck_ = false;
    lines_ = 0;
    csv_.reset();
    versionSteps_.clear();
    skippedReported_ = droppedReported_ = conflictsReported_ = 0;
    reader_ = std::make_unique<LogReader>(source_, path_);
    if (source_ != LogSource::Csv) {
        reader_->setMappings(mappings_); // a CSV file's come with its header
    }
}

void Follower::endVersion()
{
    if (!reader_) {
        return;
    }
    storeChanged();
    const ImportedLog& read = reader_->result();
    linesBefore_ += read.linesRead;
    mergedBefore_ += read.linesMerged;
    for (const std::string& key : reader_->unmappedKeys()) {
        unmappedBefore_.insert(key);
    }
    reader_.reset();
}

bool Follower::poll()
{
    bool grew = false;
    for (;;) {
        if (fd_ < 0 && !openFile()) {
            return grew;
        }
        struct stat atPath {};
        const bool present = ::stat(path_.c_str(), &atPath) == 0;
        if (!present || atPath.st_dev != device_ || atPath.st_ino != inode_) {
            // Rotated: the path names another file, or none. The old file is read to its end (its writer has moved
            // on), then the new one from its start.
            readAvailable(true);
            endVersion();
            closeFile();
            ++result_.rotations;
            say(path_ + (present ? " was replaced by a new file (rotation)" : " was moved away or deleted (rotation)")
                + ": the old file was read to its end; "
                + (present ? "reading the new file from its start" : "waiting for a new " + path_)
                + " (steps it logs again merge into the stored ones)");
            waitingReported_ = !present;
            grew = true;
            continue;
        }
        struct stat status {};
        if (::fstat(fd_, &status) != 0) {
            throw InputError(path_, "", "cannot examine the log file: " + systemReason(errno));
        }
        const auto size = static_cast<std::uint64_t>(status.st_size);
        bool rewritten = size < offset_;
        if (!rewritten && !fingerprint_.empty()) {
            std::string first(fingerprint_.size(), '\0');
            rewritten = ::pread(fd_, first.data(), first.size(), 0) != static_cast<ssize_t>(first.size())
                || first != fingerprint_;
        }
        if (rewritten) {
            const std::uint64_t read = offset_;
            endVersion();
            startVersion();
            ++result_.truncations;
            say(path_ + (size < read ? " shrank from " + formatByteSize(read) + " to " + formatByteSize(size)
                                     : std::string(" was rewritten in place (its first bytes changed)"))
                + " (truncated: a restarted trainer?): reading it again from its start (steps it logs again merge "
                  "into the stored ones)");
            grew = true;
        }
        const Read read = readAvailable(false);
        grew = grew || read.bytes > 0;
        if (!read.more) {
            return grew;
        }
    }
}

Follower::Read Follower::readAvailable(bool toEnd)
{
    Read read;
    struct stat status {};
    if (fd_ < 0 || stuck_ || ::fstat(fd_, &status) != 0) {
        return read;
    }
    const auto size = static_cast<std::uint64_t>(status.st_size);
    if (size <= offset_) {
        return read;
    }
    const auto wanted = static_cast<std::size_t>(std::min<std::uint64_t>(size - offset_, limit_));
    std::string bytes(wanted, '\0');
    std::size_t got = 0;
    while (got < wanted) {
        const ssize_t n = ::pread(fd_, bytes.data() + got, wanted - got, static_cast<off_t>(offset_ + got));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            throw InputError(path_, "byte " + std::to_string(offset_ + got), "cannot read the log file: "
                    + systemReason(errno));
        }
        if (n == 0) {
            break; // shorter than it said: the next poll sees the truncation
        }
        got += static_cast<std::size_t>(n);
    }
    bytes.resize(got);
    if (offset_ <= fingerprint_.size() && fingerprint_.size() < kFingerprintBytes) {
        // The file's first bytes as far as they are read (a short first read is completed by the next).
        fingerprint_ = fingerprint_.substr(0, static_cast<std::size_t>(offset_))
            + bytes.substr(0, kFingerprintBytes - static_cast<std::size_t>(offset_));
    }
    if (source_ == LogSource::TensorBoard) {
        readEvents(bytes, toEnd, read);
    } else {
        readText(bytes, toEnd, read);
    }
    if (read.bytes == 0 && got == limit_) {
        throw InputError(path_, "byte " + std::to_string(offset_),
            std::string(source_ == LogSource::TensorBoard ? "a record" : "a line") + " longer than the "
                + formatByteSize(limit_) + " limit for " + limits::kImportFile.kind + "; set "
                + limits::kImportFile.variable + "=BYTES to raise it");
    }
    offset_ += read.bytes;
    read.more = read.bytes > 0 && offset_ < size;
    return read;
}

void Follower::readText(const std::string& bytes, bool toEnd, Read& read)
{
    std::size_t begin = 0;
    if (offset_ == 0 && bytes.compare(0, 3, "\xEF\xBB\xBF") == 0) {
        begin = 3; // UTF-8 byte order mark
    }
    const auto lastNewline = bytes.rfind('\n');
    std::size_t end = lastNewline == std::string::npos || lastNewline < begin ? begin : lastNewline + 1;
    if (toEnd) {
        end = bytes.size(); // the writer is done with this file: a last line without its newline is a line
    }
    if (end == begin) {
        return; // no whole line yet
    }
    std::vector<ParsedLine> records;
    for (std::size_t at = begin; at < end;) {
        const auto newline = bytes.find('\n', at);
        const std::size_t stop = newline == std::string::npos || newline >= end ? end : newline;
        std::string line = bytes.substr(at, stop - at);
        at = stop + 1;
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        const std::int64_t number = ++lines_;
        if (trim(line).empty()) {
            continue;
        }
        if (source_ != LogSource::Csv) {
            records.push_back(parseJsonLine(source_, number, trim(line)));
        } else if (!csv_) {
            // The first line that is not blank: the header, which sets this version's mappings.
            csv_ = csvLayout(path_, number, line, entries_, reader_->result().notes);
            reader_->setMappings(csv_->mappings);
            for (const std::string& note : reader_->result().notes) {
                if (std::find(result_.log.notes.begin(), result_.log.notes.end(), note) == result_.log.notes.end()) {
                    result_.log.notes.push_back(note);
                    say("note: " + note);
                }
            }
        } else {
            records.push_back(csvRecord(*csv_, number, line));
        }
    }
    read.bytes = end;
    feed(records);
}

void Follower::readEvents(const std::string& bytes, bool toEnd, Read& read)
{
    const TensorBoardEvents events = parseTensorBoardEvents(bytes);
    std::vector<ParsedLine> records = tensorBoardRecords(events, lines_, offset_, toEnd);
    lines_ += events.records;
    read.bytes = events.bytesRead;
    if (!events.endsInsideRecord && events.bytesRead < bytes.size()) {
        // A length whose CRC does not match: the framing cannot be found again after it.
        stuck_ = true;
        say(path_ + ": reading stops at byte " + std::to_string(offset_ + events.bytesRead)
            + " (the record's length CRC does not match); the file is read again when it is truncated or replaced");
    }
    feed(records);
}

void Follower::updatePatternMappings(const std::vector<ParsedLine>& records)
{
    const std::size_t knownBefore = loggedKeys_.size();
    for (const ParsedLine& record : records) {
        for (const auto& value : record.values) {
            loggedKeys_.insert(value.first);
        }
    }
    if (loggedKeys_.size() == knownBefore || knownKeyPatterns(source_).empty()) {
        return;
    }
    const std::size_t before = mappings_.size();
    std::vector<std::string> notes;
    addPatternMappings(source_, loggedKeys_, mappings_, notes);
    for (std::size_t i = before; i < mappings_.size(); ++i) {
        reader_->addMapping(mappings_[i]);
    }
    for (const std::string& note : notes) {
        if (std::find(result_.log.notes.begin(), result_.log.notes.end(), note) == result_.log.notes.end()) {
            result_.log.notes.push_back(note);
            say("note: " + note);
        }
    }
}

void Follower::feed(const std::vector<ParsedLine>& records)
{
    if (records.empty()) {
        return;
    }
    if (source_ != LogSource::Csv) {
        updatePatternMappings(records);
    }
    for (const ParsedLine& record : records) {
        reader_->feed(record);
    }
    storeChanged();
}

void Follower::reportLines()
{
    ImportedLog& read = reader_->result();
    const auto listed = [](std::size_t count) {
        return count > kListed ? "; ... and " + std::to_string(count - kListed) + " more" : std::string();
    };
    if (read.skipped.size() > skippedReported_) {
        std::string text;
        for (std::size_t i = skippedReported_; i < read.skipped.size() && i < skippedReported_ + kListed; ++i) {
            text += (text.empty() ? "" : "; ") + std::string("line ") + std::to_string(read.skipped[i].line) + ": "
                + read.skipped[i].reason;
        }
        say(path_ + ": skipped " + text + listed(read.skipped.size() - skippedReported_));
        result_.log.skipped.insert(result_.log.skipped.end(), read.skipped.begin() + static_cast<std::ptrdiff_t>(skippedReported_),
            read.skipped.end());
        skippedReported_ = read.skipped.size();
    }
    if (read.dropped.size() > droppedReported_) {
        std::string text;
        for (std::size_t i = droppedReported_; i < read.dropped.size() && i < droppedReported_ + kListed; ++i) {
            text += (text.empty() ? "" : "; ") + std::string("line ") + std::to_string(read.dropped[i].line) + ": "
                + read.dropped[i].key + " " + read.dropped[i].reason;
        }
        say(path_ + ": dropped values (the rest of each line was kept): " + text
            + listed(read.dropped.size() - droppedReported_));
        result_.log.dropped.insert(result_.log.dropped.end(), read.dropped.begin() + static_cast<std::ptrdiff_t>(droppedReported_),
            read.dropped.end());
        droppedReported_ = read.dropped.size();
    }
    if (read.conflicts.size() > conflictsReported_) {
        std::string text;
        for (std::size_t i = conflictsReported_; i < read.conflicts.size() && i < conflictsReported_ + kListed; ++i) {
            const StepConflict& c = read.conflicts[i];
            std::ostringstream values;
            values << c.firstValue << " (line " << c.firstLine << ") replaced by " << c.value << " (line " << c.line
                   << ")";
            text += (text.empty() ? "" : "; ") + std::string("step ") + std::to_string(c.step) + ", " + c.key + ": "
                + values.str();
        }
        say(path_ + ": keys logged with different values on lines of one step (the later line's value is kept): " + text
            + listed(read.conflicts.size() - conflictsReported_));
        result_.log.conflicts.insert(result_.log.conflicts.end(),
            read.conflicts.begin() + static_cast<std::ptrdiff_t>(conflictsReported_), read.conflicts.end());
        conflictsReported_ = read.conflicts.size();
    }
    result_.log.linesRead = linesBefore_ + read.linesRead;
    result_.log.linesMerged = mergedBefore_ + read.linesMerged;
}

void Follower::refreshMetrics()
{
    for (const MappedMetric& read : reader_ ? reader_->mappedMetrics() : std::vector<MappedMetric>()) {
        auto metric = std::find_if(
            metrics_.begin(), metrics_.end(), [&](const MappedMetric& m) { return m.measure == read.measure; });
        if (metric == metrics_.end()) {
            metric = metrics_.insert(metrics_.end(), read);
        } else {
            *metric = read; // the newest reading names the key and estimator
        }
        noteTinkerPolicyDrift(result_.log.tinkerConfig, *metric);
    }
    for (MappedMetric& metric : metrics_) {
        const auto count = stepsWith_.find(storedName(metric.measure));
        metric.steps = count == stepsWith_.end() ? 0 : count->second;
    }
    result_.log.metrics = metrics_;
}

store::ExternalRunSpec Follower::runSpec() const
{
    store::ExternalRunSpec spec;
    spec.name = name_;
    spec.source = toString(source_);
    spec.file = path_;
    spec.estimatorJson = result_.log.estimatorJson();
    json config = json::parse(result_.log.runConfigJson(absoluteFile_, options_.import.map));
    config["follow"] = {{"poll_seconds", options_.pollSeconds}, {"truncations", result_.truncations},
        {"rotations", result_.rotations}};
    spec.configJson = config.dump();
    return spec;
}

void Follower::storeChanged()
{
    reportLines();
    std::vector<store::StepMetrics> batch;
    std::vector<std::int64_t> added;
    std::vector<std::int64_t> updated;
    std::vector<std::int64_t> again; // stored before this version, changed by it
    std::vector<std::int64_t> unchanged; // stored before this version, logged again with the values stored
    std::map<std::string, std::int64_t> gained; // stored name -> steps that now have it and had not
    for (const store::StepMetrics& read : reader_->takeChangedSteps()) {
        json measures = measuresOf(read);
        json before = json::object();
        if (stored_.count(read.step)) {
            if (const auto row = store_.stepMetrics(runId_, read.step)) {
                before = measuresOf(*row);
            }
            // The stored values with the ones read over them: a later line's value wins, as importLog merges.
            json merged = before;
            merged.update(measures);
            measures = std::move(merged);
            if (measures == before) {
                if (!versionSteps_.count(read.step)) {
                    unchanged.push_back(read.step);
                }
                versionSteps_.insert(read.step);
                continue;
            }
            (versionSteps_.count(read.step) ? updated : again).push_back(read.step);
        } else {
            added.push_back(read.step);
        }
        versionSteps_.insert(read.step);
        for (const auto& measure : measures.items()) {
            if (!before.contains(measure.key())) {
                ++gained[measure.key()];
            }
        }
        batch.push_back(stepOf(read.step, measures));
    }
    std::sort(unchanged.begin(), unchanged.end());
    if (!unchanged.empty()) {
        result_.stepsUnchanged += static_cast<std::int64_t>(unchanged.size());
        say(path_ + ": " + stepList(unchanged) + " logged again with the values stored: kept as they are");
    }
    if (batch.empty()) {
        return;
    }
    for (const auto& [name, count] : gained) {
        stepsWith_[name] += count;
    }
    refreshMetrics();
    result_.log.unmappedKeys.clear();
    std::set<std::string> unmapped = unmappedBefore_;
    for (const std::string& key : reader_->unmappedKeys()) {
        unmapped.insert(key);
    }
    result_.log.unmappedKeys.assign(unmapped.begin(), unmapped.end());
    const bool recorded = runId_ != 0;
    runId_ = store::storeFollowedSteps(store_, runId_, runSpec(), batch);
    result_.runId = runId_;
    for (const store::StepMetrics& step : batch) {
        stored_.insert(step.step);
    }
    result_.stepsStored += static_cast<std::int64_t>(added.size());
    result_.stepsUpdated += static_cast<std::int64_t>(updated.size() + again.size());
    std::string text;
    if (!added.empty()) {
        std::sort(added.begin(), added.end());
        text = "stored " + stepList(added);
    }
    if (!updated.empty()) {
        std::sort(updated.begin(), updated.end());
        text += (text.empty() ? "" : "; ") + std::string("added later lines to ") + stepList(updated);
    }
    if (!again.empty()) {
        std::sort(again.begin(), again.end());
        text += (text.empty() ? "" : "; ") + stepList(again)
            + " (stored before) logged again: merged, a value read now replacing the stored one";
    }
    say(text + " (run " + std::to_string(runId_) + " \"" + name_ + "\"" + (recorded ? "" : ", recorded now") + "; "
        + std::to_string(stored_.size()) + " steps, " + stepRange(*stored_.begin(), *stored_.rbegin()) + ")");
}

void Follower::finish(bool settled)
{
    if (fd_ >= 0 && settled) {
        readAvailable(true); // nothing was written during the last poll: a line without its newline is the last
    }
    struct stat status {};
    if (fd_ >= 0 && !settled && ::fstat(fd_, &status) == 0 && static_cast<std::uint64_t>(status.st_size) > offset_) {
        say(path_ + ": the last " + std::to_string(static_cast<std::uint64_t>(status.st_size) - offset_)
            + " bytes (a line or record still being written) were left unread");
    }
    if (reader_) {
        if (source_ == LogSource::Csv && !csv_ && fd_ >= 0) {
            say(path_ + ": no header row was read");
        }
        endVersion();
    }
    closeFile();
    result_.log.unmappedKeys.assign(unmappedBefore_.begin(), unmappedBefore_.end());
    if (runId_ != 0) {
        // The last counts with the run's record (the batches stored it with the counts of their time).
        refreshMetrics();
        store::storeFollowedSteps(store_, runId_, runSpec(), {});
    }
    result_.runSteps = static_cast<std::int64_t>(stored_.size());
    if (!stored_.empty()) {
        result_.firstStep = *stored_.begin();
        result_.lastStep = *stored_.rbegin();
    }
}

// Why nothing was imported: the data lines read and the first lines skipped, as importLog says it.
std::string nothingReadDetail(const FollowResult& result, double seconds)
{
    std::ostringstream detail;
    detail << "no usable line after following it for " << std::lround(seconds) << " s (" << result.log.linesRead
           << " data lines read";
    for (std::size_t i = 0; i < result.log.skipped.size() && i < 3; ++i) {
        detail << (i ? "; " : "; first skipped: ") << "line " << result.log.skipped[i].line << ": "
               << result.log.skipped[i].reason;
    }
    detail << "); nothing was imported";
    return detail.str();
}

} // namespace

FollowResult followLog(store::RunStore& store, LogSource source, const std::string& path, const FollowOptions& options,
    Progress& progress)
{
    assert(options.wait); // core never sleeps: the front-end waits between polls
    assert(options.pollSeconds > 0);
    const auto steadySeconds = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    const std::function<double()> clock = options.clock ? options.clock : std::function<double()>(steadySeconds);
    if (store.readOnly()) {
        throw StoreError(store.path(), "is open read-only; following a log needs to write");
    }
    FollowResult result;
    Follower follower(store, source, path, options, progress, result);
    const double started = clock();
    try {
        follower.prepare();
        double lastGrowth = started;
        bool settled = false;
        for (;;) {
            if (progress.cancelled()) {
                result.stoppedBy = "cancelled";
                break;
            }
            const bool grew = follower.poll();
            ++result.polls;
            const double now = clock();
            if (grew) {
                lastGrowth = now;
            }
            settled = !grew;
            if (options.idleExitSeconds && now - lastGrowth >= *options.idleExitSeconds) {
                result.stoppedBy = "idle";
                break;
            }
            options.wait(options.pollSeconds);
        }
        follower.finish(settled);
    } catch (const std::exception& error) {
        if (follower.runId() != 0) {
            store::markRunEnded(store, follower.runId(), store::RunStatus::Failed, error.what());
        }
        throw;
    }
    if (follower.runId() == 0) {
        if (result.stoppedBy == "cancelled") {
            throw CancelledError("following " + path + " (nothing was imported: no usable line was read)");
        }
        throw InputError(path, "", nothingReadDetail(result, clock() - started));
    }
    store.finishRun(follower.runId(), store::RunStatus::Finished);
    return result;
}

nlohmann::json followResultJson(const FollowResult& result, const std::string& workspace)
{
    const ImportedLog& log = result.log;
    json skipped = json::array();
    for (const auto& s : log.skipped) {
        skipped.push_back({{"line", s.line}, {"reason", s.reason}});
    }
    json dropped = json::array();
    for (const auto& d : log.dropped) {
        dropped.push_back({{"line", d.line}, {"key", d.key}, {"reason", d.reason}});
    }
    json conflicts = json::array();
    for (const auto& c : log.conflicts) {
        conflicts.push_back({{"step", c.step}, {"key", c.key}, {"first_line", c.firstLine},
            {"first_value", c.firstValue}, {"line", c.line}, {"value", c.value}});
    }
    json metrics = json::array();
    for (const auto& m : log.metrics) {
        metrics.push_back({{"key", m.key}, {"measure", m.measure}, {"estimator", m.estimator}, {"unit", m.unit},
            {"user_mapped", m.userMapped}, {"steps", m.steps}});
    }
    json out = {{"run_id", result.runId}, {"name", result.name}, {"kind", "external"},
        {"source", toString(result.source)}, {"file", result.file}, {"workspace", workspace},
        {"resumed", result.resumed}, {"stopped_by", result.stoppedBy}, {"polls", result.polls},
        {"truncations", result.truncations}, {"rotations", result.rotations}, {"steps_stored", result.stepsStored},
        {"steps_updated", result.stepsUpdated}, {"steps_unchanged", result.stepsUnchanged},
        {"run_steps", result.runSteps}, {"first_step", result.firstStep ? json(*result.firstStep) : json()},
        {"last_step", result.lastStep ? json(*result.lastStep) : json()}, {"lines_read", log.linesRead},
        {"lines_skipped", log.skipped.size()}, {"skipped", skipped}, {"lines_merged", log.linesMerged},
        {"dropped_values", dropped}, {"conflicts", conflicts}, {"metrics", metrics},
        {"unmapped_keys", log.unmappedKeys}, {"notes", log.notes}, {"messages", result.messages}};
    if (log.tinkerConfig) {
        out["tinker_config"] = json::parse(log.tinkerConfig->json());
    }
    return out;
}

} // namespace mismatch::io

#pragma once
// Following a log while an outside trainer writes it: `mismatch import verl|tinker|csv|tensorboard FILE --follow` and
// the dashboard's Follow Training Log. The file (a verl or Tinker JSON-lines log, a CSV file, a TensorBoard event
// file; often on a shared file system, written by a cluster job) is read again at every poll from where the last
// read ended: whole lines only (a line is read once its newline is written; a CSV file's header first), whole records
// of an event file (its length, data and CRCs all written). Each record is read as importLog reads it
// (io/import_log.h: the same mappings, estimators, skipped lines and dropped values), and the steps one read brings
// are stored into one imported run in one transaction (store::storeFollowedSteps): the run is recorded, running,
// when its first step is stored, and finished when the follow stops.
//
// One row per step. A line of a step that is stored already is merged into it as importLog merges the lines of one
// step (a key on the later line replaces the stored value; a changed value is listed as a conflict), and the step is
// written again: following a log that is only appended to stores what importing it whole at the end would store,
// Tinker's asynchronous trainer included (its evaluation line comes before the training line of the same step).
//
// Truncation (the file is shorter than what was read, or its first bytes changed: rewritten in place) and rotation
// (the path names another file, or none for a while: the old one renamed or deleted) are reported in a message and
// followed: a rotated file is first read to its end (its last line too: its writer has moved on), then the new file,
// or the truncated one, is read from its start. The steps it logs again (a trainer restarted from a checkpoint logs
// the steps after that checkpoint again) merge into the stored steps as above, so the later values win; steps logged
// again with the values stored are left as they are, and the message says how many steps changed. A follow started
// again under the name of a run that imported the same file from the same source continues that run (the file is
// read from its start; its stored steps are kept and merge the same way); under a name that another run has, it is
// refused.
//
// A key pattern's measure (verl's val-core/<data source>/acc/mean@<N>) is decided by the keys logged so far: it is
// read from the first key of it that the log holds, and a key of it that appears later is read as importLog reads the
// keys of a pattern whose measure another key fills (importLog, which sees the whole file at once, would read none of
// several keys as the measure).
//
// Stopping: when the progress is cancelled (the CLI's Ctrl-C and SIGTERM, the GUI's Cancel), or after
// `idleExitSeconds` without the file growing. A line without its newline at the end of a file that did not grow
// during the last poll is then read as the last line, and the run is finished. Every batch is one transaction: the
// workspace is consistent whenever the follow stops, even when its process is killed (the run stays running until a
// follow of it is started again). Core never sleeps: the loop waits between polls through options.wait, the
// front-end's.
#include "core/common/progress.h"
#include "core/io/import_log.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::io {

struct FollowOptions {
    LogImportOptions import; // --map
    std::string name; // the run's name; empty: "SOURCE FILE-NAME", as the import names its run
    double pollSeconds = 1.0; // between reads of the file (> 0)
    std::optional<double> idleExitSeconds; // stop after this long without the file growing; nullopt: until cancelled
    // Waits `seconds` between two polls and returns early once the progress is cancelled (within a fraction of a
    // second). Required: the front-end's, since core never sleeps.
    std::function<void(double seconds)> wait;
    // Seconds on a monotonic clock, for the idle time; empty: std::chrono::steady_clock. A test passes its own clock,
    // moved by its wait.
    std::function<double()> clock;
    // Each message as it is made (also the progress's stage): steps stored, truncation, rotation, skipped lines.
    std::function<void(const std::string& message)> onMessage;
};

struct FollowResult {
    std::int64_t runId = 0;
    std::string name;
    std::string file; // as given
    LogSource source = LogSource::Verl;
    bool resumed = false; // continued a run stored before
    std::int64_t stepsStored = 0; // steps this follow added to the run
    std::int64_t stepsUpdated = 0; // writes of a stored step whose values a later line changed
    std::int64_t stepsUnchanged = 0; // stored steps read again with the values stored (after a truncation, ...)
    std::int64_t runSteps = 0; // the run's steps when the follow stopped
    std::optional<std::int64_t> firstStep; // the smallest and largest step of the run
    std::optional<std::int64_t> lastStep;
    std::int64_t polls = 0;
    std::int64_t truncations = 0;
    std::int64_t rotations = 0;
    std::string stoppedBy; // "cancelled" or "idle"
    // What was read, over every version of the file (ImportedLog::steps stays empty: the steps are in the store);
    // `metrics` counts the run's stored steps with each measure.
    ImportedLog log;
    std::vector<std::string> messages; // every message, in order
};

// Follows `path` into the workspace until cancelled or idle (see above). Throws InputError for a bad --map entry, a
// name that another run has, a file that is not a regular file, a CSV header that cannot be read, a line or record
// over the import limit, and a follow that stopped at its idle time without having stored a step ("no usable
// line"); CancelledError when cancelled before it stored a step; StoreError when the store cannot be written (or
// the run is being followed by another living process). A run that was recorded is marked failed on an error, and
// finished otherwise.
FollowResult followLog(store::RunStore& store, LogSource source, const std::string& path, const FollowOptions& options,
    Progress& progress);

// `mismatch import ... --follow --json`: {"run_id", "name", "kind", "source", "file", "workspace", "resumed",
// "stopped_by", "polls", "truncations", "rotations", "steps_stored", "steps_updated", "steps_unchanged", "run_steps",
// "first_step", "last_step", "lines_read", "lines_skipped", "skipped", "lines_merged", "dropped_values",
// "conflicts", "metrics", "unmapped_keys", "notes", "messages"} and "tinker_config" when read.
nlohmann::json followResultJson(const FollowResult& result, const std::string& workspace);

} // namespace mismatch::io

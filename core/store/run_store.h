#pragma once
// The workspace's run store: one SQLite database per workspace, shared by the GUI, the CLI and headless
// jobs. One writer process and any number of readers at once (WAL); readers see newly committed steps on
// their next query without reopening.
#include "core/common/error.h"
#include "core/store/run_lock.h"

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace mismatch::store {

// Current schema version (PRAGMA user_version). Migrations in schema.cpp take a database from every earlier
// version to this one.
int currentSchemaVersion();

enum class OpenMode {
    CreateOrOpen,  // create the database (and its directory) when missing, migrate an older schema
    OpenExisting,  // fail when missing; migrate an older schema
    ReadOnly,      // never write: fails on a missing file or a schema older than the current one
};

enum class RunStatus { Running, Finished, Failed, Cancelled };
std::string toString(RunStatus status);
RunStatus runStatusFromString(const std::string& text);

struct RunSpec {
    std::string name;
    std::string kind = "train";  // train, calibrate, admit, sensitivity, prefix_shift, demo, external, ...
    std::string configJson = "{}";
    std::optional<std::int64_t> modelId;
};

struct RunInfo {
    std::int64_t id = 0;
    std::string name;
    std::string kind;
    RunStatus status = RunStatus::Running;
    std::string configJson;
    std::string startedAt;   // ISO 8601 UTC
    std::string finishedAt;  // empty while running
    std::string error;
    std::string toolVersion;
    std::int64_t stepCount = 0;
    std::optional<std::int64_t> lastStep;
    std::optional<double> lastMismatch;  // nats per token
    std::string jobJson;  // the catalogue job that started the run (JobSpec::toJson); empty for other runs
    // Schema 10: a JSON list of provenance records (common/provenance.h), one when the run began and one per
    // resume; empty for runs begun before.
    std::string provenanceJson;
};

// One training step's measures. All KL values are in nats per token (token mean over the step's batch).
struct StepMetrics {
    std::int64_t rowId = 0;  // filled on read; the cursor for stepsAfter()
    std::int64_t step = 0;
    std::optional<double> mismatchKl;  // full-vocabulary KL(mu || pi)
    std::optional<double> k1;
    std::optional<double> k3;
    std::optional<double> bf16Multiple;  // mismatchKl / BF16 unit
    std::optional<double> loss;
    std::optional<double> reward;
    std::optional<double> accuracy;
    std::optional<double> entropy;
    std::optional<std::int64_t> staleness;
    std::optional<double> rolloutTokensPerSecond;
    std::optional<double> trainTokensPerSecond;
    std::optional<double> wallTimeSeconds;
    std::string extrasJson = "{}";
};

struct ModelRecord {
    std::int64_t id = 0;
    std::string name;
    std::string path;
    std::string architecture;
    std::int64_t parameterCount = 0;
    std::string configJson = "{}";
};

struct PromptSetRecord {
    std::int64_t id = 0;
    std::string name;
    std::string path;
    std::int64_t promptCount = 0;
};

struct StoreSummary {
    std::string path;
    int schemaVersion = 0;
    std::int64_t models = 0;
    std::int64_t recipes = 0;
    std::int64_t promptSets = 0;
    std::int64_t runs = 0;
    std::int64_t steps = 0;
    std::int64_t evaluations = 0;
    std::int64_t sensitivityScans = 0;
    std::int64_t calibrations = 0;
    std::int64_t admissionDecisions = 0;
    std::int64_t externalRuns = 0;
};

class RunStore {
public:
    // Opens (or creates) the database at `path`. Throws StoreError naming the file and the problem for: a
    // file that is not SQLite, a SQLite file that is not a Mismatch Lab workspace, a newer schema, a corrupt
    // file, a location that cannot be written, a path through a loop of symbolic links, a -wal, -shm or -journal
    // beside it that is a directory or another non-file. A file that fails these checks is never modified; a
    // creation that fails removes the database file it made while that is still empty.
    static RunStore open(const std::string& path, OpenMode mode = OpenMode::CreateOrOpen);

    RunStore(RunStore&& other) noexcept;
    RunStore& operator=(RunStore&& other) noexcept;
    RunStore(const RunStore&) = delete;
    RunStore& operator=(const RunStore&) = delete;
    ~RunStore();

    const std::string& path() const { return path_; }
    bool readOnly() const { return readOnly_; }
    int schemaVersion() const;

    // Records a new run (status running) and takes its writer lock (run_lock.h), held until finishRun,
    // releaseRunLock or the store is closed. The first run of kind `expectedJobKind` begun after expectJob()
    // stores the expected job's JSON with it (RunInfo::jobJson). The thread's RunBeginListener, if any, hears of it.
    std::int64_t beginRun(const RunSpec& spec);
    // The catalogue job about to run (JobSpec::run): the next run of kind `runKind` this store begins is the
    // job's own run and records `jobJson` (runs of other kinds begun in between, such as a calibration's sweep
    // runs or a demo's record runs, do not). An empty runKind forgets it.
    void expectJob(const std::string& runKind, const std::string& jobJson);
    // Appends a batch of steps in one transaction: all of them are stored or none. A step number already
    // stored for the run is an error (nothing is written).
    void appendSteps(std::int64_t runId, const std::vector<StepMetrics>& steps);
    void finishRun(std::int64_t runId, RunStatus status, const std::string& error = {});
    // Replaces a run's config_json (a job that records its results or resolved inputs there). StoreError for an
    // unknown run.
    void setRunConfig(std::int64_t runId, const std::string& configJson);
    // Writes the job spec of a run stored before runs kept theirs (RunInfo::jobJson; jobs::storedSpec migrates
    // it from the run's config_json). StoreError for an unknown run or one that has a job spec already.
    void setRunJob(std::int64_t runId, const std::string& jobJson);
    // Resuming a run: in one transaction, deletes its steps and evaluations after `keepThroughStep` (they
    // will be computed again) and marks it running (no finish time, no error). Returns the number of step
    // rows deleted. StoreError for an unknown run.
    // The run's writer lock is taken first: StoreError naming the living writer's process and host when another
    // process still writes the run (nothing is changed then).
    std::int64_t reopenRun(std::int64_t runId, std::int64_t keepThroughStep);
    // Gives up the writer lock of a run this store began or reopened but leaves unfinished (`--stop-after`):
    // another process may resume it. finishRun releases it too.
    void releaseRunLock(std::int64_t runId);
    std::vector<RunInfo> listRuns() const;
    std::optional<RunInfo> run(std::int64_t runId) const;
    // Steps of a run with rowId > afterRowId, in order: a live reader passes the last rowId it saw.
    std::vector<StepMetrics> stepsAfter(std::int64_t runId, std::int64_t afterRowId = 0) const;
    // The stored measures of one step of a run (nullopt when the run has no such step).
    std::optional<StepMetrics> stepMetrics(std::int64_t runId, std::int64_t step) const;
    // Changes whenever any connection commits to the database (cheap; for polling readers).
    std::int64_t changeCounter() const;

    std::int64_t addModel(const ModelRecord& model);  // replaces a model with the same path
    std::vector<ModelRecord> listModels() const;
    std::int64_t addPromptSet(const PromptSetRecord& promptSet);  // replaces one with the same path
    std::vector<PromptSetRecord> listPromptSets() const;

    StoreSummary summary() const;

    sqlite3* handle() const { return db_; }

private:
    RunStore(sqlite3* db, std::string path, bool readOnly);
    static RunStore openForWriting(const std::string& path);
    void close();

    sqlite3* db_ = nullptr;
    std::string path_;
    bool readOnly_ = false;
    std::map<std::int64_t, RunLock> locks_; // runs this store writes
    std::string expectedJobKind_; // see expectJob()
    std::string expectedJobJson_;
};

// Tells a front-end which runs its own job began, as against the runs other processes (a headless `mismatch`) begin
// in the same workspace at the same time: while a RunBeginListener lives, every run that a RunStore of this process
// begins on the thread that made the listener (beginRun, so recordTrainingRun, calibration sweeps and the demo's runs
// too) is reported to it with the store's database path, once the run is recorded. The GUI wraps each job it runs on a
// worker thread in one and follows the runs reported. A listener made while another lives on the thread hides it until
// it ends. `callback` runs on the job's thread and must not throw.
class RunBeginListener {
public:
    using Callback = std::function<void(const std::string& databasePath, std::int64_t runId)>;
    explicit RunBeginListener(Callback callback);
    ~RunBeginListener();
    RunBeginListener(const RunBeginListener&) = delete;
    RunBeginListener& operator=(const RunBeginListener&) = delete;

private:
    Callback callback_;
    const Callback* hidden_ = nullptr; // the listener this one hides on its thread
};

// Runs `body`, the work of recorded run `runId`: when it throws, the run is marked cancelled (CancelledError) or
// failed (any other exception, with its message) and the exception is rethrown; a failure to record that is
// ignored so that the original error is the one reported. The caller marks success (finishRun) itself.
void markRunEnded(RunStore& store, std::int64_t runId, RunStatus status, const std::string& error) noexcept;
template <typename Body>
auto recordRunOutcome(RunStore& store, std::int64_t runId, Body&& body) -> decltype(body())
{
    try {
        return body();
    } catch (const CancelledError& error) {
        markRunEnded(store, runId, RunStatus::Cancelled, error.what());
        throw;
    } catch (const std::exception& error) {
        markRunEnded(store, runId, RunStatus::Failed, error.what());
        throw;
    }
}

// The database file of a workspace directory.
std::string databasePath(const std::string& workspaceDirectory);
// Per-user default workspace directory: $MISMATCH_WORKSPACE, else $XDG_DATA_HOME/mismatch-lab/default,
// else ~/.local/share/mismatch-lab/default.
std::string defaultWorkspaceDirectory();

}  // namespace mismatch::store

#include "core/store/run_store.h"

#include "core/common/error.h"
#include "core/common/provenance.h"
#include "core/common/version.h"
#include "core/store/schema.h"
#include "core/store/sqlite_util.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace mismatch::store {

int currentSchemaVersion()
{
    return static_cast<int>(migrations().size());
}

std::string toString(RunStatus status)
{
    switch (status) {
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Failed: return "failed";
    case RunStatus::Cancelled: return "cancelled";
    }
    return "running";
}

RunStatus runStatusFromString(const std::string& text)
{
    if (text == "finished") return RunStatus::Finished;
    if (text == "failed") return RunStatus::Failed;
    if (text == "cancelled") return RunStatus::Cancelled;
    if (text == "running") return RunStatus::Running;
    throw Error("unknown run status '" + text + "' (expected running, finished, failed or cancelled)");
}

std::string databasePath(const std::string& workspaceDirectory)
{
    return (fs::path(workspaceDirectory) / "workspace.db").string();
}

std::string defaultWorkspaceDirectory()
{
    if (const char* env = std::getenv("MISMATCH_WORKSPACE"); env && *env) {
        return env;
    }
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg) {
        return (fs::path(xdg) / "mismatch-lab" / "default").string();
    }
    const char* home = std::getenv("HOME");
    return (fs::path(home && *home ? home : "/tmp") / ".local" / "share" / "mismatch-lab" / "default").string();
}

namespace {

constexpr int kBusyTimeoutMs = 15000;

// Checks the 16-byte magic at offset 0 through the connection's own file handle (SQLite's VFS), never through
// a descriptor of our own. POSIX advisory locks belong to the process and the file, not to the descriptor:
// closing ANY descriptor of the database file drops every lock this process holds on it, including the SHARED
// lock that each open WAL connection keeps on the database file for its lifetime. With that lock gone, another
// process (a headless `mismatch` job) closing its last connection sees itself alone, checkpoints and deletes
// the -wal and -shm files under our open connections ("database disk image is malformed" afterwards). SQLite's
// unix VFS shares one descriptor per file among the process's connections and defers closing it while any
// lock is held, so reading through `db`'s handle (and closing `db` later) cannot drop another connection's lock.
// The lock-loss scenario is therefore impossible by construction; tests/store's header-check test and the
// interleaved GUI + headless test (tests/ui/test_shared_workspace.cpp) check /proc/locks to keep it so.
void checkHeader(sqlite3* db, const std::string& path)
{
    static const char kMagic[16] = {'S', 'Q', 'L', 'i', 't', 'e', ' ', 'f', 'o', 'r', 'm', 'a', 't', ' ', '3', '\0'};
    sqlite3_file* file = nullptr;
    if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) != SQLITE_OK || !file ||
        !file->pMethods) {
        throw StoreError(path, "cannot be read (SQLite did not open the file)");
    }
    sqlite3_int64 size = 0;
    if (file->pMethods->xFileSize(file, &size) != SQLITE_OK) {
        throw StoreError(path, "cannot be read (its size is unknown)");
    }
    char header[16] = {};
    // A file shorter than the header reads as SQLITE_IOERR_SHORT_READ with the rest zero-filled: not SQLite.
    const int rc = size >= 100 ? file->pMethods->xRead(file, header, sizeof header, 0) : SQLITE_IOERR_SHORT_READ;
    if (rc != SQLITE_OK && rc != SQLITE_IOERR_SHORT_READ) {
        throw StoreError(path, std::string("cannot be read: ") + sqlite3_errstr(rc));
    }
    if (rc != SQLITE_OK || std::memcmp(header, kMagic, sizeof header) != 0) {
        throw StoreError(path, "is not a SQLite database (expected the 16-byte header 'SQLite format 3' at offset 0)");
    }
}

sqlite3* openConnection(const std::string& path, int flags, bool uri = false)
{
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &db, flags | (uri ? SQLITE_OPEN_URI : 0), nullptr);
    if (rc != SQLITE_OK) {
        std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
        sqlite3_close(db);
        throw StoreError(path, "cannot be opened: " + message);
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, kBusyTimeoutMs);
    return db;
}

struct Closer {
    sqlite3* db;
    ~Closer() { sqlite3_close(db); }
};

// Whether the database file is there. A path that cannot be examined (a loop of symbolic links on the way, a name
// too long, no permission to search a directory) is a StoreError saying so, not "does not exist" followed by an
// offer to create what cannot be created there.
bool databaseExists(const std::string& path)
{
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!ec || status.type() == fs::file_type::not_found) { // not found: ENOENT, or ENOTDIR on the way
        return fs::exists(status);
    }
    if (ec == std::errc::too_many_symbolic_link_levels) {
        throw StoreError(path, "is reached through a loop of symbolic links (" + ec.message()
                + "): the workspace directory or workspace.db names itself through its links; fix or remove them");
    }
    throw StoreError(path, "cannot be examined: " + ec.message());
}

// The files SQLite keeps beside a database, under its name with a suffix, and what each holds.
constexpr std::pair<const char*, const char*> kSidecarFiles[] = {{"-wal", "its write-ahead log"},
    {"-shm", "the shared-memory index of its write-ahead log"}, {"-journal", "its rollback journal"}};

// Each of them must be a regular file or absent: SQLite reports one that is a directory as "attempt to write a
// readonly database" or "unable to open database file", which points at the database instead of the file in the way.
void requireSidecarFiles(const std::string& path)
{
    for (const auto& [suffix, holds] : kSidecarFiles) {
        const std::string sidecar = path + suffix;
        std::error_code ec;
        const fs::file_status status = fs::status(sidecar, ec);
        if (status.type() == fs::file_type::not_found || status.type() == fs::file_type::regular) {
            continue;
        }
        if (ec) {
            throw StoreError(path, "cannot be opened: " + sidecar + ", where SQLite keeps " + holds
                    + ", cannot be examined (" + ec.message() + ")");
        }
        const std::string kind = status.type() == fs::file_type::directory ? "a directory"
            : status.type() == fs::file_type::fifo                        ? "a FIFO"
            : status.type() == fs::file_type::socket                      ? "a socket"
                                                                          : "a device or other special file";
        throw StoreError(path, "cannot be opened: " + sidecar + ", where SQLite keeps " + holds + ", is " + kind
                + ", not a file; move it out of the way (SQLite would call the workspace read-only)");
    }
}

// The sidecar files present now (a creation that fails removes only those it made).
std::set<std::string> presentSidecarFiles(const std::string& path)
{
    std::set<std::string> present;
    for (const auto& [suffix, holds] : kSidecarFiles) {
        std::error_code ec;
        if (fs::exists(fs::symlink_status(path + suffix, ec))) {
            present.insert(path + suffix);
        }
    }
    return present;
}

// After a creation that failed (no room, a file size limit, a journal that cannot be written): the database file
// SQLite made, when it is still empty (no one's data is in it), and the journal files that were not there before,
// so that a refused `store init` leaves the directory as it found it. A file that has content stays.
void removeFailedCreation(const std::string& path, const std::set<std::string>& sidecarsBefore)
{
    std::error_code ec;
    if (fs::symlink_status(path, ec).type() != fs::file_type::regular || ec || fs::file_size(path, ec) != 0 || ec) {
        return;
    }
    fs::remove(path, ec);
    for (const auto& [suffix, holds] : kSidecarFiles) {
        const std::string sidecar = path + suffix;
        if (!sidecarsBefore.count(sidecar) && fs::symlink_status(sidecar, ec).type() == fs::file_type::regular) {
            fs::remove(sidecar, ec);
        }
    }
}

// The tables of a workspace of our application id against its schema version: every table the migrations up to
// `version` create must be there and none that a later one creates. "" when they match, else the plain reason.
std::string schemaMismatch(sqlite3* db, int version)
{
    std::set<std::string> present;
    Statement tables(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
    while (tables.step()) {
        present.insert(tables.text(0));
    }
    for (int v = 1; v <= currentSchemaVersion(); ++v) {
        for (const std::string& table : tablesCreatedBy(v)) {
            if (v <= version && !present.count(table)) {
                return "lacks the table " + table + " of schema version " + std::to_string(v);
            }
            if (v > version && present.count(table)) {
                return "holds the table " + table + ", which schema version " + std::to_string(v) + " creates";
            }
        }
    }
    return {};
}

// Inspects an existing file without writing to it, and without creating anything beside it: regular file, SQLite
// header, application id (a workspace is ours or empty), schema version and tables, a quick integrity check.
// Throws StoreError describing the first problem found.
void validateExisting(const std::string& path)
{
    // A FIFO or device would block or never end inside SQLite's open; stat opens nothing.
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0) {
        throw StoreError(path, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (!S_ISREG(status.st_mode)) {
        throw StoreError(path, std::string("is ") + (S_ISFIFO(status.st_mode) ? "a FIFO (named pipe)"
                                   : S_ISCHR(status.st_mode) || S_ISBLK(status.st_mode) ? "a device"
                                   : S_ISSOCK(status.st_mode) ? "a socket" : "not a regular file")
                                   + "; expected a workspace database file");
    }
    if (status.st_size == 0) {
        return;  // an empty file is an empty database; it gets the schema on a writable open
    }
    // With no -wal and -shm beside it no connection has the database open (an open WAL connection keeps both), so
    // an immutable read sees all of it and creates neither file: a database that is then refused is left exactly
    // as it was found. With both present another connection may be writing: a plain read-only connection then
    // reads consistently through the existing files.
    std::error_code ec;
    const bool inUse = fs::exists(path + "-wal", ec) && fs::exists(path + "-shm", ec);
    sqlite3* db = nullptr;
    if (inUse) {
        try {
            db = openConnection(path, SQLITE_OPEN_READONLY);
        } catch (const StoreError&) {
            // A WAL database in a read-only directory cannot be opened normally; immutable reads it as it is.
            db = openConnection("file:" + path + "?immutable=1", SQLITE_OPEN_READONLY, true);
        }
    } else {
        db = openConnection("file:" + path + "?immutable=1", SQLITE_OPEN_READONLY, true);
    }
    Closer closer{db};
    checkHeader(db, path);  // before any query: SQLite would only say "file is not a database"
    // Problems found by reading go to `problem`; a SQLite failure while reading means the file is damaged.
    std::string problem;
    try {
        const auto applicationId = static_cast<int>(queryInt64(db, "PRAGMA application_id"));
        const auto version = static_cast<int>(queryInt64(db, "PRAGMA user_version"));
        const std::int64_t tables = queryInt64(db, "SELECT count(*) FROM sqlite_master");
        if (applicationId != kApplicationId && applicationId != 0) {
            std::ostringstream hex;
            hex << std::hex << applicationId;
            problem = "is a SQLite database of another application (application_id 0x" + hex.str() +
                      "), not a Mismatch Lab workspace";
        } else if (applicationId == 0 && (tables > 0 || version != 0)) {
            // Only an empty database becomes a workspace: one with a schema version or tables is someone else's.
            problem = "is a SQLite database but not a Mismatch Lab workspace (no Mismatch Lab application id, and " +
                      (tables > 0 ? std::to_string(tables) + " schema objects" : "user_version " + std::to_string(version)) +
                      "); it is left untouched";
        } else if (version > currentSchemaVersion()) {
            problem = "was written by a newer Mismatch Lab (schema version " + std::to_string(version) +
                      "; this build reads up to " + std::to_string(currentSchemaVersion()) +
                      "): open it with a newer version";
        } else if (const std::string mismatch = applicationId == 0 ? std::string() : schemaMismatch(db, version);
                   !mismatch.empty()) {
            problem = "has schema version " + std::to_string(version) + " but " + mismatch +
                      ": its tables do not match its version, so it cannot be migrated (this build writes version " +
                      std::to_string(currentSchemaVersion()) + "); nothing was changed";
        } else {
            Statement check(db, "PRAGMA quick_check");
            std::string findings;
            while (check.step()) {
                const std::string line = check.text(0);
                if (line != "ok") {
                    findings += (findings.empty() ? "" : "; ") + line;
                }
            }
            if (!findings.empty()) {
                problem = "is corrupt (integrity check: " + findings.substr(0, 300) + ")";
            }
        }
    } catch (const StoreError& error) {
        // The system refusing a read or the shared-memory index (a file size limit, permissions) is not damage.
        const int code = sqlite3_errcode(db) & 0xff;
        const bool system = code == SQLITE_IOERR || code == SQLITE_FULL || code == SQLITE_CANTOPEN
            || code == SQLITE_READONLY || code == SQLITE_PERM;
        problem = (system ? "cannot be opened: " : "is corrupt or unreadable: ") + error.detail();
    }
    if (!problem.empty()) {
        throw StoreError(path, problem);
    }
}

// Writable for this process, and meant to be written: a file or directory without any write bit is treated as
// read-only even for root (who could write it anyway), so that a workspace marked read-only stays untouched.
bool writable(const fs::path& p)
{
    struct stat status {};
    if (::stat(p.c_str(), &status) != 0 || (status.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0) {
        return false;
    }
    return ::access(p.c_str(), W_OK) == 0;
}

RunInfo readRun(const Statement& s)
{
    RunInfo info;
    info.id = s.int64(0);
    info.name = s.text(1);
    info.kind = s.text(2);
    info.status = runStatusFromString(s.text(3));
    info.configJson = s.text(4);
    info.startedAt = s.text(5);
    info.finishedAt = s.text(6);
    info.error = s.text(7);
    info.toolVersion = s.text(8);
    info.stepCount = s.int64(9);
    info.lastStep = s.optionalInt64(10);
    info.lastMismatch = s.optionalReal(11);
    info.jobJson = s.text(12);
    info.provenanceJson = s.text(13);
    return info;
}

constexpr const char* kRunSelect =
    "SELECT r.id, r.name, r.kind, r.status, r.config_json, r.started_at, coalesce(r.finished_at, ''), "
    "coalesce(r.error, ''), r.tool_version, "
    "(SELECT count(*) FROM step_metrics m WHERE m.run_id = r.id), "
    "(SELECT max(step) FROM step_metrics m WHERE m.run_id = r.id), "
    "(SELECT mismatch_kl FROM step_metrics m WHERE m.run_id = r.id ORDER BY step DESC LIMIT 1), "
    "coalesce(r.job_json, ''), coalesce(r.provenance_json, '') "
    "FROM runs r ";

}  // namespace

RunStore RunStore::open(const std::string& path, OpenMode mode)
{
    const fs::path file(path);
    std::error_code ec;
    const bool exists = databaseExists(path);
    requireSidecarFiles(path);
    fs::path directory = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    if (!exists) {
        if (mode != OpenMode::CreateOrOpen) {
            throw StoreError(path, "does not exist (create a workspace with `mismatch store init`)");
        }
        fs::create_directories(directory, ec);
        if (ec || !fs::is_directory(directory)) {
            throw StoreError(path, "cannot create the workspace directory " + directory.string() + ": " + ec.message());
        }
        if (!writable(directory)) {
            throw StoreError(path, "cannot be created: the directory " + directory.string() + " is not writable");
        }
    } else {
        if (fs::is_directory(file, ec)) {
            throw StoreError(path, "is a directory; expected a workspace database file");
        }
        validateExisting(path);
        if (mode != OpenMode::ReadOnly) {
            if (!writable(file)) {
                throw StoreError(path, "is read-only (no write permission); open it read-only or fix its permissions");
            }
            if (!writable(directory)) {
                throw StoreError(path, "lies in the read-only directory " + directory.string() +
                                           " (SQLite needs to create its journal there); open it read-only");
            }
        }
    }

    if (mode == OpenMode::ReadOnly) {
        sqlite3* db = nullptr;
        try {
            db = openConnection(path, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX);
            queryInt64(db, "PRAGMA user_version");  // forces the WAL index to be read now
        } catch (const StoreError&) {
            sqlite3_close(db);
            db = openConnection("file:" + path + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, true);
        }
        RunStore store(db, path, true);
        const int version = store.schemaVersion();
        if (version < currentSchemaVersion()) {
            throw StoreError(path, "has schema version " + std::to_string(version) + " and needs migrating to " +
                                       std::to_string(currentSchemaVersion()) + ", which a read-only open cannot do");
        }
        return store;
    }

    const std::set<std::string> sidecarsBefore = presentSidecarFiles(path);
    try {
        return openForWriting(path);
    } catch (...) {
        if (!exists) {
            removeFailedCreation(path, sidecarsBefore);
        }
        throw;
    }
}

// open()'s read-write half, after the file checks: the schema created or migrated, the WAL journal switched on.
RunStore RunStore::openForWriting(const std::string& path)
{
    sqlite3* db = openConnection(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX);
    RunStore store(db, path, false);
    execute(db, "PRAGMA foreign_keys = ON");
    // WAL + NORMAL: a committed transaction survives a killed process (only power loss can drop the last ones).
    execute(db, "PRAGMA synchronous = NORMAL");
    {
        // The schema first, in one transaction: a migration that fails rolls back and leaves the file as it was
        // (the journal mode, written into the file's header, is switched only afterwards).
        Transaction transaction(db);
        const int version = static_cast<int>(queryInt64(db, "PRAGMA user_version"));
        if (version > currentSchemaVersion()) {
            throw StoreError(path, "was written by a newer Mismatch Lab (schema version " + std::to_string(version) + ")");
        }
        if (version < currentSchemaVersion()) {
            try {
                migrate(db, version, currentSchemaVersion());
            } catch (const StoreError& error) {
                throw StoreError(path, "has schema version " + std::to_string(version) + " and cannot be migrated to " +
                                           std::to_string(currentSchemaVersion()) + " (" + error.detail() +
                                           "); nothing was changed");
            }
        }
        transaction.commit();
    }
    {
        Statement journal(db, "PRAGMA journal_mode = WAL");
        if (!journal.step() || journal.text(0) != "wal") {
            throw StoreError(path, "cannot switch to the WAL journal (the file system may not support it)");
        }
    }
    return store;
}

RunStore::RunStore(sqlite3* db, std::string path, bool readOnly) : db_(db), path_(std::move(path)), readOnly_(readOnly) {}

RunStore::RunStore(RunStore&& other) noexcept
    : db_(other.db_), path_(std::move(other.path_)), readOnly_(other.readOnly_), locks_(std::move(other.locks_)),
      expectedJobKind_(std::move(other.expectedJobKind_)), expectedJobJson_(std::move(other.expectedJobJson_))
{
    other.db_ = nullptr;
}

RunStore& RunStore::operator=(RunStore&& other) noexcept
{
    if (this != &other) {
        close();
        db_ = other.db_;
        path_ = std::move(other.path_);
        readOnly_ = other.readOnly_;
        locks_ = std::move(other.locks_);
        expectedJobKind_ = std::move(other.expectedJobKind_);
        expectedJobJson_ = std::move(other.expectedJobJson_);
        other.db_ = nullptr;
    }
    return *this;
}

RunStore::~RunStore()
{
    close();
}

void RunStore::close()
{
    locks_.clear();
    if (db_) {
        sqlite3_close_v2(db_);
        db_ = nullptr;
    }
}

int RunStore::schemaVersion() const
{
    return static_cast<int>(queryInt64(db_, "PRAGMA user_version"));
}

namespace {
// The RunBeginListener of this thread (the innermost one); nullptr when none lives.
thread_local const RunBeginListener::Callback* currentRunBeginCallback = nullptr;
} // namespace

RunBeginListener::RunBeginListener(Callback callback)
    : callback_(std::move(callback))
    , hidden_(currentRunBeginCallback)
{
    currentRunBeginCallback = &callback_;
}

RunBeginListener::~RunBeginListener()
{
    currentRunBeginCallback = hidden_;
}

std::int64_t RunStore::beginRun(const RunSpec& spec)
{
    Transaction transaction(db_);
    const bool jobRun = !expectedJobKind_.empty() && spec.kind == expectedJobKind_;
    Statement insert(db_, "INSERT INTO runs (name, kind, status, config_json, model_id, tool_version, job_json, "
                          "provenance_json) VALUES (?, ?, 'running', ?, ?, ?, ?, json_array(json(?)))");
    insert.bind(1, spec.name).bind(2, spec.kind).bind(3, spec.configJson).bind(4, spec.modelId).bind(5, kVersion);
    insert.bind(7, provenanceRecord("started"));
    if (jobRun) {
        insert.bind(6, expectedJobJson_);
    } else {
        insert.bindNull(6);
    }
    insert.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db_);
    // Before the commit makes the run visible, so that no other process can take it over in between.
    locks_[id] = RunLock::acquire(path_, id);
    transaction.commit();
    if (jobRun) {
        expectedJobKind_.clear();
        expectedJobJson_.clear();
    }
    if (currentRunBeginCallback) {
        (*currentRunBeginCallback)(path_, id);
    }
    return id;
}

void RunStore::expectJob(const std::string& runKind, const std::string& jobJson)
{
    expectedJobKind_ = runKind;
    expectedJobJson_ = runKind.empty() ? std::string() : jobJson;
}

void RunStore::appendSteps(std::int64_t runId, const std::vector<StepMetrics>& steps)
{
    Transaction transaction(db_);
    {
        Statement exists(db_, "SELECT status FROM runs WHERE id = ?");
        exists.bind(1, runId);
        if (!exists.step()) {
            throw StoreError(path_, "run " + std::to_string(runId) + " does not exist");
        }
    }
    Statement insert(db_,
        "INSERT INTO step_metrics (run_id, step, mismatch_kl, k1, k3, bf16_multiple, loss, reward, accuracy, "
        "entropy, staleness, rollout_tokens_per_s, train_tokens_per_s, wall_time_s, extras_json) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const StepMetrics& m : steps) {
        insert.reset();
        insert.bind(1, runId).bind(2, m.step).bind(3, m.mismatchKl).bind(4, m.k1).bind(5, m.k3);
        insert.bind(6, m.bf16Multiple).bind(7, m.loss).bind(8, m.reward).bind(9, m.accuracy).bind(10, m.entropy);
        insert.bind(11, m.staleness).bind(12, m.rolloutTokensPerSecond).bind(13, m.trainTokensPerSecond);
        insert.bind(14, m.wallTimeSeconds).bind(15, m.extrasJson.empty() ? std::string("{}") : m.extrasJson);
        try {
            insert.run();
        } catch (const StoreError& error) {
            throw StoreError(path_, "cannot store step " + std::to_string(m.step) + " of run " +
                                        std::to_string(runId) + ": " + error.detail());
        }
    }
    transaction.commit();
}

void RunStore::finishRun(std::int64_t runId, RunStatus status, const std::string& error)
{
    Transaction transaction(db_);
    Statement update(db_, "UPDATE runs SET status = ?, error = ?, "
                          "finished_at = strftime('%Y-%m-%dT%H:%M:%SZ','now') WHERE id = ?");
    update.bind(1, toString(status));
    if (error.empty()) {
        update.bindNull(2);
    } else {
        update.bind(2, error);
    }
    update.bind(3, runId);
    update.run();
    if (sqlite3_changes(db_) != 1) {
        throw StoreError(path_, "run " + std::to_string(runId) + " does not exist");
    }
    transaction.commit();
    locks_.erase(runId);
}

void RunStore::releaseRunLock(std::int64_t runId)
{
    locks_.erase(runId);
}

namespace {

// Sets one text column of run `runId` with `sql` (text, then the id); StoreError `whyNone` when no row changed.
void updateRunText(sqlite3* db, const std::string& path, const char* sql, std::int64_t runId, const std::string& text,
    const std::string& whyNone)
{
    Statement update(db, sql);
    update.bind(1, text);
    update.bind(2, runId);
    update.run();
    if (sqlite3_changes(db) != 1) {
        throw StoreError(path, "run " + std::to_string(runId) + " " + whyNone);
    }
}

} // namespace

void RunStore::setRunConfig(std::int64_t runId, const std::string& configJson)
{
    updateRunText(db_, path_, "UPDATE runs SET config_json = ? WHERE id = ?", runId, configJson, "does not exist");
}

void RunStore::setRunJob(std::int64_t runId, const std::string& jobJson)
{
    updateRunText(db_, path_, "UPDATE runs SET job_json = ? WHERE id = ? AND coalesce(job_json, '') = ''", runId,
        jobJson, "does not exist or has a job spec already");
}

void markRunEnded(RunStore& store, std::int64_t runId, RunStatus status, const std::string& error) noexcept
{
    try {
        store.finishRun(runId, status, error);
    } catch (...) {
        // The job's own error matters more than a failure to record it.
    }
}

std::int64_t RunStore::reopenRun(std::int64_t runId, std::int64_t keepThroughStep)
{
    if (!locks_.count(runId)) {
        {
            Statement exists(db_, "SELECT 1 FROM runs WHERE id = ?");
            exists.bind(1, runId);
            if (!exists.step()) {
                throw StoreError(path_, "run " + std::to_string(runId) + " does not exist");
            }
        }
        locks_[runId] = RunLock::acquire(path_, runId);
    }
    Transaction transaction(db_);
    Statement update(db_, "UPDATE runs SET status = 'running', error = NULL, finished_at = NULL, provenance_json = "
                          "json_insert(coalesce(provenance_json, '[]'), '$[#]', json(?)) WHERE id = ?");
    update.bind(1, provenanceRecord("resumed")).bind(2, runId);
    update.run();
    if (sqlite3_changes(db_) != 1) {
        throw StoreError(path_, "run " + std::to_string(runId) + " does not exist");
    }
    Statement steps(db_, "DELETE FROM step_metrics WHERE run_id = ? AND step > ?");
    steps.bind(1, runId);
    steps.bind(2, keepThroughStep);
    steps.run();
    const std::int64_t deleted = sqlite3_changes(db_);
    Statement evaluations(db_, "DELETE FROM evaluations WHERE run_id = ? AND step > ?");
    evaluations.bind(1, runId);
    evaluations.bind(2, keepThroughStep);
    evaluations.run();
    Statement generations(db_, "DELETE FROM step_generations WHERE run_id = ? AND step > ?");
    generations.bind(1, runId);
    generations.bind(2, keepThroughStep);
    generations.run();
    transaction.commit();
    return deleted;
}

std::vector<RunInfo> RunStore::listRuns() const
{
    Statement s(db_, (std::string(kRunSelect) + "ORDER BY r.id").c_str());
    std::vector<RunInfo> runs;
    while (s.step()) {
        runs.push_back(readRun(s));
    }
    return runs;
}

std::optional<RunInfo> RunStore::run(std::int64_t runId) const
{
    Statement s(db_, (std::string(kRunSelect) + "WHERE r.id = ?").c_str());
    s.bind(1, runId);
    if (!s.step()) {
        return std::nullopt;
    }
    return readRun(s);
}

namespace {

// The columns of a step row, in the order readStep reads them.
constexpr const char* kStepColumns = "SELECT id, step, mismatch_kl, k1, k3, bf16_multiple, loss, reward, accuracy, "
                                     "entropy, staleness, rollout_tokens_per_s, train_tokens_per_s, wall_time_s, "
                                     "extras_json FROM step_metrics ";

StepMetrics readStep(const Statement& s)
{
    StepMetrics m;
    m.rowId = s.int64(0);
    m.step = s.int64(1);
    m.mismatchKl = s.optionalReal(2);
    m.k1 = s.optionalReal(3);
    m.k3 = s.optionalReal(4);
    m.bf16Multiple = s.optionalReal(5);
    m.loss = s.optionalReal(6);
    m.reward = s.optionalReal(7);
    m.accuracy = s.optionalReal(8);
    m.entropy = s.optionalReal(9);
    m.staleness = s.optionalInt64(10);
    m.rolloutTokensPerSecond = s.optionalReal(11);
    m.trainTokensPerSecond = s.optionalReal(12);
    m.wallTimeSeconds = s.optionalReal(13);
    m.extrasJson = s.text(14);
    return m;
}

} // namespace

std::vector<StepMetrics> RunStore::stepsAfter(std::int64_t runId, std::int64_t afterRowId) const
{
    Statement s(db_, (std::string(kStepColumns) + "WHERE run_id = ? AND id > ? ORDER BY id").c_str());
    s.bind(1, runId).bind(2, afterRowId);
    std::vector<StepMetrics> steps;
    while (s.step()) {
        steps.push_back(readStep(s));
    }
    return steps;
}

std::optional<StepMetrics> RunStore::stepMetrics(std::int64_t runId, std::int64_t step) const
{
    Statement s(db_, (std::string(kStepColumns) + "WHERE run_id = ? AND step = ?").c_str());
    s.bind(1, runId).bind(2, step);
    if (!s.step()) {
        return std::nullopt;
    }
    return readStep(s);
}

std::int64_t RunStore::changeCounter() const
{
    // data_version moves when another connection commits; total_changes when this one writes.
    return queryInt64(db_, "PRAGMA data_version") + static_cast<std::int64_t>(sqlite3_total_changes(db_));
}

std::int64_t RunStore::addModel(const ModelRecord& model)
{
    Transaction transaction(db_);
    Statement upsert(db_, "INSERT INTO models (name, path, architecture, parameter_count, config_json) "
                          "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET name = excluded.name, "
                          "architecture = excluded.architecture, parameter_count = excluded.parameter_count, "
                          "config_json = excluded.config_json RETURNING id");
    upsert.bind(1, model.name).bind(2, model.path).bind(3, model.architecture).bind(4, model.parameterCount);
    upsert.bind(5, model.configJson);
    std::int64_t id = 0;
    if (upsert.step()) {
        id = upsert.int64(0);
    }
    upsert.run();
    transaction.commit();
    return id;
}

std::vector<ModelRecord> RunStore::listModels() const
{
    Statement s(db_, "SELECT id, name, path, architecture, parameter_count, config_json FROM models ORDER BY id");
    std::vector<ModelRecord> models;
    while (s.step()) {
        models.push_back({s.int64(0), s.text(1), s.text(2), s.text(3), s.int64(4), s.text(5)});
    }
    return models;
}

std::int64_t RunStore::addPromptSet(const PromptSetRecord& promptSet)
{
    Transaction transaction(db_);
    Statement upsert(db_, "INSERT INTO prompt_sets (name, path, prompt_count) VALUES (?, ?, ?) "
                          "ON CONFLICT(path) DO UPDATE SET name = excluded.name, prompt_count = excluded.prompt_count "
                          "RETURNING id");
    upsert.bind(1, promptSet.name).bind(2, promptSet.path).bind(3, promptSet.promptCount);
    std::int64_t id = 0;
    if (upsert.step()) {
        id = upsert.int64(0);
    }
    upsert.run();
    transaction.commit();
    return id;
}

std::vector<PromptSetRecord> RunStore::listPromptSets() const
{
    Statement s(db_, "SELECT id, name, path, prompt_count FROM prompt_sets ORDER BY id");
    std::vector<PromptSetRecord> sets;
    while (s.step()) {
        sets.push_back({s.int64(0), s.text(1), s.text(2), s.int64(3)});
    }
    return sets;
}

StoreSummary RunStore::summary() const
{
    StoreSummary s;
    s.path = path_;
    s.schemaVersion = schemaVersion();
    s.models = queryInt64(db_, "SELECT count(*) FROM models");
    s.recipes = queryInt64(db_, "SELECT count(*) FROM recipes");
    s.promptSets = queryInt64(db_, "SELECT count(*) FROM prompt_sets");
    s.runs = queryInt64(db_, "SELECT count(*) FROM runs");
    s.steps = queryInt64(db_, "SELECT count(*) FROM step_metrics");
    s.evaluations = queryInt64(db_, "SELECT count(*) FROM evaluations");
    s.sensitivityScans = queryInt64(db_, "SELECT count(*) FROM sensitivity_scans");
    s.calibrations = queryInt64(db_, "SELECT count(*) FROM calibrations");
    s.admissionDecisions = queryInt64(db_, "SELECT count(*) FROM admission_decisions");
    s.externalRuns = queryInt64(db_, "SELECT count(*) FROM external_runs");
    return s;
}

}  // namespace mismatch::store

#include "core/store/sqlite_util.h"

#include <cerrno>
#include <cstring>

namespace mismatch::store {

namespace {

// ": File too large" and the like: what the system refused, for an I/O failure (a file size limit, a full disk, a
// read-only file); empty otherwise. SQLite does not keep the system error of every failed write (a commit's WAL
// write, for one), so the errno left by the failed call is used when it is one of the write refusals, and a
// failed write without either says what can cause it.
std::string systemReason(sqlite3* db, int code, int callErrno)
{
    const int primary = code & 0xff;
    if (primary != SQLITE_IOERR && primary != SQLITE_FULL && primary != SQLITE_CANTOPEN && primary != SQLITE_READONLY) {
        return "";
    }
    int systemError = db ? sqlite3_system_errno(db) : 0;
    if (systemError == 0 && (callErrno == EFBIG || callErrno == ENOSPC || callErrno == EDQUOT || callErrno == EROFS
                                || callErrno == EACCES || callErrno == EPERM)) {
        systemError = callErrno;
    }
    if (systemError != 0) {
        return std::string(": ") + std::strerror(systemError);
    }
    if (code == SQLITE_IOERR_WRITE || code == SQLITE_IOERR_FSYNC || code == SQLITE_IOERR_TRUNCATE || primary == SQLITE_FULL) {
        return ": a write failed (a full disk, a file size limit or a file that cannot be written)";
    }
    return "";
}

// What a failure means for the workspace, in the project's words (SQLite's own text follows it).
std::string storeMeaning(int code)
{
    switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return "the workspace is busy (another process is writing it; try again when it finishes)";
    case SQLITE_READONLY:
        return "the workspace cannot be written (a read-only file or directory, or one this user may not write)";
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return "the workspace database is damaged (restore it from a copy)";
    case SQLITE_FULL:
        return "the workspace could not grow (the disk is full or a file size limit was reached)";
    case SQLITE_IOERR:
        return "reading or writing the workspace failed";
    case SQLITE_CANTOPEN:
        return "the workspace database cannot be opened";
    case SQLITE_CONSTRAINT:
        return "the workspace refused a record that conflicts with one it holds";
    case SQLITE_NOMEM:
        return "the workspace ran out of memory";
    default:
        return "the workspace database reported an error";
    }
}

} // namespace

// The source file and line stay out of the message (they mean nothing to a user); the SQLite call and code stay,
// after SQLite's text, for a bug report.
void throwSqliteError(sqlite3* db, int code, const char* call, const char* /*file*/, int /*line*/)
{
    const int callErrno = errno;
    const char* filename = db ? sqlite3_db_filename(db, "main") : nullptr;
    std::string detail = std::string(sqlite3_errstr(code));
    if (db && sqlite3_errcode(db) == code) {
        detail = sqlite3_errmsg(db);
    }
    detail += systemReason(db, code, callErrno);
    throw StoreError(filename && *filename ? filename : "<sqlite>",
        storeMeaning(code) + ": " + detail + " (SQLite code " + std::to_string(code) + " in " + call + ")");
}


Statement::Statement(sqlite3* db, const char* sql) : db_(db)
{
    MISMATCH_SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql, -1, &stmt_, nullptr));
}

Statement::~Statement()
{
    sqlite3_finalize(stmt_);
}

Statement& Statement::bind(int index, std::int64_t value)
{
    MISMATCH_SQLITE_CHECK(db_, sqlite3_bind_int64(stmt_, index, value));
    return *this;
}

Statement& Statement::bind(int index, double value)
{
    MISMATCH_SQLITE_CHECK(db_, sqlite3_bind_double(stmt_, index, value));
    return *this;
}

Statement& Statement::bind(int index, const std::string& value)
{
    MISMATCH_SQLITE_CHECK(db_,
        sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT));
    return *this;
}

Statement& Statement::bindNull(int index)
{
    MISMATCH_SQLITE_CHECK(db_, sqlite3_bind_null(stmt_, index));
    return *this;
}

Statement& Statement::bind(int index, const std::optional<double>& value)
{
    return value ? bind(index, *value) : bindNull(index);
}

Statement& Statement::bind(int index, const std::optional<std::int64_t>& value)
{
    return value ? bind(index, *value) : bindNull(index);
}

bool Statement::step()
{
    errno = 0;
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) {
        return true;
    }
    if (rc == SQLITE_DONE) {
        return false;
    }
    throwSqliteError(db_, rc, "sqlite3_step", __FILE__, __LINE__);
}

void Statement::reset()
{
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

void Statement::run()
{
    while (step()) {
    }
}

std::int64_t Statement::int64(int column) const
{
    return sqlite3_column_int64(stmt_, column);
}

double Statement::real(int column) const
{
    return sqlite3_column_double(stmt_, column);
}

std::string Statement::text(int column) const
{
    const unsigned char* p = sqlite3_column_text(stmt_, column);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, column)) : std::string();
}

bool Statement::isNull(int column) const
{
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

std::optional<double> Statement::optionalReal(int column) const
{
    return isNull(column) ? std::nullopt : std::optional<double>(real(column));
}

std::optional<std::int64_t> Statement::optionalInt64(int column) const
{
    return isNull(column) ? std::nullopt : std::optional<std::int64_t>(int64(column));
}

void execute(sqlite3* db, const char* sql)
{
    char* error = nullptr;
    errno = 0;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
    const int callErrno = errno;
    if (rc != SQLITE_OK) {
        const std::string message = (error ? error : sqlite3_errstr(rc)) + systemReason(db, rc, callErrno);
        sqlite3_free(error);
        const char* filename = sqlite3_db_filename(db, "main");
        throw StoreError(filename && *filename ? filename : "<sqlite>",
            message + " (SQLite code " + std::to_string(rc) + " executing: " + std::string(sql).substr(0, 80) + ")");
    }
}

std::int64_t queryInt64(sqlite3* db, const char* sql)
{
    Statement statement(db, sql);
    return statement.step() ? statement.int64(0) : 0;
}

Transaction::Transaction(sqlite3* db) : db_(db), nested_(sqlite3_get_autocommit(db) == 0)
{
    execute(db_, nested_ ? "SAVEPOINT mismatch_nested" : "BEGIN IMMEDIATE");
}

Transaction::~Transaction()
{
    if (!done_) {
        sqlite3_exec(db_, nested_ ? "ROLLBACK TO mismatch_nested; RELEASE mismatch_nested" : "ROLLBACK", nullptr,
            nullptr, nullptr);
    }
}

void Transaction::commit()
{
    execute(db_, nested_ ? "RELEASE mismatch_nested" : "COMMIT");
    done_ = true;
}

}  // namespace mismatch::store

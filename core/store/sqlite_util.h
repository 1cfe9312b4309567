#pragma once
// Thin RAII helpers over the SQLite C API. Every call that can fail goes through MISMATCH_SQLITE_CHECK,
// which records the call, the source file and line in the StoreError it throws.
#include "core/common/error.h"

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>

namespace mismatch::store {

[[noreturn]] void throwSqliteError(sqlite3* db, int code, const char* call, const char* file, int line);

#define MISMATCH_SQLITE_CHECK(db, call)                                                      \
    do {                                                                                     \
        const int mismatchSqliteRc_ = (call);                                                \
        if (mismatchSqliteRc_ != SQLITE_OK && mismatchSqliteRc_ != SQLITE_ROW &&             \
            mismatchSqliteRc_ != SQLITE_DONE) {                                              \
            ::mismatch::store::throwSqliteError((db), mismatchSqliteRc_, #call, __FILE__, __LINE__); \
        }                                                                                    \
    } while (0)

class Statement {
public:
    Statement(sqlite3* db, const char* sql);
    ~Statement();
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int index, std::int64_t value);
    Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
    Statement& bind(int index, double value);
    Statement& bind(int index, const std::string& value);
    Statement& bind(int index, const char* value) { return bind(index, std::string(value)); }
    Statement& bindNull(int index);
    Statement& bind(int index, const std::optional<double>& value);
    Statement& bind(int index, const std::optional<std::int64_t>& value);

    // Returns true while a row is available.
    bool step();
    void reset();
    // Runs a statement that returns no rows.
    void run();

    std::int64_t int64(int column) const;
    double real(int column) const;
    std::string text(int column) const;
    bool isNull(int column) const;
    std::optional<double> optionalReal(int column) const;
    std::optional<std::int64_t> optionalInt64(int column) const;

private:
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
};

void execute(sqlite3* db, const char* sql);
std::int64_t queryInt64(sqlite3* db, const char* sql);

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed without commit(). Inside another transaction it is a
// savepoint of it (released on commit(), rolled back to when destroyed without commit()), so a caller can make
// several store calls that each open a transaction one atomic write.
class Transaction {
public:
    explicit Transaction(sqlite3* db);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit();

private:
    sqlite3* db_;
    bool nested_ = false;
    bool done_ = false;
};

}  // namespace mismatch::store

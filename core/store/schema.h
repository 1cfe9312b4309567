#pragma once
#include <sqlite3.h>

#include <string>
#include <vector>

namespace mismatch::store {

// 'MMLB': marks a database as a Mismatch Lab workspace (PRAGMA application_id).
inline constexpr int kApplicationId = 0x4D4D4C42;

// migrations()[i] takes a database from schema version i to i + 1. Append only: a released migration is
// never edited, so that a workspace written by any earlier version migrates forward.
const std::vector<const char*>& migrations();

// Applies the migrations from `fromVersion` up to `toVersion` in one transaction (the caller holds it).
void migrate(sqlite3* db, int fromVersion, int toVersion);

// The tables migrations()[version - 1] creates (CREATE TABLE statements), for checking that a workspace's tables
// match its schema version before anything is migrated.
std::vector<std::string> tablesCreatedBy(int version);

}  // namespace mismatch::store

#include "core/store/store_merge.h"

#include "core/common/error.h"
#include "core/common/provenance.h"
#include "core/common/utc_time.h"
#include "core/store/run_lock.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::store {

std::int64_t MergeReport::rowsAdded() const
{
    std::int64_t total = 0;
    for (const auto& [table, count] : rows) {
        total += count;
    }
    return total;
}

nlohmann::json calibrationUnitRecord(nlohmann::json config)
{
    for (const char* key : {"unit", "inputs", "sweep_runs", "screens"}) {
        config.erase(key);
    }
    return config;
}

const std::vector<std::string>& mergedTables()
{
    static const std::vector<std::string> tables = {"models", "prompt_sets", "recipes", "runs", "merged_runs",
        "step_metrics", "step_generations", "external_runs", "evaluations", "evaluation_problems", "calibrations",
        "calibration_points", "calibration_brackets", "sensitivity_scans", "sensitivity_cells", "admission_decisions",
        "admission_generations", "prefix_shift_analyses", "prefix_shift_pairs", "breakdowns", "breakdown_parts",
        "breakdown_subsets"};
    return tables;
}

namespace {

using IdMap = std::map<std::int64_t, std::int64_t>; // id in the shard -> id here

// A prepared statement whose values are read and bound as sqlite3_value (Statement converts them), so that a copied
// row keeps every value's type and bits.
class RawStatement {
public:
    RawStatement(sqlite3* db, const std::string& sql)
        : db_(db)
    {
        MISMATCH_SQLITE_CHECK(db_, sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt_, nullptr));
    }
    ~RawStatement() { sqlite3_finalize(stmt_); }
    RawStatement(const RawStatement&) = delete;
    RawStatement& operator=(const RawStatement&) = delete;
    sqlite3_stmt* get() const { return stmt_; }
    bool step()
    {
        const int rc = sqlite3_step(stmt_);
        MISMATCH_SQLITE_CHECK(db_, rc);
        return rc == SQLITE_ROW;
    }
    void reset()
    {
        sqlite3_reset(stmt_);
        sqlite3_clear_bindings(stmt_);
    }

private:
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
};

struct Merge {
    sqlite3* shard = nullptr;
    sqlite3* target = nullptr;
    std::string shardPath; // the shard's database file
    MergeReport& report;

    void count(const std::string& table, std::int64_t added)
    {
        if (added == 0) {
            return;
        }
        auto found
            = std::find_if(report.rows.begin(), report.rows.end(), [&](const auto& r) { return r.first == table; });
        if (found == report.rows.end()) {
            report.rows.emplace_back(table, added);
        } else {
            found->second += added;
        }
    }
};

std::vector<std::string> columnsOf(sqlite3* db, const std::string& table)
{
    std::vector<std::string> columns;
    Statement info(db, ("PRAGMA table_info(" + table + ")").c_str());
    while (info.step()) {
        columns.push_back(info.text(1));
    }
    return columns;
}

// What to copy from one table: the rows whose `keyColumn` is a key of `keys` (written as the key's value here; with
// keyColumn "id" the row's own id, which the copy leaves to this database to assign), or with `nullKeys` the rows
// whose keyColumn is NULL. Columns in `remaps` are foreign keys written through their map (NULL stays NULL).
struct CopySpec {
    std::string table;
    std::string keyColumn;
    const IdMap* keys = nullptr;
    std::map<std::string, const IdMap*> remaps;
    bool nullKeys = false;
};

void bindCopied(Merge& merge, sqlite3_stmt* insert, int index, sqlite3_stmt* row, int column, const CopySpec& spec,
    const std::string& name)
{
    const auto remap = spec.remaps.find(name);
    if (remap == spec.remaps.end() || sqlite3_column_type(row, column) == SQLITE_NULL) {
        MISMATCH_SQLITE_CHECK(merge.target, sqlite3_bind_value(insert, index, sqlite3_column_value(row, column)));
        return;
    }
    const std::int64_t shardId = sqlite3_column_int64(row, column);
    const auto found = remap->second->find(shardId);
    if (found == remap->second->end()) {
        throw StoreError(merge.shardPath,
            spec.table + "." + name + " names " + std::to_string(shardId)
                + ", which is not among the rows this merge brings (a dangling reference)");
    }
    MISMATCH_SQLITE_CHECK(merge.target, sqlite3_bind_int64(insert, index, found->second));
}

// Copies the rows `spec` selects from the shard into this database; returns shard id -> new id for a table with an
// id column (empty otherwise).
IdMap copyRows(Merge& merge, const CopySpec& spec)
{
    const std::vector<std::string> all = columnsOf(merge.shard, spec.table);
    const bool hasId = std::find(all.begin(), all.end(), "id") != all.end();
    std::vector<std::string> columns;
    std::copy_if(all.begin(), all.end(), std::back_inserter(columns), [](const std::string& c) { return c != "id"; });
    std::string names;
    std::string slots;
    for (const std::string& column : columns) {
        names += (names.empty() ? "\"" : ", \"") + column + "\"";
        slots += slots.empty() ? "?" : ", ?";
    }
    const std::string where = spec.nullKeys ? "\"" + spec.keyColumn + "\" IS NULL" : "\"" + spec.keyColumn + "\" = ?";
    RawStatement select(merge.shard,
        "SELECT " + std::string(hasId ? "id, " : "0, ") + names + " FROM " + spec.table + " WHERE " + where
            + " ORDER BY rowid");
    RawStatement insert(merge.target, "INSERT INTO " + spec.table + " (" + names + ") VALUES (" + slots + ")");
    IdMap created;
    std::int64_t added = 0;
    const IdMap none = {{0, 0}};
    for (const auto& [shardKey, key] : spec.nullKeys ? none : *spec.keys) {
        select.reset();
        if (!spec.nullKeys) {
            MISMATCH_SQLITE_CHECK(merge.shard, sqlite3_bind_int64(select.get(), 1, shardKey));
        }
        while (select.step()) {
            insert.reset();
            for (std::size_t c = 0; c < columns.size(); ++c) {
                const int index = static_cast<int>(c) + 1;
                if (!spec.nullKeys && columns[c] == spec.keyColumn) {
                    MISMATCH_SQLITE_CHECK(merge.target, sqlite3_bind_int64(insert.get(), index, key));
                } else {
                    bindCopied(merge, insert.get(), index, select.get(), index, spec, columns[c]);
                }
            }
            insert.step();
            ++added;
            if (hasId) {
                created[sqlite3_column_int64(select.get(), 0)] = sqlite3_last_insert_rowid(merge.target);
            }
        }
    }
    merge.count(spec.table, added);
    return created;
}

struct Matched {
    IdMap matched; // shard id -> the id of the same row here
    IdMap unmatched; // shard ids of the rest (-> 0)
};

// The rows of `table` that `where` selects, matched here by the columns `match` (compared with IS, so NULLs match):
// models and prompt sets by path, recipes by name, path and content, shipped calibrations by name, student and content.
Matched matchRows(
    Merge& merge, const std::string& table, const std::vector<std::string>& match, const std::string& where = "1")
{
    std::string columns;
    std::string condition;
    for (const std::string& column : match) {
        columns += ", \"" + column + "\"";
        condition += (condition.empty() ? "\"" : " AND \"") + column + "\" IS ?";
    }
    RawStatement shardRows(merge.shard, "SELECT id" + columns + " FROM " + table + " WHERE " + where + " ORDER BY id");
    RawStatement existing(merge.target, "SELECT id FROM " + table + " WHERE " + condition + " ORDER BY id LIMIT 1");
    Matched result;
    while (shardRows.step()) {
        existing.reset();
        for (std::size_t c = 0; c < match.size(); ++c) {
            const int index = static_cast<int>(c) + 1;
            MISMATCH_SQLITE_CHECK(
                merge.target, sqlite3_bind_value(existing.get(), index, sqlite3_column_value(shardRows.get(), index)));
        }
        const std::int64_t shardId = sqlite3_column_int64(shardRows.get(), 0);
        if (existing.step()) {
            result.matched[shardId] = sqlite3_column_int64(existing.get(), 0);
        } else {
            result.unmatched[shardId] = 0;
        }
    }
    return result;
}

// matchRows, then the rows not matched are copied; shard id -> id here for all of them.
IdMap matchOrCopy(Merge& merge, const std::string& table, const std::vector<std::string>& match)
{
    const Matched rows = matchRows(merge, table, match);
    IdMap ids = rows.matched;
    const IdMap copied = copyRows(merge, {table, "id", &rows.unmatched, {}});
    ids.insert(copied.begin(), copied.end());
    return ids;
}

// The record runs of shipped calibrations (the demo records a shipped calibration's sweep as runs of its own) that are
// here already, so that a shipped calibration merged from many shards brings its runs once: for a calibration matched
// here, the run of the same name among its points (when that name is unique on both sides).
IdMap matchRecordRuns(Merge& merge, const IdMap& calibrations)
{
    const char* sql = "SELECT r.id, r.name FROM runs r WHERE r.id IN "
                      "(SELECT run_id FROM calibration_points WHERE calibration_id = ?) ORDER BY r.id";
    const auto byName = [sql](sqlite3* db, std::int64_t calibrationId) {
        std::map<std::string, std::vector<std::int64_t>> runs;
        Statement query(db, sql);
        query.bind(1, calibrationId);
        while (query.step()) {
            runs[query.text(1)].push_back(query.int64(0));
        }
        return runs;
    };
    IdMap runs;
    for (const auto& [shardCalibration, calibration] : calibrations) {
        const auto here = byName(merge.target, calibration);
        for (const auto& [name, ids] : byName(merge.shard, shardCalibration)) {
            const auto found = here.find(name);
            if (ids.size() == 1 && found != here.end() && found->second.size() == 1) {
                runs[ids.front()] = found->second.front();
            }
        }
    }
    // The record runs no point names (replicates after the first) are known by their record (analysis/demo.cpp:
    // config_json {"shipped_calibration": FILE, "sweep_run": ...}): matched with a run here of the same name, kind and
    // record.
    Statement records(merge.shard,
        "SELECT id, name, kind, config_json FROM runs WHERE CASE WHEN json_valid(config_json) "
        "THEN json_type(config_json, '$.shipped_calibration') END = 'text' ORDER BY id");
    Statement same(
        merge.target, "SELECT id FROM runs WHERE name = ? AND kind = ? AND config_json = ? ORDER BY id LIMIT 1");
    while (records.step()) {
        same.reset();
        same.bind(1, records.text(1)).bind(2, records.text(2)).bind(3, records.text(3));
        if (!runs.count(records.int64(0)) && same.step()) {
            runs[records.int64(0)] = same.int64(0);
        }
    }
    return runs;
}

std::string workspaceId(sqlite3* db)
{
    Statement id(db, "SELECT value FROM workspace_meta WHERE key = 'workspace_id'");
    return id.step() ? id.text(0) : std::string();
}

// The host named in the shard's lock file of run `runId` ("process P on HOST since T": the last process that began or
// resumed the run); "" when there is none.
std::string lockFileHost(const std::string& shardPath, std::int64_t runId)
{
    std::ifstream file(runLockPath(shardPath, runId));
    std::string text;
    std::getline(file, text);
    const auto on = text.find(" on ");
    const auto since = text.rfind(" since ");
    return on == std::string::npos || since == std::string::npos || since <= on + 4
        ? std::string()
        : text.substr(on + 4, since - on - 4);
}

// The "merged" object of a merged run's provenance: where it came from and, when the shard recorded them in the run's
// provenance records (latest first), its host and Slurm job; else the host of its lock file, else this host.
nlohmann::json mergedRecord(const Merge& merge, std::int64_t shardRunId, const std::string& provenanceJson)
{
    nlohmann::json merged = {{"shard", merge.shardPath}, {"shard_workspace_id", merge.report.shardWorkspaceId},
        {"shard_run_id", shardRunId}, {"utc", utcTimestamp()}};
    const nlohmann::json records
        = nlohmann::json::parse(provenanceJson.empty() ? "[]" : provenanceJson, nullptr, false);
    const auto recorded = [&](const std::string& key, const std::string& nestedKey) -> nlohmann::json {
        for (auto record = records.is_array() ? records.rbegin() : records.rend(); record != records.rend(); ++record) {
            if (record->is_object() && record->contains(key)) {
                return record->at(key);
            }
            if (record->is_object() && record->contains("slurm") && record->at("slurm").is_object()
                && record->at("slurm").contains(nestedKey)) {
                return record->at("slurm").at(nestedKey);
            }
        }
        return nullptr;
    };
    for (const auto& [key, nested] : {std::pair<std::string, std::string>("slurm_job_id", "job_id"),
             std::pair<std::string, std::string>("slurm_array_task_id", "array_task_id")}) {
        if (const nlohmann::json value = recorded(key, nested); !value.is_null()) {
            merged[key] = value;
        }
    }
    nlohmann::json host = recorded("host", "host");
    merged["host_source"] = "provenance";
    if (host.is_null()) {
        host = lockFileHost(merge.shardPath, shardRunId);
        merged["host_source"] = "run_lock";
    }
    if (host.is_string() && host.get<std::string>().empty()) {
        host = hostName().value_or("unknown");
        merged["host_source"] = "merge";
    }
    merged["host"] = host;
    return merged;
}

// Refuses a shard with a run that is not finished: still running, killed mid-run (left running), failed or cancelled.
void refuseUnfinishedRuns(const Merge& merge, const std::string& shardDirectory)
{
    Statement runs(merge.shard, "SELECT id, name, status FROM runs WHERE status <> 'finished' ORDER BY id");
    if (!runs.step()) {
        return;
    }
    const std::string status = runs.text(2);
    const std::string why = status == "running" ? "is still running or its unit was killed mid-run" : "is " + status;
    throw InputError(merge.shardPath, "run " + std::to_string(runs.int64(0)) + " (" + runs.text(1) + ")",
        why + "; a shard is merged when every run in it has finished: resume its unit first (mismatch run --resume "
            + std::to_string(runs.int64(0)) + " --workspace " + shardDirectory + "), or stop merging this shard");
}

// A calibration unit's record (calibrationUnitRecord) and the calibration it belongs to (its run is named
// "CALIBRATION unit LABEL/rN").
std::pair<std::string, nlohmann::json> unitOfCalibration(const std::string& name, const std::string& configJson)
{
    nlohmann::json record = nlohmann::json::parse(configJson, nullptr, false);
    if (record.is_object()) {
        record = calibrationUnitRecord(std::move(record));
    }
    const std::size_t at = name.rfind(" unit ");
    return {at == std::string::npos ? name : name.substr(0, at), record};
}

// The shard's calibration units must be units of the calibrations whose units are here already: a unit of the same
// calibration (by name) with other options is refused, naming both runs (its screens and seeds would be mixed into
// a decision step they were not measured for).
void refuseOtherCalibrationsUnits(const Merge& merge)
{
    Statement here(merge.target, "SELECT id, name, config_json FROM runs WHERE kind = 'calibrate_unit' ORDER BY id");
    std::map<std::string, std::pair<std::int64_t, nlohmann::json>> calibrations;
    while (here.step()) {
        auto [calibration, record] = unitOfCalibration(here.text(1), here.text(2));
        calibrations.emplace(calibration, std::make_pair(here.int64(0), record));
    }
    Statement shard(merge.shard, "SELECT id, name, config_json FROM runs WHERE kind = 'calibrate_unit' ORDER BY id");
    while (shard.step()) {
        const auto [calibration, record] = unitOfCalibration(shard.text(1), shard.text(2));
        const auto found = calibrations.find(calibration);
        if (found != calibrations.end() && found->second.second != record) {
            throw InputError(merge.shardPath, "run " + std::to_string(shard.int64(0)) + " (" + shard.text(1) + ")",
                "is a unit of another calibration '" + calibration + "' than the one whose units are merged here "
                    + "(run " + std::to_string(found->second.first) + "): their options differ; merge it into "
                    + "another workspace, or give the calibrations different names");
        }
    }
}

struct RunMaps {
    IdMap merged; // runs merged now
    IdMap all; // and those merged before
};

// Copies the runs of the shard that no earlier merge brought (merged_runs) and that are not record runs matched here,
// records them in merged_runs and adds the "merged" object to their provenance.
RunMaps mergeRuns(Merge& merge, const IdMap& models, const IdMap& recordRuns)
{
    RunMaps maps;
    std::map<std::int64_t, std::string> provenance;
    Statement runs(merge.shard, "SELECT id, started_at, name, coalesce(provenance_json, '') FROM runs ORDER BY id");
    Statement before(merge.target,
        "SELECT run_id FROM merged_runs WHERE shard_workspace_id = ? AND shard_run_id = ? "
        "AND shard_run_started_at = ? AND shard_run_name = ?");
    IdMap fresh;
    std::map<std::int64_t, std::pair<std::string, std::string>> identity; // started_at, name
    while (runs.step()) {
        const std::int64_t id = runs.int64(0);
        before.reset();
        before.bind(1, merge.report.shardWorkspaceId).bind(2, id).bind(3, runs.text(1)).bind(4, runs.text(2));
        if (before.step()) {
            maps.all[id] = before.int64(0);
            merge.report.alreadyMerged.emplace_back(id, before.int64(0));
        } else if (const auto record = recordRuns.find(id); record != recordRuns.end()) {
            maps.all[id] = record->second;
            merge.report.matchedRuns.emplace_back(id, record->second);
        } else {
            fresh[id] = 0;
            identity[id] = {runs.text(1), runs.text(2)};
            provenance[id] = runs.text(3);
        }
    }
    maps.merged = copyRows(merge, {"runs", "id", &fresh, {{"model_id", &models}}});
    Statement record(merge.target,
        "INSERT INTO merged_runs (run_id, shard_workspace_id, shard_run_id, "
        "shard_run_started_at, shard_run_name, shard_path) VALUES (?, ?, ?, ?, ?, ?)");
    Statement mark(merge.target,
        "UPDATE runs SET provenance_json = json_set(provenance_json, '$[#-1].merged', json(?)) "
        "WHERE id = ? AND json_array_length(provenance_json) > 0");
    for (const auto& [shardId, id] : maps.merged) {
        maps.all[shardId] = id;
        merge.report.runs.emplace_back(shardId, id);
        record.reset();
        record.bind(1, id).bind(2, merge.report.shardWorkspaceId).bind(3, shardId);
        record.bind(4, identity[shardId].first).bind(5, identity[shardId].second).bind(6, merge.shardPath);
        record.run();
        if (!provenance[shardId].empty()) {
            mark.reset();
            mark.bind(1, mergedRecord(merge, shardId, provenance[shardId]).dump()).bind(2, id);
            mark.run();
        }
    }
    merge.count("merged_runs", static_cast<std::int64_t>(maps.merged.size()));
    return maps;
}

// The calibrations of runs merged before, paired in id order with the copies that merge made of them.
void addEarlierCalibrations(Merge& merge, const RunMaps& runs, IdMap& calibrations)
{
    Statement shardSide(merge.shard, "SELECT id FROM calibrations WHERE run_id = ? ORDER BY id");
    Statement here(merge.target, "SELECT id FROM calibrations WHERE run_id = ? ORDER BY id");
    for (const auto& [shardRun, run] : runs.all) {
        if (runs.merged.count(shardRun)) {
            continue;
        }
        shardSide.reset();
        here.reset();
        shardSide.bind(1, shardRun);
        here.bind(1, run);
        while (shardSide.step() && here.step()) {
            calibrations[shardSide.int64(0)] = here.int64(0);
        }
    }
}

void addAll(IdMap& into, const IdMap& more)
{
    into.insert(more.begin(), more.end());
}

// Shard id -> id here of the rows a run's JSON may name, by table.
using TableMaps = std::map<std::string, IdMap>;

// What the run rows refer to besides runs.
struct SharedRows {
    const IdMap& models;
    const IdMap& promptSets;
    const Matched& shipped; // calibrations without a run
};

// Everything stored with the runs merged now (and, on a shard's first merge, analyses stored without a run). Returns
// the ids of the analyses' rows, for remapRunJson.
TableMaps mergeRunRows(Merge& merge, const RunMaps& runs, const SharedRows& rows, bool firstMerge)
{
    const IdMap& models = rows.models;
    const IdMap& promptSets = rows.promptSets;
    const IdMap& fresh = runs.merged;
    copyRows(merge, {"step_metrics", "run_id", &fresh, {}});
    copyRows(merge, {"step_generations", "run_id", &fresh, {}});
    copyRows(merge, {"external_runs", "run_id", &fresh, {}});
    const IdMap evaluations = copyRows(merge, {"evaluations", "run_id", &fresh, {{"prompt_set_id", &promptSets}}});
    copyRows(merge, {"evaluation_problems", "evaluation_id", &evaluations, {}});

    // The shipped calibrations not matched here are copied; points and brackets come with the calibrations copied.
    IdMap copiedCalibrations = copyRows(merge, {"calibrations", "id", &rows.shipped.unmatched, {}});
    addAll(copiedCalibrations, copyRows(merge, {"calibrations", "run_id", &fresh, {}}));
    IdMap calibrations = rows.shipped.matched;
    addAll(calibrations, copiedCalibrations);
    addEarlierCalibrations(merge, runs, calibrations);
    const std::map<std::string, const IdMap*> pointRuns = {{"run_id", &runs.all}};
    copyRows(merge, {"calibration_points", "calibration_id", &copiedCalibrations, pointRuns});
    copyRows(merge, {"calibration_brackets", "calibration_id", &copiedCalibrations, {}});

    IdMap scans = copyRows(merge, {"sensitivity_scans", "run_id", &fresh, {{"model_id", &models}}});
    IdMap decisions = copyRows(merge, {"admission_decisions", "run_id", &fresh, {{"calibration_id", &calibrations}}});
    IdMap analyses = copyRows(merge, {"prefix_shift_analyses", "run_id", &fresh, {}});
    IdMap breakdowns = copyRows(merge, {"breakdowns", "run_id", &fresh, {}});
    if (firstMerge) {
        addAll(scans, copyRows(merge, {"sensitivity_scans", "run_id", nullptr, {{"model_id", &models}}, true}));
        addAll(decisions,
            copyRows(merge, {"admission_decisions", "run_id", nullptr, {{"calibration_id", &calibrations}}, true}));
        addAll(analyses, copyRows(merge, {"prefix_shift_analyses", "run_id", nullptr, {}, true}));
        addAll(breakdowns, copyRows(merge, {"breakdowns", "run_id", nullptr, {}, true}));
    }
    copyRows(merge, {"sensitivity_cells", "scan_id", &scans, {}});
    copyRows(merge, {"admission_generations", "decision_id", &decisions, {}});
    copyRows(merge, {"prefix_shift_pairs", "analysis_id", &analyses, {}});
    copyRows(merge, {"breakdown_parts", "breakdown_id", &breakdowns, {}});
    copyRows(merge, {"breakdown_subsets", "breakdown_id", &breakdowns, {}});
    return {{"calibrations", calibrations}, {"sensitivity_scans", scans}, {"admission_decisions", decisions},
        {"prefix_shift_analyses", analyses}, {"breakdowns", breakdowns}};
}

// Rewrites the ids that `value` names by key (`keys`: key -> the map of its table; any key ending in "run_id" names a
// run, and "sweep_runs" lists runs) into ids here. An id the maps do not hold is left as it is.
void remapIds(nlohmann::json& value, const std::map<std::string, const IdMap*>& keys, const IdMap& runs)
{
    if (value.is_array()) {
        for (auto& element : value) {
            remapIds(element, keys, runs);
        }
        return;
    }
    if (!value.is_object()) {
        return;
    }
    for (auto& [key, member] : value.items()) {
        const auto named = keys.find(key);
        const bool runKey = key.size() >= 6 && key.compare(key.size() - 6, 6, "run_id") == 0;
        if (key == "engine_weights" && member.is_string()) {
            // A screen's engine weights name the run's checkpoint relative to its workspace: checkpoints/run-ID/...
            const std::string text = member.get<std::string>();
            const std::string prefix = "checkpoints/run-";
            const std::size_t end = text.find('/', prefix.size());
            if (text.rfind(prefix, 0) == 0 && end != std::string::npos
                && text.find_first_not_of("0123456789", prefix.size()) == end && end > prefix.size()) {
                const auto found = runs.find(std::stoll(text.substr(prefix.size(), end - prefix.size())));
                if (found != runs.end()) {
                    member = prefix + std::to_string(found->second) + text.substr(end);
                }
            }
            continue;
        }
        if (key == "sweep_runs" && member.is_array()) {
            // A calibration's (or a calibration unit's) training runs, by id.
            for (auto& element : member) {
                const auto found = element.is_number_integer() ? runs.find(element.get<std::int64_t>()) : runs.end();
                element = found == runs.end() ? element : nlohmann::json(found->second);
            }
            continue;
        }
        const IdMap* map = named != keys.end() ? named->second : runKey ? &runs : nullptr;
        if (map && member.is_number_integer()) {
            const auto found = map->find(member.get<std::int64_t>());
            member = found == map->end() ? member : nlohmann::json(found->second);
        } else {
            remapIds(member, keys, runs);
        }
    }
}

// A merged run's config_json (calibrate's sweep runs and screens, the demo's calibration and admission run, result
// ids) and job_json (admit's `calibration`, recipe build's `scan`) name other rows of the shard by id: those ids are
// rewritten to the rows' ids here. Imported runs keep their config as the outside tool wrote it.
void remapRunJson(Merge& merge, const RunMaps& runs, const TableMaps& tables, const IdMap& recipes)
{
    const std::map<std::string, const IdMap*> configKeys
        = {{"calibration_id", &tables.at("calibrations")}, {"scan_id", &tables.at("sensitivity_scans")},
            {"decision_id", &tables.at("admission_decisions")}, {"analysis_id", &tables.at("prefix_shift_analyses")},
            {"breakdown_id", &tables.at("breakdowns")}, {"recipe_id", &recipes}};
    std::map<std::string, const IdMap*> jobKeys = configKeys;
    jobKeys["calibration"] = &tables.at("calibrations");
    jobKeys["scan"] = &tables.at("sensitivity_scans");
    Statement read(
        merge.target, "SELECT config_json, coalesce(job_json, '') FROM runs WHERE id = ? AND kind <> 'external'");
    Statement write(merge.target, "UPDATE runs SET config_json = ?, job_json = ? WHERE id = ?");
    for (const auto& [shardRun, run] : runs.merged) {
        read.reset();
        read.bind(1, run);
        if (!read.step()) {
            continue;
        }
        nlohmann::json config = nlohmann::json::parse(read.text(0), nullptr, false);
        nlohmann::json job = nlohmann::json::parse(read.text(1).empty() ? "null" : read.text(1), nullptr, false);
        const nlohmann::json configBefore = config;
        const nlohmann::json jobBefore = job;
        remapIds(config, configKeys, runs.all);
        remapIds(job, jobKeys, runs.all);
        if (config == configBefore && job == jobBefore) {
            continue;
        }
        write.reset();
        write.bind(1, config == configBefore ? read.text(0) : config.dump());
        if (job.is_null()) {
            write.bindNull(2);
        } else {
            write.bind(2, job == jobBefore ? read.text(1) : job.dump());
        }
        write.bind(3, run);
        write.run();
    }
}

} // namespace

namespace {

// The shard's database file and directory: a workspace directory holding workspace.db, or the file itself.
std::pair<std::string, std::string> shardLocation(const std::string& given)
{
    std::error_code error;
    if (given.empty()) {
        throw InputError(given, "", "is empty; expected a shard workspace directory (holding workspace.db)");
    }
    if (fs::is_directory(given, error)) {
        const std::string database = databasePath(given);
        if (!fs::exists(database, error)) {
            throw InputError(given, "",
                "holds no workspace.db; expected a shard workspace directory (one that "
                "`mismatch run UNIT.yaml --workspace SHARD` wrote)");
        }
        return {database, given};
    }
    if (!fs::exists(given, error)) {
        throw InputError(given, "", "does not exist; expected a shard workspace directory (holding workspace.db)");
    }
    const fs::path parent = fs::path(given).parent_path();
    return {given, parent.empty() ? std::string(".") : parent.string()};
}

// Opens the shard read-only: InputError naming it for anything but a workspace of this build's schema.
RunStore openShard(const std::string& database)
{
    try {
        return RunStore::open(database, OpenMode::ReadOnly);
    } catch (const StoreError& error) {
        throw InputError(database, "",
            error.detail() + "; expected a shard workspace of schema version " + std::to_string(currentSchemaVersion())
                + " (an older shard is migrated by `mismatch store init "
                  "--workspace SHARD`, a newer one is merged by the build that wrote it)");
    }
}

// Every table of the shard is one the merge knows (or workspace_meta, the shard's own identity).
void checkTablesKnown(sqlite3* shard, const std::string& shardPath)
{
    const std::vector<std::string>& known = mergedTables();
    Statement tables(shard, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
    while (tables.step()) {
        const std::string table = tables.text(0);
        if (table != "workspace_meta" && std::find(known.begin(), known.end(), table) == known.end()) {
            throw StoreError(shardPath, "holds the table " + table + ", which this build cannot merge");
        }
    }
}

// A read transaction on the shard: the merge reads one snapshot of it.
class ReadSnapshot {
public:
    explicit ReadSnapshot(sqlite3* db)
        : db_(db)
    {
        execute(db_, "BEGIN");
    }
    ~ReadSnapshot() { sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr); }
    ReadSnapshot(const ReadSnapshot&) = delete;
    ReadSnapshot& operator=(const ReadSnapshot&) = delete;

private:
    sqlite3* db_;
};

// The merged runs' checkpoints stay in the shard (they can be large); the workspace's checkpoints/run-ID becomes a
// link to the shard's checkpoints/run-SHARDID, so that whatever reads a run's checkpoints (a resume, admit on a
// calibration's checkpoint, the screens' engine weights) finds them under the run's id here. A link that cannot be
// made is reported, the merge itself stands.
void linkCheckpoints(MergeReport& report, const fs::path& shardDirectory, const fs::path& workspaceDirectory)
{
    std::vector<std::pair<std::int64_t, std::int64_t>> runs = report.runs;
    runs.insert(runs.end(), report.alreadyMerged.begin(), report.alreadyMerged.end());
    for (const auto& [shardRun, run] : runs) {
        std::error_code error;
        const fs::path source = fs::absolute(shardDirectory / "checkpoints" / ("run-" + std::to_string(shardRun)));
        const fs::path link = workspaceDirectory / "checkpoints" / ("run-" + std::to_string(run));
        if (!fs::is_directory(source, error) || fs::exists(fs::symlink_status(link, error))) {
            continue;
        }
        fs::create_directories(link.parent_path(), error);
        fs::create_directory_symlink(source, link, error);
        if (error) {
            report.notes.push_back("checkpoints of run " + std::to_string(run) + " stay at " + source.string()
                + " (no link " + link.string() + ": " + error.message() + ")");
        } else {
            ++report.checkpointLinks;
        }
    }
}

} // namespace

MergeReport mergeShard(RunStore& into, const std::string& shardDirectoryOrDatabase)
{
    if (into.readOnly()) {
        throw StoreError(into.path(), "is open read-only; a merge writes into it");
    }
    const auto [given, directory] = shardLocation(shardDirectoryOrDatabase);
    // Recorded with the merged runs: absolute, so that it still names the shard from another directory.
    const std::string database = fs::absolute(given).lexically_normal().string();
    std::error_code error;
    if (fs::equivalent(database, into.path(), error)) {
        throw InputError(database, "", "is the workspace being merged into; expected another workspace (a shard)");
    }
    RunStore shard = openShard(database);
    MergeReport report;
    report.shard = database;
    Merge merge {shard.handle(), into.handle(), database, report};
    const ReadSnapshot snapshot(shard.handle());
    report.shardWorkspaceId = workspaceId(shard.handle());
    if (report.shardWorkspaceId == workspaceId(into.handle())) {
        throw InputError(database, "workspace_meta",
            "has the workspace id " + report.shardWorkspaceId + " of " + into.path()
                + ": it is a copy of the workspace being merged into, not a shard of it");
    }
    checkTablesKnown(shard.handle(), database);
    refuseUnfinishedRuns(merge, directory);
    refuseOtherCalibrationsUnits(merge);

    Transaction transaction(into.handle());
    bool firstMerge = false;
    {
        Statement earlier(into.handle(), "SELECT count(*) FROM merged_runs WHERE shard_workspace_id = ?");
        earlier.bind(1, report.shardWorkspaceId);
        firstMerge = earlier.step() && earlier.int64(0) == 0;
    }
    const IdMap models = matchOrCopy(merge, "models", {"path"});
    const IdMap promptSets = matchOrCopy(merge, "prompt_sets", {"path"});
    const IdMap recipes = matchOrCopy(merge, "recipes", {"name", "path", "content"});
    // Calibrations without a run (the shipped ones) are matched by content, as the demo keeps one per content.
    const Matched shipped = matchRows(merge, "calibrations", {"name", "student", "config_json"}, "run_id IS NULL");
    const RunMaps runs = mergeRuns(merge, models, matchRecordRuns(merge, shipped.matched));
    const TableMaps analyses = mergeRunRows(merge, runs, {models, promptSets, shipped}, firstMerge);
    remapRunJson(merge, runs, analyses, recipes);
    transaction.commit();
    linkCheckpoints(report, directory, fs::path(into.path()).parent_path());
    return report;
}

} // namespace mismatch::store

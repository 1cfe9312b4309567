#pragma once
// Shards and merging (scale-out): a shard is an ordinary workspace that one unit of work wrote on its own (a cluster
// node's `mismatch cluster unit DIR UNIT`, core/jobs/cluster.h); mergeShard brings its runs and everything stored with them
// into another workspace, the one writer of that workspace, in one transaction per shard.
//
// Every row gets a new id here and every foreign key is remapped; models and prompt sets are matched by path and
// recipes by their name, path and content, as the store itself keeps one row per path (RunStore::addModel); a shipped
// calibration (stored without a run) is matched by its name, student and content, with its record runs. A merged
// run keeps its provenance_json, whose last record gains a "merged" object: the shard's path and id, the shard's run
// id, and the host and Slurm job and array task of the run when the shard recorded them (its provenance, else the
// host in its run's lock file; else the merging host, marked "host_source": "merge"). The merged_runs table (schema
// 11) records each merged run against the shard's workspace id (workspace_meta, a random id made with the workspace,
// so a shard copied elsewhere is still the same shard): merging a shard again adds nothing. Ids inside a run's JSON
// are remapped too (keys ending in run_id, a calibration's "sweep_runs", the checkpoint a screen's "engine_weights"
// names). Checkpoints stay in the shard: the workspace's checkpoints/run-ID becomes a link to the shard's.
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::store {

struct MergeReport {
    std::string shard; // the shard's database file
    std::string shardWorkspaceId; // workspace_meta 'workspace_id' of the shard
    // Runs merged now: (run id in the shard, new run id here).
    std::vector<std::pair<std::int64_t, std::int64_t>> runs;
    // Runs merged by an earlier merge: (run id in the shard, its run id here).
    std::vector<std::pair<std::int64_t, std::int64_t>> alreadyMerged;
    // A shipped calibration's record runs found here with the calibration they belong to: (run id in the shard, run
    // id here).
    std::vector<std::pair<std::int64_t, std::int64_t>> matchedRuns;
    // Rows added per table, in the order the merge writes them (tables with none added are left out).
    std::vector<std::pair<std::string, std::int64_t>> rows;
    // The merged runs' checkpoint directories linked into the workspace (checkpoints/run-ID -> the shard's), and
    // what could not be linked.
    std::int64_t checkpointLinks = 0;
    std::vector<std::string> notes;
    std::int64_t rowsAdded() const;
    bool nothingAdded() const { return rowsAdded() == 0; }
};

// Merges the shard at `shardDirectoryOrDatabase` (a workspace directory or its workspace.db) into `into`, in one
// transaction: all of it or, on any error, nothing. The shard is opened read-only and never modified. InputError
// naming the shard, with nothing written, for: a shard that does not exist or is not a workspace, one of a newer
// schema than this build's (or an older one, which must be migrated first), one with a run that is still running or
// was killed, failed or cancelled (its unit must be resumed first), the target itself (or a copy of it), and a unit
// of another calibration (a calibrate_unit run whose calibration has units here with other options).
MergeReport mergeShard(RunStore& into, const std::string& shardDirectoryOrDatabase);

// A calibration unit's record (core/analysis/calibrate.h "Units"): its run's config_json without what the unit adds
// to it as it runs (unit, inputs, sweep_runs, screens). Two unit runs belong to one calibration when their records are
// equal: the merge refuses a shard's unit of a calibration here with another record, and calibrate resumes from the
// stored units with its own record.
nlohmann::json calibrationUnitRecord(nlohmann::json config);

// The tables a merge copies or matches, in the order it writes them; every table of the current schema but
// workspace_meta is one of them (tests/store checks it against the migrations).
const std::vector<std::string>& mergedTables();

} // namespace mismatch::store

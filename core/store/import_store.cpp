#include "core/store/import_store.h"

#include "core/common/error.h"
#include "core/common/version.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include <cmath>

namespace mismatch::store {

ExternalImportIds storeExternalRun(RunStore& store, const ExternalRunSpec& run, const std::vector<StepMetrics>& steps,
    const std::optional<ExternalScanSpec>& scan)
{
    if (store.readOnly()) {
        throw StoreError(store.path(), "is open read-only; an import needs to write");
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    ExternalImportIds ids;
    {
        Statement insert(db, "INSERT INTO runs (name, kind, status, config_json, tool_version, finished_at) "
                             "VALUES (?, 'external', 'finished', ?, ?, strftime('%Y-%m-%dT%H:%M:%SZ','now'))");
        insert.bind(1, run.name).bind(2, run.configJson).bind(3, kVersion);
        insert.run();
        ids.runId = sqlite3_last_insert_rowid(db);
    }
    {
        Statement insert(db, "INSERT INTO external_runs (run_id, source, file, estimator_json) VALUES (?, ?, ?, ?)");
        insert.bind(1, ids.runId).bind(2, run.source).bind(3, run.file).bind(4, run.estimatorJson);
        insert.run();
    }
    {
        Statement insert(db,
            "INSERT INTO step_metrics (run_id, step, mismatch_kl, k1, k3, bf16_multiple, loss, reward, accuracy, "
            "entropy, staleness, rollout_tokens_per_s, train_tokens_per_s, wall_time_s, extras_json) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        for (const StepMetrics& m : steps) {
            insert.reset();
            insert.bind(1, ids.runId).bind(2, m.step).bind(3, m.mismatchKl).bind(4, m.k1).bind(5, m.k3);
            insert.bind(6, m.bf16Multiple).bind(7, m.loss).bind(8, m.reward).bind(9, m.accuracy).bind(10, m.entropy);
            insert.bind(11, m.staleness).bind(12, m.rolloutTokensPerSecond).bind(13, m.trainTokensPerSecond);
            insert.bind(14, m.wallTimeSeconds).bind(15, m.extrasJson.empty() ? std::string("{}") : m.extrasJson);
            try {
                insert.run();
            } catch (const StoreError& error) {
                throw StoreError(store.path(), "cannot store step " + std::to_string(m.step) + " of the imported run "
                        + run.name + ": " + error.detail() + " (nothing was imported)");
            }
        }
    }
    if (scan) {
        {
            Statement insert(db, "INSERT INTO sensitivity_scans (run_id, format, config_json) VALUES (?, ?, ?)");
            insert.bind(1, ids.runId).bind(2, scan->format).bind(3, scan->configJson);
            insert.run();
            ids.scanId = sqlite3_last_insert_rowid(db);
        }
        Statement insert(db, "INSERT INTO sensitivity_cells (scan_id, layer, module_group, mismatch, added_mismatch) "
                             "VALUES (?, ?, ?, ?, ?)");
        for (const auto& cell : scan->cells) {
            insert.reset();
            insert.bind(1, *ids.scanId).bind(2, cell.layer).bind(3, cell.moduleGroup).bind(4, cell.value);
            insert.bind(5, cell.added);
            try {
                insert.run();
            } catch (const StoreError& error) {
                throw StoreError(store.path(), "cannot store the sensitivity cell (layer " + std::to_string(cell.layer)
                        + ", " + cell.moduleGroup + ") of " + run.name + ": " + error.detail()
                        + " (nothing was imported)");
            }
        }
    }
    transaction.commit();
    return ids;
}

std::int64_t storeFollowedSteps(
    RunStore& store, std::int64_t runId, const ExternalRunSpec& run, const std::vector<StepMetrics>& steps)
{
    if (store.readOnly()) {
        throw StoreError(store.path(), "is open read-only; following a log needs to write");
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    if (runId == 0) {
        RunSpec spec;
        spec.name = run.name;
        spec.kind = "external";
        spec.configJson = run.configJson;
        runId = store.beginRun(spec); // nested in this transaction: the run and its first steps appear together
        Statement insert(db, "INSERT INTO external_runs (run_id, source, file, estimator_json) VALUES (?, ?, ?, ?)");
        insert.bind(1, runId).bind(2, run.source).bind(3, run.file).bind(4, run.estimatorJson);
        insert.run();
    } else {
        Statement config(db, "UPDATE runs SET config_json = ? WHERE id = ?");
        config.bind(1, run.configJson).bind(2, runId);
        config.run();
        Statement estimators(db, "UPDATE external_runs SET estimator_json = ? WHERE run_id = ?");
        estimators.bind(1, run.estimatorJson).bind(2, runId);
        estimators.run();
        if (sqlite3_changes(db) != 1) {
            throw StoreError(store.path(), "run " + std::to_string(runId) + " is not an imported run");
        }
    }
    Statement newest(db, "SELECT coalesce(max(id), 0) FROM step_metrics");
    Statement remove(db, "DELETE FROM step_metrics WHERE run_id = ? AND step = ?");
    Statement insert(db,
        "INSERT INTO step_metrics (id, run_id, step, mismatch_kl, k1, k3, bf16_multiple, loss, reward, accuracy, "
        "entropy, staleness, rollout_tokens_per_s, train_tokens_per_s, wall_time_s, extras_json) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const StepMetrics& m : steps) {
        // The new row's id is taken before the old row goes: SQLite would give a deleted newest row's id again, and
        // a reader whose cursor is past it would not read the new values.
        newest.reset();
        newest.step();
        const std::int64_t id = newest.int64(0) + 1;
        remove.reset();
        remove.bind(1, runId).bind(2, m.step);
        remove.run();
        insert.reset();
        insert.bind(1, id).bind(2, runId).bind(3, m.step).bind(4, m.mismatchKl).bind(5, m.k1).bind(6, m.k3);
        insert.bind(7, m.bf16Multiple).bind(8, m.loss).bind(9, m.reward).bind(10, m.accuracy).bind(11, m.entropy);
        insert.bind(12, m.staleness).bind(13, m.rolloutTokensPerSecond).bind(14, m.trainTokensPerSecond);
        insert.bind(15, m.wallTimeSeconds).bind(16, m.extrasJson.empty() ? std::string("{}") : m.extrasJson);
        try {
            insert.run();
        } catch (const StoreError& error) {
            throw StoreError(store.path(), "cannot store step " + std::to_string(m.step) + " of the followed run "
                    + run.name + ": " + error.detail() + " (nothing of this batch was stored)");
        }
    }
    transaction.commit();
    return runId;
}

std::optional<ExternalRunInfo> externalRun(const RunStore& store, std::int64_t runId)
{
    Statement s(store.handle(),
        "SELECT run_id, source, file, estimator_json, imported_at FROM external_runs WHERE run_id = ?");
    s.bind(1, runId);
    if (!s.step()) {
        return std::nullopt;
    }
    return ExternalRunInfo{s.int64(0), s.text(1), s.text(2), s.text(3), s.text(4)};
}

std::vector<ImportedEstimators> importedEstimators(const RunStore& store)
{
    // (estimator, measure as stored by the import): the local columns' order.
    static const std::vector<std::pair<std::string, std::string>> kMeasures
        = {{"k1", "k1"}, {"k3", "k3"}, {"mult_prob_error", "mult_prob_error"}, {"prob_diff", "prob_diff_mean"}};
    std::vector<ImportedEstimators> result;
    for (const RunInfo& run : store.listRuns()) {
        const std::optional<ExternalRunInfo> external = externalRun(store, run.id);
        if (!external) {
            continue;
        }
        const nlohmann::json record
            = nlohmann::json::parse(external->estimatorJson, nullptr, /*allow_exceptions=*/false);
        if (!record.is_object()) { // unreadable (discarded) or not a record
            continue;
        }
        ImportedEstimators entry;
        entry.runId = run.id;
        entry.name = run.name;
        entry.source = external->source;
        // Sums and counts per measure over the steps that logged it; each step's extras are parsed once.
        std::vector<double> sums(kMeasures.size(), 0.0);
        std::vector<std::int64_t> counts(kMeasures.size(), 0);
        for (const StepMetrics& step : store.stepsAfter(run.id)) {
            nlohmann::json extras = nlohmann::json::parse(step.extrasJson, nullptr, /*allow_exceptions=*/false);
            for (std::size_t m = 0; m < kMeasures.size(); ++m) {
                const std::string& measure = kMeasures[m].second;
                std::optional<double> value;
                if (measure == "k1") {
                    value = step.k1;
                } else if (measure == "k3") {
                    value = step.k3;
                } else if (extras.is_object()) {
                    if (const auto it = extras.find(measure); it != extras.end() && it->is_number()) {
                        value = it->get<double>();
                    }
                }
                if (value && std::isfinite(*value)) {
                    sums[m] += *value;
                    ++counts[m];
                }
            }
        }
        for (std::size_t m = 0; m < kMeasures.size(); ++m) {
            const auto found = record.find(kMeasures[m].second);
            if (counts[m] > 0 && found != record.end() && found->is_object()) {
                entry.values.push_back({kMeasures[m].first, found->value("key", std::string()),
                    sums[m] / static_cast<double>(counts[m]), counts[m]});
            }
        }
        if (!entry.values.empty()) {
            result.push_back(std::move(entry));
        }
    }
    return result;
}

} // namespace mismatch::store

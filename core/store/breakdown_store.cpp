#include "core/store/breakdown_store.h"

#include "core/common/error.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <cmath>

namespace mismatch::store {

namespace {

void requireFinite(const RunStore& store, const std::string& what, const std::optional<double>& value)
{
    if (value && !std::isfinite(*value)) {
        throw StoreError(store.path(), what + " is not finite; nothing was written");
    }
}

const char* kColumns = "SELECT id, run_id, candidate, model, configuration_json, sources_json, total, total_ci_low, "
                       "total_ci_high, bf16_unit, unit_ci_low, unit_ci_high, tokens, shapley, seconds, created_at "
                       "FROM breakdowns ";

} // namespace

std::vector<BreakdownPart> BreakdownRecord::partsOf(const std::string& method) const
{
    std::vector<BreakdownPart> result;
    for (const BreakdownPart& part : parts) {
        if (part.method == method) {
            result.push_back(part);
        }
    }
    return result;
}

const BreakdownSubset* BreakdownRecord::subsetOf(const std::string& subset) const
{
    for (const BreakdownSubset& s : subsets) {
        if (s.subset == subset) {
            return &s;
        }
    }
    return nullptr;
}

std::vector<std::int64_t> addBreakdowns(RunStore& store, const std::vector<BreakdownRecord>& records)
{
    for (const BreakdownRecord& record : records) {
        const std::string what = "breakdown of '" + record.candidate + "'";
        for (const auto& value : {std::optional<double>(record.total), record.totalCiLow, record.totalCiHigh,
                 std::optional<double>(record.bf16Unit), record.unitCiLow, record.unitCiHigh, record.seconds}) {
            requireFinite(store, what + " value", value);
        }
        for (const BreakdownPart& part : record.parts) {
            if (part.method != "add_one_in" && part.method != "leave_one_out" && part.method != "shapley") {
                throw StoreError(store.path(), what + ": unknown method '" + part.method + "'; nothing was written");
            }
            for (const auto& value : {std::optional<double>(part.value), part.ciLow, part.ciHigh}) {
                requireFinite(store, what + " part " + part.method + "/" + part.source, value);
            }
        }
        for (const BreakdownSubset& subset : record.subsets) {
            for (const auto& value :
                {std::optional<double>(subset.mismatch), subset.ciLow, subset.ciHigh, subset.k1, subset.k3}) {
                requireFinite(store, what + " subset '" + subset.subset + "'", value);
            }
        }
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    std::vector<std::int64_t> ids;
    Statement insert(db,
        "INSERT INTO breakdowns (run_id, candidate, model, configuration_json, sources_json, total, total_ci_low, "
        "total_ci_high, bf16_unit, unit_ci_low, unit_ci_high, tokens, shapley, seconds) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    Statement partInsert(db,
        "INSERT INTO breakdown_parts (breakdown_id, method, source, value, ci_low, ci_high) VALUES (?, ?, ?, ?, ?, ?)");
    Statement subsetInsert(db,
        "INSERT INTO breakdown_subsets (breakdown_id, subset, mismatch, ci_low, ci_high, k1, k3, tokens, "
        "estimators_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const BreakdownRecord& record : records) {
        if (record.runId) {
            Statement run(db, "SELECT 1 FROM runs WHERE id = ?");
            run.bind(1, *record.runId);
            if (!run.step()) {
                throw StoreError(
                    store.path(), "there is no run " + std::to_string(*record.runId) + "; nothing was written");
            }
        }
        insert.reset();
        insert.bind(1, record.runId).bind(2, record.candidate).bind(3, record.model);
        insert.bind(4, record.configurationJson).bind(5, nlohmann::json(record.sources).dump());
        insert.bind(6, record.total).bind(7, record.totalCiLow).bind(8, record.totalCiHigh);
        insert.bind(9, record.bf16Unit).bind(10, record.unitCiLow).bind(11, record.unitCiHigh);
        insert.bind(12, record.tokens).bind(13, record.shapley ? 1 : 0).bind(14, record.seconds);
        insert.run();
        const std::int64_t id = sqlite3_last_insert_rowid(db);
        ids.push_back(id);
        for (const BreakdownPart& part : record.parts) {
            partInsert.reset();
            partInsert.bind(1, id).bind(2, part.method).bind(3, part.source).bind(4, part.value);
            partInsert.bind(5, part.ciLow).bind(6, part.ciHigh);
            partInsert.run();
        }
        for (const BreakdownSubset& subset : record.subsets) {
            subsetInsert.reset();
            subsetInsert.bind(1, id).bind(2, subset.subset).bind(3, subset.mismatch).bind(4, subset.ciLow);
            subsetInsert.bind(5, subset.ciHigh).bind(6, subset.k1).bind(7, subset.k3).bind(8, subset.tokens);
            subsetInsert.bind(9, subset.estimatorsJson);
            subsetInsert.run();
        }
    }
    transaction.commit();
    return ids;
}

std::vector<BreakdownRecord> breakdowns(const RunStore& store, std::optional<std::int64_t> runId)
{
    Statement query(store.handle(), (std::string(kColumns) + (runId ? "WHERE run_id = ? " : "") + "ORDER BY id").c_str());
    if (runId) {
        query.bind(1, *runId);
    }
    std::vector<BreakdownRecord> result;
    while (query.step()) {
        BreakdownRecord r;
        r.id = query.int64(0);
        r.runId = query.optionalInt64(1);
        r.candidate = query.text(2);
        r.model = query.text(3);
        r.configurationJson = query.text(4);
        try {
            r.sources = nlohmann::json::parse(query.text(5)).get<std::vector<std::string>>();
        } catch (const std::exception& error) {
            throw StoreError(store.path(),
                "breakdowns.sources_json of breakdown " + std::to_string(r.id) + " is not a list of names: "
                    + error.what());
        }
        r.total = query.real(6);
        r.totalCiLow = query.optionalReal(7);
        r.totalCiHigh = query.optionalReal(8);
        r.bf16Unit = query.real(9);
        r.unitCiLow = query.optionalReal(10);
        r.unitCiHigh = query.optionalReal(11);
        r.tokens = query.int64(12);
        r.shapley = query.int64(13) != 0;
        r.seconds = query.optionalReal(14);
        r.createdAt = query.text(15);
        result.push_back(std::move(r));
    }
    for (BreakdownRecord& r : result) {
        Statement parts(store.handle(),
            "SELECT method, source, value, ci_low, ci_high FROM breakdown_parts WHERE breakdown_id = ? ORDER BY rowid");
        parts.bind(1, r.id);
        while (parts.step()) {
            r.parts.push_back(
                {parts.text(0), parts.text(1), parts.real(2), parts.optionalReal(3), parts.optionalReal(4)});
        }
        Statement subsets(store.handle(),
            "SELECT subset, mismatch, ci_low, ci_high, k1, k3, tokens, estimators_json FROM breakdown_subsets "
            "WHERE breakdown_id = ? ORDER BY rowid");
        subsets.bind(1, r.id);
        while (subsets.step()) {
            r.subsets.push_back({subsets.text(0), subsets.real(1), subsets.optionalReal(2), subsets.optionalReal(3),
                subsets.optionalReal(4), subsets.optionalReal(5), subsets.int64(6), subsets.text(7)});
        }
    }
    return result;
}

} // namespace mismatch::store

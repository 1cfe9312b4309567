#pragma once
// Mismatch breakdowns by source (core/analysis/breakdown.h) in the workspace store: one record per candidate of a
// `breakdown` run with its parts (per method) and the measured subsets of its sources. A run's records are written
// in one transaction at its end, so a cancelled or failed breakdown stores none.
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::store {

// One part of a breakdown: what `source` adds by `method` ("add_one_in", "leave_one_out", "shapley"), nats per
// token, with its paired bootstrap interval; source "interaction" is the remainder (excess over the BF16 unit minus
// the sum of the method's parts).
struct BreakdownPart {
    std::string method;
    std::string source;
    double value = 0.0;
    std::optional<double> ciLow;
    std::optional<double> ciHigh;
};

// The measured mismatch of the candidate with only the sources of `subset` switched on ("+"-joined source names in
// the candidate's source order; "" is the plain BF16 engine, the BF16 unit).
struct BreakdownSubset {
    std::string subset;
    double mismatch = 0.0;
    std::optional<double> ciLow;
    std::optional<double> ciHigh;
    std::optional<double> k1;
    std::optional<double> k3;
    std::int64_t tokens = 0;
    std::string estimatorsJson = "{}"; // metrics::EstimatorComparison (estimators side by side with the full KL)
};

struct BreakdownRecord {
    std::int64_t id = 0; // filled on write and read
    std::optional<std::int64_t> runId;
    std::string candidate;
    std::string model;
    std::string configurationJson = "{}"; // the candidate (recipe, staleness, noise), engine checkpoint, settings
    std::vector<std::string> sources; // the sources the configuration has, in breakdown order
    double total = 0.0; // the whole configuration's mismatch, nats per token
    std::optional<double> totalCiLow;
    std::optional<double> totalCiHigh;
    double bf16Unit = 0.0;
    std::optional<double> unitCiLow;
    std::optional<double> unitCiHigh;
    std::int64_t tokens = 0; // response tokens of the whole configuration's measurement
    bool shapley = false; // whether Shapley parts were computed (every subset measured)
    std::optional<double> seconds;
    std::string createdAt;
    std::vector<BreakdownPart> parts;
    std::vector<BreakdownSubset> subsets;

    // The parts of one method in the order stored (sources, then "interaction" when stored).
    std::vector<BreakdownPart> partsOf(const std::string& method) const;
    const BreakdownSubset* subsetOf(const std::string& subset) const;
};

// Stores every record (with its parts and subsets) in one transaction; returns their ids. StoreError for an
// unknown run, a value that is not finite, an unknown method or a duplicate part or subset (nothing is written).
std::vector<std::int64_t> addBreakdowns(RunStore& store, const std::vector<BreakdownRecord>& records);
// Every record, or a run's, in insertion order, with parts and subsets.
std::vector<BreakdownRecord> breakdowns(const RunStore& store, std::optional<std::int64_t> runId = {});

} // namespace mismatch::store

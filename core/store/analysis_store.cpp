#include "core/store/analysis_store.h"

#include "core/common/error.h"
#include "core/common/version.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace mismatch::store {

namespace {

void requireFinite(const RunStore& store, const std::string& what, double value)
{
    if (!std::isfinite(value)) {
        throw StoreError(store.path(), what + " is not finite");
    }
}

void requireFinite(const RunStore& store, const std::string& what, const std::optional<double>& value)
{
    if (value) {
        requireFinite(store, what, *value);
    }
}

void requireRow(const RunStore& store, const char* sql, std::int64_t id, const std::string& what)
{
    Statement query(store.handle(), sql);
    query.bind(1, id);
    if (!query.step()) {
        throw StoreError(store.path(), "there is no " + what + " " + std::to_string(id) + "; nothing was written");
    }
}

void requireRun(const RunStore& store, const std::optional<std::int64_t>& runId)
{
    if (runId) {
        requireRow(store, "SELECT 1 FROM runs WHERE id = ?", *runId, "run");
    }
}

std::string stepList(const std::vector<CalibrationBracket>& brackets)
{
    std::string text;
    for (const auto& bracket : brackets) {
        text += (text.empty() ? "" : ", ") + std::to_string(bracket.step);
    }
    return text.empty() ? "none" : text;
}

template <typename T> std::string toJsonText(const std::vector<T>& values)
{
    return nlohmann::json(values).dump();
}

template <typename T> std::vector<T> fromJsonText(const RunStore& store, const std::string& text, const char* what)
{
    try {
        return nlohmann::json::parse(text).get<std::vector<T>>();
    } catch (const std::exception& error) {
        throw StoreError(store.path(), std::string(what) + " is not a JSON list: " + error.what());
    }
}

// [{"mu": log mu(y), "pi": log pi(y), "h_mu", "h_pi", "top_mu": [[id, p], ...], "top_pi": [...]}, ...]; a
// log-probability of minus infinity (a token the engine's top-k/top-p gives probability 0) is written as null.
std::string detailsToJsonText(const std::vector<TokenDetail>& details)
{
    const auto logProbability = [](double value) {
        return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json();
    };
    nlohmann::json list = nlohmann::json::array();
    for (const TokenDetail& d : details) {
        list.push_back({{"mu", logProbability(d.logMu)}, {"pi", logProbability(d.logPi)}, {"h_mu", d.entropyMu}, {"h_pi", d.entropyPi},
            {"top_mu", d.topMu}, {"top_pi", d.topPi}});
    }
    return list.dump();
}

std::vector<TokenDetail> detailsFromJsonText(const RunStore& store, const std::string& text, const char* what)
{
    try {
        std::vector<TokenDetail> details;
        for (const nlohmann::json& item : nlohmann::json::parse(text)) {
            TokenDetail d;
            const auto logProbability = [](const nlohmann::json& value) {
                return value.is_null() ? -std::numeric_limits<double>::infinity() : value.get<double>();
            };
            d.logMu = logProbability(item.at("mu"));
            d.logPi = logProbability(item.at("pi"));
            d.entropyMu = item.at("h_mu").get<double>();
            d.entropyPi = item.at("h_pi").get<double>();
            d.topMu = item.at("top_mu").get<std::vector<std::pair<std::int64_t, double>>>();
            d.topPi = item.at("top_pi").get<std::vector<std::pair<std::int64_t, double>>>();
            details.push_back(std::move(d));
        }
        return details;
    } catch (const std::exception& error) {
        throw StoreError(store.path(), std::string(what) + " is not a list of token details: " + error.what());
    }
}

} // namespace

// ---- layer sensitivity --------------------------------------------------------------------------------------

std::int64_t addSensitivityScan(RunStore& store, const SensitivityScanInfo& scan)
{
    if (scan.format.empty()) {
        throw StoreError(store.path(), "sensitivity scan without a format; nothing was written");
    }
    requireFinite(store, "sensitivity scan BF16 unit", scan.bf16Unit);
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRun(store, scan.runId);
    if (scan.modelId) {
        requireRow(store, "SELECT 1 FROM models WHERE id = ?", *scan.modelId, "model");
    }
    Statement insert(
        db, "INSERT INTO sensitivity_scans (run_id, model_id, format, bf16_unit, config_json) VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, scan.runId).bind(2, scan.modelId).bind(3, scan.format).bind(4, scan.bf16Unit);
    insert.bind(5, scan.configJson.empty() ? std::string("{}") : scan.configJson);
    insert.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db);
    transaction.commit();
    return id;
}

void addSensitivityCell(RunStore& store, std::int64_t scanId, const SensitivityCell& cell)
{
    const std::string what = "sensitivity scan " + std::to_string(scanId) + " cell (layer " + std::to_string(cell.layer)
        + ", " + cell.moduleGroup + ")";
    if (cell.moduleGroup.empty()) {
        throw StoreError(store.path(), what + " has no module group; nothing was written");
    }
    requireFinite(store, what + " mismatch", cell.mismatch);
    requireFinite(store, what + " added mismatch", cell.addedMismatch);
    requireFinite(store, what + " interval", cell.ciLow);
    requireFinite(store, what + " interval", cell.ciHigh);
    requireFinite(store, what + " interval", cell.mismatchCiLow);
    requireFinite(store, what + " interval", cell.mismatchCiHigh);
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRow(store, "SELECT 1 FROM sensitivity_scans WHERE id = ?", scanId, "sensitivity scan");
    {
        Statement existing(db, "SELECT 1 FROM sensitivity_cells WHERE scan_id = ? AND layer = ? AND module_group = ?");
        existing.bind(1, scanId).bind(2, cell.layer).bind(3, cell.moduleGroup);
        if (existing.step()) {
            throw StoreError(store.path(), what + " is already stored; nothing was written");
        }
    }
    Statement insert(db,
        "INSERT INTO sensitivity_cells (scan_id, layer, module_group, mismatch, added_mismatch, ci_low, ci_high, "
        "mismatch_ci_low, mismatch_ci_high, tokens, seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, scanId).bind(2, cell.layer).bind(3, cell.moduleGroup).bind(4, cell.mismatch);
    insert.bind(5, cell.addedMismatch).bind(6, cell.ciLow).bind(7, cell.ciHigh).bind(8, cell.mismatchCiLow);
    insert.bind(9, cell.mismatchCiHigh).bind(10, cell.tokens).bind(11, cell.seconds);
    insert.run();
    transaction.commit();
}

namespace {

const char* kScanColumns = "SELECT s.id, s.run_id, s.model_id, s.format, s.bf16_unit, s.config_json, s.created_at, "
                           "coalesce(r.status, 'finished'), "
                           "(SELECT count(*) FROM sensitivity_cells c WHERE c.scan_id = s.id) "
                           "FROM sensitivity_scans s LEFT JOIN runs r ON r.id = s.run_id ";

SensitivityScanInfo readScan(const Statement& row)
{
    SensitivityScanInfo info;
    info.id = row.int64(0);
    info.runId = row.optionalInt64(1);
    info.modelId = row.optionalInt64(2);
    info.format = row.text(3);
    info.bf16Unit = row.optionalReal(4);
    info.configJson = row.text(5);
    info.createdAt = row.text(6);
    info.status = row.text(7);
    info.cellCount = row.int64(8);
    return info;
}

} // namespace

std::vector<SensitivityScanInfo> sensitivityScans(const RunStore& store)
{
    Statement query(store.handle(), (std::string(kScanColumns) + "ORDER BY s.id").c_str());
    std::vector<SensitivityScanInfo> scans;
    while (query.step()) {
        scans.push_back(readScan(query));
    }
    return scans;
}

std::optional<SensitivityScan> sensitivityScan(const RunStore& store, std::int64_t scanId)
{
    Statement query(store.handle(), (std::string(kScanColumns) + "WHERE s.id = ?").c_str());
    query.bind(1, scanId);
    if (!query.step()) {
        return std::nullopt;
    }
    SensitivityScan scan;
    scan.info = readScan(query);
    Statement cells(store.handle(),
        "SELECT layer, module_group, mismatch, added_mismatch, ci_low, ci_high, mismatch_ci_low, mismatch_ci_high, "
        "tokens, seconds FROM sensitivity_cells WHERE scan_id = ? ORDER BY layer, rowid");
    cells.bind(1, scanId);
    while (cells.step()) {
        SensitivityCell cell;
        cell.layer = cells.int64(0);
        cell.moduleGroup = cells.text(1);
        cell.mismatch = cells.real(2);
        cell.addedMismatch = cells.real(3);
        cell.ciLow = cells.optionalReal(4);
        cell.ciHigh = cells.optionalReal(5);
        cell.mismatchCiLow = cells.optionalReal(6);
        cell.mismatchCiHigh = cells.optionalReal(7);
        cell.tokens = cells.optionalInt64(8);
        cell.seconds = cells.optionalReal(9);
        scan.cells.push_back(std::move(cell));
    }
    return scan;
}

// ---- calibrations -------------------------------------------------------------------------------------------

BracketChoice chooseBracket(const Calibration& calibration, std::int64_t step,
    std::optional<std::int64_t> explicitStep, const std::string& subject)
{
    BracketChoice choice;
    if (explicitStep) {
        choice.step = explicitStep;
        if (*explicitStep != step) {
            choice.note = "the bracket of step " + std::to_string(*explicitStep) + " was chosen explicitly for "
                + subject + " " + std::to_string(step);
        }
        return choice;
    }
    for (const auto& bracket : calibration.brackets) {
        choice.steps += (choice.steps.empty() ? "" : ", ") + std::to_string(bracket.step);
        if (bracket.step <= step && (!choice.step || bracket.step > *choice.step)) {
            choice.step = bracket.step;
        }
    }
    if (choice.step && *choice.step != step) {
        choice.note = "no bracket at step " + std::to_string(step) + ": the nearest earlier one (step "
            + std::to_string(*choice.step) + ") is used";
    }
    return choice;
}

CalibrationBracket bracketFromPoints(const std::vector<CalibrationPoint>& points, std::int64_t step, double margin)
{
    if (!(margin >= 0.0 && margin < 1.0)) {
        throw InputError("calibration", "margin", "must be in [0, 1), got " + std::to_string(margin));
    }
    CalibrationBracket bracket;
    bracket.step = step;
    for (const CalibrationPoint& point : points) {
        if (point.step == step && point.failed()) {
            bracket.smallestFailing
                = bracket.smallestFailing ? std::min(*bracket.smallestFailing, point.mismatch) : point.mismatch;
        }
    }
    // Passing points above the smallest failing one (a non-monotone sweep) do not widen the budget: the lower end
    // is the largest mismatch that passed below every failure.
    for (const CalibrationPoint& point : points) {
        if (point.step != step || !point.passed()
            || (bracket.smallestFailing && point.mismatch >= *bracket.smallestFailing)) {
            continue;
        }
        bracket.largestPassing = bracket.largestPassing ? std::max(*bracket.largestPassing, point.mismatch) : point.mismatch;
    }
    if (bracket.largestPassing) {
        bracket.threshold = *bracket.largestPassing * (1.0 - margin);
    }
    return bracket;
}

namespace {

void insertPoints(RunStore& store, std::int64_t calibrationId, const std::vector<CalibrationPoint>& points)
{
    sqlite3* db = store.handle();
    Statement insert(db,
        "INSERT INTO calibration_points (calibration_id, run_id, step, mismatch, quality, relative_change, ci_low, "
        "ci_high, failed, label, replicates, bf16_unit, accuracy, verdict, change_low, change_high, training_mismatch) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (const CalibrationPoint& point : points) {
        const std::string what
            = "calibration point (run " + std::to_string(point.runId) + ", step " + std::to_string(point.step) + ")";
        requireFinite(store, what + " mismatch", point.mismatch);
        requireFinite(store, what + " quality", point.quality);
        requireFinite(store, what + " relative change", point.relativeChange);
        requireFinite(store, what + " interval", point.ciLow);
        requireFinite(store, what + " interval", point.ciHigh);
        requireFinite(store, what + " BF16 unit", point.bf16Unit);
        requireFinite(store, what + " accuracy", point.accuracy);
        requireFinite(store, what + " interval of the relative change", point.changeLow);
        requireFinite(store, what + " interval of the relative change", point.changeHigh);
        requireFinite(store, what + " training mismatch", point.trainingMismatch);
        if (point.verdict != "pass" && point.verdict != "fail" && point.verdict != "undecided") {
            throw StoreError(store.path(), what + " has the verdict '" + point.verdict
                + "' (pass, fail or undecided); nothing was written");
        }
        if (point.replicates < 1) {
            throw StoreError(store.path(), what + " has " + std::to_string(point.replicates)
                + " replicates (at least 1); nothing was written");
        }
        requireRow(store, "SELECT 1 FROM runs WHERE id = ?", point.runId, "run");
        {
            Statement existing(
                db, "SELECT 1 FROM calibration_points WHERE calibration_id = ? AND run_id = ? AND step = ?");
            existing.bind(1, calibrationId).bind(2, point.runId).bind(3, point.step);
            if (existing.step()) {
                throw StoreError(store.path(), what + " is given twice; nothing was written");
            }
        }
        insert.reset();
        insert.bind(1, calibrationId).bind(2, point.runId).bind(3, point.step).bind(4, point.mismatch);
        insert.bind(5, point.quality).bind(6, point.relativeChange).bind(7, point.ciLow).bind(8, point.ciHigh);
        insert.bind(9, point.failed() ? 1 : 0).bind(10, point.label).bind(11, point.replicates);
        insert.bind(12, point.bf16Unit).bind(13, point.accuracy).bind(14, point.verdict);
        insert.bind(15, point.changeLow).bind(16, point.changeHigh).bind(17, point.trainingMismatch);
        insert.run();
    }
}

void upsertBracket(RunStore& store, std::int64_t calibrationId, const CalibrationBracket& bracket)
{
    const std::string what = "calibration bracket at step " + std::to_string(bracket.step);
    requireFinite(store, what + " largest passing", bracket.largestPassing);
    requireFinite(store, what + " smallest failing", bracket.smallestFailing);
    requireFinite(store, what + " threshold", bracket.threshold);
    Statement insert(store.handle(),
        "INSERT OR REPLACE INTO calibration_brackets (calibration_id, step, largest_passing, smallest_failing, "
        "threshold) VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, calibrationId).bind(2, bracket.step).bind(3, bracket.largestPassing);
    insert.bind(4, bracket.smallestFailing).bind(5, bracket.threshold);
    insert.run();
}

} // namespace

std::int64_t addCalibration(RunStore& store, const CalibrationInfo& calibration,
    const std::vector<CalibrationPoint>& points, const std::vector<CalibrationBracket>& brackets)
{
    if (calibration.name.empty() || calibration.student.empty()) {
        throw StoreError(store.path(), "a calibration needs a name and a student; nothing was written");
    }
    std::set<std::int64_t> steps;
    for (const auto& bracket : brackets) {
        if (!steps.insert(bracket.step).second) {
            throw StoreError(store.path(),
                "calibration '" + calibration.name + "' has two brackets at step " + std::to_string(bracket.step)
                    + "; nothing was written");
        }
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRun(store, calibration.runId);
    Statement insert(db, "INSERT INTO calibrations (run_id, name, student, config_json) VALUES (?, ?, ?, ?)");
    insert.bind(1, calibration.runId).bind(2, calibration.name).bind(3, calibration.student);
    insert.bind(4, calibration.configJson.empty() ? std::string("{}") : calibration.configJson);
    insert.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db);
    insertPoints(store, id, points);
    for (const auto& bracket : brackets) {
        upsertBracket(store, id, bracket);
    }
    transaction.commit();
    return id;
}

void addCalibrationPoints(RunStore& store, std::int64_t calibrationId, const std::vector<CalibrationPoint>& points)
{
    Transaction transaction(store.handle());
    requireRow(store, "SELECT 1 FROM calibrations WHERE id = ?", calibrationId, "calibration");
    insertPoints(store, calibrationId, points);
    transaction.commit();
}

void setCalibrationBracket(RunStore& store, std::int64_t calibrationId, const CalibrationBracket& bracket)
{
    Transaction transaction(store.handle());
    requireRow(store, "SELECT 1 FROM calibrations WHERE id = ?", calibrationId, "calibration");
    upsertBracket(store, calibrationId, bracket);
    transaction.commit();
}

namespace {

CalibrationInfo readCalibration(const Statement& row)
{
    CalibrationInfo info;
    info.id = row.int64(0);
    info.runId = row.optionalInt64(1);
    info.name = row.text(2);
    info.student = row.text(3);
    info.configJson = row.text(4);
    info.createdAt = row.text(5);
    return info;
}

const char* kCalibrationColumns = "SELECT id, run_id, name, student, config_json, created_at FROM calibrations ";

} // namespace

std::vector<CalibrationInfo> calibrations(const RunStore& store)
{
    Statement query(store.handle(), (std::string(kCalibrationColumns) + "ORDER BY id").c_str());
    std::vector<CalibrationInfo> result;
    while (query.step()) {
        result.push_back(readCalibration(query));
    }
    return result;
}

std::optional<Calibration> calibration(const RunStore& store, std::int64_t calibrationId)
{
    Statement query(store.handle(), (std::string(kCalibrationColumns) + "WHERE id = ?").c_str());
    query.bind(1, calibrationId);
    if (!query.step()) {
        return std::nullopt;
    }
    Calibration result;
    result.info = readCalibration(query);
    Statement points(store.handle(),
        "SELECT run_id, step, mismatch, quality, relative_change, ci_low, ci_high, failed, label, replicates, "
        "bf16_unit, accuracy, verdict, change_low, change_high, training_mismatch FROM calibration_points "
        "WHERE calibration_id = ? "
        "ORDER BY step, mismatch, run_id");
    points.bind(1, calibrationId);
    while (points.step()) {
        CalibrationPoint point;
        point.runId = points.int64(0);
        point.step = points.int64(1);
        point.mismatch = points.real(2);
        point.quality = points.real(3);
        point.relativeChange = points.optionalReal(4);
        point.ciLow = points.optionalReal(5);
        point.ciHigh = points.optionalReal(6);
        // NULL (stored before schema 9): the old rule's pass or fail.
        point.verdict = points.isNull(12) ? (points.int64(7) != 0 ? "fail" : "pass") : points.text(12);
        point.changeLow = points.optionalReal(13);
        point.changeHigh = points.optionalReal(14);
        point.trainingMismatch = points.optionalReal(15); // NULL before schema 10
        point.label = points.text(8); // NULL (stored before schema 4) reads as ""
        point.replicates = points.optionalInt64(9).value_or(1);
        point.bf16Unit = points.optionalReal(10);
        point.accuracy = points.optionalReal(11);
        result.points.push_back(point);
    }
    Statement brackets(store.handle(),
        "SELECT step, largest_passing, smallest_failing, threshold FROM calibration_brackets WHERE calibration_id = ? "
        "ORDER BY step");
    brackets.bind(1, calibrationId);
    while (brackets.step()) {
        result.brackets.push_back(
            {brackets.int64(0), brackets.optionalReal(1), brackets.optionalReal(2), brackets.optionalReal(3)});
    }
    return result;
}

double admissionThreshold(const RunStore& store, std::int64_t calibrationId, std::optional<std::int64_t> step)
{
    const auto found = calibration(store, calibrationId);
    if (!found) {
        throw StoreError(store.path(), "has no calibration with id " + std::to_string(calibrationId));
    }
    const std::string label = "calibration " + std::to_string(calibrationId) + " ('" + found->info.name + "')";
    const CalibrationBracket* bracket = nullptr;
    if (step) {
        for (const auto& candidate : found->brackets) {
            if (candidate.step == *step) {
                bracket = &candidate;
            }
        }
        if (!bracket) {
            throw StoreError(store.path(),
                label + " has no budget bracket at step " + std::to_string(*step)
                    + " (its steps: " + stepList(found->brackets) + ")");
        }
    } else {
        if (found->brackets.size() != 1) {
            throw StoreError(store.path(),
                label + " has brackets at steps " + stepList(found->brackets) + ": choose one with --step");
        }
        bracket = &found->brackets.front();
    }
    if (bracket->threshold) {
        return *bracket->threshold;
    }
    if (bracket->largestPassing) {
        return *bracket->largestPassing;
    }
    throw StoreError(store.path(),
        label + " has no passing run at step " + std::to_string(bracket->step)
            + ", so it gives no admission threshold (smallest failing mismatch "
            + (bracket->smallestFailing ? std::to_string(*bracket->smallestFailing) : std::string("unknown")) + ")");
}

// ---- admission decisions ------------------------------------------------------------------------------------

namespace {

// A KL value per token, and a detail per token or none.
bool lengthsAgree(const StoredGeneration& generation)
{
    return generation.kl.size() == generation.tokens.size()
        && (generation.details.empty() || generation.details.size() == generation.tokens.size());
}

// The generation tables' common columns (generation_index, prompt_id, prompt_tokens_json, tokens_json, kl_json,
// detail_json) bound from `column` on, and the row inserted; StoreError naming `what` when the lengths disagree.
void insertGeneration(
    const RunStore& store, Statement& insert, int column, const StoredGeneration& generation, const std::string& what)
{
    if (!lengthsAgree(generation)) {
        throw StoreError(store.path(),
            what + ": generation " + std::to_string(generation.index) + " has " + std::to_string(generation.tokens.size())
                + " tokens but " + std::to_string(generation.kl.size()) + " KL values and "
                + std::to_string(generation.details.size()) + " details; nothing was written");
    }
    insert.bind(column, generation.index).bind(column + 1, generation.promptId);
    insert.bind(column + 2, toJsonText(generation.promptTokens)).bind(column + 3, toJsonText(generation.tokens));
    insert.bind(column + 4, toJsonText(generation.kl)).bind(column + 5, detailsToJsonText(generation.details));
    insert.run();
}

// The common columns, selected in that order as the query's first six, of every row of `query`; `owner` names the
// rows' owner ("decision 3") in errors.
std::vector<StoredGeneration> readGenerations(
    const RunStore& store, Statement& query, const std::string& table, const std::string& owner)
{
    const std::string prefix = table + ".";
    std::vector<StoredGeneration> result;
    while (query.step()) {
        StoredGeneration generation;
        generation.index = query.int64(0);
        generation.promptId = query.text(1);
        generation.promptTokens = fromJsonText<std::int64_t>(store, query.text(2), (prefix + "prompt_tokens_json").c_str());
        generation.tokens = fromJsonText<std::int64_t>(store, query.text(3), (prefix + "tokens_json").c_str());
        generation.kl = fromJsonText<double>(store, query.text(4), (prefix + "kl_json").c_str());
        generation.details = detailsFromJsonText(store, query.text(5), (prefix + "detail_json").c_str());
        if (!lengthsAgree(generation)) {
            throw StoreError(store.path(),
                table + " row " + std::to_string(generation.index) + " of " + owner
                    + ": the tokens, KL values and details differ in length");
        }
        result.push_back(std::move(generation));
    }
    return result;
}

} // namespace

std::int64_t addAdmissionDecision(RunStore& store, const AdmissionDecision& decision)
{
    const std::string what = "admission decision for checkpoint '" + decision.checkpoint + "'";
    if (decision.decision != "admit" && decision.decision != "reject" && decision.decision != "borderline") {
        throw StoreError(store.path(),
            what + ": decision '" + decision.decision + "' is not admit, reject or borderline; nothing was written");
    }
    requireFinite(store, what + " mismatch", decision.mismatch);
    requireFinite(store, what + " interval", decision.ciLow);
    requireFinite(store, what + " interval", decision.ciHigh);
    requireFinite(store, what + " threshold", decision.threshold);
    requireFinite(store, what + " time", decision.seconds);
    if (decision.ciLow > decision.ciHigh) {
        throw StoreError(store.path(), what + ": interval low > high; nothing was written");
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRun(store, decision.runId);
    if (decision.calibrationId) {
        requireRow(store, "SELECT 1 FROM calibrations WHERE id = ?", *decision.calibrationId, "calibration");
    }
    Statement insert(db,
        "INSERT INTO admission_decisions (run_id, calibration_id, candidate_json, checkpoint, mismatch, ci_low, "
        "ci_high, threshold, decision, seconds, tool_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, decision.runId).bind(2, decision.calibrationId).bind(3, decision.candidateJson);
    insert.bind(4, decision.checkpoint).bind(5, decision.mismatch).bind(6, decision.ciLow).bind(7, decision.ciHigh);
    insert.bind(8, decision.threshold).bind(9, decision.decision).bind(10, decision.seconds);
    insert.bind(11, decision.toolVersion.empty() ? std::string(kVersion) : decision.toolVersion);
    insert.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db);
    Statement generationInsert(db,
        "INSERT INTO admission_generations (decision_id, generation_index, prompt_id, prompt_tokens_json, tokens_json, "
        "kl_json, detail_json) VALUES (?, ?, ?, ?, ?, ?, ?)");
    for (const StoredGeneration& generation : decision.generations) {
        generationInsert.reset();
        generationInsert.bind(1, id);
        insertGeneration(store, generationInsert, 2, generation, what);
    }
    transaction.commit();
    return id;
}

std::vector<StoredGeneration> admissionGenerations(const RunStore& store, std::int64_t decisionId)
{
    Statement query(store.handle(),
        "SELECT generation_index, prompt_id, prompt_tokens_json, tokens_json, kl_json, detail_json FROM "
        "admission_generations WHERE decision_id = ? ORDER BY generation_index");
    query.bind(1, decisionId);
    return readGenerations(store, query, "admission_generations", "decision " + std::to_string(decisionId));
}

std::int64_t admissionGenerationCount(const RunStore& store, std::int64_t decisionId)
{
    Statement query(store.handle(), "SELECT COUNT(*) FROM admission_generations WHERE decision_id = ?");
    query.bind(1, decisionId);
    return query.step() ? query.int64(0) : 0;
}

void addStepGenerations(
    RunStore& store, std::int64_t runId, std::int64_t step, const std::vector<StoredGeneration>& generations)
{
    const std::string what = "step " + std::to_string(step) + " of run " + std::to_string(runId);
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRun(store, runId);
    Statement insert(db,
        "INSERT INTO step_generations (run_id, step, generation_index, prompt_id, prompt_tokens_json, tokens_json, "
        "kl_json, detail_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
    for (const StoredGeneration& generation : generations) {
        insert.reset();
        insert.bind(1, runId).bind(2, step);
        insertGeneration(store, insert, 3, generation, what);
    }
    transaction.commit();
}

std::vector<StoredGeneration> stepGenerations(const RunStore& store, std::int64_t runId, std::int64_t step)
{
    Statement query(store.handle(),
        "SELECT generation_index, prompt_id, prompt_tokens_json, tokens_json, kl_json, detail_json FROM "
        "step_generations WHERE run_id = ? AND step = ? ORDER BY generation_index");
    query.bind(1, runId).bind(2, step);
    return readGenerations(
        store, query, "step_generations", "step " + std::to_string(step) + " of run " + std::to_string(runId));
}

std::vector<std::int64_t> stepsWithGenerations(const RunStore& store, std::int64_t runId)
{
    Statement query(store.handle(), "SELECT DISTINCT step FROM step_generations WHERE run_id = ? ORDER BY step");
    query.bind(1, runId);
    std::vector<std::int64_t> steps;
    while (query.step()) {
        steps.push_back(query.int64(0));
    }
    return steps;
}

std::vector<AdmissionDecision> admissionDecisions(const RunStore& store, std::optional<std::int64_t> runId)
{
    std::string sql = "SELECT id, run_id, calibration_id, candidate_json, checkpoint, mismatch, ci_low, ci_high, "
                      "threshold, decision, seconds, tool_version, created_at FROM admission_decisions ";
    sql += runId ? "WHERE run_id = ? ORDER BY id" : "ORDER BY id";
    Statement query(store.handle(), sql.c_str());
    if (runId) {
        query.bind(1, *runId);
    }
    std::vector<AdmissionDecision> result;
    while (query.step()) {
        AdmissionDecision d;
        d.id = query.int64(0);
        d.runId = query.optionalInt64(1);
        d.calibrationId = query.optionalInt64(2);
        d.candidateJson = query.text(3);
        d.checkpoint = query.text(4);
        d.mismatch = query.real(5);
        d.ciLow = query.real(6);
        d.ciHigh = query.real(7);
        d.threshold = query.real(8);
        d.decision = query.text(9);
        d.seconds = query.real(10);
        d.toolVersion = query.text(11);
        d.createdAt = query.text(12);
        result.push_back(std::move(d));
    }
    return result;
}

// ---- prefix shift -------------------------------------------------------------------------------------------

std::int64_t addPrefixShift(RunStore& store, const PrefixShiftRecord& record, const std::vector<PrefixShiftPair>& pairs)
{
    const std::string what = "prefix-shift analysis of '" + record.model + "'";
    for (const double value : {record.total, record.perToken, record.prefixShift, record.bf16Unit}) {
        requireFinite(store, what + " value", value);
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const PrefixShiftPair& pair = pairs[i];
        if (pair.candidateKl.size() != pair.candidateTokens.size()
            || pair.referenceKl.size() != pair.referenceTokens.size()
            || (!pair.candidateDetail.empty() && pair.candidateDetail.size() != pair.candidateTokens.size())
            || (!pair.referenceDetail.empty() && pair.referenceDetail.size() != pair.referenceTokens.size())) {
            throw StoreError(store.path(),
                what + ": pair " + std::to_string(i) + " has a KL list whose length differs from its tokens");
        }
    }
    sqlite3* db = store.handle();
    Transaction transaction(db);
    requireRun(store, record.runId);
    Statement insert(db,
        "INSERT INTO prefix_shift_analyses (run_id, model, configuration_json, total, per_token, prefix_shift, "
        "bf16_unit, total_ci_low, total_ci_high, per_token_ci_low, per_token_ci_high, pairs, diverged, details_json) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    insert.bind(1, record.runId).bind(2, record.model).bind(3, record.configurationJson).bind(4, record.total);
    insert.bind(5, record.perToken).bind(6, record.prefixShift).bind(7, record.bf16Unit).bind(8, record.totalCiLow);
    insert.bind(9, record.totalCiHigh).bind(10, record.perTokenCiLow).bind(11, record.perTokenCiHigh);
    insert.bind(12, record.pairs).bind(13, record.diverged).bind(14, record.detailsJson);
    insert.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db);
    Statement pairInsert(db,
        "INSERT INTO prefix_shift_pairs (analysis_id, pair_index, prompt_id, prompt_tokens_json, first_divergence, "
        "candidate_tokens_json, candidate_kl_json, reference_tokens_json, reference_kl_json, candidate_detail_json, "
        "reference_detail_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        const PrefixShiftPair& pair = pairs[i];
        pairInsert.reset();
        pairInsert.bind(1, id).bind(2, static_cast<std::int64_t>(i)).bind(3, pair.promptId);
        pairInsert.bind(4, toJsonText(pair.promptTokens)).bind(5, pair.firstDivergence);
        pairInsert.bind(6, toJsonText(pair.candidateTokens)).bind(7, toJsonText(pair.candidateKl));
        pairInsert.bind(8, toJsonText(pair.referenceTokens)).bind(9, toJsonText(pair.referenceKl));
        for (const auto& [column, details] :
            {std::pair<int, const std::vector<TokenDetail>*>(10, &pair.candidateDetail), {11, &pair.referenceDetail}}) {
            if (details->empty()) {
                pairInsert.bindNull(column);
            } else {
                pairInsert.bind(column, detailsToJsonText(*details));
            }
        }
        pairInsert.run();
    }
    transaction.commit();
    return id;
}

namespace {

const char* kPrefixColumns = "SELECT id, run_id, model, configuration_json, total, per_token, prefix_shift, bf16_unit, "
                             "total_ci_low, total_ci_high, per_token_ci_low, per_token_ci_high, pairs, diverged, "
                             "details_json, created_at FROM prefix_shift_analyses ";

PrefixShiftRecord readPrefixShift(const Statement& row)
{
    PrefixShiftRecord r;
    r.id = row.int64(0);
    r.runId = row.optionalInt64(1);
    r.model = row.text(2);
    r.configurationJson = row.text(3);
    r.total = row.real(4);
    r.perToken = row.real(5);
    r.prefixShift = row.real(6);
    r.bf16Unit = row.real(7);
    r.totalCiLow = row.optionalReal(8);
    r.totalCiHigh = row.optionalReal(9);
    r.perTokenCiLow = row.optionalReal(10);
    r.perTokenCiHigh = row.optionalReal(11);
    r.pairs = row.int64(12);
    r.diverged = row.int64(13);
    r.detailsJson = row.text(14);
    r.createdAt = row.text(15);
    return r;
}

} // namespace

std::vector<PrefixShiftRecord> prefixShifts(const RunStore& store)
{
    Statement query(store.handle(), (std::string(kPrefixColumns) + "ORDER BY id").c_str());
    std::vector<PrefixShiftRecord> result;
    while (query.step()) {
        result.push_back(readPrefixShift(query));
    }
    return result;
}

std::optional<PrefixShiftRecord> prefixShift(const RunStore& store, std::int64_t id)
{
    Statement query(store.handle(), (std::string(kPrefixColumns) + "WHERE id = ?").c_str());
    query.bind(1, id);
    if (!query.step()) {
        return std::nullopt;
    }
    return readPrefixShift(query);
}

std::vector<PrefixShiftPair> prefixShiftPairs(const RunStore& store, std::int64_t id)
{
    Statement query(store.handle(),
        "SELECT prompt_id, prompt_tokens_json, first_divergence, candidate_tokens_json, candidate_kl_json, "
        "reference_tokens_json, reference_kl_json, candidate_detail_json, reference_detail_json FROM prefix_shift_pairs "
        "WHERE analysis_id = ? ORDER BY pair_index");
    query.bind(1, id);
    std::vector<PrefixShiftPair> result;
    while (query.step()) {
        PrefixShiftPair pair;
        pair.promptId = query.text(0);
        pair.promptTokens = fromJsonText<std::int64_t>(store, query.text(1), "prefix_shift_pairs.prompt_tokens_json");
        pair.firstDivergence = query.optionalInt64(2);
        pair.candidateTokens = fromJsonText<std::int64_t>(store, query.text(3), "prefix_shift_pairs.candidate_tokens_json");
        pair.candidateKl = fromJsonText<double>(store, query.text(4), "prefix_shift_pairs.candidate_kl_json");
        pair.referenceTokens = fromJsonText<std::int64_t>(store, query.text(5), "prefix_shift_pairs.reference_tokens_json");
        pair.referenceKl = fromJsonText<double>(store, query.text(6), "prefix_shift_pairs.reference_kl_json");
        if (!query.isNull(7)) {
            pair.candidateDetail = detailsFromJsonText(store, query.text(7), "prefix_shift_pairs.candidate_detail_json");
        }
        if (!query.isNull(8)) {
            pair.referenceDetail = detailsFromJsonText(store, query.text(8), "prefix_shift_pairs.reference_detail_json");
        }
        result.push_back(std::move(pair));
    }
    return result;
}

} // namespace mismatch::store

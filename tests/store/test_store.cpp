// Tests of the workspace run store: schema migrations, batches, live readers, crashes, bad files and merging shards.
#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "core/store/breakdown_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/find_run.h"
#include "core/store/import_store.h"
#include "core/store/run_store.h"
#include "core/store/schema.h"
#include "core/store/sqlite_util.h"
#include "core/store/store_merge.h"
#include "tests/common/posix_locks.h"
#include "tests/common/test_main.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <sqlite3.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>

using namespace mismatch;
using namespace mismatch::store;

namespace {

// Mirrors store_writer.cpp: the value the writer stores for a step.
double writerStepValue(long long step)
{
    return 0.001 * static_cast<double>(step) + 0.5;
}

QByteArray fileDigest(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        return {};
    }
    return QCryptographicHash::hash(file.readAll(), QCryptographicHash::Sha256);
}

// Builds a database at an earlier schema version the way that version of the tool left it, with data.
void createDatabaseAtVersion(const std::string& path, int version)
{
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    for (int v = 0; v < version; ++v) {
        execute(db, migrations()[static_cast<size_t>(v)]);
    }
    execute(db, ("PRAGMA user_version = " + std::to_string(version)).c_str());
    if (version > 0) {
        execute(db, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
        execute(db, "INSERT INTO models (name, path, architecture, parameter_count) VALUES "
                    "('old-model', '/models/old', 'Qwen2ForCausalLM', 1234)");
        execute(db, "INSERT INTO runs (name, kind, status, tool_version) VALUES ('old-run', 'train', 'finished', '0.0')");
        execute(db, "INSERT INTO step_metrics (run_id, step, mismatch_kl, k1, k3) VALUES (1, 0, 0.25, 0.1, 0.2), "
                    "(1, 1, 0.125, 0.05, 0.1)");
    }
    if (version >= 2) {
        // A calibration decided by the old rule (pass or fail, no interval of the relative change).
        execute(db, "INSERT INTO calibrations (run_id, name, student) VALUES (1, 'old-calibration', '/models/old')");
        execute(db, "INSERT INTO calibration_points (calibration_id, run_id, step, mismatch, quality, relative_change, "
                    "ci_low, ci_high, failed) VALUES (1, 1, 10, 0.1, 0.5, 0.05, -0.01, 0.02, 0), "
                    "(1, 1, 20, 0.4, 0.7, 0.4, 0.1, 0.3, 1)");
    }
    sqlite3_close(db);
}

StepMetrics makeStep(long long step, double value)
{
    StepMetrics m;
    m.step = step;
    m.mismatchKl = value;
    m.k1 = value / 2;
    m.k3 = value / 3;
    m.bf16Multiple = value * 100;
    m.loss = 2.0 - value;
    m.staleness = step % 3;
    m.extrasJson = "{\"note\":\"step " + std::to_string(step) + "\"}";
    return m;
}

// ---- shards and merging (store_merge.h) -------------------------------------------------------------------------

// Every table of the store with its row count (workspace_meta and merged_runs included).
std::map<std::string, std::int64_t> rowCounts(sqlite3* db)
{
    std::map<std::string, std::int64_t> counts;
    Statement tables(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
    while (tables.step()) {
        counts[tables.text(0)] = queryInt64(db, ("SELECT count(*) FROM " + tables.text(0)).c_str());
    }
    return counts;
}

// Bits of a double, so that "equal" below means bit for bit (QCOMPARE on doubles is fuzzy).
std::string bits(double value)
{
    std::uint64_t word = 0;
    std::memcpy(&word, &value, sizeof word);
    return std::to_string(word);
}

std::string bits(const std::optional<double>& value)
{
    return value ? bits(*value) : std::string("null");
}

std::string text(const std::optional<std::int64_t>& value)
{
    return value ? std::to_string(*value) : std::string("null");
}

std::string describe(const StoredGeneration& g)
{
    std::ostringstream s;
    s << g.index << "|" << g.promptId << "|";
    for (auto t : g.promptTokens)
        s << t << ",";
    s << "|";
    for (auto t : g.tokens)
        s << t << ",";
    s << "|";
    for (double k : g.kl)
        s << bits(k) << ",";
    for (const TokenDetail& d : g.details) {
        s << "|" << bits(d.logMu) << "," << bits(d.logPi) << "," << bits(d.entropyMu) << "," << bits(d.entropyPi);
        for (const auto& [token, p] : d.topMu)
            s << ";" << token << ":" << bits(p);
        for (const auto& [token, p] : d.topPi)
            s << ";" << token << ":" << bits(p);
    }
    return s.str();
}

// The name of run `id` ("" for none): references are compared by what they name, not by id.
std::string runName(const RunStore& store, const std::optional<std::int64_t>& id)
{
    return id ? store.run(*id)->name : std::string();
}

std::string describeCalibration(const RunStore& store, std::int64_t calibrationId)
{
    std::ostringstream s;
    const Calibration c = *calibration(store, calibrationId);
    s << "calibration " << c.info.name << "|" << c.info.student << "|" << c.info.configJson << "\n";
    for (const CalibrationPoint& p : c.points) {
        s << "  point " << runName(store, p.runId) << "|" << p.step << "|" << bits(p.mismatch) << bits(p.quality)
          << bits(p.relativeChange) << bits(p.ciLow) << bits(p.ciHigh) << "|" << p.verdict << "|" << p.label << "|"
          << p.replicates << "|" << bits(p.bf16Unit) << bits(p.accuracy) << bits(p.changeLow) << bits(p.changeHigh)
          << bits(p.trainingMismatch) << "\n";
    }
    for (const CalibrationBracket& b : c.brackets) {
        s << "  bracket " << b.step << "|" << bits(b.largestPassing) << bits(b.smallestFailing) << bits(b.threshold)
          << "\n";
    }
    return s.str();
}

// A run's config_json or job_json with the ids it names replaced by names ("run_id": the run's, "calibration": the
// calibration's), so that a merged run's JSON, whose ids are those of its new workspace, compares with its shard's.
std::string withNamedIds(const RunStore& store, const std::string& text)
{
    if (text.empty()) {
        return text;
    }
    nlohmann::json value = nlohmann::json::parse(text);
    std::function<void(nlohmann::json&)> name = [&](nlohmann::json& v) {
        for (auto& [key, member] : v.items()) {
            if (key == "run_id" && member.is_number_integer()) {
                member = runName(store, member.get<std::int64_t>());
            } else if (key == "calibration" && member.is_number_integer()) {
                member = calibration(store, member.get<std::int64_t>())->info.name;
            } else if (member.is_structured()) {
                name(member);
            }
        }
    };
    name(value);
    return value.dump();
}

// Everything stored with one run, read through the store's own API, ids replaced by the names they refer to and
// every figure by its bits: two stores hold the same results for a run exactly when these texts are equal.
std::string describeRun(const RunStore& store, std::int64_t runId)
{
    std::ostringstream s;
    const RunInfo run = *store.run(runId);
    s << "run " << run.name << "|" << run.kind << "|" << toString(run.status) << "|"
      << withNamedIds(store, run.configJson) << "|" << run.startedAt << "|" << run.finishedAt << "|" << run.error << "|"
      << run.toolVersion << "|" << withNamedIds(store, run.jobJson) << "\n";
    for (const StepMetrics& m : store.stepsAfter(runId)) {
        s << "step " << m.step << "|" << bits(m.mismatchKl) << bits(m.k1) << bits(m.k3) << bits(m.bf16Multiple)
          << bits(m.loss) << bits(m.reward) << bits(m.accuracy) << bits(m.entropy) << text(m.staleness)
          << bits(m.rolloutTokensPerSecond) << bits(m.trainTokensPerSecond) << bits(m.wallTimeSeconds) << "|"
          << m.extrasJson << "\n";
    }
    for (const std::int64_t step : stepsWithGenerations(store, runId)) {
        for (const StoredGeneration& g : stepGenerations(store, runId, step)) {
            s << "step generation " << step << "|" << describe(g) << "\n";
        }
    }
    for (const EvaluationSummary& e : evaluations(store, runId)) {
        std::string promptSet;
        for (const PromptSetRecord& p : store.listPromptSets()) {
            promptSet = e.promptSetId && p.id == *e.promptSetId ? p.path : promptSet;
        }
        s << "evaluation " << e.step << "|" << promptSet << "|" << bits(e.quality) << "|" << bits(e.accuracy) << "\n";
        const Evaluation evaluation = *evaluationAt(store, runId, e.step);
        for (const ProblemQuality& p : evaluation.problems) {
            s << "  problem " << p.problemId << "|" << bits(p.quality) << "|" << p.correct << "\n";
        }
    }
    if (const auto external = externalRun(store, runId)) {
        s << "external " << external->source << "|" << external->file << "|" << external->estimatorJson << "\n";
    }
    for (const SensitivityScanInfo& info : sensitivityScans(store)) {
        if (info.runId != runId)
            continue;
        std::string model;
        for (const ModelRecord& m : store.listModels()) {
            model = info.modelId && m.id == *info.modelId ? m.path : model;
        }
        s << "scan " << info.format << "|" << model << "|" << bits(info.bf16Unit) << "|" << info.configJson << "\n";
        const SensitivityScan scan = *sensitivityScan(store, info.id);
        for (const SensitivityCell& c : scan.cells) {
            s << "  cell " << c.layer << c.moduleGroup << "|" << bits(c.mismatch) << bits(c.addedMismatch)
              << bits(c.ciLow) << bits(c.ciHigh) << bits(c.mismatchCiLow) << bits(c.mismatchCiHigh) << text(c.tokens)
              << bits(c.seconds) << "\n";
        }
    }
    for (const CalibrationInfo& info : calibrations(store)) {
        if (info.runId == runId)
            s << describeCalibration(store, info.id);
    }
    for (const AdmissionDecision& d : admissionDecisions(store, runId)) {
        std::string calibrationName;
        for (const CalibrationInfo& c : calibrations(store)) {
            calibrationName = d.calibrationId && c.id == *d.calibrationId ? c.name : calibrationName;
        }
        s << "decision " << calibrationName << "|" << d.candidateJson << "|" << d.checkpoint << "|" << bits(d.mismatch)
          << bits(d.ciLow) << bits(d.ciHigh) << bits(d.threshold) << "|" << d.decision << "|" << bits(d.seconds) << "|"
          << d.toolVersion << "\n";
        for (const StoredGeneration& g : admissionGenerations(store, d.id)) {
            s << "  generation " << describe(g) << "\n";
        }
    }
    for (const PrefixShiftRecord& r : prefixShifts(store)) {
        if (r.runId != runId)
            continue;
        s << "prefix shift " << r.model << "|" << r.configurationJson << "|" << bits(r.total) << bits(r.perToken)
          << bits(r.prefixShift) << bits(r.bf16Unit) << bits(r.totalCiLow) << bits(r.totalCiHigh)
          << bits(r.perTokenCiLow) << bits(r.perTokenCiHigh) << "|" << r.pairs << "|" << r.diverged << "|"
          << r.detailsJson << "\n";
        for (const PrefixShiftPair& p : prefixShiftPairs(store, r.id)) {
            s << "  pair " << p.promptId << "|" << text(p.firstDivergence) << "|" << p.candidateTokens.size() << "|";
            for (double k : p.candidateKl)
                s << bits(k) << ",";
            for (double k : p.referenceKl)
                s << bits(k) << ",";
            for (const TokenDetail& d : p.candidateDetail)
                s << bits(d.logMu) << bits(d.logPi) << ";";
            s << "\n";
        }
    }
    for (const BreakdownRecord& b : breakdowns(store, runId)) {
        s << "breakdown " << b.candidate << "|" << b.model << "|" << b.configurationJson << "|" << bits(b.total)
          << bits(b.totalCiLow) << bits(b.totalCiHigh) << bits(b.bf16Unit) << bits(b.unitCiLow) << bits(b.unitCiHigh)
          << "|" << b.tokens << "|" << b.shapley << "|" << bits(b.seconds) << "\n";
        for (const BreakdownPart& p : b.parts) {
            s << "  part " << p.method << "|" << p.source << "|" << bits(p.value) << bits(p.ciLow) << bits(p.ciHigh)
              << "\n";
        }
        for (const BreakdownSubset& p : b.subsets) {
            s << "  subset " << p.subset << "|" << bits(p.mismatch) << bits(p.ciLow) << bits(p.ciHigh) << bits(p.k1)
              << bits(p.k3) << "|" << p.tokens << "|" << p.estimatorsJson << "\n";
        }
    }
    return s.str();
}

// Random figures (never round numbers) for a shard's rows.
struct Figures {
    std::mt19937_64 engine;
    double next() { return std::uniform_real_distribution<double>(0.001, 3.0)(engine); }
    std::vector<StoredGeneration> generations(int count)
    {
        std::vector<StoredGeneration> list;
        for (int g = 0; g < count; ++g) {
            StoredGeneration generation;
            generation.index = g;
            generation.promptId = "p" + std::to_string(g);
            generation.promptTokens = {1, 2, 3 + g};
            for (int t = 0; t < 3; ++t) {
                generation.tokens.push_back(10 + t);
                generation.kl.push_back(next());
                generation.details.push_back({-next(), -next(), next(), next(), {{10 + t, next()}}, {{11, next()}}});
            }
            list.push_back(generation);
        }
        return list;
    }
};

std::int64_t finishedRunWithSteps(RunStore& store, const std::string& name, const std::string& kind, Figures& figures,
    std::optional<std::int64_t> modelId = std::nullopt)
{
    const std::int64_t id
        = store.beginRun({name, kind, "{\"seed\":" + std::to_string(figures.engine() % 1000) + "}", modelId});
    std::vector<StepMetrics> steps;
    for (int s = 1; s <= 4; ++s) {
        StepMetrics m = makeStep(s, figures.next());
        m.reward = figures.next();
        m.wallTimeSeconds = figures.next();
        steps.push_back(m);
    }
    store.appendSteps(id, steps);
    store.finishRun(id, RunStatus::Finished);
    return id;
}

// A shard as a unit's run leaves it: one row or more in every table, through the store's own API. Runs are named
// "<tag>/..." so that the merged ones can be found by name.
void fillShard(RunStore& store, const std::string& tag, const std::string& modelPath, const std::string& promptPath,
    Figures& figures)
{
    const std::int64_t model = store.addModel({0, "tiny", modelPath, "Qwen2ForCausalLM", 4321, "{}"});
    const std::int64_t promptSet = store.addPromptSet({0, "arith", promptPath, 8});
    execute(store.handle(),
        ("INSERT INTO recipes (name, path, content) VALUES ('" + tag + "-recipe', '/r/" + tag
            + ".yaml', 'weights: fp8 # " + bits(figures.next()) + "')")
            .c_str());
    // A training run with evaluations and rollouts kept token by token.
    const std::int64_t train = finishedRunWithSteps(store, tag + "/train", "train", figures, model);
    for (const std::int64_t step : {2, 4}) {
        addEvaluation(store, train, step, promptSet,
            {{"a", figures.next(), true}, {"b", figures.next(), false}, {"c", figures.next(), true}});
    }
    addStepGenerations(store, train, 1, figures.generations(2));
    // A calibration of its own run and sweep run, and a shipped one (no run) with its record run.
    const std::int64_t calibrateRun = store.beginRun({tag + "/calibrate", "calibrate", "{}", std::nullopt});
    const std::int64_t sweep = finishedRunWithSteps(store, tag + "/sweep", "train", figures);
    const auto point = [&](std::int64_t runId, std::int64_t step, const std::string& verdict) {
        CalibrationPoint p;
        p.runId = runId;
        p.step = step;
        p.mismatch = figures.next();
        p.quality = figures.next();
        p.relativeChange = figures.next();
        p.ciLow = -figures.next();
        p.ciHigh = figures.next();
        p.verdict = verdict;
        p.label = "noise " + bits(figures.next()).substr(0, 3);
        p.bf16Unit = figures.next();
        p.changeLow = -figures.next();
        p.changeHigh = figures.next();
        p.trainingMismatch = figures.next();
        return p;
    };
    const std::int64_t calibrationId
        = addCalibration(store, {0, calibrateRun, tag + " calibration", modelPath, "{}", ""},
            {point(sweep, 2, "pass"), point(train, 2, "fail")}, {{2, figures.next(), figures.next(), figures.next()}});
    store.setRunConfig(calibrateRun, "{\"runs\":[{\"label\":\"noise\",\"run_id\":" + std::to_string(sweep) + "}]}");
    store.finishRun(calibrateRun, RunStatus::Finished);
    const std::int64_t record = finishedRunWithSteps(store, tag + "/shipped-record", "train", figures);
    const std::int64_t shipped
        = addCalibration(store, {0, std::nullopt, tag + " (shipped)", modelPath, "{\"v\":1}", ""},
            {point(record, 3, "undecided")}, {{3, figures.next(), std::nullopt, std::nullopt}});
    // A shipped calibration both shards hold alike (the demo's): merged once, with its record run.
    const std::int64_t commonRecord = store.beginRun({"common/record (shipped)", "train", "{}", std::nullopt});
    store.finishRun(commonRecord, RunStatus::Finished);
    CalibrationPoint commonPoint;
    commonPoint.runId = commonRecord;
    commonPoint.step = 5;
    commonPoint.mismatch = 0.0123;
    commonPoint.quality = 0.731;
    commonPoint.label = "baseline";
    addCalibration(store, {0, std::nullopt, "common (shipped)", "/shipped/student", "{\"v\":2}", ""}, {commonPoint},
        {{5, 0.0123, std::nullopt, 0.0117}});
    // A replicate's record run, which no point names: known by its record (analysis/demo.cpp).
    const std::int64_t replicate = store.beginRun({"common/record r1 (shipped)", "train",
        "{\"shipped_calibration\":\"/shipped/common.json\",\"sweep_run\":{\"replicate\":1}}", std::nullopt});
    store.finishRun(replicate, RunStatus::Finished);
    // Admission decisions against both, with generations.
    const std::int64_t admit = store.beginRun({tag + "/admit", "admit", "{}", std::nullopt});
    for (const std::int64_t against : {calibrationId, shipped}) {
        AdmissionDecision decision;
        decision.runId = admit;
        decision.calibrationId = against;
        decision.candidateJson = "{\"recipe\":\"" + tag + "\"}";
        decision.checkpoint = "step-2";
        decision.mismatch = figures.next();
        decision.ciLow = decision.mismatch - figures.next();
        decision.ciHigh = decision.mismatch + figures.next();
        decision.threshold = figures.next();
        decision.decision = "borderline";
        decision.seconds = figures.next();
        decision.generations = figures.generations(2);
        addAdmissionDecision(store, decision);
    }
    store.setRunJob(
        admit, "{\"job\":\"admit\",\"parameters\":{\"calibration\":" + std::to_string(calibrationId) + "}}");
    store.finishRun(admit, RunStatus::Finished);
    // A sensitivity scan of the model.
    const std::int64_t scanRun = store.beginRun({tag + "/sensitivity", "sensitivity", "{}", std::nullopt});
    const std::int64_t scan
        = addSensitivityScan(store, {0, scanRun, model, "int8/channel", figures.next(), "{}", "", "", 0});
    for (const std::string group : {"q", "k", "down"}) {
        addSensitivityCell(store, scan,
            {0, group, figures.next(), figures.next(), -figures.next(), figures.next(), figures.next(), figures.next(),
                96, figures.next()});
    }
    store.finishRun(scanRun, RunStatus::Finished);
    // A prefix-shift analysis with its pairs.
    const std::int64_t shiftRun = store.beginRun({tag + "/prefix-shift", "prefix_shift", "{}", std::nullopt});
    PrefixShiftRecord shift;
    shift.runId = shiftRun;
    shift.model = modelPath;
    shift.total = figures.next();
    shift.perToken = figures.next();
    shift.prefixShift = shift.total - shift.perToken;
    shift.bf16Unit = figures.next();
    shift.totalCiLow = figures.next();
    shift.pairs = 1;
    shift.diverged = 1;
    PrefixShiftPair pair;
    pair.promptId = "p0";
    pair.promptTokens = {1, 2};
    pair.firstDivergence = 1;
    pair.candidateTokens = {5, 6};
    pair.candidateKl = {figures.next(), figures.next()};
    pair.referenceTokens = {5, 7};
    pair.referenceKl = {figures.next(), figures.next()};
    pair.candidateDetail = {{-figures.next(), -figures.next(), figures.next(), figures.next(), {}, {}},
        {-figures.next(), -figures.next(), figures.next(), figures.next(), {}, {}}};
    addPrefixShift(store, shift, {pair});
    store.finishRun(shiftRun, RunStatus::Finished);
    // A breakdown with its parts and subsets.
    const std::int64_t breakdownRun = store.beginRun({tag + "/breakdown", "breakdown", "{}", std::nullopt});
    BreakdownRecord breakdown;
    breakdown.runId = breakdownRun;
    breakdown.candidate = "fp8";
    breakdown.model = modelPath;
    breakdown.sources = {"weights", "kv"};
    breakdown.total = figures.next();
    breakdown.bf16Unit = figures.next();
    breakdown.tokens = 64;
    breakdown.parts = {{"add_one_in", "weights", figures.next(), -figures.next(), figures.next()},
        {"leave_one_out", "kv", figures.next(), std::nullopt, std::nullopt}};
    breakdown.subsets = {{"", figures.next(), std::nullopt, std::nullopt, figures.next(), figures.next(), 64, "{}"},
        {"weights", figures.next(), -figures.next(), figures.next(), std::nullopt, std::nullopt, 64, "{}"}};
    addBreakdowns(store, {breakdown});
    store.finishRun(breakdownRun, RunStatus::Finished);
    // An imported run.
    storeExternalRun(store, {tag + "/external", "verl", "/logs/" + tag + ".jsonl", "{}", "{\"k3\":\"verl\"}"},
        {makeStep(1, figures.next()), makeStep(2, figures.next())});
}

}  // namespace

class TestStore : public QObject {
    Q_OBJECT

private slots:
    void createsWorkspaceWithCurrentSchema();
    void runLifecycleAndCursor();
    void batchIsAtomic();
    void migratesFromEveryEarlierVersion_data();
    void migratesFromEveryEarlierVersion();
    void readerSeesWriterLiveFromAnotherProcess();
    void writerKilledMidRunKeepsCommittedSteps();
    void rejectsBadFilesWithoutTouchingThem_data();
    void rejectsBadFilesWithoutTouchingThem();
    void readOnlyOpenOfReadOnlyDirectory();
    void missingFileInOpenExistingMode();
    void failedCreationLeavesNoEmptyDatabase();
    void openingAgainKeepsTheProcessLocks();
    void findRunByIdOrOneName();
    void mergesShardsIntoAWorkspace();
    void mergeRefusesShardsItCannotMerge();
};

void TestStore::createsWorkspaceWithCurrentSchema()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/nested/ws/workspace.db").toStdString();
    RunStore store = RunStore::open(path);
    QCOMPARE(store.schemaVersion(), currentSchemaVersion());
    QCOMPARE(queryInt64(store.handle(), "PRAGMA application_id"), static_cast<std::int64_t>(kApplicationId));
    Statement journal(store.handle(), "PRAGMA journal_mode");
    QVERIFY(journal.step());
    QCOMPARE(QString::fromStdString(journal.text(0)), QStringLiteral("wal"));
    QCOMPARE(queryInt64(store.handle(), "PRAGMA foreign_keys"), 1);
    const StoreSummary summary = store.summary();
    QCOMPARE(summary.runs, 0);
    QCOMPARE(summary.schemaVersion, currentSchemaVersion());
    // Schema 11: each workspace has its own random id (a shard's identity wherever it is copied).
    const RunStore other = RunStore::open((dir.path() + "/other/workspace.db").toStdString());
    const char* idQuery = "SELECT value FROM workspace_meta WHERE key = 'workspace_id'";
    Statement id(store.handle(), idQuery);
    Statement otherId(other.handle(), idQuery);
    QVERIFY(id.step() && otherId.step());
    QVERIFY(id.text(0) != otherId.text(0));
}

void TestStore::runLifecycleAndCursor()
{
    QTemporaryDir dir;
    RunStore store = RunStore::open((dir.path() + "/workspace.db").toStdString());
    const auto runId = store.beginRun({"opd-bf16", "train", "{\"lr\":0.001}", std::nullopt});
    store.appendSteps(runId, {makeStep(0, 0.31), makeStep(1, 0.29)});
    auto first = store.stepsAfter(runId, 0);
    QCOMPARE(first.size(), size_t(2));
    QCOMPARE(first[0].step, 0);
    QCOMPARE(*first[1].mismatchKl, 0.29);
    QCOMPARE(*first[1].staleness, 1);
    QCOMPARE(QString::fromStdString(first[1].extrasJson), QStringLiteral("{\"note\":\"step 1\"}"));
    QVERIFY(!first[0].reward.has_value());

    store.appendSteps(runId, {makeStep(2, 0.27)});
    const auto next = store.stepsAfter(runId, first.back().rowId);
    QCOMPARE(next.size(), size_t(1));
    QCOMPARE(next[0].step, 2);

    auto info = store.run(runId);
    QVERIFY(info.has_value());
    QCOMPARE(QString::fromStdString(toString(info->status)), QString::fromStdString(toString(RunStatus::Running)));
    QCOMPARE(info->stepCount, 3);
    QCOMPARE(*info->lastMismatch, 0.27);
    store.finishRun(runId, RunStatus::Failed, "NaN in logits at step 3");
    info = store.run(runId);
    QCOMPARE(QString::fromStdString(toString(info->status)), QString::fromStdString(toString(RunStatus::Failed)));
    QCOMPARE(QString::fromStdString(info->error), QStringLiteral("NaN in logits at step 3"));
    QVERIFY(!info->finishedAt.empty());
    QCOMPARE(store.listRuns().size(), size_t(1));
    QVERIFY_THROWS_EXCEPTION(StoreError, store.finishRun(runId + 100, RunStatus::Finished));
}

void TestStore::batchIsAtomic()
{
    QTemporaryDir dir;
    RunStore store = RunStore::open((dir.path() + "/workspace.db").toStdString());
    const auto runId = store.beginRun({"r", "train", "{}", std::nullopt});
    store.appendSteps(runId, {makeStep(0, 0.1), makeStep(1, 0.2)});
    // Step 1 is already stored: the whole batch (steps 2 and 1) must be refused.
    try {
        store.appendSteps(runId, {makeStep(2, 0.3), makeStep(1, 0.4)});
        QFAIL("a duplicate step was accepted");
    } catch (const StoreError& error) {
        QVERIFY2(QString(error.what()).contains("step 1"), error.what());
    }
    const auto steps = store.stepsAfter(runId);
    QCOMPARE(steps.size(), size_t(2));
    QCOMPARE(*steps[1].mismatchKl, 0.2);
    QVERIFY_THROWS_EXCEPTION(StoreError, store.appendSteps(runId + 7, {makeStep(0, 0.1)}));
}

void TestStore::migratesFromEveryEarlierVersion_data()
{
    QTest::addColumn<int>("version");
    for (int v = 0; v < currentSchemaVersion(); ++v) {
        QTest::addRow("from v%d", v) << v;
    }
}

void TestStore::migratesFromEveryEarlierVersion()
{
    QFETCH(int, version);
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/workspace.db").toStdString();
    createDatabaseAtVersion(path, version);
    RunStore store = RunStore::open(path);
    QCOMPARE(store.schemaVersion(), currentSchemaVersion());
    if (version > 0) {
        const auto runs = store.listRuns();
        QCOMPARE(runs.size(), size_t(1));
        QCOMPARE(QString::fromStdString(runs[0].name), QStringLiteral("old-run"));
        const auto steps = store.stepsAfter(runs[0].id);
        QCOMPARE(steps.size(), size_t(2));
        QCOMPARE(*steps[0].mismatchKl, 0.25);
        QCOMPARE(store.listModels().at(0).parameterCount, 1234);
    }
    if (version >= 2) {
        // Schema 9: points stored before read as the old rule's pass and fail, with no interval of the change.
        const auto calibration = mismatch::store::calibration(store, 1);
        QVERIFY(calibration);
        QCOMPARE(calibration->points.size(), size_t(2));
        QCOMPARE(calibration->points[0].verdict, std::string("pass"));
        QCOMPARE(calibration->points[1].verdict, std::string("fail"));
        QVERIFY(!calibration->points[1].changeLow && !calibration->points[1].changeHigh);
        // Schema 10: their mismatch is the training mean, with no screen statistic beside it.
        QVERIFY(!calibration->points[0].trainingMismatch && !calibration->points[0].screenStatistic());
    }
    // Every table of the current schema is usable after the migration.
    const auto runId = store.beginRun({"new", "admit", "{}", std::nullopt});
    execute(store.handle(), ("INSERT INTO admission_decisions (run_id, candidate_json, checkpoint, mismatch, ci_low, "
                             "ci_high, threshold, decision, seconds, tool_version) VALUES (" +
                             std::to_string(runId) + ", '{}', 'step-0', 0.1, 0.05, 0.15, 0.2, 'admit', 1.5, 'test')")
                                .c_str());
    QCOMPARE(store.summary().admissionDecisions, 1);
    // Version 3: sensitivity cells with their own interval, tokens and time; prefix-shift analyses and pairs.
    execute(store.handle(), ("INSERT INTO sensitivity_scans (run_id, format) VALUES (" + std::to_string(runId) +
                             ", 'int8/channel')").c_str());
    execute(store.handle(), "INSERT INTO sensitivity_cells (scan_id, layer, module_group, mismatch, added_mismatch, "
                            "mismatch_ci_low, mismatch_ci_high, tokens, seconds) VALUES (last_insert_rowid(), 0, 'q', "
                            "0.2, 0.1, 0.15, 0.25, 100, 0.5)");
    execute(store.handle(), "INSERT INTO prefix_shift_analyses (model, configuration_json, total, per_token, "
                            "prefix_shift, bf16_unit, pairs, diverged) VALUES ('m', '{}', 0.3, 0.2, 0.1, 0.001, 1, 1)");
    execute(store.handle(), "INSERT INTO prefix_shift_pairs (analysis_id, pair_index, prompt_id, prompt_tokens_json, "
                            "first_divergence, candidate_tokens_json, candidate_kl_json, reference_tokens_json, "
                            "reference_kl_json) VALUES (last_insert_rowid(), 0, 'p', '[1]', 0, '[2]', '[0.1]', '[3]', "
                            "'[0.2]')");
    QCOMPARE(queryInt64(store.handle(), "SELECT tokens FROM sensitivity_cells"), 100);
    QCOMPARE(queryInt64(store.handle(), "SELECT count(*) FROM prefix_shift_pairs"), 1);
    // Version 11: the workspace's own random id, made when it was migrated (32 hexadecimal digits).
    Statement workspaceId(store.handle(), "SELECT value FROM workspace_meta WHERE key = 'workspace_id'");
    QVERIFY(workspaceId.step());
    QVERIFY2(QRegularExpression("^[0-9a-f]{32}$").match(QString::fromStdString(workspaceId.text(0))).hasMatch(),
        workspaceId.text(0).c_str());
    // Reopening a migrated database is a no-op.
    RunStore again = RunStore::open(path);
    QCOMPARE(again.summary().runs, version > 0 ? 2 : 1);
}

void TestStore::readerSeesWriterLiveFromAnotherProcess()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/workspace.db").toStdString();
    RunStore reader = RunStore::open(path);  // opened before the writer starts, never reopened
    const std::int64_t counterBefore = reader.changeCounter();

    QProcess writer;
    writer.start(STORE_WRITER_PATH, {QString::fromStdString(path), "200", "10", "15"});
    QVERIFY(writer.waitForStarted());
    QVERIFY(writer.waitForReadyRead(10000));
    const QByteArray firstLine = writer.readLine();
    QVERIFY2(firstLine.startsWith("run "), firstLine.constData());
    const std::int64_t runId = firstLine.mid(4).trimmed().toLongLong();

    std::int64_t cursor = 0;
    long long seen = 0;
    int polls = 0;
    int pollsWithNewSteps = 0;
    QElapsedTimer timer;
    timer.start();
    while (seen < 200 && timer.elapsed() < 60000) {
        const auto steps = reader.stepsAfter(runId, cursor);
        for (const auto& s : steps) {
            QCOMPARE(s.step, seen);  // in order, none lost, none duplicated
            QCOMPARE(*s.mismatchKl, writerStepValue(s.step));
            ++seen;
            cursor = s.rowId;
        }
        pollsWithNewSteps += steps.empty() ? 0 : 1;
        ++polls;
        QTest::qWait(5);
    }
    QVERIFY(writer.waitForFinished(30000));
    QCOMPARE(writer.exitCode(), 0);
    QCOMPARE(seen, 200LL);
    // The reader saw the run grow in several pieces while the writer was running.
    QVERIFY2(pollsWithNewSteps >= 3, qPrintable(QString("only %1 of %2 polls saw new steps").arg(pollsWithNewSteps).arg(polls)));
    QVERIFY(reader.changeCounter() != counterBefore);
    QCOMPARE(QString::fromStdString(toString(reader.run(runId)->status)), QString::fromStdString(toString(RunStatus::Finished)));
}

void TestStore::writerKilledMidRunKeepsCommittedSteps()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/workspace.db").toStdString();
    QProcess writer;
    writer.start(STORE_WRITER_PATH, {QString::fromStdString(path), "1000000", "7", "0"});
    QVERIFY(writer.waitForStarted());
    long long committed = 0;
    QElapsedTimer timer;
    timer.start();
    while (committed < 300 && timer.elapsed() < 30000) {
        writer.waitForReadyRead(1000);
        while (writer.canReadLine()) {
            const QByteArray line = writer.readLine().trimmed();
            if (line.startsWith("committed ")) {
                committed = line.mid(10).toLongLong();
            }
        }
    }
    QVERIFY(committed >= 300);
    writer.kill();  // SIGKILL, mid-transaction most of the time
    QVERIFY(writer.waitForFinished(10000));

    RunStore store = RunStore::open(path);
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(QString::fromStdString(toString(runs[0].status)), QStringLiteral("running"));  // killed, never finished
    const auto steps = store.stepsAfter(runs[0].id);
    QVERIFY(static_cast<long long>(steps.size()) >= committed);  // every step reported as committed is there
    QCOMPARE(steps.size() % 7, size_t(0));                      // and only whole batches
    for (size_t i = 0; i < steps.size(); ++i) {
        QCOMPARE(steps[i].step, static_cast<std::int64_t>(i));
        QCOMPARE(*steps[i].mismatchKl, writerStepValue(static_cast<long long>(i)));
    }
    Statement check(store.handle(), "PRAGMA integrity_check");
    QVERIFY(check.step());
    QCOMPARE(QString::fromStdString(check.text(0)), QStringLiteral("ok"));
}

void TestStore::rejectsBadFilesWithoutTouchingThem_data()
{
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::newRow("text file") << "text" << "is not a SQLite database";
    QTest::newRow("short file") << "short" << "is not a SQLite database";
    QTest::newRow("other application's database") << "foreign" << "not a Mismatch Lab workspace";
    QTest::newRow("other application id") << "foreign-id" << "another application";
    QTest::newRow("newer schema") << "newer" << "newer Mismatch Lab (schema version 99";
    QTest::newRow("corrupt page") << "corrupt" << "corrupt";
    QTest::newRow("truncated") << "truncated" << "corrupt";
    QTest::newRow("read-only file") << "readonly" << "read-only";
    // Issue 17: only a database that is ours (application id) or empty is initialised; tables that do not match
    // the schema version are explained rather than failing inside a migration.
    QTest::newRow("other application, user_version 3, no tables") << "foreign-version" << "not a Mismatch Lab workspace";
    QTest::newRow("version 1 holding a version 2 table") << "inconsistent" << "cannot be migrated";
    QTest::newRow("version 3 lacking a table") << "incomplete" << "lacks the table";
}

void TestStore::rejectsBadFilesWithoutTouchingThem()
{
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    const QString path = dir.path() + "/workspace.db";
    const std::string p = path.toStdString();
    if (kind == "text") {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("step,mismatch\n0,0.1\n1,0.2\n2,0.3\n3,0.4\n4,0.5\n5,0.6\n6,0.7\n7,0.8\n8,0.9\n9,1.0\n10,1.1\n");
    } else if (kind == "short") {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("SQLite format 3", 16);
    } else if (kind == "foreign" || kind == "foreign-id") {
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
        execute(db, "CREATE TABLE songs (title TEXT); INSERT INTO songs VALUES ('a');");
        if (kind == "foreign-id") {
            execute(db, "PRAGMA application_id = 1234");
        }
        sqlite3_close(db);
    } else if (kind == "newer") {
        createDatabaseAtVersion(p, currentSchemaVersion());
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
        execute(db, "PRAGMA user_version = 99");
        sqlite3_close(db);
    } else if (kind == "corrupt" || kind == "truncated") {
        {
            RunStore store = RunStore::open(p);
            const auto runId = store.beginRun({"big", "train", "{}", std::nullopt});
            std::vector<StepMetrics> steps;
            for (int s = 0; s < 3000; ++s) {
                steps.push_back(makeStep(s, 0.001 * s));
            }
            store.appendSteps(runId, steps);
            execute(store.handle(), "PRAGMA wal_checkpoint(TRUNCATE)");
        }
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadWrite));
        const qint64 size = f.size();
        QVERIFY(size > 64 * 1024);
        if (kind == "corrupt") {
            // Overwrite page headers in the middle of the file with garbage.
            for (qint64 offset = size / 4; offset < size * 3 / 4; offset += 4096) {
                f.seek(offset);
                f.write(QByteArray(64, '\xA7'));
            }
        } else {
            QVERIFY(f.resize(size / 2));
        }
    } else if (kind == "readonly") {
        createDatabaseAtVersion(p, currentSchemaVersion());
        QFile::setPermissions(path, QFile::ReadOwner | QFile::ReadGroup | QFile::ReadOther);
    } else if (kind == "foreign-version") {
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
        execute(db, "PRAGMA user_version = 3");
        sqlite3_close(db);
    } else if (kind == "inconsistent") {
        createDatabaseAtVersion(p, 1);
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
        execute(db, "CREATE TABLE evaluations (id INTEGER PRIMARY KEY)");
        sqlite3_close(db);
    } else if (kind == "incomplete") {
        createDatabaseAtVersion(p, currentSchemaVersion());
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(p.c_str(), &db), SQLITE_OK);
        execute(db, "DROP TABLE prefix_shift_pairs");
        sqlite3_close(db);
    }
    const QByteArray before = fileDigest(path);
    QVERIFY(!before.isEmpty());
    try {
        RunStore store = RunStore::open(p, OpenMode::CreateOrOpen);
        QFAIL("a bad workspace file was opened");
    } catch (const StoreError& error) {
        const QString message = QString::fromUtf8(error.what());
        QVERIFY2(message.contains(path), qPrintable(message));  // names the file
        QVERIFY2(message.contains(expected), qPrintable(message));
    }
    QCOMPARE(fileDigest(path), before);  // never modified
    // and nothing made beside it: a refused database is read without SQLite's -wal and -shm files
    QVERIFY(!QFile::exists(path + "-wal"));
    QVERIFY(!QFile::exists(path + "-shm"));
    QVERIFY(!QFile::exists(path + "-journal"));
}

void TestStore::readOnlyOpenOfReadOnlyDirectory()
{
    QTemporaryDir dir;
    const QString wsDir = dir.path() + "/ws";
    const std::string path = (wsDir + "/workspace.db").toStdString();
    {
        RunStore store = RunStore::open(path);
        const auto runId = store.beginRun({"kept", "train", "{}", std::nullopt});
        store.appendSteps(runId, {makeStep(0, 0.5)});
    }
    QFile::setPermissions(wsDir, QFile::ReadOwner | QFile::ExeOwner | QFile::ReadGroup | QFile::ExeGroup);
    try {
        RunStore store = RunStore::open(path, OpenMode::CreateOrOpen);
        QFAIL("opened a workspace in a read-only directory for writing");
    } catch (const StoreError& error) {
        QVERIFY2(QString(error.what()).contains("read-only"), error.what());
    }
    RunStore reader = RunStore::open(path, OpenMode::ReadOnly);
    QVERIFY(reader.readOnly());
    QCOMPARE(reader.listRuns().size(), size_t(1));
    QCOMPARE(reader.stepsAfter(1).size(), size_t(1));
    QFile::setPermissions(wsDir, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
}

void TestStore::missingFileInOpenExistingMode()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/none/workspace.db").toStdString();
    QVERIFY_THROWS_EXCEPTION(StoreError, RunStore::open(path, OpenMode::OpenExisting));
    QVERIFY_THROWS_EXCEPTION(StoreError, RunStore::open(path, OpenMode::ReadOnly));
    QVERIFY(!QFile::exists(QString::fromStdString(path)));
}

// A creation that fails after SQLite made the file (here a file size limit of 0 bytes: the file is created, its
// first write fails with EFBIG) leaves the directory as it was, not a 0-byte workspace.db that the next command
// would take for a workspace; an existing empty file is never removed.
void TestStore::failedCreationLeavesNoEmptyDatabase()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/workspace.db").toStdString();
    struct rlimit saved {};
    QCOMPARE(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto previous = std::signal(SIGXFSZ, SIG_IGN); // a write past the limit fails with EFBIG instead
    const auto openLimited = [&]() -> std::string {
        struct rlimit limit = saved;
        limit.rlim_cur = 0;
        if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) {
            return "setrlimit failed";
        }
        std::string message = "created under a file size limit of 0";
        try {
            RunStore::open(path);
        } catch (const StoreError& error) {
            message = error.what();
        }
        if (::setrlimit(RLIMIT_FSIZE, &saved) != 0) {
            message += " (and the limit could not be restored)";
        }
        return message;
    };
    const std::string created = openLimited();
    QVERIFY2(created.find(path) != std::string::npos, created.c_str());
    QCOMPARE(QDir(dir.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden), QStringList());
    // An empty workspace.db that was there before is someone's: it stays.
    QVERIFY(QFile(QString::fromStdString(path)).open(QIODevice::WriteOnly));
    const std::string existing = openLimited();
    QVERIFY2(existing.find(path) != std::string::npos, existing.c_str());
    QVERIFY(QFile::exists(QString::fromStdString(path)));
    std::signal(SIGXFSZ, previous);
}

// Opening the workspace again while a connection is open (the GUI's jobs each open their own store) must not
// drop the SHARED lock that connection holds on the database file: with the lock gone, a headless writer that
// finishes sees no other reader, checkpoints and deletes the WAL and -shm under the open connection.
void TestStore::openingAgainKeepsTheProcessLocks()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/workspace.db").toStdString();
    const std::string wal = path + "-wal";
    { RunStore::open(path); }  // created and closed: the file exists, nothing open
    RunStore reader = RunStore::open(path);
    reader.listRuns();  // a read: the connection now holds its SHARED lock on the database file
    const int held = test::posixLocksHeld(::getpid(), path);
    QVERIFY2(held > 0, qPrintable(QString("no lock on the database after opening it (%1)").arg(held)));

    for (int i = 0; i < 3; ++i) {
        RunStore again = RunStore::open(path, OpenMode::OpenExisting);  // validates the header, then opens
        again.listRuns();
        RunStore readOnly = RunStore::open(path, OpenMode::ReadOnly);
        readOnly.listRuns();
    }  // each of them closed here
    QCOMPARE(test::posixLocksHeld(::getpid(), path), held);

    // Another process writes and exits while `reader` stays open: the WAL must survive the writer's close.
    QProcess writer;
    writer.start(STORE_WRITER_PATH, {QString::fromStdString(path), "40", "10", "0"});
    QVERIFY(writer.waitForFinished(30000));
    QCOMPARE(writer.exitCode(), 0);
    QVERIFY2(QFile::exists(QString::fromStdString(wal)), "the writer deleted the WAL under an open connection");
    QCOMPARE(test::posixLocksHeld(::getpid(), path), held);
    const auto runs = reader.listRuns();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(reader.stepsAfter(runs[0].id).size(), size_t(40));
    Statement check(reader.handle(), "PRAGMA integrity_check");
    QVERIFY(check.step());
    QCOMPARE(QString::fromStdString(check.text(0)), QStringLiteral("ok"));
}

void TestStore::findRunByIdOrOneName()
{
    QTemporaryDir dir;
    RunStore store = RunStore::open((dir.path() + "/workspace.db").toStdString());
    const std::int64_t a = store.beginRun({"alpha", "train", "{}", std::nullopt});
    const std::int64_t b1 = store.beginRun({"beta", "train", "{}", std::nullopt});
    const std::int64_t b2 = store.beginRun({"beta", "admit", "{}", std::nullopt});
    const std::int64_t digits = store.beginRun({"2024", "train", "{}", std::nullopt});
    QCOMPARE(findRun(store, std::to_string(a)).name, std::string("alpha"));
    QCOMPARE(findRun(store, std::to_string(b2)).kind, std::string("admit"));
    QCOMPARE(findRun(store, "alpha").id, a);
    // All digits is an id, never a name: the run named "2024" is found by its id only.
    QCOMPARE(findRun(store, std::to_string(digits)).name, std::string("2024"));
    const auto refused = [&store](const std::string& text) -> std::string {
        try {
            findRun(store, text);
        } catch (const StoreError& error) {
            return error.what();
        }
        return "accepted";
    };
    // A name shared by several runs is refused with every id listed (not the newest taken silently).
    const std::string ambiguous = refused("beta");
    QVERIFY2(ambiguous.find("2 runs named 'beta' (ids " + std::to_string(b1) + ", " + std::to_string(b2) + ")")
            != std::string::npos,
        ambiguous.c_str());
    QVERIFY2(refused("999").find("has no run with id 999") != std::string::npos, refused("999").c_str());
    QVERIFY2(refused("2024").find("has no run with id 2024") != std::string::npos, refused("2024").c_str());
    QVERIFY2(refused("12345678901234567890123").find("has no run with id 12345678901234567890123") != std::string::npos,
        "an id past int64");
    QVERIFY2(refused("gamma").find("has no run named 'gamma'") != std::string::npos, refused("gamma").c_str());
    QVERIFY2(refused("").find("has no run named ''") != std::string::npos, refused("").c_str());
}

// Issue 43: two shards, written as two units would write them, merged into a third workspace that holds runs of its
// own: every row is there once with new ids, the foreign keys hold, each merged run's results equal its shard's bit
// for bit, its provenance says where it came from, and merging again (or merging a copy of a shard) adds nothing.
void TestStore::mergesShardsIntoAWorkspace()
{
    for (int v = 1; v <= currentSchemaVersion(); ++v) {
        for (const std::string& table : tablesCreatedBy(v)) {
            const auto& merged = mergedTables();
            QVERIFY2(table == "workspace_meta" || std::find(merged.begin(), merged.end(), table) != merged.end(),
                ("the merge does not know the table " + table).c_str());
        }
    }
    QTemporaryDir dir;
    const std::string modelPath = (dir.path() + "/models/tiny").toStdString();
    const std::uint64_t seed = std::random_device()();
    Figures figures {std::mt19937_64(seed)};
    qInfo("figures seed %llu", static_cast<unsigned long long>(seed));
    const std::string shardA = (dir.path() + "/shards/a").toStdString();
    const std::string shardB = (dir.path() + "/shards/b").toStdString();
    {
        RunStore a = RunStore::open(databasePath(shardA));
        fillShard(a, "A", modelPath, "/prompts/arith.jsonl", figures);
        // Shard B's unit ran as a Slurm array task: its runs' provenance records the job (core/common/provenance).
        qputenv("SLURM_JOB_ID", "4242");
        qputenv("SLURM_ARRAY_TASK_ID", "3");
        RunStore b = RunStore::open(databasePath(shardB));
        fillShard(b, "B", modelPath, "/prompts/arith.jsonl", figures);
        qunsetenv("SLURM_JOB_ID");
        qunsetenv("SLURM_ARRAY_TASK_ID");
    }
    RunStore target = RunStore::open((dir.path() + "/main/workspace.db").toStdString());
    target.addModel({0, "tiny here", modelPath, "Qwen2ForCausalLM", 4321, "{}"});
    finishedRunWithSteps(target, "own", "train", figures);
    const auto before = rowCounts(target.handle());
    RunStore a = RunStore::open(databasePath(shardA), OpenMode::ReadOnly);
    RunStore b = RunStore::open(databasePath(shardB), OpenMode::ReadOnly);
    const auto countsA = rowCounts(a.handle());
    const auto countsB = rowCounts(b.handle());

    const MergeReport reportA = mergeShard(target, shardA);
    const MergeReport reportB = mergeShard(target, databasePath(shardB)); // the file names the shard as well
    QCOMPARE(reportA.runs.size(), a.listRuns().size());
    QCOMPARE(reportB.runs.size() + 2, b.listRuns().size()); // all but the common record runs, matched with A's
    QCOMPARE(reportB.matchedRuns.size(), size_t(2));
    QCOMPARE(target.run(reportB.matchedRuns[0].second)->name, std::string("common/record (shipped)"));
    QCOMPARE(target.run(reportB.matchedRuns[1].second)->name, std::string("common/record r1 (shipped)"));
    QVERIFY(reportA.alreadyMerged.empty() && reportB.alreadyMerged.empty() && reportA.matchedRuns.empty());
    // What B shares with A is there once: the common shipped calibration, its point, bracket and record run.
    const std::map<std::string, std::int64_t> sharedWithA
        = {{"calibrations", 1}, {"calibration_points", 1}, {"calibration_brackets", 1}, {"runs", 2}};
    const auto after = rowCounts(target.handle());
    QCOMPARE(queryInt64(target.handle(), "SELECT count(*) FROM calibrations WHERE name = 'common (shipped)'"), 1);
    for (const auto& [table, count] : after) {
        std::int64_t expected = before.at(table) + countsA.at(table) + countsB.at(table)
            - (sharedWithA.count(table) ? sharedWithA.at(table) : 0);
        if (table == "models" || table == "workspace_meta") {
            expected = before.at(table); // the model matched by path; the target stays itself
        } else if (table == "prompt_sets") {
            expected = before.at(table) + 1; // A's, and B's matched with it by path
        } else if (table == "merged_runs") {
            expected = static_cast<std::int64_t>(reportA.runs.size() + reportB.runs.size());
        }
        QVERIFY2(count == expected,
            (table + ": " + std::to_string(count) + " rows, expected " + std::to_string(expected)).c_str());
    }
    QCOMPARE(after.at("runs"), before.at("runs") + countsA.at("runs") + countsB.at("runs") - 2);
    Statement foreignKeys(target.handle(), "PRAGMA foreign_key_check");
    QVERIFY2(!foreignKeys.step(), "a foreign key does not hold after the merge");
    Statement integrity(target.handle(), "PRAGMA integrity_check");
    QVERIFY(integrity.step());
    QCOMPARE(QString::fromStdString(integrity.text(0)), QStringLiteral("ok"));

    // Each merged run holds exactly what its shard holds (references compared by name, figures by bits).
    for (const auto& [shard, report] : {std::pair<RunStore*, const MergeReport*>(&a, &reportA), {&b, &reportB}}) {
        std::set<std::int64_t> newIds;
        for (const auto& [shardRun, run] : report->runs) {
            QVERIFY(run > before.at("runs")); // a new id: the target's own runs came first
            newIds.insert(run);
            QCOMPARE(QString::fromStdString(describeRun(target, run)),
                QString::fromStdString(describeRun(*shard, shardRun)));
            const nlohmann::json here = nlohmann::json::parse(
                target.run(run)->provenanceJson.empty() ? "null" : target.run(run)->provenanceJson);
            const std::string there = shard->run(shardRun)->provenanceJson;
            if (there.empty()) {
                QVERIFY(here.is_null()); // an imported run records none
                continue;
            }
            nlohmann::json withoutMerged = here;
            const nlohmann::json merged = withoutMerged.back().at("merged");
            withoutMerged.back().erase("merged");
            QVERIFY(withoutMerged == nlohmann::json::parse(there));
            QCOMPARE(
                QString::fromStdString(merged.at("shard").get<std::string>()), QString::fromStdString(shard->path()));
            QCOMPARE(merged.at("shard_run_id").get<std::int64_t>(), shardRun);
            QCOMPARE(merged.at("host_source").get<std::string>(), std::string("provenance")); // the run recorded it
            char host[256] = {};
            QCOMPARE(::gethostname(host, sizeof host - 1), 0);
            QCOMPARE(merged.at("host").get<std::string>(), std::string(host));
            if (shard->path() == databasePath(shardB)) {
                QCOMPARE(merged.at("slurm_job_id").get<std::string>(), std::string("4242"));
                QCOMPARE(merged.at("slurm_array_task_id").get<std::string>(), std::string("3"));
            } else {
                QVERIFY(!merged.contains("slurm_job_id"));
            }
        }
        QCOMPARE(newIds.size(), report->runs.size());
    }
    // The shipped calibration came once per shard (its content differs), with its points on the merged record run.
    QCOMPARE(queryInt64(target.handle(), "SELECT count(*) FROM calibrations WHERE name = 'A (shipped)'"), 1);
    QCOMPARE(QString::fromStdString(describeCalibration(
                 target, queryInt64(target.handle(), "SELECT id FROM calibrations WHERE name = 'A (shipped)'"))),
        QString::fromStdString(
            describeCalibration(a, queryInt64(a.handle(), "SELECT id FROM calibrations WHERE run_id IS NULL"))));

    // Merging again adds nothing and says so; so does merging a copy of a shard (its id travels with it).
    const std::int64_t counter = target.changeCounter();
    const MergeReport again = mergeShard(target, shardA);
    QVERIFY(again.nothingAdded());
    QVERIFY(again.alreadyMerged == reportA.runs);
    QVERIFY(mergeShard(target, shardB).nothingAdded());
    const std::string copy = (dir.path() + "/copied/a").toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(copy)));
    a = RunStore::open(databasePath(shardB), OpenMode::ReadOnly); // closes shard A: its WAL is checkpointed
    QVERIFY(QFile::copy(QString::fromStdString(databasePath(shardA)), QString::fromStdString(databasePath(copy))));
    QVERIFY(mergeShard(target, copy).nothingAdded());
    QVERIFY(rowCounts(target.handle()) == after);
    QCOMPARE(target.changeCounter(), counter);
}

// A shard that cannot be merged is refused with its name and what was expected, and nothing is written: one whose
// unit was killed mid-run (its run left running), one with a failed run, one of a newer schema, the target itself
// and a copy of it.
void TestStore::mergeRefusesShardsItCannotMerge()
{
    QTemporaryDir dir;
    Figures figures {std::mt19937_64(std::random_device()())};
    const std::string killed = (dir.path() + "/killed").toStdString();
    const std::string failed = (dir.path() + "/failed").toStdString();
    const std::string newer = (dir.path() + "/newer").toStdString();
    {
        RunStore store = RunStore::open(databasePath(killed));
        finishedRunWithSteps(store, "done", "train", figures);
        const std::int64_t running = store.beginRun({"unit", "train", "{}", std::nullopt});
        store.appendSteps(running, {makeStep(1, figures.next())}); // then the unit is killed: no finishRun
    }
    {
        RunStore store = RunStore::open(databasePath(failed));
        const std::int64_t run = store.beginRun({"unit", "sensitivity", "{}", std::nullopt});
        store.finishRun(run, RunStatus::Failed, "out of memory");
    }
    {
        RunStore store = RunStore::open(databasePath(newer));
        finishedRunWithSteps(store, "unit", "train", figures);
    }
    {
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(databasePath(newer).c_str(), &db), SQLITE_OK);
        execute(db, ("PRAGMA user_version = " + std::to_string(currentSchemaVersion() + 1)).c_str());
        sqlite3_close(db);
    }
    const std::string main = (dir.path() + "/main").toStdString();
    RunStore target = RunStore::open(databasePath(main));
    finishedRunWithSteps(target, "own", "train", figures);
    const std::string copyOfTarget = (dir.path() + "/copy-of-main").toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(copyOfTarget)));
    execute(target.handle(), "PRAGMA wal_checkpoint(TRUNCATE)");
    QVERIFY(
        QFile::copy(QString::fromStdString(databasePath(main)), QString::fromStdString(databasePath(copyOfTarget))));
    const auto before = rowCounts(target.handle());
    const std::int64_t counter = target.changeCounter();
    const auto refused = [&](const std::string& shard, const std::string& named, const std::vector<std::string>& says) {
        try {
            mergeShard(target, shard);
            QFAIL(("merged " + shard).c_str());
        } catch (const InputError& error) {
            const std::string message = error.what();
            QVERIFY2(message.find(named) != std::string::npos, message.c_str());
            for (const std::string& text : says) {
                QVERIFY2(message.find(text) != std::string::npos, (message + " lacks: " + text).c_str());
            }
        }
        QVERIFY(rowCounts(target.handle()) == before);
        QCOMPARE(target.changeCounter(), counter);
    };
    refused(killed, databasePath(killed),
        {"run 2 (unit)", "killed mid-run",
            "resume its unit first (mismatch run --resume 2 --workspace " + killed + ")"});
    refused(failed, databasePath(failed), {"run 1 (unit)", "is failed", "resume its unit first"});
    refused(newer, databasePath(newer),
        {"newer", "schema version " + std::to_string(currentSchemaVersion() + 1),
            "expected a shard workspace of schema version " + std::to_string(currentSchemaVersion())});
    refused(main, databasePath(main), {"is the workspace being merged into"});
    refused(copyOfTarget, databasePath(copyOfTarget), {"copy of the workspace being merged into"});
    refused((dir.path() + "/absent").toStdString(), "absent", {"does not exist"});
    // The killed unit's shard merges once it is resumed and finished.
    {
        RunStore store = RunStore::open(databasePath(killed));
        store.reopenRun(2, 1);
        store.finishRun(2, RunStatus::Finished);
    }
    QCOMPARE(mergeShard(target, killed).runs.size(), size_t(2));

    // Calibration units (core/analysis/calibrate.h "Units"): units of one calibration merge; a unit of a calibration
    // of the same name with other options is refused, naming it and the unit already here.
    const auto unitShard = [&](const std::string& shard, const std::string& unit, const std::string& sigmas) {
        const std::string path = (dir.path() + "/").toStdString() + shard;
        RunStore store = RunStore::open(databasePath(path));
        const std::int64_t run = store.beginRun({"cal unit " + unit, "calibrate_unit",
            "{\"noise_sigmas\":" + sigmas + ",\"unit\":{\"label\":\"" + unit + "\"},\"sweep_runs\":[]}",
            std::nullopt});
        store.finishRun(run, RunStatus::Finished);
        return path;
    };
    // A unit with its training run, its screen and the run's checkpoint: the ids inside the unit's JSON (sweep_runs,
    // the screen's run_id and engine_weights) become the training run's id here, and checkpoints/run-ID here links
    // to the shard's checkpoint directory (checkpoints stay in the shard).
    const std::string trained = (dir.path() + "/unit-trained").toStdString();
    {
        RunStore store = RunStore::open(databasePath(trained));
        const std::int64_t training = finishedRunWithSteps(store, "cal/baseline/r1", "train", figures);
        const std::string id = std::to_string(training);
        const std::int64_t run = store.beginRun({"cal unit baseline/r1", "calibrate_unit",
            "{\"noise_sigmas\":[0.1],\"unit\":{\"label\":\"baseline\"},\"sweep_runs\":[" + id
                + "],\"screens\":[{\"run_id\":" + id + ",\"engine_weights\":\"checkpoints/run-" + id
                + "/step-00000020\"}]}",
            std::nullopt});
        store.finishRun(run, RunStatus::Finished);
        QVERIFY(QDir().mkpath(QString::fromStdString(trained + "/checkpoints/run-" + id + "/step-00000020")));
    }
    const MergeReport unitReport = mergeShard(target, trained);
    QCOMPARE(unitReport.runs.size(), size_t(2));
    QCOMPARE(unitReport.checkpointLinks, std::int64_t(1));
    const std::int64_t trainingHere = unitReport.runs[0].second;
    const nlohmann::json unitConfig = nlohmann::json::parse(target.run(unitReport.runs[1].second)->configJson);
    QCOMPARE(unitConfig["sweep_runs"], nlohmann::json::array({trainingHere}));
    QCOMPARE(unitConfig["screens"][0]["run_id"].get<std::int64_t>(), trainingHere);
    QCOMPARE(unitConfig["screens"][0]["engine_weights"].get<std::string>(),
        "checkpoints/run-" + std::to_string(trainingHere) + "/step-00000020");
    const QFileInfo link(dir.path() + "/main/checkpoints/run-" + QString::number(trainingHere));
    QVERIFY(link.isSymLink());
    QCOMPARE(link.symLinkTarget(),
        QString::fromStdString(trained + "/checkpoints/run-" + std::to_string(unitReport.runs[0].first)));
    QCOMPARE(mergeShard(target, unitShard("unit-a", "baseline/r0", "[0.1]")).runs.size(), size_t(1));
    QCOMPARE(mergeShard(target, unitShard("unit-b", "noise 0.1/r0", "[0.1]")).runs.size(), size_t(1));
    const std::string other = unitShard("unit-c", "baseline/r0", "[0.2]");
    const auto merged = rowCounts(target.handle());
    const std::int64_t mergedCounter = target.changeCounter();
    try {
        mergeShard(target, other);
        QFAIL("merged a unit of another calibration");
    } catch (const InputError& error) {
        const std::string message = error.what();
        QVERIFY2(message.find(databasePath(other)) != std::string::npos
                && message.find("run 1 (cal unit baseline/r0)") != std::string::npos
                && message.find("unit of another calibration 'cal'") != std::string::npos,
            message.c_str());
    }
    QVERIFY(rowCounts(target.handle()) == merged);
    QCOMPARE(target.changeCounter(), mergedCounter);
}

MISMATCH_TEST_GUILESS_MAIN(TestStore)
#include "test_store.moc"

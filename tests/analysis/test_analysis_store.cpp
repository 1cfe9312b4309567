// The analyses' store API: sensitivity scans and cells, calibrations (points, brackets, thresholds), admission
// decisions and prefix-shift analyses round-trip; bad values are refused with nothing written.
#include "core/analysis/compare_runs.h"
#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/sqlite_util.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace mismatch;
using namespace mismatch::store;

class TestAnalysisStore : public QObject {
    Q_OBJECT

private slots:
    void sensitivityScanRoundTrip();
    void sensitivityCellRefusals();
    void scanStatusFollowsItsRun();
    void calibrationRoundTripAndThreshold();
    void calibrationRefusalsWriteNothing();
    void bracketFromPointsOnHandMadePoints();
    void admissionDecisionRoundTrip();
    void admissionDecisionRefusals_data();
    void admissionDecisionRefusals();
    void prefixShiftRoundTrip();
    void pairingRefusesDifferentProblemsBothWays();
    void compareRunsPairsByProblemId();

private:
    RunStore openTemporary()
    {
        dirs_.push_back(std::make_unique<QTemporaryDir>());
        return RunStore::open((dirs_.back()->path() + "/workspace.db").toStdString());
    }
    std::vector<std::unique_ptr<QTemporaryDir>> dirs_;
};

namespace {

SensitivityCell cellOf(std::int64_t layer, const std::string& group, double mismatch, double added)
{
    SensitivityCell cell;
    cell.layer = layer;
    cell.moduleGroup = group;
    cell.mismatch = mismatch;
    cell.addedMismatch = added;
    return cell;
}

CalibrationPoint pointOf(std::int64_t run, std::int64_t step, double mismatch, double quality)
{
    CalibrationPoint point;
    point.runId = run;
    point.step = step;
    point.mismatch = mismatch;
    point.quality = quality;
    return point;
}

std::int64_t count(const RunStore& store, const char* table)
{
    return queryInt64(store.handle(), (std::string("SELECT count(*) FROM ") + table).c_str());
}

} // namespace

void TestAnalysisStore::sensitivityScanRoundTrip()
{
    RunStore store = openTemporary();
    const std::int64_t run = store.beginRun({"scan", "sensitivity", "{}", std::nullopt});
    SensitivityScanInfo info;
    info.runId = run;
    info.format = "fp8_e4m3/block128";
    info.bf16Unit = 0.00123;
    info.configJson = R"({"model":"m"})";
    const std::int64_t scanId = addSensitivityScan(store, info);
    SensitivityCell a {1, "down", 0.5, 0.49877, 0.4, 0.6, 0.45, 0.55, 321, 1.5};
    SensitivityCell b {0, "kv", 0.01, 0.00877, std::nullopt, std::nullopt, std::nullopt, std::nullopt, 300, 0.25};
    SensitivityCell c {kNoLayer, "embed_lm_head", 0.2, 0.19877, 0.1, 0.3, 0.15, 0.25, 310, 0.5};
    addSensitivityCell(store, scanId, a);
    addSensitivityCell(store, scanId, b);
    addSensitivityCell(store, scanId, c);
    const auto scan = sensitivityScan(store, scanId);
    QVERIFY(scan.has_value());
    QCOMPARE(scan->info.format, std::string("fp8_e4m3/block128"));
    QCOMPARE(*scan->info.bf16Unit, 0.00123);
    QCOMPARE(scan->info.status, std::string("running"));
    QCOMPARE(scan->info.cellCount, std::int64_t(3));
    QCOMPARE(scan->cells.size(), std::size_t(3));
    // Ordered by layer: the embedding cell (-1) first, then layer 0, then layer 1.
    QCOMPARE(scan->cells[0].moduleGroup, std::string("embed_lm_head"));
    QCOMPARE(scan->cells[1].moduleGroup, std::string("kv"));
    QVERIFY(!scan->cells[1].ciLow.has_value());
    QCOMPARE(scan->cells[2].layer, std::int64_t(1));
    QCOMPARE(*scan->cells[2].ciHigh, 0.6);
    QCOMPARE(*scan->cells[2].mismatchCiLow, 0.45);
    QCOMPARE(*scan->cells[2].tokens, std::int64_t(321));
    QCOMPARE(sensitivityScans(store).size(), std::size_t(1));
    QVERIFY(!sensitivityScan(store, scanId + 5).has_value());
}

void TestAnalysisStore::sensitivityCellRefusals()
{
    RunStore store = openTemporary();
    SensitivityScanInfo info;
    info.format = "int4/group128";
    const std::int64_t scanId = addSensitivityScan(store, info);
    addSensitivityCell(store, scanId, cellOf(0, "q", 0.1, 0.05));
    // Same cell twice, unknown scan, NaN, empty group: each refused, nothing more stored.
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityCell(store, scanId, cellOf(0, "q", 0.2, 0.1)));
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityCell(store, scanId + 1, cellOf(0, "k", 0.2, 0.1)));
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityCell(store, scanId, cellOf(0, "k", std::nan(""), 0.1)));
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityCell(store, scanId, cellOf(0, "", 0.2, 0.1)));
    QCOMPARE(count(store, "sensitivity_cells"), std::int64_t(1));
    SensitivityScanInfo bad;
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityScan(store, bad)); // no format
    bad.format = "x";
    bad.runId = 999;
    QVERIFY_THROWS_EXCEPTION(StoreError, addSensitivityScan(store, bad)); // unknown run
    QCOMPARE(count(store, "sensitivity_scans"), std::int64_t(1));
}

void TestAnalysisStore::scanStatusFollowsItsRun()
{
    RunStore store = openTemporary();
    const std::int64_t run = store.beginRun({"scan", "sensitivity", "{}", std::nullopt});
    SensitivityScanInfo info;
    info.runId = run;
    info.format = "int8/channel";
    const std::int64_t scanId = addSensitivityScan(store, info);
    store.finishRun(run, RunStatus::Cancelled, "cancelled");
    QCOMPARE(sensitivityScan(store, scanId)->info.status, std::string("cancelled"));
    SensitivityScanInfo standalone;
    standalone.format = "int8/channel";
    const std::int64_t other = addSensitivityScan(store, standalone);
    QCOMPARE(sensitivityScan(store, other)->info.status, std::string("finished"));
}

void TestAnalysisStore::calibrationRoundTripAndThreshold()
{
    RunStore store = openTemporary();
    const std::int64_t base = store.beginRun({"base", "train", "{}", std::nullopt});
    const std::int64_t noisy = store.beginRun({"noisy", "train", "{}", std::nullopt});
    CalibrationInfo info;
    info.name = "demo";
    info.student = "resources/models/arith-student";
    const std::vector<CalibrationPoint> points = {{base, 100, 0.01, 0.5, 0.0, -0.01, 0.01, "pass", {}, 1, {}, {}},
        {noisy, 100, 0.3, 0.7, 0.4, 0.1, 0.3, "fail", {}, 1, {}, {}}, {noisy, 200, 0.3, 0.8, 0.5, 0.2, 0.4, "fail", {}, 1, {}, {}}};
    const std::vector<CalibrationBracket> brackets = {{100, 0.01, 0.3, 0.008}, {200, std::nullopt, 0.3, std::nullopt}};
    const std::int64_t id = addCalibration(store, info, points, brackets);
    const auto read = calibration(store, id);
    QVERIFY(read.has_value());
    QCOMPARE(read->info.name, std::string("demo"));
    QCOMPARE(read->points.size(), std::size_t(3));
    QCOMPARE(read->brackets.size(), std::size_t(2));
    QCOMPARE(*read->brackets[0].largestPassing, 0.01);
    QVERIFY(!read->brackets[1].largestPassing.has_value());
    // The bracket's threshold (a margin was set) wins over its lower end.
    QCOMPARE(admissionThreshold(store, id, 100), 0.008);
    // Nothing passed at step 200; step 300 does not exist; no step with two brackets is ambiguous.
    QVERIFY_THROWS_EXCEPTION(StoreError, admissionThreshold(store, id, 200));
    QVERIFY_THROWS_EXCEPTION(StoreError, admissionThreshold(store, id, 300));
    QVERIFY_THROWS_EXCEPTION(StoreError, admissionThreshold(store, id, std::nullopt));
    QVERIFY_THROWS_EXCEPTION(StoreError, admissionThreshold(store, id + 1, 100));
    // A bracket set later replaces the step's bracket; without a threshold the lower end is used.
    setCalibrationBracket(store, id, {200, 0.2, 0.3, std::nullopt});
    QCOMPARE(admissionThreshold(store, id, 200), 0.2);
    addCalibrationPoints(store, id, {{base, 200, 0.01, 0.45, 0.0, -0.01, 0.02, "pass", {}, 1, {}, {}}});
    QCOMPARE(calibration(store, id)->points.size(), std::size_t(4));
    try {
        admissionThreshold(store, id, 300);
        QFAIL("expected a StoreError");
    } catch (const StoreError& error) {
        QVERIFY2(std::string(error.what()).find("100, 200") != std::string::npos, error.what());
    }
    QCOMPARE(calibrations(store).size(), std::size_t(1));
}

void TestAnalysisStore::calibrationRefusalsWriteNothing()
{
    RunStore store = openTemporary();
    const std::int64_t run = store.beginRun({"r", "train", "{}", std::nullopt});
    CalibrationInfo info;
    info.name = "c";
    info.student = "s";
    // A point of an unknown run: the whole calibration is refused.
    QVERIFY_THROWS_EXCEPTION(StoreError, addCalibration(store, info, {pointOf(run + 10, 1, 0.1, 0.1)}, {}));
    // A NaN mismatch.
    QVERIFY_THROWS_EXCEPTION(StoreError, addCalibration(store, info, {pointOf(run, 1, std::nan(""), 0.1)}, {}));
    // Two brackets at one step.
    QVERIFY_THROWS_EXCEPTION(StoreError, addCalibration(store, info, {}, {{1, 0.1, 0.2, 0.1}, {1, 0.1, 0.2, 0.1}}));
    CalibrationInfo unnamed;
    QVERIFY_THROWS_EXCEPTION(StoreError, addCalibration(store, unnamed, {}, {}));
    QCOMPARE(count(store, "calibrations"), std::int64_t(0));
    QCOMPARE(count(store, "calibration_points"), std::int64_t(0));
    QVERIFY_THROWS_EXCEPTION(StoreError, setCalibrationBracket(store, 42, {1, 0.1, 0.2, 0.1}));
}

void TestAnalysisStore::bracketFromPointsOnHandMadePoints()
{
    // Passing 0.05, 0.184; failing 0.39, 0.5 at step 100; another step ignored.
    const std::vector<CalibrationPoint> points = {{1, 100, 0.05, 0, {}, {}, {}, "pass", {}, 1, {}, {}},
        {2, 100, 0.184, 0, {}, {}, {}, "pass", {}, 1, {}, {}}, {3, 100, 0.39, 0, {}, {}, {}, "fail", {}, 1, {}, {}}, {4, 100, 0.5, 0, {}, {}, {}, "fail", {}, 1, {}, {}},
        {5, 200, 0.01, 0, {}, {}, {}, "fail", {}, 1, {}, {}}};
    const CalibrationBracket bracket = bracketFromPoints(points, 100);
    QCOMPARE(*bracket.largestPassing, 0.184);
    QCOMPARE(*bracket.smallestFailing, 0.39);
    QCOMPARE(*bracket.threshold, 0.184);
    const CalibrationBracket withMargin = bracketFromPoints(points, 100, 0.25);
    QCOMPARE(*withMargin.threshold, 0.184 * 0.75);
    const CalibrationBracket failedOnly = bracketFromPoints(points, 200);
    QVERIFY(!failedOnly.largestPassing && !failedOnly.threshold);
    QCOMPARE(*failedOnly.smallestFailing, 0.01);
    QVERIFY_THROWS_EXCEPTION(InputError, bracketFromPoints(points, 100, 1.0));
    // A non-monotone sweep: 2.9 passed although 0.98 failed; the budget's lower end stays below the failure.
    const std::vector<CalibrationPoint> uneven = {{1, 20, 0.0156, 0, {}, {}, {}, "pass", {}, 1, {}, {}},
        {2, 20, 0.193, 0, {}, {}, {}, "pass", {}, 1, {}, {}}, {3, 20, 0.98, 0, {}, {}, {}, "fail", {}, 1, {}, {}}, {4, 20, 2.9, 0, {}, {}, {}, "pass", {}, 1, {}, {}}};
    const CalibrationBracket conservative = bracketFromPoints(uneven, 20);
    QCOMPARE(*conservative.largestPassing, 0.193);
    QCOMPARE(*conservative.smallestFailing, 0.98);
    QCOMPARE(*conservative.threshold, 0.193);
}

void TestAnalysisStore::admissionDecisionRoundTrip()
{
    RunStore store = openTemporary();
    const std::int64_t run = store.beginRun({"admit", "admit", "{}", std::nullopt});
    AdmissionDecision decision;
    decision.runId = run;
    decision.candidateJson = R"({"name":"fp8"})";
    decision.checkpoint = "step-100";
    decision.mismatch = 0.02;
    decision.ciLow = 0.015;
    decision.ciHigh = 0.025;
    decision.threshold = 0.184;
    decision.decision = "admit";
    decision.seconds = 3.5;
    const std::int64_t id = addAdmissionDecision(store, decision);
    const auto all = admissionDecisions(store, run);
    QCOMPARE(all.size(), std::size_t(1));
    QCOMPARE(all[0].id, id);
    QCOMPARE(all[0].candidateJson, decision.candidateJson);
    QCOMPARE(all[0].ciHigh, 0.025);
    QCOMPARE(all[0].decision, std::string("admit"));
    QVERIFY(!all[0].toolVersion.empty()); // this build's version when none was given
    QVERIFY(!all[0].createdAt.empty());
    QCOMPARE(admissionDecisions(store, run + 1).size(), std::size_t(0));
    QCOMPARE(store.summary().admissionDecisions, std::int64_t(1));
}

void TestAnalysisStore::admissionDecisionRefusals_data()
{
    QTest::addColumn<QString>("field");
    QTest::newRow("decision word") << "decision";
    QTest::newRow("nan mismatch") << "mismatch";
    QTest::newRow("low above high") << "interval";
    QTest::newRow("unknown run") << "run";
    QTest::newRow("unknown calibration") << "calibration";
}

void TestAnalysisStore::admissionDecisionRefusals()
{
    QFETCH(QString, field);
    RunStore store = openTemporary();
    AdmissionDecision decision;
    decision.checkpoint = "c";
    decision.mismatch = 0.1;
    decision.ciLow = 0.05;
    decision.ciHigh = 0.15;
    decision.threshold = 0.2;
    decision.decision = "borderline";
    if (field == "decision") {
        decision.decision = "maybe";
    } else if (field == "mismatch") {
        decision.mismatch = std::nan("");
    } else if (field == "interval") {
        decision.ciLow = 0.2;
    } else if (field == "run") {
        decision.runId = 77;
    } else {
        decision.calibrationId = 5;
    }
    QVERIFY_THROWS_EXCEPTION(StoreError, addAdmissionDecision(store, decision));
    QCOMPARE(count(store, "admission_decisions"), std::int64_t(0));
}

void TestAnalysisStore::prefixShiftRoundTrip()
{
    RunStore store = openTemporary();
    PrefixShiftRecord record;
    record.model = "m";
    record.total = 0.3;
    record.perToken = 0.2;
    record.prefixShift = 0.1;
    record.bf16Unit = 0.001;
    record.pairs = 2;
    record.diverged = 1;
    record.detailsJson = R"({"divergence_histogram":[0,1]})";
    PrefixShiftPair diverged {"p0", {1, 2, 3}, 1, {5, 6, 7}, {0.1, 0.2, 0.3}, {5, 8}, {0.1, 0.25}};
    PrefixShiftPair identical {"p1", {4}, std::nullopt, {9}, {0.5}, {9}, {0.5}};
    const std::int64_t id = addPrefixShift(store, record, {diverged, identical});
    const auto read = prefixShift(store, id);
    QVERIFY(read.has_value());
    QCOMPARE(read->prefixShift, 0.1);
    QCOMPARE(read->detailsJson, record.detailsJson);
    const auto pairs = prefixShiftPairs(store, id);
    QCOMPARE(pairs.size(), std::size_t(2));
    QCOMPARE(pairs[0].referenceTokens, (std::vector<std::int64_t> {5, 8}));
    QCOMPARE(pairs[0].candidateKl, (std::vector<double> {0.1, 0.2, 0.3}));
    QCOMPARE(*pairs[0].firstDivergence, std::int64_t(1));
    QVERIFY(!pairs[1].firstDivergence.has_value());
    QCOMPARE(prefixShifts(store).size(), std::size_t(1));
    // A KL list that does not match its tokens is refused, nothing written.
    PrefixShiftPair broken {"p2", {1}, std::nullopt, {1, 2}, {0.1}, {1}, {0.1}};
    QVERIFY_THROWS_EXCEPTION(StoreError, addPrefixShift(store, record, {broken}));
    QCOMPARE(count(store, "prefix_shift_analyses"), std::int64_t(1));
}

namespace {

std::string refusal(const std::function<void()>& call)
{
    try {
        call();
    } catch (const Error& error) {
        return error.what();
    }
    return "accepted";
}

}  // namespace

void TestAnalysisStore::pairingRefusesDifferentProblemsBothWays()
{
    QTemporaryDir dir;
    RunStore store = RunStore::open((dir.path() + "/workspace.db").toStdString());
    const std::int64_t wide = store.beginRun({"wide", "train", "{}", std::nullopt});
    const std::int64_t narrow = store.beginRun({"narrow", "train", "{}", std::nullopt});
    const std::int64_t other = store.beginRun({"other", "train", "{}", std::nullopt});
    addEvaluation(store, wide, 10, std::nullopt, {{"p1", 1.0, true}, {"p2", 2.0, false}, {"p3", 3.0, true}});
    addEvaluation(store, narrow, 10, std::nullopt, {{"p2", 0.5, true}, {"p1", 0.25, true}});
    addEvaluation(store, other, 10, std::nullopt, {{"p1", 1.0, true}, {"p2", 2.0, false}, {"p4", 4.0, true}});
    const Evaluation w = *evaluationAt(store, wide, 10);
    const Evaluation n = *evaluationAt(store, narrow, 10);
    const Evaluation o = *evaluationAt(store, other, 10);

    // Same problems, other order: paired in the order's order.
    const std::vector<double> inOrder = qualitiesInOrderOf(w, w);
    QCOMPARE(inOrder, (std::vector<double> {1.0, 2.0, 3.0}));
    // A run that evaluated more problems than the baseline: refused (the old one-way check paired the common ones
    // and dropped p3 silently), and the other way round too.
    const std::string more = refusal([&] { qualitiesInOrderOf(w, n); });
    QVERIFY2(more.find("cover different problems") != std::string::npos, more.c_str());
    QVERIFY2(more.find("1 of run " + std::to_string(wide) + " (step 10)'s problems are missing from run "
                 + std::to_string(narrow) + " (step 10)'s (e.g. 'p3')")
            != std::string::npos,
        more.c_str());
    const std::string fewer = refusal([&] { qualitiesInOrderOf(n, w); });
    QVERIFY2(fewer.find("1 of run " + std::to_string(wide) + " (step 10)'s problems are missing from run "
                 + std::to_string(narrow) + " (step 10)'s (e.g. 'p3')")
            != std::string::npos,
        fewer.c_str());
    // Each side lacks one of the other's: both named.
    const std::string both = refusal([&] { qualitiesInOrderOf(w, o); });
    QVERIFY2(both.find("(e.g. 'p3')") != std::string::npos && both.find("(e.g. 'p4')") != std::string::npos,
        both.c_str());
    QVERIFY2(both.find("evaluate both runs on the same prompt set") != std::string::npos, both.c_str());
    // The comparison refuses the same, in both directions.
    metrics::FailureRuleOptions options;
    options.bootstrap.resamples = 200;
    QVERIFY(refusal([&] { analysis::compareEvaluations(w, n, options); }).find("cover different problems")
        != std::string::npos);
    QVERIFY(refusal([&] { analysis::compareEvaluations(n, w, options); }).find("cover different problems")
        != std::string::npos);
}

void TestAnalysisStore::compareRunsPairsByProblemId()
{
    QTemporaryDir dir;
    RunStore store = RunStore::open((dir.path() + "/workspace.db").toStdString());
    const std::int64_t run = store.beginRun({"run", "train", "{}", std::nullopt});
    const std::int64_t base = store.beginRun({"base", "train", "{}", std::nullopt});
    // The run stored its problems in another order than the baseline: pairing is by id.
    addEvaluation(store, run, 20, std::nullopt, {{"c", 1.0, true}, {"a", 1.2, true}, {"b", 0.8, false}});
    addEvaluation(store, base, 20, std::nullopt, {{"a", 1.0, true}, {"b", 0.5, true}, {"c", 0.5, false}});
    addEvaluation(store, base, 30, std::nullopt, {{"a", 1.0, true}});
    metrics::FailureRuleOptions options;
    options.relativeThreshold = 0.15;
    options.bootstrap.resamples = 2000;
    const analysis::RunComparison c = analysis::compareRuns(store, run, base, 20, options);
    QCOMPARE(c.problems, std::size_t(3));
    // By hand: Q_run = (1.2 + 0.8 + 1.0) / 3 = 1, Q_base = 2 / 3, relative change 0.5; the paired differences
    // (a 0.2, b 0.3, c 0.5) are all positive, so every bootstrap mean is too, and every drawn ratio is at least
    // problem a's 1.2 / 1.0 (a draw of a alone): the interval of the change lies at or above 0.2 > the 0.15 line.
    QVERIFY(qAbs(c.verdict.qualityRun - 1.0) < 1e-12);
    QVERIFY(qAbs(c.verdict.qualityBase - 2.0 / 3.0) < 1e-12);
    QVERIFY(qAbs(c.verdict.relativeChange - 0.5) < 1e-12);
    QVERIFY(c.verdict.difference.low >= 0.2 - 1e-12 && c.verdict.difference.high <= 0.5 + 1e-12);
    QVERIFY(c.verdict.change.low >= 0.2 - 1e-12 && c.verdict.change.high <= 1.0 + 1e-12);
    QCOMPARE(c.verdict.verdict, metrics::Verdict::Fail);
    // The same with the runs swapped: the rule is not symmetric (a fall in quality passes: every drawn ratio is at
    // most 1.0 / 1.2, a change below -16%).
    const analysis::RunComparison swapped = analysis::compareRuns(store, base, run, 20, options);
    QVERIFY(qAbs(swapped.verdict.relativeChange - (2.0 / 3.0 - 1.0)) < 1e-12);
    QCOMPARE(swapped.verdict.verdict, metrics::Verdict::Pass);

    const std::string noStep = refusal([&] { analysis::compareRuns(store, run, base, 30, options); });
    QVERIFY2(noStep.find("run " + std::to_string(run) + " (run) has no evaluation at step 30 (evaluated steps: 20)")
            != std::string::npos,
        noStep.c_str());
    const std::string noRun = refusal([&] { analysis::compareRuns(store, 999, base, 20, options); });
    QVERIFY2(noRun.find("has no run with id 999") != std::string::npos, noRun.c_str());
}

MISMATCH_TEST_MAIN(TestAnalysisStore)
#include "test_analysis_store.moc"

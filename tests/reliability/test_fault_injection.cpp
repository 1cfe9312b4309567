// Fault injection (issue #10 item 3): the four resumable jobs (a training run, a calibration, an admission
// check and a sensitivity scan) run by the `mismatch` binary are killed with SIGKILL at random moments and
// resumed with `--resume RUN` until they finish; the workspace must then hold exactly what an uninterrupted run of
// the same job (another workspace) holds: every step, evaluation (and its per-problem values), sensitivity scan and
// cell, admission decision, calibration, point and bracket once, with equal numbers (compared exactly), and pass
// PRAGMA integrity_check.
//
// Excluded from the comparison, all of them wall-clock: runs.started_at / finished_at, models.added_at,
// evaluations.created_at, sensitivity_scans.created_at, calibrations.created_at, admission_decisions.created_at and
// .seconds, sensitivity_cells.seconds, step_metrics.rollout_tokens_per_s / train_tokens_per_s / wall_time_s,
// the extras_json keys rollout_seconds / teacher_seconds / train_seconds / bf16_unit_seconds, and the calibration
// config_json key wall_seconds. Row ids of step_metrics and evaluations are not compared either: the steps and
// evaluations after a training run's checkpoint are deleted and stored again on resume (evaluation_problems are
// compared through (run, step)).
//
// A kill lands at a random moment: each attempt draws (from a seeded generator, printed) how many more stored
// units (steps + evaluations, cells, decisions) to wait for (0 or 1; 1 after two attempts without progress, so
// the loop ends) and a delay of 0 to 100-150 ms after that (0 units and a short delay: during start-up, model
// loading or a measurement not stored yet), and kills the process then; one that finishes first ends the loop.
//
// Environment:
//   MISMATCH_FAULT_KILLS  kills per job (default 5: 20 in all, about 40 s on two cores)
//   MISMATCH_FAULT_SEED   seed of the kill moments (default 20261129)
#include "reliability_support.h"
#include "tests/common/test_main.h"

#include "core/common/random.h"

#include <QElapsedTimer>
#include <QThread>

#include <csignal>
#include <map>
#include <optional>

using namespace reliability;

namespace {

struct Job {
    QString name;
    std::string kind; // the run kind that --resume takes
    QString command; // the subcommand
    QStringList fresh; // arguments of a fresh start
    std::string units; // SQL: how many result rows are stored (progress between kills)
    int maxDelayMs = 200;
    std::string keyTable; // the job's results: must hold at least `keyRows` rows (the comparison is not vacuous)
    std::size_t keyRows = 1;
};

std::int64_t storedUnits(const std::string& database, const std::string& sql)
{
    if (!fs::exists(database)) {
        return 0;
    }
    try {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        return store::queryInt64(reader.handle(), sql.c_str());
    } catch (const std::exception&) {
        return 0; // the writer is still creating the schema
    }
}

// The first run of `kind` and its status, if the job got as far as recording it.
std::optional<std::pair<std::int64_t, store::RunStatus>> jobRun(const std::string& database, const std::string& kind)
{
    if (!fs::exists(database)) {
        return std::nullopt;
    }
    try {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        for (const auto& run : reader.listRuns()) {
            if (run.kind == kind) {
                return std::make_pair(run.id, run.status);
            }
        }
    } catch (const StoreError&) {
    }
    return std::nullopt;
}

struct Totals {
    int kills = 0;
    qint64 milliseconds = 0;
};

} // namespace

class TestFaultInjection : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void trainingSurvivesKills();
    void calibrationSurvivesKills();
    void admissionSurvivesKills();
    void sensitivityScanSurvivesKills();
    void cleanupTestCase();

private:
    void killAndCompare(const Job& job);

    Inputs inputs_;
    int killsPerJob_ = 5;
    std::uint64_t seed_ = 20261129;
    std::map<QString, Totals> totals_;
};

void TestFaultInjection::initTestCase()
{
    QVERIFY2(QFileInfo::exists(kBinary), "the mismatch CLI is built with the tests");
    if (qEnvironmentVariableIsSet("MISMATCH_FAULT_KILLS")) {
        killsPerJob_ = qEnvironmentVariableIntValue("MISMATCH_FAULT_KILLS");
    }
    if (qEnvironmentVariableIsSet("MISMATCH_FAULT_SEED")) {
        seed_ = qEnvironmentVariable("MISMATCH_FAULT_SEED").toULongLong();
    }
    qInfo("fault injection: %d kills per job, seed %llu", killsPerJob_, static_cast<unsigned long long>(seed_));
}

void TestFaultInjection::killAndCompare(const Job& job)
{
    QElapsedTimer clock;
    clock.start();
    QTemporaryDir reference;
    const CliResult uninterrupted = runCli(reference.path(), job.fresh);
    QVERIFY2(uninterrupted.code == 0, uninterrupted.err.c_str());

    QTemporaryDir killed;
    const std::string database = store::databasePath(killed.path().toStdString());
    std::uint64_t jobSeed = seed_;
    for (const char c : job.name.toStdString()) { // FNV-1a of the job's name: each job its own kill moments
        jobSeed = (jobSeed ^ static_cast<unsigned char>(c)) * 0x100000001B3ULL;
    }
    SplitMix64 random(jobSeed);
    int kills = 0;
    int withoutProgress = 0;
    std::int64_t unitsAtLastKill = 0;
    std::optional<std::int64_t> runId;
    bool finished = false;
    while (!finished) {
        QProcess process;
        const QStringList arguments
            = runId ? QStringList {job.command, "--resume", QString::number(*runId)} : job.fresh;
        process.start(kBinary, QStringList {"--workspace", killed.path(), "--threads", "1"} + arguments);
        QVERIFY(process.waitForStarted());
        if (kills >= killsPerJob_) {
            QVERIFY(process.waitForFinished(300000));
            QVERIFY2(process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0,
                process.readAllStandardError().constData());
            break;
        }
        const std::int64_t more = withoutProgress >= 2 ? 1 : static_cast<std::int64_t>(random.below(2));
        const int delay = static_cast<int>(random.below(static_cast<std::uint64_t>(job.maxDelayMs) + 1));
        QElapsedTimer attempt;
        attempt.start();
        while (attempt.elapsed() < 300000 && process.state() == QProcess::Running
            && storedUnits(database, job.units) < unitsAtLastKill + more) {
            QThread::msleep(5);
        }
        QThread::msleep(static_cast<unsigned long>(delay));
        if (process.state() != QProcess::Running) {
            QVERIFY2(process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0,
                process.readAllStandardError().constData());
            qInfo("%s: finished before kill %d (%s)", qPrintable(job.name), kills + 1,
                arguments.contains("--resume") ? "resumed" : "fresh");
            break;
        }
        ::kill(static_cast<pid_t>(process.processId()), SIGKILL);
        QVERIFY(process.waitForFinished(30000));
        const std::int64_t units = storedUnits(database, job.units);
        ++kills;
        qInfo("%s: kill %d after %lld ms (waited for %lld more stored units, then %d ms): %lld units stored",
            qPrintable(job.name), kills, static_cast<long long>(attempt.elapsed()), static_cast<long long>(more), delay,
            static_cast<long long>(units));
        withoutProgress = units > unitsAtLastKill ? 0 : withoutProgress + 1;
        unitsAtLastKill = units;
        const auto run = jobRun(database, job.kind);
        if (run) {
            runId = run->first;
            if (run->second == store::RunStatus::Finished) {
                finished = true; // it completed inside the delay, before the kill landed
            } else {
                QVERIFY(run->second == store::RunStatus::Running); // killed: nobody marked it
            }
        }
    }
    QVERIFY2(kills >= 1, "the job finished before the first kill");
    if (kills < killsPerJob_) {
        qWarning("%s finished after %d of the %d planned kills", qPrintable(job.name), kills, killsPerJob_);
    }
    totals_[job.name] = {kills, clock.elapsed()};
    qInfo("%s: killed %d times, resumed each time; %lld ms in all", qPrintable(job.name), kills,
        static_cast<long long>(clock.elapsed()));

    const std::string referenceDatabase = store::databasePath(reference.path().toStdString());
    QCOMPARE(QString::fromStdString(integrity(database)), QString("ok"));
    QCOMPARE(QString::fromStdString(integrity(referenceDatabase)), QString("ok"));
    const auto expected = results(referenceDatabase);
    const auto actual = results(database);
    QVERIFY2(expected.at(job.keyTable).size() >= job.keyRows, (job.keyTable + " has too few rows").c_str());
    for (const auto& [table, rows] : expected) {
        const Rows& got = actual.at(table);
        if (got != rows) {
            for (std::size_t i = 0; i < std::max(got.size(), rows.size()); ++i) {
                const auto text = [](const Rows& r, std::size_t i) {
                    std::string line;
                    for (const auto& value : i < r.size() ? r[i] : std::vector<std::string> {"<none>"}) {
                        line += value.substr(0, 80) + " | ";
                    }
                    return line;
                };
                if (i >= got.size() || i >= rows.size() || got[i] != rows[i]) {
                    qWarning("%s row %zu\n  uninterrupted: %s\n  killed:        %s", table.c_str(), i,
                        text(rows, i).c_str(), text(got, i).c_str());
                    break;
                }
            }
        }
        QVERIFY2(got == rows, (job.name.toStdString() + ": table " + table + " differs").c_str());
    }
    const auto run = jobRun(database, job.kind);
    QVERIFY(run && run->second == store::RunStatus::Finished);
}

void TestFaultInjection::trainingSurvivesKills()
{
    killAndCompare({"training", "train", "train", inputs_.training(),
        "SELECT (SELECT count(*) FROM step_metrics) + (SELECT count(*) FROM evaluations)", 150, "step_metrics", 16});
}

void TestFaultInjection::calibrationSurvivesKills()
{
    killAndCompare({"calibration", "calibrate", "calibrate", inputs_.calibration(),
        "SELECT (SELECT count(*) FROM step_metrics) + (SELECT count(*) FROM evaluations)", 150, "calibration_points",
        4}); // 2 sweep runs (baseline, noise 0.5) x steps 2 and 6
}

void TestFaultInjection::admissionSurvivesKills()
{
    killAndCompare({"admission", "admit", "admit", inputs_.admission(), "SELECT count(*) FROM admission_decisions", 150,
        "admission_decisions", 9}); // 3 checkpoints x 3 candidates
}

void TestFaultInjection::sensitivityScanSurvivesKills()
{
    killAndCompare({"sensitivity", "sensitivity", "sensitivity", inputs_.sensitivity(),
        "SELECT (SELECT count(*) FROM sensitivity_scans) + (SELECT count(*) FROM sensitivity_cells)", 100,
        "sensitivity_cells", 16}); // 2 layers x (7 projections + kv), plus the embedding cell(s)
}

void TestFaultInjection::cleanupTestCase()
{
    int kills = 0;
    for (const auto& [name, total] : totals_) {
        qInfo("%s: %d kills, %.1f s", qPrintable(name), total.kills, total.milliseconds / 1000.0);
        kills += total.kills;
    }
    qInfo("fault injection: %d kills in all", kills);
}

MISMATCH_TEST_GUILESS_MAIN(TestFaultInjection)
#include "test_fault_injection.moc"

// Tests of the workspace run store: schema migrations, batches, live readers, crashes and bad files.
#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "core/store/find_run.h"
#include "core/store/run_store.h"
#include "core/store/schema.h"
#include "core/store/sqlite_util.h"
#include "tests/common/posix_locks.h"
#include "tests/common/test_main.h"

#include <QCryptographicHash>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>
#include <unistd.h>

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
    void openingAgainKeepsTheProcessLocks();
    void findRunByIdOrOneName();
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

MISMATCH_TEST_GUILESS_MAIN(TestStore)
#include "test_store.moc"

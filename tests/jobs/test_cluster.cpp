// Scale-out on Slurm (core/jobs/cluster.h, issue 43). The scripts a submission writes (dry runs: the array per stage,
// the advance step's --dependency=afterok, a study's step-to-step dependencies, the profile's lines), and then the
// real thing: a single-node Slurm cluster from Debian's slurmctld, slurmd and munge (tests/cluster/slurm_cluster.sh,
// started as root in a temporary directory, stopped by its daemons' pids) runs the demo calibration with seed
// replicates as array jobs; one unit is killed with scancel mid-run and `cluster resume` resubmits it; the merged
// calibration must equal the same calibration run in one local process, every stored number bit for bit (the units
// and the local run use one thread each: the same compute path). A sensitivity scan split by layers and an
// admission screen split by candidate x checkpoint go the same way. Without root or the packages the Slurm tests
// skip with the reason.
#include "core/jobs/cluster.h"
#include "core/jobs/job_file.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"

#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

using namespace mismatch;
using test::parseJson;
using test::runCli;

namespace {

std::string readText(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every row of `sql` as JSON objects (column name -> value; REAL as double, so that == is bit for bit).
nlohmann::json rows(const std::string& database, const std::string& sql)
{
    const store::RunStore store = store::RunStore::open(database, store::OpenMode::ReadOnly);
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(store.handle(), sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
        throw std::runtime_error(sql + ": " + sqlite3_errmsg(store.handle()));
    }
    nlohmann::json result = nlohmann::json::array();
    while (sqlite3_step(statement) == SQLITE_ROW) {
        nlohmann::json row = nlohmann::json::object();
        for (int i = 0; i < sqlite3_column_count(statement); ++i) {
            const std::string name = sqlite3_column_name(statement, i);
            switch (sqlite3_column_type(statement, i)) {
            case SQLITE_INTEGER: row[name] = sqlite3_column_int64(statement, i); break;
            case SQLITE_FLOAT: row[name] = sqlite3_column_double(statement, i); break;
            case SQLITE_NULL: row[name] = nullptr; break;
            default: row[name] = reinterpret_cast<const char*>(sqlite3_column_text(statement, i));
            }
        }
        result.push_back(row);
    }
    sqlite3_finalize(statement);
    return result;
}

// A stored record without what differs between two workspaces holding the same results: ids (rows are numbered in
// the order they were written) and wall times; a checkpoint path names its run by id.
nlohmann::json withoutIds(nlohmann::json value)
{
    if (value.is_array()) {
        for (auto& element : value) {
            element = withoutIds(element);
        }
    } else if (value.is_object()) {
        nlohmann::json kept = nlohmann::json::object();
        for (auto& [key, member] : value.items()) {
            const bool id = key == "id" || (key.size() > 3 && key.compare(key.size() - 3, 3, "_id") == 0)
                || key == "sweep_runs" || key == "seconds" || key == "wall_seconds" || key == "created_at"
                || key == "provenance" || key == "inputs" || key == "command";
            if (id) {
                continue;
            }
            if (key == "engine_weights" && member.is_string()) {
                kept[key] = std::regex_replace(member.get<std::string>(), std::regex("run-[0-9]+"), "run-N");
            } else {
                kept[key] = withoutIds(member);
            }
        }
        value = kept;
    }
    return value;
}

// The calibration stored with a run (the workspace's one) as comparable JSON: points, brackets and the record's
// replicate points, null comparisons, flags and runs.
nlohmann::json storedCalibration(const std::string& database)
{
    const nlohmann::json calibration
        = rows(database, "SELECT id, config_json FROM calibrations WHERE run_id IS NOT NULL");
    if (calibration.size() != 1) {
        throw std::runtime_error(database + ": expected one calibration, found " + std::to_string(calibration.size()));
    }
    const std::string id = std::to_string(calibration[0]["id"].get<std::int64_t>());
    nlohmann::json config = nlohmann::json::parse(calibration[0]["config_json"].get<std::string>());
    nlohmann::json replicatePoints = withoutIds(config["replicate_points"]);
    std::sort(replicatePoints.begin(), replicatePoints.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
        return std::tie(a["step"], a["label"], a["replicate"]) < std::tie(b["step"], b["label"], b["replicate"]);
    });
    nlohmann::json runs = withoutIds(config["runs"]);
    std::sort(runs.begin(), runs.end());
    return {{"points",
                withoutIds(rows(database, "SELECT * FROM calibration_points WHERE calibration_id = " + id
                        + " ORDER BY step, label"))},
        {"brackets", withoutIds(rows(database, "SELECT * FROM calibration_brackets WHERE calibration_id = " + id
                                                + " ORDER BY step"))},
        {"replicate_points", replicatePoints}, {"null_comparisons", config["null_comparisons"]},
        {"flags", config["flags"]}, {"runs", runs}};
}

// The first key whose values differ, for a failure message.
std::string firstDifference(const nlohmann::json& a, const nlohmann::json& b)
{
    for (const auto& [key, value] : a.items()) {
        if (!b.contains(key) || b.at(key) != value) {
            const std::string other = b.contains(key) ? b.at(key).dump() : "(missing)";
            return key + ": " + value.dump().substr(0, 600) + "\n    vs " + other.substr(0, 600);
        }
    }
    return "(equal)";
}

std::string integrity(const std::string& database)
{
    return rows(database, "PRAGMA integrity_check")[0].begin().value().get<std::string>();
}

// Under the sanitizers the units would train the demo pair with the instrumented CLI (5-10 times slower): the
// release suite runs the Slurm tests, the sanitizer suite the dry runs (.ci/run).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// The single-node cluster of tests/cluster/slurm_cluster.sh for one test function: started in `directory`, its
// SLURM_CONF set for this process (sbatch, squeue and scancel of the code under test read it), stopped at the end.
class SlurmCluster {
public:
    explicit SlurmCluster(const QString& directory) : directory_(directory) {}
    ~SlurmCluster() { stop(); }

    // "" when it started; else why it cannot run here (a skip).
    QString start()
    {
        if (kSanitized) {
            return "a sanitizer build (the release suite runs the Slurm tests)";
        }
        QProcess check;
        check.start("bash", {script(), "check"});
        check.waitForFinished(30000);
        if (check.exitCode() != 0) {
            return QString::fromUtf8(check.readAllStandardOutput()).trimmed();
        }
        QProcess start;
        start.start("bash", {script(), "start", directory_});
        start.waitForFinished(120000);
        const QString out = QString::fromUtf8(start.readAllStandardOutput()).trimmed();
        if (start.exitCode() != 0 || !out.startsWith("export SLURM_CONF=")) {
            stop();
            return "failed to start: " + out + QString::fromUtf8(start.readAllStandardError());
        }
        started_ = true;
        qputenv("SLURM_CONF", out.mid(QString("export SLURM_CONF=").size()).toUtf8());
        return {};
    }

    void stop()
    {
        if (started_) {
            QProcess::execute("bash", {script(), "stop", directory_});
            qunsetenv("SLURM_CONF");
            started_ = false;
        }
    }

private:
    static QString script() { return QStringLiteral(MISMATCH_SOURCE_DIR "/tests/cluster/slurm_cluster.sh"); }
    QString directory_;
    bool started_ = false;
};

nlohmann::json status(const std::string& submission)
{
    const auto result = runCli({"--json", "cluster", "status", submission});
    if (result.code != 0) {
        throw std::runtime_error("cluster status: " + result.err);
    }
    return parseJson(result.out);
}

// Polls the submission's status until `done` holds (every 2 s, at most `seconds`); the last status.
nlohmann::json waitFor(const std::string& submission, int seconds, const std::function<bool(const nlohmann::json&)>& done)
{
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    nlohmann::json last;
    while (std::chrono::steady_clock::now() < end) {
        last = status(submission);
        if (done(last)) {
            return last;
        }
        std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    return last;
}

int countState(const nlohmann::json& status, const std::string& state)
{
    int n = 0;
    for (const auto& unit : status["units"]) {
        n += unit["state"] == state ? 1 : 0;
    }
    return n;
}

} // namespace

class TestCluster : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        // The units run the CLI built with this test, one LibTorch thread each (the profile's cpus).
        profile_ = (dir_.path() + "/profile.yaml").toStdString();
        std::ofstream(profile_) << "mismatch: " << MISMATCH_CLI_PATH << "\ncpus: 1\nadvance_cpus: 1\n";
    }

    // A calibration's units are its first round, one array task each, and its decision step comes after them.
    void calibrationUnitsAreItsFirstRound()
    {
        const std::string file = (dir_.path() + "/cal.yaml").toStdString();
        std::ofstream(file) << "job: calibrate\nquick: true\nnoise: [0.1, 0.4]\nreplicates: 2\nmax_replicates: 3\n";
        const std::string submission = (dir_.path() + "/dry-cal").toStdString();
        const auto result = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "--json", "submit", file,
            "--executor", "slurm", "--dry-run", "--dir", submission, "--profile", profile_});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        std::vector<std::string> units;
        for (const auto& unit : json["units"]) {
            units.push_back(unit["label"].get<std::string>());
            QVERIFY2(unit["command"].get<std::string>().find("--unit") != std::string::npos, unit.dump().c_str());
        }
        // Replicate 0 of every configuration, then replicate 1, then the null group (replicates 3 and 4: after
        // max_replicates), as calibrate.h orders them.
        QCOMPARE(units, (std::vector<std::string> {"training run baseline/r0", "training run noise 0.1/r0",
                            "training run noise 0.4/r0", "training run baseline/r1", "training run noise 0.1/r1",
                            "training run noise 0.4/r1", "training run null/r3", "training run null/r4"}));
        const std::string stage = readText(submission + "/stage-1.sbatch");
        QVERIFY2(stage.find("#SBATCH --array=0-7\n") != std::string::npos, stage.c_str());
        QVERIFY2(stage.find("#SBATCH --cpus-per-task=1\n") != std::string::npos, stage.c_str());
        QVERIFY2(stage.find(std::string(MISMATCH_CLI_PATH) + " --threads") != std::string::npos, stage.c_str());
        QVERIFY2(stage.find("#SBATCH --mem=") != std::string::npos, stage.c_str());
        const std::string submit = readText(submission + "/submit-1.sh");
        QVERIFY2(submit.find("--dependency=afterok:$stage --kill-on-invalid-dep=yes advance-1.sbatch")
                != std::string::npos,
            submit.c_str());
        const nlohmann::json record = nlohmann::json::parse(readText(submission + "/submission.json"));
        QCOMPARE(record["final"]["parameters"]["from_units"], nlohmann::json(true));
        QVERIFY(QFile::exists(QString::fromStdString(submission + "/units/u001.yaml")));
        // A unit's file is a job file `mismatch run` reads.
        const jobs::JobFile unit = jobs::loadJobFile(submission + "/units/u008.yaml");
        QCOMPARE(unit.steps.front().spec.text("unit"), std::string("null/r4"));
        const nlohmann::json s = status(submission);
        QCOMPARE(countState(s, "pending"), 8);
        QCOMPARE(s["units"][0]["detail"].get<std::string>(), std::string("not submitted (dry run)"));
    }

    // A study's steps become sbatch jobs whose --dependency=afterok names the jobs of the steps they refer to; a
    // step shares the shard of the step it refers to; independent steps have no dependency.
    void studyDependenciesBecomeAfterok()
    {
        const std::string student = (dir_.path() + "/student").toStdString();
        test::writeTinyStudent(student);
        const std::string probe = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
        const std::string file = (dir_.path() + "/study.yaml").toStdString();
        std::ofstream(file) << "steps:\n"
                               "  - id: scan\n    job: sensitivity\n    model: student\n    format: int4\n"
                               "    prompts: " << probe << "\n    count: 4\n"
                               "  - id: other\n    job: sensitivity\n    model: student\n    format: int8\n"
                               "    prompts: " << probe << "\n    count: 4\n"
                               "  - id: build\n    job: recipe_build\n    scan: ${scan.scan_id}\n    budget: 1000\n"
                               "    out: built.yaml\n"
                               "  - id: screen\n    job: admit\n    students: [student]\n"
                               "    recipe: ${build.recipe_file}\n    threshold: 1000\n"
                               "    prompts: " << probe << "\n    count: 4\n";
        const std::string submission = (dir_.path() + "/dry-study").toStdString();
        const auto result = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "--json", "submit", file,
            "--executor", "slurm", "--dry-run", "--dir", submission, "--profile", profile_});
        QVERIFY2(result.code == 0, result.err.c_str());
        const std::string submit = readText(submission + "/submit-1.sh");
        // job1 scan, job2 other, job3 build (after scan), job4 screen (after build); the advance after all four.
        QVERIFY2(submit.find("job1=$(sbatch --parsable step-scan-1.sbatch)") != std::string::npos, submit.c_str());
        QVERIFY2(submit.find("job2=$(sbatch --parsable step-other-1.sbatch)") != std::string::npos, submit.c_str());
        QVERIFY2(submit.find("job3=$(sbatch --parsable --dependency=afterok:$job1 --kill-on-invalid-dep=yes "
                             "step-build-1.sbatch)")
                != std::string::npos,
            submit.c_str());
        QVERIFY2(submit.find("job4=$(sbatch --parsable --dependency=afterok:$job3 --kill-on-invalid-dep=yes "
                             "step-screen-1.sbatch)")
                != std::string::npos,
            submit.c_str());
        QVERIFY2(submit.find("--dependency=afterok:$job1:$job2:$job3:$job4 --kill-on-invalid-dep=yes advance-1.sbatch")
                != std::string::npos,
            submit.c_str());
        const nlohmann::json json = parseJson(result.out);
        std::map<std::string, std::string> shard;
        for (const auto& unit : json["units"]) {
            shard[unit["id"].get<std::string>()] = unit["shard"].get<std::string>();
        }
        QCOMPARE(shard, (std::map<std::string, std::string> {
                            {"scan", "scan"}, {"other", "other"}, {"build", "scan"}, {"screen", "scan"}}));
        // A step that refers to steps of two shards joins them: every step it reaches shares one shard, one after
        // another (its ${other.scan_id} must name a row of the shard it runs in).
        const std::string joined = (dir_.path() + "/joined.yaml").toStdString();
        std::ofstream(joined) << "steps:\n"
                                 "  - id: scan\n    job: sensitivity\n    model: student\n    format: int4\n"
                                 "    prompts: " << probe << "\n    count: 4\n"
                                 "  - id: other\n    job: sensitivity\n    model: student\n    format: int8\n"
                                 "    prompts: " << probe << "\n    count: 4\n"
                                 "  - id: build\n    job: recipe_build\n    scan: ${other.scan_id}\n    budget: 1000\n"
                                 "    out: built-${scan.scan_id}.yaml\n";
        const auto joinedResult = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "--json", "submit",
            joined, "--executor", "slurm", "--dry-run", "--dir", (dir_.path() + "/dry-joined").toStdString(),
            "--profile", profile_});
        QVERIFY2(joinedResult.code == 0, joinedResult.err.c_str());
        const nlohmann::json joinedUnits = parseJson(joinedResult.out)["units"]; // kept: the loop reads it
        for (const auto& unit : joinedUnits) {
            QCOMPARE(unit["shard"].get<std::string>(), std::string("scan"));
        }
        const std::string joinedSubmit = readText(dir_.path().toStdString() + "/dry-joined/submit-1.sh");
        QVERIFY2(joinedSubmit.find("--dependency=afterok:$job1 --kill-on-invalid-dep=yes step-other-1.sbatch")
                != std::string::npos,
            joinedSubmit.c_str());
        QVERIFY2(joinedSubmit.find("--dependency=afterok:$job2:$job1 --kill-on-invalid-dep=yes step-build-1.sbatch")
                    != std::string::npos
                || joinedSubmit.find("--dependency=afterok:$job1:$job2 --kill-on-invalid-dep=yes step-build-1.sbatch")
                    != std::string::npos,
            joinedSubmit.c_str());
        // A study step naming a calibration stored in the workspace cannot run in a fresh shard: refused, named.
        const std::string stored = (dir_.path() + "/stored.yaml").toStdString();
        std::ofstream(stored) << "steps:\n  - id: screen\n    job: admit\n    students: [student]\n    calibration: 1\n";
        const auto refused = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "submit", stored,
            "--executor", "slurm", "--dry-run", "--profile", profile_});
        QCOMPARE(refused.code, 1);
        QVERIFY2(refused.err.find("step screen") != std::string::npos
                && refused.err.find("names a calibration or scan stored in the workspace") != std::string::npos,
            refused.err.c_str());
    }

    // The profile's settings become the scripts' #SBATCH lines and set-up lines; a bad profile is refused by file,
    // place and what was expected.
    void profileSetsTheScripts()
    {
        const std::string profile = (dir_.path() + "/gpu.yaml").toStdString();
        std::ofstream(profile) << "partition: gpu\naccount: lab42\ntime: \"04:00:00\"\ngpus: 2\ngpu_option: gres\n"
                                  "gres_type: h100\ncpus: 8\nmemory: 64G\nrequeue: false\n"
                                  "sbatch: [\"--qos=normal\"]\nsetup: [\"module load cuda/13\"]\n"
                                  "mismatch: /opt/mismatch/bin/mismatch\nadvance_time: \"00:30:00\"\n";
        const std::string file = (dir_.path() + "/cal-gpu.yaml").toStdString();
        std::ofstream(file) << "job: calibrate\nquick: true\nnoise: [0.1]\nreplicates: 1\nmax_replicates: 1\n";
        const std::string submission = (dir_.path() + "/dry-gpu").toStdString();
        const auto result = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "submit", file,
            "--executor", "slurm", "--dry-run", "--dir", submission, "--profile", profile});
        QVERIFY2(result.code == 0, result.err.c_str());
        const std::string stage = readText(submission + "/stage-1.sbatch");
        for (const char* line : {"#SBATCH --partition=gpu\n", "#SBATCH --account=lab42\n", "#SBATCH --time=04:00:00\n",
                 "#SBATCH --gres=gpu:h100:2\n", "#SBATCH --cpus-per-task=8\n", "#SBATCH --mem=64G\n",
                 "#SBATCH --no-requeue\n", "#SBATCH --qos=normal\n", "module load cuda/13\n",
                 "exec /opt/mismatch/bin/mismatch --threads"}) {
            QVERIFY2(stage.find(line) != std::string::npos, (std::string(line) + " in\n" + stage).c_str());
        }
        const std::string advance = readText(submission + "/advance-1.sbatch");
        QVERIFY2(advance.find("#SBATCH --time=00:30:00\n") != std::string::npos, advance.c_str());
        QVERIFY2(advance.find("--gres") == std::string::npos, advance.c_str()); // the merge needs no GPU

        std::ofstream(profile) << "partition: gpu\ngpus: two\n";
        const auto refused = runCli({"--workspace", (dir_.path() + "/ws-dry").toStdString(), "submit", file,
            "--executor", "slurm", "--dry-run", "--profile", profile});
        QCOMPARE(refused.code, 1);
        QVERIFY2(refused.err.find(profile) != std::string::npos && refused.err.find("line 2") != std::string::npos
                && refused.err.find("expected a whole number") != std::string::npos,
            refused.err.c_str());
    }

    // The demo calibration with seed replicates on a real single-node Slurm: one unit killed mid-run and resumed;
    // the merged calibration equals the local run's.
    void slurmCalibrationEqualsTheLocalRun()
    {
        SlurmCluster cluster(dir_.path() + "/slurm-cal");
        const QString why = cluster.start();
        if (!why.isEmpty()) {
            QSKIP(qPrintable("no single-node Slurm cluster here: " + why));
        }
        // The demo pair's run, cut to 24 steps of 16 prompts evaluated at 12 and 24 on 64 held-out problems (the
        // training runs are the test's cost); one noise level: 6 units in the first round. max_replicates 3: the
        // stopping rule may add a round, which the advance step submits as stage 2.
        const std::string resources = std::string(MISMATCH_SOURCE_DIR) + "/resources";
        const std::string runFile = (dir_.path() + "/demo-short.yaml").toStdString();
        std::ofstream(runFile) << "name: demo-short\nstudent: " << resources << "/models/arith-student\nteacher: "
                               << resources << "/models/arith-teacher\nprompts: " << resources
                               << "/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
                                  "rollout: {sampling: {temperature: 1.0, max_tokens: 40, seed: 1}}\n"
                                  "optimizer: {learning_rate: 5.0e-4, warmup_steps: 5}\n"
                                  "batch: {prompts_per_step: 16, samples_per_prompt: 1}\nsteps: 24\n"
                                  "evaluation: {every: 12, prompts: "
                               << resources << "/prompts/arith-heldout.jsonl, count: 64, max_tokens: 40}\n"
                                  "seed: 20261110\n";
        const std::string file = (dir_.path() + "/cal-slurm.yaml").toStdString();
        std::ofstream(file) << "job: calibrate\nrun_file: " << runFile
                            << "\nnoise: [0.4]\nreplicates: 2\nmax_replicates: 3\n";
        const std::string workspace = (dir_.path() + "/ws-slurm").toStdString();
        const std::string submission = (dir_.path() + "/sub-cal").toStdString();
        const auto submitted = runCli({"--workspace", workspace, "--json", "submit", file, "--executor", "slurm",
            "--dir", submission, "--profile", profile_});
        QVERIFY2(submitted.code == 0, submitted.err.c_str());
        // The same calibration in one local process (one thread, as the units), while the cluster works.
        QProcess local;
        local.start(MISMATCH_CLI_PATH, {"--threads", "1", "--workspace", dir_.path() + "/ws-local", "run",
                                           QString::fromStdString(file)});

        // Kill unit u002 (noise 0.4, seed 1) after its checkpoint at step 12, while it runs.
        const std::string job = status(submission)["units"][1]["slurm_job"].get<std::string>();
        const std::string log = submission + "/logs/stage-1-" + job + ".out";
        const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(5);
        while (readText(log).find("step 16/24") == std::string::npos && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        QVERIFY2(readText(log).find("step 16/24") != std::string::npos, readText(log).c_str());
        QCOMPARE(QProcess::execute("scancel", {QString::fromStdString(job)}), 0);
        // The other units finish; the killed one is failed; the advance step (afterok) is cancelled with it.
        nlohmann::json s = waitFor(submission, 600, [](const nlohmann::json& s) {
            return countState(s, "done") + countState(s, "merged") == 5 && countState(s, "failed") == 1;
        });
        QVERIFY2(countState(s, "failed") == 1, s.dump(2).c_str());
        QCOMPARE(s["units"][1]["state"].get<std::string>(), std::string("failed"));
        QVERIFY2(s["units"][1]["detail"].get<std::string>().find("CANCELLED") != std::string::npos
                || s["units"][1]["detail"].get<std::string>().find("no result") != std::string::npos,
            s.dump(2).c_str());
        QVERIFY(!s["finished"].get<bool>());

        const auto resumed = runCli({"--json", "cluster", "resume", submission});
        QVERIFY2(resumed.code == 0, resumed.err.c_str());
        const nlohmann::json again = parseJson(resumed.out);
        QCOMPARE(again["units"].size(), std::size_t(1)); // only the killed unit
        QCOMPARE(again["units"][0]["id"].get<std::string>(), std::string("u002"));
        s = waitFor(submission, 900, [](const nlohmann::json& s) { return s["finished"].get<bool>(); });
        QVERIFY2(s["finished"].get<bool>(), s.dump(2).c_str());
        // The resumed unit continued its run from the checkpoint of step 12 in its shard.
        const nlohmann::json resumedRun = rows(submission + "/shards/u002/workspace.db",
            "SELECT provenance_json FROM runs WHERE kind = 'train'");
        QCOMPARE(resumedRun.size(), std::size_t(1));
        QVERIFY2(resumedRun[0]["provenance_json"].get<std::string>().find("resumed") != std::string::npos,
            resumedRun[0].dump().c_str());

        QVERIFY(local.waitForFinished(15 * 60 * 1000));
        QVERIFY2(local.exitCode() == 0, local.readAllStandardError().constData());
        const nlohmann::json merged = storedCalibration(workspace + "/workspace.db");
        const nlohmann::json single = storedCalibration((dir_.path() + "/ws-local/workspace.db").toStdString());
        QVERIFY2(merged == single, firstDifference(single, merged).c_str());
        QCOMPARE(integrity(workspace + "/workspace.db"), std::string("ok"));
        // Nothing duplicated: each unit's two runs once, and the calibration's run.
        const std::size_t units = s["units"].size();
        QCOMPARE(rows(workspace + "/workspace.db", "SELECT id FROM runs").size(), 2 * units + 1);
        QCOMPARE(rows(workspace + "/workspace.db", "SELECT * FROM merged_runs").size(), 2 * units);
        const auto twice = runCli({"--workspace", workspace, "--json", "store", "merge", submission + "/shards/u001"});
        QVERIFY2(twice.code == 0, twice.err.c_str());
        QCOMPARE(parseJson(twice.out)["shards"][0]["status"].get<std::string>(), std::string("already merged"));
        const auto advanced = runCli({"--workspace", workspace, "cluster", "advance", submission});
        QVERIFY2(advanced.out.find("already finished") != std::string::npos, advanced.out.c_str());
    }

    // A sensitivity scan split by layers and an admission screen split by candidate x checkpoint on the same
    // cluster: merged, they equal the local runs (the scan's cells, the screen's decisions).
    void slurmScanAndScreenEqualTheLocalRuns()
    {
        SlurmCluster cluster(dir_.path() + "/slurm-scan");
        const QString why = cluster.start();
        if (!why.isEmpty()) {
            QSKIP(qPrintable("no single-node Slurm cluster here: " + why));
        }
        const std::string student = (dir_.path() + "/scan-student").toStdString();
        const std::string older = (dir_.path() + "/scan-older").toStdString();
        test::writeTinyStudent(student);
        test::writeTinyStudent(older, 22);
        const std::string probe = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
        const std::string scan = (dir_.path() + "/scan.yaml").toStdString();
        std::ofstream(scan) << "job: sensitivity\nmodel: scan-student\nformat: int8\nprompts: " << probe
                            << "\ncount: 4\nmax_tokens: 8\nresamples: 300\n";
        const std::string candidates = (dir_.path() + "/candidates.yaml").toStdString();
        std::ofstream(candidates) << "- name: plain\n- name: noisy\n  noise: 0.05\n  noise_seed: 3\n";
        const std::string screen = (dir_.path() + "/screen.yaml").toStdString();
        std::ofstream(screen) << "job: admit\nstudents: [scan-older, scan-student]\ncandidates: candidates.yaml\n"
                                 "threshold: 0.01\nprompts: " << probe << "\ncount: 4\nmax_tokens: 8\nresamples: 300\n";
        const std::string workspace = (dir_.path() + "/ws-scan").toStdString();
        for (const std::string& file : {scan, screen}) {
            const std::string name = QFileInfo(QString::fromStdString(file)).baseName().toStdString();
            const auto submitted = runCli({"--workspace", workspace, "submit", file, "--executor", "slurm", "--dir",
                dir_.path().toStdString() + "/sub-" + name, "--profile", profile_});
            QVERIFY2(submitted.code == 0, submitted.err.c_str());
            const auto local = runCli({"--threads", "1", "--workspace", (dir_.path() + "/ws-scan-local").toStdString(),
                "run", file});
            QVERIFY2(local.code == 0, local.err.c_str());
        }
        for (const char* name : {"/sub-scan", "/sub-screen"}) {
            const nlohmann::json s = waitFor(
                dir_.path().toStdString() + name, 600, [](const nlohmann::json& s) { return s["finished"].get<bool>(); });
            QVERIFY2(s["finished"].get<bool>(), s.dump(2).c_str());
        }
        const std::string merged = workspace + "/workspace.db";
        const std::string single = (dir_.path() + "/ws-scan-local/workspace.db").toStdString();
        // The assembled scan (the one whose run was not a unit's) against the local scan, cell by cell.
        const std::string cells = "SELECT c.* FROM sensitivity_cells c JOIN sensitivity_scans s ON s.id = c.scan_id "
                                  "JOIN runs r ON r.id = s.run_id WHERE json_extract(r.config_json, '$.layers') IS NULL "
                                  "ORDER BY c.layer, c.module_group";
        const nlohmann::json mergedCells = withoutIds(rows(merged, cells));
        QVERIFY(!mergedCells.empty());
        QVERIFY2(mergedCells == withoutIds(rows(single, cells)),
            firstDifference(withoutIds(rows(single, cells))[0], mergedCells[0]).c_str());
        const std::string unit = "SELECT s.bf16_unit FROM sensitivity_scans s JOIN runs r ON r.id = s.run_id WHERE "
                                 "json_extract(r.config_json, '$.layers') IS NULL";
        QCOMPARE(rows(merged, unit), rows(single, unit));
        // The screen: one decision per candidate and checkpoint, the same numbers and verdicts.
        const std::string decisions = "SELECT json_extract(candidate_json, '$.name') AS candidate, checkpoint, "
                                      "mismatch, ci_low, ci_high, threshold, decision FROM admission_decisions "
                                      "ORDER BY candidate, checkpoint";
        QCOMPARE(rows(merged, decisions).size(), std::size_t(4));
        QVERIFY2(rows(merged, decisions) == rows(single, decisions),
            (rows(single, decisions).dump(1) + "\nvs\n" + rows(merged, decisions).dump(1)).c_str());
        QCOMPARE(integrity(merged), std::string("ok"));
    }

private:
    QTemporaryDir dir_;
    std::string profile_;
};

MISMATCH_TEST_GUILESS_MAIN(TestCluster)
#include "test_cluster.moc"

// Failure modes of the resumable jobs (issue #10 items 3 and 5), the `mismatch` binary in child processes:
//   - writes that fail: with a file size limit (RLIMIT_FSIZE, set in the child before exec) the sensitivity,
//     admit and calibrate commands exit 1 (not killed by SIGXFSZ) with an error naming the database and what the
//     system refused, and the workspace database keeps exactly its content (every table, every column) and passes
//     integrity_check, for fresh jobs and for the resume of a killed scan; with the database closed cleanly (the
//     first write needs a shared-memory index larger than the limit) and with a reader holding it open (the
//     index exists, the first WAL frame crosses the limit: the job's own first transaction fails). The same with
//     a read-only workspace (chmod -R a-w; the store treats a file or directory without write bits as read-only
//     even for root, so this runs as root too);
//   - resume refusals: a finished run, a run of another kind, an input file changed since the start (named);
//   - Ctrl-C (SIGINT) cancels a scan and an admission check, marks the run cancelled, and `--resume` completes it
//     with the results of an uninterrupted run;
//   - memory: a model that cannot fit (MISMATCH_MEMORY_LIMIT_BYTES set low) is refused before loading with the
//     estimate and what is available, and the workspace stays usable.
#include "reliability_support.h"
#include "tests/common/test_main.h"

#include "core/analysis/rollout_measure.h"
#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/model/transformer.h"

#include <QDir>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QThread>

#include <sys/resource.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>

using namespace reliability;

namespace {

constexpr rlim_t kFileSizeLimit = 4096; // below the first WAL frame and the shared-memory index: no write lands

void limitFileSize()
{
    rlimit limit {kFileSizeLimit, kFileSizeLimit};
    ::setrlimit(RLIMIT_FSIZE, &limit);
}

bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

std::int64_t count(const std::string& database, const std::string& sql)
{
    try {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        return store::queryInt64(reader.handle(), sql.c_str());
    } catch (const std::exception&) {
        return 0;
    }
}

// Starts the job, waits until `sql` counts at least `atLeast`, sends `signal`, waits for the end.
int interruptWhen(const QString& workspace, const QStringList& arguments, const std::string& sql, std::int64_t atLeast,
    int signal)
{
    const std::string database = store::databasePath(workspace.toStdString());
    QProcess process;
    process.start(kBinary, QStringList {"--workspace", workspace, "--threads", "1"} + arguments);
    if (!process.waitForStarted()) {
        return -1;
    }
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < 300000 && process.state() == QProcess::Running
        && (!fs::exists(database) || count(database, sql) < atLeast)) {
        QThread::msleep(5);
    }
    ::kill(static_cast<pid_t>(process.processId()), signal);
    process.waitForFinished(120000);
    return process.exitStatus() == QProcess::NormalExit ? process.exitCode() : -signal;
}

} // namespace

class TestFailureModes : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void fileSizeLimitLeavesTheWorkspaceAsItWas();
    void readOnlyWorkspaceLeavesItAsItWas();
    void resumeRefusesFinishedForeignAndChangedRuns();
    void ctrlCLeavesScanAndCheckResumable();
    void modelThatCannotFitIsRefusedBeforeLoading();
    void noisyConfigurationCountsItsWeightCopy();
    void deviceJobIsCheckedAgainstTheDevicesMemory();

private:
    // A workspace with content: an admission check and a sensitivity scan, both finished.
    void prepareWorkspace(const QString& workspace);
    void expectCleanFailures(const QString& workspace, const std::function<void()>& modifier, const char* what,
        const std::vector<std::string>& messageParts);

    Inputs inputs_;
};

void TestFailureModes::initTestCase()
{
    QVERIFY2(QFileInfo::exists(kBinary), "the mismatch CLI is built with the tests");
    qInfo("tests run as uid %d", static_cast<int>(::geteuid()));
}

void TestFailureModes::prepareWorkspace(const QString& workspace)
{
    const CliResult admit = runCli(workspace, inputs_.admission());
    QVERIFY2(admit.code == 0, admit.err.c_str());
    const CliResult scan = runCli(workspace, inputs_.sensitivity());
    QVERIFY2(scan.code == 0, scan.err.c_str());
}

void TestFailureModes::expectCleanFailures(const QString& workspace, const std::function<void()>& modifier,
    const char* what, const std::vector<std::string>& messageParts)
{
    const std::string database = store::databasePath(workspace.toStdString());
    const Rows before = dumpAll(database);
    QVERIFY(before.size() > 10);
    std::vector<QStringList> commands = {inputs_.sensitivity(), inputs_.admission(), inputs_.calibration()};
    {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        QVERIFY(reader.run(3) && reader.run(3)->status == store::RunStatus::Running);
    } // closed: a reader of this test holding the database open is the second case's setting only
    commands.push_back({"sensitivity", "--resume", "3"}); // the killed scan
    for (const QStringList& arguments : commands) {
        const CliResult result = runCli(workspace, arguments, modifier);
        qInfo("%s, `mismatch %s`: exit %d, stderr: %s", what, qPrintable(arguments.first()), result.code,
            result.err.c_str());
        QVERIFY2(result.status == QProcess::NormalExit, "the process was killed (SIGXFSZ?) instead of reporting");
        QCOMPARE(result.code, 1);
        QVERIFY2(contains(result.err, "mismatch: error: "), result.err.c_str());
        QVERIFY2(contains(result.err, database), result.err.c_str()); // names the file
        for (const std::string& part : messageParts) {
            QVERIFY2(contains(result.err, part), result.err.c_str()); // says what failed
        }
        QVERIFY2(dumpAll(database) == before, "the workspace database changed");
        QCOMPARE(QString::fromStdString(integrity(database)), QString("ok"));
    }
    // Still usable: the same command without the fault works.
    const CliResult summary = runCli(workspace, {"store", "info"});
    QVERIFY2(summary.code == 0, summary.err.c_str());
}

void TestFailureModes::fileSizeLimitLeavesTheWorkspaceAsItWas()
{
    QTemporaryDir workspace;
    prepareWorkspace(workspace.path());
    // A scan killed after its run was recorded (run 3), for the resume under the limit.
    QCOMPARE(interruptWhen(workspace.path(), inputs_.sensitivity(), "SELECT count(*) FROM sensitivity_cells", 20,
                 SIGKILL),
        -SIGKILL);
    // The previous writer closed the database cleanly: no WAL, so any write needs a new file past the limit.
    expectCleanFailures(workspace.path(), limitFileSize, "RLIMIT_FSIZE 4096", {"File too large"});
    // A reader keeps the WAL index open: the child opens the store and fails at its first transaction.
    const store::RunStore reader
        = store::RunStore::open(store::databasePath(workspace.path().toStdString()), store::OpenMode::ReadOnly);
    QCOMPARE(reader.listRuns().size(), std::size_t(3));
    expectCleanFailures(workspace.path(), limitFileSize, "RLIMIT_FSIZE 4096 with a reader", {"File too large"});
}

void TestFailureModes::readOnlyWorkspaceLeavesItAsItWas()
{
    QTemporaryDir workspace;
    prepareWorkspace(workspace.path());
    QCOMPARE(interruptWhen(workspace.path(), inputs_.sensitivity(), "SELECT count(*) FROM sensitivity_cells", 20,
                 SIGKILL),
        -SIGKILL);
    const QString path = workspace.path();
    QCOMPARE(QProcess::execute("chmod", {"-R", "a-w", path}), 0);
    expectCleanFailures(path, {}, "read-only workspace", {"read-only"});
    QCOMPARE(QProcess::execute("chmod", {"-R", "u+w", path}), 0);
}

void TestFailureModes::resumeRefusesFinishedForeignAndChangedRuns()
{
    QTemporaryDir workspace;
    prepareWorkspace(workspace.path()); // run 1: admit, run 2: sensitivity, both finished
    CliResult result = runCli(workspace.path(), {"sensitivity", "--resume", "2"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, "run 2") && contains(result.err, "has finished"), result.err.c_str());
    result = runCli(workspace.path(), {"sensitivity", "--resume", "1"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, "is a 'admit' run"), result.err.c_str());
    result = runCli(workspace.path(), {"calibrate", "--resume", "1"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, "not a 'calibrate' run"), result.err.c_str());
    result = runCli(workspace.path(), {"admit", "--resume", "99"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, "run 99") && contains(result.err, "no such run"), result.err.c_str());
    // --resume with the options of a fresh start is a usage error.
    QCOMPARE(runCli(workspace.path(), {"sensitivity", "--resume", "2", "--format", "int8"}).code, 2);

    // Inputs changed after a kill: a copied prompt set (sensitivity) and a recipe (admission).
    const std::string prompts = inputs_.write("changing-prompts.jsonl", [&] {
        std::ifstream in(inputs_.probe);
        std::stringstream text;
        text << in.rdbuf();
        return text.str();
    }());
    QStringList scan = inputs_.sensitivity();
    scan[scan.indexOf("--prompts") + 1] = QString::fromStdString(prompts);
    const std::string database = store::databasePath(workspace.path().toStdString());
    QCOMPARE(interruptWhen(workspace.path(), scan, "SELECT count(*) FROM runs", 3, SIGKILL), -SIGKILL);
    std::ofstream(prompts, std::ios::app) << "\n";
    const Rows before = dumpAll(database);
    result = runCli(workspace.path(), {"sensitivity", "--resume", "3"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, prompts) && contains(result.err, "changed since sensitivity run 3"), result.err.c_str());
    QVERIFY(dumpAll(database) == before); // refused before anything was written

    const std::string recipe = inputs_.write("changing-recipe.yaml", "version: 1\nkv_cache: {format: fp8_e4m3}\n");
    const std::string candidates = inputs_.write("changing-candidates.yaml", "- name: kv\n  recipe: " + recipe + "\n");
    QStringList check = inputs_.admission();
    check[check.indexOf("--candidates") + 1] = QString::fromStdString(candidates);
    QCOMPARE(interruptWhen(workspace.path(), check, "SELECT count(*) FROM runs", 4, SIGKILL), -SIGKILL);
    std::ofstream(recipe, std::ios::app) << "# edited\n";
    result = runCli(workspace.path(), {"admit", "--resume", "4"});
    QCOMPARE(result.code, 1);
    QVERIFY2(contains(result.err, recipe) && contains(result.err, "changed since admit run 4"), result.err.c_str());
}

void TestFailureModes::ctrlCLeavesScanAndCheckResumable()
{
    QTemporaryDir reference;
    prepareWorkspace(reference.path()); // run 1: admit, run 2: sensitivity, uninterrupted
    QTemporaryDir workspace;
    const std::string database = store::databasePath(workspace.path().toStdString());
    QCOMPARE(interruptWhen(workspace.path(), inputs_.admission(), "SELECT count(*) FROM admission_decisions", 2, SIGINT),
        130);
    {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        QVERIFY(reader.run(1)->status == store::RunStatus::Cancelled);
    }
    CliResult result = runCli(workspace.path(), {"admit", "--resume", "1"});
    QVERIFY2(result.code == 0, result.err.c_str());
    QVERIFY2(contains(result.err, "admit run 1"), result.err.c_str()); // the run id, printed at the start
    QCOMPARE(interruptWhen(workspace.path(), inputs_.sensitivity(), "SELECT count(*) FROM sensitivity_cells", 3, SIGINT),
        130);
    {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        QVERIFY(reader.run(2)->status == store::RunStatus::Cancelled);
    }
    result = runCli(workspace.path(), {"sensitivity", "--resume", "2"});
    QVERIFY2(result.code == 0, result.err.c_str());
    const auto expected = results(store::databasePath(reference.path().toStdString()));
    const auto actual = results(database);
    for (const auto& [table, rows] : expected) {
        QVERIFY2(actual.at(table) == rows, table.c_str());
    }
    QCOMPARE(QString::fromStdString(integrity(database)), QString("ok"));
}

void TestFailureModes::modelThatCannotFitIsRefusedBeforeLoading()
{
    // In process: the check is made by model::loadWeights, the one place every loader goes through.
    const model::ModelConfig config = model::loadConfig(inputs_.student + "/config.json");
    std::int64_t parameters = 0;
    for (const auto& tensor : model::expectedTensors(config)) {
        std::int64_t elements = 1;
        for (const auto size : tensor.shape) {
            elements *= size;
        }
        parameters += elements;
    }
    const auto available = model::availableMemory();
    QVERIFY(available && available->bytes > 0);
    qInfo("available memory: %llu bytes (%s)", static_cast<unsigned long long>(available->bytes),
        available->source.c_str());
    ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", "100000", 1);
    try {
        model::loadWeights(inputs_.student, config);
        ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");
        QFAIL("a model larger than the limit was loaded");
    } catch (const ResourceError& error) {
        const std::string message = error.what();
        qInfo("%s", message.c_str());
        QVERIFY2(contains(message, "model " + inputs_.student), message.c_str());
        QVERIFY2(contains(message, "(" + std::to_string(parameters * 4) + " bytes)"), message.c_str());
        QVERIFY2(contains(message, std::to_string(parameters) + " parameters as float32"), message.c_str());
        QVERIFY2(contains(message, "(100000 bytes) is available (MISMATCH_MEMORY_LIMIT_BYTES)"), message.c_str());
        QVERIFY2(contains(message, "nothing was loaded"), message.c_str());
    }
    ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", std::to_string(parameters * 4).c_str(), 1);
    QCOMPARE(model::loadWeights(inputs_.student, config).numel(), parameters); // exactly enough: loads
    ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");

    // The CLI: refused with the message, nothing stored; the workspace stays usable.
    QTemporaryDir workspace;
    prepareWorkspace(workspace.path());
    const std::string database = store::databasePath(workspace.path().toStdString());
    const Rows before = dumpAll(database);
    QProcessEnvironment limited = QProcessEnvironment::systemEnvironment();
    limited.insert("MISMATCH_MEMORY_LIMIT_BYTES", "100000");
    for (const QStringList& arguments : {inputs_.sensitivity(), inputs_.admission()}) {
        // A KV cache within the limit (a larger --kv-memory is refused first, issue 17): the model is what does not fit.
        const CliResult refused
            = runCli(workspace.path(), arguments + QStringList {"--kv-memory", "64KiB"}, {}, limited);
        QCOMPARE(refused.code, 1);
        QVERIFY2(contains(refused.err, "needs about") && contains(refused.err, "is available (MISMATCH_MEMORY_LIMIT_BYTES)")
                && contains(refused.err, "nothing was loaded"),
            refused.err.c_str());
        QVERIFY2(dumpAll(database) == before, "a refused model changed the workspace");
    }
    const CliResult usable = runCli(workspace.path(), inputs_.sensitivity());
    QVERIFY2(usable.code == 0, usable.err.c_str());
    QCOMPARE(QString::fromStdString(integrity(database)), QString("ok"));
}

void TestFailureModes::deviceJobIsCheckedAgainstTheDevicesMemory()
{
    // A job on a CUDA device holds everything there: the total against the device's free memory (here set by
    // MISMATCH_DEVICE_MEMORY_LIMIT_BYTES, which replaces cudaMemGetInfo, so that this runs without a GPU), and the
    // largest checkpoint read on the host first against the host's memory. On the CPU the host holds it all.
    const std::vector<model::MemoryItem> items = {{"weights of /m as stored", 1000, true},
        {"teacher weights as stored", 400, true}, {"engine weights", 500}, {"KV cache", 300}};
    struct Limits {
        const char* device;
        const char* host;
    };
    const auto check = [&](const Limits& limits, const at::Device& device) {
        ::setenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES", limits.device, 1);
        ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", limits.host, 1);
        std::string message;
        try {
            model::checkJobFits("admission check", items, device);
        } catch (const ResourceError& error) {
            message = error.what();
        }
        ::unsetenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES");
        ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");
        return message;
    };
    // 2200 bytes on the device: 2199 free is refused, naming the device, every item and the source.
    std::string message = check({"2199", "1000000"}, at::Device(at::kCUDA, 0));
    QVERIFY2(contains(message, "admission check needs about") && contains(message, " on cuda:0 (weights of /m as stored")
            && contains(message, "KV cache") && contains(message, "(2199 bytes) is free there (MISMATCH_DEVICE_MEMORY_LIMIT_BYTES)")
            && contains(message, "nothing was loaded"),
        message.c_str());
    QVERIFY(check({"2200", "1000000"}, at::Device(at::kCUDA, 0)).empty());
    // The host needs only the largest staged checkpoint for a device job.
    message = check({"1000000", "999"}, at::Device(at::kCUDA, 1));
    QVERIFY2(contains(message, "(loading for cuda:1)") && contains(message, "weights of /m as stored, read on the host first")
            && contains(message, "(999 bytes) is available (MISMATCH_MEMORY_LIMIT_BYTES)"),
        message.c_str());
    QVERIFY(check({"1000000", "1000"}, at::Device(at::kCUDA, 1)).empty());
    // On the CPU the device's limit plays no part and the host holds all 2200 bytes.
    QVERIFY(contains(check({"1", "2199"}, at::Device(at::kCPU)), "(2199 bytes) is available (MISMATCH_MEMORY_LIMIT_BYTES)"));
    QVERIFY(check({"1", "2200"}, at::Device(at::kCPU)).empty());
    // A malformed limit names the variable.
    ::setenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES", "12 GB", 1);
    try {
        model::availableDeviceMemory(at::Device(at::kCUDA, 0));
        ::unsetenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES");
        QFAIL("a malformed device memory limit was accepted");
    } catch (const InputError& error) {
        ::unsetenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES");
        QCOMPARE(QString::fromStdString(error.file()), QString("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES"));
    }
}

MISMATCH_TEST_GUILESS_MAIN(TestFailureModes)
// What an analysis builds beside its engines is in its memory check: a configuration with weight noise holds noisy
// copies of the tensors it cannot noise in place (engine::noisyCopyBytes, counted by hand in test_engine): on the CPU
// with a spill directory on disk only those its engine reads in another dtype than stored; on a device, or with the
// spill directory in memory, every tensor noise reaches.
void TestFailureModes::noisyConfigurationCountsItsWeightCopy()
{
    const model::ModelConfig studentConfig = model::loadConfig(inputs_.student + "/config.json");
    const at::ScalarType stored = model::scalarType(engine::storedWeights(inputs_.student).dtype);
    const auto refusal = [this](const std::vector<analysis::NoisyEngine>& noisy, const at::Device& device) {
        ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", "1000", 1);
        ::setenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES", "1000", 1);
        analysis::MeasureSettings settings;
        settings.device = device;
        std::string message;
        try {
            analysis::checkAnalysisMemory("the admission check", {inputs_.student}, {nullptr}, settings, 1, noisy);
        } catch (const ResourceError& error) {
            message = error.what();
        }
        ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");
        ::unsetenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES");
        return message;
    };
    const QByteArray savedTmpdir = qgetenv("TMPDIR");
    const bool hadTmpdir = qEnvironmentVariableIsSet("TMPDIR");
    QTemporaryDir spill(QDir::currentPath() + "/spill-XXXXXX"); // the build tree, on a disk (not a tmpfs /tmp)
    QVERIFY(spill.isValid());
    qputenv("TMPDIR", spill.path().toUtf8());
    const std::string plain = refusal({}, at::Device(at::kCPU));
    const std::string inPlace = refusal({{nullptr, "*", true}}, at::Device(at::kCPU));
    const std::string apart = refusal({{nullptr, "*", false}}, at::Device(at::kCPU)); // a prefix-shift engine
    const std::string noisyOnGpu = refusal({{nullptr, "*", true}}, at::Device(at::kCUDA, 0));
    QVERIFY2(contains(plain, "needs about") && !contains(plain, "noisy weight copies"), plain.c_str());
    QVERIFY2(contains(inPlace,
                 "noisy weight copies (the rest noised in place, spilled to " + spill.path().toStdString() + "): "
                     + formatByteSize(engine::noisyCopyBytes(studentConfig, nullptr, "*", stored, true))),
        inPlace.c_str());
    const std::string whole
        = "noisy weight copies: " + formatByteSize(engine::noisyCopyBytes(studentConfig, nullptr, "*", stored, false));
    QVERIFY2(contains(apart, whole), apart.c_str());
    QVERIFY2(contains(noisyOnGpu, whole), noisyOnGpu.c_str());
    struct statfs system {};
    if (::statfs("/dev/shm", &system) == 0 && system.f_type == 0x01021994) {
        qputenv("TMPDIR", "/dev/shm");
        const std::string inMemory = refusal({{nullptr, "*", true}}, at::Device(at::kCPU));
        QVERIFY2(contains(inMemory, whole), inMemory.c_str());
    }
    if (hadTmpdir) {
        qputenv("TMPDIR", savedTmpdir);
    } else {
        qunsetenv("TMPDIR");
    }

    // Fitting FP8 KV scales builds a BF16 engine beside the candidate's: on a device it holds its own weights
    // there (counted), on the CPU it shares the candidate's BF16 view (not counted). The device check runs against
    // MISMATCH_DEVICE_MEMORY_LIMIT_BYTES, so no GPU is needed.
    const model::ModelConfig config = model::loadConfig(inputs_.student + "/config.json");
    const quant::RecipePlan fp8Kv
        = quant::resolveRecipe(quant::loadRecipe(std::string(MISMATCH_RESOURCE_DIR) + "/recipes/fp8-kv.yaml"), config);
    const auto withKvPlan = [&](const at::Device& device) {
        ::setenv("MISMATCH_MEMORY_LIMIT_BYTES", "1000", 1);
        ::setenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES", "1000", 1);
        analysis::MeasureSettings settings;
        settings.device = device;
        std::string message;
        try {
            analysis::checkAnalysisMemory("the admission check", {inputs_.student}, {nullptr, &fp8Kv}, settings);
        } catch (const ResourceError& error) {
            message = error.what();
        }
        ::unsetenv("MISMATCH_MEMORY_LIMIT_BYTES");
        ::unsetenv("MISMATCH_DEVICE_MEMORY_LIMIT_BYTES");
        return message;
    };
    const std::string onCpu = withKvPlan(at::Device(at::kCPU));
    const std::string onGpu = withKvPlan(at::Device(at::kCUDA, 0));
    QVERIFY2(contains(onCpu, "needs about") && !contains(onCpu, "KV-scale calibration engine"), onCpu.c_str());
    QVERIFY2(contains(onGpu, "on cuda:0") && contains(onGpu, "KV-scale calibration engine: "), onGpu.c_str());
}

#include "test_failure_modes.moc"

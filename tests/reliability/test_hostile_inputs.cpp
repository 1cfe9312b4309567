// Hostile inputs (issue #17): the cases of hostile_cases.yaml (data: files to make, the command, what the error
// must say) run through the `mismatch` command line in this process (cli::run, what main() calls), one after
// another. Each must end within 10 s with
// exit 1 or 2 (or the status the case names), a message naming the file or option and the problem, no "internal
// error", and the workspace exactly as it was (every table and column, integrity_check, the files beside the
// database). The header of hostile_cases.yaml describes the format.
//
// Two situations need a process kept alive and are tests of their own below: a training run killed by SIGTERM
// (left "running") resumes and finishes in the time of its remaining steps, and a resume while the run's writer
// still lives is refused with the writer named, the writer going on undisturbed.
// LibTorch before Qt: Qt's `slots` macro breaks ATen's headers.
#include <ATen/ATen.h>

#include "reliability_support.h"
#include "tests/common/test_main.h"

#include "app/cli/cli.h"
#include "core/common/input_limits.h"
#include "core/common/yaml_scalar.h"
#include "core/model/safetensors.h"
#include "core/store/run_lock.h"
#include "core/train/run_config.h"

#include <QElapsedTimer>
#include <QThread>

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <limits>

using namespace reliability;

namespace {

constexpr double kDefaultSeconds = 10.0;

struct CaseResult {
    std::string name;
    std::vector<std::string> failures; // empty: the case passed
    double seconds = 0.0;
    int exitCode = -1;
    std::string err;
};

std::string replaceAll(std::string text, const std::string& from, const std::string& to)
{
    for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
    }
    return text;
}

// YAML data -> JSON values for {json: ..., set: ...} edits (plain scalars by the YAML core schema).
nlohmann::json toJson(const YAML::Node& node)
{
    if (node.IsMap()) {
        nlohmann::json object = nlohmann::json::object();
        for (const auto& entry : node) {
            object[entry.first.Scalar()] = toJson(entry.second);
        }
        return object;
    }
    if (node.IsSequence()) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& item : node) {
            list.push_back(toJson(item));
        }
        return list;
    }
    switch (io::scalarKind(node)) {
    case io::ScalarKind::Integer:
        return std::stoll(node.Scalar());
    case io::ScalarKind::Number:
        return io::numberOf(node);
    case io::ScalarKind::Boolean:
        return node.Scalar() == "true";
    case io::ScalarKind::Null:
        return nullptr;
    case io::ScalarKind::String:
        break;
    }
    return node.Scalar();
}

void writeText(const fs::path& path, const std::string& text)
{
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// A file's bytes; "" for anything that is not a regular file (reading a FIFO would block the test).
std::string readBytes(const fs::path& path)
{
    std::error_code error;
    if (!fs::is_regular_file(path, error)) {
        return {};
    }
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// Every file and directory under `root` (relative names), optionally without the WAL files SQLite makes and
// removes on its own for a healthy database.
std::set<std::string> listing(const fs::path& root, bool ignoreWal)
{
    std::set<std::string> names;
    std::error_code error;
    for (fs::recursive_directory_iterator it(root, error), end; !error && it != end; it.increment(error)) {
        const std::string name = it->path().lexically_relative(root).string(); // no status: a link may loop
        const bool wal = name.size() > 4
            && (name.compare(name.size() - 4, 4, "-wal") == 0 || name.compare(name.size() - 4, 4, "-shm") == 0);
        if (!(ignoreWal && wal)) {
            names.insert(name);
        }
    }
    return names;
}

void makeDatabase(const fs::path& path, const YAML::Node& statements)
{
    fs::create_directories(path.parent_path());
    sqlite3* db = nullptr;
    sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
    for (const auto& statement : statements) {
        char* message = nullptr;
        if (sqlite3_exec(db, statement.Scalar().c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
            qWarning("setup SQL %s: %s", statement.Scalar().c_str(), message ? message : "?");
            sqlite3_free(message);
        }
    }
    sqlite3_close(db);
}

// One element of a tensor of DIR/model.safetensors set to `value`, or a tensor added as a scaled copy of another.
void editWeights(const fs::path& directory, const YAML::Node& spec)
{
    const std::string file = (directory / "model.safetensors").string();
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    {
        const auto loaded = model::SafetensorsFile::open(file);
        for (const model::TensorInfo& info : loaded->tensors()) {
            tensors.emplace_back(info.name, loaded->load(info.name));
        }
    }
    if (spec["tensor"]) {
        const std::string value = spec["value"].Scalar();
        const double number = value == "nan" ? std::numeric_limits<double>::quiet_NaN()
            : value == "inf"                 ? std::numeric_limits<double>::infinity()
            : value == "-inf"                ? -std::numeric_limits<double>::infinity()
                                             : std::stod(value);
        for (auto& [name, tensor] : tensors) {
            if (name == spec["tensor"].Scalar()) {
                at::Tensor element = tensor;
                for (const auto& index : spec["index"]) {
                    element = element.select(0, index.as<std::int64_t>());
                }
                element.fill_(number);
            }
        }
    } else {
        at::Tensor copy;
        for (const auto& [name, tensor] : tensors) {
            if (name == spec["like"].Scalar()) {
                copy = tensor * spec["scale"].as<double>();
            }
        }
        tensors.emplace_back(spec["add_tensor"].Scalar(), copy);
    }
    model::writeSafetensors(file, tensors, {{"format", "pt"}});
}

class Suite {
public:
    fs::path root;
    std::map<std::string, std::string> placeholders;
    std::string seeded; // the seeded workspace directory

    std::string expand(const std::string& text, const fs::path& caseDirectory, const fs::path& workspace) const
    {
        std::string out = replaceAll(text, "@dir@", caseDirectory.string());
        out = replaceAll(out, "@ws@", workspace.string());
        out = replaceAll(out, "@xff@", "\xff");
        for (const auto& [key, value] : placeholders) {
            out = replaceAll(out, key, value);
        }
        return out;
    }

    fs::path resolve(const std::string& path, const fs::path& caseDirectory, const fs::path& workspace) const
    {
        const fs::path expanded(expand(path, caseDirectory, workspace));
        return expanded.is_absolute() ? expanded : caseDirectory / expanded;
    }

    void makeFile(const YAML::Node& spec, const fs::path& caseDirectory, const fs::path& workspace,
        std::vector<fs::path>& readOnly) const
    {
        const fs::path path = resolve(spec["path"].Scalar(), caseDirectory, workspace);
        fs::create_directories(path.parent_path()); // e.g. ws/checkpoints/run-2/ for a copied checkpoint
        const auto expand = [&](const std::string& text) { return this->expand(text, caseDirectory, workspace); };
        if (spec["text"]) {
            writeText(path, expand(spec["text"].Scalar()));
        } else if (spec["parts"]) {
            std::string text;
            for (const auto& part : spec["parts"]) {
                if (part.IsScalar()) {
                    text += expand(part.Scalar());
                } else {
                    const std::string unit = expand(part["repeat"].Scalar());
                    const auto times = part["times"].as<std::size_t>();
                    text.reserve(text.size() + unit.size() * times);
                    for (std::size_t i = 0; i < times; ++i) {
                        text += unit;
                    }
                }
            }
            writeText(path, text);
        } else if (spec["fifo"]) {
            fs::remove(path);
            ::mkfifo(path.c_str(), 0644);
        } else if (spec["symlink"]) {
            fs::remove(path);
            fs::create_symlink(expand(spec["symlink"].Scalar()), path);
        } else if (spec["copy"]) {
            fs::copy(expand(spec["copy"].Scalar()), path, fs::copy_options::recursive);
        } else if (spec["json"]) {
            nlohmann::json document = nlohmann::json::parse(readBytes(expand(spec["json"].Scalar())));
            for (const auto& entry : spec["set"]) {
                document[nlohmann::json::json_pointer(entry.first.Scalar())] = toJson(entry.second);
            }
            for (const auto& pointer : spec["remove"]) {
                const nlohmann::json::json_pointer where(pointer.Scalar());
                document[where.parent_pointer()].erase(where.back());
            }
            fs::remove(path);
            writeText(path, document.dump(2));
        } else if (spec["tensor"] || spec["add_tensor"]) {
            editWeights(path, spec);
        } else if (spec["database"]) {
            makeDatabase(path, spec["database"]);
        } else if (spec["bytes_of"]) {
            writeText(path, readBytes(expand(spec["bytes_of"].Scalar())).substr(0, spec["keep"].as<std::size_t>()));
        } else if (spec["chmod"]) {
            ::chmod(path.c_str(), 0555);
            readOnly.push_back(path);
        }
    }

    CaseResult run(const YAML::Node& spec, int index) const
    {
        CaseResult result;
        result.name = spec["name"].Scalar();
        const fs::path caseDirectory = root / "cases" / (std::to_string(index) + "-" + result.name);
        const bool ownWorkspace = spec["workspace"] && spec["workspace"].Scalar() == "own";
        const fs::path workspace = caseDirectory / "ws";
        fs::create_directories(workspace);
        if (!ownWorkspace) {
            fs::copy(fs::path(seeded) / "workspace.db", workspace / "workspace.db");
        }
        std::vector<fs::path> readOnly;
        try {
            for (const auto& file : spec["files"]) {
                makeFile(file, caseDirectory, workspace, readOnly);
            }
        } catch (const std::exception& error) {
            result.failures.push_back(std::string("setting up the case failed: ") + error.what());
            return result;
        }
        const std::string database = store::databasePath(workspace.string());
        // What must not change: the workspace's content (its bytes when the tool refuses to read it), its files,
        // and the files the case names.
        Rows before;
        std::string bytesBefore;
        if (ownWorkspace) {
            bytesBefore = readBytes(database);
        } else {
            before = dumpAll(database);
        }
        const std::set<std::string> filesBefore = listing(workspace, !ownWorkspace);
        std::map<std::string, std::string> unchanged;
        for (const auto& path : spec["unchanged"]) {
            const std::string file = expand(path.Scalar(), caseDirectory, workspace);
            unchanged[file] = readBytes(file);
        }

        std::vector<std::string> runArguments;
        for (const auto& argument : spec["run"]) {
            runArguments.push_back(expand(argument.Scalar(), caseDirectory, workspace));
        }
        const auto has = [&](const char* option) {
            return std::find(runArguments.begin(), runArguments.end(), option) != runArguments.end();
        };
        std::vector<std::string> arguments = {"mismatch"};
        if (!has("--workspace")) {
            arguments.insert(arguments.end(), {"--workspace", workspace.string()});
        }
        if (!has("--threads")) {
            arguments.insert(arguments.end(), {"--threads", "1"});
        }
        arguments.insert(arguments.end(), runArguments.begin(), runArguments.end());
        std::vector<std::string> variables;
        for (const auto& entry : spec["env"]) {
            variables.push_back(entry.first.Scalar());
            ::setenv(entry.first.Scalar().c_str(), entry.second.Scalar().c_str(), 1);
        }
        const double limit = spec["seconds"] ? spec["seconds"].as<double>() : kDefaultSeconds;
        QElapsedTimer timer;
        timer.start();
        std::ostringstream out;
        std::ostringstream err;
        bool threw = false;
        try {
            result.exitCode = cli::run(arguments, out, err);
        } catch (const std::exception& error) { // cli::run reports everything itself; this would be a defect
            threw = true;
            err << "exception escaped cli::run: " << error.what();
        }
        result.seconds = static_cast<double>(timer.elapsed()) / 1000.0;
        result.err = err.str();
        for (const std::string& variable : variables) {
            ::unsetenv(variable.c_str());
        }
        for (const fs::path& path : readOnly) {
            ::chmod(path.c_str(), 0755);
        }

        const auto fail = [&result](const std::string& what) { result.failures.push_back(what); };
        if (result.seconds > limit) {
            fail("took " + std::to_string(result.seconds) + " s (limit " + std::to_string(limit) + " s)");
        }
        if (threw) {
            fail("an exception escaped the command line");
        }
        if (spec["exit"]) {
            if (result.exitCode != spec["exit"].as<int>()) {
                fail("exit status " + std::to_string(result.exitCode) + ", expected " + spec["exit"].Scalar());
            }
        } else if (result.exitCode != 1 && result.exitCode != 2) {
            fail("exit status " + std::to_string(result.exitCode) + ", expected 1 or 2");
        }
        if (result.err.find("internal error") != std::string::npos) {
            fail("an internal error");
        }
        for (const auto& part : spec["message"]) {
            const std::string text = expand(part.Scalar(), caseDirectory, workspace);
            if (result.err.find(text) == std::string::npos) {
                fail("the message does not contain \"" + text + "\"");
            }
        }
        for (const auto& part : spec["absent"]) {
            if (result.err.find(part.Scalar()) != std::string::npos) {
                fail("the message contains \"" + part.Scalar() + "\"");
            }
        }
        const std::set<std::string> filesAfter = listing(workspace, !ownWorkspace);
        if (filesAfter != filesBefore) {
            std::string added;
            for (const std::string& name : filesAfter) {
                if (!filesBefore.count(name)) {
                    added += " +" + name;
                }
            }
            for (const std::string& name : filesBefore) {
                if (!filesAfter.count(name)) {
                    added += " -" + name;
                }
            }
            fail("the workspace's files changed:" + added);
        }
        if (ownWorkspace) {
            if (readBytes(database) != bytesBefore) {
                fail("the workspace database's bytes changed");
            }
        } else {
            try {
                if (dumpAll(database) != before) {
                    fail("the workspace's content changed");
                }
                if (integrity(database) != "ok") {
                    fail("integrity_check: " + integrity(database));
                }
            } catch (const std::exception& error) {
                fail(std::string("the workspace cannot be read afterwards: ") + error.what());
            }
        }
        for (const auto& [file, bytes] : unchanged) {
            if (readBytes(file) != bytes) {
                fail(file + " changed");
            }
        }
        return result;
    }
};

// Waits until `sql` (on the workspace database) counts at least `atLeast`, or the process ends or 60 s pass.
bool waitFor(const std::string& database, const std::string& sql, std::int64_t atLeast, const QProcess& process)
{
    QElapsedTimer timer;
    timer.start();
    while (timer.elapsed() < 60000 && process.state() == QProcess::Running) {
        try {
            if (fs::exists(database)) {
                const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
                if (store::queryInt64(reader.handle(), sql.c_str()) >= atLeast) {
                    return true;
                }
            }
        } catch (const std::exception&) {
        }
        QThread::msleep(20);
    }
    return false;
}

} // namespace

class TestHostileInputs : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void hostileCase_data();
    void hostileCase();
    void resumeAfterSigtermFinishesTheRemainingSteps();
    void resumeWhileTheWriterLivesIsRefused();

private:
    std::string trainRunFile(const std::string& name, int steps, int checkpointEvery);

    QTemporaryDir dir_;
    Suite suite_;
    std::map<std::string, CaseResult> results_;
    std::vector<std::string> order_;
};

std::string TestHostileInputs::trainRunFile(const std::string& name, int steps, int checkpointEvery)
{
    const std::string path = (suite_.root / (name + ".yaml")).string();
    writeText(path,
        "name: " + name + "\nstudent: " + suite_.placeholders["@student@"] + "\nteacher: "
            + suite_.placeholders["@teacher@"] + "\nprompts: " + kResources
            + "/prompts/arith-train.jsonl\nbatch: {prompts_per_step: 4}\nseed: 5\nsteps: " + std::to_string(steps)
            + "\ncheckpoint: {every: " + std::to_string(checkpointEvery)
            + "}\nrollout: {sampling: {temperature: 1.0, max_tokens: 8, seed: 3}}\n");
    return path;
}

void TestHostileInputs::initTestCase()
{
    QVERIFY2(QFileInfo::exists(kBinary), "the mismatch CLI is built with the tests");
    QVERIFY(dir_.isValid());
    suite_.root = dir_.path().toStdString();
    const std::string student = (suite_.root / "student").string();
    const std::string teacher = (suite_.root / "teacher").string();
    const model::ModelConfig small = train::demoModelConfig(32, 2, 2, 1, 64);
    train::writeDemoModelDirectory(student, small, model::randomWeights(small, 11, 0.05));
    const model::ModelConfig larger = train::demoModelConfig(48, 2, 4, 2, 96);
    train::writeDemoModelDirectory(teacher, larger, model::randomWeights(larger, 12, 0.3));
    const std::string prompts = (suite_.root / "prompts.jsonl").string();
    writeText(prompts,
        "{\"id\": \"p1\", \"prompt\": \"Q:1+2\\n\", \"answer\": \"3\"}\n"
        "{\"id\": \"p2\", \"prompt\": \"Q:(3-1)*4\\n\", \"answer\": \"8\"}\n"
        "{\"id\": \"p3\", \"prompt\": \"Q:7*7-9\\n\", \"answer\": \"40\"}\n"
        "{\"id\": \"p4\", \"prompt\": \"Q:12-5\\n\", \"answer\": \"7\"}\n");
    suite_.placeholders = {{"@student@", student}, {"@teacher@", teacher}, {"@prompts@", prompts},
        {"@resources@", kResources}};

    // The seeded workspace: a finished training run with its steps, a model and a prompt set, written through the
    // store and closed (no WAL left), so that each case copies one file.
    suite_.seeded = (suite_.root / "seeded").string();
    suite_.placeholders["@seeded@"] = suite_.seeded;
    {
        store::RunStore store
            = store::RunStore::open(store::databasePath(suite_.seeded), store::OpenMode::CreateOrOpen);
        store::ModelRecord model;
        model.name = "student";
        model.path = student;
        model.architecture = "Qwen2ForCausalLM";
        model.parameterCount = 1000;
        const std::int64_t modelId = store.addModel(model);
        store.addPromptSet({0, "prompts", prompts, 4});
        const std::int64_t run = store.beginRun({"seeded", "train", "{\"steps\": 2}", modelId});
        store::StepMetrics step;
        step.step = 1;
        step.mismatchKl = 0.01;
        step.loss = 1.5;
        store::StepMetrics second = step;
        second.step = 2;
        store.appendSteps(run, {step, second});
        store.finishRun(run, store::RunStatus::Finished);
        // Run 2: a training run a killed process left "running" (the resume cases give it checkpoints).
        const std::string runFile = (suite_.root / "seeded-run.yaml").string();
        writeText(runFile, "name: left-running\nstudent: " + student + "\nteacher: " + teacher + "\nprompts: " + prompts
                + "\nsteps: 4\nbatch: {prompts_per_step: 2}\nrollout: {sampling: {max_tokens: 4}}\n");
        const train::RunConfig config = train::loadRunConfig(runFile);
        store.beginRun({"left-running", "train", train::runConfigToJson(config), modelId});
    }
    fs::remove_all(fs::path(suite_.seeded) / "locks"); // the run's finished; its lock file means nothing

    const YAML::Node cases = YAML::LoadFile(MISMATCH_SOURCE_DIR "/tests/reliability/hostile_cases.yaml")["cases"];
    QVERIFY(cases.IsSequence() && cases.size() > 50);
    std::vector<YAML::Node> list(cases.begin(), cases.end());
    std::set<std::string> names;
    for (const YAML::Node& spec : list) {
        QVERIFY2(names.insert(spec["name"].Scalar()).second, spec["name"].Scalar().c_str());
        order_.push_back(spec["name"].Scalar());
    }
    // In this process, one after another (environment variables are per case): each case's time is then its own,
    // and the suite costs no process start-ups. The binary itself runs in the two process tests below.
    QElapsedTimer timer;
    timer.start();
    for (std::size_t i = 0; i < list.size(); ++i) {
        CaseResult result = suite_.run(list[i], static_cast<int>(i));
        std::string message = result.err.substr(0, result.err.find('\n'));
        qInfo("%-44s exit %d %6.2f s%s  %s", result.name.c_str(), result.exitCode, result.seconds,
            result.failures.empty() ? "" : "  FAILED", message.substr(0, 400).c_str());
        results_[result.name] = std::move(result);
    }
    double slowest = 0.0;
    std::string slowestName;
    for (const auto& [name, result] : results_) {
        if (result.seconds > slowest) {
            slowest = result.seconds;
            slowestName = name;
        }
    }
    qInfo("%zu hostile cases in %.1f s; the slowest, %s, took %.2f s", list.size(),
        static_cast<double>(timer.elapsed()) / 1000.0, slowestName.c_str(), slowest);
}

void TestHostileInputs::hostileCase_data()
{
    QTest::addColumn<QString>("name");
    for (const std::string& name : order_) {
        QTest::newRow(name.c_str()) << QString::fromStdString(name);
    }
}

void TestHostileInputs::hostileCase()
{
    QFETCH(QString, name);
    const CaseResult& result = results_.at(name.toStdString());
    std::string report;
    for (const std::string& failure : result.failures) {
        report += "\n  - " + failure;
    }
    if (!result.failures.empty()) {
        report += "\n  exit " + std::to_string(result.exitCode) + ", " + std::to_string(result.seconds)
            + " s, stderr: " + result.err;
    }
    QVERIFY2(result.failures.empty(), report.c_str());
}

void TestHostileInputs::resumeAfterSigtermFinishesTheRemainingSteps()
{
    // SIGTERM's default action ends the process like a kill: the run stays "running" with no one writing it.
    const QString workspace = QString::fromStdString((suite_.root / "sigterm").string());
    const std::string database = store::databasePath(workspace.toStdString());
    const std::string runFile = trainRunFile("terminated", 12, 3);
    QProcess process;
    process.start(kBinary, {"--workspace", workspace, "--threads", "1", "train", QString::fromStdString(runFile),
                               "--quiet"});
    QVERIFY(process.waitForStarted());
    QVERIFY2(waitFor(database, "SELECT count(*) FROM step_metrics", 4, process), "the run never reached step 4");
    ::kill(static_cast<pid_t>(process.processId()), SIGTERM);
    process.waitForFinished(30000);
    QVERIFY2(process.exitStatus() == QProcess::CrashExit, "SIGTERM did not end the process");
    {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        QVERIFY(reader.run(1) && reader.run(1)->status == store::RunStatus::Running);
    }
    // The resume redoes at most the steps after the newest checkpoint (every 3), so its time is that of at most
    // 12 - 3 steps plus loading: a minute is generous on a shared 2-core machine.
    QElapsedTimer timer;
    timer.start();
    const CliResult resumed = runCli(workspace, {"train", "--resume", "1", "--quiet"}, {},
        QProcessEnvironment::systemEnvironment(), 60000);
    qInfo("resume after SIGTERM: exit %d in %.1f s", resumed.code, static_cast<double>(timer.elapsed()) / 1000.0);
    QVERIFY2(resumed.code == 0, (resumed.err.empty() ? "timed out" : resumed.err).c_str());
    const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
    const auto run = reader.run(1);
    QVERIFY(run);
    QVERIFY(run->status == store::RunStatus::Finished);
    QCOMPARE(run->stepCount, std::int64_t {12});
    QCOMPARE(run->lastStep.value_or(0), std::int64_t {12});
}

void TestHostileInputs::resumeWhileTheWriterLivesIsRefused()
{
    const QString workspace = QString::fromStdString((suite_.root / "concurrent").string());
    const std::string database = store::databasePath(workspace.toStdString());
    const std::string runFile = trainRunFile("concurrent", 400, 0);
    QProcess writer;
    writer.start(kBinary, {"--workspace", workspace, "--threads", "1", "train", QString::fromStdString(runFile),
                              "--quiet"});
    QVERIFY(writer.waitForStarted());
    QVERIFY2(waitFor(database, "SELECT count(*) FROM step_metrics", 2, writer), "the writer never stored a step");
    // Two resumes at once, as a user double-clicking would start them: both refused, neither touches the run.
    QProcess first;
    QProcess second;
    for (QProcess* resume : {&first, &second}) {
        resume->start(kBinary, {"--workspace", workspace, "--threads", "1", "train", "--resume", "1", "--quiet"});
    }
    for (QProcess* resume : {&first, &second}) {
        QVERIFY(resume->waitForFinished(30000));
        const std::string err = resume->readAllStandardError().toStdString();
        QVERIFY2(resume->exitStatus() == QProcess::NormalExit && resume->exitCode() == 1, err.c_str());
        QVERIFY2(err.find("run 1 is being written by process " + std::to_string(writer.processId())) != std::string::npos,
            err.c_str());
        QVERIFY2(err.find("UNIQUE") == std::string::npos, err.c_str());
    }
    // The writer went on: more steps, the run still its own and running.
    std::int64_t stepsBefore = 0;
    {
        const store::RunStore reader = store::RunStore::open(database, store::OpenMode::ReadOnly);
        stepsBefore = store::queryInt64(reader.handle(), "SELECT count(*) FROM step_metrics");
    }
    QVERIFY(waitFor(database, "SELECT count(*) FROM step_metrics", stepsBefore + 2, writer));
    QCOMPARE(writer.state(), QProcess::Running);
    writer.kill();
    writer.waitForFinished();
    // With the writer dead the same resume is taken (and stopped after one step).
    const CliResult resumed = runCli(workspace, {"train", "--resume", "1", "--stop-after", "1", "--quiet"});
    QVERIFY2(resumed.code == 0, resumed.err.c_str());
}

MISMATCH_TEST_GUILESS_MAIN(TestHostileInputs)
#include "test_hostile_inputs.moc"

// Run files (core/train/run_config.h), the evaluation store (core/store/evaluation_store.h) and
// `mismatch compare` (app/cli/cli_compare.cpp).
#include "app/cli/cli.h"
#include "tests/common/cli_runner.h"
#include "core/common/error.h"
#include "core/metrics/bootstrap.h"
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/run_config.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

using namespace mismatch;
namespace fs = std::filesystem;

namespace {

const std::string kSourceDir = MISMATCH_SOURCE_DIR;
const std::string kFixtureDir = kSourceDir + "/tests/runfile";

std::string normal(const std::string& path)
{
    return fs::path(path).lexically_normal().string();
}

const std::string kStudent = normal(kSourceDir + "/resources/models/arith-student");
const std::string kTeacher = normal(kSourceDir + "/resources/models/arith-teacher");
const std::string kTrainPrompts = normal(kSourceDir + "/resources/prompts/arith-train.jsonl");
const std::string kHeldoutPrompts = normal(kSourceDir + "/resources/prompts/arith-heldout.jsonl");

// Lines 1-3 of every error case: valid required keys, relative to tests/runfile.
const std::string kHeader = "student: ../../resources/models/arith-student\n"
                            "teacher: ../../resources/models/arith-teacher\n"
                            "prompts: ../../resources/prompts/arith-train.jsonl\n";

using test::CliResult;
using test::runCli;
using test::parseJson;

std::vector<store::ProblemQuality> problems(const std::vector<double>& qualities, const std::string& prefix = "p")
{
    std::vector<store::ProblemQuality> list;
    for (std::size_t i = 0; i < qualities.size(); ++i) {
        char id[32];
        std::snprintf(id, sizeof id, "%s%02zu", prefix.c_str(), i);
        list.push_back({id, qualities[i], i % 3 == 0});
    }
    return list;
}

std::int64_t count(const store::RunStore& s, const char* sql)
{
    return store::queryInt64(s.handle(), sql);
}

} // namespace

class TestRunFile : public QObject {
    Q_OBJECT

private slots:
    void errors_data();
    void errors();
    void errorsWithoutHeader_data();
    void errorsWithoutHeader();
    void malformedYamlIsLocated();
    void recipeErrorsNameTheRecipeAndTheRunFile();
    void loadNamesTheFile();
    void defaults();
    void everySetting();
    void teacherIsOptionalForRewardObjectives();
    void pathResolution();
    void jsonRoundTrip();
    void shippedRunFilesParse();

    void evaluationsStoredAndReadBack();
    void duplicateEvaluationIsRejectedAtomically();
    void badEvaluationsWriteNothing();

    void compareFailsAndPasses();
    void compareErrors();
};

// ---------------------------------------------------------------------------------------------------------
// Run files

void TestRunFile::errors_data()
{
    QTest::addColumn<QString>("body"); // appended to kHeader, so its first line is line 4
    QTest::addColumn<QString>("location");
    QTest::addColumn<QString>("detail"); // a part of the message

    QTest::newRow("unknown top key") << "stepz: 10"
                                     << "line 4, column 1"
                                     << "unknown key 'stepz' (expected one of: name, student, teacher, prompts,";
    QTest::newRow("unknown nested key") << "rollout:\n  staleness: 1\n  stalenes: 2"
                                        << "line 6, column 3"
                                        << "unknown key 'stalenes' in rollout (expected one of: recipe, staleness";
    QTest::newRow("steps not an integer") << "steps: many"
                                          << "line 4, column 8"
                                          << "steps: expected an integer, got a string";
    QTest::newRow("steps zero") << "steps: 0"
                                << "line 4, column 8"
                                << "steps: must be at least 1, got 0";
    QTest::newRow("unknown objective")
        << "objective: opd_kl"
        << "line 4, column 12"
        << "unknown objective 'opd_kl' (valid: opd_full_kl, opd_k1, opd_k3, opd_topk, reinforce, grpo)";
    QTest::newRow("topk without k") << "objective: opd_topk"
                                    << "line 4, column 12"
                                    << "opd_topk needs its k";
    QTest::newRow("top_k on other objective") << "objective: {name: opd_k1, top_k: 4}"
                                              << "line 4, column 27"
                                              << "only the opd_topk objective takes top_k, not opd_k1";
    QTest::newRow("topk k zero") << "objective: {name: opd_topk, top_k: 0}"
                                 << "line 4, column 36"
                                 << "objective.top_k: must be at least 1, got 0";
    QTest::newRow("objective a list") << "objective: [opd_k1]"
                                      << "line 4, column 12"
                                      << "objective: expected a string, got a list";
    QTest::newRow("grpo one sample") << "objective: grpo\nbatch: {prompts_per_step: 4, samples_per_prompt: 1}"
                                     << "line 5, column 50"
                                     << "grpo needs batch.samples_per_prompt >= 2";
    QTest::newRow("grpo default samples") << "objective: grpo"
                                          << "line 4, column 12"
                                          << "grpo needs batch.samples_per_prompt >= 2";
    QTest::newRow("tis cap 1") << "correction: {kind: tis, cap: 1.0}"
                               << "line 4, column 30"
                               << "correction.cap: tis needs a cap > 1";
    QTest::newRow("cap with none") << "correction: {kind: none, cap: 3}"
                                   << "line 4, column 26"
                                   << "a cap has no effect with kind none";
    QTest::newRow("unknown correction") << "correction: {kind: pis}"
                                        << "line 4, column 20"
                                        << "unknown correction 'pis' (valid: none, tis, mis)";
    QTest::newRow("negative sigma") << "rollout:\n  noise: {sigma: -0.1}"
                                    << "line 5, column 18"
                                    << "rollout.noise.sigma: must be in [0, infinity), got -0.1";
    QTest::newRow("negative staleness") << "rollout: {staleness: -1}"
                                        << "line 4, column 22"
                                        << "rollout.staleness: must be at least 0, got -1";
    QTest::newRow("top_p zero") << "rollout:\n  sampling: {temperature: 0.7, top_p: 0}"
                                << "line 5, column 39"
                                << "rollout.sampling.top_p: must be in (0, 1], got 0";
    QTest::newRow("async not a boolean") << "rollout: {staleness: 2, asynchronous: yes}"
                                         << "line 4, column 39"
                                         << "rollout.asynchronous: expected true or false, got a string";
    QTest::newRow("one beta") << "optimizer: {betas: [0.9]}"
                              << "line 4, column 20"
                              << "expected a list of two numbers [beta1, beta2], got a list of 1";
    QTest::newRow("beta one") << "optimizer: {betas: [0.9, 1.0]}"
                              << "line 4, column 26"
                              << "optimizer.betas[1]: must be in [0, 1), got 1.0";
    QTest::newRow("zero learning rate") << "optimizer:\n  learning_rate: 0"
                                        << "line 5, column 18"
                                        << "optimizer.learning_rate: must be in (0, infinity), got 0";
    QTest::newRow("missing eval prompts file") << "evaluation: {prompts: nope.jsonl}"
                                               << "line 4, column 23"
                                               << "does not exist";
    QTest::newRow("every without prompts") << "evaluation: {every: 10}"
                                           << "line 4, column 21"
                                           << "periodic evaluation needs evaluation.prompts";
    QTest::newRow("count not an integer") << "evaluation: {count: 1.5}"
                                          << "line 4, column 21"
                                          << "evaluation.count: expected an integer, got a number";
    QTest::newRow("duplicate key") << "steps: 1\nsteps: 2"
                                   << "line 5, column 1"
                                   << "duplicate key 'steps' (first given at line 4, column 1)";
    QTest::newRow("bad noise pattern") << "rollout:\n  noise: {modules: \"model.layers.{3-1}.*\"}"
                                       << "line 5, column 20"
                                       << "malformed module pattern";
    QTest::newRow("negative seed") << "seed: -4"
                                   << "line 4, column 7"
                                   << "a seed must not be negative";
    QTest::newRow("negative threads") << "threads: -1"
                                      << "line 4, column 10"
                                      << "must be at least 0, got -1";
    QTest::newRow("misspelt device") << "device: gpu0"
                                     << "line 4, column 9"
                                     << "device 'gpu0': expected cpu, cuda or cuda:N";
    QTest::newRow("device index not a number") << "device: \"cuda:x\""
                                               << "line 4, column 9"
                                               << "device 'cuda:x': expected cpu, cuda or cuda:N";
    QTest::newRow("empty name") << "name: \"\""
                                << "line 4, column 7"
                                << "expected a non-empty name";
    QTest::newRow("section not a mapping") << "batch: 4"
                                           << "line 4, column 8"
                                           << "batch: expected a mapping, got an integer";
}

void TestRunFile::errors()
{
    QFETCH(QString, body);
    QFETCH(QString, location);
    QFETCH(QString, detail);
    try {
        train::parseRunConfig(kHeader + body.toStdString() + "\n", "case.yaml", kFixtureDir);
        QFAIL("no error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), QString("case.yaml"));
        QCOMPARE(QString::fromStdString(error.location()), location);
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
}

void TestRunFile::errorsWithoutHeader_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("location");
    QTest::addColumn<QString>("detail");
    QTest::newRow("missing student") << "teacher: ../../resources/models/arith-teacher\n"
                                        "prompts: ../../resources/prompts/arith-train.jsonl\n"
                                     << "line 1, column 1"
                                     << "missing required key 'student'";
    QTest::newRow("missing prompts") << "student: ../../resources/models/arith-student\n"
                                        "teacher: ../../resources/models/arith-teacher\n"
                                     << "line 1, column 1"
                                     << "missing required key 'prompts'";
    QTest::newRow("opd without teacher") << "student: ../../resources/models/arith-student\n"
                                            "prompts: ../../resources/prompts/arith-train.jsonl\n"
                                            "objective: opd_k3\n"
                                         << "line 3, column 12"
                                         << "objective: objective opd_k3 distills from a teacher";
    QTest::newRow("default objective without teacher") << "student: ../../resources/models/arith-student\n"
                                                          "prompts: ../../resources/prompts/arith-train.jsonl\n"
                                                       << "line 1, column 1"
                                                       << "objective opd_full_kl distills from a teacher";
    QTest::newRow("evaluation without teacher") << "student: ../../resources/models/arith-student\n"
                                                   "prompts: ../../resources/prompts/arith-train.jsonl\n"
                                                   "objective: reinforce\n"
                                                   "evaluation: {every: 5, prompts: ../../resources/prompts/arith-heldout.jsonl}\n"
                                                << "line 4, column 21"
                                                << "periodic evaluation needs a teacher";
    QTest::newRow("student is a file") << "student: ../../resources/prompts/arith-train.jsonl\n"
                                       << "line 1, column 10"
                                       << "is not a directory";
    QTest::newRow("student has no config.json") << "student: ../../resources/prompts\n"
                                                << "line 1, column 10"
                                                << "has no config.json";
    QTest::newRow("missing student directory") << "student: ../../resources/models/nobody\n"
                                               << "line 1, column 10"
                                               << "does not exist";
    QTest::newRow("prompts is a directory") << "student: ../../resources/models/arith-student\n"
                                               "teacher: ../../resources/models/arith-teacher\n"
                                               "prompts: ../../resources/prompts\n"
                                            << "line 3, column 10"
                                            << "is a directory, expected a file";
    QTest::newRow("a list, not a mapping") << "- student\n- prompts\n"
                                           << "line 1, column 1"
                                           << "expected a mapping, got a list";
    QTest::newRow("empty file") << "# nothing\n"
                                << "line 1, column 1"
                                << "empty run file";
}

void TestRunFile::errorsWithoutHeader()
{
    QFETCH(QString, text);
    QFETCH(QString, location);
    QFETCH(QString, detail);
    try {
        train::parseRunConfig(text.toStdString(), "case.yaml", kFixtureDir);
        QFAIL("no error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.location()), location);
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
}

void TestRunFile::malformedYamlIsLocated()
{
    // The second ': ' on line 4 cannot start a value: the parser stops at it (column 8).
    try {
        train::parseRunConfig(kHeader + "name: a: b\n", "case.yaml", kFixtureDir);
        QFAIL("no error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.location()), QString("line 4, column 8"));
        QVERIFY2(QString::fromStdString(error.detail()).startsWith("malformed YAML"), error.what());
    }
}

void TestRunFile::recipeErrorsNameTheRecipeAndTheRunFile()
{
    try {
        train::parseRunConfig(kHeader + "rollout:\n  recipe: bad-recipe.yaml\n", "case.yaml", kFixtureDir);
        QFAIL("no error");
    } catch (const InputError& error) {
        // The recipe's own error: its file and place (line 2 `weights: {format: fp7}`, the value at column 19) ...
        QCOMPARE(QString::fromStdString(error.file()), QString::fromStdString(kFixtureDir + "/bad-recipe.yaml"));
        QCOMPARE(QString::fromStdString(error.location()), QString("line 2, column 19"));
        QVERIFY2(QString::fromStdString(error.detail()).contains("fp7"), error.what());
        // ... and where the run file names the recipe.
        QVERIFY2(QString::fromStdString(error.detail()).contains("recipe named by case.yaml, line 5, column 11"),
            error.what());
    }
    try {
        train::parseRunConfig(kHeader + "rollout: {recipe: missing.yaml}\n", "case.yaml", kFixtureDir);
        QFAIL("no error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.location()), QString("line 4, column 19"));
        QVERIFY2(QString::fromStdString(error.detail())
                     .contains(QString::fromStdString("recipe " + kFixtureDir + "/missing.yaml")),
            error.what());
    }
}

void TestRunFile::loadNamesTheFile()
{
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/typo.yaml";
    std::ofstream(path) << "student: " << kStudent << "\nteacher: " << kTeacher << "\nprompts: " << kTrainPrompts
                        << "\nobjective: reinforcement\n";
    try {
        train::loadRunConfig(path);
        QFAIL("no error");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), QString::fromStdString(path));
        QCOMPARE(QString::fromStdString(error.location()), QString("line 4, column 12"));
        QVERIFY(QString::fromStdString(error.what()).startsWith(QString::fromStdString(path + ":line 4, column 12")));
    }
    try {
        train::loadRunConfig(dir.path().toStdString() + "/absent.yaml");
        QFAIL("no error");
    } catch (const InputError& error) {
        QVERIFY2(QString::fromStdString(error.detail()).contains("cannot open"), error.what());
    }
}

void TestRunFile::defaults()
{
    const train::RunConfig c = train::loadRunConfig(kFixtureDir + "/minimal.yaml");
    QCOMPARE(QString::fromStdString(c.name), QString("minimal")); // the file's stem
    QCOMPARE(QString::fromStdString(c.student), QString::fromStdString(kStudent));
    QCOMPARE(QString::fromStdString(c.teacher), QString::fromStdString(kTeacher));
    QCOMPARE(QString::fromStdString(c.prompts), QString::fromStdString(kTrainPrompts));
    QVERIFY(c.objective.kind == train::Objective::OpdFullKl);
    QCOMPARE(c.objective.topK, std::int64_t(0));
    QVERIFY(c.correction.kind == train::CorrectionKind::None);
    QCOMPARE(c.correction.cap, 2.0);
    QVERIFY(c.rollout.recipe.empty());
    QCOMPARE(c.rollout.staleness, std::int64_t(0));
    QCOMPARE(c.rollout.asynchronous, false);
    QCOMPARE(c.rollout.noise.sigma, 0.0);
    QCOMPARE(c.rollout.noise.seed, std::uint64_t(0));
    QCOMPARE(QString::fromStdString(c.rollout.noise.modules), QString("*"));
    QCOMPARE(c.rollout.sampling.temperature, 1.0);
    QCOMPARE(c.rollout.sampling.topP, 1.0);
    QCOMPARE(c.rollout.sampling.topK, std::int64_t(0));
    QCOMPARE(c.rollout.sampling.maxTokens, std::int64_t(64));
    QCOMPARE(c.rollout.sampling.seed, std::uint64_t(0));
    QCOMPARE(c.optimizer.learningRate, 1e-4);
    QCOMPARE(c.optimizer.warmupSteps, std::int64_t(0));
    QCOMPARE(c.optimizer.weightDecay, 0.0);
    QCOMPARE(c.optimizer.gradientClip, 1.0);
    QCOMPARE(c.optimizer.beta1, 0.9);
    QCOMPARE(c.optimizer.beta2, 0.999);
    QCOMPARE(c.batch.promptsPerStep, std::int64_t(8));
    QCOMPARE(c.batch.samplesPerPrompt, std::int64_t(1));
    QCOMPARE(c.steps, std::int64_t(100));
    QCOMPARE(c.evaluation.every, std::int64_t(0));
    QVERIFY(c.evaluation.prompts.empty());
    QCOMPARE(c.evaluation.count, std::int64_t(0));
    QCOMPARE(c.evaluation.maxTokens, std::int64_t(64));
    QCOMPARE(c.evaluation.bf16UnitEvery, std::int64_t(0));
    QCOMPARE(c.checkpoint.every, std::int64_t(0));
    QCOMPARE(c.seed, std::uint64_t(0));
    QCOMPARE(c.threads, std::int64_t(0));
    QCOMPARE(QString::fromStdString(c.device), QString("cpu"));
    // A config built in code with the same paths equals the parsed one: the struct defaults are the file's.
    train::RunConfig built;
    built.name = "minimal";
    built.student = kStudent;
    built.teacher = kTeacher;
    built.prompts = kTrainPrompts;
    QVERIFY(built == c);
}

void TestRunFile::everySetting()
{
    const train::RunConfig c = train::loadRunConfig(kFixtureDir + "/full.yaml");
    QCOMPARE(QString::fromStdString(c.name), QString("full-settings"));
    QVERIFY(c.objective.kind == train::Objective::OpdTopK);
    QCOMPARE(c.objective.topK, std::int64_t(12));
    QVERIFY(c.correction.kind == train::CorrectionKind::Mis);
    QCOMPARE(c.correction.cap, 3.5);
    QCOMPARE(QString::fromStdString(c.rollout.recipe),
        QString::fromStdString(normal(kSourceDir + "/resources/recipes/fp8-kv.yaml")));
    QCOMPARE(c.rollout.staleness, std::int64_t(2));
    QCOMPARE(c.rollout.asynchronous, true);
    QCOMPARE(c.rollout.noise.sigma, 0.0125);
    QCOMPARE(c.rollout.noise.seed, std::uint64_t(99));
    QCOMPARE(QString::fromStdString(c.rollout.noise.modules), QString("model.layers.{0-1}.mlp.*"));
    QCOMPARE(c.rollout.sampling.temperature, 0.7);
    QCOMPARE(c.rollout.sampling.topP, 0.95);
    QCOMPARE(c.rollout.sampling.topK, std::int64_t(40));
    QCOMPARE(c.rollout.sampling.maxTokens, std::int64_t(24));
    QCOMPARE(c.rollout.sampling.seed, std::numeric_limits<std::uint64_t>::max());
    QCOMPARE(c.optimizer.learningRate, 3.0e-5);
    QCOMPARE(c.optimizer.warmupSteps, std::int64_t(7));
    QCOMPARE(c.optimizer.weightDecay, 0.05);
    QCOMPARE(c.optimizer.gradientClip, 0.5);
    QCOMPARE(c.optimizer.beta1, 0.8);
    QCOMPARE(c.optimizer.beta2, 0.95);
    QCOMPARE(c.batch.promptsPerStep, std::int64_t(6));
    QCOMPARE(c.batch.samplesPerPrompt, std::int64_t(3));
    QCOMPARE(c.steps, std::int64_t(321));
    QCOMPARE(c.evaluation.every, std::int64_t(25));
    QCOMPARE(QString::fromStdString(c.evaluation.prompts), QString::fromStdString(kHeldoutPrompts));
    QCOMPARE(c.evaluation.count, std::int64_t(100));
    QCOMPARE(c.evaluation.maxTokens, std::int64_t(20));
    QCOMPARE(c.evaluation.bf16UnitEvery, std::int64_t(75));
    QCOMPARE(c.checkpoint.every, std::int64_t(50));
    QCOMPARE(c.seed, std::uint64_t(424242));
    QCOMPARE(c.threads, std::int64_t(2));
    // "cuda" is written out as its canonical name; whether this machine has it is the trainer's check, so the
    // file parses on a machine without a GPU (a run file written for a GPU machine can be read and edited here).
    QCOMPARE(QString::fromStdString(c.device), QString("cuda:0"));
}

void TestRunFile::teacherIsOptionalForRewardObjectives()
{
    const train::RunConfig grpo = train::loadRunConfig(kFixtureDir + "/grpo.yaml");
    QVERIFY(grpo.objective.kind == train::Objective::Grpo);
    QVERIFY(grpo.teacher.empty());
    QCOMPARE(grpo.batch.samplesPerPrompt, std::int64_t(4));
    QVERIFY(!train::usesTeacher(train::Objective::Grpo));
    QVERIFY(!train::usesTeacher(train::Objective::Reinforce));
    QVERIFY(train::usesTeacher(train::Objective::OpdK1));
    // A teacher given with reinforce is accepted (and ignored by training).
    const train::RunConfig reinforce = train::parseRunConfig(kHeader + "objective: reinforce\n", "r.yaml", kFixtureDir);
    QVERIFY(reinforce.objective.kind == train::Objective::Reinforce);
    QCOMPARE(QString::fromStdString(reinforce.teacher), QString::fromStdString(kTeacher));
}

void TestRunFile::pathResolution()
{
    // The same relative paths from a different base directory point elsewhere (and do not exist).
    QVERIFY_EXCEPTION_THROWN(train::parseRunConfig(kHeader, "case.yaml", kSourceDir), InputError);
    // Relative to the base; `..` and `.` are normalized away.
    const train::RunConfig fromResources
        = train::parseRunConfig("student: ./models/../models/arith-student\nteacher: models/arith-teacher\nprompts: "
                                "prompts/arith-train.jsonl\n",
            "case.yaml", kSourceDir + "/resources");
    QCOMPARE(QString::fromStdString(fromResources.student), QString::fromStdString(kStudent));
    QCOMPARE(QString::fromStdString(fromResources.teacher), QString::fromStdString(kTeacher));
    QCOMPARE(QString::fromStdString(fromResources.prompts), QString::fromStdString(kTrainPrompts));
    // Absolute paths are kept whatever the base; loadRunConfig resolves against the file's own directory.
    QTemporaryDir dir;
    const std::string base = dir.path().toStdString();
    fs::create_directories(base + "/sub/prompts");
    fs::copy_file(kHeldoutPrompts, base + "/sub/prompts/held.jsonl");
    std::ofstream(base + "/sub/run.yaml")
        << "student: " << kStudent << "\nteacher: " << kTeacher << "\nprompts: prompts/held.jsonl\n";
    const train::RunConfig loaded = train::loadRunConfig(base + "/sub/run.yaml");
    QCOMPARE(QString::fromStdString(loaded.student), QString::fromStdString(kStudent));
    QCOMPARE(QString::fromStdString(loaded.prompts), QString::fromStdString(normal(base + "/sub/prompts/held.jsonl")));
    QCOMPARE(QString::fromStdString(loaded.name), QString("run"));
}

void TestRunFile::jsonRoundTrip()
{
    for (const char* file : {"full.yaml", "minimal.yaml", "grpo.yaml"}) {
        const train::RunConfig original = train::loadRunConfig(kFixtureDir + "/" + file);
        const std::string json = train::runConfigToJson(original);
        // It is JSON with every setting written out.
        const nlohmann::json document = parseJson(json);
        QCOMPARE(QString::fromStdString(document.at("student").get<std::string>()),
            QString::fromStdString(original.student));
        QCOMPARE(document.at("steps").get<std::int64_t>(), original.steps);
        QCOMPARE(document.at("rollout").at("sampling").at("seed").get<std::uint64_t>(), original.rollout.sampling.seed);
        QCOMPARE(document.at("optimizer").at("betas").at(1).get<double>(), original.optimizer.beta2);
        // Parsed back from anywhere (absolute paths), it is the same configuration.
        const train::RunConfig back = train::parseRunConfig(json, "config.json", "/");
        QVERIFY2(back == original, (std::string(file) + " did not round-trip:\n" + json).c_str());
        QCOMPARE(QString::fromStdString(train::runConfigToJson(back)), QString::fromStdString(json));
    }
    // Equality notices a change in any one setting (spot checks of fields late in the tuple).
    train::RunConfig a = train::loadRunConfig(kFixtureDir + "/full.yaml");
    train::RunConfig b = a;
    b.threads = 3;
    QVERIFY(a != b);
    b = a;
    b.device = "cpu";
    QVERIFY(a != b);
    b = a;
    b.rollout.sampling.topP = 0.9;
    QVERIFY(a != b);
    b = a;
    b.sourceFile = "elsewhere.yaml";
    QVERIFY(a == b);
}

void TestRunFile::shippedRunFilesParse()
{
    for (const char* file : {"demo-opd.yaml", "demo-opd-quick.yaml"}) {
        const train::RunConfig c = train::loadRunConfig(kSourceDir + "/resources/runs/" + file);
        QCOMPARE(QString::fromStdString(c.student), QString::fromStdString(kStudent));
        QCOMPARE(QString::fromStdString(c.teacher), QString::fromStdString(kTeacher));
        QCOMPARE(QString::fromStdString(c.prompts), QString::fromStdString(kTrainPrompts));
        QCOMPARE(QString::fromStdString(c.evaluation.prompts), QString::fromStdString(kHeldoutPrompts));
        QVERIFY(c.objective.kind == train::Objective::OpdFullKl);
        QVERIFY(c.rollout.recipe.empty()); // the BF16 baseline
        QVERIFY(c.evaluation.every > 0);
        QVERIFY(c.steps % c.evaluation.every == 0); // the last step is evaluated
    }
    const train::RunConfig quick = train::loadRunConfig(kSourceDir + "/resources/runs/demo-opd-quick.yaml");
    const train::RunConfig standard = train::loadRunConfig(kSourceDir + "/resources/runs/demo-opd.yaml");
    QVERIFY(quick.steps < standard.steps);
    QCOMPARE(QString::fromStdString(standard.name), QString("demo-opd"));
    QCOMPARE(QString::fromStdString(quick.name), QString("demo-opd-quick"));
}

// ---------------------------------------------------------------------------------------------------------
// Evaluation store

void TestRunFile::evaluationsStoredAndReadBack()
{
    QTemporaryDir dir;
    store::RunStore s = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    const std::int64_t runId = s.beginRun({"opd", "train", "{}", std::nullopt});
    const std::int64_t promptSet = s.addPromptSet({0, "arith-heldout", kHeldoutPrompts, 512});

    // Ids deliberately out of sorted order: the stored order is the given order.
    const std::vector<store::ProblemQuality> atTen
        = {{"z-last", 0.40, true}, {"a-first", 0.10, false}, {"m-middle", 0.25, true}, {"b", 0.05, false}};
    const std::int64_t first = store::addEvaluation(s, runId, 10, promptSet, atTen);
    const std::int64_t second = store::addEvaluation(s, runId, 0, std::nullopt, problems({0.5, 0.7}));
    QVERIFY(first != second);

    const auto at = store::evaluationAt(s, runId, 10);
    QVERIFY(at.has_value());
    QCOMPARE(at->summary.id, first);
    QCOMPARE(at->summary.runId, runId);
    QCOMPARE(at->summary.step, std::int64_t(10));
    QCOMPARE(at->summary.promptSetId, std::optional<std::int64_t>(promptSet));
    // Q = (0.40 + 0.10 + 0.25 + 0.05) / 4 = 0.2; accuracy = 2 / 4.
    QVERIFY(std::abs(at->summary.quality - 0.2) < 1e-15);
    QCOMPARE(at->summary.accuracy, 0.5);
    QCOMPARE(at->summary.problemCount, std::int64_t(4));
    QVERIFY(!at->summary.createdAt.empty());
    QCOMPARE(at->problems.size(), atTen.size());
    for (std::size_t i = 0; i < atTen.size(); ++i) {
        QCOMPARE(QString::fromStdString(at->problems[i].problemId), QString::fromStdString(atTen[i].problemId));
        QCOMPARE(at->problems[i].quality, atTen[i].quality);
        QCOMPARE(at->problems[i].correct, atTen[i].correct);
    }

    const auto list = store::evaluations(s, runId);
    QCOMPARE(list.size(), std::size_t(2));
    QCOMPARE(list[0].step, std::int64_t(0)); // by step
    QCOMPARE(list[1].step, std::int64_t(10));
    QVERIFY(!list[0].promptSetId.has_value());
    QVERIFY(std::abs(list[0].quality - 0.6) < 1e-15);
    QCOMPARE(list[0].accuracy, 0.5); // p00 correct, p01 not

    QVERIFY(!store::evaluationAt(s, runId, 5).has_value());
    QVERIFY(store::evaluations(s, runId + 100).empty());
    QCOMPARE(s.summary().evaluations, std::int64_t(2));
}

void TestRunFile::duplicateEvaluationIsRejectedAtomically()
{
    QTemporaryDir dir;
    store::RunStore s = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    const std::int64_t runId = s.beginRun({"opd", "train", "{}", std::nullopt});
    store::addEvaluation(s, runId, 50, std::nullopt, problems({0.1, 0.2, 0.3}));
    QCOMPARE(count(s, "SELECT count(*) FROM evaluation_problems"), std::int64_t(3));
    try {
        store::addEvaluation(s, runId, 50, std::nullopt, problems({9.0, 9.0, 9.0, 9.0, 9.0}, "q"));
        QFAIL("duplicate (run, step) accepted");
    } catch (const StoreError& error) {
        QVERIFY2(QString::fromStdString(error.detail()).contains("already stored"), error.what());
    }
    QCOMPARE(count(s, "SELECT count(*) FROM evaluations"), std::int64_t(1));
    QCOMPARE(count(s, "SELECT count(*) FROM evaluation_problems"), std::int64_t(3));
    const auto kept = store::evaluationAt(s, runId, 50);
    QVERIFY(std::abs(kept->summary.quality - 0.2) < 1e-15);
    QCOMPARE(QString::fromStdString(kept->problems[0].problemId), QString("p00"));
    // The same step of another run is fine.
    const std::int64_t other = s.beginRun({"other", "train", "{}", std::nullopt});
    store::addEvaluation(s, other, 50, std::nullopt, problems({0.1}));
    QCOMPARE(count(s, "SELECT count(*) FROM evaluations"), std::int64_t(2));
}

void TestRunFile::badEvaluationsWriteNothing()
{
    QTemporaryDir dir;
    store::RunStore s = store::RunStore::open(dir.path().toStdString() + "/workspace.db");
    const std::int64_t runId = s.beginRun({"opd", "train", "{}", std::nullopt});
    auto nanLast = problems({0.1, 0.2, 0.3});
    nanLast.back().quality = std::nan("");
    auto repeated = problems({0.1, 0.2});
    repeated[1].problemId = repeated[0].problemId;
    auto emptyId = problems({0.1});
    emptyId[0].problemId.clear();
    QVERIFY_EXCEPTION_THROWN(store::addEvaluation(s, runId, 1, std::nullopt, nanLast), StoreError);
    QVERIFY_EXCEPTION_THROWN(store::addEvaluation(s, runId, 1, std::nullopt, repeated), StoreError);
    QVERIFY_EXCEPTION_THROWN(store::addEvaluation(s, runId, 1, std::nullopt, emptyId), StoreError);
    QVERIFY_EXCEPTION_THROWN(store::addEvaluation(s, runId, 1, std::nullopt, {}), StoreError);
    QVERIFY_EXCEPTION_THROWN(store::addEvaluation(s, runId + 7, 1, std::nullopt, problems({0.1})), StoreError);
    QCOMPARE(count(s, "SELECT count(*) FROM evaluations"), std::int64_t(0));
    QCOMPARE(count(s, "SELECT count(*) FROM evaluation_problems"), std::int64_t(0));
}

// ---------------------------------------------------------------------------------------------------------
// mismatch compare

namespace {

constexpr int kProblems = 30;

// Baseline q_i = 0.10 + 0.01 ((i mod 5) - 2): the offsets cancel in every group of five, so Q_base = 0.10.
std::vector<double> baselineQualities()
{
    std::vector<double> q;
    for (int i = 0; i < kProblems; ++i) {
        q.push_back(0.10 + 0.01 * ((i % 5) - 2));
    }
    return q;
}

} // namespace

void TestRunFile::compareFailsAndPasses()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    const std::vector<double> base = baselineQualities();
    // FAIL: q_i = 1.3 base_i + 0.001 ((i mod 3) - 1): Q = 0.13 (offsets cancel in every group of three), a +30%
    // rise, every paired difference in [0.023, 0.037], so the interval is far above zero.
    std::vector<double> tight;
    // undecided: q_i = base_i + 0.025 +- 0.09 alternating: Q = 0.125, +25%, but the differences spread so widely
    // (sd 0.09 over 30 problems) that the interval of the change contains the 20% line (and that of the mean
    // difference, zero).
    std::vector<double> spread;
    // pass: q_i = 1.05 base_i: every difference positive, but every drawn ratio is 1.05: +5%, below the line.
    std::vector<double> small;
    for (int i = 0; i < kProblems; ++i) {
        tight.push_back(1.3 * base[i] + 0.001 * ((i % 3) - 1));
        spread.push_back(base[i] + 0.025 + (i % 2 == 0 ? 0.09 : -0.09));
        small.push_back(1.05 * base[i]);
    }
    std::int64_t baseId = 0;
    std::int64_t tightId = 0;
    std::int64_t spreadId = 0;
    std::int64_t smallId = 0;
    {
        store::RunStore s = store::RunStore::open(store::databasePath(workspace));
        baseId = s.beginRun({"bf16-baseline", "train", "{}", std::nullopt});
        tightId = s.beginRun({"fp8-noisy", "train", "{}", std::nullopt});
        spreadId = s.beginRun({"fp8-spread", "train", "{}", std::nullopt});
        smallId = s.beginRun({"fp8-small", "train", "{}", std::nullopt});
        store::addEvaluation(s, baseId, 0, std::nullopt, problems(baselineQualities()));
        store::addEvaluation(s, baseId, 100, std::nullopt, problems(base));
        // Stored in reverse order: compare pairs by problem id, not by position.
        auto reversed = problems(tight);
        std::reverse(reversed.begin(), reversed.end());
        store::addEvaluation(s, tightId, 100, std::nullopt, reversed);
        store::addEvaluation(s, spreadId, 100, std::nullopt, problems(spread));
        store::addEvaluation(s, smallId, 100, std::nullopt, problems(small));
    }
    const auto compare = [&](std::int64_t run, std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {"--workspace", workspace, "--json", "compare", std::to_string(run),
            std::to_string(baseId), "--step", "100"};
        args.insert(args.end(), extra.begin(), extra.end());
        return runCli(args);
    };

    const CliResult fail = compare(tightId);
    QVERIFY2(fail.code == 0, fail.err.c_str()); // a verdict is a result, not an error
    const nlohmann::json f = parseJson(fail.out);
    QCOMPARE(QString::fromStdString(f.at("verdict").get<std::string>()), QString("fail"));
    QCOMPARE(f.at("failed").get<bool>(), true);
    QCOMPARE(f.at("step").get<std::int64_t>(), std::int64_t(100));
    QCOMPARE(f.at("problems").get<int>(), kProblems);
    QVERIFY(std::abs(f.at("run").at("quality").get<double>() - 0.13) < 1e-12);
    QVERIFY(std::abs(f.at("baseline").at("quality").get<double>() - 0.10) < 1e-12);
    // (0.13 - 0.10) / 0.10 = 0.3
    QVERIFY(std::abs(f.at("relative_change").get<double>() - 0.3) < 1e-10);
    QVERIFY(std::abs(f.at("difference").at("estimate").get<double>() - 0.03) < 1e-12);
    QVERIFY(f.at("difference").at("low").get<double>() > 0.023); // no resampled mean can leave [min, max]
    QVERIFY(f.at("difference").at("high").get<double>() < 0.037);
    QCOMPARE(f.at("difference").at("resamples").get<int>(), 10000);
    QCOMPARE(f.at("difference").at("confidence").get<double>(), 0.95);
    // The interval of the change: every paired ratio within [1.3 - 0.001 / min base, 1.3 + ...], far above 20%.
    QVERIFY(f.at("change").at("low").get<double>() > 0.2);
    QVERIFY(std::abs(f.at("change").at("estimate").get<double>() - 0.3) < 1e-10);
    QCOMPARE(f.at("change").at("resamples").get<int>(), 10000);
    QCOMPARE(f.at("run").at("id").get<std::int64_t>(), tightId);
    QCOMPARE(QString::fromStdString(f.at("baseline").at("name").get<std::string>()), QString("bf16-baseline"));

    const CliResult spreadResult = compare(spreadId);
    QVERIFY2(spreadResult.code == 0, spreadResult.err.c_str());
    const nlohmann::json p = parseJson(spreadResult.out);
    QCOMPARE(QString::fromStdString(p.at("verdict").get<std::string>()), QString("undecided"));
    QCOMPARE(p.at("failed").get<bool>(), false);
    // (0.125 - 0.10) / 0.10 = 0.25: over the line, yet its interval contains it: neither pass nor fail.
    QVERIFY(std::abs(p.at("relative_change").get<double>() - 0.25) < 1e-10);
    QVERIFY(p.at("change").at("low").get<double>() < 0.2 && p.at("change").at("high").get<double>() >= 0.2);
    QVERIFY(p.at("difference").at("low").get<double>() < 0.0);
    QVERIFY(p.at("difference").at("high").get<double>() > 0.0);

    const CliResult smallResult = compare(smallId);
    const nlohmann::json sm = parseJson(smallResult.out);
    QCOMPARE(QString::fromStdString(sm.at("verdict").get<std::string>()), QString("pass"));
    QVERIFY(std::abs(sm.at("relative_change").get<double>() - 0.05) < 1e-10);
    QVERIFY(sm.at("change").at("high").get<double>() < 0.2);
    QVERIFY(sm.at("difference").at("low").get<double>() > 0.0);
    // ... and with the threshold lowered to 4%, the same +5% fails.
    const nlohmann::json lowered = parseJson(compare(smallId, {"--threshold", "0.04"}).out);
    QCOMPARE(lowered.at("failed").get<bool>(), true);

    // The interval is the seeded paired bootstrap of the pairs: the same seed gives the same interval, and it
    // matches the library's on the hand-paired values.
    const nlohmann::json seeded = parseJson(compare(tightId, {"--seed", "7", "--resamples", "2000"}).out);
    metrics::BootstrapOptions options;
    options.seed = 7;
    options.resamples = 2000;
    const metrics::Interval expected = metrics::pairedBootstrapDifference(tight, base, options);
    QCOMPARE(seeded.at("difference").at("low").get<double>(), expected.low);
    QCOMPARE(seeded.at("difference").at("high").get<double>(), expected.high);
    QCOMPARE(seeded.at("difference").at("seed").get<std::uint64_t>(), std::uint64_t(7));

    // Human output: the verdict, both qualities, the change and the rule in words.
    const CliResult human = runCli(
        {"--workspace", workspace, "compare", std::to_string(tightId), std::to_string(baseId), "--step", "100"});
    QCOMPARE(human.code, 0);
    const QString text = QString::fromStdString(human.out);
    QVERIFY2(text.startsWith("verdict          FAIL"), human.out.c_str());
    QVERIFY2(text.contains("Q_run            0.13 nats/token"), human.out.c_str());
    QVERIFY2(text.contains("Q_base           0.1 nats/token"), human.out.c_str());
    QVERIFY2(text.contains("+30.00%"), human.out.c_str());
    QVERIFY2(text.contains("(line 20%: the interval is at or above it)"), human.out.c_str());
    QVERIFY2(text.contains("95% paired bootstrap interval of (Q_run - Q_base) / Q_base"), human.out.c_str());
    QVERIFY2(text.contains("fail when it lies at or above 20%, pass when below, undecided when it contains 20%"),
        human.out.c_str());
    const CliResult humanUndecided = runCli(
        {"--workspace", workspace, "compare", std::to_string(spreadId), std::to_string(baseId), "--step", "100"});
    QVERIFY2(QString::fromStdString(humanUndecided.out).startsWith("verdict          UNDECIDED"),
        humanUndecided.out.c_str());
    const CliResult humanPass = runCli(
        {"--workspace", workspace, "compare", std::to_string(smallId), std::to_string(baseId), "--step", "100"});
    QVERIFY2(QString::fromStdString(humanPass.out).startsWith("verdict          pass"), humanPass.out.c_str());
}

void TestRunFile::compareErrors()
{
    QTemporaryDir dir;
    const std::string workspace = dir.path().toStdString();
    std::int64_t baseId = 0;
    std::int64_t otherSetId = 0;
    std::int64_t emptyId = 0;
    {
        store::RunStore s = store::RunStore::open(store::databasePath(workspace));
        baseId = s.beginRun({"bf16-baseline", "train", "{}", std::nullopt});
        otherSetId = s.beginRun({"other-set", "train", "{}", std::nullopt});
        emptyId = s.beginRun({"not-evaluated", "train", "{}", std::nullopt});
        store::addEvaluation(s, baseId, 50, std::nullopt, problems({0.1, 0.2, 0.3}));
        store::addEvaluation(s, baseId, 100, std::nullopt, problems({0.1, 0.2, 0.3}));
        // p00 and p01 shared, q02 and q03 instead of p02.
        store::addEvaluation(s, otherSetId, 100, std::nullopt,
            {{"p00", 0.1, true}, {"p01", 0.2, true}, {"q02", 0.3, true}, {"q03", 0.3, true}});
    }
    const auto compare = [&](std::int64_t run, std::int64_t baseline, const std::string& step) {
        return runCli(
            {"--workspace", workspace, "compare", std::to_string(run), std::to_string(baseline), "--step", step});
    };

    const CliResult unknown = compare(999, baseId, "100");
    QCOMPARE(unknown.code, 1);
    QVERIFY2(QString::fromStdString(unknown.err).contains("has no run with id 999"), unknown.err.c_str());

    const CliResult noStep = compare(baseId, baseId, "75");
    QCOMPARE(noStep.code, 1);
    QVERIFY2(QString::fromStdString(noStep.err).contains("has no evaluation at step 75 (evaluated steps: 50, 100)"),
        noStep.err.c_str());
    const CliResult notEvaluated = compare(emptyId, baseId, "100");
    QCOMPARE(notEvaluated.code, 1);
    QVERIFY2(QString::fromStdString(notEvaluated.err).contains("(it has no evaluations)"), notEvaluated.err.c_str());

    const CliResult differ = compare(otherSetId, baseId, "100");
    QCOMPARE(differ.code, 1);
    const QString message = QString::fromStdString(differ.err);
    // Both directions, each run named by its id and the step compared (store::qualitiesInOrderOf, one pairing rule
    // for compare and calibrate).
    QVERIFY2(
        message.contains("2 of run " + QString::number(otherSetId) + " (step 100)'s problems are missing from run "
            + QString::number(baseId) + " (step 100)'s (e.g. 'q02')"),
        differ.err.c_str());
    QVERIFY2(message.contains("1 of run " + QString::number(baseId) + " (step 100)'s problems are missing from"),
        differ.err.c_str());
    QVERIFY2(message.contains("(e.g. 'p02')"), differ.err.c_str());

    // Bad arguments: exit 2.
    QCOMPARE(runCli({"--workspace", workspace, "compare", std::to_string(baseId), std::to_string(baseId)}).code, 2);
    QCOMPARE(compare(baseId, baseId, "ten").code, 2);
    QCOMPARE(runCli({"--workspace", workspace, "compare", "1", "1", "--step", "100", "--confidence", "1.5"}).code, 2);
    QCOMPARE(runCli({"--workspace", workspace, "compare", "1", "1", "--step", "100", "--resamples", "0"}).code, 2);
    // A workspace that does not exist is an error, and compare does not create it.
    const CliResult missing = runCli({"--workspace", workspace + "/nowhere", "compare", "1", "1", "--step", "1"});
    QCOMPARE(missing.code, 1);
    QVERIFY(!fs::exists(workspace + "/nowhere"));
}

MISMATCH_TEST_GUILESS_MAIN(TestRunFile)
#include "test_runfile.moc"

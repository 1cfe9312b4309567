// Golden fixtures of the `--json` outputs (tests/cli/fixtures/<command>.json, tests/common/golden_json.h): every
// command's JSON keeps its keys, nesting, types, names, counts, steps and settings. One workspace is shared and the
// commands build on each other (a scan feeds the recipe builder, the trained runs feed `compare`, the store
// commands count what the others stored). Tiny inputs keep it fast: the tiny random student, 4 probe prompts of 8
// tokens, a 4-step run of the demo pair. The fixtures' exact values follow from these inputs (worked out in the
// comments here); measured mismatch, qualities, timings, ids and temporary paths are placeholders.
#include "tests/common/cli_runner.h"
#include "tests/common/golden_json.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"

#include "core/store/run_store.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

using namespace mismatch;

namespace {

constexpr const char* kResources = MISMATCH_SOURCE_DIR "/resources";

// A command's --json output checked against its fixture: the parsed output, or why it does not match.
struct FixtureCheck {
    nlohmann::json json;
    std::string failure;
};

FixtureCheck checkAgainstFixture(const std::string& fixture, std::vector<std::string> arguments)
{
    arguments.insert(arguments.begin(), "--json");
    const test::CliResult result = test::runCli(arguments);
    std::string command = "mismatch";
    for (const std::string& argument : arguments) {
        command += " " + argument;
    }
    if (result.code != 0) {
        return {nullptr, command + ": exit " + std::to_string(result.code) + "\n" + result.err};
    }
    FixtureCheck check;
    try {
        check.json = nlohmann::json::parse(result.out);
    } catch (const std::exception& error) {
        return {nullptr, command + ": output is not JSON (" + error.what() + "):\n" + result.out};
    }
    const std::vector<std::string> differences = test::goldenDifferences(
        check.json, std::string(MISMATCH_SOURCE_DIR) + "/tests/cli/fixtures/" + fixture + ".json");
    if (!differences.empty()) {
        check.failure = command + " differs from fixtures/" + fixture + ".json:\n" + test::joinDifferences(differences);
    }
    return check;
}

} // namespace

// Runs the command and stops the test function unless its JSON matches the fixture; `output` names the output.
#define CHECK_FIXTURE(output, fixture, ...)                                                                            \
    const FixtureCheck output##Check = checkAgainstFixture(fixture, __VA_ARGS__);                                     \
    QVERIFY2(output##Check.failure.empty(), output##Check.failure.c_str());                                            \
    [[maybe_unused]] const nlohmann::json& output = output##Check.json

class TestJsonOutputs : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void modelInfoAndTokenize();
    void prompts();
    void recipeCheckAndImport();
    void kvCapacityAndExport();
    void sensitivityThenRecipeBuild();
    void prefixShiftAndBreakdown();
    void trainThenRunsShow();
    void calibrateThenCompare();
    void timeToQualityAndCompareObjectives();
    void runJobFile();
    void storeInfoAndRuns();

private:
    std::string path(const std::string& name) const { return (dir_.path() + "/" + QString::fromStdString(name)).toStdString(); }
    // An analysis command with the measurement options: 4 probe prompts, 8 tokens each, 200 bootstrap resamples.
    std::vector<std::string> measured(std::vector<std::string> arguments) const
    {
        arguments.insert(arguments.end(), {"--prompts", std::string(kResources) + "/prompts/arith-probe.jsonl",
                                              "--count", "4", "--max-tokens", "8", "--resamples", "200"});
        return arguments;
    }
    // `mismatch --workspace WORKSPACE ARGUMENTS...`
    std::vector<std::string> inWorkspace(std::vector<std::string> arguments) const
    {
        arguments.insert(arguments.begin(), {"--workspace", workspace_});
        return arguments;
    }

    QTemporaryDir dir_;
    std::string student_;
    std::string workspace_;
    std::string runFile_;
    std::int64_t trainedRun_ = 0;
};

void TestJsonOutputs::initTestCase()
{
    QVERIFY(dir_.isValid());
    student_ = path("student");
    test::writeTinyStudent(student_);
    workspace_ = path("workspace");
    // The demo pair's 4-step run (as tests/ui/test_study_dialogs.cpp's): 2 prompts a step, evaluated at steps 2 and 4
    // on 4 held-out problems.
    runFile_ = path("tiny.yaml");
    std::ofstream(runFile_) << "name: tiny\nstudent: " << kResources << "/models/arith-student\nteacher: " << kResources
                            << "/models/arith-teacher\nprompts: " << kResources
                            << "/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
                               "rollout:\n  sampling: {temperature: 1.0, max_tokens: 6, seed: 1}\n"
                               "optimizer: {learning_rate: 1.0e-3}\nbatch: {prompts_per_step: 2}\nsteps: 4\n"
                               "evaluation: {every: 2, prompts: "
                            << kResources << "/prompts/arith-heldout.jsonl, count: 4, max_tokens: 6}\nseed: 3\n"
                            << "threads: 1\n";
}

void TestJsonOutputs::modelInfoAndTokenize()
{
    // The tiny student (tests/common/tiny_student.h): hidden 64, 2 layers, 4 heads of 16, 2 KV heads, MLP 128, the
    // demo vocabulary of 258, tied embeddings, q/k/v biases, float32. Parameters: embedding 258 x 64 = 16512; per
    // layer q 64x64+64, k and v 32x64+32, o 64x64, gate/up 128x64, down 64x128, two norms of 64 = 37120; final norm
    // 64: 16512 + 2 x 37120 + 64 = 90816 in 1 + 2 x 12 + 1 = 26 tensors, 4 bytes each = 363264 bytes.
    CHECK_FIXTURE(info, "model-info", {"model", "info", student_});

    // The demo tokenizer is byte-level: each byte its own id, a space shown as "Ġ" (id 32), no special token added.
    CHECK_FIXTURE(tokens, "tokenize", {"tokenize", student_, "Q:(3+4)*2 =", "--add-special-tokens"});
}

void TestJsonOutputs::prompts()
{
    const std::string generated = path("probe-5.jsonl");
    CHECK_FIXTURE(written, "prompts-generate",
        {"prompts", "generate", "arith", "--split", "probe", "--count", "5", "--seed", "7", "--out", generated});
    QCOMPARE(written.at("files").at(0).at("path").get<std::string>(), generated);

    // Two problems written here: the longest prompt is "Q:(3+4)*2\n" (10 characters), the longest prompt with its
    // worked solution "Q:(3+4)*2\n" + "3+4=7;7*2=14;A:14\n" (10 + 18 = 28).
    const std::string file = path("hand.jsonl");
    std::ofstream(file) << R"({"id":"a","prompt":"Q:1+2\n","answer":"3"})" << "\n"
                        << R"({"id":"b","prompt":"Q:(3+4)*2\n","answer":"14"})" << "\n";
    CHECK_FIXTURE(checked, "prompts-check", {"prompts", "check", file, "--task", "arith"});
    QCOMPARE(checked.at("path").get<std::string>(), file);
}

void TestJsonOutputs::recipeCheckAndImport()
{
    const std::string fp8Kv = std::string(kResources) + "/recipes/fp8-kv.yaml";
    CHECK_FIXTURE(syntax, "recipe-check", {"recipe", "check", fp8Kv});
    // INT4 weights in 128-groups (one group per row of 64 or 128 columns), float32 scales, BF16 biases, norms and
    // embedding (bytes by layer in fixtures/recipe-check-model.json): per layer q 2048 + 256 + 128, k and v
    // 1024 + 128 + 64, o 2048 + 256, gate and up 4096 + 512, down 4096 + 256, norms 2 x 128 = 20992; embedding
    // 258 x 64 x 2 = 33024, final norm 128: 2 x 20992 + 33024 + 128 = 75136 of BF16's 2 x 90816 = 181632. The KV
    // cache stays BF16: 2 layers x (K, V) x 2 heads x 16 x 2 bytes = 256 bytes per token.
    CHECK_FIXTURE(plan, "recipe-check-model",
        {"recipe", "check", std::string(kResources) + "/recipes/int4-weights.yaml", "--model", student_});

    // An FP8 checkpoint's quantization_config (vLLM's fp8 method, 128x128 blocks, one layer left out): FP8 block
    // weights with dynamic FP8 activations, the ignored layer entirely BF16.
    const std::string config = path("fp8-config.json");
    std::ofstream(config) << R"({"architectures": ["Qwen2ForCausalLM"], "quantization_config": {"quant_method": "fp8",)"
                          << R"( "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128],)"
                          << R"( "ignored_layers": ["model.layers.0.mlp.down_proj"]}})";
    CHECK_FIXTURE(imported, "recipe-import",
        {"recipe", "import", config, "--name", "block", "--model", student_, "--out", path("imported.yaml")});
}

void TestJsonOutputs::kvCapacityAndExport()
{
    // 1 MiB under fp8-kv: 2 layers x (K, V) x 2 heads x 16 x 1 byte = 128 bytes per token, 2 x 2 x 2 x 4 = 32 bytes
    // of per-head float32 scales taken first: (1048576 - 32) / (16 x 128) = 511 whole blocks of 16, 8176 tokens;
    // BF16 (256 bytes per token): 1048576 / (16 x 256) = 256 blocks, 4096 tokens; 8176 / 4096 = 1.99609375.
    CHECK_FIXTURE(capacity, "kv-capacity",
        {"kv-capacity", "--model", student_, "--recipe", std::string(kResources) + "/recipes/fp8-kv.yaml", "--memory",
            "1MiB"});

    // fp8-per-tensor for vLLM into a directory: the config file and its three ready-to-run companions; two warnings
    // (vLLM's per-tensor activation scales, and KV scales a BF16 checkpoint does not have). The files' texts are
    // tests/export's golden files; here only the list and the shape.
    const std::string out = path("vllm-export");
    CHECK_FIXTURE(exported, "export",
        {"export", std::string(kResources) + "/recipes/fp8-per-tensor.yaml", "--to", "vllm", "--model", student_,
            "--out", out});
    QCOMPARE(exported.at("out").get<std::string>(), out);
}

void TestJsonOutputs::sensitivityThenRecipeBuild()
{
    // int8 per-channel weights cell by cell, KV cells off: 2 layers x 7 projections + the embedding/lm_head = 15.
    CHECK_FIXTURE(scan, "sensitivity",
        inWorkspace(measured({"sensitivity", student_, "--format", "int8", "--no-kv"})));
    const std::int64_t scanId = scan.at("scan_id").get<std::int64_t>();

    // A generous budget keeps every cell quantized: one step (everything quantized), nothing kept in BF16. int8
    // per channel: weights 1 byte each with one float32 scale per row, BF16 biases and norms; per layer 36864 values
    // + 512 rows x 4 + 128 biases x 2 + 2 norms x 64 x 2 = 39424 bytes, embedding 16512 + 258 x 4 = 17544, final norm
    // 128: 2 x 39424 + 17544 + 128 = 96520 of BF16's 181632. KV capacity of the default 8 GiB: BF16 cache (the recipe
    // leaves it) at 256 bytes per token = 33554432 tokens, the same as BF16.
    CHECK_FIXTURE(built, "recipe-build",
        inWorkspace({"recipe", "build", "--scan", std::to_string(scanId), "--budget", "1000", "--out",
            path("built.yaml")}));
}

void TestJsonOutputs::prefixShiftAndBreakdown()
{
    CHECK_FIXTURE(shift, "prefix-shift",
        inWorkspace(measured({"prefix-shift", student_, "--noise", "0.05", "--noise-seed", "4", "--cap", "2"})));
    // Two sources (KV cache and noise): the 4 subsets of them measured, Shapley computed (2 <= --shapley-max 4).
    CHECK_FIXTURE(breakdown, "breakdown",
        inWorkspace(measured({"breakdown", student_, "--recipe", std::string(kResources) + "/recipes/fp8-kv.yaml",
            "--noise", "0.05"})));
}

void TestJsonOutputs::trainThenRunsShow()
{
    CHECK_FIXTURE(trained, "train", inWorkspace({"train", runFile_, "--quiet"}));
    trainedRun_ = trained.at("run_id").get<std::int64_t>();
    // Steps 1 to 4 (synchronous: step s uses weight version s - 1, BF16 unit measured at every step; the learning rate
    // decays by a cosine from 1e-3 to 10% of it over the 4 steps: 1e-3 x (0.1 + 0.9 x (1 + cos(pi (s - 1) / 4)) / 2)),
    // 2 sequences a step (2 prompts, 1 sample each), evaluations at steps 0, 2 and 4 on 4 held-out problems.
    CHECK_FIXTURE(shown, "runs-show", inWorkspace({"runs", "show", std::to_string(trainedRun_)}));
}

void TestJsonOutputs::calibrateThenCompare()
{
    // The base run against noise 0.3, one seed each plus one null run, the rule at the evaluated steps 2 and 4. A
    // relative threshold of 10 (a 1000% quality rise) fails nothing, so no verdict, bracket or flag depends on the
    // measured qualities: every configuration passes, each bracket's largest passing point is the noise run's
    // mismatch and nothing fails; the null comparison passes and its noise floor is under half the threshold.
    CHECK_FIXTURE(calibration, "calibrate",
        inWorkspace({"calibrate", runFile_, "--noise", "0.3", "--threshold", "10", "--replicates", "1", "--resamples",
            "200", "--probe-count", "4"}));
    QCOMPARE(calibration.at("command").get<std::string>(),
        "mismatch calibrate " + runFile_
            + " --noise 0.3 --threshold 10 --resamples 200 --replicates 1 --probe-count 4");
    std::int64_t baseline = 0;
    for (const nlohmann::json& run : calibration.at("runs")) {
        if (run.at("label").get<std::string>() == "baseline") baseline = run.at("run_id").get<std::int64_t>();
    }
    // The calibration's baseline trains the same run file with the same seed as `train` did: the same computation,
    // so the two runs' evaluations are equal and the comparison is exact (a zero difference passes).
    CHECK_FIXTURE(compared, "compare",
        inWorkspace({"compare", std::to_string(trainedRun_), std::to_string(baseline), "--step", "4", "--resamples",
            "500", "--seed", "9"}));
    QCOMPARE(compared.at("run").at("quality").get<double>(), compared.at("baseline").at("quality").get<double>());
}

void TestJsonOutputs::timeToQualityAndCompareObjectives()
{
    // The target is the BF16 run's quality at its last step (4). Four steps at this learning rate leave the student's
    // held-out quality worse than it started (about 2.5 nats/token against 0.27 before training): both runs meet the
    // target at their step-0 evaluation, before any training time.
    CHECK_FIXTURE(ttq, "time-to-quality",
        inWorkspace({"time-to-quality", runFile_, "--recipe", std::string(kResources) + "/recipes/fp8-kv.yaml",
            "--staleness", "1"}));
    CHECK_FIXTURE(objectives, "compare-objectives",
        inWorkspace({"compare-objectives", runFile_, "--objectives", "opd_full_kl", "--noise", "0.3"}));
}

void TestJsonOutputs::runJobFile()
{
    // A study of two dependent steps with the inputs of sensitivityThenRecipeBuild's commands: a scan of the tiny
    // student, then a recipe built from it with the scan's id; the arguments are each job's command line. A job's
    // result is what its command's --json prints: each step's result matches that command's fixture.
    const std::string study = path("study.yaml");
    std::ofstream(study) << "steps:\n"
                            "  - id: scan\n    job: sensitivity\n    model: student\n    format: int8\n"
                            "    prompts: "
                         << kResources
                         << "/prompts/arith-probe.jsonl\n    count: 4\n    max_tokens: 8\n    resamples: 200\n"
                            "    no_kv: true\n"
                            "  - id: recipe\n    job: recipe_build\n    scan: ${scan.scan_id}\n    budget: 1000\n"
                            "    out: study-recipe.yaml\n";
    CHECK_FIXTURE(checked, "run-check", inWorkspace({"run", study, "--check"}));
    const test::CliResult result = test::runCli(inWorkspace({"--json", "run", study}));
    QVERIFY2(result.code == 0, result.err.c_str());
    nlohmann::json ran = nlohmann::json::parse(result.out);
    const std::vector<std::string> fixtures = {"sensitivity", "recipe-build"};
    QCOMPARE(ran.at("steps").size(), fixtures.size());
    for (std::size_t i = 0; i < fixtures.size(); ++i) {
        nlohmann::json& step = ran.at("steps").at(i);
        const std::vector<std::string> differences = test::goldenDifferences(
            step.at("result"), std::string(MISMATCH_SOURCE_DIR) + "/tests/cli/fixtures/" + fixtures[i] + ".json");
        QVERIFY2(differences.empty(),
            ("step " + std::to_string(i) + "'s result differs from fixtures/" + fixtures[i] + ".json:\n"
                + test::joinDifferences(differences))
                .c_str());
        step.erase("result");
    }
    const std::vector<std::string> differences = test::goldenDifferences(
        ran, std::string(MISMATCH_SOURCE_DIR) + "/tests/cli/fixtures/run.json");
    QVERIFY2(differences.empty(), ("mismatch run differs from fixtures/run.json:\n" + test::joinDifferences(differences)).c_str());
}

void TestJsonOutputs::storeInfoAndRuns()
{
    // What the commands above stored, in order: 17 runs (sensitivity, recipe build, prefix shift, breakdown; train;
    // calibrate with its baseline, noise and null runs; time-to-quality with its two runs; compare-objectives with
    // its two; the study's scan and recipe build). Steps: 8 training runs x 4 + one per recipe build = 34.
    // Evaluations: steps 0, 2 and 4 of the 6 runs of train, calibrate and time-to-quality, steps 0 and 4 (the
    // breaking step) of compare-objectives' 2 = 22. One model and one prompt set registered (the trained student and
    // its held-out set; the analyses of the tiny student register nothing), 2 built recipes, 2 scans, 1 calibration.
    CHECK_FIXTURE(info, "store-info", inWorkspace({"store", "info"}));
    QCOMPARE(info.at("schema_version").get<int>(), store::currentSchemaVersion());
    QCOMPARE(info.at("path").get<std::string>(), store::databasePath(workspace_));
    // Each run a catalogue job recorded keeps the job (its parameters that differ from the defaults, as the
    // command above gave them; paths absolute): the four analyses, train, calibrate, time-to-quality,
    // compare-objectives and the study's two steps (its scan's job equals the `sensitivity` command's: the same
    // inputs); the training runs those jobs started have none.
    CHECK_FIXTURE(runs, "store-runs", inWorkspace({"store", "runs"}));
}

MISMATCH_TEST_GUILESS_MAIN(TestJsonOutputs)
#include "test_json_outputs.moc"

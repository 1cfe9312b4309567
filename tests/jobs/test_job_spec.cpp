// The job catalogue (core/jobs): for every job, fromJson(toJson(s)) == s and the CLI's generated options read
// toArguments(s) back to s; validation names parameters (and the CLI its flags); job files name the file, line,
// column and parameter of a mistake; a study's references are checked and resolved.
#include "app/cli/job_options.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/jobs/experiment_jobs.h"
#include "core/jobs/job_file.h"
#include "core/common/runtime.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <fstream>

using namespace mismatch;

namespace {

// A spec with every parameter of the job set to a value other than its default that validate() accepts, so that
// the round trips carry every parameter (and lists of two items).
jobs::JobSpec fullSpec(const std::string& kind)
{
    jobs::JobSpec spec(kind);
    for (const jobs::Parameter& p : spec.definition().parameters) {
        nlohmann::json value;
        switch (p.type) {
        case jobs::ParameterType::Text:
            value = p.name == "kv_memory" ? "1GiB" : p.name == "capacity_memory" ? "4GiB"
                : p.name == "format"      ? "fp8_e4m3:channel"
                : p.name == "max_shard_size" ? "512MiB"
                : p.name == "shape"       ? "qwen3-0.6b" // zoo_shape: one of the known shapes
                                          : "text with space, and 'quote'";
            break;
        case jobs::ParameterType::Path: value = "/some dir/" + p.name + ".file"; break;
        case jobs::ParameterType::PathList: value = {"/a/" + p.name, "/b c/" + p.name}; break;
        case jobs::ParameterType::Choice: value = p.choices.back() == p.defaultValue ? p.choices.front() : p.choices.back(); break;
        case jobs::ParameterType::Integer:
            value = static_cast<std::int64_t>(std::min(p.low.value_or(0) + 7, p.high.value_or(1e9)));
            break;
        case jobs::ParameterType::IntegerList: value = {20, 40}; break;
        case jobs::ParameterType::Number:
            value = p.high ? p.low.value_or(0.0) + 0.37 * (*p.high - p.low.value_or(0.0)) : p.low.value_or(0.0) + 0.3;
            break;
        case jobs::ParameterType::NumberList: value = {0.05, 0.1}; break;
        case jobs::ParameterType::ChoiceList: value = {p.choices.at(1), p.choices.back()}; break;
        case jobs::ParameterType::TextList:
            // import's --map takes COLUMN=MEASURE entries
            value = p.name == "map" ? nlohmann::json {"full kl, a=mismatch_kl", "wall=wall_time_s"}
                                    : nlohmann::json {"a, b", "'c' d"};
            break;
        case jobs::ParameterType::Flag: value = true; break;
        }
        spec.set(p.name, value);
    }
    // Drop what may not be given together (the later of each excluded pair goes).
    for (const jobs::Parameter& p : spec.definition().parameters) {
        for (const std::string& other : p.excludes) {
            spec.unset(p.name == "threshold" || p.name == "budget" ? p.name : other);
        }
    }
    // The per-token-head KV formats compute their own scales: kv_scales goes with fp8_e4m3 only.
    if (spec.isSet("kv_scales") && spec.text("kv_format") != "fp8_e4m3") {
        spec.unset("kv_scales");
    }
    return spec;
}

} // namespace

class TestJobSpec : public QObject {
    Q_OBJECT

private slots:
    void catalogueIsWellFormed()
    {
        QVERIFY(jobs::catalogue().size() >= 3);
        for (const jobs::JobDefinition& job : jobs::catalogue()) {
            QVERIFY(!job.summary.empty());
            QVERIFY(job.run);
            for (const jobs::Parameter& p : job.parameters) {
                QVERIFY2(!p.help.empty() && !p.label.empty() && !p.flag.empty(), p.name.c_str());
                // The job file's own keys are not parameter names.
                QVERIFY2(p.name != "job" && p.name != "steps" && p.name != "id", p.name.c_str());
                // A label is the GUI's word: never a command-line flag.
                QVERIFY2(p.label.find("--") == std::string::npos, p.label.c_str());
                // Every default is a valid value of its parameter.
                for (const jobs::ParameterError& error : jobs::JobSpec(job).checkParameters()) {
                    QVERIFY2(job.parameter(error.parameter)->defaultValue.is_null(), error.parameter.c_str());
                }
                for (const std::string& other : p.excludes) {
                    QVERIFY(job.parameter(other));
                }
                for (const std::string& other : p.needs) {
                    QVERIFY(job.parameter(other));
                }
            }
        }
    }

    void roundTripsForEveryJob()
    {
        for (const jobs::JobDefinition& job : jobs::catalogue()) {
            const jobs::JobSpec spec = fullSpec(job.kind);
            const std::vector<jobs::ParameterError> problems = spec.checkParameters();
            const std::string problem
                = problems.empty() ? "" : job.kind + ": " + problems.front().parameter + ": " + problems.front().message;
            QVERIFY2(problems.empty(), problem.c_str());
            // JSON (what a run's config and a job file carry).
            const nlohmann::json json = spec.toJson();
            QVERIFY(jobs::JobSpec::fromJson(json) == spec);
            QCOMPARE(jobs::JobSpec::fromJson(nlohmann::json::parse(json.dump())).toJson(), json);
            // The command line, read by the CLI's generated options.
            const std::vector<std::string> arguments = spec.toArguments();
            QVERIFY2(cli::parseJobArguments(arguments) == spec, job.kind.c_str());
            // The job file.
            const jobs::JobFile file = jobs::parseJobFile(jobs::jobFileText(spec), "/tmp/x.yaml");
            QCOMPARE(file.steps.size(), std::size_t(1));
            QVERIFY2(file.steps[0].spec == spec, jobs::jobFileText(spec).c_str());
            // Defaults only: no parameters in JSON, the bare command.
            const jobs::JobSpec bare(job.kind);
            QCOMPARE(bare.toJson().at("parameters").size(), std::size_t(0));
            QCOMPARE(bare.toArguments(), job.command);
        }
    }

    // kv_scales belongs to fp8_e4m3: refused when set with a per-token-head KV format, and its default never counts
    // as set (`sensitivity --kv-format int8_per_token_head` alone was refused for a --kv-scales nobody gave).
    void kvScalesOnlyWithFp8E4m3()
    {
        for (const std::string kind : {"sensitivity", "recipe_build"}) {
            jobs::JobSpec spec(kind);
            spec.set("kv_format", "int8_per_token_head");
            const auto kvScalesErrors = [&spec] {
                int count = 0;
                for (const jobs::ParameterError& error : spec.definition().check(spec)) { // the job's own checks
                    count += error.parameter == "kv_scales" ? 1 : 0;
                }
                return count;
            };
            QCOMPARE(kvScalesErrors(), 0);
            spec.set("kv_scales", "per_tensor");
            QCOMPARE(kvScalesErrors(), 1);
            spec.set("kv_format", "fp8_e4m3");
            QCOMPARE(kvScalesErrors(), 0);
        }
        QVERIFY(cli::parseJobArguments(
                    {"sensitivity", "/m", "--format", "int8", "--prompts", "/p.jsonl", "--kv-format", "fp8_per_token_head"})
                    .text("kv_format")
            == "fp8_per_token_head");
    }

    // Numbers are written as a person would type them, and read back to the same double.
    void numbersAreWrittenShort()
    {
        QCOMPARE(jobs::valueText(nlohmann::json(10.0)), std::string("10"));
        QCOMPARE(jobs::valueText(nlohmann::json(0.05)), std::string("0.05"));
        QCOMPARE(jobs::valueText(nlohmann::json(0.1 + 0.2)), std::string("0.30000000000000004"));
        QCOMPARE(jobs::valueText(nlohmann::json(std::int64_t(20261108))), std::string("20261108"));
        QCOMPARE(jobs::valueText(nlohmann::json("a b")), std::string("a b"));
    }

    // A stored id given as 2^63 (one past int64) is refused with the range, from a JSON spec and from a job file's
    // text, instead of reading back as a negative id or saturating to 2^63 - 1.
    void wholeNumbersBeyondInt64AreRefusedWithTheRange()
    {
        jobs::JobSpec spec("admit");
        spec.set("calibration", nlohmann::json(std::uint64_t(1) << 63));
        std::string message;
        for (const jobs::ParameterError& error : spec.validate()) {
            message += error.parameter == "calibration" ? error.message : "";
        }
        QVERIFY2(message.find("9223372036854775807") != std::string::npos, message.c_str());
        QVERIFY2(message.find("9223372036854775808") != std::string::npos, message.c_str());
        spec.set("calibration", std::int64_t(9223372036854775807));
        for (const jobs::ParameterError& error : spec.validate()) {
            QVERIFY2(error.parameter != "calibration", error.message.c_str());
        }
        std::string error;
        QVERIFY(!jobs::parseValue(*spec.definition().parameter("calibration"), "9223372036854775808", &error));
        QVERIFY2(error.find("-9223372036854775808 to 9223372036854775807") != std::string::npos, error.c_str());
    }

    // A noise sigma is bounded with the reason (limits::kMaxNoiseSigma), in every job that takes one.
    void noiseSigmaBoundedWithItsReason()
    {
        for (const jobs::JobDefinition& job : jobs::catalogue()) {
            const jobs::Parameter* noise = job.parameter("noise");
            if (!noise) {
                continue;
            }
            jobs::JobSpec spec(job);
            spec.set("noise", jobs::isList(noise->type) ? nlohmann::json::array({1e39}) : nlohmann::json(1e39));
            std::string message;
            for (const jobs::ParameterError& error : spec.validate()) {
                message += error.parameter == "noise" ? error.message : "";
            }
            QVERIFY2(message.find("must be <= 100") != std::string::npos, (job.kind + ": " + message).c_str());
            QVERIFY2(message.find("overflow float32") != std::string::npos, (job.kind + ": " + message).c_str());
        }
    }

    void equalityIsOnEffectiveValues()
    {
        jobs::JobSpec a("sensitivity");
        jobs::JobSpec b("sensitivity");
        b.set("max_tokens", 64); // the default
        QVERIFY(a == b);
        b.set("max_tokens", 65);
        QVERIFY(a != b);
        QVERIFY(jobs::JobSpec("admit") != jobs::JobSpec("sensitivity"));
    }

    void validationNamesParameters()
    {
        jobs::JobSpec spec("sensitivity");
        spec.set("model", "/m").set("format", "int8").set("prompts", "/p.jsonl").set("max_tokens", 0);
        auto errors = spec.validate();
        QCOMPARE(errors.size(), std::size_t(1));
        QCOMPARE(errors[0].parameter, std::string("max_tokens"));
        QCOMPARE(errors[0].message, std::string("must be > 0, got 0"));
        spec.set("max_tokens", 8).set("format", "int9");
        errors = spec.validate();
        QCOMPARE(errors.size(), std::size_t(1));
        QCOMPARE(errors[0].parameter, std::string("format"));
        spec.set("format", "int8").set("activations", "fp4");
        // The recipe spellings of the activation formats (formats.h), the microscaling ones included.
        QCOMPARE(spec.validate().at(0).message,
            std::string("expected one of bf16, fp8_e4m3, mxfp8, mxfp4, nvfp4, got 'fp4'"));
        // Front-ends name the parameter in their own words.
        // (A quoted word that is no parameter, such as a value, stays as it is.)
        const auto flags = [&spec](const std::string& name) {
            const jobs::Parameter* p = spec.definition().parameter(name);
            return p ? p->longFlag() : name;
        };
        const auto labels = [&spec](const std::string& name) {
            const jobs::Parameter* p = spec.definition().parameter(name);
            return p ? p->label : name;
        };
        QCOMPARE(jobs::describeErrors(spec.validate(), flags),
            std::string("--activations: expected one of bf16, fp8_e4m3, mxfp8, mxfp4, nvfp4, got 'fp4'"));
        QVERIFY(jobs::describeErrors(spec.validate(), labels).rfind("... and its input activations to: ", 0) == 0);

        // The device: a missing CUDA device says why and what there is; a misspelling what is expected.
        const std::string missing = "cuda:" + std::to_string(availableDevices().size() - 1);
        spec.set("activations", "bf16").set("device", missing);
        errors = spec.validate();
        QCOMPARE(errors.at(0).parameter, std::string("device"));
        QVERIFY2(errors.at(0).message.rfind("device '" + missing + "': ", 0) == 0
                && errors.at(0).message.find("; available: cpu") != std::string::npos,
            errors.at(0).message.c_str());
        spec.set("device", "gpu");
        QCOMPARE(spec.validate().at(0).message, std::string("device 'gpu': expected cpu, cuda or cuda:N"));
        spec.set("device", "cpu");
        QVERIFY(spec.validate().empty());

        jobs::JobSpec admit("admit");
        admit.set("students", nlohmann::json::array({"/s"})).set("calibration", 1).set("threshold", 0.1);
        errors = admit.validate();
        QCOMPARE(errors.at(0).parameter, std::string("threshold"));
        QCOMPARE(errors.at(0).message, std::string("cannot be given together with 'calibration'"));
        QCOMPARE(jobs::describeErrors({errors.at(0)}, [&admit](const std::string& name) {
            const jobs::Parameter* p = admit.definition().parameter(name);
            return p ? p->label : name;
        }),
            std::string("Threshold (nats/token): cannot be given together with 'Calibration'"));
        jobs::JobSpec build("recipe_build");
        build.set("out", "/r.yaml").set("scan", 3);
        QCOMPARE(build.validate().at(0).parameter, std::string("budget"));
        QVERIFY_THROWS_EXCEPTION(InputError, build.set("no_such_parameter", 1));
        QVERIFY_THROWS_EXCEPTION(InputError, jobs::JobSpec("no_such_job"));
    }

    void cliErrorsNameFlags()
    {
        // A value out of range: an argument error naming the flag (exit 2), before any workspace is touched.
        QTemporaryDir dir;
        const std::string workspace = (dir.path() + "/ws").toStdString();
        auto result = test::runCli({"--workspace", workspace, "sensitivity", "/m", "--format", "int8", "--prompts",
            "/p.jsonl", "--max-tokens", "0"});
        QCOMPARE(result.code, 2);
        QVERIFY2(result.err.find("--max-tokens: must be > 0, got 0") != std::string::npos, result.err.c_str());
        result = test::runCli({"--workspace", workspace, "sensitivity", "/m", "--format", "int8", "--prompts",
            "/p.jsonl", "--count", "many"});
        QCOMPARE(result.code, 2);
        QVERIFY2(result.err.find("--count") != std::string::npos, result.err.c_str());
        // A problem across parameters: an input error in the CLI's words (exit 1).
        result = test::runCli({"--workspace", workspace, "recipe", "build", "--scan", "1", "--out", "/tmp/x.yaml"});
        QCOMPARE(result.code, 1);
        QVERIFY2(result.err.find("--budget: give '--budget' (nats per token) or '--calibration'") != std::string::npos,
            result.err.c_str());
        QVERIFY(!QFileInfo::exists(QString::fromStdString(workspace)));
        // The help texts come from the spec.
        result = test::runCli({"sensitivity", "--help"});
        QCOMPARE(result.code, 0);
        QVERIFY(result.out.find("Skip the KV-cache-only cells") != std::string::npos);
        QVERIFY(result.out.find("--kv-memory") != std::string::npos);
        result = test::runCli({"run", "--help"});
        QCOMPARE(result.code, 0);
        for (const jobs::JobDefinition& job : jobs::catalogue()) {
            QVERIFY2(result.out.find("\n" + job.kind + " (") != std::string::npos, job.kind.c_str());
        }
    }

    void jobFileErrorsNameFileLineColumnAndParameter()
    {
        const auto error = [](const std::string& text) -> std::string {
            try {
                jobs::parseJobFile(text, "/work/job.yaml");
            } catch (const InputError& e) {
                return e.what();
            }
            return "no error";
        };
        QCOMPARE(error("job: sensitivity\nmodel: m\ncount: many\n"),
            std::string("/work/job.yaml:line 3, column 8: parameter 'count': expected a whole number, got 'many'"));
        QCOMPARE(error("job: sensitivity\nmodle: m\n"),
            std::string("/work/job.yaml:line 2, column 1: job 'sensitivity' has no parameter 'modle' (see `mismatch "
                        "run --help`)"));
        QVERIFY(error("job: scan\n").find("line 1, column 6: unknown job 'scan'") != std::string::npos);
        // A parameter given twice is refused at its second place (it would otherwise silently take the last value),
        // in a job, in a study's step and for a study's 'steps'.
        QCOMPARE(error("job: sensitivity\nmodel: m\ncount: 4\ncount: 8\n"),
            std::string("/work/job.yaml:line 4, column 1: duplicate key 'count' (first given at line 3, column 1)"));
        QVERIFY(error("steps:\n  - id: a\n    job: sensitivity\n    id: b\n")
                    .find("line 4, column 5: duplicate key 'id' (first given at line 2, column 5)")
            != std::string::npos);
        QVERIFY(error("steps:\n  - {id: a, job: sensitivity}\nsteps:\n  - {id: b, job: sensitivity}\n")
                    .find("line 3, column 1: duplicate key 'steps'")
            != std::string::npos);
        QVERIFY(error("model: m\n").find("missing 'job:'") != std::string::npos);
        QVERIFY(error("job: admit\nstudents: [a, {b: 1}]\n").find("line 2, column 15: parameter 'students'")
            != std::string::npos);
        // Studies: ids, and references only to earlier steps.
        QVERIFY(error("steps:\n  - job: sensitivity\n").find("needs 'id:'") != std::string::npos);
        QVERIFY(error("steps:\n  - {id: a, job: sensitivity}\n  - {id: a, job: sensitivity}\n").find("used twice")
            != std::string::npos);
        QCOMPARE(error("steps:\n  - id: build\n    job: recipe_build\n    scan: ${scan.scan_id}\n"),
            std::string("/work/job.yaml:line 4, column 11: parameter 'scan': '${scan.scan_id}' must refer to the "
                        "result of an earlier step as ${ID.FIELD}"));
        QVERIFY(error("job: recipe_build\nscan: ${scan.scan_id}\n").find("this file is one job") != std::string::npos);

        // Validation after loading names the value's place too.
        const jobs::JobFile file = jobs::parseJobFile("job: sensitivity\nmodel: m\nformat: int9\nprompts: p\n",
            "/work/job.yaml");
        try {
            jobs::resolveStep(file, file.steps[0], {});
            QFAIL("int9 was accepted");
        } catch (const InputError& e) {
            QVERIFY2(std::string(e.what()).rfind("/work/job.yaml:line 3, column 9: parameter 'format': ", 0) == 0,
                e.what());
        }
        // Relative paths are relative to the file.
        QCOMPARE(file.steps[0].spec.text("model"), std::string("/work/m"));
    }

    // The checks that read a job's input files (calibrate's rule steps against its run file, train's run file) run
    // after validate() wherever a spec is about to run, and name the value's place in a job file.
    void inputChecksNameTheValuesPlace()
    {
        const std::string run = std::string(MISMATCH_SOURCE_DIR) + "/resources/runs/demo-opd.yaml";
        jobs::JobSpec calibrate("calibrate");
        calibrate.set("run_file", run).set("quick", true).set("rule_steps", nlohmann::json::array({21}));
        QVERIFY(calibrate.validate().empty()); // on its values alone, the spec is valid
        const std::vector<jobs::ParameterError> problems = calibrate.checkInputs();
        QCOMPARE(problems.size(), std::size_t(1));
        QCOMPARE(problems[0].parameter, std::string("rule_steps"));
        QVERIFY2(problems[0].message.rfind("step 21 is not evaluated by the base run (it runs 40 steps", 0) == 0,
            problems[0].message.c_str());
        calibrate.set("rule_steps", nlohmann::json::array({20, 40}));
        QVERIFY(calibrate.checkInputs().empty());
        QVERIFY_EXCEPTION_THROWN(jobs::JobSpec("train").set("run_file", "/no/such/run.yaml").requireValid("cli"),
            InputError);

        const auto error = [](const std::string& text) -> std::string {
            try {
                const jobs::JobFile file = jobs::parseJobFile(text, "/work/job.yaml");
                jobs::resolveStep(file, file.steps[0], {});
            } catch (const InputError& e) {
                return e.what();
            }
            return "no error";
        };
        QCOMPARE(error("job: calibrate\nrun_file: " + run + "\nquick: true\nrule_steps: [20, 21]\n"),
            std::string("/work/job.yaml:line 4, column 13: parameter 'rule_steps': step 21 is not evaluated by the base run "
                        "(it runs 40 steps and evaluates every 20 and at the last step)"));
        const std::string missing = error("job: train\nrun_file: missing.yaml\n");
        QVERIFY2(missing.rfind("/work/job.yaml:line 2, column 11: parameter 'run_file': ", 0) == 0
                && missing.find("/work/missing.yaml") != std::string::npos,
            missing.c_str());
    }

    void studiesTrainOnTheGivenDevice()
    {
        // time_to_quality and compare_objectives train every run on --device when given, else on the base run
        // file's device (a run file for another machine keeps its device; availability is checked when it runs).
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const std::string runFile = dir.filePath("elsewhere.yaml").toStdString();
        {
            const std::string r = resourceDirectory();
            std::ofstream out(runFile);
            out << "name: elsewhere\nstudent: " << r << "/models/arith-student\nteacher: " << r
                << "/models/arith-teacher\nprompts: " << r << "/prompts/arith-train.jsonl\nobjective: opd_full_kl\n"
                << "steps: 4\nevaluation: {every: 2, prompts: " << r << "/prompts/arith-heldout.jsonl, count: 4}\n"
                << "device: cuda:7\n";
        }
        for (const std::string kind : {"time_to_quality", "compare_objectives"}) {
            jobs::JobSpec spec(kind);
            spec.set("run_file", runFile);
            QVERIFY2(spec.validate().empty(), kind.c_str());
            const auto device = [&] {
                return kind == "time_to_quality" ? jobs::timeToQualityOptions(spec).base.device
                                                 : jobs::compareObjectivesOptions(spec).base.device;
            };
            QCOMPARE(device(), std::string("cuda:7"));
            spec.set("device", "cpu");
            QVERIFY2(spec.validate().empty(), kind.c_str());
            QCOMPARE(device(), std::string("cpu"));
            spec.set("device", "gpu");
            QCOMPARE(spec.validate().at(0).parameter, std::string("device"));
        }
    }

    void studyReferencesResolve()
    {
        const jobs::JobFile file = jobs::parseJobFile("steps:\n"
                                                      "  - id: scan\n    job: sensitivity\n    model: m\n"
                                                      "    format: int8\n    prompts: p.jsonl\n"
                                                      "  - id: build\n    job: recipe_build\n    scan: ${scan.scan_id}\n"
                                                      "    budget: 0.5\n    out: recipes/${scan.format}-built.yaml\n"
                                                      "  - id: screen\n    job: admit\n    students: m\n"
                                                      "    recipe: ${build.recipe_file}\n    threshold: 0.1\n"
                                                      "    prompts: p.jsonl\n    name: ${build.missing}\n",
            "/work/study.yaml");
        QVERIFY(file.study);
        QCOMPARE(file.steps.size(), std::size_t(3));
        std::map<std::string, jobs::JobResult> results;
        results["scan"] = {{"scan_id", 12}, {"format", "int8"}};
        const jobs::JobSpec build = jobs::resolveStep(file, file.steps[1], results);
        QCOMPARE(build.integer("scan"), std::int64_t(12));
        QCOMPARE(build.text("out"), std::string("/work/recipes/int8-built.yaml"));
        results["build"] = {{"recipe_file", "/work/recipes/int8-built.yaml"}};
        try {
            jobs::resolveStep(file, file.steps[2], results);
            QFAIL("a missing field was accepted");
        } catch (const InputError& e) {
            QCOMPARE(std::string(e.what()),
                std::string("/work/study.yaml:line 18, column 11: parameter 'name': ${build.missing}: the result of "
                            "step 'build' has no field 'missing'"));
        }
        // A whole-value reference of the wrong type.
        results["scan"] = {{"scan_id", "twelve"}, {"format", "int8"}};
        QVERIFY_THROWS_EXCEPTION(InputError, jobs::resolveStep(file, file.steps[1], results));
    }
};

MISMATCH_TEST_GUILESS_MAIN(TestJobSpec)
#include "test_job_spec.moc"

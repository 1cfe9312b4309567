// `mismatch run` on a tiny random model (seconds): a job file stores exactly what the same spec run directly
// (what a GUI dialog's job runs) stores, and a study file of three dependent steps (sensitivity scan -> recipe
// build from that scan -> admission check of the built recipe) runs end to end, each step using the result of
// the one before.
#include "core/common/error.h"
#include "core/analysis/calibrate.h"
#include "core/jobs/analysis_jobs.h"
#include "core/jobs/job_file.h"
#include "core/jobs/stored_specs.h"
#include "core/jobs/training_jobs.h"
#include "core/model/transformer.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"
#include "core/train/zoo.h"
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <iterator>

using namespace mismatch;
using test::parseJson;
using test::runCli;

class TestJobFiles : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        model_ = (dir_.path() + "/student").toStdString();
        test::writeTinyStudent(model_);
        probe_ = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
    }

    // A job file and the same spec run directly store the same scan, cell by cell, every number exactly.
    void jobFileStoresWhatTheSpecStores()
    {
        const std::string workspace = (dir_.path() + "/single").toStdString();
        const jobs::JobSpec spec = tinyScan();
        std::int64_t directScan = 0;
        {
            store::RunStore store = store::RunStore::open(store::databasePath(workspace));
            Progress progress;
            directScan = spec.run(store, progress).at("scan_id").get<std::int64_t>();
        }
        const std::string file = (dir_.path() + "/scan.job.yaml").toStdString();
        jobs::writeJobFile(file, spec);
        const auto result = runCli({"--workspace", workspace, "--json", "run", file});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        QCOMPARE(json["steps"].size(), std::size_t(1));
        QCOMPARE(json["steps"][0]["arguments"].get<std::vector<std::string>>(), spec.toArguments());
        const std::int64_t fileScan = json["steps"][0]["result"]["scan_id"].get<std::int64_t>();
        QVERIFY(fileScan != directScan);

        const store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        const auto a = store::sensitivityScan(store, directScan);
        const auto b = store::sensitivityScan(store, fileScan);
        QVERIFY(a && b);
        QCOMPARE(b->info.configJson, a->info.configJson); // every option and input digest
        QCOMPARE(b->info.bf16Unit, a->info.bf16Unit);
        QCOMPARE(b->cells.size(), a->cells.size());
        QCOMPARE(a->cells.size(), std::size_t(15)); // 2 layers x 7 projections + the tied embedding
        for (std::size_t i = 0; i < a->cells.size(); ++i) {
            QCOMPARE(b->cells[i].moduleGroup, a->cells[i].moduleGroup);
            QCOMPARE(b->cells[i].mismatch, a->cells[i].mismatch);
            QCOMPARE(b->cells[i].ciLow, a->cells[i].ciLow);
            QCOMPARE(b->cells[i].ciHigh, a->cells[i].ciHigh);
        }
        // --check reads and checks without running anything.
        const auto check = runCli({"--workspace", workspace, "run", "--check", file});
        QVERIFY2(check.code == 0, check.err.c_str());
        QCOMPARE(store::sensitivityScans(store).size(), std::size_t(2));
    }

    // A catalogue job's run keeps the spec it was started with; `mismatch run --resume RUN` reads it back
    // (JobSpec::ofRun) and continues the run to the scan an uninterrupted run stores.
    void storedRunsKeepTheirJobAndResume()
    {
        const std::string workspace = (dir_.path() + "/resume").toStdString();
        const jobs::JobSpec spec = tinyScan();
        std::int64_t whole = 0;
        std::int64_t cut = 0;
        {
            store::RunStore store = store::RunStore::open(store::databasePath(workspace));
            Progress progress;
            whole = spec.run(store, progress).at("run_id").get<std::int64_t>();
            // Cancelled once a few cells are stored.
            std::shared_ptr<Progress> cancelling;
            cancelling = std::make_shared<Progress>([&cancelling](double fraction, const std::string&) {
                if (fraction > 0.3) {
                    cancelling->cancel();
                }
            });
            QVERIFY_EXCEPTION_THROWN(spec.run(store, *cancelling, [&cut](std::int64_t id) { cut = id; }), CancelledError);
            QVERIFY(cut != 0);
            // A run started otherwise has no job; only the job's own run keeps it.
            const std::int64_t other = store.beginRun({"by hand", "sensitivity", "{}", std::nullopt});
            store.finishRun(other, store::RunStatus::Finished);
            QVERIFY(!jobs::JobSpec::ofRun(*store.run(other)));
            QVERIFY(jobs::JobSpec::ofRun(*store.run(whole)) == spec);
            QVERIFY(jobs::JobSpec::ofRun(*store.run(cut)) == spec);
            QVERIFY(store.run(cut)->status == store::RunStatus::Cancelled);

            const auto none = runCli({"--workspace", workspace, "run", "--resume", std::to_string(other)});
            QCOMPARE(none.code, 1);
            QVERIFY2(none.err.find("run " + std::to_string(other)) != std::string::npos
                    && none.err.find("not started by a job of the catalogue") != std::string::npos,
                none.err.c_str());
        }
        const auto resumed = runCli({"--workspace", workspace, "--json", "run", "--resume", std::to_string(cut)});
        QVERIFY2(resumed.code == 0, resumed.err.c_str());
        const nlohmann::json json = parseJson(resumed.out);
        QCOMPARE(json["run_id"].get<std::int64_t>(), cut);
        QCOMPARE(json["job"], spec.toJson());
        const store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        QVERIFY(store.run(cut)->status == store::RunStatus::Finished);
        const auto scans = store::sensitivityScans(store);
        std::optional<store::SensitivityScan> a;
        std::optional<store::SensitivityScan> b;
        for (const auto& scan : scans) {
            if (scan.runId == whole) a = store::sensitivityScan(store, scan.id);
            if (scan.runId == cut) b = store::sensitivityScan(store, scan.id);
        }
        QCOMPARE(scans.size(), std::size_t(2)); // the resumed run continued its own scan
        QVERIFY(a && b);
        QCOMPARE(b->cells.size(), a->cells.size());
        for (std::size_t i = 0; i < a->cells.size(); ++i) {
            QCOMPARE(b->cells[i].moduleGroup, a->cells[i].moduleGroup);
            QCOMPARE(b->cells[i].mismatch, a->cells[i].mismatch);
        }
        // A run the CLI's own command starts keeps its job too (paths made absolute).
        std::vector<std::string> arguments = {"--workspace", workspace, "--json"};
        const std::vector<std::string> command = spec.toArguments();
        arguments.insert(arguments.end(), command.begin(), command.end());
        const auto direct = runCli(arguments);
        QVERIFY2(direct.code == 0, direct.err.c_str());
        const std::int64_t directRun = parseJson(direct.out)["run_id"].get<std::int64_t>();
        const store::RunStore reread = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        QVERIFY(jobs::JobSpec::ofRun(*reread.run(directRun)) == spec);
        // FILE or --resume, not both and not neither.
        QCOMPARE(runCli({"--workspace", workspace, "run"}).code, 2);
        QCOMPARE(runCli({"--workspace", workspace, "run", "--check", "--resume", std::to_string(cut)}).code, 2);
    }

    // Runs stored before runs kept their job (schema < 6: a core function called without a spec leaves none) are
    // resumed through a spec migrated from their record (core/jobs/stored_specs.h), stored with the run at the first
    // resume; the resumed scan equals an uninterrupted one, a resumed admission check makes its missing decisions,
    // and a calibration's migrated spec gives options whose record equals the stored one (a changed base run file
    // is refused, naming the key).
    void olderRunsResumeFromAMigratedSpec()
    {
        const std::string workspace = (dir_.path() + "/migrate").toStdString();
        const jobs::JobSpec scanSpec = tinyScan();
        // Two checkpoints (admit refuses one given twice): the student and a copy of it.
        const std::string copy = (dir_.path() + "/student-copy").toStdString();
        std::filesystem::copy(model_, copy, std::filesystem::copy_options::recursive);
        jobs::JobSpec admitSpec("admit");
        admitSpec.set("students", std::vector<std::string> {model_, copy}).set("threshold", 1000.0);
        admitSpec.set("prompts", probe_).set("count", 4).set("max_tokens", 8).set("resamples", 300);
        // A progress that cancels its job once it passes `share`.
        std::vector<std::shared_ptr<Progress>> progresses;
        const auto cancelAfter = [&progresses](double share) -> Progress& {
            auto self = std::make_shared<Progress*>(nullptr);
            auto progress = std::make_shared<Progress>([self, share](double fraction, const std::string&) {
                if (fraction > share) {
                    (*self)->cancel();
                }
            });
            *self = progress.get();
            progresses.push_back(progress);
            return *progress;
        };
        std::int64_t whole = 0;
        std::int64_t cutScan = 0;
        std::int64_t cutCheck = 0;
        {
            store::RunStore store = store::RunStore::open(store::databasePath(workspace));
            Progress progress;
            whole = analysis::runSensitivity(store, jobs::sensitivityOptions(scanSpec), progress).runId;
            analysis::SensitivityOptions scan = jobs::sensitivityOptions(scanSpec);
            scan.onRunStarted = [&cutScan](std::int64_t id) { cutScan = id; };
            QVERIFY_EXCEPTION_THROWN(analysis::runSensitivity(store, scan, cancelAfter(0.3)), CancelledError);
            analysis::AdmissionOptions check = jobs::admissionOptions(admitSpec, store);
            check.onRunStarted = [&cutCheck](std::int64_t id) { cutCheck = id; };
            QVERIFY_EXCEPTION_THROWN(analysis::runAdmission(store, check, cancelAfter(0.5)), CancelledError);
            QVERIFY(!jobs::JobSpec::ofRun(*store.run(cutScan)) && !jobs::JobSpec::ofRun(*store.run(cutCheck)));
        }
        for (const std::int64_t cut : {cutScan, cutCheck}) {
            const auto resumed = runCli({"--workspace", workspace, "--json", "run", "--resume", std::to_string(cut)});
            QVERIFY2(resumed.code == 0, resumed.err.c_str());
        }
        const store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        // The migrated specs were stored and ask for what the runs measured.
        const std::optional<jobs::JobSpec> scanStored = jobs::JobSpec::ofRun(*store.run(cutScan));
        QVERIFY(scanStored);
        QCOMPARE(analysis::sensitivityConfigJson(jobs::sensitivityOptions(*scanStored)),
            analysis::sensitivityConfigJson(jobs::sensitivityOptions(scanSpec)));
        QVERIFY(jobs::JobSpec::ofRun(*store.run(cutCheck)));
        std::optional<store::SensitivityScan> a;
        std::optional<store::SensitivityScan> b;
        for (const auto& scan : store::sensitivityScans(store)) {
            if (scan.runId == whole) a = store::sensitivityScan(store, scan.id);
            if (scan.runId == cutScan) b = store::sensitivityScan(store, scan.id);
        }
        QVERIFY(a && b);
        QCOMPARE(b->cells.size(), a->cells.size());
        for (std::size_t i = 0; i < a->cells.size(); ++i) {
            QCOMPARE(b->cells[i].moduleGroup, a->cells[i].moduleGroup);
            QCOMPARE(b->cells[i].mismatch, a->cells[i].mismatch);
        }
        QVERIFY(store.run(cutCheck)->status == store::RunStatus::Finished);
        QCOMPARE(store::admissionDecisions(store, cutCheck).size(), std::size_t(2)); // 2 checkpoints x 1 candidate

        // A calibration (the demo pair's quick sweep) stopped once its run is recorded.
        const std::string calibrationWorkspace = (dir_.path() + "/migrate-calibration").toStdString();
        store::RunStore calibrationStore = store::RunStore::open(store::databasePath(calibrationWorkspace));
        jobs::JobSpec calibrate("calibrate");
        calibrate.set("quick", true).set("noise", std::vector<double> {0.1}).set("max_replicates", 2);
        analysis::CalibrationOptions options = jobs::calibrationOptions(calibrate);
        options.workspaceDirectory = calibrationWorkspace;
        std::int64_t calibrationRun = 0;
        auto stop = std::make_shared<Progress>();
        options.onRunStarted = [&calibrationRun, stop](std::int64_t id) {
            calibrationRun = id;
            stop->cancel();
        };
        QVERIFY_EXCEPTION_THROWN(analysis::runCalibration(calibrationStore, options, *stop), CancelledError);
        QVERIFY(calibrationRun != 0);
        const jobs::JobSpec migrated = jobs::storedSpec(calibrationStore, calibrationRun, "calibrate");
        QVERIFY(jobs::JobSpec::ofRun(*calibrationStore.run(calibrationRun)) == migrated);
        const std::string baseFile = calibrationWorkspace + "/migrated/calibrate-run-" + std::to_string(calibrationRun)
            + "-base.json";
        QCOMPARE(migrated.text("run_file"), baseFile);
        // Its options make the stored record: the resume gets past the record check and is cancelled at its start.
        analysis::CalibrationOptions again = jobs::calibrationOptions(migrated);
        auto cancelled = std::make_shared<Progress>();
        cancelled->cancel();
        QVERIFY_EXCEPTION_THROWN(
            analysis::resumeCalibration(calibrationStore, calibrationRun, again, *cancelled, calibrationWorkspace),
            CancelledError);
        // The base run file edited since: refused, naming the record's key.
        nlohmann::json base = nlohmann::json::parse(std::ifstream(baseFile));
        base["steps"] = base["steps"].get<std::int64_t>() + 2;
        std::ofstream(baseFile) << base.dump();
        try {
            analysis::resumeCalibration(
                calibrationStore, calibrationRun, jobs::calibrationOptions(migrated), *cancelled, calibrationWorkspace);
            QFAIL("a changed base run file was accepted");
        } catch (const InputError& error) {
            QVERIFY2(std::string(error.what()).find("'base'") != std::string::npos, error.what());
        }
    }

    // A job that writes a file: `mismatch run` of a "generate" job file writes what `mismatch generate` with the
    // spec's command line writes, byte for byte (same seeds, same engine), and reports the command's --json summary.
    void generateJobFileWritesWhatTheCommandWrites()
    {
        const std::string workspace = (dir_.path() + "/generate").toStdString();
        jobs::JobSpec spec("generate");
        spec.set("model", model_).set("prompts", probe_).set("max_tokens", 6).set("seed", 5).set("top_k", 20);
        spec.set("stop", nlohmann::json::array({"=", "+ 1"}));
        const std::string direct = (dir_.path() + "/direct.jsonl").toStdString();
        spec.set("out", direct);
        std::vector<std::string> arguments = {"--json"};
        const std::vector<std::string> command = spec.toArguments();
        arguments.insert(arguments.end(), command.begin(), command.end());
        const auto cli = runCli(arguments);
        QVERIFY2(cli.code == 0, cli.err.c_str());

        const std::string viaFile = (dir_.path() + "/via-file.jsonl").toStdString();
        spec.set("out", viaFile);
        const std::string file = (dir_.path() + "/generate.job.yaml").toStdString();
        jobs::writeJobFile(file, spec);
        const auto result = runCli({"--workspace", workspace, "--json", "run", file});
        QVERIFY2(result.code == 0, result.err.c_str());
        const auto read = [](const std::string& path) {
            std::ifstream in(path, std::ios::binary);
            return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        };
        QVERIFY(!read(direct).empty());
        QCOMPARE(read(viaFile), read(direct));
        nlohmann::json summary = parseJson(cli.out);
        nlohmann::json stepResult = parseJson(result.out)["steps"][0]["result"];
        for (nlohmann::json* json : {&summary, &stepResult}) {
            json->erase("seconds");
            json->erase("out");
        }
        QCOMPARE(stepResult, summary);
    }

    // Issue 46: a job file is never written over a file its job names (an input such as the prompt set, or its own
    // output) nor into a model directory the job reads; the refusal names both and writes nothing. Relative paths
    // count from the job file's directory, as the file will be read. The GUI's exports (job dialog, job queue,
    // Slurm submission, run table) write through these two functions.
    void jobFileIsNeverWrittenOverWhatTheJobNames()
    {
        QTemporaryDir scratch;
        const std::string prompts = (scratch.path() + "/prompts.jsonl").toStdString();
        std::filesystem::copy_file(probe_, prompts);
        const std::string promptText = readText(prompts);
        jobs::JobSpec spec("generate");
        spec.set("model", model_).set("prompts", prompts).set("out", (scratch.path() + "/out.jsonl").toStdString());
        const auto refused = [&](const std::string& path, const std::string& text, bool asText) {
            try {
                asText ? jobs::writeJobFileText(path, jobs::jobFileText(spec)) : jobs::writeJobFile(path, spec);
            } catch (const InputError& error) {
                QVERIFY2(std::string(error.what()).find(text) != std::string::npos, error.what());
                return;
            }
            QFAIL(("the job file " + path + " was written").c_str());
        };
        for (const bool asText : {false, true}) {
            refused(prompts, "'prompts' of the generate job", asText);
            refused(model_ + "/job.yaml", "inside the model directory " + model_, asText);
            refused((scratch.path() + "/out.jsonl").toStdString(), "'out' of the generate job", asText);
        }
        QCOMPARE(readText(prompts), promptText);
        QVERIFY(!std::filesystem::exists(model_ + "/job.yaml"));
        // A relative prompt path is the file beside the job file.
        spec.set("prompts", "prompts.jsonl");
        refused(prompts, "'prompts' of the generate job", false);
        QCOMPARE(readText(prompts), promptText);
        // Anywhere else the file is written, and reads back as the job.
        const std::string file = (scratch.path() + "/generate.job.yaml").toStdString();
        jobs::writeJobFile(file, spec);
        jobs::writeJobFileText((scratch.path() + "/again.job.yaml").toStdString(), readText(file));
        QCOMPARE(readText(scratch.path().toStdString() + "/again.job.yaml"), readText(file));
        QCOMPARE(jobs::loadJobFile(file).steps.at(0).spec.text("out"), spec.text("out"));
    }

    void studyOfThreeDependentSteps()
    {
        const std::string workspace = (dir_.path() + "/study").toStdString();
        QDir().mkpath(dir_.path() + "/study-files");
        const std::string study = (dir_.path() + "/study-files/study.yaml").toStdString();
        std::ofstream(study) << "steps:\n"
                                "  - id: scan\n"
                                "    job: sensitivity\n"
                                "    model: ../student\n"
                                "    format: int4\n"
                                "    prompts: "
                             << probe_
                             << "\n"
                                "    count: 4\n    max_tokens: 8\n    resamples: 300\n    no_kv: true\n"
                                "  - id: build\n"
                                "    job: recipe_build\n"
                                "    scan: ${scan.scan_id}\n"
                                "    budget: 1000\n"
                                "    out: recipes/built-${scan.scan_id}.yaml\n"
                                "  - id: screen\n"
                                "    job: admit\n"
                                "    students: [../student]\n"
                                "    recipe: ${build.recipe_file}\n"
                                "    threshold: 1000\n"
                                "    prompts: "
                             << probe_ << "\n    count: 4\n    max_tokens: 8\n    resamples: 300\n";
        const auto result = runCli({"--workspace", workspace, "--json", "run", study});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        QCOMPARE(json["steps"].size(), std::size_t(3));
        const nlohmann::json& scan = json["steps"][0]["result"];
        const nlohmann::json& build = json["steps"][1]["result"];
        const nlohmann::json& screen = json["steps"][2]["result"];
        // The build ordered its cells by the study's own scan and wrote where the study said.
        QCOMPARE(build["scan_id"], scan["scan_id"]);
        const std::string recipe = dir_.path().toStdString() + "/study-files/recipes/built-"
            + std::to_string(scan["scan_id"].get<std::int64_t>()) + ".yaml";
        QCOMPARE(build["recipe_file"].get<std::string>(), recipe);
        QVERIFY(QFile::exists(QString::fromStdString(recipe)));
        // The screen measured that recipe: its stored decision names it.
        QCOMPARE(screen["decisions"].size(), std::size_t(1));
        QCOMPARE(screen["decisions"][0]["decision"].get<std::string>(), std::string("admit"));
        QCOMPARE(screen["decisions"][0]["candidate"].get<std::string>(),
            "built-" + std::to_string(scan["scan_id"].get<std::int64_t>()));

        const store::RunStore store = store::RunStore::open(store::databasePath(workspace), store::OpenMode::ReadOnly);
        std::vector<std::string> kinds;
        for (const store::RunInfo& run : store.listRuns()) {
            kinds.push_back(run.kind);
        }
        std::sort(kinds.begin(), kinds.end());
        QCOMPARE(kinds, (std::vector<std::string> {"admit", "recipe_build", "sensitivity"}));
        const auto decisions = store::admissionDecisions(store, screen["run_id"].get<std::int64_t>());
        QCOMPARE(decisions.size(), std::size_t(1));
        QVERIFY2(decisions[0].candidateJson.find(recipe) != std::string::npos, decisions[0].candidateJson.c_str());
        QCOMPARE(decisions[0].mismatch, screen["decisions"][0]["mismatch"]["estimate"].get<double>());
    }

    // A step that fails at run time stops the study, named with its place; later steps do not run.
    void failingStepIsNamed()
    {
        const std::string workspace = (dir_.path() + "/failing").toStdString();
        const std::string study = (dir_.path() + "/failing.yaml").toStdString();
        std::ofstream(study) << "steps:\n"
                                "  - id: scan\n    job: sensitivity\n    model: no-such-model\n    format: int8\n"
                                "    prompts: p.jsonl\n"
                                "  - id: build\n    job: recipe_build\n    scan: ${scan.scan_id}\n    budget: 1\n"
                                "    out: r.yaml\n";
        const auto result = runCli({"--workspace", workspace, "run", study});
        QCOMPARE(result.code, 1);
        QVERIFY2(result.err.find(study + ":line 2, column 5: step 'scan': ") != std::string::npos, result.err.c_str());
        QVERIFY2(result.err.find("no-such-model") != std::string::npos, result.err.c_str());
    }

private:
    // An int8 scan of the tiny student on 4 probe prompts (seconds).
    static std::string readText(const std::string& path)
    {
        std::ifstream in(path, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    jobs::JobSpec tinyScan() const
    {
        jobs::JobSpec spec("sensitivity");
        spec.set("model", model_).set("format", "int8").set("prompts", probe_).set("count", 4).set("max_tokens", 8);
        spec.set("no_kv", true).set("resamples", 300);
        return spec;
    }

    QTemporaryDir dir_;
    std::string model_;
    std::string probe_;
};

MISMATCH_TEST_GUILESS_MAIN(TestJobFiles)
#include "test_job_files.moc"

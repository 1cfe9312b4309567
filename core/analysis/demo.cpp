#include "core/analysis/demo.h"

#include "core/analysis/protocol.h"
#include "core/store/analysis_store.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/hash.h"
#include "core/common/message_text.h"

#include <cstdio>
#include "core/io/prompt_set.h"
#include "core/model/model_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

std::vector<fs::path> sortedEntries(const fs::path& directory)
{
    std::vector<fs::path> entries;
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
        return entries;
    }
    for (const auto& entry : fs::directory_iterator(directory)) {
        entries.push_back(entry.path());
    }
    std::sort(entries.begin(), entries.end());
    return entries;
}

std::optional<double> optionalNumber(const nlohmann::json& value)
{
    return value.is_number() ? std::optional<double>(value.get<double>()) : std::nullopt;
}

}  // namespace

std::int64_t storeShippedCalibration(store::RunStore& store, const std::string& path, const std::string& resourceDirectory)
{
    std::ifstream in(path);
    if (!in) {
        throw InputError(path, "file", "cannot be read");
    }
    nlohmann::json file;
    try {
        file = nlohmann::json::parse(in);
        if (!file.is_object() || !file.contains("protocol")) {
            throw InputError(path, "protocol",
                "missing: a shipped calibration must come from `mismatch calibrate --json` of this version, which "
                "stores the measurement protocol its budget is screened under");
        }
        // The protocol's prompt set is a built-in one: its path on this machine.
        file.at("protocol")["prompts"]
            = (fs::path(resourceDirectory) / file.at("prompts_in_resources").get<std::string>()).lexically_normal().string();
        protocolFromJson(file.at("protocol"), path);
        const std::string configJson = file.dump();
        // Stored once per content: a workspace that holds an earlier shipped calibration (a tool update re-made the
        // file) gets the new one beside it, named with its content's digest, instead of screening against the old
        // budget under the same name.
        std::string name = file.at("name").get<std::string>() + " (shipped)";
        bool nameTaken = false;
        for (const auto& existing : store::calibrations(store)) {
            if (existing.name.rfind(name.substr(0, name.size() - 1), 0) != 0) {
                continue;
            }
            if (existing.configJson == configJson) {
                return existing.id;
            }
            nameTaken = nameTaken || existing.name == name;
        }
        if (nameTaken) {
            char digest[17];
            std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(fnv1a(configJson)));
            name = file.at("name").get<std::string>() + " (shipped " + std::string(digest, 8) + ")";
        }
        store::CalibrationInfo info;
        info.name = name;
        info.student
            = (fs::path(resourceDirectory) / file.at("student_in_resources").get<std::string>()).lexically_normal().string();
        info.configJson = configJson;
        std::map<std::int64_t, std::int64_t> runIds; // id in the file -> record run here
        for (const auto& run : file.at("runs")) {
            const std::int64_t id = store.beginRun({file.at("name").get<std::string>() + "/" + run.at("label").get<std::string>()
                    + "/r" + std::to_string(run.at("replicate").get<std::int64_t>()) + " (shipped)",
                "train", nlohmann::json {{"shipped_calibration", fs::absolute(path).string()}, {"sweep_run", run}}.dump(),
                std::nullopt});
            store.finishRun(id, store::RunStatus::Finished);
            runIds[run.at("run_id").get<std::int64_t>()] = id;
        }
        std::vector<store::CalibrationPoint> points;
        for (const auto& p : file.at("points")) {
            store::CalibrationPoint point;
            point.runId = runIds.at(p.at("run_id").get<std::int64_t>());
            point.step = p.at("step").get<std::int64_t>();
            point.label = p.at("label").get<std::string>();
            point.replicates = p.at("replicates").get<std::int64_t>();
            point.mismatch = p.at("mismatch").get<double>();
            point.bf16Unit = optionalNumber(p.at("bf16_unit"));
            point.quality = p.at("quality").get<double>();
            point.accuracy = optionalNumber(p.at("accuracy"));
            point.relativeChange = optionalNumber(p.at("relative_change"));
            point.ciLow = optionalNumber(p.at("ci_low"));
            point.ciHigh = optionalNumber(p.at("ci_high"));
            point.changeLow = p.contains("change_low") ? optionalNumber(p.at("change_low")) : std::nullopt;
            point.changeHigh = p.contains("change_high") ? optionalNumber(p.at("change_high")) : std::nullopt;
            // Written before the screen statistic: its mismatch is the training mean, with none beside it.
            point.trainingMismatch
                = p.contains("training_mismatch") ? optionalNumber(p.at("training_mismatch")) : std::nullopt;
            // A calibration written before three verdicts holds "failed" alone.
            point.verdict = p.contains("verdict") ? p.at("verdict").get<std::string>()
                                                  : (p.at("failed").get<bool>() ? "fail" : "pass");
            points.push_back(point);
        }
        std::vector<store::CalibrationBracket> brackets;
        for (const auto& b : file.at("brackets")) {
            store::CalibrationBracket bracket;
            bracket.step = b.at("step").get<std::int64_t>();
            bracket.largestPassing = optionalNumber(b.at("largest_passing"));
            bracket.smallestFailing = optionalNumber(b.at("smallest_failing"));
            bracket.threshold = optionalNumber(b.at("threshold"));
            brackets.push_back(bracket);
        }
        return store::addCalibration(store, info, points, brackets);
    } catch (const nlohmann::json::exception& error) {
        throw InputError(path, "calibration", std::string("expected the JSON of `mismatch calibrate --json` of a "
                                              "built-in student: ") + jsonErrorDetail(error));
    } catch (const std::out_of_range&) {
        throw InputError(path, "points", "a point names a run that is not in \"runs\"");
    }
}

void checkDemoOptions(const DemoOptions& options)
{
    if (options.probeCount && (*options.probeCount < 2 || *options.probeCount > limits::kMaxDemoProbeCount)) {
        throw InputError("demo", "count",
            "the probe count must lie in 2.." + std::to_string(limits::kMaxDemoProbeCount)
                + " (the shipped protocol's is 128; each probe prompt is one generation per candidate), got "
                + std::to_string(*options.probeCount));
    }
}

DemoReport runDemo(store::RunStore& store, const DemoOptions& options, Progress& progress)
{
    checkDemoOptions(options);
    DemoReport report;
    const fs::path resources(options.resourceDirectory);
    // The demo is itself a run of the workspace, so that the GUI's run browser and `store runs` show it.
    report.runId = store.beginRun({"demo", "demo",
        nlohmann::json{{"resources", fs::absolute(resources).string()}}.dump(), std::nullopt});
    store::recordRunOutcome(store, report.runId, [&] {
        progress.update(0.0, "registering built-in models");
        for (const fs::path& directory : sortedEntries(resources / "models")) {
            const fs::path configFile = directory / "config.json";
            if (!fs::is_regular_file(configFile)) {
                continue;
            }
            progress.checkCancelled();
            // Opening validates config.json against the checkpoint (names, shapes, dtypes).
            const model::ModelFiles files = model::openModelDirectory(directory.string());
            store::ModelRecord record;
            record.name = directory.filename().string();
            record.path = fs::absolute(directory).string();
            record.architecture = model::toString(files.config.architecture);
            record.parameterCount = model::checkpointStats(files.checkpoint).parameterCount;
            std::ifstream in(configFile);
            record.configJson = nlohmann::json::parse(in).dump();
            record.id = store.addModel(record);
            report.models.push_back(record);
        }
        progress.update(0.5, "registering built-in prompt sets");
        for (const fs::path& file : sortedEntries(resources / "prompts")) {
            if (file.extension() != ".jsonl") {
                continue;
            }
            progress.checkCancelled();
            store::PromptSetRecord record;
            record.name = file.stem().string();
            record.path = fs::absolute(file).string();
            record.promptCount = static_cast<std::int64_t>(io::loadPromptSet(file.string()).prompts.size());
            record.id = store.addPromptSet(record);
            report.promptSets.push_back(record);
        }
        if (options.screen) {
            progress.update(0.6, "storing the shipped calibration");
            const fs::path calibrationFile = resources / "calibrations" / "arith-student.json";
            report.calibrationId = storeShippedCalibration(store, calibrationFile.string(), resources.string());
            const auto calibration = store::calibration(store, *report.calibrationId);
            const nlohmann::json shipped = nlohmann::json::parse(calibration->info.configJson);
            report.calibrationCommand = shipped.value("command", "");
            for (const auto& bracket : calibration->brackets) {
                if (bracket.threshold) {
                    report.calibrationStep = bracket.step;
                    break;
                }
            }
            const fs::path checkpoint
                = resources / "models" / ("arith-student-step" + std::to_string(report.calibrationStep));
            if (!fs::is_directory(checkpoint)) {
                throw InputError(checkpoint.string(), "",
                    "the shipped student checkpoint of the calibration's step " + std::to_string(report.calibrationStep)
                        + " is missing (expected a model directory with state.json; see resources/calibrations/README.md)");
            }
            AdmissionOptions admission;
            admission.checkpoints = {checkpoint.string()};
            admission.candidates = loadCandidates((resources / "candidates" / "demo.yaml").string());
            admission.calibrationId = report.calibrationId;
            // The calibration's protocol (probe prompts, sampling, KV-scale policy), so that the screened mismatch is
            // on the budget's scale; a smaller probe count is allowed and labelled as another protocol.
            if (options.probeCount) {
                const MeasurementProtocol protocol = protocolFromJson(shipped.at("protocol"), calibrationFile.string());
                if (*options.probeCount != protocol.count) {
                    admission.protocolFromCalibration = false;
                    admission.allowProtocolMismatch = true;
                    admission.probePath = protocol.prompts;
                    admission.count = *options.probeCount;
                    admission.settings = applyProtocol(protocol, admission.settings);
                }
            }
            Progress screening = progress.child(0.65, 1.0, "");
            report.admission = runAdmission(store, admission, screening);
            // What the demo screened, for `mismatch report` on the demo run.
            store.setRunConfig(report.runId,
                nlohmann::json {{"resources", fs::absolute(resources).string()},
                    {"calibration_id", *report.calibrationId}, {"admission_run_id", report.admission->runId}}
                    .dump());
        }
    });
    store.finishRun(report.runId, store::RunStatus::Finished);
    report.summary = store.summary();
    progress.update(1.0, "done");
    return report;
}

nlohmann::json toJson(const DemoReport& report, const std::string& databasePath)
{
    nlohmann::json models = nlohmann::json::array();
    for (const auto& m : report.models) {
        models.push_back({{"id", m.id}, {"name", m.name}, {"path", m.path}, {"architecture", m.architecture},
            {"parameters", m.parameterCount}});
    }
    nlohmann::json sets = nlohmann::json::array();
    for (const auto& p : report.promptSets) {
        sets.push_back({{"id", p.id}, {"name", p.name}, {"path", p.path}, {"prompts", p.promptCount}});
    }
    return {{"workspace", databasePath}, {"models", models}, {"prompt_sets", sets},
        {"calibration_id", report.calibrationId ? nlohmann::json(*report.calibrationId) : nlohmann::json(nullptr)},
        {"calibration_command", report.calibrationCommand}, {"calibration_step", report.calibrationStep},
        {"admission", report.admission ? toJson(*report.admission) : nlohmann::json()},
        {"runs", report.summary.runs}, {"schema_version", report.summary.schemaVersion}};
}

}  // namespace mismatch::analysis

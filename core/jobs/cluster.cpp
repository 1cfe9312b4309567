#include "core/jobs/cluster.h"

#include "core/analysis/calibrate.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/provenance.h"
#include "core/common/shell_quote.h"
#include "core/common/utc_time.h"
#include "core/engine/engine_model.h"
#include "core/engine/memory_plan.h"
#include "core/jobs/analysis_jobs.h"
#include "core/jobs/cluster_internal.h"
#include "core/jobs/training_jobs.h"
#include "core/model/config.h"
#include "core/store/run_store.h"
#include "core/store/store_merge.h"
#include "core/train/run_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/file.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace mismatch::jobs::cluster {

namespace {

constexpr int kFormat = 1;

fs::path submissionFile(const std::string& directory)
{
    return fs::path(directory) / "submission.json";
}

nlohmann::json readSubmission(const std::string& directory)
{
    const fs::path file = submissionFile(directory);
    std::ifstream in(file);
    if (!in) {
        throw InputError(directory, "", "not a cluster submission (no submission.json; `mismatch submit` writes one)");
    }
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json submission = nlohmann::json::parse(text.str(), nullptr, false);
    if (!submission.is_object() || submission.value("format", 0) != kFormat || !submission.contains("units")) {
        throw InputError(file.string(), "", "not a submission this version reads (format " + std::to_string(kFormat) + ")");
    }
    return submission;
}

void writeSubmission(const std::string& directory, const nlohmann::json& submission)
{
    writeFileAtomically(submissionFile(directory).string(), submission.dump(2) + "\n");
}

std::string unitId(std::size_t number)
{
    std::ostringstream id;
    id << "u" << std::setw(3) << std::setfill('0') << number;
    return id.str();
}

// Whether a spec names rows of the workspace it runs in (a stored calibration or scan): such a job cannot run in a
// fresh shard, so it runs in the workspace as the final step.
bool readsWorkspaceRows(const JobSpec& spec)
{
    for (const char* name : {"calibration", "scan"}) {
        if (spec.definition().parameter(name) && spec.given(name)) {
            return true;
        }
    }
    return false;
}

Unit unitOf(std::size_t number, const std::string& label, JobSpec spec)
{
    Unit unit {unitId(number), label, unitId(number), 1, {}, std::move(spec), {}};
    return unit;
}

void splitCalibration(const JobSpec& spec, UnitPlan& plan)
{
    const analysis::CalibrationOptions options = calibrationOptions(spec);
    for (const analysis::CalibrationUnit& unit : analysis::calibrationFirstRound(options)) {
        JobSpec unitSpec = spec;
        unitSpec.set("unit", analysis::toString(unit));
        plan.units.push_back(unitOf(plan.units.size() + 1, "training run " + analysis::toString(unit), unitSpec));
    }
    JobSpec decision = spec;
    decision.set("from_units", true);
    plan.finalStep = decision;
}

void splitSensitivity(const JobSpec& spec, UnitPlan& plan)
{
    const model::ModelConfig config = model::loadConfig((fs::path(spec.text("model")) / "config.json").string());
    std::vector<std::int64_t> layers;
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        layers.push_back(layer);
    }
    if (!spec.flag("no_embedding")) {
        layers.push_back(-1); // the embedding / lm_head cells
    }
    for (const std::int64_t layer : layers) {
        JobSpec unitSpec = spec;
        unitSpec.set("layers", nlohmann::json::array({layer}));
        plan.units.push_back(unitOf(plan.units.size() + 1,
            layer < 0 ? std::string("embedding / lm_head cells") : "layer " + std::to_string(layer), unitSpec));
    }
    JobSpec assembly = spec;
    assembly.set("from_units", true);
    plan.finalStep = assembly;
}

// An admission check against an explicit threshold: one unit per candidate and checkpoint (the candidate written
// as admit's one-candidate parameters, so that the unit needs no file of its own).
void splitAdmission(const JobSpec& spec, UnitPlan& plan)
{
    const std::vector<analysis::Candidate> candidates = candidatesOf(spec);
    const std::vector<std::string> students = spec.strings("students");
    for (const std::string& student : students) {
        for (const analysis::Candidate& candidate : candidates) {
            JobSpec unitSpec = spec;
            unitSpec.unset("candidates");
            unitSpec.set("students", nlohmann::json::array({student}));
            unitSpec.set("name", candidate.name);
            // Normalized as the stored spec normalizes paths, so that a killed unit's resume finds its own run.
            unitSpec.set("recipe", candidate.recipePath.empty()
                    ? nlohmann::json()
                    : nlohmann::json(fs::absolute(candidate.recipePath).lexically_normal().string()));
            unitSpec.set("staleness", candidate.staleness);
            unitSpec.set("noise", candidate.noise);
            unitSpec.set("noise_seed", static_cast<std::int64_t>(candidate.noiseSeed));
            unitSpec.set("noise_modules", candidate.noiseModules);
            plan.units.push_back(unitOf(plan.units.size() + 1,
                "candidate " + candidate.name + " at " + fs::path(student).filename().string(), unitSpec));
        }
    }
}

// The ids of the steps a study step refers to (${ID.FIELD} in its values).
std::set<std::string> referencedSteps(const JobFileStep& step)
{
    std::set<std::string> ids;
    for (const auto& [parameter, text] : step.references) {
        for (std::size_t at = text.find("${"); at != std::string::npos; at = text.find("${", at + 2)) {
            const std::size_t dot = text.find('.', at);
            if (dot != std::string::npos) {
                ids.insert(text.substr(at + 2, dot - at - 2));
            }
        }
    }
    return ids;
}

// The steps of a study: each its own unit, after the steps it refers to. Steps connected by references share one
// shard (so that ${ID.FIELD} names rows of the shard the step runs in, whichever of its references it names), the
// shard of the component's first step; the steps of one shard run one after another (one writer at a time).
void splitStudy(const JobFile& file, UnitPlan& plan)
{
    std::map<std::string, std::string> parent;
    const std::function<std::string(const std::string&)> root = [&](const std::string& id) {
        return parent[id] == id ? id : parent[id] = root(parent[id]);
    };
    for (const JobFileStep& step : file.steps) {
        parent[step.id] = step.id;
        for (const std::string& id : referencedSteps(step)) {
            const std::string a = root(id);
            const std::string b = root(step.id);
            if (a != b) {
                parent[b] = a; // an earlier step's root stays the root: the component's first step
            }
        }
    }
    std::map<std::string, std::string> lastOfShard;
    for (const JobFileStep& step : file.steps) {
        if (readsWorkspaceRows(step.spec)) {
            throw InputError(file.path, "step " + step.id,
                "names a calibration or scan stored in the workspace; on a cluster a study's steps may refer only to "
                "the results of its own steps (${ID.FIELD}): run this study with `mismatch run`");
        }
        Unit unit {step.id, step.spec.kind(), root(step.id), 1, {}, withAbsolutePaths(step.spec), step.references};
        std::set<std::string> after = referencedSteps(step);
        if (lastOfShard.count(unit.shard)) {
            after.insert(lastOfShard.at(unit.shard)); // one writer per shard at a time
        }
        unit.after.assign(after.begin(), after.end());
        lastOfShard[unit.shard] = step.id;
        plan.units.push_back(unit);
    }
}

} // namespace

UnitPlan splitUnits(const JobFile& file)
{
    UnitPlan plan;
    if (file.study) {
        plan.kind = "study";
        splitStudy(file, plan);
        return plan;
    }
    const JobSpec spec = withAbsolutePaths(file.steps.front().spec);
    spec.requireValid(file.path);
    plan.kind = spec.kind();
    if (readsWorkspaceRows(spec)) {
        plan.finalStep = spec; // it reads the workspace: the one writer runs it after the merge
    } else if (spec.kind() == "calibrate" && !spec.given("unit") && !spec.flag("from_units")) {
        splitCalibration(spec, plan);
    } else if (spec.kind() == "sensitivity" && !spec.given("layers") && !spec.flag("from_units")) {
        splitSensitivity(spec, plan);
    } else if (spec.kind() == "admit") {
        splitAdmission(spec, plan);
    } else {
        plan.units.push_back(unitOf(1, spec.kind(), spec));
    }
    return plan;
}

std::string toString(UnitState state)
{
    switch (state) {
    case UnitState::Pending: return "pending";
    case UnitState::Running: return "running";
    case UnitState::Done: return "done";
    case UnitState::Failed: return "failed";
    case UnitState::Merged: return "merged";
    }
    return "pending";
}

std::int64_t SubmissionStatus::count(UnitState state) const
{
    return std::count_if(units.begin(), units.end(), [state](const UnitStatus& unit) { return unit.state == state; });
}

namespace {

nlohmann::json unitToJson(const Unit& unit)
{
    return {{"id", unit.id}, {"label", unit.label}, {"shard", unit.shard}, {"stage", unit.stage},
        {"after", unit.after}, {"spec", unit.spec.toJson()}, {"references", unit.references}};
}

Unit unitFromJson(const nlohmann::json& json, const std::string& source)
{
    Unit unit {json.at("id").get<std::string>(), json.at("label").get<std::string>(),
        json.at("shard").get<std::string>(), json.at("stage").get<std::int64_t>(),
        json.at("after").get<std::vector<std::string>>(), JobSpec::fromJson(json.at("spec"), source),
        json.value("references", std::map<std::string, std::string> {})};
    return unit;
}

std::vector<Unit> unitsOf(const nlohmann::json& submission, const std::string& directory)
{
    std::vector<Unit> units;
    for (const nlohmann::json& unit : submission.at("units")) {
        units.push_back(unitFromJson(unit, submissionFile(directory).string()));
    }
    return units;
}

const Unit& findUnit(const std::vector<Unit>& units, const std::string& id, const std::string& directory)
{
    for (const Unit& unit : units) {
        if (unit.id == id) {
            return unit;
        }
    }
    throw InputError(submissionFile(directory).string(), "units", "there is no unit '" + id + "'");
}

fs::path resultFile(const std::string& directory, const std::string& unit)
{
    return fs::path(directory) / "results" / (unit + ".json");
}

fs::path failureFile(const std::string& directory, const std::string& unit)
{
    return fs::path(directory) / "results" / (unit + ".failed");
}

std::optional<nlohmann::json> readJson(const fs::path& file)
{
    std::ifstream in(file);
    if (!in) {
        return std::nullopt;
    }
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json value = nlohmann::json::parse(text.str(), nullptr, false);
    return value.is_discarded() ? std::nullopt : std::optional<nlohmann::json>(value);
}

// Bytes a unit holds at most, from the parts of its job's memory plan (core/engine/memory_plan.h) that can be
// known from its files before anything is loaded: a training unit the trainer's master weights, gradients and
// moments, the rollout and BF16-unit engines with their KV caches, and the teacher; an analysis its checkpoint(s)
// as stored, the engine beside them and a KV cache. The sbatch --mem is this plus a quarter and 1 GiB for the
// process and LibTorch itself.
std::uint64_t unitBytes(const JobSpec& spec)
{
    const std::uint64_t kvCache = engine::EngineOptions {}.kvCacheBytes;
    const auto modelBytes = [&](const std::string& directory) -> std::uint64_t {
        const engine::StoredWeights stored = engine::storedWeights(directory);
        const model::ModelConfig config = model::loadConfig((fs::path(directory) / "config.json").string());
        return stored.bytes + engine::engineExtraBytes(config, nullptr, stored.dtype) + kvCache;
    };
    if (spec.kind() == "calibrate" || spec.kind() == "train") {
        const train::RunConfig run = spec.kind() == "train" ? train::loadRunConfig(spec.text("run_file"))
                                                            : calibrationOptions(spec).base;
        const engine::StoredWeights student = engine::storedWeights(run.student);
        const model::ModelConfig config = model::loadConfig((fs::path(run.student) / "config.json").string());
        std::int64_t staleness = run.rollout.staleness;
        for (const std::int64_t k : spec.kind() == "calibrate" ? spec.integers("staleness") : std::vector<std::int64_t> {}) {
            staleness = std::max(staleness, k);
        }
        std::uint64_t bytes = engine::trainerBytes(student.parameters, staleness)
            + 2 * (engine::engineExtraBytes(config, nullptr, model::DType::F32) + kvCache);
        if (!run.teacher.empty()) {
            bytes += engine::storedWeights(run.teacher).bytes;
        }
        return bytes;
    }
    std::uint64_t bytes = 0;
    if (spec.definition().parameter("model") && spec.given("model")) {
        bytes = std::max(bytes, modelBytes(spec.text("model")));
    }
    if (spec.definition().parameter("students")) {
        for (const std::string& student : spec.strings("students")) {
            bytes = std::max(bytes, 2 * modelBytes(student));
        }
    }
    return bytes;
}

std::string memoryOption(const std::vector<Unit>& units, const Profile& profile)
{
    if (!profile.memory.empty()) {
        return profile.memory;
    }
    std::uint64_t most = 0;
    for (const Unit& unit : units) {
        try {
            most = std::max(most, unitBytes(unit.spec));
        } catch (const std::exception&) {
            // A unit whose files cannot be read now (a study step's input made by an earlier step) gets the floor.
        }
    }
    const double mebibytes = std::ceil(static_cast<double>(most) * 1.25 / (1024.0 * 1024.0)) + 1024.0;
    return std::to_string(static_cast<std::int64_t>(mebibytes)) + "M";
}

// The advance step holds what its final step holds (a calibration's decision step trains nothing, but the estimate
// of its units is the safe side); merging alone, the floor.
std::string advanceMemory(const nlohmann::json& submission, const Profile& profile)
{
    if (submission.value("final", nlohmann::json()).is_null()) {
        return memoryOption({}, profile);
    }
    return memoryOption({unitOf(0, "final step", JobSpec::fromJson(submission.at("final")))}, profile);
}

std::string quoted(const std::string& text)
{
    return shellQuote(text);
}

// The program line of a script: the profile's mismatch with LibTorch's threads set to the task's CPUs.
std::string mismatchCommand(const Profile& profile, const std::string& arguments)
{
    return "exec " + quoted(profile.mismatch) + " --threads \"${SLURM_CPUS_PER_TASK:-1}\" " + arguments + "\n";
}

Profile profileOf(const nlohmann::json& submission)
{
    const nlohmann::json& p = submission.at("profile");
    Profile profile;
    profile.source = p.value("source", "");
    profile.partition = p.value("partition", "");
    profile.account = p.value("account", "");
    profile.time = p.value("time", "");
    profile.gpus = p.value("gpus", std::int64_t {0});
    profile.gpuOption = p.value("gpu_option", "gpus-per-task");
    profile.gresType = p.value("gres_type", "");
    profile.cpus = p.value("cpus", std::int64_t {1});
    profile.memory = p.value("memory", "");
    profile.requeue = p.value("requeue", true);
    profile.sbatch = p.value("sbatch", std::vector<std::string> {});
    profile.setup = p.value("setup", std::vector<std::string> {});
    profile.mismatch = p.value("mismatch", "mismatch");
    profile.advanceTime = p.value("advance_time", "");
    profile.advanceCpus = p.value("advance_cpus", std::int64_t {1});
    return profile;
}

nlohmann::json profileToJson(const Profile& p)
{
    return {{"source", p.source}, {"partition", p.partition}, {"account", p.account}, {"time", p.time},
        {"gpus", p.gpus}, {"gpu_option", p.gpuOption}, {"gres_type", p.gresType}, {"cpus", p.cpus},
        {"memory", p.memory}, {"requeue", p.requeue}, {"sbatch", p.sbatch}, {"setup", p.setup},
        {"mismatch", p.mismatch}, {"advance_time", p.advanceTime}, {"advance_cpus", p.advanceCpus}};
}

// Writes stage `stage`'s scripts for `units` and its submit-STAGE.sh (sbatch in order, each job's dependencies
// by the ids the earlier sbatch calls printed), and records the stage; `done` are units already finished (a
// study step's dependency on one of them is satisfied).
SubmittedStage writeStage(const std::string& directory, nlohmann::json& submission, const std::vector<Unit>& units,
    std::int64_t stage, const std::set<std::string>& done, const std::map<std::string, std::string>& stillQueued = {})
{
    const Profile profile = profileOf(submission);
    const std::string name = submission.at("name").get<std::string>();
    const std::string tag = std::to_string(stage);
    SubmittedStage written;
    written.stage = stage;
    std::string submit = "#!/bin/bash\n# Submits stage " + tag + " of " + name
        + " (written by `mismatch submit`; it runs this unless --dry-run). Prints one line a job: NAME JOBID.\n"
          "set -euo pipefail\ncd " + quoted(directory) + "\n";
    std::string advanceAfter;
    const bool study = submission.at("kind") == "study";
    if (!study && !units.empty()) {
        std::string list;
        for (std::size_t i = 0; i < units.size(); ++i) {
            list += (i ? " " : "") + units[i].id;
            written.units.push_back(units[i].id);
        }
        ScriptRequest request {profile, directory,
            "Stage " + tag + " of " + name + ": " + std::to_string(units.size()) + " unit(s), one array task each",
            tag, "mm-" + name + "-s" + tag, "stage-" + tag + "-%A_%a.out",
            "0-" + std::to_string(units.size() - 1), memoryOption(units, profile), false,
            "UNITS=(" + list + ")\n"
                + mismatchCommand(profile, "cluster unit " + quoted(directory) + " \"${UNITS[$SLURM_ARRAY_TASK_ID]}\"")};
        const fs::path script = fs::path(directory) / ("stage-" + tag + ".sbatch");
        writeFileAtomically(script.string(), sbatchScript(request));
        written.scripts.push_back(script.string());
        submit += "stage=$(sbatch --parsable " + quoted(script.filename().string()) + ")\nstage=${stage%%;*}\n"
                  "echo \"stage $stage\"\n";
        advanceAfter = "$stage";
    } else if (study) {
        std::map<std::string, std::string> variable;
        for (const Unit& unit : units) {
            const std::string job = "job" + std::to_string(variable.size() + 1);
            variable[unit.id] = job;
            std::string dependency;
            for (const std::string& after : unit.after) {
                if (!done.count(after) && variable.count(after)) {
                    dependency += ":$" + variable.at(after);
                } else if (!done.count(after) && stillQueued.count(after)) {
                    dependency += ":" + stillQueued.at(after); // submitted before, still pending or running
                }
            }
            ScriptRequest request {profile, directory, "Study step " + unit.id + " (" + unit.label + ") of " + name,
                tag, "mm-" + name + "-" + unit.id, "step-" + unit.id + "-%j.out", "", memoryOption({unit}, profile),
                false, mismatchCommand(profile, "cluster unit " + quoted(directory) + " " + quoted(unit.id))};
            const fs::path script = fs::path(directory) / ("step-" + unit.id + "-" + tag + ".sbatch");
            writeFileAtomically(script.string(), sbatchScript(request));
            written.scripts.push_back(script.string());
            written.units.push_back(unit.id);
            submit += job + "=$(sbatch --parsable"
                + (dependency.empty() ? std::string() : " --dependency=afterok" + dependency + " --kill-on-invalid-dep=yes")
                + " " + quoted(script.filename().string()) + ")\n" + job + "=${" + job + "%%;*}\necho \"unit "
                + unit.id + " $" + job + "\"\n";
            advanceAfter += (advanceAfter.empty() ? "$" : ":$") + job;
        }
    }
    for (const auto& [unit, id] : stillQueued) {
        advanceAfter += (advanceAfter.empty() ? "" : ":") + id; // units a resubmission leaves pending or running
    }
    ScriptRequest advance {profile, directory,
        "Advance step of " + name + " after stage " + tag
            + ": merges the finished shards into the workspace, then the final step or the next stage",
        tag, "mm-" + name + "-advance" + tag, "advance-" + tag + "-%j.out", "", advanceMemory(submission, profile), true,
        mismatchCommand(profile, "--workspace " + quoted(submission.at("workspace").get<std::string>())
            + " cluster advance " + quoted(directory))};
    // A job that reads the workspace (admit against a stored calibration) runs whole in the advance step.
    advance.advanceRunsAJob = submission.at("units").empty() && !submission.at("final").is_null();
    const fs::path advanceScript = fs::path(directory) / ("advance-" + tag + ".sbatch");
    writeFileAtomically(advanceScript.string(), sbatchScript(advance));
    written.scripts.push_back(advanceScript.string());
    submit += "advance=$(sbatch --parsable"
        + (advanceAfter.empty() ? std::string() : " --dependency=afterok:" + advanceAfter + " --kill-on-invalid-dep=yes")
        + " " + quoted(advanceScript.filename().string()) + ")\nadvance=${advance%%;*}\necho \"advance $advance\"\n";
    const fs::path submitScriptPath = fs::path(directory) / ("submit-" + tag + ".sh");
    writeFileAtomically(submitScriptPath.string(), submit);
    fs::permissions(submitScriptPath, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
    written.scripts.push_back(submitScriptPath.string());
    submission["stages"].push_back({{"stage", stage}, {"units", written.units}, {"scripts", written.scripts},
        {"jobs", nlohmann::json::object()}, {"advance_job", ""}, {"written_at", utcTimestamp()}});
    return written;
}

// Runs the newest stage's submit script and records the job ids it printed.
void submitStage(const std::string& directory, nlohmann::json& submission, SubmittedStage& stage)
{
    nlohmann::json& record = submission.at("stages").back();
    const std::vector<std::string> lines = submitScript(stage.scripts.back(), directory);
    for (const std::string& line : lines) {
        std::istringstream words(line);
        std::string what;
        std::string id;
        words >> what >> id;
        if (what == "stage") {
            for (std::size_t i = 0; i < stage.units.size(); ++i) {
                record["jobs"][stage.units[i]] = id + "_" + std::to_string(i);
            }
            stage.jobIds.push_back(id);
        } else if (what == "unit") {
            std::string job;
            words >> job;
            record["jobs"][id] = job;
            stage.jobIds.push_back(job);
        } else if (what == "advance") {
            record["advance_job"] = id;
            stage.jobIds.push_back(id);
        }
    }
    record["submitted_at"] = utcTimestamp();
}

std::string uniqueDirectory(const fs::path& base)
{
    for (int n = 1;; ++n) {
        const fs::path candidate = base.string() + "-" + std::to_string(n);
        std::error_code error;
        if (!fs::exists(candidate, error)) {
            return candidate.string();
        }
    }
}

} // namespace

Submission submit(const SubmitOptions& options)
{
    const JobFile file = loadJobFile(options.jobFile);
    const UnitPlan plan = splitUnits(file);
    const std::string workspace = fs::absolute(options.workspace).lexically_normal().string();
    std::string name = fs::path(options.jobFile).stem().string();
    std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_'; }, '_');
    const std::string directory = options.directory.empty()
        ? uniqueDirectory(fs::path(workspace) / "cluster" / name)
        : fs::absolute(options.directory).lexically_normal().string();
    std::error_code error;
    if (fs::exists(submissionFile(directory), error)) {
        throw InputError(directory, "", "already holds a submission; give another directory (or resume it with "
            "`mismatch cluster resume " + directory + "`)");
    }
    for (const char* sub : {"units", "shards", "results", "logs"}) {
        fs::create_directories(fs::path(directory) / sub);
    }
    nlohmann::json submission = {{"format", kFormat}, {"name", name}, {"kind", plan.kind},
        {"job_file", fs::absolute(options.jobFile).lexically_normal().string()}, {"workspace", workspace},
        {"submitted_at", utcTimestamp()}, {"host", hostName().value_or("")}, {"profile", profileToJson(options.profile)},
        {"units", nlohmann::json::array()}, {"final", plan.finalStep ? plan.finalStep->toJson() : nlohmann::json()},
        {"stages", nlohmann::json::array()}, {"merged", nlohmann::json::array()}, {"result", nullptr},
        {"final_run_id", nullptr}, {"error", ""}, {"dry_run", options.dryRun}};
    for (const Unit& unit : plan.units) {
        submission["units"].push_back(unitToJson(unit));
        if (unit.references.empty()) {
            writeJobFile((fs::path(directory) / "units" / (unit.id + ".yaml")).string(), unit.spec);
        }
    }
    Submission result;
    result.directory = directory;
    result.kind = plan.kind;
    result.units = plan.units;
    result.dryRun = options.dryRun;
    // Stage 1: every unit of a split job, or a study's steps with their dependencies.
    result.stages.push_back(writeStage(directory, submission, plan.units, 1, {}));
    writeSubmission(directory, submission);
    if (!options.dryRun) {
        submitStage(directory, submission, result.stages.back());
        writeSubmission(directory, submission);
    }
    return result;
}

std::vector<std::string> submissions(const std::string& workspaceDirectory)
{
    std::vector<std::pair<fs::file_time_type, std::string>> found;
    std::error_code error;
    const fs::path root = fs::path(workspaceDirectory) / "cluster";
    if (!fs::is_directory(root, error)) {
        return {};
    }
    for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
        const fs::path file = entry.path() / "submission.json";
        if (fs::is_regular_file(file, error)) {
            found.emplace_back(fs::last_write_time(file, error), entry.path().string());
        }
    }
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::string> directories;
    for (const auto& [time, directory] : found) {
        directories.push_back(directory);
    }
    return directories;
}

std::vector<std::pair<std::string, std::int64_t>> resultIds(const nlohmann::json& result)
{
    std::vector<std::pair<std::string, std::int64_t>> ids;
    if (!result.is_object()) {
        return ids;
    }
    for (auto it = result.begin(); it != result.end(); ++it) {
        const std::string& key = it.key();
        const bool id = key.size() > 3 && key.compare(key.size() - 3, 3, "_id") == 0;
        if (it.value().is_number_integer() && (id || key == "merged_units")) {
            ids.emplace_back(key, it.value().get<std::int64_t>());
        }
    }
    return ids;
}

SubmissionStatus status(const std::string& given)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    const nlohmann::json submission = readSubmission(directory);
    SubmissionStatus s;
    s.directory = fs::absolute(directory).lexically_normal().string();
    s.name = submission.at("name").get<std::string>();
    s.kind = submission.at("kind").get<std::string>();
    s.workspace = submission.at("workspace").get<std::string>();
    s.submittedAt = submission.value("submitted_at", "");
    s.result = submission.value("result", nlohmann::json());
    s.error = submission.value("error", "");
    const std::set<std::string> merged = submission.value("merged", std::set<std::string> {});
    std::map<std::string, std::string> jobOf;
    for (const nlohmann::json& stage : submission.at("stages")) {
        const nlohmann::json jobs = stage.value("jobs", nlohmann::json::object()); // kept alive for items()
        for (const auto& [unit, job] : jobs.items()) {
            jobOf[unit] = job.get<std::string>();
            const std::string base = job.get<std::string>().substr(0, job.get<std::string>().find('_'));
            if (std::find(s.slurmJobs.begin(), s.slurmJobs.end(), base) == s.slurmJobs.end()) {
                s.slurmJobs.push_back(base);
            }
        }
        const std::string advance = stage.value("advance_job", "");
        if (!advance.empty()) {
            s.advanceJob = advance;
            s.slurmJobs.push_back(advance);
        }
    }
    for (const Unit& unit : unitsOf(submission, directory)) {
        UnitStatus u;
        u.id = unit.id;
        u.label = unit.label;
        u.stage = unit.stage;
        u.slurmJob = jobOf.count(unit.id) ? jobOf.at(unit.id) : "";
        std::error_code error;
        if (merged.count(unit.id)) {
            u.state = UnitState::Merged;
        } else if (fs::exists(resultFile(directory, unit.id), error)) {
            u.state = UnitState::Done;
        } else {
            const std::optional<std::string> state
                = u.slurmJob.empty() ? std::optional<std::string>(std::string()) : slurmJobState(u.slurmJob);
            u.slurmState = state.value_or("");
            u.state = unitStateOf(u.slurmState);
            const auto failure = readJson(failureFile(directory, unit.id));
            if (!state) {
                // Away from the cluster (a desktop that mounts the shared directory): the files say only that it has
                // no result yet.
                u.state = failure ? UnitState::Failed : UnitState::Pending;
                u.detail = failure ? failure->value("error", "")
                                   : "no result yet; Slurm cannot be asked from this machine (squeue, sacct, scontrol)";
                s.slurmUnreachable = true;
            } else if (u.slurmJob.empty()) {
                u.detail = "not submitted" + std::string(submission.value("dry_run", false) ? " (dry run)" : "");
            } else if (u.state == UnitState::Failed) {
                u.detail = "Slurm: " + u.slurmState + (failure ? "; " + failure->value("error", "") : std::string());
            } else if (u.slurmState.empty() || u.slurmState == "COMPLETED") {
                // Gone from Slurm without a result: killed, lost with its node, or it failed.
                u.state = UnitState::Failed;
                u.detail = failure ? failure->value("error", "") : "no result and Slurm no longer knows the job";
            }
        }
        s.units.push_back(u);
    }
    if (!s.advanceJob.empty()) {
        s.advanceState = slurmJobState(s.advanceJob).value_or("");
    }
    s.finished = !s.result.is_null();
    return s;
}

std::vector<std::string> cancel(const std::string& given)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    const SubmissionStatus s = status(directory);
    std::vector<std::string> ids;
    for (const UnitStatus& unit : s.units) {
        if (!unit.slurmJob.empty() && (unit.state == UnitState::Pending || unit.state == UnitState::Running)
            && !unit.slurmState.empty()) {
            ids.push_back(unit.slurmJob);
        }
    }
    if (!s.advanceJob.empty() && unitStateOf(s.advanceState) != UnitState::Failed && !s.advanceState.empty()
        && s.advanceState != "COMPLETED") {
        ids.push_back(s.advanceJob);
    }
    if (ids.empty()) {
        return ids;
    }
    if (!onPath("scancel")) {
        throw Error("scancel is not on PATH: this machine cannot cancel Slurm jobs");
    }
    std::vector<std::string> argv = {"scancel"};
    argv.insert(argv.end(), ids.begin(), ids.end());
    const ProgramOutput output = runProgram(argv);
    if (output.exitCode != 0) {
        throw Error("scancel failed (exit " + std::to_string(output.exitCode) + "): " + output.err);
    }
    return ids;
}

namespace {

// Holds the workspace's advance lock (one merger at a time: the workspace has one writer).
class AdvanceLock {
public:
    // On the workspace, not the submission: two submissions' advance steps into one workspace take turns.
    explicit AdvanceLock(const std::string& workspace)
    {
        fs::create_directories(workspace);
        const std::string path = (fs::path(workspace) / ".cluster-advance.lock").string();
        fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd_ < 0 || ::flock(fd_, LOCK_EX) != 0) {
            throw Error(path + ": cannot lock: " + std::strerror(errno));
        }
    }
    ~AdvanceLock()
    {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    AdvanceLock(const AdvanceLock&) = delete;
    AdvanceLock& operator=(const AdvanceLock&) = delete;

private:
    int fd_ = -1;
};

// Merges every shard whose units have all finished and are not merged yet; records them in `submission`.
std::vector<std::string> mergeDone(const std::string& directory, nlohmann::json& submission, store::RunStore& store)
{
    std::vector<std::string> lines;
    const std::vector<Unit> units = unitsOf(submission, directory);
    std::set<std::string> merged = submission.value("merged", std::set<std::string> {});
    std::map<std::string, std::vector<std::string>> unitsOfShard;
    for (const Unit& unit : units) {
        unitsOfShard[unit.shard].push_back(unit.id);
    }
    for (const auto& [shard, ids] : unitsOfShard) {
        std::error_code error;
        const bool allDone = std::all_of(ids.begin(), ids.end(),
            [&](const std::string& id) { return fs::exists(resultFile(directory, id), error); });
        const bool allMerged
            = std::all_of(ids.begin(), ids.end(), [&](const std::string& id) { return merged.count(id) > 0; });
        if (!allDone || allMerged) {
            continue;
        }
        const store::MergeReport report = store::mergeShard(store, (fs::path(directory) / "shards" / shard).string());
        lines.push_back("merged shard " + shard + ": " + std::to_string(report.runs.size()) + " run(s) added"
            + (report.alreadyMerged.empty() ? "" : ", " + std::to_string(report.alreadyMerged.size()) + " merged before"));
        merged.insert(ids.begin(), ids.end());
        submission["merged"] = merged;
        writeSubmission(directory, submission);
    }
    return lines;
}

store::RunStore openWorkspace(const nlohmann::json& submission)
{
    const std::string workspace = submission.at("workspace").get<std::string>();
    fs::create_directories(workspace);
    return store::RunStore::open(store::databasePath(workspace));
}

// The final step in the workspace: a calibration that lacks units gets them as the next stage; otherwise the
// step runs (or continues its run, when an earlier advance step was killed in it).
std::vector<std::string> finalStep(
    const std::string& directory, nlohmann::json& submission, store::RunStore& store, Progress& progress, bool submitNext)
{
    std::vector<std::string> lines;
    const JobSpec spec = JobSpec::fromJson(submission.at("final"), submissionFile(directory).string());
    if (spec.kind() == "calibrate" && spec.flag("from_units")) {
        const std::vector<analysis::CalibrationUnit> needed
            = analysis::calibrationUnitsNeeded(store, calibrationOptions(spec));
        if (!needed.empty()) {
            std::vector<Unit> next;
            std::int64_t stage = 1;
            for (const nlohmann::json& unit : submission.at("units")) {
                stage = std::max(stage, unit.at("stage").get<std::int64_t>() + 1);
            }
            for (const analysis::CalibrationUnit& unit : needed) {
                JobSpec unitSpec = spec;
                unitSpec.unset("from_units");
                unitSpec.set("unit", analysis::toString(unit));
                Unit u = unitOf(submission.at("units").size() + 1, "training run " + analysis::toString(unit), unitSpec);
                u.stage = stage;
                submission["units"].push_back(unitToJson(u));
                writeJobFile((fs::path(directory) / "units" / (u.id + ".yaml")).string(), u.spec);
                next.push_back(u);
            }
            SubmittedStage written = writeStage(directory, submission, next, stage, {});
            writeSubmission(directory, submission);
            lines.push_back("the stopping rule wants " + std::to_string(next.size()) + " more seed run(s): stage "
                + std::to_string(stage) + " written");
            if (submitNext) {
                submitStage(directory, submission, written);
                writeSubmission(directory, submission);
                lines.push_back("stage " + std::to_string(stage) + " submitted: jobs " + [&] {
                    std::string ids;
                    for (const std::string& id : written.jobIds) {
                        ids += (ids.empty() ? "" : " ") + id;
                    }
                    return ids;
                }());
            }
            return lines;
        }
    }
    JobResult result;
    const nlohmann::json runId = submission.value("final_run_id", nlohmann::json());
    const auto started = [&](std::int64_t id) {
        submission["final_run_id"] = id;
        writeSubmission(directory, submission);
    };
    const auto run = runId.is_number_integer() ? store.run(runId.get<std::int64_t>()) : std::nullopt;
    if (run && run->status != store::RunStatus::Finished && spec.definition().resume) {
        lines.push_back("continuing the final step's run " + std::to_string(run->id));
        result = spec.definition().resume(store, run->id, progress, started);
    } else {
        lines.push_back("final step: " + commandLine(spec.toArguments()));
        result = spec.run(store, progress, started);
    }
    submission["result"] = result;
    submission["finished_at"] = utcTimestamp();
    writeSubmission(directory, submission);
    lines.push_back("finished: " + result.dump().substr(0, 200));
    return lines;
}

} // namespace

std::vector<std::string> mergeFinished(const std::string& given)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    nlohmann::json submission = readSubmission(directory);
    AdvanceLock lock(submission.at("workspace").get<std::string>());
    submission = readSubmission(directory); // as the lock's holder leaves it
    store::RunStore store = openWorkspace(submission);
    return mergeDone(directory, submission, store);
}

std::vector<std::string> advance(const std::string& given, Progress& progress, bool submitNext)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    nlohmann::json submission = readSubmission(directory);
    AdvanceLock lock(submission.at("workspace").get<std::string>());
    submission = readSubmission(directory); // as the lock's holder leaves it
    if (!submission.value("result", nlohmann::json()).is_null()) {
        return {"already finished"};
    }
    store::RunStore store = openWorkspace(submission);
    std::vector<std::string> lines;
    try {
        lines = mergeDone(directory, submission, store);
        const std::set<std::string> merged = submission.value("merged", std::set<std::string> {});
        std::vector<std::string> waiting;
        for (const nlohmann::json& unit : submission.at("units")) {
            if (!merged.count(unit.at("id").get<std::string>())) {
                waiting.push_back(unit.at("id").get<std::string>());
            }
        }
        if (!waiting.empty()) {
            lines.push_back(std::to_string(waiting.size()) + " unit(s) not finished yet (first: " + waiting.front()
                + "); `mismatch cluster resume` resubmits the ones Slurm no longer runs");
            return lines;
        }
        if (submission.at("final").is_null()) {
            submission["result"] = {{"merged_units", submission.at("units").size()}};
            submission["finished_at"] = utcTimestamp();
            writeSubmission(directory, submission);
            lines.push_back("every unit merged");
            return lines;
        }
        const std::vector<std::string> more = finalStep(directory, submission, store, progress, submitNext);
        lines.insert(lines.end(), more.begin(), more.end());
        submission["error"] = "";
        writeSubmission(directory, submission);
    } catch (const std::exception& error) {
        submission["error"] = error.what();
        writeSubmission(directory, submission);
        throw;
    }
    return lines;
}

namespace {

// A study step's spec with its references resolved from the results of the steps it refers to (ids of its shard).
JobSpec studyStepSpec(const std::string& directory, const nlohmann::json& submission, const Unit& unit)
{
    const JobFile file = loadJobFile(submission.at("job_file").get<std::string>());
    std::map<std::string, JobResult> results;
    for (const JobFileStep& step : file.steps) {
        if (const auto stored = readJson(resultFile(directory, step.id))) {
            results[step.id] = stored->at("result");
        }
    }
    for (const JobFileStep& step : file.steps) {
        if (step.id == unit.id) {
            return withAbsolutePaths(resolveStep(file, step, results));
        }
    }
    throw InputError(submission.at("job_file").get<std::string>(), "steps", "has no step '" + unit.id
        + "' any more: the study file changed since it was submitted");
}

// The unit's newest run in its shard (a run the unit's spec started), if any.
std::optional<store::RunInfo> unitRun(const store::RunStore& store, const JobSpec& spec)
{
    std::optional<store::RunInfo> found;
    for (const store::RunInfo& run : store.listRuns()) {
        if (run.jobJson.empty()) {
            continue;
        }
        try {
            const std::optional<JobSpec> stored = JobSpec::ofRun(run);
            if (stored && *stored == spec) {
                found = run;
            }
        } catch (const std::exception&) {
        }
    }
    return found;
}

// Moves a shard aside as SHARD.attempt-N (the first N free).
void keepKilledAttempt(const std::string& shard)
{
    for (int n = 1;; ++n) {
        const std::string aside = shard + ".attempt-" + std::to_string(n);
        std::error_code error;
        if (!fs::exists(aside, error)) {
            fs::rename(shard, aside);
            return;
        }
    }
}

} // namespace

JobResult runUnit(const std::string& given, const std::string& unitId, Progress& progress)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    const nlohmann::json submission = readSubmission(directory);
    const std::vector<Unit> units = unitsOf(submission, directory);
    const Unit& unit = findUnit(units, unitId, directory);
    try {
        JobSpec spec = unit.references.empty() ? unit.spec : studyStepSpec(directory, submission, unit);
        if (!unit.references.empty()) {
            writeJobFile((fs::path(directory) / "units" / (unit.id + ".yaml")).string(), spec);
        }
        const std::string shard = (fs::path(directory) / "shards" / unit.shard).string();
        fs::create_directories(shard);
        std::optional<store::RunInfo> run;
        {
            const store::RunStore store = store::RunStore::open(store::databasePath(shard));
            run = unitRun(store, withAbsolutePaths(spec));
        }
        const bool unfinished = run && run->status != store::RunStatus::Finished;
        if (run && !unfinished && fs::exists(resultFile(directory, unit.id))) {
            return readJson(resultFile(directory, unit.id))->at("result");
        }
        if (unfinished && !spec.definition().resume && unit.references.empty()) {
            // A killed unit of a job that cannot resume starts again in a fresh shard (a shard holding a killed run
            // cannot be merged); the killed attempt is kept beside it. (A study step shares its shard with its chain:
            // it stays, and the shard is refused at the merge, naming the run.)
            keepKilledAttempt(shard);
            fs::create_directories(shard);
            run.reset();
        }
        store::RunStore store = store::RunStore::open(store::databasePath(shard));
        JobResult result;
        if (run && run->status != store::RunStatus::Finished && spec.definition().resume) {
            result = spec.definition().resume(store, run->id, progress, {});
        } else if (run && run->status == store::RunStatus::Finished) {
            result = {{"run_id", run->id}}; // finished but its result file was lost with its node
        } else {
            result = spec.run(store, progress);
        }
        std::error_code ignored;
        fs::remove(failureFile(directory, unit.id), ignored);
        writeFileAtomically(resultFile(directory, unit.id).string(),
            nlohmann::json({{"unit", unit.id}, {"result", result}, {"host", hostName().value_or("")},
                               {"finished_at", utcTimestamp()}})
                    .dump(2)
                + "\n");
        return result;
    } catch (const std::exception& error) {
        writeFileAtomically(failureFile(directory, unit.id).string(),
            nlohmann::json({{"unit", unit.id}, {"error", error.what()}, {"host", hostName().value_or("")},
                               {"at", utcTimestamp()}})
                    .dump(2)
                + "\n");
        throw;
    }
}

Submission resume(const std::string& given, bool dryRun)
{
    const std::string directory = fs::absolute(given).lexically_normal().string();
    AdvanceLock lock(readSubmission(directory).at("workspace").get<std::string>());
    const SubmissionStatus before = status(directory);
    nlohmann::json submission = readSubmission(directory);
    Submission result;
    result.directory = directory;
    result.kind = before.kind;
    result.dryRun = dryRun;
    if (before.finished) {
        return result;
    }
    if (before.slurmUnreachable && !dryRun) {
        throw Error(directory + ": Slurm cannot be asked from this machine (squeue, sacct, scontrol), so which units "
                                "still run is unknown; resume it where Slurm's commands work (a login node)");
    }
    // The stale advance step (its dependency can no longer be met, or it waits for units that will be resubmitted)
    // gives way to the new one.
    if (!dryRun && !before.advanceJob.empty() && unitStateOf(before.advanceState) == UnitState::Pending
        && !before.advanceState.empty() && before.advanceState != "COMPLETED" && onPath("scancel")) {
        runProgram({"scancel", before.advanceJob});
    }
    const std::vector<Unit> units = unitsOf(submission, directory);
    std::set<std::string> done;
    std::vector<Unit> again;
    std::map<std::string, std::string> running;
    std::int64_t stage = 1;
    for (const nlohmann::json& written : submission.at("stages")) {
        stage = std::max(stage, written.at("stage").get<std::int64_t>() + 1);
    }
    for (std::size_t i = 0; i < units.size(); ++i) {
        const UnitStatus& state = before.units[i];
        if (state.state == UnitState::Done || state.state == UnitState::Merged) {
            done.insert(units[i].id);
        } else if (state.state == UnitState::Failed || state.slurmJob.empty()) {
            again.push_back(units[i]);
        } else {
            running[units[i].id] = state.slurmJob; // pending or running in Slurm: what comes after waits for it
        }
    }
    SubmittedStage written = writeStage(directory, submission, again, stage, done, running);
    writeSubmission(directory, submission);
    result.units = again;
    if (!dryRun) {
        submitStage(directory, submission, written);
        writeSubmission(directory, submission);
    }
    result.stages.push_back(written);
    return result;
}

} // namespace mismatch::jobs::cluster

#include "core/analysis/admission.h"

#include "core/analysis/job_resume.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/common/version.h"
#include "core/engine/mismatch_sources.h"
#include "core/common/yaml_mapping.h"
#include "core/model/safetensors.h"
#include "core/common/yaml_scalar.h"
#include "core/store/analysis_store.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "line L, column C" of a node, or "" when unknown: the candidates file's messages carry no key path.
std::string place(const io::SourceLocation& where)
{
    return where.line > 0 ? io::lineColumn(where) : std::string();
}

std::string place(const YAML::Node& node)
{
    return place(io::locate(node, ""));
}

[[noreturn]] void fail(const std::string& path, const YAML::Node& node, const std::string& detail)
{
    throw InputError(path, place(node), detail);
}

std::int64_t nonNegativeInteger(const std::string& path, const YAML::Node& value, const std::string& key)
{
    if (!value.IsScalar() || io::scalarKind(value) != io::ScalarKind::Integer) {
        fail(path, value, "`" + key + "` must be an integer >= 0, got " + io::kindName(value));
    }
    const std::string text = value.Scalar();
    if (!text.empty() && text[0] == '-') {
        fail(path, value, "`" + key + "` must be >= 0, got " + text);
    }
    try {
        return value.as<std::int64_t>();
    } catch (const YAML::Exception&) {
        fail(path, value, "`" + key + "` is out of range: " + text);
    }
}

} // namespace

std::vector<Candidate> parseCandidates(const std::string& text, const std::string& path)
{
    const YAML::Node root = io::loadYaml(text, path);
    if (!root.IsSequence()) {
        throw InputError(path, place(root),
            "expected a list of candidates (- name: ..., recipe: ..., staleness: ..., noise: ...), got "
                + io::kindName(root));
    }
    if (root.size() == 0) {
        throw InputError(path, place(root), "the candidate list is empty");
    }
    const fs::path base = fs::path(path).parent_path();
    static const std::vector<std::string> allowed
        = {"name", "recipe", "staleness", "noise", "noise_seed", "noise_modules"};
    const io::YamlMappingReader reader([&path](const io::SourceLocation& where, const std::string& detail) {
        throw InputError(path, place(where), detail);
    });
    std::vector<Candidate> candidates;
    std::map<std::string, std::string> names; // name -> where first given
    for (std::size_t i = 0; i < root.size(); ++i) {
        const YAML::Node item = root[i];
        if (!item.IsMap()) {
            fail(path, item, "candidate " + std::to_string(i + 1) + ": expected a mapping, got " + io::kindName(item));
        }
        Candidate candidate;
        candidate.source = path + ":" + place(item);
        bool hasName = false;
        std::vector<YAML::Node> noiseOnlySettings; // noise_seed, noise_modules: nothing without a sigma
        for (const io::YamlEntry& entry : reader.entries(item, io::locate(item, ""), allowed)) {
            const std::string& name = entry.key;
            const YAML::Node& value = entry.value;
            if (name == "noise_seed" || name == "noise_modules") {
                noiseOnlySettings.push_back(value);
            }
            if (name == "name" || name == "recipe" || name == "noise_modules") {
                if (!value.IsScalar() || io::scalarKind(value) != io::ScalarKind::String || value.Scalar().empty()) {
                    fail(path, value, "`" + name + "` must be a non-empty string, got " + io::kindName(value));
                }
                if (name == "name") {
                    candidate.name = value.Scalar();
                    hasName = true;
                } else if (name == "recipe") {
                    const fs::path recipe(value.Scalar());
                    candidate.recipePath = recipe.is_absolute() ? recipe.string() : (base / recipe).string();
                    PathKind kind = PathKind::Missing;
                    try {
                        kind = pathKind(candidate.recipePath);
                    } catch (const InputError& error) { // a name too long, a symbolic-link loop
                        fail(path, value, "recipe file " + std::string(error.what()));
                    }
                    if (kind == PathKind::Missing) {
                        fail(path, value, "recipe file '" + candidate.recipePath + "' does not exist");
                    }
                    quant::loadRecipe(candidate.recipePath); // its own located errors (a FIFO or directory too)
                } else {
                    candidate.noiseModules = value.Scalar();
                    try {
                        quant::ModulePattern::compile(candidate.noiseModules);
                    } catch (const std::invalid_argument& error) {
                        fail(path, value, "`noise_modules` is not a module pattern: " + std::string(error.what()));
                    }
                }
            } else if (name == "staleness") {
                candidate.staleness = nonNegativeInteger(path, value, name);
            } else if (name == "noise_seed") {
                candidate.noiseSeed = static_cast<std::uint64_t>(nonNegativeInteger(path, value, name));
            } else { // noise
                const io::ScalarKind kind = value.IsScalar() ? io::scalarKind(value) : io::ScalarKind::String;
                if (!value.IsScalar() || (kind != io::ScalarKind::Integer && kind != io::ScalarKind::Number)) {
                    fail(path, value,
                        "`noise` must be a number >= 0 (sigma relative to each tensor's RMS), got "
                            + io::kindName(value));
                }
                try {
                    candidate.noise = value.as<double>();
                } catch (const YAML::Exception&) { // text that std::stod reads but yaml-cpp does not: 0x10., inf, 1e999
                    fail(path, value, "`noise` must be a finite number >= 0, got " + value.Scalar());
                }
                if (!(candidate.noise >= 0.0) || !std::isfinite(candidate.noise)) {
                    fail(path, value, "`noise` must be a finite number >= 0, got " + value.Scalar());
                }
                if (candidate.noise > limits::kMaxNoiseSigma) {
                    fail(path, value,
                        "`noise` must be <= " + numberText(limits::kMaxNoiseSigma) + ", got " + value.Scalar() + ": "
                            + limits::kMaxNoiseSigmaReason);
                }
            }
        }
        if (!hasName) {
            fail(path, item, "candidate " + std::to_string(i + 1) + " has no `name`");
        }
        if (candidate.noise == 0.0 && !noiseOnlySettings.empty()) {
            fail(path, noiseOnlySettings.front(),
                "candidate '" + candidate.name
                    + "': `noise_seed` and `noise_modules` do nothing without `noise` (a sigma > 0); give `noise` "
                      "too, or drop them");
        }
        const auto [found, inserted] = names.emplace(candidate.name, place(item));
        if (!inserted) {
            fail(path, item, "candidate name '" + candidate.name + "' is used twice (first at " + found->second + ")");
        }
        candidates.push_back(std::move(candidate));
    }
    return candidates;
}

std::vector<Candidate> loadCandidates(const std::string& path)
{
    return parseCandidates(readInputFile(path, limits::kConfigFile, "candidates file"), path);
}

std::string toString(AdmissionVerdict verdict)
{
    switch (verdict) {
    case AdmissionVerdict::Admit:
        return "admit";
    case AdmissionVerdict::Reject:
        return "reject";
    case AdmissionVerdict::Borderline:
        return "borderline";
    }
    return "borderline";
}

AdmissionVerdict decide(const metrics::Interval& interval, double threshold)
{
    if (interval.high < threshold) {
        return AdmissionVerdict::Admit;
    }
    if (interval.low > threshold) {
        return AdmissionVerdict::Reject;
    }
    return AdmissionVerdict::Borderline;
}

namespace {

std::string timelineText(const std::vector<TimelineEntry>& timeline)
{
    std::string text;
    for (const TimelineEntry& entry : timeline) {
        text += (text.empty() ? "" : ", ") + weightsName(entry) + " (step " + std::to_string(entry.step) + ")";
    }
    return text;
}

TimelineEntry timelineEntry(const std::string& directory)
{
    TimelineEntry entry;
    entry.directory = directory;
    entry.step = train::checkpointOptimizerSteps(directory);
    const fs::path stateFile = fs::path(directory) / "state.json";
    std::error_code error;
    entry.hasState = fs::exists(stateFile, error);
    if (!entry.hasState) {
        return entry;
    }
    // checkpointOptimizerSteps has read and checked the file; its run id and history are optional (copies made by
    // hand, runs without staleness).
    const nlohmann::json state = nlohmann::json::parse(
        readInputFile(stateFile.string(), limits::kConfigFile, "checkpoint state"), nullptr, false);
    if (state.contains("run_id") && state.at("run_id").is_number_integer()) {
        entry.runId = state.at("run_id").get<std::int64_t>();
    }
    if (state.contains("history_versions") && state.at("history_versions").is_array()) {
        for (const auto& version : state.at("history_versions")) {
            if (!version.is_number_integer()) {
                throw InputError(stateFile.string(), "history_versions", "expected a list of integer optimizer steps");
            }
            entry.historyVersions.push_back(version.get<std::int64_t>());
        }
    }
    return entry;
}

// The other step-N checkpoints of `screened`'s run directory (as the trainer writes them: step-%08d).
std::vector<TimelineEntry> runDirectoryCheckpoints(const TimelineEntry& screened)
{
    std::vector<TimelineEntry> found;
    const fs::path parent = fs::path(screened.directory).parent_path();
    std::error_code error;
    if (!screened.hasState || !fs::is_directory(parent, error)) {
        return found;
    }
    std::vector<std::string> names;
    for (const auto& item : fs::directory_iterator(parent, error)) {
        const std::string name = item.path().filename().string();
        if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos
            && fs::exists(item.path() / "state.json", error) && item.path().string() != screened.directory) {
            names.push_back(item.path().string());
        }
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
        found.push_back(timelineEntry(name));
    }
    return found;
}

} // namespace

void requireHistoryDirectories(const std::vector<std::string>& directories, const std::string& job)
{
    for (const std::string& directory : directories) {
        const std::string what = "the older checkpoint " + directory;
        PathKind kind = PathKind::Missing;
        try {
            kind = pathKind(directory);
        } catch (const InputError& error) { // a loop of symbolic links, a name too long
            throw InputError(job, "--history", what + " " + error.detail());
        }
        if (kind == PathKind::Missing) {
            throw InputError(job, "--history",
                what + " does not exist (each --history DIR is an older checkpoint of the student, a model directory)");
        }
        if (kind != PathKind::Directory) {
            throw InputError(job, "--history", what + " is not a directory (expected a model directory)");
        }
        if (pathKind((fs::path(directory) / "config.json").string()) != PathKind::RegularFile) {
            throw InputError(job, "--history", what + " has no config.json (expected a model directory)");
        }
    }
}

std::vector<TimelineEntry> checkpointTimeline(const AdmissionOptions& options)
{
    std::vector<TimelineEntry> timeline;
    for (const auto* list : {&options.history, &options.checkpoints}) {
        for (const std::string& directory : *list) {
            timeline.push_back(timelineEntry(directory));
        }
    }
    return timeline;
}

bool sameRunHistory(const TimelineEntry& screened, const TimelineEntry& entry)
{
    if (!entry.hasState || !screened.hasState) {
        return true; // a model directory no training run wrote: the student every run starts from
    }
    if (fs::path(entry.directory).parent_path() != fs::path(screened.directory).parent_path()) {
        return false;
    }
    return !entry.runId || !screened.runId || *entry.runId == *screened.runId;
}

TimelineEntry engineCheckpoint(
    const std::vector<TimelineEntry>& timeline, const TimelineEntry& screened, const Candidate& candidate)
{
    if (candidate.staleness == 0) {
        return screened;
    }
    const std::int64_t wanted = screened.step - candidate.staleness;
    const std::vector<std::int64_t>& versions = screened.historyVersions;
    if (std::find(versions.begin(), versions.end(), wanted) != versions.end()) {
        TimelineEntry entry = screened;
        entry.step = wanted;
        entry.historyVersion = wanted;
        return entry;
    }
    std::vector<TimelineEntry> others;
    for (const TimelineEntry& entry : timeline) {
        if (entry.directory == screened.directory) {
            continue;
        }
        if (!sameRunHistory(screened, entry)) {
            others.push_back(entry);
            continue;
        }
        if (entry.step == wanted) {
            return entry;
        }
    }
    const std::vector<TimelineEntry> siblings = runDirectoryCheckpoints(screened);
    for (const TimelineEntry& entry : siblings) {
        if (sameRunHistory(screened, entry) && entry.step == wanted) {
            return entry;
        }
    }
    std::string searched = "its history.safetensors ("
        + (versions.empty() ? std::string("none") : "steps " + std::to_string(versions.front()) + ".." + std::to_string(versions.back()))
        + "), the checkpoints given: " + timelineText(timeline);
    if (!siblings.empty()) {
        searched += "; its run directory: " + timelineText(siblings);
    }
    if (!others.empty()) {
        searched += "; not used, another run's: " + timelineText(others);
    }
    throw InputError(candidate.source.empty() ? std::string("admit") : candidate.source,
        "candidate '" + candidate.name + "'",
        "staleness " + std::to_string(candidate.staleness) + " at " + screened.directory + " (step "
            + std::to_string(screened.step) + ") needs the weights of optimizer step " + std::to_string(wanted)
            + " of the same training run, which it does not have: searched " + searched
            + " (give that run's checkpoint with --history DIR)");
}

std::string weightsName(const TimelineEntry& entry)
{
    return entry.historyVersion
        ? (fs::path(entry.directory) / "history.safetensors").string() + " (step " + std::to_string(*entry.historyVersion) + ")"
        : entry.directory;
}

model::TransformerWeights loadTimelineWeights(
    const TimelineEntry& entry, const model::ModelConfig& config, const at::Device& device)
{
    model::TransformerWeights weights = loadCheckpointWeights(entry.directory, config, device);
    if (!entry.historyVersion) {
        return weights;
    }
    const std::string path = (fs::path(entry.directory) / "history.safetensors").string();
    const auto history = model::SafetensorsFile::open(path);
    const std::string prefix = "v" + std::to_string(*entry.historyVersion) + "/";
    for (const std::string& name : weights.names()) {
        if (!history->contains(prefix + name)) {
            throw InputError(path, prefix + name,
                "missing: the checkpoint's state.json lists version " + std::to_string(*entry.historyVersion)
                    + " in history_versions, but its history does not hold every weight of it");
        }
        at::Tensor tensor = history->load(prefix + name);
        if (!tensor.sizes().equals(weights.get(name).sizes())) {
            throw InputError(path, prefix + name, "has another shape than the model's weight of that name");
        }
        weights.set(name, tensor.to(weights.get(name).scalar_type()).to(device));
    }
    return weights;
}

namespace {

struct ThresholdChoice {
    double threshold = 0.0;
    std::optional<std::int64_t> bracketStep;
    std::string note;
};

// The threshold of each screened checkpoint (see admission.h, "Thresholds").
std::vector<ThresholdChoice> chooseThresholds(
    const store::RunStore& store, const AdmissionOptions& options, const std::vector<TimelineEntry>& screened)
{
    std::vector<ThresholdChoice> choices;
    std::optional<store::Calibration> calibration;
    if (options.calibrationId) {
        calibration = store::calibration(store, *options.calibrationId);
        if (!calibration) {
            throw StoreError(store.path(), "has no calibration with id " + std::to_string(*options.calibrationId));
        }
    }
    for (std::size_t c = 0; c < screened.size(); ++c) {
        ThresholdChoice choice;
        if (options.threshold) {
            choice.threshold = *options.threshold;
            choices.push_back(choice);
            continue;
        }
        const std::int64_t step = screened[c].step;
        const std::optional<std::int64_t> explicitStep = options.steps.empty() ? std::nullopt
            : std::optional<std::int64_t>(options.steps.size() == 1 ? options.steps[0] : options.steps[c]);
        const store::BracketChoice bracket = store::chooseBracket(*calibration, step, explicitStep, "a checkpoint at step");
        if (!bracket.step) {
            throw InputError("admit", screened[c].directory,
                "is at optimizer step " + std::to_string(step) + ", before every bracket of calibration "
                    + std::to_string(*options.calibrationId) + " (steps " + bracket.steps
                    + "): screen a checkpoint of a calibrated step, or choose a bracket explicitly (--step)");
        }
        choice.bracketStep = bracket.step;
        choice.note = bracket.note;
        choice.threshold = store::admissionThreshold(store, *options.calibrationId, choice.bracketStep);
        choices.push_back(choice);
    }
    return choices;
}

struct ProtocolCheck {
    MeasurementProtocol screen;
    std::vector<std::string> differences;
    std::vector<CalibrationFlag> flags;
};

// Takes the calibration's protocol into `options` (when asked to) and compares the screen's with it.
ProtocolCheck checkProtocol(const store::RunStore& store, AdmissionOptions& options)
{
    ProtocolCheck check;
    std::optional<MeasurementProtocol> budget;
    std::string budgetName;
    if (options.calibrationId) {
        const auto calibration = store::calibration(store, *options.calibrationId);
        budgetName = "calibration " + std::to_string(*options.calibrationId);
        budget = storedProtocol(calibration->info.configJson, store.path() + " (" + budgetName + ")");
        check.flags = storedFlags(calibration->info.configJson);
        if (budget && options.protocolFromCalibration) {
            options.probePath = budget->prompts;
            options.count = budget->count;
            options.settings = applyProtocol(*budget, options.settings);
        }
    }
    if (options.probePath.empty()) {
        throw InputError("admit", "probe prompts", "no probe prompt set: give one, or a calibration whose "
                                                   "measurement protocol names one");
    }
    check.screen = settingsProtocol(options.probePath, options.count, options.settings);
    if (!options.calibrationId) {
        return check;
    }
    check.differences = budget ? protocolDifferences(check.screen, *budget, "budget")
                               : std::vector<std::string> {"the calibration stores no measurement protocol (it was "
                                                           "made before protocols were recorded)"};
    if (!check.differences.empty() && !options.allowProtocolMismatch) {
        std::string list;
        for (const std::string& difference : check.differences) {
            list += (list.empty() ? "" : "; ") + difference;
        }
        throw InputError("admit", "measurement protocol",
            "the screen would be measured under another protocol than the budget of " + budgetName + " (" + list
                + "), so its mismatch would not be comparable with the threshold: screen under the calibration's "
                  "protocol (leave the probe, count, sampling and KV options out), or allow the mismatch explicitly "
                  "to compare anyway, labelled");
    }
    return check;
}

nlohmann::json settingsToJson(const AdmissionOptions& options, std::size_t prompts)
{
    return {{"probe", fs::absolute(options.probePath).string()}, {"prompts", prompts},
        {"temperature", options.settings.temperature}, {"top_p", options.settings.topP},
        {"top_k", options.settings.topK}, {"max_tokens", options.settings.maxNewTokens},
        {"seed", options.settings.seed}, {"kv_scales", toString(options.settings.kvScales)},
        {"kv_first_batch", options.settings.kvFirstBatch},
        {"bootstrap",
            {{"resamples", options.settings.bootstrap.resamples}, {"confidence", options.settings.bootstrap.confidence},
                {"seed", options.settings.bootstrap.seed}}}};
}

// A decision stored before an interruption, as a row (resume).
AdmissionRow storedRow(const store::AdmissionDecision& decision, const AdmissionOptions& options)
{
    const nlohmann::json inputs = nlohmann::json::parse(decision.candidateJson);
    AdmissionRow row;
    row.candidate = inputs.at("name").get<std::string>();
    row.checkpoint = decision.checkpoint;
    row.checkpointStep = inputs.at("checkpoint_step").get<std::int64_t>();
    row.engineWeights = inputs.at("engine_weights").get<std::string>();
    row.engineStep = inputs.at("engine_step").get<std::int64_t>();
    if (!inputs.at("bracket_step").is_null()) {
        row.bracketStep = inputs.at("bracket_step").get<std::int64_t>();
    }
    row.note = inputs.at("note").get<std::string>();
    row.threshold = decision.threshold;
    row.mismatch = decision.mismatch;
    row.interval = {decision.mismatch, decision.ciLow, decision.ciHigh, options.settings.bootstrap.confidence,
        options.settings.bootstrap.resamples};
    row.k1 = inputs.at("k1").get<double>();
    row.k3 = inputs.at("k3").get<double>();
    row.tokens = inputs.at("tokens").get<std::int64_t>();
    if (!inputs.at("bf16_unit").is_null()) {
        row.bf16Unit = inputs.at("bf16_unit").get<double>();
    }
    if (inputs.contains("estimators")) {
        row.estimators = metrics::estimatorComparisonFromJson(inputs.at("estimators"));
    }
    row.verdict = decide(row.interval, row.threshold);
    row.seconds = decision.seconds;
    row.decisionId = decision.id;
    return row;
}

// Paths made absolute, so that the stored decisions and a resume name the same files from any directory.
AdmissionOptions withAbsolutePaths(const AdmissionOptions& given)
{
    AdmissionOptions options = given;
    for (auto* list : {&options.checkpoints, &options.history}) {
        for (std::string& path : *list) {
            path = path.empty() ? path : fs::absolute(path).string();
        }
    }
    for (Candidate& candidate : options.candidates) {
        if (!candidate.recipePath.empty()) {
            candidate.recipePath = fs::absolute(candidate.recipePath).string();
        }
    }
    return options;
}

// The options on their own: checkpoints, candidates, one threshold source, the steps.
void checkOptions(const AdmissionOptions& options)
{
    if (options.checkpoints.empty()) {
        throw InputError("admit", "STUDENT", "at least one student checkpoint is needed");
    }
    // The same checkpoint twice (also through another spelling or a symbolic link) would screen it twice and
    // store two decisions for one student at one step.
    std::map<std::string, std::string> seen; // canonical directory -> the spelling given first
    for (const std::string& checkpoint : options.checkpoints) {
        std::error_code error;
        const fs::path canonical = fs::weakly_canonical(checkpoint, error);
        const std::string key = error ? fs::absolute(checkpoint).lexically_normal().string() : canonical.string();
        const auto [first, inserted] = seen.emplace(key, checkpoint);
        if (!inserted) {
            throw InputError("admit", "STUDENT",
                "the student checkpoint " + checkpoint + " is given twice"
                    + (first->second == checkpoint ? std::string() : " (first as " + first->second + ")")
                    + "; give each checkpoint once");
        }
    }
    requireHistoryDirectories(options.history, "admit");
    if (options.candidates.empty()) {
        throw InputError("admit", "candidates", "no candidate configuration to screen");
    }
    if (options.storedGenerations < 0) {
        throw InputError("admit", "--store-generations", "must be >= 0, got " + std::to_string(options.storedGenerations));
    }
    if (options.threshold.has_value() == options.calibrationId.has_value()) {
        throw InputError("admit", "threshold", "give either a calibration or an explicit threshold (exactly one)");
    }
    if (options.threshold && (!std::isfinite(*options.threshold) || *options.threshold <= 0.0)) {
        throw InputError("admit", "threshold", "must be a positive number of nats per token");
    }
    if (options.steps.size() > 1 && options.steps.size() != options.checkpoints.size()) {
        throw InputError("admit", "step",
            "give one step for every checkpoint or one for all (" + std::to_string(options.steps.size()) + " steps, "
                + std::to_string(options.checkpoints.size()) + " checkpoints)");
    }
    if (options.threshold && !options.steps.empty()) {
        throw InputError("admit", "step", "a step chooses a calibration's bracket; it needs a calibration");
    }
}

// What the check will hold, before anything is loaded: every checkpoint (screened and history) and one engine at
// a time (the BF16 unit's, then each candidate's), sized for the largest, on a noised copy of the weights when a
// candidate adds noise.
void checkMemory(const AdmissionOptions& options)
{
    const model::ModelConfig config = model::loadConfig((fs::path(options.checkpoints.front()) / "config.json").string());
    std::vector<std::optional<quant::RecipePlan>> plans; // per candidate
    for (const Candidate& candidate : options.candidates) {
        plans.emplace_back();
        if (!candidate.recipePath.empty()) {
            plans.back() = quant::resolveRecipe(quant::loadRecipe(candidate.recipePath), config);
        }
    }
    std::vector<const quant::RecipePlan*> planPointers {nullptr};
    std::vector<NoisyEngine> noisy;
    for (std::size_t c = 0; c < options.candidates.size(); ++c) {
        const quant::RecipePlan* plan = plans[c] ? &*plans[c] : nullptr;
        if (plan) {
            planPointers.push_back(plan);
        }
        if (options.candidates[c].noise > 0.0) {
            noisy.push_back({plan, options.candidates[c].noiseModules});
        }
    }
    std::vector<std::string> directories = options.history;
    directories.insert(directories.end(), options.checkpoints.begin(), options.checkpoints.end());
    checkAnalysisMemory("the admission check", directories, planPointers, options.settings, 1, noisy);
}

// What every measurement of the check uses: the student (its tokenizer and first checkpoint's weights), the
// probe prompts, the sampling, the candidates' recipes, and each checkpoint's weights, loaded once when first
// needed.
struct ScreenInputs {
    ModelDirectory student;
    PromptRequests requests;
    engine::SamplingOptions sampling;
    std::map<std::string, quant::Recipe> recipes;
    std::map<std::string, std::string> recipeTexts; // recipeToJson, stored with each decision
    std::map<std::string, model::TransformerWeights> weights;
    at::Device device = at::Device(at::kCPU);

    const model::TransformerWeights& weightsOf(const TimelineEntry& entry)
    {
        const std::string name = weightsName(entry);
        auto found = weights.find(name);
        if (found == weights.end()) {
            found = weights.emplace(name, loadTimelineWeights(entry, student.config, device)).first;
        }
        return found->second;
    }
};

ScreenInputs loadScreenInputs(const AdmissionOptions& options, Progress& progress)
{
    progress.update(0.0, "loading student and probe prompts");
    ScreenInputs inputs;
    inputs.device = options.settings.device;
    inputs.student = loadModelDirectory(options.checkpoints.front(), options.settings.device);
    const ModelDirectory& student = inputs.student;
    inputs.requests = promptRequests(options.probePath, *student.tokenizer, options.count);
    requirePromptsFit(inputs.requests, student.config, options.settings.maxNewTokens);
    inputs.sampling = samplingOptions(options.settings, student.config, *student.tokenizer);
    inputs.weights[options.checkpoints.front()] = student.weights;
    for (const Candidate& candidate : options.candidates) {
        if (!candidate.recipePath.empty() && !inputs.recipes.count(candidate.recipePath)) {
            const quant::Recipe recipe = quant::loadRecipe(candidate.recipePath);
            quant::resolveRecipe(recipe, student.config); // model checks before any measurement
            inputs.recipes.emplace(candidate.recipePath, recipe);
            inputs.recipeTexts.emplace(candidate.recipePath, quant::recipeToJson(recipe));
        }
        // Noise that lands on no module would screen another configuration than the one written.
        if (candidate.noise > 0.0) {
            engine::requireNoiseModulesMatch(student.config, candidate.noiseModules,
                candidate.source.empty() ? "--noise-modules" : candidate.source,
                candidate.source.empty() ? "" : "noise_modules");
        }
    }
    return inputs;
}

// The engine `candidate` describes (its recipe as loaded, its weight noise).
EngineConfiguration engineConfiguration(const Candidate& candidate, const ScreenInputs& inputs)
{
    EngineConfiguration configuration;
    if (!candidate.recipePath.empty()) {
        configuration.recipe = inputs.recipes.at(candidate.recipePath);
    }
    configuration.noise = candidate.noise;
    configuration.noiseSeed = candidate.noiseSeed;
    configuration.noiseModules = candidate.noiseModules;
    return configuration;
}

// The run's config_json: what a resume reads back (see resumeAdmission), without the input digests.
nlohmann::json runConfigJson(
    const AdmissionOptions& options, const nlohmann::json& settingsJson, const ProtocolCheck& protocol)
{
    nlohmann::json runConfig = settingsJson;
    runConfig["checkpoints"] = options.checkpoints;
    runConfig["history"] = options.history;
    runConfig["candidates"] = options.candidates.size();
    if (options.calibrationId) {
        runConfig["calibration_id"] = *options.calibrationId;
    } else {
        runConfig["threshold"] = *options.threshold;
    }
    runConfig["count"] = options.count;
    runConfig["measure_unit"] = options.measureUnit;
    runConfig["steps"] = options.steps;
    runConfig["allow_protocol_mismatch"] = options.allowProtocolMismatch;
    runConfig["protocol"] = protocolToJson(protocol.screen);
    runConfig["protocol_differs"] = protocol.differences;
    runConfig["engine"] = {{"batch", options.settings.batchSize}, {"kv_cache_bytes", options.settings.kvCacheBytes},
        {"device", deviceName(options.settings.device)}};
    nlohmann::json candidateList = nlohmann::json::array();
    for (const Candidate& candidate : options.candidates) {
        candidateList.push_back({{"name", candidate.name}, {"recipe", candidate.recipePath},
            {"staleness", candidate.staleness}, {"noise", candidate.noise}, {"noise_seed", candidate.noiseSeed},
            {"noise_modules", candidate.noiseModules}, {"source", candidate.source}});
    }
    runConfig["candidate_list"] = candidateList;
    return runConfig;
}

// Every file the check reads (checkpoints, probe prompts, recipes), for the digests a resume compares.
std::vector<std::string> inputFiles(const AdmissionOptions& options)
{
    std::vector<std::string> inputs;
    for (const auto* list : {&options.history, &options.checkpoints}) {
        for (const std::string& directory : *list) {
            const auto files = modelFiles(directory);
            inputs.insert(inputs.end(), files.begin(), files.end());
        }
    }
    inputs.push_back(options.probePath);
    for (const Candidate& candidate : options.candidates) {
        if (!candidate.recipePath.empty()) {
            inputs.push_back(candidate.recipePath);
        }
    }
    return inputs;
}

// Resume: the decisions of `checkpoint` stored before the interruption, from done[first] on, kept as they are
// (checked to be the ones this position of the order makes) and added to the result's rows. Returns how many.
std::size_t keepStoredDecisions(const store::RunStore& store, const AdmissionOptions& options,
    const std::vector<store::AdmissionDecision>& done, std::size_t first, const TimelineEntry& checkpoint,
    AdmissionResult& result)
{
    std::size_t kept = 0;
    while (kept < options.candidates.size() && first + kept < done.size()) {
        const store::AdmissionDecision& decision = done[first + kept];
        const Candidate& candidate = options.candidates[kept];
        const nlohmann::json inputs = nlohmann::json::parse(decision.candidateJson);
        if (decision.checkpoint != checkpoint.directory || inputs.at("name").get<std::string>() != candidate.name) {
            throw StoreError(store.path(), "admission run " + std::to_string(result.runId) + ": decision "
                + std::to_string(decision.id) + " is not the one expected at its place (candidate '"
                + candidate.name + "' at " + checkpoint.directory + "); the run cannot be resumed");
        }
        result.rows.push_back(storedRow(decision, options));
        ++kept;
    }
    return kept;
}

// The row of one measured candidate at one checkpoint.
AdmissionRow decisionRow(const Candidate& candidate, const TimelineEntry& checkpoint,
    const TimelineEntry& engineWeights, const ThresholdChoice& threshold, const engine::MismatchMeasurement& measured,
    std::optional<double> unit, const AdmissionOptions& options)
{
    AdmissionRow row;
    row.candidate = candidate.name;
    row.checkpoint = checkpoint.directory;
    row.checkpointStep = checkpoint.step;
    row.engineWeights = weightsName(engineWeights);
    row.engineStep = engineWeights.step;
    row.bracketStep = threshold.bracketStep;
    row.note = threshold.note;
    row.threshold = threshold.threshold;
    row.mismatch = measured.kl;
    row.interval = klInterval(measured, options.settings.bootstrap);
    row.k1 = measured.k1;
    row.k3 = measured.k3;
    row.tokens = measured.tokens;
    row.bf16Unit = unit;
    row.estimators = metrics::compareEstimators(measured.tokenValues);
    row.verdict = decide(row.interval, row.threshold);
    return row;
}

// What a stored decision records besides its numbers: the candidate, the weights and threshold it was measured
// with, the settings and protocol (read back by storedRow on resume).
nlohmann::json decisionInputs(const AdmissionRow& row, const Candidate& candidate, const std::string& recipeText,
    const engine::MismatchMeasurement& measured, const nlohmann::json& settingsJson, const nlohmann::json& flagsJson,
    const ProtocolCheck& protocol, const AdmissionOptions& options)
{
    return {{"name", candidate.name},
        {"recipe", candidate.recipePath.empty() ? nlohmann::json() : nlohmann::json(candidate.recipePath)},
        {"recipe_content", candidate.recipePath.empty() ? nlohmann::json() : nlohmann::json::parse(recipeText)},
        {"staleness", candidate.staleness}, {"checkpoint_step", row.checkpointStep},
        {"engine_weights", row.engineWeights}, {"engine_step", row.engineStep},
        {"bracket_step", row.bracketStep ? nlohmann::json(*row.bracketStep) : nlohmann::json()}, {"note", row.note},
        {"noise", candidate.noise}, {"noise_seed", candidate.noiseSeed}, {"noise_modules", candidate.noiseModules},
        {"settings", settingsJson}, {"protocol", protocolToJson(protocol.screen)},
        {"protocol_differs", protocol.differences}, {"calibration_flags", flagsJson}, {"k1", measured.k1},
        {"k3", measured.k3}, {"tokens", measured.tokens},
        {"bf16_unit", row.bf16Unit ? nlohmann::json(*row.bf16Unit) : nlohmann::json()},
        {"bf16_unit_of", "the plain BF16 engine at " + row.checkpoint + " (step " + std::to_string(row.checkpointStep)
                             + "), same prompts and seeds"},
        {"threshold_source",
            options.calibrationId ? "calibration " + std::to_string(*options.calibrationId) : std::string("explicit")},
        {"estimators", metrics::toJson(*row.estimators)}};
}

store::AdmissionDecision storedDecision(
    const AdmissionRow& row, const nlohmann::json& inputs, std::int64_t runId, const AdmissionOptions& options)
{
    store::AdmissionDecision decision;
    decision.runId = runId;
    decision.calibrationId = options.calibrationId;
    decision.candidateJson = inputs.dump();
    decision.checkpoint = row.checkpoint;
    decision.mismatch = row.mismatch;
    decision.ciLow = row.interval.low;
    decision.ciHigh = row.interval.high;
    decision.threshold = row.threshold;
    decision.decision = toString(row.verdict);
    decision.seconds = row.seconds;
    decision.toolVersion = kVersion;
    return decision;
}

// A fresh check (resumeRunId empty) or the continuation of a stored one.
AdmissionResult admit(store::RunStore& store, const AdmissionOptions& given, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::function<void(std::int64_t)>& onRunStarted)
{
    const auto started = std::chrono::steady_clock::now();
    AdmissionOptions options = withAbsolutePaths(given);
    checkOptions(options);
    // Everything that can be refused is checked before anything is measured or stored.
    const std::vector<TimelineEntry> timeline = checkpointTimeline(options);
    const std::vector<TimelineEntry> screened(timeline.end() - static_cast<std::ptrdiff_t>(options.checkpoints.size()),
        timeline.end());
    const std::vector<ThresholdChoice> thresholds = chooseThresholds(store, options, screened);
    for (const TimelineEntry& entry : screened) {
        for (const Candidate& candidate : options.candidates) {
            engineCheckpoint(timeline, entry, candidate);
        }
    }
    const ProtocolCheck protocol = checkProtocol(store, options);
    options.probePath = fs::absolute(options.probePath).string();
    checkMemory(options);
    ScreenInputs inputs = loadScreenInputs(options, progress);

    const nlohmann::json settingsJson = settingsToJson(options, inputs.requests.requests.size());
    const nlohmann::json flagsJson = flagsToJson(protocol.flags);
    nlohmann::json runConfig = runConfigJson(options, settingsJson, protocol);
    AdmissionResult result;
    result.protocol = protocol.screen;
    result.protocolDifferences = protocol.differences;
    result.calibrationFlags = protocol.flags;
    // What a resume continues from: the decisions already stored, in the order they are made.
    std::vector<store::AdmissionDecision> done;
    if (resumeRunId) {
        result.runId = *resumeRunId;
        checkRecordUnchanged(nlohmann::json::parse(store.run(result.runId)->configJson), runConfig, {"inputs"},
            result.runId, "admit");
        done = store::admissionDecisions(store, result.runId);
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max()); // running again; it has no steps
    } else {
        runConfig["inputs"] = fileDigests(inputFiles(options));
        result.runId = store.beginRun({"admit", "admit", runConfig.dump(), std::nullopt});
    }
    if (onRunStarted) {
        onRunStarted(result.runId);
    }
    store::recordRunOutcome(store, result.runId, [&] {
        const std::size_t perCheckpoint = options.candidates.size() + (options.measureUnit ? 1 : 0);
        const double parts = static_cast<double>(perCheckpoint * options.checkpoints.size());
        std::size_t part = 0;
        if (done.size() > options.checkpoints.size() * options.candidates.size()) {
            throw StoreError(store.path(), "admission run " + std::to_string(result.runId) + " has "
                + std::to_string(done.size()) + " decisions, more than its checkpoints x candidates");
        }
        std::size_t decisionIndex = 0;
        for (std::size_t c = 0; c < options.checkpoints.size(); ++c) {
            const TimelineEntry& checkpoint = screened[c];
            const std::size_t kept = keepStoredDecisions(store, options, done, decisionIndex, checkpoint, result);
            decisionIndex += kept;
            if (kept == options.candidates.size()) {
                part += perCheckpoint;
                continue;
            }
            const model::Transformer trainer(inputs.student.config, inputs.weightsOf(checkpoint));
            std::optional<double> unit;
            if (options.measureUnit) {
                Progress slice
                    = progress.child(part / parts, (part + 1) / parts, "BF16 unit of " + checkpoint.directory);
                unit = measureConfiguration(trainer, inputs.weightsOf(checkpoint), EngineConfiguration {},
                    inputs.requests, inputs.sampling, options.settings, &slice)
                           .kl;
                ++part;
                if (kept > 0 && result.rows.back().bf16Unit != unit) {
                    throw Error("admission run " + std::to_string(result.runId) + ": the BF16 unit of "
                        + checkpoint.directory + " measured again differs from the one stored with its decisions; the "
                          "measurement is not reproducible here, so the check cannot be resumed");
                }
            }
            part += kept;
            for (std::size_t k = kept; k < options.candidates.size(); ++k) {
                const Candidate& candidate = options.candidates[k];
                progress.checkCancelled();
                const auto candidateStarted = std::chrono::steady_clock::now();
                const TimelineEntry engineWeights = engineCheckpoint(timeline, checkpoint, candidate);
                const EngineConfiguration configuration = engineConfiguration(candidate, inputs);
                engine::MismatchMeasurement measured;
                std::vector<store::StoredGeneration> generations;
                {
                    Progress slice = progress.child(part / parts, (part + 1) / parts, candidate.name);
                    measured = measureConfiguration(trainer, inputs.weightsOf(engineWeights), configuration,
                        inputs.requests, inputs.sampling, options.settings, &slice,
                        static_cast<std::size_t>(options.storedGenerations), &generations);
                    ++part;
                }
                AdmissionRow row
                    = decisionRow(candidate, checkpoint, engineWeights, thresholds[c], measured, unit, options);
                row.seconds = secondsSince(candidateStarted);
                const std::string recipeText
                    = candidate.recipePath.empty() ? std::string() : inputs.recipeTexts.at(candidate.recipePath);
                const nlohmann::json decisionJson = decisionInputs(
                    row, candidate, recipeText, measured, settingsJson, flagsJson, protocol, options);
                store::AdmissionDecision decision = storedDecision(row, decisionJson, result.runId, options);
                decision.generations = std::move(generations);
                row.decisionId = store::addAdmissionDecision(store, decision);
                result.rows.push_back(std::move(row));
            }
        }
        store.finishRun(result.runId, store::RunStatus::Finished);
    });
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace

AdmissionResult runAdmission(store::RunStore& store, const AdmissionOptions& options, Progress& progress)
{
    return admit(store, options, progress, std::nullopt, options.onRunStarted);
}

AdmissionResult resumeAdmission(
    store::RunStore& store, std::int64_t runId, const AdmissionOptions& options, Progress& progress)
{
    const ResumableRun run = resumableRun(store, runId, "admit");
    checkInputsUnchanged(run.config.contains("inputs") ? run.config.at("inputs") : nlohmann::json(), runId, "admit");
    return admit(store, options, progress, runId, options.onRunStarted);
}

ScreenMeasurement measureScreen(const std::string& checkpoint, const Candidate& candidate,
    const MeasurementProtocol& protocol, const MeasureSettings& given, Progress& progress)
{
    AdmissionOptions options;
    options.checkpoints = {fs::absolute(checkpoint).string()};
    options.candidates = {candidate};
    if (!candidate.recipePath.empty()) {
        options.candidates[0].recipePath = fs::absolute(candidate.recipePath).string();
    }
    options.probePath = protocol.prompts;
    options.count = protocol.count;
    options.settings = applyProtocol(protocol, given);
    const std::vector<TimelineEntry> timeline = checkpointTimeline(options);
    const TimelineEntry& screened = timeline.back();
    ScreenMeasurement result;
    result.engineWeights = engineCheckpoint(timeline, screened, options.candidates[0]);
    ScreenInputs inputs = loadScreenInputs(options, progress);
    const model::Transformer trainer(inputs.student.config, inputs.weightsOf(screened));
    {
        Progress slice = progress.child(0.0, 0.5, "BF16 unit of " + screened.directory);
        result.bf16Unit = measureConfiguration(trainer, inputs.weightsOf(screened), EngineConfiguration {},
            inputs.requests, inputs.sampling, options.settings, &slice)
                              .kl;
    }
    Progress slice = progress.child(0.5, 1.0, candidate.name);
    const engine::MismatchMeasurement measured = measureConfiguration(trainer, inputs.weightsOf(result.engineWeights),
        engineConfiguration(options.candidates[0], inputs), inputs.requests, inputs.sampling, options.settings, &slice);
    result.mismatch = measured.kl;
    result.interval = klInterval(measured, options.settings.bootstrap);
    return result;
}

std::optional<double> bf16Multiple(const AdmissionRow& row)
{
    return row.bf16Unit && *row.bf16Unit > 0.0 ? std::optional<double>(row.mismatch / *row.bf16Unit) : std::nullopt;
}

nlohmann::json toJson(const AdmissionResult& result)
{
    nlohmann::json rows = nlohmann::json::array();
    std::int64_t admitted = 0;
    for (const auto& row : result.rows) {
        admitted += row.verdict == AdmissionVerdict::Admit ? 1 : 0;
        const auto x = bf16Multiple(row);
        rows.push_back({{"candidate", row.candidate}, {"checkpoint", row.checkpoint},
            {"checkpoint_step", row.checkpointStep}, {"engine_weights", row.engineWeights},
            {"engine_step", row.engineStep},
            {"bracket_step", row.bracketStep ? nlohmann::json(*row.bracketStep) : nlohmann::json()},
            {"note", row.note}, {"decision", toString(row.verdict)}, {"mismatch", toJson(row.interval)},
            {"threshold", row.threshold}, {"k1", row.k1}, {"k3", row.k3}, {"tokens", row.tokens},
            {"bf16_unit", row.bf16Unit ? nlohmann::json(*row.bf16Unit) : nlohmann::json()},
            {"bf16_multiple", x ? nlohmann::json(*x) : nlohmann::json()}, {"seconds", row.seconds},
            {"decision_id", row.decisionId},
            {"estimators", row.estimators ? metrics::toJson(*row.estimators) : nlohmann::json()}});
    }
    return {{"run_id", result.runId}, {"decisions", rows}, {"admitted", admitted},
        {"protocol", protocolToJson(result.protocol)},
        {"protocol_differs", result.protocolDifferences}, {"calibration_flags", flagsToJson(result.calibrationFlags)},
        {"seconds", result.seconds},
        {"rule",
            "admit when the interval's high end < threshold, reject when its low end > threshold, borderline "
            "otherwise"},
        {"bf16_multiple", "mismatch / the BF16 unit of the screened checkpoint (the plain BF16 engine at its weights, "
                          "same prompts and seeds)"}};
}

} // namespace mismatch::analysis

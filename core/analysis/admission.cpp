#include "core/analysis/admission.h"

#include "core/common/utf8.h"
#include "core/analysis/job_resume.h"
#include "core/common/error.h"
#include "core/common/version.h"
#include "core/io/yaml_scalar.h"
#include "core/store/analysis_store.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

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

std::string place(const YAML::Node& node)
{
    const io::YamlPosition position = io::yamlPosition(node);
    if (position.line == 0) {
        return "";
    }
    return "line " + std::to_string(position.line) + ", column " + std::to_string(position.column);
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
    if (const std::size_t bad = firstInvalidUtf8(text); bad != std::string::npos) {
        throw InputError(path, io::lineColumnOf(text, bad), "not valid UTF-8 (YAML files are UTF-8)");
    }
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& error) {
        throw InputError(path,
            "line " + std::to_string(error.mark.line + 1) + ", column " + std::to_string(error.mark.column + 1),
            "malformed YAML: " + error.msg);
    }
    if (const std::optional<YAML::Node> bad = io::firstNonUtf8Scalar(root)) {
        throw InputError(path, place(*bad),
            "a string that is not valid UTF-8 (yaml-cpp writes the escapes \\_ and \\N as single bytes)");
    }
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
    std::vector<Candidate> candidates;
    std::map<std::string, std::string> names; // name -> where first given
    for (std::size_t i = 0; i < root.size(); ++i) {
        const YAML::Node item = root[i];
        if (!item.IsMap()) {
            fail(path, item, "candidate " + std::to_string(i + 1) + ": expected a mapping, got " + io::kindName(item));
        }
        Candidate candidate;
        candidate.source = path + ":" + place(item);
        std::map<std::string, std::string> seen;
        bool hasName = false;
        for (auto it = item.begin(); it != item.end(); ++it) {
            const YAML::Node key = it->first;
            const YAML::Node value = it->second;
            if (!key.IsScalar()) {
                fail(path, key, "expected a key name, got " + io::kindName(key));
            }
            const std::string name = key.Scalar();
            if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
                fail(path, key,
                    "unknown key '" + name
                        + "' (expected one of: name, recipe, staleness, noise, noise_seed, "
                          "noise_modules)");
            }
            if (!seen.emplace(name, place(key)).second) {
                fail(path, key, "duplicate key '" + name + "' (first given at " + seen[name] + ")");
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
                    std::error_code error; // the throwing overload throws for a name too long for the file system
                    if (!fs::is_regular_file(candidate.recipePath, error)) {
                        fail(path, value,
                            "recipe file '" + candidate.recipePath + "' does not exist"
                                + (error ? " (" + error.message() + ")" : std::string()));
                    }
                    quant::loadRecipe(candidate.recipePath); // its own located errors
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
            }
        }
        if (!hasName) {
            fail(path, item, "candidate " + std::to_string(i + 1) + " has no `name`");
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
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        throw InputError(path, "", "cannot open the candidates file");
    }
    std::ostringstream text;
    text << file.rdbuf();
    return parseCandidates(text.str(), path);
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

// A fresh check (resumeRunId empty) or the continuation of a stored one.
AdmissionResult admit(store::RunStore& store, const AdmissionOptions& given, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::function<void(std::int64_t)>& onRunStarted)
{
    const auto started = std::chrono::steady_clock::now();
    // Paths are made absolute so that the stored decisions and a resume name the same files from any directory.
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
    if (!options.probePath.empty()) {
        options.probePath = fs::absolute(options.probePath).string();
    }
    if (options.checkpoints.empty()) {
        throw InputError("admit", "STUDENT", "at least one student checkpoint is needed");
    }
    if (options.candidates.empty()) {
        throw InputError("admit", "candidates", "no candidate configuration to screen");
    }
    if (options.threshold.has_value() == options.calibrationId.has_value()) {
        throw InputError("admit", "threshold", "give either --calibration ID or --threshold X (exactly one)");
    }
    if (options.threshold && (!std::isfinite(*options.threshold) || *options.threshold <= 0.0)) {
        throw InputError("admit", "--threshold", "must be a positive number of nats per token");
    }
    if (options.steps.size() > 1 && options.steps.size() != options.checkpoints.size()) {
        throw InputError("admit", "--step",
            "give one step for every checkpoint or one for all (" + std::to_string(options.steps.size()) + " steps, "
                + std::to_string(options.checkpoints.size()) + " checkpoints)");
    }
    if (options.threshold && !options.steps.empty()) {
        throw InputError("admit", "--step", "a step chooses a calibration's bracket; it needs --calibration");
    }
    // Thresholds per checkpoint, resolved before anything is measured.
    std::vector<double> thresholds;
    for (std::size_t c = 0; c < options.checkpoints.size(); ++c) {
        if (options.threshold) {
            thresholds.push_back(*options.threshold);
        } else {
            std::optional<std::int64_t> step;
            if (!options.steps.empty()) {
                step = options.steps.size() == 1 ? options.steps[0] : options.steps[c];
            }
            thresholds.push_back(store::admissionThreshold(store, *options.calibrationId, step));
        }
    }
    // Timeline for staleness; every candidate's k must reach an available checkpoint.
    std::vector<std::string> timeline = options.history;
    timeline.insert(timeline.end(), options.checkpoints.begin(), options.checkpoints.end());
    for (const Candidate& candidate : options.candidates) {
        const auto available = static_cast<std::int64_t>(options.history.size());
        if (candidate.staleness > available) {
            throw InputError(candidate.source.empty() ? std::string("admit") : candidate.source,
                "candidate '" + candidate.name + "'",
                "staleness " + std::to_string(candidate.staleness) + " needs the checkpoint "
                    + std::to_string(candidate.staleness) + " steps before the first screened one, but only "
                    + std::to_string(available) + " older checkpoint(s) were given (--history DIR, oldest first)");
        }
    }

    {
        // What the check will hold, before anything is loaded: every checkpoint (screened and history) and one
        // engine at a time (the BF16 unit's, then each candidate's), sized for the largest.
        const model::ModelConfig config = model::loadConfig((fs::path(options.checkpoints.front()) / "config.json").string());
        std::vector<quant::RecipePlan> plans;
        for (const Candidate& candidate : options.candidates) {
            if (!candidate.recipePath.empty()) {
                plans.push_back(quant::resolveRecipe(quant::loadRecipe(candidate.recipePath), config));
            }
        }
        std::vector<const quant::RecipePlan*> planPointers {nullptr};
        for (const quant::RecipePlan& plan : plans) {
            planPointers.push_back(&plan);
        }
        std::vector<std::string> directories = options.history;
        directories.insert(directories.end(), options.checkpoints.begin(), options.checkpoints.end());
        checkAnalysisMemory("the admission check", directories, planPointers, options.settings);
    }
    progress.update(0.0, "loading student and probe prompts");
    const ModelDirectory student = loadModelDirectory(options.checkpoints.front());
    const PromptRequests requests = promptRequests(options.probePath, *student.tokenizer, options.count);
    const engine::SamplingOptions sampling = samplingOptions(options.settings, student.config, *student.tokenizer);
    std::map<std::string, model::TransformerWeights> weights;
    weights[options.checkpoints.front()] = student.weights;
    auto weightsOf = [&](const std::string& directory) -> const model::TransformerWeights& {
        auto found = weights.find(directory);
        if (found == weights.end()) {
            found = weights.emplace(directory, loadCheckpointWeights(directory, student.config)).first;
        }
        return found->second;
    };
    std::map<std::string, quant::Recipe> recipes;
    std::map<std::string, std::string> recipeTexts;
    for (const Candidate& candidate : options.candidates) {
        if (!candidate.recipePath.empty() && !recipes.count(candidate.recipePath)) {
            const quant::Recipe recipe = quant::loadRecipe(candidate.recipePath);
            quant::resolveRecipe(recipe, student.config); // model checks before any measurement
            recipes.emplace(candidate.recipePath, recipe);
            recipeTexts.emplace(candidate.recipePath, quant::recipeToJson(recipe));
        }
    }

    const nlohmann::json settingsJson = {{"probe", fs::absolute(options.probePath).string()},
        {"prompts", requests.requests.size()}, {"temperature", options.settings.temperature},
        {"top_p", options.settings.topP}, {"top_k", options.settings.topK},
        {"max_tokens", options.settings.maxNewTokens}, {"seed", options.settings.seed},
        {"bootstrap",
            {{"resamples", options.settings.bootstrap.resamples}, {"confidence", options.settings.bootstrap.confidence},
                {"seed", options.settings.bootstrap.seed}}}};
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
    runConfig["engine"] = {{"batch", options.settings.batchSize}, {"kv_cache_bytes", options.settings.kvCacheBytes}};
    nlohmann::json candidateList = nlohmann::json::array();
    for (const Candidate& candidate : options.candidates) {
        candidateList.push_back({{"name", candidate.name}, {"recipe", candidate.recipePath},
            {"staleness", candidate.staleness}, {"noise", candidate.noise}, {"noise_seed", candidate.noiseSeed},
            {"noise_modules", candidate.noiseModules}, {"source", candidate.source}});
    }
    runConfig["candidate_list"] = candidateList;
    AdmissionResult result;
    // What a resume continues from: the decisions already stored, in the order they are made.
    std::vector<store::AdmissionDecision> done;
    if (resumeRunId) {
        result.runId = *resumeRunId;
        done = store::admissionDecisions(store, result.runId);
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max()); // running again; it has no steps
    } else {
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
        runConfig["inputs"] = fileDigests(inputs);
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
            const std::string& checkpoint = options.checkpoints[c];
            // Decisions of this checkpoint stored before the interruption: kept as they are (checked to be the
            // ones this position of the order makes), the rest measured.
            std::size_t kept = 0;
            while (kept < options.candidates.size() && decisionIndex + kept < done.size()) {
                const store::AdmissionDecision& decision = done[decisionIndex + kept];
                const Candidate& candidate = options.candidates[kept];
                const nlohmann::json inputs = nlohmann::json::parse(decision.candidateJson);
                if (decision.checkpoint != checkpoint || inputs.at("name").get<std::string>() != candidate.name) {
                    throw StoreError(store.path(), "admission run " + std::to_string(result.runId) + ": decision "
                        + std::to_string(decision.id) + " is not the one expected at its place (candidate '"
                        + candidate.name + "' at " + checkpoint + "); the run cannot be resumed");
                }
                AdmissionRow row;
                row.candidate = candidate.name;
                row.checkpoint = checkpoint;
                row.engineWeights = inputs.at("engine_weights").get<std::string>();
                row.threshold = decision.threshold;
                row.mismatch = decision.mismatch;
                row.interval = {decision.mismatch, decision.ciLow, decision.ciHigh,
                    options.settings.bootstrap.confidence, options.settings.bootstrap.resamples};
                row.k1 = inputs.at("k1").get<double>();
                row.k3 = inputs.at("k3").get<double>();
                row.tokens = inputs.at("tokens").get<std::int64_t>();
                if (!inputs.at("bf16_unit").is_null()) {
                    row.bf16Unit = inputs.at("bf16_unit").get<double>();
                }
                row.verdict = decide(row.interval, row.threshold);
                row.seconds = decision.seconds;
                row.decisionId = decision.id;
                result.rows.push_back(std::move(row));
                ++kept;
            }
            decisionIndex += kept;
            if (kept == options.candidates.size()) {
                part += perCheckpoint;
                continue;
            }
            const model::Transformer trainer(student.config, weightsOf(checkpoint));
            std::optional<double> unit;
            if (options.measureUnit) {
                ProgressSlice slice(&progress, part / parts, (part + 1) / parts, "BF16 unit of " + checkpoint);
                unit = measureConfiguration(trainer, weightsOf(checkpoint), EngineConfiguration {}, requests, sampling,
                    options.settings, slice.get())
                           .kl;
                ++part;
                if (kept > 0 && result.rows.back().bf16Unit != unit) {
                    throw Error("admission run " + std::to_string(result.runId) + ": the BF16 unit of " + checkpoint
                        + " measured again differs from the one stored with its decisions; the measurement is not "
                          "reproducible here, so the check cannot be resumed");
                }
            }
            part += kept;
            const std::size_t timelineIndex = options.history.size() + c;
            for (std::size_t k = kept; k < options.candidates.size(); ++k) {
                const Candidate& candidate = options.candidates[k];
                progress.checkCancelled();
                const auto candidateStarted = std::chrono::steady_clock::now();
                const std::string& engineCheckpoint
                    = timeline[timelineIndex - static_cast<std::size_t>(candidate.staleness)];
                EngineConfiguration configuration;
                if (!candidate.recipePath.empty()) {
                    configuration.recipe = recipes.at(candidate.recipePath);
                }
                configuration.noise = candidate.noise;
                configuration.noiseSeed = candidate.noiseSeed;
                configuration.noiseModules = candidate.noiseModules;
                engine::MismatchMeasurement measured;
                {
                    ProgressSlice slice(&progress, part / parts, (part + 1) / parts, candidate.name);
                    measured = measureConfiguration(trainer, weightsOf(engineCheckpoint), configuration, requests,
                        sampling, options.settings, slice.get());
                    ++part;
                }
                AdmissionRow row;
                row.candidate = candidate.name;
                row.checkpoint = checkpoint;
                row.engineWeights = engineCheckpoint;
                row.threshold = thresholds[c];
                row.mismatch = measured.kl;
                row.interval = klInterval(measured, options.settings.bootstrap);
                row.k1 = measured.k1;
                row.k3 = measured.k3;
                row.tokens = measured.tokens;
                row.bf16Unit = unit;
                row.verdict = decide(row.interval, row.threshold);
                row.seconds = secondsSince(candidateStarted);

                nlohmann::json inputs = {{"name", candidate.name},
                    {"recipe", candidate.recipePath.empty() ? nlohmann::json() : nlohmann::json(candidate.recipePath)},
                    {"recipe_content",
                        candidate.recipePath.empty() ? nlohmann::json()
                                                     : nlohmann::json::parse(recipeTexts.at(candidate.recipePath))},
                    {"staleness", candidate.staleness}, {"engine_weights", engineCheckpoint},
                    {"noise", candidate.noise}, {"noise_seed", candidate.noiseSeed},
                    {"noise_modules", candidate.noiseModules}, {"settings", settingsJson}, {"k1", measured.k1},
                    {"k3", measured.k3}, {"tokens", measured.tokens},
                    {"bf16_unit", unit ? nlohmann::json(*unit) : nlohmann::json()},
                    {"threshold_source",
                        options.calibrationId ? "calibration " + std::to_string(*options.calibrationId)
                                              : std::string("explicit")}};
                store::AdmissionDecision decision;
                decision.runId = result.runId;
                decision.calibrationId = options.calibrationId;
                decision.candidateJson = inputs.dump();
                decision.checkpoint = checkpoint;
                decision.mismatch = row.mismatch;
                decision.ciLow = row.interval.low;
                decision.ciHigh = row.interval.high;
                decision.threshold = row.threshold;
                decision.decision = toString(row.verdict);
                decision.seconds = row.seconds;
                decision.toolVersion = kVersion;
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

AdmissionResult resumeAdmission(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::function<void(std::int64_t runId)>& onRunStarted)
{
    const ResumableRun run = resumableRun(store, runId, "admit");
    const std::string source = store.path() + " (admit run " + std::to_string(runId) + " config_json)";
    const nlohmann::json& c = run.config;
    checkInputsUnchanged(c.contains("inputs") ? c.at("inputs") : nlohmann::json(), runId, "admit");
    AdmissionOptions options;
    options.checkpoints = storedOption<std::vector<std::string>>(c, "checkpoints", source);
    options.history = storedOption<std::vector<std::string>>(c, "history", source);
    options.probePath = storedOption<std::string>(c, "probe", source);
    options.count = storedOption<std::int64_t>(c, "count", source);
    options.measureUnit = storedOption<bool>(c, "measure_unit", source);
    options.steps = storedOption<std::vector<std::int64_t>>(c, "steps", source);
    options.settings.temperature = storedOption<double>(c, "temperature", source);
    options.settings.topP = storedOption<double>(c, "top_p", source);
    options.settings.topK = storedOption<std::int64_t>(c, "top_k", source);
    options.settings.maxNewTokens = storedOption<std::int64_t>(c, "max_tokens", source);
    options.settings.seed = storedOption<std::uint64_t>(c, "seed", source);
    const auto engineSettings = storedOption<nlohmann::json>(c, "engine", source);
    options.settings.batchSize = storedOption<std::int64_t>(engineSettings, "batch", source);
    options.settings.kvCacheBytes = storedOption<std::uint64_t>(engineSettings, "kv_cache_bytes", source);
    const auto bootstrap = storedOption<nlohmann::json>(c, "bootstrap", source);
    options.settings.bootstrap.resamples = storedOption<int>(bootstrap, "resamples", source);
    options.settings.bootstrap.confidence = storedOption<double>(bootstrap, "confidence", source);
    options.settings.bootstrap.seed = storedOption<std::uint64_t>(bootstrap, "seed", source);
    if (c.contains("calibration_id")) {
        options.calibrationId = storedOption<std::int64_t>(c, "calibration_id", source);
    } else {
        options.threshold = storedOption<double>(c, "threshold", source);
    }
    for (const auto& item : storedOption<nlohmann::json>(c, "candidate_list", source)) {
        Candidate candidate;
        candidate.name = storedOption<std::string>(item, "name", source);
        candidate.recipePath = storedOption<std::string>(item, "recipe", source);
        candidate.staleness = storedOption<std::int64_t>(item, "staleness", source);
        candidate.noise = storedOption<double>(item, "noise", source);
        candidate.noiseSeed = storedOption<std::uint64_t>(item, "noise_seed", source);
        candidate.noiseModules = storedOption<std::string>(item, "noise_modules", source);
        candidate.source = storedOption<std::string>(item, "source", source);
        options.candidates.push_back(std::move(candidate));
    }
    return admit(store, options, progress, runId, onRunStarted);
}

} // namespace mismatch::analysis

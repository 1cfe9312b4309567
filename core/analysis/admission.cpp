#include "core/analysis/admission.h"

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
    if (const std::size_t bad = io::invalidUtf8Offset(text); bad != std::string::npos) {
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
                    if (!fs::is_regular_file(candidate.recipePath)) {
                        fail(path, value, "recipe file '" + candidate.recipePath + "' does not exist");
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
                candidate.noise = value.as<double>();
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

AdmissionResult runAdmission(store::RunStore& store, const AdmissionOptions& options, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
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
    AdmissionResult result;
    result.runId = store.beginRun({"admit", "admit", runConfig.dump(), std::nullopt});
    store::recordRunOutcome(store, result.runId, [&] {
        const std::size_t perCheckpoint = options.candidates.size() + (options.measureUnit ? 1 : 0);
        const double parts = static_cast<double>(perCheckpoint * options.checkpoints.size());
        std::size_t part = 0;
        for (std::size_t c = 0; c < options.checkpoints.size(); ++c) {
            const std::string& checkpoint = options.checkpoints[c];
            const model::Transformer trainer(student.config, weightsOf(checkpoint));
            std::optional<double> unit;
            if (options.measureUnit) {
                ProgressSlice slice(&progress, part / parts, (part + 1) / parts, "BF16 unit of " + checkpoint);
                unit = measureConfiguration(trainer, weightsOf(checkpoint), EngineConfiguration {}, requests, sampling,
                    options.settings, slice.get())
                           .kl;
                ++part;
            }
            const std::size_t timelineIndex = options.history.size() + c;
            for (const Candidate& candidate : options.candidates) {
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
    });
    store.finishRun(result.runId, store::RunStatus::Finished);
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace mismatch::analysis

#include "core/analysis/breakdown.h"

#include "core/analysis/protocol.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/engine/mismatch_sources.h"
#include "core/metrics/estimators.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool isEdgeModule(const std::string& name)
{
    return name == quant::kEmbedName || name == quant::kLmHeadName;
}

bool isBf16(const quant::WeightPrecision& precision)
{
    return precision.format == quant::WeightFormat::Bf16;
}

bool isBf16(const quant::ActivationPrecision& precision)
{
    return precision.format == quant::ActivationFormat::Bf16;
}

bool isBf16(const quant::KvPrecision& precision)
{
    return precision.format == quant::KvFormat::Bf16;
}

int sourceCount(SourceMask mask)
{
    int count = 0;
    for (; mask != 0; mask &= mask - 1) {
        ++count;
    }
    return count;
}

// "+"-joined names of the sources in `mask`, in enum order; "" for none.
std::string subsetLabel(SourceMask mask)
{
    std::string label;
    for (int s = 0; s < kMismatchSourceCount; ++s) {
        if (mask & sourceBit(static_cast<MismatchSource>(s))) {
            label += (label.empty() ? "" : "+") + toString(static_cast<MismatchSource>(s));
        }
    }
    return label;
}

// One configuration to measure: a subset of a candidate's sources.
struct Configuration {
    EngineConfiguration engine;
    std::string weightsDirectory;
    std::string key; // equal keys are equal configurations, measured once
};

struct Measurement {
    std::vector<double> sums;
    std::vector<double> tokens;
    metrics::Interval interval;
    double k1 = 0.0;
    double k3 = 0.0;
    std::int64_t tokenCount = 0;
    metrics::EstimatorComparison estimators;
};

// A quantity of a breakdown: coefficients over the candidate's measured subsets.
using Combination = std::map<SourceMask, double>;

} // namespace

std::string toString(MismatchSource source)
{
    switch (source) {
    case MismatchSource::Weights:
        return "weights";
    case MismatchSource::Activations:
        return "activations";
    case MismatchSource::KvCache:
        return "kv_cache";
    case MismatchSource::EmbeddingLmHead:
        return "embedding_lm_head";
    case MismatchSource::Staleness:
        return "staleness";
    case MismatchSource::Noise:
        return "noise";
    }
    return "unknown";
}

double shapleyWeight(int subsetSize, int sources)
{
    // |S|! (n - |S| - 1)! / n!, in floating point (n <= kMismatchSourceCount).
    double weight = 1.0 / static_cast<double>(sources);
    for (int k = 1; k <= subsetSize; ++k) {
        weight *= static_cast<double>(k) / static_cast<double>(sources - k);
    }
    return weight;
}

std::vector<MismatchSource> presentSources(const Candidate& candidate, const std::optional<quant::RecipePlan>& plan)
{
    SourceMask mask = 0;
    if (plan) {
        for (const auto& [name, precision] : plan->modules) {
            if (isEdgeModule(name)) {
                if (!isBf16(precision.weights) || !isBf16(precision.activations)) {
                    mask |= sourceBit(MismatchSource::EmbeddingLmHead);
                }
                continue;
            }
            if (!isBf16(precision.weights)) {
                mask |= sourceBit(MismatchSource::Weights);
            }
            // Microscaling activations go with their weights (both operands in one format: the engine and vLLM have
            // no product of bf16 weights with MXFP8/MXFP4/NVFP4 activations), so they are part of the weights' source.
            if (!isBf16(precision.activations) && !quant::isMicroscaling(precision.activations.format)) {
                mask |= sourceBit(MismatchSource::Activations);
            }
        }
        for (const quant::KvPrecision& kv : plan->kvPerLayer) {
            if (!isBf16(kv)) {
                mask |= sourceBit(MismatchSource::KvCache);
            }
        }
    }
    if (candidate.staleness > 0) {
        mask |= sourceBit(MismatchSource::Staleness);
    }
    if (candidate.noise > 0.0) {
        mask |= sourceBit(MismatchSource::Noise);
    }
    std::vector<MismatchSource> sources;
    for (int s = 0; s < kMismatchSourceCount; ++s) {
        if (mask & sourceBit(static_cast<MismatchSource>(s))) {
            sources.push_back(static_cast<MismatchSource>(s));
        }
    }
    return sources;
}

quant::RecipePlan maskedPlan(const quant::RecipePlan& plan, SourceMask mask)
{
    quant::RecipePlan result = plan;
    const bool weights = mask & sourceBit(MismatchSource::Weights);
    const bool activations = mask & sourceBit(MismatchSource::Activations);
    const bool edges = mask & sourceBit(MismatchSource::EmbeddingLmHead);
    for (auto& [name, precision] : result.modules) {
        const bool keepWeights = isEdgeModule(name) ? edges : weights;
        const bool keepActivations = isEdgeModule(name)
            ? edges
            : quant::isMicroscaling(precision.activations.format) ? keepWeights : activations; // see presentSources
        if (!keepWeights) {
            precision.weights = quant::WeightPrecision {};
        }
        if (!keepActivations) {
            precision.activations = quant::ActivationPrecision {};
        }
    }
    if (!(mask & sourceBit(MismatchSource::KvCache))) {
        for (quant::KvPrecision& kv : result.kvPerLayer) {
            kv = quant::KvPrecision {};
        }
    }
    return result;
}

std::optional<quant::Recipe> recipeOfPlan(const quant::RecipePlan& plan, const std::string& name)
{
    quant::Recipe recipe;
    recipe.name = name;
    for (const auto& [module, precision] : plan.modules) {
        quant::RecipeRule rule;
        rule.match = module;
        if (!isBf16(precision.weights)) {
            rule.weights = precision.weights;
        }
        if (module != quant::kEmbedName && !isBf16(precision.activations)) {
            rule.activations = precision.activations;
        }
        if (rule.weights || rule.activations) {
            recipe.rules.push_back(rule);
        }
    }
    for (std::size_t layer = 0; layer < plan.kvPerLayer.size(); ++layer) {
        if (!isBf16(plan.kvPerLayer[layer])) {
            quant::RecipeRule rule;
            rule.match = quant::attentionName(static_cast<std::int64_t>(layer));
            rule.kvCache = plan.kvPerLayer[layer];
            recipe.rules.push_back(rule);
        }
    }
    if (recipe.rules.empty()) {
        return std::nullopt;
    }
    return recipe;
}

namespace {

// The options checked, with their paths made absolute.
BreakdownOptions checkedOptions(const BreakdownOptions& given)
{
    BreakdownOptions options = given;
    if (options.modelDirectory.empty()) {
        throw InputError("breakdown", "MODEL", "a student checkpoint (model directory) is needed");
    }
    if (options.candidates.empty()) {
        throw InputError("breakdown", "candidates", "no candidate configuration to break down");
    }
    requireHistoryDirectories(options.history, "breakdown");
    if (options.shapleyMaxSources < 0 || options.shapleyMaxSources > kMismatchSourceCount) {
        throw InputError("breakdown", "--shapley-max",
            "must lie in [0, " + std::to_string(kMismatchSourceCount) + "], got "
                + std::to_string(options.shapleyMaxSources));
    }
    // Paths absolute, so that the stored record names the same files from any directory.
    options.modelDirectory = fs::absolute(options.modelDirectory).string();
    for (std::string& path : options.history) {
        path = fs::absolute(path).string();
    }
    for (Candidate& candidate : options.candidates) {
        if (!candidate.recipePath.empty()) {
            candidate.recipePath = fs::absolute(candidate.recipePath).string();
        }
    }
    options.promptSetPath = fs::absolute(options.promptSetPath).string();
    for (std::size_t i = 0; i < options.candidates.size(); ++i) {
        for (std::size_t j = 0; j < i; ++j) {
            if (options.candidates[i].name == options.candidates[j].name) {
                throw InputError("breakdown", "candidates", "two candidates are named '" + options.candidates[i].name + "'");
            }
        }
    }
    return options;
}

// The candidates as admitted: the checkpoint timeline (its last entry the screened student), each candidate's
// recipe plan (none without a recipe) and the weights its stale engine runs on.
struct AdmittedCandidates {
    std::vector<TimelineEntry> timeline;
    std::vector<std::optional<quant::RecipePlan>> plans;
    std::vector<std::string> engineDirectories; // weightsName of each candidate's stale engine weights
    std::map<std::string, TimelineEntry> engineEntries;

    const TimelineEntry& screened() const { return timeline.back(); }
};

AdmittedCandidates admitCandidates(const BreakdownOptions& options)
{
    AdmittedCandidates admitted;
    AdmissionOptions timelineOptions;
    timelineOptions.checkpoints = {options.modelDirectory};
    timelineOptions.history = options.history;
    timelineOptions.candidates = options.candidates;
    admitted.timeline = checkpointTimeline(timelineOptions);
    const TimelineEntry& screened = admitted.screened();
    const model::ModelConfig config = model::loadConfig((fs::path(options.modelDirectory) / "config.json").string());
    for (const Candidate& candidate : options.candidates) {
        Candidate located = candidate; // errors about a command-line candidate name the job
        if (located.source.empty()) {
            located.source = "breakdown";
        }
        const TimelineEntry engineEntry = engineCheckpoint(admitted.timeline, screened, located);
        admitted.engineDirectories.push_back(weightsName(engineEntry));
        admitted.engineEntries.emplace(admitted.engineDirectories.back(), engineEntry);
        if (candidate.recipePath.empty()) {
            admitted.plans.emplace_back();
        } else {
            admitted.plans.emplace_back(quant::resolveRecipe(quant::loadRecipe(candidate.recipePath), config));
        }
        if (candidate.noise > 0.0) {
            engine::requireNoiseModulesMatch(config, candidate.noiseModules,
                candidate.source.empty() ? "--noise-modules" : candidate.source,
                candidate.source.empty() ? "" : "noise_modules");
        }
    }
    return admitted;
}

void checkBreakdownMemory(const BreakdownOptions& options, const std::vector<std::optional<quant::RecipePlan>>& plans)
{
    std::vector<const quant::RecipePlan*> planPointers {nullptr};
    for (const auto& plan : plans) {
        if (plan) {
            planPointers.push_back(&*plan);
        }
    }
    std::vector<std::string> directories = options.history;
    directories.push_back(options.modelDirectory);
    // A candidate's noise is measured alone (the BF16 engine) and with its other sources (its recipe's engine).
    std::vector<NoisyEngine> noisy;
    for (std::size_t c = 0; c < options.candidates.size(); ++c) {
        if (options.candidates[c].noise > 0.0) {
            noisy.push_back({nullptr, options.candidates[c].noiseModules});
            if (plans[c]) {
                noisy.push_back({&*plans[c], options.candidates[c].noiseModules});
            }
        }
    }
    checkAnalysisMemory("the breakdown", directories, planPointers, options.settings, 1, noisy);
}

// A candidate's sources and the subsets of them to measure.
struct CandidatePlan {
    std::vector<MismatchSource> sources;
    SourceMask all = 0;
    bool shapley = false;
    std::vector<SourceMask> subsets;
    std::map<SourceMask, std::size_t> configuration; // subset -> index into `configurations`
};

// The configurations: per candidate the subsets of its sources to measure, equal ones shared.
struct MeasurementPlan {
    std::vector<CandidatePlan> candidates;
    std::vector<Configuration> configurations;
};

CandidatePlan candidateSubsets(
    const Candidate& candidate, const std::optional<quant::RecipePlan>& plan, std::int64_t shapleyMaxSources)
{
    CandidatePlan cp;
    cp.sources = presentSources(candidate, plan);
    for (const MismatchSource s : cp.sources) {
        cp.all |= sourceBit(s);
    }
    const int n = static_cast<int>(cp.sources.size());
    cp.shapley = n <= shapleyMaxSources;
    if (cp.shapley) {
        for (SourceMask subset = cp.all;; subset = (subset - 1) & cp.all) {
            cp.subsets.insert(cp.subsets.begin(), subset);
            if (subset == 0) {
                break;
            }
        }
    } else {
        // {}, each {s}, each all - s, all; with two sources "all - s" are the singletons: each subset once.
        const auto add = [&cp](SourceMask subset) {
            if (std::find(cp.subsets.begin(), cp.subsets.end(), subset) == cp.subsets.end()) {
                cp.subsets.push_back(subset);
            }
        };
        add(0);
        for (const MismatchSource s : cp.sources) {
            add(sourceBit(s));
        }
        for (const MismatchSource s : cp.sources) {
            add(cp.all & ~sourceBit(s));
        }
        add(cp.all);
    }
    return cp;
}

// The configuration of `candidate` with only the sources in `subset` switched on, keyed by what it measures.
Configuration subsetConfiguration(const Candidate& candidate, const std::optional<quant::RecipePlan>& plan,
    SourceMask subset, const std::string& engineDirectory, const std::string& modelDirectory)
{
    Configuration configuration;
    if (plan) {
        configuration.engine.recipe = recipeOfPlan(maskedPlan(*plan, subset), "");
    }
    if (subset & sourceBit(MismatchSource::Noise)) {
        configuration.engine.noise = candidate.noise;
        configuration.engine.noiseSeed = candidate.noiseSeed;
        configuration.engine.noiseModules = candidate.noiseModules;
    }
    configuration.weightsDirectory = subset & sourceBit(MismatchSource::Staleness) ? engineDirectory : modelDirectory;
    const nlohmann::json key = {
        {"recipe",
            configuration.engine.recipe
                ? nlohmann::json::parse(quant::recipeToJson(*configuration.engine.recipe))
                : nlohmann::json()},
        {"noise", configuration.engine.noise}, {"noise_seed", configuration.engine.noiseSeed},
        {"noise_modules", configuration.engine.noise > 0.0 ? configuration.engine.noiseModules : ""},
        {"weights", configuration.weightsDirectory}};
    configuration.key = key.dump();
    return configuration;
}

MeasurementPlan planMeasurements(const BreakdownOptions& options, const AdmittedCandidates& admitted)
{
    MeasurementPlan planned;
    std::map<std::string, std::size_t> configurationIndex;
    for (std::size_t c = 0; c < options.candidates.size(); ++c) {
        const Candidate& candidate = options.candidates[c];
        CandidatePlan cp = candidateSubsets(candidate, admitted.plans[c], options.shapleyMaxSources);
        for (const SourceMask subset : cp.subsets) {
            if (cp.configuration.count(subset)) {
                continue;
            }
            Configuration configuration = subsetConfiguration(
                candidate, admitted.plans[c], subset, admitted.engineDirectories[c], options.modelDirectory);
            const auto found = configurationIndex.find(configuration.key);
            if (found != configurationIndex.end()) {
                cp.configuration[subset] = found->second;
            } else {
                configurationIndex.emplace(configuration.key, planned.configurations.size());
                cp.configuration[subset] = planned.configurations.size();
                planned.configurations.push_back(std::move(configuration));
            }
        }
        planned.candidates.push_back(std::move(cp));
    }
    return planned;
}

// What the run's configuration records; the candidate list and settings are also part of each stored record.
struct RunDescription {
    nlohmann::json candidateList;
    nlohmann::json settings;
    nlohmann::json runConfig;
};

RunDescription describeRun(const BreakdownOptions& options, const AdmittedCandidates& admitted,
    const PromptRequests& requests)
{
    RunDescription description;
    description.candidateList = nlohmann::json::array();
    for (std::size_t c = 0; c < options.candidates.size(); ++c) {
        const Candidate& candidate = options.candidates[c];
        description.candidateList.push_back({{"name", candidate.name}, {"recipe", candidate.recipePath},
            {"staleness", candidate.staleness}, {"noise", candidate.noise}, {"noise_seed", candidate.noiseSeed},
            {"noise_modules", candidate.noiseModules}, {"engine_weights", admitted.engineDirectories[c]}});
    }
    description.settings = {{"temperature", options.settings.temperature},
        {"top_p", options.settings.topP}, {"top_k", options.settings.topK},
        {"max_tokens", options.settings.maxNewTokens}, {"seed", options.settings.seed},
        {"batch", options.settings.batchSize}, {"kv_cache_bytes", options.settings.kvCacheBytes},
        {"device", deviceName(options.settings.device)},
        {"resamples", options.settings.bootstrap.resamples}, {"confidence", options.settings.bootstrap.confidence},
        {"bootstrap_seed", options.settings.bootstrap.seed}};
    description.runConfig = {{"model", options.modelDirectory}, {"model_step", admitted.screened().step},
        {"history", options.history}, {"prompts", options.promptSetPath},
        {"count", requests.requests.size()}, {"candidate_list", description.candidateList},
        {"settings", description.settings}, {"shapley_max_sources", options.shapleyMaxSources},
        {"protocol",
            protocolToJson(settingsProtocol(
                options.promptSetPath, static_cast<std::int64_t>(requests.requests.size()), options.settings))}};
    return description;
}

// The weights of each directory a configuration runs on, the student's given and the others loaded when first
// needed.
class WeightsByDirectory {
public:
    WeightsByDirectory(const ModelDirectory& student, const std::string& modelDirectory,
        const std::map<std::string, TimelineEntry>& engineEntries, const at::Device& device)
        : config_(student.config)
        , engineEntries_(engineEntries)
        , device_(device)
    {
        weights_[modelDirectory] = student.weights;
    }

    const model::TransformerWeights& of(const std::string& directory)
    {
        auto found = weights_.find(directory);
        if (found == weights_.end()) {
            const auto entry = engineEntries_.find(directory);
            found = weights_
                        .emplace(directory,
                            entry != engineEntries_.end()
                                ? loadTimelineWeights(entry->second, config_, device_)
                                : loadCheckpointWeights(directory, config_, device_))
                        .first;
        }
        return found->second;
    }

private:
    const model::ModelConfig& config_;
    const std::map<std::string, TimelineEntry>& engineEntries_;
    const at::Device& device_;
    std::map<std::string, model::TransformerWeights> weights_;
};

// Every configuration measured in turn, over the first 95% of `progress`.
std::vector<Measurement> measureConfigurations(const model::Transformer& trainer, WeightsByDirectory& weights,
    const std::vector<Configuration>& configurations, const PromptRequests& requests,
    const engine::SamplingOptions& sampling, const MeasureSettings& settings, Progress& progress)
{
    std::vector<Measurement> measured(configurations.size());
    for (std::size_t i = 0; i < configurations.size(); ++i) {
        progress.checkCancelled();
        const double begin = 0.95 * static_cast<double>(i) / static_cast<double>(configurations.size());
        const double end = 0.95 * static_cast<double>(i + 1) / static_cast<double>(configurations.size());
        Progress slice = progress.child(begin, end,
            "configuration " + std::to_string(i + 1) + " of " + std::to_string(configurations.size()));
        const Configuration& configuration = configurations[i];
        const engine::MismatchMeasurement m = measureConfiguration(trainer, weights.of(configuration.weightsDirectory),
            configuration.engine, requests, sampling, settings, &slice);
        Measurement& out = measured[i];
        out.sums = m.promptKlSums;
        out.tokens.assign(m.promptTokens.begin(), m.promptTokens.end());
        out.interval = klInterval(m, settings.bootstrap);
        out.k1 = m.k1;
        out.k3 = m.k3;
        out.tokenCount = m.tokens;
        out.estimators = metrics::compareEstimators(m.tokenValues);
    }
    return measured;
}

// One candidate's measured subsets.
struct CandidateMeasurements {
    const CandidatePlan& plan;
    const std::vector<Measurement>& measured;

    const Measurement& of(SourceMask subset) const { return measured[plan.configuration.at(subset)]; }
};

// A part of the breakdown with its bootstrap interval over prompts.
store::BreakdownPart combinationPart(const CandidateMeasurements& measurements, const std::string& method,
    const std::string& source, const Combination& combination, const metrics::BootstrapOptions& bootstrap)
{
    std::vector<std::vector<double>> numerators, denominators;
    std::vector<double> coefficients;
    for (const auto& [subset, coefficient] : combination) {
        numerators.push_back(measurements.of(subset).sums);
        denominators.push_back(measurements.of(subset).tokens);
        coefficients.push_back(coefficient);
    }
    const metrics::Interval i = metrics::bootstrapRatioCombination(numerators, denominators, coefficients, bootstrap);
    return store::BreakdownPart {method, source, i.estimate, i.low, i.high};
}

// Source `bit`'s Shapley value over the `n` sources in `all`, as a combination of the subsets.
Combination shapleyCombination(SourceMask all, SourceMask bit, int n)
{
    Combination phi;
    const SourceMask others = all & ~bit;
    for (SourceMask subset = others;; subset = (subset - 1) & others) {
        const double w = shapleyWeight(sourceCount(subset), n);
        phi[subset | bit] += w;
        phi[subset] -= w;
        if (subset == 0) {
            break;
        }
    }
    return phi;
}

// The add-one-in and leave-one-out parts with their interaction remainders, then the Shapley parts when measured;
// none for a candidate without sources.
std::vector<store::BreakdownPart> breakdownParts(
    const CandidateMeasurements& measurements, const metrics::BootstrapOptions& bootstrap)
{
    const CandidatePlan& cp = measurements.plan;
    const auto part = [&](const std::string& method, const std::string& source, const Combination& combination) {
        return combinationPart(measurements, method, source, combination, bootstrap);
    };
    std::vector<store::BreakdownPart> parts;
    const int n = static_cast<int>(cp.sources.size());
    if (n > 0) {
        Combination excess = {{cp.all, 1.0}};
        excess[0] -= 1.0;
        Combination addOneInRest = excess;
        Combination leaveOneOutRest = excess;
        std::vector<store::BreakdownPart> addOneIn, leaveOneOut, shapley;
        for (const MismatchSource s : cp.sources) {
            const SourceMask bit = sourceBit(s);
            const Combination aoi = {{bit, 1.0}, {SourceMask {0}, -1.0}};
            Combination loo = {{cp.all, 1.0}};
            loo[cp.all & ~bit] -= 1.0;
            for (const auto& [subset, coefficient] : aoi) {
                addOneInRest[subset] -= coefficient;
            }
            for (const auto& [subset, coefficient] : loo) {
                leaveOneOutRest[subset] -= coefficient;
            }
            addOneIn.push_back(part("add_one_in", toString(s), aoi));
            leaveOneOut.push_back(part("leave_one_out", toString(s), loo));
            if (cp.shapley) {
                shapley.push_back(part("shapley", toString(s), shapleyCombination(cp.all, bit, n)));
            }
        }
        addOneIn.push_back(part("add_one_in", "interaction", addOneInRest));
        leaveOneOut.push_back(part("leave_one_out", "interaction", leaveOneOutRest));
        for (auto* list : {&addOneIn, &leaveOneOut, &shapley}) {
            parts.insert(parts.end(), list->begin(), list->end());
        }
    }
    return parts;
}

store::BreakdownSubset storedSubset(SourceMask subset, const Measurement& m)
{
    store::BreakdownSubset stored;
    stored.subset = subsetLabel(subset);
    stored.mismatch = m.interval.estimate;
    stored.ciLow = m.interval.low;
    stored.ciHigh = m.interval.high;
    stored.k1 = m.k1;
    stored.k3 = m.k3;
    stored.tokens = m.tokenCount;
    stored.estimatorsJson = metrics::toJson(m.estimators).dump();
    return stored;
}

// Candidate `c`'s record as stored (without its id and time).
store::BreakdownRecord breakdownRecord(std::int64_t runId, const BreakdownOptions& options, std::size_t c,
    const AdmittedCandidates& admitted, const RunDescription& description, std::size_t promptCount,
    const CandidateMeasurements& measurements)
{
    const Candidate& candidate = options.candidates[c];
    const CandidatePlan& cp = measurements.plan;
    store::BreakdownRecord record;
    record.runId = runId;
    record.candidate = candidate.name;
    record.model = options.modelDirectory;
    nlohmann::json configurationJson = description.candidateList[c];
    configurationJson["recipe_content"] = admitted.plans[c]
        ? nlohmann::json::parse(quant::recipeToJson(quant::loadRecipe(candidate.recipePath)))
        : nlohmann::json();
    configurationJson["model_step"] = admitted.screened().step;
    configurationJson["settings"] = description.settings;
    configurationJson["prompts"] = options.promptSetPath;
    configurationJson["count"] = promptCount;
    record.configurationJson = configurationJson.dump();
    for (const MismatchSource s : cp.sources) {
        record.sources.push_back(toString(s));
    }
    const Measurement& total = measurements.of(cp.all);
    const Measurement& unit = measurements.of(0);
    record.total = total.interval.estimate;
    record.totalCiLow = total.interval.low;
    record.totalCiHigh = total.interval.high;
    record.bf16Unit = unit.interval.estimate;
    record.unitCiLow = unit.interval.low;
    record.unitCiHigh = unit.interval.high;
    record.tokens = total.tokenCount;
    record.shapley = cp.shapley;
    record.parts = breakdownParts(measurements, options.settings.bootstrap);
    for (const SourceMask subset : cp.subsets) {
        record.subsets.push_back(storedSubset(subset, measurements.of(subset)));
    }
    return record;
}

} // namespace

BreakdownResult runBreakdown(store::RunStore& store, const BreakdownOptions& given, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
    const BreakdownOptions options = checkedOptions(given);

    // Everything that can be refused is checked before anything is measured or stored.
    const AdmittedCandidates admitted = admitCandidates(options);
    checkBreakdownMemory(options, admitted.plans);

    const MeasurementPlan planned = planMeasurements(options, admitted);

    progress.update(0.0, "loading model and prompts");
    const ModelDirectory student = loadModelDirectory(options.modelDirectory, options.settings.device);
    const PromptRequests requests = promptRequests(options.promptSetPath, *student.tokenizer, options.count);
    requirePromptsFit(requests, student.config, options.settings.maxNewTokens);
    const engine::SamplingOptions sampling = samplingOptions(options.settings, student.config, *student.tokenizer);
    const RunDescription description = describeRun(options, admitted, requests);

    BreakdownResult result;
    result.runId = store.beginRun({"breakdown", "breakdown", description.runConfig.dump(), std::nullopt});
    store::recordRunOutcome(store, result.runId, [&] {
        const model::Transformer trainer(student.config, student.weights);
        WeightsByDirectory weights(student, options.modelDirectory, admitted.engineEntries, options.settings.device);
        const std::vector<Measurement> measured = measureConfigurations(
            trainer, weights, planned.configurations, requests, sampling, options.settings, progress);
        progress.update(0.95, "intervals");
        for (std::size_t c = 0; c < options.candidates.size(); ++c) {
            progress.checkCancelled();
            result.candidates.push_back(breakdownRecord(result.runId, options, c, admitted, description,
                requests.requests.size(), CandidateMeasurements {planned.candidates[c], measured}));
        }
        result.measurements = static_cast<std::int64_t>(planned.configurations.size());
        result.seconds = secondsSince(started);
        // Wall time of the whole job per candidate is not separable (measurements are shared); each record keeps
        // the job's time.
        for (store::BreakdownRecord& record : result.candidates) {
            record.seconds = result.seconds;
        }
        progress.checkCancelled();
        const std::vector<std::int64_t> ids = store::addBreakdowns(store, result.candidates);
        for (std::size_t i = 0; i < ids.size(); ++i) {
            result.candidates[i].id = ids[i];
        }
    });
    store.finishRun(result.runId, store::RunStatus::Finished);
    progress.update(1.0, "done");
    return result;
}

} // namespace mismatch::analysis

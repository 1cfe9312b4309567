#include "core/analysis/prefix_shift.h"

#include "core/analysis/protocol.h"
#include "core/engine/token_details.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/metrics/mismatch.h"
#include "core/store/analysis_store.h"
#include "core/train/objectives.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

namespace mismatch::analysis {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<double> toVector(const at::Tensor& values)
{
    const at::Tensor contiguous = values.to(at::kCPU).to(at::kDouble).contiguous();
    const double* data = contiguous.data_ptr<double>();
    return std::vector<double>(data, data + contiguous.numel());
}

// log mu of the candidate at teacher-forced positions: rows are log_softmax(z / T); the sampling distribution
// applies top-k / top-p to them (samplingLogProbs at temperature 1 of log_softmax(z / T) is log_softmax(z / T)).
at::Tensor samplingRows(const at::Tensor& rows, const engine::SamplingOptions& sampling)
{
    if (sampling.topK == 0 && sampling.topP >= 1.0) {
        return rows;
    }
    engine::SamplingOptions atTemperatureOne = sampling;
    atTemperatureOne.temperature = 1.0;
    atTemperatureOne.greedy = false;
    // The host's per-row sampler: the rows come to the host (the analysis scores on the host, ScoreOptions::onHost).
    const at::Tensor input = rows.to(at::kCPU).to(at::kFloat).contiguous();
    at::Tensor output = at::empty(input.sizes(), input.options().dtype(at::kDouble));
    const std::int64_t vocab = input.size(1);
    for (std::int64_t t = 0; t < input.size(0); ++t) {
        const std::vector<double> logMu
            = engine::samplingLogProbs(input.data_ptr<float>() + t * vocab, vocab, atTemperatureOne);
        std::copy(logMu.begin(), logMu.end(), output.data_ptr<double>() + t * vocab);
    }
    return output;
}

struct Accumulator {
    double sum = 0.0;
    double weight = 0.0;
    std::int64_t affected = 0;
    std::int64_t tokens = 0;
    double mean() const { return weight > 0.0 ? sum / weight : 0.0; }
    double affectedFraction() const
    {
        return tokens > 0 ? static_cast<double>(affected) / static_cast<double>(tokens) : 0.0;
    }
};

// Adds one response's corrected KL: TIS divides by every token, MIS by the kept ones (objectives.h).
void addCorrected(Accumulator& accumulator, const at::Tensor& kl, const at::Tensor& logPiY, const at::Tensor& logMuY,
    train::CorrectionOptions options)
{
    if (kl.numel() == 0) {
        return;
    }
    const train::CorrectionWeights weights = train::correctionWeights(logPiY, logMuY, options);
    accumulator.sum += (weights.weight * kl.to(at::kDouble)).sum().item<double>();
    accumulator.weight += options.kind == train::CorrectionOptions::Mis ? weights.weight.sum().item<double>()
                                                                        : static_cast<double>(kl.numel());
    accumulator.affected += weights.affected.sum().item<std::int64_t>();
    accumulator.tokens += kl.numel();
}

at::Tensor gatherSampled(const at::Tensor& logProbs, const std::vector<std::int64_t>& tokens)
{
    if (tokens.empty()) {
        return at::empty({0}, logProbs.options().dtype(at::kDouble));
    }
    const at::Tensor index = at::tensor(tokens, at::kLong).to(logProbs.device()).unsqueeze(1);
    return logProbs.to(at::kDouble).gather(1, index).squeeze(1);
}

} // namespace

std::optional<std::int64_t> firstDivergence(const std::vector<std::int64_t>& a, const std::vector<std::int64_t>& b)
{
    const std::size_t common = std::min(a.size(), b.size());
    for (std::size_t i = 0; i < common; ++i) {
        if (a[i] != b[i]) {
            return static_cast<std::int64_t>(i);
        }
    }
    if (a.size() != b.size()) {
        return static_cast<std::int64_t>(common);
    }
    return std::nullopt;
}

namespace {

void checkOptions(const PrefixShiftOptions& options)
{
    if (!(options.cap > 1.0) || !std::isfinite(options.cap)) {
        throw InputError("prefix-shift", "--cap",
            "the TIS/MIS cap C must be a finite number > 1 (C = 1 keeps only tokens whose weight is exactly 1)");
    }
    if (options.storedPairs < 0) {
        throw InputError("prefix-shift", "--store-pairs", "must be >= 0");
    }
}

// The BF16 reference engine and the candidate are alive together.
void checkMemory(const PrefixShiftOptions& options)
{
    std::optional<quant::RecipePlan> plan;
    if (options.configuration.recipe) {
        plan = quant::resolveRecipe(*options.configuration.recipe,
            model::loadConfig((std::filesystem::path(options.modelDirectory) / "config.json").string()));
    }
    checkAnalysisMemory("the prefix-shift analysis", {options.modelDirectory}, {plan ? &*plan : nullptr},
        options.settings, /*enginesAtOnce=*/2,
        options.configuration.noise > 0.0
            ? std::vector<NoisyEngine> {{plan ? &*plan : nullptr, options.configuration.noiseModules, false}}
            : std::vector<NoisyEngine> {});
}

// The run's config_json and the record's configuration.
nlohmann::json configurationJson(const PrefixShiftOptions& options, const PromptRequests& requests)
{
    return {{"model", std::filesystem::absolute(options.modelDirectory).string()},
        {"prompts", std::filesystem::absolute(options.promptSetPath).string()}, {"count", requests.requests.size()},
        {"recipe", options.recipePath.empty() ? nlohmann::json() : nlohmann::json(options.recipePath)},
        {"recipe_content",
            options.configuration.recipe ? nlohmann::json::parse(quant::recipeToJson(*options.configuration.recipe))
                                         : nlohmann::json()},
        {"noise", options.configuration.noise}, {"noise_seed", options.configuration.noiseSeed},
        {"noise_modules", options.configuration.noiseModules}, {"cap", options.cap},
        {"device", deviceName(options.settings.device)},
        {"sampling",
            {{"temperature", options.settings.temperature}, {"top_p", options.settings.topP},
                {"top_k", options.settings.topK}, {"max_tokens", options.settings.maxNewTokens},
                {"seed", options.settings.seed}}},
        {"protocol",
            protocolToJson(settingsProtocol(options.promptSetPath, static_cast<std::int64_t>(requests.requests.size()),
                options.settings))}};
}

// One chunk of prompts generated by both engines, and every distribution teacher-forced on the whole sequences
// (see prefix_shift.h: one path for all parts): pi and mu of the candidate on both responses, the reference's
// own mu on its responses.
struct PairedChunk {
    std::vector<std::vector<std::int64_t>> prompts, referenceResponses, candidateResponses;
    std::vector<at::Tensor> piOnReference, piOnCandidate, forced, candidateOwn, referenceOwn;
};

PairedChunk generateAndScore(engine::Engine& reference, engine::Engine& candidate, const model::Transformer& trainer,
    const std::vector<engine::GenerationRequest>& part, const engine::SamplingOptions& sampling,
    const engine::ScoreOptions& scoring)
{
    std::vector<engine::GenerationResult> referenceRuns = reference.generate(part, sampling);
    engine::throwIfRejected(referenceRuns);
    std::vector<engine::GenerationResult> candidateRuns = candidate.generate(part, sampling);
    engine::throwIfRejected(candidateRuns);
    PairedChunk chunk;
    for (std::size_t i = 0; i < part.size(); ++i) {
        chunk.prompts.push_back(part[i].prompt);
        chunk.referenceResponses.push_back(referenceRuns[i].tokens);
        chunk.candidateResponses.push_back(candidateRuns[i].tokens);
    }
    chunk.piOnReference = engine::scoreSequences(trainer, chunk.prompts, chunk.referenceResponses, scoring);
    chunk.piOnCandidate = engine::scoreSequences(trainer, chunk.prompts, chunk.candidateResponses, scoring);
    chunk.forced = engine::scoreSequences(candidate.model(), chunk.prompts, chunk.referenceResponses, scoring);
    chunk.candidateOwn = engine::scoreSequences(candidate.model(), chunk.prompts, chunk.candidateResponses, scoring);
    chunk.referenceOwn = engine::scoreSequences(reference.model(), chunk.prompts, chunk.referenceResponses, scoring);
    return chunk;
}

// What the pairs add up to: per-pair sums and token counts (own = the candidate on its own prefixes, reference
// = teacher-forced on the reference's, unit = the reference engine itself), per-position sums, the corrected
// accumulators, the divergences, the stored pairs and the own tokens' values for the estimators.
struct PrefixShiftTally {
    PrefixShiftTally(std::size_t maxTokens, double cap)
        : maxTokens(maxTokens)
        , positionOwn(maxTokens, 0.0)
        , positionReference(maxTokens, 0.0)
        , positionUnit(maxTokens, 0.0)
        , positionOwnCount(maxTokens, 0)
        , positionReferenceCount(maxTokens, 0)
        , corrections({{train::CorrectionOptions::None, cap}, {train::CorrectionOptions::Tis, cap},
              {train::CorrectionOptions::Mis, cap}})
        , correctedOwn(corrections.size())
        , correctedReference(corrections.size())
    {
    }

    std::size_t maxTokens;
    std::vector<double> ownSums, referenceSums, unitSums;
    std::vector<std::int64_t> ownTokens, referenceTokens, unitTokens;
    std::vector<double> positionOwn, positionReference, positionUnit;
    std::vector<std::int64_t> positionOwnCount, positionReferenceCount;
    std::vector<std::int64_t> divergences;
    std::vector<train::CorrectionOptions> corrections;
    std::vector<Accumulator> correctedOwn, correctedReference;
    std::vector<store::PrefixShiftPair> stored;
    metrics::SampledTokenValues ownTokenValues;
};

// Adds pair i of `chunk` (prompt `promptId`) to the tally and to the result's divergence counts.
void tallyPair(const PairedChunk& chunk, std::size_t i, const std::string& promptId,
    const engine::SamplingOptions& sampling, const PrefixShiftOptions& options, PrefixShiftTally& tally,
    PrefixShiftResult& result)
{
    const std::vector<std::int64_t>& own = chunk.candidateResponses[i];
    const std::vector<std::int64_t>& ref = chunk.referenceResponses[i];
    const at::Tensor& piOnCandidate = chunk.piOnCandidate[i];
    const at::Tensor& piOnReference = chunk.piOnReference[i];
    const at::Tensor muForced = samplingRows(chunk.forced[i], sampling);
    const at::Tensor muOwn = samplingRows(chunk.candidateOwn[i], sampling);
    const metrics::TokenMismatch ownKl = metrics::tokenMismatch(muOwn, piOnCandidate, at::tensor(own, at::kLong));
    const metrics::TokenMismatch forcedKl
        = metrics::tokenMismatch(muForced, piOnReference, at::tensor(ref, at::kLong));
    const metrics::TokenMismatch unitKl = metrics::tokenMismatch(
        samplingRows(chunk.referenceOwn[i], sampling), piOnReference, at::tensor(ref, at::kLong));
    const std::vector<double> ownValues = toVector(ownKl.kl);
    const std::vector<double> forcedValues = toVector(forcedKl.kl);
    const std::vector<double> unitValues = toVector(unitKl.kl);
    double ownSum = 0.0, forcedSum = 0.0, unitSum = 0.0;
    for (std::size_t t = 0; t < ownValues.size(); ++t) {
        ownSum += ownValues[t];
        tally.positionOwn[t] += ownValues[t];
        ++tally.positionOwnCount[t];
    }
    for (std::size_t t = 0; t < forcedValues.size(); ++t) {
        forcedSum += forcedValues[t];
        unitSum += unitValues[t];
        tally.positionReference[t] += forcedValues[t];
        tally.positionUnit[t] += unitValues[t];
        ++tally.positionReferenceCount[t];
    }
    tally.ownSums.push_back(ownSum);
    tally.ownTokens.push_back(static_cast<std::int64_t>(ownValues.size()));
    tally.referenceSums.push_back(forcedSum);
    tally.referenceTokens.push_back(static_cast<std::int64_t>(forcedValues.size()));
    tally.unitSums.push_back(unitSum);
    tally.unitTokens.push_back(static_cast<std::int64_t>(unitValues.size()));

    // Corrections: w = pi(y) / mu_c(y) on each part's sampled tokens.
    const at::Tensor ownPiY = gatherSampled(piOnCandidate, own);
    const at::Tensor ownMuY = gatherSampled(muOwn, own);
    const std::vector<double> ownLogPi = toVector(ownPiY);
    const std::vector<double> ownLogMu = toVector(ownMuY);
    metrics::SampledTokenValues& values = tally.ownTokenValues;
    values.kl.insert(values.kl.end(), ownValues.begin(), ownValues.end());
    values.logMu.insert(values.logMu.end(), ownLogMu.begin(), ownLogMu.end());
    values.logPi.insert(values.logPi.end(), ownLogPi.begin(), ownLogPi.end());
    if (!own.empty()) {
        const at::Tensor rows = piOnCandidate.to(at::kDouble);
        const std::vector<double> entropy = toVector(-(rows.exp() * rows).sum(-1));
        values.entropyPi.insert(values.entropyPi.end(), entropy.begin(), entropy.end());
    }
    const at::Tensor refPiY = gatherSampled(piOnReference, ref);
    const at::Tensor refMuY = gatherSampled(muForced, ref);
    for (std::size_t c = 0; c < tally.corrections.size(); ++c) {
        addCorrected(tally.correctedOwn[c], ownKl.kl, ownPiY, ownMuY, tally.corrections[c]);
        addCorrected(tally.correctedReference[c], forcedKl.kl, refPiY, refMuY, tally.corrections[c]);
    }

    const std::optional<std::int64_t> divergence = firstDivergence(own, ref);
    if (divergence) {
        ++result.diverged;
        ++result.divergenceHistogram[static_cast<std::size_t>(
            std::min<std::int64_t>(*divergence, static_cast<std::int64_t>(tally.maxTokens)))];
        tally.divergences.push_back(*divergence);
    }
    if (static_cast<std::int64_t>(tally.stored.size()) < options.storedPairs) {
        store::PrefixShiftPair pair;
        pair.promptId = promptId;
        pair.promptTokens = chunk.prompts[i];
        pair.firstDivergence = divergence;
        pair.candidateTokens = own;
        pair.candidateKl = ownValues;
        pair.referenceTokens = ref;
        pair.referenceKl = forcedValues;
        pair.candidateDetail = engine::tokenDetails(muOwn, piOnCandidate, own);
        pair.referenceDetail = engine::tokenDetails(muForced, piOnReference, ref);
        tally.stored.push_back(std::move(pair));
    }
}

// The result from the tally: intervals, the BF16 unit, the estimators, the median divergence, the per-position
// means and the corrections' effects.
void summarize(PrefixShiftTally& tally, const PrefixShiftOptions& options, std::size_t n, PrefixShiftResult& result)
{
    result.pairs = static_cast<std::int64_t>(n);
    std::vector<double> ownTokenCounts(tally.ownTokens.begin(), tally.ownTokens.end());
    std::vector<double> referenceTokenCounts(tally.referenceTokens.begin(), tally.referenceTokens.end());
    result.totalInterval = metrics::bootstrapRatio(tally.ownSums, ownTokenCounts, options.settings.bootstrap);
    result.perTokenInterval
        = metrics::bootstrapRatio(tally.referenceSums, referenceTokenCounts, options.settings.bootstrap);
    result.prefixShiftInterval = pairedRatioDifference(
        tally.ownSums, tally.ownTokens, tally.referenceSums, tally.referenceTokens, options.settings.bootstrap);
    result.total = result.totalInterval.estimate;
    result.perToken = result.perTokenInterval.estimate;
    result.prefixShift = result.total - result.perToken;
    double unitSum = 0.0;
    std::int64_t unitCount = 0;
    for (std::size_t i = 0; i < n; ++i) {
        unitSum += tally.unitSums[i];
        unitCount += tally.unitTokens[i];
        result.ownTokens += tally.ownTokens[i];
        result.referenceTokens += tally.referenceTokens[i];
    }
    result.bf16Unit = unitCount > 0 ? unitSum / static_cast<double>(unitCount) : 0.0;
    result.estimators = metrics::compareEstimators(tally.ownTokenValues);
    std::vector<std::int64_t>& divergences = tally.divergences;
    if (!divergences.empty()) {
        std::sort(divergences.begin(), divergences.end());
        const std::size_t m = divergences.size();
        result.medianDivergence = m % 2 == 1 ? static_cast<double>(divergences[m / 2])
                                             : 0.5 * static_cast<double>(divergences[m / 2 - 1] + divergences[m / 2]);
    }
    for (std::size_t t = 0; t < tally.maxTokens; ++t) {
        if (tally.positionOwnCount[t] == 0 && tally.positionReferenceCount[t] == 0) {
            continue;
        }
        PositionMismatch position;
        position.position = static_cast<std::int64_t>(t);
        position.totalTokens = tally.positionOwnCount[t];
        position.perTokenTokens = tally.positionReferenceCount[t];
        position.total
            = tally.positionOwnCount[t] ? tally.positionOwn[t] / static_cast<double>(tally.positionOwnCount[t]) : 0.0;
        if (tally.positionReferenceCount[t]) {
            position.perToken = tally.positionReference[t] / static_cast<double>(tally.positionReferenceCount[t]);
            position.bf16Unit = tally.positionUnit[t] / static_cast<double>(tally.positionReferenceCount[t]);
        }
        result.byPosition.push_back(position);
    }
    static const char* kNames[] = {"none", "tis", "mis"};
    for (std::size_t c = 0; c < tally.corrections.size(); ++c) {
        CorrectionEffect effect;
        effect.kind = kNames[c];
        effect.cap = c == 0 ? 0.0 : options.cap;
        effect.total = tally.correctedOwn[c].mean();
        effect.perToken = tally.correctedReference[c].mean();
        effect.prefixShift = effect.total - effect.perToken;
        effect.affectedOwn = tally.correctedOwn[c].affectedFraction();
        effect.affectedReference = tally.correctedReference[c].affectedFraction();
        result.corrections.push_back(effect);
    }
}

// The stored analysis: the headline numbers and, as details, the histogram, positions, corrections and
// estimators.
store::PrefixShiftRecord prefixShiftRecord(
    const PrefixShiftResult& result, const PrefixShiftOptions& options, const nlohmann::json& configuration)
{
    nlohmann::json positions = nlohmann::json::array();
    for (const auto& p : result.byPosition) {
        positions.push_back({{"position", p.position}, {"total", p.total}, {"total_tokens", p.totalTokens},
            {"per_token", p.perToken}, {"per_token_tokens", p.perTokenTokens}, {"bf16_unit", p.bf16Unit}});
    }
    nlohmann::json correctionsJson = nlohmann::json::array();
    for (const auto& e : result.corrections) {
        correctionsJson.push_back({{"kind", e.kind}, {"cap", e.cap}, {"total", e.total}, {"per_token", e.perToken},
            {"prefix_shift", e.prefixShift}, {"affected_own", e.affectedOwn},
            {"affected_reference", e.affectedReference}});
    }
    const nlohmann::json details = {{"divergence_histogram", result.divergenceHistogram},
        {"median_divergence", result.medianDivergence ? nlohmann::json(*result.medianDivergence) : nlohmann::json()},
        {"by_position", positions}, {"corrections", correctionsJson},
        {"prefix_shift_interval", {result.prefixShiftInterval.low, result.prefixShiftInterval.high}},
        {"own_tokens", result.ownTokens}, {"reference_tokens", result.referenceTokens},
        {"estimators", metrics::toJson(result.estimators)}};
    store::PrefixShiftRecord record;
    record.runId = result.runId;
    record.model = std::filesystem::absolute(options.modelDirectory).string();
    record.configurationJson = configuration.dump();
    record.total = result.total;
    record.perToken = result.perToken;
    record.prefixShift = result.prefixShift;
    record.bf16Unit = result.bf16Unit;
    record.totalCiLow = result.totalInterval.low;
    record.totalCiHigh = result.totalInterval.high;
    record.perTokenCiLow = result.perTokenInterval.low;
    record.perTokenCiHigh = result.perTokenInterval.high;
    record.pairs = result.pairs;
    record.diverged = result.diverged;
    record.detailsJson = details.dump();
    return record;
}

} // namespace

PrefixShiftResult runPrefixShift(store::RunStore& store, const PrefixShiftOptions& options, Progress& progress)
{
    const auto started = std::chrono::steady_clock::now();
    checkOptions(options);
    checkMemory(options);
    progress.update(0.0, "loading model and prompts");
    const ModelDirectory model = loadModelDirectory(options.modelDirectory, options.settings.device);
    const PromptRequests requests = promptRequests(options.promptSetPath, *model.tokenizer, options.count);
    requirePromptsFit(requests, model.config, options.settings.maxNewTokens);
    engine::SamplingOptions sampling = samplingOptions(options.settings, model.config, *model.tokenizer);
    sampling.fullDistributions = false; // the engines only generate tokens; every distribution is teacher-forced
    engine::ScoreOptions scoring;
    scoring.batchSize = options.settings.batchSize;
    scoring.temperature = sampling.greedy || sampling.temperature == 0.0 ? 1.0 : sampling.temperature;

    const model::Transformer trainer(model.config, model.weights);
    const std::vector<std::vector<std::int64_t>> probes = requests.prompts();
    auto reference = buildEngine(model.config, model.weights, EngineConfiguration {}, probes, options.settings);
    auto candidate = buildEngine(model.config, model.weights, options.configuration, probes, options.settings);

    PrefixShiftResult result;
    const nlohmann::json configuration = configurationJson(options, requests);
    result.runId = store.beginRun({"prefix shift", "prefix_shift", configuration.dump(), std::nullopt});
    store::recordRunOutcome(store, result.runId, [&] {
        const std::size_t n = requests.requests.size();
        const auto maxTokens = static_cast<std::size_t>(sampling.maxNewTokens);
        result.divergenceHistogram.assign(maxTokens + 1, 0);
        PrefixShiftTally tally(maxTokens, options.cap);
        const auto chunkSize = static_cast<std::size_t>(std::max<std::int64_t>(1, options.settings.batchSize));
        for (std::size_t begin = 0; begin < n; begin += chunkSize) {
            progress.checkCancelled();
            progress.update(static_cast<double>(begin) / static_cast<double>(n), "paired generations");
            const std::size_t end = std::min(n, begin + chunkSize);
            const std::vector<engine::GenerationRequest> part(
                requests.requests.begin() + static_cast<std::ptrdiff_t>(begin),
                requests.requests.begin() + static_cast<std::ptrdiff_t>(end));
            const PairedChunk chunk = generateAndScore(*reference, *candidate, trainer, part, sampling, scoring);
            for (std::size_t i = 0; i < part.size(); ++i) {
                tallyPair(chunk, i, requests.ids[begin + i], sampling, options, tally, result);
            }
        }
        progress.update(0.95, "intervals");
        summarize(tally, options, n, result);
        const store::PrefixShiftRecord record = prefixShiftRecord(result, options, configuration);
        progress.checkCancelled();
        result.analysisId = store::addPrefixShift(store, record, tally.stored);
    });
    store.finishRun(result.runId, store::RunStatus::Finished);
    progress.update(1.0, "done");
    result.seconds = secondsSince(started);
    return result;
}

} // namespace mismatch::analysis

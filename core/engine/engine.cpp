#include "core/engine/engine.h"

#include "core/common/device.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <deque>
#include <functional>
#include <set>

namespace mismatch::engine {

namespace {

// Earliest occurrence of any stop string that ends in the text appended since `searchFrom`; npos if none.
std::size_t findStopString(const std::string& text, std::size_t previousLength, const std::vector<std::string>& stops)
{
    std::size_t earliest = std::string::npos;
    for (const std::string& stop : stops) {
        const std::size_t from = previousLength >= stop.size() - 1 ? previousLength - (stop.size() - 1) : 0;
        const std::size_t found = text.find(stop, from);
        if (found != std::string::npos) {
            earliest = std::min(earliest, found);
        }
    }
    return earliest;
}

// Logits of the last `lastPositions` positions of a left-padded batch.
using ForwardLogits
    = std::function<at::Tensor(const at::Tensor& ids, const at::Tensor& mask, std::int64_t lastPositions)>;

// Rows of a response whose float64 log-probabilities scoreWith computes at once.
constexpr std::int64_t kScoreRows = 8;

// `device`: the model's, where rows stay when options.onHost is false (an empty response's [0, vocab] too).
std::vector<at::Tensor> scoreWith(const ForwardLogits& forward, std::int64_t vocab, const at::Device& device,
    const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<std::vector<std::int64_t>>& responses,
    const ScoreOptions& options, Progress* progress)
{
    const std::string source = "scoring";
    if (prompts.size() != responses.size()) {
        throw InputError(source, "responses",
            std::to_string(prompts.size()) + " prompts but " + std::to_string(responses.size()) + " responses");
    }
    if (!(options.temperature > 0.0) || !std::isfinite(options.temperature)) {
        throw InputError(source, "temperature", "must be > 0, got " + std::to_string(options.temperature));
    }
    if (options.batchSize < 1) {
        throw InputError(source, "batch size", "must be >= 1, got " + std::to_string(options.batchSize));
    }
    validateTokenSequences(prompts, vocab, source, "prompts");
    validateTokenSequences(responses, vocab, source, "responses", /*allowEmpty=*/true);

    const at::NoGradGuard noGrad;
    std::vector<at::Tensor> scores(prompts.size());
    const auto batchSize = static_cast<std::size_t>(options.batchSize);
    for (std::size_t begin = 0; begin < prompts.size(); begin += batchSize) {
        if (progress) {
            progress->checkCancelled();
            progress->update(static_cast<double>(begin) / static_cast<double>(prompts.size()), "scoring");
        }
        const std::size_t end = std::min(prompts.size(), begin + batchSize);
        std::vector<std::vector<std::int64_t>> sequences;
        for (std::size_t i = begin; i < end; ++i) {
            // The last response token predicts nothing we score: prompt + response[0 .. R-2].
            std::vector<std::int64_t> sequence = prompts[i];
            if (!responses[i].empty()) {
                sequence.insert(sequence.end(), responses[i].begin(), responses[i].end() - 1);
            }
            sequences.push_back(std::move(sequence));
        }
        const auto [ids, mask] = leftPaddedBatch(sequences);
        // Only the positions that predict response tokens: the longest response's (left padding right-aligns
        // every row), so the lm_head of a large vocabulary does not run over the prompts.
        std::int64_t longest = 0;
        for (std::size_t i = begin; i < end; ++i) {
            longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(responses[i].size()));
        }
        // The group's float32 logits become its log-probabilities in place (each response's rows, below): the
        // group holds one [rows, longest, vocab] float32 tensor, not that and a result beside it.
        const at::Tensor logits
            = longest == 0 ? at::Tensor() : forward(ids, mask, longest).to(at::kFloat).contiguous();
        const std::int64_t length = longest;
        for (std::size_t i = begin; i < end; ++i) {
            const auto responseLength = static_cast<std::int64_t>(responses[i].size());
            if (responseLength == 0) {
                const at::Device where = options.onHost ? at::Device(at::kCPU) : device;
                scores[i] = at::empty({0, vocab}, at::TensorOptions().dtype(at::kFloat).device(where));
                continue;
            }
            // Left padding right-aligns every row: response token t is predicted at column length - R + t.
            const at::Tensor rows
                = logits[static_cast<std::int64_t>(i - begin)].narrow(0, length - responseLength, responseLength);
            // log_softmax in float64 a block of rows at a time, written back over those rows in float32: each row
            // is computed alone whatever the block (read whole before it is written), and the whole response's
            // float64 temporaries (three [R, vocab] tensors, 0.23 GB for 64 tokens of a 152k vocabulary) never
            // exist at once. The result is a view of the group's logits (rows of responses never overlap).
            for (std::int64_t first = 0; first < responseLength; first += kScoreRows) {
                const std::int64_t count = std::min(kScoreRows, responseLength - first);
                at::Tensor block = rows.narrow(0, first, count);
                block.copy_(at::log_softmax(block.to(at::kDouble) / options.temperature, -1));
            }
            scores[i] = rows;
            if (options.onHost) {
                scores[i] = scores[i].to(at::kCPU);
            }
        }
    }
    if (progress) {
        progress->update(1.0, "scoring");
    }
    return scores;
}

} // namespace

std::string toString(FinishReason reason)
{
    switch (reason) {
    case FinishReason::Eos:
        return "eos";
    case FinishReason::StopString:
        return "stop";
    case FinishReason::Length:
        return "length";
    case FinishReason::Rejected:
        return "rejected";
    }
    return "unknown";
}

Engine::Engine(model::ModelConfig config, model::TransformerWeights weights, std::optional<quant::RecipePlan> plan,
    EngineOptions options)
{
    if (options.kvBlockSize < 1) {
        throw InputError(
            "engine options", "kv block size", "must be >= 1 token, got " + std::to_string(options.kvBlockSize));
    }
    if (options.maxBatchSize < 0) {
        throw InputError("engine options", "max batch size",
            "must be >= 0 (0: no limit), got " + std::to_string(options.maxBatchSize));
    }
    model_ = std::make_unique<EngineModel>(std::move(config), std::move(weights), std::move(plan), options);
}

KvBlockAllocator Engine::allocator() const
{
    return KvBlockAllocator(kvCacheLayout(*model_), model_->options().kvCacheBytes, model_->options().kvBlockSize);
}

void throwIfRejected(const std::vector<GenerationResult>& results)
{
    for (const GenerationResult& result : results) {
        if (result.error) {
            throw *result.error;
        }
    }
}

std::vector<GenerationResult> Engine::generate(
    const std::vector<GenerationRequest>& requests, const SamplingOptions& sampling, Progress* progress)
{
    validateSamplingOptions(sampling);
    if (!sampling.stopStrings.empty() && !tokenizer_) {
        throw InputError("sampling options", "stop", "stop strings need the model's tokenizer (none was given)");
    }
    std::vector<std::vector<std::int64_t>> prompts;
    prompts.reserve(requests.size());
    for (const GenerationRequest& request : requests) {
        prompts.push_back(request.prompt);
    }
    validateTokenSequences(prompts, model_->config().vocabSize, "generation requests", "prompt");

    const EngineOptions& options = model_->options();
    KvBlockPool pool(kvCacheLayout(*model_), options.kvCacheBytes, options.kvBlockSize, kvStorage(*model_));
    const KvBlockAllocator& allocator = pool.allocator();
    std::vector<GenerationResult> results(requests.size());
    std::deque<std::size_t> pending;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const std::int64_t needed = static_cast<std::int64_t>(requests[i].prompt.size()) + sampling.maxNewTokens;
        if (allocator.couldEverFit(needed)) {
            pending.push_back(i);
            continue;
        }
        results[i].finishReason = FinishReason::Rejected;
        results[i].error = ResourceError("KV cache: "
            + (requests[i].source.empty() ? "request " + std::to_string(i) : requests[i].source) + " needs " + std::to_string(needed)
            + " tokens (prompt " + std::to_string(requests[i].prompt.size()) + " + max new tokens "
            + std::to_string(sampling.maxNewTokens) + " = " + std::to_string(allocator.blocksFor(needed))
            + " blocks of " + std::to_string(allocator.blockSize()) + ") but the cache holds "
            + std::to_string(allocator.capacityTokens()) + " tokens (" + std::to_string(allocator.totalBlocks())
            + " blocks in " + std::to_string(options.kvCacheBytes) + " bytes)");
    }

    const std::int64_t total = static_cast<std::int64_t>(pending.size()) * sampling.maxNewTokens;
    std::int64_t done = 0;
    std::int64_t waveIndex = 0;
    const at::NoGradGuard noGrad;
    while (!pending.empty()) {
        std::vector<std::size_t> wave;
        std::vector<SequenceId> sequences;
        // First come, first served: stop at the first request that does not fit now, so none starves.
        while (!pending.empty()
            && (options.maxBatchSize == 0 || static_cast<std::int64_t>(wave.size()) < options.maxBatchSize)) {
            const std::size_t next = pending.front();
            const std::optional<SequenceId> sequence = pool.allocator().allocate(
                static_cast<std::int64_t>(requests[next].prompt.size()) + sampling.maxNewTokens);
            if (!sequence) {
                break;
            }
            wave.push_back(next);
            sequences.push_back(*sequence);
            pending.pop_front();
        }
        // Programmer error: every pending request fits an empty cache, and a wave ends with all blocks free.
        assert(!wave.empty());
        runWave(wave, waveIndex, requests, sampling, pool, sequences, results, done, total, progress);
        ++waveIndex;
    }
    if (progress) {
        progress->update(1.0, "generating");
    }
    return results;
}

namespace {

// A request of a wave while it generates.
struct WaveRow {
    std::size_t request;
    metrics::SplitMix64 generator;
    std::vector<std::vector<float>> distributions; // the host path's log mu rows, with fullDistributions
    std::vector<at::Tensor> distributionRows; // the tensor path's (float32 [vocab] on the logits' device)
    // When keepLogits: [maxNewTokens, vocab], one row written per generated position (allocated at the first;
    // its pages become resident as they are written), `kept` rows so far. Written in place rather than kept as
    // separate rows and stacked at the end: the stack held every row twice for a moment (0.31 GB more for 16
    // prompts of 64 tokens at a 152k vocabulary), and the freed rows stayed in the allocator's heaps.
    at::Tensor logits;
    std::int64_t kept = 0;
    std::string text;
};

// What every row of a wave is generated with.
struct WaveSettings {
    const SamplingOptions& sampling;
    const EngineModel& engineModel;
    const model::Tokenizer* tokenizer; // null: no text and no stop strings
    std::int64_t vocab;
    at::ScalarType keptLogitsType;
    std::set<std::int64_t> stopIds;
};

// A finished row's distributions, kept logits and text into its result; its unused allowance counts as done.
void finishRow(WaveRow& row, GenerationResult& result, const WaveSettings& wave, std::int64_t& done)
{
    const SamplingOptions& sampling = wave.sampling;
    const std::int64_t vocab = wave.vocab;
    if (sampling.fullDistributions && !row.distributionRows.empty()) {
        result.distributions = at::stack(row.distributionRows); // where the logits are
        row.distributionRows.clear();
    } else if (sampling.fullDistributions) {
        result.distributions = at::empty({static_cast<std::int64_t>(row.distributions.size()), vocab}, at::kFloat);
        for (std::size_t t = 0; t < row.distributions.size(); ++t) {
            std::copy(row.distributions[t].begin(), row.distributions[t].end(),
                result.distributions[static_cast<std::int64_t>(t)].data_ptr<float>());
        }
        row.distributions.clear();
    }
    if (sampling.keepLogits) {
        if (row.kept == 0) {
            result.logits = at::empty({0, vocab},
                at::TensorOptions().dtype(wave.keptLogitsType).device(deviceOf(wave.engineModel.weights())));
        } else if (2 * row.kept < row.logits.size(0)) {
            result.logits = row.logits.narrow(0, 0, row.kept).clone(); // stopped early: the rest is given back
        } else {
            result.logits = row.logits.narrow(0, 0, row.kept);
        }
        row.logits = at::Tensor();
    }
    result.text = row.text;
    done += sampling.maxNewTokens - static_cast<std::int64_t>(result.tokens.size()); // the unused allowance
}

// One position's draws for every row: log mu on the host path or on the tensor path (with fullDistributions) and
// the sampled tokens.
struct PositionDraws {
    std::vector<std::vector<double>> logMus; // the host path's; with fullDistributions
    at::Tensor drawnLogMu; // the tensor path's, float32 [rows, vocab] on the logits' device; with fullDistributions
    std::vector<SampledToken> sampled;
};

PositionDraws drawTokens(std::vector<WaveRow>& rows, const at::Tensor& last, const WaveSettings& wave)
{
    const SamplingOptions& sampling = wave.sampling;
    const std::int64_t vocab = wave.vocab;
    PositionDraws draws;
    draws.logMus.resize(rows.size());
    draws.sampled.resize(rows.size());
    std::vector<std::vector<double>>& logMus = draws.logMus;
    std::vector<SampledToken>& sampled = draws.sampled;
    if (usesTensorSampling(last)) {
        // On a GPU: one draw per row from its generator here, the distributions and draws there; only the ids,
        // their log mu and the top pairs come back (the full distributions a trainer asks for stay there).
        std::vector<double> uniforms;
        for (WaveRow& row : rows) {
            uniforms.push_back(row.generator.uniform());
        }
        SampledRows drawn = sampleRows(last, uniforms, sampling);
        sampled = std::move(drawn.tokens);
        if (sampling.fullDistributions) {
            draws.drawnLogMu = drawn.logMu.to(at::kFloat); // the host path's float rounding of the float64 log mu
        }
    } else {
        const at::Tensor lastCpu = last.to(at::kCPU).to(at::kFloat).contiguous();
        // Each row's distribution and draw (a full-vocabulary pass in float64) in parallel: a row reads only its
        // own logits and advances only its own generator, so the tokens do not depend on the thread count.
        at::parallel_for(0, static_cast<std::int64_t>(rows.size()), 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t r = begin; r < end; ++r) {
                const auto index = static_cast<std::size_t>(r);
                const float* rowLogits = lastCpu[r].data_ptr<float>();
                logMus[index] = samplingLogProbs(rowLogits, vocab, sampling);
                sampled[index] = sampleToken(rowLogits, logMus[index], sampling, rows[index].generator);
            }
        });
    }
    return draws;
}

// Row `r`'s drawn token into its result, with its distribution and logits when kept.
void recordToken(WaveRow& row, GenerationResult& result, PositionDraws& draws, std::size_t r,
    const at::Tensor& keptLogits, const WaveSettings& wave)
{
    const SamplingOptions& sampling = wave.sampling;
    const std::vector<double>& logMu = draws.logMus[r];
    SampledToken& token = draws.sampled[r];
    result.tokens.push_back(token.id);
    result.logProbs.push_back(token.logProb);
    if (sampling.topLogProbs > 0) {
        result.topLogProbs.push_back(std::move(token.top));
    }
    if (sampling.fullDistributions && draws.drawnLogMu.defined()) {
        row.distributionRows.push_back(draws.drawnLogMu[static_cast<std::int64_t>(r)]);
    } else if (sampling.fullDistributions) {
        row.distributions.emplace_back(logMu.begin(), logMu.end());
    }
    if (sampling.keepLogits) {
        if (!row.logits.defined()) {
            row.logits
                = at::empty({std::max<std::int64_t>(1, sampling.maxNewTokens), wave.vocab}, keptLogits.options());
        }
        row.logits[row.kept++].copy_(keptLogits[static_cast<std::int64_t>(r)]);
    }
}

// Whether the row stops after `tokenId` (a stop string in its text, a stop id, or its length), with the reason in
// `result`; the text is cut at a stop string.
bool rowFinishes(WaveRow& row, GenerationResult& result, std::int64_t tokenId, const WaveSettings& wave)
{
    bool finished = false;
    if (wave.tokenizer) {
        const std::size_t previous = row.text.size();
        row.text += wave.tokenizer->generatedBytes(tokenId); // specials and ids with no token add nothing
        const std::size_t stop = findStopString(row.text, previous, wave.sampling.stopStrings);
        if (stop != std::string::npos) {
            row.text.resize(stop);
            result.finishReason = FinishReason::StopString;
            finished = true;
        }
    }
    if (!finished && wave.stopIds.count(tokenId)) {
        result.finishReason = FinishReason::Eos;
        finished = true;
    }
    if (!finished && static_cast<std::int64_t>(result.tokens.size()) >= wave.sampling.maxNewTokens) {
        result.finishReason = FinishReason::Length;
        finished = true;
    }
    return finished;
}

// The sampler refused logits that are not finite (NonFiniteLogits): there is no distribution to sample from. The
// error says which request and token, and where a forward of the same tokens first leaves the finite numbers.
// Weights are finite when loaded (model::requireFiniteWeights) and the options that change them are bounded, so what
// is left is a forward pass that overflows: weights or activations too large for the arithmetic it runs in. Only
// on this error path are the rows checked again (the sampler does not say which row it refused).
Error nonFiniteLogitsError(const at::Tensor& last, const std::vector<WaveRow>& rows,
    const std::vector<GenerationRequest>& requests, const std::vector<GenerationResult>& results, EngineModel& model)
{
    const at::Tensor finiteRows = at::isfinite(last).all(-1);
    const auto r = finiteRows.logical_not().to(at::kInt).argmax().item<std::int64_t>();
    const std::size_t request = rows[static_cast<std::size_t>(r)].request;
    std::vector<std::int64_t> tokens = requests[request].prompt;
    tokens.insert(tokens.end(), results[request].tokens.begin(), results[request].tokens.end());
    const bool nan = at::isnan(last[r]).any().item<bool>();
    return Error("engine: "
        + (requests[request].source.empty() ? "request " + std::to_string(request) : requests[request].source)
        + ": the logits for generated token " + std::to_string(results[request].tokens.size() + 1) + " are "
        + (nan ? "NaN" : "infinite") + ", so no token can be sampled; " + nonFiniteForwardCause(model, tokens));
}

// Finished rows leave the batch and free their blocks now: only the rows `keep` stay.
void dropFinishedRows(
    std::vector<WaveRow>& rows, const std::vector<std::int64_t>& keep, PagedKvCache& cache, at::Tensor& mask)
{
    cache.keepRows(keep);
    std::vector<WaveRow> remaining;
    for (std::int64_t r : keep) {
        remaining.push_back(std::move(rows[static_cast<std::size_t>(r)]));
    }
    rows = std::move(remaining);
    mask = mask.index_select(0, at::tensor(keep, at::kLong));
}

} // namespace

void Engine::runWave(const std::vector<std::size_t>& wave, std::int64_t waveIndex,
    const std::vector<GenerationRequest>& requests, const SamplingOptions& sampling, KvBlockPool& pool,
    const std::vector<SequenceId>& sequences, std::vector<GenerationResult>& results, std::int64_t& done,
    std::int64_t total, Progress* progress)
{
    WaveSettings settings {sampling, *model_, tokenizer_, model_->config().vocabSize,
        model_->precision() == EnginePrecision::Fp32 ? at::kFloat : at::kBFloat16,
        std::set<std::int64_t>(sampling.stopTokenIds.begin(), sampling.stopTokenIds.end())};
    if (!sampling.ignoreEos) {
        settings.stopIds.insert(model_->config().eosTokenIds.begin(), model_->config().eosTokenIds.end());
    }

    std::vector<std::vector<std::int64_t>> prompts;
    for (std::size_t index : wave) {
        prompts.push_back(requests[index].prompt);
    }
    auto [ids, mask] = leftPaddedBatch(prompts);
    PagedKvCache cache(pool, &model_->kvQuantizer());
    for (std::size_t row = 0; row < wave.size(); ++row) {
        cache.addRow(sequences[row], ids.size(1) - static_cast<std::int64_t>(prompts[row].size()));
    }

    std::vector<WaveRow> rows;
    for (std::size_t index : wave) {
        rows.push_back({index, metrics::SplitMix64(requestGeneratorSeed(sampling.seed, requests[index].seed)), {}, {},
            {}, 0, {}});
        results[index].wave = waveIndex;
    }

    const std::string stage = "generating (wave " + std::to_string(waveIndex + 1) + ")";
    model::ForwardOptions prefill;
    prefill.lastPositions = 1; // the prompt's other positions only fill the cache
    at::Tensor logits = model_->forward(ids, mask, at::Tensor(), &cache, prefill);
    at::Tensor last = logits.select(1, logits.size(1) - 1);
    while (true) {
        // The BF16 and recipe engines' logits are bf16 values (their lm_head rounds its output): kept as bf16, exact.
        const at::Tensor keptLogits = sampling.keepLogits ? last.to(settings.keptLogitsType) : at::Tensor();
        std::vector<std::int64_t> keep;
        std::vector<std::int64_t> nextTokens;
        PositionDraws draws;
        try {
            draws = drawTokens(rows, last, settings);
        } catch (const NonFiniteLogits&) {
            if (at::isfinite(last).all().item<bool>()) {
                throw; // finite logits that the temperature took out of range: the sampler's own words
            }
            throw nonFiniteLogitsError(last, rows, requests, results, *model_);
        }
        for (std::size_t r = 0; r < rows.size(); ++r) {
            WaveRow& row = rows[r];
            GenerationResult& result = results[row.request];
            const std::int64_t tokenId = draws.sampled[r].id;
            recordToken(row, result, draws, r, keptLogits, settings);
            ++done;
            if (rowFinishes(row, result, tokenId, settings)) {
                finishRow(row, result, settings, done);
            } else {
                keep.push_back(static_cast<std::int64_t>(r));
                nextTokens.push_back(tokenId);
            }
        }
        if (progress) {
            progress->update(total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0, stage);
            progress->checkCancelled();
        }
        if (keep.empty()) {
            break;
        }
        if (keep.size() < rows.size()) {
            dropFinishedRows(rows, keep, cache, mask);
        }
        const auto batch = static_cast<std::int64_t>(rows.size());
        mask = at::cat({mask, at::ones({batch, 1}, at::kLong)}, 1);
        const at::Tensor next = at::tensor(nextTokens, at::kLong).view({batch, 1});
        logits = model_->forward(next, mask, at::Tensor(), &cache);
        last = logits.select(1, 0);
    }
}

std::string nonFiniteForwardCause(EngineModel& model, const std::vector<std::int64_t>& tokens)
{
    const at::NoGradGuard noGrad;
    model::NonFiniteTrace trace;
    const auto [ids, mask] = leftPaddedBatch({tokens});
    model.forwardQuantized(ids, mask, /*logProbs=*/false, /*lastPositions=*/1, &trace);
    const std::string length = std::to_string(tokens.size()) + " tokens";
    if (!trace.found()) {
        return "a traced forward of the same " + length
            + " stays finite, so the overflow depends on the batch it ran in or on the paged KV cache's decoding";
    }
    const auto magnitude = [](double value) { // three digits are enough to see an overflow coming
        char text[32];
        std::snprintf(text, sizeof text, "%.3g", value);
        return std::string(text);
    };
    std::string inputs = "its input reaches |x| = " + magnitude(trace.inputMagnitude);
    if (trace.linear) {
        inputs += ", the weight as the engine multiplies it |w| = "
            + magnitude(model.engineWeight(trace.point).abs().max().item<double>());
    }
    return "a forward of its " + length + " first leaves the finite numbers at " + trace.point + " ("
        + trace.operation + " giving " + (trace.nan ? "NaN" : "infinity") + "; " + inputs
        + "): the weights or activations are too large for the engine's float32 arithmetic (largest finite value "
          "3.4e+38)";
}

std::vector<at::Tensor> scoreSequences(const model::Transformer& model,
    const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<std::vector<std::int64_t>>& responses,
    const ScoreOptions& options, Progress* progress)
{
    const ForwardLogits forward = [&model](const at::Tensor& ids, const at::Tensor& mask, std::int64_t lastPositions) {
        model::ForwardOptions forwardOptions;
        forwardOptions.lastPositions = lastPositions;
        return model.forward(ids, mask, forwardOptions);
    };
    return scoreWith(forward, model.config().vocabSize, deviceOf(model.weights()), prompts, responses, options, progress);
}

std::vector<at::Tensor> scoreSequences(EngineModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const std::vector<std::vector<std::int64_t>>& responses, const ScoreOptions& options, Progress* progress)
{
    const ForwardLogits forward = [&model](const at::Tensor& ids, const at::Tensor& mask, std::int64_t lastPositions) {
        return model.forwardQuantized(ids, mask, /*logProbs=*/false, lastPositions);
    };
    return scoreWith(forward, model.config().vocabSize, deviceOf(model.weights()), prompts, responses, options, progress);
}

} // namespace mismatch::engine

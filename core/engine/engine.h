#pragma once
// The rollout engine: batched generation with a paged KV cache under a precision mode or recipe, returning
// tokens and log-probabilities of the engine's sampling distribution (sampling.h), plus teacher-forced scoring
// of given responses by any model (the trainer side of a mismatch measurement).
//
// generate() runs in waves: a wave admits requests in order while their blocks fit the cache (each reserves
// prompt + maxNewTokens tokens; maxBatchSize caps a wave), prefills them together (left padded) and decodes
// until every row finished; finished rows leave the batch and free their blocks at once. Requests that did
// not fit wait for the next wave. A request that could never fit (more tokens than the whole cache) is not
// run: its result carries a ResourceError naming the tokens it needs and the capacity, and the others complete.
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/engine/engine_model.h"
#include "core/engine/paged_kv_cache.h"
#include "core/engine/sampling.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::engine {

struct GenerationRequest {
    std::vector<std::int64_t> prompt; // token ids, non-empty
    std::uint64_t seed = 0; // per request: the same seed gives the same tokens in any batch
    // Where the prompt came from, for messages ("arith-probe.jsonl, prompt 'q7'"); empty: "request N".
    std::string source;
};

enum class FinishReason {
    Eos, // generated a stop token id (kept as the last token)
    StopString, // the decoded text contains a stop string
    Length, // reached maxNewTokens
    Rejected, // never ran: needs more KV-cache tokens than the cache holds (see error)
};
// "eos", "stop", "length", "rejected".
std::string toString(FinishReason reason);

struct GenerationResult {
    std::vector<std::int64_t> tokens; // generated ids (the prompt is not repeated)
    std::vector<double> logProbs; // per token: log mu(token), nats
    std::vector<std::vector<TokenLogProb>> topLogProbs; // per token, when SamplingOptions::topLogProbs > 0
    at::Tensor distributions; // [T, vocab] float32 log mu, when fullDistributions
    at::Tensor logits; // [T, vocab] the logits sampled from (bf16 or float32), when keepLogits
    std::string text; // decoded tokens (cut before a stop string); needs a tokenizer
    FinishReason finishReason = FinishReason::Length;
    std::optional<ResourceError> error; // set when Rejected
    std::int64_t wave = -1; // 0-based wave it ran in; -1 when rejected
};

class Engine {
public:
    // See EngineModel for the precision modes; options also size the paged cache.
    Engine(model::ModelConfig config, model::TransformerWeights weights,
        std::optional<quant::RecipePlan> plan = std::nullopt, EngineOptions options = {});

    EngineModel& model() { return *model_; }
    const EngineModel& model() const { return *model_; }
    // Not owned; needed for stop strings and result text. Null: no text.
    void setTokenizer(const model::Tokenizer* tokenizer) { tokenizer_ = tokenizer; }
    const model::Tokenizer* tokenizer() const { return tokenizer_; }
    // A weight sync (EngineModel::syncWeights).
    void syncWeights(model::TransformerWeights weights) { model_->syncWeights(std::move(weights)); }

    // Capacity of this engine's paged cache (its formats; fp32 for the FP32 engine) for options().kvCacheBytes.
    KvBlockAllocator allocator() const;

    // Bad input (empty prompt, ids outside the vocabulary, invalid sampling options, stop strings without a
    // tokenizer) throws InputError before anything runs. Progress: fraction of the requested tokens, checked
    // for cancellation after every decode step (CancelledError).
    std::vector<GenerationResult> generate(
        const std::vector<GenerationRequest>& requests, const SamplingOptions& sampling, Progress* progress = nullptr);

private:
    void runWave(const std::vector<std::size_t>& wave, std::int64_t waveIndex,
        const std::vector<GenerationRequest>& requests, const SamplingOptions& sampling, KvBlockPool& pool,
        const std::vector<SequenceId>& sequences, std::vector<GenerationResult>& results, std::int64_t& done,
        std::int64_t total, Progress* progress);

    std::unique_ptr<EngineModel> model_;
    const model::Tokenizer* tokenizer_ = nullptr;
};

// Throws the first rejected request's ResourceError, if any (for callers that need every request to run).
void throwIfRejected(const std::vector<GenerationResult>& results);

struct ScoreOptions {
    double temperature = 1.0; // log_softmax(logits / temperature); must be > 0
    std::int64_t batchSize = 16; // sequences per forward
    // Rows come back to the host; false: they stay on the model's device (a measurement that compares them there
    // with the engine's log mu, see measureMismatch).
    bool onHost = true;
};

// Where a forward pass of `tokens` through `model` (the engine's full forward, traced: model::NonFiniteTrace)
// first holds a NaN or an infinity, in words for an error message: the module or step, the operation, the largest
// input magnitude and, for a linear module, the largest weight magnitude as the engine multiplies it.
std::string nonFiniteForwardCause(EngineModel& model, const std::vector<std::int64_t>& tokens);

// Teacher-forced scoring: for each i, the log-probability rows [responses[i].size(), vocab] (float32) that
// `model` assigns at the positions predicting each response token, given prompts[i] and the earlier response
// tokens. Rows are log_softmax(logits / temperature) over the full vocabulary (no top-k/top-p). The plain
// Transformer overload is the trainer (its own forward, FP32 unless the model says otherwise); the EngineModel
// overload also rounds keys and values as the engine's cache does. An empty response gives a [0, vocab]
// tensor. InputError for mismatched counts, empty prompts, ids outside the vocabulary or a temperature <= 0.
std::vector<at::Tensor> scoreSequences(const model::Transformer& model,
    const std::vector<std::vector<std::int64_t>>& prompts, const std::vector<std::vector<std::int64_t>>& responses,
    const ScoreOptions& options = {}, Progress* progress = nullptr);
std::vector<at::Tensor> scoreSequences(EngineModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const std::vector<std::vector<std::int64_t>>& responses, const ScoreOptions& options = {},
    Progress* progress = nullptr);

} // namespace mismatch::engine

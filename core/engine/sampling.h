#pragma once
// Token sampling of the engine, deterministic per request.
//
// The SAMPLING distribution mu of a position, from float32 logits z (computed in float64):
//   1. temperature:  log p = log_softmax(z / temperature)
//   2. top-k (k > 0): keep the k most probable tokens (ties: lower id first)
//   3. top-p (p < 1): of those, keep the smallest set of most probable tokens whose probability, renormalized
//                     over the kept set, sums to >= p (the token that crosses p is kept; ties: lower id first)
//   4. renormalize:   log mu(v) = log p(v) - logsumexp over kept, -inf for the others
// Every log-probability the engine reports (per sampled token, top-k lists, full distributions) is log mu.
// Greedy decoding (greedy, or temperature 0) picks argmax z (lowest id on ties) and reports log mu with
// temperature 1 and the same top-k/top-p: a point mass would say nothing.
//
// Draws: one uniform u in [0, 1) per generated token from the request's own SplitMix64 generator, seeded
// from (SamplingOptions::seed, GenerationRequest::seed) by requestGeneratorSeed(); the token is the first id
// (in id order) where the cumulative mu exceeds u. Results therefore do not depend on which other requests
// share the batch.
#include "core/common/error.h"
#include "core/metrics/bootstrap.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::engine {

struct SamplingOptions {
    double temperature = 1.0; // 0 means greedy
    double topP = 1.0; // (0, 1]
    std::int64_t topK = 0; // 0: off
    bool greedy = false;
    std::int64_t maxNewTokens = 64;
    std::uint64_t seed = 0; // combined with each request's seed
    // Stop on these ids and on the model config's eos_token_id(s) (unless ignoreEos). The id is kept as the
    // last generated token.
    std::vector<std::int64_t> stopTokenIds;
    bool ignoreEos = false;
    // Stop when the decoded response contains one of these (needs the engine's tokenizer); the text is cut
    // before it, the tokens are kept up to the one that completed it.
    std::vector<std::string> stopStrings;
    // Per generated token, this many (id, log mu) pairs of the most probable tokens (0: none).
    std::int64_t topLogProbs = 0;
    // Per request, the full [T, vocab] float32 log mu of every generated position (for mismatch).
    bool fullDistributions = false;
    // Per request, the [T, vocab] logits every generated position was sampled from (GenerationResult::logits), in
    // bf16 when the engine's lm_head writes bf16 (the BF16 and recipe engines: exact, and half the bytes of log mu
    // in float32), float32 otherwise (the FP32 engine). logMuRows turns them into log mu, in float64, exactly as
    // the engine computed it for sampling.
    bool keepLogits = false;
};

// Throws InputError("sampling options", field, ...) for a temperature < 0 or not finite, top-p outside
// (0, 1], top-k < 0, maxNewTokens < 1 or topLogProbs < 0.
void validateSamplingOptions(const SamplingOptions& options);

// The seed of a request's generator: SplitMix64 of the options seed, mixed with the request seed.
std::uint64_t requestGeneratorSeed(std::uint64_t optionsSeed, std::uint64_t requestSeed);

struct TokenLogProb {
    std::int64_t id = 0;
    float logProb = 0.0f;
};

struct SampledToken {
    std::int64_t id = 0;
    double logProb = 0.0; // log mu(id)
    std::vector<TokenLogProb> top; // when topLogProbs > 0: most probable first (ties: lower id first)
};

// What the samplers throw for logits with no distribution to sample from (a NaN, or no finite largest logit). The
// engine catches it to say which request and token, and where the forward pass overflowed (engine.cpp).
class NonFiniteLogits : public Error {
public:
    using Error::Error;
};

// log mu of one position (see above) from float32 logits of length `vocab`; entries outside the kept set are
// -infinity. Throws NonFiniteLogits for NaN or +-infinite-only logits (nothing to sample from).
std::vector<double> samplingLogProbs(const float* logits, std::int64_t vocab, const SamplingOptions& options);
// samplingLogProbs of every row of `logits` [T, vocab] (any floating dtype whose values widen exactly to float32,
// as GenerationResult::logits holds them): [T, vocab] float64, rows in parallel.
at::Tensor logMuRows(const at::Tensor& logits, const SamplingOptions& options);
// Samples a token from log mu (as returned by samplingLogProbs) with one draw from `generator`; greedy options
// take argmax of `logits` instead (the draw is still consumed, so streams stay aligned).
SampledToken sampleToken(const float* logits, const std::vector<double>& logMu, const SamplingOptions& options,
    metrics::SplitMix64& generator);

// The same distributions and draws as tensor operations over a whole batch, on the logits' device: what the engine
// uses for logits on a GPU, so that no [rows, vocab] tensor leaves the device (only the chosen ids, their log mu
// and the top-N pairs do). `logits` [rows, vocab] of any floating dtype, `uniforms` one draw per row taken from
// the row's generator on the host exactly as sampleToken takes it. The function is samplingLogProbs' and
// sampleToken's; the float64 sums run in another order (a reduction tree instead of a loop), so log mu agrees
// with the host's to ~1e-15 relative and a token differs only where a draw falls within that distance of a
// cumulative boundary (or a top-p sum of the boundary); ties break as on the host (lower id first). Throws
// mismatch::Error as samplingLogProbs does.
struct SampledRows {
    at::Tensor logMu; // [rows, vocab] float64 on the logits' device
    std::vector<SampledToken> tokens; // per row
};
at::Tensor samplingLogProbsRows(const at::Tensor& logits, const SamplingOptions& options);
SampledRows sampleRows(const at::Tensor& logits, const std::vector<double>& uniforms, const SamplingOptions& options);

// Whether the engine samples (and logMuRows computes log mu) with the tensor operations above for `logits`: on
// every device but the CPU, where the per-row loops are the reference. Tests force the tensor path on the CPU too
// (setTensorSamplingOnCpu) to compare the two on the same logits.
bool usesTensorSampling(const at::Tensor& logits);
void setTensorSamplingOnCpu(bool enabled);

} // namespace mismatch::engine

#pragma once
// Generation with the emulated rollout engine (`mismatch generate`): a model directory, a precision recipe or a
// plain precision, optional older weights (staleness) and weight noise, a prompt set as seeded requests (the same
// set-up as the analyses: analysis::promptRequests), the engine's samples and per-token log-probabilities.
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
#include "core/engine/engine.h"
#include "core/engine/sampling.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct GenerateOptions {
    std::string modelDirectory;
    std::string recipe; // a recipe file; empty: the plain engine of `precision`
    std::string precision; // without a recipe: "bf16" (empty means the same) or "fp32"
    std::string prompts; // prompt set (JSON Lines)
    std::string stalenessFrom; // an older checkpoint of the same model whose weights the engine uses; empty: none
    double noise = 0.0; // Gaussian weight noise, relative to each tensor's RMS
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
    // The model's EOS (or the tokenizer's) is added to stopTokenIds unless sampling.ignoreEos.
    engine::SamplingOptions sampling;
    std::uint64_t kvCacheBytes = 1ull << 30;
    std::int64_t blockSize = 16;
    std::int64_t maxBatch = 0; // 0: as many sequences per wave as the cache holds
    at::Device device = at::Device(at::kCPU); // where the engine computes (common/device.h)
    // How messages name the inputs that have no file of their own (the CLI names its options).
    std::string kvMemorySource = "kv_memory";
    std::string noiseModulesSource = "noise_modules";
};

struct GenerateResult {
    std::string weightSource; // the directory the engine's weights came from
    std::string precisionName; // "bf16", "fp32" or "recipe FILE"
    PromptRequests requests; // ids and encoded prompts, in the prompt set's order
    std::vector<engine::GenerationResult> results; // one per request; a rejected request has its error
    std::int64_t kvCapacityTokens = 0;
};

// Refuses before loading: an unreadable model, prompt set or recipe, a prompt that does not fit the context with
// sampling.maxNewTokens, a noise pattern that matches no module, older weights of another architecture, a KV
// cache or job that cannot fit in memory. CancelledError when `progress` is cancelled (nothing is returned).
GenerateResult generate(const GenerateOptions& options, Progress& progress);

// What `mismatch generate` (and the catalogue's "generate" job) wrote.
struct GenerateFileResult {
    std::string modelDirectory;
    std::string out; // the JSON Lines file
    double noise = 0.0;
    std::uint64_t kvCacheBytes = 0;
    GenerateResult generated;
    std::map<std::string, std::int64_t> finishReasons; // engine::toString(finish reason) -> requests
    std::int64_t generatedTokens = 0;
    std::int64_t waves = 0;
    std::int64_t rejected = 0; // requests the engine refused (their line has "error")
    double seconds = 0.0;
};

// generate(), then one JSON line per request written to `out` through a temporary file and a rename (a failed or
// cancelled run leaves no output, whole or partial): {"id", "prompt_tokens", "tokens", "text", "logprobs",
// "finish_reason"}, "top_logprobs" ([{"id", "logprob"}] per position) when sampling.topLogProbs > 0 and "error"
// for a rejected request. Response bytes that are not valid UTF-8 (a token may hold part of a character) are
// replaced. A rejected request does not throw here: the file holds every other prompt and the caller decides
// (engine::throwIfRejected(result.generated.results)).
GenerateFileResult generateToFile(const GenerateOptions& options, const std::string& out, Progress& progress);

}  // namespace mismatch::analysis

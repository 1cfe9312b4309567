#pragma once
// `mismatch logits`: the trainer's reference log-probabilities at every position of a prompt set, for checking
// this implementation against others (transformers, vLLM's prompt_logprobs) on the same checkpoint.
#include "core/common/progress.h"

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace mismatch::analysis {

struct ReferenceLogitsOptions {
    bool includeAnswer = false;  // score prompt + answer instead of the prompt alone
    bool bf16 = false;           // run the forward in BF16 instead of FP32
    int batchSize = 16;
};

struct ReferenceLogits {
    // Per prompt i (in file order): "log_probs.i" [T_i, vocab] float32 (row t is the distribution of token t+1
    // given tokens 0..t) and "input_ids.i" [T_i] stored as float32 (exact for ids below 2^24).
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    std::vector<std::string> promptIds;
    std::int64_t positions = 0;
};

ReferenceLogits computeReferenceLogits(const std::string& modelDirectory, const std::string& promptSetPath,
    const ReferenceLogitsOptions& options, Progress& progress);

// What writeReferenceLogits wrote.
struct ReferenceLogitsFile {
    std::string modelDirectory;
    std::string out;
    std::int64_t prompts = 0;
    std::int64_t positions = 0;
    bool bf16 = false;
};

// computeReferenceLogits, written to `out` as safetensors (a temporary name, then a rename: a failed or cancelled
// run writes nothing) with the metadata prompt_ids (a JSON list, in file order), model, precision ("fp32" or
// "bf16") and text ("prompt" or "prompt+answer").
ReferenceLogitsFile writeReferenceLogits(const std::string& modelDirectory, const std::string& promptSetPath,
    const std::string& out, const ReferenceLogitsOptions& options, Progress& progress);

}  // namespace mismatch::analysis

#pragma once
// The token drill-down's figures of one response (store::TokenDetail), from the engine's and the trainer's
// log-probabilities: used by the trainer for the rollouts it keeps and by the prefix-shift analysis.
#include "core/store/analysis_store.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace mismatch::engine {

// Per generated token: log mu(y), log pi(y), both entropies and both top-5 (the token drill-down). logMu and logPi
// are [T, vocab] log-probabilities of one response; a token mu gives probability 0 (outside top-k/top-p) adds
// nothing to its entropy.
std::vector<store::TokenDetail> tokenDetails(
    const at::Tensor& logMu, const at::Tensor& logPi, const std::vector<std::int64_t>& tokens);

} // namespace mismatch::engine

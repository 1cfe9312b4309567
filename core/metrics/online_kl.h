#pragma once
// The fused mismatch kernel's algorithm on the CPU: per row, one pass over both logit rows with running
// log-sum-exps (cuda/online_kl_state.h), the vocabulary split into `lanes` strided partials (lane i takes
// the groups of 8 elements i, i + lanes, ..., as CUDA thread i takes 16-byte vectors of bf16 rows, then the last
// vocab % 8 elements one at a time) merged in a pairwise tree; the kernel merges with warp shuffles in another
// order and groups float32 rows by 4, the same function up to rounding. It is the CPU twin of
// cuda::fusedMismatch, tested against a naive two-pass float64 loop (tests/gpu/test_gpu_reference).
#include "core/metrics/mismatch.h"

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mismatch::metrics {

// engineLogits, trainerLogits: [N, V] of the same floating dtype (converted to float32); sampled: [N] int64.
// Result tensors are float64 holding the float32 results; k1 and k3 are NaN for a sampled id outside [0, V).
// InputError for mismatched shapes or lanes < 1.
TokenMismatch onlineTokenMismatch(
    const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled, std::int64_t lanes = 512);

} // namespace mismatch::metrics

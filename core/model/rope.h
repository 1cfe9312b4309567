#pragma once
// Rotary position embeddings in the Hugging Face Llama/Qwen convention ("rotate_half": dimension i of a head
// rotates with dimension i + headDim/2). Shared by the reference forward and the engines, so that every
// path rotates with the same angles.
#include "core/model/config.h"

#include <ATen/core/Tensor.h>

#include <vector>

namespace mismatch::model {

// Inverse frequencies inv_freq[i], i < headDim/2, in radians per position:
//   default: theta^(-2i/headDim)
//   llama3 (HF `_compute_llama3_parameters`): with wavelength 2*pi/inv_freq, low = original/lowFreqFactor,
//   high = original/highFreqFactor: wavelength < high keeps inv_freq; wavelength > low divides it by factor;
//   in between s = (original/wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor) and
//   inv_freq' = (1 - s) * inv_freq / factor + s * inv_freq.
std::vector<double> ropeInverseFrequencies(const ModelConfig& config);

struct RopeTables {
    at::Tensor cos; // [B, 1, T, headDim]
    at::Tensor sin; // [B, 1, T, headDim]
};

// cos/sin of positions[b, t] * inv_freq, duplicated over the two halves of a head. Angles are formed in
// float64 and rounded once to `dtype`: Hugging Face forms them in float32, which loses about
// position * 2^-24 radians; the reference should not inherit that.
RopeTables ropeTables(const std::vector<double>& inverseFrequencies, const at::Tensor& positions, at::ScalarType dtype);

// x [B, heads, T, headDim]: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
at::Tensor applyRope(const at::Tensor& x, const RopeTables& tables);

} // namespace mismatch::model

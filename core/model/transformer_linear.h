#pragma once
// Matrix products with weights stored in fewer bits than they are multiplied in: y = x W^T + b in float32 where W
// is held as BF16 (a checkpoint's own tensors) or in an engine's quantized storage (quant::QuantizedWeight). The
// float32 copy of a large weight never exists whole (the lm_head of a 152k vocabulary would be 0.6 GB):
//   - a weight of at most 128 Ki elements is widened whole and multiplied by at::linear, exactly what a float32
//     weight would give (the demo pair's modules all take this path);
//   - multiplied by at most 32 rows of x (a decode step), larger weights are widened four rows at a time into a
//     buffer that stays in L1 and multiplied there (AVX2 + FMA where the CPU has them), so the weight is read
//     once, in its stored bytes: decoding is bound by reading the weights, and these are half (bf16) or a
//     quarter (fp8 codes) of float32;
//   - with more rows the weight is widened in blocks of at most 32 MiB, each multiplied by one at::linear.
// Every output element is a float32 dot product of the same exact values over the same K; the paths differ only in
// the order of the float32 sums (the BLAS library's, or 8 lanes over k then the lanes pairwise).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>

namespace mismatch::model {

// Writes rows [begin, end) of a weight as float32, row-major, into `out` ((end - begin) x in floats).
using WeightRows = std::function<void(std::int64_t begin, std::int64_t end, float* out)>;

// Whether blockwiseLinear widens the weight whole and multiplies it by one at::linear (at most 128 Ki elements, the
// first case above): exactly the product with float32 weights.
bool widenedWhole(std::int64_t outFeatures, std::int64_t inFeatures);

// y = x W^T + bias for x [..., in] float32 (CPU), W [out, in] given by `rows`, bias [out] float32 or undefined.
// Returns [..., out] float32.
at::Tensor blockwiseLinear(const at::Tensor& x, std::int64_t outFeatures, std::int64_t inFeatures,
    const WeightRows& rows, const at::Tensor& bias);

// Vectorised element loops (AVX2 where the CPU has it), split with at::parallel_for:
// bf16 bit patterns widened to float32 (exact: a bf16 value is the top half of a float32);
void widenBFloat16(const std::uint16_t* in, float* out, std::int64_t count);
// float32 rounded to bf16, nearest even, as bit patterns (NaN stays a NaN) and as float32 values on the bf16 grid
// (NaN kept as it is). The same rounding as quant::roundToBFloat16.
void narrowToBFloat16(const float* in, std::uint16_t* out, std::int64_t count);
void roundToBFloat16Grid(const float* in, float* out, std::int64_t count);

// x (float32 or float64) times a weight of another floating dtype (a BF16 checkpoint tensor multiplied by the FP32
// trainer): the weight's exact values in x's dtype, without materialising the whole converted weight on the CPU.
// Autograd-ready when x or the weight requires gradients (then it converts the whole weight, as at::linear would).
at::Tensor linearWithWidening(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

} // namespace mismatch::model

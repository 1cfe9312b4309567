#pragma once
// The FP8 emulation's matrix product on CPUs with native BF16 dot products (AVX512-BF16): e4m3 weight codes times
// bf16 activations (fp8 activation code values, or bf16 activations), as a block-scaled FP8 GEMM computes it:
//
//   y[m, n] = rowScale[m] * sum_b scale(n, b) * sum_{k in block b} x[m, k] * e4m3(code[n, k])
//
// Every e4m3 value is a bf16 number (4 significant bits, exponents 2^-9 .. 2^8), so the codes widen to bf16
// exactly (a table of the 128 magnitudes, two vpermi2w lookups), and each product of a bf16 and an e4m3 value (at
// most 12 significant bits) is exact in float32: the inner sums are float32 sums of exact products (vdpbf16ps,
// which also flushes subnormal bf16 inputs to zero, as oneDNN's BF16 GEMM does), then scaled per block and summed
// in float32. The definition the engine emulates (engine_model.h) multiplies the dequantized values instead,
// x_q = code_x * s_x and W_q = code_w * s_w each rounded to float32, then one float32 sum: the two differ by the
// float32 roundings of the scale products and the order of the sums, a few float32 ulps of sum |x_q W_q|, which
// after the engine's bf16 rounding of y is at most one bf16 ulp where y sits at a rounding boundary (tested
// against a float64 computation of the definition).
//
// Why: the float32 emulation widens every weight to float32 and multiplies with FP32 FMAs (16 products per
// instruction); a bf16 dot product instruction takes 32, reading the weight's one-byte codes. Used by the engine
// for FP8 weights of over 128 Ki elements where the CPU has AVX512-BF16 (in AMX tiles where it also has AMX-BF16:
// fp8Bf16ProductUsesAmx); elsewhere the float32 emulation runs.
#include "core/quant/quantize.h"

#include <ATen/core/Tensor.h>

namespace mismatch::quant {

// Whether the CPU runs fp8Bf16Product (AVX512-BF16 and AVX512-BW), in a build that has the kernel (x86-64, GCC or
// clang).
bool fp8Bf16ProductAvailable();

// Whether `weight` has the layout the kernel takes: fp8_e4m3 codes, the columns a multiple of 32, and scale column
// blocks a multiple of 32 (or the whole row).
bool fp8Bf16ProductSupports(const QuantizedWeight& weight);

// y [rows, weight.rows()] float32 for x bf16 [rows, weight.columns()] (CPU) and rowScales float32 [rows] (undefined:
// 1). Programmer error (assert) when the kernel is unavailable or the weight unsupported.
at::Tensor fp8Bf16Product(const at::Tensor& x, const at::Tensor& rowScales, const QuantizedWeight& weight);

// On CPUs with AMX (AMX-BF16 tiles, granted by the kernel to this process), fp8Bf16Product multiplies in tiles:
// 16 weight rows of exact bf16 code values times the activations' bf16 values with tdpbf16ps (float32 sums, its
// own order within each 32-element step; subnormal inputs flushed as vdpbf16ps does), each scale block's sums
// stored, scaled and added in float32. The same definition as the dot-product loop, another summation order.
// Whether that path is taken now; `allowed` false keeps the dot-product loop (tests compare both).
bool fp8Bf16ProductUsesAmx();
void allowFp8Bf16Amx(bool allowed);

} // namespace mismatch::quant

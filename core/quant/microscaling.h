#pragma once
// The microscaling formats, emulated bit for bit on the CPU: MXFP8 and MXFP4 (OCP Microscaling Formats v1.0) and
// NVFP4 (NVIDIA's, as ModelOpt writes its checkpoints and vLLM runs them). Blocks run along the input (reduction)
// dimension: the last dimension of an [out, in] weight, the hidden dimension of each token's activations. Every step
// below is one float32 operation rounded to nearest even (no FMA contraction), so the operations and their order are
// the contract, as in quantize.h.
//
// Elements
//   E4M3 (mxfp8)  fp8.h's e4m3fn: round to nearest even, saturating at +-448 (encodeFp8).
//   E2M1 (mxfp4, nvfp4)  S.EE.M, exponent bias 1, no infinities or NaN: magnitude codes 0-7 are 0, 0.5, 1, 1.5, 2, 3,
//                 4, 6; the sign is bit 3. Rounding is to nearest, ties to the even code (0.25 -> 0, 0.75 -> 1,
//                 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), and magnitudes above 6 (infinities included)
//                 saturate to 6: vLLM's cast_to_fp4 thresholds and ModelOpt's NVFP4QTensor._cast_fp4 (bounds 0.25,
//                 0.75, 1.25, 1.75, 2.5, 3.5, 5 with the ties at 0.75, 1.75 and 3.5 rounded up) are this rule.
//
// MXFP8, MXFP4 (OCP Microscaling Formats (MX) v1.0, section 6.3, Algorithm 1; its reference implementation
// microsoft/microxcaling mx/mx_ops.py, _shared_exponents and _quantize_mx, for the edge cases): for each block of 32
//   amax   = max |x| over the block                       (NaN skipped; exact)
//   e      = floor(log2(amax)): amax's exponent read from its bits, exact, float32 subnormals included (2^-140 ->
//            -140); an all-zero block counts as amax = 2^-126 (microxcaling adds FP32_MIN_NORMAL to a zero amax)
//   shared = e - emax_elem, emax_elem = 8 (E4M3) or 2 (E2M1), at least -127 (E8M0's smallest scale; microxcaling
//            raises smaller exponents to it). E8M0 code = shared + 127. A finite amax gives at most 127 - 8.
//   X      = 2^shared                                      (float32, exact: 2^-127 is a float32 subnormal)
//   q      = element(x / X)                                (float32 division, exact here; then the element rounding,
//                                                           which clamps to the largest normal, 448 or 6)
//   out    = q * X                                         (float32 multiply, exact)
// Upstreams differ in the scale of an MX block: ModelOpt (mxfp8_tensor.py) and FlashInfer take 2^ceil(log2(amax /
// 448)), vLLM's MXFP8 torch fallback (mxfp8_utils.py, _mxfp8_e4m3_quantize_torch) 2^floor(log2(amax)) without the
// emax offset, vLLM's MXFP4 emulation AMD Quark's (mxfp4_utils.py, qdq_mxfp4 "even"). vLLM has no single MX rule to
// follow, so this is the OCP definition: the scale the specification and its reference compute. It differs from
// ModelOpt's only in blocks whose largest element would exceed 448 (or 6) after the division, which OCP clamps.
// (A float32 log2, as torch.log2 computes the spec's floor(log2(amax)), can round an amax just below 2^k up to k for
// |k| >= 2; the exponent from the bits has no such error.)
//
// NVFP4 weights (NVIDIA/Model-Optimizer modelopt/torch/quantization/qtensor/nvfp4_tensor.py: get_weights_scaling_
// factor_2, get_weights_scaling_factor, _cast_per_block_scale_to_fp8, quantize, dequantize: the writer of the NVFP4
// checkpoints vLLM loads), blocks of 16:
//   s2     = amax_tensor / 2688                             (the per-tensor scale amax / (6 * 448), float32)
//   b      = amax_block / (6 * s2)                          (float32: 6 * s2, then the division)
//   b      = 1 where b == 0                                 (ModelOpt: "Set all zero values in scale to 1.0")
//   sf     = e4m3(min(max(b, 2^-9), 448))                   (the E4M3 block scale, clamped, nearest even)
//   d      = sf * s2                                        (float32)
//   q      = e2m1(x / d)                                    (float32 division, then E2M1)
//   out    = q * d                                          (ModelOpt's dequantize; vLLM's dequantize_to_dtype
//                                                            multiplies the same: tensor_sf * global_scale, then
//                                                            times the E2M1 value)
// A weight whose s2 is 0 (all zeros, or all below 2688 * 2^-150) and a block whose d underflows to 0 quantize to
// zeros (ModelOpt would divide by zero there). s2 is each tensor's own: ModelOpt's export
// (modelopt/torch/export/quant_utils.py preprocess_linear_fusion) gives the projections vLLM fuses (q/k/v, gate/up)
// the largest amax of the group, and vLLM loads a fused layer with the largest weight_scale_2 of its shards, so a
// real checkpoint's q, k and v may have a larger s2 (and hence other block scales) than this per-tensor definition.
//
// NVFP4 activations (vLLM vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py ref_nvfp4_quant and
// ref_nvfp4_quant_dequant, the torch reference its NVFP4 kernels are tested against), per token (row), blocks of 16.
// vLLM's global scale is the reciprocal of the calibrated input_scale = amax / 2688 of the checkpoint (modelopt.py:
// input_global_scale_inv = 1.0 / input_global_scale); the engine has no calibration, so each token's own amax gives it,
// computed at run time like the block scales (a token never clips, as a calibration that covers it does not):
//   s      = amax_token / 2688,  g = 1 / s,  r = 1 / g       (float32)
//   sf     = e4m3(min(g * (amax_block * (1/6)), 448))       (1/6 as float32, 0x3E2AAAAB; float32 products)
//   q      = e2m1(x * (1 / (sf * r)))                        (x times vLLM's output_scale; clamped to +-6 as vLLM
//                                                            clamps before cast_to_fp4)
//   out    = q * (sf / g)                                    (ref_nvfp4_quant_dequant's x_fp4 * (scale / global_scale))
// A block whose sf is 0 is zeros: its dequantization scale sf / g is 0 (vLLM's reference then multiplies x by
// 1 / 1e8 instead of 1 / 0, whose E2M1 value is multiplied by that 0 all the same). A token whose g is not finite
// (amax 0, or below 2688 * 2^-128) is zeros. vLLM rounds the dequantized activations to the model dtype (bf16) before
// its emulated product; the engine keeps their float32 values, the exact operands of the native kernels, as it does
// for FP8 activations.
//
// MXFP8 / MXFP4 activations: the MX rule above per token, blocks of 32 along the hidden dimension.
//
// Non-finite input: weights are checked before (quantize.h: InputError naming the element). Activations propagate it
// as the other formats do: a NaN element stays NaN, and a block (MX) or token (NVFP4) whose amax is infinite is NaN.
// Partial blocks are refused (formats.h weightScaleCount, and the activations' hidden size here), as vLLM's kernels and
// emulations take whole blocks only.
#include "core/quant/formats.h"

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace mismatch::quant {

// E2M1 codes (low 4 bits; higher bits ignored by the decoder).
constexpr float kE2m1Max = 6.0f;
const std::array<float, 16>& e2m1DecodeTable(); // indexed by code; code 8 is -0
float decodeE2m1(std::uint8_t code);
// Nearest E2M1 code, ties to the even code, saturating at +-6 (+-inf too). NaN has no code: callers keep it out
// (weights are finite; activations use roundToE2m1).
std::uint8_t encodeE2m1(float value);
// decodeE2m1(encodeE2m1(value)), and NaN for NaN.
float roundToE2m1(float value);

// The MX shared exponent of a block whose largest magnitude is `amax` (finite, >= 0) for elements whose largest
// normal has exponent `elementMaxExponent` (8 for E4M3, 2 for E2M1): max(floor(log2(amax)) - it, -127), an amax of
// 0 counting as 2^-126. The E8M0 code is the result + 127.
int mxSharedExponent(float amax, int elementMaxExponent);
// 2^exponent as a float32, for exponent in [-149, 127] (exact; subnormal below -126).
float powerOfTwo(int exponent);

// NVFP4's per-tensor weight scale s2 = amax / 2688 and the float32 value of a block's E4M3 scale sf (see above).
float nvfp4TensorScale(float amax);
float nvfp4WeightBlockScale(float blockAmax, float tensorScale);

// A microscaling weight as the engine keeps it: codes [out, in] (uint8: E4M3 codes for mxfp8, E2M1 codes for mxfp4
// and nvfp4, one a byte) and the float32 factor each block's decoded codes are multiplied by, [out, in / block]:
// X = 2^shared (MX) or d = sf * s2 (NVFP4). decode(code) * scale is the fake-quantized value, bit for bit.
struct MicroscalingWeight {
    at::Tensor codes;
    at::Tensor scales;
};
// `weight`: float32, contiguous, CPU, [out, in] with in a multiple of the block, finite; `blockAmax`: float32
// [out, in / block], the largest magnitude of each block (quantize.cpp computes it with the finiteness check).
MicroscalingWeight encodeMicroscalingWeight(const at::Tensor& weight, const at::Tensor& blockAmax, WeightFormat format);

// Activations [..., hidden] (float32, contiguous, CPU) fake-quantized per token with dynamic block scales: float32 of
// the same shape. InputError for a scalar or a hidden size that is not a multiple of the format's block.
at::Tensor fakeQuantizeMicroscalingActivations(const at::Tensor& activations, ActivationFormat format);

} // namespace mismatch::quant

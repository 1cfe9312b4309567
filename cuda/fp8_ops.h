#pragma once
// The CUDA FP8 operations core calls when tensors live on a GPU. Needs no CUDA header: tensors in, tensors out.
// Every operation has a CPU reference in core that it is tested against (tests/gpu):
//   quantizeFp8 / dequantizeFp8   core/quant/quantize.h fakeQuantize, weightScales, fakeQuantizeActivations
//                                 (bit for bit: same codes, same scales, same float32 values)
//   appendKvFp8 / decodeAttention core/quant/quantize.h fakeQuantizeKv (per-head scales, bit for bit) and a
//                                 float64 attention over the dequantized cache
//   fusedMismatch                 core/metrics/mismatch.h tokenMismatchFromLogits (float64, two passes)
//   fp8Gemm                       float64 products of the dequantized operands, then bf16
// Inputs must be CUDA tensors (std::invalid_argument otherwise, naming the argument; CudaError for a failing
// CUDA or cuBLASLt call). Work is queued on the device's legacy default stream, the one LibTorch uses unless
// the caller changed it.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace mismatch::cuda {

enum class Fp8Kind { E4M3, E5M2 };
// Which elements share a scale, for a [rows, columns] matrix (Tensor accepts any shape, flattened to
// [numel / last dim, last dim]):
//   Tensor    one scale                                      scales [1, 1]
//   Row       one per row: weight channel, activation token  scales [rows, 1]
//   Block128  one per 128 x 128 block                        scales [ceil(rows/128), ceil(columns/128)]
enum class Fp8Scaling { Tensor, Row, Block128 };

struct Fp8Tensor {
    at::Tensor codes; // uint8, the input's shape, on the device
    at::Tensor scales; // float32 [scale rows, scale columns], on the device
    Fp8Kind kind = Fp8Kind::E4M3;
    Fp8Scaling scaling = Fp8Scaling::Tensor;
};

// True when this build can run the kernels: LibTorch with CUDA and at least one device.
bool available();

// Dynamic scales (amax / qmax per group; qmax 448 for e4m3, 57344 for e5m2; 1 for an all-zero group), then the
// codes. `values`: float32, bfloat16 or float16 on a CUDA device.
Fp8Tensor quantizeFp8(const at::Tensor& values, Fp8Kind kind, Fp8Scaling scaling);
// With given scales (a float32 grid of the scaling's shape on the values' device): values beyond qmax * scale
// saturate.
Fp8Tensor quantizeFp8(const at::Tensor& values, Fp8Kind kind, Fp8Scaling scaling, const at::Tensor& scales);
// decode(code) * scale as float32, the shape of the codes.
at::Tensor dequantizeFp8(const Fp8Tensor& quantized);

// FP8 KV cache in e4m3: `cache` uint8 [slots, kvHeads, headDim]; `scales` float32 [kvHeads] (per head) or [1]
// (per tensor); `values` [tokens, kvHeads, headDim] (float32/bf16/fp16); `slots` int64 [tokens], the slot each
// token is written to. code = encode(value / scale of its head).
void appendKvFp8(at::Tensor& cache, const at::Tensor& scales, const at::Tensor& values, const at::Tensor& slots);

// One view of a KV cache for decodeAttention: e4m3 codes with scales ([kvHeads] or [1]), or bf16 (no scales).
struct KvCacheView {
    at::Tensor data; // uint8 or bfloat16 [slots, kvHeads, headDim]
    at::Tensor scales; // float32, undefined for bf16
};
// One query token per sequence: query float32 [batch, qHeads, headDim] (qHeads a multiple of kvHeads, headDim
// <= 256); slotTable int64 [batch, maxTokens]; lengths int64 [batch], each in [1, maxTokens].
// out[b, h] = softmax_t(softmaxScale * q[b, h] . K_t) V over the sequence's tokens, float32 [batch, qHeads, headDim].
at::Tensor decodeAttention(const at::Tensor& query, const KvCacheView& keys, const KvCacheView& values,
    const at::Tensor& slotTable, const at::Tensor& lengths, float softmaxScale);

// Per-row full-vocabulary KL(mu || pi), k1 and k3 (core/metrics/mismatch.h definitions) from logits [N, V]
// (float32, bf16 or fp16; the same dtype for both) and sampled ids [N] (int64), in one pass over each row.
struct FusedMismatch {
    at::Tensor kl; // float32 [N], nats
    at::Tensor k1;
    at::Tensor k3;
};
FusedMismatch fusedMismatch(const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled);

// How fp8Gemm computed its product.
enum class Fp8GemmPath {
    CublasLtScalarScales, // FP8 tensor cores, per-tensor scales through A/B_SCALE_POINTER
    CublasLtOuterVectorScales, // FP8 tensor cores, per-row scales (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F)
    CublasLtUnitScalesEpilogue, // FP8 tensor cores without scales, float32 out, scales and bias in our epilogue
    DequantizedBf16, // no FP8 GEMM: operands dequantized to bf16, BF16 cuBLASLt GEMM (block scales, odd shapes)
    Declined, // no FP8 GEMM, and Fp8Fallback::Decline: no product computed (output undefined)
};
std::string toString(Fp8GemmPath path);

struct Fp8GemmResult {
    at::Tensor output; // bfloat16 [M, N]
    Fp8GemmPath path = Fp8GemmPath::CublasLtScalarScales;
    std::string note; // why this path (empty for the native scalar one)
};
// What fp8Gemm does where the FP8 tensor cores do not apply (block-128 weights, K or N not a multiple of 16, a
// cuBLASLt refusal):
//   DequantizeToBf16  dequantizes both operands to bf16 and multiplies them in BF16. Not the product of the exact
//                     operands: decode(code) x scale has up to 28 significant bits, bf16 keeps 8, so each operand
//                     takes one more rounding (relative 2^-9) than the FP8 definition has.
//   Decline           computes nothing and says why (path Declined, output undefined), for a caller that has its
//                     own exact product (the engine multiplies the float32 dequantized operands).
enum class Fp8Fallback { DequantizeToBf16, Decline };
// out = bf16(dequant(a) dequant(b)^T + bias), a the activations [M, K] (Tensor or Row scaling), b the weights
// [N, K] (Tensor, Row or Block128), both e4m3; bias float/bf16 [N] or undefined. FP32 accumulation.
// Block-128 weights never take the FP8 tensor cores here: their cuBLASLt block scale modes (VEC128 / BLK128x128)
// need a scale-tensor layout this code has not been verified against on a GPU. FP8 GEMM needs K and N multiples
// of 16.
Fp8GemmResult fp8Gemm(const Fp8Tensor& a, const Fp8Tensor& b, const at::Tensor& bias = at::Tensor(),
    Fp8Fallback fallback = Fp8Fallback::DequantizeToBf16);
// The BF16 baseline: bf16(a b^T + bias) with a [M, K], b [N, K] bfloat16 through cuBLASLt.
at::Tensor bf16Gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias = at::Tensor());

// Waits for the device's queued work (benchmarks).
void synchronize(const at::Tensor& onDevice);

} // namespace mismatch::cuda

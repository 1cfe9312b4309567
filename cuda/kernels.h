#pragma once
// Raw-pointer launchers of the cuda/ kernels, for cuda/fp8_ops.cpp only (the public interface is fp8_ops.h).
// No CUDA and no LibTorch headers here: the .cu files compile without LibTorch, fp8_ops.cpp without CUDA.
// Every launcher runs on the current device's legacy default stream (the stream LibTorch uses unless told
// otherwise), checks its launch with MISMATCH_CUDA_CHECK and does not synchronize.
#include <cstdint>

namespace mismatch::cuda::kernels {

// Element types of floating inputs.
enum class InputType { Float32, BFloat16, Float16 };

// The scale layout of a row-major [rows, columns] matrix, as core/quant/quantize.cpp's ScaleLayout: row r uses
// scale row (r / rowDivisor) % scaleRows, each run of columnBlock columns its own scale column
// (scaleColumns = ceil(columns / columnBlock)).
struct ScaleGrid {
    std::int64_t rows = 0;
    std::int64_t columns = 0;
    std::int64_t rowDivisor = 1;
    std::int64_t scaleRows = 1;
    std::int64_t columnBlock = 1;
    std::int64_t scaleColumns() const { return columns == 0 ? 1 : (columns + columnBlock - 1) / columnBlock; }
};

// amax[scaleRows * scaleColumns] = max |x| over each scale group (NaN skipped, as fmaxf does); then
// scales = amax / qmax, 1 where that is 0. `amax` and `scales` may alias.
void groupScales(const void* input, InputType type, const ScaleGrid& grid, float qmax, float* amax, float* scales);
// codes[i] = encode(x[i] / scale(i)) with round to nearest even and satfinite; e4m3 when `e4m3`, else e5m2.
void encodeScaled(const void* input, InputType type, const ScaleGrid& grid, const float* scales, bool e4m3,
    std::uint8_t* codes);
// out[i] = decode(codes[i]) * scale(i), float32.
void decodeScaled(const std::uint8_t* codes, const ScaleGrid& grid, const float* scales, bool e4m3, float* out);
// out[i] = bf16(decode(codes[i]) * scale(i)): the operand of the BF16 fallback GEMM.
void decodeScaledToBf16(
    const std::uint8_t* codes, const ScaleGrid& grid, const float* scales, bool e4m3, std::uint16_t* out);

// FP8 KV cache [slots, kvHeads, headDim] e4m3 codes. Append: values [tokens, kvHeads, headDim] go to the
// slots listed in slots[tokens], code = encode(value / scales[head or 0]) (perHead: scales has kvHeads entries).
void kvAppendFp8(const void* values, InputType type, std::int64_t tokens, std::int64_t kvHeads,
    std::int64_t headDim, const std::int64_t* slots, const float* scales, bool perHead, std::uint8_t* cache);
// Decode attention of one query per (sequence, query head) over a paged cache:
//   out[b, h] = sum_t softmax_t(softmaxScale * q[b,h] . K[slot(b,t), g]) V[slot(b,t), g],  g = h / (qHeads / kvHeads)
// with K and V either e4m3 codes times their per-head (or per-tensor) scale, or bf16. slotTable [batch, maxTokens]
// maps token t of sequence b to its cache slot; lengths[batch] (int64) the tokens per sequence (>= 1).
// query and out: float32 [batch, qHeads, headDim]; headDim <= 256.
void decodeAttention(const float* query, std::int64_t batch, std::int64_t qHeads, std::int64_t kvHeads,
    std::int64_t headDim, const void* keys, const void* values, bool fp8, const float* keyScales,
    const float* valueScales, bool perHead, const std::int64_t* slotTable, std::int64_t maxTokens,
    const std::int64_t* lengths, float softmaxScale, float* out);

// Fused full-vocabulary mismatch per row from two logit matrices [rows, vocab] (same type), one pass over each:
//   kl[r] = KL(softmax(engine[r]) || softmax(trainer[r])), k1[r] = log mu(y) - log pi(y), k3[r] = r - 1 - log r
// with y = sampled[r] (int64; k1/k3 NaN when y is outside the vocabulary). Outputs float32 [rows].
void fusedMismatch(const void* engineLogits, const void* trainerLogits, InputType type, std::int64_t rows,
    std::int64_t vocab, const std::int64_t* sampled, float* kl, float* k1, float* k3);

// out[i, j] = bf16(acc[i, j] * rowScale[i or 0] * columnScale[j or 0] + bias[j]) for the unit-scale GEMM's
// float32 accumulator acc [rows, columns]; bias may be null; a scale count of 1 broadcasts.
void scaleEpilogue(const float* acc, std::int64_t rows, std::int64_t columns, const float* rowScales,
    std::int64_t rowScaleCount, const float* columnScales, std::int64_t columnScaleCount, const float* bias,
    std::uint16_t* out);

// cuBLASLt. Row-major D[M, N] = A[M, K] B[N, K]^T (+ bias[N]), computed as the column-major TN product
// D^T = B^T' A (cuBLASLt's "A" is our B, transposed; its "B" is our A). FP32 accumulation.
enum class ScaleMode { Scalar, OuterVector };
struct LtStatus {
    bool ok = false;
    int status = 0; // cublasStatus_t of the failing call, or 0
    const char* what = ""; // the failing call, or why no algorithm was found
};
// FP8 e4m3 A and B with scales (Scalar: one float each; OuterVector: aScales[M], bScales[N]); BF16 output;
// bias (bf16, N) optional. Returns ok=false (without throwing) when cuBLASLt has no algorithm for it.
LtStatus fp8GemmLt(const std::uint8_t* a, const std::uint8_t* b, std::int64_t m, std::int64_t n, std::int64_t k,
    const float* aScales, const float* bScales, ScaleMode mode, const std::uint16_t* bias, std::uint16_t* out);
// FP8 e4m3 A and B without scales, float32 output (for scaleEpilogue).
LtStatus fp8GemmLtFloatOut(
    const std::uint8_t* a, const std::uint8_t* b, std::int64_t m, std::int64_t n, std::int64_t k, float* out);
// BF16 A and B, BF16 output: the baseline the FP8 GEMM is measured against.
LtStatus bf16GemmLt(const std::uint16_t* a, const std::uint16_t* b, std::int64_t m, std::int64_t n, std::int64_t k,
    const std::uint16_t* bias, std::uint16_t* out);

// Current device index, and setting it (cudaSetDevice).
int currentDevice();
void setDevice(int index);
void synchronize();

} // namespace mismatch::cuda::kernels

// FP8 quantize/dequantize with tensor, channel (row) and block-128 scales, the FP8 KV-cache append and the decode
// attention read, and the epilogue of the unit-scale FP8 GEMM. Bit-for-bit contract with core/quant/quantize.h:
// amax with fmaxf (NaN skipped), scale = amax / qmax as an IEEE float32 division (1 when 0), y = x / scale (IEEE
// division: this file must not be built with --use_fast_math or -prec-div=false), code = cvt.rn.satfinite
// through __nv_cvt_float_to_fp8(__NV_SATFINITE), value = decode(code) * scale.
#include "cuda/check.h"
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace mismatch::cuda::kernels {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float loadValue(const void* data, InputType type, std::int64_t i)
{
    switch (type) {
    case InputType::BFloat16:
        return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
    case InputType::Float16:
        return __half2float(static_cast<const __half*>(data)[i]);
    default:
        return static_cast<const float*>(data)[i];
    }
}

__device__ __forceinline__ std::uint8_t encode(float y, bool e4m3)
{
    return static_cast<std::uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, e4m3 ? __NV_E4M3 : __NV_E5M2));
}

// Exact: every FP8 value is a half (NaN stays NaN, e5m2 inf stays inf).
__device__ __forceinline__ float decode(std::uint8_t code, bool e4m3)
{
    const __half_raw raw = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), e4m3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(raw));
}

__device__ __forceinline__ std::int64_t scaleIndex(const ScaleGrid& g, std::int64_t row, std::int64_t column)
{
    const std::int64_t scaleColumns = g.columns == 0 ? 1 : (g.columns + g.columnBlock - 1) / g.columnBlock;
    return ((row / g.rowDivisor) % g.scaleRows) * scaleColumns + column / g.columnBlock;
}

unsigned gridFor(std::int64_t elements)
{
    const std::int64_t blocks = (elements + kThreads - 1) / kThreads;
    return static_cast<unsigned>(std::max<std::int64_t>(1, std::min<std::int64_t>(blocks, 65535LL * 8)));
}

// One block per row: the max over each of the row's column blocks, merged into the group's amax with an
// integer atomicMax (non-negative floats, +inf included, order like their bit patterns).
__global__ void groupAmaxKernel(const void* input, InputType type, ScaleGrid grid, float* amax)
{
    __shared__ float warpMax[kThreads / 32];
    const std::int64_t scaleColumns = grid.columns == 0 ? 1 : (grid.columns + grid.columnBlock - 1) / grid.columnBlock;
    for (std::int64_t row = blockIdx.x; row < grid.rows; row += gridDim.x) {
        for (std::int64_t block = 0; block < scaleColumns; ++block) {
            const std::int64_t c0 = block * grid.columnBlock;
            const std::int64_t c1 = min(grid.columns, c0 + grid.columnBlock);
            float local = 0.0f;
            for (std::int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
                local = fmaxf(local, fabsf(loadValue(input, type, row * grid.columns + c)));
            }
            for (int offset = 16; offset > 0; offset /= 2) {
                local = fmaxf(local, __shfl_down_sync(0xFFFFFFFFu, local, offset));
            }
            if ((threadIdx.x & 31) == 0) {
                warpMax[threadIdx.x / 32] = local;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                float total = 0.0f;
                for (int w = 0; w < kThreads / 32; ++w) {
                    total = fmaxf(total, warpMax[w]);
                }
                atomicMax(reinterpret_cast<int*>(amax + scaleIndex(grid, row, c0)), __float_as_int(total));
            }
            __syncthreads();
        }
    }
}

__global__ void scalesKernel(const float* amax, std::int64_t count, float qmax, float* scales)
{
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float scale = __fdiv_rn(amax[i], qmax);
        scales[i] = scale == 0.0f ? 1.0f : scale;
    }
}

__global__ void encodeKernel(
    const void* input, InputType type, ScaleGrid grid, const float* scales, bool e4m3, std::uint8_t* codes)
{
    const std::int64_t total = grid.rows * grid.columns;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = i / grid.columns;
        const std::int64_t column = i - row * grid.columns;
        const float y = __fdiv_rn(loadValue(input, type, i), scales[scaleIndex(grid, row, column)]);
        codes[i] = encode(y, e4m3);
    }
}

template <typename Out>
__global__ void decodeKernel(const std::uint8_t* codes, ScaleGrid grid, const float* scales, bool e4m3, Out* out)
{
    const std::int64_t total = grid.rows * grid.columns;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = i / grid.columns;
        const std::int64_t column = i - row * grid.columns;
        const float value = __fmul_rn(decode(codes[i], e4m3), scales[scaleIndex(grid, row, column)]);
        if constexpr (sizeof(Out) == 2) {
            out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(value));
        } else {
            out[i] = value;
        }
    }
}

__global__ void kvAppendKernel(const void* values, InputType type, std::int64_t tokens, std::int64_t kvHeads,
    std::int64_t headDim, const std::int64_t* slots, const float* scales, bool perHead, std::uint8_t* cache)
{
    const std::int64_t total = tokens * kvHeads * headDim;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t token = i / (kvHeads * headDim);
        const std::int64_t head = (i / headDim) % kvHeads;
        const std::int64_t d = i % headDim;
        const float y = __fdiv_rn(loadValue(values, type, i), scales[perHead ? head : 0]);
        cache[(slots[token] * kvHeads + head) * headDim + d] = encode(y, true);
    }
}

// Up to 256 dimensions per head: each lane of a warp holds dimensions lane, lane + 32, ... (8 at most).
constexpr int kMaxDimsPerLane = 8;
constexpr int kAttentionWarps = 4;

template <bool Fp8>
__device__ __forceinline__ float kvValue(const void* cache, std::int64_t index, float scale)
{
    if constexpr (Fp8) {
        return __fmul_rn(decode(static_cast<const std::uint8_t*>(cache)[index], true), scale);
    } else {
        return __bfloat162float(static_cast<const __nv_bfloat16*>(cache)[index]);
    }
}

// Grid (qHeads, batch), kAttentionWarps warps. Each warp runs an online softmax over its share of the tokens
// (t = warp, warp + warps, ...); the warps' partials merge through shared memory at the end.
template <bool Fp8>
__global__ void decodeAttentionKernel(const float* query, std::int64_t qHeads, std::int64_t kvHeads,
    std::int64_t headDim, const void* keys, const void* values, const float* keyScales, const float* valueScales,
    bool perHead, const std::int64_t* slotTable, std::int64_t maxTokens, const std::int64_t* lengths,
    float softmaxScale, float* out)
{
    __shared__ float partialMax[kAttentionWarps];
    __shared__ float partialSum[kAttentionWarps];
    __shared__ float partialAcc[kAttentionWarps][kMaxDimsPerLane * 32];
    const std::int64_t head = blockIdx.x;
    const std::int64_t sequence = blockIdx.y;
    const std::int64_t group = head / (qHeads / kvHeads);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x / 32;
    const float keyScale = Fp8 ? keyScales[perHead ? group : 0] : 1.0f;
    const float valueScale = Fp8 ? valueScales[perHead ? group : 0] : 1.0f;
    const float* q = query + (sequence * qHeads + head) * headDim;
    float qLane[kMaxDimsPerLane];
    float acc[kMaxDimsPerLane];
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
        const std::int64_t d = lane + 32 * i;
        qLane[i] = d < headDim ? q[d] : 0.0f;
        acc[i] = 0.0f;
    }
    float runningMax = -INFINITY;
    float runningSum = 0.0f;
    const std::int64_t length = lengths[sequence];
    for (std::int64_t t = warp; t < length; t += kAttentionWarps) {
        const std::int64_t base = (slotTable[sequence * maxTokens + t] * kvHeads + group) * headDim;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) {
            const std::int64_t d = lane + 32 * i;
            if (d < headDim) {
                dot += qLane[i] * kvValue<Fp8>(keys, base + d, keyScale);
            }
        }
        for (int offset = 16; offset > 0; offset /= 2) {
            dot += __shfl_xor_sync(0xFFFFFFFFu, dot, offset);
        }
        const float score = dot * softmaxScale;
        const float newMax = fmaxf(runningMax, score);
        const float correction = runningMax == -INFINITY ? 0.0f : expf(runningMax - newMax);
        const float p = expf(score - newMax);
        runningSum = runningSum * correction + p;
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) {
            const std::int64_t d = lane + 32 * i;
            const float v = d < headDim ? kvValue<Fp8>(values, base + d, valueScale) : 0.0f;
            acc[i] = acc[i] * correction + p * v;
        }
        runningMax = newMax;
    }
    if (lane == 0) {
        partialMax[warp] = runningMax;
        partialSum[warp] = runningSum;
    }
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
        partialAcc[warp][lane + 32 * i] = acc[i];
    }
    __syncthreads();
    float totalMax = -INFINITY;
    for (int w = 0; w < kAttentionWarps; ++w) {
        totalMax = fmaxf(totalMax, partialMax[w]);
    }
    float totalSum = 0.0f;
    float weights[kAttentionWarps];
    for (int w = 0; w < kAttentionWarps; ++w) {
        weights[w] = partialMax[w] == -INFINITY ? 0.0f : expf(partialMax[w] - totalMax);
        totalSum += partialSum[w] * weights[w];
    }
    for (std::int64_t d = threadIdx.x; d < headDim; d += blockDim.x) {
        float value = 0.0f;
        for (int w = 0; w < kAttentionWarps; ++w) {
            value += partialAcc[w][d] * weights[w];
        }
        out[(sequence * qHeads + head) * headDim + d] = value / totalSum;
    }
}

__global__ void scaleEpilogueKernel(const float* acc, std::int64_t rows, std::int64_t columns, const float* rowScales,
    std::int64_t rowScaleCount, const float* columnScales, std::int64_t columnScaleCount, const float* bias,
    std::uint16_t* out)
{
    const std::int64_t total = rows * columns;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = i / columns;
        const std::int64_t column = i - row * columns;
        float value = acc[i] * rowScales[rowScaleCount == 1 ? 0 : row] * columnScales[columnScaleCount == 1 ? 0 : column];
        if (bias != nullptr) {
            value += bias[column];
        }
        out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(value));
    }
}

} // namespace

void groupScales(const void* input, InputType type, const ScaleGrid& grid, float qmax, float* amax, float* scales)
{
    const std::int64_t count = grid.scaleRows * grid.scaleColumns();
    MISMATCH_CUDA_CHECK(cudaMemsetAsync(amax, 0, static_cast<std::size_t>(count) * sizeof(float), 0));
    if (grid.rows > 0 && grid.columns > 0) {
        const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>(grid.rows, 65535LL * 16));
        groupAmaxKernel<<<blocks, kThreads>>>(input, type, grid, amax);
        MISMATCH_CUDA_CHECK(cudaGetLastError());
    }
    scalesKernel<<<gridFor(count), kThreads>>>(amax, count, qmax, scales);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void encodeScaled(
    const void* input, InputType type, const ScaleGrid& grid, const float* scales, bool e4m3, std::uint8_t* codes)
{
    const std::int64_t total = grid.rows * grid.columns;
    if (total == 0) {
        return;
    }
    encodeKernel<<<gridFor(total), kThreads>>>(input, type, grid, scales, e4m3, codes);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void decodeScaled(const std::uint8_t* codes, const ScaleGrid& grid, const float* scales, bool e4m3, float* out)
{
    const std::int64_t total = grid.rows * grid.columns;
    if (total == 0) {
        return;
    }
    decodeKernel<float><<<gridFor(total), kThreads>>>(codes, grid, scales, e4m3, out);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void decodeScaledToBf16(
    const std::uint8_t* codes, const ScaleGrid& grid, const float* scales, bool e4m3, std::uint16_t* out)
{
    const std::int64_t total = grid.rows * grid.columns;
    if (total == 0) {
        return;
    }
    decodeKernel<std::uint16_t><<<gridFor(total), kThreads>>>(codes, grid, scales, e4m3, out);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void kvAppendFp8(const void* values, InputType type, std::int64_t tokens, std::int64_t kvHeads, std::int64_t headDim,
    const std::int64_t* slots, const float* scales, bool perHead, std::uint8_t* cache)
{
    const std::int64_t total = tokens * kvHeads * headDim;
    if (total == 0) {
        return;
    }
    kvAppendKernel<<<gridFor(total), kThreads>>>(values, type, tokens, kvHeads, headDim, slots, scales, perHead, cache);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void decodeAttention(const float* query, std::int64_t batch, std::int64_t qHeads, std::int64_t kvHeads,
    std::int64_t headDim, const void* keys, const void* values, bool fp8, const float* keyScales,
    const float* valueScales, bool perHead, const std::int64_t* slotTable, std::int64_t maxTokens,
    const std::int64_t* lengths, float softmaxScale, float* out)
{
    if (batch == 0) {
        return;
    }
    const dim3 grid(static_cast<unsigned>(qHeads), static_cast<unsigned>(batch));
    if (fp8) {
        decodeAttentionKernel<true><<<grid, kAttentionWarps * 32>>>(query, qHeads, kvHeads, headDim, keys, values,
            keyScales, valueScales, perHead, slotTable, maxTokens, lengths, softmaxScale, out);
    } else {
        decodeAttentionKernel<false><<<grid, kAttentionWarps * 32>>>(query, qHeads, kvHeads, headDim, keys, values,
            keyScales, valueScales, perHead, slotTable, maxTokens, lengths, softmaxScale, out);
    }
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

void scaleEpilogue(const float* acc, std::int64_t rows, std::int64_t columns, const float* rowScales,
    std::int64_t rowScaleCount, const float* columnScales, std::int64_t columnScaleCount, const float* bias,
    std::uint16_t* out)
{
    const std::int64_t total = rows * columns;
    if (total == 0) {
        return;
    }
    scaleEpilogueKernel<<<gridFor(total), kThreads>>>(
        acc, rows, columns, rowScales, rowScaleCount, columnScales, columnScaleCount, bias, out);
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

int currentDevice()
{
    int device = 0;
    MISMATCH_CUDA_CHECK(cudaGetDevice(&device));
    return device;
}

void setDevice(int index)
{
    MISMATCH_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize()
{
    MISMATCH_CUDA_CHECK(cudaDeviceSynchronize());
}

} // namespace mismatch::cuda::kernels

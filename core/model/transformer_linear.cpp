#include "core/model/transformer_linear.h"

#include "core/common/vector_clones.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace mismatch::model {

namespace {

// A weight of at most this many elements (512 KiB as float32) is widened whole and multiplied by one BLAS call:
// it stays in the cache, and a small model (the demo pair) computes exactly what it computed with float32
// weights. Larger weights multiplied by at most kFusedRows rows of x (decoding) take the fused product below;
// with more rows the product dominates and the weight is widened in blocks of at most 32 MiB for BLAS.
constexpr std::int64_t kSmallBlockElements = 1 << 17;
constexpr std::int64_t kLargeBlockElements = 1 << 23;
constexpr std::int64_t kFusedRows = 32;
// Elements per at::parallel_for task of the widening loop.
constexpr std::int64_t kWidenGrain = 1 << 15;

// The conversions below run on every product: compiled for AVX2 and the baseline (common/vector_clones.h).

MISMATCH_VECTOR_CLONES
void widenBlock(const std::uint16_t* in, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
        std::memcpy(out + i, &bits, sizeof bits);
    }
}

// Nearest even on the dropped half: adding 0x7FFF plus the kept half's last bit carries exactly when the dropped
// half is above 0x8000, or equal with an odd kept half (quant::roundToBFloat16 explains it).
inline std::uint32_t roundedBits(std::uint32_t bits)
{
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
}

inline bool isNan(std::uint32_t bits)
{
    return (bits & 0x7FFFFFFFu) > 0x7F800000u;
}

MISMATCH_VECTOR_CLONES
void narrowBlock(const float* in, std::uint16_t* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, in + i, sizeof bits);
        const std::uint32_t result = isNan(bits) ? (bits | 0x00400000u) : roundedBits(bits); // quiet NaN survives
        out[i] = static_cast<std::uint16_t>(result >> 16);
    }
}

MISMATCH_VECTOR_CLONES
void roundBlock(const float* in, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, in + i, sizeof bits);
        const std::uint32_t result = isNan(bits) ? bits : roundedBits(bits);
        std::memcpy(out + i, &result, sizeof result);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Few rows of x (decoding): the product fused with the widening. Each task widens kRowGroup weight rows into a
// buffer that stays in L1 and takes their dot products with every row of x at once, so the weight is read from
// memory once, in its stored bytes, and never written back as float32. Every output element is one dot product
// summed in float32 in a fixed order (8 lanes over k, then the lanes pairwise, then the tail): a float32 sum of
// the same products as the BLAS one, in another order.

constexpr std::int64_t kRowGroup = 4; // weight rows widened and multiplied together
constexpr std::int64_t kRowsPerTask = 64; // weight rows per parallel task

// y[m * ldy + r] = sum_k x[m * K + k] * w[r * K + k] for m < rows, r < count.
void dotRowsScalar(const float* x, std::int64_t rows, std::int64_t columns, const float* w, std::int64_t count,
    float* y, std::int64_t ldy)
{
    for (std::int64_t m = 0; m < rows; ++m) {
        for (std::int64_t r = 0; r < count; ++r) {
            float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            const std::int64_t vectorEnd = columns / 8 * 8;
            for (std::int64_t k = 0; k < vectorEnd; k += 8) {
                for (int lane = 0; lane < 8; ++lane) {
                    lanes[lane] += x[m * columns + k + lane] * w[r * columns + k + lane];
                }
            }
            float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
            for (std::int64_t k = vectorEnd; k < columns; ++k) {
                sum += x[m * columns + k] * w[r * columns + k];
            }
            y[m * ldy + r] = sum;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define MISMATCH_HAVE_AVX2_KERNEL 1

__attribute__((target("avx2,fma"))) inline float horizontalSum(__m256 v)
{
    // The same order as dotRowsScalar: lanes (0+4), (2+6), (1+5), (3+7), then pairs.
    const __m128 low = _mm256_castps256_ps128(v);
    const __m128 high = _mm256_extractf128_ps(v, 1);
    const __m128 quad = _mm_add_ps(low, high); // 0+4, 1+5, 2+6, 3+7
    const __m128 pairs = _mm_add_ps(quad, _mm_movehl_ps(quad, quad)); // (0+4)+(2+6), (1+5)+(3+7)
    const __m128 total = _mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 0x55));
    return _mm_cvtss_f32(total);
}

__attribute__((target("avx2,fma"))) void dotRowsAvx2(const float* x, std::int64_t rows, std::int64_t columns,
    const float* w, std::int64_t count, float* y, std::int64_t ldy)
{
    const std::int64_t vectorEnd = columns / 8 * 8;
    const auto tail = [&](std::int64_t m, std::int64_t r, float sum) {
        for (std::int64_t k = vectorEnd; k < columns; ++k) {
            sum += x[m * columns + k] * w[r * columns + k];
        }
        y[m * ldy + r] = sum;
    };
    std::int64_t r = 0;
    for (; r + 4 <= count; r += 4) {
        const float* w0 = w + r * columns;
        const float* w1 = w0 + columns;
        const float* w2 = w1 + columns;
        const float* w3 = w2 + columns;
        std::int64_t m = 0;
        for (; m + 2 <= rows; m += 2) {
            const float* x0 = x + m * columns;
            const float* x1 = x0 + columns;
            __m256 a00 = _mm256_setzero_ps(), a01 = _mm256_setzero_ps(), a02 = _mm256_setzero_ps(),
                   a03 = _mm256_setzero_ps(), a10 = _mm256_setzero_ps(), a11 = _mm256_setzero_ps(),
                   a12 = _mm256_setzero_ps(), a13 = _mm256_setzero_ps();
            for (std::int64_t k = 0; k < vectorEnd; k += 8) {
                const __m256 v0 = _mm256_loadu_ps(x0 + k);
                const __m256 v1 = _mm256_loadu_ps(x1 + k);
                __m256 u = _mm256_loadu_ps(w0 + k);
                a00 = _mm256_fmadd_ps(v0, u, a00);
                a10 = _mm256_fmadd_ps(v1, u, a10);
                u = _mm256_loadu_ps(w1 + k);
                a01 = _mm256_fmadd_ps(v0, u, a01);
                a11 = _mm256_fmadd_ps(v1, u, a11);
                u = _mm256_loadu_ps(w2 + k);
                a02 = _mm256_fmadd_ps(v0, u, a02);
                a12 = _mm256_fmadd_ps(v1, u, a12);
                u = _mm256_loadu_ps(w3 + k);
                a03 = _mm256_fmadd_ps(v0, u, a03);
                a13 = _mm256_fmadd_ps(v1, u, a13);
            }
            tail(m, r, horizontalSum(a00));
            tail(m, r + 1, horizontalSum(a01));
            tail(m, r + 2, horizontalSum(a02));
            tail(m, r + 3, horizontalSum(a03));
            tail(m + 1, r, horizontalSum(a10));
            tail(m + 1, r + 1, horizontalSum(a11));
            tail(m + 1, r + 2, horizontalSum(a12));
            tail(m + 1, r + 3, horizontalSum(a13));
        }
        for (; m < rows; ++m) {
            const float* x0 = x + m * columns;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
                   a3 = _mm256_setzero_ps();
            for (std::int64_t k = 0; k < vectorEnd; k += 8) {
                const __m256 v0 = _mm256_loadu_ps(x0 + k);
                a0 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(w0 + k), a0);
                a1 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(w1 + k), a1);
                a2 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(w2 + k), a2);
                a3 = _mm256_fmadd_ps(v0, _mm256_loadu_ps(w3 + k), a3);
            }
            tail(m, r, horizontalSum(a0));
            tail(m, r + 1, horizontalSum(a1));
            tail(m, r + 2, horizontalSum(a2));
            tail(m, r + 3, horizontalSum(a3));
        }
    }
    for (; r < count; ++r) {
        const float* w0 = w + r * columns;
        for (std::int64_t m = 0; m < rows; ++m) {
            __m256 a0 = _mm256_setzero_ps();
            for (std::int64_t k = 0; k < vectorEnd; k += 8) {
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + m * columns + k), _mm256_loadu_ps(w0 + k), a0);
            }
            tail(m, r, horizontalSum(a0));
        }
    }
}
#endif

bool haveAvx2Fma()
{
#if defined(MISMATCH_HAVE_AVX2_KERNEL)
    static const bool have = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }();
    return have;
#else
    return false;
#endif
}

// y [rows, outFeatures] = x [rows, inFeatures] W^T, W given by `weightRows`.
void fusedProduct(const float* x, std::int64_t rows, std::int64_t outFeatures, std::int64_t inFeatures,
    const WeightRows& weightRows, float* y)
{
    const bool avx2 = haveAvx2Fma();
    at::parallel_for(0, outFeatures, kRowsPerTask, [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> buffer(static_cast<std::size_t>(kRowGroup * inFeatures));
        std::vector<float> out(static_cast<std::size_t>(rows * kRowGroup));
        for (std::int64_t group = begin; group < end; group += kRowGroup) {
            const std::int64_t count = std::min(kRowGroup, end - group);
            weightRows(group, group + count, buffer.data());
#if defined(MISMATCH_HAVE_AVX2_KERNEL)
            if (avx2) {
                dotRowsAvx2(x, rows, inFeatures, buffer.data(), count, out.data(), kRowGroup);
            } else {
                dotRowsScalar(x, rows, inFeatures, buffer.data(), count, out.data(), kRowGroup);
            }
#else
            dotRowsScalar(x, rows, inFeatures, buffer.data(), count, out.data(), kRowGroup);
#endif
            for (std::int64_t m = 0; m < rows; ++m) {
                std::copy(out.data() + m * kRowGroup, out.data() + m * kRowGroup + count, y + m * outFeatures + group);
            }
        }
    });
}

} // namespace

void widenBFloat16(const std::uint16_t* in, float* out, std::int64_t count)
{
    at::parallel_for(0, count, kWidenGrain,
        [&](std::int64_t begin, std::int64_t end) { widenBlock(in + begin, out + begin, end - begin); });
}

void narrowToBFloat16(const float* in, std::uint16_t* out, std::int64_t count)
{
    at::parallel_for(0, count, kWidenGrain,
        [&](std::int64_t begin, std::int64_t end) { narrowBlock(in + begin, out + begin, end - begin); });
}

void roundToBFloat16Grid(const float* in, float* out, std::int64_t count)
{
    at::parallel_for(0, count, kWidenGrain,
        [&](std::int64_t begin, std::int64_t end) { roundBlock(in + begin, out + begin, end - begin); });
}

bool widenedWhole(std::int64_t outFeatures, std::int64_t inFeatures)
{
    return outFeatures * inFeatures <= kSmallBlockElements;
}

at::Tensor blockwiseLinear(const at::Tensor& x, std::int64_t outFeatures, std::int64_t inFeatures,
    const WeightRows& rows, const at::Tensor& bias)
{
    assert(x.size(-1) == inFeatures && x.scalar_type() == at::kFloat);
    const std::int64_t xRows = inFeatures == 0 ? 0 : x.numel() / inFeatures;
    std::vector<std::int64_t> shape = x.sizes().vec();
    shape.back() = outFeatures;
    if (xRows <= kFusedRows && !widenedWhole(outFeatures, inFeatures) && x.device().is_cpu()) {
        // Few rows, a weight larger than one cache-sized block: the fused product (above).
        const at::Tensor input = x.contiguous();
        at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
        fusedProduct(input.data_ptr<float>(), xRows, outFeatures, inFeatures, rows, out.data_ptr<float>());
        if (bias.defined()) {
            out.add_(bias);
        }
        return out;
    }
    const std::int64_t blockRows
        = std::min(outFeatures, std::max<std::int64_t>(1, kLargeBlockElements / std::max<std::int64_t>(1, inFeatures)));
    at::Tensor buffer = at::empty({blockRows, inFeatures}, at::TensorOptions().dtype(at::kFloat));
    if (blockRows >= outFeatures) {
        rows(0, outFeatures, buffer.data_ptr<float>());
        return at::linear(x, buffer, bias);
    }
    at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    for (std::int64_t begin = 0; begin < outFeatures; begin += blockRows) {
        const std::int64_t count = std::min(blockRows, outFeatures - begin);
        const at::Tensor block = buffer.narrow(0, 0, count);
        rows(begin, begin + count, block.data_ptr<float>());
        out.narrow(-1, begin, count).copy_(at::linear(x, block, bias.defined() ? bias.narrow(0, begin, count) : bias));
    }
    return out;
}

at::Tensor linearWithWidening(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias)
{
    const at::ScalarType dtype = x.scalar_type();
    const at::Tensor b = bias.defined() ? bias.to(dtype) : at::Tensor();
    if (weight.scalar_type() == dtype) {
        return at::linear(x, weight, b);
    }
    const bool gradients = at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
    if (gradients || dtype != at::kFloat || !x.device().is_cpu() || !weight.device().is_cpu() || weight.dim() != 2) {
        return at::linear(x, weight.to(dtype), b);
    }
    const at::Tensor stored = weight.contiguous();
    const std::int64_t columns = stored.size(1);
    WeightRows widen;
    if (stored.scalar_type() == at::kBFloat16) {
        widen = [&](std::int64_t begin, std::int64_t end, float* out) {
            widenBFloat16(static_cast<const std::uint16_t*>(stored.data_ptr()) + begin * columns, out,
                (end - begin) * columns);
        };
    } else {
        widen = [&](std::int64_t begin, std::int64_t end, float* out) {
            at::from_blob(out, {end - begin, columns}, at::TensorOptions().dtype(at::kFloat))
                .copy_(stored.narrow(0, begin, end - begin));
        };
    }
    return blockwiseLinear(x, stored.size(0), columns, widen, b);
}

} // namespace mismatch::model

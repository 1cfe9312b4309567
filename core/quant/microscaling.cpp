#include "core/quant/microscaling.h"

#include "core/common/error.h"
#include "core/quant/fp8.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>

namespace mismatch::quant {

namespace {

// Rows per at::parallel_for chunk: about this many elements a chunk (as quantize.cpp).
constexpr std::int64_t kGrainElements = 1 << 15;
// NVFP4's second-level scale divides the amax by E2M1's largest magnitude times E4M3's: 6 * 448 (exact in float32).
constexpr float kNvfp4TensorDivisor = 2688.0f;
constexpr float kE4m3Max = 448.0f;
// ModelOpt clamps a weight block's scale to E4M3's smallest subnormal before the cast (_cast_per_block_scale_to_fp8).
constexpr float kSmallestBlockScale = 0x1p-9f;
// vLLM's FLOAT4_E2M1_MAX_RECIPROCAL (1 / 6) as the float32 its tensors multiply by: 0x3E2AAAAB.
constexpr float kOneSixth = static_cast<float>(1.0 / 6.0);
// Exponents of the elements' largest normals: 448 = 1.75 * 2^8 (E4M3), 6 = 1.5 * 2^2 (E2M1).
constexpr int kE4m3MaxExponent = 8;
constexpr int kE2m1MaxExponent = 2;

std::int64_t rowGrain(std::int64_t columns)
{
    return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(1, columns));
}

// The largest magnitude of `count` values: NaN skipped (a comparison with NaN is false, as fmaxf skips it),
// infinities counted.
float largestMagnitude(const float* values, std::int64_t count)
{
    float amax = 0.0f;
    for (std::int64_t i = 0; i < count; ++i) {
        const float magnitude = std::fabs(values[i]);
        if (magnitude > amax) {
            amax = magnitude;
        }
    }
    return amax;
}

float roundToE4m3(float value)
{
    return roundToFp8(value, Fp8Format::E4M3);
}

// An MX block (weights or one token's activations): out[i] = element(in[i] / X) * X, X from the block's amax; an
// infinite amax makes X NaN, so the block is NaN.
void roundMxBlock(const float* in, float* out, std::int64_t count, bool e4m3Elements)
{
    const float amax = largestMagnitude(in, count);
    const float scale = std::isfinite(amax)
        ? powerOfTwo(mxSharedExponent(amax, e4m3Elements ? kE4m3MaxExponent : kE2m1MaxExponent))
        : std::numeric_limits<float>::quiet_NaN();
    for (std::int64_t i = 0; i < count; ++i) {
        const float y = in[i] / scale;
        out[i] = (e4m3Elements ? roundToE4m3(y) : roundToE2m1(y)) * scale;
    }
}

// One token of NVFP4 activations (see the header): `columns` values, blocks of 16.
void roundNvfp4Token(const float* in, float* out, std::int64_t columns)
{
    constexpr std::int64_t kBlock = 16;
    const float tokenAmax = largestMagnitude(in, columns);
    if (!std::isfinite(tokenAmax)) {
        std::fill(out, out + columns, std::numeric_limits<float>::quiet_NaN());
        return;
    }
    const float tokenScale = tokenAmax / kNvfp4TensorDivisor; // what vLLM reads as input_scale
    const float globalScale = 1.0f / tokenScale; // input_global_scale_inv
    const float reciprocal = 1.0f / globalScale; // ref_nvfp4_quant's get_reciprocal(global_scale)
    const bool usable = std::isfinite(globalScale);
    for (std::int64_t c0 = 0; c0 < columns; c0 += kBlock) {
        float outputScale = 0.0f;
        float dequantizeScale = 0.0f;
        if (usable) {
            const float amax = largestMagnitude(in + c0, kBlock);
            const float blockScale = roundToE4m3(std::min(globalScale * (amax * kOneSixth), kE4m3Max));
            if (blockScale != 0.0f) {
                outputScale = 1.0f / (blockScale * reciprocal);
                dequantizeScale = blockScale / globalScale;
            }
        }
        // vLLM clamps x * output_scale to +-6 before rounding; roundToE2m1 saturates at 6, the same thing.
        for (std::int64_t i = c0; i < c0 + kBlock; ++i) {
            out[i] = roundToE2m1(in[i] * outputScale) * dequantizeScale;
        }
    }
}

} // namespace

const std::array<float, 16>& e2m1DecodeTable()
{
    static const std::array<float, 16> table
        = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    return table;
}

float decodeE2m1(std::uint8_t code)
{
    return e2m1DecodeTable()[code & 0xFu];
}

std::uint8_t encodeE2m1(float value)
{
    const std::uint32_t bits = detail::floatBits(value);
    const auto sign = static_cast<std::uint8_t>((bits >> 28) & 0x8u);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    // Programmer error: E2M1 has no NaN (see the header).
    assert(magnitude <= 0x7F800000u);
    if (magnitude >= 0x40C00000u) { // 6.0f: 6 and above, infinity included, saturate to the largest code
        return static_cast<std::uint8_t>(sign | 0x7u);
    }
    // E2M1 is a binary format with one mantissa bit and smallest normal exponent 0 (bias 1, subnormal 0.5): fp8.h's
    // rounding, whose result stays within code 7 here (6 is on the grid).
    return static_cast<std::uint8_t>(sign | detail::roundMagnitude(magnitude, 1, 0));
}

float roundToE2m1(float value)
{
    return std::isnan(value) ? value : decodeE2m1(encodeE2m1(value));
}

int mxSharedExponent(float amax, int elementMaxExponent)
{
    // Programmer error: the largest magnitude of a finite block.
    assert(amax >= 0.0f && std::isfinite(amax));
    const std::uint32_t bits = detail::floatBits(amax) & 0x7FFFFFFFu;
    int exponent = -126; // an all-zero block: log2(0 + FP32_MIN_NORMAL)
    if (bits >= 0x00800000u) {
        exponent = static_cast<int>(bits >> 23) - 127;
    } else if (bits != 0) {
        exponent = (31 - __builtin_clz(bits)) - 149; // a subnormal is bits * 2^-149
    }
    return std::max(exponent - elementMaxExponent, -127);
}

float powerOfTwo(int exponent)
{
    // Programmer error: a float32 power of two.
    assert(exponent >= -149 && exponent <= 127);
    return exponent >= -126 ? detail::bitsFloat(static_cast<std::uint32_t>(exponent + 127) << 23)
                            : detail::bitsFloat(1u << (exponent + 149));
}

float nvfp4TensorScale(float amax)
{
    return amax / kNvfp4TensorDivisor;
}

float nvfp4WeightBlockScale(float blockAmax, float tensorScale)
{
    float scale = blockAmax / (6.0f * tensorScale);
    if (scale == 0.0f) {
        scale = 1.0f;
    }
    return roundToE4m3(std::min(std::max(scale, kSmallestBlockScale), kE4m3Max));
}

MicroscalingWeight encodeMicroscalingWeight(const at::Tensor& weight, const at::Tensor& blockAmax, WeightFormat format)
{
    const std::int64_t block = microscalingBlockSize(format);
    // Programmer errors: a microscaling format, a 2-D float32 weight of whole blocks and its blocks' amax.
    assert(block > 0 && weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.is_contiguous());
    const std::int64_t rows = weight.size(0);
    const std::int64_t columns = weight.size(1);
    const std::int64_t blocks = columns / block;
    assert(columns % block == 0 && blockAmax.numel() == rows * blocks);
    MicroscalingWeight result;
    result.codes = at::empty({rows, columns}, at::TensorOptions().dtype(at::kByte));
    result.scales = at::empty({rows, blocks}, at::TensorOptions().dtype(at::kFloat));
    const float* values = weight.data_ptr<float>();
    const float* amax = blockAmax.data_ptr<float>();
    std::uint8_t* codes = result.codes.data_ptr<std::uint8_t>();
    float* scales = result.scales.data_ptr<float>();
    float tensorScale = 0.0f;
    if (format == WeightFormat::Nvfp4) {
        float tensorAmax = 0.0f;
        for (std::int64_t i = 0; i < rows * blocks; ++i) {
            tensorAmax = std::max(tensorAmax, amax[i]);
        }
        tensorScale = nvfp4TensorScale(tensorAmax);
    }
    const int maxExponent = format == WeightFormat::Mxfp8 ? kE4m3MaxExponent : kE2m1MaxExponent;
    at::parallel_for(0, rows, rowGrain(columns), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
            for (std::int64_t b = 0; b < blocks; ++b) {
                const float* in = values + r * columns + b * block;
                std::uint8_t* out = codes + r * columns + b * block;
                float scale = 0.0f;
                if (format != WeightFormat::Nvfp4) {
                    scale = powerOfTwo(mxSharedExponent(amax[r * blocks + b], maxExponent));
                } else if (tensorScale != 0.0f) {
                    scale = nvfp4WeightBlockScale(amax[r * blocks + b], tensorScale) * tensorScale;
                }
                scales[r * blocks + b] = scale;
                if (scale == 0.0f) { // NVFP4 only: a zero weight or an underflowing block scale (see the header)
                    std::fill(out, out + block, std::uint8_t {0});
                } else if (format == WeightFormat::Mxfp8) {
                    for (std::int64_t i = 0; i < block; ++i) {
                        out[i] = encodeFp8(in[i] / scale, Fp8Format::E4M3);
                    }
                } else {
                    for (std::int64_t i = 0; i < block; ++i) {
                        out[i] = encodeE2m1(in[i] / scale);
                    }
                }
            }
        }
    });
    return result;
}

at::Tensor fakeQuantizeMicroscalingActivations(const at::Tensor& activations, ActivationFormat format)
{
    const std::int64_t block = microscalingBlockSize(format);
    // Programmer errors: a microscaling format and the float32 contiguous CPU tensor quantize.cpp hands over.
    assert(block > 0 && activations.scalar_type() == at::kFloat && activations.is_contiguous());
    if (activations.dim() == 0) {
        throw InputError("", "activations", "expected a [..., hidden] tensor, got a scalar");
    }
    const std::int64_t columns = activations.size(-1);
    if (columns % block != 0) {
        throw InputError("", "activations",
            toString(format) + " activations take whole blocks of " + std::to_string(block)
                + " along the hidden dimension, got a hidden size of " + std::to_string(columns));
    }
    const std::int64_t rows = columns == 0 ? 0 : activations.numel() / columns;
    at::Tensor output = at::empty_like(activations);
    const float* in = activations.data_ptr<float>();
    float* out = output.data_ptr<float>();
    at::parallel_for(0, rows, rowGrain(columns), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
            if (format == ActivationFormat::Nvfp4) {
                roundNvfp4Token(in + r * columns, out + r * columns, columns);
                continue;
            }
            for (std::int64_t c0 = 0; c0 < columns; c0 += block) {
                roundMxBlock(in + r * columns + c0, out + r * columns + c0, block, format == ActivationFormat::Mxfp8);
            }
        }
    });
    return output;
}

} // namespace mismatch::quant

#pragma once
// Number formats from their definitions, in float64, for the tests: the value of every FP8 (e4m3fn, e5m2) and E2M1
// code from its bit layout, rounding by exhaustive search over the codes, and the microscaling formats (MXFP8, MXFP4,
// NVFP4) written from the definitions core/quant/microscaling.h cites, rounding to float32 exactly where those
// definitions do:
//   - OCP Microscaling Formats (MX) v1.0, section 6.3 (Algorithm 1), with microsoft/microxcaling mx/mx_ops.py
//     (_shared_exponents, _quantize_mx) for a zero block (amax counted as 2^-126) and the smallest scale (2^-127);
//   - NVFP4 weights: NVIDIA/Model-Optimizer modelopt/torch/quantization/qtensor/nvfp4_tensor.py at commit
//     a2fbac7bad8ab446d3f8783dadb0c3366eb0ad73 (get_weights_scaling_factor_2: amax / (6 * 448);
//     get_weights_scaling_factor: per-block amax / (6 * that), zeros set to 1; _cast_per_block_scale_to_fp8: clamp to
//     [2^-9, 448], cast to e4m3; quantize: x / (scale * scale_2); dequantize: q * (scale * scale_2));
//   - NVFP4 activations: vllm-project/vllm vllm/model_executor/layers/quantization/utils/nvfp4_emulation_utils.py at
//     commit 055e47c28003156421365af985d676fc921cb075 (ref_nvfp4_quant, ref_nvfp4_quant_dequant), with the global
//     scale 1 / (amax_token / (6 * 448)) (vllm modelopt.py: input_global_scale_inv = 1 / input_global_scale).
// A float64 operation on float32 operands rounded once to float32 equals the float32 operation (53 >= 2 * 24 + 2
// bits), so f32(a op b) below is the float32 operation the definitions name. Nothing here calls core/quant's code:
// the enums name the formats only.
#include "core/quant/formats.h"
#include "core/quant/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace mismatch::test {

// ---- FP8 from the format definitions ----

struct Fp8Definition {
    int exponentBits;
    int mantissaBits;
    int bias;
    bool ieeeSpecials; // e5m2: exponent all ones is inf (mantissa 0) or NaN; e4m3fn: only S.1111.111 is NaN
};

inline Fp8Definition definitionOf(quant::Fp8Format format)
{
    return format == quant::Fp8Format::E4M3 ? Fp8Definition {4, 3, 7, false} : Fp8Definition {5, 2, 15, true};
}

// Value of every code in float64: (-1)^S * 2^(E - bias) * 1.M, subnormals 2^(1 - bias) * 0.M.
inline std::array<double, 256> definitionTable(quant::Fp8Format format)
{
    const Fp8Definition d = definitionOf(format);
    const int maxExponent = (1 << d.exponentBits) - 1;
    const int maxMantissa = (1 << d.mantissaBits) - 1;
    std::array<double, 256> table {};
    for (int code = 0; code < 256; ++code) {
        const bool negative = (code >> 7) != 0;
        const int exponent = (code >> d.mantissaBits) & maxExponent;
        const int mantissa = code & maxMantissa;
        double magnitude = 0.0;
        if (!d.ieeeSpecials && exponent == maxExponent && mantissa == maxMantissa) {
            magnitude = std::numeric_limits<double>::quiet_NaN();
        } else if (d.ieeeSpecials && exponent == maxExponent) {
            magnitude
                = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
        } else if (exponent == 0) {
            magnitude = std::ldexp(static_cast<double>(mantissa), 1 - d.bias - d.mantissaBits);
        } else {
            magnitude
                = std::ldexp(static_cast<double>((1 << d.mantissaBits) + mantissa), exponent - d.bias - d.mantissaBits);
        }
        table[static_cast<std::size_t>(code)] = negative ? -magnitude : magnitude;
    }
    return table;
}

struct Reference {
    std::array<double, 256> table;
    double maxFinite = 0.0;
    int positiveMaxCode = 0;
};

inline Reference referenceFor(quant::Fp8Format format)
{
    Reference r;
    r.table = definitionTable(format);
    for (int code = 0; code < 128; ++code) {
        if (std::isfinite(r.table[static_cast<std::size_t>(code)])
            && r.table[static_cast<std::size_t>(code)] > r.maxFinite) {
            r.maxFinite = r.table[static_cast<std::size_t>(code)];
            r.positiveMaxCode = code;
        }
    }
    return r;
}

// Encoding by exhaustive search: the nearest finite code of x's sign, ties to the even code (last mantissa
// bit 0), |x| > max saturating to +-max (satfinite), NaN -> 0x7F.
inline int referenceEncode(double x, const Reference& r)
{
    if (std::isnan(x)) {
        return 0x7F;
    }
    const int signBit = std::signbit(x) ? 0x80 : 0;
    if (std::fabs(x) > r.maxFinite) {
        return signBit | r.positiveMaxCode;
    }
    int best = -1;
    double bestDistance = 0.0;
    for (int magnitudeCode = 0; magnitudeCode < 128; ++magnitudeCode) {
        const int code = signBit | magnitudeCode;
        const double value = r.table[static_cast<std::size_t>(code)];
        if (!std::isfinite(value)) {
            continue;
        }
        const double distance = std::fabs(value - x);
        if (best < 0 || distance < bestDistance || (distance == bestDistance && (code & 1) == 0)) {
            best = code;
            bestDistance = distance;
        }
    }
    return best;
}

// The nearest e4m3fn value of x (saturating at +-448), NaN for NaN.
inline double e4m3ReferenceRound(double x)
{
    static const Reference reference = referenceFor(quant::Fp8Format::E4M3);
    return reference.table[static_cast<std::size_t>(referenceEncode(x, reference))];
}

// ---- E2M1 from its definition: S.EE.M, exponent bias 1, no infinities or NaN ----

inline std::array<double, 16> e2m1DefinitionTable()
{
    std::array<double, 16> table {};
    for (int code = 0; code < 16; ++code) {
        const int exponent = (code >> 1) & 0x3;
        const int mantissa = code & 0x1;
        // Subnormals (E = 0): 2^(1 - bias) * 0.M = M / 2; normals 2^(E - bias) * 1.M.
        const double magnitude = exponent == 0 ? 0.5 * mantissa : std::ldexp(1.0 + 0.5 * mantissa, exponent - 1);
        table[static_cast<std::size_t>(code)] = (code & 0x8) ? -magnitude : magnitude;
    }
    return table;
}

// The nearest code of x's sign by exhaustive search, ties to the even code (mantissa bit 0), |x| above the largest
// value (6) saturating to it. x is not NaN.
inline int e2m1ReferenceEncode(double x)
{
    static const std::array<double, 16> table = e2m1DefinitionTable();
    const int signBit = std::signbit(x) ? 0x8 : 0;
    int best = -1;
    double bestDistance = 0.0;
    for (int magnitudeCode = 0; magnitudeCode < 8; ++magnitudeCode) {
        const int code = signBit | magnitudeCode;
        const double distance = std::fabs(table[static_cast<std::size_t>(code)] - x);
        if (best < 0 || distance < bestDistance || (distance == bestDistance && (code & 1) == 0)) {
            best = code;
            bestDistance = distance;
        }
    }
    return best;
}

inline double e2m1ReferenceRound(double x)
{
    static const std::array<double, 16> table = e2m1DefinitionTable();
    return std::isnan(x) ? x : table[static_cast<std::size_t>(e2m1ReferenceEncode(x))];
}

// ---- The microscaling formats ----

inline float f32(double value)
{
    return static_cast<float>(value);
}

// floor(log2(x)) for x > 0 by its definition: the largest integer k with 2^k <= x.
inline int referenceFloorLog2(double x)
{
    int k = 0;
    while (std::ldexp(1.0, k) > x) {
        --k;
    }
    while (std::ldexp(1.0, k + 1) <= x) {
        ++k;
    }
    return k;
}

// Largest magnitude, NaN skipped, infinities counted.
inline double referenceAmax(const float* x, std::int64_t count)
{
    double amax = 0.0;
    for (std::int64_t i = 0; i < count; ++i) {
        if (!std::isnan(x[i])) {
            amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        }
    }
    return amax;
}

// MX (OCP v1.0 Algorithm 1) on rows whose length is a multiple of 32, blocks of 32: X = 2^max(floor(log2(amax)) - emax_elem, -127)
// (an all-zero block as amax = 2^-126), P = element(x / X) with the element's rounding (nearest even, clamping to the
// largest normal), out = P * X; a block with an infinite amax is NaN. `scales` gets each block's X.
inline std::vector<float> mxReference(const std::vector<float>& x, bool e4m3Elements, std::vector<float>* scales = nullptr)
{
    constexpr std::int64_t kBlock = 32;
    const int elementMaxExponent = e4m3Elements ? 8 : 2; // 448 = 1.75 * 2^8, 6 = 1.5 * 2^2
    std::vector<float> out(x.size());
    if (scales) {
        scales->clear();
    }
    for (std::size_t b0 = 0; b0 < x.size(); b0 += kBlock) {
        const double amax = referenceAmax(x.data() + b0, kBlock);
        double scale = std::numeric_limits<double>::quiet_NaN();
        if (std::isfinite(amax)) {
            const int exponent = amax == 0.0 ? -126 : referenceFloorLog2(amax);
            scale = std::ldexp(1.0, std::max(exponent - elementMaxExponent, -127));
        }
        if (scales) {
            scales->push_back(f32(scale));
        }
        for (std::size_t i = b0; i < b0 + kBlock; ++i) {
            const double y = static_cast<double>(x[i]) / scale;
            out[i] = f32((e4m3Elements ? e4m3ReferenceRound(y) : e2m1ReferenceRound(y)) * scale);
        }
    }
    return out;
}

// NVFP4 weights (ModelOpt), blocks of 16 along each row. `scales` gets each block's d = sf * s2.
inline std::vector<float> nvfp4WeightReference(const std::vector<float>& x, std::vector<float>* scales = nullptr)
{
    constexpr std::int64_t kBlock = 16;
    const float tensorScale = f32(referenceAmax(x.data(), static_cast<std::int64_t>(x.size())) / 2688.0);
    const float sixTensorScale = f32(6.0 * tensorScale);
    std::vector<float> out(x.size());
    if (scales) {
        scales->clear();
    }
    for (std::size_t b0 = 0; b0 < x.size(); b0 += kBlock) {
        float d = 0.0f;
        if (tensorScale != 0.0f) {
            float b = f32(referenceAmax(x.data() + b0, kBlock) / sixTensorScale);
            if (b == 0.0f) {
                b = 1.0f;
            }
            b = std::min(std::max(b, std::ldexp(1.0f, -9)), 448.0f);
            d = f32(e4m3ReferenceRound(b) * tensorScale);
        }
        if (scales) {
            scales->push_back(d);
        }
        for (std::size_t i = b0; i < b0 + kBlock; ++i) {
            // A zero tensor scale or block factor gives zeros.
            out[i] = d == 0.0f ? 0.0f : f32(e2m1ReferenceRound(f32(static_cast<double>(x[i]) / d)) * d);
        }
    }
    return out;
}

// NVFP4 activations (vLLM's ref_nvfp4_quant + ref_nvfp4_quant_dequant with each token's own global scale), rows of
// `columns` values, blocks of 16.
inline std::vector<float> nvfp4ActivationReference(const std::vector<float>& x, std::int64_t columns)
{
    constexpr std::int64_t kBlock = 16;
    const float oneSixth = f32(1.0 / 6.0); // vLLM's FLOAT4_E2M1_MAX_RECIPROCAL in float32
    std::vector<float> out(x.size());
    for (std::size_t r0 = 0; r0 < x.size(); r0 += static_cast<std::size_t>(columns)) {
        const double tokenAmax = referenceAmax(x.data() + r0, columns);
        if (!std::isfinite(tokenAmax)) {
            std::fill(out.begin() + static_cast<std::ptrdiff_t>(r0),
                out.begin() + static_cast<std::ptrdiff_t>(r0) + columns, std::numeric_limits<float>::quiet_NaN());
            continue;
        }
        const float tokenScale = f32(tokenAmax / 2688.0);
        const float globalScale = tokenScale == 0.0f ? std::numeric_limits<float>::infinity() : f32(1.0 / tokenScale);
        const float reciprocal = f32(1.0 / globalScale);
        for (std::size_t b0 = r0; b0 < r0 + static_cast<std::size_t>(columns); b0 += kBlock) {
            float outputScale = 0.0f; // a zero block scale, or a token without a finite global scale: zeros
            float dequantizeScale = 0.0f;
            if (std::isfinite(globalScale)) {
                const float amax = f32(referenceAmax(x.data() + b0, kBlock));
                const float scaled = f32(static_cast<double>(globalScale) * f32(static_cast<double>(amax) * oneSixth));
                const float blockScale = f32(e4m3ReferenceRound(std::min(scaled, 448.0f)));
                if (blockScale != 0.0f) {
                    outputScale = f32(1.0 / f32(static_cast<double>(blockScale) * reciprocal));
                    dequantizeScale = f32(static_cast<double>(blockScale) / globalScale);
                }
            }
            for (std::size_t i = b0; i < b0 + kBlock; ++i) {
                const float y = f32(static_cast<double>(x[i]) * outputScale);
                const double clamped = std::isnan(y) ? y : std::min(6.0, std::max(-6.0, static_cast<double>(y)));
                out[i] = f32(e2m1ReferenceRound(clamped) * dequantizeScale);
            }
        }
    }
    return out;
}

// The fake-quantized weight [rows, columns] (row-major, columns a multiple of the block) of a microscaling format, and
// its blocks' factors in row-major block order.
inline std::vector<float> microscalingWeightReference(
    quant::WeightFormat format, const std::vector<float>& x, std::vector<float>* scales = nullptr)
{
    if (format == quant::WeightFormat::Nvfp4) {
        return nvfp4WeightReference(x, scales);
    }
    return mxReference(x, format == quant::WeightFormat::Mxfp8, scales);
}

// The fake-quantized activations [tokens, columns] (row-major) of a microscaling format.
inline std::vector<float> microscalingActivationReference(
    quant::ActivationFormat format, const std::vector<float>& x, std::int64_t columns)
{
    if (format == quant::ActivationFormat::Nvfp4) {
        return nvfp4ActivationReference(x, columns);
    }
    return mxReference(x, format == quant::ActivationFormat::Mxfp8);
}

} // namespace mismatch::test

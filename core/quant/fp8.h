#pragma once
// FP8 codes, bit-exact on the CPU: encode float32 -> uint8 and decode uint8 -> float32 for the two OCP FP8
// formats. This is the reference the CUDA kernels are tested against, so every rule below is exact.
//
//   e4m3fn  S.EEEE.MMM  bias 7,  no infinities, NaN = S.1111.111 (0x7F, 0xFF), max finite 448 = 1.75 * 2^8,
//           min normal 2^-6, min subnormal 2^-9.
//   e5m2    S.EEEEE.MM  bias 15, IEEE-like: inf = S.11111.00, NaN = S.11111.{01,10,11}, max finite
//           57344 = 1.75 * 2^15, min normal 2^-14, min subnormal 2^-16.
//
// Encoding = NVIDIA's `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)` (cuda_fp8.hpp; on sm_89+ the PTX
// `cvt.rn.satfinite.{e4m3,e5m2}x2.f32`), which is what FP8 inference engines use:
//   - finite x is rounded to nearest, ties to even (the code whose last mantissa bit is 0), correctly: the
//     float32 input is rounded once, on its exact value;
//   - |x| above the largest finite value, including +-inf, saturates to +-max (e4m3 0x7E / 0xFE = +-448,
//     e5m2 0x7B / 0xFB = +-57344): "satfinite", no overflow to inf or NaN;
//   - NaN of either sign and any payload gives the positive canonical NaN code 0x7F (cuda_fp8.hpp
//     canonicalises the NaN to 0x7FFFFFFF before converting, so the sign is dropped);
//   - magnitudes at or below half the min subnormal round to a zero of the input's sign (0x00 / 0x80).
// Decoding is exact (every FP8 value is a float32); NaN codes decode to a quiet NaN, e5m2 inf to +-inf.
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace mismatch::quant {

enum class Fp8Format { E4M3, E5M2 };

struct Fp8Traits {
    int exponentBits;
    int mantissaBits;
    int bias;
    float maxFinite; // 448 or 57344
    float minNormal; // 2^-6 or 2^-14
    float minSubnormal; // 2^-9 or 2^-16
    std::uint8_t maxFiniteCode; // 0x7E or 0x7B
    std::uint8_t nanCode; // what encode gives for NaN: 0x7F for both
};
const Fp8Traits& fp8Traits(Fp8Format format);
const char* toString(Fp8Format format); // "e4m3" or "e5m2"

// Scalar codecs (defined inline below so that the tensor loops in core/quant inline them).
inline std::uint8_t encodeFp8(float value, Fp8Format format);
float decodeFp8(std::uint8_t code, Fp8Format format);
// decode(encode(value)): the nearest FP8 value (saturating), as float32.
float roundToFp8(float value, Fp8Format format);
// All 256 decoded values, indexed by code.
const std::array<float, 256>& fp8DecodeTable(Fp8Format format);

// Elementwise on tensors (any floating dtype, converted to float32 first, which is exact for f16/bf16);
// CPU loops split with at::parallel_for. encode gives a kByte (uint8) tensor of the same shape, decode
// takes one and gives float32. Tensors on another device are computed on the CPU and moved back.
at::Tensor encodeFp8(const at::Tensor& values, Fp8Format format);
at::Tensor decodeFp8(const at::Tensor& codes, Fp8Format format);
at::Tensor roundToFp8(const at::Tensor& values, Fp8Format format);

namespace detail {

inline std::uint32_t floatBits(float value)
{
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
}

inline float bitsFloat(std::uint32_t bits)
{
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

// Rounds the magnitude bits of a float32 (sign cleared, finite) to a binary format with `mantissaBits`
// explicit mantissa bits and smallest normal exponent `minNormalExponent` (unbiased), round to nearest
// even, with subnormals. Returns the target's magnitude code (biased exponent << mantissaBits | mantissa),
// which may exceed the target's largest finite code: overflow handling is the caller's. Shared by FP8,
// FP16 and BF16 so that all of them round by one rule.
inline std::uint32_t roundMagnitude(std::uint32_t absBits, int mantissaBits, int minNormalExponent)
{
    // |x| = significand * 2^(exponent - 23), significand < 2^24 (float32 subnormals: exponent -126, no
    // implicit bit).
    const int biasedExponent = static_cast<int>(absBits >> 23);
    const std::uint32_t fraction = absBits & 0x7FFFFFu;
    const int exponent = biasedExponent == 0 ? -126 : biasedExponent - 127;
    const std::uint32_t significand = biasedExponent == 0 ? fraction : (fraction | 0x800000u);
    // The target binade: subnormals share the smallest normal exponent. Its spacing is
    // 2^(binade - mantissaBits), i.e. 2^shift units of the significand.
    const int binade = exponent > minNormalExponent ? exponent : minNormalExponent;
    const int shift = 23 - mantissaBits + (binade - exponent);
    if (shift >= 25) {
        return 0; // |x| < 2^24 units <= half the spacing: rounds to zero (a tie is impossible here)
    }
    std::uint32_t steps = significand >> shift; // |x| / spacing, truncated
    if (shift > 0) {
        const std::uint32_t remainder = significand & ((1u << shift) - 1u);
        const std::uint32_t half = 1u << (shift - 1);
        if (remainder > half || (remainder == half && (steps & 1u))) {
            ++steps; // round to nearest, ties to the even step
        }
    }
    // Codes are contiguous in magnitude: code = steps + (binade - minNormalExponent) << mantissaBits, which
    // also carries a rounded-up mantissa into the next exponent.
    return steps + (static_cast<std::uint32_t>(binade - minNormalExponent) << mantissaBits);
}

} // namespace detail

inline std::uint8_t encodeFp8(float value, Fp8Format format)
{
    // Largest finite magnitudes as float32 bits: 448 = 0x43E00000, 57344 = 0x47600000.
    const bool e4m3 = format == Fp8Format::E4M3;
    const std::uint32_t maxFiniteBits = e4m3 ? 0x43E00000u : 0x47600000u;
    const std::uint32_t bits = detail::floatBits(value);
    const auto sign = static_cast<std::uint8_t>((bits >> 24) & 0x80u);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) {
        return 0x7F; // NaN: canonical, sign dropped
    }
    if (magnitude > maxFiniteBits) {
        return static_cast<std::uint8_t>(sign | (e4m3 ? 0x7Eu : 0x7Bu)); // satfinite, +-inf included
    }
    // Within range the rounded code cannot pass the max finite code (max is a grid point).
    return static_cast<std::uint8_t>(sign | detail::roundMagnitude(magnitude, e4m3 ? 3 : 2, e4m3 ? -6 : -14));
}

// Float32, CPU, contiguous copy of a floating tensor (the tensor itself when it already is one); InputError
// naming `what` for an undefined or non-floating tensor. The input of every quantizer.
at::Tensor cpuFloat(const at::Tensor& values, const char* what);

} // namespace mismatch::quant

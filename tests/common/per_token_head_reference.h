#pragma once
// vLLM's per-token-head KV formats (fp8_per_token_head, int8_per_token_head) written from their upstream definition,
// for test_quant (against quant::quantizePerTokenHead) and test_engine (the engine's cache against KV round-tripped
// here). Independent of core/quant: the e4m3 grid is built from the format's definition.
//
// Upstream: vllm-project/vllm PR #38378, vllm/v1/attention/ops/triton_reshape_and_cache_flash.py
// _reshape_cache_per_token_head. For each token and KV head, x loaded as float32,
//   k_scale = tl.maximum(tl.max(tl.abs(x)) / QUANT_MAX, 1e-6)       stored as a float32 scale
//   q       = tl.clamp(x * (1.0 / k_scale), QUANT_MIN, QUANT_MAX)   stored by tl.store into the cache's dtype
// with QUANT_MAX/MIN 448/-448 for float8_e4m3fn (get_fp8_min_max; Triton's float32 -> fp8e4nv cast rounds to nearest
// even) and 127/-128 for int8 (the store converts with fptosi, toward zero: vLLM's
// tests/quantization/test_per_token_kv_cache.py says "INT8 Triton stores truncate"). The attention reads code x
// scale. Here in float64, rounded to float32 where the kernel's float32 operations round (a float64 quotient or
// product of float32 operands rounded once to float32 equals the float32 operation; code x scale is exact in
// float64). Rows holding a NaN or an inf are the emulation's choice, not vLLM's (quantize.h), and not covered here.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mismatch::test {

// The non-negative e4m3 (OCP E4M3FN) values of codes 0 .. 126 from the definition: 2^(E - 7) * 1.M, subnormals
// 2^-6 * 0.M; code 127 (S.1111.111) is NaN and left out.
inline const std::array<double, 127>& e4m3Magnitudes()
{
    static const std::array<double, 127> values = [] {
        std::array<double, 127> table {};
        for (int code = 0; code < 127; ++code) {
            const int exponent = code >> 3;
            const int mantissa = code & 7;
            table[static_cast<std::size_t>(code)]
                = exponent == 0 ? std::ldexp(mantissa, -9) : std::ldexp(8 + mantissa, exponent - 10);
        }
        return table;
    }();
    return values;
}

// The e4m3 value nearest to y (|y| <= 448), ties to the even code (last mantissa bit 0); the sign of y kept.
inline double roundToE4m3(double y)
{
    const std::array<double, 127>& magnitudes = e4m3Magnitudes();
    const double magnitude = std::fabs(y);
    int best = 0;
    for (int code = 1; code < 127; ++code) {
        const double distance = std::fabs(magnitudes[static_cast<std::size_t>(code)] - magnitude);
        const double bestDistance = std::fabs(magnitudes[static_cast<std::size_t>(best)] - magnitude);
        if (distance < bestDistance || (distance == bestDistance && (code & 1) == 0)) {
            best = code;
        }
    }
    return std::signbit(y) ? -magnitudes[static_cast<std::size_t>(best)] : magnitudes[static_cast<std::size_t>(best)];
}

struct PerTokenHeadReference {
    std::vector<float> out; // code x scale, [rows, dim]
    std::vector<float> scales; // [rows]
    std::vector<double> codes; // [rows, dim]
    std::int64_t clamped = 0; // rows whose largest element's x * (1 / scale) passed QUANT_MAX before the clamp
    std::int64_t belowMax = 0; // rows whose largest element's x * (1 / scale) fell short of QUANT_MAX
};

// Rows of `dim` finite float32 values, each quantized with its own scale.
inline PerTokenHeadReference referencePerTokenHead(const std::vector<float>& x, std::int64_t dim, bool fp8)
{
    const double qmax = fp8 ? 448.0 : 127.0;
    const double qmin = fp8 ? -448.0 : -128.0;
    const auto minimumScale = static_cast<float>(1e-6); // Triton's float32 constant for the literal 1e-6
    const auto rows = static_cast<std::int64_t>(x.size()) / dim;
    PerTokenHeadReference r;
    r.out.resize(x.size());
    r.codes.resize(x.size());
    r.scales.resize(static_cast<std::size_t>(rows));
    for (std::int64_t row = 0; row < rows; ++row) {
        const float* in = x.data() + row * dim;
        double amax = 0.0;
        for (std::int64_t d = 0; d < dim; ++d) {
            amax = std::max(amax, std::fabs(static_cast<double>(in[d])));
        }
        float scale = static_cast<float>(amax / qmax);
        scale = scale < minimumScale ? minimumScale : scale;
        const auto inverse = static_cast<float>(1.0 / static_cast<double>(scale));
        for (std::int64_t d = 0; d < dim; ++d) {
            const auto y = static_cast<float>(static_cast<double>(in[d]) * static_cast<double>(inverse));
            if (std::fabs(static_cast<double>(in[d])) == amax && amax > 0.0) {
                r.clamped += std::fabs(static_cast<double>(y)) > qmax ? 1 : 0;
                r.belowMax += std::fabs(static_cast<double>(y)) < qmax ? 1 : 0;
            }
            const double clamped = std::min(qmax, std::max(qmin, static_cast<double>(y)));
            const double code = fp8 ? roundToE4m3(clamped) : std::trunc(clamped);
            const auto i = static_cast<std::size_t>(row * dim + d);
            r.codes[i] = code;
            r.out[i] = static_cast<float>(code * static_cast<double>(scale));
        }
        r.scales[static_cast<std::size_t>(row)] = scale;
    }
    return r;
}

} // namespace mismatch::test

#pragma once
// vLLM's per-token-head KV formats (fp8_per_token_head, int8_per_token_head) written from their upstream definition,
// for test_quant (against quant::quantizePerTokenHead) and test_engine (the engine's cache against KV round-tripped
// here). Independent of core/quant: e4m3 rounding is number_format_reference.h's (its code table built from the
// format's definition, searched exhaustively).
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
#include "tests/common/number_format_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace mismatch::test {

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
            // |clamped| <= 448: the nearest e4m3fn value, ties to the even code, the sign kept (-0 for a negative
            // value that rounds to zero).
            const double code = fp8 ? e4m3ReferenceRound(clamped) : std::trunc(clamped);
            const auto i = static_cast<std::size_t>(row * dim + d);
            r.codes[i] = code;
            r.out[i] = static_cast<float>(code * static_cast<double>(scale));
        }
        r.scales[static_cast<std::size_t>(row)] = scale;
    }
    return r;
}

} // namespace mismatch::test

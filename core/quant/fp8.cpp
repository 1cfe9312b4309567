#include "core/quant/fp8.h"

#include "core/common/error.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

namespace mismatch::quant {

namespace {

// Elements per at::parallel_for chunk: large enough that thread hand-off is negligible.
constexpr std::int64_t kGrain = 1 << 15;

constexpr Fp8Traits kE4M3 {4, 3, 7, 448.0f, 0x1p-6f, 0x1p-9f, 0x7E, 0x7F};
constexpr Fp8Traits kE5M2 {5, 2, 15, 57344.0f, 0x1p-14f, 0x1p-16f, 0x7B, 0x7F};

std::array<float, 256> buildDecodeTable(Fp8Format format)
{
    const Fp8Traits& t = fp8Traits(format);
    const int exponentMask = (1 << t.exponentBits) - 1;
    const int mantissaMask = (1 << t.mantissaBits) - 1;
    std::array<float, 256> table {};
    for (int code = 0; code < 256; ++code) {
        const int exponent = (code >> t.mantissaBits) & exponentMask;
        const int mantissa = code & mantissaMask;
        float magnitude = 0.0f;
        if (format == Fp8Format::E4M3 && exponent == exponentMask && mantissa == mantissaMask) {
            magnitude = std::numeric_limits<float>::quiet_NaN();
        } else if (format == Fp8Format::E5M2 && exponent == exponentMask) {
            magnitude
                = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
        } else if (exponent == 0) {
            // subnormal: mantissa * 2^(1 - bias - mantissaBits)
            magnitude = std::ldexp(static_cast<float>(mantissa), 1 - t.bias - t.mantissaBits);
        } else {
            // normal: (2^mantissaBits + mantissa) * 2^(exponent - bias - mantissaBits)
            magnitude
                = std::ldexp(static_cast<float>((1 << t.mantissaBits) + mantissa), exponent - t.bias - t.mantissaBits);
        }
        table[static_cast<std::size_t>(code)] = (code & 0x80) ? -magnitude : magnitude;
    }
    return table;
}


} // namespace

// Float32 CPU contiguous copy (or the tensor itself when it already is one).
at::Tensor cpuFloat(const at::Tensor& values, const char* what)
{
    if (!values.defined()) {
        throw InputError("", what, "undefined tensor");
    }
    if (!at::isFloatingType(values.scalar_type())) {
        throw InputError(
            "", what, std::string("expected a floating tensor, got ") + c10::toString(values.scalar_type()));
    }
    return values.to(at::kCPU).to(at::kFloat).contiguous();
}

const Fp8Traits& fp8Traits(Fp8Format format)
{
    return format == Fp8Format::E4M3 ? kE4M3 : kE5M2;
}

const char* toString(Fp8Format format)
{
    return format == Fp8Format::E4M3 ? "e4m3" : "e5m2";
}

const std::array<float, 256>& fp8DecodeTable(Fp8Format format)
{
    static const std::array<float, 256> e4m3 = buildDecodeTable(Fp8Format::E4M3);
    static const std::array<float, 256> e5m2 = buildDecodeTable(Fp8Format::E5M2);
    return format == Fp8Format::E4M3 ? e4m3 : e5m2;
}

float decodeFp8(std::uint8_t code, Fp8Format format)
{
    return fp8DecodeTable(format)[code];
}

float roundToFp8(float value, Fp8Format format)
{
    return fp8DecodeTable(format)[encodeFp8(value, format)];
}

at::Tensor encodeFp8(const at::Tensor& values, Fp8Format format)
{
    const at::Tensor input = cpuFloat(values, "fp8 encode input");
    at::Tensor codes = at::empty(input.sizes(), input.options().dtype(at::kByte));
    const float* in = input.data_ptr<float>();
    std::uint8_t* out = codes.data_ptr<std::uint8_t>();
    at::parallel_for(0, input.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            out[i] = encodeFp8(in[i], format);
        }
    });
    return codes.to(values.device());
}

at::Tensor decodeFp8(const at::Tensor& codes, Fp8Format format)
{
    if (!codes.defined() || codes.scalar_type() != at::kByte) {
        throw InputError("", "fp8 decode input", "expected a uint8 tensor of FP8 codes");
    }
    const at::Tensor input = codes.to(at::kCPU).contiguous();
    at::Tensor values = at::empty(input.sizes(), input.options().dtype(at::kFloat));
    const std::uint8_t* in = input.data_ptr<std::uint8_t>();
    float* out = values.data_ptr<float>();
    const float* table = fp8DecodeTable(format).data();
    at::parallel_for(0, input.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            out[i] = table[in[i]];
        }
    });
    return values.to(codes.device());
}

at::Tensor roundToFp8(const at::Tensor& values, Fp8Format format)
{
    const at::Tensor input = cpuFloat(values, "fp8 round input");
    at::Tensor rounded = at::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = rounded.data_ptr<float>();
    const float* table = fp8DecodeTable(format).data();
    at::parallel_for(0, input.numel(), kGrain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            out[i] = table[encodeFp8(in[i], format)];
        }
    });
    return rounded.to(values.device());
}

} // namespace mismatch::quant

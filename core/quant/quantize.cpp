#include "core/quant/quantize.h"

#include "core/common/error.h"
#include "core/common/fresh_pages.h"
#include "core/common/message_text.h"
#include "core/common/output_check.h"
#include "core/common/vector_clones.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/transformer_linear.h"
#include "core/quant/fp8.h"
#include "core/quant/microscaling.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

namespace mismatch::quant {

namespace {

// Rows per at::parallel_for chunk is chosen so that a chunk holds about this many elements.
constexpr std::int64_t kGrainElements = 1 << 15;

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    return (a + b - 1) / b;
}

std::int64_t rowGrain(std::int64_t columns)
{
    return std::max<std::int64_t>(1, kGrainElements / std::max<std::int64_t>(1, columns));
}

// Which elements of a row-major [rows, columns] matrix share a scale: row r uses scale row
// (r / rowDivisor) % scaleRows, and each run of columnBlock columns of it its own scale column.
struct ScaleLayout {
    std::int64_t rows = 0;
    std::int64_t columns = 0;
    std::int64_t rowDivisor = 1;
    std::int64_t scaleRows = 1;
    std::int64_t columnBlock = 1;

    std::int64_t scaleColumns() const { return columns == 0 ? 1 : ceilDiv(columns, columnBlock); }
    std::int64_t scaleRow(std::int64_t row) const { return (row / rowDivisor) % scaleRows; }
};

// The elementwise part of a scaled format: y -> grid value (in units of the scale).
struct Fp8Grid {
    Fp8Format format;
    const float* table;
    float operator()(float y) const { return table[encodeFp8(y, format)]; }
};

struct IntGrid {
    float low;
    float high;
    float operator()(float y) const
    {
        float q = std::nearbyint(y); // ties to even in the default rounding mode
        // Comparisons leave a NaN untouched, so it propagates.
        if (q < low) {
            q = low;
        }
        if (q > high) {
            q = high;
        }
        return q;
    }
};

struct ScaledFormat {
    bool fp8 = false;
    Fp8Format fp8Format = Fp8Format::E4M3;
    float qmax = 1.0f;
    float qmin = -1.0f;
};

ScaledFormat scaledFormat(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Fp8E4m3:
        return {true, Fp8Format::E4M3, 448.0f, -448.0f};
    case WeightFormat::Fp8E5m2:
        return {true, Fp8Format::E5M2, 57344.0f, -57344.0f};
    case WeightFormat::Int8:
        return {false, Fp8Format::E4M3, 127.0f, -127.0f};
    case WeightFormat::Int4:
        return {false, Fp8Format::E4M3, 7.0f, -8.0f};
    default:
        break;
    }
    return {};
}

ScaledFormat scaledFormat(Fp8Format format)
{
    const float max = fp8Traits(format).maxFinite;
    return {true, format, max, -max};
}

// The largest magnitude among `count` float32 values read as bits, NaN skipped, and in `top` the largest
// magnitude bits with NaN counted (>= 0x7F800000: some value is not finite). For non-NaN floats the magnitude bits
// order like the magnitudes, so an integer max finds the float max exactly: one plain max reduction (vectorized),
// and a second pass that skips NaN only when the first met one.
MISMATCH_VECTOR_CLONES
std::uint32_t magnitudeMax32(const std::uint32_t* bits, std::int64_t count, std::uint32_t* top)
{
    std::uint32_t all = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        all = std::max(all, bits[i] & 0x7FFFFFFFu);
    }
    *top = all;
    if (all <= 0x7F800000u) {
        return all;
    }
    std::uint32_t amax = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t magnitude = bits[i] & 0x7FFFFFFFu;
        amax = magnitude > 0x7F800000u ? amax : std::max(amax, magnitude);
    }
    return amax;
}

// The same over bfloat16 bits, returned as float32 bits (a bf16 value is the top half of its float32).
MISMATCH_VECTOR_CLONES
std::uint32_t magnitudeMax16(const std::uint16_t* bits, std::int64_t count, std::uint32_t* top)
{
    std::uint16_t all = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        all = std::max(all, static_cast<std::uint16_t>(bits[i] & 0x7FFFu));
    }
    *top = static_cast<std::uint32_t>(all) << 16;
    if (all <= 0x7F80u) {
        return *top;
    }
    std::uint16_t amax = 0;
    for (std::int64_t i = 0; i < count; ++i) {
        const auto magnitude = static_cast<std::uint16_t>(bits[i] & 0x7FFFu);
        amax = magnitude > 0x7F80u ? amax : std::max(amax, magnitude);
    }
    return static_cast<std::uint32_t>(amax) << 16;
}

// A quantizer's input, row-major: float32 values, or bfloat16 bits read as they are stored (every bf16 value is
// a float32 value, so the results are those of the widened tensor, without holding a float32 copy of it).
struct Elements {
    const float* f32 = nullptr;
    const std::uint16_t* bf16 = nullptr;

    Elements(const float* values) : f32(values) {}
    explicit Elements(const std::uint16_t* bits) : bf16(bits) {}

    float at(std::int64_t i) const
    {
        if (f32) {
            return f32[i];
        }
        const std::uint32_t bits = static_cast<std::uint32_t>(bf16[i]) << 16;
        float value;
        std::memcpy(&value, &bits, sizeof value);
        return value;
    }
    // magnitudeMax over [offset, offset + count).
    std::uint32_t magnitudeMax(std::int64_t offset, std::int64_t count, std::uint32_t* top) const
    {
        return f32 ? magnitudeMax32(reinterpret_cast<const std::uint32_t*>(f32 + offset), count, top)
                   : magnitudeMax16(bf16 + offset, count, top);
    }
};

// Per-group amax as a float32 [scaleRows, scaleColumns] tensor. With `requireFinite`, an inf or NaN element
// throws InputError naming it; otherwise NaN is skipped and inf counts.
at::Tensor groupAmax(const Elements& in, const ScaleLayout& layout, bool requireFinite)
{
    const std::int64_t scaleColumns = layout.scaleColumns();
    // Pass 1, parallel over rows: amax of every row's column blocks, and its first non-finite column.
    std::vector<float> rowAmax(static_cast<std::size_t>(layout.rows * scaleColumns), 0.0f);
    std::vector<std::int64_t> firstBad(static_cast<std::size_t>(layout.rows), -1);
    at::parallel_for(0, layout.rows, rowGrain(layout.columns), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
            const std::int64_t row = r * layout.columns;
            std::int64_t& bad = firstBad[static_cast<std::size_t>(r)];
            for (std::int64_t block = 0; block < scaleColumns; ++block) {
                const std::int64_t c0 = block * layout.columnBlock;
                const std::int64_t c1 = std::min(layout.columns, c0 + layout.columnBlock);
                std::uint32_t top = 0;
                const std::uint32_t amax = in.magnitudeMax(row + c0, c1 - c0, &top);
                std::memcpy(&rowAmax[static_cast<std::size_t>(r * scaleColumns + block)], &amax, sizeof amax);
                if (requireFinite && top >= 0x7F800000u && bad < 0) { // blocks run left to right: the row's first
                    for (std::int64_t c = c0; c < c1 && bad < 0; ++c) {
                        bad = std::isfinite(in.at(row + c)) ? -1 : c;
                    }
                }
            }
        }
    });
    if (requireFinite) {
        for (std::int64_t r = 0; r < layout.rows; ++r) {
            if (firstBad[static_cast<std::size_t>(r)] >= 0) {
                const float value = in.at(r * layout.columns + firstBad[static_cast<std::size_t>(r)]);
                throw InputError("",
                    "element [" + std::to_string(r) + ", " + std::to_string(firstBad[static_cast<std::size_t>(r)])
                        + "]",
                    std::string("non-finite weight (") + (std::isnan(value) ? "nan" : "inf")
                        + "): expected finite values");
            }
        }
    }
    // Pass 2: combine rows into their scale rows (max is exact and order-free).
    at::Tensor amax = at::zeros({layout.scaleRows, scaleColumns}, at::kFloat);
    float* out = amax.data_ptr<float>();
    for (std::int64_t r = 0; r < layout.rows; ++r) {
        float* target = out + layout.scaleRow(r) * scaleColumns;
        const float* source = rowAmax.data() + r * scaleColumns;
        for (std::int64_t block = 0; block < scaleColumns; ++block) {
            target[block] = std::max(target[block], source[block]);
        }
    }
    return amax;
}

at::Tensor scalesFromAmax(const at::Tensor& amax, float qmax)
{
    at::Tensor scales = at::empty_like(amax);
    const float* in = amax.data_ptr<float>();
    float* out = scales.data_ptr<float>();
    for (std::int64_t i = 0; i < amax.numel(); ++i) {
        out[i] = scaleFromAmax(in[i], qmax);
    }
    return scales;
}

// Calls block(c0, c1, scale) for every run [c0, c1) of flat element indices that shares one scale (a row's part of
// a scale block), rows split with at::parallel_for.
template <typename Block>
void forEachScaleBlock(const ScaleLayout& layout, const float* scales, Block block)
{
    const std::int64_t scaleColumns = layout.scaleColumns();
    at::parallel_for(0, layout.rows, rowGrain(layout.columns), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end; ++r) {
            const float* rowScales = scales + layout.scaleRow(r) * scaleColumns;
            for (std::int64_t b = 0; b < scaleColumns; ++b) {
                const std::int64_t c0 = r * layout.columns + b * layout.columnBlock;
                const std::int64_t c1 = r * layout.columns + std::min(layout.columns, (b + 1) * layout.columnBlock);
                block(c0, c1, rowScales[b]);
            }
        }
    });
}

// Calls emit(i, in[i] / scale, scale) for every element, with the scale of its group.
template <typename Emit>
void forEachScaled(const float* in, const ScaleLayout& layout, const float* scales, Emit emit)
{
    forEachScaleBlock(layout, scales, [&](std::int64_t c0, std::int64_t c1, float scale) {
        for (std::int64_t i = c0; i < c1; ++i) {
            emit(i, in[i] / scale, scale);
        }
    });
}

template <typename Grid>
void applyScales(const float* in, float* out, const ScaleLayout& layout, const float* scales, Grid grid)
{
    forEachScaled(in, layout, scales, [&](std::int64_t i, float y, float scale) { out[i] = grid(y) * scale; });
}

// Quantize-dequantize `input` (float32, contiguous, CPU) with the given scales ([scaleRows, scaleColumns]).
at::Tensor applyScaledFormat(
    const at::Tensor& input, const ScaleLayout& layout, const at::Tensor& scales, const ScaledFormat& format)
{
    at::Tensor output = at::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    const float* s = scales.data_ptr<float>();
    if (format.fp8) {
        applyScales(in, out, layout, s, Fp8Grid {format.fp8Format, fp8DecodeTable(format.fp8Format).data()});
    } else {
        applyScales(in, out, layout, s, IntGrid {format.qmin, format.qmax});
    }
    return output;
}

template <typename Round> at::Tensor elementwise(const at::Tensor& values, const char* what, Round round)
{
    const at::Tensor input = cpuFloat(values, what);
    at::Tensor output = at::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = output.data_ptr<float>();
    at::parallel_for(0, input.numel(), kGrainElements, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) {
            out[i] = round(in[i]);
        }
    });
    return output;
}

// How a weight's scales are laid out. Tensor granularity keeps the tensor's own rows (for parallelism) and
// maps them all to one scale.
ScaleLayout weightLayout(const at::Tensor& weight, WeightFormat format, Granularity granularity)
{
    weightScaleCount(weight.sizes(), format, granularity); // throws for unsupported pairs and shapes
    const Granularity effective = hasScales(format) ? effectiveGranularity(format, granularity) : Granularity::Tensor;
    ScaleLayout layout;
    const std::int64_t columns = weight.dim() == 0 ? 1 : weight.size(-1);
    layout.columns = columns;
    layout.rows = columns == 0 ? 0 : weight.numel() / columns;
    switch (effective) {
    case Granularity::None:
    case Granularity::Tensor:
        layout.rowDivisor = 1;
        layout.scaleRows = 1;
        layout.columnBlock = std::max<std::int64_t>(1, columns);
        break;
    case Granularity::Channel:
        layout.scaleRows = std::max<std::int64_t>(1, layout.rows);
        layout.columnBlock = std::max<std::int64_t>(1, columns);
        break;
    case Granularity::Block128:
        layout.rowDivisor = 128;
        layout.scaleRows = std::max<std::int64_t>(1, ceilDiv(layout.rows, 128));
        layout.columnBlock = 128;
        break;
    case Granularity::Group128:
    case Granularity::Group32:
    case Granularity::Group16:
        layout.scaleRows = std::max<std::int64_t>(1, layout.rows);
        layout.columnBlock = effective == Granularity::Group128 ? 128 : microscalingBlockSize(format);
        break;
    }
    return layout;
}

struct KvLayout {
    ScaleLayout layout;
    std::int64_t heads = 0;
};

KvLayout kvLayout(const at::Tensor& kv, KvScales mode)
{
    if (kv.dim() != 4) {
        throw InputError("", "kv", "expected a [batch, heads, tokens, head_dim] tensor, got " + shapeText(kv.sizes()));
    }
    KvLayout result;
    result.heads = kv.size(1);
    ScaleLayout& layout = result.layout;
    layout.columns = kv.size(3);
    layout.rows = kv.size(0) * kv.size(1) * kv.size(2);
    layout.columnBlock = std::max<std::int64_t>(1, layout.columns);
    if (mode == KvScales::PerHead) {
        // Rows run over (batch, head, token): the head of row r is (r / tokens) % heads.
        layout.rowDivisor = std::max<std::int64_t>(1, kv.size(2));
        layout.scaleRows = std::max<std::int64_t>(1, result.heads);
    }
    return result;
}

// The KV cache's FP8 format (the only one recipes name: e4m3).
Fp8Format kvFp8(KvFormat)
{
    return Fp8Format::E4M3;
}

// The smallest per-token-head scale: vLLM's kernel takes tl.maximum(amax / qmax, 1e-6) in float32, so the literal
// is the float nearest 1e-6.
constexpr float kMinTokenHeadScale = 1e-6f;

// One row (head_dim values of one token and KV head) of a per-token-head format, as quantizePerTokenHead defines it:
// its code values into `codes` and its scale into `*scale`.
void quantizeTokenHeadRow(
    const float* x, std::int64_t count, bool fp8, const float* fp8Table, float* codes, float* scale)
{
    const float qmax = fp8 ? 448.0f : 127.0f;
    const float qmin = fp8 ? -448.0f : -128.0f;
    float amax = 0.0f;
    bool nan = false;
    for (std::int64_t i = 0; i < count; ++i) {
        const float magnitude = std::fabs(x[i]);
        nan = nan || std::isnan(magnitude);
        amax = magnitude > amax ? magnitude : amax;
    }
    if (nan || std::isinf(amax)) {
        // Non-finite row: every code 0 and a non-finite scale, so the row reads NaN (0 x NaN, 0 x inf).
        std::fill(codes, codes + count, 0.0f);
        *scale = nan ? std::numeric_limits<float>::quiet_NaN() : amax;
        return;
    }
    const float rowScale = std::max(amax / qmax, kMinTokenHeadScale);
    const float inverse = 1.0f / rowScale;
    for (std::int64_t i = 0; i < count; ++i) {
        float y = x[i] * inverse;
        y = y < qmin ? qmin : (y > qmax ? qmax : y);
        // int8: toward zero, and + 0.0f makes a -0 (from -1 < y < 0) the +0 an int8 code reads back as.
        codes[i] = fp8 ? fp8Table[encodeFp8(y, Fp8Format::E4M3)] : std::trunc(y) + 0.0f;
    }
    *scale = rowScale;
}

} // namespace

float scaleFromAmax(float amax, float qmax)
{
    const float scale = amax / qmax;
    return scale == 0.0f ? 1.0f : scale;
}

float roundToBFloat16(float value)
{
    const std::uint32_t bits = detail::floatBits(value);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) {
        return value; // NaN
    }
    // bfloat16 is the top half of a float32 (7 mantissa bits, the same exponent range), so round to nearest
    // even on the low 16 bits: adding 0x7FFF plus the kept half's last bit carries exactly when the dropped
    // half is above 0x8000, or equal with an odd kept half. A carry out of the mantissa bumps the exponent,
    // up to inf. This equals detail::roundMagnitude(magnitude, 7, -126) << 16 with the sign, branch-free.
    const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
    return detail::bitsFloat(rounded & 0xFFFF0000u);
}

float roundToFloat16(float value)
{
    const std::uint32_t bits = detail::floatBits(value);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) {
        return value; // NaN
    }
    const float sign = (bits & 0x80000000u) ? -1.0f : 1.0f;
    // IEEE half: 10 mantissa bits, smallest normal exponent -14, codes from 0x7C00 up are inf.
    const std::uint32_t code = detail::roundMagnitude(magnitude, 10, -14);
    if (code >= 0x7C00u) {
        return sign * std::numeric_limits<float>::infinity();
    }
    const std::uint32_t exponent = code >> 10;
    const std::uint32_t mantissa = code & 0x3FFu;
    if (exponent == 0) {
        return sign * (static_cast<float>(mantissa) * 0x1p-24f); // subnormal: mantissa * 2^-24, exact
    }
    return detail::bitsFloat((bits & 0x80000000u) | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

at::Tensor roundToBFloat16(const at::Tensor& values)
{
    return elementwise(values, "bf16 input", [](float x) { return roundToBFloat16(x); }).to(values.device());
}

at::Tensor roundToFloat16(const at::Tensor& values)
{
    return elementwise(values, "fp16 input", [](float x) { return roundToFloat16(x); }).to(values.device());
}

at::Tensor weightScales(const at::Tensor& weight, WeightFormat format, Granularity granularity)
{
    if (!hasScales(format)) {
        return {};
    }
    if (isMicroscaling(format)) {
        return QuantizedWeight::quantize(weight, format, granularity).scales();
    }
    const at::Tensor input = cpuFloat(weight, "weight");
    const ScaleLayout layout = weightLayout(input, format, granularity);
    return scalesFromAmax(groupAmax(input.data_ptr<float>(), layout, true), scaledFormat(format).qmax);
}

at::Tensor fakeQuantize(const at::Tensor& weight, WeightFormat format, Granularity granularity)
{
    const at::Tensor input = cpuFloat(weight, "weight");
    if (!hasScales(format)) {
        // The granularity is meaningless here and ignored; the finiteness check is the same as for the others.
        groupAmax(input.data_ptr<float>(), weightLayout(input, format, Granularity::None), true);
        const at::Tensor rounded = format == WeightFormat::Bf16 ? roundToBFloat16(input) : roundToFloat16(input);
        return rounded.to(weight.device());
    }
    if (isMicroscaling(format)) {
        // The codes times their block's factor (microscaling.h): the definition's last multiply, done once.
        return QuantizedWeight::quantize(input, format, granularity).dequantize().to(weight.device());
    }
    const ScaleLayout layout = weightLayout(input, format, granularity);
    const ScaledFormat scaled = scaledFormat(format);
    const at::Tensor scales = scalesFromAmax(groupAmax(input.data_ptr<float>(), layout, true), scaled.qmax);
    return applyScaledFormat(input, layout, scales, scaled).to(weight.device());
}

namespace {

// decodeFp8(encodeFp8(y, E4M3)) and encodeFp8(y, E4M3) bit for bit (tested against the scalar codec) without the
// table lookup or branches, so that the loops below vectorize: the activation quantizer runs on every product of
// an FP8 engine, the weight quantizer on every weight of every FP8 engine built. Normal results round the float32
// mantissa to 3 bits, nearest even (a carry moves into the exponent); below 2^-6 the result is a multiple of 2^-9,
// rounded to nearest even by the float32 add-and-subtract of 2^23 (exact there); magnitudes above 448 (inf
// included) saturate to 448; NaN is flagged (the table's NaN, code 0x7F).
struct E4m3Rounding {
    std::uint32_t sign; // bit 31 of y
    std::uint32_t rounded; // float32 bits of the e4m3 magnitude
    std::uint32_t steps; // the magnitude in units of 2^-9 (below 2^-6)
    std::uint32_t nanMask; // all ones when y is NaN
    std::uint32_t subnormalMask; // all ones when the magnitude is below 2^-6
};

__attribute__((always_inline)) inline E4m3Rounding roundE4m3(float y)
{
    std::uint32_t bits;
    std::memcpy(&bits, &y, sizeof bits);
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    const std::uint32_t a = magnitude < 0x43E00000u ? magnitude : 0x43E00000u; // 448 = 0x43E00000
    const std::uint32_t normal = (a + 0x7FFFFu + ((a >> 20) & 1u)) & 0xFFF00000u;
    float small;
    std::memcpy(&small, &a, sizeof small);
    const float steps = (small * 512.0f + 0x1p23f) - 0x1p23f; // nearest even integer, small < 2^-6
    const float subnormal = steps * 0x1p-9f;
    std::uint32_t subnormalBits;
    std::memcpy(&subnormalBits, &subnormal, sizeof subnormalBits);
    E4m3Rounding r;
    r.sign = bits & 0x80000000u;
    r.nanMask = 0u - static_cast<std::uint32_t>(magnitude > 0x7F800000u);
    r.subnormalMask = 0u - static_cast<std::uint32_t>(a < 0x3C800000u); // 2^-6
    r.rounded = (subnormalBits & r.subnormalMask) | (normal & ~r.subnormalMask);
    r.steps = static_cast<std::uint32_t>(steps);
    return r;
}

// out[i] = decodeFp8(encodeFp8(in[i] / scale, E4M3)); y = in[i] / scale is the same float32 division as
// forEachScaled's.
MISMATCH_VECTOR_CLONES
void roundScaledToE4m3(const float* in, float scale, float* out, std::int64_t count, std::uint32_t nanBits)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const E4m3Rounding r = roundE4m3(in[i] / scale);
        const std::uint32_t result = ((r.sign | r.rounded) & ~r.nanMask) | (nanBits & r.nanMask);
        std::memcpy(out + i, &result, sizeof result);
    }
}

// out[i] = encodeFp8(in[i] / scale, E4M3): the code's magnitude is the steps below 2^-6 (8 is the smallest normal,
// code 0x08), else the rounded float32's exponent and top 3 mantissa bits rebased from bias 127 to 7
// ((127 - 7) << 3 = 960); NaN gives 0x7F.
MISMATCH_VECTOR_CLONES
void encodeScaledToE4m3(const float* in, float scale, std::uint8_t* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const E4m3Rounding r = roundE4m3(in[i] / scale);
        const std::uint32_t magnitude = (r.steps & r.subnormalMask) | (((r.rounded >> 20) - 960u) & ~r.subnormalMask);
        const std::uint32_t code = (((r.sign >> 24) | magnitude) & ~r.nanMask) | (0x7Fu & r.nanMask);
        out[i] = static_cast<std::uint8_t>(code);
    }
}

// FP8 e4m3 activations with one dynamic scale per token (row of the last dimension): the float32 input, its
// layout, the scales (amax / 448) and the e4m3 values of x / scale (roundScaledToE4m3), [rows, columns]; with
// `rescaled`, those values times their token's scale (the fake-quantized activations: the same float32 multiply as
// applyScaledFormat's). InputError for a scalar.
struct PerTokenE4m3 {
    at::Tensor scales; // float32 [scale rows]
    at::Tensor values; // float32, the input's shape
};

PerTokenE4m3 perTokenE4m3(const at::Tensor& activations, bool rescaled)
{
    const at::Tensor input = cpuFloat(activations, "activations");
    if (input.dim() == 0) {
        throw InputError("", "activations", "expected a [..., hidden] tensor, got a scalar");
    }
    ScaleLayout layout; // one scale per token: per row of the last dimension
    layout.columns = input.size(-1);
    layout.rows = layout.columns == 0 ? 0 : input.numel() / layout.columns;
    layout.scaleRows = std::max<std::int64_t>(1, layout.rows);
    layout.columnBlock = std::max<std::int64_t>(1, layout.columns);
    PerTokenE4m3 result;
    result.scales = scalesFromAmax(
        groupAmax(input.data_ptr<float>(), layout, false), scaledFormat(Fp8Format::E4M3).qmax);
    result.values = at::empty_like(input);
    const float* in = input.data_ptr<float>();
    float* out = result.values.data_ptr<float>();
    std::uint32_t nanBits;
    std::memcpy(&nanBits, &fp8DecodeTable(Fp8Format::E4M3)[0x7F], sizeof nanBits);
    forEachScaleBlock(layout, result.scales.data_ptr<float>(), [&](std::int64_t c0, std::int64_t c1, float scale) {
        roundScaledToE4m3(in + c0, scale, out + c0, c1 - c0, nanBits);
        if (rescaled) {
            for (std::int64_t i = c0; i < c1; ++i) {
                out[i] *= scale;
            }
        }
    });
    result.scales = result.scales.reshape({layout.scaleRows});
    return result;
}

} // namespace

at::Tensor fakeQuantizeActivations(const at::Tensor& activations, ActivationFormat format)
{
    if (format == ActivationFormat::Bf16) {
        return roundToBFloat16(activations);
    }
    if (isMicroscaling(format)) {
        return fakeQuantizeMicroscalingActivations(cpuFloat(activations, "activations"), format)
            .to(activations.device());
    }
    return perTokenE4m3(activations, true).values.to(activations.device());
}

Fp8ActivationCodes fp8ActivationCodes(const at::Tensor& activations)
{
    PerTokenE4m3 rounded = perTokenE4m3(activations, false);
    const std::int64_t columns = rounded.values.dim() == 0 ? 1 : rounded.values.size(-1);
    const std::int64_t rows = columns == 0 ? 0 : rounded.values.numel() / columns;
    Fp8ActivationCodes result;
    result.scales = std::move(rounded.scales);
    // Exact: an e4m3 value has 4 significant bits, so its float32 is a bf16 with zero low half.
    result.values = at::empty({rows, columns}, at::TensorOptions().dtype(at::kBFloat16));
    model::narrowToBFloat16(rounded.values.data_ptr<float>(), static_cast<std::uint16_t*>(result.values.data_ptr()),
        rounded.values.numel());
    return result;
}

void requireUsableKvScales(const at::Tensor& hostScales)
{
    const float* s = hostScales.data_ptr<float>();
    for (std::int64_t i = 0; i < hostScales.numel(); ++i) {
        if (!(std::isfinite(s[i]) && s[i] > 0.0f)) {
            throw InputError("", "kv scales[" + std::to_string(i) + "]",
                "expected a finite scale > 0, got " + std::to_string(s[i]));
        }
    }
}

PerTokenHeadKv quantizePerTokenHead(const at::Tensor& kv, KvFormat format)
{
    if (!isPerTokenHead(format)) {
        throw InputError("", "kv format", toString(format) + " is not a per-token-head format");
    }
    const at::Tensor input = cpuFloat(kv, "kv");
    if (input.dim() != 4) {
        throw InputError("", "kv", "expected a [batch, heads, tokens, head_dim] tensor, got " + shapeText(kv.sizes()));
    }
    const std::int64_t headDim = input.size(3);
    const std::int64_t rows = input.size(0) * input.size(1) * input.size(2);
    PerTokenHeadKv result;
    result.codes = at::empty(input.sizes(), at::TensorOptions().dtype(at::kFloat));
    result.scales = at::empty({input.size(0), input.size(1), input.size(2)}, at::TensorOptions().dtype(at::kFloat));
    const bool fp8 = format == KvFormat::Fp8PerTokenHead;
    const float* table = fp8DecodeTable(Fp8Format::E4M3).data();
    const float* x = input.data_ptr<float>();
    float* codes = result.codes.data_ptr<float>();
    float* scales = result.scales.data_ptr<float>();
    at::parallel_for(0, rows, rowGrain(headDim), [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t row = begin; row < end; ++row) {
            quantizeTokenHeadRow(x + row * headDim, headDim, fp8, table, codes + row * headDim, scales + row);
        }
    });
    return result;
}

at::Tensor kvScales(const at::Tensor& kv, KvFormat format, KvScales mode)
{
    if (!hasScales(format)) {
        return {};
    }
    if (isPerTokenHead(format)) {
        return quantizePerTokenHead(kv, format).scales;
    }
    const at::Tensor input = cpuFloat(kv, "kv");
    const KvLayout layout = kvLayout(input, mode);
    const float qmax = fp8Traits(kvFp8(format)).maxFinite;
    return scalesFromAmax(groupAmax(input.data_ptr<float>(), layout.layout, false), qmax).reshape({-1});
}

at::Tensor fakeQuantizeKv(const at::Tensor& kv, KvFormat format, KvScales mode, const std::optional<at::Tensor>& scales)
{
    if (!hasScales(format)) {
        return roundToBFloat16(kv);
    }
    if (isPerTokenHead(format)) {
        if (scales && scales->defined()) {
            throw InputError("", "kv scales",
                toString(format) + " computes its scales from each token's own values; none can be given");
        }
        const PerTokenHeadKv rounded = quantizePerTokenHead(kv, format);
        return (rounded.codes * rounded.scales.unsqueeze(3)).to(kv.device());
    }
    const at::Tensor input = cpuFloat(kv, "kv");
    const KvLayout layout = kvLayout(input, mode);
    const ScaledFormat scaled = scaledFormat(kvFp8(format));
    at::Tensor used;
    if (scales && scales->defined()) {
        const std::int64_t expected = mode == KvScales::PerHead ? layout.heads : 1;
        if (!at::isFloatingType(scales->scalar_type()) || scales->numel() != expected) {
            throw InputError("", "kv scales",
                "expected " + std::to_string(expected) + " float scale(s) for " + toString(mode) + ", got "
                    + std::to_string(scales->numel()) + " of " + c10::toString(scales->scalar_type()));
        }
        used = scales->to(at::kCPU).to(at::kFloat).contiguous().reshape({layout.layout.scaleRows, 1});
        requireUsableKvScales(used);
    } else {
        used = scalesFromAmax(groupAmax(input.data_ptr<float>(), layout.layout, false), scaled.qmax);
    }
    return applyScaledFormat(input, layout.layout, used, scaled).to(kv.device());
}

// ---------------------------------------------------------------------------------------------------------------
// QuantizedWeight

namespace {

// E4M3 codes without the table: the code's 7 magnitude bits placed where a float32's exponent and mantissa start
// give the code's value times 2^-120 exactly (exponent bias 127 against 7; the code's subnormals land on float32
// subnormals, whose scaling by 2^120 is exact too), and the two NaN codes (S.1111.111) read as NaN. The value is
// the table's, bit for bit (tested on all 256 codes), then the same float32 multiply by the scale; a loop of shifts
// and masks vectorizes where the table lookup is a gather. The NaN codes are made NaN in the bits (all-ones exponent,
// quiet bit), not by a select on floats: GCC compiled that select into a branch and the loop ran one element at a
// time (a third of an FP8 W8A8 engine's decode time).
MISMATCH_VECTOR_CLONES
void scaleE4m3CodesImpl(const std::uint8_t* codes, float scale, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t code = codes[i];
        const std::uint32_t magnitudeBits = code & 0x7Fu;
        const std::uint32_t nanBits = static_cast<std::uint32_t>(-static_cast<std::int32_t>(magnitudeBits == 0x7Fu))
            & 0x7FC00000u;
        const std::uint32_t bits = ((code & 0x80u) << 24) | (magnitudeBits << 20) | nanBits;
        float value;
        std::memcpy(&value, &bits, sizeof value);
        out[i] = value * 0x1p120f * scale;
    }
}


// The element loops below are compiled for AVX2 and the baseline (common/vector_clones.h): the dequantization runs
// once per matrix product on the engine's hot path. One float32 multiply per element either way.

MISMATCH_VECTOR_CLONES
void scaleCodes(const std::uint8_t* codes, const float* table, float scale, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        out[i] = table[codes[i]] * scale;
    }
}

MISMATCH_VECTOR_CLONES
void scaleIntegers(const std::int8_t* integers, float scale, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        out[i] = static_cast<float>(integers[i]) * scale;
    }
}

// InputError naming the first non-finite element of a bf16 or fp16 tensor (exponent bits all ones).
void requireFinite16(const at::Tensor& values, std::uint16_t exponentMask)
{
    const auto* bits = static_cast<const std::uint16_t*>(values.data_ptr());
    const std::int64_t columns = values.size(-1);
    std::atomic<std::int64_t> first {-1};
    at::parallel_for(0, values.numel(), kGrainElements, [&](std::int64_t begin, std::int64_t end) {
        if (!model::exponentsFinite(bits + begin, end - begin, exponentMask)) {
            for (std::int64_t i = begin; i < end; ++i) {
                if ((bits[i] & exponentMask) == exponentMask) {
                    std::int64_t seen = first.load();
                    while ((seen < 0 || i < seen) && !first.compare_exchange_weak(seen, i)) {
                    }
                    break;
                }
            }
        }
    });
    if (const std::int64_t i = first.load(); i >= 0) {
        const bool nan = (bits[i] & static_cast<std::uint16_t>(~exponentMask) & 0x7FFFu) != 0;
        throw InputError("", "element [" + std::to_string(i / columns) + ", " + std::to_string(i % columns) + "]",
            std::string("non-finite weight (") + (nan ? "nan" : "inf") + "): expected finite values");
    }
}

} // namespace

void scaleE4m3Codes(const std::uint8_t* codes, float scale, float* out, std::int64_t count)
{
    scaleE4m3CodesImpl(codes, scale, out, count);
}

QuantizedWeight QuantizedWeight::quantize(const at::Tensor& weight, WeightFormat format, Granularity granularity)
{
    if (!weight.defined() || weight.dim() != 2) {
        throw InputError("", "weight",
            "expected a 2-D [out, in] weight, got " + (weight.defined() ? shapeText(weight.sizes()) : "none"));
    }
    QuantizedWeight result;
    result.format_ = format;
    result.rows_ = weight.size(0);
    result.columns_ = weight.size(1);
    if (!hasScales(format)) {
        const at::ScalarType dtype = format == WeightFormat::Bf16 ? at::kBFloat16 : at::kHalf;
        const at::Tensor source = weight.requires_grad() ? weight.detach() : weight;
        if (source.scalar_type() == dtype && source.device().is_cpu() && source.is_contiguous()) {
            // Already on the format's grid: keep the tensor itself (rounding would change nothing).
            requireFinite16(source, dtype == at::kBFloat16 ? 0x7F80u : 0x7C00u);
            result.values_ = source;
            return result;
        }
        const at::Tensor input = cpuFloat(source, "weight");
        groupAmax(input.data_ptr<float>(), weightLayout(input, format, Granularity::None), true); // finite check
        if (format == WeightFormat::Bf16) {
            result.values_ = at::empty(input.sizes(), at::TensorOptions().dtype(at::kBFloat16));
            model::narrowToBFloat16(input.data_ptr<float>(), static_cast<std::uint16_t*>(result.values_.data_ptr()),
                input.numel());
        } else {
            result.values_ = roundToFloat16(input).to(at::kHalf); // exact: every value is on the fp16 grid
        }
        return result;
    }
    if (isMicroscaling(format)) {
        // Codes and each block's float32 factor (microscaling.h), from a float32 copy of the weight; the block amax
        // comes with the finiteness check.
        const at::Tensor input = cpuFloat(weight.detach(), "weight");
        const ScaleLayout layout = weightLayout(input, format, granularity);
        MicroscalingWeight encoded
            = encodeMicroscalingWeight(input, groupAmax(input.data_ptr<float>(), layout, true), format);
        result.granularity_ = effectiveGranularity(format, granularity);
        result.scaleRowDivisor_ = 1;
        result.scaleColumnBlock_ = layout.columnBlock;
        result.codes_ = std::move(encoded.codes);
        result.scales_ = std::move(encoded.scales);
        return result;
    }
    // A bf16 weight (what checkpoints store) is read as it is, a block at a time, instead of from a float32 copy
    // of the whole weight: the same values, 2 bytes an element read instead of 4 written and read again.
    const at::Tensor source = weight.detach();
    const bool bf16Source = source.scalar_type() == at::kBFloat16 && source.device().is_cpu() && source.is_contiguous();
    const at::Tensor input = bf16Source ? source : cpuFloat(source, "weight");
    const Elements elements = bf16Source ? Elements(static_cast<const std::uint16_t*>(input.data_ptr()))
                                         : Elements(input.data_ptr<float>());
    const ScaleLayout layout = weightLayout(input, format, granularity);
    const ScaledFormat scaled = scaledFormat(format);
    result.granularity_ = effectiveGranularity(format, granularity);
    result.scaleRowDivisor_ = layout.scaleRows == 1 ? std::max<std::int64_t>(1, layout.rows) : layout.rowDivisor;
    result.scaleColumnBlock_ = layout.columnBlock;
    result.scales_ = scalesFromAmax(groupAmax(elements, layout, true), scaled.qmax);
    // Calls encode(values, offset, count, scale) for every run of elements sharing a scale, values as float32:
    // the input itself, or bf16 widened (exactly) a chunk at a time.
    const auto forEachRun = [&](auto encode) {
        forEachScaleBlock(layout, result.scales_.data_ptr<float>(), [&](std::int64_t c0, std::int64_t c1, float scale) {
            if (elements.f32) {
                encode(elements.f32 + c0, c0, c1 - c0, scale);
                return;
            }
            constexpr std::int64_t kChunk = 512;
            float chunk[kChunk];
            for (std::int64_t offset = c0; offset < c1; offset += kChunk) {
                const std::int64_t count = std::min(kChunk, c1 - offset);
                model::widenBFloat16(elements.bf16 + offset, chunk, count);
                encode(chunk, offset, count, scale);
            }
        });
    };
    if (scaled.fp8) {
        result.codes_ = at::empty(input.sizes(), at::TensorOptions().dtype(at::kByte));
        auto* codes = result.codes_.data_ptr<std::uint8_t>();
        makePagesPresent(codes, static_cast<std::uint64_t>(result.codes_.numel())); // written whole below
        const Fp8Format fp8 = scaled.fp8Format;
        if (fp8 == Fp8Format::E4M3) {
            forEachRun([&](const float* values, std::int64_t offset, std::int64_t count, float scale) {
                encodeScaledToE4m3(values, scale, codes + offset, count);
            });
        } else {
            forEachRun([&](const float* values, std::int64_t offset, std::int64_t count, float scale) {
                for (std::int64_t i = 0; i < count; ++i) {
                    codes[offset + i] = encodeFp8(values[i] / scale, fp8);
                }
            });
        }
    } else {
        result.codes_ = at::empty(input.sizes(), at::TensorOptions().dtype(at::kChar));
        auto* integers = result.codes_.data_ptr<std::int8_t>();
        makePagesPresent(integers, static_cast<std::uint64_t>(result.codes_.numel())); // written whole below
        const IntGrid grid {scaled.qmin, scaled.qmax};
        forEachRun([&](const float* values, std::int64_t offset, std::int64_t count, float scale) {
            for (std::int64_t i = 0; i < count; ++i) {
                integers[offset + i] = static_cast<std::int8_t>(grid(values[i] / scale));
            }
        });
    }
    return result;
}

std::uint64_t QuantizedWeight::storageBytes() const
{
    std::uint64_t bytes = 0;
    for (const at::Tensor* tensor : {&values_, &codes_, &scales_}) {
        bytes += tensor->defined() ? static_cast<std::uint64_t>(tensor->nbytes()) : 0;
    }
    return bytes;
}

void QuantizedWeight::dequantizeRows(std::int64_t begin, std::int64_t end, float* out) const
{
    // Programmer error: rows inside the weight.
    assert(begin >= 0 && begin <= end && end <= rows_);
    const std::int64_t columns = columns_;
    if (values_.defined() && values_.scalar_type() == at::kBFloat16) {
        model::widenBFloat16(
            static_cast<const std::uint16_t*>(values_.data_ptr()) + begin * columns, out, (end - begin) * columns);
        return;
    }
    if (values_.defined()) { // fp16: rare, the library's conversion
        at::Tensor target = at::from_blob(out, {end - begin, columns}, at::TensorOptions().dtype(at::kFloat));
        target.copy_(values_.narrow(0, begin, end - begin));
        return;
    }
    // E4M3 codes (fp8_e4m3, mxfp8) are decoded from their bits; e5m2 and E2M1 codes (mxfp4, nvfp4) through their
    // tables; int8/int4 are integers.
    const bool e4m3Codes = format_ == WeightFormat::Fp8E4m3 || format_ == WeightFormat::Mxfp8;
    const float* table = format_ == WeightFormat::Fp8E5m2 ? fp8DecodeTable(Fp8Format::E5M2).data()
        : format_ == WeightFormat::Mxfp4 || format_ == WeightFormat::Nvfp4 ? e2m1DecodeTable().data()
                                                                             : nullptr;
    const std::int64_t scaleColumns = scales_.size(1);
    const float* scales = scales_.data_ptr<float>();
    at::parallel_for(begin, end, rowGrain(columns), [&](std::int64_t rowBegin, std::int64_t rowEnd) {
        for (std::int64_t r = rowBegin; r < rowEnd; ++r) {
            const float* rowScales = scales + (r / scaleRowDivisor_) * scaleColumns;
            float* target = out + (r - begin) * columns;
            for (std::int64_t block = 0; block < scaleColumns; ++block) {
                const std::int64_t c0 = block * scaleColumnBlock_;
                const std::int64_t count = std::min(columns, c0 + scaleColumnBlock_) - c0;
                if (e4m3Codes) {
                    scaleE4m3CodesImpl(codes_.data_ptr<std::uint8_t>() + r * columns + c0, rowScales[block], target + c0,
                        count);
                } else if (table) {
                    scaleCodes(codes_.data_ptr<std::uint8_t>() + r * columns + c0, table, rowScales[block],
                        target + c0, count);
                } else {
                    scaleIntegers(
                        codes_.data_ptr<std::int8_t>() + r * columns + c0, rowScales[block], target + c0, count);
                }
            }
        }
    });
}

at::Tensor QuantizedWeight::dequantize() const
{
    at::Tensor out = at::empty({rows_, columns_}, at::TensorOptions().dtype(at::kFloat));
    dequantizeRows(0, rows_, out.data_ptr<float>());
    return out;
}

at::Tensor QuantizedWeight::embed(const at::Tensor& ids) const
{
    const at::Tensor flat = ids.to(at::kCPU).to(at::kLong).contiguous().reshape({-1});
    std::vector<std::int64_t> shape = ids.sizes().vec();
    shape.push_back(columns_);
    at::Tensor out = at::empty({flat.numel(), columns_}, at::TensorOptions().dtype(at::kFloat));
    const std::int64_t* index = flat.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < flat.numel(); ++i) {
        TORCH_CHECK(index[i] >= 0 && index[i] < rows_, "embedding id ", index[i], " outside [0, ", rows_, ")");
        dequantizeRows(index[i], index[i] + 1, out.data_ptr<float>() + i * columns_);
    }
    return out.view(shape);
}

std::vector<TensorQuantizeResult> quantizeSafetensorsFile(
    const std::string& inputPath, const std::string& outputPath, const QuantizeFileOptions& options, Progress& progress)
{
    requireOutputNotInput(outputPath, {{inputPath, "input file"}}); // issue 46: `quantize IN IN`, before any work
    if (hasScales(options.format)) {
        effectiveGranularity(options.format, options.granularity); // throws, naming the choices
    }
    progress.update(0.0, "reading " + inputPath);
    const std::shared_ptr<model::SafetensorsFile> file = model::SafetensorsFile::open(inputPath);
    const std::vector<model::TensorInfo>& infos = file->tensors();

    std::vector<TensorQuantizeResult> results;
    std::vector<std::pair<std::string, at::Tensor>> outputs;
    for (std::size_t i = 0; i < infos.size(); ++i) {
        progress.checkCancelled();
        const model::TensorInfo& info = infos[i];
        progress.update(static_cast<double>(i) / static_cast<double>(infos.size()), "quantizing " + info.name);
        const at::Tensor original = file->load(info.name);

        TensorQuantizeResult result;
        result.name = info.name;
        result.shape = info.shape;
        result.inputDtype = model::toString(info.dtype);
        result.inputBytes = info.end - info.begin;
        if (original.dim() != 2) {
            result.quantized = false;
            result.note = std::to_string(original.dim()) + "-D, copied unchanged";
            result.outputDtype = result.inputDtype;
            result.formatBytes = result.inputBytes;
            outputs.emplace_back(info.name, original);
            results.push_back(std::move(result));
            continue;
        }
        at::Tensor quantized;
        try {
            quantized = fakeQuantize(original, options.format, options.granularity);
        } catch (const InputError& error) {
            throw InputError(
                inputPath, info.name + (error.location().empty() ? "" : " " + error.location()), error.detail());
        }
        if (options.keepDtype) {
            quantized = quantized.to(original.scalar_type());
        }
        result.quantized = true;
        result.outputDtype = model::toString(quantized.scalar_type() == at::kFloat ? model::DType::F32
                : quantized.scalar_type() == at::kHalf                             ? model::DType::F16
                                                                                   : model::DType::BF16);
        result.formatBytes = weightStorageBytes(original.sizes(), options.format, options.granularity);
        // Errors of the values written, against the input, in float64.
        const at::Tensor difference = quantized.to(at::kDouble) - original.to(at::kDouble);
        const double errorSquares = difference.pow(2).sum().item<double>();
        const double inputSquares = original.to(at::kDouble).pow(2).sum().item<double>();
        result.relativeRmsError = inputSquares > 0.0 ? std::sqrt(errorSquares / inputSquares)
            : errorSquares > 0.0                     ? std::numeric_limits<double>::infinity()
                                                     : 0.0;
        result.maxAbsError = difference.numel() == 0 ? 0.0 : difference.abs().max().item<double>();
        outputs.emplace_back(info.name, quantized);
        results.push_back(std::move(result));
    }
    progress.checkCancelled();
    progress.update(1.0, "writing " + outputPath);
    std::map<std::string, std::string> metadata = file->metadata();
    metadata["mismatch.quantize.format"] = toString(options.format);
    metadata["mismatch.quantize.granularity"] = toString(options.granularity);
    model::writeSafetensors(outputPath, outputs, metadata);
    return results;
}

} // namespace mismatch::quant

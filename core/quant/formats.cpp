#include "core/quant/formats.h"

#include "core/common/error.h"
#include "core/common/message_text.h"

#include <array>
#include <utility>


namespace mismatch::quant {

namespace {

// One table per enum: the recipe spelling of each value, in enum order (None is not spelled in recipes).
constexpr std::array<std::pair<WeightFormat, const char*>, 9> kWeightFormats = {{
    {WeightFormat::Bf16, "bf16"},
    {WeightFormat::Fp16, "fp16"},
    {WeightFormat::Fp8E4m3, "fp8_e4m3"},
    {WeightFormat::Fp8E5m2, "fp8_e5m2"},
    {WeightFormat::Int8, "int8"},
    {WeightFormat::Int4, "int4"},
    {WeightFormat::Mxfp8, "mxfp8"},
    {WeightFormat::Mxfp4, "mxfp4"},
    {WeightFormat::Nvfp4, "nvfp4"},
}};
constexpr std::array<std::pair<Granularity, const char*>, 6> kGranularities = {{
    {Granularity::Tensor, "tensor"},
    {Granularity::Channel, "channel"},
    {Granularity::Block128, "block128"},
    {Granularity::Group128, "group128"},
    {Granularity::Group32, "group32"},
    {Granularity::Group16, "group16"},
}};
constexpr std::array<std::pair<ActivationFormat, const char*>, 5> kActivationFormats = {{
    {ActivationFormat::Bf16, "bf16"},
    {ActivationFormat::Fp8E4m3, "fp8_e4m3"},
    {ActivationFormat::Mxfp8, "mxfp8"},
    {ActivationFormat::Mxfp4, "mxfp4"},
    {ActivationFormat::Nvfp4, "nvfp4"},
}};
constexpr std::array<std::pair<KvFormat, const char*>, 4> kKvFormats = {{
    {KvFormat::Bf16, "bf16"},
    {KvFormat::Fp8E4m3, "fp8_e4m3"},
    {KvFormat::Fp8PerTokenHead, "fp8_per_token_head"}, // vLLM's spellings (vllm/config/cache.py CacheDType)
    {KvFormat::Int8PerTokenHead, "int8_per_token_head"},
}};
constexpr std::array<std::pair<KvScales, const char*>, 2> kKvScales = {{
    {KvScales::PerTensor, "per_tensor"},
    {KvScales::PerHead, "per_head"},
}};

template <typename Enum, std::size_t N>
std::string nameOf(const std::array<std::pair<Enum, const char*>, N>& table, Enum value)
{
    for (const auto& [entry, name] : table) {
        if (entry == value) {
            return name;
        }
    }
    return "none";
}

template <typename Enum, std::size_t N>
std::optional<Enum> lookUp(const std::array<std::pair<Enum, const char*>, N>& table, std::string_view name)
{
    for (const auto& [entry, spelling] : table) {
        if (name == spelling) {
            return entry;
        }
    }
    return std::nullopt;
}

template <typename Enum, std::size_t N>
std::vector<std::string> spellings(const std::array<std::pair<Enum, const char*>, N>& table)
{
    std::vector<std::string> all;
    for (const auto& entry : table) {
        all.emplace_back(entry.second);
    }
    return all;
}

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    return (a + b - 1) / b;
}

} // namespace

std::string toString(WeightFormat format)
{
    return nameOf(kWeightFormats, format);
}
std::string toString(Granularity granularity)
{
    return nameOf(kGranularities, granularity);
}
std::string toString(ActivationFormat format)
{
    return nameOf(kActivationFormats, format);
}
std::string toString(KvFormat format)
{
    return nameOf(kKvFormats, format);
}
std::string toString(KvScales scales)
{
    return nameOf(kKvScales, scales);
}

double bytesPerElement(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Bf16:
    case WeightFormat::Fp16:
        return 2.0;
    case WeightFormat::Fp8E4m3:
    case WeightFormat::Fp8E5m2:
    case WeightFormat::Int8:
    case WeightFormat::Mxfp8:
        return 1.0;
    case WeightFormat::Int4:
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4:
        return 0.5;
    }
    return 2.0;
}

double bytesPerElement(KvFormat format)
{
    return format == KvFormat::Bf16 ? 2.0 : 1.0;
}

std::vector<Granularity> allowedGranularities(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Fp8E4m3:
    case WeightFormat::Fp8E5m2:
        return {Granularity::Tensor, Granularity::Channel, Granularity::Block128};
    case WeightFormat::Int8:
        return {Granularity::Channel};
    case WeightFormat::Int4:
        return {Granularity::Group128};
    case WeightFormat::Mxfp8:
    case WeightFormat::Mxfp4:
        return {Granularity::Group32};
    case WeightFormat::Nvfp4:
        return {Granularity::Group16};
    case WeightFormat::Bf16:
    case WeightFormat::Fp16:
        break;
    }
    return {};
}

Granularity defaultGranularity(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Fp8E4m3:
    case WeightFormat::Fp8E5m2:
        return Granularity::Block128; // DeepSeek-style block FP8, the spec's example
    case WeightFormat::Int8:
        return Granularity::Channel;
    case WeightFormat::Int4:
        return Granularity::Group128;
    case WeightFormat::Mxfp8:
    case WeightFormat::Mxfp4:
        return Granularity::Group32; // OCP MX v1.0: k = 32
    case WeightFormat::Nvfp4:
        return Granularity::Group16;
    case WeightFormat::Bf16:
    case WeightFormat::Fp16:
        break;
    }
    return Granularity::None;
}

bool isMicroscaling(WeightFormat format)
{
    return format == WeightFormat::Mxfp8 || format == WeightFormat::Mxfp4 || format == WeightFormat::Nvfp4;
}

bool isMicroscaling(ActivationFormat format)
{
    return format == ActivationFormat::Mxfp8 || format == ActivationFormat::Mxfp4 || format == ActivationFormat::Nvfp4;
}

std::int64_t microscalingBlockSize(WeightFormat format)
{
    switch (format) {
    case WeightFormat::Mxfp8:
    case WeightFormat::Mxfp4:
        return 32;
    case WeightFormat::Nvfp4:
        return 16;
    case WeightFormat::Bf16:
    case WeightFormat::Fp16:
    case WeightFormat::Fp8E4m3:
    case WeightFormat::Fp8E5m2:
    case WeightFormat::Int8:
    case WeightFormat::Int4:
        break;
    }
    return 0;
}

std::int64_t microscalingBlockSize(ActivationFormat format)
{
    switch (format) {
    case ActivationFormat::Mxfp8:
        return microscalingBlockSize(WeightFormat::Mxfp8);
    case ActivationFormat::Mxfp4:
        return microscalingBlockSize(WeightFormat::Mxfp4);
    case ActivationFormat::Nvfp4:
        return microscalingBlockSize(WeightFormat::Nvfp4);
    case ActivationFormat::Bf16:
    case ActivationFormat::Fp8E4m3:
        break;
    }
    return 0;
}

bool isSupportedPair(WeightFormat weights, ActivationFormat activations)
{
    switch (activations) {
    case ActivationFormat::Mxfp8:
        return weights == WeightFormat::Mxfp8;
    case ActivationFormat::Mxfp4:
        return weights == WeightFormat::Mxfp4;
    case ActivationFormat::Nvfp4:
        return weights == WeightFormat::Nvfp4;
    case ActivationFormat::Fp8E4m3:
        return !isMicroscaling(weights) && weights != WeightFormat::Int4;
    case ActivationFormat::Bf16:
        break;
    }
    return true;
}

std::optional<WeightFormat> parseWeightFormat(std::string_view name)
{
    return lookUp(kWeightFormats, name);
}
std::optional<Granularity> parseGranularity(std::string_view name)
{
    return lookUp(kGranularities, name);
}
std::optional<ActivationFormat> parseActivationFormat(std::string_view name)
{
    return lookUp(kActivationFormats, name);
}
std::optional<KvFormat> parseKvFormat(std::string_view name)
{
    return lookUp(kKvFormats, name);
}
std::optional<KvScales> parseKvScales(std::string_view name)
{
    return lookUp(kKvScales, name);
}

std::vector<std::string> weightFormatChoices()
{
    return spellings(kWeightFormats);
}
std::vector<std::string> granularityChoices()
{
    return spellings(kGranularities);
}
std::vector<std::string> activationFormatChoices()
{
    return spellings(kActivationFormats);
}
std::vector<std::string> kvFormatChoices()
{
    return spellings(kKvFormats);
}
std::vector<std::string> kvScalesChoices()
{
    return spellings(kKvScales);
}

bool hasScales(WeightFormat format)
{
    return format != WeightFormat::Bf16 && format != WeightFormat::Fp16;
}
bool hasScales(KvFormat format)
{
    return format != KvFormat::Bf16;
}
bool hasScales(ActivationFormat format)
{
    return format != ActivationFormat::Bf16;
}
bool isPerTokenHead(KvFormat format)
{
    return format == KvFormat::Fp8PerTokenHead || format == KvFormat::Int8PerTokenHead;
}
double bytesPerElement(ActivationFormat format)
{
    switch (format) {
    case ActivationFormat::Bf16:
        return 2.0;
    case ActivationFormat::Fp8E4m3:
    case ActivationFormat::Mxfp8:
        return 1.0;
    case ActivationFormat::Mxfp4:
    case ActivationFormat::Nvfp4:
        return 0.5;
    }
    return 2.0;
}

bool isSupported(WeightFormat format, Granularity granularity)
{
    if (!hasScales(format)) {
        return granularity == Granularity::None;
    }
    for (Granularity allowed : allowedGranularities(format)) {
        if (allowed == granularity) {
            return true;
        }
    }
    return false;
}

Granularity effectiveGranularity(WeightFormat format, Granularity granularity)
{
    if (granularity == Granularity::None) {
        return defaultGranularity(format);
    }
    if (!isSupported(format, granularity)) {
        std::string allowed;
        for (Granularity g : allowedGranularities(format)) {
            allowed += (allowed.empty() ? "" : ", ") + toString(g);
        }
        throw InputError("", "granularity",
            toString(format) + " does not take granularity '" + toString(granularity) + "' ("
                + (allowed.empty() ? std::string("it has no scales") : "expected " + allowed) + ")");
    }
    return granularity;
}

std::uint64_t scaleBytes(WeightFormat format)
{
    if (!hasScales(format)) {
        return 0;
    }
    return isMicroscaling(format) ? 1 : kScaleBytes;
}

std::uint64_t tensorScaleBytes(WeightFormat format)
{
    return format == WeightFormat::Nvfp4 ? kScaleBytes : 0;
}

std::int64_t weightScaleCount(c10::IntArrayRef shape, WeightFormat format, Granularity granularity)
{
    if (!hasScales(format)) {
        return 0;
    }
    const Granularity effective = effectiveGranularity(format, granularity);
    if (effective == Granularity::Tensor) {
        return 1;
    }
    if (shape.size() != 2) {
        throw InputError("", "shape",
            "granularity '" + toString(effective) + "' needs a 2-D [out, in] weight, got " + shapeText(shape));
    }
    const std::int64_t rows = shape[0];
    const std::int64_t columns = shape[1];
    switch (effective) {
    case Granularity::Channel:
        return rows;
    case Granularity::Block128:
        return ceilDiv(rows, 128) * ceilDiv(columns, 128);
    case Granularity::Group128:
        return rows * ceilDiv(columns, 128);
    case Granularity::Group32:
    case Granularity::Group16: {
        const std::int64_t block = effective == Granularity::Group32 ? 32 : 16;
        if (columns % block != 0) {
            throw InputError("", "shape",
                toString(format) + " takes whole blocks of " + std::to_string(block)
                    + " along the input dimension (vLLM's kernels and emulation need its length to be a multiple of "
                    + std::to_string(block) + "), got " + shapeText(shape));
        }
        return rows * (columns / block);
    }
    case Granularity::None:
    case Granularity::Tensor:
        break;
    }
    return 1;
}

std::uint64_t weightStorageBytes(c10::IntArrayRef shape, WeightFormat format, Granularity granularity)
{
    const std::int64_t scales = weightScaleCount(shape, format, granularity);
    std::int64_t elements = 1;
    for (std::int64_t size : shape) {
        elements *= size;
    }
    std::uint64_t elementBytes = 0;
    if (bytesPerElement(format) == 0.5) {
        // Two 4-bit values per byte, packed along each row (an odd row length leaves half a byte unused).
        const std::int64_t columns = shape.empty() ? 1 : shape.back();
        const std::int64_t rows = columns == 0 ? 0 : elements / columns;
        elementBytes = static_cast<std::uint64_t>(rows * ceilDiv(columns, 2));
    } else {
        elementBytes = static_cast<std::uint64_t>(elements) * static_cast<std::uint64_t>(bytesPerElement(format));
    }
    return elementBytes + static_cast<std::uint64_t>(scales) * scaleBytes(format) + tensorScaleBytes(format);
}

std::uint64_t kvCacheBytes(
    std::int64_t tokens, std::int64_t kvHeads, std::int64_t headDim, KvFormat format, KvScales scales)
{
    const auto elements = static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(kvHeads)
        * static_cast<std::uint64_t>(headDim);
    const auto elementBytes = elements * static_cast<std::uint64_t>(bytesPerElement(format));
    if (!hasScales(format)) {
        return elementBytes;
    }
    if (isPerTokenHead(format)) {
        // One float32 scale per token and KV head, stored beside the codes.
        return elementBytes + static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(kvHeads) * kScaleBytes;
    }
    const std::uint64_t scaleCount = scales == KvScales::PerHead ? static_cast<std::uint64_t>(kvHeads) : 1;
    return elementBytes + scaleCount * kScaleBytes;
}

} // namespace mismatch::quant

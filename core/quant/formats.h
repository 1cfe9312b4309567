#pragma once
// The number formats of a precision recipe and their recipe spellings: weight formats with the granularity
// of their scales, activation formats and KV-cache formats with their scales. Storage sizes of each
// (elements plus float32 scales) for memory and KV-capacity accounting live here too.
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mismatch::quant {

// Weight formats of a linear module: "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4".
enum class WeightFormat { Bf16, Fp16, Fp8E4m3, Fp8E5m2, Int8, Int4 };
// Which weight elements share one scale: "tensor" (one per tensor), "channel" (one per output row of an
// [out, in] weight), "block128" (one per 128 x 128 block; edge blocks may be partial), "group128" (one per
// 128 consecutive input elements of a row; the last group may be partial). None ("none") for bf16/fp16.
enum class Granularity { None, Tensor, Channel, Block128, Group128 };
// Activations (inputs of the linear modules): "bf16", "fp8_e4m3" (dynamic scale per token).
enum class ActivationFormat { Bf16, Fp8E4m3 };
// KV cache: "bf16", "fp8_e4m3" (calibrated scales, KvScales), and vLLM's dynamic formats "fp8_per_token_head" and
// "int8_per_token_head" (vllm/config/cache.py CacheDType): one float32 scale per token and KV head, computed from
// that token's keys (or values) when they are written to the cache, so they take no KvScales and no calibration.
enum class KvFormat { Bf16, Fp8E4m3, Fp8PerTokenHead, Int8PerTokenHead };
// Scales of an fp8_e4m3 KV cache: "per_tensor", "per_head" (one per KV head); None for bf16 and the per-token-head
// formats.
enum class KvScales { None, PerTensor, PerHead };

std::string toString(WeightFormat format);
std::string toString(Granularity granularity);
std::string toString(ActivationFormat format);
std::string toString(KvFormat format);
std::string toString(KvScales scales);
// Storage of one element, without scales: 2 (bf16, fp16), 1 (fp8, int8), 0.5 (int4, two per byte).
double bytesPerElement(WeightFormat format);
double bytesPerElement(KvFormat format);
// fp8: tensor, channel, block128; int8: channel; int4: group128; bf16/fp16: none (empty).
std::vector<Granularity> allowedGranularities(WeightFormat format);
// fp8 block128, int8 channel, int4 group128, bf16/fp16 None.
Granularity defaultGranularity(WeightFormat format);

// Recipe spelling -> enum; nullopt for an unknown name (callers know the file and location to report).
std::optional<WeightFormat> parseWeightFormat(std::string_view name);
std::optional<Granularity> parseGranularity(std::string_view name); // not "none"
std::optional<ActivationFormat> parseActivationFormat(std::string_view name);
std::optional<KvFormat> parseKvFormat(std::string_view name);
std::optional<KvScales> parseKvScales(std::string_view name); // not "none"
// Every spelling, in enum order (help texts, "expected one of" messages, CLI choices).
std::vector<std::string> weightFormatChoices();
std::vector<std::string> granularityChoices();
std::vector<std::string> activationFormatChoices();
std::vector<std::string> kvFormatChoices();
std::vector<std::string> kvScalesChoices();

// Whether a format stores scales at all (bf16 and fp16 are plain casts).
bool hasScales(WeightFormat format);
bool hasScales(KvFormat format);
bool hasScales(ActivationFormat format);
// fp8_per_token_head and int8_per_token_head: scales computed per token and KV head at each cache write (stored beside
// the codes, so they grow with the tokens), never given, calibrated or exported.
bool isPerTokenHead(KvFormat format);
double bytesPerElement(ActivationFormat format);
// A granularity in allowedGranularities(format), or None for a format without scales.
bool isSupported(WeightFormat format, Granularity granularity);
// What the fake quantization uses: `granularity`, or defaultGranularity(format) when it is None. Throws
// InputError for a pair that is not supported (the message lists the allowed ones).
Granularity effectiveGranularity(WeightFormat format, Granularity granularity);

// Scales are stored as float32: what the fake quantization computes and the FP8 engines keep.
constexpr std::uint64_t kScaleBytes = 4;

// Number of scales of a weight of this shape: tensor 1; channel out; block128 ceil(out/128) * ceil(in/128);
// group128 out * ceil(in/128); 0 without scales. Channel, block128 and group128 need a 2-D [out, in] shape;
// an unsupported pair or shape throws InputError. None means the format's default.
std::int64_t weightScaleCount(c10::IntArrayRef shape, WeightFormat format, Granularity granularity);
// Bytes a weight of this shape occupies in the engine: its elements (int4 packed two per byte along each
// row, ceil(in/2) bytes per row) plus weightScaleCount float32 scales.
std::uint64_t weightStorageBytes(c10::IntArrayRef shape, WeightFormat format, Granularity granularity);
// Bytes of one layer's K (or V) cache holding `tokens` tokens: tokens * kvHeads * headDim elements plus, for
// fp8_e4m3, the layer's float32 scales (1 per tensor or kvHeads per head; calibrated once, so they do not grow
// with the tokens; None scales with fp8_e4m3 means per tensor), and for the per-token-head formats tokens * kvHeads
// float32 scales (vLLM's page adds 2 * block_size * num_kv_heads float32 for K and V: vllm/v1/kv_cache_interface.py
// AttentionSpec.page_size_bytes). `scales` is ignored for the per-token-head formats.
std::uint64_t kvCacheBytes(
    std::int64_t tokens, std::int64_t kvHeads, std::int64_t headDim, KvFormat format, KvScales scales);

} // namespace mismatch::quant

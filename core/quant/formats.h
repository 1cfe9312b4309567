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

// Weight formats of a linear module: "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4", and the microscaling
// formats "mxfp8", "mxfp4", "nvfp4" (block-scaled E4M3 / E2M1 elements; definitions in core/quant/microscaling.h).
enum class WeightFormat { Bf16, Fp16, Fp8E4m3, Fp8E5m2, Int8, Int4, Mxfp8, Mxfp4, Nvfp4 };
// Which weight elements share one scale: "tensor" (one per tensor), "channel" (one per output row of an
// [out, in] weight), "block128" (one per 128 x 128 block; edge blocks may be partial), "group128" (one per
// 128 consecutive input elements of a row; the last group may be partial), "group32" and "group16" (one per 32
// or 16 consecutive input elements of a row: the microscaling blocks, fixed by the format, always whole: the
// input dimension must be a multiple). None ("none") for bf16/fp16.
enum class Granularity { None, Tensor, Channel, Block128, Group128, Group32, Group16 };
// Activations (inputs of the linear modules): "bf16", "fp8_e4m3" (dynamic scale per token), and "mxfp8", "mxfp4",
// "nvfp4" (dynamic block scales along each token's hidden dimension, as the weights of the same format;
// microscaling.h).
enum class ActivationFormat { Bf16, Fp8E4m3, Mxfp8, Mxfp4, Nvfp4 };
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
// Storage of one element, without scales: 2 (bf16, fp16), 1 (fp8, int8, mxfp8), 0.5 (int4, mxfp4, nvfp4: two per
// byte).
double bytesPerElement(WeightFormat format);
double bytesPerElement(KvFormat format);
// fp8: tensor, channel, block128; int8: channel; int4: group128; mxfp8, mxfp4: group32; nvfp4: group16; bf16/fp16:
// none (empty).
std::vector<Granularity> allowedGranularities(WeightFormat format);
// fp8 block128, int8 channel, int4 group128, mxfp8/mxfp4 group32, nvfp4 group16, bf16/fp16 None.
Granularity defaultGranularity(WeightFormat format);

// The microscaling formats (mxfp8, mxfp4, nvfp4): block scales fixed by the format, along the input dimension.
bool isMicroscaling(WeightFormat format);
bool isMicroscaling(ActivationFormat format);
// Elements sharing one block scale: 32 (mxfp8, mxfp4), 16 (nvfp4); 0 for the other formats.
std::int64_t microscalingBlockSize(WeightFormat format);
std::int64_t microscalingBlockSize(ActivationFormat format);
// Whether a linear module may take these weights with these input activations (what recipes accept, checked when a
// recipe is resolved against a model):
//   - microscaling activations only with weights of the same format: vLLM quantizes both operands of an MXFP8
//     (W8A8), MXFP4 or NVFP4 (W4A4) product the same way and has no mixed kernel;
//   - microscaling weights with bf16 activations (weight-only: W4A16_NVFP4, MXFP4 and MXFP8 with 16-bit
//     activations) or with activations of their own format;
//   - int4 weights not with fp8_e4m3 activations (W4A8: the engine has no such kernel);
//   - every other pair.
bool isSupportedPair(WeightFormat weights, ActivationFormat activations);

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
// Bytes of one of a format's scales as its checkpoints store them: one byte for the microscaling block scales (E8M0
// for mxfp8/mxfp4, E4M3 for nvfp4), kScaleBytes (float32) for the other scaled formats, 0 without scales.
std::uint64_t scaleBytes(WeightFormat format);
// Bytes of a weight's per-tensor scale besides its block scales: nvfp4's float32 second-level scale (4), else 0.
std::uint64_t tensorScaleBytes(WeightFormat format);

// Number of scales of a weight of this shape: tensor 1; channel out; block128 ceil(out/128) * ceil(in/128);
// group128 out * ceil(in/128); group32 and group16 out * in/32 and out * in/16 (nvfp4's tensor scale is not
// counted: tensorScaleBytes); 0 without scales. Channel, block128 and the groups need a 2-D [out, in] shape, group32
// and group16 an input dimension that is a multiple of the block (vLLM's microscaling kernels and emulations take
// whole blocks only); an unsupported pair or shape throws InputError. None means the format's default.
std::int64_t weightScaleCount(c10::IntArrayRef shape, WeightFormat format, Granularity granularity);
// Bytes a weight of this shape occupies in the format: its elements (4-bit formats packed two per byte along each
// row, ceil(in/2) bytes per row) plus weightScaleCount scales of scaleBytes each plus tensorScaleBytes: 4.25 bits an
// element for mxfp4 (an E8M0 per 32), 4.5 for nvfp4 (an E4M3 per 16) plus 4 bytes, 8.25 for mxfp8.
std::uint64_t weightStorageBytes(c10::IntArrayRef shape, WeightFormat format, Granularity granularity);
// Bytes of one layer's K (or V) cache holding `tokens` tokens: tokens * kvHeads * headDim elements plus, for
// fp8_e4m3, the layer's float32 scales (1 per tensor or kvHeads per head; calibrated once, so they do not grow
// with the tokens; None scales with fp8_e4m3 means per tensor), and for the per-token-head formats tokens * kvHeads
// float32 scales (vLLM's page adds 2 * block_size * num_kv_heads float32 for K and V: vllm/v1/kv_cache_interface.py
// AttentionSpec.page_size_bytes). `scales` is ignored for the per-token-head formats.
std::uint64_t kvCacheBytes(
    std::int64_t tokens, std::int64_t kvHeads, std::int64_t headDim, KvFormat format, KvScales scales);

} // namespace mismatch::quant

#pragma once
// Fake quantization ("quantize-dequantize"): weights, activations and KV cache rounded to the grid a real
// engine computes, returned as float32. CPU reference for the CUDA kernels, so the float operations and
// their order are part of the contract:
//
// Scaled formats (fp8_e4m3, fp8_e5m2, int8, int4). Every step is one float32 operation rounded to nearest
// even (no FMA contraction, no reciprocal):
//   amax  = max |x| over the elements sharing the scale     (exact; NaN elements are skipped, like fmaxf)
//   scale = amax / qmax                                      (float32 division; qmax = 448, 57344, 127, 7)
//   scale = 1 when that gives 0                              (all-zero group, or an underflowing division)
//   y     = x / scale                                        (float32 division, not x * (1 / scale))
//   fp8:  out = decodeFp8(encodeFp8(y)) * scale              (RNE, satfinite, see fp8.h; float32 multiply)
//   int:  q = nearbyint(y) (ties to even), clamped to [qmin, qmax] = [-127, 127] (int8) or [-8, 7]
//         (int4); out = q * scale                            (float32 multiply)
// Given (calibrated) KV scales skip the first three lines; values beyond qmax * scale saturate. vLLM's per-token-head
// KV formats follow vLLM's own cache write instead (a reciprocal, a floor on the scale, int8 truncated toward zero:
// quantizePerTokenHead below).
// A CUDA kernel matches bit for bit when built without --use_fast_math (IEEE division, -prec-div=true),
// reducing amax with fmaxf, converting with cvt.rn.satfinite (or __nv_cvt_float_to_fp8 with __NV_SATFINITE)
// and rounding integers with rintf.
// Unscaled formats: bf16 and fp16 round the float32 to nearest even (subnormals kept, overflow to inf, as
// a cast does) and back.
// Microscaling formats (mxfp8, mxfp4, nvfp4): block scales along the input dimension, defined step by step in
// microscaling.h (weights and activations).
//
// Non-finite input: a weight holding inf or NaN is bad input (InputError naming the element). Activations
// and KV entries propagate it the way the engines' kernels do: a NaN stays NaN, and an inf makes its
// group's scale inf, so that group dequantizes to NaN.
#include "core/common/progress.h"
#include "core/quant/formats.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::quant {

// Scalar pieces of the recipe above, shared with the tests and the CUDA comparison.
float scaleFromAmax(float amax, float qmax);
float roundToBFloat16(float value);
float roundToFloat16(float value);
at::Tensor roundToBFloat16(const at::Tensor& values); // float32 result
at::Tensor roundToFloat16(const at::Tensor& values); // float32 result
// out[i] = decodeFp8(codes[i], E4M3) * scale for `count` codes: the dequantization of E4M3 weight codes, computed
// from the codes' bits instead of the table (bit-identical values, NaN for the NaN codes).
void scaleE4m3Codes(const std::uint8_t* codes, float scale, float* out, std::int64_t count);

// Weights: `weight` of any floating dtype; tensor granularity accepts any shape, the others need [out, in].
// Granularity None means the format's default (formats.h); bf16/fp16 ignore it. An unsupported pair or shape
// throws InputError. Result: float32 of the same shape, on the input's device (computed on the CPU).
at::Tensor fakeQuantize(const at::Tensor& weight, WeightFormat format, Granularity granularity);
// The float32 scales fakeQuantize uses, as a [scale rows, scale columns] grid: tensor [1, 1], channel
// [out, 1], block128 [ceil(out/128), ceil(in/128)], group128 [out, ceil(in/128)]; for the microscaling formats each
// block's factor [out, in/32] or [out, in/16] (2^shared, or nvfp4's sf * s2: microscaling.h). Undefined for bf16/fp16.
at::Tensor weightScales(const at::Tensor& weight, WeightFormat format, Granularity granularity);

// A weight as the engine keeps it: exactly the values fakeQuantize(weight, format, granularity) gives, stored
// compactly, so that an engine holds about the weight bytes of its formats instead of float32 copies:
//   bf16, fp16       the rounded values in that dtype (2 bytes an element); a weight already stored in that dtype
//                    is kept as it is (the same tensor, shared with whoever else holds it)
//   fp8_e4m3/e5m2    the FP8 codes (uint8) and the float32 scale grid of weightScales
//   int8, int4       the integers (int8, one a byte: the emulation does not pack int4) and the scale grid
//   mxfp8, mxfp4,    the E4M3 or E2M1 codes (uint8, one a byte: the emulation does not pack FP4) and each block's
//   nvfp4            float32 factor (microscaling.h: the E8M0 scale's value, or nvfp4's E4M3 block scale times its
//                    tensor scale)
// Dequantizing computes decode(code) * scale (or q * scale): the same float32 multiply fakeQuantize ends with,
// so the float32 rows it gives are bit-identical to fakeQuantize's (tested on every code; an integer grid has no
// negative zero, so fakeQuantize's -0 of int8/int4 is +0 here, which multiplies alike). 2-D [out, in] weights,
// held on the CPU (a weight on another device is quantized on the CPU and kept there).
class QuantizedWeight {
public:
    QuantizedWeight() = default;
    // InputError as fakeQuantize (non-finite weight, unsupported pair, not 2-D).
    static QuantizedWeight quantize(const at::Tensor& weight, WeightFormat format, Granularity granularity);

    bool defined() const { return rows_ > 0 || values_.defined() || codes_.defined(); }
    WeightFormat format() const { return format_; }
    Granularity granularity() const { return granularity_; } // effective (None for bf16/fp16)
    std::int64_t rows() const { return rows_; }
    std::int64_t columns() const { return columns_; }
    // bf16/fp16: the stored tensor (kBFloat16 / kHalf); undefined for the scaled formats.
    const at::Tensor& values() const { return values_; }
    // Scaled formats: codes [out, in] (kByte for fp8 and the microscaling formats, kChar for int) and float32 scales
    // [scale rows, columns].
    const at::Tensor& codes() const { return codes_; }
    const at::Tensor& scales() const { return scales_; }
    // Scaled formats: row r uses scale row r / scaleRowDivisor(); columns [b * scaleColumnBlock(), (b + 1) * ...)
    // share scale column b.
    std::int64_t scaleRowDivisor() const { return scaleRowDivisor_; }
    std::int64_t scaleColumnBlock() const { return scaleColumnBlock_; }
    // Bytes of the tensors it holds (a shared bf16/fp16 tensor counted in full).
    std::uint64_t storageBytes() const;

    // Rows [begin, end) as float32, row-major, into `out` ((end - begin) * columns() floats). CPU only.
    void dequantizeRows(std::int64_t begin, std::int64_t end, float* out) const;
    // The whole weight as float32 [out, in].
    at::Tensor dequantize() const;
    // The rows named by `ids` (any shape, int64) as float32 [ids..., in]: the embedding lookup.
    at::Tensor embed(const at::Tensor& ids) const;

private:
    WeightFormat format_ = WeightFormat::Bf16;
    Granularity granularity_ = Granularity::None;
    std::int64_t rows_ = 0;
    std::int64_t columns_ = 0;
    std::int64_t scaleRowDivisor_ = 1; // row r uses scale row r / divisor
    std::int64_t scaleColumnBlock_ = 1; // columns sharing one scale
    at::Tensor values_;
    at::Tensor codes_;
    at::Tensor scales_;
};

// Activations [..., hidden]: fp8_e4m3 with a dynamic scale per token (per row of the last dimension,
// scale = amax / 448); mxfp8, mxfp4, nvfp4 with dynamic block scales along each token (microscaling.h; InputError for
// a hidden size that is not a multiple of the block); or bf16.
at::Tensor fakeQuantizeActivations(const at::Tensor& activations, ActivationFormat format);
// FP8 e4m3 activations as a GEMM takes them: per token (row of the last dimension) fakeQuantizeActivations'
// scale, float32 [rows], and the code values decodeFp8(encodeFp8(x / scale)) as bf16 [rows, hidden] (every e4m3
// value is a bf16 number, so this is exact): fakeQuantizeActivations(x, Fp8E4m3) == values * scale, element for
// element, with the same float32 multiply. CPU float32 input of at least one dimension (InputError otherwise).
struct Fp8ActivationCodes {
    at::Tensor values;
    at::Tensor scales;
};
Fp8ActivationCodes fp8ActivationCodes(const at::Tensor& activations);

// KV cache [batch, heads, tokens, head_dim]. fp8_e4m3 uses one scale per tensor or per head (dim 1; None
// means per tensor): dynamic (computed from `kv` as amax / 448) when `scales` is empty, otherwise the given
// (calibrated) float scales (numel 1 for per_tensor, `heads` for per_head; finite and > 0, else InputError).
// The per-token-head formats compute their own scales (quantizePerTokenHead below; mode is ignored and given
// scales are an InputError). bf16 ignores mode and scales.
at::Tensor fakeQuantizeKv(
    const at::Tensor& kv, KvFormat format, KvScales mode, const std::optional<at::Tensor>& scales = std::nullopt);
// fakeQuantizeKv's check of given scales, for a float32 tensor on the host: InputError naming "kv scales[i]" for
// the first one that is not finite and > 0.
void requireUsableKvScales(const at::Tensor& hostScales);
// The dynamic scales fakeQuantizeKv would compute: float32 [1] or [heads] for fp8_e4m3, [batch, heads, tokens] for
// the per-token-head formats. Undefined for bf16.
at::Tensor kvScales(const at::Tensor& kv, KvFormat format, KvScales mode);

// vLLM's dynamic KV formats, fp8_per_token_head and int8_per_token_head, as its Triton cache-write kernel defines
// them (vllm/v1/attention/ops/triton_reshape_and_cache_flash.py _reshape_cache_per_token_head, PR #38378; the scale
// cache is float32 [num_blocks, block_size, num_kv_heads]). Each row of head_dim values x (one token of one KV head,
// read as float32) gets its own scale, in float32 operations rounded to nearest even:
//   amax  = max |x|                                      (exact)
//   scale = max(amax / qmax, 1e-6f)                      (qmax 448 for e4m3, 127 for int8; 1e-6f: the float
//                                                         nearest 1e-6, so an all-zero row gets 1e-6, not 0)
//   y     = x * (1 / scale)                              (the reciprocal, then a multiply: not x / scale)
//   y     = clamp(y, qmin, qmax)                         (qmin -448, or -128 for int8)
//   fp8:  code = encodeFp8(y) (RNE; Triton's cast of float32 to float8e4nv)
//   int8: code = trunc(y), toward zero (Triton's store of float32 to an int8 pointer is fptosi: it truncates,
//         vLLM's tests/quantization/test_per_token_kv_cache.py says so: "INT8 Triton stores truncate")
//   out   = code value x scale                           (float32 multiply; what the attention reads)
// On a GPU vLLM divides with PTX div.full.f32 (Triton's fp32 division, within 2 ulp) where this divides exactly,
// so a GPU's scale can differ in its last bit and a code, rarely, by one step. Non-finite input: a row holding a NaN
// gets scale NaN and one holding an inf scale inf, with every code 0, so the whole row reads NaN (vLLM's kernel
// leaves such a row undefined). kv: a floating [batch, heads, tokens, head_dim] tensor (InputError otherwise).
struct PerTokenHeadKv {
    at::Tensor codes; // float32 [batch, heads, tokens, head_dim]: the code values (e4m3 values, or -128 .. 127)
    at::Tensor scales; // float32 [batch, heads, tokens]
};
PerTokenHeadKv quantizePerTokenHead(const at::Tensor& kv, KvFormat format);

// `mismatch quantize`: applies a weight format to every 2-D tensor of a safetensors file; other tensors
// (norms, biases) are copied unchanged.
struct QuantizeFileOptions {
    WeightFormat format = WeightFormat::Fp8E4m3;
    Granularity granularity = Granularity::None; // None: the format's default
    // Write quantized tensors in their input dtype instead of float32 (rounds the fake-quantized values
    // once more unless the input is float32; the errors reported are those of the values written).
    bool keepDtype = false;
};

struct TensorQuantizeResult {
    std::string name;
    std::vector<std::int64_t> shape;
    std::string inputDtype; // "F32", "F16", "BF16"
    std::string outputDtype;
    bool quantized = false; // false: copied unchanged
    std::string note; // why a tensor was copied ("1-D", "3-D", ...)
    double relativeRmsError = 0.0; // sqrt(sum (out - in)^2 / sum in^2), in float64
    double maxAbsError = 0.0; // max |out - in|
    std::uint64_t inputBytes = 0; // bytes in the input file
    std::uint64_t formatBytes = 0; // engine storage in the format, scales included (weightStorageBytes)
};

// Reads `inputPath`, writes `outputPath` (temporary name, then rename) with the input's metadata plus
// "mismatch.quantize.format" / "mismatch.quantize.granularity". Bad input (unreadable file, non-finite
// weights, shapes the granularity cannot take) throws InputError naming the file and tensor. Progress:
// one step per tensor, cancellable between tensors.
std::vector<TensorQuantizeResult> quantizeSafetensorsFile(const std::string& inputPath, const std::string& outputPath,
    const QuantizeFileOptions& options, Progress& progress);

} // namespace mismatch::quant

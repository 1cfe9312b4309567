// The at::Tensor side of cuda/fp8_ops.h: argument checks, allocation through LibTorch (its caching allocator),
// and calls into the raw launchers of cuda/kernels.h. Compiled by the host compiler, without CUDA headers.
#include "cuda/fp8_ops.h"

#include "cuda/check.h"
#include "cuda/device.h"
#include "cuda/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <stdexcept>

namespace mismatch::cuda {

namespace {

using kernels::InputType;
using kernels::ScaleGrid;

std::string shapeText(at::IntArrayRef shape)
{
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        text += (i ? ", " : "") + std::to_string(shape[i]);
    }
    return text + "]";
}

[[noreturn]] void badArgument(const std::string& what, const std::string& detail)
{
    throw std::invalid_argument("cuda fp8: " + what + ": " + detail);
}

void requireCuda(const at::Tensor& tensor, const char* what)
{
    if (!tensor.defined() || !tensor.is_cuda()) {
        badArgument(what, "expected a tensor on a CUDA device");
    }
}

InputType inputType(const at::Tensor& tensor, const char* what)
{
    switch (tensor.scalar_type()) {
    case at::kFloat:
        return InputType::Float32;
    case at::kBFloat16:
        return InputType::BFloat16;
    case at::kHalf:
        return InputType::Float16;
    default:
        badArgument(what, std::string("expected float32, bfloat16 or float16, got ") + c10::toString(tensor.scalar_type()));
    }
}

// Runs on the tensor's device and restores the caller's device afterwards.
class DeviceScope {
public:
    explicit DeviceScope(const at::Tensor& tensor)
        : previous_(kernels::currentDevice())
    {
        kernels::setDevice(tensor.get_device());
    }
    ~DeviceScope()
    {
        try {
            kernels::setDevice(previous_);
        } catch (...) {
            // A destructor must not throw; the next CUDA call reports a broken device anyway.
        }
    }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int previous_;
};

float qmax(Fp8Kind kind)
{
    return kind == Fp8Kind::E4M3 ? 448.0f : 57344.0f;
}

// The scale grid of core/quant/quantize.cpp's layouts (weightLayout, per-token activations).
ScaleGrid scaleGrid(const at::Tensor& values, Fp8Scaling scaling)
{
    ScaleGrid grid;
    grid.columns = values.dim() == 0 ? 1 : values.size(-1);
    grid.rows = grid.columns == 0 ? 0 : values.numel() / grid.columns;
    switch (scaling) {
    case Fp8Scaling::Tensor:
        grid.columnBlock = std::max<std::int64_t>(1, grid.columns);
        break;
    case Fp8Scaling::Row:
        if (values.dim() < 1) {
            badArgument("values", "row scaling needs at least one dimension");
        }
        grid.scaleRows = std::max<std::int64_t>(1, grid.rows);
        grid.columnBlock = std::max<std::int64_t>(1, grid.columns);
        break;
    case Fp8Scaling::Block128:
        if (values.dim() != 2) {
            badArgument("values", "block-128 scaling needs a [rows, columns] matrix, got " + shapeText(values.sizes()));
        }
        grid.rowDivisor = 128;
        grid.scaleRows = std::max<std::int64_t>(1, (grid.rows + 127) / 128);
        grid.columnBlock = 128;
        break;
    }
    return grid;
}

const float* floatPointer(const at::Tensor& tensor)
{
    return static_cast<const float*>(tensor.data_ptr());
}

} // namespace

bool available()
{
    return at::hasCUDA() && !devices().empty();
}

std::string toString(Fp8GemmPath path)
{
    switch (path) {
    case Fp8GemmPath::CublasLtScalarScales:
        return "cublaslt_fp8_scalar_scales";
    case Fp8GemmPath::CublasLtOuterVectorScales:
        return "cublaslt_fp8_outer_vector_scales";
    case Fp8GemmPath::CublasLtUnitScalesEpilogue:
        return "cublaslt_fp8_unit_scales_epilogue";
    case Fp8GemmPath::DequantizedBf16:
        return "dequantized_bf16";
    case Fp8GemmPath::Declined:
        return "declined";
    }
    return "unknown";
}

Fp8Tensor quantizeFp8(const at::Tensor& values, Fp8Kind kind, Fp8Scaling scaling)
{
    requireCuda(values, "values");
    const DeviceScope scope(values);
    const at::Tensor input = values.contiguous();
    const InputType type = inputType(input, "values");
    const ScaleGrid grid = scaleGrid(input, scaling);
    const at::TensorOptions floats = input.options().dtype(at::kFloat);
    at::Tensor amax = at::empty({grid.scaleRows, grid.scaleColumns()}, floats);
    at::Tensor scales = at::empty({grid.scaleRows, grid.scaleColumns()}, floats);
    kernels::groupScales(input.data_ptr(), type, grid, qmax(kind), amax.data_ptr<float>(), scales.data_ptr<float>());
    Fp8Tensor result;
    result.codes = at::empty(input.sizes(), input.options().dtype(at::kByte));
    result.scales = scales;
    result.kind = kind;
    result.scaling = scaling;
    kernels::encodeScaled(input.data_ptr(), type, grid, floatPointer(scales), kind == Fp8Kind::E4M3,
        result.codes.data_ptr<std::uint8_t>());
    return result;
}

Fp8Tensor quantizeFp8(const at::Tensor& values, Fp8Kind kind, Fp8Scaling scaling, const at::Tensor& scales)
{
    requireCuda(values, "values");
    requireCuda(scales, "scales");
    const DeviceScope scope(values);
    const at::Tensor input = values.contiguous();
    const InputType type = inputType(input, "values");
    const ScaleGrid grid = scaleGrid(input, scaling);
    if (scales.numel() != grid.scaleRows * grid.scaleColumns() || scales.get_device() != input.get_device()) {
        badArgument("scales", "expected " + std::to_string(grid.scaleRows) + " x " + std::to_string(grid.scaleColumns())
                + " scales on the values' device, got " + shapeText(scales.sizes()));
    }
    Fp8Tensor result;
    result.scales = scales.to(at::kFloat).contiguous().reshape({grid.scaleRows, grid.scaleColumns()});
    result.codes = at::empty(input.sizes(), input.options().dtype(at::kByte));
    result.kind = kind;
    result.scaling = scaling;
    kernels::encodeScaled(input.data_ptr(), type, grid, floatPointer(result.scales), kind == Fp8Kind::E4M3,
        result.codes.data_ptr<std::uint8_t>());
    return result;
}

at::Tensor dequantizeFp8(const Fp8Tensor& quantized)
{
    requireCuda(quantized.codes, "codes");
    const DeviceScope scope(quantized.codes);
    const at::Tensor codes = quantized.codes.contiguous();
    const ScaleGrid grid = scaleGrid(codes, quantized.scaling);
    const at::Tensor scales = quantized.scales.to(at::kFloat).contiguous();
    at::Tensor out = at::empty(codes.sizes(), codes.options().dtype(at::kFloat));
    kernels::decodeScaled(codes.data_ptr<std::uint8_t>(), grid, floatPointer(scales),
        quantized.kind == Fp8Kind::E4M3, out.data_ptr<float>());
    return out;
}

void appendKvFp8(at::Tensor& cache, const at::Tensor& scales, const at::Tensor& values, const at::Tensor& slots)
{
    requireCuda(cache, "kv cache");
    requireCuda(scales, "kv scales");
    requireCuda(values, "kv values");
    requireCuda(slots, "kv slots");
    if (cache.dim() != 3 || cache.scalar_type() != at::kByte || !cache.is_contiguous()) {
        badArgument("kv cache", "expected a contiguous uint8 [slots, kvHeads, headDim] tensor");
    }
    const std::int64_t kvHeads = cache.size(1);
    const std::int64_t headDim = cache.size(2);
    if (values.dim() != 3 || values.size(1) != kvHeads || values.size(2) != headDim) {
        badArgument("kv values", "expected [tokens, " + std::to_string(kvHeads) + ", " + std::to_string(headDim)
                + "], got " + shapeText(values.sizes()));
    }
    if (slots.dim() != 1 || slots.size(0) != values.size(0) || slots.scalar_type() != at::kLong) {
        badArgument("kv slots", "expected int64 [tokens]");
    }
    const bool perHead = scales.numel() == kvHeads && kvHeads != 1;
    if (!perHead && scales.numel() != 1) {
        badArgument("kv scales", "expected 1 or " + std::to_string(kvHeads) + " scales");
    }
    const DeviceScope scope(cache);
    const at::Tensor input = values.contiguous();
    const at::Tensor scaleValues = scales.to(at::kFloat).contiguous();
    const at::Tensor slotValues = slots.contiguous();
    kernels::kvAppendFp8(input.data_ptr(), inputType(input, "kv values"), input.size(0), kvHeads, headDim,
        slotValues.data_ptr<std::int64_t>(), floatPointer(scaleValues), perHead, cache.data_ptr<std::uint8_t>());
}

at::Tensor decodeAttention(const at::Tensor& query, const KvCacheView& keys, const KvCacheView& values,
    const at::Tensor& slotTable, const at::Tensor& lengths, float softmaxScale)
{
    requireCuda(query, "query");
    requireCuda(keys.data, "keys");
    requireCuda(values.data, "values");
    requireCuda(slotTable, "slot table");
    requireCuda(lengths, "lengths");
    if (query.dim() != 3 || query.scalar_type() != at::kFloat) {
        badArgument("query", "expected float32 [batch, qHeads, headDim]");
    }
    if (keys.data.dim() != 3 || !keys.data.sizes().equals(values.data.sizes())
        || keys.data.scalar_type() != values.data.scalar_type()) {
        badArgument("keys/values", "expected two caches of one shape [slots, kvHeads, headDim] and one dtype");
    }
    const bool fp8 = keys.data.scalar_type() == at::kByte;
    if (!fp8 && keys.data.scalar_type() != at::kBFloat16) {
        badArgument("keys", "expected uint8 (e4m3 codes) or bfloat16");
    }
    const std::int64_t batch = query.size(0);
    const std::int64_t qHeads = query.size(1);
    const std::int64_t headDim = query.size(2);
    const std::int64_t kvHeads = keys.data.size(1);
    if (keys.data.size(2) != headDim || kvHeads < 1 || qHeads % kvHeads != 0 || headDim > 256) {
        badArgument("query", "qHeads must be a multiple of kvHeads, head dims must agree and be <= 256");
    }
    if (slotTable.dim() != 2 || slotTable.size(0) != batch || slotTable.scalar_type() != at::kLong
        || lengths.dim() != 1 || lengths.size(0) != batch || lengths.scalar_type() != at::kLong) {
        badArgument("slot table", "expected int64 [batch, maxTokens] and int64 lengths [batch]");
    }
    at::Tensor keyScales;
    at::Tensor valueScales;
    bool perHead = false;
    if (fp8) {
        requireCuda(keys.scales, "key scales");
        requireCuda(values.scales, "value scales");
        keyScales = keys.scales.to(at::kFloat).contiguous();
        valueScales = values.scales.to(at::kFloat).contiguous();
        perHead = keyScales.numel() == kvHeads && kvHeads != 1;
        if ((keyScales.numel() != 1 && !perHead) || valueScales.numel() != keyScales.numel()) {
            badArgument("kv scales", "expected 1 or " + std::to_string(kvHeads) + " scales for keys and for values");
        }
    }
    const DeviceScope scope(query);
    const at::Tensor q = query.contiguous();
    const at::Tensor k = keys.data.contiguous();
    const at::Tensor v = values.data.contiguous();
    const at::Tensor table = slotTable.contiguous();
    const at::Tensor length = lengths.contiguous();
    at::Tensor out = at::empty_like(q);
    kernels::decodeAttention(q.data_ptr<float>(), batch, qHeads, kvHeads, headDim, k.data_ptr(), v.data_ptr(), fp8,
        fp8 ? floatPointer(keyScales) : nullptr, fp8 ? floatPointer(valueScales) : nullptr, perHead,
        table.data_ptr<std::int64_t>(), table.size(1), length.data_ptr<std::int64_t>(), softmaxScale,
        out.data_ptr<float>());
    return out;
}

FusedMismatch fusedMismatch(const at::Tensor& engineLogits, const at::Tensor& trainerLogits, const at::Tensor& sampled)
{
    requireCuda(engineLogits, "engine logits");
    requireCuda(trainerLogits, "trainer logits");
    requireCuda(sampled, "sampled");
    if (engineLogits.dim() != 2 || !engineLogits.sizes().equals(trainerLogits.sizes())
        || engineLogits.scalar_type() != trainerLogits.scalar_type()) {
        badArgument("logits", "expected two [N, V] tensors of one shape and dtype");
    }
    if (sampled.dim() != 1 || sampled.size(0) != engineLogits.size(0) || sampled.scalar_type() != at::kLong) {
        badArgument("sampled", "expected int64 [N]");
    }
    const DeviceScope scope(engineLogits);
    const at::Tensor a = engineLogits.contiguous();
    const at::Tensor b = trainerLogits.contiguous();
    const at::Tensor y = sampled.contiguous();
    const std::int64_t rows = a.size(0);
    FusedMismatch result;
    result.kl = at::empty({rows}, a.options().dtype(at::kFloat));
    result.k1 = at::empty({rows}, a.options().dtype(at::kFloat));
    result.k3 = at::empty({rows}, a.options().dtype(at::kFloat));
    kernels::fusedMismatch(a.data_ptr(), b.data_ptr(), inputType(a, "engine logits"), rows, a.size(1),
        y.data_ptr<std::int64_t>(), result.kl.data_ptr<float>(), result.k1.data_ptr<float>(), result.k3.data_ptr<float>());
    return result;
}

namespace {

at::Tensor dequantizeToBf16(const Fp8Tensor& quantized)
{
    const at::Tensor codes = quantized.codes.contiguous();
    const ScaleGrid grid = scaleGrid(codes, quantized.scaling);
    const at::Tensor scales = quantized.scales.to(at::kFloat).contiguous();
    at::Tensor out = at::empty(codes.sizes(), codes.options().dtype(at::kBFloat16));
    kernels::decodeScaledToBf16(codes.data_ptr<std::uint8_t>(), grid, floatPointer(scales),
        quantized.kind == Fp8Kind::E4M3, static_cast<std::uint16_t*>(out.data_ptr()));
    return out;
}

[[noreturn]] void throwLt(const kernels::LtStatus& status)
{
    throw CudaError(std::string("cuBLASLt: ") + status.what + " (status " + std::to_string(status.status) + ")");
}

Fp8GemmResult dequantizedGemm(
    const Fp8Tensor& a, const Fp8Tensor& b, const at::Tensor& bias, std::string note, Fp8Fallback fallback)
{
    Fp8GemmResult result;
    if (fallback == Fp8Fallback::Decline) {
        result.path = Fp8GemmPath::Declined;
        result.note = std::move(note);
        return result;
    }
    result.path = Fp8GemmPath::DequantizedBf16;
    result.note = std::move(note) + "; operands dequantized to bf16";
    const at::Tensor left = dequantizeToBf16(a);
    const at::Tensor right = dequantizeToBf16(b);
    try {
        result.output = bf16Gemm(left, right, bias);
    } catch (const CudaError& error) {
        // Shapes cuBLASLt has no BF16 algorithm for (odd leading dimensions): LibTorch's own BF16 GEMM.
        result.output = bias.defined() ? at::linear(left, right, bias.to(at::kBFloat16)) : at::linear(left, right);
        result.note += std::string("; BF16 product by LibTorch (") + error.what() + ")";
    }
    return result;
}

} // namespace

at::Tensor bf16Gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& bias)
{
    requireCuda(a, "a");
    requireCuda(b, "b");
    if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(1) || a.scalar_type() != at::kBFloat16
        || b.scalar_type() != at::kBFloat16) {
        badArgument("a/b", "expected bfloat16 [M, K] and [N, K], got " + shapeText(a.sizes()) + " and " + shapeText(b.sizes()));
    }
    const DeviceScope scope(a);
    const at::Tensor left = a.contiguous();
    const at::Tensor right = b.contiguous();
    const at::Tensor biasValues = bias.defined() ? bias.to(at::kBFloat16).contiguous() : at::Tensor();
    at::Tensor out = at::empty({left.size(0), right.size(0)}, left.options());
    const kernels::LtStatus status = kernels::bf16GemmLt(static_cast<const std::uint16_t*>(left.data_ptr()),
        static_cast<const std::uint16_t*>(right.data_ptr()), left.size(0), right.size(0), left.size(1),
        biasValues.defined() ? static_cast<const std::uint16_t*>(biasValues.data_ptr()) : nullptr,
        static_cast<std::uint16_t*>(out.data_ptr()));
    if (!status.ok) {
        throwLt(status);
    }
    return out;
}

Fp8GemmResult fp8Gemm(const Fp8Tensor& a, const Fp8Tensor& b, const at::Tensor& bias, Fp8Fallback fallback)
{
    requireCuda(a.codes, "a");
    requireCuda(b.codes, "b");
    if (a.codes.dim() != 2 || b.codes.dim() != 2 || a.codes.size(1) != b.codes.size(1)) {
        badArgument("a/b", "expected [M, K] and [N, K] codes, got " + shapeText(a.codes.sizes()) + " and "
                + shapeText(b.codes.sizes()));
    }
    if (a.kind != Fp8Kind::E4M3 || b.kind != Fp8Kind::E4M3) {
        badArgument("a/b", "the FP8 GEMM takes e4m3 operands");
    }
    if (a.scaling == Fp8Scaling::Block128) {
        badArgument("a", "activations take tensor or row (per-token) scales");
    }
    const std::int64_t m = a.codes.size(0);
    const std::int64_t n = b.codes.size(0);
    const std::int64_t k = a.codes.size(1);
    if (bias.defined() && bias.numel() != n) {
        badArgument("bias", "expected " + std::to_string(n) + " values");
    }
    const DeviceScope scope(a.codes);
    if (b.scaling == Fp8Scaling::Block128) {
        return dequantizedGemm(a, b, bias,
            "block-128 weight scales: cuBLASLt's VEC128/BLK128x128 scale modes are not used (their scale layout is "
            "unverified here)",
            fallback);
    }
    if (k % 16 != 0 || n % 16 != 0) {
        return dequantizedGemm(a, b, bias,
            "FP8 cuBLASLt needs K and N multiples of 16, got K=" + std::to_string(k) + ", N=" + std::to_string(n),
            fallback);
    }
    const at::Tensor left = a.codes.contiguous();
    const at::Tensor right = b.codes.contiguous();
    const at::Tensor leftScales = a.scales.to(at::kFloat).contiguous().reshape({-1});
    const at::Tensor rightScales = b.scales.to(at::kFloat).contiguous().reshape({-1});
    const auto* leftCodes = left.data_ptr<std::uint8_t>();
    const auto* rightCodes = right.data_ptr<std::uint8_t>();
    Fp8GemmResult result;
    result.output = at::empty({m, n}, left.options().dtype(at::kBFloat16));
    auto* out = static_cast<std::uint16_t*>(result.output.data_ptr());
    const at::Tensor biasBf16 = bias.defined() ? bias.to(at::kBFloat16).contiguous() : at::Tensor();
    const auto* biasPointer = biasBf16.defined() ? static_cast<const std::uint16_t*>(biasBf16.data_ptr()) : nullptr;

    std::string why;
    if (a.scaling == Fp8Scaling::Tensor && b.scaling == Fp8Scaling::Tensor) {
        const kernels::LtStatus status = kernels::fp8GemmLt(leftCodes, rightCodes, m, n, k, floatPointer(leftScales),
            floatPointer(rightScales), kernels::ScaleMode::Scalar, biasPointer, out);
        if (status.ok) {
            result.path = Fp8GemmPath::CublasLtScalarScales;
            return result;
        }
        why = std::string("scalar scales refused (") + status.what + ")";
    } else {
        // Outer-vector mode wants a vector on both sides: a per-tensor side is broadcast.
        const at::Tensor leftVector = leftScales.numel() == m ? leftScales : leftScales.expand({m}).contiguous();
        const at::Tensor rightVector = rightScales.numel() == n ? rightScales : rightScales.expand({n}).contiguous();
        const kernels::LtStatus status = kernels::fp8GemmLt(leftCodes, rightCodes, m, n, k, floatPointer(leftVector),
            floatPointer(rightVector), kernels::ScaleMode::OuterVector, biasPointer, out);
        if (status.ok) {
            result.path = Fp8GemmPath::CublasLtOuterVectorScales;
            result.note = "per-row scales through CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F";
            return result;
        }
        why = std::string("outer-vector scales refused (") + status.what + ")";
    }
    // FP8 tensor cores without scales, float32 accumulator out, scales and bias applied by our epilogue.
    at::Tensor accumulator = at::empty({m, n}, left.options().dtype(at::kFloat));
    const kernels::LtStatus status = kernels::fp8GemmLtFloatOut(leftCodes, rightCodes, m, n, k, accumulator.data_ptr<float>());
    if (!status.ok) {
        return dequantizedGemm(a, b, bias, why + "; unit-scale FP8 refused too (" + status.what + ")", fallback);
    }
    const at::Tensor biasFloat = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
    kernels::scaleEpilogue(accumulator.data_ptr<float>(), m, n, floatPointer(leftScales), leftScales.numel(),
        floatPointer(rightScales), rightScales.numel(), biasFloat.defined() ? floatPointer(biasFloat) : nullptr, out);
    result.path = Fp8GemmPath::CublasLtUnitScalesEpilogue;
    result.note = why + "; scales applied in the epilogue";
    return result;
}

void synchronize(const at::Tensor& onDevice)
{
    requireCuda(onDevice, "tensor");
    const DeviceScope scope(onDevice);
    kernels::synchronize();
}

} // namespace mismatch::cuda

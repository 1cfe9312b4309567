#include "core/engine/paged_kv_cache.h"

#include "core/common/error.h"
#include "core/common/vector_clones.h"
#include "core/model/transformer_linear.h"
#include "core/quant/fp8.h"

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/fp8_ops.h"
#endif

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>

namespace mismatch::engine {

namespace {

constexpr std::int64_t kScaleBytes = 4; // float32 scales

std::atomic<std::uint64_t> peakStorage {0};

void recordStorage(std::uint64_t bytes)
{
    std::uint64_t seen = peakStorage.load();
    while (bytes > seen && !peakStorage.compare_exchange_weak(seen, bytes)) {
    }
}

std::atomic<std::int64_t> deviceAttentionCount {0};
std::atomic<std::int64_t> deviceAppendCount {0};

} // namespace

std::int64_t deviceKvAttentionCalls()
{
    return deviceAttentionCount.load();
}

std::int64_t deviceKvAppendCalls()
{
    return deviceAppendCount.load();
}

std::uint64_t peakKvStorageBytes()
{
    return peakStorage.load();
}

namespace {

at::ScalarType storageType(KvStorage kind)
{
    switch (kind) {
    case KvStorage::BFloat16:
        return at::kBFloat16;
    case KvStorage::Fp8Codes:
    case KvStorage::Fp8TokenHeadCodes:
        return at::kByte;
    case KvStorage::Int8TokenHeadCodes:
        return at::kChar;
    default:
        return at::kFloat;
    }
}

bool isTokenHead(KvStorage kind)
{
    return kind == KvStorage::Fp8TokenHeadCodes || kind == KvStorage::Int8TokenHeadCodes;
}

// Per-row scales [rows, kvHeads, 1] of `scales` ([1] or [kvHeads]).
at::Tensor headScales(const at::Tensor& scales, const at::Tensor& like)
{
    // Programmer error: an fp8 layer is written and read with the scales its quantizer rounded with.
    assert(scales.defined());
    return scales.to(like.device()).to(at::kFloat).reshape({1, -1, 1});
}

// Rows [N, kvHeads, headDim] of float32 values (already on the layer's grid) in the storage's type. bf16: the cast
// is exact for values on the bf16 grid. fp8: value / scale is within two float32 roundings of the code's value,
// and FP8 codes are far apart, so encoding it gives back the code exactly.
at::Tensor toStorage(const at::Tensor& rows, KvStorage kind, const at::Tensor& scales)
{
    switch (kind) {
    case KvStorage::BFloat16:
        return rows.to(at::kBFloat16);
    case KvStorage::Fp8Codes:
        return quant::encodeFp8((rows / headScales(scales, rows)).contiguous(), quant::Fp8Format::E4M3);
    case KvStorage::Fp8TokenHeadCodes:
        // Code values (e4m3 numbers) encode to their own codes exactly.
        return quant::encodeFp8(rows, quant::Fp8Format::E4M3);
    case KvStorage::Int8TokenHeadCodes:
        return rows.to(at::kChar); // integers in [-128, 127]: exact
    default:
        return rows;
    }
}

// Float32 values of stored rows: bf16 widened exactly; fp8 code value x scale, the float32 multiply the quantizer
// rounded with (quant::fakeQuantizeKv), so the values read are bit-identical to the ones written.
at::Tensor fromStorage(const at::Tensor& rows, KvStorage kind, const at::Tensor& scales)
{
    switch (kind) {
    case KvStorage::BFloat16: {
        at::Tensor out = at::empty(rows.sizes(), rows.options().dtype(at::kFloat));
        if (rows.device().is_cpu()) {
            const at::Tensor input = rows.contiguous();
            model::widenBFloat16(
                static_cast<const std::uint16_t*>(input.data_ptr()), out.data_ptr<float>(), input.numel());
            return out;
        }
        return rows.to(at::kFloat);
    }
    case KvStorage::Fp8Codes:
        return quant::decodeFp8(rows, quant::Fp8Format::E4M3) * headScales(scales, rows);
    case KvStorage::Fp8TokenHeadCodes:
        // Per-token-head scales: [rows, kvHeads], one per stored row of headDim; the quantizer's float32 multiply.
        return quant::decodeFp8(rows, quant::Fp8Format::E4M3) * scales.unsqueeze(2);
    case KvStorage::Int8TokenHeadCodes:
        return rows.to(at::kFloat) * scales.unsqueeze(2);
    default:
        return rows;
    }
}

} // namespace

// ---------------------------------------------------------------------------------------------------------------
// Layout

std::vector<std::int64_t> KvCacheLayout::layerBytesPerToken() const
{
    std::vector<std::int64_t> bytes;
    bytes.reserve(elementBytes.size());
    for (std::size_t layer = 0; layer < elementBytes.size(); ++layer) {
        const std::int64_t tokenScales = layer < tokenScaleCounts.size() ? tokenScaleCounts[layer] : 0;
        bytes.push_back(
            static_cast<std::int64_t>(std::llround(2.0 * static_cast<double>(kvHeads * headDim) * elementBytes[layer]))
            + tokenScales * kScaleBytes);
    }
    return bytes;
}

std::int64_t KvCacheLayout::bytesPerToken() const
{
    std::int64_t total = 0;
    for (std::int64_t bytes : layerBytesPerToken()) {
        total += bytes;
    }
    return total;
}

std::int64_t KvCacheLayout::scaleBytes() const
{
    std::int64_t count = 0;
    for (std::int64_t scales : scaleCounts) {
        count += scales;
    }
    return count * kScaleBytes;
}

KvCacheLayout kvCacheLayout(const model::ModelConfig& config, const std::vector<quant::KvPrecision>& precisions)
{
    assert(static_cast<std::int64_t>(precisions.size()) == config.numLayers);
    KvCacheLayout layout;
    layout.numLayers = config.numLayers;
    layout.kvHeads = config.numKeyValueHeads;
    layout.headDim = config.headDim;
    for (const quant::KvPrecision& precision : precisions) {
        const bool fp8 = precision.format == quant::KvFormat::Fp8E4m3;
        const bool tokenHead = quant::isPerTokenHead(precision.format);
        layout.elementBytes.push_back(quant::bytesPerElement(precision.format));
        // K and V each: one float32 scale per token and KV head, stored with the token.
        layout.tokenScaleCounts.push_back(tokenHead ? 2 * config.numKeyValueHeads : 0);
        if (!fp8) {
            layout.scaleCounts.push_back(0);
        } else {
            // K and V each: one scale per tensor, or one per KV head.
            layout.scaleCounts.push_back(
                precision.scales == quant::KvScales::PerHead ? 2 * config.numKeyValueHeads : 2);
        }
    }
    return layout;
}

KvCacheLayout kvCacheLayout(const model::ModelConfig& config, const quant::RecipePlan* plan)
{
    if (plan) {
        return kvCacheLayout(config, plan->kvPerLayer);
    }
    return kvCacheLayout(config, std::vector<quant::KvPrecision>(static_cast<std::size_t>(config.numLayers)));
}

KvCacheLayout kvCacheLayout(const EngineModel& model)
{
    KvCacheLayout layout = kvCacheLayout(model.config(), model.kvPrecisions());
    if (model.precision() == EnginePrecision::Fp32) {
        std::fill(layout.elementBytes.begin(), layout.elementBytes.end(), 4.0); // float32 keys and values
        std::fill(layout.scaleCounts.begin(), layout.scaleCounts.end(), 0);
        std::fill(layout.tokenScaleCounts.begin(), layout.tokenScaleCounts.end(), 0);
    }
    return layout;
}

// ---------------------------------------------------------------------------------------------------------------
// Allocator

KvBlockAllocator::KvBlockAllocator(KvCacheLayout layout, std::uint64_t memoryBytes, std::int64_t blockSize)
    : layout_(std::move(layout))
    , memoryBytes_(memoryBytes)
    , blockSize_(blockSize)
{
    // Programmer error: callers validate block sizes from input.
    assert(blockSize_ > 0);
    bytesPerBlock_ = blockSize_ * layout_.bytesPerToken();
    const auto scaleBytes = static_cast<std::uint64_t>(layout_.scaleBytes());
    if (bytesPerBlock_ > 0 && memoryBytes_ > scaleBytes) {
        totalBlocks_
            = static_cast<std::int64_t>((memoryBytes_ - scaleBytes) / static_cast<std::uint64_t>(bytesPerBlock_));
    }
    for (std::int64_t block = 0; block < totalBlocks_; ++block) {
        free_.insert(free_.end(), block);
    }
}

std::optional<SequenceId> KvBlockAllocator::allocate(std::int64_t tokens)
{
    assert(tokens >= 0);
    const std::int64_t blocks = blocksFor(tokens);
    if (blocks > freeBlocks()) {
        return std::nullopt;
    }
    std::vector<std::int64_t> table;
    table.reserve(static_cast<std::size_t>(blocks));
    for (std::int64_t i = 0; i < blocks; ++i) {
        const auto lowest = free_.begin();
        table.push_back(*lowest);
        highWater_ = std::max(highWater_, *lowest + 1);
        free_.erase(lowest);
    }
    const SequenceId sequence = nextSequence_++;
    tables_.emplace(sequence, std::move(table));
    return sequence;
}

void KvBlockAllocator::release(SequenceId sequence)
{
    const auto found = tables_.find(sequence);
    assert(found != tables_.end());
    if (found == tables_.end()) {
        return;
    }
    for (std::int64_t block : found->second) {
        free_.insert(block);
    }
    tables_.erase(found);
}

const std::vector<std::int64_t>& KvBlockAllocator::blockTable(SequenceId sequence) const
{
    const auto found = tables_.find(sequence);
    assert(found != tables_.end());
    return found->second;
}

std::int64_t KvBlockAllocator::reservedTokens(SequenceId sequence) const
{
    return static_cast<std::int64_t>(blockTable(sequence).size()) * blockSize_;
}

// ---------------------------------------------------------------------------------------------------------------
// Pool

std::vector<KvStorage> kvStorage(const EngineModel& model)
{
    const KvQuantizer& quantizer = model.kvQuantizer();
    std::vector<KvStorage> storage;
    for (std::int64_t layer = 0; layer < model.config().numLayers; ++layer) {
        const quant::KvFormat format = quantizer.precision(layer).format;
        storage.push_back(!quantizer.rounds()                 ? KvStorage::Float32
                : quantizer.isFp8(layer)                      ? KvStorage::Fp8Codes
                : format == quant::KvFormat::Fp8PerTokenHead  ? KvStorage::Fp8TokenHeadCodes
                : format == quant::KvFormat::Int8PerTokenHead ? KvStorage::Int8TokenHeadCodes
                                                              : KvStorage::BFloat16);
    }
    return storage;
}

KvBlockPool::KvBlockPool(
    KvCacheLayout layout, std::uint64_t memoryBytes, std::int64_t blockSize, std::vector<KvStorage> storage)
    : allocator_(std::move(layout), memoryBytes, blockSize)
    , storage_(std::move(storage))
    , keys_(static_cast<std::size_t>(allocator_.layout().numLayers))
    , values_(static_cast<std::size_t>(allocator_.layout().numLayers))
    , keyScales_(static_cast<std::size_t>(allocator_.layout().numLayers))
    , valueScales_(static_cast<std::size_t>(allocator_.layout().numLayers))
{
    storage_.resize(keys_.size(), KvStorage::Float32);
}

std::uint64_t KvBlockPool::storageBytes() const
{
    std::uint64_t bytes = 0;
    for (std::size_t layer = 0; layer < keys_.size(); ++layer) {
        for (const at::Tensor* tensor : {&keys_[layer], &values_[layer], &keyScales_[layer], &valueScales_[layer]}) {
            bytes += tensor->defined() ? static_cast<std::uint64_t>(tensor->nbytes()) : 0;
        }
    }
    return bytes;
}

std::int64_t KvBlockPool::storageSlots() const
{
    return keys_.empty() || !keys_[0].defined() ? 0 : keys_[0].size(0);
}

void KvBlockPool::reserveStorage(std::int64_t blocks)
{
    const KvCacheLayout& layout = allocator_.layout();
    const std::int64_t blockSize = allocator_.blockSize();
    const std::int64_t needed = 1 + blocks * blockSize;
    const std::int64_t current = storageSlots();
    if (current >= needed) {
        return;
    }
    // Grow geometrically (bounded by the budget's blocks) so that a wave's allocations copy O(total) data.
    const std::int64_t limit = 1 + allocator_.totalBlocks() * blockSize;
    const std::int64_t size = std::max(needed, std::min(limit, 2 * current));
    for (std::size_t layer = 0; layer < keys_.size(); ++layer) {
        const at::ScalarType dtype = storageType(storage_[layer]);
        for (at::Tensor* storage : {&keys_[layer], &values_[layer]}) {
            const at::Device device = storage->defined() ? storage->device() : at::Device(at::kCPU);
            at::Tensor grown
                = at::zeros({size, layout.kvHeads, layout.headDim}, at::TensorOptions().dtype(dtype).device(device));
            if (storage->defined()) {
                grown.narrow(0, 0, storage->size(0)).copy_(*storage);
            }
            *storage = grown;
        }
        if (!isTokenHead(storage_[layer])) {
            continue;
        }
        // A scale per slot and KV head; the zero slot's scale is 0, so padding reads 0 x 0.
        for (at::Tensor* scales : {&keyScales_[layer], &valueScales_[layer]}) {
            const at::Device device = keys_[layer].device();
            at::Tensor grown = at::zeros({size, layout.kvHeads}, at::TensorOptions().dtype(at::kFloat).device(device));
            if (scales->defined()) {
                grown.narrow(0, 0, scales->size(0)).copy_(*scales);
            }
            *scales = grown;
        }
    }
    recordStorage(storageBytes());
}

void KvBlockPool::write(std::int64_t layer, const at::Tensor& slots, const at::Tensor& keys, const at::Tensor& values,
    const at::Tensor& keyScales, const at::Tensor& valueScales)
{
    reserveStorage(allocator_.highWaterBlocks());
    const KvStorage kind = storage_[static_cast<std::size_t>(layer)];
    at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    if (storedKeys.device() != keys.device()) {
        storedKeys = storedKeys.to(keys.device());
        storedValues = storedValues.to(keys.device());
    }
    const at::Tensor index = slots.to(keys.device());
    if (isTokenHead(kind)) {
        // Code values and their scales [N, kvHeads] (KvQuantizer::quantizeTokenHead), stored side by side.
        at::Tensor& storedKeyScales = keyScales_[static_cast<std::size_t>(layer)];
        at::Tensor& storedValueScales = valueScales_[static_cast<std::size_t>(layer)];
        storedKeyScales = storedKeyScales.to(keys.device());
        storedValueScales = storedValueScales.to(keys.device());
        storedKeys.index_copy_(0, index, toStorage(keys.to(at::kFloat), kind, at::Tensor()));
        storedValues.index_copy_(0, index, toStorage(values.to(at::kFloat), kind, at::Tensor()));
        storedKeyScales.index_copy_(0, index, keyScales.to(keys.device()).to(at::kFloat));
        storedValueScales.index_copy_(0, index, valueScales.to(keys.device()).to(at::kFloat));
        return;
    }
#if defined(MISMATCH_HAVE_CUDA)
    if (kind == KvStorage::Fp8Codes && keys.is_cuda()) {
        // The FP8 KV append kernel: code = encode(value / scale of its head), written at each slot (bit for bit the
        // CPU codec's codes, tests/gpu).
        const auto scalesOn = [&](const at::Tensor& scales) { return scales.to(keys.device()).to(at::kFloat).reshape({-1}); };
        cuda::appendKvFp8(storedKeys, scalesOn(keyScales), keys.contiguous(), index);
        cuda::appendKvFp8(storedValues, scalesOn(valueScales), values.contiguous(), index);
        ++deviceAppendCount;
        return;
    }
#endif
    storedKeys.index_copy_(0, index, toStorage(keys.to(at::kFloat), kind, keyScales));
    storedValues.index_copy_(0, index, toStorage(values.to(at::kFloat), kind, valueScales));
}

bool KvBlockPool::attendsOnDevice(std::int64_t layer) const
{
#if defined(MISMATCH_HAVE_CUDA)
    const KvStorage kind = storage_[static_cast<std::size_t>(layer)];
    return kind == KvStorage::Fp8Codes || kind == KvStorage::BFloat16;
#else
    (void)layer;
    return false;
#endif
}

at::Tensor KvBlockPool::attendOnDevice(std::int64_t layer, const at::Tensor& table, const at::Tensor& lengths,
    const at::Tensor& q, const at::Tensor& keyScales, const at::Tensor& valueScales) const
{
#if defined(MISMATCH_HAVE_CUDA)
    const KvStorage kind = storage_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    const at::Device device = storedKeys.device();
    const auto view = [&](const at::Tensor& storage, const at::Tensor& scales) {
        return cuda::KvCacheView {storage,
            kind == KvStorage::Fp8Codes ? scales.to(device).to(at::kFloat).reshape({-1}) : at::Tensor()};
    };
    const std::int64_t batch = q.size(0);
    const std::int64_t heads = q.size(1);
    const std::int64_t headDim = q.size(3);
    const at::Tensor out = cuda::decodeAttention(q.reshape({batch, heads, headDim}).contiguous(),
        view(storedKeys, keyScales), view(storedValues, valueScales), table.to(device), lengths.to(device),
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(headDim))));
    ++deviceAttentionCount;
    return out.reshape({batch, 1, heads * headDim});
#else
    (void)layer, (void)table, (void)lengths, (void)q, (void)keyScales, (void)valueScales;
    throw Error("this build has no CUDA kernels");
#endif
}

std::pair<at::Tensor, at::Tensor> KvBlockPool::read(
    std::int64_t layer, const at::Tensor& slots, const at::Tensor& keyScales, const at::Tensor& valueScales) const
{
    const KvCacheLayout& layout = allocator_.layout();
    const std::int64_t batch = slots.size(0);
    const std::int64_t length = slots.size(1);
    const KvStorage kind = storage_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    if (!storedKeys.defined()) {
        const at::Tensor zeros = at::zeros({batch, layout.kvHeads, length, layout.headDim}, at::kFloat);
        return {zeros, zeros};
    }
    const at::Tensor index = slots.reshape({-1}).to(storedKeys.device());
    const auto gather = [&](const at::Tensor& storage, const at::Tensor& scales) {
        return fromStorage(storage.index_select(0, index), kind, scales)
            .view({batch, length, layout.kvHeads, layout.headDim})
            .permute({0, 2, 1, 3});
    };
    if (isTokenHead(kind)) {
        // Each slot's own scales, gathered with its codes.
        return {gather(storedKeys, keyScales_[static_cast<std::size_t>(layer)].index_select(0, index)),
            gather(storedValues, valueScales_[static_cast<std::size_t>(layer)].index_select(0, index))};
    }
    return {gather(storedKeys, keyScales), gather(storedValues, valueScales)};
}

namespace {

MISMATCH_VECTOR_CLONES
void widenRow(const std::uint16_t* in, float* out, std::int64_t count)
{
    for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t bits = static_cast<std::uint32_t>(in[i]) << 16;
        std::memcpy(out + i, &bits, sizeof bits);
    }
}

// One stored row (headDim elements of one slot and KV head) as float32: bf16 widened, fp8 code value x scale (the
// multiply fromStorage does), float32 as it is.
struct RowReader {
    KvStorage kind = KvStorage::Float32;
    const void* base = nullptr;
    std::int64_t rowElements = 0; // kvHeads * headDim: one slot
    std::int64_t headDim = 0;
    const float* scales = nullptr; // fp8: [1] or [kvHeads]; per-token-head formats: [slots, kvHeads]
    bool perHead = false;
    std::int64_t kvHeads = 0; // per-token-head formats: scales per slot
    const float* fp8Table = nullptr;

    // Returns a pointer to the row's float32 values (`buffer` when converted).
    const float* row(std::int64_t slot, std::int64_t head, float* buffer) const
    {
        const std::int64_t offset = slot * rowElements + head * headDim;
        switch (kind) {
        case KvStorage::BFloat16:
            widenRow(static_cast<const std::uint16_t*>(base) + offset, buffer, headDim);
            return buffer;
        case KvStorage::Fp8Codes: {
            const float scale = scales[perHead ? head : 0];
            const auto* codes = static_cast<const std::uint8_t*>(base) + offset;
            for (std::int64_t d = 0; d < headDim; ++d) {
                buffer[d] = fp8Table[codes[d]] * scale;
            }
            return buffer;
        }
        case KvStorage::Fp8TokenHeadCodes: {
            const float scale = scales[slot * kvHeads + head];
            const auto* codes = static_cast<const std::uint8_t*>(base) + offset;
            for (std::int64_t d = 0; d < headDim; ++d) {
                buffer[d] = fp8Table[codes[d]] * scale;
            }
            return buffer;
        }
        case KvStorage::Int8TokenHeadCodes: {
            const float scale = scales[slot * kvHeads + head];
            const auto* codes = static_cast<const std::int8_t*>(base) + offset;
            for (std::int64_t d = 0; d < headDim; ++d) {
                buffer[d] = static_cast<float>(codes[d]) * scale;
            }
            return buffer;
        }
        default:
            return static_cast<const float*>(base) + offset;
        }
    }

};

RowReader rowReader(KvStorage kind, const at::Tensor& storage, const at::Tensor& scales)
{
    RowReader reader;
    reader.kind = kind;
    reader.base = storage.data_ptr();
    reader.rowElements = storage.size(1) * storage.size(2);
    reader.headDim = storage.size(2);
    if (kind == KvStorage::Fp8Codes || isTokenHead(kind)) {
        // Programmer error: an fp8 layer is read with the scales its quantizer rounded with, a per-token-head layer
        // with its stored scales (contiguous float32 [slots, kvHeads]).
        assert(scales.defined() && scales.device().is_cpu() && scales.scalar_type() == at::kFloat);
        assert(scales.is_contiguous());
        reader.scales = scales.data_ptr<float>();
        reader.perHead = scales.numel() > 1;
        reader.kvHeads = storage.size(1);
        reader.fp8Table = quant::fp8DecodeTable(quant::Fp8Format::E4M3).data();
    }
    return reader;
}

// sum_d a[d] b[d] in float32: 8 lanes over d, then the lanes pairwise, then the tail (transformer_linear's order).
MISMATCH_VECTOR_CLONES
float dot(const float* a, const float* b, std::int64_t count)
{
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const std::int64_t vectorEnd = count / 8 * 8;
    for (std::int64_t k = 0; k < vectorEnd; k += 8) {
        for (int lane = 0; lane < 8; ++lane) {
            lanes[lane] += a[k + lane] * b[k + lane];
        }
    }
    float sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
    for (std::int64_t k = vectorEnd; k < count; ++k) {
        sum += a[k] * b[k];
    }
    return sum;
}

// out[d] += p * v[d]
MISMATCH_VECTOR_CLONES
void accumulate(float* out, float p, const float* v, std::int64_t count)
{
    for (std::int64_t d = 0; d < count; ++d) {
        out[d] += p * v[d];
    }
}

} // namespace

at::Tensor KvBlockPool::attend(std::int64_t layer, const at::Tensor& slots, const at::Tensor& q, const at::Tensor& bias,
    const at::Tensor& keyScales, const at::Tensor& valueScales) const
{
    const KvCacheLayout& layout = allocator_.layout();
    const std::int64_t batch = q.size(0);
    const std::int64_t heads = q.size(1);
    const std::int64_t headDim = layout.headDim;
    const std::int64_t kvHeads = layout.kvHeads;
    const std::int64_t groups = heads / kvHeads;
    const std::int64_t length = slots.size(1);
    // Programmer error: one query per row, on the CPU, shapes as documented.
    assert(q.size(2) == 1 && q.size(3) == headDim && heads % kvHeads == 0 && slots.size(0) == batch);
    assert(bias.size(0) == batch && bias.size(-1) == length);
    at::Tensor out = at::zeros({batch, 1, heads * headDim}, at::kFloat);
    const at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    if (!storedKeys.defined() || length == 0) {
        return out; // nothing was ever written: every key and value reads as zero (as read() gives them)
    }
    const KvStorage kind = storage_[static_cast<std::size_t>(layer)];
    // Per-token-head layers read the scales stored with their codes.
    const at::Tensor& usedKeyScales = isTokenHead(kind) ? keyScales_[static_cast<std::size_t>(layer)] : keyScales;
    const at::Tensor& usedValueScales = isTokenHead(kind) ? valueScales_[static_cast<std::size_t>(layer)] : valueScales;
    const at::Tensor cpuKeyScales
        = usedKeyScales.defined() ? usedKeyScales.to(at::kCPU).to(at::kFloat).contiguous() : usedKeyScales;
    const at::Tensor cpuValueScales
        = usedValueScales.defined() ? usedValueScales.to(at::kCPU).to(at::kFloat).contiguous() : usedValueScales;
    const RowReader keyReader = rowReader(kind, storedKeys, cpuKeyScales);
    const RowReader valueReader = rowReader(kind, storedValues, cpuValueScales);
    const at::Tensor query = q.contiguous();
    const at::Tensor slotIndex = slots.to(at::kCPU).to(at::kLong).contiguous();
    const at::Tensor additive = bias.contiguous();
    const float* queries = query.data_ptr<float>();
    const std::int64_t* slotData = slotIndex.data_ptr<std::int64_t>();
    const float* biasData = additive.data_ptr<float>();
    float* outData = out.data_ptr<float>();
    // Transformer::attention multiplies the float32 scores by the double 1/sqrt(D), which ATen applies in float32.
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(headDim)));
    // One task per row of the batch, each slot's keys (then values) of every KV head read as one contiguous
    // stretch: the stored rows are [slot, kvHead, headDim], and reading one head's part of many slots stalls on
    // memory.
    at::parallel_for(0, batch, 1, [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> scores(static_cast<std::size_t>(heads * length));
        std::vector<float> buffer(static_cast<std::size_t>(headDim));
        for (std::int64_t b = begin; b < end; ++b) {
            const std::int64_t* rowSlots = slotData + b * length;
            const float* rowBias = biasData + b * length;
            const float* rowQueries = queries + b * heads * headDim;
            // scores[h * length + s]: query head h (KV head h / groups) against position s.
            for (std::int64_t s = 0; s < length; ++s) {
                for (std::int64_t kvHead = 0; kvHead < kvHeads; ++kvHead) {
                    const float* key = keyReader.row(rowSlots[s], kvHead, buffer.data());
                    for (std::int64_t g = 0; g < groups; ++g) {
                        const std::int64_t h = kvHead * groups + g;
                        scores[static_cast<std::size_t>(h * length + s)]
                            = dot(rowQueries + h * headDim, key, headDim) * scale + rowBias[s];
                    }
                }
            }
            // Softmax per query head: the largest score subtracted, exp, divided by the sum.
            for (std::int64_t h = 0; h < heads; ++h) {
                float* row = scores.data() + h * length;
                float maximum = -std::numeric_limits<float>::infinity();
                for (std::int64_t s = 0; s < length; ++s) {
                    maximum = std::max(maximum, row[s]);
                }
                float sum = 0.0f;
                for (std::int64_t s = 0; s < length; ++s) {
                    row[s] = std::exp(row[s] - maximum);
                    sum += row[s];
                }
                for (std::int64_t s = 0; s < length; ++s) {
                    row[s] /= sum;
                }
            }
            float* rowOut = outData + b * heads * headDim;
            for (std::int64_t s = 0; s < length; ++s) {
                for (std::int64_t kvHead = 0; kvHead < kvHeads; ++kvHead) {
                    const float* value = valueReader.row(rowSlots[s], kvHead, buffer.data());
                    for (std::int64_t g = 0; g < groups; ++g) {
                        const std::int64_t h = kvHead * groups + g;
                        const float p = scores[static_cast<std::size_t>(h * length + s)];
                        if (p != 0.0f) {
                            accumulate(rowOut + h * headDim, p, value, headDim);
                        }
                    }
                }
            }
        }
    });
    return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Paged cache

PagedKvCache::PagedKvCache(KvBlockPool& pool, KvQuantizer* quantizer)
    : pool_(pool)
    , quantizer_(quantizer)
{
}

PagedKvCache::~PagedKvCache()
{
    for (const Row& row : rows_) {
        pool_.allocator().release(row.sequence);
    }
}

void PagedKvCache::addRow(SequenceId sequence, std::int64_t padding)
{
    // Programmer error: rows join before the first forward (they share one logical length).
    assert(length_ == 0 && padding >= 0);
    rows_.push_back({sequence, padding});
}

at::Tensor PagedKvCache::newSlots(std::int64_t tokens) const
{
    const KvBlockAllocator& allocator = pool_.allocator();
    const std::int64_t blockSize = allocator.blockSize();
    at::Tensor slots = at::zeros({rows(), tokens}, at::kLong);
    auto access = slots.accessor<std::int64_t, 2>();
    for (std::size_t row = 0; row < rows_.size(); ++row) {
        const std::vector<std::int64_t>& table = allocator.blockTable(rows_[row].sequence);
        const std::int64_t reserved = static_cast<std::int64_t>(table.size()) * blockSize;
        for (std::int64_t t = 0; t < tokens; ++t) {
            const std::int64_t index = length_ + t - rows_[row].padding; // position within the sequence
            if (index < 0) {
                continue; // padding: reads the zero slot, takes no block
            }
            if (index >= reserved) {
                throw ResourceError("paged KV cache: sequence " + std::to_string(rows_[row].sequence) + " needs token "
                    + std::to_string(index + 1) + " but reserved " + std::to_string(reserved) + " tokens");
            }
            access[static_cast<std::int64_t>(row)][t]
                = 1 + table[static_cast<std::size_t>(index / blockSize)] * blockSize + index % blockSize;
        }
    }
    return slots;
}

std::pair<at::Tensor, at::Tensor> PagedKvCache::store(
    std::int64_t layer, const at::Tensor& keys, const at::Tensor& values)
{
    const std::int64_t batch = keys.size(0);
    const std::int64_t tokens = keys.size(2);
    // Programmer error: the forward's batch is this cache's rows.
    assert(batch == rows());
    if (layer == 0 || !pendingSlots_.defined()) {
        pendingSlots_ = newSlots(tokens); // layer 0 starts every forward
    }
    const at::Tensor real = pendingSlots_.gt(0);
    at::Tensor k = keys;
    at::Tensor v = values;
    at::Tensor keyScales;
    at::Tensor valueScales;
    const bool tokenHead = quantizer_ && quantizer_->isPerTokenHead(layer);
    // Per-token-head layers: the codes and each row's scales [B, kvHeads, T], written as they are.
    at::Tensor keyRowScales;
    at::Tensor valueRowScales;
    if (tokenHead) {
        quant::PerTokenHeadKv keyCodes = quantizer_->quantizeTokenHead(layer, keys);
        quant::PerTokenHeadKv valueCodes = quantizer_->quantizeTokenHead(layer, values);
        k = keyCodes.codes.to(keys.device());
        v = valueCodes.codes.to(values.device());
        keyRowScales = keyCodes.scales.to(keys.device());
        valueRowScales = valueCodes.scales.to(values.device());
    } else if (quantizer_) {
        std::tie(k, v) = quantizer_->quantize(layer, keys, values, real);
        if (quantizer_->isFp8(layer)) {
            keyScales = quantizer_->scales().keys[static_cast<std::size_t>(layer)];
            valueScales = quantizer_->scales().values[static_cast<std::size_t>(layer)];
        }
    }
    const std::int64_t kvHeads = k.size(1);
    const std::int64_t headDim = k.size(3);
    const at::Tensor realRows = real.reshape({-1}).nonzero().reshape({-1});
    if (realRows.numel() > 0) {
        const auto rowsOf = [&](const at::Tensor& kv) {
            return kv.permute({0, 2, 1, 3})
                .reshape({batch * tokens, kvHeads, headDim})
                .index_select(0, realRows.to(kv.device()));
        };
        const auto scaleRowsOf = [&](const at::Tensor& scales) {
            return scales.permute({0, 2, 1})
                .reshape({batch * tokens, kvHeads})
                .index_select(0, realRows.to(scales.device()));
        };
        const at::Tensor slots = pendingSlots_.reshape({-1}).index_select(0, realRows);
        if (tokenHead) {
            pool_.write(layer, slots, rowsOf(k), rowsOf(v), scaleRowsOf(keyRowScales), scaleRowsOf(valueRowScales));
        } else {
            pool_.write(layer, slots, rowsOf(k), rowsOf(v), keyScales, valueScales);
        }
    }
    return {keyScales, valueScales};
}

at::Tensor PagedKvCache::allSlots() const
{
    return slots_.defined() && length_ > 0 ? at::cat({slots_, pendingSlots_}, 1) : pendingSlots_;
}

std::pair<at::Tensor, at::Tensor> PagedKvCache::append(
    std::int64_t layer, const at::Tensor& keys, const at::Tensor& values)
{
    const auto [keyScales, valueScales] = store(layer, keys, values);
    return pool_.read(layer, allSlots(), keyScales, valueScales);
}

at::Tensor PagedKvCache::appendAndAttend(
    std::int64_t layer, const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& bias)
{
    if (q.is_cuda() && q.scalar_type() == at::kFloat && q.size(2) == 1 && pool_.attendsOnDevice(layer)) {
        const auto [keyScales, valueScales] = store(layer, keys, values);
        if (!deviceTable_.defined()) {
            // A decoding step's bias only hides each row's left padding (every later position is real), so the
            // kernel attends over each row's positions from its padding on: their slots left-aligned, and how many.
            // The same for every layer of the step: built once, moved to the device once.
            const at::Tensor slots = allSlots().to(at::kCPU).contiguous();
            const std::int64_t total = slots.size(1);
            at::Tensor table = at::zeros({rows(), total}, at::kLong);
            at::Tensor lengths = at::empty({rows()}, at::kLong);
            const auto from = slots.accessor<std::int64_t, 2>();
            auto to = table.accessor<std::int64_t, 2>();
            auto count = lengths.accessor<std::int64_t, 1>();
            for (std::int64_t row = 0; row < rows(); ++row) {
                const std::int64_t real = total - std::min(total, rows_[static_cast<std::size_t>(row)].padding);
                for (std::int64_t t = 0; t < real; ++t) {
                    to[row][t] = from[row][total - real + t];
                }
                count[row] = real;
            }
            deviceTable_ = table.to(q.device());
            deviceLengths_ = lengths.to(q.device());
        }
        return pool_.attendOnDevice(layer, deviceTable_, deviceLengths_, q, keyScales, valueScales);
    }
    if (!q.device().is_cpu() || q.scalar_type() != at::kFloat || q.size(2) != 1 || bias.scalar_type() != at::kFloat) {
        return {};
    }
    const auto [keyScales, valueScales] = store(layer, keys, values);
    return pool_.attend(layer, allSlots(), q, bias, keyScales, valueScales);
}

void PagedKvCache::advance(std::int64_t tokens)
{
    assert(pendingSlots_.defined() && pendingSlots_.size(1) == tokens);
    slots_ = slots_.defined() && length_ > 0 ? at::cat({slots_, pendingSlots_}, 1) : pendingSlots_;
    pendingSlots_ = at::Tensor();
    deviceTable_ = at::Tensor();
    deviceLengths_ = at::Tensor();
    length_ += tokens;
}

void PagedKvCache::keepRows(const std::vector<std::int64_t>& keep)
{
    std::vector<bool> kept(rows_.size(), false);
    std::vector<Row> rows;
    for (std::int64_t row : keep) {
        assert(row >= 0 && row < this->rows());
        kept[static_cast<std::size_t>(row)] = true;
        rows.push_back(rows_[static_cast<std::size_t>(row)]);
    }
    for (std::size_t row = 0; row < rows_.size(); ++row) {
        if (!kept[row]) {
            pool_.allocator().release(rows_[row].sequence);
        }
    }
    rows_ = std::move(rows);
    deviceTable_ = at::Tensor();
    deviceLengths_ = at::Tensor();
    if (slots_.defined()) {
        slots_ = slots_.index_select(0, at::tensor(keep, at::kLong));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Capacity

KvCapacity kvCapacity(
    const model::ModelConfig& config, const quant::RecipePlan* plan, std::uint64_t memoryBytes, std::int64_t blockSize)
{
    if (blockSize <= 0) {
        throw InputError(
            "kv capacity", "block size", "must be a positive number of tokens, got " + std::to_string(blockSize));
    }
    const KvBlockAllocator allocator(kvCacheLayout(config, plan), memoryBytes, blockSize);
    const KvBlockAllocator bf16(kvCacheLayout(config, nullptr), memoryBytes, blockSize);
    KvCapacity capacity;
    capacity.blockSize = blockSize;
    capacity.memoryBytes = memoryBytes;
    capacity.blocks = allocator.totalBlocks();
    capacity.tokens = allocator.capacityTokens();
    capacity.bytesPerToken = allocator.layout().bytesPerToken();
    capacity.layerBytesPerToken = allocator.layout().layerBytesPerToken();
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        capacity.layerFormats.push_back(
            plan ? quant::describe(plan->kvPerLayer[static_cast<std::size_t>(layer)]) : std::string("bf16"));
    }
    capacity.scaleBytes = allocator.layout().scaleBytes();
    capacity.bf16Blocks = bf16.totalBlocks();
    capacity.bf16Tokens = bf16.capacityTokens();
    capacity.ratioToBf16 = capacity.bf16Tokens == 0
        ? 0.0
        : static_cast<double>(capacity.tokens) / static_cast<double>(capacity.bf16Tokens);
    return capacity;
}

} // namespace mismatch::engine

#include "core/engine/paged_kv_cache.h"

#include "core/common/error.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cassert>
#include <cmath>

namespace mismatch::engine {

namespace {

constexpr std::int64_t kScaleBytes = 4; // float32 scales

} // namespace

// ---------------------------------------------------------------------------------------------------------------
// Layout

std::vector<std::int64_t> KvCacheLayout::layerBytesPerToken() const
{
    std::vector<std::int64_t> bytes;
    bytes.reserve(elementBytes.size());
    for (double element : elementBytes) {
        bytes.push_back(
            static_cast<std::int64_t>(std::llround(2.0 * static_cast<double>(kvHeads * headDim) * element)));
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
        layout.elementBytes.push_back(fp8 ? 1.0 : 2.0);
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

KvBlockPool::KvBlockPool(KvCacheLayout layout, std::uint64_t memoryBytes, std::int64_t blockSize)
    : allocator_(std::move(layout), memoryBytes, blockSize)
    , keys_(static_cast<std::size_t>(allocator_.layout().numLayers))
    , values_(static_cast<std::size_t>(allocator_.layout().numLayers))
{
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
        for (at::Tensor* storage : {&keys_[layer], &values_[layer]}) {
            at::Tensor grown = at::zeros({size, layout.kvHeads, layout.headDim}, at::kFloat);
            if (storage->defined()) {
                grown.narrow(0, 0, storage->size(0)).copy_(*storage);
            }
            *storage = grown;
        }
    }
}

void KvBlockPool::write(std::int64_t layer, const at::Tensor& slots, const at::Tensor& keys, const at::Tensor& values)
{
    reserveStorage(allocator_.highWaterBlocks());
    at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    if (storedKeys.device() != keys.device()) {
        storedKeys = storedKeys.to(keys.device());
        storedValues = storedValues.to(keys.device());
    }
    const at::Tensor index = slots.to(keys.device());
    storedKeys.index_copy_(0, index, keys.to(at::kFloat));
    storedValues.index_copy_(0, index, values.to(at::kFloat));
}

std::pair<at::Tensor, at::Tensor> KvBlockPool::read(std::int64_t layer, const at::Tensor& slots) const
{
    const KvCacheLayout& layout = allocator_.layout();
    const std::int64_t batch = slots.size(0);
    const std::int64_t length = slots.size(1);
    const at::Tensor& storedKeys = keys_[static_cast<std::size_t>(layer)];
    const at::Tensor& storedValues = values_[static_cast<std::size_t>(layer)];
    if (!storedKeys.defined()) {
        const at::Tensor zeros = at::zeros({batch, layout.kvHeads, length, layout.headDim}, at::kFloat);
        return {zeros, zeros};
    }
    const at::Tensor index = slots.reshape({-1}).to(storedKeys.device());
    const auto gather = [&](const at::Tensor& storage) {
        return storage.index_select(0, index)
            .view({batch, length, layout.kvHeads, layout.headDim})
            .permute({0, 2, 1, 3});
    };
    return {gather(storedKeys), gather(storedValues)};
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

std::pair<at::Tensor, at::Tensor> PagedKvCache::append(
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
    if (quantizer_) {
        std::tie(k, v) = quantizer_->quantize(layer, keys, values, real);
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
        pool_.write(layer, pendingSlots_.reshape({-1}).index_select(0, realRows), rowsOf(k), rowsOf(v));
    }
    const at::Tensor all = slots_.defined() && length_ > 0 ? at::cat({slots_, pendingSlots_}, 1) : pendingSlots_;
    return pool_.read(layer, all);
}

void PagedKvCache::advance(std::int64_t tokens)
{
    assert(pendingSlots_.defined() && pendingSlots_.size(1) == tokens);
    slots_ = slots_.defined() && length_ > 0 ? at::cat({slots_, pendingSlots_}, 1) : pendingSlots_;
    pendingSlots_ = at::Tensor();
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

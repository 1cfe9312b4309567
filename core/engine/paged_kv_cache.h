#pragma once
// The engine's paged KV cache: fixed-size blocks of tokens handed out from a free list, a block table per
// sequence, and capacity counted in BYTES of the per-layer KV formats, as a real engine sizes its cache:
//
//   bytes per token  = sum over layers of 2 (K and V) * kvHeads * headDim * bytesPerElement(layer format)
//                      (fp32 4, bf16 2, fp8 and int8 1), plus for the per-token-head layers 2 * kvHeads * 4 (a
//                      float32 scale per token, KV head and K or V, as vLLM's page holds them:
//                      vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes)
//   scale bytes      = sum over fp8_e4m3 layers of 4 * (2 per tensor, or 2 * kvHeads per head)   fixed, float32
//   bytes per block  = blockSize * bytes per token
//   blocks           = floor((memory - scale bytes) / bytes per block)      the scales are set aside first
//   capacity tokens  = blocks * blockSize
//
// The emulation stores what the formats store (storage grows with the blocks in use, not with the budget): bf16
// layers as bf16, fp8 layers as e4m3 codes (re-encoded from the quantizer's rounded values with the layer's
// scales, which is exact; read back as code value x scale, the quantizer's own float32 multiply), per-token-head
// layers as their e4m3 or int8 codes with a float32 scale per slot and KV head (read back as code value x scale),
// and the FP32 engine (or a cache without a rounding quantizer) as float32; it admits exactly what the formats
// would fit.
// kvCapacity() reports capacity through the same allocator.
#include "core/engine/engine_model.h"
#include "core/model/config.h"
#include "core/model/transformer.h"
#include "core/quant/recipe_plan.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace mismatch::engine {

// Geometry and per-layer storage of a KV cache.
struct KvCacheLayout {
    std::int64_t numLayers = 0;
    std::int64_t kvHeads = 0;
    std::int64_t headDim = 0;
    std::vector<double> elementBytes; // per layer: 4 (fp32 engine), 2 (bf16), 1 (fp8_e4m3, per-token-head formats)
    std::vector<std::int64_t> scaleCounts; // per layer: fixed float32 scales of K and V together (0, 2, 2 * kvHeads)
    // Per layer: float32 scales of K and V together stored with each token (2 * kvHeads for the per-token-head
    // formats, else 0; a missing entry counts 0).
    std::vector<std::int64_t> tokenScaleCounts;

    // Per layer: 2 * kvHeads * headDim * elementBytes + 4 * tokenScaleCounts.
    std::vector<std::int64_t> layerBytesPerToken() const;
    std::int64_t bytesPerToken() const;
    std::int64_t scaleBytes() const; // 4 * sum of scaleCounts
};

// The layout of `precisions` (one per layer; fp8 without a scale mode counts as per tensor).
KvCacheLayout kvCacheLayout(const model::ModelConfig& config, const std::vector<quant::KvPrecision>& precisions);
// The layout a recipe plan implies (all bf16 without a plan).
KvCacheLayout kvCacheLayout(const model::ModelConfig& config, const quant::RecipePlan* plan);
// The layout an engine allocates (fp32 for the FP32 engine).
KvCacheLayout kvCacheLayout(const EngineModel& model);

using SequenceId = std::int64_t;

// Fixed-size blocks from a byte budget; lowest free block first, so that the float32 storage stays compact.
class KvBlockAllocator {
public:
    // blockSize > 0 (programmer error otherwise). A budget smaller than the scale storage holds no block.
    KvBlockAllocator(KvCacheLayout layout, std::uint64_t memoryBytes, std::int64_t blockSize);

    const KvCacheLayout& layout() const { return layout_; }
    std::uint64_t memoryBytes() const { return memoryBytes_; }
    std::int64_t blockSize() const { return blockSize_; }
    std::int64_t bytesPerBlock() const { return bytesPerBlock_; }
    std::int64_t totalBlocks() const { return totalBlocks_; }
    std::int64_t freeBlocks() const { return static_cast<std::int64_t>(free_.size()); }
    std::int64_t usedBlocks() const { return totalBlocks_ - freeBlocks(); }
    std::int64_t capacityTokens() const { return totalBlocks_ * blockSize_; }
    std::int64_t blocksFor(std::int64_t tokens) const { return (tokens + blockSize_ - 1) / blockSize_; }
    // Whether `tokens` could ever fit (in an empty cache) / fit now.
    bool couldEverFit(std::int64_t tokens) const { return blocksFor(tokens) <= totalBlocks_; }
    bool fitsNow(std::int64_t tokens) const { return blocksFor(tokens) <= freeBlocks(); }

    // Reserves blocks for a sequence of up to `tokens` tokens; nullopt when they are not free now (nothing is
    // taken then).
    std::optional<SequenceId> allocate(std::int64_t tokens);
    // Returns the sequence's blocks to the free list. Unknown ids are a programmer error.
    void release(SequenceId sequence);
    const std::vector<std::int64_t>& blockTable(SequenceId sequence) const;
    std::int64_t reservedTokens(SequenceId sequence) const;
    // One past the largest block index ever handed out (the storage a pool must hold).
    std::int64_t highWaterBlocks() const { return highWater_; }

private:
    KvCacheLayout layout_;
    std::uint64_t memoryBytes_ = 0;
    std::int64_t blockSize_ = 0;
    std::int64_t bytesPerBlock_ = 0;
    std::int64_t totalBlocks_ = 0;
    std::set<std::int64_t> free_;
    std::map<SequenceId, std::vector<std::int64_t>> tables_;
    SequenceId nextSequence_ = 0;
    std::int64_t highWater_ = 0;
};

// How a layer's keys and values are stored.
enum class KvStorage {
    Float32, // as given
    BFloat16, // values already on the bf16 grid (a rounding quantizer's bf16 layers): exact
    Fp8Codes, // e4m3 codes of values a rounding quantizer put on its fp8 grid, with the layer's scales
    Fp8TokenHeadCodes, // fp8_per_token_head: e4m3 codes, and a float32 scale per slot and KV head
    Int8TokenHeadCodes, // int8_per_token_head: int8 codes, and a float32 scale per slot and KV head
};

// The allocator plus the storage of every block: per layer, keys and values as [slots, kvHeads, headDim] where
// slot 0 is an always-zero slot (what padding positions read) and block b, offset o is slot
// 1 + b * blockSize + o.
class KvBlockPool {
public:
    // `storage`: one entry per layer; empty means Float32 everywhere.
    KvBlockPool(KvCacheLayout layout, std::uint64_t memoryBytes, std::int64_t blockSize,
        std::vector<KvStorage> storage = {});

    KvBlockAllocator& allocator() { return allocator_; }
    const KvBlockAllocator& allocator() const { return allocator_; }
    // Writes rows [N, kvHeads, headDim] (float32 values) of layer `layer` to `slots` [N] (int64). Fp8Codes layers
    // need the layer's key and value scales (float32 [1] or [kvHeads], KvQuantizer::scales()). Per-token-head layers
    // take the rows' code values (quant::PerTokenHeadKv::codes) and their scales [N, kvHeads], stored with them.
    void write(std::int64_t layer, const at::Tensor& slots, const at::Tensor& keys, const at::Tensor& values,
        const at::Tensor& keyScales = {}, const at::Tensor& valueScales = {});
    // Reads slots [B, S] of layer `layer` as float32 keys and values [B, kvHeads, S, headDim] (scales as write;
    // per-token-head layers read their stored scales and take none).
    std::pair<at::Tensor, at::Tensor> read(std::int64_t layer, const at::Tensor& slots,
        const at::Tensor& keyScales = {}, const at::Tensor& valueScales = {}) const;
    // Attention of one query position per row over the stored keys and values, read in place (no gathered or
    // widened copy of the cache): q [B, H, 1, headDim] float32 on the CPU, slots [B, S], bias [B, 1, 1, S] float32
    // (additive: 0 or -inf), scales as write. Returns [B, 1, H * headDim] float32: what Transformer::attention
    // computes in float32 on read()'s keys and values (scores q.k in float32 times 1/sqrt(headDim), plus the bias,
    // softmax, then the probabilities times the values), each dot product and sum in a fixed order of its own
    // (8 lanes, then the lanes pairwise) instead of the BLAS library's.
    at::Tensor attend(std::int64_t layer, const at::Tensor& slots, const at::Tensor& q, const at::Tensor& bias,
        const at::Tensor& keyScales = {}, const at::Tensor& valueScales = {}) const;
    // CUDA builds, storage on a CUDA device: whether layer `layer` is attended by the decode-attention kernel
    // (Fp8Codes and BFloat16 storage; the FP32 engine's Float32 layers take Transformer::attention).
    bool attendsOnDevice(std::int64_t layer) const;
    // cuda::decodeAttention over the stored codes or bf16 values, read in place: q [B, H, 1, headDim] float32 on the
    // device; `table` [B, S] int64 each row's real slots left-aligned, `lengths` [B] how many; scales as write.
    // Returns [B, 1, H * headDim] float32 (the same function as attend(), summed in the kernel's order).
    at::Tensor attendOnDevice(std::int64_t layer, const at::Tensor& table, const at::Tensor& lengths,
        const at::Tensor& q, const at::Tensor& keyScales, const at::Tensor& valueScales) const;
    // Bytes of the storage now held, every layer.
    std::uint64_t storageBytes() const;
    // Slots of the storage now held (for tests: storage grows with use, not with the budget).
    std::int64_t storageSlots() const;

private:
    void reserveStorage(std::int64_t blocks);

    KvBlockAllocator allocator_;
    std::vector<KvStorage> storage_;
    std::vector<at::Tensor> keys_;
    std::vector<at::Tensor> values_;
    // Per-token-head layers: float32 [slots, kvHeads] scales of the stored keys and values (undefined otherwise).
    std::vector<at::Tensor> keyScales_;
    std::vector<at::Tensor> valueScales_;
};

// The storage a pool of `model`'s engine uses per layer: Float32 for the FP32 engine, else BFloat16, Fp8Codes,
// Fp8TokenHeadCodes or Int8TokenHeadCodes by the layer's KV format.
std::vector<KvStorage> kvStorage(const EngineModel& model);

// One wave of sequences decoding together through a pool: rows of the batch share a logical length (left
// padding); padding positions take no blocks and read as zeros (they are masked out of attention). Keys and
// values are rounded by the quantizer (null: stored as given) when they are appended.
class PagedKvCache : public model::KvCache {
public:
    PagedKvCache(KvBlockPool& pool, KvQuantizer* quantizer);
    // Releases the blocks of the rows still held.
    ~PagedKvCache() override;
    PagedKvCache(const PagedKvCache&) = delete;
    PagedKvCache& operator=(const PagedKvCache&) = delete;

    // Adds a row for an allocated sequence whose first `padding` positions are padding. Only before the
    // first forward (programmer error otherwise). The cache releases the sequence's blocks when the row is
    // dropped or the cache is destroyed.
    void addRow(SequenceId sequence, std::int64_t padding);
    std::int64_t rows() const { return static_cast<std::int64_t>(rows_.size()); }
    SequenceId sequence(std::int64_t row) const { return rows_[static_cast<std::size_t>(row)].sequence; }

    std::int64_t length() const override { return length_; }
    // Writing past a sequence's reservation is a programmer error (the generate loop reserves
    // prompt + max new tokens); it throws ResourceError rather than touching another sequence's blocks.
    std::pair<at::Tensor, at::Tensor> append(
        std::int64_t layer, const at::Tensor& keys, const at::Tensor& values) override;
    // Decoding steps (one new position per row, float32) attend in place: on the CPU through KvBlockPool::attend,
    // on a CUDA device (CUDA builds; FP8 and BF16 layers) through the decode-attention kernel; other forwards
    // (prefills, the FP32 engine on a GPU) return undefined and take append() and Transformer::attention.
    at::Tensor appendAndAttend(std::int64_t layer, const at::Tensor& q, const at::Tensor& keys,
        const at::Tensor& values, const at::Tensor& bias) override;
    void advance(std::int64_t tokens) override;

    // Keeps only the listed rows (in this order) and releases the blocks of the others (finished sequences).
    void keepRows(const std::vector<std::int64_t>& rows);

private:
    struct Row {
        SequenceId sequence = 0;
        std::int64_t padding = 0;
    };
    at::Tensor newSlots(std::int64_t tokens) const; // [B, tokens] for positions length .. length + tokens - 1
    // Rounds and writes the new keys and values; returns the layer's FP8 scales (undefined for other formats).
    std::pair<at::Tensor, at::Tensor> store(std::int64_t layer, const at::Tensor& keys, const at::Tensor& values);
    at::Tensor allSlots() const; // [B, length + T]: committed and pending positions

    KvBlockPool& pool_;
    KvQuantizer* quantizer_;
    std::vector<Row> rows_;
    at::Tensor slots_; // [B, length] committed positions
    at::Tensor pendingSlots_; // [B, T] positions being appended in the current forward
    // The decode-attention kernel's slot table and lengths of the current decoding step (on the device), built by
    // its first layer and read by the others; cleared by advance() and keepRows().
    at::Tensor deviceTable_;
    at::Tensor deviceLengths_;
    std::int64_t length_ = 0;
};

// How many decoding steps, process-wide, attended through the CUDA decode-attention kernel (each layer counts),
// and how many appends to an FP8 layer on a CUDA device went through the FP8 KV append kernel: tests show the
// kernels were used.
std::int64_t deviceKvAttentionCalls();
std::int64_t deviceKvAppendCalls();

// The largest storage (bytes of the tensors holding keys and values, every layer) any KvBlockPool of this process
// has held so far: what the emulated caches really allocated (benchmarks report it beside peak RSS).
std::uint64_t peakKvStorageBytes();

struct KvCapacity {
    std::int64_t blockSize = 0;
    std::uint64_t memoryBytes = 0;
    std::int64_t blocks = 0;
    std::int64_t tokens = 0; // blocks * blockSize
    std::int64_t bytesPerToken = 0;
    std::vector<std::int64_t> layerBytesPerToken; // per layer
    std::vector<std::string> layerFormats; // per layer: "bf16", "fp8_e4m3/per_head", "int8_per_token_head", ...
    std::int64_t scaleBytes = 0; // fixed float32 scale storage (per-token scales are in bytesPerToken)
    std::int64_t bf16Blocks = 0; // the same budget with an all-BF16 KV cache
    std::int64_t bf16Tokens = 0;
    double ratioToBf16 = 0.0; // tokens / bf16Tokens
};

// Tokens of `plan`'s KV formats (all bf16 without a plan) that fit `memoryBytes` in blocks of `blockSize`,
// from the engine's allocator. blockSize <= 0 is an InputError.
KvCapacity kvCapacity(const model::ModelConfig& config, const quant::RecipePlan* plan, std::uint64_t memoryBytes,
    std::int64_t blockSize = 16);

} // namespace mismatch::engine

#include "core/quant/fp8_cpu_gemm.h"

#include "core/quant/fp8.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define MISMATCH_HAVE_FP8_BF16_KERNEL 1
#if defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MISMATCH_HAVE_FP8_AMX_KERNEL 1
#endif
#endif

namespace mismatch::quant {

namespace {

#if defined(MISMATCH_HAVE_FP8_BF16_KERNEL)

#define MISMATCH_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

constexpr std::int64_t kTileRows = 2; // rows of x per register tile
constexpr std::int64_t kTileColumns = 4; // weight rows per register tile, widened together
constexpr std::int64_t kLanes = 32; // bf16 elements per 512-bit register

// The bf16 bits of the 128 e4m3 magnitudes (codes 0x00..0x7F; the sign, bit 7, becomes bit 15), from the exact
// decode table: every e4m3 value is a bf16 number, so dropping the float32's low half loses nothing (0x7F, the NaN
// code, stays a NaN).
struct MagnitudeTable {
    alignas(64) std::uint16_t bits[128];
};

const MagnitudeTable& magnitudeTable()
{
    static const MagnitudeTable table = [] {
        MagnitudeTable result {};
        const std::array<float, 256>& decoded = fp8DecodeTable(Fp8Format::E4M3);
        for (int code = 0; code < 128; ++code) {
            std::uint32_t bits;
            std::memcpy(&bits, &decoded[static_cast<std::size_t>(code)], sizeof bits);
            result.bits[code] = static_cast<std::uint16_t>(bits >> 16);
        }
        return result;
    }();
    return table;
}

// `count` (a multiple of 32) e4m3 codes as bf16 bits: two 64-entry word lookups (vpermi2w reads index bits 0-5),
// bit 6 picks between them, bit 7 moves to the sign.
MISMATCH_AVX512_BF16 void widenCodes(
    const std::uint8_t* codes, std::uint16_t* out, std::int64_t count, const MagnitudeTable& table)
{
    const __m512i t0 = _mm512_load_si512(table.bits);
    const __m512i t1 = _mm512_load_si512(table.bits + 32);
    const __m512i t2 = _mm512_load_si512(table.bits + 64);
    const __m512i t3 = _mm512_load_si512(table.bits + 96);
    const __m512i bit6 = _mm512_set1_epi16(0x40);
    const __m512i signBit = _mm512_set1_epi16(static_cast<short>(0x8000));
    for (std::int64_t i = 0; i < count; i += kLanes) {
        const __m512i words = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)));
        const __m512i low = _mm512_permutex2var_epi16(t0, words, t1);
        const __m512i high = _mm512_permutex2var_epi16(t2, words, t3);
        const __m512i magnitude = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(words, bit6), low, high);
        const __m512i sign = _mm512_and_si512(_mm512_slli_epi16(words, 8), signBit);
        _mm512_storeu_si512(out + i, _mm512_or_si512(magnitude, sign));
    }
}

// The sum of a register's 16 lanes, pairwise (lane i + lane i + 8, then + 4, + 2, + 1). Through memory: GCC 12's
// expansions of the lane shuffles (and of _mm512_reduce_add_ps) warn of an uninitialised operand; this runs once
// per output element.
MISMATCH_AVX512_BF16 inline float laneSum(__m512 v)
{
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    for (int width = 8; width >= 1; width /= 2) {
        for (int i = 0; i < width; ++i) {
            lanes[i] += lanes[i + width];
        }
    }
    return lanes[0];
}

struct Product {
    const std::uint16_t* x = nullptr; // [rows, columns] bf16 bits
    const std::uint16_t* zeroRow = nullptr; // columns zeros: the partner of an odd last row
    const float* rowScales = nullptr; // [rows] or null (1)
    const std::uint8_t* codes = nullptr; // [outputs, columns]
    const float* scales = nullptr; // [scale rows, scaleColumns]
    std::int64_t rows = 0;
    std::int64_t outputs = 0;
    std::int64_t columns = 0;
    std::int64_t scaleColumns = 0;
    std::int64_t scaleRowDivisor = 1;
    std::int64_t scaleColumnBlock = 0;
    float* y = nullptr; // [rows, outputs]
};

// Widens weight rows [n, n + count) into rows 0 .. count - 1 of `widened` (`size` rows of p.columns bf16 values; the
// rows past `count` zero) and sets each row's offset into the scale grid (the last weight row's for the zero rows).
MISMATCH_AVX512_BF16 void widenTile(const Product& p, std::int64_t n, std::int64_t size, std::int64_t count,
    std::uint16_t* widened, std::int64_t* scaleOffset)
{
    const MagnitudeTable& table = magnitudeTable();
    const std::int64_t columns = p.columns;
    for (std::int64_t j = 0; j < size; ++j) {
        if (j < count) {
            widenCodes(p.codes + (n + j) * columns, widened + j * columns, columns, table);
        } else {
            std::memset(widened + j * columns, 0, static_cast<std::size_t>(columns) * sizeof(std::uint16_t));
        }
        scaleOffset[j] = (std::min(n + j, p.outputs - 1) / p.scaleRowDivisor) * p.scaleColumns;
    }
}

// Weight rows [begin, end) (begin a multiple of kTileColumns) against every row of x. `widened` holds
// kTileColumns * columns bf16 values.
MISMATCH_AVX512_BF16 void productRows(const Product& p, std::int64_t begin, std::int64_t end, std::uint16_t* widened)
{
    const std::int64_t columns = p.columns;
    for (std::int64_t n = begin; n < end; n += kTileColumns) {
        const std::int64_t count = std::min(kTileColumns, end - n);
        std::int64_t scaleOffset[kTileColumns];
        widenTile(p, n, kTileColumns, count, widened, scaleOffset);
        for (std::int64_t m = 0; m < p.rows; m += kTileRows) {
            const std::uint16_t* x0 = p.x + m * columns;
            const std::uint16_t* x1 = m + 1 < p.rows ? x0 + columns : p.zeroRow;
            __m512 total[kTileRows][kTileColumns];
            for (auto& row : total) {
                for (__m512& value : row) {
                    value = _mm512_setzero_ps();
                }
            }
            for (std::int64_t block = 0; block < p.scaleColumns; ++block) {
                const std::int64_t k0 = block * p.scaleColumnBlock;
                const std::int64_t k1 = std::min(columns, k0 + p.scaleColumnBlock);
                __m512 sum[kTileRows][kTileColumns];
                for (auto& row : sum) {
                    for (__m512& value : row) {
                        value = _mm512_setzero_ps();
                    }
                }
                for (std::int64_t k = k0; k < k1; k += kLanes) {
                    const __m512bh v0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x0 + k));
                    const __m512bh v1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x1 + k));
#pragma GCC unroll 4
                    for (std::int64_t j = 0; j < kTileColumns; ++j) {
                        const __m512bh w = reinterpret_cast<__m512bh>(_mm512_loadu_si512(widened + j * columns + k));
                        sum[0][j] = _mm512_dpbf16_ps(sum[0][j], v0, w);
                        sum[1][j] = _mm512_dpbf16_ps(sum[1][j], v1, w);
                    }
                }
#pragma GCC unroll 4
                for (std::int64_t j = 0; j < kTileColumns; ++j) {
                    const __m512 scale = _mm512_set1_ps(p.scales[scaleOffset[j] + block]);
                    total[0][j] = _mm512_fmadd_ps(sum[0][j], scale, total[0][j]);
                    total[1][j] = _mm512_fmadd_ps(sum[1][j], scale, total[1][j]);
                }
            }
            for (std::int64_t i = 0; i < kTileRows && m + i < p.rows; ++i) {
                const float rowScale = p.rowScales ? p.rowScales[m + i] : 1.0f;
                for (std::int64_t j = 0; j < count; ++j) {
                    p.y[(m + i) * p.outputs + n + j] = laneSum(total[i][j]) * rowScale;
                }
            }
        }
    }
}

#if defined(MISMATCH_HAVE_FP8_AMX_KERNEL)

#define MISMATCH_AMX_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

// The AMX tile configuration (palette 1): tiles 0 and 1 hold the float32 sums of 16 weight rows x `columns` rows of
// x each; 2 and 3 the two groups of 16 weight rows' bf16 values (32 per row); 4 the x values of one 32-wide step as
// pairs (one 32-bit word per x row and pair).
struct alignas(64) TileConfig {
    std::uint8_t palette = 1;
    std::uint8_t startRow = 0;
    std::uint8_t reserved[14] = {};
    std::uint16_t bytesPerRow[16] = {};
    std::uint8_t rows[16] = {};
};

constexpr std::int64_t kAmxWeightRows = 32; // two tiles of 16 weight rows
constexpr std::int64_t kAmxStep = 32; // bf16 values per tile row

bool amxGranted()
{
    // Linux hands the AMX tile state to a process that asks for it (arch_prctl ARCH_REQ_XCOMP_PERM,
    // XFEATURE_XTILEDATA); without it the first tile instruction faults.
    constexpr long kRequestPermission = 0x1023;
    constexpr long kTileData = 18;
    return ::syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

// Weight rows [begin, end) (multiples of kAmxWeightRows but the last) against every row of x, whose 32-bit words
// (bf16 pairs) `pairs` holds transposed: pairs[k / 2][m] for m < paddedRows (rows past x's are zero).
MISMATCH_AMX_BF16 void productRowsAmx(const Product& p, const std::uint32_t* pairs, std::int64_t paddedRows,
    std::int64_t tileRows, std::int64_t begin, std::int64_t end, std::uint16_t* widened)
{
    const std::int64_t columns = p.columns;
    TileConfig config;
    for (int tile : {0, 1, 4}) {
        config.rows[tile] = static_cast<std::uint8_t>(tile == 4 ? kAmxStep / 2 : 16);
        config.bytesPerRow[tile] = static_cast<std::uint16_t>(tileRows * 4);
    }
    for (int tile : {2, 3}) {
        config.rows[tile] = 16;
        config.bytesPerRow[tile] = static_cast<std::uint16_t>(kAmxStep * 2);
    }
    _tile_loadconfig(&config);
    alignas(64) float sums[2][16][16];
    std::vector<float> totals(static_cast<std::size_t>(kAmxWeightRows * tileRows));
    for (std::int64_t n = begin; n < end; n += kAmxWeightRows) {
        const std::int64_t count = std::min(kAmxWeightRows, end - n);
        std::int64_t scaleOffset[kAmxWeightRows];
        widenTile(p, n, kAmxWeightRows, count, widened, scaleOffset);
        for (std::int64_t m = 0; m < paddedRows; m += tileRows) {
            std::fill(totals.begin(), totals.end(), 0.0f);
            for (std::int64_t block = 0; block < p.scaleColumns; ++block) {
                const std::int64_t k0 = block * p.scaleColumnBlock;
                const std::int64_t k1 = std::min(columns, k0 + p.scaleColumnBlock);
                _tile_zero(0);
                _tile_zero(1);
                for (std::int64_t k = k0; k < k1; k += kAmxStep) {
                    _tile_loadd(4, pairs + (k / 2) * paddedRows + m, paddedRows * 4);
                    _tile_loadd(2, widened + k, columns * 2);
                    _tile_loadd(3, widened + 16 * columns + k, columns * 2);
                    _tile_dpbf16ps(0, 2, 4);
                    _tile_dpbf16ps(1, 3, 4);
                }
                _tile_stored(0, sums[0], 64);
                _tile_stored(1, sums[1], 64);
                for (std::int64_t j = 0; j < kAmxWeightRows; ++j) {
                    const float scale = p.scales[scaleOffset[j] + block];
                    const float* sum = sums[j / 16][j % 16];
                    float* total = totals.data() + j * tileRows;
                    for (std::int64_t i = 0; i < tileRows; ++i) {
                        total[i] = std::fma(sum[i], scale, total[i]);
                    }
                }
            }
            for (std::int64_t i = 0; i < tileRows && m + i < p.rows; ++i) {
                const float rowScale = p.rowScales ? p.rowScales[m + i] : 1.0f;
                for (std::int64_t j = 0; j < count; ++j) {
                    p.y[(m + i) * p.outputs + n + j] = totals[static_cast<std::size_t>(j * tileRows + i)] * rowScale;
                }
            }
        }
    }
    _tile_release();
}

#endif

std::atomic<bool> amxAllowed {true};

#endif

} // namespace

bool fp8Bf16ProductUsesAmx()
{
#if defined(MISMATCH_HAVE_FP8_AMX_KERNEL)
    static const bool usable = [] {
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (read directly: clang's __builtin_cpu_supports does
        // not know these names).
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        const bool tiles = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 22)) != 0
            && (edx & (1u << 24)) != 0;
        return fp8Bf16ProductAvailable() && tiles && amxGranted();
    }();
    return usable && amxAllowed.load();
#else
    return false;
#endif
}

void allowFp8Bf16Amx(bool allowed)
{
#if defined(MISMATCH_HAVE_FP8_BF16_KERNEL)
    amxAllowed = allowed;
#else
    (void)allowed;
#endif
}

bool fp8Bf16ProductAvailable()
{
#if defined(MISMATCH_HAVE_FP8_BF16_KERNEL)
    static const bool available = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
    }();
    return available;
#else
    return false;
#endif
}

bool fp8Bf16ProductSupports(const QuantizedWeight& weight)
{
    if (weight.format() != WeightFormat::Fp8E4m3 || !weight.codes().defined()
        || weight.codes().scalar_type() != at::kByte || !weight.codes().is_contiguous()) {
        return false;
    }
    const std::int64_t columns = weight.columns();
    const std::int64_t block = weight.scaleColumnBlock();
    return columns > 0 && columns % 32 == 0 && (block % 32 == 0 || block >= columns);
}

at::Tensor fp8Bf16Product(const at::Tensor& x, const at::Tensor& rowScales, const QuantizedWeight& weight)
{
    // Programmer errors: the caller checks the CPU and the weight, and passes bf16 rows of the weight's width.
    assert(fp8Bf16ProductAvailable() && fp8Bf16ProductSupports(weight));
    assert(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.device().is_cpu() && x.size(1) == weight.columns());
    assert(!rowScales.defined() || (rowScales.scalar_type() == at::kFloat && rowScales.numel() == x.size(0)));
    at::Tensor y = at::empty({x.size(0), weight.rows()}, at::TensorOptions().dtype(at::kFloat));
#if defined(MISMATCH_HAVE_FP8_BF16_KERNEL)
    const at::Tensor input = x.contiguous();
    const at::Tensor inputScales = rowScales.defined() ? rowScales.contiguous() : rowScales;
    const at::Tensor scales = weight.scales().contiguous();
    Product p;
    p.x = static_cast<const std::uint16_t*>(input.data_ptr());
    p.rowScales = inputScales.defined() ? inputScales.data_ptr<float>() : nullptr;
    p.codes = weight.codes().data_ptr<std::uint8_t>();
    p.scales = scales.data_ptr<float>();
    p.rows = x.size(0);
    p.outputs = weight.rows();
    p.columns = weight.columns();
    p.scaleColumns = scales.size(1);
    p.scaleRowDivisor = weight.scaleRowDivisor();
    p.scaleColumnBlock = std::min(weight.scaleColumnBlock(), weight.columns());
    p.y = y.data_ptr<float>();
#if defined(MISMATCH_HAVE_FP8_AMX_KERNEL)
    if (fp8Bf16ProductUsesAmx()) {
        // x's bf16 pairs transposed for the tile product: pairs[k / 2][m], rows padded to whole tiles with zeros.
        const std::int64_t tileRows = std::min<std::int64_t>(16, p.rows);
        const std::int64_t paddedRows = (p.rows + tileRows - 1) / tileRows * tileRows;
        const std::int64_t words = p.columns / 2;
        std::vector<std::uint32_t> pairs(static_cast<std::size_t>(words * paddedRows), 0u);
        const auto* rows = reinterpret_cast<const std::uint32_t*>(p.x);
        for (std::int64_t m = 0; m < p.rows; ++m) {
            for (std::int64_t w = 0; w < words; ++w) {
                pairs[static_cast<std::size_t>(w * paddedRows + m)] = rows[m * words + w];
            }
        }
        const std::int64_t groups = (p.outputs + kAmxWeightRows - 1) / kAmxWeightRows;
        at::parallel_for(0, groups, 4, [&](std::int64_t begin, std::int64_t end) {
            std::vector<std::uint16_t> widened(static_cast<std::size_t>(kAmxWeightRows * p.columns));
            productRowsAmx(p, pairs.data(), paddedRows, tileRows, begin * kAmxWeightRows,
                std::min(p.outputs, end * kAmxWeightRows), widened.data());
        });
        return y;
    }
#endif
    const std::vector<std::uint16_t> zeroRow(static_cast<std::size_t>(p.columns), 0);
    p.zeroRow = zeroRow.data();
    const std::int64_t tiles = (p.outputs + kTileColumns - 1) / kTileColumns;
    at::parallel_for(0, tiles, 16, [&](std::int64_t begin, std::int64_t end) {
        std::vector<std::uint16_t> widened(static_cast<std::size_t>(kTileColumns * p.columns));
        productRows(p, begin * kTileColumns, std::min(p.outputs, end * kTileColumns), widened.data());
    });
#endif
    return y;
}

} // namespace mismatch::quant

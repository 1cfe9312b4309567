#include "ui/views/kv_capacity_summary.h"

#include "core/engine/paged_kv_cache.h"

namespace mismatch::ui {

KvCapacitySummary kvCapacitySummary(
    const model::ModelConfig& config, const quant::RecipePlan& plan, std::uint64_t memoryBytes)
{
    const engine::KvCapacity capacity = engine::kvCapacity(config, &plan, memoryBytes);
    KvCapacitySummary summary;
    summary.tokens = capacity.tokens;
    summary.bf16Tokens = capacity.bf16Tokens;
    summary.ratioToBf16 = capacity.ratioToBf16;
    summary.bytesPerToken = capacity.bytesPerToken;
    return summary;
}

} // namespace mismatch::ui

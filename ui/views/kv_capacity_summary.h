#pragma once
// KV-cache capacity of a recipe plan for a memory budget, as the engine's paged cache allocates it. Kept in
// its own file so that only it includes the engine's (LibTorch) headers.
#include "core/model/config.h"
#include "core/quant/recipe_plan.h"

#include <cstdint>

namespace mismatch::ui {

struct KvCapacitySummary {
    std::int64_t tokens = 0;
    std::int64_t bf16Tokens = 0;
    double ratioToBf16 = 0.0;
    std::int64_t bytesPerToken = 0;
};

KvCapacitySummary kvCapacitySummary(
    const model::ModelConfig& config, const quant::RecipePlan& plan, std::uint64_t memoryBytes);

} // namespace mismatch::ui

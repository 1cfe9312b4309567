#include "core/analysis/calibration_presets.h"

#include <algorithm>

namespace mismatch::analysis {

void applyQuickCalibration(train::RunConfig& base)
{
    base.steps = std::min<std::int64_t>(base.steps, 40);
    base.batch.promptsPerStep = std::min<std::int64_t>(base.batch.promptsPerStep, 16);
    base.evaluation.every = base.steps / 2;
    base.evaluation.count = base.evaluation.count > 0 ? std::min<std::int64_t>(base.evaluation.count, 128) : 128;
    base.checkpoint.every = 0;
}

std::vector<std::int64_t> defaultCalibrationSteps(const train::RunConfig& base)
{
    const std::int64_t half = base.steps / 2;
    const bool halfEvaluated = half > 0 && base.evaluation.every > 0 && half % base.evaluation.every == 0;
    return halfEvaluated ? std::vector<std::int64_t> {half, base.steps} : std::vector<std::int64_t> {base.steps};
}

} // namespace mismatch::analysis

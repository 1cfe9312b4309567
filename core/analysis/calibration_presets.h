#pragma once
// The choices `mismatch calibrate` makes for what its user leaves out, shared by the CLI and the GUI's
// calibration dialog so that both run the same calibration for the same inputs.
#include "core/train/run_config.h"

#include <cstdint>
#include <vector>

namespace mismatch::analysis {

// `--quick`: 40 steps of at most 16 prompts, evaluated at 20 and 40 on the first 128 held-out problems, no
// checkpoints.
void applyQuickCalibration(train::RunConfig& base);

// The steps the failure rule is applied at when none are given: half-way and the last when half-way is an
// evaluated step, else the last.
std::vector<std::int64_t> defaultCalibrationSteps(const train::RunConfig& base);

} // namespace mismatch::analysis

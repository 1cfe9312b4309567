#pragma once
// The GUI's views read the analyses of a workspace through core's read-only view of them (core/report/analysis_data.h,
// shared with the report): the same types and functions under the views' namespace.
#include "core/report/analysis_data.h"

namespace mismatch::ui {

using report::AdmissionDecision;
using report::AnalysisData;
using report::baselineUnitAt;
using report::bf16Multiple;
using report::CalibrationBracket;
using report::CalibrationFlag;
using report::CalibrationInfo;
using report::CalibrationPoint;
using report::describeFlag;
using report::flagsAtStep;
using report::prefixShiftInterval;
using report::SensitivityCell;
using report::SensitivityScanInfo;

} // namespace mismatch::ui

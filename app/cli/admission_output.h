#pragma once
// The admission decisions as `mismatch admit` and `mismatch demo` print them: one table (their one JSON is core's
// analysis::toJson(AdmissionResult)), with the checkpoint's step, the bracket used, the BF16 multiple and its unit,
// and the labels a defensible reading needs (a protocol that differs from the budget's, a flagged calibration, a
// bracket of another step).
#include "core/analysis/admission.h"

#include <ostream>

namespace mismatch::cli {

// The decision table and the notes under it.
void printAdmission(std::ostream& out, const analysis::AdmissionResult& result);

} // namespace mismatch::cli

#pragma once
// The catalogue's engine-only analyses: "sensitivity" (`mismatch sensitivity`), "recipe_build" (`mismatch recipe
// build`), "admit" (`mismatch admit`), "prefix_shift" (`mismatch prefix-shift`) and "breakdown" (`mismatch
// breakdown`). Each spec maps to its core function's options here, once, for every
// front-end (the CLI prints the typed result; the GUI queues spec.run; `mismatch run` runs the spec).
#include "core/analysis/admission.h"
#include "core/analysis/breakdown.h"
#include "core/analysis/prefix_shift.h"
#include "core/analysis/recipe_builder.h"
#include "core/analysis/sensitivity.h"
#include "core/jobs/job_spec.h"

namespace mismatch::jobs {

// The options of a valid "sensitivity" spec. InputError naming the parameter for a value core cannot take.
analysis::SensitivityOptions sensitivityOptions(const JobSpec& spec);

// The options of a valid "recipe_build" spec; the budget (and its protocol) of a calibration is read from `store`.
analysis::RecipeBuildOptions recipeBuildOptions(const JobSpec& spec, const store::RunStore& store);
// "budget" or "calibration N": where the spec's budget comes from (for the printed result).
std::string budgetSource(const JobSpec& spec);

// The options of a valid "admit" spec: with a calibration and any of the prompts / sampling parameters set, they
// are laid over the calibration's stored protocol (core compares and refuses a difference unless
// allow_protocol_mismatch).
analysis::AdmissionOptions admissionOptions(const JobSpec& spec, const store::RunStore& store);

// The candidates of an "admit" or "breakdown" spec: its candidates file's, or the one configuration its recipe,
// staleness, noise and name parameters give (named by `name`, else the recipe's file stem, else "bf16").
std::vector<analysis::Candidate> candidatesOf(const JobSpec& spec);

// The options of a valid "breakdown" spec (the candidates file is loaded here).
analysis::BreakdownOptions breakdownOptions(const JobSpec& spec);

// The options of a valid "prefix_shift" spec (the recipe file is loaded here).
analysis::PrefixShiftOptions prefixShiftOptions(const JobSpec& spec);

// The definitions (catalogue() lists them).
JobDefinition sensitivityJob();
JobDefinition recipeBuildJob();
JobDefinition admitJob();
JobDefinition prefixShiftJob();
JobDefinition breakdownJob();

} // namespace mismatch::jobs

#pragma once
// The catalogue's experiment jobs, each of which trains or screens on its own: "time_to_quality" (`mismatch
// time-to-quality`, core/analysis/time_to_quality.h), "compare_objectives" (`mismatch compare-objectives`,
// core/analysis/compare_objectives.h) and "demo" (`mismatch demo`, the GUI's "Run the demo", core/analysis/demo.h).
// Their parameters map to the core options here, once, for every front-end.
#include "core/analysis/compare_objectives.h"
#include "core/analysis/demo.h"
#include "core/analysis/time_to_quality.h"
#include "core/jobs/job_spec.h"

namespace mismatch::jobs {

// The options of a valid "time_to_quality" spec: its run file loaded (default: the demo pair's
// demo-opd-quick.yaml). InputError naming the run file when it cannot be read.
analysis::TimeToQualityOptions timeToQualityOptions(const JobSpec& spec);

// The options of a valid "compare_objectives" spec: its run file loaded (default as above) and cut to run_steps,
// the default noise sweep (0.1, 0.3, 1.0) when neither noise nor recipes are given.
analysis::CompareObjectivesOptions compareObjectivesOptions(const JobSpec& spec);

// The options of a valid "demo" spec (the built-in resources of this installation).
analysis::DemoOptions demoOptions(const JobSpec& spec);

JobDefinition timeToQualityJob();
JobDefinition compareObjectivesJob();
JobDefinition demoJob();

} // namespace mismatch::jobs

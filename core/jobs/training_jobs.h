#pragma once
// The catalogue's training jobs: "train" (`mismatch train RUN_FILE`, `job: train` in a job file; a training run,
// core/train/trainer.h) and "calibrate" (`mismatch calibrate`, the GUI's Start Calibration, `job: calibrate`: the
// student's mismatch budget from a sweep of training runs, core/analysis/calibrate.h). Their parameters map to the
// core options here, once, for every front-end; `--resume RUN` stays a CLI option beside the spec (a resumed run
// takes the options it stored).
#include "core/analysis/calibrate.h"
#include "core/jobs/job_spec.h"

namespace mismatch::jobs {

// The base run file of a spec: its run_file, else the demo pair's run (resources/runs/demo-opd.yaml).
std::string calibrationRunFile(const JobSpec& spec);

// The options of a valid "calibrate" spec, as `mismatch calibrate` has always built them: the run file loaded
// (cut by --quick), the default noise sweep when nothing is swept, the default rule steps (half-way and the last)
// when none are given, the name "<run name>-calibration[-quick]" when none is given. InputError naming the run file
// when it cannot be read.
analysis::CalibrationOptions calibrationOptions(const JobSpec& spec);

// The command line of stored run `runId`'s job (commandLine of its JobSpec::ofRun); null for a run that keeps no
// job (stored before runs kept their job). A resumed calibration's "command".
nlohmann::json storedCommand(const store::RunStore& store, std::int64_t runId);
JobDefinition calibrateJob();
JobDefinition trainJob();

} // namespace mismatch::jobs

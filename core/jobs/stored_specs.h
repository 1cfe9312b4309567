#pragma once
// The job spec a stored run continues from. A resume (`mismatch run --resume RUN`, each analysis's `--resume`, the
// GUI's Jobs > Resume Selected Run) reads only the spec its run stored (RunInfo::jobJson) and builds the job's
// options from it exactly as a fresh start does; the run's config_json stays the record of what was measured, which
// core checks the options still make (analysis::checkRecordUnchanged).
//
// Runs stored before runs kept their spec (schema 6, December 2026) have only the record. Their spec is migrated
// from it once, the first time it is asked for, and stored with the run: a sensitivity scan's and a calibration's
// settings map to parameters one to one; an admission check's candidates come back as its one candidate's
// parameters, or as the candidates file they were read from (each candidate's record names it); a calibration's
// base run, stored in full, is written to `<workspace>/migrated/calibrate-run-N-base.json` and named as its run
// file. A record that cannot be expressed as a spec (a setting this version's parameters lack) is an InputError
// naming the run and the key.
#include "core/jobs/job_spec.h"
#include "core/store/run_store.h"

#include <cstdint>

namespace mismatch::jobs {

// Run `runId`'s job spec: its stored one, else the one migrated from its record (stored with the run; `store`
// must be writable then). InputError naming the run when it has neither (a run no catalogue job started: a
// training run of a sweep, an import) or its record cannot be migrated. With `resumableKind` (a job's run kind:
// "sensitivity", "admit", "calibrate"), first the checks of a resume: InputError when the run is of another kind or
// has finished (analysis::resumableRun).
JobSpec storedSpec(store::RunStore& store, std::int64_t runId, const std::string& resumableKind = {});

// The spec of a run stored without one, from its record (nothing is written; storedSpec stores it). Exposed for
// tests. InputError as storedSpec.
JobSpec migratedSpec(const store::RunStore& store, const store::RunInfo& run);

// Continues run `runId` through its job's resume with its stored spec: what `mismatch run --resume` and the GUI
// call. InputError when the run's job cannot be resumed.
JobResult resumeRun(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::function<void(std::int64_t)>& onRunStarted = {});

} // namespace mismatch::jobs

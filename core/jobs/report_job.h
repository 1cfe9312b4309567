#pragma once
// The catalogue's "report" job (`mismatch report STUDY --out DIR`, `job: report` in a job file): a study's HTML
// report with its tables as CSV (core/report/report.h), its plots drawn by the installed renderer
// (report::makeInstalledPlotRenderer: the GUI's views where the program is linked with the GUI; none otherwise,
// and the report says its plots are missing).
#include "core/jobs/job_spec.h"
#include "core/report/report.h"

namespace mismatch::jobs {

// The options of a valid "report" spec.
report::ReportOptions reportOptions(const JobSpec& spec);

JobDefinition reportJob();

} // namespace mismatch::jobs

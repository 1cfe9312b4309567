#include "core/jobs/report_job.h"

#include "core/jobs/parameter_builders.h"

namespace mismatch::jobs {

report::ReportOptions reportOptions(const JobSpec& spec)
{
    report::ReportOptions options;
    options.study = spec.text("study");
    options.outDirectory = spec.text("out");
    options.plotWidth = static_cast<int>(spec.integer("width"));
    options.plotHeight = static_cast<int>(spec.integer("height"));
    return options;
}

JobDefinition reportJob()
{
    JobDefinition job = definition("report", {"report"},
        "Write an HTML report of a study (DIR/index.html, plots as PNG, tables as CSV) with the GUI's plots "
        "rendered offscreen; a build without the GUI writes it without plots");
    job.parameters = {
        required(param("study", ParameterType::Text, "STUDY", "Study",
            "`workspace` (every calibration, admission check, sensitivity scan, prefix-shift analysis, mismatch "
            "breakdown and objective comparison), or a run id or name (that run by its kind)")),
        required(param("out", ParameterType::Path, "--out,-o", "Report directory",
            "Directory of the report (created; earlier report files replaced)")),
        ranged(param("width", ParameterType::Integer, "--width", "Plot width",
                   "Plot width in logical pixels (PNGs are twice as large)", 900),
            300, false, 4000),
        ranged(param("height", ParameterType::Integer, "--height", "Plot height", "Plot height in logical pixels",
                   500),
            200, false, 4000),
    };
    job.run = [](store::RunStore& store, const JobSpec& spec, Progress& progress,
                  const std::function<void(std::int64_t)>&) {
        const std::unique_ptr<report::PlotRenderer> renderer = report::makeInstalledPlotRenderer();
        return JobResult(report::toJson(report::writeReport(store, reportOptions(spec), progress, renderer.get())));
    };
    job.resultFields = {"index", "sections", "files", "with_plots"};
    return job;
}

} // namespace mismatch::jobs

#pragma once
// `mismatch report STUDY --out DIR` (the catalogue's "report" job, core/jobs/report_job.h): one HTML page
// (DIR/index.html) with a study's numbers and their intervals, every table also written as CSV under DIR/tables/,
// and the plots as PNG under DIR/plots/. The plots are drawn by a PlotRenderer (core/report/plot_renderer.h: the
// GUI's own views, rendered offscreen, so the report shows exactly what the dashboard shows); without one (a build
// without the GUI) the report has every table and says on the page that its plots are missing.
//
// STUDY names what to report:
//   workspace (or all)   every calibration, admission run, sensitivity scan, prefix-shift analysis, mismatch
//                        breakdown, objective comparison and time-to-quality comparison of the workspace, and a
//                        table of all runs
//   a run id or name     that run, by its kind: calibrate (budget per step, points, sweep curves), admit
//                        (decisions against the threshold), sensitivity (heatmap, most sensitive cells),
//                        prefix_shift (the split, divergences, mismatch by position, corrections),
//                        breakdown (each candidate's parts by source, stacked, with every method's intervals and
//                        the sampled-token estimators),
//                        compare_objectives (where each objective breaks), time_to_quality (both runs' time to
//                        the target and the speedup), demo (its calibration and screening),
//                        train and any other run with steps (per-step mismatch and quality)
// Every file is written under a temporary name and renamed, so an interrupted report never leaves a half-written
// file; files of an earlier report in DIR are replaced.
#include "core/common/progress.h"
#include "core/report/plot_renderer.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace mismatch::report {

struct ReportOptions {
    std::string study = "workspace";
    std::string outDirectory;
    int plotWidth = 900; // logical pixels; PNGs are written at twice this for high-DPI screens and print
    int plotHeight = 500;
};

struct ReportSection {
    std::string title;
    std::vector<std::string> plots; // PNG paths relative to the out directory
    std::vector<std::string> tables; // CSV paths relative to the out directory
};

struct ReportResult {
    std::string indexPath; // absolute
    std::vector<ReportSection> sections;
    std::vector<std::string> files; // every file written, relative to the out directory
    bool withPlots = true; // false: written without a renderer (no plots)
};

// {"index", "sections": [{"title", "plots", "tables"}], "files", "with_plots"}: `mismatch report --json` and the
// report job's result.
nlohmann::json toJson(const ReportResult& result);

// The sentence a report without plots shows on its page and the CLI prints.
extern const char* const kNoPlotsNote;

// The runs a STUDY names (empty for "workspace"/"all"), else the one run store::findRun finds (StoreError when no
// run has that id or name, or when a name is shared by several runs: it lists their ids).
std::vector<store::RunInfo> resolveStudy(const store::RunStore& store, const std::string& study);

// Writes the report, its plots drawn by `renderer` (nullptr: none, the report says so). InputError for an unknown
// study or an out directory that cannot be created or written (naming it); CancelledError when `progress` is
// cancelled (files already written stay whole, the page is not written).
ReportResult writeReport(store::RunStore& store, const ReportOptions& options, Progress& progress,
    PlotRenderer* renderer);

} // namespace mismatch::report

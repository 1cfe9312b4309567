#pragma once
// `mismatch report STUDY --out DIR`: one HTML page (DIR/index.html) with a study's plots and its numbers with
// their intervals. The plots are the GUI's own views (BudgetView, AdmissionView, SensitivityView,
// PrefixShiftView, BreakdownView, RunPlot, ComparePlot) filled from the workspace and rendered offscreen to PNG under
// DIR/plots/, so the report shows exactly what the dashboard shows; the tables are also written as CSV under
// DIR/tables/.
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
#include "core/store/run_store.h"

#include <string>
#include <vector>

namespace mismatch::ui {

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
};

// The runs a STUDY names (empty for "workspace"/"all"), else the one run store::findRun finds (StoreError when no
// run has that id or name, or when a name is shared by several runs: it lists their ids).
std::vector<store::RunInfo> resolveStudy(const store::RunStore& store, const std::string& study);

// Writes the report. Needs a QApplication (the views are widgets; the offscreen platform is enough). InputError
// for an unknown study or an out directory that cannot be created or written (naming it); CancelledError when
// `progress` is cancelled (files already written stay whole).
ReportResult writeReport(store::RunStore& store, const ReportOptions& options, Progress& progress);

} // namespace mismatch::ui

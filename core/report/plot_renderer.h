#pragma once
// The plots of `mismatch report` (core/report/report.h). Core writes the report's tables and HTML; a plot is drawn
// by a PlotRenderer, which the GUI library implements with the dashboard's own QCustomPlot views (ui/plots/report_plots.h),
// so a report shows exactly what the dashboard shows. A build without the GUI has no renderer: its reports have
// every table and number and say that the plots are missing.
//
// Which renderer a job uses: the one installed by installPlotRenderer (the CLI and the GUI install the GUI's when
// they are linked with it, by an explicit call: ui::installReportPlots()); none is installed otherwise.
#include "core/store/run_store.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::report {

// One plot of a report: what it shows, from which stored records, at which size.
struct PlotRequest {
    enum class Kind {
        CalibrationStep, // a calibration's budget at one step (id: calibration, step)
        MismatchCurves, // per-step full-vocabulary KL of `runs`, logarithmic axis
        QualityCurves, // quality Q of `runs` at their evaluation points, linear axis
        TrainingRun, // one run's per-step measures and evaluations (id: run, runName)
        Admission, // admission decisions of one run (runId; nullopt: the decisions stored without a run)
        Sensitivity, // a sensitivity scan's heatmap (id: scan)
        PrefixShiftPositions, // a prefix-shift analysis's mismatch by response position (id: analysis)
        PrefixShiftDivergence, // its first-divergence histogram (id: analysis)
        PrefixShiftPair, // one stored pair, token by token, coloured by per-token KL (id: analysis, pair)
        BreakdownBars, // a breakdown run's stacked Shapley parts in nats/token (id: run, 0: without a run)
        BreakdownShares, // the same bars as percent of each candidate's total
        BreakdownByProbability, // share of the summed KL by the engine's probability of the chosen token
        BreakdownByEntropy, // share of the summed KL by the trainer's entropy
    };
    Kind kind = Kind::CalibrationStep;
    std::int64_t id = 0;
    std::optional<std::int64_t> runId; // Admission
    std::int64_t step = 0; // CalibrationStep
    int pair = 0; // PrefixShiftPair: index into store::prefixShiftPairs
    std::string runName; // TrainingRun: its title
    std::vector<std::pair<std::int64_t, std::string>> runs; // MismatchCurves, QualityCurves: run id, label
    int width = 900; // logical pixels; the PNG has twice as many
    int height = 500; // PrefixShiftPair: unused (the text's own height)
};

class PlotRenderer {
public:
    virtual ~PlotRenderer() = default;
    // Writes the plot as PNG to `path` (through a temporary file in its directory, renamed; readable by all) and
    // returns true; false, writing nothing, when the view has nothing to show for the request (a calibration step it
    // does not list, say). InputError naming `path` when the file cannot be written.
    virtual bool render(store::RunStore& store, const PlotRequest& request, const std::string& path) = 0;
};

// Makes the renderer a report job draws with (a renderer may need its toolkit set up first).
using PlotRendererFactory = std::function<std::unique_ptr<PlotRenderer>()>;
// Installs `factory` for every later report job of this process (an empty function uninstalls).
void installPlotRenderer(PlotRendererFactory factory);
// A renderer from the installed factory; nullptr when none is installed.
std::unique_ptr<PlotRenderer> makeInstalledPlotRenderer();

} // namespace mismatch::report

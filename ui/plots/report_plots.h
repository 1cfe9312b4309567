#pragma once
// The plots of `mismatch report` (core/report/report.h) drawn by the GUI's own views (BudgetView, ComparePlot,
// RunPlot, AdmissionView, SensitivityView, PrefixShiftView, BreakdownView) filled from the workspace and rendered
// offscreen to PNG, so a report shows exactly what the dashboard shows.
#include "core/report/plot_renderer.h"

namespace mismatch::ui {

// Draws each request with its view at the request's size and saves it as PNG at twice its pixels (the prefix-shift
// pair: the viewer's token text at the request's width). Needs a QApplication (the views are widgets; the offscreen
// platform is enough). Called from another thread than the application's (a job worker), it draws on the
// application's thread, where widgets live, and waits for it.
class ReportPlotRenderer : public report::PlotRenderer {
public:
    bool render(store::RunStore& store, const report::PlotRequest& request, const std::string& path) override;
};

// Installs the GUI's renderer for this process's report jobs (report::installPlotRenderer). The `mismatch` CLI and
// `mismatch-lab` call it when linked with the GUI. A report made where the process has no application object yet
// (the CLI) gets one on the offscreen platform for its duration; a process with a QCoreApplication (no widgets) is
// refused with an Error.
void installReportPlots();

} // namespace mismatch::ui

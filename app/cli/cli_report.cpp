// mismatch report STUDY --out DIR: an HTML report of a study with the GUI's plots rendered offscreen.
// The plots come from the GUI's own QCustomPlot views, so the command does its work only in builds with the GUI
// (MISMATCH_BUILD_GUI=ON); a build without it keeps the command and says so plainly.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/common/error.h"

#ifdef MISMATCH_REPORT_WITH_GUI
#include "ui/report.h"

#include <QApplication>
#endif

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct ReportArguments {
    std::string study;
    std::string out;
    int width = 900;
    int height = 500;
};

void registerReportCommand(CLI::App& app, Context& context)
{
    auto a = std::make_shared<ReportArguments>();
    CLI::App* command = app.add_subcommand("report",
        "Write an HTML report of a study (DIR/index.html, plots as PNG, tables as CSV) with the GUI's plots "
        "rendered offscreen; needs a build with the GUI");
    command->add_option("STUDY", a->study,
               "`workspace` (every calibration, admission check, sensitivity scan, prefix-shift analysis, "
               "mismatch breakdown and objective comparison), or a run id or name (that run by its kind)")
        ->required();
    command->add_option("--out,-o", a->out, "Directory of the report (created; earlier report files replaced)")
        ->required()
        ->type_name("DIR");
    command->add_option("--width", a->width, "Plot width in logical pixels (PNGs are twice as large)")
        ->check(between(300, 4000))
        ->capture_default_str();
    command->add_option("--height", a->height, "Plot height in logical pixels")
        ->check(between(200, 4000))
        ->capture_default_str();
    command->callback([&context, a] {
#ifdef MISMATCH_REPORT_WITH_GUI
        // The views are widgets: they need an application object, never a display.
        qputenv("QT_QPA_PLATFORM", "offscreen");
        static int argc = 1;
        static char name[] = "mismatch";
        static char* argv[] = {name, nullptr};
        std::unique_ptr<QApplication> application;
        if (!QCoreApplication::instance()) {
            application = std::make_unique<QApplication>(argc, argv);
        } else if (!qobject_cast<QApplication*>(QCoreApplication::instance())) {
            throw Error("`mismatch report` was called inside a Qt program without widgets (a QCoreApplication); "
                        "run the `mismatch` binary instead");
        }
        store::RunStore store = context.openStore(store::OpenMode::OpenExisting);
        ui::ReportOptions options;
        options.study = a->study;
        options.outDirectory = a->out;
        options.plotWidth = a->width;
        options.plotHeight = a->height;
        TerminalProgress bar(*context.err);
        const ui::ReportResult result = ui::writeReport(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            nlohmann::json sections = nlohmann::json::array();
            for (const auto& s : result.sections) {
                sections.push_back({{"title", s.title}, {"plots", s.plots}, {"tables", s.tables}});
            }
            context.printJson({{"index", result.indexPath}, {"sections", sections}, {"files", result.files}});
            return;
        }
        size_t plots = 0;
        for (const auto& s : result.sections) {
            plots += s.plots.size();
        }
        *context.out << "Report written: " << result.indexPath << " (" << result.sections.size() << " sections, "
                     << plots << " plots, " << result.files.size() << " files)\n";
#else
        (void)context;
        throw Error("`mismatch report` is not available in this build: it was configured without the GUI "
                    "(MISMATCH_BUILD_GUI=OFF) and the report draws its plots with the GUI's views. Build with the GUI "
                    "(cmake --preset release) to use it; the numbers are also printed by `mismatch runs show`, "
                    "`calibrate`, `admit`, `sensitivity` and `prefix-shift` with --json.");
#endif
    });
}

const CommandRegistration registration(95, registerReportCommand);

} // namespace

} // namespace mismatch::cli

// mismatch report STUDY --out DIR: an HTML report of a study (the catalogue's "report" job, core/jobs/report_job.h).
// Its plots are drawn by the GUI's own views rendered offscreen when the binary is linked with the GUI
// (MISMATCH_BUILD_GUI=ON; this file installs that renderer for every report job of the process, `mismatch run`'s
// included); a build without the GUI writes the tables and the page without plots and says so.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/jobs/report_job.h"

#ifdef MISMATCH_REPORT_WITH_GUI
#include "ui/plots/report_plots.h"
#endif

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void registerReportCommand(CLI::App& app, Context& context)
{
#ifdef MISMATCH_REPORT_WITH_GUI
    ui::installReportPlots();
#endif
    CLI::App* command = app.add_subcommand("report",
        "Write an HTML report of a study (DIR/index.html, plots as PNG, tables as CSV) with the GUI's plots "
        "rendered offscreen; a build without the GUI writes the tables and the page without plots");
    // The options are the catalogue job's parameters (core/jobs/report_job.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("report"));
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->spec();
        store::RunStore store = context.openStore(store::OpenMode::OpenExisting);
        TerminalProgress bar(*context.err);
        const nlohmann::json result = spec.run(store, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(result);
            return;
        }
        size_t plots = 0;
        for (const auto& section : result.at("sections")) {
            plots += section.at("plots").size();
        }
        *context.out << "Report written: " << result.at("index").get<std::string>() << " ("
                     << result.at("sections").size() << " sections, " << plots << " plots, "
                     << result.at("files").size() << " files)\n";
        if (!result.at("with_plots").get<bool>()) {
            *context.out << report::kNoPlotsNote << "\n";
        }
    });
}

const CommandRegistration registration(95, registerReportCommand);

} // namespace

} // namespace mismatch::cli

// mismatch-lab: the desktop front-end. Thin: everything it shows comes from the workspace's run store.
#include "core/common/runtime.h"
#include "core/store/run_store.h"
#include "ui/main_window.h"
#include "ui/plots/report_plots.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>
#include <QTabWidget>
#include <QTimer>

#include <cstdio>
#include <cstring>

namespace {

void describeApplication()
{
    QCoreApplication::setApplicationName("mismatch-lab");
    QCoreApplication::setOrganizationName("Mismatch Lab");
    QCoreApplication::setApplicationVersion(QString::fromStdString(mismatch::runtimeInfo().version));
}

struct Options {
    QCommandLineOption workspace {{"w", "workspace"},
        "Workspace directory (default: $MISMATCH_WORKSPACE, else the "
        "per-user data directory).",
        "DIR", QString::fromStdString(mismatch::store::defaultWorkspaceDirectory())};
    QCommandLineOption screenshot {"screenshot",
        "Render the window (on its Overview tab, or the --tab given), save it as a PNG to FILE and exit.",
        "FILE"};
    QCommandLineOption tab {"tab", "With --screenshot: the tab to show first (its title, e.g. Jobs).", "TITLE"};
};

void addOptions(QCommandLineParser& parser, Options& options)
{
    parser.setApplicationDescription(
        "Mismatch Lab: training-inference mismatch for on-policy distillation. The dashboard over a workspace's "
        "store; the headless twin of every job is the `mismatch` command.");
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption(options.workspace);
    parser.addOption(options.screenshot);
    parser.addOption(options.tab);
}

// --help and --version need no window: they are answered before any display is opened, so that they work on a
// machine without one (a QApplication would abort there).
bool asksForTextOnly(int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        for (const char* flag : {"-h", "--help", "-?", "--help-all", "-v", "--version"}) {
            if (std::strcmp(argv[i], flag) == 0) {
                return true;
            }
        }
    }
    return false;
}

} // namespace

int main(int argc, char** argv)
{
    // A write past `ulimit -f` (a report, a job file, a checkpoint) fails with EFBIG and is reported as "File too
    // large" instead of SIGXFSZ killing the window half-way (prepareProcessEnvironment does it too).
    mismatch::ignoreFileSizeSignal();
    if (asksForTextOnly(argc, argv)) {
        QCoreApplication app(argc, argv);
        describeApplication();
        QCommandLineParser parser;
        Options options;
        addOptions(parser, options);
        parser.process(app); // prints and exits
        return 0;
    }
    mismatch::prepareProcessEnvironment(argv);
    // Qt 6 scales by the screen's device pixel ratio; pass fractional ratios (125%, 150%) through unrounded so
    // that plots and text stay sharp and correctly sized on high-DPI screens.
    QGuiApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
    QApplication app(argc, argv);
    Q_INIT_RESOURCE(resources); // resources.qrc lives in the static mismatch_ui library
    describeApplication();
    QApplication::setApplicationDisplayName("Mismatch Lab");
    QApplication::setWindowIcon(QIcon(":/mismatch/icons/mismatch-lab.svg"));

    QCommandLineParser parser;
    Options options;
    addOptions(parser, options);
    parser.process(app);

    mismatch::initializeRuntime();
    mismatch::ui::installReportPlots(); // report jobs (a job file's `job: report`) draw with the GUI's views
    mismatch::ui::MainWindow window(parser.value(options.workspace));
    window.show();
    if (parser.isSet(options.tab)) {
        QTabWidget* tabs = window.tabs();
        int index = -1;
        for (int i = 0; i < tabs->count(); ++i) {
            if (tabs->tabText(i).remove('&').compare(parser.value(options.tab), Qt::CaseInsensitive) == 0) {
                index = i;
            }
        }
        if (index < 0) {
            std::fprintf(stderr, "mismatch-lab: --tab: no tab titled '%s'\n", qPrintable(parser.value(options.tab)));
            return 2;
        }
        tabs->setCurrentIndex(index);
    }
    if (parser.isSet(options.screenshot)) {
        // Throttled replots (40 ms), layouts and the Jobs tab's status read (off the GUI thread) happen on the event
        // loop: let them run before the grab.
        QTimer::singleShot(1500, &window, [&window, &app, &parser, &options] {
            const bool ok = window.grab().save(parser.value(options.screenshot));
            app.exit(ok ? 0 : 1);
        });
    }
    return app.exec();
}

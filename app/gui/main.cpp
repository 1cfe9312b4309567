// mismatch-lab: the desktop front-end. Thin: everything it shows comes from the workspace's run store.
#include "core/common/runtime.h"
#include "core/store/run_store.h"
#include "ui/main_window.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QIcon>

int main(int argc, char** argv)
{
    mismatch::preferPassiveOpenMpWaiting(argv);
    // Qt 6 scales by the screen's device pixel ratio; pass fractional ratios (125%, 150%) through unrounded so
    // that plots and text stay sharp and correctly sized on high-DPI screens.
    QGuiApplication::setHighDpiScaleFactorRoundingPolicy(Qt::HighDpiScaleFactorRoundingPolicy::PassThrough);
    QApplication app(argc, argv);
    Q_INIT_RESOURCE(resources);  // resources.qrc lives in the static mismatch_ui library
    QApplication::setApplicationName("mismatch-lab");
    QApplication::setOrganizationName("Mismatch Lab");
    QApplication::setApplicationDisplayName("Mismatch Lab");
    QApplication::setApplicationVersion(QString::fromStdString(mismatch::runtimeInfo().version));
    QApplication::setWindowIcon(QIcon(":/mismatch/icons/mismatch-lab.svg"));

    QCommandLineParser parser;
    parser.setApplicationDescription("Mismatch Lab: training-inference mismatch for on-policy distillation");
    parser.addHelpOption();
    parser.addVersionOption();
    QCommandLineOption workspace({"w", "workspace"}, "Workspace directory (default: per-user data directory).", "DIR",
        QString::fromStdString(mismatch::store::defaultWorkspaceDirectory()));
    QCommandLineOption screenshot("screenshot", "Render the window, save it as a PNG to FILE and exit.", "FILE");
    parser.addOption(workspace);
    parser.addOption(screenshot);
    parser.process(app);

    mismatch::initializeRuntime();
    mismatch::ui::MainWindow window(parser.value(workspace));
    window.show();
    if (parser.isSet(screenshot)) {
        app.processEvents();
        const bool ok = window.grab().save(parser.value(screenshot));
        return ok ? 0 : 1;
    }
    return app.exec();
}

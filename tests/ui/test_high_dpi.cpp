// High-DPI rendering: the dashboard at a device pixel ratio of 2 (QT_SCALE_FACTOR=2, set before the application
// starts, as a 4K screen at 200% gives). Window grabs and the plots' own buffers must be at twice the logical
// size (sharp text and lines, not an upscaled 1x image), the layout in logical pixels must be the same as at 1x,
// and plot exports stay at twice the logical size. Screenshots are saved for looking at.
#include "core/store/run_store.h"
#include "fixture_workspace.h"
#include "tab_screenshots.h"
#include "tests/common/test_main.h"
#include "ui/views/budget_view.h"
#include "ui/main_window.h"
#include "ui/plots/plot_export.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QApplication>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

using namespace mismatch;

class TestHighDpi : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QCOMPARE(qApp->devicePixelRatio(), 2.0);
        QVERIFY(directory_.isValid());
        store::RunStore store = store::RunStore::open(directory_.filePath("workspace.db").toStdString());
        ids_ = fixture::build(store);
    }

    void windowAndPlotsRenderAtTwiceTheirSize()
    {
        ui::MainWindow window(directory_.path());
        window.resize(1280, 820);
        window.tabs()->setCurrentIndex(ui::MainWindow::SensitivityTab);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QVERIFY(window.sensitivityView()->selectScan(ids_.scan));
        QTest::qWait(150);
        QCOMPARE(window.devicePixelRatio(), 2.0);
        // Logical geometry as asked; the grab has twice the pixels.
        QCOMPARE(window.size(), QSize(1280, 820));
        const QPixmap grab = window.grab();
        QCOMPARE(grab.devicePixelRatio(), 2.0);
        QCOMPARE(grab.size(), QSize(2560, 1640));
        QVERIFY(grab.save(fixture::screenshotPath("high_dpi_sensitivity.png")));

        // QCustomPlot draws into a buffer at the screen's ratio, so curves and text are drawn at 2x, not scaled.
        QCustomPlot* plot = window.sensitivityView()->plot();
        QCOMPARE(plot->bufferDevicePixelRatio(), 2.0);
        const QPixmap plotGrab = plot->grab();
        QCOMPARE(plotGrab.devicePixelRatio(), 2.0);
        QCOMPARE(plotGrab.size(), plot->size() * 2);

        window.tabs()->setCurrentIndex(ui::MainWindow::BudgetTab);
        QVERIFY(window.budgetView()->selectCalibration(ids_.calibration, 120));
        QTest::qWait(150);
        QCOMPARE(window.budgetView()->plot()->bufferDevicePixelRatio(), 2.0);
        QVERIFY(window.grab().save(fixture::screenshotPath("high_dpi_budget.png")));

        // An exported PNG is at twice the plot's logical size whatever the screen.
        const QString png = directory_.filePath("budget.png");
        QCOMPARE(ui::exportPlot(window.budgetView()->plot(), png), QString());
        const QImage image(png);
        QCOMPARE(image.size(), window.budgetView()->plot()->size() * 2);
    }

    // Every tab with the fixture workspace, and the Overview of an empty one, at twice the pixels.
    void everyTabAtTwiceThePixels()
    {
        ui::MainWindow window(directory_.path());
        window.resize(1280, 820);
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        fixture::saveEveryTab(window, ids_, "high_dpi_tab");
        QTemporaryDir empty;
        ui::MainWindow fresh(empty.path());
        fresh.resize(1280, 820);
        fresh.show();
        QVERIFY(QTest::qWaitForWindowExposed(&fresh));
        QTest::qWait(150);
        QCOMPARE(fresh.grab().size(), QSize(2560, 1640));
        QVERIFY(fresh.grab().save(fixture::screenshotPath("high_dpi_overview_empty.png")));
    }

private:
    QTemporaryDir directory_;
    fixture::Ids ids_;
};

namespace {
// Before the application exists: Qt reads the scale factor once, at start-up.
void scaleFactorTwo()
{
    qputenv("QT_SCALE_FACTOR", "2");
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
        qputenv("QT_QPA_PLATFORM", "offscreen");
    }
}

void testSettings()
{
    initMismatchResources();
    QCoreApplication::setOrganizationName("Mismatch Lab Tests");
    QStandardPaths::setTestModeEnabled(true);
}
} // namespace

MISMATCH_TEST_MAIN_WITH(TestHighDpi, scaleFactorTwo, testSettings)

#include "test_high_dpi.moc"

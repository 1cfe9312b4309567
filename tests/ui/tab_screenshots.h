#pragma once
// Saves a screenshot of every tab of a main window (on the fixture workspace: a run selected, the calibration's
// bracket step, the built-in student in the recipe editor), as PREFIX_NN_TAB.png under MISMATCH_TEST_OUTPUT, for a
// person to look at; test_dashboard does it at 1x and test_high_dpi at QT_SCALE_FACTOR=2.
#include "fixture_workspace.h"
#include "ui/views/budget_view.h"
#include "ui/main_window.h"
#include "ui/views/recipe_editor.h"
#include "ui/views/run_table_model.h"

#include <QTabWidget>
#include <QTableView>
#include <QtTest>

namespace fixture {

inline void saveEveryTab(mismatch::ui::MainWindow& window, const Ids& ids, const QString& prefix)
{
    using mismatch::ui::MainWindow;
    for (int row = 0; row < window.runModel()->rowCount(); ++row) {
        if (window.runModel()->runAt(row)->id == ids.fp8Run) {
            window.runTable()->selectRow(row);
        }
    }
    window.budgetView()->selectCalibration(ids.calibration, 120);
    window.recipeEditor()->selectModel("arith-student");
    for (int tab = 0; tab < window.tabs()->count(); ++tab) {
        window.tabs()->setCurrentIndex(tab);
        QTest::qWait(150); // throttled replots (40 ms) and layouts
        QString name = window.tabs()->tabText(tab).remove(QLatin1Char('&')).toLower();
        name = name.left(name.indexOf(QLatin1Char(':')) < 0 ? name.size() : name.indexOf(QLatin1Char(':')));
        name.replace(QLatin1Char(' '), QLatin1Char('_'));
        const QString path
            = screenshotPath(QStringLiteral("%1_%2_%3.png").arg(prefix).arg(tab, 2, 10, QLatin1Char('0')).arg(name));
        QVERIFY2(window.grab().save(path), qPrintable(path));
        qInfo("screenshot: %s", qPrintable(path));
    }
}

} // namespace fixture

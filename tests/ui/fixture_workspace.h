#pragma once
// What the UI tests share: the fixture workspace (tests/common/analysis_fixture.h: fixture::build and its values),
// the resources, a test's own settings and where screenshots go.
#include "tests/common/analysis_fixture.h"

#include <QAction>
#include <QDir>
#include <QSettings>
#include <QStandardPaths>
#include <QString>
#include <QWidget>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

// Q_INIT_RESOURCE declares the resource initializer where it is used: it must stand outside any namespace.
inline void initMismatchResources()
{
    Q_INIT_RESOURCE(resources);
}

namespace fixture {

using namespace mismatch;

inline QString screenshotDirectory()
{
    const QString dir
        = qEnvironmentVariable("MISMATCH_TEST_OUTPUT", QStringLiteral(MISMATCH_BINARY_DIR "/test-output"));
    QDir().mkpath(dir);
    return dir;
}

inline QString screenshotPath(const QString& name)
{
    return screenshotDirectory() + "/" + name;
}

// Saves `widget` as it is drawn (after the throttled replots, 40 ms, have run) under the screenshot directory.
inline void saveScreenshot(QWidget& widget, const QString& name)
{
    QTest::qWait(150);
    const QString path = screenshotPath(name);
    QVERIFY2(widget.grab().save(path), qPrintable(path));
    qInfo("screenshot: %s", qPrintable(path));
}

// What every GUI test sets up first: the resources, its own settings (cleared).
// The action of `window` (a menu item) whose text is `text` ("vllm..." of File > Export Recipe For); nullptr when none.
inline QAction* menuAction(QWidget& window, const QString& text)
{
    for (QAction* action : window.findChildren<QAction*>()) {
        if (action->text() == text) {
            return action;
        }
    }
    return nullptr;
}

inline void initGuiTest()
{
    initMismatchResources();
    QCoreApplication::setOrganizationName("Mismatch Lab Tests");
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
}

} // namespace fixture

// main() of every Qt Test executable of the suite: runs the one registered class its first argument names
// (tests/common/test_main.h says why several classes share an executable).
#include "tests/common/test_main.h"

#include <QCoreApplication>
#include <QtTest>
#if defined(QT_WIDGETS_LIB)
#include <QApplication>
#endif
#if defined(QT_GUI_LIB)
#include <QGuiApplication>
#endif

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace mismatch::test {
namespace {

std::vector<TestClass>& registry()
{
    static std::vector<TestClass> classes;
    return classes;
}

void printClasses(std::FILE* out)
{
    for (const TestClass& testClass : registry()) {
        std::fprintf(out, "  %s\n", testClass.name);
    }
}

void printUsage(std::FILE* out, const char* program)
{
    std::fprintf(out,
        "Usage: %s TEST_CLASS [Qt Test options and test functions]\n"
        "       %s --list\n"
        "Runs one Qt Test class of this executable (CTest runs each under its own test name). Classes:\n",
        program, program);
    printClasses(out);
}

std::unique_ptr<QCoreApplication> makeApplication(TestApplication kind, int& argc, char** argv)
{
    switch (kind) {
    case TestApplication::Widgets:
#if defined(QT_WIDGETS_LIB)
        return std::make_unique<QApplication>(argc, argv);
#else
        break;
#endif
    case TestApplication::Gui:
#if defined(QT_GUI_LIB)
        return std::make_unique<QGuiApplication>(argc, argv);
#else
        break;
#endif
    case TestApplication::Core:
        return std::make_unique<QCoreApplication>(argc, argv);
    }
    return nullptr;
}

} // namespace

bool registerTestClass(const TestClass& testClass)
{
    registry().push_back(testClass);
    std::sort(registry().begin(), registry().end(),
        [](const TestClass& a, const TestClass& b) { return std::strcmp(a.name, b.name) < 0; });
    return true;
}

} // namespace mismatch::test

int main(int argc, char** argv)
{
    using namespace mismatch::test;
    if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
        printUsage(argc < 2 ? stderr : stdout, argv[0]);
        return argc < 2 ? 2 : 0;
    }
    if (std::strcmp(argv[1], "--list") == 0) {
        printClasses(stdout);
        return 0;
    }
    const auto& classes = registry();
    const auto found = std::find_if(classes.begin(), classes.end(),
        [&](const TestClass& testClass) { return std::strcmp(testClass.name, argv[1]) == 0; });
    if (found == classes.end()) {
        std::fprintf(stderr, "%s: no test class '%s' in this executable; it holds:\n", argv[0], argv[1]);
        printClasses(stderr);
        return 2;
    }
    const TestClass& testClass = *found;

    // Qt Test sees the command line without the class name: argv[0], then the options and test functions.
    std::vector<char*> arguments{argv[0]};
    arguments.insert(arguments.end(), argv + 2, argv + argc);
    arguments.push_back(nullptr);
    int count = argc - 1;

    if (testClass.beforeApplication) {
        testClass.beforeApplication();
    }
    const std::unique_ptr<QCoreApplication> application = makeApplication(testClass.application, count, arguments.data());
    if (!application) {
        std::fprintf(stderr, "%s: %s needs a GUI application, but this executable is built without Qt Gui/Widgets\n",
            argv[0], testClass.name);
        return 2;
    }
    // As QTEST_MAIN does (QTEST_QAPP_SETUP in qtest.h).
    application->setAttribute(Qt::AA_Use96Dpi, true);
#if defined(QT_WIDGETS_LIB) && defined(QT_KEYPAD_NAVIGATION)
    QApplication::setNavigationMode(Qt::NavigationModeNone);
#endif
    if (testClass.afterApplication) {
        testClass.afterApplication();
    }
    const std::unique_ptr<QObject> object = testClass.make();
    QTest::setMainSourcePath(testClass.sourceFile);
    return QTest::qExec(object.get(), count, arguments.data());
}

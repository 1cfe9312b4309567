// Several Qt Test classes in one executable: each test file registers its class with MISMATCH_TEST_MAIN (in place
// of QTEST_MAIN) and tests/common/test_main.cpp's main() runs the one class named by its first argument:
//
//   build/release/tests/tests_engine TestEngine [Qt Test options and test functions]
//   build/release/tests/tests_engine --list      (the classes it holds)
//
// Linking a test executable against LibTorch, Qt and the core library costs far more than compiling a small test
// file, so the suite builds a few executables (one per module group, tests/CMakeLists.txt) instead of one per
// class. CTest still runs each class in a process of its own under its old name (test_engine, ...), with its own
// labels, timeout and environment, so classes cannot see each other's global state.
//
// The application object is the one QTEST_MAIN would make in the same target (QApplication where the target links
// Qt Widgets, else QGuiApplication with Qt Gui, else QCoreApplication); MISMATCH_TEST_GUILESS_MAIN makes a
// QCoreApplication as QTEST_GUILESS_MAIN does. MISMATCH_TEST_MAIN_WITH also names a function run before the
// application exists (environment that Qt reads once at start-up) and one run after it, before the test object.
#pragma once

#include <QObject>

#include <memory>

namespace mismatch::test {

enum class TestApplication { Core, Gui, Widgets };

struct TestClass {
    const char* name = nullptr;
    TestApplication application = TestApplication::Core;
    std::unique_ptr<QObject> (*make)() = nullptr;
    void (*beforeApplication)() = nullptr;
    void (*afterApplication)() = nullptr;
    const char* sourceFile = nullptr;
};

// Adds a class to the executable's registry (test_main.cpp); returns true so that it can initialise a static.
bool registerTestClass(const TestClass& testClass);

#if defined(QT_WIDGETS_LIB)
inline constexpr TestApplication kDefaultTestApplication = TestApplication::Widgets;
#elif defined(QT_GUI_LIB)
inline constexpr TestApplication kDefaultTestApplication = TestApplication::Gui;
#else
inline constexpr TestApplication kDefaultTestApplication = TestApplication::Core;
#endif

template <typename T>
std::unique_ptr<QObject> makeTestObject()
{
    return std::make_unique<T>();
}

} // namespace mismatch::test

#define MISMATCH_TEST_REGISTER(TestObject, application, before, after)                                             \
    namespace {                                                                                                    \
    [[maybe_unused]] const bool mismatchTestRegistered##TestObject = ::mismatch::test::registerTestClass(         \
        {#TestObject, application, &::mismatch::test::makeTestObject<TestObject>, before, after, __FILE__});       \
    }

// QTEST_MAIN's counterpart.
#define MISMATCH_TEST_MAIN(TestObject)                                                                             \
    MISMATCH_TEST_REGISTER(TestObject, ::mismatch::test::kDefaultTestApplication, nullptr, nullptr)

// QTEST_GUILESS_MAIN's counterpart.
#define MISMATCH_TEST_GUILESS_MAIN(TestObject)                                                                     \
    MISMATCH_TEST_REGISTER(TestObject, ::mismatch::test::TestApplication::Core, nullptr, nullptr)

// A class that needs set-up around the application's construction (either function may be nullptr).
#define MISMATCH_TEST_MAIN_WITH(TestObject, beforeApplication, afterApplication)                                  \
    MISMATCH_TEST_REGISTER(TestObject, ::mismatch::test::kDefaultTestApplication, beforeApplication,              \
        afterApplication)

#pragma once
// A tiny assertion helper for the Qt-free tests in tests/gpu (GPU machines often have no Qt). Each check prints
// PASS/FAIL with its name; main returns failures() (0 = all passed) or kSkipped (77, CTest's SKIP_RETURN_CODE)
// when the test needs a device that is not there.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <random>
#include <string>

namespace mismatch::testing {

constexpr int kSkipped = 77;

inline int& failureCount()
{
    static int count = 0;
    return count;
}

inline int failures()
{
    return failureCount();
}

// Records one named condition; `detail` (printed either way) says what was measured, so that logs show margins.
inline bool check(bool condition, const std::string& name, const std::string& detail = "")
{
    if (condition) {
        std::printf("PASS  %s%s%s\n", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    } else {
        ++failureCount();
        std::printf("FAIL  %s%s%s\n", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
    }
    std::fflush(stdout);
    return condition;
}

// Runs one test case; an exception is a failure naming the case.
inline void run(const std::string& name, const std::function<void()>& body)
{
    std::printf("----  %s\n", name.c_str());
    try {
        body();
    } catch (const std::exception& error) {
        check(false, name, std::string("exception: ") + error.what());
    }
}

// Fresh seed every run (MISMATCH_TEST_SEED to repeat one), printed so that a failure can be replayed.
inline std::uint64_t testSeed()
{
    static const std::uint64_t seed = [] {
        const char* given = std::getenv("MISMATCH_TEST_SEED");
        const std::uint64_t value = given ? std::strtoull(given, nullptr, 10) : std::random_device {}();
        std::printf("seed %llu (set MISMATCH_TEST_SEED to repeat)\n", static_cast<unsigned long long>(value));
        return value;
    }();
    return seed;
}

} // namespace mismatch::testing

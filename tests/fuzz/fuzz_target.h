#pragma once
// One fuzz target per parser family. A target is written once as
//
//     MISMATCH_FUZZ_TARGET(name) { ... use data, size ...; return 0; }
//
// and built twice: with libFuzzer (preset `fuzz`, -DMISMATCH_FUZZ_LIBFUZZER: the body becomes
// LLVMFuzzerTestOneInput) and into the plain test `test_fuzz_regressions` (any compiler, no libFuzzer: the body is
// registered under its name and regression_main.cpp runs tests/fuzz/regressions/<name>/* through it).
//
// Bad input is expected: a target catches mismatch::InputError (the documented outcome for malformed outside
// input, core/common/error.h) and nothing else. Any other exception, a crash, a sanitizer report, a failed
// property (fuzz::check) or a hang is a finding.
#include "core/common/error.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace fuzz {

using TargetFunction = int (*)(const std::uint8_t* data, std::size_t size);
bool registerTarget(const char* name, TargetFunction function);

// A per-process scratch directory (created on first use under $TMPDIR or /tmp, removed at exit), for parsers
// that only read paths.
const std::string& scratchDirectory();
// Writes the bytes to scratchDirectory()/name (replacing it) and returns the path.
std::string writeScratchFile(const std::string& name, const std::uint8_t* data, std::size_t size);

// Aborts with the message when a property of the parsed result does not hold (a finding).
void check(bool condition, const char* what);

std::string readFile(const std::string& path);

} // namespace fuzz

#define MISMATCH_FUZZ_CONCAT2(a, b) a##b
#define MISMATCH_FUZZ_CONCAT(a, b) MISMATCH_FUZZ_CONCAT2(a, b)

#ifdef MISMATCH_FUZZ_LIBFUZZER
#define MISMATCH_FUZZ_TARGET(NAME)                                                                                  \
    static int MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME)(const std::uint8_t* data, std::size_t size);                   \
    extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)                               \
    {                                                                                                               \
        return MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME)(data, size);                                                    \
    }                                                                                                               \
    static int MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME)(const std::uint8_t* data, std::size_t size)
#else
#define MISMATCH_FUZZ_TARGET(NAME)                                                                                  \
    static int MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME)(const std::uint8_t* data, std::size_t size);                   \
    [[maybe_unused]] static const bool MISMATCH_FUZZ_CONCAT(fuzzRegistered_, NAME)                                  \
        = fuzz::registerTarget(#NAME, &MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME));                                       \
    static int MISMATCH_FUZZ_CONCAT(fuzzOne_, NAME)(const std::uint8_t* data, std::size_t size)
#endif

#pragma once
// Shared by the tests that drive the `mismatch` command line in-process (the test links mismatch_cli).
#include "app/cli/cli.h"

#include <QtGlobal>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

namespace mismatch::test {

struct CliResult {
    int code = 0;
    std::string out;
    std::string err;
};

// Runs `mismatch ARGUMENTS...` and captures its exit code, stdout and stderr.
inline CliResult runCli(const std::vector<std::string>& arguments)
{
    std::vector<std::string> argv = {"mismatch"};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    std::ostringstream out;
    std::ostringstream err;
    CliResult result;
    result.code = cli::run(argv, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
}

// The command's stdout as JSON; a test that gets anything else stops with the text it got.
inline nlohmann::json parseJson(const std::string& text)
{
    try {
        return nlohmann::json::parse(text);
    } catch (const std::exception& error) {
        qFatal("output is not JSON (%s): %s", error.what(), text.c_str());
    }
}

}  // namespace mismatch::test

#pragma once
// The `mismatch` command line, callable in-process (the tests drive it this way) and from main().
#include <iosfwd>
#include <string>
#include <vector>

namespace mismatch::cli {

// Parses and runs one command line. Results go to `out` (a human table, or JSON with --json), progress and
// errors to `err`. Returns the process exit code: 0 success, 1 a failed job or bad input, 2 bad arguments.
int run(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& err);

}  // namespace mismatch::cli

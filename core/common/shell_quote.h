#pragma once
// Shell words for the commands the tool prints and writes (a job's `mismatch` command line, the exports' serving
// commands): what a user pastes into a POSIX shell reaches the program as the same argument.
#include <string>

namespace mismatch {

// `text` unchanged when it holds only [A-Za-z0-9_./=:@%+,-] (and is not empty), else in single quotes (a quote
// inside written as '\'').
std::string shellQuote(const std::string& text);

} // namespace mismatch

#pragma once
// A catalogue job's command-line options, generated from its parameter list (core/jobs/job_spec.h): one CLI11
// option per parameter (its flag, help text, default and type name from the spec; excludes / needs as CLI11
// rules), read back into a JobSpec after parsing. Errors name the flags: a value of the wrong type or range is an
// argument error (exit 2), a problem across parameters an input error (exit 1), both in the CLI's words.
#include "core/jobs/job_spec.h"

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mismatch::cli {

class JobOptions {
public:
    // Adds the options of `definition`'s parameters to `command` (the object must outlive parsing: hold it in a
    // shared_ptr captured by the command's callback).
    JobOptions(CLI::App* command, const jobs::JobDefinition& definition);

    // The spec of what was given (after parsing). CLI::ValidationError naming the flag for a value that is not of
    // the parameter's type or range; InputError naming the flags for the job's checks across parameters.
    jobs::JobSpec spec() const;
    // spec(), then the job's checks of its input files (JobSpec::checkInputs), an InputError naming the flags.
    jobs::JobSpec checkedSpec() const;
    CLI::Option* option(const std::string& parameter) const { return options_.at(parameter); }
    // Whether any option of the job was given.
    bool anyGiven() const;

private:
    const jobs::JobDefinition* definition_;
    std::map<std::string, CLI::Option*> options_;
    std::map<std::string, std::vector<std::string>> texts_;
    std::map<std::string, bool> flags_;
};

// A parameter's CLI word: its long flag ("--max-tokens") or its positional name ("MODEL").
std::string flagOf(const jobs::JobDefinition& definition, const std::string& parameter);

// The spec a `mismatch` command line (after the program name and global options: {"sensitivity", "MODEL", ...})
// means, read by the same generated options (the inverse of JobSpec::toArguments). InputError for a command that
// is not a catalogue job or arguments it does not take.
jobs::JobSpec parseJobArguments(const std::vector<std::string>& arguments);

} // namespace mismatch::cli

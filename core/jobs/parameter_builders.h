#pragma once
// Building blocks of the catalogue's job definitions (core/jobs/*_job*.cpp): a parameter with its words, a range,
// choices, required; a definition's head. Internal to core/jobs.
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/jobs/job_spec.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::jobs {

inline Parameter param(std::string name, ParameterType type, std::string flag, std::string label, std::string help,
    nlohmann::json defaultValue = nullptr)
{
    Parameter p;
    p.name = std::move(name);
    p.type = type;
    p.flag = std::move(flag);
    p.label = std::move(label);
    p.help = std::move(help);
    p.defaultValue = std::move(defaultValue);
    return p;
}

inline Parameter ranged(Parameter p, std::optional<double> low, bool lowExclusive = false, std::optional<double> high = {})
{
    p.low = low;
    p.lowExclusive = lowExclusive;
    p.high = high;
    return p;
}

inline Parameter choice(Parameter p, std::vector<std::string> choices)
{
    if (p.type != ParameterType::ChoiceList) {
        p.type = ParameterType::Choice;
    }
    p.choices = std::move(choices);
    return p;
}

inline Parameter required(Parameter p)
{
    p.required = true;
    return p;
}

// Where the job computes (common/device.h): one of the devices this build and machine have ("cpu", "cuda:0", ...),
// listed in the help text. `defaultValue` null: not given, which `unsetHelp` explains (train: the run file's).
inline Parameter deviceParameter(nlohmann::json defaultValue, const std::string& unsetHelp = "")
{
    std::string have;
    for (const std::string& line : deviceDescriptions()) {
        have += (have.empty() ? "" : ", ") + line;
    }
    Parameter device = choice(param("device", ParameterType::Choice, "--device", "Device",
                                  "Where the models compute: cpu or cuda:N (here: " + have + ")" + unsetHelp,
                                  std::move(defaultValue)),
        availableDevices());
    device.whyNotAChoice = [](const std::string& value) {
        try {
            parseDevice(value, "device", "");
            return std::string(); // another spelling of one that is here ("cuda")
        } catch (const InputError& error) {
            return error.detail();
        }
    };
    return device;
}

inline JobDefinition definition(std::string kind, std::vector<std::string> command, std::string summary)
{
    JobDefinition job;
    job.kind = std::move(kind);
    job.command = std::move(command);
    job.summary = std::move(summary);
    return job;
}

} // namespace mismatch::jobs

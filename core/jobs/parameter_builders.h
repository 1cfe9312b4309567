#pragma once
// Building blocks of the catalogue's job definitions (core/jobs/*_job*.cpp): a parameter with its words, a range,
// choices, required; a definition's head. Internal to core/jobs.
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
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

// A noise sigma (or list of them): > 0 or >= 0 as `lowExclusive` says, and at most limits::kMaxNoiseSigma.
inline Parameter noiseSigmaRange(Parameter p, bool lowExclusive)
{
    p = ranged(std::move(p), 0.0, lowExclusive, limits::kMaxNoiseSigma);
    p.highReason = limits::kMaxNoiseSigmaReason;
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

// Weight noise's seed and module pattern do nothing without a sigma: a seed or pattern other than the default
// with noise 0 is a setting the user believes is in effect, so it is refused (issue 46). Writers that spell every
// option (a cluster unit, a stored spec read back) give the defaults, which pass.
inline void checkNoiseSettings(std::vector<ParameterError>& errors, const JobSpec& spec)
{
    if (spec.number("noise") > 0.0) {
        return;
    }
    if (spec.integer("noise_seed") != 0) {
        errors.push_back({"noise_seed", "does nothing without 'noise' (a sigma > 0): give 'noise' too, or drop it"});
    }
    if (spec.text("noise_modules") != "*") {
        errors.push_back({"noise_modules", "does nothing without 'noise' (a sigma > 0): give 'noise' too, or drop it"});
    }
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

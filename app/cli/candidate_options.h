#pragma once
// The rollout-configuration candidates of `admit` and `breakdown`: a candidates file (--candidates) or one
// configuration given by options (--recipe, --staleness, --noise, --noise-seed, --noise-modules, --name), which
// exclude the file.
#include "core/analysis/admission.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::cli {

struct CandidateArguments {
    std::string candidates;
    std::string recipe;
    std::string name;
    std::int64_t staleness = 0;
    double noise = 0.0;
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
    CLI::Option* candidatesOption = nullptr; // filled by addCandidateOptions
    CLI::Option* recipeOption = nullptr;
};

void addCandidateOptions(CLI::App* command, CandidateArguments& arguments);
// The candidates file's candidates, or the one configuration (named --name, else the recipe's file stem, else
// "bf16").
std::vector<analysis::Candidate> resolveCandidates(const CandidateArguments& arguments);

} // namespace mismatch::cli

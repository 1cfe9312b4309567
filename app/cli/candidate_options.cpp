#include "app/cli/candidate_options.h"

#include "app/cli/context.h"

#include <filesystem>

namespace mismatch::cli {

void addCandidateOptions(CLI::App* command, CandidateArguments& a)
{
    a.candidatesOption = command->add_option("--candidates,-c", a.candidates,
        "YAML list of candidates {name, recipe, staleness, noise, noise_seed, noise_modules}");
    a.recipeOption = command->add_option("--recipe,-r", a.recipe, "One candidate's recipe (default: the BF16 engine)");
    auto* staleness = command->add_option("--staleness", a.staleness,
        "One candidate's staleness k in optimizer steps: the engine uses the checkpoint k steps older (see --history)");
    staleness->check(atLeast(0));
    auto* noise = command->add_option("--noise", a.noise, "One candidate's weight noise sigma (relative to RMS)");
    noise->check(atLeast(0));
    auto* noiseSeed = command->add_option("--noise-seed", a.noiseSeed, "Seed of the weight noise");
    auto* noiseModules = command->add_option("--noise-modules", a.noiseModules, "Recipe pattern of the noisy modules");
    auto* name = command->add_option("--name", a.name, "One candidate's name (default from the recipe)");
    for (auto* option : {a.recipeOption, staleness, noise, noiseSeed, noiseModules, name}) {
        option->excludes(a.candidatesOption);
    }
}

std::vector<analysis::Candidate> resolveCandidates(const CandidateArguments& a)
{
    if (a.candidatesOption && a.candidatesOption->count() > 0) {
        return analysis::loadCandidates(a.candidates);
    }
    analysis::Candidate candidate;
    candidate.recipePath = a.recipe;
    candidate.staleness = a.staleness;
    candidate.noise = a.noise;
    candidate.noiseSeed = a.noiseSeed;
    candidate.noiseModules = a.noiseModules;
    candidate.name = !a.name.empty() ? a.name
        : a.recipe.empty()           ? std::string("bf16")
                                     : std::filesystem::path(a.recipe).stem().string();
    return {candidate};
}

} // namespace mismatch::cli

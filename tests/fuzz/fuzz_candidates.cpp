// fuzz_candidates: an admission check's candidate list (YAML, core/analysis/admission.h parseCandidates) with
// recipe paths resolved against resources/candidates (the shipped recipes exist and are loaded).
#include "tests/fuzz/fuzz_target.h"

#include "core/analysis/admission.h"

MISMATCH_FUZZ_TARGET(candidates)
{
    static const std::string path = std::string(MISMATCH_RESOURCE_DIR) + "/candidates/fuzz.yaml";
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const std::vector<mismatch::analysis::Candidate> candidates = mismatch::analysis::parseCandidates(text, path);
        fuzz::check(!candidates.empty(), "a parsed candidate list is not empty");
    } catch (const mismatch::InputError&) {
    }
    return 0;
}

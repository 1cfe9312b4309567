// fuzz_prompts: prompt-set JSONL text through parsePromptSet (core/io/prompt_set.h), every prompt rendered
// through the set's template, and a set that parses written back (writePromptSet) and loaded to an equal set.
#include "tests/fuzz/fuzz_target.h"

#include "core/io/prompt_set.h"

MISMATCH_FUZZ_TARGET(prompts)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    mismatch::io::PromptSet set;
    try {
        set = mismatch::io::parsePromptSet(text, "fuzz.jsonl");
    } catch (const mismatch::InputError&) {
        return 0;
    }
    fuzz::check(!set.prompts.empty(), "a parsed set has prompts");
    for (const mismatch::io::Prompt& prompt : set.prompts) {
        mismatch::io::renderPrompt(set, prompt);
    }
    const std::string path = fuzz::scratchDirectory() + "/again.jsonl";
    mismatch::io::writePromptSet(set, path);
    const mismatch::io::PromptSet again = mismatch::io::loadPromptSet(path);
    fuzz::check(again.promptTemplate == set.promptTemplate, "the template survives writePromptSet");
    fuzz::check(again.prompts.size() == set.prompts.size(), "every prompt survives writePromptSet");
    for (std::size_t i = 0; i < set.prompts.size(); ++i) {
        fuzz::check(again.prompts[i].id == set.prompts[i].id && again.prompts[i].prompt == set.prompts[i].prompt
                && again.prompts[i].answer == set.prompts[i].answer,
            "prompts survive writePromptSet unchanged");
    }
    return 0;
}

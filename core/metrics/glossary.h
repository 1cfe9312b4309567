#pragma once
// The terms the dashboard, the CLI's tables and the report show, each with its formula (or definition) and what it
// is for: one table that Help > Glossary lists and the views' column headers and axis titles show as tooltips
// (ui/dialogs/help_dialog.h glossaryTip, ui/plots/glossary_tips.h; tests/ui check both).
// mu is the rollout engine's next-token distribution, pi the trainer's, y the sampled token, h its prefix.
#include <string>
#include <vector>

namespace mismatch::metrics {

struct GlossaryEntry {
    std::string term; // as it appears on screen: "k1", "BF16 unit", "TIS"
    std::vector<std::string> aliases; // other spellings on screen: "x BF16", "k1_kl"
    std::string formula; // the definition in symbols, or "" when it is a plain definition
    std::string meaning; // what it is and what it is for
};

// Every term, in the order the glossary lists them (measures first, then the failure rule's words, then the
// analyses' words).
const std::vector<GlossaryEntry>& glossary();
// The entry whose term or alias is `name` (case-insensitive); nullptr when there is none.
const GlossaryEntry* findGlossaryEntry(const std::string& name);

} // namespace mismatch::metrics

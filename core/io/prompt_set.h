#pragma once
// Prompt sets: JSON Lines files, one problem per line:
//
//     {"id": "arith-heldout-0000", "prompt": "Q:12+7-5\n", "answer": "14"}
//
// `id` and `prompt` are non-empty strings, `answer` is a string (empty when the set has no reference
// answers, so exact-match accuracy is not scored); no other keys are allowed, so a misspelt key is an error
// rather than a silently missing answer. Ids are unique. Blank lines are skipped.
//
// The first non-blank line may instead be a header holding the set's prompt template:
//
//     {"prompt_template": "Question: {prompt}\nAnswer:"}
//
// A template is the text the model sees with `{prompt}` replaced by each prompt; `{{` and `}}` stand for
// literal braces; any other placeholder is an error. Without a header the prompt is fed as it is.
#include <string>
#include <vector>

namespace mismatch::io {

struct Prompt {
    std::string id;
    std::string prompt;
    std::string answer; // reference final answer; empty when the set has none
};

// The template that feeds every prompt unchanged.
inline const std::string kIdentityPromptTemplate = "{prompt}";

struct PromptSet {
    std::string name; // file stem unless set otherwise
    std::string path; // where it was loaded from; empty for a set built in memory
    std::string promptTemplate = kIdentityPromptTemplate;
    std::vector<Prompt> prompts;
};

// Checks a template: at least one `{prompt}`, braces either doubled or around `prompt`. Throws InputError
// naming `source` (a file or an option such as "--template"), `location` and the offending column.
void validatePromptTemplate(
    const std::string& promptTemplate, const std::string& source = "prompt template", const std::string& location = "");

// The model's input for one prompt. Throws InputError as validatePromptTemplate does.
std::string applyPromptTemplate(const std::string& promptTemplate, const std::string& prompt);

// The model's input for one prompt of the set, through the set's template.
std::string renderPrompt(const PromptSet& set, const Prompt& prompt);

// Loads and validates a prompt set. Every problem is an InputError naming the file and "line N": a file that
// cannot be read, invalid JSON, a line that is not an object, a missing or non-string field, an unknown key,
// an empty id or prompt, a duplicate id (naming the first line), a misplaced header or a bad template, and a
// file with no prompts.
PromptSet loadPromptSet(const std::string& path);

// Parses prompt-set text; `source` names it in errors. loadPromptSet is this on a file's contents.
PromptSet parsePromptSet(const std::string& text, const std::string& source);

// Writes the set as JSON Lines (a header line only when the template is not the identity), keys in the order
// id, prompt, answer. Writes a temporary file beside `path` and renames it, so a failed write leaves any
// existing file untouched. Throws InputError when the set would not load back (empty, duplicate ids, ...).
void writePromptSet(const PromptSet& set, const std::string& path);

} // namespace mismatch::io

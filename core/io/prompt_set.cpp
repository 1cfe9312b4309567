#include "core/io/prompt_set.h"

#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/common/file_io.h"
#include "core/common/input_limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace fs = std::filesystem;

namespace mismatch::io {

namespace {

const char* const kPromptTemplateKey = "prompt_template";
const std::string kPlaceholder = "{prompt}";

std::string lineLocation(int line)
{
    return "line " + std::to_string(line);
}

// Walks a template once; `emit` receives literal text and `onPrompt` each `{prompt}`. Both validation and
// substitution use it, so they cannot disagree about what a template means.
template <typename Emit, typename OnPrompt>
void walkTemplate(
    const std::string& text, const std::string& source, const std::string& location, Emit emit, OnPrompt onPrompt)
{
    auto fail = [&](size_t offset, const std::string& detail) {
        const std::string where = "column " + std::to_string(offset + 1) + " of the prompt template";
        throw InputError(source, location, where + ": " + detail);
    };
    int placeholders = 0;
    size_t i = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (c == '{') {
            if (i + 1 < text.size() && text[i + 1] == '{') {
                emit("{");
                i += 2;
                continue;
            }
            const size_t close = text.find('}', i);
            if (close == std::string::npos) {
                fail(i, "unclosed '{' (write '{{' for a literal brace)");
            }
            const std::string name = text.substr(i, close - i + 1);
            if (name != kPlaceholder) {
                fail(i, "unknown placeholder " + name + " (only {prompt} is allowed; write '{{' for a literal brace)");
            }
            onPrompt();
            ++placeholders;
            i = close + 1;
        } else if (c == '}') {
            if (i + 1 < text.size() && text[i + 1] == '}') {
                emit("}");
                i += 2;
                continue;
            }
            fail(i, "unmatched '}' (write '}}' for a literal brace)");
        } else {
            const size_t next = text.find_first_of("{}", i);
            const size_t end = next == std::string::npos ? text.size() : next;
            emit(text.substr(i, end - i));
            i = end;
        }
    }
    if (placeholders == 0) {
        throw InputError(source, location, "the prompt template has no {prompt} placeholder");
    }
}

// nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 9: DETAIL"; the
// line is always 1 here (one JSON text per line), so keep the column and the detail.
std::string parseErrorDetail(const nlohmann::json::parse_error& error)
{
    const std::string message = error.what();
    const size_t colon = message.find(": ", message.find(']'));
    const std::string detail = colon == std::string::npos ? message : message.substr(colon + 2);
    return "column " + std::to_string(error.byte) + ": " + detail;
}

// "an array", "a number", ... for messages.
std::string describeType(const nlohmann::json& value)
{
    const std::string name = value.type_name();
    if (value.is_null()) {
        return name;
    }
    return (name[0] == 'a' || name[0] == 'o' ? "an " : "a ") + name;
}

Prompt parsePromptObject(const nlohmann::json& object, const std::string& source, int line)
{
    const std::string location = lineLocation(line);
    for (const auto& item : object.items()) {
        if (item.key() != "id" && item.key() != "prompt" && item.key() != "answer") {
            throw InputError(source, location,
                "unknown key \"" + item.key() + "\" (a prompt line has exactly \"id\", \"prompt\" and \"answer\")");
        }
    }
    auto field = [&](const char* key) {
        const auto it = object.find(key);
        if (it == object.end()) {
            throw InputError(source, location, std::string("missing \"") + key + "\" (expected a string)");
        }
        if (!it->is_string()) {
            throw InputError(
                source, location, std::string("\"") + key + "\" is " + describeType(*it) + ", expected a string");
        }
        return it->get<std::string>();
    };
    Prompt prompt;
    prompt.id = field("id");
    prompt.prompt = field("prompt");
    prompt.answer = field("answer");
    if (prompt.id.empty()) {
        throw InputError(source, location, "\"id\" is empty");
    }
    if (prompt.prompt.empty()) {
        throw InputError(source, location, "\"prompt\" is empty");
    }
    return prompt;
}

} // namespace

void validatePromptTemplate(const std::string& promptTemplate, const std::string& source, const std::string& location)
{
    walkTemplate(
        promptTemplate, source, location, [](const std::string&) {}, [] {});
}

std::string applyPromptTemplate(const std::string& promptTemplate, const std::string& prompt)
{
    std::string out;
    walkTemplate(
        promptTemplate, "prompt template", "", [&](const std::string& literal) { out += literal; },
        [&] { out += prompt; });
    return out;
}

std::string renderPrompt(const PromptSet& set, const Prompt& prompt)
{
    return applyPromptTemplate(set.promptTemplate, prompt.prompt);
}

PromptSet parsePromptSet(const std::string& text, const std::string& source)
{
    PromptSet set;
    set.path = source;
    set.name = fs::path(source).stem().string();
    std::unordered_map<std::string, int> idLines;
    std::istringstream in(text);
    std::string raw;
    int line = 0;
    bool seenContent = false;
    while (std::getline(in, raw)) {
        ++line;
        if (!raw.empty() && raw.back() == '\r') {
            raw.pop_back(); // CRLF files
        }
        if (raw.find_first_not_of(" \t") == std::string::npos) {
            continue;
        }
        const std::string location = lineLocation(line);
        if (const std::size_t deep = jsonNestingTooDeep(raw.data(), raw.data() + raw.size());
            deep != std::string::npos) {
            throw InputError(source, location + ", column " + std::to_string(deep + 1), nestingTooDeepDetail());
        }
        nlohmann::json value;
        // nlohmann keeps the last of repeated keys; a line that says "prompt" twice is a mistake to report.
        std::vector<std::string> keys;
        const auto noRepeatedKeys = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
            if (event == nlohmann::json::parse_event_t::key && depth == 1) {
                const std::string key = parsed.get<std::string>();
                if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
                    throw InputError(source, location, "key \"" + key + "\" is given twice");
                }
                keys.push_back(key);
            }
            return true;
        };
        try {
            value = nlohmann::json::parse(raw, noRepeatedKeys);
        } catch (const nlohmann::json::parse_error& error) {
            throw InputError(source, location, "invalid JSON: " + parseErrorDetail(error));
        } catch (const nlohmann::json::out_of_range& error) { // a number such as 1e400
            throw InputError(source, location, "invalid JSON: " + jsonErrorDetail(error));
        }
        if (!value.is_object()) {
            throw InputError(source, location, "expected a JSON object, found " + describeType(value));
        }
        if (value.contains(kPromptTemplateKey)) {
            if (seenContent) {
                throw InputError(source, location, "a \"prompt_template\" header may only be the first line");
            }
            if (value.size() != 1) {
                throw InputError(source, location, "a header line holds only \"prompt_template\"");
            }
            const auto& templateValue = value[kPromptTemplateKey];
            if (!templateValue.is_string()) {
                throw InputError(
                    source, location, "\"prompt_template\" is " + describeType(templateValue) + ", expected a string");
            }
            set.promptTemplate = templateValue.get<std::string>();
            validatePromptTemplate(set.promptTemplate, source, location);
            seenContent = true;
            continue;
        }
        seenContent = true;
        Prompt prompt = parsePromptObject(value, source, line);
        const auto [it, inserted] = idLines.emplace(prompt.id, line);
        if (!inserted) {
            throw InputError(source, location,
                "duplicate id \"" + prompt.id + "\" (first on line " + std::to_string(it->second) + ")");
        }
        set.prompts.push_back(std::move(prompt));
    }
    if (set.prompts.empty()) {
        throw InputError(source, "", "no prompts (expected JSON Lines of {\"id\", \"prompt\", \"answer\"})");
    }
    return set;
}

PromptSet loadPromptSet(const std::string& path)
{
    return parsePromptSet(readInputFile(path, limits::kPromptSetFile, "prompt set"), path);
}

void writePromptSet(const PromptSet& set, const std::string& path)
{
    // ordered_json keeps id, prompt, answer in reading order instead of sorting the keys.
    std::string text;
    if (set.promptTemplate != kIdentityPromptTemplate) {
        text += nlohmann::ordered_json {{kPromptTemplateKey, set.promptTemplate}}.dump() + "\n";
    }
    for (const Prompt& prompt : set.prompts) {
        try {
            text += nlohmann::ordered_json {{"id", prompt.id}, {"prompt", prompt.prompt}, {"answer", prompt.answer}}
                        .dump()
                + "\n";
        } catch (const nlohmann::json::type_error&) {
            throw InputError(path, "", "prompt \"" + prompt.id + "\" is not valid UTF-8");
        }
    }
    // Refuse to write what loadPromptSet would reject, so a written set always loads back.
    parsePromptSet(text, path);

    writeFileAtomically(path, text);
}

} // namespace mismatch::io

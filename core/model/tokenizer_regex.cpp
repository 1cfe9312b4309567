#include "core/model/tokenizer_regex.h"

#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/common/utf8.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace mismatch::model::tokenizer_detail {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

struct CodeDeleter {
    void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
    void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};
struct JitStackDeleter {
    void operator()(pcre2_jit_stack* stack) const { pcre2_jit_stack_free(stack); }
};
struct MatchContextDeleter {
    void operator()(pcre2_match_context* context) const { pcre2_match_context_free(context); }
};

std::string pcre2Message(int code)
{
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof buffer);
    return reinterpret_cast<const char*>(buffer);
}

// The `tokenizers` library matches with Oniguruma, whose `\s` is Unicode White_Space; PCRE2's `\s` under UCP
// also matches U+180E (MONGOLIAN VOWEL SEPARATOR, no longer White_Space), so spell the property out.
std::string withWhiteSpaceProperty(const std::string& pattern)
{
    std::string out;
    out.reserve(pattern.size());
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] == '\\' && i + 1 < pattern.size()) {
            const char next = pattern[i + 1];
            if (next == 's') {
                out += "\\p{White_Space}";
            } else if (next == 'S') {
                out += "\\P{White_Space}";
            } else {
                out += pattern[i];
                out += next;
            }
            ++i;
        } else {
            out += pattern[i];
        }
    }
    return out;
}

} // namespace

struct Regex::Compiled {
    std::unique_ptr<pcre2_code, CodeDeleter> code;
    // Where the pattern came from, for a match that fails (PCRE2's match, depth and heap limits stop a pattern that
    // backtracks without end on some text).
    std::string pattern;
    std::string file;
    std::string location;
};

Regex::Regex(const std::string& pattern, bool literal, const std::string& file, const std::string& location)
    : compiled_(std::make_unique<Compiled>())
{
    compiled_->pattern = pattern;
    compiled_->file = file;
    compiled_->location = location;
    const std::string source = literal ? pattern : withWhiteSpaceProperty(pattern);
    int errorCode = 0;
    PCRE2_SIZE errorOffset = 0;
    // PCRE2 refuses UCP together with LITERAL (and a literal has no classes for it to affect).
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(), options, &errorCode, &errorOffset, nullptr);
    if (code == nullptr) {
        throw InputError(file, location,
            "regular expression does not compile (" + pcre2Message(errorCode) + " at offset "
                + std::to_string(errorOffset) + ")");
    }
    compiled_->code.reset(code);
    // JIT is an optimisation only: when it is unavailable pcre2_match interprets the pattern.
    pcre2_jit_compile(compiled_->code.get(), PCRE2_JIT_COMPLETE);
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::findAll(const std::string& text) const
{
    pcre2_code* const code = compiled_->code.get();
    std::vector<std::pair<size_t, size_t>> matches;
    std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code, nullptr));
    std::unique_ptr<pcre2_match_context, MatchContextDeleter> context;
    std::unique_ptr<pcre2_jit_stack, JitStackDeleter> jitStack;
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0;
    while (start <= text.size()) {
        // The text was validated as UTF-8 once, so skip PCRE2's check on every call.
        int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), context.get());
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !jitStack) {
            // The default 32 KiB JIT stack is enough for ordinary text; very long runs need more.
            jitStack.reset(pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr));
            context.reset(pcre2_match_context_create(nullptr));
            pcre2_jit_stack_assign(context.get(), nullptr, jitStack.get());
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            break;
        }
        if (rc < 0) {
            throw InputError(compiled_->file, compiled_->location,
                "regular expression \"" + cutText(compiled_->pattern) + "\" failed while matching the text \""
                    + cutText(text) + "\" at byte " + std::to_string(start) + " (" + pcre2Message(rc) + ")"
                    + (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT
                              ? ": the pattern backtracks without bound on such text"
                              : ""));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
        const size_t matchStart = ovector[0];
        const size_t matchEnd = ovector[1];
        matches.emplace_back(matchStart, matchEnd);
        if (matchEnd > matchStart) {
            start = matchEnd;
        } else {
            if (matchEnd >= text.size()) {
                break;
            }
            size_t next = matchEnd;
            nextCodePoint(text, next);
            start = next;
        }
    }
    return matches;
}

} // namespace mismatch::model::tokenizer_detail

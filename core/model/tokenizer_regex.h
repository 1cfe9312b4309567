#pragma once
// The tokenizer's regular expressions (pre-tokenizer splits, the word-character test of single_word added
// tokens): PCRE2, compiled once (JIT when available) and shared by all encode() calls, matching as the
// `tokenizers` library's Oniguruma does.
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::model::tokenizer_detail {

// The pattern of the GPT-2 ByteLevel pre-tokenizer (use_regex true), as in `tokenizers`.
extern const char* const kGpt2Pattern;

class Regex {
public:
    // `literal`: match `pattern` as plain text (a Split pattern given as {"String": ...}). InputError(file,
    // location, ...) for a pattern that does not compile.
    Regex(const std::string& pattern, bool literal, const std::string& file, const std::string& location);
    ~Regex();
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Byte ranges [start, end) of the successive leftmost matches in `text` (valid UTF-8), like Rust's
    // find_iter: after an empty match the search resumes one character further. InputError(file, location, ...)
    // naming the pattern and the text when a match fails (PCRE2's match limit stops a pattern that backtracks
    // without bound).
    std::vector<std::pair<size_t, size_t>> findAll(const std::string& text) const;
    bool matches(const std::string& text) const { return !findAll(text).empty(); }

private:
    struct Compiled;
    std::unique_ptr<Compiled> compiled_;
};

} // namespace mismatch::model::tokenizer_detail

#pragma once
// UTF-8: well-formedness, for every parser that must refuse other bytes (tokenizer input, YAML and JSON files),
// and encoding and decoding code points.
#include <cstddef>
#include <string>

namespace mismatch {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms, surrogates and
// code points above U+10FFFF are ill-formed, as for Rust's str), or std::string::npos when `s` is valid.
std::size_t firstInvalidUtf8(const std::string& s);

// Appends the UTF-8 encoding of `codePoint` (at most U+10FFFF) to `out`.
void appendUtf8(std::string& out, char32_t codePoint);

// Decodes the code point starting at `pos` of valid UTF-8 (checked beforehand with firstInvalidUtf8) and
// advances `pos` past it.
char32_t nextCodePoint(const std::string& s, std::size_t& pos);

// The start of the code point that ends just before `pos` (> 0) in valid UTF-8.
std::size_t previousCodePointStart(const std::string& s, std::size_t pos);

} // namespace mismatch

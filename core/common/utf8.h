#pragma once
// UTF-8 well-formedness, for every parser that must refuse other bytes (tokenizer input, YAML and JSON files).
#include <cstddef>
#include <string>

namespace mismatch {

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms, surrogates and
// code points above U+10FFFF are ill-formed, as for Rust's str), or std::string::npos when `s` is valid.
std::size_t firstInvalidUtf8(const std::string& s);

} // namespace mismatch

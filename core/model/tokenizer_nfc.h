#pragma once
// Unicode NFC normalization for tokenizers whose normalizer is NFC (Qwen2/3), through ICU; only in builds with
// ICU (MISMATCH_HAVE_ICU; Tokenizer::supportsNfc says which).
#include <string>

namespace mismatch::model::tokenizer_detail {

#ifdef MISMATCH_HAVE_ICU
// `text` (valid UTF-8) in NFC; ASCII and text already in NFC come back unchanged without a copy through UTF-16.
std::string normalizeNfc(const std::string& text);
#endif

} // namespace mismatch::model::tokenizer_detail

#pragma once
// GPT-2's byte-level alphabet (bytes_to_unicode), shared by byte-level BPE tokenizers (Qwen2/3, Llama 3, GPT-2):
// the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 map in byte order
// to U+0100 + n, so that every byte is a visible character and the vocabulary never holds raw spaces or
// controls ('\n' is "Ċ", ' ' is "Ġ").
#include <string>

namespace mismatch::model {

// The code point standing for `byte`.
char32_t byteLevelCodePoint(unsigned char byte);
// The symbol for `byte`, UTF-8 encoded.
std::string byteLevelSymbol(unsigned char byte);
// The byte a code point stands for, or -1 for a code point outside the 256 symbols.
int byteOfSymbol(char32_t codePoint);
// Every byte of `bytes` as its symbol, UTF-8 encoded.
std::string toByteLevelSymbols(const std::string& bytes);

} // namespace mismatch::model

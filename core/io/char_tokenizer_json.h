#pragma once
// The demo models' tokenizer: a Hugging Face tokenizer.json for byte-level BPE with no merges, so every byte is
// one token and the tiny demo models read and write text one character at a time (ASCII) while the file is
// the same kind that real Qwen2/Llama checkpoints ship.
//
// Ids:
//     0..255  byte b, written in the vocabulary as GPT-2's byte-level symbol for b (bytes_to_unicode: the
//             printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves, the other 68 bytes map
//             in order to U+0100 + n; so '\n' (10) is "Ċ" and ' ' (32) is "Ġ"). The id is the byte value.
//     256     "<|endoftext|>": end of sequence and padding
//     257     "<|bos|>": beginning of sequence, for models that want one (the demo models do not)
// Pre-tokenizer ByteLevel (add_prefix_space false, use_regex false), decoder ByteLevel, model BPE, merges [].
#include <string>

namespace mismatch::io {

constexpr int kDemoEndOfTextId = 256;
constexpr int kDemoBeginOfSequenceId = 257;
constexpr int kDemoVocabularySize = 258;
inline const std::string kDemoEndOfTextToken = "<|endoftext|>";
inline const std::string kDemoBeginOfSequenceToken = "<|bos|>";

// GPT-2's byte-level symbol for `byte`, UTF-8 encoded.
std::string byteLevelSymbol(unsigned char byte);

// The tokenizer.json text (pretty-printed JSON, ids in order).
std::string demoTokenizerJson();

} // namespace mismatch::io

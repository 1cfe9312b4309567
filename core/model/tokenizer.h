#pragma once
// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (GPT-2, Llama 3, Qwen2/Qwen3).
//
// Encoding follows the `tokenizers` library step by step, so that the ids we measure with are the ids the
// model was trained on: added tokens are cut out of the raw text first (leftmost-longest), the rest is
// normalized (none or NFC), pre-tokenized (Split regexes, ByteLevel), BPE-merged by merge rank, and the
// post-processor optionally adds template tokens (BOS). Anything outside that subset is refused at load
// time with an InputError naming the JSON key, never approximated.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::model {

class Tokenizer {
public:
    // Reads and parses `path`; errors name the path.
    static Tokenizer fromFile(const std::string& path);
    // Parses tokenizer.json text; `fileNameForErrors` names it in InputError messages.
    static Tokenizer fromJson(const std::string& jsonText, const std::string& fileNameForErrors);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // `utf8` must be valid UTF-8 (InputError otherwise). addSpecialTokens applies the post-processor's
    // template (e.g. a leading <|begin_of_text|>); special tokens written in the text are always matched.
    std::vector<std::int64_t> encode(const std::string& utf8, bool addSpecialTokens = false) const;
    // The exact bytes the ids stand for. Not necessarily valid UTF-8: a prefix of a multi-byte character's
    // tokens decodes to its first bytes, so that concatenating decoded pieces reproduces the text byte for
    // byte. Throws InputError for an id outside the vocabulary.
    std::string decode(const std::vector<std::int64_t>& ids, bool skipSpecialTokens = false) const;
    // The text of generated ids, as engines give it: special tokens left out, and an id with no token (a model's
    // vocabulary padded beyond its tokenizer's, or a gap) adds nothing instead of failing, since a sampler over
    // the model's whole vocabulary can draw one. The bytes of one id the same way: generatedBytes.
    std::string generatedText(const std::vector<std::int64_t>& ids) const;
    std::string generatedBytes(std::int64_t id) const;

    // The token's string as written in tokenizer.json (byte-level symbols, e.g. "Ġworld" for " world").
    std::string piece(std::int64_t id) const;
    // The bytes one token stands for (decode({id})).
    std::string tokenBytes(std::int64_t id) const;
    // One past the largest id in the vocabulary or the added tokens. Ids below it with no token (gaps)
    // are rejected by piece() and decode().
    std::int64_t vocabSize() const;
    // Id of a token given by its tokenizer.json string (model vocabulary or added token).
    std::optional<std::int64_t> tokenId(const std::string& token) const;
    // Added tokens marked "special", in increasing id order.
    std::vector<std::int64_t> specialTokenIds() const;
    bool isSpecial(std::int64_t id) const;

    // Tokens the post-processor's TemplateProcessing puts before / after the text (Llama 3's
    // <|begin_of_text|>); empty when there is no template.
    std::optional<std::int64_t> bosTokenId() const;
    std::optional<std::int64_t> eosTokenId() const;

    // Whether this build can apply the NFC normalizer (needs ICU); Qwen2/Qwen3 files use it.
    static bool supportsNfc();

    // What decides the ids of a text and the text of ids, as 16 hex digits (FNV-1a, 64 bit) per part: the
    // vocabulary (id -> token string), the merges in rank order, the added tokens with their flags, and the
    // normalizer, pre-tokenizer, post-processor and decoder. Formatting, key order and the two spellings of
    // merges ("a b" and ["a", "b"]) do not change it; two models can exchange token ids exactly when their
    // digests are equal (on-policy distillation compares teacher and student token by token).
    std::string digest() const;
    // Empty when the digests are equal, else the first difference in words ("token id 40 is 'I' in this
    // tokenizer and 'J' in the other", "the merges differ (first at rank 3)", ...).
    std::string difference(const Tokenizer& other) const;

private:
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

} // namespace mismatch::model

#pragma once
// Inside core/model/tokenizer.h's Tokenizer, for the files that implement it (not for other code):
//   tokenizer.cpp               the public API, encode() and decode(), identity (digest)
//   tokenizer_load.cpp          reading tokenizer.json into the vocabulary, merges, added tokens and pipeline
//   tokenizer_split.cpp         cutting text: added tokens out of the text, then the pre-tokenizer's splits
//   tokenizer_bpe.cpp           the BPE model: merging a word's byte symbols by rank
//   tokenizer_json.{h,cpp}      located reading of tokenizer.json members
//   tokenizer_regex.{h,cpp}     PCRE2 regular expressions
//   tokenizer_nfc.{h,cpp}       NFC normalization (ICU)
//   tokenizer_trie.h            the added tokens' trie
//   byte_level.{h,cpp}          GPT-2's byte-level alphabet
// UTF-8 encoding and decoding is core/common/utf8.h.
#include "core/common/error.h"
#include "core/model/tokenizer.h"
#include "core/model/tokenizer_json.h"
#include "core/model/tokenizer_regex.h"
#include "core/model/tokenizer_trie.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mismatch::model {

namespace tokenizer_detail {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreTokenizerStep {
    enum class Kind { Split, ByteLevel } kind = Kind::Split;
    std::shared_ptr<const Regex> regex; // Split: the pattern; ByteLevel: the GPT-2 pattern or null
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool addPrefixSpace = false;
};

struct AddedToken {
    std::string content;
    std::int64_t id = 0;
    bool special = false;
    bool singleWord = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = true;
};

// A piece of text: an added token (tokenIndex >= 0) or text between added tokens.
struct Segment {
    size_t start = 0;
    size_t end = 0;
    int tokenIndex = -1; // index into added tokens, or -1 for ordinary text
};

// A merge's pair of token ids as one key.
inline std::uint64_t pairKey(std::int64_t left, std::int64_t right)
{
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint64_t>(right);
}

// What a pair merges into, and the merge's rank (lower merges first).
struct Merge {
    std::int32_t rank = 0;
    std::int64_t result = 0;
};

} // namespace tokenizer_detail

struct Tokenizer::Impl {
    using AddedToken = tokenizer_detail::AddedToken;
    using Merge = tokenizer_detail::Merge;
    using PreTokenizerStep = tokenizer_detail::PreTokenizerStep;
    using Regex = tokenizer_detail::Regex;
    using Segment = tokenizer_detail::Segment;
    using TokenTrie = tokenizer_detail::TokenTrie;
    using Json = tokenizer_detail::Json;

    std::string file;

    // Model vocabulary and added tokens, by string and by id (gaps have present[id] == false).
    std::unordered_map<std::string, std::int64_t> vocab;
    std::vector<std::string> pieces;
    std::vector<std::string> bytes; // what each id decodes to
    std::vector<char> present;
    std::unordered_map<std::string, std::int64_t> addedByContent;
    std::vector<char> special;

    std::array<std::int64_t, 256> byteSymbolIds {};
    std::unordered_map<std::uint64_t, Merge> merges;
    bool ignoreMerges = false;

    bool nfc = false;
    std::vector<PreTokenizerStep> preTokenizer;

    std::vector<AddedToken> addedTokens;
    TokenTrie rawTrie; // added tokens with normalized == false: matched in the raw text
    TokenTrie normalizedTrie; // normalized == true: matched in the normalized text
    std::unique_ptr<Regex> wordCharacter; // Rust regex `\w`, for single_word tokens

    std::vector<std::int64_t> templatePrefix;
    std::vector<std::int64_t> templateSuffix;

    // Identity (Tokenizer::digest): the merges as (left, right) token strings in rank order, and the canonical
    // JSON of the normalizer, pre-tokenizer, post-processor and decoder (nlohmann::json sorts keys).
    std::vector<std::pair<std::string, std::string>> mergeList;
    std::string pipelineJson;

    // --- loading
    void parse(const Json& root);
    void parseModel(const Json& model);
    void parseAddedTokens(const Json& list);
    void parseNormalizer(const Json& normalizer, const std::string& path);
    void parsePreTokenizer(const Json& preTokenizer, const std::string& path);
    void parsePostProcessor(const Json& processor, const std::string& path);
    void parseDecoder(const Json& decoder, const std::string& path, bool topLevel);
    void setToken(std::int64_t id, const std::string& content);

    // --- encoding
    std::string normalize(const std::string& text) const;
    std::vector<Segment> findAddedTokens(const std::string& text, const TokenTrie& trie) const;
    std::vector<std::string> preTokenize(const std::string& text) const;
    void bpe(const std::string& word, std::vector<std::int64_t>& out) const;
    void encodeText(const std::string& text, std::vector<std::int64_t>& out) const;

    void checkId(std::int64_t id) const
    {
        if (id < 0 || id >= static_cast<std::int64_t>(present.size()) || !present[static_cast<size_t>(id)]) {
            throw InputError(file, "token id " + std::to_string(id),
                "not in the vocabulary (ids 0.." + std::to_string(static_cast<std::int64_t>(present.size()) - 1) + ")");
        }
    }
};

} // namespace mismatch::model

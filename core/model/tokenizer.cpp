#include "core/model/tokenizer.h"

#include "core/common/utf8.h"

#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/common/input_limits.h"

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#ifdef MISMATCH_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <queue>
#include <sstream>
#include <unordered_map>

namespace mismatch::model {

namespace {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------------------------
// UTF-8

void appendUtf8(std::string& out, char32_t cp)
{
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// Decodes the code point starting at `pos` of valid UTF-8 and advances `pos` past it.
char32_t nextCodePoint(const std::string& s, size_t& pos)
{
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(pos);
    if (lead < 0x80) {
        pos += 1;
        return lead;
    }
    if (lead < 0xE0) {
        const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
        pos += 2;
        return cp;
    }
    if (lead < 0xF0) {
        const char32_t cp = ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
        pos += 3;
        return cp;
    }
    const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) | ((byte(pos + 2) & 0x3F) << 6)
        | (byte(pos + 3) & 0x3F);
    pos += 4;
    return cp;
}

// Unicode White_Space, which is what Rust's char::is_whitespace and regex `\s` test (used by added tokens'
// lstrip/rstrip).
bool isWhiteSpace(char32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680
        || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F
        || cp == 0x3000;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 map in byte order to U+0100 + n,
// so that every byte is a visible character and the BPE vocabulary never contains raw spaces or controls.
std::array<char32_t, 256> byteToCodePointTable()
{
    std::array<char32_t, 256> table {};
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[b] = printable ? b : next++;
    }
    return table;
}

const std::array<char32_t, 256>& byteToCodePoint()
{
    static const std::array<char32_t, 256> table = byteToCodePointTable();
    return table;
}

std::string byteSymbol(unsigned char byte)
{
    std::string out;
    appendUtf8(out, byteToCodePoint()[byte]);
    return out;
}

// Inverse of byteToCodePoint for the 256 code points it produces (all below U+0144).
int codePointToByte(char32_t cp)
{
    static const std::array<int, 0x144> table = [] {
        std::array<int, 0x144> t {};
        t.fill(-1);
        for (unsigned b = 0; b < 256; ++b) {
            t[byteToCodePoint()[b]] = static_cast<int>(b);
        }
        return t;
    }();
    return cp < table.size() ? table[cp] : -1;
}

std::string singleQuoted(const std::string& s)
{
    return "'" + s + "'";
}

// ---------------------------------------------------------------------------------------------------------------
// PCRE2 regular expressions, compiled once (JIT when available) and shared by all encode() calls.

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

class Regex {
public:
    // `literal`: match `pattern` as plain text (a Split pattern given as {"String": ...}).
    Regex(const std::string& pattern, bool literal, const std::string& file, const std::string& location)
    {
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
        code_.reset(code);
        // JIT is an optimisation only: when it is unavailable pcre2_match interprets the pattern.
        pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
    }

    // Byte ranges [start, end) of the successive leftmost matches in `text`, like Rust's find_iter: after an
    // empty match the search resumes one character further.
    std::vector<std::pair<size_t, size_t>> findAll(const std::string& text) const
    {
        std::vector<std::pair<size_t, size_t>> matches;
        std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
            pcre2_match_data_create_from_pattern(code_.get(), nullptr));
        std::unique_ptr<pcre2_match_context, MatchContextDeleter> context;
        std::unique_ptr<pcre2_jit_stack, JitStackDeleter> jitStack;
        const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t start = 0;
        while (start <= text.size()) {
            // The text was validated as UTF-8 once, so skip PCRE2's check on every call.
            int rc
                = pcre2_match(code_.get(), subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), context.get());
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
                throw Error("regular expression match failed: " + pcre2Message(rc));
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

    bool matches(const std::string& text) const { return !findAll(text).empty(); }

private:
    std::unique_ptr<pcre2_code, CodeDeleter> code_;
};

// The pattern of the GPT-2 ByteLevel pre-tokenizer (use_regex true), as in `tokenizers`.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// ---------------------------------------------------------------------------------------------------------------
// Unicode normalization

#ifdef MISMATCH_HAVE_ICU
std::string normalizeNfc(const std::string& text)
{
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
        return text; // ASCII is always in NFC
    }
    if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
        throw InputError("<text>", "", "text too long to normalize (" + std::to_string(text.size()) + " bytes)");
    }
    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2* nfc = unorm2_getNFCInstance(&status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU NFC normalizer unavailable: ") + u_errorName(status));
    }
    std::vector<UChar> utf16(text.size() + 1);
    int32_t utf16Length = 0;
    u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &utf16Length, text.data(),
        static_cast<int32_t>(text.size()), &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(status));
    }
    if (unorm2_quickCheck(nfc, utf16.data(), utf16Length, &status) == UNORM_YES && U_SUCCESS(status)) {
        return text;
    }
    status = U_ZERO_ERROR;
    // NFC of a string is at most three times its length in UTF-16 units (Unicode's stated bound).
    std::vector<UChar> normalized(static_cast<size_t>(utf16Length) * 3 + 1);
    const int32_t normalizedLength = unorm2_normalize(
        nfc, utf16.data(), utf16Length, normalized.data(), static_cast<int32_t>(normalized.size()), &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU NFC normalization failed: ") + u_errorName(status));
    }
    std::string out(static_cast<size_t>(normalizedLength) * 3, '\0');
    int32_t outLength = 0;
    u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &outLength, normalized.data(), normalizedLength, &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(status));
    }
    out.resize(static_cast<size_t>(outLength));
    return out;
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// tokenizer.json reading helpers: every error names the key path.

std::string typeName(const Json& value)
{
    return value.type_name();
}

const Json& member(const Json& object, const std::string& key, const std::string& path, const std::string& file)
{
    const auto it = object.find(key);
    if (it == object.end()) {
        throw InputError(file, path, "missing key '" + key + "'");
    }
    return *it;
}

std::string join(const std::string& path, const std::string& key)
{
    return path.empty() ? key : path + "." + key;
}
std::string index(const std::string& path, size_t i)
{
    return path + "[" + std::to_string(i) + "]";
}

std::string stringAt(const Json& value, const std::string& path, const std::string& file)
{
    if (!value.is_string()) {
        throw InputError(file, path, "expected a string, found " + typeName(value));
    }
    return value.get<std::string>();
}

bool boolOr(const Json& object, const std::string& key, bool fallback, const std::string& path, const std::string& file)
{
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
        return fallback;
    }
    if (!it->is_boolean()) {
        throw InputError(file, join(path, key), "expected true or false, found " + typeName(*it));
    }
    return it->get<bool>();
}

std::int64_t idAt(const Json& value, const std::string& path, const std::string& file)
{
    if (!value.is_number_integer()) {
        throw InputError(file, path, "expected a token id (non-negative integer), found " + typeName(value));
    }
    const std::int64_t id = value.get<std::int64_t>();
    // Ids index tables and pack in pairs into 64-bit merge keys.
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        throw InputError(file, path, "token id " + std::to_string(id) + " out of range 0..2147483647");
    }
    return id;
}

std::string typeOf(const Json& object, const std::string& path, const std::string& file)
{
    if (!object.is_object()) {
        throw InputError(file, path, "expected an object, found " + typeName(object));
    }
    return stringAt(member(object, "type", path, file), join(path, "type"), file);
}

[[noreturn]] void unsupported(
    const std::string& file, const std::string& path, const std::string& what, const std::string& supported)
{
    throw InputError(file, path, "unsupported " + singleQuoted(what) + " (supported: " + supported + ")");
}

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

// Byte trie over added-token contents for leftmost-longest matching (what `tokenizers` does with Aho-Corasick).
class TokenTrie {
public:
    TokenTrie()
        : nodes_(1)
    {
    }

    void insert(const std::string& content, int tokenIndex)
    {
        int node = 0;
        for (const char c : content) {
            const auto key = static_cast<unsigned char>(c);
            auto it = nodes_[node].children.find(key);
            if (it == nodes_[node].children.end()) {
                const int child = static_cast<int>(nodes_.size());
                nodes_[node].children.emplace(key, child);
                nodes_.emplace_back();
                node = child;
            } else {
                node = it->second;
            }
        }
        nodes_[node].tokenIndex = tokenIndex;
        empty_ = false;
    }

    bool empty() const { return empty_; }

    // Longest token starting at `pos`: {token index, length}, or {-1, 0}.
    std::pair<int, size_t> longestAt(const std::string& text, size_t pos) const
    {
        std::pair<int, size_t> best {-1, 0};
        int node = 0;
        for (size_t i = pos; i < text.size(); ++i) {
            const auto it = nodes_[node].children.find(static_cast<unsigned char>(text[i]));
            if (it == nodes_[node].children.end()) {
                break;
            }
            node = it->second;
            if (nodes_[node].tokenIndex >= 0) {
                best = {nodes_[node].tokenIndex, i + 1 - pos};
            }
        }
        return best;
    }

private:
    struct Node {
        std::map<unsigned char, int> children;
        int tokenIndex = -1;
    };
    std::vector<Node> nodes_;
    bool empty_ = true;
};

struct Segment {
    size_t start = 0;
    size_t end = 0;
    int tokenIndex = -1; // index into added tokens, or -1 for ordinary text
};

std::uint64_t pairKey(std::int64_t left, std::int64_t right)
{
    return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint64_t>(right);
}

struct Merge {
    std::int32_t rank = 0;
    std::int64_t result = 0;
};

} // namespace

// ---------------------------------------------------------------------------------------------------------------

struct Tokenizer::Impl {
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

void Tokenizer::Impl::setToken(std::int64_t id, const std::string& content)
{
    const auto index = static_cast<size_t>(id);
    if (index >= pieces.size()) {
        pieces.resize(index + 1);
        bytes.resize(index + 1);
        present.resize(index + 1, 0);
        special.resize(index + 1, 0);
    }
    pieces[index] = content;
    present[index] = 1;
    // The ByteLevel decoder maps each symbol back to its byte; a token with any character outside the 256
    // byte symbols (an added token such as "<|im start|>" with a real space) stands for its own UTF-8.
    std::string decoded;
    size_t pos = 0;
    bool allByteSymbols = true;
    while (pos < content.size()) {
        const int byte = codePointToByte(nextCodePoint(content, pos));
        if (byte < 0) {
            allByteSymbols = false;
            break;
        }
        decoded += static_cast<char>(byte);
    }
    bytes[index] = allByteSymbols ? decoded : content;
}

void Tokenizer::Impl::parse(const Json& root)
{
    if (!root.is_object()) {
        throw InputError(file, "", "expected a JSON object at the top level, found " + typeName(root));
    }
    // truncation and padding are ignored on purpose: transformers overrides both on every call, and ids are
    // compared here one sequence at a time.
    parseModel(member(root, "model", "", file));
    if (const auto it = root.find("added_tokens"); it != root.end() && !it->is_null()) {
        parseAddedTokens(*it);
    }
    if (const auto it = root.find("normalizer"); it != root.end() && !it->is_null()) {
        parseNormalizer(*it, "normalizer");
    }
    const auto preTokenizerIt = root.find("pre_tokenizer");
    if (preTokenizerIt == root.end() || preTokenizerIt->is_null()) {
        throw InputError(file, "pre_tokenizer", "missing: byte-level BPE needs a ByteLevel pre-tokenizer");
    }
    parsePreTokenizer(*preTokenizerIt, "pre_tokenizer");
    const bool hasByteLevel = std::any_of(preTokenizer.begin(), preTokenizer.end(),
        [](const PreTokenizerStep& step) { return step.kind == PreTokenizerStep::Kind::ByteLevel; });
    if (!hasByteLevel) {
        throw InputError(file, "pre_tokenizer", "byte-level BPE needs a ByteLevel pre-tokenizer, found none");
    }
    if (const auto it = root.find("post_processor"); it != root.end() && !it->is_null()) {
        parsePostProcessor(*it, "post_processor");
    }
    const auto decoderIt = root.find("decoder");
    if (decoderIt == root.end() || decoderIt->is_null()) {
        throw InputError(file, "decoder", "missing: byte-level BPE needs a ByteLevel decoder");
    }
    parseDecoder(*decoderIt, "decoder", true);
}

void Tokenizer::Impl::parseModel(const Json& model)
{
    if (!model.is_object()) {
        throw InputError(file, "model", "expected an object, found " + typeName(model));
    }
    // Files written by old versions of `tokenizers` leave out model.type; BPE is the one with merges.
    std::string type = "BPE";
    if (model.contains("type")) {
        type = stringAt(model["type"], "model.type", file);
    } else if (!model.contains("merges")) {
        throw InputError(file, "model", "missing key 'type'");
    }
    if (type != "BPE") {
        unsupported(file, "model.type", type, "BPE");
    }
    if (boolOr(model, "byte_fallback", false, "model", file)) {
        throw InputError(file, "model.byte_fallback",
            "unsupported true (byte-level BPE covers every byte; byte fallback is for SentencePiece-style BPE)");
    }
    ignoreMerges = boolOr(model, "ignore_merges", false, "model", file);
    if (const auto it = model.find("dropout"); it != model.end() && !it->is_null()) {
        if (!it->is_number() || it->get<double>() != 0.0) {
            throw InputError(
                file, "model.dropout", "unsupported " + it->dump() + " (expected null: dropout makes encoding random)");
        }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        if (const auto it = model.find(key); it != model.end() && !it->is_null()) {
            if (!it->is_string() || !it->get<std::string>().empty()) {
                throw InputError(file, std::string("model.") + key,
                    "unsupported " + it->dump() + " (expected null or \"\" for byte-level BPE)");
            }
        }
    }

    const Json& vocabJson = member(model, "vocab", "model", file);
    if (!vocabJson.is_object()) {
        throw InputError(file, "model.vocab", "expected an object mapping tokens to ids, found " + typeName(vocabJson));
    }
    vocab.reserve(vocabJson.size());
    for (auto it = vocabJson.begin(); it != vocabJson.end(); ++it) {
        const std::string path = "model.vocab[" + Json(it.key()).dump() + "]";
        const std::int64_t id = idAt(it.value(), path, file);
        if (id < static_cast<std::int64_t>(present.size()) && present[static_cast<size_t>(id)]) {
            throw InputError(file, path,
                "id " + std::to_string(id) + " already belongs to " + singleQuoted(pieces[static_cast<size_t>(id)]));
        }
        vocab.emplace(it.key(), id);
        setToken(id, it.key());
    }
    for (unsigned b = 0; b < 256; ++b) {
        const std::string symbol = byteSymbol(static_cast<unsigned char>(b));
        const auto it = vocab.find(symbol);
        if (it == vocab.end()) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", b);
            throw InputError(file, "model.vocab",
                "byte-level BPE needs all 256 byte symbols; " + singleQuoted(symbol) + " (byte " + hex
                    + ") is missing");
        }
        byteSymbolIds[b] = it->second;
    }

    const Json& mergesJson = member(model, "merges", "model", file);
    if (!mergesJson.is_array()) {
        throw InputError(file, "model.merges", "expected an array, found " + typeName(mergesJson));
    }
    merges.reserve(mergesJson.size());
    for (size_t rank = 0; rank < mergesJson.size(); ++rank) {
        const Json& entry = mergesJson[rank];
        const std::string path = index("model.merges", rank);
        std::string left;
        std::string right;
        // `tokenizers` >= 0.20 writes [left, right] pairs; older files write "left right".
        if (entry.is_string()) {
            const std::string text = entry.get<std::string>();
            const size_t space = text.find(' ');
            if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
                throw InputError(
                    file, path, "expected \"left right\" (two tokens and one space), found " + Json(text).dump());
            }
            left = text.substr(0, space);
            right = text.substr(space + 1);
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
            left = entry[0].get<std::string>();
            right = entry[1].get<std::string>();
        } else {
            throw InputError(file, path, "expected \"left right\" or [\"left\", \"right\"], found " + entry.dump());
        }
        const std::string merged = left + right;
        const auto leftId = vocab.find(left);
        const auto rightId = vocab.find(right);
        const auto resultId = vocab.find(merged);
        for (const std::string* token : std::array<const std::string*, 3> {&left, &right, &merged}) {
            if (vocab.count(*token) == 0) {
                throw InputError(
                    file, path, "merge references " + singleQuoted(*token) + ", which is not in model.vocab");
            }
        }
        // A repeated pair keeps its last rank, as in `tokenizers` (which collects the list into a map).
        merges[pairKey(leftId->second, rightId->second)] = Merge {static_cast<std::int32_t>(rank), resultId->second};
        mergeList.emplace_back(left, right);
    }
}

void Tokenizer::Impl::parseAddedTokens(const Json& list)
{
    if (!list.is_array()) {
        throw InputError(file, "added_tokens", "expected an array, found " + typeName(list));
    }
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string path = index("added_tokens", i);
        const Json& entry = list[i];
        if (!entry.is_object()) {
            throw InputError(file, path, "expected an object, found " + typeName(entry));
        }
        AddedToken token;
        token.id = idAt(member(entry, "id", path, file), join(path, "id"), file);
        token.content = stringAt(member(entry, "content", path, file), join(path, "content"), file);
        if (token.content.empty()) {
            throw InputError(file, join(path, "content"), "expected a non-empty string");
        }
        if (firstInvalidUtf8(token.content) != std::string::npos) {
            throw InputError(file, join(path, "content"), "not valid UTF-8");
        }
        token.special = boolOr(entry, "special", false, path, file);
        token.singleWord = boolOr(entry, "single_word", false, path, file);
        token.lstrip = boolOr(entry, "lstrip", false, path, file);
        token.rstrip = boolOr(entry, "rstrip", false, path, file);
        token.normalized = boolOr(entry, "normalized", !token.special, path, file);
        if (addedByContent.count(token.content) != 0) {
            throw InputError(file, join(path, "content"), singleQuoted(token.content) + " is listed twice");
        }
        // An added token takes over its id from the model vocabulary (as in `tokenizers`).
        setToken(token.id, token.content);
        special[static_cast<size_t>(token.id)] = token.special ? 1 : 0;
        addedByContent.emplace(token.content, token.id);
        addedTokens.push_back(token);
    }
    for (size_t i = 0; i < addedTokens.size(); ++i) {
        const AddedToken& token = addedTokens[i];
        if (!token.normalized) {
            rawTrie.insert(token.content, static_cast<int>(i));
        }
        if (token.singleWord && !wordCharacter) {
            // Rust regex `\w`: Alphabetic, marks, decimal digits, connector punctuation, joiners.
            wordCharacter = std::make_unique<Regex>(
                R"(^[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]$)", false, file, "added_tokens");
        }
    }
    // Normalized tokens are inserted once the normalizer is known (see parse()).
}

void Tokenizer::Impl::parseNormalizer(const Json& normalizer, const std::string& path)
{
    const std::string type = typeOf(normalizer, path, file);
    if (type == "NFC") {
        if (!supportsNfc()) {
            throw InputError(file, join(path, "type"),
                "NFC normalization needs a build with ICU (libicu-dev, CMake option MISMATCH_ICU=ON); "
                "this build has none");
        }
        nfc = true;
    } else if (type == "Sequence") {
        const std::string listPath = join(path, "normalizers");
        const Json& list = member(normalizer, "normalizers", path, file);
        if (!list.is_array()) {
            throw InputError(file, listPath, "expected an array, found " + typeName(list));
        }
        for (size_t i = 0; i < list.size(); ++i) {
            parseNormalizer(list[i], index(listPath, i));
        }
    } else {
        unsupported(file, join(path, "type"), type, "NFC, Sequence");
    }
}

void Tokenizer::Impl::parsePreTokenizer(const Json& node, const std::string& path)
{
    const std::string type = typeOf(node, path, file);
    if (type == "Sequence") {
        const std::string listPath = join(path, "pretokenizers");
        const Json& list = member(node, "pretokenizers", path, file);
        if (!list.is_array()) {
            throw InputError(file, listPath, "expected an array, found " + typeName(list));
        }
        for (size_t i = 0; i < list.size(); ++i) {
            parsePreTokenizer(list[i], index(listPath, i));
        }
    } else if (type == "Split") {
        PreTokenizerStep step;
        step.kind = PreTokenizerStep::Kind::Split;
        const std::string patternPath = join(path, "pattern");
        const Json& pattern = member(node, "pattern", path, file);
        if (pattern.is_object() && pattern.contains("Regex")) {
            step.regex = std::make_shared<Regex>(
                stringAt(pattern["Regex"], join(patternPath, "Regex"), file), false, file, join(patternPath, "Regex"));
        } else if (pattern.is_object() && pattern.contains("String")) {
            step.regex = std::make_shared<Regex>(stringAt(pattern["String"], join(patternPath, "String"), file), true,
                file, join(patternPath, "String"));
        } else {
            throw InputError(
                file, patternPath, "expected {\"Regex\": ...} or {\"String\": ...}, found " + pattern.dump());
        }
        const std::string behaviorPath = join(path, "behavior");
        const std::string behavior = stringAt(member(node, "behavior", path, file), behaviorPath, file);
        static const std::map<std::string, SplitBehavior> behaviors = {{"Removed", SplitBehavior::Removed},
            {"Isolated", SplitBehavior::Isolated}, {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
            {"MergedWithNext", SplitBehavior::MergedWithNext}, {"Contiguous", SplitBehavior::Contiguous}};
        const auto it = behaviors.find(behavior);
        if (it == behaviors.end()) {
            unsupported(
                file, behaviorPath, behavior, "Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
        }
        step.behavior = it->second;
        step.invert = boolOr(node, "invert", false, path, file);
        preTokenizer.push_back(std::move(step));
    } else if (type == "ByteLevel") {
        for (const PreTokenizerStep& earlier : preTokenizer) {
            if (earlier.kind == PreTokenizerStep::Kind::ByteLevel) {
                throw InputError(file, join(path, "type"), "a second ByteLevel pre-tokenizer would map bytes twice");
            }
        }
        PreTokenizerStep step;
        step.kind = PreTokenizerStep::Kind::ByteLevel;
        step.addPrefixSpace = boolOr(node, "add_prefix_space", true, path, file);
        if (boolOr(node, "use_regex", true, path, file)) {
            step.regex = std::make_shared<Regex>(kGpt2Pattern, false, file, path);
        }
        preTokenizer.push_back(std::move(step));
    } else {
        unsupported(file, join(path, "type"), type, "Split, ByteLevel, Sequence");
    }
}

void Tokenizer::Impl::parsePostProcessor(const Json& node, const std::string& path)
{
    const std::string type = typeOf(node, path, file);
    if (type == "ByteLevel") {
        return; // only trims offsets; ids are unchanged
    }
    if (type == "Sequence") {
        const std::string listPath = join(path, "processors");
        const Json& list = member(node, "processors", path, file);
        if (!list.is_array()) {
            throw InputError(file, listPath, "expected an array, found " + typeName(list));
        }
        for (size_t i = 0; i < list.size(); ++i) {
            parsePostProcessor(list[i], index(listPath, i));
        }
        return;
    }
    if (type != "TemplateProcessing") {
        unsupported(file, join(path, "type"), type, "ByteLevel, TemplateProcessing, Sequence");
    }
    if (!templatePrefix.empty() || !templateSuffix.empty()) {
        throw InputError(file, join(path, "type"), "unsupported second TemplateProcessing");
    }
    const std::string singlePath = join(path, "single");
    const Json& single = member(node, "single", path, file);
    if (!single.is_array()) {
        throw InputError(file, singlePath, "expected an array, found " + typeName(single));
    }
    const Json* specialTokens = nullptr;
    if (const auto it = node.find("special_tokens"); it != node.end() && it->is_object()) {
        specialTokens = &*it;
    }
    bool sawSequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
        const std::string itemPath = index(singlePath, i);
        const Json& item = single[i];
        if (item.is_object() && item.contains("Sequence")) {
            const Json& sequence = item["Sequence"];
            const std::string id = stringAt(
                member(sequence, "id", join(itemPath, "Sequence"), file), join(itemPath, "Sequence.id"), file);
            if (id != "A" || sawSequence) {
                throw InputError(file, join(itemPath, "Sequence.id"),
                    "expected the single sequence \"A\" exactly once, found " + singleQuoted(id));
            }
            sawSequence = true;
        } else if (item.is_object() && item.contains("SpecialToken")) {
            const std::string itemIdPath = join(itemPath, "SpecialToken.id");
            const std::string name
                = stringAt(member(item["SpecialToken"], "id", join(itemPath, "SpecialToken"), file), itemIdPath, file);
            std::vector<std::int64_t> ids;
            if (specialTokens != nullptr && specialTokens->contains(name)) {
                const std::string entryPath = join(path, "special_tokens[" + Json(name).dump() + "].ids");
                const Json& idList = member((*specialTokens)[name], "ids", join(path, "special_tokens"), file);
                if (!idList.is_array()) {
                    throw InputError(file, entryPath, "expected an array of ids, found " + typeName(idList));
                }
                for (size_t k = 0; k < idList.size(); ++k) {
                    const std::int64_t id = idAt(idList[k], index(entryPath, k), file);
                    checkId(id);
                    ids.push_back(id);
                }
            } else if (const auto added = addedByContent.find(name); added != addedByContent.end()) {
                ids.push_back(added->second);
            } else if (const auto model = vocab.find(name); model != vocab.end()) {
                ids.push_back(model->second);
            } else {
                throw InputError(
                    file, itemIdPath, singleQuoted(name) + " is neither in special_tokens nor in the vocabulary");
            }
            auto& target = sawSequence ? templateSuffix : templatePrefix;
            target.insert(target.end(), ids.begin(), ids.end());
        } else {
            throw InputError(
                file, itemPath, "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, found " + item.dump());
        }
    }
    if (!sawSequence) {
        throw InputError(file, singlePath, "template never places the sequence \"A\"");
    }
}

void Tokenizer::Impl::parseDecoder(const Json& node, const std::string& path, bool topLevel)
{
    const std::string type = typeOf(node, path, file);
    if (type == "ByteLevel") {
        return;
    }
    if (type == "Sequence" && topLevel) {
        const std::string listPath = join(path, "decoders");
        const Json& list = member(node, "decoders", path, file);
        if (!list.is_array() || list.empty()) {
            throw InputError(file, listPath, "expected a non-empty array of decoders");
        }
        for (size_t i = 0; i < list.size(); ++i) {
            parseDecoder(list[i], index(listPath, i), false);
        }
        return;
    }
    unsupported(file, join(path, "type"), type, topLevel ? "ByteLevel, Sequence of ByteLevel" : "ByteLevel");
}

// ---------------------------------------------------------------------------------------------------------------
// Encoding

std::string Tokenizer::Impl::normalize(const std::string& text) const
{
#ifdef MISMATCH_HAVE_ICU
    if (nfc) {
        return normalizeNfc(text);
    }
#endif
    return text;
}

// `tokenizers`' AddedVocabulary::find_matches: leftmost-longest matches, single_word tokens kept only between
// non-word characters, lstrip/rstrip tokens swallowing the white space beside them.
std::vector<Segment> Tokenizer::Impl::findAddedTokens(const std::string& text, const TokenTrie& trie) const
{
    std::vector<Segment> segments;
    size_t startOffset = 0;
    size_t pos = 0;
    const auto isWordAt
        = [this, &text](size_t start, size_t end) { return wordCharacter->matches(text.substr(start, end - start)); };
    while (pos < text.size()) {
        const auto [tokenIndex, length] = trie.longestAt(text, pos);
        if (tokenIndex < 0) {
            ++pos;
            continue;
        }
        size_t start = pos;
        size_t stop = pos + length;
        pos = stop;
        const AddedToken& token = addedTokens[static_cast<size_t>(tokenIndex)];
        if (token.singleWord) {
            bool wordBefore = false;
            if (start > 0) {
                size_t previous = start - 1;
                while (previous > 0 && (static_cast<unsigned char>(text[previous]) & 0xC0) == 0x80) {
                    --previous;
                }
                wordBefore = isWordAt(previous, start);
            }
            bool wordAfter = false;
            if (stop < text.size()) {
                size_t next = stop;
                nextCodePoint(text, next);
                wordAfter = isWordAt(stop, next);
            }
            if (wordBefore || wordAfter) {
                continue;
            }
        }
        if (token.lstrip) {
            size_t newStart = start;
            while (newStart > startOffset) {
                size_t previous = newStart - 1;
                while (previous > 0 && (static_cast<unsigned char>(text[previous]) & 0xC0) == 0x80) {
                    --previous;
                }
                size_t probe = previous;
                if (!isWhiteSpace(nextCodePoint(text, probe))) {
                    break;
                }
                newStart = previous;
            }
            start = newStart;
        }
        if (token.rstrip) {
            while (stop < text.size()) {
                size_t next = stop;
                if (!isWhiteSpace(nextCodePoint(text, next))) {
                    break;
                }
                stop = next;
            }
            pos = stop;
        }
        if (startOffset < start) {
            segments.push_back({startOffset, start, -1});
        }
        segments.push_back({start, stop, tokenIndex});
        startOffset = stop;
    }
    if (startOffset < text.size()) {
        segments.push_back({startOffset, text.size(), -1});
    }
    return segments;
}

namespace {

// `tokenizers`' NormalizedString::split: the pattern's matches and the gaps between them cover the text; the
// behavior decides which pieces are kept and what they are merged with. Empty pieces are dropped.
void splitPiece(const std::string& piece, const PreTokenizerStep& step, std::vector<std::string>& out)
{
    struct Part {
        size_t start;
        size_t end;
        bool isMatch;
    };
    std::vector<Part> parts;
    size_t previous = 0;
    for (const auto& [start, end] : step.regex->findAll(piece)) {
        if (previous != start) {
            parts.push_back({previous, start, false});
        }
        parts.push_back({start, end, true});
        previous = end;
    }
    if (previous != piece.size()) {
        parts.push_back({previous, piece.size(), false});
    }
    if (step.invert) {
        for (Part& part : parts) {
            part.isMatch = !part.isMatch;
        }
    }

    struct Kept {
        size_t start;
        size_t end;
        bool remove;
    };
    std::vector<Kept> kept;
    bool previousMatch = false;
    switch (step.behavior) {
    case SplitBehavior::Isolated:
        for (const Part& part : parts) {
            kept.push_back({part.start, part.end, false});
        }
        break;
    case SplitBehavior::Removed:
        for (const Part& part : parts) {
            kept.push_back({part.start, part.end, part.isMatch});
        }
        break;
    case SplitBehavior::Contiguous:
        for (const Part& part : parts) {
            if (part.isMatch == previousMatch && !kept.empty()) {
                kept.back().end = part.end;
            } else {
                kept.push_back({part.start, part.end, false});
            }
            previousMatch = part.isMatch;
        }
        break;
    case SplitBehavior::MergedWithPrevious:
        for (const Part& part : parts) {
            if (part.isMatch && !previousMatch && !kept.empty()) {
                kept.back().end = part.end;
            } else {
                kept.push_back({part.start, part.end, false});
            }
            previousMatch = part.isMatch;
        }
        break;
    case SplitBehavior::MergedWithNext:
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            if (it->isMatch && !previousMatch && !kept.empty()) {
                kept.back().start = it->start;
            } else {
                kept.push_back({it->start, it->end, false});
            }
            previousMatch = it->isMatch;
        }
        std::reverse(kept.begin(), kept.end());
        break;
    }
    for (const Kept& k : kept) {
        if (!k.remove && k.end > k.start) {
            out.push_back(piece.substr(k.start, k.end - k.start));
        }
    }
}

std::string toByteSymbols(const std::string& piece)
{
    std::string out;
    out.reserve(piece.size() * 2);
    for (const char c : piece) {
        appendUtf8(out, byteToCodePoint()[static_cast<unsigned char>(c)]);
    }
    return out;
}

} // namespace

std::vector<std::string> Tokenizer::Impl::preTokenize(const std::string& text) const
{
    std::vector<std::string> pieces {text};
    for (const PreTokenizerStep& step : preTokenizer) {
        std::vector<std::string> next;
        next.reserve(pieces.size());
        for (std::string& piece : pieces) {
            if (step.kind == PreTokenizerStep::Kind::Split) {
                splitPiece(piece, step, next);
                continue;
            }
            // ByteLevel: optional prefix space, optional GPT-2 split, then every byte becomes its symbol.
            if (step.addPrefixSpace && piece.rfind(' ', 0) != 0) {
                piece.insert(piece.begin(), ' ');
            }
            if (step.regex) {
                std::vector<std::string> split;
                splitPiece(piece, step, split);
                for (const std::string& part : split) {
                    next.push_back(toByteSymbols(part));
                }
            } else {
                next.push_back(toByteSymbols(piece));
            }
        }
        pieces = std::move(next);
    }
    return pieces;
}

// Merges the word's symbols by rank: always the lowest-ranked adjacent pair, the leftmost one on ties, exactly
// as `tokenizers`' Word::merge_all.
void Tokenizer::Impl::bpe(const std::string& word, std::vector<std::int64_t>& out) const
{
    if (ignoreMerges) {
        if (const auto it = vocab.find(word); it != vocab.end()) {
            out.push_back(it->second);
            return;
        }
    }
    struct Symbol {
        std::int64_t id;
        int previous;
        int next;
        bool alive;
    };
    std::vector<Symbol> symbols;
    size_t pos = 0;
    while (pos < word.size()) {
        const int byte = codePointToByte(nextCodePoint(word, pos));
        // Every character reaching the model went through the ByteLevel step, so it is a byte symbol.
        if (byte < 0) {
            throw Error("tokenizer: non-byte symbol reached the BPE model (bug in pre-tokenization)");
        }
        const int index = static_cast<int>(symbols.size());
        symbols.push_back({byteSymbolIds[static_cast<size_t>(byte)], index - 1, index + 1, true});
    }
    if (symbols.empty()) {
        return;
    }
    symbols.back().next = -1;

    struct Candidate {
        std::int32_t rank;
        int position;
        std::int64_t result;
        bool operator>(const Candidate& other) const
        {
            return rank != other.rank ? rank > other.rank : position > other.position;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto consider = [&](int left) {
        const int right = symbols[static_cast<size_t>(left)].next;
        if (right < 0) {
            return;
        }
        const auto it
            = merges.find(pairKey(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id));
        if (it != merges.end()) {
            queue.push({it->second.rank, left, it->second.result});
        }
    };
    for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) {
        consider(i);
    }
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = symbols[static_cast<size_t>(top.position)];
        if (!left.alive || left.next < 0) {
            continue;
        }
        Symbol& right = symbols[static_cast<size_t>(left.next)];
        // Stale entry: one side was merged since it was queued.
        const auto it = merges.find(pairKey(left.id, right.id));
        if (it == merges.end() || it->second.result != top.result) {
            continue;
        }
        left.id = top.result;
        right.alive = false;
        left.next = right.next;
        if (left.next >= 0) {
            symbols[static_cast<size_t>(left.next)].previous = top.position;
        }
        if (left.previous >= 0) {
            consider(left.previous);
        }
        consider(top.position);
    }
    for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
        out.push_back(symbols[static_cast<size_t>(i)].id);
    }
}

void Tokenizer::Impl::encodeText(const std::string& text, std::vector<std::int64_t>& out) const
{
    if (text.empty()) {
        return;
    }
    for (const std::string& word : preTokenize(text)) {
        bpe(word, out);
    }
}

// ---------------------------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl))
{
}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

bool Tokenizer::supportsNfc()
{
#ifdef MISMATCH_HAVE_ICU
    return true;
#else
    return false;
#endif
}

Tokenizer Tokenizer::fromFile(const std::string& path)
{
    return fromJson(readInputFile(path, limits::kTokenizerFile, "tokenizer file"), path);
}

Tokenizer Tokenizer::fromJson(const std::string& jsonText, const std::string& fileNameForErrors)
{
    if (const std::size_t deep = jsonNestingTooDeep(jsonText.data(), jsonText.data() + jsonText.size());
        deep != std::string::npos) {
        throw InputError(fileNameForErrors, lineColumnOf(jsonText.data(), jsonText.data() + jsonText.size(), deep),
            nestingTooDeepDetail());
    }
    Json root;
    try {
        root = Json::parse(jsonText);
    } catch (const Json::parse_error& error) {
        throw InputError(
            fileNameForErrors, "byte " + std::to_string(error.byte), std::string("invalid JSON: ") + error.what());
    } catch (const Json::out_of_range& error) { // a number such as 1e400
        throw InputError(fileNameForErrors, "", std::string("invalid JSON: ") + error.what());
    }
    auto impl = std::make_unique<Impl>();
    impl->file = fileNameForErrors;
    impl->parse(root);
    if (root.is_object()) {
        for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder"}) {
            const auto it = root.find(key);
            impl->pipelineJson += std::string(key) + "=" + (it == root.end() ? std::string("null") : it->dump()) + "\n";
        }
    }
    for (size_t i = 0; i < impl->addedTokens.size(); ++i) {
        const AddedToken& token = impl->addedTokens[i];
        if (token.normalized) {
            impl->normalizedTrie.insert(impl->normalize(token.content), static_cast<int>(i));
        }
    }
    return Tokenizer(std::move(impl));
}

std::vector<std::int64_t> Tokenizer::encode(const std::string& utf8, bool addSpecialTokens) const
{
    const Impl& d = *impl_;
    if (const size_t bad = firstInvalidUtf8(utf8); bad != std::string::npos) {
        throw InputError("<text>", "byte " + std::to_string(bad), "invalid UTF-8");
    }
    std::vector<std::int64_t> ids;
    if (addSpecialTokens) {
        ids = d.templatePrefix;
    }
    // Added tokens that are not normalized are cut out of the raw text first, so that neither the normalizer
    // nor the pre-tokenizer can break them; the rest is normalized and searched for normalized added tokens.
    for (const Segment& raw : d.findAddedTokens(utf8, d.rawTrie)) {
        if (raw.tokenIndex >= 0) {
            ids.push_back(d.addedTokens[static_cast<size_t>(raw.tokenIndex)].id);
            continue;
        }
        const std::string normalized = d.normalize(utf8.substr(raw.start, raw.end - raw.start));
        if (d.normalizedTrie.empty()) {
            d.encodeText(normalized, ids);
            continue;
        }
        for (const Segment& part : d.findAddedTokens(normalized, d.normalizedTrie)) {
            if (part.tokenIndex >= 0) {
                ids.push_back(d.addedTokens[static_cast<size_t>(part.tokenIndex)].id);
            } else {
                d.encodeText(normalized.substr(part.start, part.end - part.start), ids);
            }
        }
    }
    if (addSpecialTokens) {
        ids.insert(ids.end(), d.templateSuffix.begin(), d.templateSuffix.end());
    }
    return ids;
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids, bool skipSpecialTokens) const
{
    const Impl& d = *impl_;
    std::string out;
    for (const std::int64_t id : ids) {
        d.checkId(id);
        const auto index = static_cast<size_t>(id);
        if (skipSpecialTokens && d.special[index]) {
            continue;
        }
        out += d.bytes[index];
    }
    return out;
}

std::string Tokenizer::piece(std::int64_t id) const
{
    impl_->checkId(id);
    return impl_->pieces[static_cast<size_t>(id)];
}

std::string Tokenizer::tokenBytes(std::int64_t id) const
{
    impl_->checkId(id);
    return impl_->bytes[static_cast<size_t>(id)];
}

std::int64_t Tokenizer::vocabSize() const
{
    return static_cast<std::int64_t>(impl_->present.size());
}

std::optional<std::int64_t> Tokenizer::tokenId(const std::string& token) const
{
    if (const auto it = impl_->addedByContent.find(token); it != impl_->addedByContent.end()) {
        return it->second;
    }
    if (const auto it = impl_->vocab.find(token); it != impl_->vocab.end()) {
        return it->second;
    }
    return std::nullopt;
}

std::vector<std::int64_t> Tokenizer::specialTokenIds() const
{
    std::vector<std::int64_t> ids;
    for (size_t i = 0; i < impl_->special.size(); ++i) {
        if (impl_->special[i]) {
            ids.push_back(static_cast<std::int64_t>(i));
        }
    }
    return ids;
}

bool Tokenizer::isSpecial(std::int64_t id) const
{
    return id >= 0 && id < static_cast<std::int64_t>(impl_->special.size()) && impl_->special[static_cast<size_t>(id)];
}

std::optional<std::int64_t> Tokenizer::bosTokenId() const
{
    if (impl_->templatePrefix.empty()) {
        return std::nullopt;
    }
    return impl_->templatePrefix.front();
}

std::optional<std::int64_t> Tokenizer::eosTokenId() const
{
    if (impl_->templateSuffix.empty()) {
        return std::nullopt;
    }
    return impl_->templateSuffix.back();
}

namespace {

// The four parts of Tokenizer::digest, in order: vocabulary, merges, added tokens, pipeline.
std::array<std::string, 4> digestParts(const Tokenizer& tokenizer, const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<AddedToken>& added, const std::string& pipeline)
{
    Fnv1a vocabulary;
    for (std::int64_t id = 0; id < tokenizer.vocabSize(); ++id) {
        std::string piece;
        try {
            piece = tokenizer.piece(id);
        } catch (const InputError&) {
            vocabulary.add(std::int64_t {-1}); // a gap
            continue;
        }
        vocabulary.add(piece);
    }
    Fnv1a mergeHash;
    for (const auto& [left, right] : merges) {
        mergeHash.add(left);
        mergeHash.add(right);
    }
    std::vector<const AddedToken*> byId;
    for (const AddedToken& token : added) {
        byId.push_back(&token);
    }
    std::sort(byId.begin(), byId.end(), [](const AddedToken* a, const AddedToken* b) { return a->id < b->id; });
    Fnv1a addedHash;
    for (const AddedToken* token : byId) {
        addedHash.add(token->content);
        addedHash.add(token->id);
        addedHash.add(std::int64_t {token->special} | std::int64_t {token->singleWord} << 1
            | std::int64_t {token->lstrip} << 2 | std::int64_t {token->rstrip} << 3
            | std::int64_t {token->normalized} << 4);
    }
    Fnv1a pipelineHash;
    pipelineHash.add(pipeline);
    return {vocabulary.hex(), mergeHash.hex(), addedHash.hex(), pipelineHash.hex()};
}

} // namespace

std::string Tokenizer::digest() const
{
    const auto parts = digestParts(*this, impl_->mergeList, impl_->addedTokens, impl_->pipelineJson);
    return parts[0] + parts[1] + parts[2] + parts[3];
}

std::string Tokenizer::difference(const Tokenizer& other) const
{
    const Impl& a = *impl_;
    const Impl& b = *other.impl_;
    if (vocabSize() != other.vocabSize()) {
        return "vocabularies of " + std::to_string(vocabSize()) + " and " + std::to_string(other.vocabSize())
            + " tokens";
    }
    for (std::size_t id = 0; id < a.present.size(); ++id) {
        if (a.present[id] != b.present[id] || (a.present[id] && a.pieces[id] != b.pieces[id])) {
            const auto shown = [](const Impl& d, std::size_t i) {
                return d.present[i] ? singleQuoted(d.pieces[i]) : std::string("no token");
            };
            return "token id " + std::to_string(id) + " is " + shown(a, id) + " in one and " + shown(b, id)
                + " in the other";
        }
    }
    for (std::size_t rank = 0; rank < std::max(a.mergeList.size(), b.mergeList.size()); ++rank) {
        if (rank >= a.mergeList.size() || rank >= b.mergeList.size() || a.mergeList[rank] != b.mergeList[rank]) {
            return "the merges differ (" + std::to_string(a.mergeList.size()) + " and "
                + std::to_string(b.mergeList.size()) + " merges, the first difference at rank " + std::to_string(rank)
                + ")";
        }
    }
    const auto partsA = digestParts(*this, a.mergeList, a.addedTokens, a.pipelineJson);
    const auto partsB = digestParts(other, b.mergeList, b.addedTokens, b.pipelineJson);
    if (partsA[2] != partsB[2]) {
        return "the added (special) tokens differ";
    }
    if (partsA[3] != partsB[3]) {
        return "the normalizer, pre-tokenizer, post-processor or decoder differ";
    }
    return {};
}

} // namespace mismatch::model

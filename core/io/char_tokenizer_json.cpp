#include "core/io/char_tokenizer_json.h"

#include "core/model/byte_level.h"

#include <nlohmann/json.hpp>

namespace mismatch::io {

namespace {

nlohmann::ordered_json addedToken(int id, const std::string& content)
{
    return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
        {"normalized", false}, {"special", true}};
}

nlohmann::ordered_json byteLevel()
{
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

} // namespace

std::string byteLevelSymbol(unsigned char byte)
{
    return model::byteLevelSymbol(byte);
}

std::string demoTokenizerJson()
{
    nlohmann::ordered_json vocabulary = nlohmann::ordered_json::object();
    for (unsigned b = 0; b < 256; ++b) {
        vocabulary[byteLevelSymbol(static_cast<unsigned char>(b))] = b;
    }
    nlohmann::ordered_json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false},
        {"ignore_merges", false}, {"vocab", vocabulary}, {"merges", nlohmann::ordered_json::array()}};
    nlohmann::ordered_json tokenizer = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
        {"added_tokens",
            {addedToken(kDemoEndOfTextId, kDemoEndOfTextToken),
                addedToken(kDemoBeginOfSequenceId, kDemoBeginOfSequenceToken)}},
        {"normalizer", nullptr}, {"pre_tokenizer", byteLevel()}, {"post_processor", byteLevel()},
        {"decoder", byteLevel()}, {"model", model}};
    return tokenizer.dump(2) + "\n";
}

} // namespace mismatch::io

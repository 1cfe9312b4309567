// Reading tokenizer.json into Tokenizer::Impl: the BPE model (vocabulary, merges), the added tokens and the
// pipeline (normalizer, pre-tokenizer, post-processor template, decoder). Every error names the key path.
#include "core/model/tokenizer_impl.h"

#include "core/common/input_limits.h"
#include "core/common/utf8.h"
#include "core/model/byte_level.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace mismatch::model {

using namespace tokenizer_detail;

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
        const int byte = byteOfSymbol(nextCodePoint(content, pos));
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
        const std::string symbol = byteLevelSymbol(static_cast<unsigned char>(b));
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
    std::map<std::int64_t, size_t> addedById; // id -> index in addedTokens
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
        if (token.content.size() > limits::kMaxAddedTokenBytes) {
            // The encoder tries every added token at every position of a text: a huge one costs its length there.
            throw InputError(file, join(path, "content"),
                "is " + std::to_string(token.content.size()) + " bytes, over the limit of "
                    + std::to_string(limits::kMaxAddedTokenBytes) + " bytes for an added token");
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
        if (const auto earlier = addedById.find(token.id); earlier != addedById.end()) {
            // Two contents for one id: decoding the id could give either, and one of them would never be
            // encoded as listed.
            const AddedToken& first = addedTokens[earlier->second];
            throw InputError(file, join(path, "id"),
                "the id " + std::to_string(token.id) + " of " + singleQuoted(token.content) + " is already the id of "
                    + (first.special ? "the special token " : "the added token ") + singleQuoted(first.content));
        }
        addedById.emplace(token.id, addedTokens.size());
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

} // namespace mismatch::model

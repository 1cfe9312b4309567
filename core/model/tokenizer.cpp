#include "core/model/tokenizer.h"

#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/common/hash.h"
#include "core/common/input_limits.h"
#include "core/common/utf8.h"
#include "core/model/tokenizer_impl.h"
#include "core/model/tokenizer_nfc.h"

#include <algorithm>
#include <array>

namespace mismatch::model {

using namespace tokenizer_detail;

std::string Tokenizer::Impl::normalize(const std::string& text) const
{
#ifdef MISMATCH_HAVE_ICU
    if (nfc) {
        return normalizeNfc(text);
    }
#endif
    return text;
}

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
            fileNameForErrors, "byte " + std::to_string(error.byte), "invalid JSON: " + jsonErrorDetail(error));
    } catch (const Json::out_of_range& error) { // a number such as 1e400
        throw InputError(fileNameForErrors, "", "invalid JSON: " + jsonErrorDetail(error));
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

std::string Tokenizer::generatedBytes(std::int64_t id) const
{
    const Impl& d = *impl_;
    if (id < 0 || id >= static_cast<std::int64_t>(d.present.size()) || !d.present[static_cast<size_t>(id)]
        || d.special[static_cast<size_t>(id)]) {
        return {};
    }
    return d.bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::generatedText(const std::vector<std::int64_t>& ids) const
{
    std::string out;
    for (const std::int64_t id : ids) {
        out += generatedBytes(id);
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

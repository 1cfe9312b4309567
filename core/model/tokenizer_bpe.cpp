// The BPE model: a pre-tokenized word's byte symbols merged by rank into token ids.
#include "core/model/tokenizer_impl.h"

#include "core/common/utf8.h"
#include "core/model/byte_level.h"

#include <functional>
#include <queue>

namespace mismatch::model {

using namespace tokenizer_detail;

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
        const int byte = byteOfSymbol(nextCodePoint(word, pos));
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

} // namespace mismatch::model

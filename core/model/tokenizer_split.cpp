// Cutting text into the pieces the BPE model encodes one at a time: added tokens cut out first (as `tokenizers`'
// AddedVocabulary does), then the pre-tokenizer's steps (Split patterns and ByteLevel).
#include "core/model/tokenizer_impl.h"

#include "core/common/utf8.h"
#include "core/model/byte_level.h"

#include <algorithm>

namespace mismatch::model {

using namespace tokenizer_detail;

namespace {

// Unicode White_Space, which is what Rust's char::is_whitespace and regex `\s` test (used by added tokens'
// lstrip/rstrip).
bool isWhiteSpace(char32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680
        || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F
        || cp == 0x3000;
}

} // namespace

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
                wordBefore = isWordAt(previousCodePointStart(text, start), start);
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
                const size_t previous = previousCodePointStart(text, newStart);
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
                    next.push_back(toByteLevelSymbols(part));
                }
            } else {
                next.push_back(toByteLevelSymbols(piece));
            }
        }
        pieces = std::move(next);
    }
    return pieces;
}

} // namespace mismatch::model

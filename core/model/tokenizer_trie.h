#pragma once
// The added tokens' trie: leftmost-longest matching of added-token contents in text, byte by byte (what
// `tokenizers` does with Aho-Corasick).
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::model::tokenizer_detail {

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

} // namespace mismatch::model::tokenizer_detail

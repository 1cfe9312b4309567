#pragma once
// FNV-1a, 64 bit: the one non-cryptographic hash of the project (seeds from names, digests of files and of a
// tokenizer's parts). Not for anything an adversary chooses to collide.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mismatch {

constexpr std::uint64_t kFnv1aOffsetBasis = 0xCBF29CE484222325ULL;
constexpr std::uint64_t kFnv1aPrime = 0x100000001B3ULL;

// `hash` continued over `size` bytes of `data` (start with kFnv1aOffsetBasis).
std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash = kFnv1aOffsetBasis);
inline std::uint64_t fnv1a(std::string_view text, std::uint64_t hash = kFnv1aOffsetBasis)
{
    return fnv1a(text.data(), text.size(), hash);
}

// FNV-1a over a sequence of parts, each text length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
class Fnv1a {
public:
    void add(std::string_view text);
    void add(std::int64_t value);
    void addBytes(const void* data, std::size_t size) { hash_ = fnv1a(data, size, hash_); }
    std::uint64_t value() const { return hash_; }
    std::string hex() const;

private:
    std::uint64_t hash_ = kFnv1aOffsetBasis;
};

// 16 lowercase hex digits.
std::string hex64(std::uint64_t value);

}  // namespace mismatch

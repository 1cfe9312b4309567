#include "core/common/hash.h"

#include <cstdio>

namespace mismatch {

std::uint64_t fnv1a(const void* data, std::size_t size, std::uint64_t hash)
{
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
        hash = (hash ^ bytes[i]) * kFnv1aPrime;
    }
    return hash;
}

void Fnv1a::add(std::string_view text)
{
    const std::uint64_t size = text.size();
    addBytes(&size, sizeof size);
    addBytes(text.data(), text.size());
}

void Fnv1a::add(std::int64_t value)
{
    addBytes(&value, sizeof value);
}

std::string Fnv1a::hex() const
{
    return hex64(hash_);
}

std::string hex64(std::uint64_t value)
{
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
}

}  // namespace mismatch

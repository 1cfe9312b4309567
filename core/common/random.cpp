#include "core/common/random.h"

namespace mismatch {

std::uint64_t SplitMix64::next()
{
    state_ += 0x9e3779b97f4a7c15ULL;
    std::uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b, std::uint64_t c)
{
    SplitMix64 generator(a ^ 0x9e3779b97f4a7c15ull);
    std::uint64_t h = generator.next() ^ b;
    SplitMix64 second(h);
    h = second.next() ^ c;
    SplitMix64 third(h);
    return third.next();
}

std::int64_t SplitMix64::uniform(std::int64_t low, std::int64_t high)
{
    const std::uint64_t range = static_cast<std::uint64_t>(high - low) + 1;
    if (range == 0) {  // the whole 64-bit range
        return static_cast<std::int64_t>(next());
    }
    // Accept only draws below the largest multiple of `range`, so every residue is equally likely.
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    std::uint64_t draw = next();
    while (draw >= limit) {
        draw = next();
    }
    return low + static_cast<std::int64_t>(draw % range);
}

std::uint64_t SplitMix64::below(std::uint64_t n)
{
    return static_cast<std::uint64_t>(uniform(0, static_cast<std::int64_t>(n - 1)));
}

double SplitMix64::uniform()
{
    return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

}  // namespace mismatch

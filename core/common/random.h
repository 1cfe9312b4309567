#pragma once
// SplitMix64 (Steele, Lea and Flood 2014; Vigna's reference splitmix64.c): the project's one deterministic
// generator. Written here instead of <random>'s distributions, whose outputs differ between standard
// libraries, so that a seed gives the same problems, samples and bootstrap intervals everywhere.
#include <cstdint>

namespace mismatch {

class SplitMix64 {
public:
    explicit SplitMix64(std::uint64_t seed = 0) : state_(seed) {}
    std::uint64_t next();
    // Uniform in [low, high] (inclusive; low <= high), by rejection so that no value is favoured.
    std::int64_t uniform(std::int64_t low, std::int64_t high);
    // Uniform in [0, n) (n >= 1): uniform(0, n - 1).
    std::uint64_t below(std::uint64_t n);
    // Uniform double in [0, 1) from the top 53 bits.
    double uniform();

private:
    std::uint64_t state_;
};

// A 64-bit mix of several values (SplitMix64 of a running hash): the seeds of independent random streams, e.g.
// (run seed, step, request index) or (base seed, replicate).
std::uint64_t mixSeed(std::uint64_t a, std::uint64_t b, std::uint64_t c = 0);

}  // namespace mismatch

#pragma once
// The tiny random-weight student the command-line and job tests measure: hidden 64, 2 layers, 4 query and 2 KV
// heads, the demo pair's 128-token vocabulary, weights N(0, 0.3) drawn from `seed`. Fast to generate with; its text
// means nothing.
#include "core/model/transformer.h"
#include "core/train/zoo.h"

#include <cstdint>
#include <string>

namespace mismatch::test {

inline void writeTinyStudent(const std::string& directory, std::uint64_t seed = 21)
{
    const model::ModelConfig config = train::demoModelConfig(64, 2, 4, 2, 128);
    train::writeDemoModelDirectory(directory, config, model::randomWeights(config, seed, 0.3));
}

} // namespace mismatch::test

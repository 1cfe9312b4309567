#pragma once
// What the memory plan's tests (test_engine on the CPU, test_gpu_parity on a device) compare with
// engine::engineExtraBytes: the bytes an engine holds beyond the weights it was given.
#include "core/engine/engine_model.h"
#include "core/model/transformer.h"

#include <cstdint>
#include <set>
#include <string>

namespace mismatch::test {

struct GivenWeights {
    std::uint64_t bytes = 0; // every tensor's bytes
    std::int64_t parameters = 0;
    std::uint64_t floatBiasBytes = 0; // float32 copies of the biases, which the plan leaves out
    std::set<const void*> storage; // the tensors' storages
};

inline GivenWeights givenWeights(const model::TransformerWeights& weights)
{
    GivenWeights given;
    for (const auto& [name, tensor] : weights.named()) {
        given.bytes += tensor.nbytes();
        given.parameters += tensor.numel();
        given.storage.insert(tensor.storage().data());
        const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
        given.floatBiasBytes += bias ? 4 * static_cast<std::uint64_t>(tensor.numel()) : 0;
    }
    return given;
}

// The engine's weight storage (EngineModel::weightBytes) less what it shares with the given weights (each shared
// storage counted once).
inline std::uint64_t heldBeyondGiven(const GivenWeights& given, const engine::EngineModel& engine)
{
    std::uint64_t shared = 0;
    std::set<const void*> seen;
    for (const auto& [name, tensor] : engine.weights().named()) {
        const void* data = tensor.storage().data();
        if (given.storage.count(data) && seen.insert(data).second) {
            shared += tensor.storage().nbytes();
        }
    }
    return engine.weightBytes() - shared;
}

} // namespace mismatch::test

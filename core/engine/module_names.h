#pragma once
// How the engine names a module's weight and its recipe entry (the transformer's module names as
// model::moduleNames lists them): shared by the engine, its memory estimate and its noisy-weight dtypes.
#include "core/model/config.h"
#include "core/quant/recipe_plan.h"

#include <string>

namespace mismatch::engine {

// The recipe names the embedding "model.embed_tokens"; the transformer's embed() seam calls it "embed_tokens".
inline std::string planModuleName(const std::string& module)
{
    return module == "embed_tokens" ? std::string(quant::kEmbedName) : module;
}

// The stored tensor a module multiplies with: the embedding table for embed_tokens and for a tied lm_head.
inline std::string weightTensorName(const model::ModelConfig& config, const std::string& module)
{
    if (module == "embed_tokens" || (module == "lm_head" && config.tieWordEmbeddings)) {
        return "model.embed_tokens.weight";
    }
    return module + ".weight";
}

} // namespace mismatch::engine

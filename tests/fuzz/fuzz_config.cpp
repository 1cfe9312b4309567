// fuzz_config: config.json text through parseConfig (core/model/config.h); a configuration that parses must
// write back (configToJson) to text that parses to an equal one, and its sizes must be computable.
#include "tests/fuzz/fuzz_target.h"

#include "core/model/config.h"
#include "core/model/model_files.h"

MISMATCH_FUZZ_TARGET(config)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    mismatch::model::ModelConfig config;
    try {
        config = mismatch::model::parseConfig(text, "config.json");
    } catch (const mismatch::InputError&) {
        return 0;
    }
    const mismatch::model::ModelConfig again = mismatch::model::parseConfig(mismatch::model::configToJson(config), "again.json");
    fuzz::check(again == config, "parseConfig(configToJson(c)) == c");
    fuzz::check(config.parameterCount() > 0, "a valid configuration has parameters");
    mismatch::model::dtypeFromTorchDtype(config.torchDtype);
    if (config.numLayers <= 64) {
        for (const mismatch::model::ExpectedTensor& tensor : mismatch::model::expectedTensors(config)) {
            for (const std::int64_t extent : tensor.shape) {
                fuzz::check(extent > 0, "expected tensors have positive extents");
            }
        }
    }
    return 0;
}

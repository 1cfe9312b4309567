// fuzz_runfile: run-file text (YAML or JSON) through parseRunConfig (core/train/run_config.h) with relative
// paths resolved against resources/runs (so ../models/arith-student and the shipped recipes and prompt sets
// exist); a run file that parses must write back (runConfigToJson) to text that parses to an equal one.
#include "tests/fuzz/fuzz_target.h"

#include "core/train/run_config.h"

MISMATCH_FUZZ_TARGET(runfile)
{
    static const std::string base = std::string(MISMATCH_RESOURCE_DIR) + "/runs";
    const std::string text(reinterpret_cast<const char*>(data), size);
    mismatch::train::RunConfig config;
    try {
        config = mismatch::train::parseRunConfig(text, base + "/fuzz-run.yaml", base);
    } catch (const mismatch::InputError&) {
        return 0;
    }
    const std::string json = mismatch::train::runConfigToJson(config);
    const mismatch::train::RunConfig again = mismatch::train::parseRunConfig(json, base + "/fuzz-run.json", base);
    fuzz::check(again == config, "parseRunConfig(runConfigToJson(c)) == c");
    return 0;
}

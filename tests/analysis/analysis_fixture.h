#pragma once
// What the engine-only analysis tests share: the built-in probe prompts, writing a small file, and measurement
// settings small enough for a tiny random model (10 new tokens, 2000 resamples, a 16 MiB KV cache).
#include "core/analysis/rollout_measure.h"

#include <fstream>
#include <string>

namespace mismatch::test {

inline std::string probePath()
{
    return std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
}

inline void writeText(const std::string& path, const std::string& text)
{
    std::ofstream out(path, std::ios::binary);
    out << text;
}

inline analysis::MeasureSettings smallSettings()
{
    analysis::MeasureSettings settings;
    settings.maxNewTokens = 10;
    settings.seed = 5;
    settings.bootstrap.resamples = 2000;
    settings.kvCacheBytes = 16ull << 20;
    return settings;
}

} // namespace mismatch::test

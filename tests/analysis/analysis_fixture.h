#pragma once
// What the engine-only analysis tests share: the built-in probe prompts, writing a small file, and measurement
// settings small enough for a tiny random model (10 new tokens, 2000 resamples, a 16 MiB KV cache), and a copy of a
// model directory as a training checkpoint of a given optimizer step.
#include "core/analysis/rollout_measure.h"

// ATen before Qt: Qt defines `slots` and `signals` as macros, which ATen's headers use as names.
#include <ATen/ATen.h>

#include <QTemporaryDir>

#include <filesystem>
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

// A copy of a model directory as a trainer checkpoint at `optimizerSteps` (state.json as training writes it).
inline std::string checkpointAt(const QTemporaryDir& dir, const std::string& model, const std::string& name, int optimizerSteps)
{
    const std::string target = dir.path().toStdString() + "/" + name;
    std::filesystem::create_directories(target);
    for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
        std::filesystem::copy_file(model + "/" + file, target + "/" + file,
            std::filesystem::copy_options::overwrite_existing);
    }
    writeText(target + "/state.json",
        "{\"step\": " + std::to_string(optimizerSteps) + ", \"optimizer_steps\": " + std::to_string(optimizerSteps) + "}\n");
    return target;
}

} // namespace mismatch::test

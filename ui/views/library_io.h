#pragma once
// What the workspace panels read from disk before registering something in the store: a model directory
// (config.json validated against its checkpoint) and a prompt set file. Kept apart from the widgets so that
// only this file pulls in the checkpoint reader.
#include "core/model/config.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <string>

namespace mismatch::ui {

// Opens DIRECTORY as a model directory (InputError naming the file and what is wrong) and returns the record
// RunStore::addModel stores: name = the directory's name, absolute path, architecture, parameter count of the
// checkpoint, config.json text.
store::ModelRecord inspectModelDirectory(const std::string& directory);
// Loads a JSON Lines prompt set (InputError naming the file and line) and returns its record.
store::PromptSetRecord inspectPromptSet(const std::string& path);

// Weight bytes of the model all in BF16 (what the recipe editor compares against), from config.json text.
std::int64_t bf16WeightBytes(const model::ModelConfig& config);

// "1.5 GiB", "230.2 MiB", "512 B".
std::string formatBytes(double bytes);
// "1.54 B", "12.3 M", "950 K".
std::string formatCount(double count);

} // namespace mismatch::ui

#include "ui/views/library_io.h"

#include "core/common/input_limits.h"
#include "core/io/prompt_set.h"
#include "core/model/model_files.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace mismatch::ui {

namespace fs = std::filesystem;

store::ModelRecord inspectModelDirectory(const std::string& directory)
{
    const model::ModelFiles files = model::openModelDirectory(directory);
    store::ModelRecord record;
    fs::path path = fs::absolute(fs::path(directory)).lexically_normal();
    if (path.filename().empty()) {
        path = path.parent_path(); // "dir/" -> "dir"
    }
    record.name = path.filename().string();
    record.path = path.string();
    record.architecture = model::toString(files.config.architecture);
    record.parameterCount = model::checkpointStats(files.checkpoint).parameterCount;
    // Already validated by openModelDirectory.
    record.configJson
        = nlohmann::json::parse(readInputFile((path / "config.json").string(), limits::kConfigFile, "config.json")).dump();
    return record;
}

store::PromptSetRecord inspectPromptSet(const std::string& path)
{
    const io::PromptSet set = io::loadPromptSet(path);
    store::PromptSetRecord record;
    const fs::path absolute = fs::absolute(fs::path(path)).lexically_normal();
    record.name = absolute.stem().string();
    record.path = absolute.string();
    record.promptCount = static_cast<std::int64_t>(set.prompts.size());
    return record;
}

std::int64_t bf16WeightBytes(const model::ModelConfig& config)
{
    return quant::resolveRecipe(quant::Recipe {}, config).bf16WeightBytes;
}

std::string formatBytes(double bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (bytes >= 1024.0 && unit < 4) {
        bytes /= 1024.0;
        ++unit;
    }
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
    return buffer;
}

std::string formatCount(double count)
{
    const char* units[] = {"", " K", " M", " B", " T"};
    int unit = 0;
    while (count >= 1000.0 && unit < 4) {
        count /= 1000.0;
        ++unit;
    }
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, unit == 0 ? "%.0f%s" : "%.3g%s", count, units[unit]);
    return buffer;
}

} // namespace mismatch::ui

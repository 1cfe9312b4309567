#include "core/analysis/demo.h"

#include "core/common/error.h"
#include "core/io/prompt_set.h"
#include "core/model/model_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

std::vector<fs::path> sortedEntries(const fs::path& directory)
{
    std::vector<fs::path> entries;
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
        return entries;
    }
    for (const auto& entry : fs::directory_iterator(directory)) {
        entries.push_back(entry.path());
    }
    std::sort(entries.begin(), entries.end());
    return entries;
}

}  // namespace

DemoReport runDemo(store::RunStore& store, const DemoOptions& options, Progress& progress)
{
    DemoReport report;
    const fs::path resources(options.resourceDirectory);
    // The demo is itself a run of the workspace, so that the GUI's run browser and `store runs` show it.
    report.runId = store.beginRun({"demo", "demo",
        nlohmann::json{{"resources", fs::absolute(resources).string()}}.dump(), std::nullopt});
    try {
        progress.update(0.0, "registering built-in models");
        for (const fs::path& directory : sortedEntries(resources / "models")) {
            const fs::path configFile = directory / "config.json";
            if (!fs::is_regular_file(configFile)) {
                continue;
            }
            progress.checkCancelled();
            // Opening validates config.json against the checkpoint (names, shapes, dtypes).
            const model::ModelFiles files = model::openModelDirectory(directory.string());
            store::ModelRecord record;
            record.name = directory.filename().string();
            record.path = fs::absolute(directory).string();
            record.architecture = model::toString(files.config.architecture);
            record.parameterCount = model::checkpointStats(files.checkpoint).parameterCount;
            std::ifstream in(configFile);
            record.configJson = nlohmann::json::parse(in).dump();
            record.id = store.addModel(record);
            report.models.push_back(record);
        }
        progress.update(0.5, "registering built-in prompt sets");
        for (const fs::path& file : sortedEntries(resources / "prompts")) {
            if (file.extension() != ".jsonl") {
                continue;
            }
            progress.checkCancelled();
            store::PromptSetRecord record;
            record.name = file.stem().string();
            record.path = fs::absolute(file).string();
            record.promptCount = static_cast<std::int64_t>(io::loadPromptSet(file.string()).prompts.size());
            record.id = store.addPromptSet(record);
            report.promptSets.push_back(record);
        }
    } catch (const CancelledError& error) {
        store.finishRun(report.runId, store::RunStatus::Cancelled, error.what());
        throw;
    } catch (const std::exception& error) {
        store.finishRun(report.runId, store::RunStatus::Failed, error.what());
        throw;
    }
    store.finishRun(report.runId, store::RunStatus::Finished);
    report.summary = store.summary();
    progress.update(1.0, "done");
    return report;
}

}  // namespace mismatch::analysis

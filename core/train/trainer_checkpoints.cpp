// Training: checkpoints. Where they live (checkpoints/run-<id>/step-<s>/), writing one (model.safetensors,
// optimizer.safetensors, history.safetensors for staleness, state.json) through a staging directory, restoring one
// for a resumed run, finding a run's newest one and reading a checkpoint's optimizer step count.
#include "core/train/trainer_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/common/version.h"
#include "core/model/config.h"
#include "core/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace mismatch::train {

namespace {

std::string stepDirectoryName(std::int64_t step)
{
    char name[32];
    std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
    return name;
}

} // namespace

namespace detail {

void Session::saveCheckpoint(std::int64_t runId, std::int64_t step, const AdamW& optimizer, const Bf16Unit& bf16Unit,
    double wallSeconds, TrainResult& result)
{
    const fs::path root(checkpointDirectory(workspace_, runId));
    const fs::path target = root / stepDirectoryName(step);
    const fs::path staging = root / (stepDirectoryName(step) + ".tmp");
    try {
        writeCheckpoint(staging, target, step, runId, optimizer, bf16Unit, wallSeconds);
    } catch (...) {
        // Nothing half-written stays behind: a failed write (full disk, file size limit) removes its staging
        // directory, and the newest complete checkpoint is still the previous one.
        std::error_code ignored;
        fs::remove_all(staging, ignored);
        throw;
    }
    result.lastCheckpoint = target.string();
    // Older checkpoints are kept: a resumable run needs only the newest, but earlier ones are student
    // checkpoints that admission checks and calibrations can use.
}

void Session::writeCheckpoint(const fs::path& staging, const fs::path& target, std::int64_t step, std::int64_t runId,
    const AdamW& optimizer, const Bf16Unit& bf16Unit, double wallSeconds)
{
    const auto fileSystem = [](const char* what, const fs::path& path, auto&& operation) {
        std::error_code error;
        operation(error);
        if (error) {
            throw Error(std::string("cannot ") + what + " " + path.string() + ": " + error.message());
        }
    };
    fileSystem("remove", staging, [&](std::error_code& e) { fs::remove_all(staging, e); });
    fileSystem("create", staging, [&](std::error_code& e) { fs::create_directories(staging, e); });
    writeFileAtomically((staging / "config.json").string(), model::configToJson(modelConfig_));
    fileSystem("write", staging / "tokenizer.json", [&](std::error_code& e) {
        fs::copy_file(fs::path(config_.student) / "tokenizer.json", staging / "tokenizer.json",
            fs::copy_options::overwrite_existing, e);
    });
    model::saveWeights(staging.string(), weights_, model::DType::F32); // as they are: nothing writes them meanwhile
    model::writeSafetensors((staging / "optimizer.safetensors").string(), optimizer.state());
    // The versions the next steps' rollouts use: max(0, step - k) .. step - 1 (step itself is the model).
    std::vector<std::pair<std::string, at::Tensor>> history;
    std::vector<std::int64_t> historyVersions;
    for (const auto& [version, weights] : versions_.snapshot()) {
        if (version >= step || version < step - config_.rollout.staleness) {
            continue;
        }
        historyVersions.push_back(version);
        for (const auto& [name, tensor] : weights.named()) {
            history.emplace_back("v" + std::to_string(version) + "/" + name, tensor);
        }
    }
    if (!history.empty()) {
        model::writeSafetensors((staging / "history.safetensors").string(), history);
    }
    nlohmann::json state = {{"run_id", runId}, {"step", step}, {"optimizer_steps", optimizer.stepCount()},
        {"bf16_unit", bf16Unit.value}, {"bf16_unit_step", bf16Unit.step}, {"wall_time_s", wallSeconds},
        {"history_versions", historyVersions},
        {"tool_version", kVersion}};
    writeFileAtomically((staging / "state.json").string(), state.dump(2) + "\n");
    fileSystem("remove", target, [&](std::error_code& e) { fs::remove_all(target, e); });
    fileSystem("rename", staging, [&](std::error_code& e) { fs::rename(staging, target, e); });
}

std::int64_t Session::loadCheckpoint(const fs::path& directory)
{
    const std::string statePath = (directory / "state.json").string();
    nlohmann::json state;
    std::int64_t step = 0;
    std::vector<std::int64_t> historyVersions;
    try {
        state = nlohmann::json::parse(readInputFile(statePath, limits::kConfigFile, "checkpoint state"));
        step = state.at("step").get<std::int64_t>();
        historyVersions = state.at("history_versions").get<std::vector<std::int64_t>>();
        restoredBf16Unit_.value = state.at("bf16_unit").get<double>();
        // Checkpoints written before the unit's step was recorded: the unit is the one of the checkpoint's step at
        // the latest (only `runs show`'s label uses it).
        restoredBf16Unit_.step = state.value("bf16_unit_step", step);
        restoredWallSeconds_ = state.at("wall_time_s").get<double>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError(statePath, "", "malformed checkpoint state: " + jsonErrorDetail(error));
    }
    model::TransformerWeights restored = model::loadWeights(directory.string(), modelConfig_);
    for (const std::string& name : weights_.names()) {
        weights_.set(name, restored.get(name).to(device_).clone());
    }
    const auto optimizerFile = model::SafetensorsFile::open((directory / "optimizer.safetensors").string());
    optimizerState_.clear();
    for (const auto& info : optimizerFile->tensors()) {
        optimizerState_.emplace_back(info.name, optimizerFile->load(info.name));
    }
    if (!historyVersions.empty()) {
        const auto historyFile = model::SafetensorsFile::open((directory / "history.safetensors").string());
        for (const std::int64_t version : historyVersions) {
            model::TransformerWeights snapshot;
            for (const std::string& name : weights_.names()) {
                snapshot.set(name, historyFile->load("v" + std::to_string(version) + "/" + name).to(device_));
            }
            versions_.publish(version, std::move(snapshot));
        }
    }
    return step;
}

// The newest complete checkpoint of a run (a step-N directory with state.json), or nullopt.
std::optional<fs::path> newestCheckpoint(const std::string& directory)
{
    std::error_code ec;
    if (!fs::is_directory(directory, ec)) {
        return std::nullopt;
    }
    std::optional<fs::path> newest;
    for (const auto& entry : fs::directory_iterator(directory, ec)) {
        const std::string name = entry.path().filename().string();
        std::error_code missing;
        if (name.rfind("step-", 0) != 0 || name.find(".tmp") != std::string::npos
            || !fs::exists(entry.path() / "state.json", missing)) {
            continue;
        }
        if (!newest || name > newest->filename().string()) {
            newest = entry.path();
        }
    }
    return newest;
}

} // namespace detail

std::int64_t checkpointOptimizerSteps(const std::string& directory)
{
    const fs::path stateFile = fs::path(directory) / "state.json";
    std::error_code error;
    if (!fs::exists(stateFile, error)) {
        return 0; // a model directory that no training run wrote: the student before training
    }
    const nlohmann::json state = nlohmann::json::parse(readInputFile(stateFile.string(), limits::kConfigFile, "checkpoint state"), nullptr, false);
    if (!state.is_object() || !state.contains("optimizer_steps") || !state.at("optimizer_steps").is_number_integer()
        || state.at("optimizer_steps").get<std::int64_t>() < 0) {
        throw InputError(stateFile.string(), "optimizer_steps",
            "expected the checkpoint's optimizer step count (an integer >= 0) in the JSON object that training "
            "writes with each checkpoint");
    }
    return state.at("optimizer_steps").get<std::int64_t>();
}

std::string workspaceDirectoryOf(const store::RunStore& store, const std::string& workspaceDirectory)
{
    return workspaceDirectory.empty() ? fs::absolute(fs::path(store.path())).parent_path().string() : workspaceDirectory;
}

std::string checkpointDirectory(const std::string& workspaceDirectory, std::int64_t runId)
{
    return (fs::path(workspaceDirectory) / "checkpoints" / ("run-" + std::to_string(runId))).string();
}

std::string stepCheckpoint(
    const store::RunStore& store, const std::string& workspaceDirectory, std::int64_t runId, std::int64_t step)
{
    return (fs::path(checkpointDirectory(workspaceDirectoryOf(store, workspaceDirectory), runId))
        / stepDirectoryName(step))
        .string();
}

} // namespace mismatch::train

#include "core/analysis/calibrate.h"

#include "core/analysis/job_resume.h"
#include "core/common/error.h"
#include "core/store/evaluation_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <unordered_map>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

std::string numberText(double value)
{
    std::ostringstream text;
    text << value;
    return text.str();
}

struct SweepEntry {
    std::string label;
    train::RunConfig config;
};

void validate(const CalibrationOptions& o)
{
    const std::string source = "calibrate";
    if (o.noiseSigmas.empty() && o.recipes.empty() && o.staleness.empty()) {
        throw InputError(source, "sweep", "give at least one noise sigma, recipe or staleness value");
    }
    for (const double sigma : o.noiseSigmas) {
        if (!(sigma > 0.0) || !std::isfinite(sigma)) {
            throw InputError(source, "--noise", "sigmas must be finite and > 0 (the baseline is sigma 0), got "
                + numberText(sigma));
        }
    }
    for (const std::int64_t k : o.staleness) {
        if (k < 1) {
            throw InputError(source, "--staleness", "values must be >= 1 (the baseline is 0), got " + std::to_string(k));
        }
    }
    if (!train::usesTeacher(o.base.objective.kind)) {
        throw InputError(o.base.sourceFile.empty() ? source : o.base.sourceFile, "objective",
            "calibration measures the OPD budget: the base run must use an OPD objective, not "
                + train::toString(o.base.objective.kind));
    }
    if (o.base.evaluation.prompts.empty()) {
        throw InputError(o.base.sourceFile.empty() ? source : o.base.sourceFile, "evaluation",
            "calibration compares held-out quality: the base run needs evaluation.prompts");
    }
    if (o.steps.empty()) {
        throw InputError(source, "--steps", "give at least one step to apply the failure rule at");
    }
    for (const std::int64_t step : o.steps) {
        const bool evaluated = step == o.base.steps
            || (o.base.evaluation.every > 0 && step % o.base.evaluation.every == 0 && step <= o.base.steps);
        if (step < 1 || !evaluated) {
            throw InputError(source, "--steps",
                "step " + std::to_string(step) + " is not evaluated by the base run (it runs "
                    + std::to_string(o.base.steps) + " steps and evaluates every "
                    + std::to_string(o.base.evaluation.every) + " and at the last step)");
        }
    }
    if (!(o.margin >= 0.0 && o.margin < 1.0)) {
        throw InputError(source, "--margin", "must be in [0, 1), got " + numberText(o.margin));
    }
}

std::vector<SweepEntry> sweep(const CalibrationOptions& o)
{
    train::RunConfig plain = o.base;
    plain.rollout.recipe.clear();
    plain.rollout.noise.sigma = 0.0;
    plain.rollout.staleness = 0;
    plain.rollout.asynchronous = false;
    std::vector<SweepEntry> entries;
    entries.push_back({"baseline", plain});
    for (const double sigma : o.noiseSigmas) {
        train::RunConfig c = plain;
        c.rollout.noise.sigma = sigma;
        entries.push_back({"noise " + numberText(sigma), c});
    }
    for (const std::string& recipe : o.recipes) {
        train::RunConfig c = plain;
        c.rollout.recipe = fs::absolute(recipe).string();
        entries.push_back({"recipe " + fs::path(recipe).stem().string(), c});
    }
    for (const std::int64_t k : o.staleness) {
        train::RunConfig c = plain;
        c.rollout.staleness = k;
        entries.push_back({"staleness " + std::to_string(k), c});
    }
    for (SweepEntry& entry : entries) {
        std::string suffix = entry.label;
        std::replace(suffix.begin(), suffix.end(), ' ', '-');
        entry.config.name = o.name + "/" + suffix;
    }
    return entries;
}

// Mean step mismatch over steps 1..step, and the mean BF16 unit over the same steps.
std::pair<double, double> runMismatch(const store::RunStore& store, std::int64_t runId, std::int64_t step)
{
    double sum = 0.0;
    double unitSum = 0.0;
    std::int64_t count = 0;
    std::int64_t unitCount = 0;
    for (const auto& m : store.stepsAfter(runId, 0)) {
        if (m.step > step || !m.mismatchKl) {
            continue;
        }
        sum += *m.mismatchKl;
        ++count;
        const auto extras = nlohmann::json::parse(m.extrasJson);
        if (extras.contains("bf16_unit")) {
            unitSum += extras.at("bf16_unit").get<double>();
            ++unitCount;
        }
    }
    if (count == 0) {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " has no steps up to " + std::to_string(step));
    }
    return {sum / static_cast<double>(count), unitCount ? unitSum / static_cast<double>(unitCount) : 0.0};
}

} // namespace

std::vector<double> defaultNoiseSigmas()
{
    return {0.05, 0.1, 0.2, 0.4};
}

namespace {

// Appends `sweepRunId` to the calibration run's config_json "sweep_runs" (inside the transaction that records
// the sweep run: see train::recordTrainingRun).
void linkSweepRun(store::RunStore& store, std::int64_t calibrationRunId, std::int64_t sweepRunId)
{
    const auto info = store.run(calibrationRunId);
    if (!info) {
        throw StoreError(store.path(), "calibration run " + std::to_string(calibrationRunId) + " does not exist");
    }
    nlohmann::json config = nlohmann::json::parse(info->configJson);
    config["sweep_runs"].push_back(sweepRunId);
    store.setRunConfig(calibrationRunId, config.dump());
}

// The wall time a finished sweep run reports (its last step's wall time; 0 without steps).
double storedWallSeconds(const store::RunStore& store, std::int64_t runId)
{
    const auto steps = store.stepsAfter(runId, 0);
    return steps.empty() ? 0.0 : steps.back().wallTimeSeconds.value_or(0.0);
}

std::vector<std::string> inputFiles(const CalibrationOptions& o)
{
    std::vector<std::string> files;
    for (const std::string& directory : {o.base.student, o.base.teacher}) {
        if (!directory.empty()) {
            const auto model = modelFiles(directory);
            files.insert(files.end(), model.begin(), model.end());
        }
    }
    for (const std::string& file : {o.base.prompts, o.base.evaluation.prompts, o.base.rollout.recipe}) {
        if (!file.empty()) {
            files.push_back(file);
        }
    }
    files.insert(files.end(), o.recipes.begin(), o.recipes.end());
    return files;
}

// A fresh calibration (resumeRunId empty) or the continuation of a stored one.
CalibrationResult calibrate(store::RunStore& store, const CalibrationOptions& options, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::function<void(std::int64_t)>& onRunStarted)
{
    validate(options);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<SweepEntry> entries = sweep(options);
    const std::int64_t totalSteps = static_cast<std::int64_t>(entries.size()) * options.base.steps;

    CalibrationResult result;
    if (resumeRunId) {
        result.runId = *resumeRunId;
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max()); // running again; it has no steps
    } else {
        nlohmann::json config = {{"base", nlohmann::json::parse(train::runConfigToJson(options.base))},
            {"noise_sigmas", options.noiseSigmas}, {"recipes", options.recipes}, {"staleness", options.staleness},
            {"steps", options.steps}, {"relative_threshold", options.rule.relativeThreshold},
            {"confidence", options.rule.bootstrap.confidence}, {"resamples", options.rule.bootstrap.resamples},
            {"bootstrap_seed", options.rule.bootstrap.seed}, {"margin", options.margin},
            {"inputs", fileDigests(inputFiles(options))}, {"sweep_runs", nlohmann::json::array()}};
        store::RunSpec spec;
        spec.name = options.name;
        spec.kind = "calibrate";
        spec.configJson = config.dump();
        result.runId = store.beginRun(spec);
    }
    if (onRunStarted) {
        onRunStarted(result.runId);
    }
    store::recordRunOutcome(store, result.runId, [&] {
        // Killed after the calibration was stored but before the run was marked finished: nothing to redo.
        for (const auto& stored : store::calibrations(store)) {
            if (resumeRunId && stored.runId == result.runId) {
                const auto calibration = store::calibration(store, stored.id);
                const nlohmann::json config = nlohmann::json::parse(calibration->info.configJson);
                result.calibrationId = stored.id;
                result.points = calibration->points;
                result.brackets = calibration->brackets;
                result.bf16Unit = config.at("bf16_unit").get<double>();
                for (const auto& run : config.at("runs")) {
                    result.runs.push_back({run.at("label").get<std::string>(), run.at("run_id").get<std::int64_t>(),
                        run.at("wall_seconds").get<double>()});
                }
                store.finishRun(result.runId, store::RunStatus::Finished);
                return;
            }
        }
        const std::vector<std::int64_t> linked = nlohmann::json::parse(store.run(result.runId)->configJson)
                                                     .value("sweep_runs", nlohmann::json::array())
                                                     .get<std::vector<std::int64_t>>();
        if (linked.size() > entries.size()) {
            throw StoreError(store.path(), "calibration run " + std::to_string(result.runId) + " links "
                + std::to_string(linked.size()) + " sweep runs, more than its " + std::to_string(entries.size())
                + " sweep entries");
        }
        train::TrainOptions trainOptions;
        trainOptions.workspaceDirectory = options.workspaceDirectory;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const SweepEntry& entry = entries[i];
            const std::int64_t done = static_cast<std::int64_t>(i) * options.base.steps;
            progress.checkCancelled();
            // A sweep run is recorded and linked to the calibration in one transaction, then trained from step 1
            // by resumeTraining; a resumed calibration continues its linked runs (finished ones are kept as they
            // are, an interrupted one continues from its newest checkpoint, or from step 1 without one).
            std::int64_t sweepRunId = 0;
            if (i < linked.size()) {
                sweepRunId = linked[i];
                const auto info = store.run(sweepRunId);
                if (!info || info->kind != "train" || info->configJson != train::runConfigToJson(entry.config)) {
                    throw StoreError(store.path(), "calibration run " + std::to_string(result.runId) + ": sweep run "
                        + std::to_string(sweepRunId) + " is not the training run of '" + entry.label
                        + "' it should be; the calibration cannot be resumed");
                }
                if (info->status == store::RunStatus::Finished) {
                    result.runs.push_back({entry.label, sweepRunId, storedWallSeconds(store, sweepRunId)});
                    continue;
                }
            } else {
                sweepRunId = train::recordTrainingRun(entry.config, store,
                    [&store, &result](std::int64_t id) { linkSweepRun(store, result.runId, id); });
            }
            // The run's own progress feeds the calibration's: its stage text, and cancellation both ways.
            Progress* runProgressPointer = nullptr;
            Progress runProgress([&progress, &runProgressPointer, &entry](double, const std::string& stage) {
                progress.setStage(entry.label + ": " + stage);
                if (progress.cancelled() && runProgressPointer) {
                    runProgressPointer->cancel();
                }
            });
            runProgressPointer = &runProgress;
            trainOptions.onStep = [&progress, done, totalSteps](const store::StepMetrics& m) {
                progress.setFraction(static_cast<double>(done + m.step) / static_cast<double>(totalSteps));
            };
            const train::TrainResult trained = train::resumeTraining(sweepRunId, store, runProgress, trainOptions);
            result.runs.push_back({entry.label, trained.runId, trained.wallSeconds});
        }
        const std::int64_t baselineRun = result.runs.front().runId;
        double unitSum = 0.0;
        for (const std::int64_t step : options.steps) {
            const auto base = store::evaluationAt(store, baselineRun, step);
            if (!base) {
                throw StoreError(store.path(), "the baseline run has no evaluation at step " + std::to_string(step));
            }
            const std::vector<double> qBase = store::qualitiesInOrderOf(*base, *base);
            for (const CalibrationSweepRun& run : result.runs) {
                const auto evaluation = store::evaluationAt(store, run.runId, step);
                if (!evaluation) {
                    throw StoreError(store.path(),
                        "calibration run " + std::to_string(run.runId) + " has no evaluation at step " + std::to_string(step));
                }
                const auto [mismatch, unit] = runMismatch(store, run.runId, step);
                store::CalibrationPoint point;
                point.runId = run.runId;
                point.step = step;
                point.mismatch = mismatch;
                point.quality = evaluation->summary.quality;
                if (run.runId == baselineRun) {
                    unitSum += unit;
                    point.relativeChange = 0.0;
                    point.failed = false;
                } else {
                    const metrics::FailureVerdict verdict
                        = metrics::applyFailureRule(store::qualitiesInOrderOf(*evaluation, *base), qBase, options.rule);
                    point.relativeChange = verdict.relativeChange;
                    point.ciLow = verdict.difference.low;
                    point.ciHigh = verdict.difference.high;
                    point.failed = verdict.failed;
                }
                result.points.push_back(point);
            }
            result.brackets.push_back(store::bracketFromPoints(result.points, step, options.margin));
        }
        result.bf16Unit = unitSum / static_cast<double>(options.steps.size());
        // The calibration's configuration: the run's (with its sweep runs linked), the unit and the runs.
        nlohmann::json config = nlohmann::json::parse(store.run(result.runId)->configJson);
        config["bf16_unit"] = result.bf16Unit;
        nlohmann::json runs = nlohmann::json::array();
        for (const auto& run : result.runs) {
            runs.push_back({{"label", run.label}, {"run_id", run.runId}, {"wall_seconds", run.wallSeconds}});
        }
        config["runs"] = runs;
        store::CalibrationInfo info;
        info.runId = result.runId;
        info.name = options.name;
        info.student = options.base.student;
        info.configJson = config.dump();
        // The calibration and the run's end in one transaction: a kill leaves neither or both.
        store::Transaction transaction(store.handle());
        result.calibrationId = store::addCalibration(store, info, result.points, result.brackets);
        store.finishRun(result.runId, store::RunStatus::Finished);
        transaction.commit();
    });
    result.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.update(1.0, "calibrated");
    return result;
}

} // namespace

CalibrationResult runCalibration(store::RunStore& store, const CalibrationOptions& given, Progress& progress)
{
    CalibrationOptions options = given;
    for (std::string& recipe : options.recipes) {
        recipe = fs::absolute(recipe).string(); // so that a resume from another directory finds it
    }
    return calibrate(store, options, progress, std::nullopt, options.onRunStarted);
}

CalibrationOptions storedCalibrationOptions(const store::RunStore& store, std::int64_t runId)
{
    const ResumableRun run = resumableRun(store, runId, "calibrate");
    const std::string source = store.path() + " (calibrate run " + std::to_string(runId) + " config_json)";
    const nlohmann::json& c = run.config;
    CalibrationOptions options;
    options.name = run.info.name;
    options.base = train::parseRunConfig(storedOption<nlohmann::json>(c, "base", source).dump(), source,
        fs::path(store.path()).parent_path().string());
    options.noiseSigmas = storedOption<std::vector<double>>(c, "noise_sigmas", source);
    options.recipes = storedOption<std::vector<std::string>>(c, "recipes", source);
    options.staleness = storedOption<std::vector<std::int64_t>>(c, "staleness", source);
    options.steps = storedOption<std::vector<std::int64_t>>(c, "steps", source);
    options.rule.relativeThreshold = storedOption<double>(c, "relative_threshold", source);
    options.rule.bootstrap.confidence = storedOption<double>(c, "confidence", source);
    options.rule.bootstrap.resamples = storedOption<int>(c, "resamples", source);
    options.rule.bootstrap.seed = storedOption<std::uint64_t>(c, "bootstrap_seed", source);
    options.margin = storedOption<double>(c, "margin", source);
    return options;
}

CalibrationResult resumeCalibration(store::RunStore& store, std::int64_t runId, Progress& progress,
    const std::string& workspaceDirectory, const std::function<void(std::int64_t runId)>& onRunStarted)
{
    CalibrationOptions options = storedCalibrationOptions(store, runId);
    const nlohmann::json config = nlohmann::json::parse(store.run(runId)->configJson);
    checkInputsUnchanged(config.contains("inputs") ? config.at("inputs") : nlohmann::json(), runId, "calibrate");
    options.workspaceDirectory = workspaceDirectory;
    return calibrate(store, options, progress, runId, onRunStarted);
}

} // namespace mismatch::analysis

#include "core/analysis/calibrate.h"

#include "core/common/error.h"
#include "core/store/evaluation_store.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
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

CalibrationResult runCalibration(store::RunStore& store, const CalibrationOptions& options, Progress& progress)
{
    validate(options);
    const auto start = std::chrono::steady_clock::now();
    const std::vector<SweepEntry> entries = sweep(options);
    const std::int64_t totalSteps = static_cast<std::int64_t>(entries.size()) * options.base.steps;

    nlohmann::json config = {{"base", nlohmann::json::parse(train::runConfigToJson(options.base))},
        {"noise_sigmas", options.noiseSigmas}, {"recipes", options.recipes}, {"staleness", options.staleness},
        {"steps", options.steps}, {"relative_threshold", options.rule.relativeThreshold},
        {"confidence", options.rule.bootstrap.confidence}, {"resamples", options.rule.bootstrap.resamples},
        {"bootstrap_seed", options.rule.bootstrap.seed}, {"margin", options.margin}};
    store::RunSpec spec;
    spec.name = options.name;
    spec.kind = "calibrate";
    spec.configJson = config.dump();
    CalibrationResult result;
    result.runId = store.beginRun(spec);
    store::recordRunOutcome(store, result.runId, [&] {
        train::TrainOptions trainOptions;
        trainOptions.workspaceDirectory = options.workspaceDirectory;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            const SweepEntry& entry = entries[i];
            const std::int64_t done = static_cast<std::int64_t>(i) * options.base.steps;
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
            progress.checkCancelled();
            const train::TrainResult trained = train::runTraining(entry.config, store, runProgress, trainOptions);
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
        result.calibrationId = store::addCalibration(store, info, result.points, result.brackets);
        store.finishRun(result.runId, store::RunStatus::Finished);
    });
    result.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.update(1.0, "calibrated");
    return result;
}

} // namespace mismatch::analysis

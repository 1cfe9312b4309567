#include "core/analysis/calibrate.h"

#include "core/analysis/admission.h"
#include "core/analysis/job_resume.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/random.h"
#include "core/store/evaluation_store.h"
#include "core/store/sqlite_util.h"
#include "core/store/store_merge.h"
#include "core/train/trainer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <map>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
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

} // namespace

const char* const kCalibrationIntervalMethod = metrics::kFailureIntervalMethod;
const char* const kCalibrationMismatchStatistic
    = "mismatch: the screen statistic, admit's measurement of the configuration on each seed's checkpoint at the step "
      "under the calibration's protocol (seed mean); training_mismatch: the mean training-step mismatch over steps "
      "1..step beside it";
const char* const kCalibrationStoppingRule
    = "after each round, every configuration with an undecided point at some rule step gets one more seed, and the "
      "baseline and the null group one more each, up to max_replicates seeds; the null group also when the null "
      "comparison is undecided; stop when nothing is undecided or every undecided configuration has max_replicates";

namespace {

struct SweepEntry {
    std::string label;
    train::RunConfig config;
};

} // namespace

namespace {

// A sweep level given twice would train the same configuration twice under one label: refused, naming it.
void requireDistinctLevels(const CalibrationOptions& o, const std::string& source)
{
    for (size_t i = 0; i < o.noiseSigmas.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
            if (o.noiseSigmas[j] == o.noiseSigmas[i]) {
                throw InputError(source, "noise",
                    "the sigma " + numberText(o.noiseSigmas[i]) + " is given twice (each level is calibrated once)");
            }
        }
    }
    std::set<std::string> recipes;
    for (const std::string& recipe : o.recipes) {
        std::error_code error;
        fs::path absolute = fs::absolute(recipe, error);
        const std::string key = (error ? fs::path(recipe) : absolute).lexically_normal().string();
        if (!recipes.insert(key).second) {
            throw InputError(source, "recipe", "the recipe " + recipe + " is given twice (each level is calibrated once)");
        }
    }
    std::set<std::int64_t> staleness;
    for (const std::int64_t k : o.staleness) {
        if (!staleness.insert(k).second) {
            throw InputError(source, "staleness",
                "the staleness " + std::to_string(k) + " is given twice (each level is calibrated once)");
        }
    }
}

} // namespace

void checkCalibrationOptions(const CalibrationOptions& o)
{
    const std::string source = "calibrate";
    if (o.noiseSigmas.empty() && o.recipes.empty() && o.staleness.empty()) {
        throw InputError(source, "sweep", "give at least one noise sigma, recipe or staleness value");
    }
    for (const double sigma : o.noiseSigmas) {
        if (!(sigma > 0.0) || !std::isfinite(sigma)) {
            throw InputError(source, "noise", "sigmas must be finite and > 0 (the baseline is sigma 0), got "
                + numberText(sigma));
        }
        if (sigma > limits::kMaxNoiseSigma) {
            throw InputError(source, "noise",
                "sigmas must be <= " + numberText(limits::kMaxNoiseSigma) + ", got " + numberText(sigma) + ": "
                    + limits::kMaxNoiseSigmaReason);
        }
    }
    for (const std::int64_t k : o.staleness) {
        if (k < 1) {
            throw InputError(source, "staleness", "values must be >= 1 (the baseline is 0), got " + std::to_string(k));
        }
    }
    requireDistinctLevels(o, source);
    // 0 (every configuration fails, however small its effect) and non-finite lines are meaningless. The job's
    // parameter takes only lines > 0; core keeps negative ones, which the tests use to put points on purpose on
    // the failing side of the line.
    if (o.rule.relativeThreshold == 0.0 || !std::isfinite(o.rule.relativeThreshold)) {
        throw InputError(source, "threshold",
            "the failure threshold must be finite and not 0 (a relative quality rise; at 0 every configuration "
            "fails, however small its effect), got "
                + numberText(o.rule.relativeThreshold));
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
        throw InputError(source, "rule_steps", "give at least one step to apply the failure rule at");
    }
    for (const std::int64_t step : o.steps) {
        const bool evaluated = step == o.base.steps
            || (o.base.evaluation.every > 0 && step % o.base.evaluation.every == 0 && step <= o.base.steps);
        if (step < 1 || !evaluated) {
            throw InputError(source, "rule_steps",
                "step " + std::to_string(step) + " is not evaluated by the base run (it runs "
                    + std::to_string(o.base.steps) + " steps and evaluates every "
                    + std::to_string(o.base.evaluation.every) + " and at the last step)");
        }
    }
    if (!(o.margin >= 0.0 && o.margin < 1.0)) {
        throw InputError(source, "margin", "must be in [0, 1), got " + numberText(o.margin));
    }
    if (!(o.noiseFloorFraction > 0.0 && o.noiseFloorFraction <= 1.0)) {
        throw InputError(source, "noise_floor_fraction", "must be in (0, 1], got " + numberText(o.noiseFloorFraction));
    }
    if (o.replicates < 1) {
        throw InputError(source, "replicates", "must be >= 1, got " + std::to_string(o.replicates));
    }
    if (o.maxReplicates < o.replicates) {
        throw InputError(source, "max_replicates", "must be >= replicates (" + std::to_string(o.replicates)
            + "), got " + std::to_string(o.maxReplicates));
    }
    if (o.unitEvery < 1) {
        throw InputError(source, "unit_every", "must be >= 1, got " + std::to_string(o.unitEvery));
    }
    if (o.probeCount < 1) {
        throw InputError(source, "probe_count", "must be >= 1, got " + std::to_string(o.probeCount));
    }
}

namespace {

std::vector<SweepEntry> sweep(const CalibrationOptions& o)
{
    train::RunConfig plain = o.base;
    plain.rollout.recipe.clear();
    plain.rollout.noise.sigma = 0.0;
    plain.rollout.staleness = 0;
    plain.rollout.asynchronous = false;
    plain.evaluation.bf16UnitEvery = o.unitEvery;
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
    return entries;
}

// One training run of the calibration: a configuration's replicate (the null group is the baseline's label
// "null" with replicates R..2R-1).
struct SweepJob {
    std::string label;
    std::int64_t replicate = 0;
    train::RunConfig config;
};

const char* const kNullLabel = "null";

std::string runName(const std::string& calibration, const std::string& label, std::int64_t replicate)
{
    std::string suffix = label;
    std::replace(suffix.begin(), suffix.end(), ' ', '-');
    return calibration + "/" + suffix + "/r" + std::to_string(replicate);
}

SweepJob sweepJob(const CalibrationOptions& o, const std::string& label, std::int64_t replicate, train::RunConfig config)
{
    config.seed = replicateSeed(o.base.seed, replicate);
    config.rollout.noise.seed = replicateSeed(o.base.rollout.noise.seed, replicate);
    config.name = runName(o.name, label, replicate);
    return SweepJob {label, replicate, std::move(config)};
}

// The one sweep run of a unit (CalibrationOptions::unit); InputError naming "unit" for a label the sweep does not
// have or a replicate outside its range.
SweepJob unitJob(const CalibrationOptions& o, const std::vector<SweepEntry>& entries, const CalibrationUnit& unit)
{
    const bool null = unit.label == kNullLabel;
    const std::int64_t low = null ? o.maxReplicates : 0;
    if (unit.replicate < low || unit.replicate >= low + o.maxReplicates) {
        throw InputError("calibrate", "unit",
            "replicate " + std::to_string(unit.replicate) + " of '" + unit.label + "' is outside "
                + std::to_string(low) + ".." + std::to_string(low + o.maxReplicates - 1));
    }
    for (const SweepEntry& entry : entries) {
        if (entry.label == unit.label || (null && &entry == &entries.front())) {
            return sweepJob(o, unit.label, unit.replicate, entry.config);
        }
    }
    std::string labels;
    for (const SweepEntry& entry : entries) {
        labels += "'" + entry.label + "', ";
    }
    throw InputError("calibrate", "unit", "the sweep has no configuration '" + unit.label + "' (it has " + labels
        + "and '" + kNullLabel + "')");
}

// The first round: replicate 0 of every configuration, then replicate 1, ...; then the null group (replicates
// maxReplicates.., so that no configuration's added seed is one of them).
std::vector<SweepJob> firstRound(const CalibrationOptions& o, const std::vector<SweepEntry>& entries)
{
    std::vector<SweepJob> result;
    for (std::int64_t r = 0; r < o.replicates; ++r) {
        for (const SweepEntry& entry : entries) {
            result.push_back(sweepJob(o, entry.label, r, entry.config));
        }
    }
    for (std::int64_t r = 0; r < o.replicates; ++r) {
        result.push_back(sweepJob(o, kNullLabel, o.maxReplicates + r, entries.front().config));
    }
    return result;
}

// Mean step mismatch over steps 1..step, and the mean of the BF16 units measured at steps 1..step (a BF16-engine
// run measures its unit at every step: it is its own rollout, so the two means agree exactly).
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
        if (extras.value("bf16_unit_measured", false)) {
            unitSum += extras.at("bf16_unit").get<double>();
            ++unitCount;
        }
    }
    if (count == 0) {
        throw StoreError(store.path(), "run " + std::to_string(runId) + " has no steps up to " + std::to_string(step));
    }
    if (unitCount == 0) {
        throw StoreError(store.path(),
            "run " + std::to_string(runId) + " measured no BF16 unit up to step " + std::to_string(step));
    }
    return {sum / static_cast<double>(count), unitSum / static_cast<double>(unitCount)};
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

// The calibration's record of what it was asked (its run's config_json, to which the run adds "inputs",
// "sweep_runs" and "screens"); a resume checks that its options make the same one.
nlohmann::json calibrationRecord(const CalibrationOptions& options, const MeasurementProtocol& protocol)
{
    return {{"base", nlohmann::json::parse(train::runConfigToJson(options.base))},
        {"noise_sigmas", options.noiseSigmas}, {"recipes", options.recipes}, {"staleness", options.staleness},
        {"steps", options.steps}, {"relative_threshold", options.rule.relativeThreshold},
        {"confidence", options.rule.bootstrap.confidence}, {"resamples", options.rule.bootstrap.resamples},
        {"bootstrap_seed", options.rule.bootstrap.seed}, {"margin", options.margin},
        {"noise_floor_fraction", options.noiseFloorFraction}, {"replicates", options.replicates},
        {"max_replicates", options.maxReplicates}, {"unit_every", options.unitEvery},
        {"probe_count", options.probeCount}, {"protocol", protocolToJson(protocol)}};
}

const char* const kUnitRunKind = "calibrate_unit";

// The finished units of the calibration `record` stored here: unit -> its training run and its screens (the
// oldest unit run of each, should a unit have been merged from two shards).
struct StoredUnit {
    std::int64_t runId = 0; // the calibrate_unit run
    std::int64_t sweepRunId = 0;
    nlohmann::json screens;
};

std::map<CalibrationUnit, StoredUnit> storedUnits(const store::RunStore& store, const nlohmann::json& record)
{
    std::map<CalibrationUnit, StoredUnit> units;
    for (const store::RunInfo& run : store.listRuns()) {
        if (run.kind != kUnitRunKind || run.status != store::RunStatus::Finished) {
            continue;
        }
        const nlohmann::json config = nlohmann::json::parse(run.configJson, nullptr, false);
        if (!config.is_object() || !config.contains("unit") || store::calibrationUnitRecord(config) != record) {
            continue;
        }
        const nlohmann::json links = config.value("sweep_runs", nlohmann::json::array());
        if (links.size() != 1 || !links.front().is_number_integer()) {
            continue;
        }
        const CalibrationUnit unit {config.at("unit").at("label").get<std::string>(),
            config.at("unit").at("replicate").get<std::int64_t>()};
        units.emplace(unit,
            StoredUnit {run.id, links.front().get<std::int64_t>(), config.value("screens", nlohmann::json::array())});
    }
    return units;
}

// The stored unit that trained `config` (its training run finished and of exactly this configuration: a unit of
// another calibration with the same record but another name trains runs of other names); nullptr when none.
const StoredUnit* unitFor(const store::RunStore& store, const std::map<CalibrationUnit, StoredUnit>& units,
    const CalibrationUnit& unit, const train::RunConfig& config)
{
    const auto found = units.find(unit);
    if (found == units.end()) {
        return nullptr;
    }
    const auto run = store.run(found->second.sweepRunId);
    if (!run || run->kind != "train" || run->status != store::RunStatus::Finished
        || run->configJson != train::runConfigToJson(config)) {
        return nullptr;
    }
    return &found->second;
}

// The figures of every run at `step`, grouped by label in the order of `labels`.
struct StepFigures {
    std::map<std::string, std::vector<ReplicatePoint>> points; // label -> replicates in order
    std::map<std::string, std::vector<std::vector<double>>> qualities; // label -> replicate -> q_i (baseline order)
};

StepFigures stepFigures(const store::RunStore& store, const std::vector<CalibrationSweepRun>& runs, std::int64_t step)
{
    StepFigures figures;
    const auto base = store::evaluationAt(store, runs.front().runId, step); // baseline replicate 0
    if (!base) {
        throw StoreError(store.path(), "the baseline run has no evaluation at step " + std::to_string(step));
    }
    for (const CalibrationSweepRun& run : runs) {
        const auto evaluation = store::evaluationAt(store, run.runId, step);
        if (!evaluation) {
            throw StoreError(store.path(),
                "calibration run " + std::to_string(run.runId) + " has no evaluation at step " + std::to_string(step));
        }
        const auto [mismatch, unit] = runMismatch(store, run.runId, step);
        ReplicatePoint point;
        point.label = run.label;
        point.replicate = run.replicate;
        point.runId = run.runId;
        point.step = step;
        point.trainingMismatch = mismatch;
        point.trainingBf16Unit = unit;
        point.quality = evaluation->summary.quality;
        point.accuracy = evaluation->summary.accuracy;
        figures.points[run.label].push_back(point);
        figures.qualities[run.label].push_back(store::qualitiesInOrderOf(*evaluation, *base));
    }
    return figures;
}

double meanOf(const std::vector<ReplicatePoint>& points, double ReplicatePoint::*field)
{
    double sum = 0.0;
    for (const ReplicatePoint& point : points) {
        sum += point.*field;
    }
    return sum / static_cast<double>(points.size());
}

double meanOf(const std::vector<ReplicatePoint>& points, std::optional<double> ReplicatePoint::*field)
{
    double sum = 0.0;
    for (const ReplicatePoint& point : points) {
        sum += (point.*field).value();
    }
    return sum / static_cast<double>(points.size());
}

// The stopping rule of the seeds (calibrate.h, "Seeds until decided"): the runs of the next round, none when the
// calibration is done. `runs` are the finished runs so far, `entries` the configurations (baseline first).
std::vector<SweepJob> nextRound(const store::RunStore& store, const CalibrationOptions& o,
    const std::vector<SweepEntry>& entries, const std::vector<CalibrationSweepRun>& runs)
{
    std::map<std::string, std::int64_t> seeds;
    for (const CalibrationSweepRun& run : runs) {
        ++seeds[run.label];
    }
    std::set<std::string> undecided;
    bool nullUndecided = false;
    for (const std::int64_t step : o.steps) {
        const StepFigures figures = stepFigures(store, runs, step);
        const auto& base = figures.qualities.at("baseline");
        for (const SweepEntry& entry : entries) {
            if (entry.label != "baseline"
                && metrics::applyFailureRule(figures.qualities.at(entry.label), base, o.rule).verdict
                    == metrics::Verdict::Undecided) {
                undecided.insert(entry.label);
            }
        }
        nullUndecided = nullUndecided
            || metrics::applyFailureRule(figures.qualities.at(kNullLabel), base, o.rule).verdict
                == metrics::Verdict::Undecided;
    }
    std::vector<SweepJob> round;
    bool grows = false;
    for (const SweepEntry& entry : entries) {
        if (undecided.count(entry.label) && seeds[entry.label] < o.maxReplicates) {
            grows = true;
        }
    }
    for (const SweepEntry& entry : entries) {
        const bool add = entry.label == "baseline" ? grows : undecided.count(entry.label) > 0;
        if (add && seeds[entry.label] < o.maxReplicates) {
            round.push_back(sweepJob(o, entry.label, seeds[entry.label], entry.config));
        }
    }
    if ((grows || nullUndecided) && seeds[kNullLabel] < o.maxReplicates) {
        round.push_back(sweepJob(o, kNullLabel, o.maxReplicates + seeds[kNullLabel], entries.front().config));
    }
    return round;
}

// The configuration of a sweep run as an admission candidate (calibrate.h, "One statistic on both axes").
Candidate sweepCandidate(const SweepJob& job)
{
    Candidate candidate;
    candidate.name = job.label;
    candidate.recipePath = job.config.rollout.recipe;
    candidate.staleness = job.config.rollout.staleness;
    candidate.noise = job.config.rollout.noise.sigma;
    candidate.noiseSeed = job.config.rollout.noise.seed;
    candidate.noiseModules = job.config.rollout.noise.modules;
    return candidate;
}

// A screen's figures (as screenToJson stores them, and a replicate point's JSON repeats them) into `point`: the
// interval at the measurement's default bootstrap (measureScreen's settings).
void readScreen(const nlohmann::json& screen, ReplicatePoint& point)
{
    const metrics::BootstrapOptions bootstrap = MeasureSettings {}.bootstrap;
    point.mismatch = screen.at("mismatch").get<double>();
    point.mismatchInterval = metrics::Interval {*point.mismatch, screen.at("ci_low").get<double>(),
        screen.at("ci_high").get<double>(), bootstrap.confidence, bootstrap.resamples};
    point.bf16Unit = screen.at("bf16_unit").get<double>();
    point.engineWeights = screen.at("engine_weights").get<std::string>();
}

// A screen as the calibration stores it; the engine's weights relative to the workspace directory (they are the
// run's own checkpoint or a version of its history), so that the same calibration stores the same text anywhere.
nlohmann::json screenToJson(
    std::int64_t runId, std::int64_t step, const ScreenMeasurement& screen, const std::string& workspaceDirectory)
{
    return {{"run_id", runId}, {"step", step}, {"mismatch", screen.mismatch}, {"ci_low", screen.interval.low},
        {"ci_high", screen.interval.high}, {"bf16_unit", screen.bf16Unit},
        {"engine_weights",
            fs::path(weightsName(screen.engineWeights)).lexically_relative(workspaceDirectory).generic_string()}};
}

std::string percent(double fraction)
{
    std::ostringstream text;
    text << std::fixed << std::setprecision(1) << 100.0 * fraction << "%";
    return text.str();
}

std::string nats(double value)
{
    std::ostringstream text;
    text << std::setprecision(3) << value;
    return text.str();
}

} // namespace

std::vector<CalibrationFlag> calibrationFlags(const std::vector<store::CalibrationPoint>& points,
    const std::vector<NullComparison>& nullComparisons, const std::vector<store::CalibrationBracket>& brackets,
    double relativeThreshold, double noiseFloorFraction)
{
    std::vector<CalibrationFlag> flags;
    for (const NullComparison& null : nullComparisons) {
        if (null.verdict == metrics::Verdict::Fail) {
            flags.push_back({"null-failed", null.step,
                "the BF16 baseline against itself with other seeds changes Q by " + percent(null.relativeChange)
                    + " with its interval [" + percent(null.change.low) + ", " + percent(null.change.high)
                    + "] at or above the " + percent(relativeThreshold) + " line: seed variance alone fails the rule"});
        }
        if (null.noiseFloor > noiseFloorFraction * relativeThreshold) {
            flags.push_back({"noise-dominated", null.step,
                "noise floor +-" + percent(null.noiseFloor) + " (the interval of two identical configurations) is "
                    + "more than " + nats(noiseFloorFraction) + " of the " + percent(relativeThreshold) + " line"});
        }
        const store::CalibrationPoint* lowestFailure = nullptr;
        for (const auto& point : points) {
            if (point.step == null.step && point.failed()
                && (!lowestFailure || point.mismatch < lowestFailure->mismatch)) {
                lowestFailure = &point;
            }
        }
        const store::CalibrationPoint* highestPass = nullptr;
        for (const auto& point : points) {
            if (lowestFailure && point.step == null.step && point.passed() && point.mismatch > lowestFailure->mismatch
                && (!highestPass || point.mismatch > highestPass->mismatch)) {
                highestPass = &point;
            }
        }
        if (highestPass) {
            flags.push_back({"non-monotone", null.step,
                "'" + lowestFailure->label + "' failed at " + nats(lowestFailure->mismatch) + " nats/token while '"
                    + highestPass->label + "' passed at a larger " + nats(highestPass->mismatch)});
        }
        // An undecided point between the bracket's ends: the budget could lie on either side of it.
        const auto bracket = std::find_if(brackets.begin(), brackets.end(),
            [&](const store::CalibrationBracket& b) { return b.step == null.step; });
        for (const auto& point : points) {
            if (point.step != null.step || !point.undecided() || bracket == brackets.end()
                || (bracket->largestPassing && point.mismatch <= *bracket->largestPassing)
                || (bracket->smallestFailing && point.mismatch >= *bracket->smallestFailing)) {
                continue;
            }
            flags.push_back({"undecided", null.step,
                "'" + point.label + "' at " + nats(point.mismatch) + " nats/token, between the bracket's ends, is "
                    + "undecided: the interval of its quality change ["
                    + (point.changeLow ? percent(*point.changeLow) : std::string("?")) + ", "
                    + (point.changeHigh ? percent(*point.changeHigh) : std::string("?")) + "] contains the "
                    + percent(relativeThreshold) + " line"});
        }
    }
    return flags;
}

namespace {

// A resumed calibration killed after it was stored but before its run was marked finished: nothing to redo; the
// stored calibration fills `result` and the run is marked finished. False when it was not stored.
bool keepStoredCalibration(store::RunStore& store, const CalibrationOptions& options, CalibrationResult& result)
{
    for (const auto& stored : store::calibrations(store)) {
        if (stored.runId == result.runId) {
            const auto calibration = store::calibration(store, stored.id);
            const nlohmann::json config = nlohmann::json::parse(calibration->info.configJson);
            result.calibrationId = stored.id;
            result.points = calibration->points;
            result.brackets = calibration->brackets;
            result.flags = storedFlags(calibration->info.configJson);
            for (const auto& run : config.at("runs")) {
                result.runs.push_back({run.at("label").get<std::string>(), run.at("replicate").get<std::int64_t>(),
                    run.at("seed").get<std::uint64_t>(), run.at("run_id").get<std::int64_t>(),
                    run.at("wall_seconds").get<double>()});
            }
            for (const auto& p : config.at("replicate_points")) {
                result.replicatePoints.push_back(replicatePointFromJson(p));
            }
            for (const auto& n : config.at("null_comparisons")) {
                NullComparison null;
                null.step = n.at("step").get<std::int64_t>();
                null.relativeChange = n.at("relative_change").get<double>();
                null.difference = {n.at("mean_difference").get<double>(), n.at("ci_low").get<double>(),
                    n.at("ci_high").get<double>(), options.rule.bootstrap.confidence,
                    options.rule.bootstrap.resamples};
                null.change = {null.relativeChange, n.value("change_low", null.relativeChange),
                    n.value("change_high", null.relativeChange), options.rule.bootstrap.confidence,
                    options.rule.bootstrap.resamples};
                // Calibrations made before three verdicts stored "failed".
                null.verdict = n.contains("verdict")
                    ? metrics::parseVerdict(n.at("verdict").get<std::string>()).value_or(metrics::Verdict::Undecided)
                    : (n.at("failed").get<bool>() ? metrics::Verdict::Fail : metrics::Verdict::Pass);
                null.noiseFloor = n.at("noise_floor").get<double>();
                result.nullComparisons.push_back(null);
            }
            store.finishRun(result.runId, store::RunStatus::Finished);
            return true;
        }
    }
    return false;
}

// The sweep's training runs, round by round (the stopping rule adds rounds after each): a resumed calibration's
// linked runs are kept when finished and continued when not; each run's progress is its share of the first
// `trainingShare` of the calibration's. Adds each run to result.runs; `sweepJobs` grows by the added rounds.
void trainSweep(store::RunStore& store, const CalibrationOptions& options, const std::vector<SweepEntry>& entries,
    std::vector<SweepJob>& sweepJobs, CalibrationResult& result, Progress& progress, double trainingShare,
    std::int64_t totalSteps)
{
    const std::vector<std::int64_t> linked = nlohmann::json::parse(store.run(result.runId)->configJson)
                                                 .value("sweep_runs", nlohmann::json::array())
                                                 .get<std::vector<std::int64_t>>();
    const std::map<CalibrationUnit, StoredUnit> units = options.fromUnits
        ? storedUnits(store, calibrationRecord(options, result.protocol))
        : std::map<CalibrationUnit, StoredUnit> {};
    train::TrainOptions trainOptions;
    trainOptions.workspaceDirectory = options.workspaceDirectory;
    trainOptions.checkpointSteps = options.steps; // the screens measure each run's checkpoint at the rule steps
    for (std::size_t i = 0; i < sweepJobs.size(); ++i) {
        const SweepJob& job = sweepJobs[i];
        const std::string what = job.label + " (seed " + std::to_string(job.replicate + 1) + ")";
        const std::int64_t done = static_cast<std::int64_t>(i) * options.base.steps;
        progress.checkCancelled();
        // A sweep run is recorded and linked to the calibration in one transaction, then trained from step 1
        // by resumeTraining; a resumed calibration continues its linked runs (finished ones are kept as they
        // are, an interrupted one continues from its newest checkpoint, or from step 1 without one).
        std::int64_t sweepRunId = 0;
        if (i < linked.size()) {
            sweepRunId = linked[i];
            const auto info = store.run(sweepRunId);
            if (!info || info->kind != "train" || info->configJson != train::runConfigToJson(job.config)) {
                throw StoreError(store.path(), "calibration run " + std::to_string(result.runId) + ": sweep run "
                    + std::to_string(sweepRunId) + " is not the training run of '" + what
                    + "' it should be; the calibration cannot be resumed");
            }
            if (info->status == store::RunStatus::Finished) {
                result.runs.push_back({job.label, job.replicate, job.config.seed, sweepRunId,
                    storedWallSeconds(store, sweepRunId)});
            }
        } else if (options.fromUnits) {
            // The decision step of a calibration run as units: the unit's run is linked as a finished run of a
            // resume is kept, and its screens are the calibration's, in one transaction.
            const StoredUnit* unit = unitFor(store, units, {job.label, job.replicate}, job.config);
            if (!unit) {
                throw InputError("calibrate", "from_units",
                    "the unit '" + toString(CalibrationUnit {job.label, job.replicate}) + "' (run '" + job.config.name
                        + "') is not in this workspace: merge its shard first (mismatch store merge)");
            }
            store::Transaction transaction(store.handle());
            nlohmann::json config = nlohmann::json::parse(store.run(result.runId)->configJson);
            config["sweep_runs"].push_back(unit->sweepRunId);
            for (const nlohmann::json& screen : unit->screens) {
                config["screens"].push_back(screen);
            }
            store.setRunConfig(result.runId, config.dump());
            transaction.commit();
            sweepRunId = unit->sweepRunId;
            result.runs.push_back(
                {job.label, job.replicate, job.config.seed, sweepRunId, storedWallSeconds(store, sweepRunId)});
        } else {
            sweepRunId = train::recordTrainingRun(job.config, store,
                [&store, &result](std::int64_t id) { linkSweepRun(store, result.runId, id); });
        }
        if (result.runs.size() == i) {
            // The run's own progress feeds the calibration's (its steps are this run's share of the sweep's),
            // and they share one cancel flag.
            Progress runProgress = progress.child(trainingShare * static_cast<double>(done) / static_cast<double>(totalSteps),
                trainingShare * static_cast<double>(done + options.base.steps) / static_cast<double>(totalSteps), what);
            const train::TrainResult trained = train::resumeTraining(sweepRunId, store, runProgress, trainOptions);
            result.runs.push_back({job.label, job.replicate, job.config.seed, trained.runId, trained.wallSeconds});
        }
        if (i + 1 == sweepJobs.size() && !options.unit) {
            // The round is trained: the stopping rule decides the next one from the stored runs.
            const std::vector<SweepJob> round = nextRound(store, options, entries, result.runs);
            sweepJobs.insert(sweepJobs.end(), round.begin(), round.end());
        }
    }
    if (linked.size() > sweepJobs.size()) {
        throw StoreError(store.path(), "calibration run " + std::to_string(result.runId) + " links "
            + std::to_string(linked.size()) + " sweep runs, more than the " + std::to_string(sweepJobs.size())
            + " its stopping rule trains");
    }
}

// The screens: every configuration's runs measured at their checkpoints of the rule steps as `admit` would (the
// null group is no point), in the progress after `trainingShare`. Each is stored in the run's config_json as it is
// made, so a resume keeps it. Returns every screen by (run id, step).
std::map<std::pair<std::int64_t, std::int64_t>, nlohmann::json> measureScreens(store::RunStore& store,
    const CalibrationOptions& options, const std::vector<SweepJob>& sweepJobs, const CalibrationResult& result,
    Progress& progress, double trainingShare)
{
    std::map<std::pair<std::int64_t, std::int64_t>, nlohmann::json> screens;
    for (const auto& stored : nlohmann::json::parse(store.run(result.runId)->configJson)
                                  .value("screens", nlohmann::json::array())) {
        screens[{stored.at("run_id").get<std::int64_t>(), stored.at("step").get<std::int64_t>()}] = stored;
    }
    {
        MeasureSettings settings;
        settings.device = parseDevice(options.base.device, options.base.sourceFile, "device");
        const std::string workspace = train::workspaceDirectoryOf(store, options.workspaceDirectory);
        std::size_t measured = 0;
        const std::size_t toMeasure = options.steps.size() * result.runs.size();
        for (const std::int64_t step : options.steps) {
            for (std::size_t i = 0; i < result.runs.size(); ++i) {
                const CalibrationSweepRun& run = result.runs[i];
                ++measured;
                if (run.label == kNullLabel || screens.count({run.runId, step})) {
                    continue;
                }
                progress.checkCancelled();
                const std::string checkpoint = train::stepCheckpoint(store, workspace, run.runId, step);
                std::error_code missing;
                if (!fs::exists(fs::path(checkpoint) / "state.json", missing)) {
                    throw StoreError(store.path(), "calibration run " + std::to_string(result.runId)
                        + ": sweep run " + std::to_string(run.runId) + " has no checkpoint at step "
                        + std::to_string(step) + " (" + checkpoint + ") to measure its point on");
                }
                Progress slice = progress.child(
                    trainingShare + (1.0 - trainingShare) * static_cast<double>(measured - 1) / static_cast<double>(toMeasure),
                    trainingShare + (1.0 - trainingShare) * static_cast<double>(measured) / static_cast<double>(toMeasure),
                    "screen of " + run.label + " (seed " + std::to_string(run.replicate + 1) + ") at step "
                        + std::to_string(step));
                const ScreenMeasurement screen
                    = measureScreen(checkpoint, sweepCandidate(sweepJobs[i]), result.protocol, settings, slice);
                screens[{run.runId, step}] = screenToJson(run.runId, step, screen, workspace);
                nlohmann::json config = nlohmann::json::parse(store.run(result.runId)->configJson);
                config["screens"].push_back(screens[{run.runId, step}]);
                store.setRunConfig(result.runId, config.dump());
            }
        }
    }
    return screens;
}

// Each rule step's points (seed means of the replicates' screens and qualities, the failure rule's verdict), the
// null comparison, the bracket; then the flags.
void decidePoints(store::RunStore& store, const CalibrationOptions& options, const std::vector<SweepEntry>& entries,
    const std::map<std::pair<std::int64_t, std::int64_t>, nlohmann::json>& screens, CalibrationResult& result)
{
    for (const std::int64_t step : options.steps) {
        StepFigures figures = stepFigures(store, result.runs, step);
        for (auto& [label, replicates] : figures.points) {
            for (ReplicatePoint& replicate : replicates) {
                const auto screen = screens.find({replicate.runId, step});
                if (screen == screens.end()) {
                    continue; // the null group
                }
                readScreen(screen->second, replicate);
            }
        }
        const auto& baseQualities = figures.qualities.at("baseline");
        for (const SweepEntry& entry : entries) {
            const std::vector<ReplicatePoint>& replicates = figures.points.at(entry.label);
            store::CalibrationPoint point;
            point.runId = replicates.front().runId;
            point.step = step;
            point.label = entry.label;
            point.replicates = static_cast<std::int64_t>(replicates.size());
            point.mismatch = meanOf(replicates, &ReplicatePoint::mismatch);
            point.bf16Unit = meanOf(replicates, &ReplicatePoint::bf16Unit);
            point.trainingMismatch = meanOf(replicates, &ReplicatePoint::trainingMismatch);
            point.quality = meanOf(replicates, &ReplicatePoint::quality);
            point.accuracy = meanOf(replicates, &ReplicatePoint::accuracy);
            if (entry.label == "baseline") {
                point.relativeChange = 0.0;
                point.verdict = metrics::verdictName(metrics::Verdict::Pass);
            } else {
                const metrics::FailureVerdict verdict
                    = metrics::applyFailureRule(figures.qualities.at(entry.label), baseQualities, options.rule);
                point.relativeChange = verdict.relativeChange;
                point.ciLow = verdict.difference.low;
                point.ciHigh = verdict.difference.high;
                point.changeLow = verdict.change.low;
                point.changeHigh = verdict.change.high;
                point.verdict = metrics::verdictName(verdict.verdict);
            }
            result.points.push_back(point);
        }
        for (const auto& [label, replicates] : figures.points) {
            result.replicatePoints.insert(result.replicatePoints.end(), replicates.begin(), replicates.end());
        }
        const metrics::FailureVerdict nullVerdict
            = metrics::applyFailureRule(figures.qualities.at(kNullLabel), baseQualities, options.rule);
        NullComparison null;
        null.step = step;
        null.relativeChange = nullVerdict.relativeChange;
        null.change = nullVerdict.change;
        null.difference = nullVerdict.difference;
        null.verdict = nullVerdict.verdict;
        null.noiseFloor = (nullVerdict.change.high - nullVerdict.change.low) / 2.0;
        result.nullComparisons.push_back(null);
        result.brackets.push_back(store::bracketFromPoints(result.points, step, options.margin));
    }
    result.flags = calibrationFlags(result.points, result.nullComparisons, result.brackets,
        options.rule.relativeThreshold, options.noiseFloorFraction);
}

// Stores the calibration with the run's configuration (its sweep runs linked), the runs, the replicates' figures,
// the null comparisons and the flags, and marks the run finished, in one transaction.
void storeCalibration(store::RunStore& store, const CalibrationOptions& options, CalibrationResult& result)
{
    nlohmann::json config = nlohmann::json::parse(store.run(result.runId)->configJson);
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& run : result.runs) {
        runs.push_back({{"label", run.label}, {"replicate", run.replicate}, {"seed", run.seed},
            {"run_id", run.runId}, {"wall_seconds", run.wallSeconds}});
    }
    config["runs"] = runs;
    nlohmann::json replicatePoints = nlohmann::json::array();
    for (const auto& p : result.replicatePoints) {
        replicatePoints.push_back(toJson(p));
    }
    config["replicate_points"] = replicatePoints;
    nlohmann::json nulls = nlohmann::json::array();
    for (const auto& n : result.nullComparisons) {
        nulls.push_back({{"step", n.step}, {"relative_change", n.relativeChange},
            {"mean_difference", n.difference.estimate}, {"ci_low", n.difference.low},
            {"ci_high", n.difference.high}, {"change_low", n.change.low}, {"change_high", n.change.high},
            {"verdict", metrics::verdictName(n.verdict)}, {"failed", n.verdict == metrics::Verdict::Fail},
            {"noise_floor", n.noiseFloor}});
    }
    config["null_comparisons"] = nulls;
    config["flags"] = flagsToJson(result.flags);
    config["interval_method"] = kCalibrationIntervalMethod;
    config["stopping_rule"] = kCalibrationStoppingRule;
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
}

// A fresh calibration (resumeRunId empty) or the continuation of a stored one.
CalibrationResult calibrate(store::RunStore& store, const CalibrationOptions& options, Progress& progress,
    std::optional<std::int64_t> resumeRunId, const std::function<void(std::int64_t)>& onRunStarted)
{
    checkCalibrationOptions(options);
    if (options.unit && options.fromUnits) {
        throw InputError("calibrate", "from_units", "a unit (--unit) cannot be the decision step (--from-units) too");
    }
    const auto start = std::chrono::steady_clock::now();
    const std::vector<SweepEntry> entries = sweep(options);
    std::vector<SweepJob> sweepJobs
        = options.unit ? std::vector<SweepJob> {unitJob(options, entries, *options.unit)} : firstRound(options, entries);
    if (options.fromUnits && !resumeRunId) {
        // Refused before anything is stored: the decision step runs once every unit it needs is merged.
        const std::vector<CalibrationUnit> missing = calibrationUnitsNeeded(store, options);
        if (!missing.empty()) {
            std::string names;
            for (const CalibrationUnit& unit : missing) {
                names += (names.empty() ? "" : ", ") + toString(unit);
            }
            throw InputError("calibrate", "from_units",
                std::to_string(missing.size()) + " unit(s) of this calibration are not in the workspace (" + names
                    + "): run them (calibrate --unit) and merge their shards first");
        }
    }
    // Progress over the most runs the calibration can train (every configuration and the null group at
    // maxReplicates; a unit's one), then its screens; it ends early when fewer seeds decide every point.
    const std::int64_t mostRuns
        = options.unit ? 1 : static_cast<std::int64_t>(entries.size() + 1) * options.maxReplicates;
    const double trainingShare = 0.9;
    const std::int64_t totalSteps = mostRuns * options.base.steps;

    CalibrationResult result;
    result.replicates = options.replicates;
    result.maxReplicates = options.maxReplicates;
    result.protocol = calibrationProtocol(options.base, options.probeCount);
    nlohmann::json record = calibrationRecord(options, result.protocol);
    if (options.unit) {
        record["unit"] = {{"label", options.unit->label}, {"replicate", options.unit->replicate}};
    }
    if (resumeRunId) {
        result.runId = *resumeRunId;
        checkRecordUnchanged(
            nlohmann::json::parse(store.run(result.runId)->configJson), record, {}, result.runId, "calibrate");
        store.reopenRun(result.runId, std::numeric_limits<std::int64_t>::max()); // running again; it has no steps
    } else {
        nlohmann::json config = record;
        config["inputs"] = fileDigests(inputFiles(options));
        config["sweep_runs"] = nlohmann::json::array();
        store::RunSpec spec;
        spec.name = options.unit ? options.name + " unit " + toString(*options.unit) : options.name;
        spec.kind = options.unit ? kUnitRunKind : "calibrate";
        spec.configJson = config.dump();
        result.runId = store.beginRun(spec);
    }
    if (onRunStarted) {
        onRunStarted(result.runId);
    }
    store::recordRunOutcome(store, result.runId, [&] {
        if (resumeRunId && !options.unit && keepStoredCalibration(store, options, result)) {
            return;
        }
        trainSweep(store, options, entries, sweepJobs, result, progress, trainingShare, totalSteps);
        const auto screens = measureScreens(store, options, sweepJobs, result, progress, trainingShare);
        if (options.unit) {
            store.finishRun(result.runId, store::RunStatus::Finished); // its run and screens are the unit's result
            return;
        }
        decidePoints(store, options, entries, screens, result);
        storeCalibration(store, options, result);
    });
    result.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.provenanceJson = store.run(result.runId)->provenanceJson;
    progress.update(1.0, "calibrated");
    return result;
}

} // namespace

nlohmann::json toJson(const ReplicatePoint& p)
{
    const auto optional = [](const std::optional<double>& value) {
        return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    };
    return {{"label", p.label}, {"replicate", p.replicate}, {"run_id", p.runId}, {"step", p.step},
        {"mismatch", optional(p.mismatch)},
        {"ci_low", p.mismatchInterval ? nlohmann::json(p.mismatchInterval->low) : nlohmann::json(nullptr)},
        {"ci_high", p.mismatchInterval ? nlohmann::json(p.mismatchInterval->high) : nlohmann::json(nullptr)},
        {"bf16_unit", optional(p.bf16Unit)}, {"engine_weights", p.engineWeights},
        {"training_mismatch", p.trainingMismatch}, {"training_bf16_unit", p.trainingBf16Unit},
        {"quality", p.quality}, {"accuracy", p.accuracy}};
}

ReplicatePoint replicatePointFromJson(const nlohmann::json& p)
{
    ReplicatePoint point;
    point.label = p.at("label").get<std::string>();
    point.replicate = p.at("replicate").get<std::int64_t>();
    point.runId = p.at("run_id").get<std::int64_t>();
    point.step = p.at("step").get<std::int64_t>();
    point.quality = p.at("quality").get<double>();
    point.accuracy = p.at("accuracy").get<double>();
    if (!p.contains("training_mismatch")) {
        // Stored before the screen statistic (schema 10): "mismatch" and "bf16_unit" were the training means.
        point.trainingMismatch = p.at("mismatch").get<double>();
        point.trainingBf16Unit = p.at("bf16_unit").get<double>();
        return point;
    }
    point.trainingMismatch = p.at("training_mismatch").get<double>();
    point.trainingBf16Unit = p.at("training_bf16_unit").get<double>();
    if (!p.at("mismatch").is_null()) {
        readScreen(p, point);
    }
    return point;
}

std::uint64_t replicateSeed(std::uint64_t seed, std::int64_t replicate)
{
    return replicate == 0 ? seed : mixSeed(seed, 0x7265706c6963ull /* "replic" */, static_cast<std::uint64_t>(replicate));
}

nlohmann::json flagsToJson(const std::vector<CalibrationFlag>& flags)
{
    nlohmann::json list = nlohmann::json::array();
    for (const CalibrationFlag& flag : flags) {
        list.push_back({{"kind", flag.kind}, {"step", flag.step ? nlohmann::json(*flag.step) : nlohmann::json()},
            {"reason", flag.reason}});
    }
    return list;
}

std::vector<CalibrationFlag> storedFlags(const std::string& configJson)
{
    std::vector<CalibrationFlag> flags;
    const nlohmann::json config = nlohmann::json::parse(configJson, nullptr, false);
    if (!config.is_object() || !config.contains("flags") || !config.at("flags").is_array()) {
        return flags;
    }
    for (const auto& item : config.at("flags")) {
        CalibrationFlag flag;
        flag.kind = item.value("kind", std::string());
        if (item.contains("step") && item.at("step").is_number_integer()) {
            flag.step = item.at("step").get<std::int64_t>();
        }
        flag.reason = item.value("reason", std::string());
        flags.push_back(flag);
    }
    return flags;
}

std::string flagText(const CalibrationFlag& flag)
{
    return flag.kind + (flag.step ? " at step " + std::to_string(*flag.step) : std::string()) + ": " + flag.reason;
}

std::optional<MeasurementProtocol> storedProtocol(const std::string& configJson, const std::string& source)
{
    const nlohmann::json config = nlohmann::json::parse(configJson, nullptr, false);
    if (!config.is_object() || !config.contains("protocol")) {
        return std::nullopt;
    }
    return protocolFromJson(config.at("protocol"), source);
}

CalibrationResult runCalibration(store::RunStore& store, const CalibrationOptions& given, Progress& progress)
{
    CalibrationOptions options = given;
    for (std::string& recipe : options.recipes) {
        recipe = fs::absolute(recipe).string(); // so that a resume from another directory finds it
    }
    return calibrate(store, options, progress, std::nullopt, options.onRunStarted);
}

CalibrationResult resumeCalibration(store::RunStore& store, std::int64_t runId, CalibrationOptions options,
    Progress& progress, const std::string& workspaceDirectory)
{
    const ResumableRun run = resumableRun(store, runId, options.unit ? kUnitRunKind : "calibrate");
    checkInputsUnchanged(run.config.contains("inputs") ? run.config.at("inputs") : nlohmann::json(), runId, "calibrate");
    if (!options.unit) {
        options.name = run.info.name; // a unit's run is named after its calibration and the unit
    }
    options.workspaceDirectory = workspaceDirectory;
    return calibrate(store, options, progress, runId, options.onRunStarted);
}

std::string toString(const CalibrationUnit& unit)
{
    return unit.label + "/r" + std::to_string(unit.replicate);
}

CalibrationUnit parseCalibrationUnit(const std::string& text)
{
    const std::size_t slash = text.rfind("/r");
    CalibrationUnit unit;
    if (slash != std::string::npos && slash > 0 && slash + 2 < text.size()
        && text.find_first_not_of("0123456789", slash + 2) == std::string::npos && text.size() - slash - 2 <= 6) {
        unit.label = text.substr(0, slash);
        unit.replicate = std::stoll(text.substr(slash + 2));
        return unit;
    }
    throw InputError("calibrate", "unit",
        "expected LABEL/rN (a configuration of the sweep and its replicate, e.g. 'noise 0.1/r1' or 'null/r4'), got '"
            + text + "'");
}

std::vector<CalibrationUnit> calibrationFirstRound(const CalibrationOptions& options)
{
    checkCalibrationOptions(options);
    std::vector<CalibrationUnit> units;
    for (const SweepJob& job : firstRound(options, sweep(options))) {
        units.push_back({job.label, job.replicate});
    }
    return units;
}

std::vector<CalibrationUnit> calibrationUnitsNeeded(const store::RunStore& store, const CalibrationOptions& options)
{
    checkCalibrationOptions(options);
    const std::vector<SweepEntry> entries = sweep(options);
    const auto units = storedUnits(store, calibrationRecord(options, calibrationProtocol(options.base, options.probeCount)));
    std::vector<SweepJob> jobs = firstRound(options, entries);
    std::vector<CalibrationSweepRun> runs;
    std::vector<CalibrationUnit> missing;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
        const SweepJob& job = jobs[i];
        const StoredUnit* unit = unitFor(store, units, {job.label, job.replicate}, job.config);
        if (unit) {
            runs.push_back({job.label, job.replicate, job.config.seed, unit->sweepRunId, 0.0});
        } else {
            missing.push_back({job.label, job.replicate});
        }
        if (i + 1 == jobs.size() && missing.empty()) {
            // The same stopping rule on the same runs as the decision step (and a single process) applies it.
            const std::vector<SweepJob> round = nextRound(store, options, entries, runs);
            jobs.insert(jobs.end(), round.begin(), round.end());
        }
    }
    return missing;
}

} // namespace mismatch::analysis

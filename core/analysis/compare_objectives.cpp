#include "core/analysis/compare_objectives.h"
#include "core/analysis/compare_runs.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
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

struct Configuration {
    std::string label;
    double sigma = 0.0;
    std::string recipe;
};

double meanMismatch(const store::RunStore& store, std::int64_t runId)
{
    double sum = 0.0;
    std::int64_t count = 0;
    for (const auto& m : store.stepsAfter(runId, 0)) {
        if (m.mismatchKl) {
            sum += *m.mismatchKl;
            ++count;
        }
    }
    return count ? sum / static_cast<double>(count) : 0.0;
}

double meanReward(const store::RunStore& store, std::int64_t runId, std::int64_t firstStep)
{
    double sum = 0.0;
    std::int64_t count = 0;
    for (const auto& m : store.stepsAfter(runId, 0)) {
        if (m.step >= firstStep && m.reward) {
            sum += *m.reward;
            ++count;
        }
    }
    return count ? sum / static_cast<double>(count) : 0.0;
}

} // namespace

std::string toString(ObjectiveVerdict verdict)
{
    switch (verdict) {
    case ObjectiveVerdict::Holds:
        return "holds";
    case ObjectiveVerdict::Breaks:
        return "breaks";
    case ObjectiveVerdict::Undecided:
        return "undecided";
    }
    return "undecided";
}

namespace {

nlohmann::json optionalJson(const std::optional<double>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json rowsJson(const std::vector<ObjectiveComparisonRow>& rows)
{
    nlohmann::json json = nlohmann::json::array();
    for (const auto& row : rows) {
        json.push_back({{"objective", train::toString(row.objective)}, {"configuration", row.configuration},
            {"run_id", row.runId}, {"mismatch", row.mismatch}, {"bf16_multiple", row.bf16Multiple},
            {"quality", optionalJson(row.quality)}, {"relative_change", optionalJson(row.relativeChange)},
            {"reward", optionalJson(row.reward)}, {"verdict", toString(row.verdict)}});
    }
    return json;
}

} // namespace


CompareObjectivesResult runCompareObjectives(
    store::RunStore& store, const CompareObjectivesOptions& o, Progress& progress)
{
    const std::string source = o.base.sourceFile.empty() ? "compare-objectives" : o.base.sourceFile;
    if (o.noiseSigmas.empty() && o.recipes.empty()) {
        throw InputError("compare-objectives", "sweep", "give at least one noise sigma or recipe");
    }
    for (const double sigma : o.noiseSigmas) {
        if (!(sigma > 0.0) || !std::isfinite(sigma) || sigma > limits::kMaxNoiseSigma) {
            throw InputError("compare-objectives", "--noise",
                "sigmas must be finite, > 0 and <= " + numberText(limits::kMaxNoiseSigma) + " ("
                    + limits::kMaxNoiseSigmaReason + "), got " + numberText(sigma));
        }
    }
    if (o.base.teacher.empty() || o.base.evaluation.prompts.empty()) {
        throw InputError(source, "evaluation", "OPD's verdict compares held-out quality: the base run needs a teacher "
                                               "and evaluation.prompts");
    }
    if (!(o.collapse > 0.0 && o.collapse < 1.0)) {
        throw InputError("compare-objectives", "--collapse", "must be in (0, 1), got " + numberText(o.collapse));
    }
    if (o.objectives.empty()) {
        throw InputError("compare-objectives", "--objectives", "give at least one objective");
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<Configuration> configurations = {{"bf16", 0.0, {}}};
    for (const double sigma : o.noiseSigmas) {
        configurations.push_back({"noise " + numberText(sigma), sigma, {}});
    }
    for (const std::string& recipe : o.recipes) {
        configurations.push_back({"recipe " + fs::path(recipe).stem().string(), 0.0, fs::absolute(recipe).string()});
    }
    const std::int64_t window = o.window > 0 ? std::min(o.window, o.base.steps) : std::max<std::int64_t>(1, o.base.steps / 4);
    const std::int64_t firstWindowStep = o.base.steps - window + 1;
    const std::string rlRule = "RL breaks when its mean rollout reward over steps " + std::to_string(firstWindowStep)
        + ".." + std::to_string(o.base.steps) + " is below " + numberText(1.0 - o.collapse)
        + " x its BF16 run's (undecided when the BF16 run's is 0)";
    const std::string opdRule = "OPD breaks by the failure rule at step " + std::to_string(o.base.steps)
        + ": (Q - Q_bf16) / Q_bf16 >= " + numberText(o.rule.relativeThreshold) + " and the "
        + numberText(100 * o.rule.bootstrap.confidence) + "% paired bootstrap interval of mean(q - q_bf16) above 0";

    nlohmann::json config = {{"base", nlohmann::json::parse(train::runConfigToJson(o.base))},
        {"noise_sigmas", o.noiseSigmas}, {"recipes", o.recipes}, {"window", window}, {"collapse", o.collapse},
        {"rl_rule", rlRule}, {"opd_rule", opdRule}};
    CompareObjectivesResult result;
    result.runId = store.beginRun({"compare-objectives", "compare_objectives", config.dump(), std::nullopt});
    store::recordRunOutcome(store, result.runId, [&] {
        const std::int64_t total = static_cast<std::int64_t>(o.objectives.size() * configurations.size()) * o.base.steps;
        std::int64_t done = 0;
        for (const train::Objective objective : o.objectives) {
            const bool rl = !train::usesTeacher(objective);
            std::int64_t bf16Run = 0;
            double bf16Mismatch = 0.0;
            double bf16Reward = 0.0;
            ObjectiveBreak breaks;
            breaks.objective = objective;
            breaks.rule = rl ? rlRule : opdRule;
            for (const Configuration& configuration : configurations) {
                train::RunConfig c = o.base;
                c.objective.kind = objective;
                c.objective.topK = 0;
                c.correction = {};
                c.rollout.recipe = configuration.recipe;
                c.rollout.noise.sigma = configuration.sigma;
                c.rollout.staleness = 0;
                c.rollout.asynchronous = false;
                c.evaluation.every = 0; // OPD: the last step only
                if (rl && o.rlMaxTokens > 0) {
                    c.rollout.sampling.maxTokens = o.rlMaxTokens;
                }
                if (objective == train::Objective::Grpo) {
                    c.batch.samplesPerPrompt = std::max<std::int64_t>(2, o.samplesPerPrompt);
                    c.batch.promptsPerStep = std::max<std::int64_t>(1, o.base.batch.promptsPerStep / c.batch.samplesPerPrompt);
                } else {
                    c.batch.samplesPerPrompt = 1;
                }
                std::string suffix = configuration.label;
                std::replace(suffix.begin(), suffix.end(), ' ', '-');
                c.name = o.base.name + "/" + train::toString(objective) + "/" + suffix;
                train::TrainOptions trainOptions;
                trainOptions.workspaceDirectory = o.workspaceDirectory;
                Progress runProgress = progress.child(static_cast<double>(done) / static_cast<double>(total),
                    static_cast<double>(done + o.base.steps) / static_cast<double>(total),
                    train::toString(objective) + ", " + configuration.label);
                progress.checkCancelled();
                const train::TrainResult trained = train::runTraining(c, store, runProgress, trainOptions);
                done += o.base.steps;

                ObjectiveComparisonRow row;
                row.objective = objective;
                row.configuration = configuration.label;
                row.runId = trained.runId;
                row.mismatch = meanMismatch(store, trained.runId);
                if (configuration.label == "bf16") {
                    bf16Run = trained.runId;
                    bf16Mismatch = row.mismatch;
                }
                row.bf16Multiple = bf16Mismatch > 0.0 ? row.mismatch / bf16Mismatch : 0.0;
                if (rl) {
                    row.reward = meanReward(store, trained.runId, firstWindowStep);
                    if (bf16Run == trained.runId) {
                        bf16Reward = *row.reward;
                        row.verdict = ObjectiveVerdict::Holds;
                    } else if (bf16Reward <= 0.0) {
                        row.verdict = ObjectiveVerdict::Undecided;
                    } else {
                        row.verdict = *row.reward < (1.0 - o.collapse) * bf16Reward ? ObjectiveVerdict::Breaks
                                                                                   : ObjectiveVerdict::Holds;
                    }
                } else {
                    const auto evaluation = store::evaluationAt(store, trained.runId, o.base.steps);
                    const auto base = store::evaluationAt(store, bf16Run, o.base.steps);
                    if (!evaluation || !base) {
                        throw StoreError(store.path(), "an OPD run of the comparison has no evaluation at its last step");
                    }
                    row.quality = evaluation->summary.quality;
                    if (bf16Run == trained.runId) {
                        row.relativeChange = 0.0;
                    } else {
                        const metrics::FailureVerdict verdict = compareEvaluations(*evaluation, *base, o.rule);
                        row.relativeChange = verdict.relativeChange;
                        row.verdict = verdict.verdict == metrics::Verdict::Fail ? ObjectiveVerdict::Breaks
                            : verdict.verdict == metrics::Verdict::Pass         ? ObjectiveVerdict::Holds
                                                                                : ObjectiveVerdict::Undecided;
                    }
                }
                result.rows.push_back(row);
            }
            // As the budget bracket does: the smallest breaking multiple, and the largest holding one below it.
            for (const auto& row : result.rows) {
                if (row.objective == objective && row.runId != bf16Run && row.verdict == ObjectiveVerdict::Breaks) {
                    breaks.smallestBreaking = std::min(breaks.smallestBreaking.value_or(row.bf16Multiple), row.bf16Multiple);
                }
            }
            for (const auto& row : result.rows) {
                if (row.objective == objective && row.runId != bf16Run && row.verdict == ObjectiveVerdict::Holds
                    && (!breaks.smallestBreaking || row.bf16Multiple < *breaks.smallestBreaking)) {
                    breaks.largestHolding = std::max(breaks.largestHolding.value_or(row.bf16Multiple), row.bf16Multiple);
                }
            }
            result.breaks.push_back(breaks);
        }
        config["rows"] = rowsJson(result.rows);
        store.setRunConfig(result.runId, config.dump());
        store.finishRun(result.runId, store::RunStatus::Finished);
    });
    result.wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.update(1.0, "compared");
    return result;
}

nlohmann::json toJson(const CompareObjectivesResult& result)
{
    nlohmann::json breaks = nlohmann::json::array();
    for (const auto& b : result.breaks) {
        breaks.push_back({{"objective", train::toString(b.objective)},
            {"largest_holding_bf16_multiple", optionalJson(b.largestHolding)},
            {"smallest_breaking_bf16_multiple", optionalJson(b.smallestBreaking)}, {"rule", b.rule}});
    }
    return {{"run_id", result.runId}, {"rows", rowsJson(result.rows)}, {"breaks", breaks},
        {"wall_seconds", result.wallSeconds}};
}

} // namespace mismatch::analysis

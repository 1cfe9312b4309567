// mismatch compare RUN BASELINE --step S: the spec's failure rule between two runs' evaluations at one step.
// The verdict is a result, not an error: both FAIL and pass exit 0 (read `failed` from --json to gate a
// script); a missing run, step or problem makes the comparison impossible and exits 1.
#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/metrics/bootstrap.h"
#include "core/store/evaluation_store.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <ostream>
#include <sstream>
#include <unordered_map>

namespace mismatch::cli {

namespace {

struct CompareArguments {
    std::int64_t run = 0;
    std::int64_t baseline = 0;
    std::int64_t step = 0;
    double threshold = 0.20;
    double confidence = 0.95;
    int resamples = 10000;
    std::uint64_t seed = metrics::BootstrapOptions {}.seed;
};

std::string percent(double fraction, int decimals = 1)
{
    char text[64];
    std::snprintf(text, sizeof text, "%+.*f%%", decimals, 100.0 * fraction);
    return text;
}

std::string plainPercent(double fraction)
{
    char text[64];
    std::snprintf(text, sizeof text, "%g%%", 100.0 * fraction);
    return text;
}

std::string accuracyText(double fraction)
{
    char text[64];
    std::snprintf(text, sizeof text, "%.1f%%", 100.0 * fraction);
    return text;
}

std::string runLabel(const store::RunInfo& run)
{
    return "run " + std::to_string(run.id) + " (" + run.name + ")";
}

store::RunInfo requireRun(const store::RunStore& store, std::int64_t id)
{
    auto run = store.run(id);
    if (!run) {
        throw StoreError(store.path(), "has no run with id " + std::to_string(id) + " (see `mismatch store runs`)");
    }
    return *run;
}

store::Evaluation requireEvaluation(const store::RunStore& store, const store::RunInfo& run, std::int64_t step)
{
    auto evaluation = store::evaluationAt(store, run.id, step);
    if (evaluation) {
        return *evaluation;
    }
    const auto all = store::evaluations(store, run.id);
    std::string steps;
    for (const auto& summary : all) {
        steps += (steps.empty() ? "" : ", ") + std::to_string(summary.step);
    }
    throw StoreError(store.path(),
        runLabel(run) + " has no evaluation at step " + std::to_string(step)
            + (all.empty() ? " (it has no evaluations)" : " (evaluated steps: " + steps + ")"));
}

// The rule stated in words, with this comparison's settings.
std::string ruleText(const CompareArguments& a)
{
    return "the run fails when (Q_run - Q_base) / Q_base >= " + plainPercent(a.threshold) + " and the "
        + plainPercent(a.confidence) + " paired bootstrap interval of mean_i (q_i_run - q_i_base) (problems "
        + "resampled, " + std::to_string(a.resamples) + " resamples, seed " + std::to_string(a.seed)
        + ") lies above zero";
}

void compare(const Context& context, const CompareArguments& a)
{
    const store::RunStore store = context.openStore(store::OpenMode::ReadOnly);
    const store::RunInfo run = requireRun(store, a.run);
    const store::RunInfo baseline = requireRun(store, a.baseline);
    const store::Evaluation runEvaluation = requireEvaluation(store, run, a.step);
    const store::Evaluation baseEvaluation = requireEvaluation(store, baseline, a.step);

    // Pair problems by id, in the baseline's order: the bootstrap draws indices, so a fixed order makes the
    // interval depend only on the pairs and the seed, whatever order each run stored its problems in.
    std::unordered_map<std::string, double> runQuality;
    for (const auto& problem : runEvaluation.problems) {
        runQuality.emplace(problem.problemId, problem.quality);
    }
    std::unordered_map<std::string, bool> inBase;
    std::vector<double> qRun;
    std::vector<double> qBase;
    std::vector<std::string> onlyInBase;
    for (const auto& problem : baseEvaluation.problems) {
        inBase.emplace(problem.problemId, true);
        const auto found = runQuality.find(problem.problemId);
        if (found == runQuality.end()) {
            onlyInBase.push_back(problem.problemId);
            continue;
        }
        qRun.push_back(found->second);
        qBase.push_back(problem.quality);
    }
    std::vector<std::string> onlyInRun;
    for (const auto& problem : runEvaluation.problems) {
        if (!inBase.count(problem.problemId)) {
            onlyInRun.push_back(problem.problemId);
        }
    }
    if (!onlyInRun.empty() || !onlyInBase.empty()) {
        std::string detail = "the evaluations at step " + std::to_string(a.step)
            + " cover different problems, so they cannot be paired:";
        if (!onlyInRun.empty()) {
            detail += " " + std::to_string(onlyInRun.size()) + " of " + runLabel(run) + "'s problems are missing from "
                + runLabel(baseline) + " (e.g. '" + onlyInRun.front() + "')";
        }
        if (!onlyInBase.empty()) {
            detail += std::string(onlyInRun.empty() ? "" : ";") + " " + std::to_string(onlyInBase.size()) + " of "
                + runLabel(baseline) + "'s problems are missing from " + runLabel(run) + " (e.g. '" + onlyInBase.front()
                + "')";
        }
        throw Error(detail + "; evaluate both runs on the same prompt set");
    }
    metrics::FailureRuleOptions options;
    options.relativeThreshold = a.threshold;
    options.bootstrap.confidence = a.confidence;
    options.bootstrap.resamples = a.resamples;
    options.bootstrap.seed = a.seed;
    const double qualityBase = baseEvaluation.summary.quality;
    if (!(qualityBase > 0.0)) {
        throw Error(runLabel(baseline) + " has quality Q_base = " + formatNumber(qualityBase, 6) + " at step "
            + std::to_string(a.step) + ": the relative change (Q_run - Q_base) / Q_base is undefined");
    }
    const metrics::FailureVerdict verdict = metrics::applyFailureRule(qRun, qBase, options);
    const bool riseMet = verdict.relativeChange >= a.threshold;
    const bool intervalMet = verdict.difference.low > 0.0;

    if (context.json) {
        auto side = [&](const store::RunInfo& info, const store::Evaluation& evaluation, double quality) {
            return nlohmann::json {{"id", info.id}, {"name", info.name}, {"evaluation_id", evaluation.summary.id},
                {"quality", quality}, {"accuracy", evaluation.summary.accuracy}};
        };
        context.printJson({{"verdict", verdict.failed ? "fail" : "pass"}, {"failed", verdict.failed}, {"step", a.step},
            {"problems", qRun.size()}, {"run", side(run, runEvaluation, verdict.qualityRun)},
            {"baseline", side(baseline, baseEvaluation, verdict.qualityBase)},
            {"relative_change", verdict.relativeChange},
            {"difference",
                {{"estimate", verdict.difference.estimate}, {"low", verdict.difference.low},
                    {"high", verdict.difference.high}, {"confidence", verdict.difference.confidence},
                    {"resamples", verdict.difference.resamples}, {"seed", a.seed}}},
            {"rule",
                {{"threshold", a.threshold}, {"relative_change_met", riseMet}, {"interval_above_zero", intervalMet},
                    {"text", ruleText(a)}}}});
        return;
    }
    std::ostream& out = *context.out;
    out << "verdict          " << (verdict.failed ? "FAIL" : "pass") << "\n"
        << "step             " << a.step << " (" << qRun.size() << " paired problems)\n"
        << "Q_run            " << formatNumber(verdict.qualityRun, 6) << " nats/token  " << runLabel(run)
        << ", accuracy " << accuracyText(runEvaluation.summary.accuracy) << "\n"
        << "Q_base           " << formatNumber(verdict.qualityBase, 6) << " nats/token  " << runLabel(baseline)
        << ", accuracy " << accuracyText(baseEvaluation.summary.accuracy) << "\n"
        << "relative change  " << percent(verdict.relativeChange, 2) << "  (threshold " << plainPercent(a.threshold)
        << ": " << (riseMet ? "reached" : "not reached") << ")\n"
        << "paired interval  mean(q_run - q_base) = " << formatNumber(verdict.difference.estimate, 6) << " ["
        << formatNumber(verdict.difference.low, 6) << ", " << formatNumber(verdict.difference.high, 6)
        << "] nats/token, " << plainPercent(a.confidence) << " (" << (intervalMet ? "above zero" : "not above zero")
        << ")\n"
        << "rule             " << ruleText(a) << "\n";
}

void registerCompareCommand(CLI::App& app, Context& context)
{
    auto arguments = std::make_shared<CompareArguments>();
    CLI::App* command = app.add_subcommand(
        "compare", "Apply the failure rule to a run against its baseline (the BF16-engine run) at one evaluated step");
    command->add_option("RUN", arguments->run, "Run id (see `mismatch store runs`)")->required();
    command->add_option("BASELINE", arguments->baseline, "Baseline run id")->required();
    command->add_option("--step", arguments->step, "Evaluated training step of both runs")->required();
    command->add_option("--threshold", arguments->threshold, "Relative quality rise that fails (default 0.2)")
        ->check(greaterThan(0));
    command->add_option("--confidence", arguments->confidence, "Bootstrap interval confidence (default 0.95)")
        ->check(between(0.5, 0.999999));
    command->add_option("--resamples", arguments->resamples, "Bootstrap resamples (default 10000)")
        ->check(between(1, 10000000));
    command->add_option("--seed", arguments->seed, "Bootstrap seed");
    command->callback([&context, arguments] { compare(context, *arguments); });
}

const CommandRegistration registration(60, registerCompareCommand);

} // namespace

} // namespace mismatch::cli

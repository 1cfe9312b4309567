// mismatch compare RUN BASELINE --step S: the spec's failure rule between two runs' evaluations at one step.
// The verdict is a result, not an error: both FAIL and pass exit 0 (read `failed` from --json to gate a
// script); a missing run, step or problem makes the comparison impossible and exits 1.
#include "app/cli/context.h"
#include "core/analysis/compare_runs.h"
#include "core/common/error.h"
#include "core/metrics/bootstrap.h"
#include "core/store/evaluation_store.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <ostream>
#include <sstream>

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

// The rule stated in words, with this comparison's settings.
std::string ruleText(const CompareArguments& a)
{
    return "the " + plainPercent(a.confidence) + " paired bootstrap interval of (Q_run - Q_base) / Q_base (problems "
        + "resampled, " + std::to_string(a.resamples) + " resamples, seed " + std::to_string(a.seed) + "): fail when it "
        + "lies at or above " + plainPercent(a.threshold) + ", pass when below, undecided when it contains "
        + plainPercent(a.threshold);
}

void compare(const Context& context, const CompareArguments& a)
{
    const store::RunStore store = context.openStore(store::OpenMode::ReadOnly);
    metrics::FailureRuleOptions options;
    options.relativeThreshold = a.threshold;
    options.bootstrap.confidence = a.confidence;
    options.bootstrap.resamples = a.resamples;
    options.bootstrap.seed = a.seed;
    const analysis::RunComparison c = analysis::compareRuns(store, a.run, a.baseline, a.step, options);
    const store::RunInfo& run = c.run;
    const store::RunInfo& baseline = c.baseline;
    const store::Evaluation& runEvaluation = c.runEvaluation;
    const store::Evaluation& baseEvaluation = c.baseEvaluation;
    const metrics::FailureVerdict& verdict = c.verdict;
    const std::size_t problems = c.problems;
    const std::string verdictWord = metrics::verdictName(verdict.verdict);

    if (context.json) {
        auto side = [&](const store::RunInfo& info, const store::Evaluation& evaluation, double quality) {
            return nlohmann::json {{"id", info.id}, {"name", info.name}, {"evaluation_id", evaluation.summary.id},
                {"quality", quality}, {"accuracy", evaluation.summary.accuracy}};
        };
        const auto interval = [&](const metrics::Interval& i) {
            return nlohmann::json {{"estimate", i.estimate}, {"low", i.low}, {"high", i.high},
                {"confidence", i.confidence}, {"resamples", i.resamples}, {"seed", a.seed}};
        };
        context.printJson({{"verdict", verdictWord}, {"failed", verdict.failed()}, {"step", a.step},
            {"problems", problems}, {"run", side(run, runEvaluation, verdict.qualityRun)},
            {"baseline", side(baseline, baseEvaluation, verdict.qualityBase)},
            {"relative_change", verdict.relativeChange}, {"change", interval(verdict.change)},
            {"difference", interval(verdict.difference)},
            {"rule", {{"threshold", a.threshold}, {"text", ruleText(a)}}}});
        return;
    }
    std::ostream& out = *context.out;
    out << "verdict          "
        << (verdict.verdict == metrics::Verdict::Fail          ? "FAIL"
               : verdict.verdict == metrics::Verdict::Undecided ? "UNDECIDED"
                                                                 : "pass")
        << "\n"
        << "step             " << a.step << " (" << problems << " paired problems)\n"
        << "Q_run            " << formatNumber(verdict.qualityRun, 6) << " nats/token  " << analysis::runLabel(run)
        << ", accuracy " << accuracyText(runEvaluation.summary.accuracy) << "\n"
        << "Q_base           " << formatNumber(verdict.qualityBase, 6) << " nats/token  " << analysis::runLabel(baseline)
        << ", accuracy " << accuracyText(baseEvaluation.summary.accuracy) << "\n"
        << "relative change  " << percent(verdict.relativeChange, 2) << " [" << percent(verdict.change.low, 2) << ", "
        << percent(verdict.change.high, 2) << "], " << plainPercent(a.confidence) << " (line "
        << plainPercent(a.threshold) << ": "
        << (verdict.verdict == metrics::Verdict::Fail          ? "the interval is at or above it"
               : verdict.verdict == metrics::Verdict::Undecided ? "the interval contains it"
                                                                 : "the interval is below it")
        << ")\n"
        << "mean difference  mean(q_run - q_base) = " << formatNumber(verdict.difference.estimate, 6) << " ["
        << formatNumber(verdict.difference.low, 6) << ", " << formatNumber(verdict.difference.high, 6)
        << "] nats/token\n"
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

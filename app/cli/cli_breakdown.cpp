// mismatch breakdown MODEL (--candidates FILE | [--recipe R] [--staleness K --history DIR...] [--noise S])
//                  --prompts SET [--shapley-max 4] [the analyses' shared options]
// Where each candidate's mismatch comes from: its sources (weights, activations, KV cache, embedding/lm_head,
// staleness, noise) switched on and off on the same prompts and seeds; per source the add-one-in, leave-one-out and
// (for few sources) Shapley parts with paired bootstrap intervals, the interaction remainder, and the sampled-token
// estimators beside the full KL (core/analysis/breakdown.h).
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/breakdown.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/jobs/analysis_jobs.h"
#include "core/metrics/estimators.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

const char* const kMethods[] = {"add_one_in", "leave_one_out", "shapley"};

std::string multiple(double value, double unit)
{
    return unit > 0.0 ? formatNumber(value / unit, 3) + "x" : std::string("-");
}

std::string partText(const store::BreakdownPart& part)
{
    std::string text = formatNumber(part.value, 4);
    if (part.ciLow && part.ciHigh) {
        text += " [" + formatNumber(*part.ciLow, 4) + ", " + formatNumber(*part.ciHigh, 4) + "]";
    }
    return text;
}


void printRecord(std::ostream& out, const store::BreakdownRecord& r)
{
    out << "candidate " << r.candidate << ": total " << formatNumber(r.total, 4);
    if (r.totalCiLow && r.totalCiHigh) {
        out << " [" << formatNumber(*r.totalCiLow, 4) << ", " << formatNumber(*r.totalCiHigh, 4) << "]";
    }
    out << " nats/token, " << multiple(r.total, r.bf16Unit) << " the BF16 unit of " << formatNumber(r.bf16Unit, 4)
        << "\n";
    if (r.sources.empty()) {
        out << "  no mismatch source besides the BF16 engine itself: nothing to split\n";
    } else {
        std::vector<std::vector<std::string>> rows;
        std::vector<std::string> order = r.sources;
        order.push_back("interaction");
        for (const std::string& source : order) {
            std::vector<std::string> row = {source};
            for (const char* method : kMethods) {
                const store::BreakdownPart* found = nullptr;
                const auto parts = r.partsOf(method);
                for (const auto& part : parts) {
                    if (part.source == source) {
                        found = &part;
                        row.push_back(partText(part));
                        row.push_back(multiple(part.value, r.bf16Unit));
                    }
                }
                if (!found) {
                    const bool shapleyInteraction = std::string(method) == "shapley" && r.shapley;
                    row.push_back(shapleyInteraction ? std::string("0 (by construction)") : std::string("-"));
                    row.push_back("");
                }
            }
            rows.push_back(row);
        }
        out << formatTable({"source", "add-one-in [95%]", "x BF16", "leave-one-out [95%]", "x BF16",
                               "Shapley [95%]", "x BF16"},
            rows);
        out << "  the split depends on the order sources are switched on: add-one-in = M({s}) - M({}), leave-one-out "
               "= M(all) - M(all - s), Shapley = the mean over every order"
            << (r.shapley ? "" : " (not computed: more sources than --shapley-max)")
            << "; interaction = (total - BF16 unit) - sum of the parts\n";
    }
    const store::BreakdownSubset* whole = nullptr;
    std::string all;
    for (const std::string& s : r.sources) {
        all += (all.empty() ? "" : "+") + s;
    }
    whole = r.subsetOf(all);
    if (whole) {
        const metrics::EstimatorComparison comparison
            = metrics::estimatorComparisonFromJson(nlohmann::json::parse(whole->estimatorsJson));
        out << "  sampled-token estimators of the whole configuration (" << comparison.tokens
            << " tokens; correlation with the per-token full KL)\n"
            << estimatorTable(comparison);
    }
    out << "\n";
}

void registerBreakdownCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("breakdown",
        "Where a configuration's mismatch comes from: weights, activations, KV cache, embedding/lm_head, staleness "
        "and noise switched on and off on the same prompts and seeds; per source add-one-in, leave-one-out and "
        "Shapley parts with paired intervals, the interaction remainder, and the sampled-token estimators");
    // The options are the catalogue job's parameters (core/jobs/analysis_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("breakdown"));
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        const analysis::BreakdownOptions options = jobs::breakdownOptions(spec);
        store::RunStore store = context.openStore();
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        const analysis::BreakdownResult result = analysis::runBreakdown(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(result));
            return;
        }
        std::ostream& out = *context.out;
        out << "breakdown run " << result.runId << ": " << result.candidates.size() << " candidate(s), "
            << result.measurements << " configurations measured (nats/token, paired 95% intervals over prompts)\n\n";
        std::vector<std::vector<std::string>> summary;
        for (const store::BreakdownRecord& r : result.candidates) {
            std::string parts;
            const auto shown = r.partsOf(r.shapley ? "shapley" : "add_one_in");
            for (const auto& part : shown) {
                parts += (parts.empty() ? "" : ", ") + part.source + " " + formatNumber(part.value, 3);
            }
            summary.push_back({r.candidate, formatNumber(r.total, 4), multiple(r.total, r.bf16Unit),
                parts.empty() ? std::string("-") : (r.shapley ? "Shapley: " : "add-one-in: ") + parts});
        }
        out << formatTable({"candidate", "total", "x BF16", "parts"}, summary) << "\n";
        for (const store::BreakdownRecord& r : result.candidates) {
            printRecord(out, r);
        }
        out << "time " << formatNumber(result.seconds, 3) << " s\n";
    });
}

const CommandRegistration registration(76, registerBreakdownCommand);

} // namespace

} // namespace mismatch::cli

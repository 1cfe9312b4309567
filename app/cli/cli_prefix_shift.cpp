// mismatch prefix-shift MODEL --recipe R [--noise SIGMA --noise-seed S --noise-modules P] --prompts SET [--cap C]
// A configuration's mismatch split into the per-token part (on the BF16 engine's prefixes, teacher-forced) and the
// prefix-shift part (the rest, from reaching other prefixes), first-divergence positions of paired same-seed
// generations, mismatch by position and the effect of TIS/MIS on each part.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/prefix_shift.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/jobs/analysis_jobs.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void registerPrefixShiftCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("prefix-shift",
        "Split a configuration's mismatch into the per-token part (its KL on the BF16 engine's prefixes, "
        "teacher-forced) and the prefix-shift part; where paired same-seed generations first diverge; mismatch by "
        "position; TIS/MIS effect on each part");
    // The options are the catalogue job's parameters (core/jobs/analysis_jobs.h).
    auto job = std::make_shared<JobOptions>(command, *jobs::findJob("prefix_shift"));
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->spec();
        const analysis::PrefixShiftOptions options = jobs::prefixShiftOptions(spec);
        store::RunStore store = context.openStore();
        jobs::expectJobRun(store, spec);
        TerminalProgress bar(*context.err);
        const analysis::PrefixShiftResult r = analysis::runPrefixShift(store, options, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(analysis::toJson(r));
            return;
        }
        std::ostream& out = *context.out;
        out << "prefix shift analysis " << r.analysisId << " (run " << r.runId << "), " << r.pairs
            << " paired generations\n\n"
            << formatTable({"part", "nats/token [95%]", "x BF16"},
                   {{"total (own prefixes)", intervalText(r.totalInterval),
                        r.bf16Unit > 0.0 ? formatNumber(r.total / r.bf16Unit, 3) + "x" : std::string("-")},
                       {"per-token (BF16 prefixes)", intervalText(r.perTokenInterval),
                           r.bf16Unit > 0.0 ? formatNumber(r.perToken / r.bf16Unit, 3) + "x" : std::string("-")},
                       {"prefix shift (total - per-token)", intervalText(r.prefixShiftInterval),
                           r.bf16Unit > 0.0 ? formatNumber(r.prefixShift / r.bf16Unit, 3) + "x" : std::string("-")},
                       {"BF16 unit", formatNumber(r.bf16Unit, 4), "1x"}})
            << "\n";
        out << "first divergence: " << r.diverged << " of " << r.pairs << " pairs diverge";
        if (r.medianDivergence) {
            out << ", median position " << formatNumber(*r.medianDivergence, 4);
        }
        out << "\n";
        std::vector<std::vector<std::string>> histogram;
        for (std::size_t p = 0; p < r.divergenceHistogram.size(); ++p) {
            if (r.divergenceHistogram[p] > 0) {
                histogram.push_back({std::to_string(p), std::to_string(r.divergenceHistogram[p])});
            }
        }
        if (!histogram.empty()) {
            out << formatTable({"position", "pairs"}, histogram);
        }
        out << "\n";
        std::vector<std::vector<std::string>> positions;
        for (const auto& p : r.byPosition) {
            positions.push_back({std::to_string(p.position), formatNumber(p.total, 4), std::to_string(p.totalTokens),
                formatNumber(p.perToken, 4), std::to_string(p.perTokenTokens), formatNumber(p.bf16Unit, 4)});
        }
        out << "mismatch by response position (nats/token)\n"
            << formatTable({"position", "own prefixes", "tokens", "BF16 prefixes", "tokens", "BF16 unit"}, positions)
            << "\n";
        std::vector<std::vector<std::string>> corrections;
        for (const auto& e : r.corrections) {
            corrections.push_back({e.kind == "none" ? std::string("none") : e.kind + " C=" + formatNumber(e.cap, 4),
                formatNumber(e.total, 4), formatNumber(e.perToken, 4), formatNumber(e.prefixShift, 4),
                formatNumber(100.0 * e.affectedOwn, 3) + "% / " + formatNumber(100.0 * e.affectedReference, 3) + "%"});
        }
        out << "corrected KL (weights w = pi(y)/mu(y) per token; divergence positions do not change)\n"
            << formatTable(
                   {"correction", "total", "per-token", "prefix shift", "tokens affected own / BF16"}, corrections)
            << "\n";
        out << "sampled-token estimators on the candidate's own prefixes (" << r.estimators.tokens
            << " tokens; correlation with the per-token full KL)\n"
            << estimatorTable(r.estimators) << "\ntime " << formatDuration(r.seconds) << "\n";
    });
}

const CommandRegistration registration(75, registerPrefixShiftCommand);

} // namespace

} // namespace mismatch::cli

#include "app/cli/analysis_options.h"

#include "app/cli/context.h"

namespace mismatch::cli {

std::string estimatorTable(const metrics::EstimatorComparison& comparison)
{
    const auto correlation = [](const std::optional<double>& value) {
        return value ? formatNumber(*value, 3) : std::string("-");
    };
    std::vector<std::vector<std::string>> rows = {{"full KL(mu || pi)", formatNumber(comparison.kl, 4), "1", "1"}};
    for (const metrics::EstimatorSummary& e : comparison.estimators) {
        rows.push_back({e.name, formatNumber(e.mean, 4), correlation(e.pearson), correlation(e.spearman)});
    }
    std::string text = formatTable({"estimator", "token mean", "Pearson", "Spearman"}, rows);
    const auto bins = [](const std::vector<metrics::MismatchBin>& list, const std::string& what) {
        std::vector<std::vector<std::string>> binRows;
        for (const metrics::MismatchBin& b : list) {
            binRows.push_back({"[" + formatNumber(b.low, 3) + ", " + (b.high > 1e299 ? "inf" : formatNumber(b.high, 3))
                    + ")",
                std::to_string(b.tokens), formatNumber(100.0 * b.tokenShare, 3) + "%",
                b.tokens > 0 ? formatNumber(b.meanKl, 4) : std::string("-"),
                formatNumber(100.0 * b.klShare, 3) + "%"});
        }
        return formatTable({what, "tokens", "of tokens", "mean KL", "of the KL"}, binRows);
    };
    if (!comparison.byProbability.empty()) {
        text += "by the engine's probability of the chosen token:\n" + bins(comparison.byProbability, "mu(y)");
    }
    if (!comparison.byEntropy.empty()) {
        text += "by the trainer's entropy:\n" + bins(comparison.byEntropy, "entropy (nats)");
    }
    return text;
}

std::string intervalText(const metrics::Interval& interval, int precision)
{
    return formatNumber(interval.estimate, precision) + " [" + formatNumber(interval.low, precision) + ", "
        + formatNumber(interval.high, precision) + "]";
}

} // namespace mismatch::cli

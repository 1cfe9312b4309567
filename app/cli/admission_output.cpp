#include "app/cli/admission_output.h"

#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"

#include <filesystem>
#include <set>

namespace mismatch::cli {

void printAdmission(std::ostream& out, const analysis::AdmissionResult& result)
{
    // A decision made against a flagged budget or under another protocol says so in its own cell.
    std::string label;
    if (!result.calibrationFlags.empty()) {
        label += " (flagged budget)";
    }
    if (!result.protocolDifferences.empty()) {
        label += " (other protocol)";
    }
    std::vector<std::vector<std::string>> rows;
    std::set<std::string> notes;
    for (const auto& row : result.rows) {
        const auto x = analysis::bf16Multiple(row);
        rows.push_back({row.candidate,
            std::filesystem::path(row.checkpoint).filename().string() + " (step " + std::to_string(row.checkpointStep)
                + ")",
            intervalText(row.interval), x ? formatNumber(*x, 3) + "x" : std::string("-"),
            formatNumber(row.threshold, 4)
                + (row.bracketStep ? " (step " + std::to_string(*row.bracketStep) + ")" : std::string()),
            analysis::toString(row.verdict) + label, formatDuration(row.seconds)});
        if (!row.note.empty()) {
            notes.insert(std::filesystem::path(row.checkpoint).filename().string() + ": " + row.note);
        }
        if (row.engineWeights != row.checkpoint) {
            notes.insert("'" + row.candidate + "' at " + row.checkpoint + ": the engine's weights are "
                + row.engineWeights + " (optimizer step " + std::to_string(row.engineStep) + "), not the screened "
                + "checkpoint's");
        }
    }
    out << formatTable({"candidate", "checkpoint", "mismatch [95%] nats/token", "x BF16", "threshold (bracket)",
                           "decision", "time"},
        rows)
        << "\nadmit: interval below the threshold; reject: above; borderline: straddles it. x BF16: over the BF16 "
           "unit of the screened checkpoint (the plain BF16 engine at its weights, same prompts and seeds)\n";
    for (const std::string& note : notes) {
        out << "note: " << note << "\n";
    }
    for (const auto& flag : result.calibrationFlags) {
        out << "FLAGGED BUDGET: " << analysis::flagText(flag) << "\n";
    }
    if (!result.protocolDifferences.empty()) {
        out << "OTHER PROTOCOL than the budget's (allowed explicitly; these decisions are not on the budget's scale):\n";
        for (const std::string& difference : result.protocolDifferences) {
            out << "  " << difference << "\n";
        }
    }
    std::vector<std::vector<std::string>> estimatorRows;
    for (const auto& row : result.rows) {
        if (!row.estimators) {
            continue;
        }
        std::vector<std::string> cells = {row.candidate,
            std::filesystem::path(row.checkpoint).filename().string(), formatNumber(row.estimators->kl, 4)};
        for (const metrics::EstimatorSummary& e : row.estimators->estimators) {
            cells.push_back(formatNumber(e.mean, 4) + " ("
                + (e.pearson ? formatNumber(*e.pearson, 2) : std::string("-")) + " / "
                + (e.spearman ? formatNumber(*e.spearman, 2) : std::string("-")) + ")");
        }
        estimatorRows.push_back(cells);
    }
    if (!estimatorRows.empty()) {
        out << "\nsampled-token estimators beside the full KL (token mean; Pearson / Spearman with the per-token "
               "full KL)\n"
            << formatTable({"candidate", "checkpoint", "full KL", "k1", "k3", "mult_prob_error", "|mu - pi|"},
                   estimatorRows)
            << "\n";
    }
    out << result.rows.size() << " decision(s) stored (run " << result.runId << "), total time "
        << formatDuration(result.seconds) << "\n";
}

} // namespace mismatch::cli

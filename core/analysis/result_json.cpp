#include "core/analysis/result_json.h"

#include "core/analysis/protocol.h"
#include "core/common/runtime.h"
#include "core/metrics/estimators.h"
#include "core/quant/formats.h"
#include "core/train/run_config.h"

#include <filesystem>
#include <iomanip>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

nlohmann::json optionalJson(const std::optional<double>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// value / unit, null when there is no unit.
nlohmann::json multipleOf(double value, double unit)
{
    return unit > 0.0 ? nlohmann::json(value / unit) : nlohmann::json(nullptr);
}

nlohmann::json cellJson(const store::SensitivityCell& cell, double unit)
{
    return {{"layer", cell.layer}, {"group", cell.moduleGroup}, {"mismatch", cell.mismatch},
        {"added_mismatch", cell.addedMismatch},
        {"added_interval", {{"low", cell.ciLow.value_or(0.0)}, {"high", cell.ciHigh.value_or(0.0)}}},
        {"mismatch_interval", {{"low", cell.mismatchCiLow.value_or(0.0)}, {"high", cell.mismatchCiHigh.value_or(0.0)}}},
        {"bf16_multiple", multipleOf(cell.mismatch, unit)}, {"tokens", cell.tokens.value_or(0)},
        {"seconds", cell.seconds.value_or(0.0)}};
}

// A stored interval whose ends may be missing (a breakdown measured before intervals were stored).
nlohmann::json storedInterval(double estimate, const std::optional<double>& low, const std::optional<double>& high)
{
    return {{"estimate", estimate}, {"low", optionalJson(low)}, {"high", optionalJson(high)}};
}

// `value` with 4 significant digits (as the CLI prints numbers).
std::string number(double value)
{
    std::ostringstream text;
    text << std::setprecision(4) << value;
    return text.str();
}

const char* const kBreakdownMethods[] = {"add_one_in", "leave_one_out", "shapley"};

} // namespace

nlohmann::json toJson(const SensitivityResult& r, const SensitivityOptions& o)
{
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& cell : r.cells) {
        cells.push_back(cellJson(cell, r.bf16Unit));
    }
    return {{"scan_id", r.scanId}, {"run_id", r.runId}, {"format", r.format}, {"kv_format", quant::describe(o.kv)},
        {"layers", r.layers}, {"bf16_unit", toJson(r.bf16UnitInterval)}, {"bf16_unit_tokens", r.unitTokens},
        {"cells", cells}, {"seconds", r.seconds}, {"units", "nats per token; added = cell mismatch - BF16 unit"}};
}

nlohmann::json toJson(const RecipeBuildResult& r, const RecipeBuildOptions& o, const std::string& budgetSource)
{
    nlohmann::json steps = nlohmann::json::array();
    for (std::size_t i = 0; i < r.steps.size(); ++i) {
        steps.push_back({{"step", i}, {"kept_in_bf16", r.steps[i].keptCell}, {"mismatch", r.steps[i].mismatch},
            {"interval", toJson(r.steps[i].interval)}});
    }
    return {{"recipe_file", r.outPath}, {"recipe_id", r.recipeId}, {"run_id", r.runId}, {"scan_id", r.scanId},
        {"format", r.format}, {"budget", r.budget}, {"budget_source", budgetSource},
        {"budget_note", r.budgetNote}, {"target", r.target},
        {"target_fraction", o.targetFraction}, {"bf16_unit", r.bf16Unit}, {"mismatch", toJson(r.interval)},
        {"bf16_cells", r.bf16Cells}, {"quantized_cells", r.quantizedCells}, {"steps", steps},
        {"weight_bytes", r.weightBytes}, {"bf16_weight_bytes", r.bf16WeightBytes},
        {"weight_ratio",
            r.bf16WeightBytes ? static_cast<double>(r.weightBytes) / static_cast<double>(r.bf16WeightBytes) : 0.0},
        {"kv_memory_bytes", r.kvMemoryBytes}, {"kv_tokens", r.kvTokens}, {"bf16_kv_tokens", r.bf16KvTokens},
        {"kv_capacity_ratio", r.kvCapacityRatio}, {"seconds", r.seconds}, {"protocol", protocolToJson(r.protocol)},
        {"scan_protocol_differs", r.scanProtocolDifferences}};
}

nlohmann::json toJson(const PrefixShiftResult& r)
{
    nlohmann::json positions = nlohmann::json::array();
    for (const auto& p : r.byPosition) {
        positions.push_back({{"position", p.position}, {"total", p.total}, {"total_tokens", p.totalTokens},
            {"per_token", p.perToken}, {"per_token_tokens", p.perTokenTokens}, {"bf16_unit", p.bf16Unit}});
    }
    nlohmann::json corrections = nlohmann::json::array();
    for (const auto& e : r.corrections) {
        corrections.push_back({{"kind", e.kind}, {"cap", e.cap}, {"total", e.total}, {"per_token", e.perToken},
            {"prefix_shift", e.prefixShift}, {"affected_own", e.affectedOwn},
            {"affected_reference", e.affectedReference}});
    }
    return {{"analysis_id", r.analysisId}, {"run_id", r.runId}, {"total", toJson(r.totalInterval)},
        {"per_token", toJson(r.perTokenInterval)}, {"prefix_shift", toJson(r.prefixShiftInterval)},
        {"bf16_unit", r.bf16Unit}, {"own_tokens", r.ownTokens}, {"reference_tokens", r.referenceTokens},
        {"pairs", r.pairs}, {"diverged", r.diverged}, {"divergence_histogram", r.divergenceHistogram},
        {"median_divergence", r.medianDivergence ? nlohmann::json(*r.medianDivergence) : nlohmann::json()},
        {"by_position", positions}, {"corrections", corrections}, {"estimators", metrics::toJson(r.estimators)},
        {"seconds", r.seconds}};
}

nlohmann::json toJson(const store::BreakdownRecord& r)
{
    nlohmann::json parts = nlohmann::json::object();
    for (const char* method : kBreakdownMethods) {
        nlohmann::json list = nlohmann::json::array();
        for (const store::BreakdownPart& part : r.partsOf(method)) {
            list.push_back({{"source", part.source}, {"value", part.value}, {"ci_low", optionalJson(part.ciLow)},
                {"ci_high", optionalJson(part.ciHigh)}, {"bf16_multiple", multipleOf(part.value, r.bf16Unit)}});
        }
        parts[method] = list;
    }
    nlohmann::json subsets = nlohmann::json::array();
    for (const store::BreakdownSubset& s : r.subsets) {
        subsets.push_back({{"subset", s.subset}, {"mismatch", s.mismatch}, {"ci_low", optionalJson(s.ciLow)},
            {"ci_high", optionalJson(s.ciHigh)}, {"k1", optionalJson(s.k1)}, {"k3", optionalJson(s.k3)},
            {"tokens", s.tokens}, {"estimators", nlohmann::json::parse(s.estimatorsJson)}});
    }
    return {{"breakdown_id", r.id}, {"candidate", r.candidate}, {"sources", r.sources}, {"shapley", r.shapley},
        {"total", storedInterval(r.total, r.totalCiLow, r.totalCiHigh)},
        {"bf16_unit", storedInterval(r.bf16Unit, r.unitCiLow, r.unitCiHigh)},
        {"bf16_multiple", multipleOf(r.total, r.bf16Unit)}, {"tokens", r.tokens}, {"parts", parts},
        {"subsets", subsets}, {"configuration", nlohmann::json::parse(r.configurationJson)}};
}

nlohmann::json toJson(const BreakdownResult& r)
{
    nlohmann::json list = nlohmann::json::array();
    for (const store::BreakdownRecord& record : r.candidates) {
        list.push_back(toJson(record));
    }
    return {{"run_id", r.runId}, {"measurements", r.measurements}, {"seconds", r.seconds}, {"candidates", list}};
}

std::string calibrationRuleText(
    const metrics::FailureRuleOptions& rule, std::int64_t replicates, std::int64_t maxReplicates)
{
    return "fail when the " + number(100 * rule.bootstrap.confidence)
        + "% interval of (Q_run - Q_base) / Q_base lies at or above " + number(rule.relativeThreshold)
        + ", pass when it lies below, undecided when it contains it; Q and q_i are means over each configuration's "
        + "seed replicates (" + std::to_string(replicates)
        + (maxReplicates > replicates ? " to start, up to " + std::to_string(maxReplicates) + " while undecided"
                                      : std::string(" each"))
        + ")";
}

nlohmann::json toJson(const CalibrationResult& result, const CalibrationOptions& options, const nlohmann::json& command)
{
    const auto multiple = [](const store::CalibrationPoint& p) {
        return p.bf16Unit && *p.bf16Unit > 0.0 ? nlohmann::json(p.mismatch / *p.bf16Unit) : nlohmann::json(nullptr);
    };
    nlohmann::json points = nlohmann::json::array();
    for (const auto& p : result.points) {
        points.push_back({{"run_id", p.runId}, {"label", p.label}, {"step", p.step}, {"replicates", p.replicates},
            {"mismatch", p.mismatch}, {"training_mismatch", optionalJson(p.trainingMismatch)},
            {"bf16_unit", optionalJson(p.bf16Unit)}, {"bf16_multiple", multiple(p)},
            {"quality", p.quality}, {"accuracy", optionalJson(p.accuracy)},
            {"relative_change", optionalJson(p.relativeChange)}, {"ci_low", optionalJson(p.ciLow)},
            {"ci_high", optionalJson(p.ciHigh)}, {"change_low", optionalJson(p.changeLow)},
            {"change_high", optionalJson(p.changeHigh)}, {"verdict", p.verdict}, {"failed", p.failed()}});
    }
    nlohmann::json replicatePoints = nlohmann::json::array();
    for (const auto& p : result.replicatePoints) {
        replicatePoints.push_back(toJson(p));
    }
    nlohmann::json nulls = nlohmann::json::array();
    for (const auto& n : result.nullComparisons) {
        nulls.push_back({{"step", n.step}, {"relative_change", n.relativeChange},
            {"mean_difference", n.difference.estimate}, {"ci_low", n.difference.low}, {"ci_high", n.difference.high},
            {"change_low", n.change.low}, {"change_high", n.change.high},
            {"verdict", metrics::verdictName(n.verdict)}, {"failed", n.verdict == metrics::Verdict::Fail},
            {"noise_floor", n.noiseFloor}});
    }
    nlohmann::json brackets = nlohmann::json::array();
    for (const auto& b : result.brackets) {
        brackets.push_back({{"step", b.step}, {"largest_passing", optionalJson(b.largestPassing)},
            {"smallest_failing", optionalJson(b.smallestFailing)}, {"threshold", optionalJson(b.threshold)}});
    }
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& run : result.runs) {
        runs.push_back({{"label", run.label}, {"replicate", run.replicate}, {"seed", run.seed}, {"run_id", run.runId},
            {"wall_seconds", run.wallSeconds}});
    }
    // The student and prompts relative to the resource directory when they are built-in (portable shipped files).
    const auto inResources = [](const std::string& path) {
        const fs::path relative = fs::path(path).lexically_relative(fs::path(resourceDirectory()));
        return !relative.empty() && relative.begin()->string() != ".." ? nlohmann::json(relative.string())
                                                                       : nlohmann::json(nullptr);
    };
    return {{"calibration_id", result.calibrationId}, {"run_id", result.runId}, {"name", options.name},
        {"student", options.base.student}, {"student_in_resources", inResources(options.base.student)},
        {"prompts_in_resources", inResources(result.protocol.prompts)}, {"command", command},
        {"provenance",
            result.provenanceJson.empty() ? nlohmann::json::array() : nlohmann::json::parse(result.provenanceJson)},
        {"base", nlohmann::json::parse(train::runConfigToJson(options.base))}, {"replicates", result.replicates},
        {"relative_threshold", options.rule.relativeThreshold}, {"confidence", options.rule.bootstrap.confidence},
        {"resamples", options.rule.bootstrap.resamples}, {"max_replicates", result.maxReplicates},
        {"protocol", protocolToJson(result.protocol)},
        {"flags", flagsToJson(result.flags)}, {"runs", runs}, {"points", points}, {"replicate_points", replicatePoints},
        {"null_comparisons", nulls}, {"brackets", brackets}, {"wall_seconds", result.wallSeconds},
        {"rule", calibrationRuleText(options.rule, result.replicates, result.maxReplicates)},
        {"mismatch_statistic", kCalibrationMismatchStatistic},
        {"bf16_multiple", "mismatch / the BF16 unit of the same checkpoints under the same protocol (the plain BF16 "
                          "engine at their weights, same prompts and seeds), as admit's x BF16"},
        {"interval_method", kCalibrationIntervalMethod}, {"stopping_rule", kCalibrationStoppingRule}};
}

nlohmann::json toJson(const train::TrainResult& result, const std::optional<store::RunInfo>& run,
    const std::string& workspace)
{
    return {{"run_id", result.runId}, {"name", run ? run->name : ""},
        {"status", run ? store::toString(run->status) : "unknown"}, {"steps_stored", result.stepsStored},
        {"resumed_from_step", result.resumedFromStep}, {"final_quality", optionalJson(result.finalQuality)},
        {"final_accuracy", optionalJson(result.finalAccuracy)}, {"wall_seconds", result.wallSeconds},
        {"last_checkpoint", result.lastCheckpoint}, {"workspace", workspace}};
}

} // namespace mismatch::analysis

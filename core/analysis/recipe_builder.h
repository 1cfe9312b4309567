#pragma once
// The recipe builder (spec "Layer sensitivity", second half): start from every scanned cell quantized (the
// format's weights and activations on every projection, the embedding / lm_head when the scan has them, the FP8 KV
// cache on every layer when asked), then keep cells in BF16 one at a time, most sensitive first (largest added
// mismatch of the sensitivity scan), re-measuring after each, until the measured mismatch is at most
// targetFraction x budget. Each measurement runs the recipe exactly as written to the output file (the YAML text
// parsed back), on the same prompts and seeds as the scan. The result reports the weight memory
// (RecipePlan) and the KV-cache tokens of a memory budget (engine::kvCapacity) against all-BF16.
//
// Store: a run of kind "recipe_build" whose steps are the greedy steps (step 0 = everything quantized; step i =
// after keeping the i-th cell in BF16: mismatch_kl, bf16_multiple, extras_json with the cell and the interval);
// the written recipe is added to the `recipes` table. When even keeping every cell in BF16 does not reach the
// target, the run is marked failed, nothing is written and an Error says so with the figures.
#include "core/analysis/protocol.h"
#include "core/analysis/rollout_measure.h"
#include "core/analysis/sensitivity.h"
#include "core/common/progress.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct RecipeBuildOptions {
    SensitivityOptions scan; // model, prompts, settings and the format; used to run a scan when scanId is unset
    std::optional<std::int64_t> scanId; // a stored scan to order the cells by (its format and settings are used)
    bool quantizeKv = false; // start with scan.kv on every layer (kv cells then join the greedy order)
    // Leave the embedding and lm_head in BF16 whatever the scan measured (a stored scan's embedding cells are not
    // used): vLLM and llm-compressor quantize linear layers only, so their exports refuse a quantized embedding.
    bool keepEmbeddingBf16 = false;
    double budget = 0.0; // nats per token (> 0)
    double targetFraction = 0.5; // (0, 1]
    std::string outPath; // the recipe file (.yaml, .yml or .json)
    std::string name; // recipe name; empty: derived from the format
    std::uint64_t kvMemoryBytes = 8ull << 30; // memory budget of the KV capacity report
    // The budget's measurement protocol (a calibration's): the builder measures its recipes under it (probe
    // prompts, count, sampling, KV-scale fit), so that they compare with the budget. Unset: the scan's settings.
    std::optional<MeasurementProtocol> protocol;
    // Why the budget's bracket is not the model's own optimizer step (budgetForModel's note); printed and stored.
    std::string budgetNote;
};

// A calibration's budget for a model (`recipe build --calibration ID [--step S]`), chosen as the admission check
// chooses a bracket for a checkpoint: the bracket of step `step` when given (noted when the model is at another
// optimizer step), else the bracket of the model's own optimizer step (train::checkpointOptimizerSteps: state.json,
// 0 without one), else the nearest earlier one (noted). InputError("recipe_build", "model") when the model is
// before every bracket; StoreError for an unknown calibration or step.
struct BudgetChoice {
    double budget = 0.0; // the bracket's admission threshold
    std::int64_t step = 0; // the bracket's step
    std::int64_t modelStep = 0; // the model's optimizer step
    std::string note; // empty when step == modelStep
};
BudgetChoice budgetForModel(const store::RunStore& store, std::int64_t calibrationId,
    std::optional<std::int64_t> step, const std::string& modelDirectory);

struct RecipeBuildStep {
    std::string keptCell; // the cell moved to BF16 at this step ("" at step 0)
    double mismatch = 0.0;
    metrics::Interval interval;
};

struct RecipeBuildResult {
    std::int64_t runId = 0;
    std::int64_t scanId = 0;
    std::int64_t recipeId = 0; // row of the `recipes` table
    std::string format;
    double budget = 0.0;
    double target = 0.0;
    double bf16Unit = 0.0;
    std::vector<std::string> bf16Cells; // kept in BF16, in the order kept
    std::vector<std::string> quantizedCells;
    std::vector<RecipeBuildStep> steps;
    double mismatch = 0.0; // of the written recipe
    metrics::Interval interval;
    std::int64_t weightBytes = 0;
    std::int64_t bf16WeightBytes = 0;
    std::int64_t kvTokens = 0;
    std::int64_t bf16KvTokens = 0;
    double kvCapacityRatio = 0.0;
    std::uint64_t kvMemoryBytes = 0;
    std::string outPath;
    std::string recipeText;
    double seconds = 0.0;
    MeasurementProtocol protocol; // what the builder measured under
    MeasurementProtocol scanProtocol; // what the ordering scan was measured under
    std::vector<std::string> scanProtocolDifferences; // the scan's protocol against the budget's (ordering only)
    std::string budgetNote; // RecipeBuildOptions::budgetNote
};

RecipeBuildResult buildRecipe(store::RunStore& store, const RecipeBuildOptions& options, Progress& progress);

// The recipe that quantizes `quantizedCells` (labels as cellLabel()) of `cells` and leaves the rest BF16.
quant::Recipe recipeForCells(const std::vector<SensitivityCellSpec>& cells, const std::vector<bool>& quantized,
    const quant::WeightPrecision& weights, const quant::ActivationPrecision& activations,
    const std::optional<quant::KvPrecision>& kv, const std::string& name);
// "layer 3 down", "layer 0 kv", "embed_lm_head".
std::string cellLabel(std::int64_t layer, const std::string& group);

} // namespace mismatch::analysis

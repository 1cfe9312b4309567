#pragma once
// OPD against RL under the same engines (`mismatch compare-objectives`): for each objective (OPD full KL,
// REINFORCE, GRPO) a BF16-engine run and one run per engine configuration of the sweep (noise sigmas, recipes),
// all from one base run file with the same seed and prompts. Where each objective breaks, in BF16 units:
//   OPD   the failure rule (spec) on held-out quality against its BF16 run at the last step;
//   RL    reward collapse against its own BF16 run: the mean rollout reward over the last `window` steps falls
//         below (1 - collapse) times the BF16 run's mean over the same steps (default: window = the last quarter
//         of the steps, collapse 0.5). When the BF16 run's mean reward there is 0 the rule cannot decide
//         ("undecided": an RL run that never earns a reward has nothing to lose), which is reported as such.
// A configuration's mismatch is the run's mean step KL(mu || pi); its BF16 multiple divides by the BF16 run's
// mean step mismatch of the same objective. Runs are ordinary training runs; the comparison is a run of kind
// "compare_objectives" whose config_json holds the table.
#include "core/common/progress.h"
#include "core/metrics/bootstrap.h"
#include "core/store/run_store.h"
#include "core/train/run_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct CompareObjectivesOptions {
    train::RunConfig base; // needs a teacher and evaluation prompts (OPD's quality)
    std::vector<train::Objective> objectives = {train::Objective::OpdFullKl, train::Objective::Reinforce,
        train::Objective::Grpo};
    std::vector<double> noiseSigmas; // > 0
    std::vector<std::string> recipes;
    std::int64_t samplesPerPrompt = 4; // GRPO's group size (prompts per step divided by it, at least 1)
    std::int64_t rlMaxTokens = 0; // RL response length (0: the base's); rewards need whole answers
    std::int64_t window = 0; // RL steps averaged (0: a quarter of the steps, at least 1)
    double collapse = 0.5; // RL breaks below (1 - collapse) x the BF16 run's reward
    metrics::FailureRuleOptions rule; // OPD
    std::string workspaceDirectory;
};

enum class ObjectiveVerdict { Holds, Breaks, Undecided };
std::string toString(ObjectiveVerdict verdict); // "holds", "breaks", "undecided"

struct ObjectiveComparisonRow {
    train::Objective objective = train::Objective::OpdFullKl;
    std::string configuration; // "bf16", "noise 0.1", "recipe fp8-kv"
    std::int64_t runId = 0;
    double mismatch = 0.0; // mean step KL(mu || pi), nats per token
    double bf16Multiple = 1.0; // mismatch / the objective's BF16 run's mismatch
    std::optional<double> quality; // OPD: Q at the last step
    std::optional<double> relativeChange; // OPD: (Q - Q_bf16) / Q_bf16
    std::optional<double> reward; // RL: mean reward over the window
    ObjectiveVerdict verdict = ObjectiveVerdict::Holds;
};

struct ObjectiveBreak {
    train::Objective objective = train::Objective::OpdFullKl;
    std::optional<double> largestHolding; // BF16 multiple; the largest below smallestBreaking (as budget brackets)
    std::optional<double> smallestBreaking;
    std::string rule; // the rule applied, in words
};

struct CompareObjectivesResult {
    std::int64_t runId = 0;
    std::vector<ObjectiveComparisonRow> rows; // objective-major, BF16 first
    std::vector<ObjectiveBreak> breaks; // per objective
    double wallSeconds = 0.0;
};

// InputError for an empty sweep, non-positive sigmas, a base without teacher or evaluation set, or collapse
// outside (0, 1). Progress over all runs; cancellable (the comparison run is then marked cancelled).
CompareObjectivesResult runCompareObjectives(
    store::RunStore& store, const CompareObjectivesOptions& options, Progress& progress);

// {"run_id", "rows": [{"objective", "configuration", "run_id", "mismatch", "bf16_multiple", "quality",
// "relative_change", "reward", "verdict"}], "breaks": [{"objective", "largest_holding_bf16_multiple",
// "smallest_breaking_bf16_multiple", "rule"}], "wall_seconds"}: `mismatch compare-objectives --json` and the job's
// result (the stored run's config_json holds the same rows).
nlohmann::json toJson(const CompareObjectivesResult& result);

} // namespace mismatch::analysis

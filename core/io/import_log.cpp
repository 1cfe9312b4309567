// Log import: what every source shares. The measures a value can land in, the estimator texts and the table of
// known keys of every source (one registry; the key patterns are in import_log_patterns.cpp), --map entries and the
// mappings they make, setMeasure, the public functions of import_log.h and importLog's dispatch to the source's
// reader (import_log_internal.h lists the files).
#include "core/io/import_log.h"

#include "core/io/import_log_internal.h"

#include "core/common/error.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mismatch::io {

using namespace importing;

namespace {

const char* kNats = "nats/token";
const char* kProbability = "probability";

// The estimator texts of the built-in table (mu: rollout engine or sampler, pi: trainer, y: the sampled token).
const char* kK1Verl = "k1: token mean of log mu(y) - log pi(y) over response tokens (rollout minus training "
                      "log-probability of the sampled token); estimates KL(mu || pi)";
const char* kK3Verl = "k3: token mean of r - 1 - log r with r = pi(y) / mu(y); estimates KL(mu || pi)";
const char* kChi2 = "token mean of r^2 - 1 with r = pi(y) / mu(y): a chi-square divergence estimate, not a KL";
const char* kProbDiff = "probability difference |mu(y) - pi(y)| of the sampled token over response tokens: not a KL";
// Tinker's kl_sample_train_* compares the sampler's log-probabilities with the trainer's forward pass of the same
// batch (tinker_cookbook/rl/metrics.py compute_kl_sample_train, called after rl/train.py train_step). With
// num_substeps > 1 the later sub-batches are scored after earlier optimizer steps, and with async_config the
// sampler's weights are up to max_steps_off_policy iterations old (rl/train.py AsyncConfig): pi then differs from
// the sampler's weights, and the value includes that policy drift on top of the engine mismatch.
const char* kTinkerDrift = "; with num_substeps > 1 or async training (async_config) pi comes from weights updated "
                           "after the sampler's, so the value includes policy drift, not only the sampler-trainer "
                           "mismatch";
const char* kK1Tinker = "k1: mean over action tokens of log mu(y) - log pi(y) (sampler minus trainer "
                        "log-probability); estimates KL(mu || pi)";
const char* kK2Tinker = "k2: mean over action tokens of (log mu(y) - log pi(y))^2 / 2; estimates KL(mu || pi) to "
                        "second order";
// tinker_cookbook/distillation/train_on_policy.py incorporate_kl_penalty: teacher_kl averages the datum's
// "logprobs" (what the sampler returned while sampling) minus the teacher's, over the action mask.
const char* kTeacherKlTinker = "k1 to the teacher: mean over action tokens of log mu(y) - log teacher(y) with mu the "
                               "sampler's log-probabilities (not the trainer's); the OPD objective, not a mismatch";

// verl: verl/trainer/ppo/rollout_corr_helper.py compute_offpolicy_metrics, per sequence s with mean log-probabilities
// over its response tokens (mu: rollout_log_prob, pi: old_log_prob, the trainer's), then the mean over sequences.
const char* kChi2Seq = "sequence-level chi-square estimate: mean over sequences of rho^2 - 1 with rho the product "
                       "of pi(y) / mu(y) over the sequence (its log clamped): not a KL";
const char* kLogPplDiff = "mean over sequences of (mean log mu(y) - mean log pi(y)) over the sequence's tokens: a "
                          "sequence-level k1, signed";
const char* kLogPplAbsDiff = "mean over sequences of |mean log mu(y) - mean log pi(y)|";
const char* kTrainingPpl = "mean over sequences of exp(-mean log pi(y)): the trainer's perplexity of the rollouts";
const char* kRolloutPpl = "mean over sequences of exp(-mean log mu(y)): the rollout engine's perplexity of them";
const char* kPplRatio = "mean over sequences of exp(log_ppl_diff): training over rollout perplexity";
// verl: rollout_corr_helper.py compute_rollout_correction_and_rejection_mask, the importance weights
// rho = pi(y) / mu(y) at the configured level (token or sequence), and compute_is_metrics (verl-project/verl
// 7fbc00a9c0fad60e0694429b539bad98f414d712). The mean is over the applied weights: truncated at the upper bound
// (TIS, a single rollout_is_threshold) or zeroed outside [lower, upper] (IcePop, a "lower_upper" threshold). Max and
// min depend on the level: at sequence level they are the raw sequence weights before truncation (max's log clamped
// at 20), at token level the applied (truncated or zeroed) ones. The high/low fractions count raw weights above the
// upper bound and below the lower bound, which is 1 / rollout_is_threshold unless the threshold names one.
const char* kIsWeightMean = "mean importance weight pi(y) / mu(y) over response tokens after truncation, at the run's "
                            "rollout_is level (token or sequence; not in the log): 1 when engine and trainer agree";
const char* kIsWeightMax = "largest importance weight pi(y) / mu(y): at the run's rollout_is level sequence, the "
                           "raw sequence weight before truncation (its log clamped at 20); at level token, the "
                           "largest applied weight, after truncation at the upper threshold (or IcePop's zeroing)";
const char* kIsWeightMin = "smallest importance weight pi(y) / mu(y): at level sequence the raw sequence weight "
                           "before truncation; at level token the smallest applied weight (0 when IcePop zeroed one)";
const char* kIsFractionHigh = "fraction of raw importance weights (before truncation) above the upper bound: "
                              "rollout_is_threshold, or the upper of a \"lower_upper\" threshold";
const char* kIsFractionLow = "fraction of raw importance weights below the lower bound: 1 / rollout_is_threshold "
                             "by default, or the lower of a \"lower_upper\" threshold (IcePop)";
// verl-project/verl 1dda039b9c6311889a9c9a26040677e1254814f9, rollout_corr_helper.py: compute_offpolicy_metrics also
// logs the log-perplexities and the extremes over sequences of log_ppl_diff; compute_is_metrics the spread of the
// applied weights w (after truncation, or IcePop's zeroing; a sequence-level weight counts at each of its tokens),
// its effective sample size, and per sequence the token mean of w (the rollout_is_seq_* statistics, whose high and
// low fractions take the raw weights' per-sequence mean); compute_rollout_correction_weights the fraction of raw
// weights outside IcePop's bounds; compute_rollout_rejection_mask the fractions rejection sampling masked.
const char* kTrainingLogPpl = "mean over sequences of -mean log pi(y) over the sequence's response tokens: the log of "
                              "each sequence's training perplexity";
const char* kRolloutLogPpl = "mean over sequences of -mean log mu(y) over the sequence's response tokens: the log of "
                             "each sequence's rollout perplexity";
const char* kLogPplDiffMax = "largest over sequences of mean log mu(y) - mean log pi(y) (a sequence's log_ppl_diff)";
const char* kLogPplDiffMin = "smallest over sequences of mean log mu(y) - mean log pi(y) (a sequence's log_ppl_diff)";
const char* kIsWeightStd = "standard deviation (population, n) over response tokens of the applied importance "
                           "weights pi(y) / mu(y), after truncation; a sequence-level weight counts at each token";
const char* kIsEffSampleSize = "effective sample size of the applied importance weights w as a fraction of the "
                               "response tokens: 1 / token mean of (w / token mean of w)^2; 1 when every weight is "
                               "equal";
const char* kIsSeqWeightMean = "mean over sequences of each sequence's token mean of the applied importance weights";
const char* kIsSeqWeightStd = "standard deviation (n - 1) over sequences of each sequence's token mean of the applied "
                              "importance weights";
const char* kIsSeqWeightMax = "largest over sequences of a sequence's token mean of the applied importance weights";
const char* kIsSeqWeightMin = "smallest over sequences of a sequence's token mean of the applied importance weights";
const char* kIsSeqMaxDeviation = "largest over sequences of |token mean of the applied importance weights - 1|: the "
                                 "farthest sequence from the ideal weight 1";
const char* kIsSeqFractionHigh = "fraction of sequences whose token mean of the raw importance weights (before "
                                 "truncation) is above the upper bound (rollout_is_threshold)";
const char* kIsSeqFractionLow = "fraction of sequences whose token mean of the raw importance weights is below the "
                                "lower bound: 1 / rollout_is_threshold, or the lower of a \"lower_upper\" threshold";
const char* kIsFractionOutside = "fraction of raw importance weights pi(y) / mu(y) outside the truncation bounds "
                                 "[lower, upper], over response tokens";
const char* kIsOobVerl = "fraction of response tokens whose raw importance weight is outside IcePop's [lower, upper] "
                         "(logged with a \"lower_upper\" rollout_is_threshold only; at rollout_is level sequence a "
                         "sequence's weight counts at each of its tokens)";
const char* kRsMaskedFraction = "fraction of response tokens masked by rejection sampling, every rollout_rs option "
                                "together";
const char* kRsSeqMaskedFraction = "fraction of the batch's sequences with a response token masked by rejection "
                                   "sampling";
// verl: verl/trainer/distillation/losses.py distillation_loss logs distillation/loss_min and loss_max, the extremes
// of the per-token distillation loss over the micro-batch's response tokens before loss_max_clamp (kept as the
// smallest and largest over micro-batches), and compute_distillation_loss_reverse_kl_estimator distillation/abs_loss,
// the token mean of its absolute value (k1 can be negative); the per-token loss is the run's loss_mode estimator,
// k1 = log pi(y) - log teacher(y) with pi the trainer's current log-probabilities. RayPPOTrainer._update_actor
// (verl/trainer/ppo/ray_trainer.py) prefixes the actor's metrics with "actor/" (verl/utils/py_functional.py
// rename_dict).
const char* kDistillationLossMin = "smallest per-token distillation loss over the batch's response tokens (the run's "
                                   "loss_mode, not in the log; before loss_max_clamp)";
const char* kDistillationLossMax = "largest per-token distillation loss over the batch's response tokens (the run's "
                                   "loss_mode, not in the log; before loss_max_clamp)";
const char* kDistillationAbsLoss = "mean over response tokens of |per-token distillation loss| (a loss_mode estimator: "
                                   "k1 = log pi(y) - log teacher(y) can be negative), averaged over micro-batches";

// NeMo-RL: nemo_rl/algorithms/loss_functions.py (ClippedPGLossFn) logs these per step as train/...: mu is the
// generation log-probability, pi the trainer's (prev_logprobs).
const char* kMultProbError = "token mean of exp(|log mu(y) - log pi(y)|) over response tokens (NeMo-RL's "
                             "token_mult_prob_error): 1 when engine and trainer agree; not a KL";
const char* kGenKl = "sampled-token estimate of KL(mu || pi), token mean, of the run's reference_policy_kl_type (k1, "
                     "k2 or k3; not in the log) (NeMo-RL's gen_kl_error)";
const char* kPolicyKl = "sampled-token estimate of KL(pi || mu), token mean, of the run's reference_policy_kl_type "
                        "(NeMo-RL's policy_kl_error): the reverse direction, not the mismatch KL(mu || pi)";
// nemo_rl/algorithms/loss/loss_functions.py ClippedPGLossFn.__call__ (NVIDIA-NeMo/RL
// 7ea279abfbeb698b092856d0dab61e7cf39bc909): js_divergence_error, approx_entropy (with the current forward pass's
// log-probabilities), sampling_importance_ratio (the actor's importance weights after the truncated importance
// sampling of truncated_importance_sampling_type) and is_oob_ratio (logged with a truncation type only).
const char* kJsDivergence = "token mean of ((a - 1 - log a) + (b - 1 - log b)) / 2 with a = pi(y) / m, b = mu(y) / m, "
                            "m = (pi(y) + mu(y)) / 2: NeMo-RL's sampled-token Jensen-Shannon estimate "
                            "(js_divergence_error), not KL(mu || pi)";
const char* kApproxEntropy = "importance-weighted sampled-token estimate of the trainer's entropy: token mean of "
                             "-(pi(y) / mu(y)) log pi(y), pi from the training step's forward pass (NeMo-RL's "
                             "approx_entropy)";
const char* kSamplingIsRatio = "mean importance weight pi(y) / mu(y) over response tokens as applied after the run's "
                               "truncated importance sampling (tis: clamped to [min, max]; icepop: zeroed outside; "
                               "seq-mask-tis: sequences zeroed); with sequence_level_importance_ratios the mean over "
                               "sequences of the sequence weight, the product of pi(y) / mu(y) (NeMo-RL's "
                               "sampling_importance_ratio; the settings are not in the log)";
const char* kIsOobNemo = "fraction of response tokens whose raw importance weight pi(y) / mu(y) is outside the run's "
                         "truncation bounds (tis: [min, max], min 0 by default; icepop: [min, max]); with "
                         "seq-mask-tis, of sequences whose geometric-mean weight is (NeMo-RL's is_oob_ratio; the type "
                         "is not in the log)";

std::vector<ImportMeasure> buildMeasures()
{
    return {
        {"step", true, true, "training step", "the step number"},
        {"mismatch_kl", true, false, kNats, "full-vocabulary KL(mu || pi), token mean"},
        {"k1", true, false, kNats, "k1: mean of log mu(y) - log pi(y) over sampled tokens"},
        {"k3", true, false, kNats, "k3: mean of r - 1 - log r, r = pi(y) / mu(y), over sampled tokens"},
        {"loss", true, false, "as logged", "training loss"},
        {"reward", true, false, "as logged", "mean reward"},
        {"accuracy", true, false, "fraction", "fraction of a held-out evaluation's problems answered correctly"},
        {"entropy", true, false, "nats/token", "token mean entropy"},
        {"staleness", true, true, "optimizer steps", "rollout weight staleness"},
        {"rollout_tokens_per_s", true, false, "tokens/s", "rollout throughput"},
        {"train_tokens_per_s", true, false, "tokens/s", "training throughput"},
        {"wall_time_s", true, false, "seconds", "wall time since the run started"},
        {"k2", false, false, kNats, "k2: mean of (log mu(y) - log pi(y))^2 / 2 over sampled tokens"},
        {"chi2_token", false, false, "dimensionless", kChi2},
        {"prob_diff_mean", false, false, kProbability, std::string("mean ") + kProbDiff},
        {"prob_diff_max", false, false, kProbability, std::string("max ") + kProbDiff},
        {"prob_diff_std", false, false, kProbability, std::string("standard deviation of ") + kProbDiff},
        {"prob_pearson_corr", false, false, "dimensionless",
            "Pearson correlation of mu(y) and pi(y) over response tokens: not a KL"},
        {"pg_loss", false, false, "as logged", "policy-gradient loss"},
        {"teacher_kl", false, false, kNats,
            "k1 to the teacher: mean of log student(y) - log teacher(y) (the OPD objective, not a mismatch)"},
        {"step_time_s", false, false, "seconds", "seconds the step took"},
        {"chi2_seq", false, false, "dimensionless", kChi2Seq},
        {"log_ppl_diff", false, false, kNats, kLogPplDiff},
        {"log_ppl_abs_diff", false, false, kNats, kLogPplAbsDiff},
        {"training_ppl", false, false, "perplexity", kTrainingPpl},
        {"rollout_ppl", false, false, "perplexity", kRolloutPpl},
        {"ppl_ratio", false, false, "ratio", kPplRatio},
        {"is_weight_mean", false, false, "ratio", kIsWeightMean},
        {"is_weight_max", false, false, "ratio", kIsWeightMax},
        {"is_weight_min", false, false, "ratio", kIsWeightMin},
        {"is_fraction_high", false, false, "fraction", kIsFractionHigh},
        {"is_fraction_low", false, false, "fraction", kIsFractionLow},
        {"is_weight_std", false, false, "ratio", kIsWeightStd},
        {"is_eff_sample_size", false, false, "fraction", kIsEffSampleSize},
        {"is_seq_weight_mean", false, false, "ratio", kIsSeqWeightMean},
        {"is_seq_weight_std", false, false, "ratio", kIsSeqWeightStd},
        {"is_seq_weight_max", false, false, "ratio", kIsSeqWeightMax},
        {"is_seq_weight_min", false, false, "ratio", kIsSeqWeightMin},
        {"is_seq_max_deviation", false, false, "ratio", kIsSeqMaxDeviation},
        {"is_seq_fraction_high", false, false, "fraction", kIsSeqFractionHigh},
        {"is_seq_fraction_low", false, false, "fraction", kIsSeqFractionLow},
        {"is_fraction_outside", false, false, "fraction", kIsFractionOutside},
        {"rs_masked_fraction", false, false, "fraction", kRsMaskedFraction},
        {"rs_seq_masked_fraction", false, false, "fraction", kRsSeqMaskedFraction},
        {"training_log_ppl", false, false, kNats, kTrainingLogPpl},
        {"rollout_log_ppl", false, false, kNats, kRolloutLogPpl},
        {"log_ppl_diff_max", false, false, kNats, kLogPplDiffMax},
        {"log_ppl_diff_min", false, false, kNats, kLogPplDiffMin},
        {"js_divergence", false, false, kNats,
            "sampled-token Jensen-Shannon divergence estimate between mu and pi, token mean: not KL(mu || pi)"},
        {"train_accuracy", false, false, "fraction",
            "fraction of the training batch's sampled responses judged correct (not a held-out evaluation)"},
        {"eval_reward", false, false, "as logged", "mean reward on a held-out evaluation set"},
        {"distillation_loss_min", false, false, "as logged", kDistillationLossMin},
        {"distillation_loss_max", false, false, "as logged", kDistillationLossMax},
        {"distillation_abs_loss", false, false, "as logged", kDistillationAbsLoss},
        {"mult_prob_error", false, false, "ratio (>= 1)", kMultProbError},
        {"gen_kl", false, false, kNats, kGenKl},
        {"policy_kl", false, false, kNats, kPolicyKl},
    };
}

std::vector<KnownKey> buildKnownKeys()
{
    using S = LogSource;
    return {
        // verl: verl/trainer/ppo/rollout_corr_helper.py compute_offpolicy_metrics (old_log_prob is the trainer's,
        // rollout_log_prob the engine's) and the trainer's rollout_probs_diff metrics.
        {S::Verl, "rollout_corr/kl", "k1", kK1Verl},
        {S::Verl, "rollout_corr/k3_kl", "k3", kK3Verl},
        {S::Verl, "rollout_corr/chi2_token", "chi2_token", kChi2},
        {S::Verl, "rollout_corr/chi2_seq", "chi2_seq", kChi2Seq},
        {S::Verl, "rollout_corr/log_ppl_diff", "log_ppl_diff", kLogPplDiff},
        {S::Verl, "rollout_corr/log_ppl_abs_diff", "log_ppl_abs_diff", kLogPplAbsDiff},
        {S::Verl, "rollout_corr/training_ppl", "training_ppl", kTrainingPpl},
        {S::Verl, "rollout_corr/rollout_ppl", "rollout_ppl", kRolloutPpl},
        {S::Verl, "rollout_corr/ppl_ratio", "ppl_ratio", kPplRatio},
        {S::Verl, "rollout_corr/training_log_ppl", "training_log_ppl", kTrainingLogPpl},
        {S::Verl, "rollout_corr/rollout_log_ppl", "rollout_log_ppl", kRolloutLogPpl},
        {S::Verl, "rollout_corr/log_ppl_diff_max", "log_ppl_diff_max", kLogPplDiffMax},
        {S::Verl, "rollout_corr/log_ppl_diff_min", "log_ppl_diff_min", kLogPplDiffMin},
        {S::Verl, "rollout_corr/rollout_is_mean", "is_weight_mean", kIsWeightMean},
        {S::Verl, "rollout_corr/rollout_is_max", "is_weight_max", kIsWeightMax},
        {S::Verl, "rollout_corr/rollout_is_min", "is_weight_min", kIsWeightMin},
        {S::Verl, "rollout_corr/rollout_is_ratio_fraction_high", "is_fraction_high", kIsFractionHigh},
        {S::Verl, "rollout_corr/rollout_is_ratio_fraction_low", "is_fraction_low", kIsFractionLow},
        {S::Verl, "rollout_corr/rollout_is_std", "is_weight_std", kIsWeightStd},
        {S::Verl, "rollout_corr/rollout_is_eff_sample_size", "is_eff_sample_size", kIsEffSampleSize},
        {S::Verl, "rollout_corr/rollout_is_seq_mean", "is_seq_weight_mean", kIsSeqWeightMean},
        {S::Verl, "rollout_corr/rollout_is_seq_std", "is_seq_weight_std", kIsSeqWeightStd},
        {S::Verl, "rollout_corr/rollout_is_seq_max", "is_seq_weight_max", kIsSeqWeightMax},
        {S::Verl, "rollout_corr/rollout_is_seq_min", "is_seq_weight_min", kIsSeqWeightMin},
        {S::Verl, "rollout_corr/rollout_is_seq_max_deviation", "is_seq_max_deviation", kIsSeqMaxDeviation},
        {S::Verl, "rollout_corr/rollout_is_seq_fraction_high", "is_seq_fraction_high", kIsSeqFractionHigh},
        {S::Verl, "rollout_corr/rollout_is_seq_fraction_low", "is_seq_fraction_low", kIsSeqFractionLow},
        {S::Verl, "rollout_corr/rollout_is_oob_ratio", "is_fraction_outside", kIsOobVerl},
        // rollout_rs_<option>_<statistic>, each option's own statistics, are a key pattern (import_log_patterns.cpp).
        {S::Verl, "rollout_corr/rollout_rs_masked_fraction", "rs_masked_fraction", kRsMaskedFraction},
        {S::Verl, "rollout_corr/rollout_rs_seq_masked_fraction", "rs_seq_masked_fraction", kRsSeqMaskedFraction},
        {S::Verl, "training/rollout_probs_diff_mean", "prob_diff_mean", std::string("mean ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_max", "prob_diff_max", std::string("max ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_std", "prob_diff_std", std::string("standard deviation of ") + kProbDiff},
        {S::Verl, "training/rollout_actor_probs_pearson_corr", "prob_pearson_corr",
            "Pearson correlation of mu(y) and pi(y) over response tokens: not a KL"},
        {S::Verl, "actor/entropy", "entropy", "token mean entropy of the trainer's next-token distribution"},
        // verl/trainer/distillation/losses.py distillation_ppo_loss logs the distillation loss as
        // "distillation/loss" among the actor's update metrics, which RayPPOTrainer._update_actor prefixes with
        // "actor/" (above kDistillationLossMin); the other distillation losses have measures of their own.
        {S::Verl, "actor/distillation/loss", "loss",
            "verl's distillation loss (its estimator is the run's distillation loss_mode, not in the log)"},
        {S::Verl, "actor/distillation/loss_min", "distillation_loss_min", kDistillationLossMin},
        {S::Verl, "actor/distillation/loss_max", "distillation_loss_max", kDistillationLossMax},
        {S::Verl, "actor/distillation/abs_loss", "distillation_abs_loss", kDistillationAbsLoss},
        {S::Verl, "actor/pg_loss", "pg_loss", "verl's policy-gradient loss"},
        {S::Verl, "critic/score/mean", "reward", "mean sequence score of the reward function"},
        {S::Verl, "timing_s/step", "step_time_s", "seconds the step took"},
        // Tinker cookbook: rl/metrics.py compute_kl_sample_train, distillation/train_on_policy.py teacher_kl,
        // rl/metric_util.py compute_trajectory_metrics (env/all/...: the training batch's episodes; the held-out
        // evaluation's are a key pattern, <evaluator>/env/all/..., and the accuracy).
        {S::Tinker, "optim/kl_sample_train_v1", "k1", std::string(kK1Tinker) + kTinkerDrift},
        {S::Tinker, "optim/kl_sample_train_v2", "k2", std::string(kK2Tinker) + kTinkerDrift},
        {S::Tinker, "optim/entropy", "entropy",
            "sampled-token estimate of the sampler's entropy: mean of -log mu(y) over action tokens"},
        {S::Tinker, "teacher_kl", "teacher_kl", kTeacherKlTinker},
        {S::Tinker, "env/all/reward/total", "reward", "mean total reward of the training batch's episodes"},
        {S::Tinker, "env/all/correct", "train_accuracy",
            "fraction of the training batch's episodes the environment judged correct"},
        {S::Tinker, "time/total", "step_time_s", "seconds the step took"},
        // NeMo-RL's tensorboard logger (tags as its metrics dict names them).
        {S::TensorBoard, "train/token_mult_prob_error", "mult_prob_error", kMultProbError},
        {S::TensorBoard, "train/gen_kl_error", "gen_kl", kGenKl},
        {S::TensorBoard, "train/policy_kl_error", "policy_kl", kPolicyKl},
        {S::TensorBoard, "train/loss", "loss", "NeMo-RL's training loss"},
        {S::TensorBoard, "train/reward", "reward", "NeMo-RL's mean reward"},
        {S::TensorBoard, "train/js_divergence_error", "js_divergence", kJsDivergence},
        {S::TensorBoard, "train/approx_entropy", "entropy", kApproxEntropy},
        {S::TensorBoard, "train/sampling_importance_ratio", "is_weight_mean", kSamplingIsRatio},
        {S::TensorBoard, "train/is_oob_ratio", "is_fraction_outside", kIsOobNemo},
    };
}

std::optional<MapEntry> splitMapEntry(const std::string& entry)
{
    const auto equals = entry.rfind('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == entry.size()) {
        return std::nullopt;
    }
    return MapEntry{entry.substr(0, equals), entry.substr(equals + 1)};
}

} // namespace

namespace importing {

Mapping makeMapping(const std::string& key, const std::string& measureName, const std::string& estimator, bool user)
{
    Mapping mapping;
    mapping.key = key;
    mapping.userMapped = user;
    if (measureName.rfind("extra:", 0) == 0) {
        mapping.extraName = measureName.substr(6);
        mapping.estimator = estimator.empty() ? "as logged (mapped with --map)" : estimator;
        return mapping;
    }
    mapping.measure = findImportMeasure(measureName);
    if (!mapping.measure->column) {
        mapping.extraName = mapping.measure->name;
    }
    mapping.estimator = estimator.empty() ? mapping.measure->defaultEstimator + " (mapped with --map)" : estimator;
    if (estimator.empty()) {
        // A key of a pattern mapped to the pattern's own measure (--map val-core/openai/gsm8k/acc/mean@1=accuracy)
        // is what the pattern says it is.
        for (const KnownKeyPattern& pattern : allKeyPatterns()) {
            if (pattern.measure != measureName) {
                continue;
            }
            if (const std::optional<KeyPatternMatch> known = matchKeyPattern(pattern, key)) {
                mapping.estimator = known->estimator + " (mapped with --map)";
                break;
            }
        }
    }
    return mapping;
}

void setMeasure(store::StepMetrics& m, json& extras, const Mapping& mapping, double value)
{
    if (!mapping.extraName.empty()) {
        extras[mapping.extraName] = value;
        return;
    }
    const std::string& name = mapping.measure->name;
    if (name == "mismatch_kl") m.mismatchKl = value;
    else if (name == "k1") m.k1 = value;
    else if (name == "k3") m.k3 = value;
    else if (name == "loss") m.loss = value;
    else if (name == "reward") m.reward = value;
    else if (name == "accuracy") m.accuracy = value;
    else if (name == "entropy") m.entropy = value;
    else if (name == "staleness") m.staleness = static_cast<std::int64_t>(value);
    else if (name == "rollout_tokens_per_s") m.rolloutTokensPerSecond = value;
    else if (name == "train_tokens_per_s") m.trainTokensPerSecond = value;
    else if (name == "wall_time_s") m.wallTimeSeconds = value;
}

std::vector<MapEntry> parseMapEntries(const LogImportOptions& options)
{
    std::vector<MapEntry> entries;
    std::set<std::string> keys;
    std::map<std::string, std::string> measures;
    for (const auto& text : options.map) {
        const std::string problem = checkMapEntry(text);
        if (!problem.empty()) {
            throw InputError("--map", text, problem);
        }
        MapEntry entry = *splitMapEntry(text);
        if (!keys.insert(entry.key).second) {
            throw InputError("--map", text, "the column " + entry.key + " is mapped twice");
        }
        if (const auto previous = measures.find(entry.measure); previous != measures.end()) {
            throw InputError("--map", text, "the measure " + entry.measure + " is already mapped from "
                    + previous->second + "; a measure takes one column");
        }
        measures.emplace(entry.measure, entry.key);
        entries.push_back(std::move(entry));
    }
    return entries;
}

// Built-in mappings of a key-value source with the --map entries applied.
std::vector<Mapping> keyValueMappings(LogSource source, const std::vector<MapEntry>& entries)
{
    std::set<std::string> userMeasures;
    std::set<std::string> userKeys;
    std::vector<Mapping> mappings;
    for (const auto& entry : entries) {
        if (entry.measure == "step") {
            throw InputError("--map", entry.key + "=step",
                "only a CSV file takes a step column; " + toString(source) + " lines hold their step under \"step\"");
        }
        userMeasures.insert(entry.measure);
        userKeys.insert(entry.key);
        mappings.push_back(makeMapping(entry.key, entry.measure, "", true));
    }
    for (const auto& known : knownKeys(source)) {
        if (userMeasures.count(known.measure) || userKeys.count(known.key)) {
            continue;
        }
        mappings.push_back(makeMapping(known.key, known.measure, known.estimator, false));
    }
    return mappings;
}

} // namespace importing

std::string markNonFiniteTokens(const std::string& line)
{
    std::string out;
    out.reserve(line.size() + 16);
    bool inString = false;
    for (size_t i = 0; i < line.size(); ++i) {
        const char c = line[i];
        if (inString) {
            out += c;
            if (c == '\\' && i + 1 < line.size()) {
                out += line[++i];
            } else if (c == '"') {
                inString = false;
            }
            continue;
        }
        if (c == '"') {
            inString = true;
            out += c;
            continue;
        }
        bool replaced = false;
        for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
            const size_t n = std::char_traits<char>::length(token);
            if (line.compare(i, n, token) == 0) {
                out += "\"\\u0001";
                out += token;
                out += '"';
                i += n - 1;
                replaced = true;
                break;
            }
        }
        if (!replaced) {
            out += c;
        }
    }
    return out;
}

std::string toString(LogSource source)
{
    switch (source) {
    case LogSource::Verl: return "verl";
    case LogSource::Tinker: return "tinker";
    case LogSource::Csv: return "csv";
    case LogSource::TensorBoard: return "tensorboard";
    }
    return "csv";
}

const std::vector<LogSource>& logSources()
{
    static const std::vector<LogSource> sources = {LogSource::Verl, LogSource::Tinker, LogSource::Csv, LogSource::TensorBoard};
    return sources;
}

const std::vector<ImportMeasure>& importMeasures()
{
    static const std::vector<ImportMeasure> measures = buildMeasures();
    return measures;
}

const ImportMeasure* findImportMeasure(const std::string& name)
{
    for (const auto& measure : importMeasures()) {
        if (measure.name == name) {
            return &measure;
        }
    }
    return nullptr;
}

std::string checkMapEntry(const std::string& entry)
{
    const auto parts = splitMapEntry(entry);
    if (!parts) {
        return "expected COLUMN=MEASURE (e.g. rollout_corr/kl=k1)";
    }
    if (parts->measure.rfind("extra:", 0) == 0) {
        const std::string name = parts->measure.substr(6);
        if (name.empty() || name.find_first_of("\"\\") != std::string::npos) {
            return "extra:NAME needs a name without quotes or backslashes";
        }
        if (findImportMeasure(name)) {
            return "extra:" + name + " would hide the measure " + name + "; map to " + name + " itself";
        }
        return {};
    }
    if (!findImportMeasure(parts->measure)) {
        std::string names;
        for (const auto& measure : importMeasures()) {
            names += (names.empty() ? "" : ", ") + measure.name;
        }
        return "unknown measure '" + parts->measure + "' (expected one of " + names + ", or extra:NAME)";
    }
    return {};
}

std::vector<KnownKey> knownKeys(LogSource source)
{
    static const std::vector<KnownKey> all = buildKnownKeys();
    std::vector<KnownKey> keys;
    for (const auto& key : all) {
        // An event file may be verl's (its tensorboard logger writes the file logger's keys as tags) or NeMo-RL's.
        if (key.source == source || (source == LogSource::TensorBoard && key.source == LogSource::Verl)) {
            keys.push_back(key);
        }
    }
    return keys;
}

std::string ImportedLog::estimatorJson() const
{
    json record = json::object();
    for (const auto& metric : metrics) {
        record[metric.measure] = {{"key", metric.key}, {"estimator", metric.estimator}, {"unit", metric.unit},
            {"user_mapped", metric.userMapped}, {"steps", metric.steps}};
    }
    return record.dump();
}

std::string ImportedLog::runConfigJson(const std::string& absoluteFile, const std::vector<std::string>& map) const
{
    json config = {{"source", toString(source)}, {"file", absoluteFile}, {"map", map},
        {"estimators", json::parse(estimatorJson())},
        {"import", {{"lines_read", linesRead}, {"lines_skipped", skipped.size()}, {"lines_merged", linesMerged},
                       {"values_dropped", dropped.size()}, {"conflicts", conflicts.size()}}}};
    if (!notes.empty()) {
        config["import"]["notes"] = notes;
    }
    if (tinkerConfig) {
        config["tinker_config"] = json::parse(tinkerConfig->json());
    } else if (!tinkerConfigProblem.empty()) {
        config["tinker_config_problem"] = tinkerConfigProblem;
    }
    return config.dump();
}

ImportedLog importLog(LogSource source, const std::string& path, const LogImportOptions& options)
{
    if (source == LogSource::Csv) {
        return importCsv(path, options);
    }
    if (source == LogSource::TensorBoard) {
        return importTensorBoard(path, options);
    }
    return importJsonLines(source, path, options);
}

} // namespace mismatch::io

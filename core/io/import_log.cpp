// Log import: what every source shares. The measures a value can land in, the estimator texts and the table of
// known keys and key patterns of every source (one registry), --map entries and the mappings they make, setMeasure,
// the public functions of import_log.h and importLog's dispatch to the source's reader (import_log_internal.h lists
// the files).
#include "core/io/import_log.h"

#include "core/io/import_log_internal.h"

#include "core/common/error.h"

#include <nlohmann/json.hpp>

#include <cassert>
#include <map>
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

// NeMo-RL: nemo_rl/algorithms/loss_functions.py (ClippedPGLossFn) logs these per step as train/...: mu is the
// generation log-probability, pi the trainer's (prev_logprobs).
const char* kMultProbError = "token mean of exp(|log mu(y) - log pi(y)|) over response tokens (NeMo-RL's "
                             "token_mult_prob_error): 1 when engine and trainer agree; not a KL";
const char* kGenKl = "sampled-token estimate of KL(mu || pi), token mean, of the run's reference_policy_kl_type (k1, "
                     "k2 or k3; not in the log) (NeMo-RL's gen_kl_error)";
const char* kPolicyKl = "sampled-token estimate of KL(pi || mu), token mean, of the run's reference_policy_kl_type "
                        "(NeMo-RL's policy_kl_error): the reverse direction, not the mismatch KL(mu || pi)";

std::vector<ImportMeasure> buildMeasures()
{
    return {
        {"step", true, true, "training step", "the step number"},
        {"mismatch_kl", true, false, kNats, "full-vocabulary KL(mu || pi), token mean"},
        {"k1", true, false, kNats, "k1: mean of log mu(y) - log pi(y) over sampled tokens"},
        {"k3", true, false, kNats, "k3: mean of r - 1 - log r, r = pi(y) / mu(y), over sampled tokens"},
        {"loss", true, false, "as logged", "training loss"},
        {"reward", true, false, "as logged", "mean reward"},
        {"accuracy", true, false, "fraction", "fraction correct"},
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
        {S::Verl, "rollout_corr/rollout_is_mean", "is_weight_mean", kIsWeightMean},
        {S::Verl, "rollout_corr/rollout_is_max", "is_weight_max", kIsWeightMax},
        {S::Verl, "rollout_corr/rollout_is_min", "is_weight_min", kIsWeightMin},
        {S::Verl, "rollout_corr/rollout_is_ratio_fraction_high", "is_fraction_high", kIsFractionHigh},
        {S::Verl, "rollout_corr/rollout_is_ratio_fraction_low", "is_fraction_low", kIsFractionLow},
        {S::Verl, "training/rollout_probs_diff_mean", "prob_diff_mean", std::string("mean ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_max", "prob_diff_max", std::string("max ") + kProbDiff},
        {S::Verl, "training/rollout_probs_diff_std", "prob_diff_std", std::string("standard deviation of ") + kProbDiff},
        {S::Verl, "training/rollout_actor_probs_pearson_corr", "prob_pearson_corr",
            "Pearson correlation of mu(y) and pi(y) over response tokens: not a KL"},
        {S::Verl, "actor/entropy", "entropy", "token mean entropy of the trainer's next-token distribution"},
        // verl/trainer/distillation/losses.py distillation_ppo_loss logs the distillation loss as
        // "distillation/loss" among the actor's update metrics, which reach the logger as actor/distillation/loss.
        {S::Verl, "actor/distillation/loss", "loss",
            "verl's distillation loss (its estimator is the run's distillation loss_mode, not in the log)"},
        {S::Verl, "actor/pg_loss", "pg_loss", "verl's policy-gradient loss"},
        {S::Verl, "critic/score/mean", "reward", "mean sequence score of the reward function"},
        {S::Verl, "timing_s/step", "step_time_s", "seconds the step took"},
        // Tinker cookbook: rl/metrics.py compute_kl_sample_train, distillation/train_on_policy.py teacher_kl,
        // rl metric_util env metrics.
        {S::Tinker, "optim/kl_sample_train_v1", "k1", std::string(kK1Tinker) + kTinkerDrift},
        {S::Tinker, "optim/kl_sample_train_v2", "k2", std::string(kK2Tinker) + kTinkerDrift},
        {S::Tinker, "optim/entropy", "entropy",
            "sampled-token estimate of the sampler's entropy: mean of -log mu(y) over action tokens"},
        {S::Tinker, "teacher_kl", "teacher_kl", kTeacherKlTinker},
        {S::Tinker, "env/all/reward/total", "reward", "mean total episode reward"},
        {S::Tinker, "env/all/correct", "accuracy", "fraction of episodes the environment judged correct"},
        {S::Tinker, "time/total", "step_time_s", "seconds the step took"},
        // NeMo-RL's tensorboard logger (tags as its metrics dict names them).
        {S::TensorBoard, "train/token_mult_prob_error", "mult_prob_error", kMultProbError},
        {S::TensorBoard, "train/gen_kl_error", "gen_kl", kGenKl},
        {S::TensorBoard, "train/policy_kl_error", "policy_kl", kPolicyKl},
        {S::TensorBoard, "train/loss", "loss", "NeMo-RL's training loss"},
        {S::TensorBoard, "train/reward", "reward", "NeMo-RL's mean reward"},
    };
}

// verl: verl/trainer/ppo/ray_trainer.py RayPPOTrainer._val_metrics_update logs the validation metrics of
// verl/trainer/ppo/metric_utils.py process_validation_metrics as "val-core/<data_source>/<var_name>/<metric_name>"
// for the core variable ("acc" when the reward function returns it, else "reward") and the metrics mean@N, maj@N/*
// and best@N/* at the largest N, "val-aux/..." for the rest. mean@N is, per data source, the mean over problems of
// each problem's mean over its N responses (N = actor_rollout_ref.rollout.val_kwargs.n). The data source is the
// dataset's data_source field and may hold slashes (examples/data_preprocess/gsm8k.py: "openai/gsm8k").
std::vector<KnownKeyPattern> buildKeyPatterns()
{
    return {
        {LogSource::Verl, "val-core/<data source>/acc/mean@<N>", "accuracy",
            "verl validation accuracy: mean over the <N> responses per problem of <data source>'s acc, then over "
            "its problems (acc as the reward function returns it)"},
    };
}

const std::vector<KnownKeyPattern>& allKeyPatterns()
{
    static const std::vector<KnownKeyPattern> patterns = buildKeyPatterns();
    return patterns;
}

void replaceAll(std::string& text, const std::string& from, const std::string& to)
{
    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
        text.replace(at, from.size(), to);
    }
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
            if (const std::string known = matchKeyPattern(pattern, key); pattern.measure == measureName && !known.empty()) {
                mapping.estimator = known + " (mapped with --map)";
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

std::vector<Mapping> patternMappings(LogSource source, const std::vector<std::string>& loggedKeys,
    const std::set<std::string>& mappedKeys, const std::set<std::string>& takenMeasures,
    const std::string& estimatorSuffix, std::vector<std::string>& notes)
{
    std::vector<Mapping> mappings;
    for (const KnownKeyPattern& pattern : knownKeyPatterns(source)) {
        if (takenMeasures.count(pattern.measure)) {
            continue; // --map (or a key of the built-in table) already fills the measure
        }
        std::vector<std::pair<std::string, std::string>> matches; // key, estimator
        for (const std::string& key : loggedKeys) {
            if (std::string estimator = matchKeyPattern(pattern, key); !estimator.empty()) {
                matches.emplace_back(key, std::move(estimator));
            }
        }
        if (matches.size() == 1 && !mappedKeys.count(matches[0].first)) {
            mappings.push_back(makeMapping(matches[0].first, pattern.measure, matches[0].second + estimatorSuffix, false));
        } else if (matches.size() > 1) {
            std::string keys;
            std::string proposed; // the first key that --map does not read already
            for (const auto& match : matches) {
                keys += (keys.empty() ? "" : ", ") + match.first;
                if (proposed.empty() && !mappedKeys.count(match.first)) {
                    proposed = match.first;
                }
            }
            notes.push_back(pattern.measure + " not read: " + std::to_string(matches.size()) + " logged keys match "
                + pattern.key + " (" + keys + "), and a measure takes one key; pick one with --map "
                + (proposed.empty() ? matches[0].first : proposed) + "=" + pattern.measure);
        }
    }
    return mappings;
}

void addPatternMappings(LogSource source, const std::set<std::string>& loggedKeys, std::vector<Mapping>& mappings,
    std::vector<std::string>& notes)
{
    std::set<std::string> mappedKeys;
    std::set<std::string> takenMeasures;
    for (const Mapping& mapping : mappings) {
        mappedKeys.insert(mapping.key);
        if (mapping.userMapped || loggedKeys.count(mapping.key)) {
            takenMeasures.insert(mapping.measureName());
        }
    }
    const std::vector<std::string> logged(loggedKeys.begin(), loggedKeys.end());
    for (Mapping& mapping : patternMappings(source, logged, mappedKeys, takenMeasures, "", notes)) {
        mappings.push_back(std::move(mapping));
    }
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

std::vector<KnownKeyPattern> knownKeyPatterns(LogSource source)
{
    std::vector<KnownKeyPattern> patterns;
    for (const auto& pattern : allKeyPatterns()) {
        // As knownKeys: an event file may be verl's; a CSV export of a verl run has verl's keys as its header.
        if (pattern.source == source
            || (pattern.source == LogSource::Verl && (source == LogSource::TensorBoard || source == LogSource::Csv))) {
            patterns.push_back(pattern);
        }
    }
    return patterns;
}

std::string matchKeyPattern(const KnownKeyPattern& pattern, const std::string& key)
{
    // The patterns have the shape PREFIX<data source>MIDDLE<N>: the source is any non-empty text (verl's data
    // sources hold slashes), N one or more digits at the end.
    static const std::string source = "<data source>";
    static const std::string count = "<N>";
    const auto sourceAt = pattern.key.find(source);
    assert(sourceAt != std::string::npos && pattern.key.size() >= count.size()
        && pattern.key.compare(pattern.key.size() - count.size(), count.size(), count) == 0); // the table's shape
    const std::string prefix = pattern.key.substr(0, sourceAt);
    const std::string middle
        = pattern.key.substr(sourceAt + source.size(), pattern.key.size() - count.size() - sourceAt - source.size());
    const auto digits = key.find_last_not_of("0123456789") + 1; // 0 when the key is all digits
    if (digits == key.size() || key.compare(0, prefix.size(), prefix) != 0
        || digits < prefix.size() + middle.size() + 1 || key.compare(digits - middle.size(), middle.size(), middle) != 0) {
        return {};
    }
    std::string estimator = pattern.estimator;
    replaceAll(estimator, count, key.substr(digits)); // first: a data source's name may hold "<N>"
    replaceAll(estimator, source, key.substr(prefix.size(), digits - middle.size() - prefix.size()));
    return estimator;
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

#include "core/io/import_log.h"

#include "core/io/tensorboard_events.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

namespace mismatch::io {

namespace {

using nlohmann::json;

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
// rho = pi(y) / mu(y) at the configured level (token, sequence or geometric), after truncation for the mean.
const char* kIsWeightMean = "mean importance weight pi(y) / mu(y) over response tokens after truncation, at the run's "
                            "rollout_is level (token or sequence; not in the log): 1 when engine and trainer agree";
const char* kIsWeightMax = "largest importance weight pi(y) / mu(y) (before truncation; its log clamped at 20)";
const char* kIsWeightMin = "smallest importance weight pi(y) / mu(y)";
const char* kIsFractionHigh = "fraction of importance weights above the run's rollout_is_threshold";
const char* kIsFractionLow = "fraction of importance weights below 1 / rollout_is_threshold";

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

std::string trim(const std::string& text)
{
    const auto begin = text.find_first_not_of(" \t\r\n");
    if (begin == std::string::npos) {
        return {};
    }
    const auto end = text.find_last_not_of(" \t\r\n");
    return text.substr(begin, end - begin + 1);
}

// Where a value read from a line lands.
struct Mapping {
    std::string key;
    const ImportMeasure* measure = nullptr; // nullptr: extra:NAME
    std::string extraName; // the extrasJson key when the measure is not a column
    std::string estimator;
    bool userMapped = false;
    std::int64_t steps = 0;

    std::string measureName() const { return measure ? measure->name : "extra:" + extraName; }
};

struct MapEntry {
    std::string key;
    std::string measure;
};

std::optional<MapEntry> splitMapEntry(const std::string& entry)
{
    const auto equals = entry.rfind('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == entry.size()) {
        return std::nullopt;
    }
    return MapEntry{entry.substr(0, equals), entry.substr(equals + 1)};
}

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
    return mapping;
}

// The value of one key on one line.
struct Value {
    enum Kind { Missing, Null, Number, NonFinite, NotNumber } kind = Missing; // Missing: an empty CSV field
    double number = 0.0;
    std::string text; // NonFinite: the literal; NotNumber: what it is
};

Value jsonValue(const json& value)
{
    Value v;
    if (value.is_null()) {
        v.kind = Value::Null; // verl's file logger (orjson) writes NaN and infinities as null; Python's None too
        return v;
    }
    if (value.is_number()) {
        v.kind = Value::Number;
        v.number = value.get<double>();
        return v;
    }
    if (value.is_string()) {
        const auto& s = value.get_ref<const std::string&>();
        if (!s.empty() && s[0] == kNonFiniteMark) {
            v.kind = Value::NonFinite;
            v.text = s.substr(1);
            return v;
        }
        v.kind = Value::NotNumber;
        v.text = "the string " + json(s).dump();
        return v;
    }
    v.kind = Value::NotNumber;
    v.text = value.is_boolean() ? "the boolean " + value.dump() : std::string("a JSON ") + value.type_name();
    return v;
}

} // namespace

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

namespace {

// The step of a line, or the reason it has none.
std::optional<std::int64_t> stepValue(const Value& value, std::string& reason)
{
    switch (value.kind) {
    case Value::Missing: reason = "the step is empty"; return std::nullopt;
    case Value::Null: reason = "the step is null"; return std::nullopt;
    case Value::NonFinite: reason = "the step is " + value.text; return std::nullopt;
    case Value::NotNumber: reason = "the step is " + value.text + ", expected a non-negative integer"; return std::nullopt;
    case Value::Number: break;
    }
    if (value.number < 0 || value.number != std::floor(value.number) || value.number > 9.0e15) {
        std::ostringstream text;
        text << "the step " << value.number << " is not a non-negative integer";
        reason = text.str();
        return std::nullopt;
    }
    return static_cast<std::int64_t>(value.number);
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

std::string joinKeys(const std::vector<std::string>& keys, size_t limit = 6)
{
    std::string text;
    for (size_t i = 0; i < keys.size() && i < limit; ++i) {
        text += (i ? ", " : "") + keys[i];
    }
    if (keys.size() > limit) {
        text += ", ... (" + std::to_string(keys.size()) + " keys)";
    }
    return text;
}

// Why a mapped value cannot be used ("" when it can); `value` is not Missing.
std::string unusableReason(LogSource source, const Mapping& mapping, const Value& value)
{
    switch (value.kind) {
    case Value::Missing: return {};
    case Value::Null:
        return source == LogSource::Verl
            ? "is null (verl's file logger writes NaN and infinities as null), expected a finite number"
            : "is null, expected a number";
    case Value::NonFinite: return "is " + value.text + ", not a finite number";
    case Value::NotNumber: return "is " + value.text + ", expected a number";
    case Value::Number: break;
    }
    // Integer measures are stored as 64-bit integers: whole numbers within +-9e15 (exact in a double).
    if (mapping.measure && mapping.measure->integer
        && (value.number != std::floor(value.number) || std::fabs(value.number) > 9.0e15)) {
        std::ostringstream text;
        text << "is " << value.number << ", expected an integer (" << mapping.measure->name << ")";
        return text.str();
    }
    return {};
}

class LogReader {
public:
    LogReader(LogSource source, std::string path) : source_(source), path_(std::move(path))
    {
        result_.file = path_;
        result_.source = source;
    }

    ImportedLog& result() { return result_; }
    const std::string& path() const { return path_; }

    // Mappings for key-value sources (verl, Tinker): the built-in table, where --map replaces the built-in source
    // of a measure and adds its own keys.
    void setMappings(std::vector<Mapping> mappings)
    {
        mappings_ = std::move(mappings);
        byKey_.clear();
        for (size_t i = 0; i < mappings_.size(); ++i) {
            byKey_[mappings_[i].key] = i;
        }
    }
    std::vector<Mapping>& mappings() { return mappings_; }

    void skip(std::int64_t line, std::string reason) { result_.skipped.push_back({line, std::move(reason)}); }

    // Reads one record (its step value and key -> value pairs) into its step, merging it with earlier lines of
    // the same step, or reports why it cannot be used.
    void record(std::int64_t line, const Value& stepRaw, const std::vector<std::pair<std::string, Value>>& values)
    {
        std::string reason;
        const auto step = stepValue(stepRaw, reason);
        if (!step) {
            skip(line, reason);
            return;
        }
        std::vector<std::pair<size_t, double>> usable; // mapping index, value
        std::vector<DroppedValue> dropped;
        std::vector<std::string> unmappedHere;
        for (const auto& [key, value] : values) {
            const auto found = byKey_.find(key);
            if (found == byKey_.end()) {
                unmappedHere.push_back(key);
                continue;
            }
            if (value.kind == Value::Missing) {
                continue; // an empty CSV field: no value at this step
            }
            const std::string why = unusableReason(source_, mappings_[found->second], value);
            if (!why.empty()) {
                dropped.push_back({line, key, why});
                continue;
            }
            usable.emplace_back(found->second, value.number);
        }
        if (usable.empty()) {
            if (!dropped.empty()) {
                std::string text;
                for (const auto& d : dropped) {
                    text += (text.empty() ? "" : "; ") + d.key + " " + d.reason;
                }
                skip(line, text + " (no usable mapped value on this line)");
            } else {
                skip(line, unmappedHere.empty() ? std::string("no metric values on this line")
                                                : "no mapped metric on this line (keys: " + joinKeys(unmappedHere)
                                                      + "; map one with --map KEY=MEASURE)");
            }
            return;
        }
        for (auto& d : dropped) {
            result_.dropped.push_back(std::move(d));
        }
        for (const auto& key : unmappedHere) {
            unmapped_.insert(key);
        }
        auto [position, fresh] = stepIndex_.emplace(*step, steps_.size());
        if (fresh) {
            steps_.push_back({*step, {}});
        } else {
            ++result_.linesMerged;
        }
        auto& stepValues = steps_[position->second].values;
        for (const auto& [index, number] : usable) {
            const auto previous = stepValues.find(index);
            if (previous != stepValues.end() && previous->second.first != number) {
                result_.conflicts.push_back(
                    {*step, mappings_[index].key, previous->second.second, previous->second.first, line, number});
            }
            stepValues[index] = {number, line}; // a later line wins
        }
    }

    ImportedLog finish()
    {
        if (steps_.empty()) {
            std::string detail = "no usable line (" + std::to_string(result_.linesRead) + " data lines read";
            if (!result_.skipped.empty()) {
                detail += "; first skipped: ";
                for (size_t i = 0; i < result_.skipped.size() && i < 3; ++i) {
                    detail += (i ? "; " : "") + std::string("line ") + std::to_string(result_.skipped[i].line) + ": "
                        + result_.skipped[i].reason;
                }
            }
            throw InputError(path_, "", detail + ")");
        }
        for (const auto& pending : steps_) {
            store::StepMetrics metrics;
            metrics.step = pending.step;
            json extras = json::object();
            for (const auto& [index, value] : pending.values) {
                setMeasure(metrics, extras, mappings_[index], value.first);
                ++mappings_[index].steps;
            }
            metrics.extrasJson = extras.dump();
            result_.steps.push_back(std::move(metrics));
        }
        for (const auto& mapping : mappings_) {
            if (mapping.steps == 0 && !mapping.userMapped) {
                continue;
            }
            MappedMetric metric;
            metric.key = mapping.key;
            metric.measure = mapping.measureName();
            metric.estimator = mapping.estimator;
            metric.unit = mapping.measure ? mapping.measure->unit : "as logged";
            metric.userMapped = mapping.userMapped;
            metric.steps = mapping.steps;
            result_.metrics.push_back(std::move(metric));
        }
        result_.unmappedKeys.assign(unmapped_.begin(), unmapped_.end());
        return std::move(result_);
    }

private:
    // One step's values so far: mapping index -> (value, line it came from).
    struct PendingStep {
        std::int64_t step = 0;
        std::map<size_t, std::pair<double, std::int64_t>> values;
    };

    LogSource source_;
    std::string path_;
    ImportedLog result_;
    std::vector<Mapping> mappings_;
    std::unordered_map<std::string, size_t> byKey_;
    std::vector<PendingStep> steps_; // in order of first appearance
    std::map<std::int64_t, size_t> stepIndex_;
    std::set<std::string> unmapped_;
};

std::string readWholeFile(const std::string& path)
{
    std::string content = readInputFile(path, limits::kImportFile, "log file");
    if (content.compare(0, 3, "\xEF\xBB\xBF") == 0) {
        content.erase(0, 3); // UTF-8 byte order mark
    }
    return content;
}

std::vector<std::string> splitLines(const std::string& content)
{
    std::vector<std::string> lines;
    size_t start = 0;
    while (start <= content.size()) {
        const auto end = content.find('\n', start);
        std::string line = content.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!line.empty() && line.back() == '\r') {
            line.pop_back();
        }
        lines.push_back(std::move(line));
        if (end == std::string::npos) {
            break;
        }
        start = end + 1;
    }
    return lines;
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

// A whole number in a JSON value (Python writes ints without a fraction), or nullopt.
std::optional<std::int64_t> jsonWholeNumber(const json& value)
{
    if (value.is_number_integer()) {
        return value.get<std::int64_t>();
    }
    return std::nullopt;
}

std::string describeJson(const json& value)
{
    if (value.is_string()) {
        const auto& text = value.get_ref<const std::string&>();
        return !text.empty() && text[0] == kNonFiniteMark ? text.substr(1) : "the string " + value.dump();
    }
    return value.is_number() || value.is_boolean() ? value.dump() : std::string("a JSON ") + value.type_name();
}

// Tinker's config.json beside `logPath` (tinker_cookbook/utils/ml_log.py JsonLogger.log_hparams writes the run's
// Config there; rl/train.py Config has num_substeps and async_config {max_steps_off_policy, groups_per_batch,
// pipeline_depth}). Missing: nothing recorded. A file that cannot be used: the located reason in `problem`.
std::optional<TinkerRunConfig> readTinkerConfig(const std::string& logPath, std::string& problem)
{
    const std::string path = (std::filesystem::path(logPath).parent_path() / "config.json").string();
    if (pathKind(path) == PathKind::Missing) {
        return std::nullopt;
    }
    try {
        const std::string text = readInputFile(path, limits::kConfigFile, "Tinker config.json");
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            throw InputError(path, lineColumnOf(text.data(), text.data() + text.size(), deep), nestingTooDeepDetail());
        }
        json config;
        const std::string marked = markNonFiniteTokens(text); // Python's json writes NaN and Infinity bare
        try {
            config = json::parse(marked);
        } catch (const json::parse_error& error) {
            // error.byte counts the characters read, the offending one included (lines are the same in `marked`).
            const std::size_t at = std::min<std::size_t>(error.byte > 0 ? error.byte - 1 : 0, marked.size());
            throw InputError(path, lineColumnOf(marked.data(), marked.data() + marked.size(), at), "bad JSON");
        } catch (const json::exception& error) {
            throw InputError(path, "", std::string("bad JSON: ") + error.what());
        }
        if (!config.is_object()) {
            throw InputError(path, "", std::string("expected a JSON object, got a JSON ") + config.type_name());
        }
        TinkerRunConfig run;
        run.file = path;
        if (const auto substeps = config.find("num_substeps"); substeps != config.end()) {
            const auto value = jsonWholeNumber(*substeps);
            if (!value || *value < 1) {
                throw InputError(path, "num_substeps", "is " + describeJson(*substeps) + ", expected a whole number of 1 or more");
            }
            run.numSubsteps = value;
        }
        if (const auto async = config.find("async_config"); async != config.end()) {
            run.asyncRecorded = true;
            if (!async->is_null()) {
                if (!async->is_object()) {
                    throw InputError(path, "async_config", "is " + describeJson(*async) + ", expected null or an object");
                }
                const auto field = [&](const char* name, std::int64_t minimum, bool nullable) -> std::optional<std::int64_t> {
                    const auto found = async->find(name);
                    if (found == async->end() || (nullable && found->is_null())) {
                        if (nullable) {
                            return std::nullopt;
                        }
                        throw InputError(path, std::string("async_config.") + name, "is missing");
                    }
                    const auto value = jsonWholeNumber(*found);
                    if (!value || *value < minimum) {
                        throw InputError(path, std::string("async_config.") + name, "is " + describeJson(*found)
                                + ", expected a whole number of " + std::to_string(minimum) + " or more");
                    }
                    return value;
                };
                run.maxStepsOffPolicy = field("max_steps_off_policy", 0, false);
                run.groupsPerBatch = field("groups_per_batch", 1, false);
                run.pipelineDepth = field("pipeline_depth", 0, true);
            }
        }
        return run;
    } catch (const InputError& error) {
        problem = error.what();
        return std::nullopt;
    }
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

ImportedLog importJsonLines(LogSource source, const std::string& path, const LogImportOptions& options)
{
    LogReader reader(source, path);
    reader.setMappings(keyValueMappings(source, parseMapEntries(options)));
    const auto lines = splitLines(readWholeFile(path));
    for (size_t index = 0; index < lines.size(); ++index) {
        const auto lineNumber = static_cast<std::int64_t>(index + 1);
        const std::string text = trim(lines[index]);
        if (text.empty()) {
            continue;
        }
        ++reader.result().linesRead;
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            reader.skip(lineNumber, "column " + std::to_string(deep + 1) + ": " + nestingTooDeepDetail());
            continue;
        }
        json object;
        try {
            object = json::parse(markNonFiniteTokens(text));
        } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
            std::string what = error.what();
            // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
            const auto colon = what.find("column");
            reader.skip(lineNumber, "bad JSON (" + (colon == std::string::npos ? what : what.substr(colon)) + ")");
            continue;
        }
        if (!object.is_object()) {
            reader.skip(lineNumber, std::string("expected a JSON object, got a JSON ") + object.type_name());
            continue;
        }
        const auto step = object.find("step");
        if (step == object.end()) {
            reader.skip(lineNumber, "no \"step\" key");
            continue;
        }
        std::vector<std::pair<std::string, Value>> values;
        if (source == LogSource::Verl) {
            // verl's file logger: {"step": N, "data": {"key": value, ...}}
            const auto data = object.find("data");
            if (data == object.end()) {
                reader.skip(lineNumber, "no \"data\" object (verl file logger lines are {\"step\": N, \"data\": {...}})");
                continue;
            }
            if (!data->is_object()) {
                reader.skip(lineNumber, std::string("\"data\" is a JSON ") + data->type_name() + ", expected an object");
                continue;
            }
            for (const auto& [key, value] : data->items()) {
                values.emplace_back(key, jsonValue(value));
            }
        } else {
            // Tinker's metrics.jsonl: {"step": N, "key": value, ...}
            for (const auto& [key, value] : object.items()) {
                if (key != "step") {
                    values.emplace_back(key, jsonValue(value));
                }
            }
        }
        reader.record(lineNumber, jsonValue(*step), values);
    }
    ImportedLog log = reader.finish();
    if (source == LogSource::Tinker) {
        log.tinkerConfig = readTinkerConfig(path, log.tinkerConfigProblem);
    }
    if (log.tinkerConfig && (log.tinkerConfig->numSubsteps || log.tinkerConfig->asyncRecorded)) {
        // What this run's config.json says about the policy drift in kl_sample_train_*.
        const TinkerRunConfig& config = *log.tinkerConfig;
        std::string settings = config.numSubsteps ? "num_substeps " + std::to_string(*config.numSubsteps) : "";
        if (config.asyncRecorded) {
            settings += std::string(settings.empty() ? "" : ", ")
                + (config.maxStepsOffPolicy ? "async max_steps_off_policy " + std::to_string(*config.maxStepsOffPolicy)
                                            : std::string("synchronous"));
        }
        for (auto& metric : log.metrics) {
            if (metric.key.rfind("optim/kl_sample_train_", 0) == 0) {
                metric.estimator += " (this run's config.json: " + settings
                    + (config.includesPolicyDrift() ? ": includes policy drift)" : ": no policy drift recorded)");
            }
        }
    }
    return log;
}

// Splits one CSV record (RFC 4180 quoting; a record does not span lines). Returns false with `problem` set on an
// unterminated or misplaced quote.
bool splitCsv(const std::string& line, std::vector<std::string>& fields, std::string& problem)
{
    fields.clear();
    std::string field;
    size_t i = 0;
    while (true) {
        field.clear();
        if (i < line.size() && line[i] == '"') {
            ++i;
            bool closed = false;
            while (i < line.size()) {
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') {
                        field += '"';
                        i += 2;
                        continue;
                    }
                    closed = true;
                    ++i;
                    break;
                }
                field += line[i++];
            }
            if (!closed) {
                problem = "unterminated quoted field (column " + std::to_string(fields.size() + 1) + ")";
                return false;
            }
            if (i < line.size() && line[i] != ',') {
                problem = "text after a closing quote in column " + std::to_string(fields.size() + 1);
                return false;
            }
        } else {
            while (i < line.size() && line[i] != ',') {
                field += line[i++];
            }
        }
        fields.push_back(field);
        if (i >= line.size()) {
            return true;
        }
        ++i; // the comma
    }
}

Value csvValue(const std::string& raw)
{
    Value v;
    const std::string text = trim(raw);
    if (text.empty()) {
        return v;
    }
    errno = 0;
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) {
        v.kind = Value::NotNumber;
        v.text = "\"" + text + "\"";
        return v;
    }
    if (!std::isfinite(number)) {
        v.kind = Value::NonFinite;
        v.text = text;
        return v;
    }
    v.kind = Value::Number;
    v.number = number;
    return v;
}

ImportedLog importCsv(const std::string& path, const LogImportOptions& options)
{
    LogReader reader(LogSource::Csv, path);
    const auto entries = parseMapEntries(options);
    const auto lines = splitLines(readWholeFile(path));
    size_t headerIndex = 0;
    while (headerIndex < lines.size() && trim(lines[headerIndex]).empty()) {
        ++headerIndex;
    }
    if (headerIndex == lines.size()) {
        throw InputError(path, "", "is empty; expected a header row naming the columns (one of them `step`)");
    }
    std::vector<std::string> header;
    std::string problem;
    if (!splitCsv(lines[headerIndex], header, problem)) {
        throw InputError(path, "line " + std::to_string(headerIndex + 1), "bad header row: " + problem);
    }
    for (auto& name : header) {
        name = trim(name);
    }
    std::map<std::string, size_t> columnOf;
    for (size_t c = 0; c < header.size(); ++c) {
        if (header[c].empty()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "column " + std::to_string(c + 1) + " of the header has no name");
        }
        if (!columnOf.emplace(header[c], c).second) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1), "the column " + header[c] + " appears twice");
        }
    }
    std::string headerList;
    for (const auto& name : header) {
        headerList += (headerList.empty() ? "" : ", ") + name;
    }

    // The step column: --map COLUMN=step, else `step`, `_step` or `Step` (Weights & Biases exports).
    std::optional<size_t> stepColumn;
    std::vector<Mapping> mappings(header.size());
    std::vector<bool> mapped(header.size(), false);
    std::set<std::string> userMeasures;
    for (const auto& entry : entries) {
        const auto found = columnOf.find(entry.key);
        if (found == columnOf.end()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "--map names the column " + entry.key + ", which the header does not have (columns: " + headerList + ")");
        }
        userMeasures.insert(entry.measure);
        if (entry.measure == "step") {
            stepColumn = found->second;
            continue;
        }
        mappings[found->second] = makeMapping(entry.key, entry.measure, "", true);
        mapped[found->second] = true;
    }
    if (!stepColumn) {
        for (const char* name : {"step", "_step", "Step"}) {
            if (const auto found = columnOf.find(name); found != columnOf.end() && !mapped[found->second]) {
                stepColumn = found->second;
                break;
            }
        }
    }
    if (!stepColumn) {
        throw InputError(path, "line " + std::to_string(headerIndex + 1),
            "no step column (expected a column named step, or --map COLUMN=step; columns: " + headerList + ")");
    }
    // Other columns: a verl or Tinker key, or a measure's own name, unless --map took that measure.
    std::map<std::string, std::string> autoMeasureColumn;
    std::vector<KnownKey> known = knownKeys(LogSource::Verl);
    const auto tinker = knownKeys(LogSource::Tinker);
    known.insert(known.end(), tinker.begin(), tinker.end());
    for (size_t c = 0; c < header.size(); ++c) {
        if (c == *stepColumn || mapped[c]) {
            continue;
        }
        std::optional<Mapping> candidate;
        for (const auto& k : known) {
            if (k.key == header[c]) {
                candidate = makeMapping(header[c], k.measure, k.estimator + " (" + toString(k.source) + " key)", false);
                break;
            }
        }
        if (!candidate) {
            const ImportMeasure* measure = findImportMeasure(header[c]);
            if (measure && measure->name != "step") {
                candidate = makeMapping(header[c], measure->name, measure->defaultEstimator + " (by column name)", false);
            }
        }
        if (!candidate || userMeasures.count(candidate->measureName())) {
            continue;
        }
        const std::string measure = candidate->measureName();
        if (const auto previous = autoMeasureColumn.find(measure); previous != autoMeasureColumn.end()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "the columns " + previous->second + " and " + header[c] + " both map to " + measure
                    + "; choose with --map (e.g. --map '" + header[c] + "=extra:" + header[c] + "')");
        }
        autoMeasureColumn.emplace(measure, header[c]);
        mappings[c] = std::move(*candidate);
        mapped[c] = true;
    }
    std::vector<Mapping> used;
    for (size_t c = 0; c < header.size(); ++c) {
        if (mapped[c]) {
            used.push_back(mappings[c]);
        }
    }
    reader.setMappings(used);

    std::vector<std::string> fields;
    for (size_t index = headerIndex + 1; index < lines.size(); ++index) {
        const auto lineNumber = static_cast<std::int64_t>(index + 1);
        if (trim(lines[index]).empty()) {
            continue;
        }
        ++reader.result().linesRead;
        if (!splitCsv(lines[index], fields, problem)) {
            reader.skip(lineNumber, problem);
            continue;
        }
        if (fields.size() != header.size()) {
            reader.skip(lineNumber, std::to_string(fields.size()) + " fields, expected " + std::to_string(header.size())
                    + " (the header's columns)");
            continue;
        }
        std::vector<std::pair<std::string, Value>> values;
        for (size_t c = 0; c < header.size(); ++c) {
            if (c != *stepColumn) {
                values.emplace_back(header[c], csvValue(fields[c]));
            }
        }
        Value step = csvValue(fields[*stepColumn]);
        if (step.kind == Value::Missing) {
            reader.skip(lineNumber, "the step column " + header[*stepColumn] + " is empty");
            continue;
        }
        reader.record(lineNumber, step, values);
    }
    return reader.finish();
}

} // namespace

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

bool TinkerRunConfig::includesPolicyDrift() const
{
    return (numSubsteps && *numSubsteps > 1) || (maxStepsOffPolicy && *maxStepsOffPolicy > 0);
}

std::string TinkerRunConfig::json() const
{
    nlohmann::json record = nlohmann::json::object();
    record["file"] = file;
    record["num_substeps"] = numSubsteps ? nlohmann::json(*numSubsteps) : nlohmann::json(nullptr);
    if (!asyncRecorded) {
        record["async_config"] = "not in config.json";
    } else if (!maxStepsOffPolicy) {
        record["async_config"] = nullptr; // synchronous training
    } else {
        record["async_config"] = {{"max_steps_off_policy", *maxStepsOffPolicy}, {"groups_per_batch", *groupsPerBatch},
            {"pipeline_depth", pipelineDepth ? nlohmann::json(*pipelineDepth) : nlohmann::json(nullptr)}};
    }
    record["kl_sample_train_includes_policy_drift"] = includesPolicyDrift();
    return record.dump();
}

std::string ImportedLog::runConfigJson(const std::string& absoluteFile, const std::vector<std::string>& map) const
{
    json config = {{"source", toString(source)}, {"file", absoluteFile}, {"map", map},
        {"estimators", json::parse(estimatorJson())},
        {"import", {{"lines_read", linesRead}, {"lines_skipped", skipped.size()}, {"lines_merged", linesMerged},
                       {"values_dropped", dropped.size()}, {"conflicts", conflicts.size()}}}};
    if (tinkerConfig) {
        config["tinker_config"] = json::parse(tinkerConfig->json());
    } else if (!tinkerConfigProblem.empty()) {
        config["tinker_config_problem"] = tinkerConfigProblem;
    }
    return config.dump();
}

// An event file: each record's scalars are one "line" (its record number), the step its Event's step.
ImportedLog importTensorBoard(const std::string& path, const LogImportOptions& options)
{
    LogReader reader(LogSource::TensorBoard, path);
    reader.setMappings(keyValueMappings(LogSource::TensorBoard, parseMapEntries(options)));
    const TensorBoardEvents events = parseTensorBoardEvents(readInputFile(path, limits::kImportFile, "event file"));
    std::size_t problem = 0;
    const auto reportProblemsBefore = [&](std::int64_t record) {
        for (; problem < events.problems.size() && events.problems[problem].record <= record; ++problem) {
            const TensorBoardProblem& p = events.problems[problem];
            reader.skip(p.record, "byte " + std::to_string(p.offset) + ": " + p.reason);
        }
    };
    for (std::size_t i = 0; i < events.scalars.size();) {
        const std::int64_t record = events.scalars[i].record;
        reportProblemsBefore(record);
        Value step;
        step.kind = Value::Number;
        step.number = static_cast<double>(events.scalars[i].step);
        std::vector<std::pair<std::string, Value>> values;
        for (; i < events.scalars.size() && events.scalars[i].record == record; ++i) {
            Value value;
            value.number = events.scalars[i].value;
            value.kind = std::isfinite(value.number) ? Value::Number : Value::NonFinite;
            if (value.kind == Value::NonFinite) {
                value.text = std::isnan(value.number) ? "NaN" : (value.number > 0 ? "Infinity" : "-Infinity");
            }
            values.emplace_back(events.scalars[i].tag, value);
        }
        ++reader.result().linesRead;
        reader.record(record, step, values);
    }
    reportProblemsBefore(std::numeric_limits<std::int64_t>::max());
    return reader.finish();
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

#pragma once
// The sampled-token estimators external trainers log, side by side with the full-vocabulary KL they stand in for
// (issue 21, item 3). Per generated token with the engine's sampled token y ~ mu, log mu(y) and log pi(y):
//   k1               = log mu(y) - log pi(y)                       (verl rollout_corr/kl, Tinker kl_sample_train_v1)
//   k3               = r - 1 - log r,  r = pi(y) / mu(y)            (verl rollout_corr/k3_kl)
//   mult_prob_error  = exp(|log pi(y) - log mu(y)|)                 NeMo-RL's token_mult_prob_error: the token mean
//                      of exp(|logprobs-train-fwk - logprobs-inference-fwk|) with samples drawn from the inference
//                      framework, "a measure of multiplicative probability error for sampled tokens" (NeMo RL
//                      documentation, docs/adding-new-models.md, "Importance of Log Probability Consistency");
//                      1 when the two agree on every sampled token
//   prob_diff        = |mu(y) - pi(y)|                              (verl training/rollout_probs_diff_mean)
// Each estimator's token mean is reported with its Pearson and Spearman correlation with the full KL across tokens
// (how well the per-token number a trainer logs tracks the per-token mismatch). A correlation is absent when
// either series is constant (no variance) or there are fewer than 3 tokens.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::metrics {

// Per-token values of one measurement, in generation order.
struct SampledTokenValues {
    std::vector<double> kl; // full-vocabulary KL(mu || pi) at the token's prefix
    std::vector<double> logMu; // log mu(y) of the sampled token
    std::vector<double> logPi; // log pi(y)
    std::vector<double> entropyPi; // the trainer's entropy at the prefix (may be empty: no by-entropy bins)
    void append(const SampledTokenValues& other);
    std::size_t size() const { return kl.size(); }
};

struct EstimatorSummary {
    std::string name; // "k1", "k3", "mult_prob_error", "prob_diff"
    double mean = 0.0; // token mean
    std::optional<double> pearson; // with the per-token full KL
    std::optional<double> spearman;
};

// Tokens grouped by a per-token quantity (issue 21, item 4): each bin [low, high) with its tokens, their mean full
// KL and its share of the summed KL (where the mismatch sits), and its share of the tokens.
struct MismatchBin {
    double low = 0.0;
    double high = 0.0;
    std::int64_t tokens = 0;
    double meanKl = 0.0;
    double klShare = 0.0;
    double tokenShare = 0.0;
};

struct EstimatorComparison {
    double kl = 0.0; // token mean of the full KL
    std::int64_t tokens = 0;
    std::vector<EstimatorSummary> estimators; // k1, k3, mult_prob_error, prob_diff
    // By the engine's probability of the chosen token mu(y), bins kProbabilityEdges; by the trainer's entropy
    // (nats), bins kEntropyEdges (empty without entropies). Empty bins are kept (tokens 0).
    std::vector<MismatchBin> byProbability;
    std::vector<MismatchBin> byEntropy;
};
inline const std::vector<double> kProbabilityEdges = {0.0, 0.01, 0.1, 0.3, 0.6, 0.9, 1.0};
inline const std::vector<double> kEntropyEdges = {0.0, 0.01, 0.1, 0.3, 1.0, 2.0, 1e300};
// Bins of `edges` (the last bin closed above) over `key`, weighing `kl`.
std::vector<MismatchBin> binMismatch(
    const std::vector<double>& key, const std::vector<double>& kl, const std::vector<double>& edges);

// The four estimators per token (in the order above), computed in double precision.
std::vector<std::vector<double>> estimatorValues(const SampledTokenValues& values);
// Their names in that order: "k1", "k3", "mult_prob_error", "prob_diff" (EstimatorSummary::name).
const std::vector<std::string>& estimatorNames();
EstimatorComparison compareEstimators(const SampledTokenValues& values);

// {"kl", "tokens", "estimators": [{"name", "mean", "pearson", "spearman"}]} (null for an absent correlation), and
// back (std::invalid_argument naming what is missing).
nlohmann::json toJson(const EstimatorComparison& comparison);
EstimatorComparison estimatorComparisonFromJson(const nlohmann::json& json);

// Pearson's r; absent for fewer than 3 pairs or a constant series. Sizes must agree.
std::optional<double> pearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y);
// Spearman's rho: Pearson's r of the ranks (ties get their average rank).
std::optional<double> spearmanCorrelation(const std::vector<double>& x, const std::vector<double>& y);

} // namespace mismatch::metrics

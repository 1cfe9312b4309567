#include "core/metrics/estimators.h"

#include "core/common/message_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace mismatch::metrics {

namespace {


std::vector<double> ranks(const std::vector<double>& values)
{
    std::vector<std::size_t> order(values.size());
    std::iota(order.begin(), order.end(), std::size_t {0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
    std::vector<double> result(values.size());
    for (std::size_t begin = 0; begin < order.size();) {
        std::size_t end = begin + 1;
        while (end < order.size() && values[order[end]] == values[order[begin]]) {
            ++end;
        }
        const double rank = 0.5 * static_cast<double>(begin + end - 1); // the average of ranks begin..end-1
        for (std::size_t i = begin; i < end; ++i) {
            result[order[i]] = rank;
        }
        begin = end;
    }
    return result;
}

} // namespace

void SampledTokenValues::append(const SampledTokenValues& other)
{
    kl.insert(kl.end(), other.kl.begin(), other.kl.end());
    logMu.insert(logMu.end(), other.logMu.begin(), other.logMu.end());
    logPi.insert(logPi.end(), other.logPi.begin(), other.logPi.end());
    entropyPi.insert(entropyPi.end(), other.entropyPi.begin(), other.entropyPi.end());
}

std::vector<MismatchBin> binMismatch(
    const std::vector<double>& key, const std::vector<double>& kl, const std::vector<double>& edges)
{
    if (key.size() != kl.size() || edges.size() < 2) {
        throw std::invalid_argument("binMismatch: key and kl differ in length, or fewer than two edges");
    }
    std::vector<MismatchBin> bins(edges.size() - 1);
    double total = 0.0;
    for (std::size_t b = 0; b < bins.size(); ++b) {
        bins[b].low = edges[b];
        bins[b].high = edges[b + 1];
    }
    std::vector<double> sums(bins.size(), 0.0);
    for (std::size_t t = 0; t < key.size(); ++t) {
        // The bin whose [low, high) holds the key; the last bin also takes its upper edge (and anything above).
        std::size_t b = static_cast<std::size_t>(
            std::upper_bound(edges.begin() + 1, edges.end() - 1, key[t]) - (edges.begin() + 1));
        ++bins[b].tokens;
        sums[b] += kl[t];
        total += kl[t];
    }
    for (std::size_t b = 0; b < bins.size(); ++b) {
        bins[b].meanKl = bins[b].tokens > 0 ? sums[b] / static_cast<double>(bins[b].tokens) : 0.0;
        bins[b].klShare = total > 0.0 ? sums[b] / total : 0.0;
        bins[b].tokenShare = key.empty() ? 0.0 : static_cast<double>(bins[b].tokens) / static_cast<double>(key.size());
    }
    return bins;
}

const std::vector<std::string>& estimatorNames()
{
    static const std::vector<std::string> names = {"k1", "k3", "mult_prob_error", "prob_diff"};
    return names;
}

std::vector<std::vector<double>> estimatorValues(const SampledTokenValues& values)
{
    const std::size_t n = values.kl.size();
    if (values.logMu.size() != n || values.logPi.size() != n) {
        throw std::invalid_argument("estimatorValues: kl, log mu and log pi differ in length");
    }
    std::vector<std::vector<double>> result(4, std::vector<double>(n));
    for (std::size_t t = 0; t < n; ++t) {
        const double logMu = values.logMu[t];
        const double logPi = values.logPi[t];
        const double logR = logPi - logMu;
        result[0][t] = logMu - logPi;
        result[1][t] = std::expm1(logR) - logR; // r - 1 - log r, accurate for r near 1
        result[2][t] = std::exp(std::fabs(logR));
        result[3][t] = std::fabs(std::exp(logMu) - std::exp(logPi));
    }
    return result;
}

EstimatorComparison compareEstimators(const SampledTokenValues& values)
{
    const std::vector<std::vector<double>> perToken = estimatorValues(values);
    EstimatorComparison comparison;
    comparison.tokens = static_cast<std::int64_t>(values.kl.size());
    const double count = std::max<double>(1.0, static_cast<double>(values.kl.size()));
    comparison.kl = std::accumulate(values.kl.begin(), values.kl.end(), 0.0) / count;
    for (std::size_t e = 0; e < perToken.size(); ++e) {
        EstimatorSummary summary;
        summary.name = estimatorNames()[e];
        summary.mean = std::accumulate(perToken[e].begin(), perToken[e].end(), 0.0) / count;
        summary.pearson = pearsonCorrelation(perToken[e], values.kl);
        summary.spearman = spearmanCorrelation(perToken[e], values.kl);
        comparison.estimators.push_back(summary);
    }
    std::vector<double> mu(values.logMu.size());
    for (std::size_t t = 0; t < mu.size(); ++t) {
        mu[t] = std::exp(values.logMu[t]);
    }
    comparison.byProbability = binMismatch(mu, values.kl, kProbabilityEdges);
    if (values.entropyPi.size() == values.kl.size() && !values.kl.empty()) {
        comparison.byEntropy = binMismatch(values.entropyPi, values.kl, kEntropyEdges);
    }
    return comparison;
}

nlohmann::json toJson(const EstimatorComparison& comparison)
{
    const auto optional = [](const std::optional<double>& value) {
        return value ? nlohmann::json(*value) : nlohmann::json();
    };
    nlohmann::json estimators = nlohmann::json::array();
    for (const EstimatorSummary& e : comparison.estimators) {
        estimators.push_back(
            {{"name", e.name}, {"mean", e.mean}, {"pearson", optional(e.pearson)}, {"spearman", optional(e.spearman)}});
    }
    const auto bins = [](const std::vector<MismatchBin>& list) {
        nlohmann::json result = nlohmann::json::array();
        for (const MismatchBin& b : list) {
            result.push_back({{"low", b.low}, {"high", b.high}, {"tokens", b.tokens}, {"mean_kl", b.meanKl},
                {"kl_share", b.klShare}, {"token_share", b.tokenShare}});
        }
        return result;
    };
    return {{"kl", comparison.kl}, {"tokens", comparison.tokens}, {"estimators", estimators},
        {"by_probability", bins(comparison.byProbability)}, {"by_entropy", bins(comparison.byEntropy)}};
}

EstimatorComparison estimatorComparisonFromJson(const nlohmann::json& json)
{
    try {
        EstimatorComparison comparison;
        comparison.kl = json.at("kl").get<double>();
        comparison.tokens = json.at("tokens").get<std::int64_t>();
        const auto optional = [](const nlohmann::json& value) {
            return value.is_null() ? std::optional<double>() : std::optional<double>(value.get<double>());
        };
        for (const nlohmann::json& e : json.at("estimators")) {
            comparison.estimators.push_back({e.at("name").get<std::string>(), e.at("mean").get<double>(),
                optional(e.at("pearson")), optional(e.at("spearman"))});
        }
        for (const auto& [key, list] : {std::pair<const char*, std::vector<MismatchBin>*>("by_probability",
                                            &comparison.byProbability),
                 {"by_entropy", &comparison.byEntropy}}) {
            if (!json.contains(key)) {
                continue; // written before the bins were
            }
            for (const nlohmann::json& b : json.at(key)) {
                list->push_back({b.at("low").get<double>(), b.at("high").get<double>(),
                    b.at("tokens").get<std::int64_t>(), b.at("mean_kl").get<double>(), b.at("kl_share").get<double>(),
                    b.at("token_share").get<double>()});
            }
        }
        return comparison;
    } catch (const nlohmann::json::exception& error) {
        throw std::invalid_argument("estimator comparison: " + jsonErrorDetail(error));
    }
}

std::optional<double> pearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y)
{
    if (x.size() != y.size()) {
        throw std::invalid_argument("pearsonCorrelation: series differ in length");
    }
    const std::size_t n = x.size();
    if (n < 3) {
        return std::nullopt;
    }
    const double meanX = std::accumulate(x.begin(), x.end(), 0.0) / static_cast<double>(n);
    const double meanY = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
    double sxy = 0.0, sxx = 0.0, syy = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        const double dx = x[i] - meanX;
        const double dy = y[i] - meanY;
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if (!(sxx > 0.0) || !(syy > 0.0)) {
        return std::nullopt;
    }
    return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

std::optional<double> spearmanCorrelation(const std::vector<double>& x, const std::vector<double>& y)
{
    if (x.size() != y.size()) {
        throw std::invalid_argument("spearmanCorrelation: series differ in length");
    }
    return pearsonCorrelation(ranks(x), ranks(y));
}

} // namespace mismatch::metrics

#include "app/cli/analysis_options.h"

#include "app/cli/context.h"
#include "core/model/memory_check.h"
#include "core/common/byte_size.h"


namespace mismatch::cli {

void addAnalysisOptions(CLI::App* command, AnalysisArguments& a)
{
    a.protocolOptions.clear();
    a.protocolOptions.push_back(command->add_option("--count", a.count, "Use the first N prompts of the set (0: all)")
            ->check(atLeast(0))
            ->capture_default_str());
    a.protocolOptions.push_back(
        command->add_option("--max-tokens", a.settings.maxNewTokens, "Generated tokens per prompt at most")
            ->check(greaterThan(0))
            ->capture_default_str());
    a.protocolOptions.push_back(
        command->add_option("--seed", a.settings.seed, "Sampling seed (combined with each prompt's id)")
            ->capture_default_str());
    a.protocolOptions.push_back(
        command->add_option("--temperature", a.settings.temperature, "Sampling temperature (0: greedy)")
            ->check(atLeast(0))
            ->capture_default_str());
    a.protocolOptions.push_back(
        command->add_option("--top-p", a.settings.topP, "Nucleus sampling threshold in (0, 1]")
            ->check(between(1e-9, 1.0))
            ->capture_default_str());
    a.protocolOptions.push_back(
        command->add_option("--top-k", a.settings.topK, "Keep the K most probable tokens (0: off)")
            ->check(atLeast(0))
            ->capture_default_str());
    a.protocolOptions.push_back(command
            ->add_option("--kv-scale-fit", a.kvScaleFit,
                "FP8 KV-cache scales: fitted_per_measurement (on every prompt measured) or frozen_first_batch (the "
                "engine's own prefill of the first --kv-first-batch prompts, as a training run's first step)")
            ->check(CLI::IsMember({"fitted_per_measurement", "frozen_first_batch"}))
            ->capture_default_str());
    a.protocolOptions.push_back(command
            ->add_option("--kv-first-batch", a.settings.kvFirstBatch,
                "Prompts of the first batch that frozen_first_batch fits the KV scales on")
            ->check(greaterThan(0))
            ->capture_default_str());
    command->add_option("--batch", a.settings.batchSize, "Prompts generated and scored together")
        ->check(greaterThan(0))
        ->capture_default_str();
    command->add_option("--resamples", a.settings.bootstrap.resamples, "Bootstrap resamples (prompts resampled)")
        ->check(between(1, 10000000))
        ->capture_default_str();
    command->add_option("--confidence", a.settings.bootstrap.confidence, "Bootstrap interval confidence")
        ->check(between(0.5, 0.999999))
        ->capture_default_str();
    command->add_option("--bootstrap-seed", a.settings.bootstrap.seed, "Bootstrap seed")->capture_default_str();
    command->add_option("--kv-memory", a.kvMemory, "Memory of each engine's paged KV cache (256MiB, 1GiB, ...)")
        ->capture_default_str();
}

analysis::MeasureSettings resolveSettings(const AnalysisArguments& arguments)
{
    analysis::MeasureSettings settings = arguments.settings;
    settings.kvCacheBytes = parseByteSize(arguments.kvMemory, "--kv-memory");
    model::checkRequestFits("--kv-memory " + arguments.kvMemory, settings.kvCacheBytes);
    settings.kvScales = arguments.kvScaleFit == "frozen_first_batch" ? analysis::KvScalePolicy::FrozenFirstBatch
                                                                   : analysis::KvScalePolicy::FittedPerMeasurement;
    return settings;
}

bool protocolOptionGiven(const AnalysisArguments& arguments)
{
    for (const CLI::Option* option : arguments.protocolOptions) {
        if (option->count() > 0) {
            return true;
        }
    }
    return false;
}

analysis::MeasureSettings settingsOver(const analysis::MeasurementProtocol& protocol, const AnalysisArguments& arguments)
{
    const analysis::MeasureSettings given = resolveSettings(arguments);
    analysis::MeasureSettings settings = analysis::applyProtocol(protocol, given);
    const auto was = [&arguments](const char* name) {
        for (const CLI::Option* option : arguments.protocolOptions) {
            if (option->get_name() == name && option->count() > 0) {
                return true;
            }
        }
        return false;
    };
    if (was("--max-tokens")) {
        settings.maxNewTokens = given.maxNewTokens;
    }
    if (was("--seed")) {
        settings.seed = given.seed;
    }
    if (was("--temperature")) {
        settings.temperature = given.temperature;
    }
    if (was("--top-p")) {
        settings.topP = given.topP;
    }
    if (was("--top-k")) {
        settings.topK = given.topK;
    }
    if (was("--kv-scale-fit")) {
        settings.kvScales = given.kvScales;
    }
    if (was("--kv-first-batch")) {
        settings.kvFirstBatch = given.kvFirstBatch;
    }
    return settings;
}

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

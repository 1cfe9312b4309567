#include "app/cli/analysis_options.h"

#include "app/cli/context.h"
#include "core/model/memory_check.h"
#include "core/engine/byte_size.h"

#include <atomic>
#include <csignal>

namespace mismatch::cli {

namespace {

std::atomic<Progress*> analysisInterruptTarget {nullptr};

extern "C" void cancelAnalysisOnInterrupt(int)
{
    if (Progress* progress = analysisInterruptTarget.load()) {
        progress->cancel();
    }
}

} // namespace

void addAnalysisOptions(CLI::App* command, AnalysisArguments& a)
{
    command->add_option("--count", a.count, "Use the first N prompts of the set (0: all)")
        ->check(atLeast(0))
        ->capture_default_str();
    command->add_option("--max-tokens", a.settings.maxNewTokens, "Generated tokens per prompt at most")
        ->check(greaterThan(0))
        ->capture_default_str();
    command->add_option("--seed", a.settings.seed, "Sampling seed (combined with each prompt's id)")
        ->capture_default_str();
    command->add_option("--temperature", a.settings.temperature, "Sampling temperature (0: greedy)")
        ->check(atLeast(0))
        ->capture_default_str();
    command->add_option("--top-p", a.settings.topP, "Nucleus sampling threshold in (0, 1]")
        ->check(between(1e-9, 1.0))
        ->capture_default_str();
    command->add_option("--top-k", a.settings.topK, "Keep the K most probable tokens (0: off)")
        ->check(atLeast(0))
        ->capture_default_str();
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
    settings.kvCacheBytes = engine::parseByteSize(arguments.kvMemory, "--kv-memory");
    model::checkRequestFits("--kv-memory " + arguments.kvMemory, settings.kvCacheBytes);
    return settings;
}

CancelOnInterrupt::CancelOnInterrupt(Progress& progress)
{
    analysisInterruptTarget.store(&progress);
    previous_ = std::signal(SIGINT, cancelAnalysisOnInterrupt);
}

CancelOnInterrupt::~CancelOnInterrupt()
{
    std::signal(SIGINT, previous_ == SIG_ERR ? SIG_DFL : previous_);
    analysisInterruptTarget.store(nullptr);
}

nlohmann::json intervalJson(const metrics::Interval& interval)
{
    return {{"estimate", interval.estimate}, {"low", interval.low}, {"high", interval.high},
        {"confidence", interval.confidence}, {"resamples", interval.resamples}};
}

std::string intervalText(const metrics::Interval& interval, int precision)
{
    return formatNumber(interval.estimate, precision) + " [" + formatNumber(interval.low, precision) + ", "
        + formatNumber(interval.high, precision) + "]";
}

} // namespace mismatch::cli

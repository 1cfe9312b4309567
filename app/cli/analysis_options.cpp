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

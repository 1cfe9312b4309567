#include "app/cli/analysis_options.h"

#include "app/cli/context.h"
#include "core/model/memory_check.h"
#include "core/common/byte_size.h"


namespace mismatch::cli {

std::string intervalText(const metrics::Interval& interval, int precision)
{
    return formatNumber(interval.estimate, precision) + " [" + formatNumber(interval.low, precision) + ", "
        + formatNumber(interval.high, precision) + "]";
}

} // namespace mismatch::cli

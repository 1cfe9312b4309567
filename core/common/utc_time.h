#pragma once
// The current time as the store and the report write it: UTC, ISO 8601 to the second ("2026-11-08T14:03:27Z").
#include <string>

namespace mismatch {

std::string utcTimestamp();

} // namespace mismatch

#include "core/common/byte_size.h"

#include "core/common/error.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace mismatch {

std::uint64_t parseByteSize(const std::string& text, const std::string& source)
{
    const auto fail = [&](const std::string& detail) {
        return InputError(source, "'" + text + "'",
            detail
                + " (expected a number with an optional unit: B, KiB, MiB, GiB, TiB, kB, MB, GB, TB; e.g. 8GiB, 1e9)");
    };
    const char* begin = text.c_str();
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    if (end == begin) {
        throw fail("no number");
    }
    std::string unit(end);
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) {
        unit.erase(unit.begin());
    }
    for (char& c : unit) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    static const std::vector<std::pair<std::string, double>> units
        = {{"", 1.0}, {"b", 1.0}, {"kib", 1024.0}, {"mib", 1024.0 * 1024.0}, {"gib", 1024.0 * 1024.0 * 1024.0},
            {"tib", 1024.0 * 1024.0 * 1024.0 * 1024.0}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}};
    double multiplier = 0.0;
    for (const auto& [name, factor] : units) {
        if (unit == name) {
            multiplier = factor;
        }
    }
    if (multiplier == 0.0) {
        throw fail("unknown unit '" + std::string(end) + "'");
    }
    const double bytes = std::floor(value * multiplier);
    if (!std::isfinite(bytes) || bytes < 0.0) {
        throw fail("size must be finite and >= 0");
    }
    if (bytes >= 9223372036854775808.0) { // 2^63
        throw fail("size too large");
    }
    return static_cast<std::uint64_t>(bytes);
}

std::string formatByteSize(std::uint64_t bytes)
{
    static const char* const names[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        ++unit;
    }
    char text[64];
    if (value == std::floor(value)) {
        std::snprintf(text, sizeof text, "%.0f %s", value, names[unit]);
    } else {
        std::snprintf(text, sizeof text, "%.2f %s", value, names[unit]);
    }
    return text;
}

} // namespace mismatch

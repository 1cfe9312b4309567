#include "app/cli/context.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <optional>
#include <iomanip>
#include <ostream>
#include <sstream>

namespace mismatch::cli {

namespace {
std::vector<std::pair<int, Registrar>>& registry()
{
    static std::vector<std::pair<int, Registrar>> all;
    return all;
}
}  // namespace

CommandRegistration::CommandRegistration(int order, Registrar registrar)
{
    registry().emplace_back(order, std::move(registrar));
}

std::vector<Registrar> registeredCommands()
{
    auto all = registry();
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<Registrar> result;
    for (auto& entry : all) {
        result.push_back(entry.second);
    }
    return result;
}

std::string Context::workspaceDirectory() const
{
    return workspace.empty() ? store::defaultWorkspaceDirectory() : workspace;
}

std::string Context::databasePath() const
{
    return store::databasePath(workspaceDirectory());
}

store::RunStore Context::openStore(store::OpenMode mode) const
{
    return store::RunStore::open(databasePath(), mode);
}

void Context::printJson(const nlohmann::json& value) const
{
    // Text read from outside (a response's bytes, a name) need not be UTF-8: replace such bytes, never fail.
    *out << value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

std::string formatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows)
{
    std::vector<size_t> widths(header.size(), 0);
    for (size_t c = 0; c < header.size(); ++c) {
        widths[c] = header[c].size();
    }
    for (const auto& row : rows) {
        for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
            widths[c] = std::max(widths[c], row[c].size());
        }
    }
    std::ostringstream text;
    auto line = [&](const std::vector<std::string>& cells) {
        for (size_t c = 0; c < widths.size(); ++c) {
            const std::string cell = c < cells.size() ? cells[c] : std::string();
            text << cell;
            if (c + 1 < widths.size()) {
                text << std::string(widths[c] - cell.size() + 2, ' ');
            }
        }
        text << "\n";
    };
    line(header);
    std::vector<std::string> rule;
    for (size_t w : widths) {
        rule.push_back(std::string(w, '-'));
    }
    line(rule);
    for (const auto& row : rows) {
        line(row);
    }
    return text.str();
}

namespace {

// The option's text as a number: nullopt when it is not one (the option's conversion reports that).
std::optional<double> numberText(const std::string& text)
{
    if (text.empty()) {
        return std::nullopt;
    }
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size()) {
        return std::nullopt;
    }
    return value;
}

std::string boundText(double value)
{
    return formatNumber(value, 6);
}

CLI::Validator numberCheck(std::function<bool(double)> accepts, const std::string& rule)
{
    return CLI::Validator(
        [accepts, rule](std::string& text) -> std::string {
            const std::optional<double> value = numberText(text);
            if (!value) {
                return {};
            }
            if (!std::isfinite(*value)) {
                return "must be a finite number " + rule + ", got " + text;
            }
            if (!accepts(*value)) {
                return "must be " + rule + ", got " + text;
            }
            return {};
        },
        "NUMBER " + rule);
}

}  // namespace

CLI::Validator atLeast(double low)
{
    return numberCheck([low](double v) { return v >= low; }, ">= " + boundText(low));
}

CLI::Validator greaterThan(double low)
{
    return numberCheck([low](double v) { return v > low; }, "> " + boundText(low));
}

CLI::Validator between(double low, double high)
{
    return numberCheck([low, high](double v) { return v >= low && v <= high; },
        "in [" + boundText(low) + ", " + boundText(high) + "]");
}

CLI::Validator runId()
{
    return CLI::Validator(
        [](std::string& text) -> std::string {
            if (text.empty()) {
                return {}; // the empty-value check names it (cli.cpp)
            }
            const std::string expected
                = "must be a run id, a whole number from 1 to 9223372036854775807 (see `mismatch store runs`), got "
                + text;
            if (text.find_first_not_of("0123456789") != std::string::npos) {
                return expected;
            }
            const std::size_t first = std::min(text.find_first_not_of('0'), text.size());
            const std::string digits = text.substr(first);
            // 9223372036854775807 has 19 digits: compare as text, without a conversion that saturates.
            const std::string largest = "9223372036854775807";
            if (digits.empty() || digits.size() > largest.size()
                || (digits.size() == largest.size() && digits > largest)) {
                return expected;
            }
            text = digits; // "007" is run 7 (CLI11's conversion would read a leading 0 as octal)
            return {};
        },
        "");
}

std::string formatNumber(double value, int precision)
{
    std::ostringstream text;
    text << std::setprecision(precision) << value;
    return text.str();
}

}  // namespace mismatch::cli

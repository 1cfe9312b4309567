#pragma once
// Golden-fixture checks of `--json` outputs (tests/fixtures/json/*.json). A fixture is the output's JSON with the
// same keys at every level and the same array lengths; each value is either the exact expected value or a
// placeholder string for a value that legitimately varies:
//   "<number>"  any number          "<integer>"  any whole number     "<string>"  any string
//   "<path>"    any string (a path under a temporary directory)
//   "<number-or-null>"              "<one of: A|B|C>"  one of the listed strings
// Exact numbers are compared within `relativeTolerance` (0: equal). What a fixture pins exactly is what must not
// change without a decision: the shape (key names, nesting, types), names, counts, steps, protocol settings and
// the shipped calibration's figures; measured mismatch (BF16 kernels round differently across CPUs, with and
// without AVX512-BF16), timings and ids of a fresh workspace are placeholders.
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace mismatch::test {

inline void goldenDifferences(const nlohmann::json& actual, const nlohmann::json& golden, const std::string& where,
    double relativeTolerance, std::vector<std::string>& out)
{
    const auto differ = [&](const std::string& what) {
        out.push_back((where.empty() ? std::string("/") : where) + ": " + what + " (got " + actual.dump() + ")");
    };
    if (golden.is_string()) {
        const std::string expected = golden.get<std::string>();
        if (expected == "<number>") {
            if (!actual.is_number()) differ("expected a number");
            return;
        }
        if (expected == "<integer>") {
            if (!actual.is_number_integer()) differ("expected a whole number");
            return;
        }
        if (expected == "<number-or-null>") {
            if (!actual.is_number() && !actual.is_null()) differ("expected a number or null");
            return;
        }
        if (expected == "<string>" || expected == "<path>") {
            if (!actual.is_string()) differ("expected a string");
            return;
        }
        const std::string oneOf = "<one of: ";
        if (expected.rfind(oneOf, 0) == 0 && expected.back() == '>') {
            const std::string choices = "|" + expected.substr(oneOf.size(), expected.size() - oneOf.size() - 1) + "|";
            if (!actual.is_string() || choices.find("|" + actual.get<std::string>() + "|") == std::string::npos) {
                differ("expected " + expected);
            }
            return;
        }
        if (actual != golden) differ("expected " + golden.dump());
        return;
    }
    if (golden.is_object()) {
        if (!actual.is_object()) {
            differ("expected an object");
            return;
        }
        for (auto it = golden.begin(); it != golden.end(); ++it) {
            if (!actual.contains(it.key())) {
                out.push_back(where + "/" + it.key() + ": missing");
            } else {
                goldenDifferences(actual.at(it.key()), it.value(), where + "/" + it.key(), relativeTolerance, out);
            }
        }
        for (auto it = actual.begin(); it != actual.end(); ++it) {
            if (!golden.contains(it.key())) out.push_back(where + "/" + it.key() + ": not in the fixture");
        }
        return;
    }
    if (golden.is_array()) {
        if (!actual.is_array() || actual.size() != golden.size()) {
            differ("expected an array of " + std::to_string(golden.size()));
            return;
        }
        for (std::size_t i = 0; i < golden.size(); ++i) {
            goldenDifferences(actual[i], golden[i], where + "/" + std::to_string(i), relativeTolerance, out);
        }
        return;
    }
    if (golden.is_number_float() && actual.is_number()) {
        const double a = actual.get<double>();
        const double g = golden.get<double>();
        if (!(std::abs(a - g) <= relativeTolerance * std::abs(g))) differ("expected " + golden.dump());
        return;
    }
    if (golden.is_number() && actual.is_number()) {
        if (actual.get<double>() != golden.get<double>()) differ("expected " + golden.dump());
        return;
    }
    if (actual != golden) differ("expected " + golden.dump());
}

// The fixture file's JSON.
inline nlohmann::json readFixture(const std::string& fixturePath)
{
    std::ifstream in(fixturePath);
    std::ostringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());
}

// The differences as one text (for a failure message).
inline std::string joinDifferences(const std::vector<std::string>& differences)
{
    std::string text;
    for (const std::string& line : differences) text += line + "\n";
    return text;
}

// The differences of `actual` from the fixture file (empty when it matches), one line each, with the JSON path.
inline std::vector<std::string> goldenDifferences(
    const nlohmann::json& actual, const std::string& fixturePath, double relativeTolerance = 0.0)
{
    if (!std::ifstream(fixturePath)) return {fixturePath + ": cannot be read"};
    std::vector<std::string> out;
    goldenDifferences(actual, readFixture(fixturePath), "", relativeTolerance, out);
    return out;
}

}  // namespace mismatch::test

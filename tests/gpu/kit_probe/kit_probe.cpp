// Uses each library of the device build kit once, with a result it checks, and prints their versions.
// Exit 0 when every check holds; the header and the library of SQLite must be the same version (both from the kit).
#define PCRE2_CODE_UNIT_WIDTH 8
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <pcre2.h>
#include <sqlite3.h>
#include <yaml-cpp/yaml.h>

#include <cstring>
#include <iostream>
#include <string>

namespace {
int failures = 0;
void check(bool ok, const std::string& what)
{
    std::cout << (ok ? "ok    " : "FAIL  ") << what << '\n';
    failures += ok ? 0 : 1;
}
} // namespace

int main(int argc, char** argv)
{
    CLI::App app("kit probe");
    int count = 0;
    app.add_option("--count", count);
    CLI11_PARSE(app, argc, argv);
    check(count == 3, "CLI11 " CLI11_VERSION " parsed --count 3");

    check(std::strcmp(sqlite3_libversion(), SQLITE_VERSION) == 0,
        std::string("SQLite header ") + SQLITE_VERSION + " = library " + sqlite3_libversion());
    sqlite3* db = nullptr;
    int sum = 0;
    if (sqlite3_open(":memory:", &db) == SQLITE_OK) {
        sqlite3_stmt* statement = nullptr;
        if (sqlite3_prepare_v2(db, "SELECT 20 + 22", -1, &statement, nullptr) == SQLITE_OK
            && sqlite3_step(statement) == SQLITE_ROW) {
            sum = sqlite3_column_int(statement, 0);
        }
        sqlite3_finalize(statement);
    }
    sqlite3_close(db);
    check(sum == 42, "SQLite in-memory SELECT 20 + 22 = 42");

    const YAML::Node node = YAML::Load("device: cuda:0\nsizes: [1, 2, 3]\n");
    check(node["device"].as<std::string>() == "cuda:0" && node["sizes"].size() == 3, "yaml-cpp parsed a mapping");

    const nlohmann::json json = nlohmann::json::parse(R"({"kl": [0.5, 0.25]})");
    check(json.at("kl").at(1).get<double>() == 0.25,
        "nlohmann_json " + std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "."
            + std::to_string(NLOHMANN_JSON_VERSION_MINOR) + " parsed an object");

    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* re = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(R"(\p{L}+)"), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &error, &offset, nullptr);
    bool matched = false;
    if (re) {
        pcre2_match_data* match = pcre2_match_data_create_from_pattern(re, nullptr);
        const std::string subject = "  H\xc3\xa9llo!";
        if (pcre2_match(re, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0, 0, match, nullptr) > 0) {
            const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
            matched = subject.substr(ovector[0], ovector[1] - ovector[0]) == "H\xc3\xa9llo";
        }
        pcre2_match_data_free(match);
        pcre2_code_free(re);
    }
    check(matched,
        "PCRE2 " + std::to_string(PCRE2_MAJOR) + "." + std::to_string(PCRE2_MINOR) + " matched a UTF-8 letter run");
    return failures == 0 ? 0 : 1;
}

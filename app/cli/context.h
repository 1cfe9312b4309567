#pragma once
// What every subcommand shares: the global options and the output streams.
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include <functional>
#include <iosfwd>
#include <set>
#include <string>
#include <vector>

namespace mismatch::cli {

struct Context {
    std::string workspace;  // directory; empty means the per-user default
    bool json = false;
    int threads = 0;
    std::ostream* out = nullptr;
    std::ostream* err = nullptr;
    // Options whose empty value means something (the text `mismatch tokenize` encodes): every other option that
    // takes a value refuses '' (cli.cpp), which is an unset shell variable far more often than a wish.
    std::set<const CLI::Option*> emptyValueAllowed;

    std::string workspaceDirectory() const;
    std::string databasePath() const;
    store::RunStore openStore(store::OpenMode mode = store::OpenMode::CreateOrOpen) const;
    void printJson(const nlohmann::json& value) const;
};

// A file of subcommands registers itself with a static CommandRegistration; the CLI is an object library,
// so every such file is linked and no central list needs editing when a command is added.
using Registrar = std::function<void(CLI::App& app, Context& context)>;
struct CommandRegistration {
    // `order` sorts the commands in --help (lower first).
    CommandRegistration(int order, Registrar registrar);
};
// Registrars in their order.
std::vector<Registrar> registeredCommands();

void printSummary(const Context& context, const store::StoreSummary& summary);

// Checks of numeric options. Unlike CLI11's NonNegativeNumber, PositiveNumber and Range, they refuse NaN and
// infinities (which compare false with every bound) and write bounds as a person would ("must be >= 0, got
// nan", not "not in range 0 to 179769313486231570814527..."). Text that is not a number at all is left to the
// option's own conversion error.
CLI::Validator atLeast(double low); // value >= low
CLI::Validator greaterThan(double low); // value > low
CLI::Validator between(double low, double high); // low <= value <= high
// A stored run's id (`--resume RUN`, an int64 option, applied with transform()): decimal digits from 1 to
// 9223372036854775807, the ids SQLite gives, leading zeros dropped. CLI11 would read digits past int64 as
// 9223372036854775807, "0x10" as 16 and "010" as 8, and fail on "1e20" without saying what is expected.
CLI::Validator runId();

// Plain text table: left-aligned columns padded to their widest cell.
std::string formatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string formatNumber(double value, int precision = 4);

// `mismatch run FILE` in this process (cli_run.cpp); `mismatch submit FILE` with the local executor is the same.
void runJobFileHere(Context& context, const std::string& path);

}  // namespace mismatch::cli

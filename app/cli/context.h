#pragma once
// What every subcommand shares: the global options and the output streams.
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace mismatch::cli {

struct Context {
    std::string workspace;  // directory; empty means the per-user default
    bool json = false;
    int threads = 0;
    std::ostream* out = nullptr;
    std::ostream* err = nullptr;

    std::string workspaceDirectory() const;
    std::string databasePath() const;
    store::RunStore openStore(store::OpenMode mode = store::OpenMode::CreateOrOpen) const;
    void printJson(const nlohmann::json& value) const;
};

// A subcommand registers itself on the app and returns nothing; its callback runs after parsing.
using Registrar = std::function<void(CLI::App& app, Context& context)>;

void printSummary(const Context& context, const store::StoreSummary& summary);
void registerStoreCommands(CLI::App& app, Context& context);
void registerDemoCommand(CLI::App& app, Context& context);

// Plain text table: left-aligned columns padded to their widest cell.
std::string formatTable(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
std::string formatNumber(double value, int precision = 4);

}  // namespace mismatch::cli

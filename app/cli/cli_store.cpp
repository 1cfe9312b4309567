// mismatch store init | info | runs
#include "app/cli/context.h"

#include <nlohmann/json.hpp>

#include <ostream>

namespace mismatch::cli {

namespace {

nlohmann::json toJson(const store::StoreSummary& s)
{
    return {{"path", s.path}, {"schema_version", s.schemaVersion}, {"models", s.models}, {"recipes", s.recipes},
        {"prompt_sets", s.promptSets}, {"runs", s.runs}, {"steps", s.steps}, {"evaluations", s.evaluations},
        {"sensitivity_scans", s.sensitivityScans}, {"calibrations", s.calibrations},
        {"admission_decisions", s.admissionDecisions}, {"external_runs", s.externalRuns}};
}

nlohmann::json toJson(const store::RunInfo& r)
{
    nlohmann::json j = {{"id", r.id}, {"name", r.name}, {"kind", r.kind}, {"status", store::toString(r.status)},
        {"started_at", r.startedAt}, {"finished_at", r.finishedAt.empty() ? nlohmann::json() : nlohmann::json(r.finishedAt)},
        {"steps", r.stepCount}, {"tool_version", r.toolVersion}};
    j["last_step"] = r.lastStep ? nlohmann::json(*r.lastStep) : nlohmann::json();
    j["last_mismatch"] = r.lastMismatch ? nlohmann::json(*r.lastMismatch) : nlohmann::json();
    if (!r.error.empty()) {
        j["error"] = r.error;
    }
    // The catalogue job that started the run ({"job", "parameters"}), null for other runs.
    j["job"] = r.jobJson.empty() ? nlohmann::json() : nlohmann::json::parse(r.jobJson, nullptr, false);
    return j;
}

}  // namespace

void printSummary(const Context& context, const store::StoreSummary& s)
{
    if (context.json) {
        context.printJson(toJson(s));
        return;
    }
    *context.out << "workspace       " << s.path << "\n"
                 << "schema version  " << s.schemaVersion << "\n"
                 << formatTable({"object", "count"},
                        {{"models", std::to_string(s.models)}, {"recipes", std::to_string(s.recipes)},
                            {"prompt sets", std::to_string(s.promptSets)}, {"runs", std::to_string(s.runs)},
                            {"steps", std::to_string(s.steps)}, {"evaluations", std::to_string(s.evaluations)},
                            {"sensitivity scans", std::to_string(s.sensitivityScans)},
                            {"calibrations", std::to_string(s.calibrations)},
                            {"admission decisions", std::to_string(s.admissionDecisions)},
                            {"external runs", std::to_string(s.externalRuns)}});
}

namespace {
void registerStoreCommands(CLI::App& app, Context& context)
{
    CLI::App* storeCommand = app.add_subcommand("store", "Create and inspect the workspace's run store");
    storeCommand->require_subcommand(1);

    CLI::App* init = storeCommand->add_subcommand("init", "Create the workspace (or migrate an older one)");
    init->callback([&context] {
        store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
        if (context.json) {
            context.printJson({{"path", store.path()}, {"schema_version", store.schemaVersion()}});
        } else {
            *context.out << "workspace ready: " << store.path() << " (schema version " << store.schemaVersion()
                         << ")\n";
        }
    });

    CLI::App* info = storeCommand->add_subcommand("info", "Print what the workspace holds");
    info->callback([&context] {
        store::RunStore store = context.openStore(store::OpenMode::ReadOnly);
        printSummary(context, store.summary());
    });

    CLI::App* runs = storeCommand->add_subcommand("runs", "List the workspace's runs");
    runs->callback([&context] {
        store::RunStore store = context.openStore(store::OpenMode::ReadOnly);
        const auto all = store.listRuns();
        if (context.json) {
            nlohmann::json list = nlohmann::json::array();
            for (const auto& r : all) {
                list.push_back(toJson(r));
            }
            context.printJson(list);
            return;
        }
        if (all.empty()) {
            *context.out << "no runs in " << store.path() << " (try `mismatch demo`)\n";
            return;
        }
        std::vector<std::vector<std::string>> rows;
        for (const auto& r : all) {
            rows.push_back({std::to_string(r.id), r.name, r.kind, store::toString(r.status),
                std::to_string(r.stepCount), r.lastMismatch ? formatNumber(*r.lastMismatch) : "-", r.startedAt});
        }
        *context.out << formatTable({"id", "name", "kind", "status", "steps", "mismatch", "started"}, rows);
    });
}

const CommandRegistration registration(10, registerStoreCommands);
}  // namespace

}  // namespace mismatch::cli

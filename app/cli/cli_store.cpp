// mismatch store init | info | runs | merge
#include "app/cli/context.h"
#include "core/store/store_merge.h"

#include <nlohmann/json.hpp>

#include <memory>
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

nlohmann::json toJson(const store::MergeReport& report)
{
    const auto pairs = [](const std::vector<std::pair<std::int64_t, std::int64_t>>& runs) {
        nlohmann::json list = nlohmann::json::array();
        for (const auto& [shardRun, run] : runs) {
            list.push_back({{"shard_run_id", shardRun}, {"run_id", run}});
        }
        return list;
    };
    nlohmann::json rows = nlohmann::json::object();
    for (const auto& [table, count] : report.rows) {
        rows[table] = count;
    }
    return {{"shard", report.shard}, {"shard_workspace_id", report.shardWorkspaceId},
        {"status", report.nothingAdded() ? "already merged" : "merged"}, {"runs", pairs(report.runs)},
        {"already_merged", pairs(report.alreadyMerged)}, {"matched_runs", pairs(report.matchedRuns)}, {"rows", rows}};
}

void printMerge(const Context& context, const store::MergeReport& report)
{
    if (report.nothingAdded()) {
        *context.out << report.shard << ": already merged (" << report.alreadyMerged.size()
                     << " runs merged before; nothing added)\n";
        return;
    }
    *context.out << report.shard << ": " << report.runs.size() << " runs merged";
    if (!report.alreadyMerged.empty()) {
        *context.out << " (" << report.alreadyMerged.size() << " merged before)";
    }
    *context.out << "\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& [table, count] : report.rows) {
        rows.push_back({table, std::to_string(count)});
    }
    *context.out << formatTable({"table", "rows added"}, rows);
}

// mismatch store merge SHARD... [--into WORKSPACE]: each shard in its own transaction, in the order given; a refused
// shard is reported and the rest are still merged (exit 1 when any was refused).
void registerMerge(CLI::App& storeCommand, Context& context)
{
    struct MergeArguments {
        std::vector<std::string> shards;
        std::string into;
    };
    auto arguments = std::make_shared<MergeArguments>();
    CLI::App* merge = storeCommand.add_subcommand("merge", "Merge shard workspaces into this one (scale-out)");
    merge->footer(
        "A shard is a workspace one unit wrote on its own (`mismatch run UNIT.yaml --workspace SHARD`, on a cluster "
        "node say). Each shard is merged in one transaction: its rows get new ids, models and prompt sets are matched "
        "by path, recipes by content, and each run's provenance keeps where it came from (shard, shard run id, host, "
        "Slurm job when the shard recorded it). A shard merged before adds nothing (\"already merged\"); its copy "
        "elsewhere is the same shard. Refused, with nothing written: a shard with a run that has not finished "
        "(running, killed mid-run, failed, cancelled: resume its unit first), a shard of another schema version, the "
        "workspace itself. Prints per shard the runs merged and the rows added per table "
        "(docs/job-files-and-studies.md).");
    merge->add_option("SHARD", arguments->shards, "Shard workspace directories (or their workspace.db files)")
        ->required();
    merge->add_option("--into", arguments->into,
        "Workspace directory to merge into (default: --workspace, else $MISMATCH_WORKSPACE, else the per-user "
        "default)");
    merge->callback([&context, arguments] {
        Context target = context;
        if (!arguments->into.empty()) {
            target.workspace = arguments->into;
        }
        store::RunStore store = target.openStore(store::OpenMode::CreateOrOpen);
        nlohmann::json merged = nlohmann::json::array();
        nlohmann::json refused = nlohmann::json::array();
        for (const std::string& shard : arguments->shards) {
            try {
                const store::MergeReport report = store::mergeShard(store, shard);
                merged.push_back(toJson(report));
                if (!context.json) {
                    printMerge(context, report);
                }
            } catch (const Error& error) {
                refused.push_back({{"shard", shard}, {"error", error.what()}});
                if (!context.json) {
                    *context.out << shard << ": refused: " << error.what() << "\n";
                }
            }
        }
        if (context.json) {
            context.printJson({{"into", store.path()}, {"shards", merged}, {"refused", refused}});
        }
        if (!refused.empty()) {
            throw Error(std::to_string(refused.size()) + " of " + std::to_string(arguments->shards.size())
                + " shards refused (nothing of them was written): " + refused.front().at("error").get<std::string>());
        }
    });
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
    CLI::App* storeCommand = app.add_subcommand("store", "Create, inspect and merge workspaces' run stores");
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

    registerMerge(*storeCommand, context);
}

const CommandRegistration registration(10, registerStoreCommands);
}  // namespace

}  // namespace mismatch::cli

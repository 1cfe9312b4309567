// mismatch import verl|tinker|csv FILE [--name NAME] [--map COLUMN=MEASURE ...]
// mismatch import aimet FILE [--name NAME] [--analysis enabled|disabled|mse] [--reference-score X]
//                            [--lower-is-better] [--scheme TEXT]
// Reads an outside tool's log or sensitivity file into the workspace as a run of kind "external" (one transaction:
// a failed import leaves the workspace unchanged). Lines that cannot be used are skipped and listed with their line
// numbers, unusable values dropped and listed with their line and key, lines of one step merged (conflicting keys
// listed); a file with no usable line exits 1.
#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/io/import_aimet.h"
#include "core/io/import_log.h"
#include "core/store/import_store.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

constexpr size_t kSkippedShown = 20; // skipped lines listed in the human summary (--json lists all)

struct LogImportArguments {
    std::string file;
    std::string name;
    std::vector<std::string> map;
};

struct AimetImportArguments {
    std::string file;
    std::string name;
    std::string analysis;
    std::optional<double> referenceScore;
    bool lowerIsBetter = false;
    std::string scheme;
};

std::string defaultName(const std::string& source, const std::string& file)
{
    return source + " " + std::filesystem::path(file).filename().string();
}

std::string absolutePath(const std::string& file)
{
    std::error_code ec;
    const auto path = std::filesystem::absolute(file, ec);
    return ec ? file : path.lexically_normal().string();
}

// Repeated columns or measures among --map entries are argument errors (exit 2), like a malformed entry.
void checkMapEntries(io::LogSource source, const std::vector<std::string>& entries)
{
    std::map<std::string, std::string> columns;
    std::map<std::string, std::string> measures;
    for (const auto& entry : entries) {
        const auto equals = entry.rfind('=');
        const std::string column = entry.substr(0, equals);
        const std::string measure = entry.substr(equals + 1);
        if (measure == "step" && source != io::LogSource::Csv) {
            throw CLI::ValidationError("--map", entry + ": only a CSV file takes a step column (" + io::toString(source)
                    + " lines hold their step under \"step\")");
        }
        if (!columns.emplace(column, entry).second) {
            throw CLI::ValidationError("--map", entry + ": the column " + column + " is mapped twice");
        }
        if (const auto previous = measures.find(measure); previous != measures.end()) {
            throw CLI::ValidationError("--map",
                entry + ": " + measure + " is already mapped by " + previous->second + " (a measure takes one column)");
        }
        measures.emplace(measure, entry);
    }
}

void importLogFile(const Context& context, io::LogSource source, const LogImportArguments& a)
{
    checkMapEntries(source, a.map);
    io::LogImportOptions options;
    options.map = a.map;
    const io::ImportedLog log = io::importLog(source, a.file, options);

    store::ExternalRunSpec spec;
    spec.source = io::toString(source);
    spec.name = a.name.empty() ? defaultName(spec.source, a.file) : a.name;
    spec.file = a.file;
    spec.estimatorJson = log.estimatorJson();
    spec.configJson = log.runConfigJson(absolutePath(a.file), a.map);
    store::RunStore store = context.openStore();
    const store::ExternalImportIds ids = store::storeExternalRun(store, spec, log.steps);

    std::int64_t firstStep = log.steps.front().step;
    std::int64_t lastStep = firstStep;
    for (const auto& step : log.steps) {
        firstStep = std::min(firstStep, step.step);
        lastStep = std::max(lastStep, step.step);
    }
    if (context.json) {
        nlohmann::json skipped = nlohmann::json::array();
        for (const auto& s : log.skipped) {
            skipped.push_back({{"line", s.line}, {"reason", s.reason}});
        }
        nlohmann::json metrics = nlohmann::json::array();
        for (const auto& m : log.metrics) {
            metrics.push_back({{"key", m.key}, {"measure", m.measure}, {"estimator", m.estimator}, {"unit", m.unit},
                {"user_mapped", m.userMapped}, {"steps", m.steps}});
        }
        nlohmann::json dropped = nlohmann::json::array();
        for (const auto& d : log.dropped) {
            dropped.push_back({{"line", d.line}, {"key", d.key}, {"reason", d.reason}});
        }
        nlohmann::json conflicts = nlohmann::json::array();
        for (const auto& c : log.conflicts) {
            conflicts.push_back({{"step", c.step}, {"key", c.key}, {"first_line", c.firstLine},
                {"first_value", c.firstValue}, {"line", c.line}, {"value", c.value}});
        }
        nlohmann::json out = {{"run_id", ids.runId}, {"name", spec.name}, {"kind", "external"},
            {"source", spec.source}, {"file", a.file}, {"workspace", store.path()}, {"lines_read", log.linesRead},
            {"steps_imported", log.steps.size()}, {"lines_skipped", log.skipped.size()}, {"skipped", skipped},
            {"lines_merged", log.linesMerged}, {"dropped_values", dropped}, {"conflicts", conflicts},
            {"first_step", firstStep}, {"last_step", lastStep}, {"metrics", metrics},
            {"unmapped_keys", log.unmappedKeys}};
        if (log.tinkerConfig) {
            out["tinker_config"] = nlohmann::json::parse(log.tinkerConfig->json());
        } else if (!log.tinkerConfigProblem.empty()) {
            out["tinker_config_problem"] = log.tinkerConfigProblem;
        }
        context.printJson(out);
        return;
    }
    std::ostream& out = *context.out;
    out << "imported run " << ids.runId << " \"" << spec.name << "\" (kind external, source " << spec.source
        << ") from " << a.file << "\n"
        << "lines read " << log.linesRead << ", steps imported " << log.steps.size() << " (steps " << firstStep
        << " to " << lastStep << "), lines skipped " << log.skipped.size() << ", lines merged (a step already "
        << "read) " << log.linesMerged << ", values dropped " << log.dropped.size() << "\n";
    if (log.tinkerConfig) {
        const auto config = nlohmann::json::parse(log.tinkerConfig->json());
        out << "run configuration " << log.tinkerConfig->file << ": num_substeps " << config["num_substeps"].dump()
            << ", async_config " << config["async_config"].dump() << " (kl_sample_train_* "
            << (log.tinkerConfig->includesPolicyDrift() ? "includes policy drift" : "has no policy drift recorded")
            << ")\n";
    } else if (!log.tinkerConfigProblem.empty()) {
        out << "run configuration not read: " << log.tinkerConfigProblem << "\n";
    }
    out << "\n";
    std::vector<std::vector<std::string>> rows;
    for (const auto& m : log.metrics) {
        rows.push_back({m.key, m.measure, std::to_string(m.steps), m.unit, m.estimator});
    }
    out << formatTable({"logged key", "measure", "steps", "unit", "estimator"}, rows);
    if (!log.skipped.empty()) {
        out << "\nskipped lines:\n";
        for (size_t i = 0; i < log.skipped.size() && i < kSkippedShown; ++i) {
            out << "  line " << log.skipped[i].line << ": " << log.skipped[i].reason << "\n";
        }
        if (log.skipped.size() > kSkippedShown) {
            out << "  ... and " << (log.skipped.size() - kSkippedShown) << " more (--json lists them all)\n";
        }
    }
    if (!log.dropped.empty()) {
        out << "\ndropped values (the rest of each line was kept):\n";
        for (size_t i = 0; i < log.dropped.size() && i < kSkippedShown; ++i) {
            out << "  line " << log.dropped[i].line << ": " << log.dropped[i].key << " " << log.dropped[i].reason
                << "\n";
        }
        if (log.dropped.size() > kSkippedShown) {
            out << "  ... and " << (log.dropped.size() - kSkippedShown) << " more (--json lists them all)\n";
        }
    }
    if (!log.conflicts.empty()) {
        out << "\nkeys logged with different values on lines of one step (the later line's value is kept):\n";
        for (size_t i = 0; i < log.conflicts.size() && i < kSkippedShown; ++i) {
            const auto& c = log.conflicts[i];
            out << "  step " << c.step << ", " << c.key << ": " << formatNumber(c.firstValue, 6) << " (line "
                << c.firstLine << ") replaced by " << formatNumber(c.value, 6) << " (line " << c.line << ")\n";
        }
        if (log.conflicts.size() > kSkippedShown) {
            out << "  ... and " << (log.conflicts.size() - kSkippedShown) << " more (--json lists them all)\n";
        }
    }
    if (!log.unmappedKeys.empty()) {
        out << "\n" << log.unmappedKeys.size() << " logged keys are not stored (read one with --map KEY=MEASURE): ";
        for (size_t i = 0; i < log.unmappedKeys.size() && i < 12; ++i) {
            out << (i ? ", " : "") << log.unmappedKeys[i];
        }
        out << (log.unmappedKeys.size() > 12 ? ", ..." : "") << "\n";
    }
}

void importAimetFile(const Context& context, const AimetImportArguments& a)
{
    io::AimetImportOptions options;
    if (!a.analysis.empty()) {
        options.analysis = io::parseAimetAnalysis(a.analysis); // CLI::IsMember checked the spelling
    }
    options.referenceScore = a.referenceScore;
    options.lowerIsBetter = a.lowerIsBetter;
    options.scheme = a.scheme;
    const io::AimetImport imported = io::importAimetSensitivity(a.file, options);

    store::ExternalRunSpec spec;
    spec.source = "aimet";
    spec.name = a.name.empty() ? defaultName(spec.source, a.file) : a.name;
    spec.file = a.file;
    spec.estimatorJson = imported.estimatorJson;
    spec.configJson = imported.configJson;
    store::ExternalScanSpec scan;
    scan.format = imported.format;
    scan.configJson = imported.configJson;
    for (const auto& cell : imported.cells) {
        scan.cells.push_back({cell.layer, cell.moduleGroup, cell.value, cell.sensitivity});
    }
    store::RunStore store = context.openStore();
    const store::ExternalImportIds ids = store::storeExternalRun(store, spec, {}, scan);
    const auto config = nlohmann::json::parse(imported.configJson);

    if (context.json) {
        nlohmann::json skipped = nlohmann::json::array();
        for (const auto& s : imported.skipped) {
            skipped.push_back({{"name", s.name}, {"reason", s.reason}});
        }
        nlohmann::json cells = nlohmann::json::array();
        for (const auto& c : imported.cells) {
            cells.push_back({{"name", c.name}, {"layer", c.layer}, {"module_group", c.moduleGroup}, {"value", c.value},
                {"sensitivity", c.sensitivity}});
        }
        context.printJson({{"run_id", ids.runId}, {"scan_id", *ids.scanId}, {"name", spec.name}, {"kind", "external"},
            {"source", "aimet"}, {"file", a.file}, {"workspace", store.path()},
            {"analysis", io::toString(imported.analysis)}, {"format", imported.format}, {"unit", config["unit"]},
            {"reference", {{"value", imported.reference}, {"kind", imported.referenceKind}}},
            {"entries_read", imported.entriesRead}, {"cells_stored", imported.cells.size()},
            {"entries_skipped", imported.skipped.size()}, {"skipped", skipped}, {"cells", cells}});
        return;
    }
    std::ostream& out = *context.out;
    out << "imported sensitivity scan " << *ids.scanId << " (run " << ids.runId << " \"" << spec.name
        << "\", kind external) from " << a.file << "\n"
        << "analysis " << io::toString(imported.analysis) << ", unit: " << config["unit"].get<std::string>() << "\n"
        << "reference " << formatNumber(imported.reference, 6) << " (" << imported.referenceKind << ")\n"
        << "entries read " << imported.entriesRead << ", cells stored " << imported.cells.size() << ", skipped "
        << imported.skipped.size() << "\n\n";
    // Most sensitive first.
    std::vector<io::AimetCell> cells = imported.cells;
    std::stable_sort(cells.begin(), cells.end(),
        [](const io::AimetCell& x, const io::AimetCell& y) { return x.sensitivity > y.sensitivity; });
    std::vector<std::vector<std::string>> rows;
    for (size_t i = 0; i < cells.size() && i < kSkippedShown; ++i) {
        const auto& c = cells[i];
        rows.push_back({c.layer < 0 ? "-" : std::to_string(c.layer), c.moduleGroup, formatNumber(c.value, 6),
            formatNumber(c.sensitivity, 6), c.name});
    }
    out << formatTable({"layer", "group", "value", "sensitivity", "AIMET name"}, rows);
    if (cells.size() > kSkippedShown) {
        out << "... and " << (cells.size() - kSkippedShown) << " more cells (--json lists them all)\n";
    }
    if (!imported.skipped.empty()) {
        out << "\nskipped entries:\n";
        for (size_t i = 0; i < imported.skipped.size() && i < kSkippedShown; ++i) {
            out << "  " << imported.skipped[i].name << ": " << imported.skipped[i].reason << "\n";
        }
        if (imported.skipped.size() > kSkippedShown) {
            out << "  ... and " << (imported.skipped.size() - kSkippedShown) << " more (--json lists them all)\n";
        }
    }
}

void addLogSubcommand(CLI::App* parent, Context& context, io::LogSource source, const std::string& description)
{
    auto arguments = std::make_shared<LogImportArguments>();
    CLI::App* command = parent->add_subcommand(io::toString(source), description);
    command->add_option("FILE", arguments->file, "The log file")->required()->type_name("FILE");
    command->add_option("--name", arguments->name, "Run name (default: the source and the file name)");
    command
        ->add_option("--map", arguments->map,
            "Read COLUMN (a logged key or CSV column) as MEASURE: mismatch_kl, k1, k3, k2, loss, reward, accuracy, "
            "entropy, staleness, rollout_tokens_per_s, train_tokens_per_s, wall_time_s, chi2_token, prob_diff_mean, "
            "prob_diff_max, prob_diff_std, prob_pearson_corr, pg_loss, teacher_kl, step_time_s, step (CSV), or "
            "extra:NAME; replaces the built-in source of that measure")
        ->type_name("COLUMN=MEASURE")
        ->check(CLI::Validator(
            [](std::string& entry) { return io::checkMapEntry(entry); }, "", "map entry"));
    command->callback([&context, source, arguments] { importLogFile(context, source, *arguments); });
}

void registerImportCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("import",
        "Import an outside trainer's per-step metrics (verl, Tinker, CSV) or AIMET per-layer sensitivity into the "
        "workspace as a run of kind external, with the estimator of every measure recorded");
    command->require_subcommand(1);
    addLogSubcommand(command, context, io::LogSource::Verl,
        "verl file logger JSONL (lines {\"step\": N, \"data\": {...}}): rollout_corr/kl -> k1, rollout_corr/k3_kl -> "
        "k3, training/rollout_probs_diff_* -> prob_diff_* (a probability difference, not a KL)");
    addLogSubcommand(command, context, io::LogSource::Tinker,
        "Tinker metrics.jsonl (lines {\"step\": N, ...}): optim/kl_sample_train_v1 -> k1, optim/kl_sample_train_v2 -> "
        "k2; num_substeps and async_config of the config.json beside it are recorded with the run");
    addLogSubcommand(command, context, io::LogSource::Csv,
        "CSV with a header row and a step column; columns named like a measure or a verl/Tinker key are read, "
        "others with --map");

    auto arguments = std::make_shared<AimetImportArguments>();
    CLI::App* aimet = command->add_subcommand("aimet",
        "AIMET QuantAnalyzer per-layer JSON (per_layer_quant_enabled/disabled.json eval scores or "
        "per_layer_mse_loss.json) as a layers x module-groups sensitivity scan, in AIMET's unit (not nats)");
    aimet->add_option("FILE", arguments->file, "The QuantAnalyzer JSON file")->required()->type_name("FILE");
    aimet->add_option("--name", arguments->name, "Run name (default: the source and the file name)");
    aimet
        ->add_option("--analysis", arguments->analysis,
            "Which QuantAnalyzer result the file holds (default: from the file name)")
        ->check(CLI::IsMember({"enabled", "disabled", "mse"}));
    aimet->add_option("--reference-score", arguments->referenceScore,
        "enabled: the float model's eval score; disabled: the fully quantized model's (default: the best or worst "
        "layer in the file)");
    aimet->add_flag("--lower-is-better", arguments->lowerIsBetter, "The eval score is a loss or perplexity");
    aimet->add_option("--scheme", arguments->scheme, "What AIMET simulated, e.g. \"int8 w8a8\" (the scan's format)");
    aimet->callback([&context, arguments] { importAimetFile(context, *arguments); });
}

const CommandRegistration registration(75, registerImportCommand);

} // namespace

} // namespace mismatch::cli

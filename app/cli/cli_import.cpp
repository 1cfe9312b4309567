// mismatch import verl|tinker|csv|tensorboard FILE [--name NAME] [--map COLUMN=MEASURE ...]
//                                            [--follow [--poll SECONDS] [--idle-exit SECONDS]]
// mismatch import aimet FILE [--name NAME] [--analysis enabled|disabled|mse] [--reference-score X]
//                            [--lower-is-better] [--scheme TEXT]
// Reads an outside tool's log or sensitivity file into the workspace as a run of kind "external" (one transaction:
// a failed import leaves the workspace unchanged). Lines that cannot be used are skipped and listed with their line
// numbers, unusable values dropped and listed with their line and key, lines of one step merged (conflicting keys
// listed); a file with no usable line exits 1. The options are the catalogue jobs "import_verl", "import_tinker",
// "import_csv", "import_tensorboard" and "import_aimet"'s parameters (core/jobs/model_jobs.h), which store through
// jobs::storeImport. --follow keeps reading a log as its trainer writes it (io::followLog: each new step stored as
// it arrives, truncation and rotation followed, each event a line on stderr) until Ctrl-C, SIGTERM or --idle-exit;
// it is not a catalogue parameter, since a follow runs until it is stopped (no job file runs one).
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/common/error.h"
#include "core/io/import_follow.h"
#include "core/jobs/model_jobs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <thread>

namespace mismatch::cli {

namespace {

// The table of the logged keys read, each with its measure, steps, unit and estimator.
void printMappedKeys(std::ostream& out, const io::ImportedLog& log)
{
    std::vector<std::vector<std::string>> rows;
    for (const auto& m : log.metrics) {
        rows.push_back({m.key, m.measure, std::to_string(m.steps), m.unit, m.estimator});
    }
    out << formatTable({"logged key", "measure", "steps", "unit", "estimator"}, rows);
}

// The keys no measure took (the first 12) and the import's notes.
void printUnmappedKeysAndNotes(std::ostream& out, const io::ImportedLog& log)
{
    if (!log.unmappedKeys.empty()) {
        out << "\n" << log.unmappedKeys.size() << " logged keys are not stored (read one with --map KEY=MEASURE): ";
        for (size_t i = 0; i < log.unmappedKeys.size() && i < 12; ++i) {
            out << (i ? ", " : "") << log.unmappedKeys[i];
        }
        out << (log.unmappedKeys.size() > 12 ? ", ..." : "") << "\n";
    }
    for (const std::string& note : log.notes) {
        out << "note: " << note << "\n";
    }
}

constexpr size_t kSkippedShown = 20; // skipped lines listed in the human summary (--json lists all)

void printLogImport(const Context& context, const jobs::ImportReport& report)
{
    if (context.json) {
        context.printJson(jobs::importResultJson(report));
        return;
    }
    const io::ImportedLog& log = *report.prepared.log;
    const store::ExternalRunSpec& spec = report.prepared.run;
    const store::ExternalImportIds& ids = report.ids;
    const std::string& file = spec.file;
    const auto [firstStep, lastStep] = jobs::stepRange(log);
    std::ostream& out = *context.out;
    out << "imported run " << ids.runId << " \"" << spec.name << "\" (kind external, source " << spec.source
        << ") from " << file << "\n"
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
    printMappedKeys(out, log);
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
    printUnmappedKeysAndNotes(out, log);
}

void printAimetImport(const Context& context, const jobs::ImportReport& report)
{
    if (context.json) {
        context.printJson(jobs::importResultJson(report));
        return;
    }
    const io::AimetImport& imported = *report.prepared.aimet;
    const store::ExternalRunSpec& spec = report.prepared.run;
    const store::ExternalImportIds& ids = report.ids;
    const auto config = nlohmann::json::parse(imported.configJson);
    std::ostream& out = *context.out;
    out << "imported sensitivity scan " << *ids.scanId << " (run " << ids.runId << " \"" << spec.name
        << "\", kind external) from " << spec.file << "\n"
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

void printFollow(const Context& context, const io::FollowResult& result, const std::string& workspace)
{
    if (context.json) {
        context.printJson(io::followResultJson(result, workspace));
        return;
    }
    const io::ImportedLog& log = result.log;
    std::ostream& out = *context.out;
    out << "followed " << result.file << " into run " << result.runId << " \"" << result.name
        << "\" (kind external, source " << io::toString(result.source) << (result.resumed ? ", continued" : "")
        << "); stopped " << (result.stoppedBy == "idle" ? "after --idle-exit without growth" : "on request") << "\n"
        << "steps stored " << result.stepsStored << ", updated by later lines " << result.stepsUpdated
        << ", read again unchanged " << result.stepsUnchanged << "; the run has " << result.runSteps << " steps ("
        << *result.firstStep << " to " << *result.lastStep << ")\n"
        << "lines read " << log.linesRead << ", lines skipped " << log.skipped.size() << ", values dropped "
        << log.dropped.size() << ", truncations " << result.truncations << ", rotations " << result.rotations
        << ", polls " << result.polls << "\n\n";
    printMappedKeys(out, log);
    printUnmappedKeysAndNotes(out, log);
}

// What --follow adds to a log import's options.
struct FollowFlags {
    bool follow = false;
    double pollSeconds = 1.0;
    std::optional<double> idleExitSeconds;
};

// `mismatch import SOURCE FILE --follow`: the spec's file, name and mapping followed until Ctrl-C, SIGTERM or
// --idle-exit; every message of the follow is a line on stderr as it happens.
void followImport(const Context& context, io::LogSource source, const jobs::JobSpec& spec, const FollowFlags& flags)
{
    io::FollowOptions options;
    options.import.map = spec.strings("map");
    options.name = spec.given("name") ? spec.text("name") : std::string();
    options.pollSeconds = flags.pollSeconds;
    options.idleExitSeconds = flags.idleExitSeconds;
    store::RunStore store = context.openStore();
    TerminalProgress terminal(*context.err, false); // no bar (a follow has no fraction): its messages are the lines
    terminal.cancelOnTerminate();
    Progress& progress = terminal.progress();
    options.onMessage = [&terminal](const std::string& message) { terminal.note(message); };
    options.wait = [&progress](double seconds) {
        // In slices, so that Ctrl-C or SIGTERM stops the follow within a tenth of a second.
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        while (!progress.cancelled() && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    };
    const io::FollowResult result = io::followLog(store, source, spec.text("file"), options, progress);
    printFollow(context, result, store.path());
}

// The command of an import job: its options from the catalogue; the file is read before the workspace is opened, so
// a bad file or option changes nothing.
void addImportSubcommand(
    CLI::App* parent, Context& context, const std::string& kind, std::optional<io::LogSource> source)
{
    const jobs::JobDefinition& definition = *jobs::findJob(kind);
    CLI::App* command = parent->add_subcommand(definition.command.back(), definition.summary);
    auto job = std::make_shared<JobOptions>(command, definition);
    auto follow = std::make_shared<FollowFlags>();
    if (source) {
        job->option("map")
            ->type_name("COLUMN=MEASURE")
            ->check(CLI::Validator([](std::string& entry) { return io::checkMapEntry(entry); }, "", "map entry"));
        CLI::Option* followFlag = command->add_flag("--follow", follow->follow,
            "Keep reading FILE as its trainer appends to it and store each new step as it arrives (one transaction "
            "a read), until Ctrl-C, SIGTERM or --idle-exit; a truncated or rotated (replaced) file is reported on "
            "stderr and read again from its start, steps it logs again merging into the stored ones. A follow "
            "under the name of a run that imported the same file continues that run");
        command->add_option("--poll", follow->pollSeconds, "Seconds between two reads of the file while following")
            ->type_name("SECONDS")
            ->default_val(1.0)
            ->check(between(0.05, 3600.0))
            ->needs(followFlag);
        command
            ->add_option_function<double>(
                "--idle-exit", [follow](double seconds) { follow->idleExitSeconds = seconds; },
                "Stop following once the file has not grown for this many seconds (for scripts and tests)")
            ->type_name("SECONDS")
            ->check(greaterThan(0.0))
            ->needs(followFlag);
    }
    command->callback([&context, job, source, follow] {
        if (source) {
            // Repeated columns or measures are argument errors (exit 2), like a malformed entry.
            const std::string problem = jobs::mapEntriesProblem(*source, job->option("map")->results());
            if (!problem.empty()) {
                throw CLI::ValidationError("--map", problem);
            }
        }
        const jobs::JobSpec spec = job->checkedSpec();
        if (source && follow->follow) {
            followImport(context, *source, spec, *follow);
            return;
        }
        jobs::PreparedImport prepared = jobs::prepareImport(spec);
        store::RunStore store = context.openStore();
        const jobs::ImportReport report = jobs::storeImport(store, std::move(prepared));
        if (source) {
            printLogImport(context, report);
        } else {
            printAimetImport(context, report);
        }
    });
}

void registerImportCommand(CLI::App& app, Context& context)
{
    CLI::App* command = app.add_subcommand("import",
        "Import an outside trainer's per-step metrics (verl, Tinker, CSV, a TensorBoard event file of verl or "
        "NeMo-RL) or AIMET per-layer sensitivity into the workspace as a run of kind external, with the estimator of "
        "every measure recorded");
    command->require_subcommand(1);
    // The options are the catalogue jobs' parameters (core/jobs/model_jobs.h).
    for (const io::LogSource source : io::logSources()) {
        addImportSubcommand(command, context, "import_" + io::toString(source), source);
    }
    addImportSubcommand(command, context, "import_aimet", std::nullopt);
}

const CommandRegistration registration(75, registerImportCommand);

} // namespace

} // namespace mismatch::cli

// mismatch run FILE.yaml [--check]: run a headless job file (one catalogue job, or a study of dependent steps).
// mismatch run --resume RUN: continue a stored run of a catalogue job from the spec it stored (JobSpec::ofRun).
// The file format is core/jobs/job_file.h's; --help lists every job of the catalogue with its parameters and the
// result fields a study's later steps refer to.
#include "app/cli/analysis_options.h"
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/common/error.h"
#include "core/jobs/job_file.h"
#include "core/jobs/stored_specs.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct RunArguments {
    std::string file;
    bool check = false;
    std::int64_t resume = 0;
};

// `mismatch run --resume RUN`: the job that started RUN, read back from the spec the run stored, continues it.
void resumeRun(Context& context, std::int64_t runId)
{
    store::RunStore store = context.openStore(store::OpenMode::OpenExisting);
    const std::string where = "run " + std::to_string(runId);
    const jobs::JobSpec spec = jobs::storedSpec(store, runId); // migrated from its record for an older run
    const std::string command = jobs::commandLine(spec.toArguments());
    TerminalProgress bar(*context.err);
    if (spec.definition().resume) { // else resumeRun says why not
        bar.note("resuming " + where + ": " + command);
    }
    const jobs::JobResult result = jobs::resumeRun(store, runId, bar.progress());
    bar.finish();
    if (context.json) {
        context.printJson({{"run_id", runId}, {"job", spec.toJson()}, {"result", result}});
        return;
    }
    *context.out << spec.kind() << " (" << where << "): " << result.dump() << "\n";
}

std::string catalogueHelp()
{
    std::string text = "\nJob file (YAML): `job: KIND` and the job's parameters by name, e.g.\n"
                       "  job: sensitivity\n  model: models/student\n  format: int8\n  prompts: probe.jsonl\n"
                       "Relative paths are relative to the file. A study file lists `steps:`, each with an `id:`; a "
                       "value ${ID.FIELD} is the field FIELD of an earlier step's result (a whole value keeps its "
                       "type: `scan: ${scan.scan_id}`).\n\nJobs (parameter: type [default]; results):\n";
    for (const jobs::JobDefinition& job : jobs::catalogue()) {
        text += "\n" + job.kind + " (`mismatch";
        for (const std::string& word : job.command) {
            text += " " + word;
        }
        text += "`): " + job.summary + "\n";
        for (const jobs::Parameter& p : job.parameters) {
            text += "  " + p.name + ": " + jobs::toString(p.type);
            if (!p.defaultValue.is_null()) {
                text += " [" + jobs::valueText(p.defaultValue) + "]";
            } else if (p.required) {
                text += " (required)";
            }
            text += "\n";
        }
        text += "  results:";
        for (const std::string& field : job.resultFields) {
            text += " " + field;
        }
        text += "\n";
    }
    return text;
}

} // namespace

// `mismatch run FILE` (and `mismatch submit FILE` with the local executor): every step in this process, into the
// workspace.
void runJobFileHere(Context& context, const std::string& path)
{
    const jobs::JobFile file = jobs::loadJobFile(path);
    store::RunStore store = context.openStore();
    TerminalProgress bar(*context.err);
    nlohmann::json steps = nlohmann::json::array();
    const auto onStep = [&](std::size_t index, const jobs::JobSpec& spec) {
        const std::string id = file.steps[index].id;
        bar.note((id.empty() ? spec.kind() : "step " + id) + ": " + jobs::commandLine(spec.toArguments()));
        steps.push_back({{"id", id}, {"job", spec.kind()}, {"arguments", spec.toArguments()}});
    };
    const auto onResult = [&](std::size_t index, const jobs::JobResult& result) {
        steps[index]["result"] = result;
    };
    jobs::runJobFile(file, store, bar.progress(), onStep, onResult);
    bar.finish();
    if (context.json) {
        context.printJson({{"file", file.path}, {"steps", steps}});
        return;
    }
    // One line a step: its result's scalar fields (ids, files, headline numbers); --json prints each result
    // whole, as the step's own command prints it.
    for (const nlohmann::json& step : steps) {
        std::string fields;
        for (const auto& [key, value] : step["result"].items()) {
            if (value.is_primitive()) {
                fields += (fields.empty() ? "" : ", ") + key + " " + (value.is_string() ? value.get<std::string>() : value.dump());
            }
        }
        *context.out << (step["id"].get<std::string>().empty() ? step["job"].get<std::string>()
                                                                : step["id"].get<std::string>())
                     << ": " << fields << "\n";
    }
}

namespace {

void registerRunCommand(CLI::App& app, Context& context)
{
    auto a = std::make_shared<RunArguments>();
    CLI::App* command = app.add_subcommand("run",
        "Run a job file: one job of the catalogue (listed below) with its parameters, or a study "
        "whose steps refer to earlier steps' results; what a GUI dialog's \"Export Job File...\" writes. "
        "`mismatch run --resume RUN` continues a stored run with the job it was started with");
    CLI::Option* fileOption = command->add_option("FILE", a->file, "Job or study file (YAML)")->type_name("FILE");
    CLI::Option* resumeOption
        = command
              ->add_option("--resume", a->resume,
                  "Continue run RUN of a catalogue job (sensitivity, admit, calibrate, train) after a kill, Ctrl-C or "
                  "failure, with the job it stored when it started")
              ->type_name("RUN")
              ->transform(runId())
              ->excludes(fileOption);
    CLI::Option* checkOption = command->add_flag("--check", a->check,
        "Only read and check the file (every step's parameters whose values do not depend on earlier steps); run "
        "nothing");
    command->footer(catalogueHelp());
    checkOption->excludes(resumeOption);
    command->callback([&context, a, fileOption, resumeOption] {
        if (fileOption->count() == 0 && resumeOption->count() == 0) {
            throw CLI::RequiredError("FILE (or --resume RUN)");
        }
        if (resumeOption->count() > 0) {
            resumeRun(context, a->resume);
            return;
        }
        if (!a->check) {
            runJobFileHere(context, a->file);
            return;
        }
        const jobs::JobFile file = jobs::loadJobFile(a->file);
        nlohmann::json steps = nlohmann::json::array();
        for (const jobs::JobFileStep& step : file.steps) {
            if (step.references.empty()) {
                jobs::resolveStep(file, step, {});
            }
            steps.push_back({{"id", step.id}, {"job", step.spec.kind()},
                {"references", nlohmann::json(step.references)}});
        }
        if (context.json) {
            context.printJson({{"file", file.path}, {"steps", steps}, {"valid", true}});
        } else {
            *context.out << file.path << ": " << file.steps.size() << " step(s), valid\n";
        }
    });
}

const CommandRegistration registration(71, registerRunCommand);

} // namespace

} // namespace mismatch::cli

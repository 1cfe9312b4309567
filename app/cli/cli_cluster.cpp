// mismatch submit FILE.yaml [--executor local|slurm] [--profile P] [--dir D] [--dry-run]
// mismatch cluster list | status DIR | cancel DIR | resume DIR | merge DIR | advance DIR | unit DIR UNIT
// Scale-out on Slurm (core/jobs/cluster.h): the units of a job file as sbatch jobs writing shards, merged into the
// workspace by the advance step; the local executor runs the file here, as `mismatch run` does.
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/common/error.h"
#include "core/jobs/cluster.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

nlohmann::json toJson(const jobs::cluster::Submission& s)
{
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& stage : s.stages) {
        stages.push_back({{"stage", stage.stage}, {"units", stage.units}, {"scripts", stage.scripts},
            {"job_ids", stage.jobIds}});
    }
    nlohmann::json units = nlohmann::json::array();
    for (const auto& unit : s.units) {
        units.push_back({{"id", unit.id}, {"label", unit.label}, {"shard", unit.shard}, {"stage", unit.stage},
            {"after", unit.after}, {"command", jobs::commandLine(unit.spec.toArguments())}});
    }
    return {{"directory", s.directory}, {"kind", s.kind}, {"dry_run", s.dryRun}, {"units", units},
        {"stages", stages}};
}

nlohmann::json toJson(const jobs::cluster::SubmissionStatus& s)
{
    nlohmann::json units = nlohmann::json::array();
    for (const auto& unit : s.units) {
        units.push_back({{"id", unit.id}, {"label", unit.label}, {"stage", unit.stage},
            {"state", jobs::cluster::toString(unit.state)}, {"slurm_job", unit.slurmJob},
            {"slurm_state", unit.slurmState}, {"detail", unit.detail}});
    }
    return {{"directory", s.directory}, {"name", s.name}, {"kind", s.kind}, {"workspace", s.workspace},
        {"submitted_at", s.submittedAt}, {"slurm_jobs", s.slurmJobs}, {"advance_job", s.advanceJob},
        {"advance_state", s.advanceState}, {"finished", s.finished}, {"result", s.result}, {"error", s.error},
        {"units", units}};
}

void printSubmission(const Context& context, const jobs::cluster::Submission& s)
{
    if (context.json) {
        context.printJson(toJson(s));
        return;
    }
    *context.out << s.directory << ": " << s.kind << ", " << s.units.size() << " unit(s)"
                 << (s.dryRun ? " (dry run: written, nothing submitted)" : "") << "\n";
    for (const auto& stage : s.stages) {
        *context.out << "stage " << stage.stage << ":";
        for (const std::string& id : stage.jobIds) {
            *context.out << " " << id;
        }
        *context.out << "\n";
        for (const std::string& script : stage.scripts) {
            *context.out << "  " << script << "\n";
        }
    }
    if (!s.dryRun) {
        *context.out << "follow it with `mismatch cluster status " << s.directory << "` (or the dashboard's Jobs tab)\n";
    }
}

void printStatus(const Context& context, const jobs::cluster::SubmissionStatus& s)
{
    if (context.json) {
        context.printJson(toJson(s));
        return;
    }
    using jobs::cluster::UnitState;
    *context.out << s.name << " (" << s.kind << ", " << s.directory << ")\n"
                 << s.count(UnitState::Pending) << " pending, " << s.count(UnitState::Running) << " running, "
                 << s.count(UnitState::Done) << " done, " << s.count(UnitState::Failed) << " failed, "
                 << s.count(UnitState::Merged) << " merged";
    if (!s.advanceJob.empty()) {
        *context.out << "; advance step " << s.advanceJob << (s.advanceState.empty() ? "" : " " + s.advanceState);
    }
    if (s.finished) {
        // The result's ids (run_id, calibration_id, scan_id, ...): the whole result is `--json`'s.
        std::string ids;
        for (const auto& [key, value] : jobs::cluster::resultIds(s.result)) {
            ids += (ids.empty() ? "" : ", ") + key + " " + std::to_string(value);
        }
        *context.out << "; finished (" << ids << ")";
    }
    *context.out << "\n";
    if (!s.error.empty()) {
        *context.out << "last advance step failed: " << s.error << "\n";
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& unit : s.units) {
        rows.push_back({unit.id, unit.label, std::to_string(unit.stage), jobs::cluster::toString(unit.state),
            unit.slurmJob, unit.slurmState, unit.detail});
    }
    *context.out << formatTable({"unit", "what", "stage", "state", "Slurm job", "Slurm state", "detail"}, rows);
}

void printLines(const Context& context, const std::vector<std::string>& lines)
{
    if (context.json) {
        context.printJson({{"lines", lines}});
        return;
    }
    for (const std::string& line : lines) {
        *context.out << line << "\n";
    }
}

void registerSubmit(CLI::App& app, Context& context)
{
    struct Arguments {
        std::string file;
        std::string executor = "local";
        std::string profile;
        std::string directory;
        bool dryRun = false;
    };
    auto a = std::make_shared<Arguments>();
    CLI::App* command = app.add_subcommand("submit",
        "Run a job or study file with an executor: local (default: here, as `mismatch run`), or slurm: its "
        "independent units (a calibration's training runs, a scan's layers, a screen's candidates x checkpoints, a "
        "study's steps) as sbatch jobs into shard workspaces, merged into the workspace by an advance step "
        "(--dependency=afterok)");
    command->add_option("FILE", a->file, "Job or study file (YAML)")->required()->check(CLI::ExistingFile);
    command->add_option("--executor", a->executor, "local or slurm")->check(CLI::IsMember({"local", "slurm"}));
    command->add_option("--profile", a->profile,
               "Cluster profile (YAML: partition, account, time, gpus, gpu_option, cpus, memory, sbatch, setup, "
               "mismatch; docs/cluster.md)")
        ->check(CLI::ExistingFile)
        ->type_name("FILE");
    command->add_option("--dir", a->directory, "Submission directory on the shared file system (default: "
                                               "WORKSPACE/cluster/NAME-N)")
        ->type_name("DIR");
    command->add_flag("--dry-run", a->dryRun, "Write the units and sbatch scripts, submit nothing");
    command->callback([&context, a] {
        if (a->executor == "local") {
            if (!a->profile.empty() || !a->directory.empty() || a->dryRun) {
                throw CLI::ValidationError("--profile, --dir and --dry-run", "belong to --executor slurm");
            }
            runJobFileHere(context, a->file);
            return;
        }
        jobs::cluster::SubmitOptions options;
        options.jobFile = a->file;
        options.workspace = context.workspaceDirectory();
        options.directory = a->directory;
        options.dryRun = a->dryRun;
        if (!a->profile.empty()) {
            options.profile = jobs::cluster::loadProfile(a->profile);
        }
        printSubmission(context, jobs::cluster::submit(options));
    });
}

void registerCluster(CLI::App& app, Context& context)
{
    CLI::App* cluster = app.add_subcommand("cluster",
        "Follow and steer Slurm submissions (mismatch submit --executor slurm): status, cancel, resume, merge; "
        "advance and unit are what the sbatch scripts run");
    cluster->require_subcommand(1);
    auto directory = std::make_shared<std::string>();
    auto unit = std::make_shared<std::string>();
    auto dryRun = std::make_shared<bool>(false);
    const auto withDirectory = [&](const char* name, const char* help) {
        CLI::App* sub = cluster->add_subcommand(name, help);
        sub->add_option("DIR", *directory, "Submission directory")->required()->type_name("DIR");
        return sub;
    };
    cluster->add_subcommand("list", "The submissions of the workspace (WORKSPACE/cluster), newest first")
        ->callback([&context] {
            std::vector<std::vector<std::string>> rows;
            nlohmann::json list = nlohmann::json::array();
            for (const std::string& dir : jobs::cluster::submissions(context.workspaceDirectory())) {
                const auto s = jobs::cluster::status(dir);
                list.push_back(toJson(s));
                using jobs::cluster::UnitState;
                rows.push_back({dir, s.kind, s.submittedAt,
                    std::to_string(s.count(UnitState::Done) + s.count(UnitState::Merged)) + "/"
                        + std::to_string(s.units.size()),
                    s.finished ? "finished" : (s.count(UnitState::Failed) ? "needs resume" : "in progress")});
            }
            if (context.json) {
                context.printJson(list);
            } else {
                *context.out << formatTable({"submission", "kind", "submitted", "units done", "state"}, rows);
            }
        });
    withDirectory("status", "Each unit's state: pending, running, done, failed (from squeue / sacct / scontrol), merged")
        ->callback([&context, directory] { printStatus(context, jobs::cluster::status(*directory)); });
    withDirectory("cancel", "scancel every job of the submission still queued or running")
        ->callback([&context, directory] {
            const auto ids = jobs::cluster::cancel(*directory);
            printLines(context, {ids.empty() ? std::string("nothing to cancel")
                                             : "asked Slurm to cancel " + std::to_string(ids.size()) + " job(s)"});
        });
    CLI::App* resume = withDirectory("resume",
        "Resubmit only the units whose shards are missing or unfinished (a killed unit continues from its last "
        "checkpoint), with a new advance step");
    resume->add_flag("--dry-run", *dryRun, "Write the scripts, submit nothing");
    resume->callback([&context, directory, dryRun] {
        printSubmission(context, jobs::cluster::resume(*directory, *dryRun));
    });
    withDirectory("merge", "Merge the finished units' shards into the workspace now (no final step)")
        ->callback([&context, directory] { printLines(context, jobs::cluster::mergeFinished(*directory)); });
    withDirectory("advance",
        "Merge the finished shards, then run the final step in the workspace (or submit the next stage a "
        "calibration's stopping rule asks for); what advance-K.sbatch runs")
        ->callback([&context, directory] {
            TerminalProgress bar(*context.err);
            const auto lines = jobs::cluster::advance(*directory, bar.progress());
            bar.finish();
            printLines(context, lines);
        });
    CLI::App* unitCommand = withDirectory("unit", "Run one unit into its shard, or continue it there (what each sbatch "
                                                  "task runs)");
    unitCommand->add_option("UNIT", *unit, "Unit id (u001, or a study step's id)")->required();
    unitCommand->callback([&context, directory, unit] {
        TerminalProgress bar(*context.err);
        const jobs::JobResult result = jobs::cluster::runUnit(*directory, *unit, bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(result);
        } else {
            *context.out << *unit << ": " << result.dump() << "\n";
        }
    });
}

const CommandRegistration submitRegistration(72, registerSubmit);
const CommandRegistration clusterRegistration(73, registerCluster);

} // namespace

} // namespace mismatch::cli

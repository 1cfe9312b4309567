#pragma once
// Scale-out on Slurm (`mismatch submit`, `mismatch cluster ...`): a job file's independent units handed to Slurm as
// sbatch jobs, each unit writing its own shard workspace in a shared directory, the shards merged into the user's
// workspace by one writer (core/store/store_merge.h). Slurm is the scheduler; nothing here schedules.
//
// A submission is a directory (default WORKSPACE/cluster/NAME-N, on the shared file system):
//   submission.json      what was submitted (the job file, the units, the stages with their Slurm job ids, the
//                        final step, the result once stored); rewritten through a temporary file and a rename
//   units/UNIT.yaml      each unit's job file (core/jobs/job_file.h; a study step keeps its ${...} references)
//   shards/SHARD/        each shard workspace (a study's dependent steps share their chain's shard)
//   results/UNIT.json    a finished unit's result ({"run_id", "result"}, ids of its shard), written when it ends
//   stage-K.sbatch       stage K's script: an array over its units (a study: step-ID-K.sbatch, one per step)
//   advance-K.sbatch     runs after stage K (--dependency=afterok): merges the finished shards into the workspace,
//                        then the final step, or submits the next stage when the final step needs more units
//   submit-K.sh          submits stage K's scripts in order, each with its dependencies by the job ids sbatch
//                        printed (`mismatch submit` and `cluster resume` run it; a dry run only writes it)
//   logs/                Slurm's output files
//
// Units (splitUnits): a calibration's training runs of its first round (per configuration and seed, the null group
// too) as `calibrate --unit LABEL/rR` jobs; its decision step is `calibrate --from-units` in the workspace, which
// adopts the merged units' runs and screens and trains nothing; when its stopping rule wants more seeds, the
// advance step submits them as the next stage. A sensitivity scan's layers (`sensitivity --layers L`, the
// embedding / lm_head cells as layer -1) and `sensitivity --from-units` assembling the scan. An admission check's
// candidates x checkpoints (one `admit` each, a candidates file of one entry); its decisions are the merged units'.
// A study's steps, each its own sbatch job with `--dependency=afterok` on the steps it refers to; steps connected by
// references share a shard (so that ${ID.FIELD} names rows of the shard a step runs in) and run one after another.
// A job that names rows of the workspace (admit's stored calibration, recipe build's scan) runs whole as the final
// step in the workspace, in an advance step with the units' resources. Any other job is one unit.
#include "core/common/progress.h"
#include "core/jobs/job_file.h"
#include "core/jobs/job_spec.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::jobs::cluster {

// A cluster profile (YAML, `--profile cluster.yaml`): how the units are asked of Slurm.
//   partition: gpu            account: my-lab           time: "04:00:00"   (per unit)
//   gpus: 1                   gpu_option: gpus-per-task | gres (--gres=gpu:N; gres_type: h100 -> gpu:h100:N)
//   cpus: 8                   memory: 64G (overrides the unit's own memory plan; not given: the plan's)
//   requeue: true             (preempted or failed nodes requeue the unit; it resumes from its shard)
//   sbatch: ["--qos=normal", "--constraint=h100"]     extra #SBATCH lines
//   setup: ["module load cuda/13", "source /opt/mismatch/env.sh"]   shell lines before each command
//   mismatch: /opt/mismatch/bin/mismatch              the program on the nodes (default: this one's path)
//   advance_time: "01:00:00"  advance_cpus: 2          the merge / decision step's own limits
struct Profile {
    std::string source; // the file it was read from ("" for the default)
    std::string partition;
    std::string account;
    std::string time; // Slurm time limit per unit ("" : the partition's default)
    std::int64_t gpus = 0;
    std::string gpuOption = "gpus-per-task"; // or "gres"
    std::string gresType; // gres only: gpu:TYPE:N
    std::int64_t cpus = 1;
    std::string memory; // "" : from the unit's memory plan
    bool requeue = true;
    std::vector<std::string> sbatch; // extra #SBATCH options, each "--name=value"
    std::vector<std::string> setup; // shell lines
    std::string mismatch; // program path on the nodes
    std::string advanceTime;
    std::int64_t advanceCpus = 1;
};

// InputError naming the file, the key and what was expected.
Profile loadProfile(const std::string& path);
Profile defaultProfile();

struct Unit {
    std::string id; // "u001"; a study step: its id
    std::string label; // what it computes, in words ("noise 0.1 seed 2", "layers 0", "candidate fp8 at step-20")
    std::string shard; // shard directory name under shards/
    std::int64_t stage = 1;
    std::vector<std::string> after; // units (of a study) that must finish first
    JobSpec spec; // a study step: its values without the references
    std::map<std::string, std::string> references; // a study step's ${...} values, resolved when it runs
};

struct UnitPlan {
    std::string kind; // "calibrate", "sensitivity", "admit", "study" or the job's kind (one unit)
    std::vector<Unit> units;
    std::optional<JobSpec> finalStep; // run in the workspace after the merge (calibrate, sensitivity)
};

// The units of a job file (see above). InputError for a file the job file reader refuses.
UnitPlan splitUnits(const JobFile& file);

// What a submission is asked to do.
struct SubmitOptions {
    std::string jobFile; // the job or study file
    std::string workspace; // the user's workspace directory (the one writer merges into it)
    std::string directory; // the submission directory ("" : WORKSPACE/cluster/NAME-N)
    Profile profile = defaultProfile();
    bool dryRun = false; // write the units and scripts, submit nothing
};

struct SubmittedStage {
    std::int64_t stage = 0;
    std::vector<std::string> units;
    std::vector<std::string> scripts; // sbatch scripts written (absolute paths)
    std::vector<std::string> jobIds; // Slurm job ids (none in a dry run): the units' jobs, then the advance job
};

struct Submission {
    std::string directory;
    std::string kind;
    std::vector<Unit> units;
    std::vector<SubmittedStage> stages; // what this call submitted
    bool dryRun = false;
};

// Splits the job file, writes the submission directory and its scripts, and (unless dry) submits them with sbatch,
// in order, each stage's advance step with --dependency=afterok on the stage's jobs. InputError for a bad job file
// or profile; a ToolError-like Error with sbatch's own message when sbatch refuses.
Submission submit(const SubmitOptions& options);

enum class UnitState { Pending, Running, Done, Failed, Merged };
std::string toString(UnitState state); // "pending", "running", "done", "failed", "merged"

struct UnitStatus {
    std::string id;
    std::string label;
    std::int64_t stage = 1;
    UnitState state = UnitState::Pending;
    std::string slurmJob; // "123_4" or "125" of its newest submission ("" : not submitted)
    std::string slurmState; // squeue's / sacct's / scontrol's state when Slurm knows it ("" otherwise)
    std::string detail; // why failed / pending, in words
};

struct SubmissionStatus {
    std::string directory;
    std::string name;
    std::string kind;
    std::string workspace;
    std::string submittedAt;
    std::vector<UnitStatus> units;
    std::vector<std::string> slurmJobs; // every job id submitted for it, oldest first
    std::string advanceJob; // the newest advance step's id
    std::string advanceState; // its Slurm state when known
    bool finished = false; // the final step's result is stored in the workspace (or, with none, every unit merged)
    nlohmann::json result; // the final step's result ids ({"run_id", ...}) once finished
    std::string error; // the last advance step's error, if it failed
    bool slurmUnreachable = false; // Slurm's tools could not be asked here: states come from the files alone
    std::int64_t count(UnitState state) const;
};

// The ids a finished submission's result names, in its key order: every integer under a key ending in "_id"
// (run_id, calibration_id, scan_id, ...) and merged_units. What the CLI's status line and the Jobs tab show of it (the
// whole result is `--json`'s).
std::vector<std::pair<std::string, std::int64_t>> resultIds(const nlohmann::json& result);

// Reads submission.json, the shards and results, and Slurm (squeue, then sacct or scontrol for jobs that left the
// queue) where those commands are present. InputError for a directory that is no submission.
SubmissionStatus status(const std::string& directory);

// The submissions under WORKSPACE/cluster (newest first); what the dashboard's Jobs tab lists.
std::vector<std::string> submissions(const std::string& workspaceDirectory);

// scancel of every job of the submission still queued or running; returns the ids asked to cancel.
std::vector<std::string> cancel(const std::string& directory);

// Resubmits only the units whose shards are missing or unfinished and are neither pending nor running in Slurm (a
// unit killed mid-run continues from its shard's last checkpoint), with a new advance step; a stale advance step
// (whose dependency can no longer be satisfied) is cancelled first. Nothing to resubmit and the result not stored:
// submits the advance step alone. Returns what it submitted.
Submission resume(const std::string& directory, bool dryRun = false);

// The advance step (`mismatch cluster advance DIR`, run by advance-K.sbatch on a node, or by hand): merges every
// finished shard not merged yet (store_merge, one transaction each), then, when every unit is merged, the final step
// in the workspace; a calibration whose stopping rule wants more seeds gets them as the next stage, submitted (with
// its own advance step) unless `submitNext` is false. Returns what it did in words, one line each.
std::vector<std::string> advance(const std::string& directory, Progress& progress, bool submitNext = true);

// Merges the finished shards only (the dashboard's Merge): no final step, nothing submitted.
std::vector<std::string> mergeFinished(const std::string& directory);

// Runs unit `unitId` into its shard (`mismatch cluster unit DIR UNIT`, what each sbatch task runs): a fresh run, or
// the continuation of the unit's run the shard holds unfinished (requeue, resume); a finished unit returns its
// stored result at once. Writes results/UNIT.json when it ends.
JobResult runUnit(const std::string& directory, const std::string& unitId, Progress& progress);

} // namespace mismatch::jobs::cluster

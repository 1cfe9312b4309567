#pragma once
// What core/jobs/cluster.cpp and cluster_slurm.cpp share: Slurm's tools run as programs, the sbatch scripts.
#include "core/jobs/cluster.h"

#include <optional>
#include <string>
#include <vector>

namespace mismatch::jobs::cluster {

struct ProgramOutput {
    int exitCode = 0;
    std::string out;
    std::string err;
};

// Whether `program` is an executable on PATH.
bool onPath(const std::string& program);
// Runs argv (argv[0] looked up on PATH) in `workingDirectory` ("" : this one) and waits; its output captured.
ProgramOutput runProgram(const std::vector<std::string>& argv, const std::string& workingDirectory = {});

// One sbatch script: the profile's options, then `body`.
struct ScriptRequest {
    Profile profile;
    std::string directory; // the submission's
    std::string comment; // what the script runs, in words
    std::string submitTag; // which submit-TAG.sh submits it
    std::string jobName;
    std::string outputPattern; // under logs/: "stage-1-%A_%a.out"
    std::string arrayIndices; // "0-3" or "1,4"; "" : no array
    std::string memory; // --mem value ("2048M")
    bool advance = false; // the merge / decision step (its own time and CPUs, no GPUs, no requeue)
    std::string body;
    bool advanceRunsAJob = false; // an advance step whose final step is a whole job (one that reads the workspace):
                                  // the units' time, CPUs and GPUs
};
std::string sbatchScript(const ScriptRequest& request);

// The state Slurm reports for job `jobId` ("123" or an array task "123_4"): squeue's, else sacct's, else
// scontrol's; "" when Slurm answered and no longer knows the job; nullopt when no tool could be asked (absent, or
// the controller unreachable from this machine).
std::optional<std::string> slurmJobState(const std::string& jobId);
// Pending for "" (unknown), PENDING, REQUEUED, ... and COMPLETED; Running; Failed for CANCELLED, FAILED, TIMEOUT,
// NODE_FAIL, PREEMPTED, OUT_OF_MEMORY and the rest.
UnitState unitStateOf(const std::string& slurmState);

// Runs a submit-TAG.sh (bash, in `directory`): its stdout lines ("NAME JOBID" each). Error with sbatch's message.
std::vector<std::string> submitScript(const std::string& script, const std::string& directory);

} // namespace mismatch::jobs::cluster

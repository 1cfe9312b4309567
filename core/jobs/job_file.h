#pragma once
// Headless job files (`mismatch run FILE.yaml`): one job, or a study of several whose steps refer to the results of
// earlier ones. What a user set up by clicking (a GUI dialog's "Export Job File...") runs on a batch machine.
//
// A job file is a YAML mapping: `job:` names the job of the catalogue (job_spec.h), every other key is one of its
// parameters (the names of `mismatch run --help`):
//
//   job: sensitivity
//   model: ../models/student        # relative paths are relative to this file
//   format: fp8_e4m3:block128
//   prompts: probe.jsonl
//   count: 32
//
// A study file is a mapping with `steps:`, a list of such mappings, each with an `id:` (letters, digits, '_' and
// '-') that later steps use to refer to its result: `${ID.FIELD}` is the field FIELD of step ID's result (the
// fields each job reports are listed by `mismatch run --help`; `${ID.decisions.0.decision}` goes into lists). A
// value that is exactly one reference takes the result's value with its type (`scan: ${scan.scan_id}` is an
// integer); a reference inside other text is replaced by the value's text (`out: ${scan.scan_id}-recipe.yaml`).
// A reference may only name an earlier step.
//
// Every problem is an InputError naming the file, "line L, column C" of the value and the parameter: an unknown
// job or parameter, a value of the wrong type or out of range, a reference to a step that is not earlier or to a
// field its result does not have.
#include "core/jobs/job_spec.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace mismatch::jobs {

struct JobFileStep {
    std::string id; // a study step's id ("" in a single-job file)
    JobSpec spec; // the values without references
    int line = 0; // where the step starts
    int column = 0;
    // Parameter -> where its value is written (1-based line, column), for messages.
    std::map<std::string, std::pair<int, int>> places;
    // Parameter -> its text with ${...} references, resolved when the step runs.
    std::map<std::string, std::string> references;
};

struct JobFile {
    std::string path;
    bool study = false; // a `steps:` file
    std::vector<JobFileStep> steps;
};

JobFile loadJobFile(const std::string& path);
JobFile parseJobFile(const std::string& text, const std::string& path);

// The spec as a job file (only the parameters that differ from their defaults; paths as the spec holds them).
std::string jobFileText(const JobSpec& spec);
// Writes it through a temporary file and a rename, after requireJobFileIsNoPathOf.
void writeJobFile(const std::string& path, const JobSpec& spec);
// A job file's text (one job or a study, as jobFileText or a study writer made it) written the same way, after
// checking every step as writeJobFile does. InputError for text that is not a job file.
void writeJobFileText(const std::string& path, const std::string& text);
// Issue 46: InputError (requireOutputNotInput) when the job file at `path` would overwrite a file the job names
// (any path parameter, input or output, relative ones taken from the job file's directory) or land inside a model
// directory it names (a directory holding config.json).
void requireJobFileIsNoPathOf(const std::string& path, const JobSpec& spec);

// A step's spec with its references resolved against `results` (step id -> JobResult) and checked (validate(),
// then checkInputs());
// InputError naming the file, line, column and parameter otherwise.
JobSpec resolveStep(const JobFile& file, const JobFileStep& step, const std::map<std::string, JobResult>& results);

// Runs every step in order (each through JobSpec::run); `onStep(index, spec)` is called before a step runs and
// `onResult(index, result)` after. Returns the results in step order. A failing step stops the study (the error
// names the step).
std::vector<JobResult> runJobFile(const JobFile& file, store::RunStore& store, Progress& progress,
    const std::function<void(std::size_t, const JobSpec&)>& onStep = {},
    const std::function<void(std::size_t, const JobResult&)>& onResult = {});

} // namespace mismatch::jobs

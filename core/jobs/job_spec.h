#pragma once
// The job catalogue: one specification per long job, in the spirit of QGIS's processing algorithms. A job
// definition (JobDefinition) lists the job's named parameters (type, default, range, help text, the CLI flag and
// the GUI field label that name it in each front-end) and how to run it; a JobSpec is one request of that job (a
// kind plus parameter values). Every front-end goes through it:
// - the CLI creates its options for the job from the parameter list (app/cli/job_options.h) and fills a JobSpec;
// - a GUI dialog's job() builds a JobSpec from its widgets, its command text is toArguments(), its errors name
//   its field labels (validate() names parameters, each front-end maps them to its own words);
// - `mismatch run FILE.yaml` reads a JobSpec (or a study of several) from a job file (job_file.h);
// - run(store, progress) calls the job's core function and returns its result's ids as JSON, which a study's later
//   steps refer to (`${scan.scan_id}`).
//
// Values: a parameter holds a JSON value of its type (string, integer, number, boolean, array). An unset
// parameter takes its default; a parameter without a default is "not given" (null), which some jobs read as
// "take it from elsewhere" (admit's sampling options: the calibration's protocol). Two specs are equal when every
// parameter's effective value is equal, so a value equal to the default and an unset value are the same request.
#include "core/common/progress.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::jobs {

enum class ParameterType {
    Text, // any string
    Path, // a file or directory (relative paths in a job file are relative to that file)
    Choice, // one of `choices`
    Integer, // int64
    Number, // finite double
    Flag, // boolean, a CLI flag without a value
    PathList, // a list of paths (a positional list on the CLI: admit's STUDENT...)
    IntegerList, // a list of whole numbers
    NumberList, // a list of numbers
    ChoiceList, // a list of values, each one of `choices` (compare-objectives' objectives)
    TextList, // a list of strings (a repeatable option: generate's --stop; never split at commas)
};
std::string toString(ParameterType type); // "text", "path", ...
// Whether values of the type are lists; the type of one element (Path of PathList; the type itself for a scalar).
bool isList(ParameterType type);
ParameterType elementType(ParameterType type);

struct Parameter {
    std::string name; // the job file key and JSON key: "max_tokens"
    ParameterType type = ParameterType::Text;
    std::string flag; // the CLI's name: "--max-tokens", or a positional "MODEL"; "-x" short forms after a comma
    std::string label; // the GUI's field label: "Generated tokens per prompt"
    std::string help; // help text (the CLI's --help, the GUI's tooltip)
    nlohmann::json defaultValue; // null: none (the parameter is "not given" unless set)
    std::optional<double> low; // numeric range (also every element of a numeric list)
    bool lowExclusive = false;
    std::optional<double> high;
    std::string highReason; // optional: why values above `high` are refused, after "must be <= HIGH, got V: "
    std::vector<std::string> choices; // Choice: the values allowed
    // Choice, optional: for a value that is not one of `choices`, what is wrong with it ("" accepts it after all:
    // "cuda" for "cuda:0"); replaces the generic "expected one of ..." (the device: why a CUDA device is missing).
    std::function<std::string(const std::string&)> whyNotAChoice;
    bool required = false;
    std::vector<std::string> excludes; // parameters that may not be given with this one
    std::vector<std::string> needs; // parameters this one needs

    bool positional() const { return !flag.empty() && flag.front() != '-'; }
    // The long flag ("--max-tokens" of "--max-tokens,-m"; the name of a positional).
    std::string longFlag() const;
};

// A problem with one parameter ("" for the job as a whole); message says what is expected.
struct ParameterError {
    std::string parameter;
    std::string message;
};

class JobSpec;

// What a job's run reports: its ids and headline numbers ({"run_id", "scan_id", ...}), the fields a study's
// later steps refer to.
using JobResult = nlohmann::json;

struct JobDefinition {
    std::string kind; // "sensitivity", "recipe_build", "admit"
    std::vector<std::string> command; // the CLI subcommand path: {"recipe", "build"}
    std::string summary; // one line: what the job does
    std::vector<Parameter> parameters;
    // Checks across parameters (after the per-parameter checks passed).
    std::function<std::vector<ParameterError>(const JobSpec&)> check;
    // Checks that read the job's input files (a run file's fields against the parameters, say), named by parameter;
    // empty for most jobs. Not part of validate() (a spec is valid or not on its values alone: a job file or a
    // command line can be parsed on another machine); requireValid() and the GUI's field check run them.
    std::function<std::vector<ParameterError>(const JobSpec&)> checkInputs;
    // Runs the job (validate() has passed). `onRunStarted` receives the job's run id when it is recorded.
    std::function<JobResult(store::RunStore&, const JobSpec&, Progress&, const std::function<void(std::int64_t)>&)>
        run;
    // The fields of its JobResult (documented in `mismatch run --help`).
    std::vector<std::string> resultFields;
    // The kind of the run the job records ("sensitivity", "calibrate", ...; empty for a job that records none):
    // run() has the store keep the spec's JSON with that run (RunInfo::jobJson), so a stored run says what was
    // asked and JobSpec::ofRun reads it back.
    std::string runKind;
    // The kind of run a particular spec records when it is not runKind (a calibration unit: "calibrate_unit");
    // empty: runKind for every spec.
    std::function<std::string(const JobSpec&)> runKindOf;
    // Continues a killed, cancelled or failed run of this job (its own run, `runId`) from what it stored; empty for
    // jobs that cannot be resumed. `mismatch run --resume RUN` calls it with the spec read back by ofRun.
    std::function<JobResult(store::RunStore&, std::int64_t runId, Progress&, const std::function<void(std::int64_t)>&)>
        resume;

    const Parameter* parameter(const std::string& name) const;
};

class JobSpec {
public:
    // InputError when `kind` is not in the catalogue.
    explicit JobSpec(const std::string& kind);
    explicit JobSpec(const JobDefinition& definition);

    const std::string& kind() const;
    const JobDefinition& definition() const { return *definition_; }

    // Sets a parameter (InputError for a name the job does not have; the value's type is checked by validate()).
    // null, or an empty list for a list without a default, unsets it.
    JobSpec& set(const std::string& name, nlohmann::json value);
    // Unsets it (back to its default / not given).
    JobSpec& unset(const std::string& name);
    // Whether the parameter was set or has a default.
    bool given(const std::string& name) const;
    // Whether the parameter was set (by the user, a job file, a writer), its default aside.
    bool isSet(const std::string& name) const { return values_.contains(name); }
    // The effective value (set, else the default; null when neither).
    nlohmann::json value(const std::string& name) const;
    template <typename T> T get(const std::string& name) const { return value(name).get<T>(); }
    std::string text(const std::string& name) const; // "" when not given
    std::int64_t integer(const std::string& name) const; // 0 when not given
    double number(const std::string& name) const; // 0 when not given
    bool flag(const std::string& name) const; // false when not given
    std::vector<std::string> strings(const std::string& name) const; // empty when not given
    std::vector<std::int64_t> integers(const std::string& name) const;
    std::vector<double> numbers(const std::string& name) const;

    // Every problem: checkParameters(), then (when it finds none) the job's own checks across parameters.
    std::vector<ParameterError> validate() const;
    // Each parameter on its own: type, range, choices, required, excludes / needs.
    std::vector<ParameterError> checkParameters() const;
    // The definition's checkInputs (nothing when validate() finds a problem or the job has none).
    std::vector<ParameterError> checkInputs() const;
    // InputError(source, parameter, message) for the first problem of validate(), then of checkInputs() (run()
    // calls it first).
    void requireValid(const std::string& source) const;

    // {"job": kind, "parameters": {name: value}} with only the parameters whose effective value differs from
    // the default (so equal specs have equal JSON).
    nlohmann::json toJson() const;
    // The inverse; InputError naming `source` and the parameter for an unknown job or parameter.
    static JobSpec fromJson(const nlohmann::json& json, const std::string& source = "job");

    // The exact `mismatch` command line of the job after the program name (the subcommand path, then every
    // parameter whose effective value differs from its default), e.g. {"sensitivity", "/m", "--format", "int8"}.
    std::vector<std::string> toArguments() const;

    // Runs the job through its core function (requireValid first); the job's run stores toJson() (runKind).
    JobResult run(store::RunStore& store, Progress& progress,
        const std::function<void(std::int64_t)>& onRunStarted = {}) const;

    // The spec a stored run was started with (its RunInfo::jobJson, read by fromJson); nullopt for a run that no
    // catalogue job started (runs stored before the catalogue recorded its jobs, imports, a sweep's training runs).
    // InputError naming the run for a stored spec this version cannot read.
    static std::optional<JobSpec> ofRun(const store::RunInfo& run);

    bool operator==(const JobSpec& other) const;
    bool operator!=(const JobSpec& other) const { return !(*this == other); }

private:
    const JobDefinition* definition_;
    nlohmann::json values_ = nlohmann::json::object(); // only what was set
};

// `spec` with every path parameter (path and list of paths, set or defaulted) absolute and lexically normal, taken
// from the current directory; empty paths stay empty. What a job means wherever it is read again: the stored
// request of a run (expectJobRun) and a cluster unit that runs on another machine, from another directory.
JobSpec withAbsolutePaths(JobSpec spec);

// Has `store` keep `spec` (its paths made absolute) with the run the job is about to record (its definition's
// runKind; RunInfo::jobJson): what JobSpec::run does, for front-ends that call the job's core function themselves
// (the CLI, which prints the typed result). Nothing for a job that records no run.
void expectJobRun(store::RunStore& store, const JobSpec& spec);

// Every job of the catalogue, in the order `mismatch run --help` lists them.
const std::vector<JobDefinition>& catalogue();
// nullptr when there is no such job.
const JobDefinition* findJob(const std::string& kind);

// "mismatch ARG..." with every argument shell-quoted (core/common/shell_quote.h): what a user pastes into a shell.
std::string commandLine(const std::vector<std::string>& arguments);

// A parameter's value from its text form (a CLI argument or a YAML scalar): "8" -> 8 for an Integer, "true" for a
// Flag, a list element for a list type. nullopt with `error` set when the text is not of the type.
std::optional<nlohmann::json> parseValue(const Parameter& parameter, const std::string& text, std::string* error);
// The text form of a scalar value (the inverse: what toArguments writes); a list's elements joined by commas
// (how the CLI's help shows a list default).
std::string valueText(const nlohmann::json& value);

// `message` with each "parameter: ..." / "'parameter'" named in `names` (parameter -> front-end word, e.g.
// "max_tokens" -> "--max-tokens") rewritten; `errors` as one line each.
std::string describeErrors(const std::vector<ParameterError>& errors,
    const std::function<std::string(const std::string& parameter)>& name);

} // namespace mismatch::jobs

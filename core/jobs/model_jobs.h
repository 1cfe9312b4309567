#pragma once
// The catalogue's model and file jobs, most of which store nothing in the workspace (`mismatch run` opens it all the
// same):
// "generate" (`mismatch generate`: the emulated rollout engine's samples and log-probabilities as JSON Lines),
// "logits" (`mismatch logits`: the trainer's reference log-probabilities of a prompt set as safetensors),
// "quantize" (`mismatch quantize`: a safetensors file fake-quantized to a weight format), "zoo_build" (`mismatch
// zoo build`: the demo pair trained from scratch) and "zoo_shape" (`mismatch zoo shape`: a random-weight checkpoint
// of a real model's shape), and the imports "import_verl", "import_tinker", "import_csv" (`mismatch import verl|tinker|
// csv`: an outside trainer's per-step metrics as an external run) and "import_aimet" (`mismatch import aimet`: AIMET
// per-layer sensitivity as an external scan), which store their run.
// Each spec maps to its core function's options here, once, for every front-end (the CLI prints the typed result;
// `mismatch run` runs the spec); a job's JobResult is its result's JSON, the same object the command's `--json`
// prints.
#include "core/analysis/generate.h"
#include "core/io/import_aimet.h"
#include "core/io/import_log.h"
#include "core/jobs/job_spec.h"
#include "core/analysis/reference_logits.h"
#include "core/quant/quantize.h"
#include "core/train/zoo.h"
#include "core/store/import_store.h"
#include "core/train/zoo_shape.h"

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

namespace mismatch::jobs {

// The options of a valid "generate" spec (its out parameter is the file generateToFile writes).
analysis::GenerateOptions generateOptions(const JobSpec& spec);
// {"model", "weights", "precision", "noise", "prompts", "generated_tokens", "waves", "finish_reasons", "rejected",
// "out", "kv_capacity_tokens", "seconds"}: `mismatch generate --json` and the job's result.
nlohmann::json generateResultJson(const analysis::GenerateFileResult& result);

// The options of a valid "logits" spec (model, prompts and out are its parameters of those names).
analysis::ReferenceLogitsOptions logitsOptions(const JobSpec& spec);
// {"out", "prompts", "positions", "precision"}: `mismatch logits --json` and the job's result.
nlohmann::json logitsResultJson(const analysis::ReferenceLogitsFile& result);

// What a "quantize" job wrote: the file, each tensor's result and the totals.
struct QuantizeReport {
    std::string input;
    std::string output;
    quant::QuantizeFileOptions options; // the granularity resolved (the format's default when none was given)
    std::vector<quant::TensorQuantizeResult> tensors;
    std::int64_t quantized = 0;
    std::int64_t copied = 0;
    std::uint64_t inputBytes = 0;
    std::uint64_t formatBytes = 0;
};
// The options of a valid "quantize" spec.
quant::QuantizeFileOptions quantizeOptions(const JobSpec& spec);
// quant::quantizeSafetensorsFile of the spec's input and output (cancellable between tensors; the output is
// written through a temporary file and a rename).
QuantizeReport quantizeFile(const JobSpec& spec, Progress& progress);
// {"input", "output", "format", "granularity", "keep_dtype", "tensors", "quantized", "copied", "input_bytes",
// "format_bytes"}: `mismatch quantize --json` and the job's result.
nlohmann::json quantizeResultJson(const QuantizeReport& report);

// The options of a valid "zoo_build" spec: the defaults of the resource directory's demo pair, with the spec's
// output and prompt directories, step overrides and model selection.
train::ZooOptions zooBuildOptions(const JobSpec& spec);
// One built model: {"name", "directory", "parameters", "steps", "final_loss", "heldout_accuracy",
// "heldout_evaluated", "train_seconds"} (`mismatch zoo build --json` prints the list; the job's result is
// {"models": list}).
nlohmann::json zooModelJson(const train::ZooModelReport& report);

// The options of a valid "zoo_shape" spec (its shape and directory are the parameters of those names).
train::ZooShapeOptions zooShapeOptions(const JobSpec& spec);
// {"shape", "of", "directory", "parameters", "bytes", "shards", "tokenizer", "random_weights", "seconds"}: `mismatch
// zoo shape --json` and the job's result.
nlohmann::json zooShapeResultJson(const train::ModelShape& shape, const train::ZooShapeReport& report);

// An import read and checked, not stored yet: the CLI reads the file before it opens the workspace, so a bad file
// changes nothing (the store itself is one transaction).
struct PreparedImport {
    store::ExternalRunSpec run; // name (the spec's, else "SOURCE FILE-NAME"), source, file, config and estimators
    std::optional<io::ImportedLog> log; // import_verl, import_tinker, import_csv
    std::optional<io::AimetImport> aimet; // import_aimet
};
// Reads the file of a valid import spec (InputError naming the file for one with no usable line).
PreparedImport prepareImport(const JobSpec& spec);

struct ImportReport {
    PreparedImport prepared;
    store::ExternalImportIds ids;
    std::string workspace;
};
// Stores a prepared import as a run of kind "external" (with its sensitivity scan for AIMET), all or nothing.
ImportReport storeImport(store::RunStore& store, PreparedImport prepared);
// `mismatch import ... --json` and the job's result: {"run_id", "name", "kind", "source", "file", "workspace", ...}
// with the log's counts, skipped lines, dropped values, conflicts, step range, metrics and unmapped keys, or the
// AIMET scan's "scan_id", analysis, format, unit, reference, counts, skipped entries and cells.
nlohmann::json importResultJson(const ImportReport& report);
// The smallest and largest step of an imported log (it has at least one step).
std::pair<std::int64_t, std::int64_t> stepRange(const io::ImportedLog& log);
// What is wrong with a log import's COLUMN=MEASURE entries ("" when nothing): a malformed entry, a step column
// outside a CSV file, a column mapped twice, a measure mapped by two entries.
std::string mapEntriesProblem(io::LogSource source, const std::vector<std::string>& entries);

// The definitions (catalogue() lists them).
JobDefinition generateJob();
JobDefinition logitsJob();
JobDefinition quantizeJob();
JobDefinition zooBuildJob();
JobDefinition zooShapeJob();
JobDefinition importLogJob(io::LogSource source);
JobDefinition importAimetJob();

} // namespace mismatch::jobs

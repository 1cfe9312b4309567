#pragma once
// The catalogue's model and file jobs, which store nothing in the workspace (`mismatch run` opens it all the same):
// "generate" (`mismatch generate`: the emulated rollout engine's samples and log-probabilities as JSON Lines),
// "logits" (`mismatch logits`: the trainer's reference log-probabilities of a prompt set as safetensors),
// "quantize" (`mismatch quantize`: a safetensors file fake-quantized to a weight format), "zoo_build" (`mismatch
// zoo build`: the demo pair trained from scratch) and "zoo_shape" (`mismatch zoo shape`: a random-weight checkpoint
// of a real model's shape).
// Each spec maps to its core function's options here, once, for every front-end (the CLI prints the typed result;
// `mismatch run` runs the spec); a job's JobResult is its result's JSON, the same object the command's `--json`
// prints.
#include "core/analysis/generate.h"
#include "core/jobs/job_spec.h"
#include "core/model/reference_logits.h"
#include "core/quant/quantize.h"
#include "core/train/zoo.h"
#include "core/train/zoo_shape.h"

#include <nlohmann/json.hpp>

namespace mismatch::jobs {

// The options of a valid "generate" spec (its out parameter is the file generateToFile writes).
analysis::GenerateOptions generateOptions(const JobSpec& spec);
// {"model", "weights", "precision", "noise", "prompts", "generated_tokens", "waves", "finish_reasons", "rejected",
// "out", "kv_capacity_tokens", "seconds"}: `mismatch generate --json` and the job's result.
nlohmann::json generateResultJson(const analysis::GenerateFileResult& result);

// The options of a valid "logits" spec (model, prompts and out are its parameters of those names).
model::ReferenceLogitsOptions logitsOptions(const JobSpec& spec);
// {"out", "prompts", "positions", "precision"}: `mismatch logits --json` and the job's result.
nlohmann::json logitsResultJson(const model::ReferenceLogitsFile& result);

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

// The definitions (catalogue() lists them).
JobDefinition generateJob();
JobDefinition logitsJob();
JobDefinition quantizeJob();
JobDefinition zooBuildJob();
JobDefinition zooShapeJob();

} // namespace mismatch::jobs

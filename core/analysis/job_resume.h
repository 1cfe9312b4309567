#pragma once
// What the resumable analysis jobs (sensitivity, admission check, calibration) share to continue a run that was
// killed, cancelled or failed: the run checked (it exists, is of the job's kind and has not finished), and the
// job's input files checked against the digests stored in the run's config_json when it started, so that a resume
// never mixes results of two different inputs.
//
// Digests: FNV-1a (64 bit) of a file's bytes, for files up to 64 MiB; a larger file (a model's weights) is
// digested from its size, its first and last MiB and 64 KiB blocks at 16 evenly spaced offsets ("sampled:"
// prefix), which catches a replaced or re-exported checkpoint without reading gigabytes at every start.
#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/store/run_store.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::analysis {

// Hex digest of a file (see above); InputError naming the file when it cannot be read.
std::string fileDigest(const std::string& path);

// {absolute path: digest} of each file.
nlohmann::json fileDigests(const std::vector<std::string>& paths);
// The files of a model directory whose content decides its results: config.json, tokenizer.json (when present),
// the safetensors files and their index.
std::vector<std::string> modelFiles(const std::string& directory);

// InputError naming the first file of `stored` ({path: digest}) that no longer exists or whose content differs
// from what run `runId` started with.
void checkInputsUnchanged(const nlohmann::json& stored, std::int64_t runId, const std::string& job);

// A resume's options come from the job spec the run stored (core/jobs: jobs::storedSpec); InputError naming the
// first key whose value in `fresh`, the record those options make (what a new run would store as its config_json),
// differs from the run's stored record `stored`: a file the spec names but no digest covers (a run file, a
// candidates file) changed since, and continuing would mix two configurations. Keys in `ignore` (progress the run
// added: "inputs", "sweep_runs", ...) and keys only one of the two has (records written by other versions) are
// not compared.
void checkRecordUnchanged(const nlohmann::json& stored, const nlohmann::json& fresh, const std::vector<std::string>& ignore,
    std::int64_t runId, const std::string& job);

// The run `runId` a `--resume` continues: InputError (file: the database, location: "run N") when there is no such
// run, it is not of `kind` or it has finished. Returns the run and its parsed config_json.
struct ResumableRun {
    store::RunInfo info;
    nlohmann::json config;
};
ResumableRun resumableRun(const store::RunStore& store, std::int64_t runId, const std::string& kind);

// A stored option `key` of a resumed run's config_json (`source` names the run for the message); InputError when
// it is missing or of another type (a run started by an older version).
template <typename T>
T storedOption(const nlohmann::json& config, const char* key, const std::string& source)
{
    try {
        return config.at(key).get<T>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError(source, key, std::string("missing or malformed (the run was started by an older version "
                                                  "and cannot be resumed): ") + jsonErrorDetail(error));
    }
}

} // namespace mismatch::analysis

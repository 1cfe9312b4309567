#pragma once
// The headless demo job: what `mismatch demo` and the GUI's "Run the demo" do on the built-in resources.
#include "core/analysis/admission.h"
#include "core/common/progress.h"
#include "core/store/run_store.h"

#include <optional>

#include <string>
#include <vector>

namespace mismatch::analysis {

struct DemoOptions {
    std::string resourceDirectory;  // built-in models and prompt sets
    // Screen the shipped candidates (resources/candidates/demo.yaml) against the shipped calibration of the demo
    // student (resources/calibrations/arith-student.json) with the admission check; false: only register.
    bool screen = true;
    // Probe prompts of the screen; unset: the calibration's protocol (its count). Another count is a screen under
    // another protocol, allowed and labelled as such (tests use a few prompts to stay fast).
    std::optional<std::int64_t> probeCount;
};

struct DemoReport {
    std::int64_t runId = 0;                          // the demo's own run in the workspace
    std::vector<store::ModelRecord> models;          // registered from resources/models/*
    std::vector<store::PromptSetRecord> promptSets;  // registered from resources/prompts/*.jsonl
    store::StoreSummary summary;                     // what the workspace holds afterwards
    // The screening (when DemoOptions::screen):
    std::optional<std::int64_t> calibrationId;       // the shipped calibration as stored in this workspace
    std::string calibrationCommand;                  // the command that made it
    std::int64_t calibrationStep = 0;                // the bracket used
    std::optional<AdmissionResult> admission;        // one decision per candidate, with intervals
};

// Registers the built-in demo models and prompt sets in the workspace (idempotent), stores the shipped calibration
// of the demo student (once per workspace), screens the shipped candidate configurations with the admission
// check on the shipped student checkpoint of the calibration's first calibrated step
// (resources/models/arith-student-step<S>, written by the baseline run of that calibration) against that step's
// bracket, under the calibration's protocol, and reports what it decided and what the workspace holds.
DemoReport runDemo(store::RunStore& store, const DemoOptions& options, Progress& progress);
// InputError("demo", "count", ...) for a probe count outside 2..limits::kMaxDemoProbeCount; runDemo calls it
// before it stores anything, front-ends before they open the workspace.
void checkDemoOptions(const DemoOptions& options);

// {"workspace": the database path, "models", "prompt_sets", "calibration_id", "calibration_command",
// "calibration_step", "admission": the admission check's JSON (toJson(AdmissionResult), the rows `mismatch admit
// --json` prints) or null, "runs", "schema_version"}: `mismatch demo --json` and the demo job's result.
nlohmann::json toJson(const DemoReport& report, const std::string& databasePath);

// Stores a calibration written by `mismatch calibrate --json` for a built-in student (its "student_in_resources"
// and "prompts_in_resources" are relative to `resourceDirectory`: the student and the protocol's prompt set are
// taken from there) as the calibration "<name> (shipped)": one finished record run per sweep run (its step data
// stays with whoever ran the calibration), the points and brackets, and in config_json the file itself (protocol,
// flags, replicates, null comparisons). Idempotent by content: a shipped calibration with the same content already in
// the store is reused; one re-made since (the file changed) is stored beside the old one as "<name> (shipped
// <digest>)", so that a workspace made with an earlier release never screens against the old budget unawares.
// InputError naming the file for a malformed one. Returns the calibration id.
std::int64_t storeShippedCalibration(store::RunStore& store, const std::string& path, const std::string& resourceDirectory);

}  // namespace mismatch::analysis

#pragma once
// The headless demo job: what `mismatch demo` and the GUI's "Run the demo" do on the built-in resources.
#include "core/common/progress.h"
#include "core/store/run_store.h"

#include <string>
#include <vector>

namespace mismatch::analysis {

struct DemoOptions {
    std::string resourceDirectory;  // built-in models and prompt sets
};

struct DemoReport {
    std::int64_t runId = 0;                          // the demo's own run in the workspace
    std::vector<store::ModelRecord> models;          // registered from resources/models/*
    std::vector<store::PromptSetRecord> promptSets;  // registered from resources/prompts/*.jsonl
    store::StoreSummary summary;                     // what the workspace holds afterwards
};

// Registers the built-in demo models and prompt sets in the workspace (idempotent) and reports what it holds.
DemoReport runDemo(store::RunStore& store, const DemoOptions& options, Progress& progress);

}  // namespace mismatch::analysis

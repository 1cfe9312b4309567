#pragma once
// Layer sensitivity (spec "Layer sensitivity"): quantize one cell at a time, everything else BF16, and measure the
// mismatch it adds over the BF16 unit.
//
// Cells: per layer the seven projections (q, k, v, o, gate, up, down: that module's weights in the scan's
// format, its input activations in the scan's activation format) and "kv" (that layer's KV cache only, in the
// scan's KV format); at layer -1 the embedding and lm_head ("embed_tokens", "lm_head"), or one cell
// "embed_lm_head" when the model ties them (one tensor: a recipe cannot give them different formats). Each cell
// is an ordinary recipe (cellRecipe) resolved by the recipe parser, so what is measured is what a recipe file
// would run.
//
// Measurement: the BF16 unit is the plain BF16 engine's mismatch against the FP32 trainer (model weights, no
// noise) on the prompt set; every cell's engine runs the same prompts with the same per-prompt seeds, so cells
// are paired with the unit and with each other. added = KL_cell - KL_unit (token means, nats per token); its
// interval is a paired bootstrap over prompts (pairedRatioDifference), the cell's own KL interval is
// metrics::bootstrapRatio.
//
// Store: a run of kind "sensitivity" (config_json = the options), a sensitivity_scans row linked to it, then each
// cell in its own transaction as soon as it is measured (a GUI can watch the heatmap fill). A cancelled or failed
// scan leaves only whole cells and its run marked cancelled / failed.
//
// Resume (resumeSensitivity, `mismatch sensitivity --resume RUN`): a scan killed, cancelled or failed continues
// with the options of the job spec its run stored (core/jobs: jobs::storedSpec); its run's config_json holds digests
// of the model's files and the prompt set, checked first: a changed input is an InputError naming the file. The BF16 unit is measured again (every
// draw is a function of the seeds, so it must equal the stored unit exactly; the cells' paired intervals need its
// per-prompt values), the cells already stored are kept and only the others are measured, so the scan ends with
// every cell once and the same numbers as an uninterrupted scan (the cells' `seconds` are wall-clock).
//
// Units (scale-out, core/jobs/cluster.h): the cells are independent given the BF16 unit, so a scan splits by layer.
// A unit (`layers`) is an ordinary scan of only those layers' cells (-1: the embedding / lm_head cells), in its own
// shard workspace; its record says which layers ("layers"), and its scan row's config_json also keeps the unit's
// interval and tokens ("bf16_unit"), which the assembly cannot measure. Once the shards are merged, `fromUnits`
// measures nothing: it takes every cell from the finished unit scans in the store whose record equals its own but
// for the layers (model, prompts, formats, cells, sampling, engine and bootstrap), requires one BF16 unit of them
// all and inputs whose digests are those of the files now, and stores one scan, in one transaction, as the
// single-process scan of every cell stores it (run kind "sensitivity", the same record and inputs, the cells in
// sensitivityCells() order with the units' numbers; the run's config_json adds "assembled_from", the units' run ids
// and layers). Every measurement is a function of the seeds, so on the same compute path the cells are those of
// the single-process scan bit for bit (their `seconds` are the units').
#include "core/analysis/rollout_measure.h"
#include "core/common/progress.h"
#include "core/store/analysis_store.h"
#include "core/store/run_store.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct SensitivityOptions {
    std::string modelDirectory;
    std::string promptSetPath;
    std::int64_t count = 0; // first N prompts; 0: all
    MeasureSettings settings;
    quant::WeightPrecision weights; // the format scanned
    quant::ActivationPrecision activations; // input activations of a quantized projection (bf16 by default)
    bool kvCells = true; // also the KV-cache-only cell of every layer
    quant::KvPrecision kv {quant::KvFormat::Fp8E4m3, quant::KvScales::PerTensor, quant::KvCalibration::Probe};
    bool embeddingCells = true; // embed_tokens / lm_head cells
    // Only the cells of these layers (store::kNoLayer: the embedding / lm_head cells); empty: every cell. A cluster
    // unit's share (see "Units" above).
    std::vector<std::int64_t> layers;
    // Assemble the scan from the finished unit scans in the store; measures nothing (see "Units" above).
    bool fromUnits = false;
    // Called once the scan's run is recorded (or reopened by a resume), with its id (front-ends print it).
    std::function<void(std::int64_t runId)> onRunStarted;
};

// One cell of the scan: what it quantizes.
struct SensitivityCellSpec {
    std::int64_t layer = store::kNoLayer;
    std::string group; // q, k, v, o, gate, up, down, kv, embed_tokens, lm_head, embed_lm_head
    std::vector<std::string> modules; // module names it quantizes (recipe names); for kv the attention block
};

// The cells of a scan over `config`, in table order (layer 0..L-1, groups q..down then kv; then layer -1).
std::vector<SensitivityCellSpec> sensitivityCells(const model::ModelConfig& config, bool kvCells, bool embeddingCells);
// The cells a scan of `options` measures: sensitivityCells(), or only those of options.layers. InputError naming
// parameter "layers" for a layer the model does not have.
std::vector<SensitivityCellSpec> scanCells(const model::ModelConfig& config, const SensitivityOptions& options);
// The recipe that quantizes only `cell` (everything else BF16).
quant::Recipe cellRecipe(const SensitivityCellSpec& cell, const quant::WeightPrecision& weights,
    const quant::ActivationPrecision& activations, const quant::KvPrecision& kv);
// "fp8_e4m3/block128" (+ " a8" with fp8 activations): the scan's format text.
std::string scanFormat(const quant::WeightPrecision& weights, const quant::ActivationPrecision& activations);

struct SensitivityResult {
    std::int64_t runId = 0;
    std::int64_t scanId = 0;
    std::string format;
    double bf16Unit = 0.0; // nats per token
    metrics::Interval bf16UnitInterval;
    std::int64_t unitTokens = 0;
    std::vector<store::SensitivityCell> cells; // in sensitivityCells() order
    std::int64_t layers = 0;
    double seconds = 0.0;
};

// Runs the scan, or assembles it (fromUnits). InputError for unreadable models/prompts, formats the model cannot
// take and layers it does not have; with fromUnits, InputError naming parameter "from_units" (nothing stored) when a
// cell of the scan is in no finished unit scan (naming the missing layers) or the unit scans disagree, and naming
// the file when an input changed since a unit measured it; CancelledError after marking the run cancelled.
SensitivityResult runSensitivity(store::RunStore& store, const SensitivityOptions& options, Progress& progress);

// Continues sensitivity run `runId` (see above) with `options`, the options of the spec it was started with.
// InputError when the run does not exist, is not a sensitivity scan, has finished or an input changed; Error when
// the re-measured BF16 unit differs from the stored one.
SensitivityResult resumeSensitivity(
    store::RunStore& store, std::int64_t runId, const SensitivityOptions& options, Progress& progress);

// The record of what a scan measured, stored as its config_json (read by the recipe builder, the report and the
// migration of runs stored without a job spec); the job adds "inputs", the digests of the model's files and the
// prompt set (job_resume.h). A unit's record has "layers" (sorted, once each); fromUnits is not recorded (an
// assembled scan measured what the single-process scan measures).
std::string sensitivityConfigJson(const SensitivityOptions& options);
// The options of a stored config_json (the inverse); InputError naming `source` when a key is missing or malformed.
SensitivityOptions parseSensitivityConfig(const std::string& configJson, const std::string& source);

} // namespace mismatch::analysis

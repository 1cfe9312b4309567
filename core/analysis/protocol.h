#pragma once
// The measurement protocol (spec "Measurement protocol"): what a mismatch figure depends on besides the rollout
// configuration. Mismatch is a token mean, so it moves with the response length (max tokens), the sampling
// settings, the prompts and how FP8 KV-cache scales were fitted; a budget and the screens compared with it must
// use one protocol, and a figure measured under another is labelled as such.
//
// Fields (JSON keys in brackets):
//   prompts [prompts]           the prompt set measured (absolute path); screens take the first `count` prompts
//   count [count]               prompts per measurement (0: all of the set)
//   max tokens [max_tokens]     new tokens per response
//   sampling [temperature, top_p, top_k]
//   seed [seed], seed policy [seed_policy]
//                               "per_prompt": a prompt's sampling seed is FNV-1a of its id combined with `seed`,
//                               so a prompt gets the same draw in every configuration (the pairing of every
//                               analysis)
//   KV-scale policy [kv_scales] "frozen_first_batch": FP8 KV scales measured by the candidate engine itself on
//                               the prefill of the first `kv_first_batch` prompts, then frozen (what a training
//                               run does at its first step); "fitted_per_measurement": fitted on every prompt of
//                               the measurement (a BF16 forward over all of them; the older analysis default)
//   BF16 unit [bf16_unit]       "same_weights": the plain BF16 engine at the weights being measured (the screened
//                               checkpoint; in a calibration, each run's own weights at every step), same prompts
//                               and seeds. Every "x BF16" multiple divides by the unit of its own step/checkpoint.
//
// A calibration stores the protocol its budget is to be screened under: its base run's training prompt set
// (count = the probe count), the rollouts' max tokens, sampling and seed, KV scales frozen from a first batch of
// prompts_per_step prompts, and the same-weights unit. Admission checks and recipe builds take it by default;
// a screen under another protocol is refused unless asked for explicitly, and then carries the list of the
// fields that differ (protocolDifferences) wherever it is shown.
#include "core/analysis/rollout_measure.h"
#include "core/train/run_config.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::analysis {

struct MeasurementProtocol {
    std::string prompts;
    std::int64_t count = 0;
    std::int64_t maxTokens = 64;
    double temperature = 1.0;
    double topP = 1.0;
    std::int64_t topK = 0;
    std::uint64_t seed = 0;
    std::string seedPolicy = "per_prompt";
    KvScalePolicy kvScales = KvScalePolicy::FittedPerMeasurement;
    std::int64_t kvFirstBatch = 0; // frozen_first_batch only (>= 1)
    std::string bf16Unit = "same_weights";
};

bool operator==(const MeasurementProtocol& a, const MeasurementProtocol& b);
inline bool operator!=(const MeasurementProtocol& a, const MeasurementProtocol& b)
{
    return !(a == b);
}

nlohmann::json protocolToJson(const MeasurementProtocol& protocol);
// A bootstrap interval as every analysis's --json prints it: {"estimate", "low", "high", "confidence", "resamples"}.
nlohmann::json toJson(const metrics::Interval& interval);
// InputError naming `source` and the key for a missing or malformed field.
MeasurementProtocol protocolFromJson(const nlohmann::json& json, const std::string& source);

// "max_tokens 64 (budget: 40)", one entry per field that differs; `actual` first, `reference` in brackets. Empty
// when the protocols agree.
std::vector<std::string> protocolDifferences(
    const MeasurementProtocol& actual, const MeasurementProtocol& reference, const std::string& referenceName);

// The screening protocol of a calibration of `base` (see above); `probeCount` prompts of base.prompts.
MeasurementProtocol calibrationProtocol(const train::RunConfig& base, std::int64_t probeCount);

// The protocol of an analysis measured with `settings` on `count` prompts of `promptSet`.
MeasurementProtocol settingsProtocol(const std::string& promptSet, std::int64_t count, const MeasureSettings& settings);
// `settings` with the protocol's sampling, seed and KV-scale policy (engine memory, batch and bootstrap kept).
MeasureSettings applyProtocol(const MeasurementProtocol& protocol, MeasureSettings settings);

} // namespace mismatch::analysis

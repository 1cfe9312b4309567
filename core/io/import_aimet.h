#pragma once
// AIMET QuantAnalyzer per-layer results read into a layers x module-groups sensitivity matrix. QuantAnalyzer
// writes flat JSON objects {"layer name": value, ...}:
//   per_layer_quant_enabled.json   eval score with only that layer quantized (all others in float)
//   per_layer_quant_disabled.json  eval score with every layer quantized except that one
//   per_layer_mse_loss.json        MSE between the float and the quantized layer's output
// An eval score is whatever the user's eval_callback returns (accuracy, a loss, ...): AIMET's unit is that score,
// not nats, and the imported scan records so. Each cell keeps the value as read (`value`) and a sensitivity
// oriented so that larger means more sensitive (`sensitivity`):
//   enabled:  reference - score   (reference: the float model's score when given, else the best layer's score)
//   disabled: score - reference   (reference: the fully quantized score when given, else the worst layer's score)
//   mse:      the MSE itself
// (with --lower-is-better the score differences change sign and best/worst swap).
// Layer names map onto cells like the local sensitivity scan's: model.layers.3.mlp.down_proj -> (3, down),
// ...self_attn.q_proj -> (i, q); AIMET-ONNX node names such as /model/layers.3/mlp/down_proj/MatMul as well;
// embed_tokens -> (-1, embed_tokens), lm_head -> (-1, lm_head). Other entries (norms, activations) are skipped
// and reported.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::io {

enum class AimetAnalysis { QuantEnabled, QuantDisabled, MseLoss };
std::string toString(AimetAnalysis analysis); // "enabled", "disabled", "mse"
std::optional<AimetAnalysis> parseAimetAnalysis(const std::string& text);

struct AimetImportOptions {
    // Which QuantAnalyzer output the file is; unset: from the file name (per_layer_quant_enabled,
    // per_layer_quant_disabled, per_layer_mse_loss), else an InputError asks for it.
    std::optional<AimetAnalysis> analysis;
    // enabled: the float model's eval score; disabled: the fully quantized model's. Unset: the best (enabled) or
    // worst (disabled) layer in the file.
    std::optional<double> referenceScore;
    bool lowerIsBetter = false; // the eval score is a loss or perplexity
    std::string scheme; // what AIMET simulated (e.g. "int8 w8a8"), recorded as the scan's format
};

struct AimetCell {
    std::string name; // the layer name as in the file
    std::int64_t layer = 0; // -1 for embed_tokens and lm_head
    std::string moduleGroup;
    double value = 0.0;
    double sensitivity = 0.0;
};

struct AimetSkipped {
    std::string name;
    std::string reason;
};

struct AimetImport {
    std::string file;
    AimetAnalysis analysis = AimetAnalysis::QuantEnabled;
    std::string format; // the scan's format: "aimet:" + scheme, or "aimet:unspecified scheme"
    double reference = 0.0; // what sensitivities are measured from (0 for mse)
    std::string referenceKind; // "given", "best layer in the file", "worst layer in the file", "zero"
    std::int64_t entriesRead = 0;
    std::vector<AimetCell> cells; // in file order
    std::vector<AimetSkipped> skipped; // in file order
    std::string configJson; // units, analysis, reference and column meanings, for sensitivity_scans.config_json
    std::string estimatorJson; // for external_runs.estimator_json
};

// Maps a module name onto (layer, module group); nullopt for names that are not one of the quantized modules.
std::optional<std::pair<std::int64_t, std::string>> sensitivityCellOf(const std::string& moduleName);

// Throws InputError naming the file (and line:column for bad JSON) for an unreadable file, a file that is not one
// JSON object, an analysis that cannot be told, or no usable entry.
AimetImport importAimetSensitivity(const std::string& path, const AimetImportOptions& options = {});

} // namespace mismatch::io

// fuzz_import: imported logs. The first byte picks the reader and its options, the rest is the file:
//   bits 0-1    0 verl JSONL, 1 Tinker metrics.jsonl, 2 CSV (importLog, core/io/import_log.h),
//               3 AIMET QuantAnalyzer JSON (importAimetSensitivity, core/io/import_aimet.h)
//   bits 2-3    importLog: which --map entries are given; AIMET: enabled, disabled, mse, or told by the file name
//   bit 4       AIMET: lower is better; bit 5: a reference score is given
#include "tests/fuzz/fuzz_target.h"

#include "core/io/import_aimet.h"
#include "core/io/import_log.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

MISMATCH_FUZZ_TARGET(import)
{
    if (size == 0) {
        return 0;
    }
    const int mode = data[0];
    const int reader = mode & 3;
    const int variant = (mode >> 2) & 3;
    try {
        if (reader < 3) {
            static const mismatch::io::LogSource sources[]
                = {mismatch::io::LogSource::Verl, mismatch::io::LogSource::Tinker, mismatch::io::LogSource::Csv};
            static const std::vector<std::vector<std::string>> maps
                = {{}, {"kl=k1"}, {"iteration=step", "mismatch=k3", "score=reward"}, {"loss=extra:loss", "x=k2"}};
            mismatch::io::LogImportOptions options;
            options.map = maps[variant];
            const std::string path = fuzz::writeScratchFile(reader == 2 ? "log.csv" : "log.jsonl", data + 1, size - 1);
            const mismatch::io::ImportedLog log = mismatch::io::importLog(sources[reader], path, options);
            fuzz::check(!log.steps.empty(), "an import keeps at least one step");
            // Lines of one step are merged: every step appears once, and every conflict names a kept step and a
            // later line than the one whose value it replaced.
            std::set<std::int64_t> steps;
            for (const auto& step : log.steps) {
                fuzz::check(steps.insert(step.step).second, "each step is imported once");
            }
            for (const auto& conflict : log.conflicts) {
                fuzz::check(steps.count(conflict.step) == 1, "a conflict names an imported step");
                fuzz::check(conflict.line > conflict.firstLine, "a conflict's replacing line comes later");
            }
            for (const auto& dropped : log.dropped) {
                fuzz::check(dropped.line >= 1 && !dropped.reason.empty(), "a dropped value is located and explained");
            }
            log.estimatorJson();
            log.runConfigJson(path, options.map);
        } else {
            static const char* const names[] = {"scores.json", "scores.json", "scores.json", "per_layer_mse_loss.json"};
            mismatch::io::AimetImportOptions options;
            if (variant < 3) {
                options.analysis = static_cast<mismatch::io::AimetAnalysis>(variant);
            }
            options.lowerIsBetter = (mode & 16) != 0;
            if (mode & 32) {
                options.referenceScore = 0.5;
            }
            const std::string path = fuzz::writeScratchFile(names[variant], data + 1, size - 1);
            const mismatch::io::AimetImport result = mismatch::io::importAimetSensitivity(path, options);
            fuzz::check(!result.cells.empty(), "an AIMET import keeps at least one cell");
            for (const mismatch::io::AimetCell& cell : result.cells) {
                fuzz::check(std::isfinite(cell.value) && std::isfinite(cell.sensitivity), "AIMET cells are finite");
            }
        }
    } catch (const mismatch::InputError&) {
    }
    return 0;
}

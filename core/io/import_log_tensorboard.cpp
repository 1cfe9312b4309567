// Log import: TensorBoard event files (verl's or NeMo-RL's tensorboard logger), parsed by tensorboard_events.h.
#include "core/io/import_log_internal.h"

#include "core/io/tensorboard_events.h"

#include "core/common/input_limits.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mismatch::io::importing {

// An event file: each record's scalars are one "line" (its record number), the step its Event's step.
ImportedLog importTensorBoard(const std::string& path, const LogImportOptions& options)
{
    LogReader reader(LogSource::TensorBoard, path);
    std::vector<Mapping> mappings = keyValueMappings(LogSource::TensorBoard, parseMapEntries(options));
    const TensorBoardEvents events = parseTensorBoardEvents(readInputFile(path, limits::kImportFile, "event file"));
    // verl's tags include its validation metrics, val-core/<data source>/acc/mean@<N>: a key pattern, read when the
    // file holds one tag of it.
    std::set<std::string> tags;
    for (const TensorBoardScalar& scalar : events.scalars) {
        tags.insert(scalar.tag);
    }
    addPatternMappings(LogSource::TensorBoard, tags, mappings, reader.result().notes);
    reader.setMappings(std::move(mappings));
    std::size_t problem = 0;
    const auto reportProblemsBefore = [&](std::int64_t record) {
        for (; problem < events.problems.size() && events.problems[problem].record <= record; ++problem) {
            const TensorBoardProblem& p = events.problems[problem];
            reader.skip(p.record, "byte " + std::to_string(p.offset) + ": " + p.reason);
        }
    };
    for (std::size_t i = 0; i < events.scalars.size();) {
        const std::int64_t record = events.scalars[i].record;
        reportProblemsBefore(record);
        Value step;
        step.kind = Value::Number;
        step.number = static_cast<double>(events.scalars[i].step);
        std::vector<std::pair<std::string, Value>> values;
        for (; i < events.scalars.size() && events.scalars[i].record == record; ++i) {
            Value value;
            value.number = events.scalars[i].value;
            value.kind = std::isfinite(value.number) ? Value::Number : Value::NonFinite;
            if (value.kind == Value::NonFinite) {
                value.text = std::isnan(value.number) ? "NaN" : (value.number > 0 ? "Infinity" : "-Infinity");
            }
            values.emplace_back(events.scalars[i].tag, value);
        }
        ++reader.result().linesRead;
        reader.record(record, step, values);
    }
    reportProblemsBefore(std::numeric_limits<std::int64_t>::max());
    return reader.finish();
}

} // namespace mismatch::io::importing

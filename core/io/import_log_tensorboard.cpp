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

std::vector<ParsedLine> tensorBoardRecords(
    const TensorBoardEvents& events, std::int64_t recordsBefore, std::uint64_t bytesBefore, bool withEnd)
{
    std::vector<ParsedLine> records;
    std::size_t problem = 0;
    const auto problemsBefore = [&](std::int64_t record) {
        for (; problem < events.problems.size() && events.problems[problem].record <= record; ++problem) {
            const TensorBoardProblem& p = events.problems[problem];
            if (!withEnd && events.endsInsideRecord && p.offset == events.bytesRead) {
                continue; // the incomplete last record: read again when the file has grown
            }
            ParsedLine skipped;
            skipped.line = recordsBefore + p.record;
            skipped.skipReason = "byte " + std::to_string(bytesBefore + p.offset) + ": " + p.reason;
            skipped.dataLine = false;
            records.push_back(std::move(skipped));
        }
    };
    for (std::size_t i = 0; i < events.scalars.size();) {
        const std::int64_t record = events.scalars[i].record;
        problemsBefore(record);
        ParsedLine line;
        line.line = recordsBefore + record;
        line.step.kind = Value::Number;
        line.step.number = static_cast<double>(events.scalars[i].step);
        for (; i < events.scalars.size() && events.scalars[i].record == record; ++i) {
            Value value;
            value.number = events.scalars[i].value;
            value.kind = std::isfinite(value.number) ? Value::Number : Value::NonFinite;
            if (value.kind == Value::NonFinite) {
                value.text = std::isnan(value.number) ? "NaN" : (value.number > 0 ? "Infinity" : "-Infinity");
            }
            line.values.emplace_back(events.scalars[i].tag, value);
        }
        records.push_back(std::move(line));
    }
    problemsBefore(std::numeric_limits<std::int64_t>::max());
    return records;
}

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
    for (const ParsedLine& record : tensorBoardRecords(events, 0, 0, true)) {
        reader.feed(record);
    }
    return reader.finish();
}

} // namespace mismatch::io::importing

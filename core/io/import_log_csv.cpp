// Log import: CSV files (Weights & Biases exports and other tables with a header row and a step column).
#include "core/io/import_log_internal.h"

#include "core/common/error.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>

namespace mismatch::io::importing {

namespace {

// Splits one CSV record (RFC 4180 quoting; a record does not span lines). Returns false with `problem` set on an
// unterminated or misplaced quote.
bool splitCsv(const std::string& line, std::vector<std::string>& fields, std::string& problem)
{
    fields.clear();
    std::string field;
    size_t i = 0;
    while (true) {
        field.clear();
        if (i < line.size() && line[i] == '"') {
            ++i;
            bool closed = false;
            while (i < line.size()) {
                if (line[i] == '"') {
                    if (i + 1 < line.size() && line[i + 1] == '"') {
                        field += '"';
                        i += 2;
                        continue;
                    }
                    closed = true;
                    ++i;
                    break;
                }
                field += line[i++];
            }
            if (!closed) {
                problem = "unterminated quoted field (column " + std::to_string(fields.size() + 1) + ")";
                return false;
            }
            if (i < line.size() && line[i] != ',') {
                problem = "text after a closing quote in column " + std::to_string(fields.size() + 1);
                return false;
            }
        } else {
            while (i < line.size() && line[i] != ',') {
                field += line[i++];
            }
        }
        fields.push_back(field);
        if (i >= line.size()) {
            return true;
        }
        ++i; // the comma
    }
}

Value csvValue(const std::string& raw)
{
    Value v;
    const std::string text = trim(raw);
    if (text.empty()) {
        return v;
    }
    // strtod also reads C's hexadecimal numbers ("0x10" is 16): no logger writes them, so such a cell is text.
    const size_t digits = text.find_first_not_of("+-");
    const bool hexadecimal = digits != std::string::npos && digits + 1 < text.size() && text[digits] == '0'
        && (text[digits + 1] == 'x' || text[digits + 1] == 'X');
    errno = 0;
    char* end = nullptr;
    const double number = std::strtod(text.c_str(), &end);
    if (hexadecimal || end != text.c_str() + text.size()) {
        v.kind = Value::NotNumber;
        v.text = "\"" + text + "\"";
        return v;
    }
    if (!std::isfinite(number)) {
        v.kind = Value::NonFinite;
        v.text = text;
        return v;
    }
    v.kind = Value::Number;
    v.number = number;
    return v;
}

// Columns --map did not name: a verl or Tinker key, or a measure's own name, unless --map took that measure; then
// the key patterns of verl and Tinker (val-core/<data source>/acc/mean@<N>, ...: patternMappings).
void mapKnownColumns(const std::string& path, size_t headerIndex, const std::vector<std::string>& header,
    size_t stepColumn, const std::set<std::string>& userMeasures, std::vector<Mapping>& mappings,
    std::vector<bool>& mapped, std::vector<std::string>& notes)
{
    std::map<std::string, std::string> autoMeasureColumn;
    std::vector<KnownKey> known = knownKeys(LogSource::Verl);
    const auto tinker = knownKeys(LogSource::Tinker);
    known.insert(known.end(), tinker.begin(), tinker.end());
    for (size_t c = 0; c < header.size(); ++c) {
        if (c == stepColumn || mapped[c]) {
            continue;
        }
        std::optional<Mapping> candidate;
        for (const auto& k : known) {
            if (k.key == header[c]) {
                candidate = makeMapping(header[c], k.measure, k.estimator + " (" + toString(k.source) + " key)", false);
                break;
            }
        }
        if (!candidate) {
            const ImportMeasure* measure = findImportMeasure(header[c]);
            if (measure && measure->name != "step") {
                candidate = makeMapping(header[c], measure->name, measure->defaultEstimator + " (by column name)", false);
            }
        }
        if (!candidate || userMeasures.count(candidate->measureName())) {
            continue;
        }
        const std::string measure = candidate->measureName();
        if (const auto previous = autoMeasureColumn.find(measure); previous != autoMeasureColumn.end()) {
            throw InputError(path, "line " + std::to_string(headerIndex + 1),
                "the columns " + previous->second + " and " + header[c] + " both map to " + measure
                    + "; choose with --map (e.g. --map '" + header[c] + "=extra:" + header[c] + "')");
        }
        autoMeasureColumn.emplace(measure, header[c]);
        mappings[c] = std::move(*candidate);
        mapped[c] = true;
    }
    std::set<std::string> taken = userMeasures;
    std::set<std::string> mappedColumns;
    std::vector<std::string> columns;
    for (size_t c = 0; c < header.size(); ++c) {
        if (mapped[c]) {
            taken.insert(mappings[c].measureName());
            mappedColumns.insert(header[c]);
        }
        if (c != stepColumn) {
            columns.push_back(header[c]);
        }
    }
    for (Mapping& mapping : patternMappings(LogSource::Csv, columns, mappedColumns, taken, true, notes)) {
        const auto column = static_cast<size_t>(std::find(header.begin(), header.end(), mapping.key) - header.begin());
        mappings[column] = std::move(mapping);
        mapped[column] = true;
    }
}

} // namespace

CsvLayout csvLayout(const std::string& path, std::int64_t lineNumber, const std::string& text,
    const std::vector<MapEntry>& entries, std::vector<std::string>& notes)
{
    const std::string where = "line " + std::to_string(lineNumber);
    CsvLayout layout;
    std::vector<std::string>& header = layout.header;
    std::string problem;
    if (!splitCsv(text, header, problem)) {
        throw InputError(path, where, "bad header row: " + problem);
    }
    for (auto& name : header) {
        name = trim(name);
    }
    std::map<std::string, size_t> columnOf;
    for (size_t c = 0; c < header.size(); ++c) {
        if (header[c].empty()) {
            throw InputError(path, where, "column " + std::to_string(c + 1) + " of the header has no name");
        }
        if (!columnOf.emplace(header[c], c).second) {
            throw InputError(path, where, "the column " + header[c] + " appears twice");
        }
    }
    std::string headerList;
    for (const auto& name : header) {
        headerList += (headerList.empty() ? "" : ", ") + name;
    }

    // The step column: --map COLUMN=step, else `step`, `_step` or `Step` (Weights & Biases exports).
    std::optional<size_t> stepColumn;
    std::vector<Mapping> mappings(header.size());
    std::vector<bool> mapped(header.size(), false);
    std::set<std::string> userMeasures;
    for (const auto& entry : entries) {
        const auto found = columnOf.find(entry.key);
        if (found == columnOf.end()) {
            throw InputError(path, where,
                "--map names the column " + entry.key + ", which the header does not have (columns: " + headerList + ")");
        }
        userMeasures.insert(entry.measure);
        if (entry.measure == "step") {
            stepColumn = found->second;
            continue;
        }
        mappings[found->second] = makeMapping(entry.key, entry.measure, "", true);
        mapped[found->second] = true;
    }
    if (!stepColumn) {
        for (const char* name : {"step", "_step", "Step"}) {
            if (const auto found = columnOf.find(name); found != columnOf.end() && !mapped[found->second]) {
                stepColumn = found->second;
                break;
            }
        }
    }
    if (!stepColumn) {
        throw InputError(path, where,
            "no step column (expected a column named step, or --map COLUMN=step; columns: " + headerList + ")");
    }
    layout.stepColumn = *stepColumn;
    mapKnownColumns(path, static_cast<size_t>(lineNumber - 1), header, *stepColumn, userMeasures, mappings, mapped, notes);
    for (size_t c = 0; c < header.size(); ++c) {
        if (mapped[c]) {
            layout.mappings.push_back(mappings[c]);
        }
    }
    return layout;
}

ParsedLine csvRecord(const CsvLayout& layout, std::int64_t lineNumber, const std::string& text)
{
    ParsedLine parsed;
    parsed.line = lineNumber;
    std::vector<std::string> fields;
    if (!splitCsv(text, fields, parsed.skipReason)) {
        return parsed;
    }
    const std::vector<std::string>& header = layout.header;
    if (fields.size() != header.size()) {
        parsed.skipReason = std::to_string(fields.size()) + " fields, expected " + std::to_string(header.size())
            + " (the header's columns)";
        return parsed;
    }
    for (size_t c = 0; c < header.size(); ++c) {
        if (c != layout.stepColumn) {
            parsed.values.emplace_back(header[c], csvValue(fields[c]));
        }
    }
    parsed.step = csvValue(fields[layout.stepColumn]);
    if (parsed.step.kind == Value::Missing) {
        parsed.skipReason = "the step column " + header[layout.stepColumn] + " is empty";
    }
    return parsed;
}

ImportedLog importCsv(const std::string& path, const LogImportOptions& options)
{
    LogReader reader(LogSource::Csv, path);
    const auto entries = parseMapEntries(options);
    const auto lines = splitLines(readWholeFile(path));
    size_t headerIndex = 0;
    while (headerIndex < lines.size() && trim(lines[headerIndex]).empty()) {
        ++headerIndex;
    }
    if (headerIndex == lines.size()) {
        throw InputError(path, "", "is empty; expected a header row naming the columns (one of them `step`)");
    }
    const CsvLayout layout = csvLayout(
        path, static_cast<std::int64_t>(headerIndex + 1), lines[headerIndex], entries, reader.result().notes);
    reader.setMappings(layout.mappings);
    for (size_t index = headerIndex + 1; index < lines.size(); ++index) {
        if (!trim(lines[index]).empty()) {
            reader.feed(csvRecord(layout, static_cast<std::int64_t>(index + 1), lines[index]));
        }
    }
    return reader.finish();
}

} // namespace mismatch::io::importing

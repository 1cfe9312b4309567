#include "core/common/yaml_mapping.h"

#include "core/common/yaml_scalar.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace mismatch::io {

std::string lineColumn(const SourceLocation& where)
{
    return "line " + std::to_string(where.line) + ", column " + std::to_string(where.column);
}

std::string describeLocation(const SourceLocation& where)
{
    if (where.line > 0) {
        return lineColumn(where);
    }
    return where.keyPath.empty() ? std::string("an unknown place") : where.keyPath;
}

std::string childKeyPath(const std::string& path, const std::string& key)
{
    return path.empty() ? key : path + "." + key;
}

SourceLocation locate(const YAML::Node& node, const std::string& keyPath)
{
    SourceLocation where;
    where.keyPath = keyPath;
    const YamlPosition position = yamlPosition(node);
    where.line = position.line;
    where.column = position.column;
    return where;
}

YamlMappingReader::YamlMappingReader(Fail fail, UnknownKeyAt unknownKeyAt)
    : fail_(std::move(fail))
    , unknownKeyAt_(unknownKeyAt)
{
}

void YamlMappingReader::fail(const SourceLocation& where, const std::string& detail) const
{
    fail_(where, detail);
    throw std::logic_error("YamlMappingReader: the Fail function returned for: " + detail);
}

std::vector<YamlEntry> YamlMappingReader::entries(
    const YAML::Node& map, const SourceLocation& where, const std::vector<std::string>& allowed) const
{
    if (!map.IsMap()) {
        fail(where, "expected a mapping, got " + kindName(map));
    }
    std::vector<YamlEntry> result;
    for (auto it = map.begin(); it != map.end(); ++it) {
        YamlEntry entry;
        entry.keyNode = it->first;
        entry.value = it->second;
        entry.keyLocation = locate(it->first, where.keyPath);
        if (!it->first.IsScalar() || scalarKind(it->first) == ScalarKind::Null) {
            fail(entry.keyLocation, "expected a key name, got " + kindName(it->first));
        }
        entry.key = it->first.Scalar();
        const std::string path = childKeyPath(where.keyPath, entry.key);
        if (std::find(allowed.begin(), allowed.end(), entry.key) == allowed.end()) {
            std::string expected;
            for (const std::string& name : allowed) {
                expected += (expected.empty() ? "" : ", ") + name;
            }
            SourceLocation at = entry.keyLocation;
            at.keyPath = unknownKeyAt_ == UnknownKeyAt::Key ? path : where.keyPath;
            fail(at,
                "unknown key '" + entry.key + "'" + (where.keyPath.empty() ? "" : " in " + where.keyPath)
                    + " (expected one of: " + expected + ")");
        }
        entry.keyLocation.keyPath = path;
        for (const YamlEntry& earlier : result) {
            if (earlier.key == entry.key) {
                fail(entry.keyLocation,
                    "duplicate key '" + entry.key + "' (first given at " + describeLocation(earlier.keyLocation) + ")");
            }
        }
        entry.valueLocation = entry.value.IsNull() ? entry.keyLocation : locate(entry.value, path);
        result.push_back(std::move(entry));
    }
    return result;
}

const YamlEntry* YamlMappingReader::find(const std::vector<YamlEntry>& entries, const std::string& key)
{
    for (const YamlEntry& entry : entries) {
        if (entry.key == key) {
            return &entry;
        }
    }
    return nullptr;
}

const YamlEntry& YamlMappingReader::require(
    const std::vector<YamlEntry>& entries, const std::string& key, const SourceLocation& where) const
{
    const YamlEntry* entry = find(entries, key);
    if (!entry) {
        fail(where, "missing required key '" + key + "'");
    }
    return *entry;
}

std::string YamlMappingReader::stringValue(const YamlEntry& entry) const
{
    if (!entry.value.IsScalar() || scalarKind(entry.value) != ScalarKind::String) {
        fail(entry.valueLocation, "expected a string, got " + kindName(entry.value));
    }
    return entry.value.Scalar();
}

} // namespace mismatch::io

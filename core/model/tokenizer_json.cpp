#include "core/model/tokenizer_json.h"

#include "core/common/error.h"

#include <limits>

namespace mismatch::model::tokenizer_detail {

std::string singleQuoted(const std::string& s)
{
    return "'" + s + "'";
}

std::string typeName(const Json& value)
{
    return value.type_name();
}

const Json& member(const Json& object, const std::string& key, const std::string& path, const std::string& file)
{
    const auto it = object.find(key);
    if (it == object.end()) {
        throw InputError(file, path, "missing key '" + key + "'");
    }
    return *it;
}

std::string join(const std::string& path, const std::string& key)
{
    return path.empty() ? key : path + "." + key;
}
std::string index(const std::string& path, size_t i)
{
    return path + "[" + std::to_string(i) + "]";
}

std::string stringAt(const Json& value, const std::string& path, const std::string& file)
{
    if (!value.is_string()) {
        throw InputError(file, path, "expected a string, found " + typeName(value));
    }
    return value.get<std::string>();
}

bool boolOr(const Json& object, const std::string& key, bool fallback, const std::string& path, const std::string& file)
{
    const auto it = object.find(key);
    if (it == object.end() || it->is_null()) {
        return fallback;
    }
    if (!it->is_boolean()) {
        throw InputError(file, join(path, key), "expected true or false, found " + typeName(*it));
    }
    return it->get<bool>();
}

std::int64_t idAt(const Json& value, const std::string& path, const std::string& file)
{
    if (!value.is_number_integer()) {
        throw InputError(file, path, "expected a token id (non-negative integer), found " + typeName(value));
    }
    const std::int64_t id = value.get<std::int64_t>();
    // Ids index tables and pack in pairs into 64-bit merge keys.
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        throw InputError(file, path, "token id " + std::to_string(id) + " out of range 0..2147483647");
    }
    return id;
}

std::string typeOf(const Json& object, const std::string& path, const std::string& file)
{
    if (!object.is_object()) {
        throw InputError(file, path, "expected an object, found " + typeName(object));
    }
    return stringAt(member(object, "type", path, file), join(path, "type"), file);
}

[[noreturn]] void unsupported(
    const std::string& file, const std::string& path, const std::string& what, const std::string& supported)
{
    throw InputError(file, path, "unsupported " + singleQuoted(what) + " (supported: " + supported + ")");
}

} // namespace mismatch::model::tokenizer_detail

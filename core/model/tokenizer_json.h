#pragma once
// Reading tokenizer.json: typed access to its members where every error is an InputError naming the file and
// the key path ("model.merges[3]", "pre_tokenizer.pretokenizers[1].pattern").
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace mismatch::model::tokenizer_detail {

using Json = nlohmann::json;

// "'text'", for messages quoting a token or a name.
std::string singleQuoted(const std::string& s);
// The JSON type's name ("object", "array", "string", "number", ...).
std::string typeName(const Json& value);
// "PATH.KEY", or KEY at the top level.
std::string join(const std::string& path, const std::string& key);
// "PATH[I]".
std::string index(const std::string& path, size_t i);

// The member `key` of `object` (at `path`); "missing key 'KEY'" when there is none.
const Json& member(const Json& object, const std::string& key, const std::string& path, const std::string& file);
std::string stringAt(const Json& value, const std::string& path, const std::string& file);
// The boolean member `key`, or `fallback` when it is absent or null.
bool boolOr(const Json& object, const std::string& key, bool fallback, const std::string& path, const std::string& file);
// A token id: an integer in 0..2^31-1 (ids index tables and pack in pairs into 64-bit merge keys).
std::int64_t idAt(const Json& value, const std::string& path, const std::string& file);
// The `type` of a component object (normalizer, pre-tokenizer, ...).
std::string typeOf(const Json& object, const std::string& path, const std::string& file);
// "unsupported 'WHAT' (supported: ...)" at `path`.
[[noreturn]] void unsupported(
    const std::string& file, const std::string& path, const std::string& what, const std::string& supported);

} // namespace mismatch::model::tokenizer_detail

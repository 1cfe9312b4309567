#pragma once
// Values and library texts inside the tool's messages: a shape of 10,000 dimensions or a 1 MB string is cut so that
// a message stays readable, and a JSON library's text is reduced to its detail after the project's own sentence.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mismatch {

// Messages show at most this many characters of one value, and this many dimensions of one shape.
constexpr std::size_t kMessageValueChars = 200;
constexpr std::size_t kMessageShapeDims = 8;

// `text` unchanged when it has at most `limit` bytes, else its first bytes (whole UTF-8 characters) and
// "... (N bytes)".
std::string cutText(const std::string& text, std::size_t limit = kMessageValueChars);

// Messages longer than kMessageChars keep their first and last parts around "... (N bytes left out) ...": a
// value of a megabyte inside a message (a name, a line, a list) must not bury what is wrong and what was expected.
constexpr std::size_t kMessageChars = 2000;
std::string cutMiddle(const std::string& text, std::size_t limit = kMessageChars);

// The shortest text that reads back to the same double ("10", "0.05", "1e-06", "1e+39"), as std::to_chars writes
// it: a number in a message as it was given, not std::to_string's "1000000000000000019884624838656.000000".
std::string numberText(double value);

// "[2, 3]"; over kMessageShapeDims dimensions the first ones and "... (N dimensions)".
std::string shapeText(const std::int64_t* dims, std::size_t count);
template <class Dims> std::string shapeText(const Dims& dims)
{
    return shapeText(dims.data(), static_cast<std::size_t>(dims.size()));
}

// nlohmann::json's what() (any of its exceptions; other texts pass unchanged) without its "[json.exception.parse_error.101] " tag ("parse error at line 1, column 5:
// syntax error ..."), cut to kMessageValueChars: the library's detail, after the caller's own sentence.
std::string jsonErrorDetail(const std::exception& error);

} // namespace mismatch

#pragma once
// Memory sizes as people write them: "8GiB", "512MiB", "1e9", "2GB", "1.5 GiB", "4096".
#include <cstdint>
#include <string>

namespace mismatch {

// A number (decimal or scientific) with an optional unit, case-insensitive, optionally after a space:
//   none or B                 bytes
//   KiB, MiB, GiB, TiB        powers of 1024
//   kB, MB, GB, TB            powers of 1000
// Bare K/M/G/T are refused (binary or decimal? the reader cannot tell). Rounded down to whole bytes.
// InputError(source, the text, ...) for anything else, a negative or non-finite size, or one of 2^63 bytes
// or more.
std::uint64_t parseByteSize(const std::string& text, const std::string& source = "memory size");
// "8 GiB", "512 MiB", "1000 B": the largest binary unit that keeps the value >= 1, two decimals unless whole.
std::string formatByteSize(std::uint64_t bytes);

} // namespace mismatch

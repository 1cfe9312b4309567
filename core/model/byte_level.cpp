#include "core/model/byte_level.h"

#include "core/common/utf8.h"

#include <array>

namespace mismatch::model {

namespace {

std::array<char32_t, 256> byteToCodePointTable()
{
    std::array<char32_t, 256> table {};
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
        const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        table[b] = printable ? b : next++;
    }
    return table;
}

const std::array<char32_t, 256>& byteToCodePoint()
{
    static const std::array<char32_t, 256> table = byteToCodePointTable();
    return table;
}

} // namespace

char32_t byteLevelCodePoint(unsigned char byte)
{
    return byteToCodePoint()[byte];
}

std::string byteLevelSymbol(unsigned char byte)
{
    std::string out;
    appendUtf8(out, byteToCodePoint()[byte]);
    return out;
}

// The inverse of byteToCodePoint for the 256 code points it produces (all below U+0144).
int byteOfSymbol(char32_t codePoint)
{
    static const std::array<int, 0x144> table = [] {
        std::array<int, 0x144> t {};
        t.fill(-1);
        for (unsigned b = 0; b < 256; ++b) {
            t[byteToCodePoint()[b]] = static_cast<int>(b);
        }
        return t;
    }();
    return codePoint < table.size() ? table[codePoint] : -1;
}

std::string toByteLevelSymbols(const std::string& bytes)
{
    std::string out;
    out.reserve(bytes.size() * 2);
    for (const char c : bytes) {
        appendUtf8(out, byteToCodePoint()[static_cast<unsigned char>(c)]);
    }
    return out;
}

} // namespace mismatch::model

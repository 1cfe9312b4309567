#include "core/common/utf8.h"

namespace mismatch {

std::size_t firstInvalidUtf8(const std::string& s)
{
    std::size_t i = 0;
    const std::size_t n = s.size();
    while (i < n) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        std::size_t length = 0;
        unsigned char low = 0x80;
        unsigned char high = 0xBF;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            length = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            length = 3;
            low = c == 0xE0 ? 0xA0 : 0x80; // no overlong forms
            high = c == 0xED ? 0x9F : 0xBF; // no surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            length = 4;
            low = c == 0xF0 ? 0x90 : 0x80;
            high = c == 0xF4 ? 0x8F : 0xBF; // nothing above U+10FFFF
        } else {
            return i;
        }
        if (i + length > n) {
            return i;
        }
        const unsigned char second = static_cast<unsigned char>(s[i + 1]);
        if (second < low || second > high) {
            return i;
        }
        for (std::size_t k = 2; k < length; ++k) {
            const unsigned char next = static_cast<unsigned char>(s[i + k]);
            if (next < 0x80 || next > 0xBF) {
                return i;
            }
        }
        i += length;
    }
    return std::string::npos;
}

void appendUtf8(std::string& out, char32_t codePoint)
{
    const char32_t cp = codePoint;
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

char32_t nextCodePoint(const std::string& s, std::size_t& pos)
{
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    const unsigned char lead = byte(pos);
    if (lead < 0x80) {
        pos += 1;
        return lead;
    }
    if (lead < 0xE0) {
        const char32_t cp = ((lead & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
        pos += 2;
        return cp;
    }
    if (lead < 0xF0) {
        const char32_t cp = ((lead & 0x0F) << 12) | ((byte(pos + 1) & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
        pos += 3;
        return cp;
    }
    const char32_t cp = ((lead & 0x07) << 18) | ((byte(pos + 1) & 0x3F) << 12) | ((byte(pos + 2) & 0x3F) << 6)
        | (byte(pos + 3) & 0x3F);
    pos += 4;
    return cp;
}

std::size_t previousCodePointStart(const std::string& s, std::size_t pos)
{
    std::size_t previous = pos - 1;
    while (previous > 0 && (static_cast<unsigned char>(s[previous]) & 0xC0) == 0x80) {
        --previous;
    }
    return previous;
}

} // namespace mismatch

#include "core/model/tokenizer_nfc.h"

#ifdef MISMATCH_HAVE_ICU

#include "core/common/error.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace mismatch::model::tokenizer_detail {

std::string normalizeNfc(const std::string& text)
{
    if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
        return text; // ASCII is always in NFC
    }
    if (text.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
        throw InputError("<text>", "", "text too long to normalize (" + std::to_string(text.size()) + " bytes)");
    }
    UErrorCode status = U_ZERO_ERROR;
    const UNormalizer2* nfc = unorm2_getNFCInstance(&status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU NFC normalizer unavailable: ") + u_errorName(status));
    }
    std::vector<UChar> utf16(text.size() + 1);
    int32_t utf16Length = 0;
    u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &utf16Length, text.data(),
        static_cast<int32_t>(text.size()), &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(status));
    }
    if (unorm2_quickCheck(nfc, utf16.data(), utf16Length, &status) == UNORM_YES && U_SUCCESS(status)) {
        return text;
    }
    status = U_ZERO_ERROR;
    // NFC of a string is at most three times its length in UTF-16 units (Unicode's stated bound).
    std::vector<UChar> normalized(static_cast<size_t>(utf16Length) * 3 + 1);
    const int32_t normalizedLength = unorm2_normalize(
        nfc, utf16.data(), utf16Length, normalized.data(), static_cast<int32_t>(normalized.size()), &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU NFC normalization failed: ") + u_errorName(status));
    }
    std::string out(static_cast<size_t>(normalizedLength) * 3, '\0');
    int32_t outLength = 0;
    u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &outLength, normalized.data(), normalizedLength, &status);
    if (U_FAILURE(status)) {
        throw Error(std::string("ICU UTF-8 conversion failed: ") + u_errorName(status));
    }
    out.resize(static_cast<size_t>(outLength));
    return out;
}

} // namespace mismatch::model::tokenizer_detail

#endif

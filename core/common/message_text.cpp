#include "core/common/message_text.h"

#include <charconv>

namespace mismatch {

namespace {

// The largest n <= at that does not split a UTF-8 character of `text`.
std::size_t characterBoundary(const std::string& text, std::size_t at)
{
    while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) {
        --at;
    }
    return at;
}

} // namespace

std::string cutText(const std::string& text, std::size_t limit)
{
    if (text.size() <= limit) {
        return text;
    }
    const std::size_t end = characterBoundary(text, limit);
    return text.substr(0, end) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::string cutMiddle(const std::string& text, std::size_t limit)
{
    if (text.size() <= limit) {
        return text;
    }
    const std::size_t head = characterBoundary(text, limit * 2 / 3);
    const std::size_t tail = characterBoundary(text, text.size() - limit / 3);
    return text.substr(0, head) + " ... (" + std::to_string(tail - head) + " bytes left out) ... " + text.substr(tail);
}

std::string numberText(double value)
{
    char text[64];
    const auto written = std::to_chars(text, text + sizeof text, value);
    return std::string(text, written.ptr);
}

std::string shapeText(const std::int64_t* dims, std::size_t count)
{
    std::string text = "[";
    const std::size_t shown = count > kMessageShapeDims ? kMessageShapeDims : count;
    for (std::size_t i = 0; i < shown; ++i) {
        text += (i ? ", " : "") + std::to_string(dims[i]);
    }
    if (shown < count) {
        text += ", ... (" + std::to_string(count) + " dimensions)";
    }
    return text + "]";
}

std::string jsonErrorDetail(const std::exception& error)
{
    std::string text = error.what();
    if (text.rfind("[json.exception.", 0) == 0) {
        const std::size_t tagEnd = text.find("] ");
        if (tagEnd != std::string::npos) {
            text.erase(0, tagEnd + 2);
        }
    }
    return cutText(text);
}

} // namespace mismatch

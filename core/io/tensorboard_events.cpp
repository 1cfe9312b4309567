#include "core/io/tensorboard_events.h"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

namespace mismatch::io {

namespace {

const std::array<std::uint32_t, 256>& crcTable()
{
    static const std::array<std::uint32_t, 256> table = [] {
        std::array<std::uint32_t, 256> t {};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int bit = 0; bit < 8; ++bit) {
                c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            }
            t[i] = c;
        }
        return t;
    }();
    return table;
}

std::uint32_t readU32(const unsigned char* p)
{
    return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8)
        | (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}

std::uint64_t readU64(const unsigned char* p)
{
    return static_cast<std::uint64_t>(readU32(p)) | (static_cast<std::uint64_t>(readU32(p + 4)) << 32);
}

// A bounded view of protobuf bytes; every read checks the bounds and reports failure.
class Wire {
public:
    Wire(const unsigned char* begin, const unsigned char* end) : at_(begin), end_(end) {}
    bool done() const { return at_ >= end_; }

    bool varint(std::uint64_t& value)
    {
        value = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (at_ >= end_) return false;
            const unsigned char byte = *at_++;
            value |= static_cast<std::uint64_t>(byte & 0x7Fu) << shift;
            if ((byte & 0x80u) == 0) return true;
        }
        return false; // more than 10 bytes
    }
    bool fixed64(std::uint64_t& value)
    {
        if (end_ - at_ < 8) return false;
        value = readU64(at_);
        at_ += 8;
        return true;
    }
    bool fixed32(std::uint32_t& value)
    {
        if (end_ - at_ < 4) return false;
        value = readU32(at_);
        at_ += 4;
        return true;
    }
    bool bytes(Wire& inner)
    {
        std::uint64_t length = 0;
        if (!varint(length) || length > static_cast<std::uint64_t>(end_ - at_)) return false;
        inner = Wire(at_, at_ + length);
        at_ += length;
        return true;
    }
    // Skips a field of wire type `type` (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32; groups refused).
    bool skip(std::uint64_t type)
    {
        std::uint64_t v = 0;
        std::uint32_t f = 0;
        Wire inner(nullptr, nullptr);
        switch (type) {
        case 0: return varint(v);
        case 1: return fixed64(v);
        case 2: return bytes(inner);
        case 5: return fixed32(f);
        default: return false;
        }
    }
    const unsigned char* at() const { return at_; }
    const unsigned char* end() const { return end_; }

private:
    const unsigned char* at_;
    const unsigned char* end_;
};

double asDouble(std::uint64_t bits)
{
    double d = 0.0;
    std::memcpy(&d, &bits, sizeof d);
    return d;
}

float asFloat(std::uint32_t bits)
{
    float f = 0.0f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

// IEEE half (DT_HALF's half_val holds the 16 bits in an int32).
double halfToDouble(std::uint32_t bits)
{
    const int sign = (bits >> 15) & 1;
    const int exponent = (bits >> 10) & 0x1F;
    const int mantissa = bits & 0x3FF;
    double value = 0.0;
    if (exponent == 0) {
        value = std::ldexp(static_cast<double>(mantissa), -24);
    } else if (exponent == 31) {
        value = mantissa ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else {
        value = std::ldexp(static_cast<double>(mantissa | 0x400), exponent - 25);
    }
    return sign ? -value : value;
}

// The one value of a scalar TensorProto; nullopt for anything else (a vector, a string, an unknown dtype).
std::optional<double> tensorScalar(Wire tensor, bool& malformed)
{
    enum : std::uint64_t { DtFloat = 1, DtDouble = 2, DtInt32 = 3, DtInt64 = 9, DtHalf = 19 };
    std::uint64_t dtype = 0;
    std::vector<double> values;
    std::string content;
    bool shapeHasElements = false; // a dimension of size != 1 (not a scalar)
    while (!tensor.done()) {
        std::uint64_t key = 0;
        if (!tensor.varint(key)) return malformed = true, std::nullopt;
        const std::uint64_t field = key >> 3;
        const std::uint64_t type = key & 7u;
        if (field == 1 && type == 0) {
            if (!tensor.varint(dtype)) return malformed = true, std::nullopt;
        } else if (field == 2 && type == 2) { // TensorShapeProto: dim = 2 (TensorShapeProto.Dim: size = 1)
            Wire shape(nullptr, nullptr);
            if (!tensor.bytes(shape)) return malformed = true, std::nullopt;
            while (!shape.done()) {
                std::uint64_t shapeKey = 0;
                if (!shape.varint(shapeKey)) return malformed = true, std::nullopt;
                if ((shapeKey >> 3) == 2 && (shapeKey & 7u) == 2) {
                    Wire dim(nullptr, nullptr);
                    if (!shape.bytes(dim)) return malformed = true, std::nullopt;
                    while (!dim.done()) {
                        std::uint64_t dimKey = 0;
                        if (!dim.varint(dimKey)) return malformed = true, std::nullopt;
                        std::uint64_t size = 0;
                        if ((dimKey >> 3) == 1 && (dimKey & 7u) == 0) {
                            if (!dim.varint(size)) return malformed = true, std::nullopt;
                            shapeHasElements = shapeHasElements || size != 1;
                        } else if (!dim.skip(dimKey & 7u)) {
                            return malformed = true, std::nullopt;
                        }
                    }
                } else if (!shape.skip(shapeKey & 7u)) {
                    return malformed = true, std::nullopt;
                }
            }
        } else if (field == 4 && type == 2) {
            Wire bytes(nullptr, nullptr);
            if (!tensor.bytes(bytes)) return malformed = true, std::nullopt;
            content.assign(reinterpret_cast<const char*>(bytes.at()), static_cast<std::size_t>(bytes.end() - bytes.at()));
        } else if ((field == 5 || field == 6 || field == 7 || field == 10 || field == 13)) {
            // Repeated numbers, packed (type 2) or one at a time.
            const auto one = [&](Wire& w) -> bool {
                if (field == 5) {
                    std::uint32_t bits = 0;
                    if (!w.fixed32(bits)) return false;
                    values.push_back(static_cast<double>(asFloat(bits)));
                } else if (field == 6) {
                    std::uint64_t bits = 0;
                    if (!w.fixed64(bits)) return false;
                    values.push_back(asDouble(bits));
                } else {
                    std::uint64_t v = 0;
                    if (!w.varint(v)) return false;
                    values.push_back(field == 13 ? halfToDouble(static_cast<std::uint32_t>(v & 0xFFFFu))
                            : field == 7          ? static_cast<double>(static_cast<std::int32_t>(v))
                                                  : static_cast<double>(static_cast<std::int64_t>(v)));
                }
                return true;
            };
            if (type == 2) {
                Wire packed(nullptr, nullptr);
                if (!tensor.bytes(packed)) return malformed = true, std::nullopt;
                while (!packed.done()) {
                    if (!one(packed)) return malformed = true, std::nullopt;
                }
            } else if (!one(tensor)) {
                return malformed = true, std::nullopt;
            }
        } else if (!tensor.skip(type)) {
            return malformed = true, std::nullopt;
        }
    }
    if (shapeHasElements) {
        return std::nullopt;
    }
    if (values.size() == 1) {
        return values.front();
    }
    if (values.empty() && !content.empty()) { // the value as raw little-endian bytes
        const auto* p = reinterpret_cast<const unsigned char*>(content.data());
        if (dtype == DtFloat && content.size() == 4) return static_cast<double>(asFloat(readU32(p)));
        if (dtype == DtDouble && content.size() == 8) return asDouble(readU64(p));
        if (dtype == DtInt32 && content.size() == 4) return static_cast<double>(static_cast<std::int32_t>(readU32(p)));
        if (dtype == DtInt64 && content.size() == 8) return static_cast<double>(static_cast<std::int64_t>(readU64(p)));
        if (dtype == DtHalf && content.size() == 2) return halfToDouble(static_cast<std::uint32_t>(p[0] | (p[1] << 8)));
    }
    return std::nullopt;
}

// One Summary.Value: its tag and scalar (nullopt: not a scalar). False when malformed.
bool summaryValue(Wire value, std::string& tag, std::optional<double>& scalar)
{
    while (!value.done()) {
        std::uint64_t key = 0;
        if (!value.varint(key)) return false;
        const std::uint64_t field = key >> 3;
        const std::uint64_t type = key & 7u;
        if (field == 1 && type == 2) {
            Wire text(nullptr, nullptr);
            if (!value.bytes(text)) return false;
            tag.assign(reinterpret_cast<const char*>(text.at()), static_cast<std::size_t>(text.end() - text.at()));
        } else if (field == 2 && type == 5) {
            std::uint32_t bits = 0;
            if (!value.fixed32(bits)) return false;
            scalar = static_cast<double>(asFloat(bits));
        } else if (field == 8 && type == 2) {
            Wire tensor(nullptr, nullptr);
            if (!value.bytes(tensor)) return false;
            bool malformed = false;
            scalar = tensorScalar(tensor, malformed);
            if (malformed) return false;
        } else if (!value.skip(type)) {
            return false;
        }
    }
    return true;
}

// Parses one Event; false with `reason` when its protobuf is malformed.
bool parseEvent(const unsigned char* begin, const unsigned char* end, std::int64_t record, TensorBoardEvents& out,
    std::string& reason)
{
    Wire event(begin, end);
    double wallTime = 0.0;
    std::int64_t step = 0;
    std::vector<std::pair<std::string, std::optional<double>>> values;
    bool summary = false;
    while (!event.done()) {
        std::uint64_t key = 0;
        if (!event.varint(key)) return reason = "malformed Event protobuf (a field key)", false;
        const std::uint64_t field = key >> 3;
        const std::uint64_t type = key & 7u;
        if (field == 1 && type == 1) {
            std::uint64_t bits = 0;
            if (!event.fixed64(bits)) return reason = "malformed Event protobuf (wall_time)", false;
            wallTime = asDouble(bits);
        } else if (field == 2 && type == 0) {
            std::uint64_t v = 0;
            if (!event.varint(v)) return reason = "malformed Event protobuf (step)", false;
            step = static_cast<std::int64_t>(v);
        } else if (field == 5 && type == 2) {
            summary = true;
            Wire summaryBytes(nullptr, nullptr);
            if (!event.bytes(summaryBytes)) return reason = "malformed Event protobuf (summary)", false;
            while (!summaryBytes.done()) {
                std::uint64_t summaryKey = 0;
                if (!summaryBytes.varint(summaryKey)) return reason = "malformed Summary protobuf", false;
                if ((summaryKey >> 3) == 1 && (summaryKey & 7u) == 2) {
                    Wire valueBytes(nullptr, nullptr);
                    if (!summaryBytes.bytes(valueBytes)) return reason = "malformed Summary.Value protobuf", false;
                    std::string tag;
                    std::optional<double> scalar;
                    if (!summaryValue(valueBytes, tag, scalar)) {
                        return reason = "malformed Summary.Value protobuf", false;
                    }
                    values.emplace_back(std::move(tag), scalar);
                } else if (!summaryBytes.skip(summaryKey & 7u)) {
                    return reason = "malformed Summary protobuf", false;
                }
            }
        } else if (!event.skip(type)) {
            return reason = "malformed Event protobuf (field " + std::to_string(field) + ")", false;
        }
    }
    if (summary) {
        ++out.summaryRecords;
    }
    for (auto& [tag, scalar] : values) {
        if (!scalar || tag.empty()) {
            ++out.nonScalarValues;
            continue;
        }
        out.scalars.push_back({record, step, wallTime, std::move(tag), *scalar});
    }
    return true;
}

} // namespace

std::uint32_t crc32c(const unsigned char* data, std::size_t size)
{
    const auto& table = crcTable();
    std::uint32_t c = 0xFFFFFFFFu;
    for (std::size_t i = 0; i < size; ++i) {
        c = table[(c ^ data[i]) & 0xFFu] ^ (c >> 8);
    }
    return c ^ 0xFFFFFFFFu;
}

std::uint32_t maskedCrc32c(const unsigned char* data, std::size_t size)
{
    const std::uint32_t c = crc32c(data, size);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardEvents parseTensorBoardEvents(const std::string& bytes)
{
    TensorBoardEvents out;
    const auto* base = reinterpret_cast<const unsigned char*>(bytes.data());
    const std::uint64_t size = bytes.size();
    std::uint64_t offset = 0;
    while (offset < size) {
        const std::int64_t record = out.records + 1;
        if (size - offset < 12) {
            out.problems.push_back({record, offset,
                "the file ends inside a record's header (" + std::to_string(size - offset)
                    + " bytes left, 12 needed): a truncated file or a writer still writing; reading stops"});
            out.endsInsideRecord = true;
            break;
        }
        const std::uint64_t length = readU64(base + offset);
        if (readU32(base + offset + 8) != maskedCrc32c(base + offset, 8)) {
            out.problems.push_back({record, offset,
                "the record's length CRC does not match: not a TFRecord event file, or corrupt here; reading stops"});
            break;
        }
        if (length > size - offset - 12 || size - offset - 12 - length < 4) {
            out.problems.push_back({record, offset,
                "the record's " + std::to_string(length) + " bytes run past the end of the file (a truncated file or "
                    "a writer still writing); reading stops"});
            out.endsInsideRecord = true;
            break;
        }
        ++out.records;
        const unsigned char* data = base + offset + 12;
        const std::uint32_t stored = readU32(data + length);
        offset += 12 + length + 4;
        if (stored != maskedCrc32c(data, static_cast<std::size_t>(length))) {
            out.problems.push_back({record, offset - 16 - length, "the record's data CRC does not match; skipped"});
            continue;
        }
        std::string reason;
        if (!parseEvent(data, data + length, record, out, reason)) {
            out.problems.push_back({record, offset - 16 - length, reason + "; skipped"});
        }
    }
    out.bytesRead = offset;
    return out;
}

} // namespace mismatch::io

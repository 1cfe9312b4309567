#pragma once
// A writer of TensorBoard event files for tests, written from the formats' descriptions independently of the
// reader (core/io/tensorboard_events.h): TFRecord framing (tensorflow/core/lib/io/record_writer.cc: uint64 length,
// masked CRC-32C of it, data, masked CRC-32C of the data; masked = rotate right 15 + 0xa282ead8, the CRC by a
// bitwise loop), tensorflow/core/util/event.proto (Event: wall_time 1, step 2, file_version 3, summary 5),
// summary.proto (Summary.value 1; Value: tag 1, simple_value 2, histo 5, tensor 8) and tensor.proto (dtype 1,
// tensor_shape 2, tensor_content 4, float_val 5, double_val 6).
#include <cstdint>
#include <cstring>
#include <string>

namespace mismatch::test::tensorboard {

inline std::uint32_t bitwiseCrc32c(const std::string& bytes)
{
    std::uint32_t crc = 0xFFFFFFFFu;
    for (const char c : bytes) {
        crc ^= static_cast<unsigned char>(c);
        for (int bit = 0; bit < 8; ++bit) {
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

inline std::uint32_t masked(const std::string& bytes)
{
    const std::uint32_t crc = bitwiseCrc32c(bytes);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

inline std::string littleEndian(std::uint64_t value, int bytes)
{
    std::string out;
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    return out;
}

inline std::string varint(std::uint64_t value)
{
    std::string out;
    while (value >= 0x80) {
        out.push_back(static_cast<char>((value & 0x7F) | 0x80));
        value >>= 7;
    }
    out.push_back(static_cast<char>(value));
    return out;
}

inline std::string key(int field, int type) { return varint(static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(type)); }
inline std::string lengthDelimited(int field, const std::string& bytes) { return key(field, 2) + varint(bytes.size()) + bytes; }
inline std::string floatBits(float f)
{
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    return littleEndian(bits, 4);
}
inline std::string doubleBits(double d)
{
    std::uint64_t bits = 0;
    std::memcpy(&bits, &d, 8);
    return littleEndian(bits, 8);
}

inline std::string simpleValue(const std::string& tag, float value)
{
    return lengthDelimited(1, lengthDelimited(1, tag) + key(2, 5) + floatBits(value));
}
// A scalar tensor as TensorFlow 2 writes it: dtype, an empty shape, the value in float_val / tensor_content.
inline std::string floatTensorValue(const std::string& tag, float value)
{
    const std::string tensor = key(1, 0) + varint(1) + lengthDelimited(2, "") + lengthDelimited(5, floatBits(value));
    return lengthDelimited(1, lengthDelimited(1, tag) + lengthDelimited(8, tensor));
}
inline std::string doubleContentValue(const std::string& tag, double value)
{
    const std::string tensor = key(1, 0) + varint(2) + lengthDelimited(2, "") + lengthDelimited(4, doubleBits(value));
    return lengthDelimited(1, lengthDelimited(1, tag) + lengthDelimited(8, tensor));
}
// A histogram (not a scalar): its HistogramProto holds min = 1 (field 1, double).
inline std::string histogramValue(const std::string& tag)
{
    return lengthDelimited(1, lengthDelimited(1, tag) + lengthDelimited(5, key(1, 1) + doubleBits(1.0)));
}

inline std::string eventBytes(std::int64_t step, const std::string& summaryValues, double wallTime = 1.7e9)
{
    return key(1, 1) + doubleBits(wallTime) + key(2, 0) + varint(static_cast<std::uint64_t>(step))
        + lengthDelimited(5, summaryValues);
}

inline std::string record(const std::string& data)
{
    const std::string length = littleEndian(data.size(), 8);
    return length + littleEndian(masked(length), 4) + data + littleEndian(masked(data), 4);
}


// A file-version record then one event per (step, summary values).
inline std::string fileVersionRecord()
{
    return record(key(1, 1) + doubleBits(1.7e9) + lengthDelimited(3, "brain.Event:2"));
}

} // namespace mismatch::test::tensorboard

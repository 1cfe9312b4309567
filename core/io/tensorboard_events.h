#pragma once
// A reader of TensorBoard event files (events.out.tfevents.*), as verl's and NeMo-RL's tensorboard loggers write
// them through torch.utils.tensorboard / tensorboardX / TensorFlow. Written from the formats' descriptions:
// - TFRecord framing: each record is uint64 length (little-endian), uint32 masked CRC-32C of those 8 bytes, the
//   data, uint32 masked CRC-32C of the data; masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
// - The data is a tensorflow.Event protobuf: wall_time (field 1, double), step (2, int64), file_version (3),
//   summary (5, a tensorflow.Summary: repeated Value value = 1; Value: tag = 1, simple_value = 2 (float),
//   tensor = 8 (a TensorProto: dtype = 1, tensor_content = 4, float_val = 5, double_val = 6, int_val = 7,
//   int64_val = 10, half_val = 13)). Other fields and other kinds of summary values (histograms, images, text) are
//   skipped by their wire type.
// Scalars are read from simple_value, or from a tensor holding exactly one float, double, int32 or int64 (what
// TensorFlow 2's tf.summary.scalar writes). A record whose CRC does not match, or whose protobuf is malformed, is
// reported and skipped; a length that runs past the end of the file (a writer that was still writing, a
// truncated copy) ends the reading, reported.
#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::io {

struct TensorBoardScalar {
    std::int64_t record = 0; // 1-based record number in the file
    std::int64_t step = 0;
    double wallTime = 0.0;
    std::string tag;
    double value = 0.0; // NaN and infinities as written
};

struct TensorBoardProblem {
    std::int64_t record = 0; // 1-based
    std::uint64_t offset = 0; // byte offset of the record
    std::string reason;
};

struct TensorBoardEvents {
    std::int64_t records = 0; // records framed (CRC-checked or not)
    std::int64_t summaryRecords = 0; // records holding a summary
    std::int64_t nonScalarValues = 0; // summary values that are not scalars (histograms, images, text, ...)
    std::vector<TensorBoardScalar> scalars; // in file order
    std::vector<TensorBoardProblem> problems; // records skipped, and where reading stopped
    // Bytes of whole records framed from the start (where reading stopped, or all of them): a reader of a file that
    // is still being written continues from there (core/io/import_follow.h).
    std::uint64_t bytesRead = 0;
    // Reading stopped at a record that runs past the end of the bytes (its header or its data): a writer still
    // writing, or a truncated copy. False when every byte was read, or when a length CRC stopped the reading.
    bool endsInsideRecord = false;
};

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `size` bytes, and TFRecord's mask of it.
std::uint32_t crc32c(const unsigned char* data, std::size_t size);
std::uint32_t maskedCrc32c(const unsigned char* data, std::size_t size);

// Parses an event file's bytes. Never throws for malformed content: problems are reported.
TensorBoardEvents parseTensorBoardEvents(const std::string& bytes);

} // namespace mismatch::io

// fuzz_tensorboard: TensorBoard event files (core/io/tensorboard_events.h, and the import of one through
// importLog). The first byte picks the mode, the rest is the input:
//   bit 0    0: the bytes are the file as is (TFRecord framing, CRCs, then the Event protobuf);
//            1: the bytes are one record's data, framed here with correct CRCs, so that every input reaches the
//               Event / Summary / TensorProto parser instead of stopping at a CRC
//   bit 1    also import the file as a log (importLog with LogSource::TensorBoard): steps, mappings, skips
#include "tests/fuzz/fuzz_target.h"

#include "core/io/import_log.h"
#include "core/io/tensorboard_events.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <string>

namespace {

void appendU32(std::string& out, std::uint32_t v)
{
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

std::string framed(const std::uint8_t* data, std::size_t size)
{
    std::string out;
    const std::uint64_t length = size;
    std::string header;
    for (int i = 0; i < 8; ++i) header.push_back(static_cast<char>((length >> (8 * i)) & 0xFFu));
    out += header;
    appendU32(out, mismatch::io::maskedCrc32c(reinterpret_cast<const unsigned char*>(header.data()), 8));
    out.append(reinterpret_cast<const char*>(data), size);
    appendU32(out, mismatch::io::maskedCrc32c(data, size));
    return out;
}

} // namespace

MISMATCH_FUZZ_TARGET(tensorboard)
{
    if (size == 0) {
        return 0;
    }
    const int mode = data[0];
    const std::string bytes
        = (mode & 1) ? framed(data + 1, size - 1) : std::string(reinterpret_cast<const char*>(data + 1), size - 1);
    const mismatch::io::TensorBoardEvents events = mismatch::io::parseTensorBoardEvents(bytes);
    fuzz::check(events.summaryRecords <= events.records, "summary records are records");
    std::int64_t previous = 0;
    for (const auto& scalar : events.scalars) {
        fuzz::check(scalar.record >= 1 && scalar.record <= events.records, "a scalar names a framed record");
        fuzz::check(scalar.record >= previous, "scalars are in file order");
        fuzz::check(!scalar.tag.empty(), "a scalar has a tag");
        previous = scalar.record;
    }
    for (const auto& problem : events.problems) {
        fuzz::check(problem.record >= 1 && problem.offset < bytes.size() + 1 && !problem.reason.empty(),
            "a problem is located and explained");
    }
    if (mode & 2) {
        try {
            const std::string path = fuzz::writeScratchFile("events.out.tfevents.fuzz",
                reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
            const mismatch::io::ImportedLog log
                = mismatch::io::importLog(mismatch::io::LogSource::TensorBoard, path, {});
            fuzz::check(!log.steps.empty(), "an import keeps at least one step");
            std::set<std::int64_t> steps;
            for (const auto& step : log.steps) {
                fuzz::check(steps.insert(step.step).second, "each step is imported once");
            }
            log.estimatorJson();
        } catch (const mismatch::InputError&) {
            // no usable record: the documented outcome
        }
    }
    return 0;
}

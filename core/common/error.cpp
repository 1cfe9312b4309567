#include "core/common/error.h"

#include "core/common/message_text.h"

namespace mismatch {

static std::string joinLocation(const std::string& file, const std::string& location, const std::string& detail)
{
    std::string out = file.empty() ? std::string("<input>") : file;
    if (!location.empty()) {
        out += ":" + location;
    }
    out += ": " + detail;
    return out;
}

InputError::InputError(std::string file, std::string location, std::string detail)
    : Error(joinLocation(file, location, cutMiddle(detail))), file_(std::move(file)), location_(std::move(location)),
      detail_(cutMiddle(detail))
{
}

StoreError::StoreError(std::string path, std::string detail)
    : Error("workspace " + path + ": " + cutMiddle(detail)), path_(std::move(path)), detail_(cutMiddle(detail))
{
}

CancelledError::CancelledError(const std::string& stage)
    : Error(stage.empty() ? std::string("cancelled") : "cancelled during " + stage)
{
}

}  // namespace mismatch

#include "core/common/device.h"

#include "core/common/error.h"

#include <ATen/Context.h>

#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/device.h"
#endif

#include <algorithm>
#include <cctype>

namespace mismatch {

namespace {

struct CudaDevice {
    std::string description;
};

// Asked of the CUDA runtime once per process (the catalogue's --device parameters and every job's check read it).
const std::vector<CudaDevice>& cudaDevices()
{
    static const std::vector<CudaDevice> found = [] {
        std::vector<CudaDevice> devices;
#if defined(MISMATCH_HAVE_CUDA)
        // LibTorch computes on a device only when it was built with CUDA itself (Debian's is CPU-only).
        if (!at::hasCUDA()) {
            return devices;
        }
        for (const cuda::DeviceInfo& info : cuda::devices()) {
            const double gib = static_cast<double>(info.totalMemoryBytes) / (1024.0 * 1024.0 * 1024.0);
            devices.push_back({info.name + ", sm_" + std::to_string(info.computeMajor)
                + std::to_string(info.computeMinor) + ", " + std::to_string(static_cast<long long>(gib + 0.5))
                + " GiB"});
        }
#endif
        return devices;
    }();
    return found;
}

bool allDigits(const std::string& text)
{
    if (text.empty() || text.size() > 3) {
        return false;
    }
    for (const char c : text) {
        if (!std::isdigit(static_cast<unsigned char>(c))) {
            return false;
        }
    }
    return true;
}

} // namespace

std::vector<std::string> availableDevices()
{
    std::vector<std::string> names {"cpu"};
    const std::size_t count = cudaDevices().size();
    for (std::size_t i = 0; i < count; ++i) {
        names.push_back("cuda:" + std::to_string(i));
    }
    return names;
}

std::vector<std::string> deviceDescriptions()
{
    std::vector<std::string> lines {"cpu"};
    const std::vector<CudaDevice>& devices = cudaDevices();
    for (std::size_t i = 0; i < devices.size(); ++i) {
        lines.push_back("cuda:" + std::to_string(i) + " (" + devices[i].description + ")");
    }
    return lines;
}

std::string canonicalDevice(const std::string& text, const std::string& source, const std::string& place)
{
    if (text == "cpu") {
        return text;
    }
    if (text == "cuda") {
        return "cuda:0";
    }
    if (text.rfind("cuda:", 0) == 0 && allDigits(text.substr(5))) {
        return "cuda:" + std::to_string(std::stoi(text.substr(5)));
    }
    throw InputError(source, place, "device '" + text + "': expected cpu, cuda or cuda:N");
}

at::Device parseDevice(const std::string& text, const std::string& source, const std::string& place)
{
    const std::string name = canonicalDevice(text, source, place);
    if (name == "cpu") {
        return at::Device(at::kCPU);
    }
    const int index = std::stoi(name.substr(5));
    const std::vector<std::string> available = availableDevices();
    if (static_cast<std::size_t>(index) + 1 >= available.size()) {
        std::string have;
        for (const std::string& device : available) {
            have += (have.empty() ? "" : ", ") + device;
        }
#if defined(MISMATCH_HAVE_CUDA)
        const std::string why = at::hasCUDA() ? "this machine has no such CUDA device"
                                              : "this build's LibTorch has no CUDA (build against a CUDA LibTorch)";
#else
        const std::string why = "this build has no CUDA support (configure with the CUDA toolkit and a CUDA LibTorch)";
#endif
        throw InputError(source, place, "device '" + text + "': " + why + "; available: " + have);
    }
    return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index));
}

at::Device resumeDevice(const std::string& stored)
{
    const std::vector<std::string> available = availableDevices();
    if (std::find(available.begin(), available.end(), stored) == available.end()) {
        return at::Device(at::kCPU);
    }
    return parseDevice(stored, "stored settings", "device"); // one that is here: never throws
}

std::string deviceName(const at::Device& device)
{
    if (device.is_cpu()) {
        return "cpu";
    }
    return "cuda:" + std::to_string(device.has_index() ? device.index() : 0);
}

} // namespace mismatch

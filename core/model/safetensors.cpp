#include "core/model/safetensors.h"

#include "core/common/error.h"
#include "core/common/message_text.h"
#include "core/common/file_io.h"
#include "core/common/fresh_pages.h"
#include "core/common/input_limits.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

// safetensors stores little-endian bytes and tensors are copied byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace mismatch::model {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSupportedDtypes = "F32, F16, BF16";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";
// The reference implementation refuses headers above 100 MB; a larger length is a corrupt file, and refusing
// it early avoids parsing gigabytes of tensor data as JSON.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

bool parseDtype(const std::string& text, DType& dtype)
{
    if (text == "F32") {
        dtype = DType::F32;
    } else if (text == "F16") {
        dtype = DType::F16;
    } else if (text == "BF16") {
        dtype = DType::BF16;
    } else {
        return false;
    }
    return true;
}

// Byte count of a tensor, or false when it overflows 64 bits (only a corrupt header gets there).
bool tensorBytes(const std::vector<std::int64_t>& shape, DType dtype, std::uint64_t& bytes)
{
    unsigned __int128 total = byteSize(dtype);
    for (std::int64_t dim : shape) {
        total *= static_cast<std::uint64_t>(dim);
        if (total > std::numeric_limits<std::uint64_t>::max()) {
            return false;
        }
    }
    bytes = static_cast<std::uint64_t>(total);
    return true;
}

std::uint64_t readNonNegative(const json& value, bool& ok)
{
    ok = value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0);
    return ok ? value.get<std::uint64_t>() : 0;
}

// nlohmann keeps the last of two equal keys of an object: a header naming a tensor twice (the first entry
// overlapping another tensor, or without a shape) would lose the first without a word. One SAX pass (linear: one
// set of keys per open object) finds the first key given twice, with the byte where the second begins.
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
public:
    std::string duplicate; // "" when every object's keys differ
    std::string where; // the object holding it: "header" or "header.NAME"

    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override
    {
        objects_.push_back({lastKey_, {}});
        return true;
    }
    bool key(string_t& name) override
    {
        lastKey_ = name;
        if (!objects_.back().keys.insert(name).second) {
            duplicate = name;
            where = objects_.size() == 1 ? "header" : "header." + objects_.back().name;
            return false; // stop: sax_parse returns false
        }
        return true;
    }
    bool end_object() override
    {
        objects_.pop_back();
        return true;
    }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

private:
    struct Object {
        std::string name; // the key it is the value of ("" for the header itself)
        std::unordered_set<std::string> keys;
    };
    std::vector<Object> objects_;
    std::string lastKey_;
};

TensorInfo parseTensorEntry(const std::string& path, const std::string& name, const json& entry)
{
    const std::string where = "header." + name;
    if (!entry.is_object()) {
        throw InputError(path, where,
            std::string("expected an object with dtype, shape and data_offsets, got ") + entry.type_name());
    }
    TensorInfo info;
    info.name = name;

    const auto dtype = entry.find("dtype");
    if (dtype == entry.end() || !dtype->is_string()) {
        throw InputError(path, where, "missing string key dtype for tensor " + name);
    }
    if (!parseDtype(dtype->get<std::string>(), info.dtype)) {
        throw InputError(path, where,
            "unsupported dtype " + dtype->get<std::string>() + " for tensor " + name
                + " (supported: " + kSupportedDtypes + ")");
    }

    const auto shape = entry.find("shape");
    if (shape == entry.end() || !shape->is_array()) {
        throw InputError(path, where, "missing list key shape for tensor " + name);
    }
    for (const json& dim : *shape) {
        bool ok = false;
        const std::uint64_t value = readNonNegative(dim, ok);
        if (!ok || value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            throw InputError(
                path, where, "shape of tensor " + name + " must hold non-negative integers, got " + shape->dump());
        }
        info.shape.push_back(static_cast<std::int64_t>(value));
    }

    const auto offsets = entry.find("data_offsets");
    bool okBegin = false;
    bool okEnd = false;
    if (offsets != entry.end() && offsets->is_array() && offsets->size() == 2) {
        info.begin = readNonNegative((*offsets)[0], okBegin);
        info.end = readNonNegative((*offsets)[1], okEnd);
    }
    if (!okBegin || !okEnd) {
        throw InputError(path, where,
            "data_offsets of tensor " + name + " must be [begin, end] with non-negative integers, got "
                + (offsets == entry.end() ? std::string("nothing") : offsets->dump()));
    }
    if (info.end < info.begin) {
        throw InputError(path, where,
            "data_offsets of tensor " + name + " end before they begin: [" + std::to_string(info.begin) + ", "
                + std::to_string(info.end) + "]");
    }
    std::uint64_t expected = 0;
    if (!tensorBytes(info.shape, info.dtype, expected) || expected != info.end - info.begin) {
        throw InputError(path, where,
            "size mismatch for tensor " + name + ": data_offsets [" + std::to_string(info.begin) + ", "
                + std::to_string(info.end) + "] hold " + std::to_string(info.end - info.begin) + " bytes but shape "
                + shapeText(info.shape) + " of " + toString(info.dtype) + " needs " + std::to_string(expected)
                + " bytes");
    }
    return info;
}

std::string systemError()
{
    return std::strerror(errno);
}

void writeSafetensorsFile(const std::string& path, const std::string& header, const std::vector<at::Tensor>& blobs)
{
    AtomicFileWriter file(path);
    file.write(header);
    for (const at::Tensor& blob : blobs) {
        file.write(blob.data_ptr(), blob.numel() * blob.element_size());
    }
    file.commit();
}

DType dtypeOf(const std::string& name, const at::Tensor& tensor)
{
    switch (tensor.scalar_type()) {
    case at::kFloat:
        return DType::F32;
    case at::kHalf:
        return DType::F16;
    case at::kBFloat16:
        return DType::BF16;
    default:
        throw Error("cannot write tensor " + name + " of dtype " + std::string(c10::toString(tensor.scalar_type()))
            + " to safetensors (supported: " + kSupportedDtypes + ")");
    }
}

std::string buildHeader(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata, std::vector<at::Tensor>& blobs)
{
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        header["__metadata__"] = metadata;
    }
    std::uint64_t offset = 0;
    std::set<std::string> seen;
    for (const auto& [name, tensor] : tensors) {
        if (name == "__metadata__") {
            throw Error("cannot write a tensor named __metadata__: the name is reserved for the header metadata");
        }
        if (!seen.insert(name).second) {
            throw Error("cannot write tensor " + name + " twice into one safetensors file");
        }
        const DType dtype = dtypeOf(name, tensor);
        at::Tensor blob = tensor.to(at::kCPU).contiguous();
        const std::uint64_t bytes = static_cast<std::uint64_t>(blob.numel()) * blob.element_size();
        header[name]
            = {{"dtype", toString(dtype)}, {"shape", blob.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        blobs.push_back(std::move(blob));
    }
    std::string text = header.dump();
    // Pad with spaces to 8 bytes, as the reference writer does, so that the data section stays aligned.
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    std::uint64_t length = text.size();
    for (int i = 0; i < 8; ++i) {
        out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    }
    return out + text;
}

std::uint64_t tensorBytes(const at::Tensor& tensor)
{
    return static_cast<std::uint64_t>(tensor.numel()) * tensor.element_size();
}

} // namespace

at::ScalarType scalarType(DType dtype)
{
    switch (dtype) {
    case DType::F32:
        return at::kFloat;
    case DType::F16:
        return at::kHalf;
    case DType::BF16:
        return at::kBFloat16;
    }
    return at::kFloat;
}


std::string toString(DType dtype)
{
    switch (dtype) {
    case DType::F32:
        return "F32";
    case DType::F16:
        return "F16";
    case DType::BF16:
        return "BF16";
    }
    return "unknown";
}

std::size_t byteSize(DType dtype)
{
    return dtype == DType::F32 ? 4 : 2;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path)
{
    std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
    file->path_ = path;

    requireRegularFile(path, "safetensors file"); // a FIFO, device or directory, named as such
    // O_NONBLOCK: should the file be replaced by a FIFO in between, the open must not wait for a writer.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        throw InputError(path, "", "cannot open safetensors file: " + systemError());
    }
    struct stat status { };
    if (::fstat(fd, &status) != 0) {
        const std::string reason = systemError();
        ::close(fd);
        throw InputError(path, "", "cannot stat safetensors file: " + reason);
    }
    if (!S_ISREG(status.st_mode)) {
        ::close(fd);
        throw InputError(path, "", "not a regular file");
    }
    const std::uint64_t fileSize = static_cast<std::uint64_t>(status.st_size);
    if (fileSize < 8) {
        ::close(fd);
        throw InputError(path, "",
            "file is " + std::to_string(fileSize)
                + " bytes, too short for the 8-byte header length of a safetensors file");
    }
    void* mapping = ::mmap(nullptr, fileSize, PROT_READ, MAP_PRIVATE, fd, 0);
    const std::string mapError = mapping == MAP_FAILED ? systemError() : std::string();
    if (mapping == MAP_FAILED) {
        ::close(fd);
        throw InputError(path, "", "cannot map safetensors file: " + mapError);
    }
    file->fd_ = fd; // kept: load() reads tensors from the file
    file->mapping_ = mapping;
    file->mappingSize_ = fileSize;

    const auto* bytes = static_cast<const unsigned char*>(mapping);
    std::uint64_t headerLength = 0;
    for (int i = 7; i >= 0; --i) {
        headerLength = (headerLength << 8) | bytes[i];
    }
    if (headerLength > fileSize - 8) {
        throw InputError(path, "header",
            "header length " + std::to_string(headerLength) + " runs past the end of the file ("
                + std::to_string(fileSize) + " bytes)");
    }
    if (headerLength > kMaxHeaderBytes) {
        throw InputError(path, "header",
            "header length " + std::to_string(headerLength) + " exceeds the 100 MB limit of the format");
    }
    file->dataOffset_ = 8 + headerLength;
    const std::uint64_t dataSize = fileSize - file->dataOffset_;

    const char* headerText = reinterpret_cast<const char*>(bytes + 8);
    if (const std::size_t deep = jsonNestingTooDeep(headerText, headerText + headerLength);
        deep != std::string::npos) {
        throw InputError(path, "header, byte " + std::to_string(8 + deep), nestingTooDeepDetail());
    }
    json header;
    try {
        header = json::parse(bytes + 8, bytes + 8 + headerLength);
    } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
        throw InputError(path, "header", "invalid JSON header: " + jsonErrorDetail(error));
    }
    if (!header.is_object()) {
        throw InputError(path, "header", std::string("expected a JSON object, got ") + header.type_name());
    }
    if (header.size() > limits::kMaxSafetensorsTensors + (header.contains("__metadata__") ? 1 : 0)) {
        throw InputError(path, "header",
            "lists " + std::to_string(header.size()) + " entries, over the limit of "
                + std::to_string(limits::kMaxSafetensorsTensors) + " tensors in one safetensors file");
    }
    DuplicateKeyFinder duplicates;
    if (!json::sax_parse(bytes + 8, bytes + 8 + headerLength, &duplicates) && !duplicates.duplicate.empty()) {
        throw InputError(path, duplicates.where,
            "key '" + cutText(duplicates.duplicate) + "' appears twice"
                + (duplicates.where == "header" ? " (a tensor listed twice)" : std::string())
                + "; each key of a safetensors header must be given once");
    }

    for (const auto& [key, value] : header.items()) {
        if (key == "__metadata__") {
            if (!value.is_object()) {
                throw InputError(path, "header.__metadata__", "expected an object of strings");
            }
            for (const auto& [metaKey, metaValue] : value.items()) {
                if (!metaValue.is_string()) {
                    throw InputError(path, "header.__metadata__." + metaKey,
                        std::string("metadata values must be strings, got ") + metaValue.type_name());
                }
                file->metadata_[metaKey] = metaValue.get<std::string>();
            }
            continue;
        }
        file->tensors_.push_back(parseTensorEntry(path, key, value));
    }

    // The data section must be tiled exactly: sorted by offset, each tensor starts where the previous ended,
    // the first at 0 and the last at the end of the file. Anything else is a corrupt or hand-edited file.
    std::sort(file->tensors_.begin(), file->tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t position = 0;
    const TensorInfo* previous = nullptr;
    for (const TensorInfo& info : file->tensors_) {
        if (info.end > dataSize) {
            throw InputError(path, "header." + info.name,
                "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "] of tensor "
                    + info.name + " run past the end of the data section (" + std::to_string(dataSize) + " bytes)");
        }
        if (info.begin < position) {
            throw InputError(path, "header." + info.name,
                "tensor " + info.name + " at [" + std::to_string(info.begin) + ", " + std::to_string(info.end)
                    + ") overlaps tensor " + previous->name + " at [" + std::to_string(previous->begin) + ", "
                    + std::to_string(previous->end) + ")");
        }
        if (info.begin > position) {
            throw InputError(path, "header." + info.name,
                "data section not covered: bytes [" + std::to_string(position) + ", " + std::to_string(info.begin)
                    + ") before tensor " + info.name + " belong to no tensor");
        }
        position = info.end;
        previous = &info;
    }
    if (position != dataSize) {
        throw InputError(path, "header",
            "data section not covered: the tensors end at byte " + std::to_string(position)
                + " but the data section holds " + std::to_string(dataSize) + " bytes");
    }
    for (std::size_t i = 0; i < file->tensors_.size(); ++i) {
        file->index_[file->tensors_[i].name] = i;
    }
    return file;
}

SafetensorsFile::~SafetensorsFile()
{
    if (fd_ >= 0) {
        ::close(fd_);
    }
    if (mapping_) {
        ::munmap(mapping_, mappingSize_);
    }
}

bool SafetensorsFile::contains(const std::string& name) const
{
    return index_.count(name) > 0;
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const
{
    const auto it = index_.find(name);
    if (it == index_.end()) {
        throw InputError(path_, name, "no tensor named " + name);
    }
    return tensors_[it->second];
}

namespace {

// Reads `bytes` bytes at `offset` of the file into `out`; returns what went wrong, empty when all was read.
std::string readFully(int fd, char* out, std::uint64_t bytes, std::uint64_t offset)
{
    while (bytes > 0) {
        const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, 1ull << 30));
        const ssize_t got = ::pread(fd, out, chunk, static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return systemError();
        }
        if (got == 0) {
            return "the file ends at byte " + std::to_string(offset)
                + ", before the tensor's last byte (it was cut short after it was opened)";
        }
        out += got;
        offset += static_cast<std::uint64_t>(got);
        bytes -= static_cast<std::uint64_t>(got);
    }
    return {};
}

} // namespace

at::Tensor SafetensorsFile::load(const std::string& name) const
{
    const TensorInfo& entry = info(name);
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(scalarType(entry.dtype)));
    const std::uint64_t bytes = entry.end - entry.begin;
    if (bytes == 0) {
        return tensor;
    }
    char* out = static_cast<char*>(tensor.data_ptr());
    // The tensor's fresh pages are made present in one call before the read: faulting them in one at a time while
    // copying was most of the load (Qwen3-0.6B shape, 1.2 GB: 4.1-4.5 s copied out of the mapping, page faults and
    // page clearing ~75% of it; 1.5-1.9 s so on a 2-core VM).
    makePagesPresent(out, bytes);
    if (const std::string problem = readFully(fd_, out, bytes, dataOffset_ + entry.begin); !problem.empty()) {
        throw InputError(path_, name, "cannot read tensor " + name + ": " + problem);
    }
    return tensor;
}

void SafetensorsFile::adviseWillNeed() const
{
    ::posix_fadvise(fd_, static_cast<off_t>(dataOffset_), 0, POSIX_FADV_WILLNEED);
}

void Checkpoint::adviseWillNeed() const
{
    std::set<const SafetensorsFile*> advised;
    for (const auto& [name, file] : owner_) {
        if (advised.insert(file.get()).second) {
            file->adviseWillNeed();
        }
    }
}

const unsigned char* SafetensorsFile::data(const std::string& name) const
{
    return static_cast<const unsigned char*>(mapping_) + dataOffset_ + info(name).begin;
}

bool Checkpoint::sameData(const std::string& a, const std::string& b) const
{
    const TensorInfo& first = info(a);
    const TensorInfo& second = info(b);
    if (first.dtype != second.dtype || first.shape != second.shape) {
        return false;
    }
    const std::uint64_t bytes = first.end - first.begin;
    return bytes == 0 || std::memcmp(owner_.at(a)->data(a), owner_.at(b)->data(b), bytes) == 0;
}

Checkpoint Checkpoint::open(const std::string& directory)
{
    Checkpoint checkpoint;
    checkpoint.directory_ = directory;
    const fs::path root(directory);
    const fs::path indexPath = root / kIndexName;
    const fs::path singlePath = root / kSingleName;

    if (pathKind(indexPath.string()) == PathKind::Missing) {
        if (pathKind(singlePath.string()) == PathKind::Missing) {
            throw InputError(directory, "",
                std::string("no checkpoint: expected ") + kSingleName + " or " + kIndexName + " in the directory");
        }
        auto file = SafetensorsFile::open(singlePath.string());
        for (const TensorInfo& info : file->tensors()) {
            checkpoint.owner_[info.name] = file;
        }
        return checkpoint;
    }

    const std::string indexFile = indexPath.string();
    const std::string text = readInputFile(indexFile, limits::kConfigFile, "shard index");
    if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
        deep != std::string::npos) {
        throw InputError(indexFile, lineColumnOf(text.data(), text.data() + text.size(), deep), nestingTooDeepDetail());
    }
    json index;
    try {
        index = json::parse(text);
    } catch (const json::exception& error) { // parse_error, or out_of_range for a number such as 1e400
        throw InputError(indexFile, "", "invalid JSON: " + jsonErrorDetail(error));
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
        throw InputError(indexFile, "weight_map", "expected an object mapping tensor names to shard files");
    }

    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [name, shardValue] : index["weight_map"].items()) {
        if (!shardValue.is_string()) {
            throw InputError(indexFile, "weight_map." + name, "expected a shard file name");
        }
        const std::string shardName = shardValue.get<std::string>();
        // Shards live beside the index; a name that climbs out of the directory is not a checkpoint file.
        if (shardName.empty() || fs::path(shardName).is_absolute() || shardName.find("..") != std::string::npos) {
            throw InputError(indexFile, "weight_map." + name, "shard name '" + shardName + "' is not a file name");
        }
        if (!shards.count(shardName)) {
            const fs::path shardPath = root / shardName;
            if (pathKind(shardPath.string()) == PathKind::Missing) {
                throw InputError(
                    indexFile, "weight_map." + name, "shard " + shardName + " of tensor " + name + " does not exist");
            }
            shards[shardName] = SafetensorsFile::open(shardPath.string());
        }
        if (!shards[shardName]->contains(name)) {
            throw InputError(indexFile, "weight_map." + name,
                "tensor " + name + " is listed in shard " + shardName + " but that shard does not contain it");
        }
        checkpoint.owner_[name] = shards[shardName];
    }
    // A tensor stored in two shards (or in a shard the index does not point to for it) makes the checkpoint
    // ambiguous: which copy a loader uses depends on its loading order.
    for (const auto& [shardName, shard] : shards) {
        for (const TensorInfo& info : shard->tensors()) {
            const auto owner = checkpoint.owner_.find(info.name);
            if (owner == checkpoint.owner_.end()) {
                throw InputError(indexFile, "weight_map",
                    "tensor " + info.name + " is stored in shard " + shardName + " but not listed in weight_map");
            }
            if (owner->second != shard) {
                throw InputError(indexFile, "weight_map." + info.name,
                    "tensor " + info.name + " is present in two shards: "
                        + fs::path(owner->second->path()).filename().string() + " and " + shardName);
            }
        }
    }
    return checkpoint;
}

std::vector<std::string> Checkpoint::names() const
{
    std::vector<std::string> result;
    result.reserve(owner_.size());
    for (const auto& entry : owner_) {
        result.push_back(entry.first);
    }
    return result;
}

std::vector<std::string> Checkpoint::files() const
{
    std::set<std::string> paths;
    for (const auto& entry : owner_) {
        paths.insert(entry.second->path());
    }
    return {paths.begin(), paths.end()};
}

bool Checkpoint::contains(const std::string& name) const
{
    return owner_.count(name) > 0;
}

const TensorInfo& Checkpoint::info(const std::string& name) const
{
    const auto it = owner_.find(name);
    if (it == owner_.end()) {
        throw InputError(directory_, name, "checkpoint has no tensor named " + name);
    }
    return it->second->info(name);
}

at::Tensor Checkpoint::load(const std::string& name) const
{
    const auto it = owner_.find(name);
    if (it == owner_.end()) {
        throw InputError(directory_, name, "checkpoint has no tensor named " + name);
    }
    return it->second->load(name);
}

void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata)
{
    std::vector<at::Tensor> blobs;
    const std::string header = buildHeader(tensors, metadata, blobs);
    writeSafetensorsFile(path, header, blobs);
}

void writeShardedSafetensors(const std::string& directory,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::uint64_t maxShardBytes)
{
    std::error_code error;
    fs::create_directories(directory, error);
    if (error) {
        throw Error("cannot create directory " + directory + ": " + error.message());
    }
    // Greedy packing in the given order; a tensor larger than the limit gets a shard of its own.
    std::vector<std::vector<std::pair<std::string, at::Tensor>>> shards;
    std::uint64_t currentBytes = 0;
    std::uint64_t totalBytes = 0;
    for (const auto& entry : tensors) {
        const std::uint64_t bytes = tensorBytes(entry.second);
        if (shards.empty() || (currentBytes > 0 && currentBytes + bytes > maxShardBytes)) {
            shards.emplace_back();
            currentBytes = 0;
        }
        shards.back().push_back(entry);
        currentBytes += bytes;
        totalBytes += bytes;
    }
    if (shards.empty()) {
        shards.emplace_back();
    }

    nlohmann::ordered_json weightMap = nlohmann::ordered_json::object();
    const std::size_t count = shards.size();
    for (std::size_t i = 0; i < count; ++i) {
        char name[64];
        std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", i + 1, count);
        writeSafetensors((fs::path(directory) / name).string(), shards[i], {{"format", "pt"}});
        for (const auto& entry : shards[i]) {
            weightMap[entry.first] = name;
        }
    }
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", totalBytes}};
    index["weight_map"] = weightMap;
    const std::string text = index.dump(2) + "\n";
    const std::string indexPath = (fs::path(directory) / kIndexName).string();
    writeFileAtomically(indexPath, text);
}

} // namespace mismatch::model

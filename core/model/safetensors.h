#pragma once
// safetensors files: memory-mapped reader (single file, or sharded with model.safetensors.index.json) and a
// writer that writes to a temporary name and renames. Strict validation: every problem is an InputError
// naming the file, the tensor (or header key) and what was expected.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mismatch::model {

enum class DType { F32, F16, BF16 };
std::string toString(DType dtype);  // "F32", "F16", "BF16"
std::size_t byteSize(DType dtype);
at::ScalarType scalarType(DType dtype);  // kFloat, kHalf, kBFloat16

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<std::int64_t> shape;
    std::uint64_t begin = 0;  // byte offsets inside the data section
    std::uint64_t end = 0;
};

class SafetensorsFile {
public:
    // Opens and validates (header length inside the file, valid JSON, known dtypes, offsets inside the data
    // section, contiguous and non-overlapping, byte size = product(shape) * dtype size).
    static std::shared_ptr<SafetensorsFile> open(const std::string& path);
    ~SafetensorsFile();

    const std::string& path() const { return path_; }
    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    bool contains(const std::string& name) const;
    const TensorInfo& info(const std::string& name) const;  // InputError when missing
    // A tensor as a LibTorch tensor of its stored dtype; the bytes are read from the file into it.
    at::Tensor load(const std::string& name) const;
    // Asks the kernel to start reading the whole data section into the page cache now (POSIX_FADV_WILLNEED;
    // advice only): loads that follow find it read ahead instead of waiting on each tensor's pages in turn.
    void adviseWillNeed() const;
    // The tensor's stored bytes inside the mapping (info(name).end - info(name).begin of them).
    const unsigned char* data(const std::string& name) const;

private:
    SafetensorsFile() = default;
    std::string path_;
    int fd_ = -1;
    void* mapping_ = nullptr;
    std::size_t mappingSize_ = 0;
    std::uint64_t dataOffset_ = 0;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, std::size_t> index_;
    std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` (weight_map). Duplicate names across shards are errors.
class Checkpoint {
public:
    static Checkpoint open(const std::string& directory);
    std::vector<std::string> names() const;
    bool contains(const std::string& name) const;
    const TensorInfo& info(const std::string& name) const;
    at::Tensor load(const std::string& name) const;
    // adviseWillNeed on every file of the checkpoint (before loading all of its tensors).
    void adviseWillNeed() const;
    // Whether two tensors hold the same dtype, shape and bytes (compared in place, nothing is loaded).
    bool sameData(const std::string& a, const std::string& b) const;
    const std::string& directory() const { return directory_; }
    // Paths of the safetensors files holding the tensors, sorted.
    std::vector<std::string> files() const;

private:
    std::string directory_;
    std::map<std::string, std::shared_ptr<SafetensorsFile>> owner_;
};

// Writes tensors (F32, F16 or BF16, made contiguous, stored in the order given) with optional metadata.
// Writes `path`.tmp then renames, so a failed write leaves any existing file untouched.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// Writes shards of at most maxShardBytes plus model.safetensors.index.json into `directory`.
void writeShardedSafetensors(const std::string& directory,
    const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::uint64_t maxShardBytes);

}  // namespace mismatch::model

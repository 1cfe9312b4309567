#include "core/analysis/job_resume.h"

#include "core/common/error.h"
#include "core/common/hash.h"
#include "core/common/message_text.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

constexpr std::uint64_t kFullDigestLimit = 64ull << 20;
constexpr std::uint64_t kEndBytes = 1ull << 20;
constexpr std::uint64_t kBlockBytes = 64ull << 10;
constexpr int kSampledBlocks = 16;

void digestRange(std::ifstream& in, std::uint64_t offset, std::uint64_t size, std::uint64_t& hash,
    const std::string& path)
{
    std::vector<char> buffer(1 << 16);
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    while (size > 0) {
        const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(size, buffer.size()));
        in.read(buffer.data(), static_cast<std::streamsize>(chunk));
        if (in.gcount() != static_cast<std::streamsize>(chunk)) {
            throw InputError(path, "", "cannot be read (short read while computing its digest)");
        }
        hash = fnv1a(buffer.data(), chunk, hash);
        size -= chunk;
    }
}

} // namespace

std::string fileDigest(const std::string& path)
{
    std::error_code error;
    const std::uint64_t size = fs::file_size(path, error);
    if (error) {
        throw InputError(path, "", "cannot be read: " + error.message());
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw InputError(path, "", "cannot be opened for reading");
    }
    std::uint64_t hash = kFnv1aOffsetBasis;
    if (size <= kFullDigestLimit) {
        digestRange(in, 0, size, hash, path);
        return hex64(hash);
    }
    const std::string sizeText = std::to_string(size);
    hash = fnv1a(sizeText, hash);
    digestRange(in, 0, kEndBytes, hash, path);
    for (int i = 1; i <= kSampledBlocks; ++i) {
        const std::uint64_t offset = (size - kBlockBytes) / (kSampledBlocks + 1) * static_cast<std::uint64_t>(i);
        digestRange(in, offset, kBlockBytes, hash, path);
    }
    digestRange(in, size - kEndBytes, kEndBytes, hash, path);
    return "sampled:" + hex64(hash);
}

nlohmann::json fileDigests(const std::vector<std::string>& paths)
{
    nlohmann::json digests = nlohmann::json::object();
    for (const std::string& path : paths) {
        digests[fs::absolute(path).lexically_normal().string()] = fileDigest(path);
    }
    return digests;
}

std::vector<std::string> modelFiles(const std::string& directory)
{
    std::vector<std::string> files;
    std::error_code error;
    if (!fs::is_directory(directory, error)) {
        return files;
    }
    for (const auto& entry : fs::directory_iterator(directory, error)) {
        const std::string name = entry.path().filename().string();
        const bool weights = entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json";
        if (entry.is_regular_file() && (weights || name == "config.json" || name == "tokenizer.json")) {
            files.push_back(entry.path().string());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

void checkInputsUnchanged(const nlohmann::json& stored, std::int64_t runId, const std::string& job)
{
    if (!stored.is_object()) {
        throw InputError(job, "run " + std::to_string(runId),
            "the run stored no input digests (it was started by an older version); it cannot be resumed");
    }
    for (const auto& [path, digest] : stored.items()) {
        std::error_code error;
        if (!fs::exists(path, error)) {
            throw InputError(path, "",
                "an input of " + job + " run " + std::to_string(runId)
                    + " no longer exists; a resume needs the inputs the run started with");
        }
        if (fileDigest(path) != digest.get<std::string>()) {
            throw InputError(path, "",
                "changed since " + job + " run " + std::to_string(runId)
                    + " started (its content differs); a resume would mix results of two inputs: start a new job");
        }
    }
}

void checkRecordUnchanged(const nlohmann::json& stored, const nlohmann::json& fresh, const std::vector<std::string>& ignore,
    std::int64_t runId, const std::string& job)
{
    if (!stored.is_object() || !fresh.is_object()) {
        return;
    }
    for (const auto& [key, value] : fresh.items()) {
        if (std::find(ignore.begin(), ignore.end(), key) != ignore.end() || !stored.contains(key)) {
            continue;
        }
        if (stored.at(key) != value) {
            const auto shortText = [](const nlohmann::json& v) {
                const std::string text = v.dump();
                return text.size() > 160 ? text.substr(0, 157) + "..." : text;
            };
            throw InputError(job, "run " + std::to_string(runId),
                "its job spec no longer gives what the run started with at '" + key + "' (stored " + shortText(stored.at(key))
                    + ", now " + shortText(value)
                    + "): a file it names changed since; a resume would mix two configurations: start a new job");
        }
    }
}

ResumableRun resumableRun(const store::RunStore& store, std::int64_t runId, const std::string& kind)
{
    const std::string where = "run " + std::to_string(runId);
    const auto info = store.run(runId);
    if (!info) {
        throw InputError(store.path(), where, "no such run (see `mismatch store runs`)");
    }
    if (info->kind != kind) {
        throw InputError(store.path(), where,
            "is a '" + info->kind + "' run (" + info->name + "), not a '" + kind + "' run; resume it with its own command");
    }
    if (info->status == store::RunStatus::Finished) {
        throw InputError(store.path(), where, "has finished (" + info->name + "); there is nothing to resume");
    }
    ResumableRun run;
    run.info = *info;
    try {
        run.config = nlohmann::json::parse(info->configJson);
    } catch (const nlohmann::json::exception& error) {
        throw InputError(store.path(), where, "its config_json is not JSON: " + jsonErrorDetail(error));
    }
    return run;
}

} // namespace mismatch::analysis

#pragma once
// Limits on outside input, so that no file, however large, deep or self-referential, makes a command work
// without bound (docs/architecture.md "Limits on input" lists them). Every reader of a file goes through readInputFile (or
// requireRegularFile for files it maps or streams): only regular files are read (a FIFO or device would block
// or never end), the size is checked before anything is parsed, and every file-system error is an InputError
// naming the path.
#include <cstddef>
#include <cstdint>
#include <string>

namespace mismatch {

// A size limit on one kind of input file. The environment variable (a whole number of bytes) replaces the
// default, for the rare file that is legitimately larger.
struct FileSizeLimit {
    const char* kind; // "configuration files (config.json, recipes, ...)", for messages
    const char* variable; // "MISMATCH_MAX_CONFIG_BYTES"
    std::uint64_t defaultBytes;
};

namespace limits {

// Hand-written or small generated files: config.json, shard indexes, recipes, run files, candidates files,
// checkpoint state. The largest real ones are tens of kilobytes.
inline constexpr FileSizeLimit kConfigFile {"configuration files (config.json, shard index, recipe, run file, "
                                            "candidates, checkpoint state)",
    "MISMATCH_MAX_CONFIG_BYTES", 4ull << 20};
// tokenizer.json: Llama 3's is 9 MB, Qwen3's 11 MB, the largest common ones about 35 MB.
inline constexpr FileSizeLimit kTokenizerFile {"tokenizer.json files", "MISMATCH_MAX_TOKENIZER_BYTES", 64ull << 20};
// Prompt sets (JSONL) are read whole.
inline constexpr FileSizeLimit kPromptSetFile {"prompt sets", "MISMATCH_MAX_PROMPTS_BYTES", 256ull << 20};
// Logs and files imported from other tools (verl / Tinker JSONL, CSV, AIMET JSON).
inline constexpr FileSizeLimit kImportFile {"imported logs", "MISMATCH_MAX_IMPORT_BYTES", 256ull << 20};

// JSON and YAML documents: arrays and objects (mappings, lists) nested at most this deep. Real files nest fewer
// than 10 levels; the parsers and the code that walks their trees recurse once per level.
inline constexpr int kMaxNestingDepth = 64;
// YAML aliases (*name): at most this many in a document, and expanding them (each alias stands for a copy of
// its anchored node) may add at most kMaxAliasNodes nodes: "billion laughs" documents stay small as text but
// expand exponentially.
inline constexpr std::uint64_t kMaxYamlAliases = 10000;
inline constexpr std::uint64_t kMaxAliasNodes = 1000000;

// Counts read from files and arguments that size the work of a command (docs/architecture.md "Limits on
// input"): each sizes a loop or a table, so that a small input cannot ask for unbounded work.
// `mismatch demo --count`: probe prompts of the demo's admission screen (the shipped protocol's is 128; each
// prompt is a generation per candidate).
inline constexpr std::int64_t kMaxDemoProbeCount = 1024;
// The content of one added token of a tokenizer.json (the longest real ones are tens of bytes): the encoder
// tries every added token at every position of the text.
inline constexpr std::size_t kMaxAddedTokenBytes = 1024;
// Entries of an AIMET QuantAnalyzer file (one per quantized node: a few thousand for the largest models).
inline constexpr std::int64_t kMaxAimetEntries = 100000;
// Tensors in one safetensors file: a checkpoint shard holds hundreds to a few thousand (a whole model's tensors are
// a few per module); a file listing more is refused before its tensors are read one by one.
inline constexpr std::size_t kMaxSafetensorsTensors = 100000;
// Weight noise sigma (relative to each tensor's RMS), wherever one is given (run files, candidates files, --noise):
// noise 100 times the RMS leaves nothing of the weights to measure, and larger sigmas only drive the noisy weights,
// then the activations and logits, to float32's overflow (1e39 is infinite there).
inline constexpr double kMaxNoiseSigma = 100.0;
// Why, for messages: "... must be <= 100: " + kMaxNoiseSigmaReason.
inline constexpr const char* kMaxNoiseSigmaReason
    = "noise of 100 times each tensor's RMS already leaves nothing of the weights, and larger sigmas only make "
      "weights and logits overflow float32";

} // namespace limits

// The limit in force: the environment variable when set (InputError naming the variable when it is not a whole
// number of bytes), else the default.
std::uint64_t limitBytes(const FileSizeLimit& limit);

// The whole content of the input file `path`; `what` names it in messages ("recipe file"). InputError(path, "",
// ...) when it cannot be opened or read (the system's reason: no such file, permission denied, too many levels
// of symbolic links, ...), when it is not a regular file (a directory, FIFO, device or socket; symbolic links
// are followed), or when it holds more bytes than the limit ("... is 52.00 MiB, over the 4 MiB limit for
// configuration files; set MISMATCH_MAX_CONFIG_BYTES=BYTES to raise it"). Never blocks on a FIFO.
std::string readInputFile(const std::string& path, const FileSizeLimit& limit, const std::string& what);

// For files read another way (mapped, streamed, copied): InputError(path, "", ...) unless `path` is a regular
// file (following symbolic links), with the same messages as readInputFile.
void requireRegularFile(const std::string& path, const std::string& what);

// What is at `path` (following symbolic links). Missing when nothing is there; InputError(path, "", "cannot be
// examined: REASON") for any other error (a symbolic-link loop, a name too long, permission denied), so that no
// std::filesystem exception escapes.
enum class PathKind { Missing, Directory, RegularFile, Other };
PathKind pathKind(const std::string& path);

// JSON text (or one JSONL line): the byte offset of the first '[' or '{' nested deeper than `maxDepth`, or
// std::string::npos. Brackets inside strings do not count. Linear; used before parsing so that neither the
// parser nor the code walking the tree recurses without bound.
std::size_t jsonNestingTooDeep(const char* begin, const char* end, int maxDepth = limits::kMaxNestingDepth);
// The detail of that error: "nested deeper than 64 levels (the limit for JSON and YAML input)".
std::string nestingTooDeepDetail();

// "line L, column C" (1-based; the column counts bytes) of a byte offset in text.
std::string lineColumnOf(const char* begin, const char* end, std::size_t offset);

} // namespace mismatch

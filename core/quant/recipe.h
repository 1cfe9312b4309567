#pragma once
// Precision recipes: which number format the rollout engine uses for each module's weights, for the inputs
// (activations) of each linear module and for each layer's KV cache. A recipe is a versioned YAML or JSON file:
//
//   version: 1
//   name: fp8-keep-edges
//   weights: {format: fp8_e4m3, granularity: block128}  # default for every per-layer projection
//   activations: {format: fp8_e4m3}                     # default for every per-layer projection
//   kv_cache: {format: fp8_e4m3, scales: per_head, calibration: probe}  # default for every layer
//   rules:                                              # applied in order; later rules win
//     - match: "model.layers.{0-1}.*"
//       weights: {format: bf16}
//       activations: {format: bf16}
//     - match: "model.layers.{0,27}.self_attn"
//       kv_cache: {format: bf16}
//
// Formats (anything not named is BF16):
//   weights      bf16, fp16                      no scales, no granularity
//                fp8_e4m3, fp8_e5m2              granularity tensor | channel | block128; default block128
//                                                (the spec's example; an outlier coarsens only its own block)
//                int8                            granularity channel only (the default)
//                int4                            granularity group128 only (the default)
//                mxfp8, mxfp4                    granularity group32 only (the default): OCP MX blocks of 32 along
//                                                the input dimension with E8M0 scales
//                nvfp4                           granularity group16 only (the default): blocks of 16 with E4M3
//                                                scales plus one float32 scale per tensor (microscaling.h)
//   activations  bf16, fp8_e4m3                  fp8 is dynamic, one scale per token; no other keys
//                mxfp8, mxfp4, nvfp4             dynamic block scales along each token, only on modules whose weights
//                                                have the same format (W8A8, W4A4); those weights take bf16
//                                                activations too (weight-only: nvfp4 with bf16 is W4A16_NVFP4)
//   kv_cache     bf16                            no scales
//                fp8_e4m3                        scales per_tensor (default) | per_head;
//                                                calibration probe (default: scales measured once on the probe
//                                                prompts) | every_sync (re-measured at every weight sync)
//                fp8_per_token_head,             vLLM's dynamic formats: one scale per token and KV head, computed
//                int8_per_token_head             when the token is written to the cache; no other keys
// All scales are symmetric (no zero points) and stored as float32.
//
// Module names and patterns: the per-layer projections are `model.layers.{i}.self_attn.{q,k,v,o}_proj` and
// `model.layers.{i}.mlp.{gate,up,down}_proj`; `model.layers.{i}.self_attn` names layer i's attention block
// (the target of kv_cache); `model.embed_tokens` (also written `embed_tokens`) and `lm_head` name the
// embedding and the output projection. In a `match` pattern:
//   *            any run of characters, dots included (`model.layers.*.mlp.down_proj`, `model.layers.{0-1}.*`)
//   {A,B,...}    alternation; each item is a literal (`{q,k}_proj`), a number or a number range `0-3`
//                (`{0-3}`, `{0,27}`, `{0-1,5}`); a number range matches the decimal numbers in it
//   anything else is literal. A pattern must match a whole name.
//
// Which defaults apply where: the top-level `weights` and `activations` apply to the seven per-layer
// projections only; `embed_tokens` and `lm_head` stay BF16 unless a rule names them (as vLLM and
// llm-compressor leave them unquantized unless asked). Top-level `kv_cache` applies to every layer. A rule's
// fields land where they mean something: weights on projections, the embedding and lm_head; activations on
// projections and lm_head; kv_cache on attention blocks (so `model.layers.{0-1}.*` with all three sets each).
//
// Validation (every error is an InputError naming the file and, for YAML, "line L, column C"; for JSON the key
// path and line/column):
//   syntax      - the file is YAML or JSON (malformed text: the parser's position)
//               - `version` is present and is 1; unknown keys and duplicate keys are errors (typo safety)
//               - each value has its type (mapping, list, string, integer); format names are known (the error
//                 lists the valid ones); `granularity` is one the format has (bf16/fp16 have none; int8 only
//                 channel; int4 only group128; mxfp8/mxfp4 only group32; nvfp4 only group16); kv_cache
//                 `scales`/`calibration` only with fp8_e4m3 (the per-token-head formats compute their scales at
//                 each cache write)
//               - each rule has `match` and at least one of weights, activations, kv_cache
//               - patterns are well formed: braces balanced and non-empty, number ranges ascending (`{5-2}`
//                 is an error), no empty items, at most ModulePattern::kMaxLength characters
//               - at most Recipe::kMaxRules rules
//               - two rules with identical `match` setting the same field to different values contradict
//                 each other (the later one would silently override the earlier): error naming both
//   model       (resolveRecipe, in recipe_plan.h)
//               - every rule matches at least one module of the model, and each item of each brace group
//                 does (each end of a number range): `model.layers.27...` in a 4-layer model is an error
//                 that names the model's layer count
//               - a rule's kv_cache must match at least one attention block (`...mlp.down_proj` with kv_cache
//                 is an error); its weights must match at least one weight-carrying module; its activations
//                 at least one linear module (embed_tokens is a lookup and has no input activations)
//               - no module ends with int4 weights and fp8 activations (W4A8: the engine has no such kernel), nor
//                 with a pair formats.h isSupportedPair refuses (microscaling activations without weights of their
//                 format, microscaling weights with activations other than bf16 or their own format)
//               - a module with microscaling weights has an input dimension that is a multiple of the block (32 or
//                 16): vLLM's kernels take whole blocks
//               - with tie_word_embeddings, embed_tokens and lm_head (one tensor) get the same weight format
#include "core/common/source_location.h"
#include "core/quant/formats.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mismatch::quant {

// The format enums, their names and storage sizes are core/quant/formats.h's; recipes add the KV calibration.
enum class KvCalibration { None, Probe, EverySync };
std::string toString(KvCalibration calibration);

struct WeightPrecision {
    WeightFormat format = WeightFormat::Bf16;
    Granularity granularity = Granularity::None; // filled with defaultGranularity() by the parser
};

struct ActivationPrecision {
    ActivationFormat format = ActivationFormat::Bf16; // fp8: dynamic, one scale per token
};

struct KvPrecision {
    KvFormat format = KvFormat::Bf16;
    KvScales scales = KvScales::None; // fp8_e4m3: PerTensor unless given; None for the other formats
    KvCalibration calibration = KvCalibration::None; // fp8_e4m3: Probe unless given; None for the other formats
};

bool operator==(const WeightPrecision& a, const WeightPrecision& b);
bool operator==(const ActivationPrecision& a, const ActivationPrecision& b);
bool operator==(const KvPrecision& a, const KvPrecision& b);
inline bool operator!=(const WeightPrecision& a, const WeightPrecision& b)
{
    return !(a == b);
}
inline bool operator!=(const ActivationPrecision& a, const ActivationPrecision& b)
{
    return !(a == b);
}
inline bool operator!=(const KvPrecision& a, const KvPrecision& b)
{
    return !(a == b);
}
// Short human forms for tables: "fp8_e4m3/block128", "int4/group128", "bf16", "fp8_e4m3/per_head".
std::string describe(const WeightPrecision& precision);
std::string describe(const KvPrecision& precision);

// Where something was written: the key path ("rules[2].weights") and 1-based line and column (0: unknown,
// e.g. for a recipe built in code).
using io::SourceLocation;

// A `match` pattern, compiled. See the grammar at the top of this file.
class ModulePattern {
public:
    // Throws std::invalid_argument saying what is wrong with a malformed pattern; the recipe parser turns it
    // into an InputError located at the rule's `match`.
    static ModulePattern compile(const std::string& text);

    bool matches(const std::string& name) const;
    const std::string& text() const { return text_; }

    // Brace groups, for checking that each alternative exists in a model: groupCount() groups, each with
    // itemCount(g) items, itemText(g, i) the item's source text.
    std::size_t groupCount() const;
    std::size_t itemCount(std::size_t group) const;
    bool itemIsRange(std::size_t group, std::size_t item) const;
    std::string itemText(std::size_t group, std::size_t item) const;
    // used[g][i][end]: whether some name in `names` matches this pattern with group g reduced to item i (for a
    // number range, to its low end when end is 0 and its high end when end is 1; a single item has end 0 only).
    // Time linear in names x pattern length x name length.
    std::vector<std::vector<std::array<bool, 2>>> itemsUsed(const std::vector<std::string>& names) const;

    // Longest pattern accepted, in characters: long enough for a list of every layer of the largest models
    // (`{0,1,...,127}`), short enough that checking a recipe stays fast (docs/architecture.md "Limits on input").
    static constexpr std::size_t kMaxLength = 1024;

private:
    struct Item {
        bool isNumber = false;
        std::string literal; // when !isNumber
        std::int64_t low = 0; // when isNumber: inclusive range
        std::int64_t high = 0;
        std::string source; // as written
    };
    struct Token {
        enum Kind { Literal, Star, Group } kind = Literal;
        std::string literal;
        std::vector<Item> items;
    };

    // Matching is a walk over the tokens carrying the set of positions in the name reachable so far (a
    // position-set automaton: no backtracking, so `*a*a*a*a*b` costs no more than its length).
    using Positions = std::vector<char>; // Positions[p] != 0: name[0, p) can be consumed
    static void stepItem(const Item& item, std::int64_t low, std::int64_t high, const std::string& name,
        const Positions& from, Positions& to);
    static void stepToken(const Token& token, const std::string& name, const Positions& from, Positions& to);
    // reach[t]: positions after tokens [0, t); empty sets stop the walk early.
    std::vector<Positions> forward(const std::string& name) const;
    // rest[t]: positions from which tokens [t, end) consume the rest of the name.
    std::vector<Positions> backward(const std::string& name) const;

    std::string text_;
    std::vector<Token> tokens_;
    std::vector<std::size_t> groupTokens_; // index into tokens_ of each Group token
};

// The names in `names` closest to `pattern` (edit distance from the pattern text), at most `count`, closest
// first: for messages about a pattern that matches nothing ("nearest: model.layers.0.mlp.up_proj, ...").
std::vector<std::string> nearestNames(
    const std::string& pattern, const std::vector<std::string>& names, std::size_t count = 3);
// "a, b, c" of nearestNames, for messages.
std::string nearestNamesText(const std::string& pattern, const std::vector<std::string>& names);

struct RecipeRule {
    std::string match;
    std::optional<WeightPrecision> weights;
    std::optional<ActivationPrecision> activations;
    std::optional<KvPrecision> kvCache;

    // Where the rule and its parts were written (not part of equality).
    SourceLocation location; // the rule's list item
    SourceLocation matchLocation;
    SourceLocation weightsLocation;
    SourceLocation activationsLocation;
    SourceLocation kvCacheLocation;
};

struct Recipe {
    static constexpr int kCurrentVersion = 1;
    // At most this many rules (docs/architecture.md "Limits on input"): one per module of a 500-layer model, while checking
    // every rule against every module of a large model stays a matter of seconds.
    static constexpr std::size_t kMaxRules = 4096;

    int version = kCurrentVersion;
    std::string name;
    std::optional<WeightPrecision> weights; // default for the per-layer projections; absent: bf16
    std::optional<ActivationPrecision> activations; // default for the per-layer projections; absent: bf16
    std::optional<KvPrecision> kvCache; // default for every layer; absent: bf16
    std::vector<RecipeRule> rules; // in file order; later rules win

    // Provenance (not part of equality): the file it came from, whether it was JSON (which decides how
    // locations are written in errors) and where the top-level sections were.
    std::string sourceFile;
    bool fromJson = false;
    SourceLocation weightsLocation;
    SourceLocation activationsLocation;
    SourceLocation kvCacheLocation;
};

// Equality of meaning: what the recipe asks for, not where it was written.
bool operator==(const RecipeRule& a, const RecipeRule& b);
bool operator==(const Recipe& a, const Recipe& b);
inline bool operator!=(const Recipe& a, const Recipe& b)
{
    return !(a == b);
}

// Parses recipe text. JSON when `fileName` ends in .json, YAML when it ends in .yaml/.yml, otherwise JSON when
// the text parses as JSON and YAML when not. Throws InputError (see the validation list above).
Recipe parseRecipe(const std::string& text, const std::string& fileName);
Recipe loadRecipe(const std::string& path);

// Text that parses back to an equal recipe (defaults written out explicitly).
std::string recipeToYaml(const Recipe& recipe);
std::string recipeToJson(const Recipe& recipe);

// The InputError for something at `where` in `recipe`, with the location written the recipe's way: YAML
// "line L, column C" (detail prefixed by the key path), JSON "KEYPATH, line L, column C".
[[noreturn]] void throwRecipeError(const Recipe& recipe, const SourceLocation& where, const std::string& detail);
// "line 7, column 5" or the key path when the line is unknown; for messages that mention a second place.
using io::describeLocation;

} // namespace mismatch::quant

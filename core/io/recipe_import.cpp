#include "core/io/recipe_import.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/common/utf8.h"
#include "core/common/yaml_scalar.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

namespace mismatch::io {

namespace {

using Json = nlohmann::ordered_json;
using quant::ActivationFormat;
using quant::Granularity;
using quant::KvFormat;
using quant::KvScales;
using quant::WeightFormat;

// A YAML tree as JSON (the loader bounded its depth and size). Numbers must be finite: JSON holds no NaN or
// infinity, and a NaN literal (as Python's json module writes it) is an InputError at its line and column.
Json yamlToJson(const YAML::Node& node, const std::string& file)
{
    if (!node || node.IsNull()) {
        return nullptr;
    }
    if (node.IsMap()) {
        Json object = Json::object();
        for (const auto& item : node) {
            object[item.first.Scalar()] = yamlToJson(item.second, file);
        }
        return object;
    }
    if (node.IsSequence()) {
        Json array = Json::array();
        for (const auto& item : node) {
            array.push_back(yamlToJson(item, file));
        }
        return array;
    }
    const auto where = [&] {
        const YamlPosition at = yamlPosition(node);
        return "line " + std::to_string(at.line) + ", column " + std::to_string(at.column);
    };
    switch (scalarKind(node)) {
    case ScalarKind::Integer:
    case ScalarKind::Number: {
        double value = 0.0;
        try {
            if (scalarKind(node) == ScalarKind::Integer) {
                return std::stoll(node.Scalar());
            }
        } catch (const std::exception&) { // beyond 64 bits: read as a number
        }
        try {
            value = numberOf(node);
        } catch (const std::exception&) {
            throw InputError(file, where(), "the number " + node.Scalar() + " is beyond the range of a double");
        }
        if (!std::isfinite(value)) {
            throw InputError(file, where(), node.Scalar() + " is not a finite number (JSON and recipes hold finite numbers)");
        }
        return value;
    }
    case ScalarKind::Boolean:
        return node.Scalar() == "true" || node.Scalar() == "True" || node.Scalar() == "TRUE";
    case ScalarKind::Null:
        return nullptr;
    case ScalarKind::String:
        break;
    }
    return node.Scalar();
}

std::string kind(const Json& value)
{
    if (value.is_object()) {
        return "a mapping";
    }
    if (value.is_array()) {
        return "a list";
    }
    if (value.is_string()) {
        return "a string";
    }
    if (value.is_boolean()) {
        return "a boolean";
    }
    if (value.is_number_integer()) {
        return "an integer";
    }
    if (value.is_number()) {
        return "a number";
    }
    return "nothing (null)";
}

std::string join(const std::string& path, const std::string& key)
{
    return path.empty() ? key : path + "." + key;
}

std::string indexed(const std::string& path, size_t index)
{
    return path + "[" + std::to_string(index) + "]";
}

struct Scheme {
    quant::WeightPrecision weights;
    ActivationFormat activations = ActivationFormat::Bf16;
};

// Builds the recipe: a default scheme for every projection, rules for named modules, BF16 rules for the ignored
// ones (after the others: later rules win), the KV cache.
class Importer {
public:
    Importer(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(const std::string& place, const std::string& detail) const
    {
        throw InputError(file_, place, detail);
    }

    const Json* find(const Json& object, const std::string& key) const
    {
        if (!object.is_object()) {
            return nullptr;
        }
        const auto it = object.find(key);
        return it == object.end() ? nullptr : &*it;
    }
    const Json& object(const Json& value, const std::string& place) const
    {
        if (!value.is_object()) {
            fail(place, "expected a mapping, got " + kind(value));
        }
        return value;
    }
    std::string string(const Json& value, const std::string& place) const
    {
        if (!value.is_string()) {
            fail(place, "expected a string, got " + kind(value));
        }
        return value.get<std::string>();
    }
    long long integer(const Json& value, const std::string& place) const
    {
        if (!value.is_number_integer()) {
            fail(place, "expected an integer, got " + kind(value));
        }
        return value.get<long long>();
    }
    std::vector<std::string> names(const Json& value, const std::string& place) const
    {
        if (value.is_null()) {
            return {};
        }
        if (!value.is_array()) {
            fail(place, "expected a list of module names, got " + kind(value));
        }
        std::vector<std::string> out;
        for (size_t i = 0; i < value.size(); ++i) {
            out.push_back(string(value[i], indexed(place, i)));
        }
        return out;
    }

    // A module name or pattern as a recipe `match`: regular expressions and fnmatch classes are not patterns the
    // recipe has.
    std::string match(const std::string& name, const std::string& place) const
    {
        if (name.rfind("re:", 0) == 0) {
            fail(place, "'" + name + "' is a regular expression; the recipe matches module names with * and {a,b} "
                        "only (write the modules by name)");
        }
        if (name.empty() || name.find_first_of("?[]{},") != std::string::npos) {
            fail(place, "'" + name + "' is not a module name or a *-pattern the recipe can match");
        }
        return name;
    }

    void setDefault(const Scheme& scheme, const std::string& place)
    {
        if (hasDefault_) {
            fail(place, "a second scheme for every linear module (the first is at " + defaultPlace_ + ")");
        }
        hasDefault_ = true;
        defaultPlace_ = place;
        recipe.weights = scheme.weights;
        recipe.activations = quant::ActivationPrecision {scheme.activations};
    }
    bool hasDefault() const { return hasDefault_; }

    void addScheme(const std::string& module, const Scheme& scheme)
    {
        quant::RecipeRule rule;
        rule.match = module;
        rule.weights = scheme.weights;
        rule.activations = quant::ActivationPrecision {scheme.activations};
        schemeRules_.push_back(rule);
    }
    // A module left in BF16 while a default quantizes the others. The embedding is BF16 anyway (and has no
    // input activations to set).
    void addIgnored(const std::string& module)
    {
        if (module == quant::kEmbedName || module == "embed_tokens") {
            return;
        }
        quant::RecipeRule rule;
        rule.match = module;
        rule.weights = quant::WeightPrecision {WeightFormat::Bf16, Granularity::None};
        rule.activations = quant::ActivationPrecision {ActivationFormat::Bf16};
        ignoreRules_.push_back(rule);
    }
    void setKv(const quant::KvPrecision& kv) { recipe.kvCache = kv; }
    // A note about something read the same way in many places, given once (at its first place).
    void noteOnce(const std::string& key, const std::string& text)
    {
        if (noted_.insert(key).second) {
            notes.push_back(text);
        }
    }
    void addKvSkip(std::int64_t layer)
    {
        quant::RecipeRule rule;
        rule.match = "model.layers." + std::to_string(layer) + ".self_attn";
        rule.kvCache = quant::KvPrecision {KvFormat::Bf16, KvScales::None, quant::KvCalibration::None};
        kvRules_.push_back(rule);
    }

    quant::Recipe finish(const std::string& name)
    {
        recipe.name = name;
        for (const auto* rules : {&schemeRules_, &ignoreRules_, &kvRules_}) {
            recipe.rules.insert(recipe.rules.end(), rules->begin(), rules->end());
        }
        if (recipe.rules.size() > quant::Recipe::kMaxRules) {
            fail("", "the recipe would need " + std::to_string(recipe.rules.size()) + " rules, over the limit of "
                    + std::to_string(quant::Recipe::kMaxRules));
        }
        return recipe;
    }

    quant::Recipe recipe;
    std::vector<std::string> notes;

private:
    std::string file_;
    bool hasDefault_ = false;
    std::string defaultPlace_;
    std::vector<quant::RecipeRule> schemeRules_;
    std::vector<quant::RecipeRule> ignoreRules_;
    std::vector<quant::RecipeRule> kvRules_;
    std::set<std::string> noted_;
};

// ---- compressed-tensors -------------------------------------------------------------------------------------

// compressed-tensors' microscaling weights, as its presets write them and vLLM's compressed_tensors.py recognizes them
// (vllm-project/compressed-tensors quantization/quant_scheme.py NVFP4, NVFP4A16, MXFP4, MXFP4A16, MXFP8, MXFP8A16):
// float 4 bits in tensor groups of 16 (NVFP4: E4M3 scales under a per-tensor global scale), float 4 or 8 bits in
// groups of 32 with E8M0 scales stored as uint8 (MXFP4, MXFP8). nullopt for other arguments (the caller's error
// lists what the recipe has).
std::optional<quant::WeightPrecision> ctMicroscalingWeights(const Importer& in, const Json& args,
    const std::string& place, const std::string& type, long long bits, const std::string& strategy)
{
    if (type != "float" || (strategy != "tensor_group" && strategy != "group")) {
        return std::nullopt;
    }
    const Json* group = in.find(args, "group_size");
    const long long size = group && !group->is_null() ? in.integer(*group, join(place, "group_size")) : 0;
    if (strategy == "tensor_group") {
        if (bits != 4 || size != 16) {
            return std::nullopt;
        }
        return quant::WeightPrecision {WeightFormat::Nvfp4, Granularity::Group16};
    }
    if (size != 32 || (bits != 4 && bits != 8)) {
        return std::nullopt;
    }
    if (const Json* scale = in.find(args, "scale_dtype"); scale && !scale->is_null()) {
        const std::string dtype = in.string(*scale, join(place, "scale_dtype"));
        if (dtype != "torch.uint8" && dtype != "uint8") {
            in.fail(join(place, "scale_dtype"),
                "'" + dtype + "': float groups of 32 are the recipe's MX formats, whose scales are E8M0 (torch.uint8)");
        }
    }
    return quant::WeightPrecision {bits == 8 ? WeightFormat::Mxfp8 : WeightFormat::Mxfp4, Granularity::Group32};
}

// The input activations of microscaling weights, when there are any (none: the weight-only presets NVFP4A16,
// MXFP4A16, MXFP8A16): those of the weights' own format, as the presets write them (NVFP4: tensor groups of 16 with
// dynamic "local", the block scales per token and the global scale calibrated; MXFP4, MXFP8: dynamic groups of 32),
// read as the recipe's dynamic block scales per token.
ActivationFormat ctMicroscalingActivations(
    Importer& in, const Json& args, const std::string& place, const quant::WeightPrecision& weights)
{
    in.object(args, place);
    const bool nvfp4 = weights.format == WeightFormat::Nvfp4;
    const long long bits = weights.format == WeightFormat::Mxfp8 ? 8 : 4;
    const std::string strategy = nvfp4 ? "tensor_group" : "group";
    const long long groupSize = nvfp4 ? 16 : 32;
    const std::string name = quant::toString(weights.format);
    const Json* type = in.find(args, "type");
    const Json* numBits = in.find(args, "num_bits");
    const Json* givenStrategy = in.find(args, "strategy");
    const Json* group = in.find(args, "group_size");
    if (!type || !numBits || !givenStrategy || !group || in.string(*type, join(place, "type")) != "float"
        || in.integer(*numBits, join(place, "num_bits")) != bits
        || in.string(*givenStrategy, join(place, "strategy")) != strategy
        || in.integer(*group, join(place, "group_size")) != groupSize) {
        in.fail(place,
            "the recipe gives " + name + " weights bf16 activations or " + name + " ones (num_bits "
                + std::to_string(bits) + ", type float, strategy " + strategy + ", group_size "
                + std::to_string(groupSize) + ")");
    }
    const Json* dynamic = in.find(args, "dynamic");
    if (nvfp4) {
        const bool local = dynamic && dynamic->is_string() && dynamic->get<std::string>() == "local";
        if (!local && !(dynamic && dynamic->is_boolean() && *dynamic)) {
            in.fail(join(place, "dynamic"),
                "static NVFP4 block scales; the recipe's are computed per token (dynamic: local)");
        }
        in.noteOnce("nvfp4-activations",
            place
                + ": NVFP4 activations read as the recipe's, whose per-tensor global scale the engine takes from "
                  "each token's amax; vLLM takes the checkpoint's, calibrated once");
        return ActivationFormat::Nvfp4;
    }
    if (!dynamic || !dynamic->is_boolean() || !*dynamic) {
        in.fail(join(place, "dynamic"),
            "static activation scales; the recipe's " + name + " activations have dynamic block scales per token");
    }
    in.noteOnce("mx-activations",
        place + ": " + name
            + " activations read as the recipe's; vLLM's kernel decides by GPU and backend whether it "
              "quantizes them (the export warns which)");
    return weights.format == WeightFormat::Mxfp8 ? ActivationFormat::Mxfp8 : ActivationFormat::Mxfp4;
}

quant::WeightPrecision ctWeights(const Importer& in, const Json& args, const std::string& place)
{
    in.object(args, place);
    const Json* type = in.find(args, "type");
    const Json* bits = in.find(args, "num_bits");
    if (!type || !bits) {
        in.fail(place, "expected num_bits and type");
    }
    const std::string t = in.string(*type, join(place, "type"));
    const long long n = in.integer(*bits, join(place, "num_bits"));
    if (const Json* symmetric = in.find(args, "symmetric"); symmetric && symmetric->is_boolean() && !*symmetric) {
        in.fail(join(place, "symmetric"), "asymmetric weights (zero points); the recipe's scales are symmetric");
    }
    if (const Json* dynamic = in.find(args, "dynamic"); dynamic && dynamic->is_boolean() && *dynamic) {
        in.fail(join(place, "dynamic"), "dynamic weight scales; the recipe's weight scales are computed once");
    }
    const Json* strategyValue = in.find(args, "strategy");
    const std::string strategy = strategyValue ? in.string(*strategyValue, join(place, "strategy")) : "tensor";
    if (t == "float" && n == 8) {
        if (strategy == "tensor") {
            return {WeightFormat::Fp8E4m3, Granularity::Tensor};
        }
        if (strategy == "channel") {
            return {WeightFormat::Fp8E4m3, Granularity::Channel};
        }
        if (strategy == "block") {
            const Json* block = in.find(args, "block_structure");
            if (!block || *block != Json({128, 128})) {
                in.fail(join(place, "block_structure"), "the recipe's FP8 blocks are 128x128");
            }
            return {WeightFormat::Fp8E4m3, Granularity::Block128};
        }
    } else if (t == "int" && n == 8 && strategy == "channel") {
        return {WeightFormat::Int8, Granularity::Channel};
    } else if (t == "int" && n == 4 && strategy == "group") {
        const Json* group = in.find(args, "group_size");
        if (!group || in.integer(*group, join(place, "group_size")) != 128) {
            in.fail(join(place, "group_size"), "the recipe's INT4 groups are 128 elements");
        }
        return {WeightFormat::Int4, Granularity::Group128};
    }
    if (const std::optional<quant::WeightPrecision> microscaling
        = ctMicroscalingWeights(in, args, place, t, n, strategy)) {
        return *microscaling;
    }
    in.fail(place,
        "num_bits " + std::to_string(n) + ", type " + t + ", strategy " + strategy
            + ": the recipe has fp8_e4m3 weights (tensor, channel or 128x128 block), int8 (channel), int4 (group "
              "128), nvfp4 (float 4 bits, tensor_group of 16), mxfp4 and mxfp8 (float 4 and 8 bits, groups of 32)");
}

ActivationFormat ctActivations(
    Importer& in, const Json* args, const std::string& place, const quant::WeightPrecision& weights)
{
    if (!args || args->is_null()) {
        return ActivationFormat::Bf16;
    }
    if (quant::isMicroscaling(weights.format)) {
        return ctMicroscalingActivations(in, *args, place, weights);
    }
    in.object(*args, place);
    const Json* type = in.find(*args, "type");
    const Json* bits = in.find(*args, "num_bits");
    const Json* dynamic = in.find(*args, "dynamic");
    const Json* strategy = in.find(*args, "strategy");
    if (!type || !bits || in.string(*type, join(place, "type")) != "float"
        || in.integer(*bits, join(place, "num_bits")) != 8) {
        in.fail(place, "the recipe's activations are bf16 or fp8_e4m3 (num_bits 8, type float)");
    }
    if (!dynamic || !dynamic->is_boolean() || !*dynamic) {
        in.fail(join(place, "dynamic"), "static activation scales; the recipe's fp8 activations are dynamic, one "
                                        "scale per token");
    }
    const std::string s = strategy ? in.string(*strategy, join(place, "strategy")) : "";
    const Json* group = in.find(*args, "group_size");
    const bool blockGroups = s == "group" && group && group->is_number_integer() && *group == 128
        && weights.granularity == Granularity::Block128;
    if (s != "token" && !blockGroups) {
        in.fail(join(place, "strategy"), "dynamic activations per token (or in groups of 128 beside 128x128-block "
                                         "weights) are what the recipe has, not '" + s + "'");
    }
    return ActivationFormat::Fp8E4m3;
}

quant::KvPrecision fp8Kv(KvScales scales)
{
    return {KvFormat::Fp8E4m3, scales, quant::KvCalibration::Probe};
}

void importCompressedTensors(Importer& in, const Json& config, const std::string& base)
{
    const Json* groups = in.find(config, "config_groups");
    std::vector<std::string> ignore;
    if (const Json* list = in.find(config, "ignore")) {
        ignore = in.names(*list, join(base, "ignore"));
    }
    bool lmHeadIgnored = false;
    for (const std::string& name : ignore) {
        lmHeadIgnored = lmHeadIgnored || name == quant::kLmHeadName;
    }
    std::optional<Scheme> linear;
    if (groups && !groups->is_null()) {
        const std::string groupsPlace = join(base, "config_groups");
        in.object(*groups, groupsPlace);
        for (const auto& [key, group] : groups->items()) {
            const std::string place = join(groupsPlace, key);
            in.object(group, place);
            const Json* weights = in.find(group, "weights");
            if (!weights || weights->is_null()) {
                in.fail(place, "a group without weights (activation-only quantization) has no recipe form");
            }
            Scheme scheme;
            scheme.weights = ctWeights(in, *weights, join(place, "weights"));
            scheme.activations
                = ctActivations(in, in.find(group, "input_activations"), join(place, "input_activations"), scheme.weights);
            if (const Json* output = in.find(group, "output_activations"); output && !output->is_null()) {
                in.fail(join(place, "output_activations"), "output activation quantization has no recipe form");
            }
            const Json* targets = in.find(group, "targets");
            if (!targets) {
                in.fail(place, "expected targets");
            }
            const std::vector<std::string> names = in.names(*targets, join(place, "targets"));
            for (size_t i = 0; i < names.size(); ++i) {
                const std::string where = indexed(join(place, "targets"), i);
                if (names[i] == "Linear") {
                    in.setDefault(scheme, where);
                    linear = scheme;
                } else {
                    in.addScheme(in.match(names[i], where), scheme);
                }
            }
        }
    }
    if (linear) {
        // "Linear" covers lm_head too unless it is ignored; the recipe's default leaves it out.
        if (!lmHeadIgnored) {
            in.addScheme(quant::kLmHeadName, *linear);
        }
        for (size_t i = 0; i < ignore.size(); ++i) {
            if (ignore[i] != quant::kLmHeadName) {
                in.addIgnored(in.match(ignore[i], indexed(join(base, "ignore"), i)));
            }
        }
    }
    if (const Json* kv = in.find(config, "kv_cache_scheme"); kv && !kv->is_null()) {
        const std::string place = join(base, "kv_cache_scheme");
        in.object(*kv, place);
        const Json* type = in.find(*kv, "type");
        const Json* bits = in.find(*kv, "num_bits");
        if (!type || !bits || in.string(*type, join(place, "type")) != "float"
            || in.integer(*bits, join(place, "num_bits")) != 8) {
            in.fail(place, "the recipe's KV cache is bf16 or fp8_e4m3 (num_bits 8, type float)");
        }
        if (const Json* dynamic = in.find(*kv, "dynamic"); dynamic && dynamic->is_boolean() && *dynamic) {
            in.fail(join(place, "dynamic"), "dynamic KV scales; the recipe's KV scales are measured once");
        }
        const Json* strategy = in.find(*kv, "strategy");
        const std::string s = strategy ? in.string(*strategy, join(place, "strategy")) : "tensor";
        if (s == "tensor") {
            in.setKv(fp8Kv(KvScales::PerTensor));
        } else if (s == "attn_head") {
            in.setKv(fp8Kv(KvScales::PerHead));
        } else {
            in.fail(join(place, "strategy"), "the recipe's KV scales are per tensor or per attention head, not '" + s + "'");
        }
    }
}

// ---- ModelOpt ----------------------------------------------------------------------------------------------

std::string upperCase(std::string text)
{
    for (char& c : text) {
        c = c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
    }
    return text;
}

// The KV cache of ModelOpt's config.json form, read as vLLM reads it (modelopt.py ModelOptQuantConfigBase
// .from_config, the compressed-tensors-style branch): kv_cache_scheme, a mapping, is FP8 when its type is float and
// num_bits 8 (as ModelOpt's convert_hf_quant_config_format writes an FP8 KV cache); anything else there, and
// kv_cache_quant_algo (which vLLM reads only from hf_quant_config.json), leaves the KV cache in BF16.
void importModelOptConfigKv(Importer& in, const Json& config, const std::string& base)
{
    const Json* scheme = in.find(config, "kv_cache_scheme");
    const Json* type = scheme ? in.find(*scheme, "type") : nullptr;
    const Json* bits = scheme ? in.find(*scheme, "num_bits") : nullptr;
    if (type && bits && *type == "float" && bits->is_number_integer() && *bits == 8) {
        in.setKv(fp8Kv(KvScales::PerTensor));
        in.notes.push_back(join(base, "kv_cache_scheme") + ": read as vLLM reads ModelOpt's config.json: an FP8 KV "
                                                           "cache with per-tensor scales from the checkpoint");
        return;
    }
    if (scheme && !scheme->is_null()) {
        in.notes.push_back(join(base, "kv_cache_scheme") + ": not an 8-bit float scheme, the only one vLLM reads "
                                                           "from ModelOpt's config.json: read as a bf16 KV cache");
    }
    if (const Json* algo = in.find(config, "kv_cache_quant_algo"); algo && !algo->is_null()) {
        in.notes.push_back(join(base, "kv_cache_quant_algo") + ": vLLM reads the KV cache of ModelOpt's config.json "
                                                               "from kv_cache_scheme, not from this key (which only "
                                                               "hf_quant_config.json has): read as a bf16 KV cache");
    }
}

// ModelOpt's microscaling quant_algos as vLLM's ModelOpt loader runs them (vllm/model_executor/layers/quantization/
// modelopt.py 00155cdecca722d98e34234c3d172725b7720b7d): NVFP4 is W4A4 (the activations scaled with the checkpoint's
// calibrated input_scale), W4A16_NVFP4 weight-only, MXFP8 weights and activations (ModelOpt's MXFP8 quantizes both:
// NVIDIA/Model-Optimizer modelopt_recipes/configs/ptq/presets/model/mxfp8.yaml); their group_size, where written
// (quant_utils.py process_layer_quant_config writes the block size), 16 or 32. nullopt for another quant_algo.
std::optional<Scheme> modelOptMicroscalingScheme(
    Importer& in, const Json& entry, const std::string& place, const std::string& algo, const Json* defaultGroupSize)
{
    Scheme scheme;
    long long groupSize = 0;
    if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
        scheme.weights = {WeightFormat::Nvfp4, Granularity::Group16};
        scheme.activations = algo == "NVFP4" ? ActivationFormat::Nvfp4 : ActivationFormat::Bf16;
        groupSize = 16;
    } else if (algo == "MXFP8") {
        scheme.weights = {WeightFormat::Mxfp8, Granularity::Group32};
        scheme.activations = ActivationFormat::Mxfp8;
        groupSize = 32;
    } else {
        return std::nullopt;
    }
    const Json* group = in.find(entry, "group_size");
    group = group ? group : defaultGroupSize;
    if (group && !group->is_null() && in.integer(*group, join(place, "group_size")) != groupSize) {
        in.fail(join(place, "group_size"),
            "the recipe's " + algo + " groups are " + std::to_string(groupSize) + " elements");
    }
    if (algo == "NVFP4") {
        in.noteOnce("nvfp4-activations",
            join(place, "quant_algo")
                + ": NVFP4 read as nvfp4 weights and activations; the engine takes the "
                  "activations' per-tensor global scale from each token's amax, vLLM the "
                  "checkpoint's calibrated input_scale");
    }
    return scheme;
}

Scheme modelOptScheme(Importer& in, const Json& entry, const std::string& place, const Json* defaultGroupSize)
{
    const Json* algoValue = in.find(entry, "quant_algo");
    if (!algoValue) {
        in.fail(place, "expected quant_algo");
    }
    // vLLM upper-cases quant_algo before matching it (modelopt.py from_config and
    // ModelOptMixedPrecisionConfig._resolve_quant_algo), and ModelOpt itself writes some in lower case: a per-layer
    // FP8_PB_WO is "fp8_pb_wo" (modelopt/torch/export/model_config.py QUANTIZATION_FP8_PB_WO, passed through by
    // quant_utils.py process_layer_quant_config).
    const std::string algo = upperCase(in.string(*algoValue, join(place, "quant_algo")));
    if (algo == "FP8_PER_CHANNEL_PER_TOKEN") {
        return {{WeightFormat::Fp8E4m3, Granularity::Channel}, ActivationFormat::Fp8E4m3};
    }
    if (algo == "FP8_PB_WO") {
        in.noteOnce("FP8_PB_WO", join(place, "quant_algo") + ": FP8_PB_WO read as 128x128-block FP8 weights with "
                                                             "dynamic FP8 activations, as vLLM runs it");
        return {{WeightFormat::Fp8E4m3, Granularity::Block128}, ActivationFormat::Fp8E4m3};
    }
    if (algo == "W4A16_AWQ") {
        const Json* group = in.find(entry, "group_size");
        group = group ? group : defaultGroupSize;
        if (group && in.integer(*group, join(place, "group_size")) != 128) {
            in.fail(join(place, "group_size"), "the recipe's INT4 groups are 128 elements");
        }
        for (const char* key : {"has_zero_point", "pre_quant_scale"}) {
            if (const Json* flag = in.find(entry, key); flag && flag->is_boolean() && *flag) {
                in.fail(join(place, key), std::string(key) + " true: the recipe's INT4 is symmetric, without an AWQ "
                                                            "pre-quantization scale");
            }
        }
        return {{WeightFormat::Int4, Granularity::Group128}, ActivationFormat::Bf16};
    }
    if (algo == "FP8") {
        in.fail(join(place, "quant_algo"), "FP8 has static per-tensor activation scales; the recipe's fp8 activations "
                                           "are dynamic, one scale per token");
    }
    if (const std::optional<Scheme> microscaling
        = modelOptMicroscalingScheme(in, entry, place, algo, defaultGroupSize)) {
        return *microscaling;
    }
    in.fail(join(place, "quant_algo"),
        "'" + algo
            + "' has no recipe form (FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, "
              "W4A16_AWQ, NVFP4, W4A16_NVFP4 and MXFP8 have)");
}

void importModelOpt(Importer& in, const Json& quantization, const std::string& base, const std::string& excludeKey)
{
    const Json* algoValue = in.find(quantization, "quant_algo");
    std::vector<std::string> exclude;
    if (const Json* list = in.find(quantization, excludeKey)) {
        exclude = in.names(*list, join(base, excludeKey));
    }
    bool lmHeadExcluded = false;
    for (const std::string& name : exclude) {
        lmHeadExcluded = lmHeadExcluded || name == quant::kLmHeadName || name == "*lm_head*" || name == "lm_head*";
    }
    const Json* groupSize = in.find(quantization, "group_size");
    if (algoValue && !algoValue->is_null()) {
        const std::string algo = upperCase(in.string(*algoValue, join(base, "quant_algo")));
        if (algo == "MIXED_PRECISION") {
            const Json* layers = in.find(quantization, "quantized_layers");
            const std::string place = join(base, "quantized_layers");
            if (!layers) {
                in.fail(base, "MIXED_PRECISION without quantized_layers");
            }
            in.object(*layers, place);
            for (const auto& [name, entry] : layers->items()) {
                const std::string where = join(place, name);
                in.object(entry, where);
                in.addScheme(in.match(name, where), modelOptScheme(in, entry, where, nullptr));
            }
        } else {
            const Scheme scheme = modelOptScheme(in, quantization, base, groupSize);
            in.setDefault(scheme, join(base, "quant_algo"));
            if (!lmHeadExcluded) {
                in.addScheme(quant::kLmHeadName, scheme);
            }
            for (size_t i = 0; i < exclude.size(); ++i) {
                if (exclude[i] != quant::kLmHeadName) {
                    in.addIgnored(in.match(exclude[i], indexed(join(base, excludeKey), i)));
                }
            }
        }
    }
    if (excludeKey == "ignore") {
        importModelOptConfigKv(in, quantization, base);
    } else if (const Json* kv = in.find(quantization, "kv_cache_quant_algo"); kv && !kv->is_null()) {
        const std::string algo = in.string(*kv, join(base, "kv_cache_quant_algo"));
        if (upperCase(algo) != "FP8") {
            in.fail(join(base, "kv_cache_quant_algo"), "'" + algo + "': the recipe's KV cache is bf16 or FP8");
        }
        in.setKv(fp8Kv(KvScales::PerTensor));
    }
}

// ---- vLLM and verl -----------------------------------------------------------------------------------------

// Engine-argument keys with dashes (vllm serve --config) as the underscores of EngineArgs.
Json normalizedKeys(const Json& args)
{
    Json out = Json::object();
    for (const auto& [key, value] : args.items()) {
        std::string name = key;
        for (char& c : name) {
            c = c == '-' ? '_' : c;
        }
        out[name] = value;
    }
    return out;
}

void importKvArgs(Importer& in, const Json& args, const std::string& base)
{
    const Json* dtype = in.find(args, "kv_cache_dtype");
    if (!dtype || dtype->is_null()) {
        return;
    }
    const std::string value = in.string(*dtype, join(base, "kv_cache_dtype"));
    if (value == "auto" || value == "bfloat16") {
        return;
    }
    // vLLM's dynamic formats (vllm/config/cache.py CacheDType) are recipe formats of the same name: a scale per
    // token and KV head, computed at each cache write.
    const std::optional<KvFormat> dynamic = quant::parseKvFormat(value);
    if (dynamic && quant::isPerTokenHead(*dynamic)) {
        in.setKv({*dynamic, KvScales::None, quant::KvCalibration::None});
    } else if (value != "fp8" && value != "fp8_e4m3") {
        in.fail(join(base, "kv_cache_dtype"),
            "'" + value
                + "': the recipe's KV cache is bf16 (auto), fp8_e4m3, fp8_per_token_head or int8_per_token_head");
    } else {
        in.setKv(fp8Kv(KvScales::PerTensor));
        in.notes.push_back(join(base, "kv_cache_dtype")
            + ": read as per-tensor FP8 scales measured once (the engine "
              "takes them from the checkpoint, else 1.0)");
    }
    if (const Json* skip = in.find(args, "kv_cache_dtype_skip_layers"); skip && !skip->is_null()) {
        const std::string place = join(base, "kv_cache_dtype_skip_layers");
        if (!skip->is_array()) {
            in.fail(place, "expected a list of layer indices, got " + kind(*skip));
        }
        for (size_t i = 0; i < skip->size(); ++i) {
            const Json& item = (*skip)[i];
            const std::string text = item.is_number_integer() ? std::to_string(item.get<long long>())
                                                              : in.string(item, indexed(place, i));
            if (!isDigits(text) || text.size() > 6) {
                in.fail(indexed(place, i), "'" + text + "' is not a layer index (attention types such as "
                                                        "sliding_window depend on the model; name the layers)");
            }
            in.addKvSkip(std::stoll(text));
        }
    }
}

// vLLM's online microscaling shorthands (vllm/config/quantization.py _ONLINE_SHORTHANDS and
// docs/features/quantization/online.md, 00b64d17c045a946e3a047d189beac1437161919): mxfp8 quantizes weights and
// activations to MXFP8; mxfp4 quantizes the weights to MXFP4 and asks its linear backend for dynamic MXFP4
// activations (vllm/model_executor/layers/quantization/online/mxfp4.py Mxfp4OnlineLinearMethod
// activation_quant_key), which some backends keep in BF16: read as MXFP4 with a note.
Scheme vllmOnlineMicroscaling(Importer& in, const std::string& method, const std::string& place)
{
    if (method == "mxfp8") {
        return {{WeightFormat::Mxfp8, Granularity::Group32}, ActivationFormat::Mxfp8};
    }
    in.notes.push_back(place
        + ": mxfp4 read as MXFP4 weights and activations; vLLM's linear backend decides the "
          "activations (some keep them in BF16: docs/features/quantization/online.md)");
    return {{WeightFormat::Mxfp4, Granularity::Group32}, ActivationFormat::Mxfp4};
}

void importVllm(Importer& in, const Json& document)
{
    const Json* engine = in.find(document, "engine_args");
    const std::string base = engine ? "engine_args" : "";
    const Json args = normalizedKeys(engine ? in.object(*engine, "engine_args") : document);
    const Json* quantization = in.find(args, "quantization");
    std::vector<std::string> ignore;
    std::string ignorePlace;
    // The export's checkpoint form names no quantization in engine_args: vLLM takes the method from the FP8
    // checkpoint's quantization_config (quant_method fp8), which the document holds.
    const Json* checkpointConfig = in.find(document, "quantization_config");
    const Json* checkpointMethod = checkpointConfig ? in.find(*checkpointConfig, "quant_method") : nullptr;
    const bool fp8Checkpoint = engine && checkpointMethod && *checkpointMethod == "fp8";
    if ((quantization && !quantization->is_null()) || fp8Checkpoint) {
        const bool named = quantization && !quantization->is_null();
        const std::string method = named ? in.string(*quantization, join(base, "quantization")) : "fp8";
        const std::string methodPlace = named ? join(base, "quantization") : "quantization_config.quant_method";
        Scheme scheme;
        scheme.activations = ActivationFormat::Fp8E4m3;
        if (method == "fp8_per_tensor") {
            scheme.weights = {WeightFormat::Fp8E4m3, Granularity::Tensor};
        } else if (method == "fp8_per_block") {
            scheme.weights = {WeightFormat::Fp8E4m3, Granularity::Block128};
        } else if (method == "fp8_per_channel") {
            scheme.weights = {WeightFormat::Fp8E4m3, Granularity::Channel};
        } else if (method == "mxfp8" || method == "mxfp4") {
            scheme = vllmOnlineMicroscaling(in, method, methodPlace);
        } else if (method == "fp8") {
            scheme.weights = {WeightFormat::Fp8E4m3, Granularity::Tensor};
            // An FP8 checkpoint's quantization_config (mismatch's checkpoint form, or config.json's).
            if (const Json* checkpoint = in.find(document, "quantization_config"); checkpoint && !checkpoint->is_null()) {
                const std::string place = "quantization_config";
                in.object(*checkpoint, place);
                if (const Json* scheme_ = in.find(*checkpoint, "activation_scheme");
                    scheme_ && in.string(*scheme_, join(place, "activation_scheme")) != "dynamic") {
                    in.fail(join(place, "activation_scheme"), "static activation scales; the recipe's fp8 activations "
                                                              "are dynamic, one scale per token");
                }
                if (const Json* block = in.find(*checkpoint, "weight_block_size"); block && !block->is_null()) {
                    if (*block != Json({128, 128})) {
                        in.fail(join(place, "weight_block_size"), "the recipe's FP8 blocks are 128x128");
                    }
                    scheme.weights.granularity = Granularity::Block128;
                }
                if (const Json* list = in.find(*checkpoint, "ignored_layers")) {
                    ignorePlace = join(place, "ignored_layers");
                    ignore = in.names(*list, ignorePlace);
                }
            }
        } else {
            in.fail(join(base, "quantization"),
                "'" + method
                    + "' has no recipe form (fp8_per_tensor, fp8_per_block, "
                      "fp8_per_channel, fp8, mxfp8 and mxfp4 have; for a "
                      "quantized checkpoint import its config.json)");
        }
        in.setDefault(scheme, methodPlace);
        if (scheme.weights.granularity == Granularity::Tensor && method != "fp8") {
            in.notes.push_back(join(base, "quantization") + ": fp8_per_tensor's activations read as the recipe's "
                                                            "dynamic per-token FP8");
        }
    }
    if (const Json* config = in.find(args, "quantization_config"); config && !config->is_null()) {
        const std::string place = join(base, "quantization_config");
        in.object(*config, place);
        for (const auto& [key, value] : config->items()) {
            if (key == "ignore") {
                ignorePlace = join(place, "ignore");
                ignore = in.names(value, ignorePlace);
            } else if (key != "moe") {
                in.fail(join(place, key), "only ignore is read from the online quantization_config (the scheme comes "
                                          "from quantization)");
            }
        }
    }
    if (!ignore.empty() && !in.hasDefault()) {
        in.fail(ignorePlace, "layers to leave unquantized, but nothing is quantized");
    }
    for (size_t i = 0; i < ignore.size(); ++i) {
        if (ignore[i] != quant::kLmHeadName) {
            in.addIgnored(in.match(ignore[i], indexed(ignorePlace, i)));
        }
    }
    importKvArgs(in, args, base);
}

// The vllm export's checkpoint form of a microscaling recipe: engine arguments that name no quantization beside the
// compressed-tensors quantization_config of the checkpoint they serve (vLLM reads the method from the checkpoint and
// refuses another); the KV cache is the engine arguments'.
void importVllmCompressedCheckpoint(Importer& in, const Json& document, const Json& config, const std::string& base)
{
    importCompressedTensors(in, config, base);
    const Json args = normalizedKeys(in.object(*in.find(document, "engine_args"), "engine_args"));
    if (const Json* quantization = in.find(args, "quantization"); quantization && !quantization->is_null()) {
        in.fail("engine_args.quantization",
            "a quantization method beside a checkpoint's quantization_config (vLLM "
            "reads the method from the checkpoint and refuses another)");
    }
    importKvArgs(in, args, "engine_args");
}

// actor_rollout_ref.rollout of a verl config, nested or as dotted keys (+ and ++ prefixes of Hydra overrides
// dropped).
Json verlRollout(Importer& in, const Json& document)
{
    Json nested = Json::object();
    for (const auto& [key, value] : document.items()) {
        std::string name = key;
        while (!name.empty() && name.front() == '+') {
            name.erase(0, 1);
        }
        Json* at = &nested;
        size_t start = 0;
        while (true) {
            const size_t dot = name.find('.', start);
            const std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
            if (dot == std::string::npos) {
                if (at->contains(part) && (*at)[part].is_object() && value.is_object()) {
                    (*at)[part].update(value, true);
                } else {
                    (*at)[part] = value;
                }
                break;
            }
            if (!at->contains(part) || !(*at)[part].is_object()) {
                (*at)[part] = Json::object();
            }
            at = &(*at)[part];
            start = dot + 1;
        }
    }
    const Json* actor = in.find(nested, "actor_rollout_ref");
    const Json* rollout = actor ? in.find(*actor, "rollout") : nullptr;
    if (!rollout) {
        in.fail("actor_rollout_ref", "expected actor_rollout_ref.rollout");
    }
    return in.object(*rollout, "actor_rollout_ref.rollout");
}

void importVerl(Importer& in, const Json& document)
{
    const Json rollout = verlRollout(in, document);
    const std::string base = "actor_rollout_ref.rollout";
    std::string engine = "vllm";
    if (const Json* name = in.find(rollout, "name"); name && !name->is_null()) {
        engine = in.string(*name, join(base, "name"));
        if (engine != "vllm" && engine != "sglang") {
            in.fail(join(base, "name"), "'" + engine + "': the rollouts read are vllm and sglang");
        }
    }
    if (const Json* quantization = in.find(rollout, "quantization"); quantization && !quantization->is_null()) {
        const bool on = quantization->is_boolean() ? quantization->get<bool>()
                                                   : in.string(*quantization, join(base, "quantization")) == "fp8";
        if (!quantization->is_boolean() && !on) {
            in.fail(join(base, "quantization"), "'" + quantization->get<std::string>()
                    + "': verl's rollout quantization read is fp8 (128x128 blocks)");
        }
        if (on) {
            in.setDefault({{WeightFormat::Fp8E4m3, Granularity::Block128}, ActivationFormat::Fp8E4m3},
                join(base, "quantization"));
            if (engine == "sglang") {
                in.notes.push_back("the SGLang rollout's BF16 modules come from SGLANG_FP8_IGNORED_LAYERS in the "
                                   "workers' environment, not from this file: add them as bf16 rules");
            }
        }
    }
    if (const Json* kwargs = in.find(rollout, "engine_kwargs"); kwargs && !kwargs->is_null()) {
        if (const Json* args = in.find(in.object(*kwargs, join(base, "engine_kwargs")), engine); args && !args->is_null()) {
            const std::string place = join(join(base, "engine_kwargs"), engine);
            importKvArgs(in, normalizedKeys(in.object(*args, place)), place);
        }
    }
}

Json parseDocument(const std::string& text, const std::string& file)
{
    if (const std::size_t bad = firstInvalidUtf8(text); bad != std::string::npos) {
        throw InputError(file, mismatch::lineColumnOf(text.data(), text.data() + text.size(), bad),
            "not valid UTF-8 (YAML and JSON files are UTF-8)");
    }
    if (Json::accept(text)) {
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            throw InputError(file, mismatch::lineColumnOf(text.data(), text.data() + text.size(), deep), nestingTooDeepDetail());
        }
        try {
            return Json::parse(text);
        } catch (const nlohmann::json::exception& error) { // a number such as 1e400
            throw InputError(file, "", "malformed JSON: " + jsonErrorDetail(error));
        }
    }
    const YAML::Node root = loadYaml(text, file);
    if (const std::optional<YAML::Node> bad = firstNonUtf8Scalar(root)) {
        const YamlPosition where = yamlPosition(*bad);
        throw InputError(file, "line " + std::to_string(where.line) + ", column " + std::to_string(where.column),
            "a string that is not valid UTF-8");
    }
    return yamlToJson(root, file);
}

bool hasVerlKeys(const Json& document)
{
    for (const auto& [key, value] : document.items()) {
        std::string name = key;
        while (!name.empty() && name.front() == '+') {
            name.erase(0, 1);
        }
        if (name == "actor_rollout_ref" || name.rfind("actor_rollout_ref.", 0) == 0) {
            return true;
        }
    }
    return false;
}

} // namespace

ImportedRecipe importRecipeText(const std::string& text, const std::string& fileName, const std::string& name)
{
    const Json document = parseDocument(text, fileName);
    Importer in(fileName);
    if (!document.is_object()) {
        in.fail("", "expected a mapping (a config.json, hf_quant_config.json, vLLM engine arguments or a verl config), "
                    "got " + kind(document));
    }
    ImportedRecipe out;
    const Json* quantization = in.find(document, "quantization");
    const Json* config = in.find(document, "quantization_config");
    const Json* method = nullptr;
    std::string base;
    const Json* described = nullptr; // the object holding quant_method
    if (config && config->is_object()) {
        method = in.find(*config, "quant_method");
        described = config;
        base = "quantization_config";
    } else if (in.find(document, "quant_method")) {
        method = in.find(document, "quant_method");
        described = &document;
    }
    const std::string methodName = method && method->is_string() ? method->get<std::string>() : "";
    if (hasVerlKeys(document)) {
        out.source = "verl";
        importVerl(in, document);
    } else if (quantization && quantization->is_object() && in.find(*quantization, "quant_algo")) {
        out.source = "modelopt";
        importModelOpt(in, *quantization, "quantization", "exclude_modules");
    } else if (methodName == "compressed-tensors" && in.find(document, "engine_args")) {
        out.source = "vllm";
        importVllmCompressedCheckpoint(in, document, *described, base);
    } else if (methodName == "compressed-tensors") {
        out.source = "compressed-tensors";
        importCompressedTensors(in, *described, base);
    } else if (methodName == "modelopt") {
        out.source = "modelopt";
        importModelOpt(in, *described, base, "ignore");
    } else if (methodName == "fp8" || in.find(document, "engine_args") || in.find(document, "quantization")
        || in.find(document, "kv_cache_dtype") || in.find(document, "kv-cache-dtype") || (config && !method)) {
        if (methodName == "fp8" && !in.find(document, "engine_args")) {
            // config.json of an FP8 checkpoint: vLLM reads quant_method fp8 from it.
            Json engine = {{"engine_args", {{"quantization", "fp8"}}}, {"quantization_config", *described}};
            out.source = "vllm";
            importVllm(in, engine);
        } else {
            out.source = "vllm";
            importVllm(in, document);
        }
    } else if (method) {
        in.fail(join(base, "quant_method"), "'" + methodName + "' is not read (compressed-tensors, modelopt and fp8 are)");
    } else {
        in.fail("", "not a quantization description: expected a config.json with quantization_config "
                    "(compressed-tensors, modelopt, fp8), an hf_quant_config.json, vLLM engine arguments or a verl "
                    "config with actor_rollout_ref.rollout");
    }
    std::string recipeName = name;
    if (recipeName.empty()) {
        recipeName = std::filesystem::path(fileName).stem().string();
    }
    quant::Recipe recipe = in.finish(recipeName);
    // Written and read back: the result is a recipe the parser accepts, equal in meaning.
    const std::string yaml = quant::recipeToYaml(recipe);
    out.recipe = quant::parseRecipe(yaml, fileName + " (imported recipe).yaml");
    out.recipe.sourceFile = fileName;
    out.notes = in.notes;
    return out;
}

ImportedRecipe importRecipe(const std::string& path, const std::string& name)
{
    return importRecipeText(readInputFile(path, limits::kConfigFile, "quantization description"), path, name);
}

} // namespace mismatch::io

#include "core/quant/recipe_plan.h"

#include <algorithm>
#include <stdexcept>

namespace mismatch::quant {

const std::vector<std::string>& projectionSuffixes()
{
    static const std::vector<std::string> suffixes = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    return suffixes;
}

const std::vector<std::string>& projectionShortNames()
{
    static const std::vector<std::string> names = {"q", "k", "v", "o", "gate", "up", "down"};
    return names;
}

std::string layerModuleName(std::int64_t layer, const std::string& suffix)
{
    return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::string attentionName(std::int64_t layer)
{
    return "model.layers." + std::to_string(layer) + ".self_attn";
}

namespace {

constexpr std::int64_t kBf16Bytes = 2;
constexpr std::int64_t kTile = 128; // block128 and group128

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    return (a + b - 1) / b;
}

} // namespace

WeightMemory weightMemory(std::int64_t rows, std::int64_t columns, const WeightPrecision& precision)
{
    WeightMemory memory;
    memory.rows = rows;
    memory.columns = columns;
    const std::int64_t elements = rows * columns;
    switch (precision.format) {
    case WeightFormat::Bf16:
    case WeightFormat::Fp16:
        memory.valueBytes = 2 * elements;
        break;
    case WeightFormat::Fp8E4m3:
    case WeightFormat::Fp8E5m2:
    case WeightFormat::Int8:
    case WeightFormat::Mxfp8:
        memory.valueBytes = elements;
        break;
    case WeightFormat::Int4:
    case WeightFormat::Mxfp4:
    case WeightFormat::Nvfp4:
        // Two values per byte, each row padded to whole bytes.
        memory.valueBytes = rows * ceilDiv(columns, 2);
        break;
    }
    std::int64_t scales = 0;
    switch (precision.granularity) {
    case Granularity::None:
        break;
    case Granularity::Tensor:
        scales = 1;
        break;
    case Granularity::Channel:
        scales = rows;
        break;
    case Granularity::Block128:
        scales = ceilDiv(rows, kTile) * ceilDiv(columns, kTile);
        break;
    case Granularity::Group128:
        scales = rows * ceilDiv(columns, kTile);
        break;
    case Granularity::Group32:
        scales = rows * ceilDiv(columns, 32);
        break;
    case Granularity::Group16:
        scales = rows * ceilDiv(columns, 16);
        break;
    }
    // Float32 scales, or the microscaling formats' one-byte block scales plus nvfp4's float32 tensor scale.
    memory.scaleBytes = scales * static_cast<std::int64_t>(scaleBytes(precision.format))
        + static_cast<std::int64_t>(tensorScaleBytes(precision.format));
    memory.bf16Bytes = kBf16Bytes * elements;
    return memory;
}

double RecipePlan::weightRatio() const
{
    return bf16WeightBytes == 0 ? 0.0 : static_cast<double>(weightBytes) / static_cast<double>(bf16WeightBytes);
}

double RecipePlan::kvBytesRatio() const
{
    return bf16KvBytesPerToken == 0 ? 0.0
                                    : static_cast<double>(kvBytesPerToken) / static_cast<double>(bf16KvBytesPerToken);
}

double RecipePlan::kvCapacityRatio() const
{
    return kvBytesPerToken == 0 ? 0.0 : static_cast<double>(bf16KvBytesPerToken) / static_cast<double>(kvBytesPerToken);
}

namespace {

enum class TargetKind { Projection, Embedding, OutputProjection, Attention };

struct Target {
    std::string name;
    std::string alias; // a second accepted spelling, matched as well
    TargetKind kind = TargetKind::Projection;
    std::int64_t layer = -1;
};

std::vector<Target> targetsOf(const model::ModelConfig& config)
{
    std::vector<Target> targets;
    targets.push_back({kEmbedName, "embed_tokens", TargetKind::Embedding, -1});
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        for (const std::string& suffix : projectionSuffixes()) {
            targets.push_back({layerModuleName(layer, suffix), "", TargetKind::Projection, layer});
        }
        targets.push_back({attentionName(layer), "", TargetKind::Attention, layer});
    }
    targets.push_back({kLmHeadName, "", TargetKind::OutputProjection, -1});
    return targets;
}

bool matchesTarget(const ModulePattern& pattern, const Target& target)
{
    return pattern.matches(target.name) || (!target.alias.empty() && pattern.matches(target.alias));
}

bool anyMatch(const ModulePattern& pattern, const std::vector<Target>& targets)
{
    return std::any_of(
        targets.begin(), targets.end(), [&](const Target& target) { return matchesTarget(pattern, target); });
}

bool takesWeights(TargetKind kind)
{
    return kind != TargetKind::Attention;
}

bool takesActivations(TargetKind kind)
{
    return kind == TargetKind::Projection || kind == TargetKind::OutputProjection;
}

std::string layerCountText(const model::ModelConfig& config)
{
    return "the model has " + std::to_string(config.numLayers) + " layers"
        + (config.numLayers > 0 ? ", 0-" + std::to_string(config.numLayers - 1) : std::string());
}

std::string groupText(const ModulePattern& pattern, std::size_t group)
{
    std::string text = "{";
    for (std::size_t item = 0; item < pattern.itemCount(group); ++item) {
        text += (item == 0 ? "" : ",") + pattern.itemText(group, item);
    }
    return text + "}";
}

// Every rule must name something in this model, and so must every alternative inside its braces: a recipe
// written for a 28-layer model that says {0,27} would otherwise quietly do half its job on a 4-layer one.
void checkNamesExist(const Recipe& recipe, const RecipeRule& rule, const ModulePattern& pattern,
    const std::vector<Target>& targets, const model::ModelConfig& config)
{
    std::vector<std::string> names;
    for (const Target& target : targets) {
        names.push_back(target.name);
        if (!target.alias.empty()) {
            names.push_back(target.alias);
        }
    }
    if (!anyMatch(pattern, targets)) {
        throwRecipeError(recipe, rule.matchLocation,
            "match \"" + rule.match + "\" names no module of this model (" + layerCountText(config)
                + "; nearest: " + nearestNamesText(rule.match, names)
                + "; its modules are model.layers.{i}.self_attn.{q,k,v,o}_proj, "
                  "model.layers.{i}.mlp.{gate,up,down}_proj, "
                  "model.layers.{i}.self_attn for the KV cache, model.embed_tokens and lm_head)");
    }
    if (pattern.groupCount() == 0) {
        return;
    }
    const auto used = pattern.itemsUsed(names);
    for (std::size_t group = 0; group < pattern.groupCount(); ++group) {
        for (std::size_t item = 0; item < pattern.itemCount(group); ++item) {
            const int ends = pattern.itemIsRange(group, item) ? 2 : 1;
            for (int end = 0; end < ends; ++end) {
                if (used[group][item][static_cast<std::size_t>(end)]) {
                    continue;
                }
                const std::string what = ends == 2
                    ? std::string(end == 0 ? "the start" : "the end") + " of " + pattern.itemText(group, item)
                    : pattern.itemText(group, item);
                throwRecipeError(recipe, rule.matchLocation,
                    what + " in " + groupText(pattern, group) + " of match \"" + rule.match
                        + "\" names no module of this model (" + layerCountText(config) + ")");
            }
        }
    }
}

// Every module at the recipe's defaults (projections) or bf16 (the embedding and lm_head), every layer's KV cache at
// the recipe's kv_cache; no rule has decided anything yet.
void applyDefaults(RecipePlan& plan, const Recipe& recipe, const std::vector<Target>& targets,
    const model::ModelConfig& config)
{
    const WeightPrecision defaultWeights = recipe.weights.value_or(WeightPrecision {});
    const ActivationPrecision defaultActivations = recipe.activations.value_or(ActivationPrecision {});
    for (const Target& target : targets) {
        if (target.kind == TargetKind::Projection) {
            plan.modules[target.name] = ModulePrecision {defaultWeights, defaultActivations, kNoRule, kNoRule};
        } else if (target.kind != TargetKind::Attention) {
            plan.modules[target.name] = ModulePrecision {};
        }
    }
    plan.kvPerLayer.assign(
        static_cast<std::size_t>(std::max<std::int64_t>(config.numLayers, 0)), recipe.kvCache.value_or(KvPrecision {}));
    plan.kvRulePerLayer.assign(plan.kvPerLayer.size(), kNoRule);
}

// Each precision a rule gives must reach a target that takes it.
void checkRuleKinds(const Recipe& recipe, const RecipeRule& rule, const std::vector<const Target*>& matched)
{
    auto matchesKind = [&matched](bool (*accepts)(TargetKind)) {
        return std::any_of(matched.begin(), matched.end(), [&](const Target* t) { return accepts(t->kind); });
    };
    if (rule.weights && !matchesKind(takesWeights)) {
        throwRecipeError(recipe, rule.weightsLocation,
            "weights given, but match \"" + rule.match
                + "\" names only attention blocks, which hold no weights of their own (name the projections, "
                  "e.g. model.layers.{i}.self_attn.*_proj)");
    }
    if (rule.activations && !matchesKind(takesActivations)) {
        throwRecipeError(recipe, rule.activationsLocation,
            "activations given, but match \"" + rule.match
                + "\" names no linear module (the embedding is a table lookup and attention blocks take "
                  "kv_cache)");
    }
    if (rule.kvCache && !matchesKind([](TargetKind kind) { return kind == TargetKind::Attention; })) {
        throwRecipeError(recipe, rule.kvCacheLocation,
            "kv_cache given, but match \"" + rule.match
                + "\" names only weight modules; the KV cache belongs to a layer's attention block "
                  "(model.layers.{i}.self_attn)");
    }
}

// Rule `index` over what the earlier rules decided: it overrides every target it matches.
void applyRule(RecipePlan& plan, const Recipe& recipe, std::size_t index, const std::vector<Target>& targets,
    const model::ModelConfig& config)
{
    const RecipeRule& rule = recipe.rules[index];
    const int ruleIndex = static_cast<int>(index);
    ModulePattern pattern;
    try {
        pattern = ModulePattern::compile(rule.match);
    } catch (const std::invalid_argument& problem) {
        throwRecipeError(recipe, rule.matchLocation, problem.what());
    }
    checkNamesExist(recipe, rule, pattern, targets, config);

    std::vector<const Target*> matched;
    for (const Target& target : targets) {
        if (matchesTarget(pattern, target)) {
            matched.push_back(&target);
        }
    }
    checkRuleKinds(recipe, rule, matched);

    for (const Target* target : matched) {
        if (target->kind == TargetKind::Attention) {
            if (rule.kvCache) {
                plan.kvPerLayer[static_cast<std::size_t>(target->layer)] = *rule.kvCache;
                plan.kvRulePerLayer[static_cast<std::size_t>(target->layer)] = ruleIndex;
            }
            continue;
        }
        ModulePrecision& module = plan.modules[target->name];
        if (rule.weights) {
            module.weights = *rule.weights;
            module.weightsRule = ruleIndex;
        }
        if (rule.activations && takesActivations(target->kind)) {
            module.activations = *rule.activations;
            module.activationsRule = ruleIndex;
        }
    }
}

// Where the weight format decided by `rule` (kNoRule: the recipe's default) was written.
SourceLocation weightsOrigin(const Recipe& recipe, int rule)
{
    return rule == kNoRule ? recipe.weightsLocation : recipe.rules[static_cast<std::size_t>(rule)].weightsLocation;
}

// Where the activation format decided by `rule` (kNoRule: the recipe's default) was written.
SourceLocation activationsOrigin(const Recipe& recipe, int rule)
{
    return rule == kNoRule ? recipe.activationsLocation
                           : recipe.rules[static_cast<std::size_t>(rule)].activationsLocation;
}

// Why the engine does not run these weights with these activations (formats.h isSupportedPair).
std::string pairProblem(WeightFormat weights, ActivationFormat activations)
{
    if (weights == WeightFormat::Int4 && activations == ActivationFormat::Fp8E4m3) {
        return "W4A8 is not supported by the engine (keep bf16 activations for int4 modules)";
    }
    if (isMicroscaling(activations)) {
        return toString(activations) + " activations need " + toString(activations)
            + " weights: vLLM quantizes both operands of a microscaling product in one format (give the module "
              "those weights, or bf16 activations)";
    }
    return toString(weights) + " weights take bf16 activations (weight-only) or " + toString(weights)
        + " activations (both operands in one format), the pairs vLLM runs";
}

// Weights and activations the engine runs together (formats.h isSupportedPair: no W4A8, microscaling formats only
// with bf16 or their own). Reported at whichever decision came later.
void checkSupportedPairs(RecipePlan& plan, const Recipe& recipe, const std::vector<Target>& targets)
{
    for (const Target& target : targets) {
        if (target.kind == TargetKind::Attention) {
            continue;
        }
        const ModulePrecision& module = plan.modules[target.name];
        if (isSupportedPair(module.weights.format, module.activations.format)) {
            continue;
        }
        const SourceLocation weightsAt = weightsOrigin(recipe, module.weightsRule);
        const SourceLocation activationsAt = activationsOrigin(recipe, module.activationsRule);
        const bool weightsLater = module.weightsRule > module.activationsRule;
        throwRecipeError(recipe, weightsLater ? weightsAt : activationsAt,
            target.name + " gets " + toString(module.weights.format) + " weights (" + describeLocation(weightsAt)
                + ") with " + toString(module.activations.format) + " activations (" + describeLocation(activationsAt)
                + "): " + pairProblem(module.weights.format, module.activations.format));
    }
}

// A tied embedding is one tensor; it cannot be stored in two formats.
void checkTiedEmbedding(RecipePlan& plan, const Recipe& recipe, const model::ModelConfig& config)
{
    const ModulePrecision& embed = plan.modules[kEmbedName];
    ModulePrecision& lmHead = plan.modules[kLmHeadName];
    if (config.tieWordEmbeddings && embed.weights != lmHead.weights) {
        const bool lmHeadLater = lmHead.weightsRule > embed.weightsRule;
        const SourceLocation later = weightsOrigin(recipe, lmHeadLater ? lmHead.weightsRule : embed.weightsRule);
        const SourceLocation earlier = weightsOrigin(recipe, lmHeadLater ? embed.weightsRule : lmHead.weightsRule);
        throwRecipeError(recipe, later,
            "the model ties lm_head to model.embed_tokens (one tensor), but they get different weight formats: "
                + describe(embed.weights) + " for the embedding and " + describe(lmHead.weights) + " for lm_head"
                + (earlier.line > 0 ? " (the other set at " + describeLocation(earlier) + ")" : std::string()));
    }
}

// Weight memory: every matrix in its planned format, norms in bf16, then the totals.
void addWeightMemory(RecipePlan& plan, const model::ModelConfig& config)
{
    const std::int64_t hidden = config.hiddenSize;
    auto addNorm = [&plan](const std::string& name, std::int64_t size) {
        plan.memory[name] = weightMemory(size, 1, WeightPrecision {});
    };
    auto addMatrix = [&plan](const std::string& name, std::int64_t rows, std::int64_t columns, bool bias) {
        WeightMemory memory = weightMemory(rows, columns, plan.modules.at(name).weights);
        if (bias) {
            memory.biasBytes = kBf16Bytes * rows;
            memory.bf16Bytes += memory.biasBytes;
        }
        plan.memory[name] = memory;
    };
    addMatrix(kEmbedName, config.vocabSize, hidden, false);
    if (!config.tieWordEmbeddings) {
        addMatrix(kLmHeadName, config.vocabSize, hidden, false);
    }
    addNorm("model.norm", hidden);
    for (std::int64_t layer = 0; layer < config.numLayers; ++layer) {
        auto name = [layer](const char* suffix) { return layerModuleName(layer, suffix); };
        addMatrix(name("self_attn.q_proj"), config.qSize(), hidden, config.attentionBias);
        addMatrix(name("self_attn.k_proj"), config.kvSize(), hidden, config.attentionBias);
        addMatrix(name("self_attn.v_proj"), config.kvSize(), hidden, config.attentionBias);
        addMatrix(name("self_attn.o_proj"), hidden, config.qSize(), config.outputBias);
        addMatrix(name("mlp.gate_proj"), config.intermediateSize, hidden, false);
        addMatrix(name("mlp.up_proj"), config.intermediateSize, hidden, false);
        addMatrix(name("mlp.down_proj"), hidden, config.intermediateSize, false);
        addNorm(name("input_layernorm"), hidden);
        addNorm(name("post_attention_layernorm"), hidden);
        if (config.qkNorm) {
            addNorm(name("self_attn.q_norm"), config.headDim);
            addNorm(name("self_attn.k_norm"), config.headDim);
        }
    }
    for (const auto& entry : plan.memory) {
        plan.weightBytes += entry.second.bytes();
        plan.bf16WeightBytes += entry.second.bf16Bytes;
    }
}

// Microscaling weights come in whole blocks along the input dimension (formats.h weightScaleCount): refused here,
// at the rule that set them, rather than when an engine is built. A tied lm_head is the embedding's tensor.
void checkWholeBlocks(const RecipePlan& plan, const Recipe& recipe)
{
    for (const auto& [name, module] : plan.modules) {
        const std::int64_t block = microscalingBlockSize(module.weights.format);
        const auto memory = plan.memory.find(plan.memory.count(name) ? name : std::string(kEmbedName));
        if (block == 0 || memory == plan.memory.end() || memory->second.columns % block == 0) {
            continue;
        }
        throwRecipeError(recipe, weightsOrigin(recipe, module.weightsRule),
            name + " gets " + toString(module.weights.format) + " weights, whose blocks of " + std::to_string(block)
                + " run along the input dimension, but it has " + std::to_string(memory->second.columns)
                + " input features, not a multiple of " + std::to_string(block)
                + " (vLLM's kernels take whole blocks only)");
    }
}

// KV cache: K and V, each kv heads * head dim elements per token and layer (and for the per-token-head formats a
// float32 scale per kv head).
void addKvMemory(RecipePlan& plan, const model::ModelConfig& config)
{
    const std::int64_t kvElementsPerToken = 2 * config.numKeyValueHeads * config.headDim;
    for (const KvPrecision& kv : plan.kvPerLayer) {
        plan.kvBytesPerToken += kvElementsPerToken * static_cast<std::int64_t>(bytesPerElement(kv.format));
        if (isPerTokenHead(kv.format)) {
            plan.kvBytesPerToken += 2 * config.numKeyValueHeads * static_cast<std::int64_t>(kScaleBytes);
        }
        plan.bf16KvBytesPerToken += kvElementsPerToken * kBf16Bytes;
        if (kv.scales == KvScales::PerTensor) {
            plan.kvScaleBytes += 2 * static_cast<std::int64_t>(kScaleBytes);
        } else if (kv.scales == KvScales::PerHead) {
            plan.kvScaleBytes += 2 * config.numKeyValueHeads * static_cast<std::int64_t>(kScaleBytes);
        }
    }
}

} // namespace

RecipePlan resolveRecipe(const Recipe& recipe, const model::ModelConfig& config)
{
    RecipePlan plan;
    plan.numLayers = config.numLayers;
    const std::vector<Target> targets = targetsOf(config);
    applyDefaults(plan, recipe, targets, config);
    for (std::size_t index = 0; index < recipe.rules.size(); ++index) {
        applyRule(plan, recipe, index, targets, config);
    }
    checkSupportedPairs(plan, recipe, targets);
    checkTiedEmbedding(plan, recipe, config);
    addWeightMemory(plan, config);
    checkWholeBlocks(plan, recipe);
    addKvMemory(plan, config);
    return plan;
}

} // namespace mismatch::quant

// mismatch generate --model DIR [--recipe R | --precision fp32|bf16] --prompts P.jsonl --out OUT.jsonl
//                   [--staleness-from CKPT_DIR] [--noise SIGMA --noise-seed S --noise-modules PATTERN]
//                   [--temperature T --top-p P --top-k K --max-tokens N --seed S --stop STR --top-logprobs K]
//                   [--kv-memory SIZE --block-size N --max-batch N]
#include "app/cli/context.h"
#include "core/model/memory_check.h"
#include "core/io/recipe_export.h"
#include "app/cli/terminal_progress.h"
#include "core/common/error.h"
#include "core/engine/byte_size.h"
#include "core/engine/engine.h"
#include "core/engine/memory_plan.h"
#include "core/engine/mismatch_sources.h"
#include "core/io/prompt_set.h"
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>

namespace fs = std::filesystem;

namespace mismatch::cli {

namespace {

struct GenerateArguments {
    std::string modelDirectory;
    std::string recipe;
    std::string precision;
    std::string prompts;
    std::string out;
    std::string stalenessFrom;
    double noise = 0.0;
    std::uint64_t noiseSeed = 0;
    std::string noiseModules = "*";
    double temperature = 1.0;
    double topP = 1.0;
    std::int64_t topK = 0;
    std::int64_t maxTokens = 128;
    std::uint64_t seed = 0;
    std::vector<std::string> stop;
    std::int64_t topLogProbs = 0;
    bool ignoreEos = false;
    std::string kvMemory = "1GiB";
    std::int64_t blockSize = 16;
    std::int64_t maxBatch = 0;
};

// A request's seed from its prompt id (FNV-1a): the same prompt gets the same sample whatever else is in the file.
std::uint64_t promptSeed(const std::string& id)
{
    std::uint64_t hash = 0xCBF29CE484222325ULL;
    for (const unsigned char c : id) {
        hash = (hash ^ c) * 0x100000001B3ULL;
    }
    return hash;
}

std::string checkpointConfigPath(const std::string& directory)
{
    return (fs::path(directory) / "config.json").string();
}

// JSON Lines through io::writeFileAtomically: a failed run leaves no half-written output.
void writeJsonLines(const std::string& path, const std::vector<nlohmann::json>& lines)
{
    std::string text;
    for (const nlohmann::json& line : lines) {
        // Response bytes need not be valid UTF-8 (a token may hold part of a character): replace, not throw.
        text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    io::writeFileAtomically(path, text);
}

void runGenerate(const Context& context, const GenerateArguments& arguments)
{
    const auto started = std::chrono::steady_clock::now();
    // Writing the output over an input would destroy it; compared as files, whatever the spelling of the paths.
    for (const auto& [input, option] : {std::pair<std::string, const char*> {arguments.prompts, "--prompts"},
             {arguments.recipe, "--recipe"}}) {
        std::error_code error;
        if (!input.empty() && fs::equivalent(arguments.out, input, error)) {
            throw InputError(arguments.out, "", std::string("--out names the same file as ") + option
                    + " (it would be overwritten); write the output elsewhere");
        }
    }
    const model::ModelConfig config = model::loadConfig(checkpointConfigPath(arguments.modelDirectory));
    const model::Tokenizer tokenizer = model::loadModelTokenizer(arguments.modelDirectory, config);
    const io::PromptSet promptSet = io::loadPromptSet(arguments.prompts);
    if (arguments.noise > 0.0) {
        engine::requireNoiseModulesMatch(config, arguments.noiseModules, "--noise-modules", "");
    }

    // The engine's weights: the model's, or an older checkpoint of the same model (staleness), plus noise.
    std::string weightSource = arguments.modelDirectory;
    if (!arguments.stalenessFrom.empty()) {
        const model::ModelConfig staleConfig = model::loadConfig(checkpointConfigPath(arguments.stalenessFrom));
        if (staleConfig != config) {
            throw InputError(checkpointConfigPath(arguments.stalenessFrom), "",
                "--staleness-from must be a checkpoint of the same model as --model (config.json differs from "
                    + checkpointConfigPath(arguments.modelDirectory) + ")");
        }
        weightSource = arguments.stalenessFrom;
    }
    std::optional<quant::RecipePlan> plan;
    std::string precisionName = arguments.precision.empty() ? "bf16" : arguments.precision;
    if (!arguments.recipe.empty()) {
        plan = quant::resolveRecipe(quant::loadRecipe(arguments.recipe), config);
        precisionName = "recipe " + arguments.recipe;
    }
    // The KV cache the user sized is checked on its own first (an error naming --kv-memory), then the whole job.
    const std::uint64_t kvCacheBytes = engine::parseByteSize(arguments.kvMemory, "--kv-memory");
    model::checkRequestFits("--kv-memory " + arguments.kvMemory, kvCacheBytes);
    const engine::StoredWeights stored = engine::storedWeights(weightSource);
    model::checkJobFits("generate",
        {{"weights of " + weightSource + " as stored", stored.bytes},
            {"engine weights", engine::engineExtraBytes(config, plan ? &*plan : nullptr, stored.dtype)},
            {"noisy weights", arguments.noise > 0.0 ? stored.bytes : 0}, {"KV cache", kvCacheBytes}});
    // As stored (a BF16 checkpoint stays BF16): the engine keeps no float32 copy.
    model::TransformerWeights weights = model::loadWeights(weightSource, config, model::LoadPrecision::Stored);
    if (arguments.noise > 0.0) {
        weights = engine::addWeightNoise(weights, arguments.noise, arguments.noiseSeed, arguments.noiseModules,
            engine::engineNoiseDtype(config, plan ? &*plan : nullptr, arguments.precision == "fp32"));
    }
    engine::EngineOptions options;
    options.precision
        = arguments.precision == "fp32" ? engine::EnginePrecision::Fp32 : engine::EnginePrecision::Bf16Reference;
    options.kvCacheBytes = kvCacheBytes;
    options.kvBlockSize = arguments.blockSize;
    options.maxBatchSize = arguments.maxBatch;
    engine::Engine engine(config, std::move(weights), std::move(plan), options);
    engine.setTokenizer(&tokenizer);

    std::vector<engine::GenerationRequest> requests;
    for (const io::Prompt& prompt : promptSet.prompts) {
        engine::GenerationRequest request;
        request.prompt = tokenizer.encode(io::renderPrompt(promptSet, prompt), /*addSpecialTokens=*/true);
        if (request.prompt.empty()) {
            throw InputError(arguments.prompts, "prompt '" + prompt.id + "'", "encodes to no tokens");
        }
        model::requireFitsContext(config, static_cast<std::int64_t>(request.prompt.size()), arguments.maxTokens,
            arguments.prompts, "prompt '" + prompt.id + "'");
        request.seed = promptSeed(prompt.id);
        request.source = arguments.prompts + ", prompt '" + prompt.id + "'";
        requests.push_back(std::move(request));
    }
    // FP8 KV scales calibrated on the prompts being generated (the probe set of this run).
    std::vector<std::vector<std::int64_t>> probes;
    for (const auto& request : requests) {
        probes.push_back(request.prompt);
    }
    engine.model().calibrateKvScales(probes);

    engine::SamplingOptions sampling;
    sampling.temperature = arguments.temperature;
    sampling.topP = arguments.topP;
    sampling.topK = arguments.topK;
    sampling.maxNewTokens = arguments.maxTokens;
    sampling.seed = arguments.seed;
    sampling.stopStrings = arguments.stop;
    sampling.topLogProbs = arguments.topLogProbs;
    sampling.ignoreEos = arguments.ignoreEos;
    if (!arguments.ignoreEos && config.eosTokenIds.empty() && tokenizer.eosTokenId()) {
        sampling.stopTokenIds.push_back(*tokenizer.eosTokenId());
    }

    TerminalProgress bar(*context.err);
    const std::vector<engine::GenerationResult> results = engine.generate(requests, sampling, &bar.progress());
    bar.finish();

    std::vector<nlohmann::json> lines;
    std::map<std::string, int> reasons;
    std::int64_t generatedTokens = 0;
    std::int64_t waves = 0;
    int rejected = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const engine::GenerationResult& result = results[i];
        nlohmann::json line = {{"id", promptSet.prompts[i].id}, {"prompt_tokens", requests[i].prompt.size()},
            {"tokens", result.tokens}, {"text", result.text}, {"logprobs", result.logProbs},
            {"finish_reason", engine::toString(result.finishReason)}};
        if (arguments.topLogProbs > 0) {
            nlohmann::json top = nlohmann::json::array();
            for (const auto& position : result.topLogProbs) {
                nlohmann::json entries = nlohmann::json::array();
                for (const engine::TokenLogProb& entry : position) {
                    entries.push_back({{"id", entry.id}, {"logprob", entry.logProb}});
                }
                top.push_back(entries);
            }
            line["top_logprobs"] = top;
        }
        if (result.error) {
            line["error"] = result.error->what();
            ++rejected;
        }
        lines.push_back(std::move(line));
        ++reasons[engine::toString(result.finishReason)];
        generatedTokens += static_cast<std::int64_t>(result.tokens.size());
        waves = std::max(waves, result.wave + 1);
    }
    writeJsonLines(arguments.out, lines);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    const engine::KvBlockAllocator allocator = engine.allocator();
    if (context.json) {
        context.printJson({{"model", arguments.modelDirectory}, {"weights", weightSource}, {"precision", precisionName},
            {"noise", arguments.noise}, {"prompts", results.size()}, {"generated_tokens", generatedTokens},
            {"waves", waves}, {"finish_reasons", reasons}, {"rejected", rejected}, {"out", arguments.out},
            {"kv_capacity_tokens", allocator.capacityTokens()}, {"seconds", seconds}});
    } else {
        std::vector<std::vector<std::string>> rows
            = {{"model", arguments.modelDirectory}, {"weights", weightSource}, {"precision", precisionName},
                {"noise sigma", formatNumber(arguments.noise)}, {"prompts", std::to_string(results.size())},
                {"generated tokens", std::to_string(generatedTokens)}, {"waves", std::to_string(waves)},
                {"KV cache",
                    std::to_string(allocator.capacityTokens()) + " tokens in "
                        + engine::formatByteSize(options.kvCacheBytes)},
                {"seconds", formatNumber(seconds, 3)}, {"output", arguments.out}};
        for (const auto& [reason, count] : reasons) {
            rows.push_back({"finish " + reason, std::to_string(count)});
        }
        *context.out << formatTable({"generate", ""}, rows);
    }
    if (rejected > 0) {
        // The output holds every other prompt; the run still fails so that scripts notice.
        engine::throwIfRejected(results);
    }
}

void registerGenerateCommand(CLI::App& app, Context& context)
{
    auto arguments = std::make_shared<GenerateArguments>();
    CLI::App* generate = app.add_subcommand("generate",
        "Generate responses with the emulated rollout engine (paged KV cache, precision recipe, staleness, noise) "
        "and write tokens and per-token log-probabilities of the engine's sampling distribution as JSON Lines");
    generate
        ->add_option(
            "--model,-m", arguments->modelDirectory, "Model directory (config.json, safetensors, tokenizer.json)")
        ->required()
        ->type_name("DIR");
    generate->add_option("--prompts,-p", arguments->prompts, "Prompt set (JSON Lines: id, prompt, answer)")
        ->required()
        ->type_name("P.jsonl");
    generate->add_option("--out,-o", arguments->out, "Output JSON Lines, one line per prompt")
        ->required()
        ->type_name("OUT.jsonl");
    auto* recipe = generate
                       ->add_option("--recipe,-r", arguments->recipe,
                           "Precision recipe (YAML or JSON); FP8 KV scales are "
                           "calibrated on the prompts")
                       ->type_name("R");
    generate->add_option("--precision", arguments->precision, "Engine precision without a recipe (default bf16)")
        ->check(CLI::IsMember({"fp32", "bf16"}))
        ->excludes(recipe);
    generate
        ->add_option("--staleness-from", arguments->stalenessFrom,
            "Run the engine on this older checkpoint of the same model (weights k steps old)")
        ->type_name("CKPT_DIR");
    generate->add_option("--noise", arguments->noise, "Gaussian weight noise, relative to each tensor's RMS")
        ->check(atLeast(0))
        ->type_name("SIGMA");
    generate->add_option("--noise-seed", arguments->noiseSeed, "Seed of the weight noise");
    generate->add_option("--noise-modules", arguments->noiseModules,
        "Modules that get noise (recipe match pattern, e.g. \"model.layers.{0-3}.mlp.*\"; default all)");
    generate->add_option("--temperature,-t", arguments->temperature, "Sampling temperature (0: greedy)")
        ->check(atLeast(0))
        ->capture_default_str();
    generate->add_option("--top-p", arguments->topP, "Nucleus sampling mass in (0, 1]")
        ->check(between(0, 1))
        ->capture_default_str();
    generate->add_option("--top-k", arguments->topK, "Keep the K most probable tokens (0: off)")
        ->check(atLeast(0))
        ->capture_default_str();
    generate->add_option("--max-tokens", arguments->maxTokens, "Maximum new tokens per prompt")
        ->check(greaterThan(0))
        ->capture_default_str();
    generate->add_option("--seed", arguments->seed, "Sampling seed (combined with each prompt id)")
        ->capture_default_str();
    generate->add_option("--stop", arguments->stop, "Stop string (repeatable)");
    generate->add_option(
        "--top-logprobs", arguments->topLogProbs, "Also write the K most probable tokens per position");
    generate->add_flag("--ignore-eos", arguments->ignoreEos, "Do not stop at the model's EOS token");
    generate->add_option("--kv-memory", arguments->kvMemory, "Memory of the paged KV cache (e.g. 1GiB, 512MiB, 1e9)")
        ->capture_default_str();
    generate->add_option("--block-size", arguments->blockSize, "Tokens per KV-cache block")
        ->check(greaterThan(0))
        ->capture_default_str();
    generate->add_option("--max-batch", arguments->maxBatch, "Sequences per wave (0: as many as the cache holds)")
        ->check(atLeast(0));
    generate->callback([&context, arguments] { runGenerate(context, *arguments); });
}

const CommandRegistration registration(45, registerGenerateCommand);

} // namespace

} // namespace mismatch::cli

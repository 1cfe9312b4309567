// mismatch generate --model DIR [--recipe R | --precision fp32|bf16] --prompts P.jsonl --out OUT.jsonl
//                   [--staleness-from CKPT_DIR] [--noise SIGMA --noise-seed S --noise-modules PATTERN]
//                   [--temperature T --top-p P --top-k K --max-tokens N --seed S --stop STR --top-logprobs K]
//                   [--kv-memory SIZE --block-size N --max-batch N]
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/generate.h"
#include "core/common/byte_size.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/engine/engine.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
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

// JSON Lines through writeFileAtomically: a failed or cancelled run leaves no output, whole or partial.
void writeJsonLines(const std::string& path, const std::vector<nlohmann::json>& lines)
{
    std::string text;
    for (const nlohmann::json& line : lines) {
        // Response bytes need not be valid UTF-8 (a token may hold part of a character): replace, not throw.
        text += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    writeFileAtomically(path, text);
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
    analysis::GenerateOptions options;
    options.modelDirectory = arguments.modelDirectory;
    options.recipe = arguments.recipe;
    options.precision = arguments.precision;
    options.prompts = arguments.prompts;
    options.stalenessFrom = arguments.stalenessFrom;
    options.noise = arguments.noise;
    options.noiseSeed = arguments.noiseSeed;
    options.noiseModules = arguments.noiseModules;
    options.sampling.temperature = arguments.temperature;
    options.sampling.topP = arguments.topP;
    options.sampling.topK = arguments.topK;
    options.sampling.maxNewTokens = arguments.maxTokens;
    options.sampling.seed = arguments.seed;
    options.sampling.stopStrings = arguments.stop;
    options.sampling.topLogProbs = arguments.topLogProbs;
    options.sampling.ignoreEos = arguments.ignoreEos;
    options.kvCacheBytes = parseByteSize(arguments.kvMemory, "--kv-memory");
    options.blockSize = arguments.blockSize;
    options.maxBatch = arguments.maxBatch;
    options.kvMemorySource = "--kv-memory " + arguments.kvMemory;
    options.noiseModulesSource = "--noise-modules";

    TerminalProgress bar(*context.err);
    const analysis::GenerateResult generated = analysis::generate(options, bar.progress());
    bar.finish();
    const std::vector<engine::GenerationResult>& results = generated.results;
    const std::vector<engine::GenerationRequest>& requests = generated.requests.requests;
    const std::string& weightSource = generated.weightSource;
    const std::string& precisionName = generated.precisionName;

    std::vector<nlohmann::json> lines;
    std::map<std::string, int> reasons;
    std::int64_t generatedTokens = 0;
    std::int64_t waves = 0;
    int rejected = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
        const engine::GenerationResult& result = results[i];
        nlohmann::json line = {{"id", generated.requests.ids[i]}, {"prompt_tokens", requests[i].prompt.size()},
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

    if (context.json) {
        context.printJson({{"model", arguments.modelDirectory}, {"weights", weightSource}, {"precision", precisionName},
            {"noise", arguments.noise}, {"prompts", results.size()}, {"generated_tokens", generatedTokens},
            {"waves", waves}, {"finish_reasons", reasons}, {"rejected", rejected}, {"out", arguments.out},
            {"kv_capacity_tokens", generated.kvCapacityTokens}, {"seconds", seconds}});
    } else {
        std::vector<std::vector<std::string>> rows
            = {{"model", arguments.modelDirectory}, {"weights", weightSource}, {"precision", precisionName},
                {"noise sigma", formatNumber(arguments.noise)}, {"prompts", std::to_string(results.size())},
                {"generated tokens", std::to_string(generatedTokens)}, {"waves", std::to_string(waves)},
                {"KV cache",
                    std::to_string(generated.kvCapacityTokens) + " tokens in "
                        + formatByteSize(options.kvCacheBytes)},
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

// mismatch generate --model DIR [--recipe R | --precision fp32|bf16] --prompts P.jsonl --out OUT.jsonl
//                   [--staleness-from CKPT_DIR] [--noise SIGMA --noise-seed S --noise-modules PATTERN]
//                   [--temperature T --top-p P --top-k K --max-tokens N --seed S --stop STR --top-logprobs K]
//                   [--kv-memory SIZE --block-size N --max-batch N]
// The options are the catalogue job "generate"'s parameters (core/jobs/model_jobs.h); the work is
// analysis::generateToFile. Ctrl-C cancels (exit 130) and writes no output.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/common/byte_size.h"
#include "core/engine/engine.h"
#include "core/jobs/model_jobs.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void printResult(const Context& context, const analysis::GenerateFileResult& r)
{
    if (context.json) {
        context.printJson(jobs::generateResultJson(r));
        return;
    }
    std::vector<std::vector<std::string>> rows
        = {{"model", r.modelDirectory}, {"weights", r.generated.weightSource}, {"precision", r.generated.precisionName},
            {"noise sigma", formatNumber(r.noise)}, {"prompts", std::to_string(r.generated.results.size())},
            {"generated tokens", std::to_string(r.generatedTokens)}, {"waves", std::to_string(r.waves)},
            {"KV cache", std::to_string(r.generated.kvCapacityTokens) + " tokens in " + formatByteSize(r.kvCacheBytes)},
            {"seconds", formatNumber(r.seconds, 3)}, {"output", r.out}};
    for (const auto& [reason, count] : r.finishReasons) {
        rows.push_back({"finish " + reason, std::to_string(count)});
    }
    *context.out << formatTable({"generate", ""}, rows);
}

void registerGenerateCommand(CLI::App& app, Context& context)
{
    const jobs::JobDefinition& definition = *jobs::findJob("generate");
    CLI::App* command = app.add_subcommand("generate", definition.summary);
    auto job = std::make_shared<JobOptions>(command, definition);
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        analysis::GenerateOptions options = jobs::generateOptions(spec);
        // Messages name the options.
        options.kvMemorySource = "--kv-memory " + spec.text("kv_memory");
        options.noiseModulesSource = "--noise-modules";
        TerminalProgress bar(*context.err);
        const analysis::GenerateFileResult result = analysis::generateToFile(options, spec.text("out"), bar.progress());
        bar.finish();
        printResult(context, result);
        // The output holds every other prompt; the run still fails so that scripts notice.
        engine::throwIfRejected(result.generated.results);
    });
}

const CommandRegistration registration(45, registerGenerateCommand);

} // namespace

} // namespace mismatch::cli

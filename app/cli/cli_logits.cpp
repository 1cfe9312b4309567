// mismatch logits --model DIR --prompts P.jsonl --out FILE.safetensors
#include "app/cli/context.h"
#include "app/cli/terminal_progress.h"
#include "core/model/reference_logits.h"
#include "core/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

struct LogitsArguments {
    std::string model;
    std::string prompts;
    std::string out;
    bool includeAnswer = false;
    bool bf16 = false;
};

void registerLogitsCommand(CLI::App& app, Context& context)
{
    auto args = std::make_shared<LogitsArguments>();
    CLI::App* logits = app.add_subcommand("logits",
        "Write the reference (trainer) log-probabilities of every position of a prompt set to a safetensors "
        "file: log_probs.i [T_i, vocab] and input_ids.i [T_i] per prompt, prompt ids in the metadata");
    logits->add_option("--model", args->model, "Model directory (config.json, model.safetensors, tokenizer.json)")
        ->required()
        ->type_name("DIR");
    logits->add_option("--prompts", args->prompts, "Prompt set (JSONL: id, prompt, answer)")->required()->type_name("P.jsonl");
    logits->add_option("--out", args->out, "Output safetensors file")->required()->type_name("FILE");
    logits->add_flag("--with-answer", args->includeAnswer, "Score prompt + answer instead of the prompt alone");
    logits->add_flag("--bf16", args->bf16, "Run the forward in BF16 instead of FP32");
    logits->callback([&context, args] {
        TerminalProgress bar(*context.err);
        model::ReferenceLogitsOptions options;
        options.includeAnswer = args->includeAnswer;
        options.bf16 = args->bf16;
        const model::ReferenceLogits result =
            model::computeReferenceLogits(args->model, args->prompts, options, bar.progress());
        bar.finish();
        const nlohmann::json ids = result.promptIds;
        model::writeSafetensors(args->out, result.tensors,
            {{"prompt_ids", ids.dump()}, {"model", args->model}, {"precision", args->bf16 ? "bf16" : "fp32"},
                {"text", args->includeAnswer ? "prompt+answer" : "prompt"}});
        if (context.json) {
            context.printJson({{"out", args->out}, {"prompts", result.promptIds.size()}, {"positions", result.positions},
                {"precision", args->bf16 ? "bf16" : "fp32"}});
        } else {
            *context.out << "wrote " << result.promptIds.size() << " prompts, " << result.positions << " positions to "
                         << args->out << "\n";
        }
    });
}

const CommandRegistration registration(22, registerLogitsCommand);

}  // namespace

}  // namespace mismatch::cli

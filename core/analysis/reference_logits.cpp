#include "core/analysis/reference_logits.h"

#include "core/common/error.h"
#include "core/common/output_check.h"
#include "core/io/prompt_set.h"
#include "core/model/memory_check.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <nlohmann/json.hpp>

#include <filesystem>

namespace mismatch::analysis {

// The model layer's readers and forward, by their own names (this was model/ code before it moved up here).
using namespace mismatch::model;

ReferenceLogits computeReferenceLogits(const std::string& modelDirectory, const std::string& promptSetPath,
    const ReferenceLogitsOptions& options, Progress& progress)
{
    at::NoGradGuard noGrad;
    progress.update(0.0, "loading model");
    const ModelFiles files = openModelDirectory(modelDirectory);
    const Tokenizer tokenizer = loadModelTokenizer(modelDirectory, files.config);
    const io::PromptSet set = io::loadPromptSet(promptSetPath);
    // Before the weights: every sequence within the model's positions, and the output (float32 log-probabilities
    // of the whole vocabulary at every position) within the memory there is.
    std::uint64_t outputBytes = 0;
    for (const io::Prompt& prompt : set.prompts) {
        const std::string text = io::renderPrompt(set, prompt) + (options.includeAnswer ? prompt.answer : std::string());
        const auto tokens = static_cast<std::int64_t>(tokenizer.encode(text).size());
        requireFitsContext(files.config, tokens, 0, promptSetPath, "prompt '" + prompt.id + "'");
        outputBytes += static_cast<std::uint64_t>(tokens) * static_cast<std::uint64_t>(files.config.vocabSize) * 4;
    }
    checkRequestFits(promptSetPath + " (the log-probabilities of every position over the vocabulary of "
            + std::to_string(files.config.vocabSize) + ")",
        outputBytes);
    // The FP32 forward multiplies the stored values exactly (a BF16 checkpoint is widened block by block).
    const Transformer network(files.config, loadWeights(modelDirectory, files.config, LoadPrecision::Stored));
    ForwardOptions forward;
    forward.logProbs = true;
    forward.compute = options.bf16 ? at::kBFloat16 : at::kFloat;

    ReferenceLogits result;
    const auto count = static_cast<int>(set.prompts.size());
    for (int first = 0; first < count; first += options.batchSize) {
        progress.checkCancelled();
        const int rows = std::min(options.batchSize, count - first);
        std::vector<std::vector<std::int64_t>> sequences;
        std::size_t longest = 0;
        for (int r = 0; r < rows; ++r) {
            const io::Prompt& prompt = set.prompts[static_cast<size_t>(first + r)];
            std::string text = io::renderPrompt(set, prompt);
            if (options.includeAnswer) {
                text += prompt.answer;
            }
            sequences.push_back(tokenizer.encode(text));
            if (sequences.back().empty()) {
                throw InputError(promptSetPath, "prompt '" + prompt.id + "'", "encodes to no tokens");
            }
            longest = std::max(longest, sequences.back().size());
        }
        // Right padding: real tokens keep positions 0..T_i-1 (the forward derives positions from the mask).
        const auto T = static_cast<std::int64_t>(longest);
        at::Tensor ids = at::zeros({rows, T}, at::kLong);
        at::Tensor mask = at::zeros({rows, T}, at::kLong);
        for (int r = 0; r < rows; ++r) {
            const auto& seq = sequences[static_cast<size_t>(r)];
            const auto length = static_cast<std::int64_t>(seq.size());
            ids[r].narrow(0, 0, length).copy_(at::tensor(seq, at::kLong));
            mask[r].narrow(0, 0, length).fill_(1);
        }
        const at::Tensor logProbs = network.forward(ids, mask, forward);
        for (int r = 0; r < rows; ++r) {
            const auto length = static_cast<std::int64_t>(sequences[static_cast<size_t>(r)].size());
            const int index = first + r;
            result.tensors.emplace_back("log_probs." + std::to_string(index),
                logProbs[r].narrow(0, 0, length).to(at::kFloat).contiguous());
            result.tensors.emplace_back("input_ids." + std::to_string(index), ids[r].narrow(0, 0, length).to(at::kFloat));
            result.promptIds.push_back(set.prompts[static_cast<size_t>(index)].id);
            result.positions += length;
        }
        progress.update(static_cast<double>(first + rows) / count, "scoring prompts");
    }
    return result;
}

ReferenceLogitsFile writeReferenceLogits(const std::string& modelDirectory, const std::string& promptSetPath,
    const std::string& out, const ReferenceLogitsOptions& options, Progress& progress)
{
    requireOutputNotInput(out, {{promptSetPath, "prompt set"}}, {modelDirectory}); // issue 46: before any work
    const ReferenceLogits logits = computeReferenceLogits(modelDirectory, promptSetPath, options, progress);
    progress.checkCancelled();
    const std::string precision = options.bf16 ? "bf16" : "fp32";
    writeSafetensors(out, logits.tensors,
        {{"prompt_ids", nlohmann::json(logits.promptIds).dump()}, {"model", modelDirectory}, {"precision", precision},
            {"text", options.includeAnswer ? "prompt+answer" : "prompt"}});
    ReferenceLogitsFile file;
    file.modelDirectory = modelDirectory;
    file.out = out;
    file.prompts = static_cast<std::int64_t>(logits.promptIds.size());
    file.positions = logits.positions;
    file.bf16 = options.bf16;
    return file;
}

}  // namespace mismatch::analysis

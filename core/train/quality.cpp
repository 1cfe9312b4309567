#include "core/train/quality.h"

#include "core/common/error.h"
#include "core/engine/engine.h"
#include "core/io/arith_task.h"
#include "core/model/tokenizer.h"
#include "core/store/sqlite_util.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace mismatch::train {

QualityResult evaluateQuality(const model::Transformer& student, const model::Transformer& teacher,
    const io::PromptSet& prompts, const QualityOptions& options, const model::Tokenizer& tokenizer,
    Progress* progress)
{
    if (student.config().vocabSize != teacher.config().vocabSize) {
        throw InputError("quality", "teacher",
            "vocabulary " + std::to_string(teacher.config().vocabSize) + " differs from the student's "
                + std::to_string(student.config().vocabSize));
    }
    if (options.maxTokens < 1 || options.batchSize < 1 || options.count < 0) {
        throw InputError("quality", "options", "max tokens and batch size must be >= 1 and count >= 0");
    }
    const std::size_t count = options.count > 0
        ? std::min(prompts.prompts.size(), static_cast<std::size_t>(options.count))
        : prompts.prompts.size();
    if (count == 0) {
        throw InputError(prompts.path.empty() ? prompts.name : prompts.path, "prompts", "no prompts to evaluate on");
    }

    // The FP32 engine computes exactly the student's own forward, with a KV cache for speed.
    engine::EngineOptions engineOptions;
    engineOptions.precision = engine::EnginePrecision::Fp32;
    engine::Engine generator(student.config(), student.weights().clone(), std::nullopt, engineOptions);
    engine::SamplingOptions sampling;
    sampling.temperature = options.temperature;
    sampling.greedy = options.temperature == 0.0;
    sampling.maxNewTokens = options.maxTokens;
    sampling.seed = options.seed;

    QualityResult result;
    result.problems.reserve(count);
    double qualitySum = 0.0;
    std::int64_t correct = 0;
    const auto chunk = static_cast<std::size_t>(options.batchSize);
    const std::string source = prompts.path.empty() ? prompts.name : prompts.path;
    for (std::size_t begin = 0; begin < count; begin += chunk) {
        if (progress) {
            progress->checkCancelled();
            progress->update(static_cast<double>(begin) / static_cast<double>(count), "evaluating quality");
        }
        const std::size_t end = std::min(count, begin + chunk);
        std::vector<engine::GenerationRequest> requests;
        std::vector<std::vector<std::int64_t>> promptIds;
        for (std::size_t i = begin; i < end; ++i) {
            engine::GenerationRequest request;
            request.prompt = tokenizer.encode(io::renderPrompt(prompts, prompts.prompts[i]), true);
            if (request.prompt.empty()) {
                throw InputError(source, "prompt '" + prompts.prompts[i].id + "'", "encodes to no tokens");
            }
            request.seed = i;
            promptIds.push_back(request.prompt);
            requests.push_back(std::move(request));
        }
        const std::vector<engine::GenerationResult> generations = generator.generate(requests, sampling);
        engine::throwIfRejected(generations);
        std::vector<std::vector<std::int64_t>> responses;
        for (const auto& generation : generations) {
            responses.push_back(generation.tokens);
        }
        // q_i compares the plain (temperature 1) distributions of student and teacher on the same prefixes.
        engine::ScoreOptions scoring;
        scoring.batchSize = options.batchSize;
        const std::vector<at::Tensor> studentLogProbs = engine::scoreSequences(student, promptIds, responses, scoring);
        const std::vector<at::Tensor> teacherLogProbs = engine::scoreSequences(teacher, promptIds, responses, scoring);
        for (std::size_t j = 0; j < generations.size(); ++j) {
            const io::Prompt& prompt = prompts.prompts[begin + j];
            store::ProblemQuality problem;
            problem.problemId = prompt.id;
            const std::int64_t tokens = studentLogProbs[j].size(0);
            if (tokens > 0) {
                const at::Tensor ls = studentLogProbs[j].to(at::kDouble);
                const at::Tensor lt = teacherLogProbs[j].to(at::kDouble);
                const at::Tensor kl = (ls.exp() * (ls - lt)).sum(-1); // [T]
                problem.quality = kl.mean().item<double>();
            }
            if (!std::isfinite(problem.quality)) {
                throw Error("quality of problem '" + prompt.id + "' is not finite (the student or the teacher "
                    "produced NaN or infinite log-probabilities)");
            }
            const std::string text = tokenizer.generatedText(generations[j].tokens);
            problem.correct = !prompt.answer.empty() && io::verifyAnswer(text, prompt.answer);
            qualitySum += problem.quality;
            correct += problem.correct ? 1 : 0;
            result.tokens += tokens;
            result.problems.push_back(std::move(problem));
        }
    }
    result.quality = qualitySum / static_cast<double>(count);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(count);
    if (progress) {
        progress->update(1.0, "evaluating quality");
    }
    return result;
}

TimeToQuality timeToQuality(const store::RunStore& store, std::int64_t runId, double targetQuality)
{
    if (!store.run(runId)) {
        throw StoreError(store.path(), "has no run with id " + std::to_string(runId));
    }
    TimeToQuality result;
    const std::vector<store::EvaluationSummary> all = store::evaluations(store, runId);
    result.evaluations = static_cast<std::int64_t>(all.size());
    for (const auto& evaluation : all) {
        if (!result.bestQuality || evaluation.quality < *result.bestQuality) {
            result.bestQuality = evaluation.quality;
        }
        if (!result.reached && evaluation.quality <= targetQuality) {
            result.reached = true;
            result.step = evaluation.step;
            result.quality = evaluation.quality;
        }
    }
    if (result.reached && result.step > 0) {
        store::Statement s(store.handle(), "SELECT wall_time_s FROM step_metrics WHERE run_id = ? AND step = ?");
        s.bind(1, runId);
        s.bind(2, result.step);
        if (s.step()) {
            result.wallSeconds = s.optionalReal(0).value_or(0.0);
        }
    }
    return result;
}

} // namespace mismatch::train

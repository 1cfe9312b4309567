#include "core/train/zoo.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/io/arith_task.h"
#include "core/io/char_tokenizer_json.h"
#include "core/io/prompt_set.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/train/adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace fs = std::filesystem;

namespace mismatch::train {

model::ModelConfig demoModelConfig(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kvHeads,
    std::int64_t intermediate)
{
    model::ModelConfig c;
    c.architecture = model::Architecture::Qwen2;
    c.vocabSize = io::kDemoVocabularySize;
    c.hiddenSize = hidden;
    c.intermediateSize = intermediate;
    c.numLayers = layers;
    c.numHeads = heads;
    c.numKeyValueHeads = kvHeads;
    c.headDim = hidden / heads;
    c.rmsNormEps = 1e-6;
    c.ropeTheta = 10000.0;
    c.maxPositionEmbeddings = 128;
    c.tieWordEmbeddings = true;
    c.attentionBias = true;
    c.eosTokenIds = {io::kDemoEndOfTextId};
    c.torchDtype = "float32";
    return c;
}

namespace {

// One training batch: prompt + response + EOS, right-padded; targets are -100 outside the response so that
// the loss is the response-token cross-entropy (the prompt is random and carries nothing to learn).
struct Batch {
    at::Tensor ids;     // [B, T]
    at::Tensor mask;    // [B, T]
    at::Tensor targets; // [B, T] next-token targets, -100 = ignored
};

Batch makeBatch(io::ArithGenerator& generator, const model::Tokenizer& tokenizer, std::int64_t batchSize)
{
    std::vector<std::vector<std::int64_t>> sequences;
    std::vector<std::size_t> promptLengths;
    std::size_t longest = 0;
    for (std::int64_t b = 0; b < batchSize; ++b) {
        const io::Prompt problem = generator.next();
        std::vector<std::int64_t> ids = tokenizer.encode(problem.prompt);
        promptLengths.push_back(ids.size());
        const std::vector<std::int64_t> response = tokenizer.encode(io::solveArith(problem.prompt));
        ids.insert(ids.end(), response.begin(), response.end());
        ids.push_back(io::kDemoEndOfTextId);
        longest = std::max(longest, ids.size());
        sequences.push_back(std::move(ids));
    }
    const auto B = static_cast<std::int64_t>(batchSize);
    const auto T = static_cast<std::int64_t>(longest);
    Batch batch;
    batch.ids = at::full({B, T}, io::kDemoEndOfTextId, at::kLong);
    batch.mask = at::zeros({B, T}, at::kLong);
    batch.targets = at::full({B, T}, -100, at::kLong);
    auto ids = batch.ids.accessor<std::int64_t, 2>();
    auto mask = batch.mask.accessor<std::int64_t, 2>();
    auto targets = batch.targets.accessor<std::int64_t, 2>();
    for (std::int64_t b = 0; b < B; ++b) {
        const auto& seq = sequences[static_cast<size_t>(b)];
        for (std::size_t t = 0; t < seq.size(); ++t) {
            ids[b][static_cast<std::int64_t>(t)] = seq[t];
            mask[b][static_cast<std::int64_t>(t)] = 1;
            // Position t predicts token t + 1; only response tokens (and the closing EOS) are targets.
            if (t + 1 < seq.size() && t + 1 >= promptLengths[static_cast<size_t>(b)]) {
                targets[b][static_cast<std::int64_t>(t)] = seq[t + 1];
            }
        }
    }
    return batch;
}

std::unordered_set<std::string> promptsOf(const std::string& path)
{
    std::unordered_set<std::string> prompts;
    if (fs::exists(path)) {
        for (const io::Prompt& p : io::loadPromptSet(path).prompts) {
            prompts.insert(p.prompt);
        }
    }
    return prompts;
}

ZooModelReport trainOne(const ZooModelSpec& spec, const ZooOptions& options, const model::Tokenizer& tokenizer,
    Progress& progress, double progressStart, double progressSpan)
{
    const auto started = std::chrono::steady_clock::now();
    at::manual_seed(spec.seed);
    model::TransformerWeights weights = model::randomWeights(spec.config, spec.seed, 0.02);
    std::vector<at::Tensor> parameters = weights.parameters();
    model::Transformer network(spec.config, weights);
    AdamW optimizer(parameters, {spec.learningRate, 0.9, 0.98, 1e-8, spec.weightDecay});

    io::ArithOptions data;
    data.seed = spec.seed * 7919 + 17;
    data.unique = false;
    data.idPrefix = "train-";
    for (const char* split : {"arith-heldout.jsonl", "arith-probe.jsonl"}) {
        const auto excluded = promptsOf((fs::path(options.promptDirectory) / split).string());
        data.excludePrompts.insert(excluded.begin(), excluded.end());
    }
    io::ArithGenerator generator(data);

    std::deque<double> recentLosses;
    for (std::int64_t step = 0; step < spec.steps; ++step) {
        progress.checkCancelled();
        const Batch batch = makeBatch(generator, tokenizer, spec.batchSize);
        const at::Tensor logits = network.forward(batch.ids, batch.mask);
        const at::Tensor loss = at::cross_entropy_loss(
            logits.reshape({-1, logits.size(-1)}), batch.targets.reshape({-1}), {}, at::Reduction::Mean, -100);
        optimizer.zeroGrad();
        loss.backward();
        clipGradientNorm(parameters, spec.gradientClip);
        optimizer.step(warmupCosineLearningRate(step, spec.warmupSteps, spec.steps, spec.learningRate));
        recentLosses.push_back(loss.item<double>());
        if (recentLosses.size() > 20) {
            recentLosses.pop_front();
        }
        if (step % 10 == 0 || step + 1 == spec.steps) {
            const double meanLoss = std::accumulate(recentLosses.begin(), recentLosses.end(), 0.0) /
                                    static_cast<double>(recentLosses.size());
            progress.update(progressStart + progressSpan * static_cast<double>(step + 1) / static_cast<double>(spec.steps),
                "training " + spec.name + " step " + std::to_string(step + 1) + "/" + std::to_string(spec.steps) +
                    " loss " + std::to_string(meanLoss).substr(0, 6));
        }
    }

    ZooModelReport report;
    report.name = spec.name;
    report.directory = (fs::path(options.outputDirectory) / spec.name).string();
    report.parameters = weights.numel();
    report.steps = spec.steps;
    report.finalLoss = std::accumulate(recentLosses.begin(), recentLosses.end(), 0.0) /
                       static_cast<double>(std::max<size_t>(1, recentLosses.size()));
    report.trainSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    // Write to a temporary directory, then swap it in: a cancelled or failed build never leaves half a model.
    const fs::path target(report.directory);
    const fs::path staging = target.string() + ".partial";
    fs::remove_all(staging);
    fs::create_directories(staging);
    writeDemoModelDirectory(staging.string(), spec.config, weights.clone());

    progress.update(progressStart + progressSpan, "evaluating " + spec.name);
    const std::string heldout = (fs::path(options.promptDirectory) / "arith-heldout.jsonl").string();
    report.evaluated = options.evaluationProblems;
    report.heldoutAccuracy = greedyAccuracy(staging.string(), heldout, options.evaluationProblems);

    nlohmann::json record = {{"name", spec.name}, {"command", "mismatch zoo build"}, {"seed", spec.seed},
        {"steps", spec.steps}, {"batch_size", spec.batchSize}, {"learning_rate", spec.learningRate},
        {"warmup_steps", spec.warmupSteps}, {"weight_decay", spec.weightDecay}, {"gradient_clip", spec.gradientClip},
        {"parameters", report.parameters}, {"final_loss", report.finalLoss},
        {"heldout_accuracy", report.heldoutAccuracy}, {"heldout_evaluated", report.evaluated},
        {"train_seconds", report.trainSeconds}, {"threads", at::get_num_threads()}};
    writeFileAtomically((staging / "training.json").string(), record.dump(2) + "\n");
    fs::remove_all(target);
    fs::rename(staging, target);
    return report;
}

}  // namespace

void writeDemoModelDirectory(const std::string& directory, const model::ModelConfig& config,
    const model::TransformerWeights& weights)
{
    fs::create_directories(directory);
    writeFileAtomically((fs::path(directory) / "config.json").string(), model::configToJson(config));
    writeFileAtomically((fs::path(directory) / "tokenizer.json").string(), io::demoTokenizerJson());
    model::saveWeights(directory, weights, model::DType::F32);
}

ZooOptions defaultZooOptions(const std::string& resourceDirectory)
{
    ZooOptions options;
    options.outputDirectory = (fs::path(resourceDirectory) / "models").string();
    options.promptDirectory = (fs::path(resourceDirectory) / "prompts").string();
    ZooModelSpec teacher;
    teacher.name = "arith-teacher";
    teacher.config = demoModelConfig(192, 3, 4, 2, 512);
    teacher.steps = 2000;
    teacher.batchSize = 48;
    teacher.learningRate = 3e-3;
    teacher.warmupSteps = 80;
    teacher.seed = 20261108;
    ZooModelSpec student;
    student.name = "arith-student";
    student.config = demoModelConfig(128, 2, 4, 2, 256);
    // 500 steps leave the student clearly below the teacher but far from hopeless (about a quarter of the held-out
    // problems right, greedy), so that on-policy distillation has much to teach it within the standard run
    // (resources/runs/demo-opd.yaml) and RL objectives earn rewards at temperature 1 (docs/training-and-calibration.md).
    student.steps = 500;
    student.batchSize = 64;
    student.learningRate = 3e-3;
    student.warmupSteps = 20;
    student.seed = 20261109;
    options.models = {teacher, student};
    return options;
}

std::vector<ZooModelReport> buildZoo(const ZooOptions& options, Progress& progress)
{
    const model::Tokenizer tokenizer = model::Tokenizer::fromJson(io::demoTokenizerJson(), "demo tokenizer.json");
    std::int64_t totalSteps = 0;
    for (const auto& spec : options.models) {
        totalSteps += spec.steps;
    }
    std::vector<ZooModelReport> reports;
    double done = 0.0;
    for (const auto& spec : options.models) {
        const double span = static_cast<double>(spec.steps) / static_cast<double>(std::max<std::int64_t>(1, totalSteps));
        reports.push_back(trainOne(spec, options, tokenizer, progress, done, span));
        done += span;
    }
    progress.update(1.0, "done");
    return reports;
}

double greedyAccuracy(const std::string& modelDirectory, const std::string& promptSetPath, int count, int batchSize)
{
    at::NoGradGuard noGrad;
    const model::ModelConfig config = model::loadConfig((fs::path(modelDirectory) / "config.json").string());
    const model::Transformer network(config, model::loadWeights(modelDirectory, config));
    const model::Tokenizer tokenizer = model::Tokenizer::fromFile((fs::path(modelDirectory) / "tokenizer.json").string());
    const io::PromptSet set = io::loadPromptSet(promptSetPath);
    const std::int64_t eos = config.eosTokenIds.empty() ? io::kDemoEndOfTextId : config.eosTokenIds.front();
    const int total = std::min<int>(count, static_cast<int>(set.prompts.size()));
    constexpr int kMaxNewTokens = 48;
    int correct = 0;
    for (int first = 0; first < total; first += batchSize) {
        const int rows = std::min(batchSize, total - first);
        // Left-pad the prompts so that every row's next token is at the last position.
        std::vector<std::vector<std::int64_t>> prompts;
        std::size_t longest = 0;
        for (int r = 0; r < rows; ++r) {
            prompts.push_back(tokenizer.encode(set.prompts[static_cast<size_t>(first + r)].prompt));
            longest = std::max(longest, prompts.back().size());
        }
        at::Tensor ids = at::full({rows, static_cast<std::int64_t>(longest)}, eos, at::kLong);
        at::Tensor mask = at::zeros({rows, static_cast<std::int64_t>(longest)}, at::kLong);
        for (int r = 0; r < rows; ++r) {
            const auto& p = prompts[static_cast<size_t>(r)];
            const auto offset = static_cast<std::int64_t>(longest - p.size());
            for (std::size_t t = 0; t < p.size(); ++t) {
                ids[r][offset + static_cast<std::int64_t>(t)] = p[t];
                mask[r][offset + static_cast<std::int64_t>(t)] = 1;
            }
        }
        model::DenseKvCache cache(config.numLayers);
        std::vector<std::vector<std::int64_t>> responses(static_cast<size_t>(rows));
        std::vector<bool> finished(static_cast<size_t>(rows), false);
        at::Tensor fullMask = mask;
        at::Tensor logits = network.forward(ids, fullMask, at::Tensor(), &cache);
        for (int t = 0; t < kMaxNewTokens; ++t) {
            const at::Tensor next = logits.select(1, logits.size(1) - 1).argmax(-1);  // [rows]
            bool all = true;
            for (int r = 0; r < rows; ++r) {
                if (finished[static_cast<size_t>(r)]) {
                    continue;
                }
                const std::int64_t token = next[r].item<std::int64_t>();
                if (token == eos) {
                    finished[static_cast<size_t>(r)] = true;
                } else {
                    responses[static_cast<size_t>(r)].push_back(token);
                }
                all = all && finished[static_cast<size_t>(r)];
            }
            if (all) {
                break;
            }
            fullMask = at::cat({fullMask, at::ones({rows, 1}, at::kLong)}, 1);
            logits = network.forward(next.unsqueeze(1), fullMask, at::Tensor(), &cache);
        }
        for (int r = 0; r < rows; ++r) {
            const std::string text = tokenizer.decode(responses[static_cast<size_t>(r)]);
            correct += io::verifyAnswer(text, set.prompts[static_cast<size_t>(first + r)].answer) ? 1 : 0;
        }
    }
    return total ? static_cast<double>(correct) / total : 0.0;
}

}  // namespace mismatch::train

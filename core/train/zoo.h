#pragma once
// `mismatch zoo build`: trains the built-in demo pair (arith-teacher, arith-student) from scratch on the
// `arith` task, seeded and reproducible, and writes them as Hugging Face model directories (config.json,
// model.safetensors, tokenizer.json) plus training.json recording how each was made.
#include "core/common/progress.h"
#include "core/model/config.h"
#include "core/model/transformer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mismatch::train {

struct ZooModelSpec {
    std::string name;            // directory name under the output directory
    model::ModelConfig config;
    std::int64_t steps = 0;      // optimizer steps
    std::int64_t batchSize = 64; // sequences per step
    double learningRate = 3e-3;
    std::int64_t warmupSteps = 50;
    double weightDecay = 0.01;
    double gradientClip = 1.0;
    std::uint64_t seed = 1;
};

struct ZooOptions {
    std::string outputDirectory;   // e.g. resources/models
    std::string promptDirectory;   // resources/prompts: heldout and probe problems are excluded from training
    std::vector<ZooModelSpec> models;
    int evaluationProblems = 512;  // first N held-out problems for the reported accuracy
};

struct ZooModelReport {
    std::string name;
    std::string directory;
    std::int64_t parameters = 0;
    std::int64_t steps = 0;
    double finalLoss = 0.0;         // mean response-token cross-entropy over the last 20 steps (nats/token)
    double heldoutAccuracy = 0.0;   // greedy exact-match on the held-out problems
    int evaluated = 0;
    double trainSeconds = 0.0;
};

// A Qwen2-style configuration over the demo tokenizer (258 ids, EOS <|endoftext|>): QKV bias, tied
// embeddings, head dim hidden / heads. The demo pair and the tests' tiny models use it.
model::ModelConfig demoModelConfig(std::int64_t hidden, std::int64_t layers, std::int64_t heads, std::int64_t kvHeads,
    std::int64_t intermediate);
// Writes a model directory (config.json, tokenizer.json = the demo tokenizer, model.safetensors in F32).
void writeDemoModelDirectory(const std::string& directory, const model::ModelConfig& config,
    const model::TransformerWeights& weights);

// The demo pair's specifications: a Qwen2-style teacher (hidden 192, 3 layers, GQA 4/2) trained long enough to
// solve the held-out problems, and a smaller student (hidden 128, 2 layers) trained a quarter as long (500 steps).
ZooOptions defaultZooOptions(const std::string& resourceDirectory);

std::vector<ZooModelReport> buildZoo(const ZooOptions& options, Progress& progress);

// Greedy exact-match accuracy of a model directory on prompts "Q:...\n" (answers compared with the arith
// verifier), batched, with a dense KV cache.
double greedyAccuracy(const std::string& modelDirectory, const std::string& promptSetPath, int count, int batchSize = 64);

}  // namespace mismatch::train

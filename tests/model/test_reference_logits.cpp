// `mismatch logits`: batched, padded scoring of a prompt set written to safetensors must give, for each
// prompt, exactly the rows an unbatched forward of that prompt alone gives, normalized over the vocabulary.
#include "app/cli/cli.h"
#include "core/io/char_tokenizer_json.h"
#include "core/io/prompt_set.h"
#include "core/model/safetensors.h"
#include "core/model/tokenizer.h"
#include "core/model/transformer.h"
#include "core/train/zoo.h"
#include "tests/common/golden_json.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace mismatch;

namespace {
constexpr double kBatchingTolerance = 1e-5;  // padding and batching change only summation order
constexpr double kNormalizationTolerance = 1e-4;
}

class TestReferenceLogits : public QObject {
    Q_OBJECT
private slots:
    void batchedFileEqualsSinglePromptForward();
    void missingModelIsAnError();
};

void TestReferenceLogits::batchedFileEqualsSinglePromptForward()
{
    QTemporaryDir dir;
    const std::string modelDir = dir.path().toStdString() + "/model";
    const model::ModelConfig config = train::demoModelConfig(32, 2, 4, 2, 48);
    const model::TransformerWeights weights = model::randomWeights(config, 77, 0.2);
    train::writeDemoModelDirectory(modelDir, config, weights);

    io::PromptSet set;
    set.prompts = {{"a", "Q:3+4*2\n", "11"}, {"b", "Q:12-5\n", "7"}, {"c", "Q:(1+2)*3-4+5\n", "10"}};
    const std::string prompts = dir.path().toStdString() + "/p.jsonl";
    io::writePromptSet(set, prompts);
    const std::string out = dir.path().toStdString() + "/logits.safetensors";
    std::ostringstream stdoutText, stderrText;
    QCOMPARE(cli::run({"mismatch", "--json", "logits", "--model", modelDir, "--prompts", prompts, "--out", out, "--with-answer"},
                 stdoutText, stderrText),
        0);
    // The --json summary's shape (tests/cli/fixtures/logits.json); its positions are counted below.
    const nlohmann::json summary = nlohmann::json::parse(stdoutText.str());
    const std::vector<std::string> differences
        = test::goldenDifferences(summary, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/logits.json");
    QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
    std::int64_t positions = 0;

    const auto file = model::SafetensorsFile::open(out);
    QCOMPARE(QString::fromStdString(file->metadata().at("prompt_ids")), QStringLiteral("[\"a\",\"b\",\"c\"]"));
    const model::Transformer network(config, weights);
    const model::Tokenizer tokenizer = model::Tokenizer::fromJson(io::demoTokenizerJson(), "demo");
    model::ForwardOptions options;
    options.logProbs = true;
    for (int i = 0; i < 3; ++i) {
        const auto& p = set.prompts[static_cast<size_t>(i)];
        const std::vector<std::int64_t> ids = tokenizer.encode(p.prompt + p.answer);
        positions += static_cast<std::int64_t>(ids.size());
        const at::Tensor alone = network.forward(at::tensor(ids, at::kLong).unsqueeze(0),
            at::ones({1, static_cast<std::int64_t>(ids.size())}, at::kLong), options)[0];
        const at::Tensor stored = file->load("log_probs." + std::to_string(i));
        QCOMPARE(stored.sizes(), alone.sizes());
        QVERIFY((stored - alone).abs().max().item<double>() < kBatchingTolerance);
        QVERIFY((stored.logsumexp(-1)).abs().max().item<double>() < kNormalizationTolerance);
        const at::Tensor storedIds = file->load("input_ids." + std::to_string(i));
        QVERIFY(at::equal(storedIds.to(at::kLong), at::tensor(ids, at::kLong)));
    }
    QCOMPARE(summary.at("positions").get<std::int64_t>(), positions);
    QCOMPARE(file->metadata().at("text"), std::string("prompt+answer"));
    QCOMPARE(file->metadata().at("precision"), std::string("fp32"));
}

void TestReferenceLogits::missingModelIsAnError()
{
    QTemporaryDir dir;
    std::ostringstream out, err;
    const int code = cli::run({"mismatch", "logits", "--model", dir.path().toStdString() + "/none", "--prompts",
                                  MISMATCH_SOURCE_DIR "/resources/prompts/arith-probe.jsonl", "--out",
                                  dir.path().toStdString() + "/x.safetensors"},
        out, err);
    QCOMPARE(code, 1);
    QVERIFY2(QString::fromStdString(err.str()).contains("/none"), err.str().c_str());
    QVERIFY(!QFile::exists(dir.path() + "/x.safetensors"));
}

MISMATCH_TEST_GUILESS_MAIN(TestReferenceLogits)
#include "test_reference_logits.moc"

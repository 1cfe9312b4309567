// `mismatch breakdown` end to end in-process on a tiny random model: --json with a candidates file (its fields and
// what the workspace holds), the human table, bad input (exit 1) and bad arguments (exit 2), and `mismatch report`
// of the breakdown run (its section, plots and tables). A QApplication (offscreen) for the report's views.
#include "tests/common/cli_runner.h"
#include "tests/common/test_main.h"
#include "tests/common/tiny_student.h"

#include "core/model/transformer.h"
#include "core/store/breakdown_store.h"
#include "core/store/run_store.h"
#include "core/train/zoo.h"

#include <QApplication>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace mismatch;
using test::parseJson;
using test::runCli;

class TestBreakdownCli : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(dir_.isValid());
        model_ = (dir_.path() + "/student").toStdString();
        test::writeTinyStudent(model_);
        workspace_ = (dir_.path() + "/workspace").toStdString();
        probe_ = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-probe.jsonl";
        const std::string recipes = std::string(MISMATCH_SOURCE_DIR) + "/resources/recipes/";
        candidates_ = (dir_.path() + "/candidates.yaml").toStdString();
        std::ofstream(candidates_) << "- {name: bf16}\n"
                                   << "- {name: kv-noisy, recipe: " << recipes << "fp8-kv.yaml, noise: 0.02}\n";
    }

    void jsonTableAndStore()
    {
        const auto result = runCli({"--workspace", workspace_, "--json", "breakdown", model_, "--candidates",
            candidates_, "--prompts", probe_, "--count", "4", "--max-tokens", "8", "--resamples", "300"});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        runId_ = json.at("run_id").get<std::int64_t>();
        QCOMPARE(json.at("candidates").size(), std::size_t(2));
        QCOMPARE(json.at("measurements").get<int>(), 4); // {}, {kv}, {noise}, {kv, noise}
        const nlohmann::json& kv = json.at("candidates").at(1);
        QCOMPARE(kv.at("candidate").get<std::string>(), std::string("kv-noisy"));
        QVERIFY(kv.at("sources") == nlohmann::json({"kv_cache", "noise"}));
        QVERIFY(kv.at("shapley").get<bool>());
        for (const char* method : {"add_one_in", "leave_one_out", "shapley"}) {
            QVERIFY2(kv.at("parts").at(method).size() >= 2, method);
        }
        const double excess = kv.at("total").at("estimate").get<double>() - kv.at("bf16_unit").at("estimate").get<double>();
        double shapley = 0.0;
        for (const auto& part : kv.at("parts").at("shapley")) {
            shapley += part.at("value").get<double>();
        }
        QVERIFY(std::fabs(shapley - excess) <= 1e-12);
        QCOMPARE(kv.at("subsets").size(), std::size_t(4));
        QCOMPARE(kv.at("subsets").at(3).at("estimators").at("estimators").size(), std::size_t(4));
        store::RunStore store = store::RunStore::open(workspace_ + "/workspace.db", store::OpenMode::OpenExisting);
        QCOMPARE(store::breakdowns(store, runId_).size(), std::size_t(2));
        QCOMPARE(store.run(runId_)->kind, std::string("breakdown"));

        const auto human = runCli({"--workspace", workspace_, "breakdown", model_, "--recipe",
            std::string(MISMATCH_SOURCE_DIR) + "/resources/recipes/fp8-kv.yaml", "--noise", "0.02", "--prompts", probe_,
            "--count", "4", "--max-tokens", "8", "--resamples", "300"});
        QVERIFY2(human.code == 0, human.err.c_str());
        for (const char* text : {"candidate fp8-kv", "add-one-in", "leave-one-out", "Shapley", "interaction",
                 "mult_prob_error", "by the engine's probability"}) {
            QVERIFY2(human.out.find(text) != std::string::npos, (std::string(text) + "\n" + human.out).c_str());
        }
    }

    void badInputAndArguments()
    {
        // A recipe that does not exist: bad input, nothing stored.
        const auto before = store::RunStore::open(workspace_ + "/workspace.db").listRuns().size();
        const auto missing = runCli({"--workspace", workspace_, "breakdown", model_, "--recipe",
            (dir_.path() + "/nope.yaml").toStdString(), "--prompts", probe_});
        QCOMPARE(missing.code, 1);
        QVERIFY2(missing.err.find("nope.yaml") != std::string::npos, missing.err.c_str());
        // Staleness without the older checkpoint: refused naming the step and the timeline.
        const auto stale = runCli(
            {"--workspace", workspace_, "breakdown", model_, "--staleness", "2", "--prompts", probe_, "--count", "2"});
        QCOMPARE(stale.code, 1);
        QVERIFY2(stale.err.find("step -2") != std::string::npos, stale.err.c_str());
        QCOMPARE(store::RunStore::open(workspace_ + "/workspace.db").listRuns().size(), before);
        // A candidates file with one-configuration options, and a Shapley limit out of range: bad arguments.
        QCOMPARE(runCli({"breakdown", model_, "--candidates", candidates_, "--noise", "0.1", "--prompts", probe_}).code, 2);
        QCOMPARE(runCli({"breakdown", model_, "--prompts", probe_, "--shapley-max", "7"}).code, 2);
    }

    void reportOfTheBreakdownRun()
    {
        const std::string out = (dir_.path() + "/report").toStdString();
        const auto result = runCli({"--workspace", workspace_, "--json", "report", std::to_string(runId_), "--out", out});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = parseJson(result.out);
        bool found = false;
        for (const auto& section : json.at("sections")) {
            if (section.at("title").get<std::string>().find("Mismatch breakdown") != std::string::npos) {
                found = true;
                // The stacked bars in nats and as shares of the total, by mu(y), by entropy.
                QCOMPARE(section.at("plots").size(), std::size_t(4));
                QCOMPARE(section.at("tables").size(), std::size_t(2)); // the parts, the estimators
                for (const auto& plot : section.at("plots")) {
                    QVERIFY(std::filesystem::file_size(out + "/" + plot.get<std::string>()) > 1000);
                }
            }
        }
        QVERIFY2(found, result.out.c_str());
    }

private:
    QTemporaryDir dir_;
    std::string model_;
    std::string workspace_;
    std::string probe_;
    std::string candidates_;
    std::int64_t runId_ = 0;
};

namespace {
// `mismatch report` renders plots: a widget application on the offscreen platform, with or without a display.
void offscreenPlatform()
{
    qputenv("QT_QPA_PLATFORM", "offscreen");
}
} // namespace

MISMATCH_TEST_MAIN_WITH(TestBreakdownCli, offscreenPlatform, nullptr)
#include "test_breakdown_cli.moc"

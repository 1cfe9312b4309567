// `mismatch zoo build|shape --json` (label slow: a one-step student build still evaluates 512 held-out problems, about
// a minute on 2 cores; the smallest real shape, qwen2.5-0.5b, is about 1 GB of BF16 random weights): each output's
// golden fixture (tests/cli/fixtures/zoo-build.json, zoo-shape.json), its figures against the configuration, and the
// shape job run from a job file (`mismatch run`) writing the same tensors.
#include "core/jobs/job_file.h"
#include "core/model/safetensors.h"
#include "core/train/zoo.h"
#include "core/train/zoo_shape.h"
#include "tests/common/cli_runner.h"
#include "tests/common/golden_json.h"
#include "tests/common/test_main.h"

#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

#include <ATen/ATen.h>

using namespace mismatch;
using test::CliResult;
using test::parseJson;
using test::runCli;

class TestZooCli : public QObject {
    Q_OBJECT

private slots:
    // `mismatch zoo build --json` (tests/cli/fixtures/zoo-build.json): the student alone, one optimizer step (the real
    // build takes half an hour), its record and its directory.
    void zooBuildJson()
    {
        QTemporaryDir dir;
        const std::string out = dir.path().toStdString() + "/models";
        const CliResult r
            = runCli({"--json", "zoo", "build", "--only", "arith-student", "--student-steps", "1", "--out", out});
        QVERIFY2(r.code == 0, r.err.c_str());
        const nlohmann::json models = parseJson(r.out);
        const std::vector<std::string> differences
            = test::goldenDifferences(models, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/zoo-build.json");
        QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
        const train::ZooModelSpec student = train::defaultZooOptions(MISMATCH_SOURCE_DIR "/resources").models.at(1);
        QCOMPARE(models[0].at("parameters").get<std::int64_t>(), student.config.parameterCount());
        QCOMPARE(QString::fromStdString(models[0].at("directory").get<std::string>()),
            QString::fromStdString(out + "/arith-student"));
        QVERIFY(QFile::exists(QString::fromStdString(out + "/arith-student/training.json")));
        QVERIFY(!QFile::exists(QString::fromStdString(out + "/arith-teacher")));
        // An unknown model is an argument error; nothing is written.
        QCOMPARE(runCli({"zoo", "build", "--only", "arith-tutor", "--out", dir.path().toStdString() + "/x"}).code, 2);
        QVERIFY(!QFile::exists(dir.path() + "/x"));
    }

    void shapeJsonAndJobFile()
    {
        QTemporaryDir dir;
        const std::string directory = dir.path().toStdString() + "/qwen";
        const auto r = runCli({"--json", "zoo", "shape", "qwen2.5-0.5b", directory, "--seed", "3"});
        QVERIFY2(r.code == 0, r.err.c_str());
        const nlohmann::json json = parseJson(r.out);
        const std::vector<std::string> differences
            = test::goldenDifferences(json, MISMATCH_SOURCE_DIR "/tests/cli/fixtures/zoo-shape.json");
        QVERIFY2(differences.empty(), test::joinDifferences(differences).c_str());
        const model::ModelConfig& config = train::modelShape("qwen2.5-0.5b").config;
        QCOMPARE(json.at("parameters").get<std::int64_t>(), config.parameterCount());
        QCOMPARE(json.at("bytes").get<std::int64_t>(), 2 * config.parameterCount());

        // The job file of the same spec writes the same random tensors (seeded per tensor).
        jobs::JobSpec spec("zoo_shape");
        const std::string again = dir.path().toStdString() + "/again";
        spec.set("shape", "qwen2.5-0.5b").set("directory", again).set("seed", 3);
        const std::string file = dir.path().toStdString() + "/shape.job.yaml";
        jobs::writeJobFile(file, spec);
        const auto run = runCli({"--workspace", dir.path().toStdString() + "/ws", "--json", "run", file});
        QVERIFY2(run.code == 0, run.err.c_str());
        const nlohmann::json result = parseJson(run.out).at("steps").at(0).at("result");
        QCOMPARE(result.at("directory").get<std::string>(), again);
        QCOMPARE(result.at("shards"), json.at("shards"));
        const std::string shard = "/" + json.at("shards").at(0).get<std::string>();
        const auto a = model::SafetensorsFile::open(directory + shard);
        const auto b = model::SafetensorsFile::open(again + shard);
        const std::string probe = "model.layers.23.mlp.down_proj.weight";
        QVERIFY(at::equal(a->load(probe), b->load(probe)));
    }
};

MISMATCH_TEST_GUILESS_MAIN(TestZooCli)
#include "test_zoo_cli.moc"

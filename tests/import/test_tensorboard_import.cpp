// TensorBoard event files (core/io/tensorboard_events.h) and their import (`mismatch import tensorboard`). The
// files are written here by an encoder of the formats written from their descriptions, independently of the
// reader: TFRecord framing (tensorflow/core/lib/io/record_writer.cc: uint64 length, masked CRC-32C of it, data,
// masked CRC-32C of the data; masked = rotate right 15 + 0xa282ead8), tensorflow/core/util/event.proto (Event:
// wall_time 1, step 2, file_version 3, summary 5), tensorflow/core/framework/summary.proto (Summary.value 1;
// Value: tag 1, simple_value 2, histo 5, tensor 8) and tensor.proto (dtype 1, tensor_shape 2, tensor_content 4,
// float_val 5, double_val 6). The CRC is checked against the published CRC-32C check values (RFC 3720 B.4 and the
// "123456789" check value 0xE3069283) with a bitwise loop, not the reader's table. The tags are those NeMo-RL's
// tensorboard logger writes (nemo_rl/algorithms/loss_functions.py: train/token_mult_prob_error,
// train/gen_kl_error, ...) and verl's (its tensorboard backend logs the file logger's keys as tags).
#include "core/common/error.h"
#include "core/io/import_follow.h"
#include "core/io/import_log.h"
#include "core/store/import_store.h"
#include "core/store/run_store.h"
#include "core/io/tensorboard_events.h"
#include "tests/common/cli_runner.h"
#include "tests/common/tensorboard_writer.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>

using namespace mismatch;

using namespace mismatch::test::tensorboard;

class TestTensorBoardImport : public QObject {
    Q_OBJECT

private slots:
    void crcMatchesThePublishedCheckValues()
    {
        const auto crc = [](const std::string& text) {
            return io::crc32c(reinterpret_cast<const unsigned char*>(text.data()), text.size());
        };
        QCOMPARE(crc("123456789"), 0xE3069283u);
        QCOMPARE(crc(std::string(32, '\0')), 0x8A9136AAu); // RFC 3720 B.4
        QCOMPARE(crc(std::string(32, '\xFF')), 0x62A8AB43u);
        std::string ascending;
        for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
        QCOMPARE(crc(ascending), 0x46DD794Eu);
        QCOMPARE(bitwiseCrc32c("123456789"), 0xE3069283u); // the test's own encoder agrees
    }

    void readsScalarsAndReportsBadRecords()
    {
        std::string file = record(key(1, 1) + doubleBits(1.7e9) + lengthDelimited(3, "brain.Event:2"));
        file += record(eventBytes(1,
            simpleValue("train/token_mult_prob_error", 1.25f) + floatTensorValue("train/gen_kl_error", 0.001f)
                + histogramValue("train/logprob_histogram")));
        file += record(eventBytes(2, doubleContentValue("rollout_corr/kl", 0.0123456789)));
        std::string corrupt = record(eventBytes(3, simpleValue("train/loss", 7.0f)));
        corrupt[corrupt.size() - 6] ^= 0x01; // a byte of the data: its CRC no longer matches
        file += corrupt;
        const std::string last = record(eventBytes(4, simpleValue("train/loss", 0.5f)));
        file += last.substr(0, last.size() - 3); // a writer still writing
        const io::TensorBoardEvents events = io::parseTensorBoardEvents(file);
        QCOMPARE(events.records, std::int64_t(4)); // the truncated fifth is not framed
        QCOMPARE(events.summaryRecords, std::int64_t(2));
        QCOMPARE(events.nonScalarValues, std::int64_t(1));
        QCOMPARE(events.scalars.size(), std::size_t(3));
        QCOMPARE(events.scalars[0].tag, std::string("train/token_mult_prob_error"));
        QCOMPARE(events.scalars[0].value, 1.25); // exact in a float
        QCOMPARE(events.scalars[0].step, std::int64_t(1));
        QCOMPARE(events.scalars[0].record, std::int64_t(2));
        QCOMPARE(events.scalars[0].wallTime, 1.7e9);
        QCOMPARE(events.scalars[1].value, static_cast<double>(0.001f));
        QCOMPARE(events.scalars[2].value, 0.0123456789); // a double, bit for bit
        QCOMPARE(events.scalars[2].step, std::int64_t(2));
        QCOMPARE(events.problems.size(), std::size_t(2));
        QCOMPARE(events.problems[0].record, std::int64_t(4));
        QVERIFY(events.problems[0].reason.find("data CRC") != std::string::npos);
        QCOMPARE(events.problems[1].record, std::int64_t(5));
        QVERIFY(events.problems[1].reason.find("past the end of the file") != std::string::npos);
        QCOMPARE(events.problems[1].offset, static_cast<std::uint64_t>(file.size() - (last.size() - 3)));

        // Not an event file at all: the first length CRC fails and reading stops there.
        const io::TensorBoardEvents text = io::parseTensorBoardEvents("{\"step\": 1, \"data\": {}}\n");
        QCOMPARE(text.records, std::int64_t(0));
        QCOMPARE(text.problems.size(), std::size_t(1));
        QVERIFY(text.problems[0].reason.find("not a TFRecord event file") != std::string::npos);
        // A framed record whose protobuf is cut: skipped, named.
        const io::TensorBoardEvents cut = io::parseTensorBoardEvents(record(eventBytes(1, simpleValue("a", 1.0f)).substr(0, 15)));
        QCOMPARE(cut.problems.size(), std::size_t(1));
        QVERIFY(cut.problems[0].reason.find("malformed") != std::string::npos);
    }

    void importsNemoRlAndVerlTags()
    {
        QTemporaryDir dir;
        const std::string path = (dir.path() + "/events.out.tfevents.1700000000.host").toStdString();
        std::string file = record(key(1, 1) + doubleBits(1.7e9) + lengthDelimited(3, "brain.Event:2"));
        file += record(eventBytes(1,
            simpleValue("train/token_mult_prob_error", 1.25f) + simpleValue("train/gen_kl_error", 0.5f)
                + simpleValue("train/loss", std::numeric_limits<float>::quiet_NaN())
                + simpleValue("train/some_other_metric", 3.0f)));
        file += record(eventBytes(2, simpleValue("train/reward", 0.75f) + simpleValue("rollout_corr/kl", 0.25f)));
        file += record(eventBytes(2, simpleValue("train/reward", 0.875f))); // a second record of step 2: merged
        std::ofstream(path, std::ios::binary) << file;

        const io::ImportedLog log = io::importLog(io::LogSource::TensorBoard, path);
        QCOMPARE(log.linesRead, std::int64_t(3));
        QCOMPARE(log.steps.size(), std::size_t(2));
        QCOMPARE(log.steps[0].step, std::int64_t(1));
        const nlohmann::json extras = nlohmann::json::parse(log.steps[0].extrasJson);
        QCOMPARE(extras.at("mult_prob_error").get<double>(), 1.25);
        QCOMPARE(extras.at("gen_kl").get<double>(), 0.5);
        QVERIFY(!log.steps[0].loss); // NaN: dropped, reported
        QCOMPARE(log.dropped.size(), std::size_t(1));
        QCOMPARE(log.dropped[0].key, std::string("train/loss"));
        QCOMPARE(log.dropped[0].line, std::int64_t(2)); // record 2
        QCOMPARE(*log.steps[1].reward, 0.875); // the later record wins, reported as a conflict
        QCOMPARE(log.conflicts.size(), std::size_t(1));
        QCOMPARE(*log.steps[1].k1, 0.25); // verl's tag read as verl's k1
        QCOMPARE(log.linesMerged, std::int64_t(1));
        QCOMPARE(log.unmappedKeys, std::vector<std::string> {"train/some_other_metric"});
        bool named = false;
        for (const io::MappedMetric& metric : log.metrics) {
            if (metric.key == "train/token_mult_prob_error") {
                named = metric.measure == "mult_prob_error"
                    && metric.estimator.find("exp(|log mu(y) - log pi(y)|)") != std::string::npos;
            }
        }
        QVERIFY(named);

        // Through the command: the run is stored with its source.
        const std::string workspace = (dir.path() + "/ws").toStdString();
        const test::CliResult result = test::runCli(
            {"--workspace", workspace, "--json", "import", "tensorboard", path, "--map", "train/some_other_metric=k3"});
        QVERIFY2(result.code == 0, result.err.c_str());
        const nlohmann::json json = test::parseJson(result.out);
        QCOMPARE(json.at("source").get<std::string>(), std::string("tensorboard"));
        QCOMPARE(json.at("steps_imported").get<int>(), 2);
        QCOMPARE(json.at("lines_read").get<int>(), 3);

        // A file with no usable record is refused, naming the file and why.
        const std::string empty = (dir.path() + "/events.out.tfevents.empty").toStdString();
        std::ofstream(empty, std::ios::binary) << "not an event file";
        try {
            io::importLog(io::LogSource::TensorBoard, empty);
            QFAIL("a file without records was imported");
        } catch (const InputError& error) {
            const std::string what = error.what();
            QVERIFY2(what.find(empty) != std::string::npos && what.find("not a TFRecord event file") != std::string::npos,
                what.c_str());
        }
    }

    // verl's tensorboard logger writes its validation metrics as tags too: one data source's
    // val-core/<data source>/acc/mean@<N> is read as accuracy (see tests/import/test_import.cpp for verl's naming);
    // two data sources' are not: each is kept under its own name, accuracy/<data source>, and the import's notes name
    // them.
    void verlValidationAccuracyTags()
    {
        QTemporaryDir dir;
        const auto write = [&](const std::string& name, const std::string& secondSource) {
            std::string file = record(key(1, 1) + doubleBits(1.7e9) + lengthDelimited(3, "brain.Event:2"));
            file += record(eventBytes(0, simpleValue("val-core/openai/gsm8k/acc/mean@4", 0.375f)
                    + (secondSource.empty() ? std::string() : simpleValue(secondSource, 0.125f))));
            file += record(eventBytes(1, simpleValue("rollout_corr/kl", 0.25f)));
            file += record(eventBytes(2, simpleValue("rollout_corr/kl", 0.5f)
                    + simpleValue("val-core/openai/gsm8k/acc/mean@4", 0.625f)
                    + (secondSource.empty() ? std::string() : simpleValue(secondSource, 0.75f))));
            const std::string path = (dir.path() + "/" + QString::fromStdString(name)).toStdString();
            std::ofstream(path, std::ios::binary) << file;
            return path;
        };
        const io::ImportedLog one = io::importLog(io::LogSource::TensorBoard, write("events.out.tfevents.one", ""));
        QCOMPARE(one.steps.size(), std::size_t(3));
        QCOMPARE(*one.steps[0].accuracy, 0.375); // exact in a float
        QVERIFY(!one.steps[1].accuracy);
        QCOMPARE(*one.steps[2].accuracy, 0.625);
        QVERIFY(one.notes.empty());
        bool named = false;
        for (const io::MappedMetric& metric : one.metrics) {
            if (metric.measure == "accuracy") {
                named = metric.key == "val-core/openai/gsm8k/acc/mean@4"
                    && metric.estimator.find("mean over the 4 responses per problem of openai/gsm8k's acc")
                        != std::string::npos;
            }
        }
        QVERIFY(named);

        const std::string other = "val-core/lighteval/MATH/acc/mean@4";
        const io::ImportedLog two = io::importLog(io::LogSource::TensorBoard, write("events.out.tfevents.two", other));
        QCOMPARE(two.steps.size(), std::size_t(3)); // step 0, which holds only the two accuracies, is read through them
        for (const store::StepMetrics& step : two.steps) QVERIFY(!step.accuracy);
        const nlohmann::json first = nlohmann::json::parse(two.steps[0].extrasJson);
        QCOMPARE(first.at("accuracy/lighteval/MATH").get<double>(), 0.125);
        QCOMPARE(first.at("accuracy/openai/gsm8k").get<double>(), 0.375);
        QCOMPARE(two.notes.size(), std::size_t(1));
        QVERIFY2(two.notes[0].find(other) != std::string::npos
                && two.notes[0].find("val-core/openai/gsm8k/acc/mean@4") != std::string::npos
                && two.notes[0].find("--map ") != std::string::npos,
            two.notes[0].c_str());
    }

    // An event file followed while its writer appends to it (core/io/import_follow.h), polled by a script that writes
    // between two polls: a record is read only once its length, data and CRCs are all written; a length whose CRC does
    // not match stops the reading (said once: the framing cannot be found again after it) until the file is rewritten,
    // which is then read from its start (a step logged again with its stored value is left as it is).
    void followReadsWholeRecordsOnly()
    {
        QTemporaryDir dir;
        store::RunStore store = store::RunStore::open((dir.path() + "/workspace.db").toStdString());
        const std::string path = (dir.path() + "/events.out.tfevents.1700000000.host").toStdString();
        const auto append = [&path](const std::string& bytes) {
            std::ofstream(path, std::ios::binary | std::ios::app) << bytes;
        };
        const std::string step1 = record(
            eventBytes(1, simpleValue("rollout_corr/kl", 0.25f) + simpleValue("train/token_mult_prob_error", 1.25f)));
        const std::string step2 = record(eventBytes(2, simpleValue("rollout_corr/kl", 0.5f)));
        const std::string step3 = record(eventBytes(3, simpleValue("rollout_corr/kl", 0.125f)));
        std::string broken = record(eventBytes(9, simpleValue("rollout_corr/kl", 4.0f)));
        broken[8] ^= 0x01; // a byte of the length's CRC
        std::vector<std::int64_t> storedAfter; // the run's steps seen by each action
        const auto steps = [&store] {
            const auto runs = store.listRuns();
            return runs.empty() ? std::size_t(0) : store.stepsAfter(runs.front().id).size();
        };
        std::vector<std::function<void()>> actions = {
            [&] { append(fileVersionRecord() + step1 + step2.substr(0, 20)); }, // step 2: its header and 8 bytes
            [&] {
                storedAfter.push_back(static_cast<std::int64_t>(steps()));
                append(step2.substr(20));
            },
            [&] {
                storedAfter.push_back(static_cast<std::int64_t>(steps()));
                append(broken + step3);
            },
            [&] {
                storedAfter.push_back(static_cast<std::int64_t>(steps()));
                // Rewritten by a restarted writer: a new file-version record (another wall time), steps 2 and 3.
                std::ofstream(path, std::ios::binary | std::ios::trunc)
                    << record(key(1, 1) + doubleBits(1.8e9) + lengthDelimited(3, "brain.Event:2")) + step2 + step3;
            },
        };
        std::size_t next = 0;
        double now = 0.0;
        io::FollowOptions options;
        options.idleExitSeconds = 3.0;
        options.clock = [&now] { return now; };
        options.wait = [&](double seconds) {
            now += seconds;
            if (next < actions.size()) {
                actions[next++]();
            }
        };
        Progress progress;
        const io::FollowResult result = io::followLog(store, io::LogSource::TensorBoard, path, options, progress);
        QCOMPARE(storedAfter, (std::vector<std::int64_t>{1, 2, 2})); // half a record is not read; nothing after the break
        QCOMPARE(result.truncations, std::int64_t(1));
        QCOMPARE(result.stepsStored, std::int64_t(3));
        QCOMPARE(result.stepsUnchanged, std::int64_t(1)); // step 2 of the rewritten file
        const auto stops = std::count_if(result.messages.begin(), result.messages.end(),
            [](const std::string& message) { return message.find("reading stops at byte") != std::string::npos; });
        QCOMPARE(stops, std::ptrdiff_t(1));
        const std::vector<store::StepMetrics> stored = store.stepsAfter(result.runId);
        QCOMPARE(stored.size(), std::size_t(3));
        std::map<std::int64_t, double> k1;
        for (const store::StepMetrics& step : stored) k1[step.step] = *step.k1;
        QCOMPARE(k1, (std::map<std::int64_t, double>{{1, 0.25}, {2, 0.5}, {3, 0.125}})); // exact in a float
        QCOMPARE(nlohmann::json::parse(stored.front().extrasJson).at("mult_prob_error").get<double>(), 1.25);
        QCOMPARE(store::externalRun(store, result.runId)->source, std::string("tensorboard"));
    }
};

MISMATCH_TEST_GUILESS_MAIN(TestTensorBoardImport)
#include "test_tensorboard_import.moc"

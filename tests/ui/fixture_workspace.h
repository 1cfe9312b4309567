#pragma once
// A fixture workspace for the UI tests, written through the store's own APIs (runs, steps, evaluations, models,
// prompt sets) and plain SQL inserts for the analysis tables, with values chosen so that each view has
// something a person can judge: a run with a rising mismatch, a sensitivity scan whose first and last layers
// stand out, a calibration with a bracket, admission decisions of every kind.
#include "core/store/evaluation_store.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"

#include <QDir>
#include <QString>
#include <QtTest>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

namespace fixture {

using namespace mismatch;

inline QString screenshotDirectory()
{
    const QString dir
        = qEnvironmentVariable("MISMATCH_TEST_OUTPUT", QStringLiteral(MISMATCH_BINARY_DIR "/test-output"));
    QDir().mkpath(dir);
    return dir;
}

inline QString screenshotPath(const QString& name)
{
    return screenshotDirectory() + "/" + name;
}

// Per-step measures of a run: mismatch rising slowly with a wobble, k1/k3 near it.
inline std::vector<store::StepMetrics> steps(int first, int count, double base, double bf16Unit)
{
    std::vector<store::StepMetrics> result;
    for (int s = first; s < first + count; ++s) {
        store::StepMetrics m;
        m.step = s;
        m.mismatchKl = base * (1.0 + 0.004 * s) + base * 0.15 * std::sin(s / 5.0);
        m.k1 = *m.mismatchKl * 0.93 + base * 0.05 * std::cos(s / 3.0);
        m.k3 = *m.mismatchKl * 0.97;
        m.bf16Multiple = *m.mismatchKl / bf16Unit;
        m.loss = 2.0 * std::exp(-s / 40.0) + 0.3;
        result.push_back(m);
    }
    return result;
}

inline std::vector<store::ProblemQuality> problems(double quality, int count)
{
    std::vector<store::ProblemQuality> result;
    for (int i = 0; i < count; ++i) {
        result.push_back({"p" + std::to_string(i), quality * (0.8 + 0.4 * ((i * 7) % 10) / 10.0), i % 3 == 0});
    }
    return result;
}

struct Ids {
    std::int64_t baselineRun = 0;
    std::int64_t fp8Run = 0;
    std::int64_t noisyRun = 0;
    std::int64_t scan = 0;
    std::int64_t calibration = 0;
};

// Sensitivity cells: added mismatch per (layer, group) of a 6-layer model, first and last layers and down_proj
// the most sensitive, plus the KV cache of each layer.
inline double addedMismatch(int layer, int group)
{
    const double edge = (layer == 0 || layer == 5) ? 3.0 : 1.0;
    const double down = group == 6 ? 2.5 : 1.0;
    return 0.0004 * edge * down * (1.0 + 0.1 * group);
}

inline Ids build(store::RunStore& store)
{
    Ids ids;
    const double unit = 0.00021; // BF16 unit, nats/token
    ids.baselineRun = store.beginRun({"opd-bf16-baseline", "train", "{}", std::nullopt});
    store.appendSteps(ids.baselineRun, steps(1, 120, unit, unit));
    ids.fp8Run = store.beginRun({"opd-fp8-kv", "train", "{}", std::nullopt});
    store.appendSteps(ids.fp8Run, steps(1, 120, 0.012, unit));
    ids.noisyRun = store.beginRun({"opd-noise-0.02", "train", "{}", std::nullopt});
    store.appendSteps(ids.noisyRun, steps(1, 80, 0.06, unit));
    for (int step : {0, 40, 80, 120}) {
        const double decay = std::exp(-step / 60.0);
        store::addEvaluation(store, ids.baselineRun, step, std::nullopt, problems(0.05 + 0.3 * decay, 20));
        store::addEvaluation(store, ids.fp8Run, step, std::nullopt, problems(0.052 + 0.3 * decay, 20));
        if (step <= 80) {
            store::addEvaluation(store, ids.noisyRun, step, std::nullopt, problems(0.07 + 0.3 * decay, 20));
        }
    }
    store.finishRun(ids.baselineRun, store::RunStatus::Finished);
    store.finishRun(ids.fp8Run, store::RunStatus::Finished);
    store.finishRun(ids.noisyRun, store::RunStatus::Cancelled, "cancelled at step 80");

    std::int64_t failing[2];
    int index = 0;
    for (const char* name : {"opd-noise-0.05", "opd-noise-0.08"}) {
        failing[index] = store.beginRun({name, "train", "{}", std::nullopt});
        store.appendSteps(failing[index], steps(1, 120, index == 0 ? 0.15 : 0.24, unit));
        store.finishRun(failing[index++], store::RunStatus::Finished);
    }

    sqlite3* db = store.handle();
    store::Transaction transaction(db);
    {
        store::Statement scan(db, "INSERT INTO sensitivity_scans (format, bf16_unit) VALUES ('fp8_e4m3/block128', ?)");
        scan.bind(1, unit).run();
        ids.scan = sqlite3_last_insert_rowid(db);
        store::Statement cell(db,
            "INSERT INTO sensitivity_cells (scan_id, layer, module_group, mismatch, added_mismatch, ci_low, ci_high) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)");
        const char* groups[] = {"q", "k", "v", "o", "gate", "up", "down", "kv"};
        for (int layer = 0; layer < 6; ++layer) {
            for (int g = 0; g < 8; ++g) {
                const double added = addedMismatch(layer, g);
                cell.reset();
                cell.bind(1, ids.scan)
                    .bind(2, layer)
                    .bind(3, groups[g])
                    .bind(4, unit + added)
                    .bind(5, added)
                    .bind(6, added * 0.8)
                    .bind(7, added * 1.2)
                    .run();
            }
        }
    }
    {
        store::Statement calibration(
            db, "INSERT INTO calibrations (name, student) VALUES ('noise sweep', 'arith-student')");
        calibration.run();
        ids.calibration = sqlite3_last_insert_rowid(db);
        store::Statement point(db,
            "INSERT INTO calibration_points (calibration_id, run_id, step, mismatch, quality, relative_change, ci_low, "
            "ci_high, failed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
        // (mismatch, relative change, failed) at step 120; one more point at step 40.
        const struct {
            std::int64_t run;
            int step;
            double mismatch;
            double change;
            bool failed;
        } points[] = {{ids.baselineRun, 120, 0.00021, 0.0, false}, {ids.fp8Run, 120, 0.012, 0.02, false},
            {ids.noisyRun, 120, 0.06, 0.09, false}, {ids.noisyRun, 80, 0.06, 0.05, false}};
        for (const auto& p : points) {
            point.reset();
            point.bind(1, ids.calibration)
                .bind(2, p.run)
                .bind(3, p.step)
                .bind(4, p.mismatch)
                .bind(5, 0.06 * (1 + p.change))
                .bind(6, p.change)
                .bind(7, p.change * 0.05)
                .bind(8, p.change * 0.07)
                .bind(9, p.failed ? 1 : 0)
                .run();
        }
        // Failing points: runs of their own (created before the transaction).
        for (const auto& [run, mismatch, change] :
            {std::tuple {failing[0], 0.15, 0.27}, std::tuple {failing[1], 0.24, 0.41}}) {
            point.reset();
            point.bind(1, ids.calibration)
                .bind(2, run)
                .bind(3, 120)
                .bind(4, mismatch)
                .bind(5, 0.06 * (1 + change))
                .bind(6, change)
                .bind(7, change * 0.05)
                .bind(8, change * 0.07)
                .bind(9, 1)
                .run();
        }
        store::Statement bracket(db,
            "INSERT INTO calibration_brackets (calibration_id, step, largest_passing, smallest_failing, threshold) "
            "VALUES (?, ?, ?, ?, ?)");
        bracket.bind(1, ids.calibration).bind(2, 120).bind(3, 0.06).bind(4, 0.15).bind(5, 0.06).run();
    }
    {
        store::Statement decision(db,
            "INSERT INTO admission_decisions (calibration_id, candidate_json, checkpoint, mismatch, ci_low, ci_high, "
            "threshold, decision, seconds, tool_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '0.1.0')");
        const struct {
            const char* name;
            const char* checkpoint;
            double mismatch, low, high;
            const char* decision;
        } decisions[] = {{"fp8-kv", "step-100", 0.011, 0.009, 0.013, "admit"},
            {"fp8-keep-edges", "step-100", 0.024, 0.019, 0.031, "admit"},
            {"fp8-w8a8-block", "step-100", 0.052, 0.041, 0.067, "borderline"},
            {"int4-weights", "step-100", 0.19, 0.16, 0.22, "reject"},
            {"fp8-w8a8-block", "step-200", 0.071, 0.064, 0.079, "reject"}};
        for (const auto& d : decisions) {
            decision.reset();
            decision.bind(1, ids.calibration)
                .bind(2, std::string("{\"name\": \"") + d.name + "\"}")
                .bind(3, d.checkpoint)
                .bind(4, d.mismatch)
                .bind(5, d.low)
                .bind(6, d.high)
                .bind(7, 0.06)
                .bind(8, d.decision)
                .bind(9, 95.0)
                .run();
        }
    }
    transaction.commit();
    return ids;
}

} // namespace fixture

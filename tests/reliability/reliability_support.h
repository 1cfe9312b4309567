#pragma once
// What the reliability tests share: tiny models and run files for the four resumable jobs, the `mismatch`
// binary in a child process, and exact dumps of a workspace database.
#include "core/model/transformer.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"
#include "core/train/zoo.h"

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace reliability {

namespace fs = std::filesystem;
using namespace mismatch;

inline const QString kBinary = QStringLiteral(MISMATCH_BINARY_DIR "/app/mismatch");
inline const std::string kResources = MISMATCH_SOURCE_DIR "/resources";

// The inputs of the four jobs, written once per test executable.
struct Inputs {
    QTemporaryDir dir;
    std::string student; // tiny random student
    std::string student2; // two more checkpoints of the same architecture (admission)
    std::string student3;
    std::string teacher;
    std::string trainRun; // run file of the training job
    std::string calibrationBase; // run file the calibration sweeps
    std::string candidates; // admission candidates (one with a recipe)
    std::string recipe;
    std::string probe;

    Inputs()
    {
        const fs::path root(dir.path().toStdString());
        student = (root / "student").string();
        student2 = (root / "student-2").string();
        student3 = (root / "student-3").string();
        teacher = (root / "teacher").string();
        const model::ModelConfig small = train::demoModelConfig(32, 2, 2, 1, 64);
        train::writeDemoModelDirectory(student, small, model::randomWeights(small, 11, 0.05));
        train::writeDemoModelDirectory(student2, small, model::randomWeights(small, 13, 0.05));
        train::writeDemoModelDirectory(student3, small, model::randomWeights(small, 14, 0.05));
        const model::ModelConfig larger = train::demoModelConfig(48, 2, 4, 2, 96);
        train::writeDemoModelDirectory(teacher, larger, model::randomWeights(larger, 12, 0.3));
        const std::string common = "student: " + student + "\nteacher: " + teacher + "\nprompts: " + kResources
            + "/prompts/arith-train.jsonl\noptimizer: {learning_rate: 3.0e-3, warmup_steps: 1}\n"
            + "batch: {prompts_per_step: 4}\nseed: 5\nrollout:\n  sampling: {temperature: 1.0, max_tokens: 6, seed: 3}\n";
        const std::string evaluation = "evaluation: {every: EVERY, prompts: " + kResources
            + "/prompts/arith-heldout.jsonl, count: 6, max_tokens: 6, bf16_unit_every: 2}\n";
        auto evaluationEvery = [&evaluation](int every) {
            std::string text = evaluation;
            text.replace(text.find("EVERY"), 5, std::to_string(every));
            return text;
        };
        trainRun = write("train.yaml",
            "name: killed-train\n" + common + "steps: 16\n" + evaluationEvery(4) + "checkpoint: {every: 3}\n");
        calibrationBase = write("calibration-base.yaml",
            "name: killed-calibration\n" + common + "steps: 6\n" + evaluationEvery(2) + "checkpoint: {every: 2}\n");
        recipe = write("kv8.yaml", "version: 1\nkv_cache: {format: fp8_e4m3, scales: per_head}\n");
        candidates = write("candidates.yaml",
            "- name: plain\n- name: noisy\n  noise: 0.05\n  noise_seed: 3\n- name: kv8\n  recipe: " + recipe + "\n");
        probe = kResources + "/prompts/arith-probe.jsonl";
    }

    std::string write(const std::string& name, const std::string& text) const
    {
        const std::string path = (fs::path(dir.path().toStdString()) / name).string();
        std::ofstream(path) << text;
        return path;
    }

    // The job's arguments after `mismatch --workspace WS --threads 1`.
    QStringList sensitivity() const
    {
        return {"sensitivity", q(student), "--format", "int8", "--prompts", q(probe), "--count", "4", "--max-tokens",
            "6", "--resamples", "200"};
    }
    QStringList admission() const
    {
        return {"admit", q(student), q(student2), q(student3), "--candidates", q(candidates), "--prompts", q(probe), "--count",
            "4", "--max-tokens", "6", "--resamples", "200", "--threshold", "0.05"};
    }
    QStringList calibration() const
    {
        return {"calibrate", q(calibrationBase), "--noise", "0.5", "--steps", "2,6", "--resamples", "500"};
    }
    QStringList training() const { return {"train", q(trainRun), "--quiet"}; }

    static QString q(const std::string& text) { return QString::fromStdString(text); }
};

struct CliResult {
    int code = -1;
    QProcess::ExitStatus status = QProcess::NormalExit;
    std::string out;
    std::string err;
};

// Runs `mismatch --workspace WS --threads 1 ARGS` to the end; `modifier` runs in the child before exec.
inline CliResult runCli(const QString& workspace, const QStringList& arguments,
    const std::function<void()>& modifier = {}, const QProcessEnvironment& environment = QProcessEnvironment::systemEnvironment(),
    int timeoutMs = 300000)
{
    QProcess process;
    if (modifier) {
        process.setChildProcessModifier(modifier);
    }
    process.setProcessEnvironment(environment);
    process.start(kBinary, QStringList {"--workspace", workspace, "--threads", "1"} + arguments);
    CliResult result;
    if (!process.waitForFinished(timeoutMs)) {
        process.kill();
        process.waitForFinished();
        result.err = "timed out";
        return result;
    }
    result.code = process.exitCode();
    result.status = process.exitStatus();
    result.out = process.readAllStandardOutput().toStdString();
    result.err = process.readAllStandardError().toStdString();
    return result;
}

// One column value as exact text: integers in decimal, reals with 17 significant digits (round trip), text
// as is, NULL as "NULL".
inline std::string columnText(sqlite3_stmt* statement, int column)
{
    switch (sqlite3_column_type(statement, column)) {
    case SQLITE_NULL:
        return "NULL";
    case SQLITE_INTEGER:
        return std::to_string(sqlite3_column_int64(statement, column));
    case SQLITE_FLOAT: {
        char text[40];
        std::snprintf(text, sizeof text, "%.17g", sqlite3_column_double(statement, column));
        return text;
    }
    default: {
        const auto* bytes = reinterpret_cast<const char*>(sqlite3_column_text(statement, column));
        return bytes ? std::string(bytes, static_cast<std::size_t>(sqlite3_column_bytes(statement, column))) : "";
    }
    }
}

using Rows = std::vector<std::vector<std::string>>;

inline Rows query(const store::RunStore& store, const std::string& sql)
{
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(store.handle(), sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
        qWarning("cannot prepare %s: %s", sql.c_str(), sqlite3_errmsg(store.handle()));
        return {};
    }
    Rows rows;
    while (sqlite3_step(statement) == SQLITE_ROW) {
        std::vector<std::string> row;
        for (int c = 0; c < sqlite3_column_count(statement); ++c) {
            row.push_back(columnText(statement, c));
        }
        rows.push_back(std::move(row));
    }
    sqlite3_finalize(statement);
    return rows;
}

// Every table, every column, in rowid order: what a failed command must leave exactly as it was.
inline Rows dumpAll(const std::string& database)
{
    const store::RunStore store = store::RunStore::open(database, store::OpenMode::ReadOnly);
    Rows all;
    for (const auto& table :
        query(store, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")) {
        all.push_back({"table " + table[0]});
        const Rows rows = query(store, "SELECT * FROM \"" + table[0] + "\" ORDER BY rowid");
        all.insert(all.end(), rows.begin(), rows.end());
    }
    all.push_back({"user_version", query(store, "PRAGMA user_version").at(0).at(0)});
    return all;
}

inline std::string integrity(const std::string& database)
{
    const store::RunStore store = store::RunStore::open(database, store::OpenMode::ReadOnly);
    const Rows rows = query(store, "PRAGMA integrity_check");
    return rows.size() == 1 ? rows[0][0] : "several problems (" + std::to_string(rows.size()) + " rows)";
}

// A JSON text without the named keys (at any depth): wall-clock fields of otherwise deterministic JSON columns.
inline std::string withoutKeys(const std::string& text, const std::set<std::string>& keys)
{
    nlohmann::json value = nlohmann::json::parse(text);
    std::function<void(nlohmann::json&)> strip = [&](nlohmann::json& node) {
        if (node.is_object()) {
            for (const auto& key : keys) {
                node.erase(key);
            }
            for (auto& [key, child] : node.items()) {
                strip(child);
            }
        } else if (node.is_array()) {
            for (auto& child : node) {
                strip(child);
            }
        }
    };
    strip(value);
    return value.dump();
}

// The deterministic content of a workspace: every result table without its wall-clock fields (listed in
// test_fault_injection.cpp) and without the row ids of steps and evaluations (stored again after a resume).
inline std::map<std::string, Rows> results(const std::string& database)
{
    const store::RunStore store = store::RunStore::open(database, store::OpenMode::ReadOnly);
    std::map<std::string, Rows> tables;
    tables["runs"] = query(store, "SELECT id, name, kind, status, config_json, model_id, error, tool_version FROM runs ORDER BY id");
    tables["models"] = query(store, "SELECT id, name, path, architecture, parameter_count, config_json FROM models ORDER BY id");
    tables["step_metrics"] = query(store,
        "SELECT run_id, step, mismatch_kl, k1, k3, bf16_multiple, loss, reward, accuracy, entropy, staleness, "
        "extras_json FROM step_metrics ORDER BY run_id, step");
    for (auto& row : tables["step_metrics"]) {
        row.back() = withoutKeys(row.back(), {"rollout_seconds", "teacher_seconds", "train_seconds", "bf16_unit_seconds"});
    }
    tables["evaluations"] = query(store,
        "SELECT run_id, step, prompt_set_id, quality, accuracy FROM evaluations ORDER BY run_id, step");
    tables["evaluation_problems"] = query(store,
        "SELECT e.run_id, e.step, p.problem_index, p.problem_id, p.quality, p.correct FROM evaluation_problems p "
        "JOIN evaluations e ON e.id = p.evaluation_id ORDER BY e.run_id, e.step, p.problem_index");
    tables["sensitivity_scans"] = query(store,
        "SELECT id, run_id, model_id, format, bf16_unit, config_json FROM sensitivity_scans ORDER BY id");
    tables["sensitivity_cells"] = query(store,
        "SELECT scan_id, layer, module_group, mismatch, added_mismatch, ci_low, ci_high, mismatch_ci_low, "
        "mismatch_ci_high, tokens FROM sensitivity_cells ORDER BY scan_id, layer, module_group");
    tables["calibrations"] = query(store, "SELECT id, run_id, name, student, config_json FROM calibrations ORDER BY id");
    for (auto& row : tables["calibrations"]) {
        row.back() = withoutKeys(row.back(), {"wall_seconds"});
    }
    tables["calibration_points"] = query(store, "SELECT * FROM calibration_points ORDER BY calibration_id, run_id, step");
    tables["calibration_brackets"] = query(store, "SELECT * FROM calibration_brackets ORDER BY calibration_id, step");
    tables["admission_decisions"] = query(store,
        "SELECT id, run_id, calibration_id, candidate_json, checkpoint, mismatch, ci_low, ci_high, threshold, decision, "
        "tool_version FROM admission_decisions ORDER BY id");
    return tables;
}

} // namespace reliability

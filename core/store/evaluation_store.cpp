#include "core/store/evaluation_store.h"

#include "core/common/error.h"
#include "core/store/sqlite_util.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

namespace mismatch::store {

std::int64_t addEvaluation(RunStore& store, std::int64_t runId, std::int64_t step,
    std::optional<std::int64_t> promptSetId, const std::vector<ProblemQuality>& problems)
{
    const std::string what = "evaluation of run " + std::to_string(runId) + " at step " + std::to_string(step);
    if (problems.empty()) {
        throw StoreError(store.path(), what + " has no problems");
    }
    std::unordered_map<std::string, std::size_t> seen;
    double qualitySum = 0.0;
    std::int64_t correctCount = 0;
    for (std::size_t i = 0; i < problems.size(); ++i) {
        const ProblemQuality& problem = problems[i];
        if (problem.problemId.empty()) {
            throw StoreError(store.path(), what + ": problem " + std::to_string(i) + " has an empty id");
        }
        if (!seen.emplace(problem.problemId, i).second) {
            throw StoreError(store.path(),
                what + ": problem id '" + problem.problemId + "' is given twice (problems "
                    + std::to_string(seen[problem.problemId]) + " and " + std::to_string(i) + ")");
        }
        if (!std::isfinite(problem.quality)) {
            throw StoreError(
                store.path(), what + ": problem '" + problem.problemId + "' has a quality that is not finite");
        }
        qualitySum += problem.quality;
        correctCount += problem.correct ? 1 : 0;
    }
    const double count = static_cast<double>(problems.size());

    sqlite3* db = store.handle();
    Transaction transaction(db);
    {
        Statement run(db, "SELECT 1 FROM runs WHERE id = ?");
        run.bind(1, runId);
        if (!run.step()) {
            throw StoreError(store.path(), what + ": there is no run " + std::to_string(runId));
        }
        Statement existing(db, "SELECT id FROM evaluations WHERE run_id = ? AND step = ?");
        existing.bind(1, runId).bind(2, step);
        if (existing.step()) {
            throw StoreError(store.path(),
                what + " is already stored (evaluation " + std::to_string(existing.int64(0))
                    + "); nothing was written");
        }
    }
    Statement insert(
        db, "INSERT INTO evaluations (run_id, step, prompt_set_id, quality, accuracy) VALUES (?, ?, ?, ?, ?)");
    insert.bind(1, runId).bind(2, step).bind(3, promptSetId);
    insert.bind(4, qualitySum / count).bind(5, static_cast<double>(correctCount) / count);
    insert.run();
    const std::int64_t evaluationId = sqlite3_last_insert_rowid(db);
    Statement problem(db,
        "INSERT INTO evaluation_problems (evaluation_id, problem_index, problem_id, quality, correct) VALUES (?, ?, ?, "
        "?, ?)");
    for (std::size_t i = 0; i < problems.size(); ++i) {
        problem.reset();
        problem.bind(1, evaluationId).bind(2, static_cast<std::int64_t>(i)).bind(3, problems[i].problemId);
        problem.bind(4, problems[i].quality).bind(5, problems[i].correct ? 1 : 0);
        problem.run();
    }
    transaction.commit();
    return evaluationId;
}

namespace {

const char* kSummaryColumns
    = "SELECT e.id, e.run_id, e.step, e.prompt_set_id, e.quality, e.accuracy, e.created_at, "
      "(SELECT count(*) FROM evaluation_problems p WHERE p.evaluation_id = e.id) FROM evaluations e ";

EvaluationSummary readSummary(const Statement& row)
{
    EvaluationSummary summary;
    summary.id = row.int64(0);
    summary.runId = row.int64(1);
    summary.step = row.int64(2);
    summary.promptSetId = row.optionalInt64(3);
    summary.quality = row.isNull(4) ? 0.0 : row.real(4);
    summary.accuracy = row.isNull(5) ? 0.0 : row.real(5);
    summary.createdAt = row.text(6);
    summary.problemCount = row.int64(7);
    return summary;
}

} // namespace

std::vector<EvaluationSummary> evaluations(const RunStore& store, std::int64_t runId)
{
    Statement query(store.handle(), (std::string(kSummaryColumns) + "WHERE e.run_id = ? ORDER BY e.step").c_str());
    query.bind(1, runId);
    std::vector<EvaluationSummary> result;
    while (query.step()) {
        result.push_back(readSummary(query));
    }
    return result;
}

std::optional<Evaluation> evaluationAt(const RunStore& store, std::int64_t runId, std::int64_t step)
{
    Statement query(store.handle(), (std::string(kSummaryColumns) + "WHERE e.run_id = ? AND e.step = ?").c_str());
    query.bind(1, runId).bind(2, step);
    if (!query.step()) {
        return std::nullopt;
    }
    Evaluation evaluation;
    evaluation.summary = readSummary(query);
    Statement problems(store.handle(),
        "SELECT problem_id, quality, correct FROM evaluation_problems WHERE evaluation_id = ? ORDER BY problem_index");
    problems.bind(1, evaluation.summary.id);
    while (problems.step()) {
        evaluation.problems.push_back({problems.text(0), problems.real(1), problems.int64(2) != 0});
    }
    return evaluation;
}

std::vector<double> qualitiesInOrderOf(const Evaluation& evaluation, const Evaluation& order)
{
    std::unordered_map<std::string, double> byId;
    for (const auto& problem : evaluation.problems) {
        byId.emplace(problem.problemId, problem.quality);
    }
    std::vector<double> values;
    values.reserve(order.problems.size());
    std::vector<std::string> onlyInOrder;
    std::unordered_set<std::string> inOrder;
    for (const auto& problem : order.problems) {
        inOrder.insert(problem.problemId);
        const auto found = byId.find(problem.problemId);
        if (found == byId.end()) {
            onlyInOrder.push_back(problem.problemId);
        } else {
            values.push_back(found->second);
        }
    }
    std::vector<std::string> onlyInEvaluation;
    for (const auto& problem : evaluation.problems) {
        if (!inOrder.count(problem.problemId)) {
            onlyInEvaluation.push_back(problem.problemId);
        }
    }
    if (onlyInOrder.empty() && onlyInEvaluation.empty()) {
        return values;
    }
    const auto run = [](const Evaluation& e) {
        return "run " + std::to_string(e.summary.runId) + " (step " + std::to_string(e.summary.step) + ")";
    };
    const auto missing = [](const std::vector<std::string>& ids, const std::string& of, const std::string& from) {
        return std::to_string(ids.size()) + " of " + of + "'s problems are missing from " + from + "'s (e.g. '"
            + ids.front() + "')";
    };
    std::string detail = "the evaluations of " + run(evaluation) + " and " + run(order)
        + " cover different problems, so they cannot be paired:";
    if (!onlyInEvaluation.empty()) {
        detail += " " + missing(onlyInEvaluation, run(evaluation), run(order));
    }
    if (!onlyInOrder.empty()) {
        detail += std::string(onlyInEvaluation.empty() ? "" : ";") + " " + missing(onlyInOrder, run(order), run(evaluation));
    }
    throw Error(detail + "; evaluate both runs on the same prompt set");
}

} // namespace mismatch::store

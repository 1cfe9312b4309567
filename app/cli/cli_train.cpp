// mismatch train RUN.yaml | --resume RUN: a training run (core/train/trainer.h) with a progress bar on stderr;
// mismatch runs show RUN: a run's configuration, per-step metrics and evaluations.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/analysis/result_json.h"
#include "core/common/error.h"
#include "core/jobs/training_jobs.h"
#include "core/store/evaluation_store.h"
#include "core/store/find_run.h"
#include "core/train/run_config.h"
#include "core/train/trainer.h"

#include <ostream>

namespace mismatch::cli {

namespace {

nlohmann::json optionalJson(const std::optional<double>& value)
{
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json stepJson(const store::StepMetrics& m)
{
    nlohmann::json j = {{"step", m.step}, {"mismatch_kl", optionalJson(m.mismatchKl)}, {"k1", optionalJson(m.k1)},
        {"k3", optionalJson(m.k3)}, {"bf16_multiple", optionalJson(m.bf16Multiple)}, {"loss", optionalJson(m.loss)},
        {"reward", optionalJson(m.reward)}, {"accuracy", optionalJson(m.accuracy)},
        {"entropy", optionalJson(m.entropy)},
        {"staleness", m.staleness ? nlohmann::json(*m.staleness) : nlohmann::json(nullptr)},
        {"rollout_tokens_per_s", optionalJson(m.rolloutTokensPerSecond)},
        {"train_tokens_per_s", optionalJson(m.trainTokensPerSecond)},
        {"wall_time_s", optionalJson(m.wallTimeSeconds)}};
    j["extras"] = nlohmann::json::parse(m.extrasJson.empty() ? "{}" : m.extrasJson);
    return j;
}

std::string cell(const std::optional<double>& value, int precision = 4)
{
    return value ? formatNumber(*value, precision) : "-";
}

struct TrainArguments {
    std::string runFile; // empty with resume
    std::string resume;
    std::int64_t stopAfter = 0;
    bool quiet = false;
};

void train(const Context& context, const TrainArguments& a)
{
    store::RunStore store = context.openStore(store::OpenMode::CreateOrOpen);
    // Ctrl-C cancels the job (the bar's SIGINT hook): the run is stored as cancelled and stays resumable.
    TerminalProgress bar(*context.err, !a.quiet);
    train::TrainOptions options;
    options.workspaceDirectory = context.workspaceDirectory();
    options.stopAfterSteps = a.stopAfter;
    std::string lastEvaluation;
    options.onEvaluation = [&bar, &lastEvaluation](const store::EvaluationSummary& e) {
        lastEvaluation = "Q " + formatNumber(e.quality, 4) + " @" + std::to_string(e.step);
        bar.setDetail(lastEvaluation);
    };
    train::TrainResult result;
    if (!a.resume.empty()) {
        const std::int64_t runId = store::findRun(store, a.resume).id;
        result = train::resumeTraining(runId, store, bar.progress(), options);
    } else {
        const train::RunConfig config = train::loadRunConfig(a.runFile);
        // The run keeps the catalogue's train job it is (`mismatch run --resume RUN` continues it).
        jobs::expectJobRun(store, jobs::JobSpec("train").set("run_file", a.runFile).set("stop_after", a.stopAfter));
        result = train::runTraining(config, store, bar.progress(), options);
    }
    bar.finish();
    const auto info = store.run(result.runId);
    const std::string status = info ? store::toString(info->status) : "unknown";
    if (context.json) {
        context.printJson(analysis::toJson(result, info, context.workspaceDirectory()));
        return;
    }
    std::vector<std::vector<std::string>> rows = {{"run", std::to_string(result.runId) + " (" + (info ? info->name : "") + ")"},
        {"status", status}, {"steps stored", std::to_string(result.stepsStored)},
        {"resumed from step", std::to_string(result.resumedFromStep)},
        {"final quality Q (nats/token)", cell(result.finalQuality)},
        {"final accuracy", result.finalAccuracy ? formatNumber(100.0 * *result.finalAccuracy, 4) + "%" : "-"},
        {"wall time", formatDuration(result.wallSeconds)},
        {"last checkpoint", result.lastCheckpoint.empty() ? "-" : result.lastCheckpoint}};
    *context.out << formatTable({"", ""}, rows);
    if (status == "running") {
        *context.out << "The run stopped early (--stop-after) and can be continued with `mismatch train --resume "
                     << result.runId << "`.\n";
    }
}

void showRun(const Context& context, const std::string& runText, bool problems, std::int64_t lastSteps)
{
    const store::RunStore store = context.openStore(store::OpenMode::ReadOnly);
    const std::int64_t runId = store::findRun(store, runText).id;
    const store::RunInfo run = *store.run(runId);
    const std::vector<store::StepMetrics> steps = store.stepsAfter(runId, 0);
    const std::vector<store::EvaluationSummary> evaluations = store::evaluations(store, runId);
    // Runs begun before schema 10 record none.
    const nlohmann::json provenance
        = run.provenanceJson.empty() ? nlohmann::json::array() : nlohmann::json::parse(run.provenanceJson);
    if (context.json) {
        nlohmann::json stepList = nlohmann::json::array();
        for (const auto& m : steps) {
            stepList.push_back(stepJson(m));
        }
        nlohmann::json evaluationList = nlohmann::json::array();
        for (const auto& e : evaluations) {
            nlohmann::json entry = {{"step", e.step}, {"quality", e.quality}, {"accuracy", e.accuracy},
                {"problems", e.problemCount}, {"created_at", e.createdAt}};
            if (problems) {
                nlohmann::json list = nlohmann::json::array();
                if (const auto full = store::evaluationAt(store, runId, e.step)) {
                    for (const auto& p : full->problems) {
                        list.push_back({{"id", p.problemId}, {"quality", p.quality}, {"correct", p.correct}});
                    }
                }
                entry["problem_values"] = list;
            }
            evaluationList.push_back(entry);
        }
        nlohmann::json config = nlohmann::json::object();
        try {
            config = nlohmann::json::parse(run.configJson);
        } catch (const nlohmann::json::exception&) {
            config = run.configJson;
        }
        context.printJson({{"run_id", run.id}, {"name", run.name}, {"kind", run.kind},
            {"status", store::toString(run.status)}, {"started_at", run.startedAt}, {"finished_at", run.finishedAt},
            {"error", run.error}, {"tool_version", run.toolVersion}, {"provenance", provenance},
            {"command", jobs::storedCommand(store, runId)}, {"config", config}, {"steps", stepList},
            {"evaluations", evaluationList}});
        return;
    }
    *context.out << "run " << run.id << " (" << run.name << "), " << run.kind << ", " << store::toString(run.status)
                 << ", started " << run.startedAt << (run.finishedAt.empty() ? "" : ", finished " + run.finishedAt)
                 << "\n";
    for (const auto& record : provenance) {
        const nlohmann::json& path = record.at("compute_path");
        *context.out << record.at("event").get<std::string>() << " " << record.at("utc").get<std::string>()
                     << " by Mismatch Lab " << record.at("tool_version").get<std::string>() << " (commit "
                     << record.at("commit").get<std::string>() << ") on " << path.at("key").get<std::string>() << " ("
                     << path.at("cpu").get<std::string>() << ")\n";
    }
    const nlohmann::json command = jobs::storedCommand(store, runId);
    if (command.is_string()) {
        *context.out << "re-made by: " << command.get<std::string>() << "\n";
    }
    if (!run.error.empty()) {
        *context.out << "error: " << run.error << "\n";
    }
    std::vector<std::vector<std::string>> rows;
    const std::size_t from = lastSteps > 0 && steps.size() > static_cast<std::size_t>(lastSteps)
        ? steps.size() - static_cast<std::size_t>(lastSteps)
        : 0;
    for (std::size_t i = from; i < steps.size(); ++i) {
        const auto& m = steps[i];
        // The unit a multiple divides by: measured at this step, or at the step named (the latest before it).
        const nlohmann::json extras = nlohmann::json::parse(m.extrasJson.empty() ? "{}" : m.extrasJson);
        std::string unitStep = "-";
        if (extras.value("bf16_unit_measured", false)) {
            unitStep = "this step";
        } else if (extras.contains("bf16_unit_step")) {
            unitStep = "step " + std::to_string(extras.at("bf16_unit_step").get<std::int64_t>());
        }
        rows.push_back({std::to_string(m.step), cell(m.mismatchKl), cell(m.k1), cell(m.k3), cell(m.bf16Multiple, 3),
            unitStep, cell(m.loss), cell(m.accuracy, 3), m.staleness ? std::to_string(*m.staleness) : "-",
            m.wallTimeSeconds ? formatDuration(*m.wallTimeSeconds) : "-"});
    }
    *context.out << "\nsteps (" << steps.size() << (from > 0 ? ", the last " + std::to_string(steps.size() - from) : "")
                 << "; mismatch in nats/token; x BF16 = over the plain BF16 engine's mismatch at the trainer's weights "
                    "of the step in `unit of`):\n"
                 << formatTable({"step", "KL(mu||pi)", "k1", "k3", "x BF16", "unit of", "loss", "accuracy",
                                    "staleness", "wall"},
                        rows);
    rows.clear();
    for (const auto& e : evaluations) {
        rows.push_back({std::to_string(e.step), formatNumber(e.quality, 5), formatNumber(100.0 * e.accuracy, 4) + "%",
            std::to_string(e.problemCount)});
    }
    *context.out << "\nevaluations (quality Q = mean_i q_i, nats/token, lower is better):\n"
                 << (rows.empty() ? "none\n" : formatTable({"step", "Q", "accuracy", "problems"}, rows));
}

void registerTrainCommands(CLI::App& app, Context& context)
{
    CLI::App* trainCommand = app.add_subcommand("train",
        "Train a student with a run file (OPD, REINFORCE or GRPO with the rollout engine in the loop); every "
        "step's mismatch, loss and timing and every evaluation go to the workspace as the run goes. The run is named "
        "by the file's `name` (letters, digits, '.', '_', '-'), which no training run of the workspace may have "
        "already: continue a stopped run with --resume");
    // RUN_FILE and --stop-after are the catalogue job's parameters (core/jobs/training_jobs.h).
    auto job = std::make_shared<JobOptions>(trainCommand, *jobs::findJob("train"));
    auto resume = std::make_shared<std::string>();
    auto quiet = std::make_shared<bool>(false);
    CLI::Option* resumeOption = trainCommand
                                    ->add_option("--resume", *resume,
                                        "Continue run RUN (id, or a name that names one run) from its newest "
                                        "checkpoint instead of starting a run file")
                                    ->type_name("RUN");
    job->option("run_file")->excludes(resumeOption);
    trainCommand->add_flag("--quiet", *quiet, "No progress bar");
    trainCommand->callback([&context, job, resume, resumeOption, quiet] {
        TrainArguments a;
        a.quiet = *quiet;
        if (resumeOption->count() > 0) {
            a.resume = *resume;
            // --stop-after applies to a resumed run too: read on its own (the spec needs a run file).
            if (CLI::Option* stop = job->option("stop_after"); stop->count() > 0) {
                a.stopAfter = stop->as<std::int64_t>();
                if (a.stopAfter < 0) {
                    throw CLI::ValidationError("--stop-after", "must be >= 0, got " + std::to_string(a.stopAfter));
                }
            }
        } else {
            if (job->option("run_file")->count() == 0) {
                throw CLI::RequiredError("RUN_FILE or --resume");
            }
            const jobs::JobSpec spec = job->checkedSpec();
            a.runFile = spec.text("run_file");
            a.stopAfter = spec.integer("stop_after");
        }
        train(context, a);
    });

    CLI::App* runs = app.add_subcommand("runs", "Inspect the workspace's runs");
    runs->require_subcommand(1);
    auto runText = std::make_shared<std::string>();
    auto problems = std::make_shared<bool>(false);
    auto last = std::make_shared<std::int64_t>(20);
    CLI::App* show = runs->add_subcommand("show",
        "A run's configuration, per-step metrics and evaluations (--json: every step and every evaluation)");
    show->add_option("RUN", *runText, "Run id or name (a name must name one run)")->required();
    show->add_flag("--problems", *problems, "With --json: each evaluation's per-problem q_i and correctness");
    show->add_option("--last", *last, "Text output: show only the last N steps (0: all)")
        ->check(atLeast(0))
        ->type_name("N");
    show->callback([&context, runText, problems, last] { showRun(context, *runText, *problems, *last); });
}

const CommandRegistration registration(80, registerTrainCommands);

} // namespace

} // namespace mismatch::cli
